/*
 * Record columns in bulk, each pass over the records without the GIL:
 * columns() (the columns of Trace.to_pandas() in one pass), ticks_to_ns()
 * (times in place).
 */
#include "ext.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tool/omptpy_frames.h"

void omptpy_populate(void *p, Py_ssize_t len) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
  uintptr_t hi = ((uintptr_t)p + (uintptr_t)len) & ~(page - 1);
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

/* The writable buffer of `obj`, of at least `len` bytes, its pages faulted in
 * (see omptpy_populate), held in bufs[*nbuf]; NULL with an exception if it cannot be. */
static char *output(PyObject *obj, Py_ssize_t len, Py_buffer *bufs, int *nbuf) {
  Py_buffer *b = &bufs[*nbuf];
  if (PyObject_GetBuffer(obj, b, PyBUF_WRITABLE) < 0) return NULL;
  ++*nbuf;
  if (b->len < len) {
    PyErr_SetString(PyExc_ValueError, "an output array is too short");
    return NULL;
  }
  omptpy_populate(b->buf, len);
  return b->buf;
}

typedef struct {
  unsigned char *out;
  const unsigned char *table;
  Py_ssize_t len;
  int key;
} lookup;

/* Frame columns (see "Frames" in omptpy.h), in the order of columns()' frames:
 * the addresses (8 bytes each), their flags, and the masks of the rows
 * without frames, without a known enter frame, and without flags. */
enum {
  FR_EXIT, FR_ENTER, FR_EXIT_FLAGS, FR_ENTER_FLAGS, FR_NONE, FR_NO_ENTER, FR_NO_EXIT_FLAGS,
  FR_NO_ENTER_FLAGS, FR_N
};

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
 * frame (exit frame in u64b, enter frame in parallel_id); parallel_begin the
 * encountering task's and a sample the innermost task's, packed
 * (omptpy_frame_pack: the distance in u64a's high half, in u32b).  An
 * address the runtime did not give is 0 and has no flags.  Other events have
 * no frame (records of version 1 neither: kind 0, for the caller to mask). */
static inline void decode_frames(const omptpy_record *rec, unsigned char *const fr[FR_N],
                                 Py_ssize_t i) {
  uint8_t bits = 0;
  uint64_t exit_frame = 0, enter_frame = 0;
  int none = 0, known = 1;
  if (rec->event == ompt_callback_task_create) {
    bits = rec->kind;
    exit_frame = bits & OMPTPY_FRAME_EXIT ? rec->u64b : 0;
    enter_frame = bits & OMPTPY_FRAME_ENTER ? rec->parallel_id : 0;
  } else if (rec->event == ompt_callback_parallel_begin) {
    bits = rec->kind;
    known = omptpy_frame_unpack(bits, rec->u64b, (uint32_t)(rec->u64a >> 32), &exit_frame,
                                &enter_frame);
  } else if (rec->event == OMPTPY_EVENT_SAMPLE) {
    bits = rec->kind;
    known = omptpy_frame_unpack(bits, rec->u64b, rec->u32b, &exit_frame, &enter_frame);
  } else {
    none = 1;
  }
  memcpy(fr[FR_EXIT] + i * 8, &exit_frame, 8);
  memcpy(fr[FR_ENTER] + i * 8, &enter_frame, 8);
  fr[FR_EXIT_FLAGS][i] = omptpy_frame_flags_of3(bits >> 2 & 7);
  fr[FR_ENTER_FLAGS][i] = omptpy_frame_flags_of3(bits >> 5 & 7);
  fr[FR_NONE][i] = (unsigned char)none;
  fr[FR_NO_ENTER][i] = none || !known;
  fr[FR_NO_EXIT_FLAGS][i] = !(bits & OMPTPY_FRAME_EXIT);
  fr[FR_NO_ENTER_FLAGS][i] = !(bits & OMPTPY_FRAME_ENTER);
}

/* columns(records, order, fields, lookups, frames): one pass over the records,
 * in `order` (an intp array, or None for storage order), that makes the
 * columns of Trace.to_pandas(); each record is read once instead of once per
 * column.
 *   fields: [(out, offset, size)]: out[i] = the field at `offset` (1, 2, 4 or
 *     8 bytes) of record order[i].
 *   lookups: [(out, table, key)]: one byte per record (a category code, a
 *     mask), out[i] = table[key], the table's last byte for keys beyond it;
 *     key is one of KEY_* (the module's KEY_EVENT...).
 *   frames: None, or the 8 columns of the task frames (FR_*): exit and enter
 *     frames (8 bytes), their flags (ompt_frame_flag_t, 1 byte), and the
 *     masks of the rows without frames, without a known enter frame, and
 *     without exit or enter frame flags. */
PyObject *omptpy_py_columns(PyObject *m, PyObject *args) {
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
    if (!PyArg_ParseTuple(PyList_GET_ITEM(lookups, k), "OOi", &out, &table, &l->key)) goto done;
    if (l->key < 0 || l->key >= KEYS) {
      PyErr_SetString(PyExc_ValueError, "columns: a lookup's key is invalid");
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
      if (!(fr[f] = (unsigned char *)output(out, f <= FR_ENTER ? 8 * n : n, buf, &nbuf)))
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
    }
    if (fr[FR_EXIT])
      for (Py_ssize_t j = 0; j < m; j++) decode_frames((const omptpy_record *)rec[j], fr, b + j);
  }
  Py_END_ALLOW_THREADS
  if (bad >= 0) {
    PyErr_SetString(PyExc_IndexError, "columns: order refers to a record that does not exist");
    goto done;
  }
  result = omptpy_py_none();
done:
  while (nbuf > 0) PyBuffer_Release(&buf[--nbuf]);
  return result;
}

/* tick_scale(first_ticks, first_ns, last_ticks, last_ns, estimate): nanoseconds
 * per tick from the first and last anchors of a trace (omptpy_tick_scale);
 * last_ticks and last_ns are None when there is no second anchor. */
PyObject *omptpy_py_tick_scale(PyObject *m, PyObject *args) {
  (void)m;
  unsigned long long first_ticks, first_ns, last_ticks, last_ns;
  PyObject *last_ticks_obj, *last_ns_obj;
  double estimate;
  if (!PyArg_ParseTuple(args, "KKOOd", &first_ticks, &first_ns, &last_ticks_obj, &last_ns_obj,
                        &estimate))
    return NULL;
  if ((last_ticks_obj == Py_None) != (last_ns_obj == Py_None)) {
    PyErr_SetString(PyExc_TypeError, "tick_scale: last_ticks and last_ns are both None or neither");
    return NULL;
  }
  omptpy_anchor first = {first_ticks, first_ns}, last = first;
  if (last_ticks_obj != Py_None) {
    if (!PyArg_Parse(last_ticks_obj, "K", &last_ticks) || !PyArg_Parse(last_ns_obj, "K", &last_ns))
      return NULL;
    last = (omptpy_anchor){last_ticks, last_ns};
  }
  return PyFloat_FromDouble(omptpy_tick_scale(first, last, estimate));
}

/* ticks_to_ns(records, first_ticks, first_ns, scale, origin_ns): in place, each
 * record's time becomes CLOCK_MONOTONIC nanoseconds minus origin (int64), on the
 * line through the anchor (first_ticks, first_ns) of slope `scale` (ns per tick,
 * tick_scale()). */
PyObject *omptpy_py_ticks_to_ns(PyObject *m, PyObject *args) {
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
  omptpy_anchor anchor = {first_ticks, (uint64_t)first_ns};
  Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n; i++) {
    int64_t ns = omptpy_ticks_to_ns(r[i].time, anchor, scale) - origin_ns;
    memcpy(&r[i].time, &ns, sizeof ns);
  }
  Py_END_ALLOW_THREADS PyBuffer_Release(&b);
  Py_RETURN_NONE;
}


/* The records' buffer (64-byte records), read-only, in b; NULL with an exception. */
static const omptpy_record *records_of(PyObject *obj, Py_buffer *b, Py_ssize_t *n) {
  if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS) < 0) return NULL;
  if (b->len % (Py_ssize_t)sizeof(omptpy_record)) {
    PyErr_SetString(PyExc_ValueError, "records: a buffer of 64-byte records");
    PyBuffer_Release(b);
    return NULL;
  }
  *n = b->len / (Py_ssize_t)sizeof(omptpy_record);
  return b->buf;
}

/* take_records(records, rows, out): the records at `rows` (int64, each within the
 * records) copied into out (as many records), in order, fetching those ahead into
 * the cache: the rows a table takes lie far apart in the records. */
PyObject *omptpy_py_take_records(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *records, *rows_obj, *out_obj, *result = NULL;
  if (!PyArg_ParseTuple(args, "OOO", &records, &rows_obj, &out_obj)) return NULL;
  Py_buffer rb, sb = {0}, ob = {0};
  Py_ssize_t n, m_rows = -1;
  const omptpy_record *r = records_of(records, &rb, &n);
  if (!r) return NULL;
  const int64_t *rows = omptpy_get_items(rows_obj, &sb, 8, &m_rows, 0, "take_records rows");
  if (!rows) goto done;
  if (PyObject_GetBuffer(out_obj, &ob, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
  if (ob.len != m_rows * (Py_ssize_t)sizeof(omptpy_record)) {
    PyErr_SetString(PyExc_ValueError, "take_records: out holds a record per row");
    goto done;
  }
  omptpy_record *out = ob.buf;
  int outside = 0;
  Py_BEGIN_ALLOW_THREADS;
  for (Py_ssize_t i = 0; i < m_rows && !outside; i++) outside = rows[i] < 0 || rows[i] >= n;
  for (Py_ssize_t i = 0; i < m_rows && !outside; i++) {
    if (i + OMPTPY_FETCH_AHEAD < m_rows)
      __builtin_prefetch(&r[rows[i + OMPTPY_FETCH_AHEAD]]);
    out[i] = r[rows[i]];
  }
  Py_END_ALLOW_THREADS;
  if (outside) {
    PyErr_SetString(PyExc_IndexError, "take_records: a row outside the records");
    goto done;
  }
  result = omptpy_py_none();
done:
  if (ob.obj) PyBuffer_Release(&ob);
  if (sb.obj) PyBuffer_Release(&sb);
  PyBuffer_Release(&rb);
  return result;
}

int omptpy_cmp_int64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static size_t keyset_slot(uint64_t key, size_t mask) {
  return (size_t)((key * 0x9E3779B97F4A7C15u) >> 20) & mask;
}

int omptpy_keyset_init(omptpy_keyset *s) {
  s->mask = 15;
  s->count = 0;
  s->slots = malloc(16 * sizeof *s->slots);
  if (!s->slots) return -1;
  for (size_t i = 0; i <= s->mask; i++) s->slots[i].index = -1;
  return 0;
}

int64_t omptpy_keyset_add(omptpy_keyset *s, uint64_t key) {
  size_t at = keyset_slot(key, s->mask);
  for (; s->slots[at].index >= 0; at = (at + 1) & s->mask)
    if (s->slots[at].key == key) return s->slots[at].index;
  if (2 * (s->count + 1) > s->mask + 1) { /* half full: twice as large, then again */
    size_t size = 2 * (s->mask + 1);
    omptpy_keyslot *bigger = malloc(size * sizeof *bigger);
    if (!bigger) return -1;
    for (size_t i = 0; i < size; i++) bigger[i].index = -1;
    for (size_t i = 0; i <= s->mask; i++) {
      if (s->slots[i].index < 0) continue;
      size_t d = keyset_slot(s->slots[i].key, size - 1);
      while (bigger[d].index >= 0) d = (d + 1) & (size - 1);
      bigger[d] = s->slots[i];
    }
    free(s->slots);
    s->slots = bigger;
    s->mask = size - 1;
    return omptpy_keyset_add(s, key);
  }
  s->slots[at] = (omptpy_keyslot){key, (int64_t)s->count};
  return (int64_t)s->count++;
}

void omptpy_keyset_free(omptpy_keyset *s) {
  free(s->slots);
  s->slots = NULL;
}

/* The rows of a rare event (census). */
typedef struct {
  int64_t *rows;
  Py_ssize_t n, cap;
} rare_rows;

/* census's pass: counts[e] = the records of event number e; into threads, the
 * distinct pid << 32 | thread (pid: pids[i], or `pid` for all when pids is
 * NULL; a record of the key before it is passed over: the records come in runs
 * of a thread's buffers); per event number e of at most rare_max records, its
 * rows, rare[slot[e] - 1] (slot[e]: 0, none; -1, more than rare_max: its rows
 * dropped once there were).  -1: out of memory. */
static int census_pass(const omptpy_record *r, Py_ssize_t n, const int32_t *pids, int64_t pid,
                       int64_t *counts, Py_ssize_t rare_max, int32_t *slot, rare_rows *rare,
                       omptpy_keyset *threads) {
  int32_t nrare = 0;
  uint64_t last = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned e = r[i].event;
    counts[e]++;
    uint64_t key = (uint64_t)(pids ? (int64_t)pids[i] : pid) << 32 | r[i].thread;
    if (i == 0 || key != last) {
      last = key;
      if (omptpy_keyset_add(threads, key) < 0) return -1;
    }
    int32_t s = slot[e];
    if (s < 0) continue;
    if (s == 0) s = slot[e] = ++nrare;
    rare_rows *c = &rare[s - 1];
    if (c->n == rare_max) { /* not rare */
      free(c->rows);
      c->rows = NULL;
      slot[e] = -1;
      continue;
    }
    if (c->n == c->cap) {
      Py_ssize_t cap = c->cap ? 2 * c->cap : 16;
      int64_t *more = realloc(c->rows, (size_t)(cap < rare_max ? cap : rare_max) * 8);
      if (!more) return -1;
      c->rows = more;
      c->cap = cap < rare_max ? cap : rare_max;
    }
    c->rows[c->n++] = i;
  }
  return 0;
}

/* census(records, pids, pid, counts, rare_max): in one pass over the records,
 * counts[e] (int64, 65536 entries, written) the records of event number e;
 * returns (the distinct pid << 32 | thread of the records, sorted, as int64
 * bytes; per event number of 1 to rare_max records, in increasing order,
 * (number, its rows as int64 bytes)).  pids: each record's process (int32), or
 * None: pid for all. */
PyObject *omptpy_py_census(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *records, *pids_obj, *counts_obj;
  long long pid;
  Py_ssize_t rare_max;
  if (!PyArg_ParseTuple(args, "OOLOn", &records, &pids_obj, &pid, &counts_obj, &rare_max))
    return NULL;
  if (rare_max < 0) {
    PyErr_SetString(PyExc_ValueError, "census: rare_max is a count, 0 or more");
    return NULL;
  }
  Py_buffer rb, pb = {0}, cb = {0};
  Py_ssize_t n;
  const omptpy_record *r = records_of(records, &rb, &n);
  if (!r) return NULL;
  PyObject *result = NULL, *keys_obj = NULL, *rare_obj = NULL;
  int32_t *slot = calloc(OMPTPY_EVENT_NUMBERS, sizeof *slot);
  rare_rows *rare = calloc(OMPTPY_EVENT_NUMBERS, sizeof *rare);
  omptpy_keyset threads = {0};
  int64_t *keys = NULL;
  if (!slot || !rare || omptpy_keyset_init(&threads) < 0) {
    PyErr_NoMemory();
    goto done;
  }
  const int32_t *pids = NULL;
  if (pids_obj != Py_None) {
    if (PyObject_GetBuffer(pids_obj, &pb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    if (pb.len != n * (Py_ssize_t)sizeof(int32_t) || pb.itemsize != sizeof(int32_t)) {
      PyErr_SetString(PyExc_ValueError, "census: pids holds an int32 per record");
      goto done;
    }
    pids = pb.buf;
  }
  if (PyObject_GetBuffer(counts_obj, &cb, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto done;
  if (cb.len != OMPTPY_EVENT_NUMBERS * (Py_ssize_t)sizeof(int64_t)) {
    PyErr_SetString(PyExc_ValueError, "census: counts holds 65536 int64 counts");
    goto done;
  }
  int64_t *counts = cb.buf;
  memset(counts, 0, (size_t)cb.len);
  int failed;
  Py_BEGIN_ALLOW_THREADS;
  failed = census_pass(r, n, pids, pid, counts, rare_max, slot, rare, &threads);
  if (!failed && (keys = malloc((threads.count ? threads.count : 1) * sizeof *keys))) {
    for (size_t k = 0; k <= threads.mask; k++)
      if (threads.slots[k].index >= 0) keys[threads.slots[k].index] = (int64_t)threads.slots[k].key;
    qsort(keys, threads.count, sizeof *keys, omptpy_cmp_int64);
  }
  Py_END_ALLOW_THREADS;
  if (failed || !keys) {
    PyErr_NoMemory();
    goto done;
  }
  keys_obj = PyBytes_FromStringAndSize((const char *)keys, (Py_ssize_t)(threads.count * sizeof *keys));
  if (!keys_obj || !(rare_obj = PyList_New(0))) goto done;
  for (Py_ssize_t e = 0; e < OMPTPY_EVENT_NUMBERS; e++) {
    if (slot[e] <= 0) continue;
    const rare_rows *c = &rare[slot[e] - 1];
    PyObject *item = Py_BuildValue("ny#", e, (const char *)c->rows, c->n * (Py_ssize_t)8);
    if (!item || PyList_Append(rare_obj, item) < 0) {
      Py_XDECREF(item);
      goto done;
    }
    Py_DECREF(item);
  }
  result = PyTuple_Pack(2, keys_obj, rare_obj);
done:
  Py_XDECREF(keys_obj);
  Py_XDECREF(rare_obj);
  free(keys);
  for (Py_ssize_t k = 0; rare && k < OMPTPY_EVENT_NUMBERS; k++) free(rare[k].rows);
  free(rare);
  free(slot);
  omptpy_keyset_free(&threads);
  if (cb.obj) PyBuffer_Release(&cb);
  if (pb.obj) PyBuffer_Release(&pb);
  PyBuffer_Release(&rb);
  return result;
}

/* event_rows(records, group, outs): the rows of each group of events, in the
 * records' order, in one pass: group (uint8, OMPTPY_EVENT_NUMBERS entries) gives
 * each event number's group, 1 to len(outs), or 0 for none; outs[g - 1] (int64)
 * gets group g's rows and must hold exactly as many (census). */
PyObject *omptpy_py_event_rows(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *records, *group_obj, *outs;
  if (!PyArg_ParseTuple(args, "OOO!", &records, &group_obj, &PyList_Type, &outs)) return NULL;
  Py_ssize_t ngroups = PyList_GET_SIZE(outs);
  if (ngroups < 1 || ngroups > 255) {
    PyErr_SetString(PyExc_ValueError, "event_rows: 1 to 255 groups");
    return NULL;
  }
  Py_buffer rb, gb, ob[255];
  Py_ssize_t n, nout = 0;
  PyObject *result = NULL;
  const omptpy_record *r = records_of(records, &rb, &n);
  if (!r) return NULL;
  if (PyObject_GetBuffer(group_obj, &gb, PyBUF_C_CONTIGUOUS) < 0) goto no_group;
  int64_t *rows[256] = {0};
  Py_ssize_t cap[256] = {0}, at[256] = {0};
  if (gb.len != OMPTPY_EVENT_NUMBERS) {
    PyErr_SetString(PyExc_ValueError, "event_rows: group holds 65536 group numbers (uint8)");
    goto done;
  }
  for (; nout < ngroups; nout++) {
    if (PyObject_GetBuffer(PyList_GET_ITEM(outs, nout), &ob[nout],
                           PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
      goto done;
    rows[nout + 1] = ob[nout].buf;
    cap[nout + 1] = ob[nout].len / (Py_ssize_t)sizeof(int64_t);
  }
  const uint8_t *g = gb.buf;
  int overflow = 0;
  Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n; i++) {
    unsigned k = g[r[i].event];
    if (!k) continue;
    if (k > (unsigned)ngroups || at[k] == cap[k]) {
      overflow = 1;
      break;
    }
    rows[k][at[k]++] = i;
  }
  Py_END_ALLOW_THREADS for (Py_ssize_t k = 1; k <= ngroups && !overflow; k++) overflow =
      at[k] != cap[k];
  if (overflow) {
    PyErr_SetString(PyExc_ValueError,
                    "event_rows: a group's rows do not fill its output exactly (count them "
                    "with census on the same records), or a group number is out of range");
    goto done;
  }
  result = omptpy_py_none();
done:
  while (nout > 0) PyBuffer_Release(&ob[--nout]);
  PyBuffer_Release(&gb);
no_group:
  PyBuffer_Release(&rb);
  return result;
}
