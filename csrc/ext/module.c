/*
 * ompt_py._core: the CPython binding of libomptpy.so.  It only moves bytes
 * and JSON; names, dtypes and errors for users are made in Python.
 * Records cross as one buffer per take(), without a copy: numpy wraps the
 * tool's mapping, which is unmapped when the last view of it goes away.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "omptpy.h"
#include "tool/omptpy_api.h"
#include "tool/omptpy_frames.h"

typedef struct {
  PyObject_HEAD
  void *base;
  size_t nrecs;
  size_t mapped;
} RecordsObject;

static int records_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  RecordsObject *r = (RecordsObject *)self;
  static char empty[1];
  void *p = r->base ? r->base : empty;
  return PyBuffer_FillInfo(view, self, p, (Py_ssize_t)(r->nrecs * sizeof(omptpy_record)), 0,
                           flags);
}

static void records_dealloc(PyObject *self) {
  RecordsObject *r = (RecordsObject *)self;
  if (r->base) omptpy_release(r->base, r->mapped);
  Py_TYPE(self)->tp_free(self);
}

static Py_ssize_t records_len(PyObject *self) { return (Py_ssize_t)((RecordsObject *)self)->nrecs; }

static PyBufferProcs records_as_buffer = {records_getbuffer, NULL};
static PySequenceMethods records_as_sequence = {.sq_length = records_len};

static PyTypeObject RecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ompt_py._core.Records",
    .tp_basicsize = sizeof(RecordsObject),
    .tp_dealloc = records_dealloc,
    .tp_as_buffer = &records_as_buffer,
    .tp_as_sequence = &records_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Records taken from the tool's memory sink (a writable buffer of 64-byte records).",
};

static PyObject *json_result(char *s) {
  if (!s) return PyErr_NoMemory();
  PyObject *o = PyUnicode_FromString(s);
  free(s);
  return o;
}

static PyObject *py_init(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  if (omptpy_init() != 0) return PyUnicode_FromString(omptpy_config_error());
  Py_RETURN_NONE;
}

static PyObject *py_check_config(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  char error[512];
  if (omptpy_config_check(error, sizeof error) != 0) return PyUnicode_FromString(error);
  Py_RETURN_NONE;
}

static PyObject *py_set_recording(PyObject *m, PyObject *arg) {
  (void)m;
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  /* Without the GIL: opening the sink drains the buffers, which may wait for a
   * drainer that waits for the handlers' dispatcher (block=True). */
  Py_BEGIN_ALLOW_THREADS omptpy_set_recording(on);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *py_is_recording(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return PyBool_FromLong(omptpy_is_recording());
}

static PyObject *py_flush(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  Py_BEGIN_ALLOW_THREADS omptpy_flush_all();
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *py_take(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  RecordsObject *r = PyObject_New(RecordsObject, &RecordsType);
  if (!r) return NULL;
  /* Without the GIL: the zero-copy take() hands the last records to the
   * handlers' queue, which may wait for their dispatcher (block=True). */
  void *base;
  size_t nrecs, mapped;
  Py_BEGIN_ALLOW_THREADS base = omptpy_take(&nrecs, &mapped);
  Py_END_ALLOW_THREADS r->base = base;
  r->nrecs = nrecs;
  r->mapped = mapped;
  return (PyObject *)r;
}

static PyObject *py_meta(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return json_result(omptpy_meta());
}

static PyObject *py_stats(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  char *s;
  Py_BEGIN_ALLOW_THREADS s = omptpy_stats();
  Py_END_ALLOW_THREADS return json_result(s);
}

static PyObject *py_runtime_info(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return json_result(omptpy_runtime_info());
}

static PyObject *py_tool_path(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  const char *p = omptpy_tool_path();
  if (!p) {
    PyErr_SetString(PyExc_RuntimeError, "cannot find the path of libomptpy.so (dladdr failed)");
    return NULL;
  }
  return PyUnicode_DecodeFSDefault(p);
}

/* Faults in the whole pages of [p, p + len) in one call: fresh output pages
 * cost much less this way than one trap per page (on virtual machines). */
static void populate(void *p, Py_ssize_t len) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
  uintptr_t hi = ((uintptr_t)p + (uintptr_t)len) & ~(page - 1);
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

/* The writable buffer of `obj`, of at least `len` bytes, its pages faulted in
 * (see populate), held in bufs[*nbuf]; NULL with an exception if it cannot be. */
static char *output(PyObject *obj, Py_ssize_t len, Py_buffer *bufs, int *nbuf) {
  Py_buffer *b = &bufs[*nbuf];
  if (PyObject_GetBuffer(obj, b, PyBUF_WRITABLE) < 0) return NULL;
  ++*nbuf;
  if (b->len < len) {
    PyErr_SetString(PyExc_ValueError, "an output array is too short");
    return NULL;
  }
  populate(b->buf, len);
  return b->buf;
}

/* scan(records, times, counts): times[i] = the time of record i (8 bytes);
 * counts[e] += 1 (int64) for each record of event e, the last entry for
 * events beyond the array.  One pass: the sort key and which events a trace
 * has, for columns(). */
static PyObject *py_scan(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *records, *times, *counts;
  if (!PyArg_ParseTuple(args, "OOO", &records, &times, &counts)) return NULL;
  Py_buffer src, t, c;
  PyObject *result = NULL;
  if (PyObject_GetBuffer(records, &src, PyBUF_SIMPLE) < 0) return NULL;
  if (PyObject_GetBuffer(times, &t, PyBUF_WRITABLE) < 0) goto release_src;
  if (PyObject_GetBuffer(counts, &c, PyBUF_WRITABLE) < 0) goto release_t;
  Py_ssize_t n = src.len / (Py_ssize_t)sizeof(omptpy_record);
  Py_ssize_t ncount = c.len / (Py_ssize_t)sizeof(int64_t);
  if (t.len < n * (Py_ssize_t)sizeof(uint64_t) || ncount < 1) {
    PyErr_SetString(PyExc_ValueError, "scan: times too short or counts empty");
    goto done;
  }
  const omptpy_record *r = src.buf;
  uint64_t *time = t.buf;
  int64_t *count = c.buf;
  populate(time, n * (Py_ssize_t)sizeof *time);
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t i = 0; i < n; i++) {
    time[i] = r[i].time;
    count[r[i].event < ncount ? r[i].event : ncount - 1]++;
  }
  Py_END_ALLOW_THREADS
  result = Py_None;
  Py_INCREF(result);
done:
  PyBuffer_Release(&c);
release_t:
  PyBuffer_Release(&t);
release_src:
  PyBuffer_Release(&src);
  return result;
}

/* What indexes the table of a lookup of columns(). */
enum {
  KEY_EVENT,          /* the event number */
  KEY_ENDPOINT,       /* the endpoint byte */
  KEY_EVENT_KIND,     /* event << 8 | kind */
  KEY_EVENT_ENDPOINT, /* event << 8 | endpoint */
  KEYS
};

typedef struct {
  unsigned char *out;
  const unsigned char *table;
  Py_ssize_t len, offset, size; /* size 0: no field tested for 0 */
  int key;
} lookup;

/* Frame columns (see "Frames" in omptpy.h), in the order of columns()' frames. */
enum { FR_ENTER, FR_EXIT_FLAGS, FR_ENTER_FLAGS, FR_NO_EXIT, FR_NO_ENTER, FR_NO_ENTER_FLAGS, FR_N };

/* Field of `size` bytes at `in`, as an unsigned number. */
static inline uint64_t load_field(const char *in, Py_ssize_t size) {
  switch (size) {
    case 8: {
      uint64_t v;
      memcpy(&v, in, 8);
      return v;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, in, 4);
      return v;
    }
    case 2: {
      uint16_t v;
      memcpy(&v, in, 2);
      return v;
    }
    default: return (unsigned char)*in;
  }
}

enum { BLOCK = 512 }; /* records per block of columns() */

/* The field at `offset`, of `size` bytes, of m records into out. */
static void gather(char *out, const char *const *rec, Py_ssize_t m, Py_ssize_t offset,
                   Py_ssize_t size) {
  switch (size) {
    case 8:
      for (Py_ssize_t j = 0; j < m; j++) memcpy(out + 8 * j, rec[j] + offset, 8);
      break;
    case 4:
      for (Py_ssize_t j = 0; j < m; j++) memcpy(out + 4 * j, rec[j] + offset, 4);
      break;
    case 2:
      for (Py_ssize_t j = 0; j < m; j++) memcpy(out + 2 * j, rec[j] + offset, 2);
      break;
    default:
      for (Py_ssize_t j = 0; j < m; j++) out[j] = rec[j][offset];
      break;
  }
}

/* The task frames of one record: task_create carries the encountering task's
 * frame (exit frame in u64b, enter frame in parallel_id), a sample the
 * innermost task's (the exit frame, else the enter frame, in u64b; the enter
 * frame's distance below the exit frame in u32b, INT32_MIN when unknown).
 * Other events (and records of version 1, kind 0) have none: 0 and missing. */
static inline void decode_frames(const omptpy_record *rec, unsigned char *const fr[FR_N],
                                 Py_ssize_t i) {
  uint8_t bits = 0;
  uint64_t enter = 0;
  int enter_unknown = 0;
  if (rec->event == ompt_callback_task_create) {
    bits = rec->kind;
    enter = rec->parallel_id;
  } else if (rec->event == OMPTPY_EVENT_SAMPLE) {
    bits = rec->kind;
    int32_t below = (int32_t)rec->u32b;
    int has_exit = (bits & OMPTPY_FRAME_EXIT) != 0;
    enter = has_exit ? rec->u64b - (uint64_t)(int64_t)below : rec->u64b;
    enter_unknown = has_exit && below == INT32_MIN;
  }
  memcpy(fr[FR_ENTER] + i * 8, &enter, 8);
  fr[FR_EXIT_FLAGS][i] = omptpy_frame_flags_of3(bits >> 2 & 7);
  fr[FR_ENTER_FLAGS][i] = omptpy_frame_flags_of3(bits >> 5 & 7);
  fr[FR_NO_EXIT][i] = !(bits & OMPTPY_FRAME_EXIT);
  fr[FR_NO_ENTER_FLAGS][i] = !(bits & OMPTPY_FRAME_ENTER);
  fr[FR_NO_ENTER][i] = !(bits & OMPTPY_FRAME_ENTER) || enter_unknown;
}

/* columns(records, order, fields, lookups, frames): one pass over the records,
 * in `order` (an intp array, or None for storage order), that makes the
 * columns of Trace.to_pandas(); each record is read once instead of once per
 * column.
 *   fields: [(out, offset, size)]: out[i] = the field at `offset` (1, 2, 4 or
 *     8 bytes) of record order[i].
 *   lookups: [(out, table, key)] or [(out, table, key, offset, size)]: one
 *     byte per record (a category code, a mask), out[i] = table[key], the
 *     table's last byte for keys beyond it; key is one of KEY_* (the module's
 *     KEY_EVENT...).  With offset and size, out[i] is also 1 where that field
 *     is 0 (a mask of missing ids).
 *   frames: None, or the 6 columns of the task frames (FR_*): enter frame
 *     (8 bytes), exit and enter frame flags (ompt_frame_flag_t, 1 byte), and
 *     the masks of missing exit frames, enter frames and enter frame flags;
 *     the exit frames themselves are the u64b field. */
static PyObject *py_columns(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *records, *order, *fields, *lookups, *frames;
  if (!PyArg_ParseTuple(args, "OOO!O!O", &records, &order, &PyList_Type, &fields, &PyList_Type,
                        &lookups, &frames))
    return NULL;
  enum { MAX_FIELDS = 16, MAX_LOOKUPS = 64, MAX_BUFFERS = 2 + MAX_FIELDS + 2 * MAX_LOOKUPS + FR_N };
  Py_ssize_t nfield = PyList_GET_SIZE(fields), nlook = PyList_GET_SIZE(lookups);
  if (nfield > MAX_FIELDS || nlook > MAX_LOOKUPS) {
    PyErr_SetString(PyExc_ValueError, "columns: too many columns");
    return NULL;
  }
  if (frames != Py_None && (!PyTuple_Check(frames) || PyTuple_GET_SIZE(frames) != FR_N)) {
    PyErr_Format(PyExc_ValueError, "columns: frames must be None or a tuple of %d", (int)FR_N);
    return NULL;
  }
  Py_buffer buf[MAX_BUFFERS];
  int nbuf = 0;
  PyObject *result = NULL;
  Py_ssize_t offset[MAX_FIELDS], size[MAX_FIELDS];
  char *field_out[MAX_FIELDS];
  lookup look[MAX_LOOKUPS];
  unsigned char *fr[FR_N] = {0};
  const Py_ssize_t *idx = NULL;
  if (PyObject_GetBuffer(records, &buf[nbuf], PyBUF_SIMPLE) < 0) return NULL;
  const char *src = buf[nbuf++].buf;
  Py_ssize_t nrec = buf[0].len / (Py_ssize_t)sizeof(omptpy_record), n = nrec;
  if (order != Py_None) {
    if (PyObject_GetBuffer(order, &buf[nbuf], PyBUF_SIMPLE) < 0) goto done;
    idx = buf[nbuf].buf;
    n = buf[nbuf++].len / (Py_ssize_t)sizeof(Py_ssize_t);
  }
  for (Py_ssize_t c = 0; c < nfield; c++) {
    PyObject *out;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(fields, c), "Onn", &out, &offset[c], &size[c]))
      goto done;
    if (offset[c] < 0 || offset[c] + size[c] > (Py_ssize_t)sizeof(omptpy_record) ||
        (size[c] != 1 && size[c] != 2 && size[c] != 4 && size[c] != 8)) {
      PyErr_SetString(PyExc_ValueError, "columns: a field does not fit the records");
      goto done;
    }
    if (!(field_out[c] = output(out, n * size[c], buf, &nbuf))) goto done;
  }
  for (Py_ssize_t k = 0; k < nlook; k++) {
    PyObject *out, *table;
    lookup *l = &look[k];
    l->offset = l->size = 0;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(lookups, k), "OOi|nn", &out, &table, &l->key,
                          &l->offset, &l->size))
      goto done;
    if (l->key < 0 || l->key >= KEYS ||
        (l->size && (l->offset < 0 || l->offset + l->size > (Py_ssize_t)sizeof(omptpy_record) ||
                     (l->size != 1 && l->size != 2 && l->size != 4 && l->size != 8)))) {
      PyErr_SetString(PyExc_ValueError, "columns: a lookup's key or field is invalid");
      goto done;
    }
    if (!(l->out = (unsigned char *)output(out, n, buf, &nbuf))) goto done;
    if (PyObject_GetBuffer(table, &buf[nbuf], PyBUF_SIMPLE) < 0) goto done;
    l->table = buf[nbuf].buf;
    if ((l->len = buf[nbuf++].len) < 1) {
      PyErr_SetString(PyExc_ValueError, "columns: a lookup table is empty");
      goto done;
    }
  }
  if (frames != Py_None)
    for (int f = 0; f < FR_N; f++) {
      PyObject *out = PyTuple_GET_ITEM(frames, f);
      if (!(fr[f] = (unsigned char *)output(out, f == FR_ENTER ? 8 * n : n, buf, &nbuf)))
        goto done;
    }
  Py_ssize_t bad = -1;
  Py_BEGIN_ALLOW_THREADS
  /* Block by block: the records of a block are found once, then each output
   * is written for the whole block while their cache lines stay in L1/L2 (one
   * output stream at a time rather than dozens). */
  const char *rec[BLOCK];
  uint32_t keys[KEYS][BLOCK];
  for (Py_ssize_t b = 0; b < n && bad < 0; b += BLOCK) {
    Py_ssize_t m = n - b < BLOCK ? n - b : BLOCK;
    for (Py_ssize_t j = 0; j < m; j++) {
      Py_ssize_t r = idx ? idx[b + j] : b + j;
      if (r < 0 || r >= nrec) {
        bad = b + j;
        break;
      }
      const omptpy_record *h = (const omptpy_record *)(src + r * (Py_ssize_t)sizeof *h);
      rec[j] = (const char *)h;
      keys[KEY_EVENT][j] = h->event;
      keys[KEY_ENDPOINT][j] = h->endpoint;
      keys[KEY_EVENT_KIND][j] = (uint32_t)h->event << 8 | h->kind;
      keys[KEY_EVENT_ENDPOINT][j] = (uint32_t)h->event << 8 | h->endpoint;
    }
    if (bad >= 0) break;
    for (Py_ssize_t c = 0; c < nfield; c++)
      gather(field_out[c] + b * size[c], rec, m, offset[c], size[c]);
    for (Py_ssize_t k = 0; k < nlook; k++) {
      const lookup *l = &look[k];
      const uint32_t *key = keys[l->key];
      unsigned char *out = l->out + b;
      Py_ssize_t last = l->len - 1;
      for (Py_ssize_t j = 0; j < m; j++) out[j] = l->table[key[j] < last ? key[j] : last];
      if (l->size)
        for (Py_ssize_t j = 0; j < m; j++) out[j] |= load_field(rec[j] + l->offset, l->size) == 0;
    }
    if (fr[FR_ENTER])
      for (Py_ssize_t j = 0; j < m; j++) decode_frames((const omptpy_record *)rec[j], fr, b + j);
  }
  Py_END_ALLOW_THREADS
  if (bad >= 0) {
    PyErr_SetString(PyExc_IndexError, "columns: order refers to a record that does not exist");
    goto done;
  }
  result = Py_None;
  Py_INCREF(result);
done:
  while (nbuf > 0) PyBuffer_Release(&buf[--nbuf]);
  return result;
}

/* ticks_to_ns(records, first_ticks, first_ns, ns_per_tick, origin_ns): in
 * place, each record's time becomes CLOCK_MONOTONIC nanoseconds minus origin
 * (int64), on the line through the anchor (first_ticks, first_ns). */
static PyObject *py_ticks_to_ns(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *records;
  unsigned long long first_ticks;
  long long first_ns, origin_ns;
  double scale;
  if (!PyArg_ParseTuple(args, "OKLdL", &records, &first_ticks, &first_ns, &scale, &origin_ns))
    return NULL;
  Py_buffer b;
  if (PyObject_GetBuffer(records, &b, PyBUF_WRITABLE) < 0) return NULL;
  omptpy_record *r = b.buf;
  Py_ssize_t n = b.len / (Py_ssize_t)sizeof *r;
  int64_t base = first_ns - origin_ns;
  Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n; i++) {
    double delta = (double)(int64_t)(r[i].time - first_ticks);
    int64_t ns = base + (int64_t)llround(delta * scale);
    memcpy(&r[i].time, &ns, sizeof ns);
  }
  Py_END_ALLOW_THREADS PyBuffer_Release(&b);
  Py_RETURN_NONE;
}

/* ---- keys, pairing and lookups ---------------------------------------------------------
 * A row's key is a value from each of a few columns.  A column is an integer
 * array (1, 2, 4 or 8-byte items, read as unsigned), or one of bytes read
 * through a table of bytes (value = table[byte], the last entry for bytes
 * beyond it); Python gives it as the tuple (array, missing_if_zero, table or
 * None).  Rows with equal keys are found through an open-addressing hash table
 * of rows. */

enum { MAX_KEYS = 8 };

typedef struct {
  Py_buffer data, table;
  int zero_missing; /* a row whose value is 0 has no key (find) */
} column;

static void column_release(column *c) {
  if (c->table.obj) PyBuffer_Release(&c->table);
  if (c->data.obj) PyBuffer_Release(&c->data);
  memset(c, 0, sizeof *c);
}

/* Reads a column's spec; *n: its rows (set when negative, else checked). */
static int column_get(column *c, PyObject *spec, Py_ssize_t *n) {
  PyObject *data, *table;
  memset(c, 0, sizeof *c);
  if (!PyArg_ParseTuple(spec, "OpO", &data, &c->zero_missing, &table)) return -1;
  if (PyObject_GetBuffer(data, &c->data, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0 ||
      (table != Py_None && PyObject_GetBuffer(table, &c->table, PyBUF_SIMPLE) < 0)) {
    column_release(c);
    return -1;
  }
  Py_ssize_t size = c->data.itemsize, rows = size ? c->data.len / size : 0;
  const char *bad = NULL;
  if (size != 1 && size != 2 && size != 4 && size != 8)
    bad = "a column of 1, 2, 4 or 8-byte integers";
  else if (c->table.obj && (size != 1 || c->table.len < 1))
    bad = "a table for a column of bytes, not empty";
  else if (*n >= 0 && rows != *n)
    bad = "columns of different lengths";
  if (bad) {
    PyErr_SetString(PyExc_ValueError, bad);
    column_release(c);
    return -1;
  }
  *n = rows;
  return 0;
}

static uint64_t column_read(const column *c, Py_ssize_t i) {
  const char *p = (const char *)c->data.buf + i * c->data.itemsize;
  switch (c->data.itemsize) {
    case 1: {
      uint8_t v = *(const uint8_t *)p;
      if (!c->table.obj) return v;
      return ((const uint8_t *)c->table.buf)[v < c->table.len ? v : c->table.len - 1];
    }
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
  }
}

typedef struct {
  Py_ssize_t ncol, n;
  column col[MAX_KEYS];
} keyset;

static void keyset_release(keyset *k) {
  for (Py_ssize_t j = 0; j < k->ncol; j++) column_release(&k->col[j]);
  k->ncol = 0;
}

/* The columns of a list, all of *n rows (set when negative). */
static int keyset_get(keyset *k, PyObject *list, Py_ssize_t *n) {
  k->ncol = 0;
  if (!PyList_Check(list) || PyList_GET_SIZE(list) < 1 || PyList_GET_SIZE(list) > MAX_KEYS) {
    PyErr_Format(PyExc_ValueError, "keys: a list of 1 to %d columns", (int)MAX_KEYS);
    return -1;
  }
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(list); j++) {
    if (column_get(&k->col[j], PyList_GET_ITEM(list, j), n) < 0) {
      keyset_release(k);
      return -1;
    }
    k->ncol = j + 1;
  }
  k->n = *n;
  return 0;
}

/* A row's key, read once: its values, their hash, and whether it has none. */
typedef struct {
  uint64_t word[MAX_KEYS], hash;
  int missing;
} key;

static void key_read(const keyset *k, Py_ssize_t i, key *out) {
  uint64_t h = 0x9E3779B97F4A7C15u;
  out->missing = 0;
  for (Py_ssize_t j = 0; j < k->ncol; j++) {
    uint64_t v = column_read(&k->col[j], i);
    out->word[j] = v;
    out->missing |= k->col[j].zero_missing && v == 0;
    h = (h ^ v) * 0xBF58476D1CE4E5B9u;
    h ^= h >> 31;
  }
  out->hash = h;
}

static int key_matches(const keyset *k, Py_ssize_t row, const key *q) {
  for (Py_ssize_t j = 0; j < k->ncol; j++)
    if (column_read(&k->col[j], row) != q->word[j]) return 0;
  return 1;
}

/* Slots of (hash, row), row -1 when empty; a power of two of them, at most half used. */
typedef struct {
  uint64_t hash;
  Py_ssize_t row;
} slot;

typedef struct {
  slot *slots;
  Py_ssize_t mask, used;
} table;

static int table_init(table *t, Py_ssize_t rows) {
  Py_ssize_t size = 16;
  while (size < 2 * rows) size *= 2;
  t->slots = malloc((size_t)size * sizeof *t->slots);
  t->mask = size - 1;
  t->used = 0;
  if (!t->slots) return -1;
  for (Py_ssize_t s = 0; s < size; s++) t->slots[s].row = -1;
  return 0;
}

static void table_free(table *t) { free(t->slots); }

/* The slot holding a row of `keys` with the key q, or the empty slot where it
 * would go. */
static Py_ssize_t table_slot(const table *t, const keyset *keys, const key *q) {
  Py_ssize_t s = (Py_ssize_t)(q->hash & (uint64_t)t->mask);
  while (t->slots[s].row >= 0 &&
         !(t->slots[s].hash == q->hash && key_matches(keys, t->slots[s].row, q)))
    s = (s + 1) & t->mask;
  return s;
}

static int table_grow(table *t) {
  table bigger;
  if (table_init(&bigger, t->mask + 1) < 0) {
    table_free(&bigger);
    return -1;
  }
  for (Py_ssize_t s = 0; s <= t->mask; s++) {
    if (t->slots[s].row < 0) continue;
    Py_ssize_t d = (Py_ssize_t)(t->slots[s].hash & (uint64_t)bigger.mask);
    while (bigger.slots[d].row >= 0) d = (d + 1) & bigger.mask;
    bigger.slots[d] = t->slots[s];
  }
  bigger.used = t->used;
  table_free(t);
  *t = bigger;
  return 0;
}

/* Stores `row` in slot s (from table_slot for a key with this hash), taking the
 * slot if it was empty; grows the table past half full.  -1: out of memory. */
static int table_set(table *t, Py_ssize_t s, uint64_t hash, Py_ssize_t row) {
  if (t->slots[s].row < 0) {
    t->slots[s].hash = hash;
    t->used++;
  }
  t->slots[s].row = row;
  return 2 * t->used > t->mask ? table_grow(t) : 0;
}

/* Empties slot s, moving later slots of its probe run back (linear probing). */
static void table_remove(table *t, Py_ssize_t s) {
  Py_ssize_t j = s;
  for (;;) {
    j = (j + 1) & t->mask;
    if (t->slots[j].row < 0) break;
    Py_ssize_t home = (Py_ssize_t)(t->slots[j].hash & (uint64_t)t->mask);
    /* j's entry may move to s only if its home is not in (s, j] (cyclically). */
    if (s <= j ? (s < home && home <= j) : (s < home || home <= j)) continue;
    t->slots[s] = t->slots[j];
    s = j;
  }
  t->slots[s].row = -1;
  t->used--;
}

/* pair(keys, begins, begin_value, partner): begin/end pairing in one pass over
 * rows in time order.  keys: a list of columns (see above); a row is a begin
 * when its value in the column `begins` is begin_value, else an end.  Within a
 * key an end closes the latest open begin.  Writes partner (intp per row): a
 * begin's end row, an end's begin row, or -1 for a begin never closed and an
 * end with no open begin.  The table holds the keys with open begins (the top
 * of each one's stack); while a begin is open, its partner entry links to the
 * begin below it (-2 - row; -1 for none). */
static PyObject *py_pair(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *keys_list, *begins_spec, *partner, *result = NULL;
  unsigned long long begin_value;
  if (!PyArg_ParseTuple(args, "OOKO", &keys_list, &begins_spec, &begin_value, &partner))
    return NULL;
  keyset keys;
  column begins;
  Py_buffer p = {0};
  table t = {0};
  Py_ssize_t n = -1;
  if (keyset_get(&keys, keys_list, &n) < 0) return NULL;
  if (column_get(&begins, begins_spec, &n) < 0) goto release_keys;
  if (PyObject_GetBuffer(partner, &p, PyBUF_WRITABLE) < 0) goto done;
  if (p.len != n * (Py_ssize_t)sizeof(Py_ssize_t)) {
    PyErr_SetString(PyExc_ValueError, "pair: partner has another length");
    goto done;
  }
  if (table_init(&t, 512) < 0) {
    PyErr_NoMemory();
    goto done;
  }
  Py_ssize_t *out = p.buf;
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS
  key q;
  for (Py_ssize_t i = 0; i < n; i++) {
    key_read(&keys, i, &q);
    Py_ssize_t s = table_slot(&t, &keys, &q);
    if (column_read(&begins, i) == begin_value) {
      out[i] = -2 - t.slots[s].row;
      if (table_set(&t, s, q.hash, i) < 0) {
        failed = 1;
        break;
      }
    } else if (t.slots[s].row >= 0) {
      Py_ssize_t open = t.slots[s].row, below = -2 - out[open];
      out[open] = i;
      out[i] = open;
      if (below >= 0)
        t.slots[s].row = below;
      else
        table_remove(&t, s);
    } else {
      out[i] = -1;
    }
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (out[i] < -1) out[i] = -1; /* a begin never closed */
  Py_END_ALLOW_THREADS
  if (failed) {
    PyErr_NoMemory();
    goto done;
  }
  result = Py_None;
  Py_INCREF(result);
done:
  table_free(&t);
  if (p.obj) PyBuffer_Release(&p);
  column_release(&begins);
release_keys:
  keyset_release(&keys);
  return result;
}

/* find(table_keys, query_keys, out[, table_times, query_times]): for each query
 * row, the first table row with the same keys (lists of as many columns, of the
 * same sizes); with times (columns of int64, each side in ascending order), the
 * last table row with the same keys at or before the query's time.  -1 where
 * there is none, or where a row is missing (a missing_if_zero column reads 0).
 * out: intp per query row. */
static PyObject *py_find(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *tk, *qk, *out_obj, *tt = Py_None, *qt = Py_None, *result = NULL;
  if (!PyArg_ParseTuple(args, "OOO|OO", &tk, &qk, &out_obj, &tt, &qt)) return NULL;
  keyset tkeys, qkeys = {0};
  column ttime = {0}, qtime = {0};
  Py_buffer o = {0};
  table t = {0};
  Py_ssize_t nt = -1, nq = -1;
  int timed = tt != Py_None;
  if (keyset_get(&tkeys, tk, &nt) < 0) return NULL;
  if (keyset_get(&qkeys, qk, &nq) < 0) goto done;
  if (timed && (column_get(&ttime, tt, &nt) < 0 || column_get(&qtime, qt, &nq) < 0)) goto done;
  if (PyObject_GetBuffer(out_obj, &o, PyBUF_WRITABLE) < 0) goto done;
  int same = qkeys.ncol == tkeys.ncol &&
             (!timed || (ttime.data.itemsize == 8 && qtime.data.itemsize == 8));
  for (Py_ssize_t j = 0; same && j < tkeys.ncol; j++)
    same = tkeys.col[j].data.itemsize == qkeys.col[j].data.itemsize;
  if (!same || o.len != nq * (Py_ssize_t)sizeof(Py_ssize_t)) {
    PyErr_SetString(PyExc_ValueError, "find: keys of other sizes, or out of another length");
    goto done;
  }
  if (table_init(&t, timed ? 512 : nt) < 0) {
    PyErr_NoMemory();
    goto done;
  }
  Py_ssize_t *out = o.buf;
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS
  /* Untimed: every table row first (the first of equal ones stays); timed: the
   * rows up to each query's time (the last of equal ones stays). */
  Py_ssize_t next = 0;
  key q;
  for (Py_ssize_t i = 0; i < nq || (!timed && next < nt); i++) {
    for (; next < nt && (!timed || (i < nq && (int64_t)column_read(&ttime, next) <=
                                                   (int64_t)column_read(&qtime, i)));
         next++) {
      key_read(&tkeys, next, &q);
      if (q.missing) continue;
      Py_ssize_t s = table_slot(&t, &tkeys, &q);
      if (!timed && t.slots[s].row >= 0) continue; /* the first of equal rows stays */
      if (table_set(&t, s, q.hash, next) < 0) {
        failed = 1;
        break;
      }
    }
    if (failed || i >= nq) break;
    key_read(&qkeys, i, &q);
    out[i] = q.missing ? -1 : t.slots[table_slot(&t, &tkeys, &q)].row;
  }
  Py_END_ALLOW_THREADS
  if (failed) {
    PyErr_NoMemory();
    goto done;
  }
  result = Py_None;
  Py_INCREF(result);
done:
  table_free(&t);
  if (o.obj) PyBuffer_Release(&o);
  column_release(&qtime);
  column_release(&ttime);
  keyset_release(&qkeys);
  keyset_release(&tkeys);
  return result;
}

/* format_rows(parts, columns): rows of text, one per row of the columns, each
 * parts[0] value[0] parts[1] value[1] ... parts[k] (the export's JSON and CSV
 * lines).  A column is (kind, values, missing, null, table): values an integer
 * array (1, 2, 4 or 8-byte items, signed or not); missing None or a byte per
 * row (nonzero: the value is `null`, bytes); table, for FORMAT_TEXT, a tuple of
 * bytes.  Kinds: */
enum {
  FORMAT_NUMBER, /* in decimal */
  FORMAT_MICROS, /* nanoseconds as microseconds with three decimals: -1234 -> -1.234 */
  FORMAT_HEX,    /* as a JSON string "0x1f" */
  FORMAT_TEXT,   /* a code: table[code]; `null` for a code outside the table */
  FORMAT_KINDS
};

typedef struct {
  int kind, is_signed;
  const void *values;
  Py_ssize_t itemsize;
  const unsigned char *missing;
  const char *null;
  Py_ssize_t null_len;
  const char **text;
  Py_ssize_t *text_len, ntext;
} format_column;

static const char digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static char *put_decimal(char *p, uint64_t v) {
  char tmp[20], *t = tmp + sizeof tmp;
  while (v >= 100) {
    t -= 2;
    memcpy(t, digit_pairs + 2 * (v % 100), 2);
    v /= 100;
  }
  if (v >= 10) {
    t -= 2;
    memcpy(t, digit_pairs + 2 * v, 2);
  } else {
    *--t = (char)('0' + v);
  }
  size_t n = (size_t)(tmp + sizeof tmp - t);
  memcpy(p, t, n);
  return p + n;
}

/* Item i of a column: its magnitude, and whether it is negative. */
static uint64_t read_item(const format_column *c, Py_ssize_t i, int *negative) {
  const char *at = (const char *)c->values + c->itemsize * i;
  int64_t s;
  switch (c->itemsize) {
    case 1:
      s = c->is_signed ? *(const int8_t *)at : *(const uint8_t *)at;
      break;
    case 2: {
      uint16_t v;
      memcpy(&v, at, 2);
      s = c->is_signed ? (int16_t)v : v;
      break;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, at, 4);
      s = c->is_signed ? (int32_t)v : (int64_t)v;
      break;
    }
    default: {
      uint64_t u;
      memcpy(&u, at, 8);
      *negative = c->is_signed && (int64_t)u < 0;
      return *negative ? 0 - u : u;
    }
  }
  *negative = s < 0;
  return s < 0 ? 0 - (uint64_t)s : (uint64_t)s;
}

static char *put_value(char *p, const format_column *c, Py_ssize_t i) {
  if (c->missing && c->missing[i]) {
    memcpy(p, c->null, (size_t)c->null_len);
    return p + c->null_len;
  }
  int negative;
  uint64_t u = read_item(c, i, &negative);
  switch (c->kind) {
    case FORMAT_NUMBER:
      if (negative) *p++ = '-';
      return put_decimal(p, u);
    case FORMAT_MICROS: {
      uint64_t mag = u;
      if (negative) *p++ = '-';
      p = put_decimal(p, mag / 1000);
      *p++ = '.';
      memcpy(p, digit_pairs + 2 * (mag % 1000 / 10), 2);
      p[2] = (char)('0' + mag % 10);
      return p + 3;
    }
    case FORMAT_HEX: {
      static const char hex[] = "0123456789abcdef";
      char tmp[16], *t = tmp + sizeof tmp;
      do {
        *--t = hex[u & 15];
        u >>= 4;
      } while (u);
      size_t n = (size_t)(tmp + sizeof tmp - t);
      memcpy(p, "\"0x", 3);
      memcpy(p + 3, t, n);
      p[3 + n] = '"';
      return p + 4 + n;
    }
    default: {
      const char *text = c->null;
      Py_ssize_t len = c->null_len;
      if (!negative && u < (uint64_t)c->ntext) text = c->text[u], len = c->text_len[u];
      memcpy(p, text, (size_t)len);
      return p + len;
    }
  }
}

static PyObject *py_format_rows(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *parts, *columns, *result = NULL;
  if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &parts, &PyList_Type, &columns)) return NULL;
  Py_ssize_t ncol = PyList_GET_SIZE(columns);
  if (ncol < 1 || PyTuple_GET_SIZE(parts) != ncol + 1) {
    PyErr_SetString(PyExc_ValueError, "format_rows: one column or more, and one part more");
    return NULL;
  }
  format_column *col = PyMem_Calloc((size_t)ncol, sizeof *col);
  Py_buffer *values = PyMem_Calloc((size_t)ncol, sizeof *values);
  Py_buffer *missing = PyMem_Calloc((size_t)ncol, sizeof *missing);
  const char **part = PyMem_Calloc((size_t)ncol + 1, sizeof *part);
  Py_ssize_t *part_len = PyMem_Calloc((size_t)ncol + 1, sizeof *part_len);
  Py_ssize_t n = -1, row_bound = 0;
  if (!col || !values || !missing || !part || !part_len) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t k = 0; k <= ncol; k++) {
    if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(parts, k), (char **)&part[k], &part_len[k]) < 0)
      goto done;
    row_bound += part_len[k];
  }
  for (Py_ssize_t k = 0; k < ncol; k++) {
    format_column *c = &col[k];
    PyObject *vals, *miss, *null, *table;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(columns, k), "iOOO!O", &c->kind, &vals, &miss,
                          &PyBytes_Type, &null, &table))
      goto done;
    if (PyObject_GetBuffer(vals, &values[k], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    if (miss != Py_None && PyObject_GetBuffer(miss, &missing[k], PyBUF_SIMPLE) < 0) goto done;
    /* The struct format of the items: a letter, lower case for signed integers. */
    const char *format = values[k].format ? values[k].format : "B";
    char letter = *format ? format[strlen(format) - 1] : 'B';
    c->itemsize = values[k].itemsize;
    c->is_signed = letter == 'b' || letter == 'h' || letter == 'i' || letter == 'l' || letter == 'q';
    if (n < 0) n = c->itemsize ? values[k].len / c->itemsize : 0;
    if (c->kind < 0 || c->kind >= FORMAT_KINDS || !strchr("bBhHiIlLqQ?", letter) ||
        (c->itemsize != 1 && c->itemsize != 2 && c->itemsize != 4 && c->itemsize != 8) ||
        values[k].len != c->itemsize * n ||
        (missing[k].obj && missing[k].len < n) || (c->kind == FORMAT_TEXT) != (table != Py_None) ||
        (table != Py_None && !PyTuple_Check(table))) {
      PyErr_SetString(PyExc_ValueError, "format_rows: a column of another length or kind");
      goto done;
    }
    c->values = values[k].buf;
    c->missing = missing[k].obj ? missing[k].buf : NULL;
    c->null = PyBytes_AS_STRING(null);
    c->null_len = PyBytes_GET_SIZE(null);
    Py_ssize_t width = c->kind == FORMAT_MICROS ? 25 : 24;
    if (table != Py_None) {
      c->ntext = PyTuple_GET_SIZE(table);
      c->text = PyMem_Calloc((size_t)c->ntext + 1, sizeof *c->text);
      c->text_len = PyMem_Calloc((size_t)c->ntext + 1, sizeof *c->text_len);
      if (!c->text || !c->text_len) {
        PyErr_NoMemory();
        goto done;
      }
      width = 0;
      for (Py_ssize_t t = 0; t < c->ntext; t++) {
        if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(table, t), (char **)&c->text[t],
                                    &c->text_len[t]) < 0)
          goto done;
        if (c->text_len[t] > width) width = c->text_len[t];
      }
    }
    row_bound += width > c->null_len ? width : c->null_len;
  }
  if (n > 0 && row_bound > PY_SSIZE_T_MAX / n) {
    PyErr_NoMemory();
    goto done;
  }
  result = PyBytes_FromStringAndSize(NULL, n * row_bound);
  if (!result) goto done;
  char *start = PyBytes_AS_STRING(result), *p = start;
  Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n; i++) {
    for (Py_ssize_t k = 0; k < ncol; k++) {
      memcpy(p, part[k], (size_t)part_len[k]);
      p = put_value(p + part_len[k], &col[k], i);
    }
    memcpy(p, part[ncol], (size_t)part_len[ncol]);
    p += part_len[ncol];
  }
  Py_END_ALLOW_THREADS if (_PyBytes_Resize(&result, p - start) < 0) result = NULL;
done:
  for (Py_ssize_t k = 0; col && values && missing && k < ncol; k++) {
    PyMem_Free(col[k].text);
    PyMem_Free(col[k].text_len);
    if (values[k].obj) PyBuffer_Release(&values[k]);
    if (missing[k].obj) PyBuffer_Release(&missing[k]);
  }
  PyMem_Free(col);
  PyMem_Free(values);
  PyMem_Free(missing);
  PyMem_Free(part);
  PyMem_Free(part_len);
  return result;
}

static PyObject *py_record_layout(PyObject *m, PyObject *args) {
  (void)m, (void)args;
#define F(name) #name, (Py_ssize_t)offsetof(omptpy_record, name), \
                (Py_ssize_t)sizeof(((omptpy_record *)0)->name)
  return Py_BuildValue(
      "{s:i,s:n,s:[(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn)]}",
      "version", OMPTPY_RECORD_VERSION, "size", (Py_ssize_t)sizeof(omptpy_record), "fields",
      F(time), F(codeptr), F(parallel_id), F(task_id), F(u64a), F(u64b), F(thread), F(event),
      F(endpoint), F(kind), F(u32a), F(u32b));
#undef F
}

/* ---- scripting callbacks ------------------------------------------------------------- */

static PyObject *errno_error(int rc, const char *what) {
  errno = -rc;
  return PyErr_SetFromErrnoWithFilename(PyExc_OSError, what);
}

/* tap_configure([(events_lo, events_hi, codeptr_lo, codeptr_hi, (thread, ...)), ...],
 * delay_s, block) */
static PyObject *py_tap_configure(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *list;
  double delay_s;
  int block;
  if (!PyArg_ParseTuple(args, "O!dp", &PyList_Type, &list, &delay_s, &block)) return NULL;
  Py_ssize_t n = PyList_GET_SIZE(list);
  if (n < 1 || n > OMPTPY_TAP_MAX_FILTERS || !(delay_s > 0)) {
    PyErr_Format(PyExc_ValueError, "1 to %d filters and a positive delay are needed",
                 OMPTPY_TAP_MAX_FILTERS);
    return NULL;
  }
  omptpy_tap_filter f[OMPTPY_TAP_MAX_FILTERS];
  memset(f, 0, sizeof f);
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned long long lo, hi, cp_lo, cp_hi;
    PyObject *threads;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "KKKKO!", &lo, &hi, &cp_lo, &cp_hi,
                          &PyTuple_Type, &threads))
      return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(threads);
    if (k > OMPTPY_TAP_MAX_THREADS) {
      PyErr_Format(PyExc_ValueError, "a filter names at most %d threads", OMPTPY_TAP_MAX_THREADS);
      return NULL;
    }
    f[i] = (omptpy_tap_filter){{lo, hi}, cp_lo, cp_hi, (uint32_t)k, {0}};
    for (Py_ssize_t j = 0; j < k; j++) {
      unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(threads, j));
      if (PyErr_Occurred()) return NULL;
      f[i].threads[j] = (uint32_t)v;
    }
  }
  int rc;
  uint64_t delay_ns = (uint64_t)(delay_s * 1e9);
  Py_BEGIN_ALLOW_THREADS rc = omptpy_tap_configure(f, (int)n, delay_ns ? delay_ns : 1, block);
  Py_END_ALLOW_THREADS if (rc != 0) return errno_error(rc, "the handlers' queue");
  Py_RETURN_NONE;
}

static PyObject *py_tap_stop(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  Py_BEGIN_ALLOW_THREADS omptpy_tap_stop();
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* tap_wait(timeout_s, max_records) -> None when the tap is stopped, else
 * (bytearray of records, times in CLOCK_MONOTONIC ns; queue position after them). */
static PyObject *py_tap_wait(PyObject *m, PyObject *args) {
  (void)m;
  double timeout_s;
  Py_ssize_t max;
  if (!PyArg_ParseTuple(args, "dn", &timeout_s, &max)) return NULL;
  if (max < 1) {
    PyErr_SetString(PyExc_ValueError, "max_records must be positive");
    return NULL;
  }
  long ready;
  Py_BEGIN_ALLOW_THREADS ready = omptpy_tap_wait((int64_t)(timeout_s * 1e9));
  Py_END_ALLOW_THREADS if (ready < 0) Py_RETURN_NONE;
  Py_ssize_t n = ready < max ? ready : max;
  PyObject *buf = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(omptpy_record));
  if (!buf) return NULL;
  omptpy_record *dst = (omptpy_record *)PyByteArray_AS_STRING(buf);
  size_t got;
  uint64_t position;
  Py_BEGIN_ALLOW_THREADS got = omptpy_tap_read(dst, (size_t)n, &position);
  Py_END_ALLOW_THREADS if ((Py_ssize_t)got < n &&
                          PyByteArray_Resize(buf, (Py_ssize_t)(got * sizeof(omptpy_record))) < 0) {
    Py_DECREF(buf);
    return NULL;
  }
  return Py_BuildValue("(NK)", buf, (unsigned long long)position);
}

static PyObject *py_tap_stats(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  omptpy_tap_counters c;
  omptpy_tap_stats(&c);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:O}", "queued", (unsigned long long)c.queued,
                       "dropped", (unsigned long long)c.dropped, "filtered",
                       (unsigned long long)c.filtered, "position",
                       (unsigned long long)c.position, "backlog", (unsigned long long)c.backlog,
                       "capacity", (unsigned long long)c.capacity, "active",
                       c.active ? Py_True : Py_False);
}

/* native_add(function address, state address, events_lo, events_hi) -> slot id */
static PyObject *py_native_add(PyObject *m, PyObject *args) {
  (void)m;
  unsigned long long fn, state, events[2];
  if (!PyArg_ParseTuple(args, "KKKK", &fn, &state, &events[0], &events[1])) return NULL;
  omptpy_native_fn f;
  void *p = (void *)(uintptr_t)fn;
  memcpy(&f, &p, sizeof f);
  const uint64_t ev[2] = {events[0], events[1]};
  int id = omptpy_native_add(f, (void *)(uintptr_t)state, ev);
  if (id == -ENOSPC) {
    PyErr_Format(PyExc_RuntimeError, "at most %d native handlers can be installed at once",
                 OMPTPY_NATIVE_MAX);
    return NULL;
  }
  if (id < 0) return errno_error(id, "native handler");
  return PyLong_FromLong(id);
}

static PyObject *py_native_remove(PyObject *m, PyObject *arg) {
  (void)m;
  long id = PyLong_AsLong(arg);
  if (id == -1 && PyErr_Occurred()) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = omptpy_native_remove((int)id);
  Py_END_ALLOW_THREADS return PyBool_FromLong(rc == 0);
}

static PyObject *py_native_alloc(PyObject *m, PyObject *arg) {
  (void)m;
  Py_ssize_t size = PyLong_AsSsize_t(arg);
  if (size < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "size must not be negative");
    return NULL;
  }
  void *p = omptpy_native_alloc((size_t)size);
  if (!p) return PyErr_NoMemory();
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p);
}

static PyObject *py_control_tool(PyObject *m, PyObject *args) {
  (void)m;
  unsigned long long command, modifier;
  if (!PyArg_ParseTuple(args, "KK", &command, &modifier)) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = omptpy_control_tool(command, modifier);
  Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

static PyObject *py_region_mark(PyObject *m, PyObject *args) {
  (void)m;
  int endpoint;
  const char *name;
  if (!PyArg_ParseTuple(args, "iz", &endpoint, &name)) return NULL;
  omptpy_region_mark(endpoint, name, 0);
  Py_RETURN_NONE;
}

static PyObject *py_region_names(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  uint32_t n = omptpy_region_count();
  PyObject *list = PyList_New(n);
  if (!list) return NULL;
  for (uint32_t id = 1; id <= n; id++) {
    PyObject *name = PyUnicode_DecodeUTF8(omptpy_region_name(id),
                                          (Py_ssize_t)strlen(omptpy_region_name(id)), "replace");
    if (!name) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, id - 1, name);
  }
  return list;
}

static PyMethodDef methods[] = {
    {"init", py_init, METH_NOARGS,
     "Read the configuration; returns None, or the error message when it is invalid."},
    {"check_config", py_check_config, METH_NOARGS,
     "Check the OMPTPY_* variables of os.environ now; None, or the error message."},
    {"set_recording", py_set_recording, METH_O, "Start (True) or pause (False) recording."},
    {"is_recording", py_is_recording, METH_NOARGS, "Whether events are being recorded."},
    {"flush", py_flush, METH_NOARGS, "Move every buffered record into the sink."},
    {"take", py_take, METH_NOARGS, "Take the records gathered in the memory sink so far."},
    {"meta", py_meta, METH_NOARGS, "The process and runtime description, as JSON."},
    {"stats", py_stats, METH_NOARGS, "Per-thread written/dropped counters and a clock anchor, as JSON."},
    {"runtime_info", py_runtime_info, METH_NOARGS,
     "What each attached runtime's inquiry functions answer, as JSON."},
    {"tool_path", py_tool_path, METH_NOARGS, "Absolute path of libomptpy.so."},
    {"scan", py_scan, METH_VARARGS,
     "scan(records, times, counts): the records' times into times, their events counted."},
    {"columns", py_columns, METH_VARARGS,
     "columns(records, order, [(out, offset, size)], [(out, table, key[, offset, size])], "
     "frames): the columns of Trace.to_pandas() in one pass over the records."},
    {"pair", py_pair, METH_VARARGS,
     "pair(keys, begins, begin_value, partner): begin/end pairing per key (a list of "
     "columns) in time order; partner[i]: the row paired with row i, or -1."},
    {"find", py_find, METH_VARARGS,
     "find(table_keys, query_keys, out[, table_times, query_times]): per query row, the "
     "first table row with its keys (with times: the last at or before the query's time), "
     "or -1."},
    {"format_rows", py_format_rows, METH_VARARGS,
     "format_rows(parts, [(kind, values, missing, null, table), ...]): rows of text, each "
     "parts[0] value parts[1] ... parts[-1]; kinds: 0 a number, 1 nanoseconds as "
     "microseconds, 2 a hex string, 3 table[code]."},
    {"ticks_to_ns", py_ticks_to_ns, METH_VARARGS,
     "ticks_to_ns(records, first_ticks, first_ns, ns_per_tick, origin_ns): times in place."},
    {"record_layout", py_record_layout, METH_NOARGS, "Version, size and field offsets of a record."},
    {"tap_configure", py_tap_configure, METH_VARARGS,
     "tap_configure(filters, delay_s, block): start the handlers' queue or change its filters."},
    {"tap_stop", py_tap_stop, METH_NOARGS, "Stop the handlers' queue."},
    {"tap_wait", py_tap_wait, METH_VARARGS,
     "tap_wait(timeout_s, max_records) -> (records, position), or None when stopped."},
    {"tap_stats", py_tap_stats, METH_NOARGS, "Counters of the handlers' queue."},
    {"native_add", py_native_add, METH_VARARGS,
     "native_add(function, state, events_lo, events_hi) -> slot id."},
    {"native_remove", py_native_remove, METH_O, "native_remove(id) -> whether it was installed."},
    {"native_alloc", py_native_alloc, METH_O,
     "native_alloc(size) -> address of zeroed memory that is never freed."},
    {"control_tool", py_control_tool, METH_VARARGS,
     "control_tool(command, modifier) -> what omp_control_tool returns."},
    {"region_mark", py_region_mark, METH_VARARGS,
     "region_mark(endpoint, name): a region begin (1) or end (2) on this thread."},
    {"region_names", py_region_names, METH_NOARGS, "The interned region names, id 1 first."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_core",
    .m_doc = "Binding of the ompt-py C tool (libomptpy.so).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__core(void) {
  if (PyType_Ready(&RecordsType) < 0) return NULL;
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  Py_INCREF(&RecordsType);
  if (PyModule_AddObject(m, "Records", (PyObject *)&RecordsType) < 0) {
    Py_DECREF(&RecordsType);
    Py_DECREF(m);
    return NULL;
  }
  if (PyModule_AddIntConstant(m, "KEY_EVENT", KEY_EVENT) < 0 ||
      PyModule_AddIntConstant(m, "KEY_ENDPOINT", KEY_ENDPOINT) < 0 ||
      PyModule_AddIntConstant(m, "KEY_EVENT_KIND", KEY_EVENT_KIND) < 0 ||
      PyModule_AddIntConstant(m, "KEY_EVENT_ENDPOINT", KEY_EVENT_ENDPOINT) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
