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
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "omptpy.h"
#include "omptpy_api.h"
#include "omptpy_frames.h"

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

/* pair(groups, begins, ngroups, partner): begin/end pairing in one pass over
 * rows in time order.  groups: int64 in [0, ngroups), a row's key; begins:
 * one byte per row, nonzero for a begin.  Within a key an end closes the
 * latest open begin (the key's stack, kept as links between its rows).
 * Writes partner (intp per row): a begin's end row, an end's begin row, or -1
 * for a begin never closed and an end with no open begin. */
static PyObject *py_pair(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *groups, *begins, *partner;
  Py_ssize_t ngroups;
  if (!PyArg_ParseTuple(args, "OOnO", &groups, &begins, &ngroups, &partner)) return NULL;
  Py_buffer g, b, p;
  PyObject *result = NULL;
  Py_ssize_t *top = NULL, *below = NULL;
  if (PyObject_GetBuffer(groups, &g, PyBUF_SIMPLE) < 0) return NULL;
  if (PyObject_GetBuffer(begins, &b, PyBUF_SIMPLE) < 0) goto release_g;
  if (PyObject_GetBuffer(partner, &p, PyBUF_WRITABLE) < 0) goto release_b;
  Py_ssize_t n = g.len / (Py_ssize_t)sizeof(int64_t);
  if (b.len < n || p.len < n * (Py_ssize_t)sizeof(Py_ssize_t) || ngroups < 0) {
    PyErr_SetString(PyExc_ValueError, "pair: arrays of different lengths");
    goto done;
  }
  top = malloc(((size_t)ngroups + 1) * sizeof *top);
  below = malloc(((size_t)n + 1) * sizeof *below);
  if (!top || !below) {
    PyErr_NoMemory();
    goto done;
  }
  const int64_t *key = g.buf;
  const unsigned char *is_begin = b.buf;
  Py_ssize_t *out = p.buf, bad = -1;
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t k = 0; k < ngroups; k++) top[k] = -1;
  for (Py_ssize_t i = 0; i < n; i++) {
    int64_t k = key[i];
    if (k < 0 || k >= ngroups) {
      bad = i;
      break;
    }
    if (is_begin[i]) {
      below[i] = top[k];
      top[k] = i;
      out[i] = -1;
    } else if (top[k] >= 0) {
      Py_ssize_t open = top[k];
      top[k] = below[open];
      out[open] = i;
      out[i] = open;
    } else {
      out[i] = -1;
    }
  }
  Py_END_ALLOW_THREADS
  if (bad >= 0) {
    PyErr_SetString(PyExc_ValueError, "pair: a group number out of range");
    goto done;
  }
  result = Py_None;
  Py_INCREF(result);
done:
  free(top);
  free(below);
  PyBuffer_Release(&p);
release_b:
  PyBuffer_Release(&b);
release_g:
  PyBuffer_Release(&g);
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
     "pair(groups, begins, ngroups, partner): begin/end pairing per group in time order; "
     "partner[i]: the row paired with row i, or -1."},
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
