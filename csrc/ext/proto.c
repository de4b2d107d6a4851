/*
 * The packets of the Perfetto protobuf export (io/perfetto_proto.py), written
 * without the GIL: the TrackEvent fields of each slice's begin (name, category,
 * debug annotations: proto_payloads), the order of the begins and ends on each
 * track (proto_nest), and the TracePackets of begins and ends (proto_packets)
 * and of counter values (omptpy_put_counter, for states.c's proto_waiting).
 * The Python side writes the few packets that are not per event (descriptors,
 * interned strings).
 *
 * Field numbers are those of Perfetto's protos: protos/perfetto/trace/
 * trace.proto, trace_packet.proto, track_event/track_event.proto and
 * track_event/debug_annotation.proto.
 */
#include "ext.h"

enum {
  TRACE_PACKET = 1,          /* Trace.packet */
  PACKET_TIMESTAMP = 8,      /* TracePacket.timestamp */
  PACKET_SEQUENCE_ID = 10,   /* TracePacket.trusted_packet_sequence_id */
  PACKET_TRACK_EVENT = 11,   /* TracePacket.track_event */
  PACKET_SEQUENCE_FLAGS = 13, /* TracePacket.sequence_flags */
  EVENT_DEBUG_ANNOTATIONS = 4,
  EVENT_TYPE = 9,
  EVENT_TRACK_UUID = 11,
  EVENT_COUNTER_VALUE = 30,
  EVENT_FLOW_IDS = 47,             /* repeated fixed64 */
  EVENT_TERMINATING_FLOW_IDS = 48, /* repeated fixed64 */
  ANNOTATION_NAME_IID = 1,
  ANNOTATION_UINT = 3,
  ANNOTATION_INT = 4,
  ANNOTATION_POINTER = 7,
};
enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2 };
enum { TYPE_SLICE_BEGIN = 1, TYPE_SLICE_END = 2, TYPE_COUNTER = 4 };
#define SEQ_NEEDS_INCREMENTAL_STATE 2
#define TAG(field, wire) ((uint64_t)(field) << 3 | (wire))
#define VARINT_MAX 10

static inline size_t varint_size(uint64_t v) {
  return v ? (size_t)(63 - __builtin_clzll(v)) / 7 + 1 : 1; /* 7 bits a byte */
}

static inline unsigned char *put_varint(unsigned char *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  *p++ = (unsigned char)v;
  return p;
}

static inline unsigned char *put_fixed64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
  return p + 8;
}

/* ---- proto_payloads ---------------------------------------------------------------- */

typedef struct {
  int kind;
  uint64_t key;
  omptpy_ints ints;
  const unsigned char *missing;
  const char **table;
  Py_ssize_t *table_len, ntable, table_max;
} payload_column;

static unsigned char *put_annotation_head(unsigned char *p, uint64_t name_iid, size_t value_len) {
  p = put_varint(p, TAG(EVENT_DEBUG_ANNOTATIONS, WIRE_LEN));
  p = put_varint(p, 1 + varint_size(name_iid) + value_len);
  *p++ = (unsigned char)TAG(ANNOTATION_NAME_IID, WIRE_VARINT);
  return put_varint(p, name_iid);
}

static unsigned char *put_payload(unsigned char *p, const payload_column *c, Py_ssize_t i) {
  if (c->missing && c->missing[i]) return p;
  uint64_t bits = omptpy_ints_bits(&c->ints, i);
  switch (c->kind) {
    case PROTO_FIELD:
      p = put_varint(p, TAG(c->key, WIRE_VARINT));
      return put_varint(p, bits);
    case PROTO_NUMBER:
    case PROTO_POINTER: {
      int field = c->kind == PROTO_POINTER ? ANNOTATION_POINTER
                  : c->ints.is_signed      ? ANNOTATION_INT
                                           : ANNOTATION_UINT;
      p = put_annotation_head(p, c->key, 1 + varint_size(bits));
      *p++ = (unsigned char)TAG(field, WIRE_VARINT);
      return put_varint(p, bits);
    }
    default: { /* PROTO_TABLE: a code of the table, whose entries are encoded fields */
      int negative;
      uint64_t code = omptpy_ints_get(&c->ints, i, &negative);
      if (negative || code >= (uint64_t)c->ntable || !c->table_len[code]) return p;
      size_t len = (size_t)c->table_len[code];
      if (c->key) p = put_annotation_head(p, c->key, len);
      memcpy(p, c->table[code], len);
      return p + len;
    }
  }
}

/* proto_payloads(parts, offsets): the fields a slice's begin adds to its
 * TrackEvent, per row of the parts' columns, one after the other (the rows of
 * each part after those of the part before); offsets (int64, rows + 1, written)
 * says where each row's start.  A part is a list of columns of as many rows; a
 * column is (kind, key, values, missing, table): PROTO_FIELD, a varint field
 * (key: its number); PROTO_NUMBER (int_value, or uint_value for unsigned
 * values) and PROTO_POINTER (pointer_value), a debug annotation (key: its
 * name's iid); PROTO_TABLE, the table's entry of each code (bytes: encoded
 * fields; empty or a code outside the table: nothing), as a debug annotation's
 * value (key: its name's iid) or, key 0, as they are.  missing: None, or a byte
 * per row (nonzero: nothing). */
PyObject *omptpy_py_proto_payloads(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *parts, *offsets_obj, *result = NULL;
  if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &parts, &offsets_obj)) return NULL;
  Py_ssize_t nparts = PyList_GET_SIZE(parts), ncol = 0, rows = 0, bound = 0;
  for (Py_ssize_t j = 0; j < nparts; j++) {
    PyObject *part = PyList_GET_ITEM(parts, j);
    if (!PyList_Check(part)) {
      PyErr_SetString(PyExc_TypeError, "proto_payloads: a part is a list of columns");
      return NULL;
    }
    ncol += PyList_GET_SIZE(part);
  }
  payload_column *col = PyMem_Calloc((size_t)ncol + 1, sizeof *col);
  Py_buffer *values = PyMem_Calloc((size_t)ncol + 1, sizeof *values);
  Py_buffer *missing = PyMem_Calloc((size_t)ncol + 1, sizeof *missing);
  /* per part: its first column and its rows */
  Py_ssize_t *part_col = PyMem_Calloc((size_t)nparts + 1, sizeof *part_col);
  Py_ssize_t *part_rows = PyMem_Calloc((size_t)nparts + 1, sizeof *part_rows);
  Py_buffer offsets_buf = {0};
  if (!col || !values || !missing || !part_col || !part_rows) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t j = 0, k = 0; j < nparts; j++) {
    PyObject *columns = PyList_GET_ITEM(parts, j);
    Py_ssize_t n = -1, row_bound = 0;
    part_col[j] = k;
    for (Py_ssize_t c_at = 0; c_at < PyList_GET_SIZE(columns); c_at++, k++) {
      payload_column *c = &col[k];
      PyObject *vals, *miss, *table;
      unsigned long long key;
      if (!PyArg_ParseTuple(PyList_GET_ITEM(columns, c_at), "iKOOO", &c->kind, &key, &vals,
                            &miss, &table))
        goto done;
      c->key = key;
      if (omptpy_get_ints(vals, &values[k], &c->ints, &n, "proto_payloads") < 0) goto done;
      if (miss != Py_None) {
        if (PyObject_GetBuffer(miss, &missing[k], PyBUF_SIMPLE) < 0) goto done;
        if (missing[k].len < n) {
          PyErr_SetString(PyExc_ValueError, "proto_payloads: a missing column too short");
          goto done;
        }
        c->missing = missing[k].buf;
      }
      if (c->kind < 0 || c->kind >= PROTO_KINDS ||
          (c->kind == PROTO_TABLE) != (table != Py_None) ||
          (table != Py_None && !PyTuple_Check(table))) {
        PyErr_SetString(PyExc_ValueError, "proto_payloads: a column of another kind");
        goto done;
      }
      Py_ssize_t width = 2 * VARINT_MAX + 8; /* an annotation's head and varint value */
      if (table != Py_None) {
        if (omptpy_bytes_table(table, &c->table, &c->table_len, &c->ntable, &c->table_max) < 0)
          goto done;
        width = c->table_max + 2 * VARINT_MAX + 4;
      }
      row_bound += width;
    }
    part_rows[j] = n < 0 ? 0 : n;
    if (part_rows[j] > 0 && row_bound > (PY_SSIZE_T_MAX - bound) / part_rows[j]) {
      PyErr_NoMemory();
      goto done;
    }
    bound += part_rows[j] * row_bound;
    rows += part_rows[j];
  }
  part_col[nparts] = ncol;
  Py_ssize_t noffsets = rows + 1;
  int64_t *offsets =
      omptpy_get_items(offsets_obj, &offsets_buf, 8, &noffsets, 1, "proto_payloads offsets");
  if (!offsets) goto done;
  result = PyBytes_FromStringAndSize(NULL, bound);
  if (!result) goto done;
  unsigned char *start = (unsigned char *)PyBytes_AS_STRING(result), *p = start;
  Py_BEGIN_ALLOW_THREADS;
  int64_t *offset = offsets;
  for (Py_ssize_t j = 0; j < nparts; j++) {
    const payload_column *first = &col[part_col[j]], *stop = &col[part_col[j + 1]];
    for (Py_ssize_t i = 0; i < part_rows[j]; i++) {
      *offset++ = p - start;
      for (const payload_column *c = first; c < stop; c++) p = put_payload(p, c, i);
    }
  }
  *offset = p - start;
  Py_END_ALLOW_THREADS;
  if (_PyBytes_Resize(&result, p - start) < 0) result = NULL;
done:
  for (Py_ssize_t k = 0; col && values && missing && k < ncol; k++) {
    PyMem_Free(col[k].table);
    PyMem_Free(col[k].table_len);
    if (values[k].obj) PyBuffer_Release(&values[k]);
    if (missing[k].obj) PyBuffer_Release(&missing[k]);
  }
  if (offsets_buf.obj) PyBuffer_Release(&offsets_buf);
  PyMem_Free(col);
  PyMem_Free(values);
  PyMem_Free(missing);
  PyMem_Free(part_col);
  PyMem_Free(part_rows);
  return result;
}

/* ---- proto_nest --------------------------------------------------------------------- */

typedef struct {
  int64_t *at;
  Py_ssize_t depth, cap;
} track_stack;

static int push(track_stack *s, int64_t slice) {
  if (s->depth == s->cap) {
    Py_ssize_t cap = s->cap ? 2 * s->cap : 16;
    int64_t *at = realloc(s->at, (size_t)cap * sizeof *at);
    if (!at) return -1;
    s->at = at;
    s->cap = cap;
  }
  s->at[s->depth++] = slice;
  return 0;
}

/* An item of an array of 4 or 8-byte integers, written. */
static inline void put_item(void *array, Py_ssize_t itemsize, Py_ssize_t i, int64_t value) {
  if (itemsize == 4)
    ((uint32_t *)array)[i] = (uint32_t)value;
  else
    ((int64_t *)array)[i] = value;
}

/* proto_nest(track, begin, end, runs, ntracks, query_track, query_time, query_slice, seq):
 * the order of the begins and ends of slices on their tracks (0 <= track <
 * ntracks).  The slices come in runs (runs: int64, the first slice of each and
 * then their number, ascending), each in the order of its begins; taken in the
 * order of their begins, at one time the earlier run first (the order of the
 * JSON file: at one time, parents first), they go on their track's stack: seq
 * (2 per slice, 4 or 8-byte items, written) lists slice i's begin as 2i and its
 * end as 2i + 1, each track's in the order a stack of slices has them (a slice
 * ends before the next begins on its track at or after its end).  A slice that
 * ends after the slice it begins in (they overlap) is cut at that end (end is
 * written): their number is returned.  Per query (a track and a time; the
 * times in order), the innermost slice on that track holding the time, begin
 * <= time < end or a slice of no length at it (-1: none), into query_slice. */
PyObject *omptpy_py_proto_nest(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *track_obj, *begin_obj, *end_obj, *runs_obj, *qtrack_obj, *qtime_obj, *qslice_obj;
  PyObject *seq_obj;
  Py_ssize_t ntracks, n = -1, nq = -1, nruns = -1, cut = 0;
  Py_buffer bufs[8] = {{0}};
  omptpy_ints track, qtrack;
  track_stack *stacks = NULL;
  Py_ssize_t *next = NULL, *live = NULL;
  PyObject *result = NULL;
  if (!PyArg_ParseTuple(args, "OOOOnOOOO", &track_obj, &begin_obj, &end_obj, &runs_obj,
                        &ntracks, &qtrack_obj, &qtime_obj, &qslice_obj, &seq_obj))
    return NULL;
  if (omptpy_get_ints(track_obj, &bufs[0], &track, &n, "proto_nest track") < 0) goto done;
  const int64_t *begin = omptpy_get_items(begin_obj, &bufs[1], 8, &n, 0, "proto_nest begin");
  int64_t *end = begin ? omptpy_get_items(end_obj, &bufs[2], 8, &n, 1, "proto_nest end") : NULL;
  const int64_t *runs =
      end ? omptpy_get_items(runs_obj, &bufs[7], 8, &nruns, 0, "proto_nest runs") : NULL;
  if (!runs || omptpy_get_ints(qtrack_obj, &bufs[3], &qtrack, &nq, "proto_nest query_track") < 0)
    goto done;
  const int64_t *qtime = omptpy_get_items(qtime_obj, &bufs[4], 8, &nq, 0, "proto_nest query_time");
  int64_t *qslice =
      qtime ? omptpy_get_items(qslice_obj, &bufs[5], 8, &nq, 1, "proto_nest query_slice") : NULL;
  if (!qslice ||
      PyObject_GetBuffer(seq_obj, &bufs[6], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
    goto done;
  void *seq = bufs[6].buf;
  Py_ssize_t width = bufs[6].itemsize;
  const char *bad = NULL;
  if ((width != 4 && width != 8) || bufs[6].len != 2 * n * width ||
      (width == 4 && 2 * n > (Py_ssize_t)UINT32_MAX))
    bad = "proto_nest: seq, 2 items per slice, of 4 bytes (fewer than 2^31 slices) or 8";
  for (Py_ssize_t r = 0; r + 1 < nruns && !bad; r++)
    if (runs[r] > runs[r + 1]) bad = "proto_nest: runs out of order";
  if (nruns < 1 || runs[0] != 0 || runs[nruns - 1] != n) bad = "proto_nest: runs from 0 to n";
  for (Py_ssize_t r = 0; r + 1 < nruns && !bad; r++)
    for (Py_ssize_t i = runs[r] + 1; i < runs[r + 1] && !bad; i++)
      if (begin[i] < begin[i - 1]) bad = "proto_nest: a run's begins out of order";
  for (Py_ssize_t i = 0; i < n + nq && !bad; i++) {
    int negative;
    uint64_t t = i < n ? omptpy_ints_get(&track, i, &negative)
                       : omptpy_ints_get(&qtrack, i - n, &negative);
    if (negative || t >= (uint64_t)ntracks) bad = "proto_nest: a track outside 0 .. ntracks - 1";
  }
  if (bad) {
    PyErr_SetString(PyExc_ValueError, bad);
    goto done;
  }
  stacks = calloc((size_t)ntracks + 1, sizeof *stacks);
  next = malloc((size_t)nruns * sizeof *next);
  live = malloc((size_t)nruns * sizeof *live);
  if (!stacks || !next || !live) {
    PyErr_NoMemory();
    goto done;
  }
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS;
  Py_ssize_t out = 0, q = 0;
  int negative;
  /* The runs with slices left, in order (those taken whole leave it). */
  Py_ssize_t nlive = 0;
  for (Py_ssize_t r = 0; r + 1 < nruns; r++) {
    next[r] = runs[r];
    if (runs[r] < runs[r + 1]) live[nlive++] = r;
  }
  for (Py_ssize_t taken = 0; taken <= n && !failed; taken++) {
    /* The next slice: the earliest begin of the runs' next ones (the first run at a tie). */
    Py_ssize_t i = -1, run = -1, at = -1;
    for (Py_ssize_t l = 0; l < nlive; l++) {
      Py_ssize_t r = live[l];
      if (i < 0 || begin[next[r]] < begin[i]) {
        i = next[r];
        run = r;
        at = l;
      }
    }
    /* The queries before this begin (all of them after the last slice). */
    for (; q < nq && (i < 0 || qtime[q] < begin[i]); q++) {
      track_stack *s = &stacks[omptpy_ints_get(&qtrack, q, &negative)];
      int64_t t = qtime[q];
      while (s->depth) {
        int64_t top = s->at[s->depth - 1];
        if (end[top] > t || (end[top] == t && begin[top] == t)) break;
        put_item(seq, width, out++, 2 * top + 1);
        s->depth--;
      }
      qslice[q] = s->depth ? s->at[s->depth - 1] : -1;
    }
    if (i < 0) break;
    if (++next[run] == runs[run + 1]) { /* the run taken whole */
      nlive--;
      memmove(&live[at], &live[at + 1], (size_t)(nlive - at) * sizeof *live);
    }
    track_stack *s = &stacks[omptpy_ints_get(&track, i, &negative)];
    while (s->depth && end[s->at[s->depth - 1]] <= begin[i])
      put_item(seq, width, out++, 2 * s->at[--s->depth] + 1);
    if (s->depth && end[i] > end[s->at[s->depth - 1]]) {
      end[i] = end[s->at[s->depth - 1]];
      cut++;
    }
    put_item(seq, width, out++, 2 * (int64_t)i);
    failed = push(s, i) < 0;
  }
  for (Py_ssize_t k = 0; k < ntracks; k++)
    while (stacks[k].depth) put_item(seq, width, out++, 2 * stacks[k].at[--stacks[k].depth] + 1);
  Py_END_ALLOW_THREADS;
  if (failed) {
    PyErr_NoMemory();
    goto done;
  }
  result = PyLong_FromSsize_t(cut);
done:
  for (Py_ssize_t k = 0; stacks && k < ntracks; k++) free(stacks[k].at);
  free(stacks);
  free(next);
  free(live);
  for (int b = 0; b < 8; b++)
    if (bufs[b].obj) PyBuffer_Release(&bufs[b]);
  return result;
}

/* ---- proto_slots --------------------------------------------------------------------- */

/* proto_slots(seq, starts, count, first, slots): of the begins that seq names
 * (its even items, 2 i: slice i), per source (starts: int64, ascending, the
 * first slice of each source and the end of the last, an item more than count
 * has) how many (count, int64, written) and the first of their slices (first,
 * int64, written; 0 for none); into slots (int64, at least an item per begin)
 * each begin's slot in the order proto_payloads gives payloads made source by
 * source, each source's in the order of its slices: the begins of the sources
 * before it, then its distance from its source's first.  Returns how many
 * begins; ValueError where a begin is of no source, or a source's begins are
 * not a range of its slices. */
PyObject *omptpy_py_proto_slots(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *objs[5], *result = NULL;
  Py_buffer bufs[5] = {{0}};
  if (!PyArg_ParseTuple(args, "OOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
    return NULL;
  omptpy_ints seqs;
  Py_ssize_t nseq = -1, nstarts = -1, nsources = -1, nslots = -1;
  if (omptpy_get_ints(objs[0], &bufs[0], &seqs, &nseq, "proto_slots seq") < 0) goto done;
  const int64_t *starts = omptpy_get_items(objs[1], &bufs[1], 8, &nstarts, 0, "proto_slots starts");
  if (!starts) goto done;
  nsources = nstarts - 1;
  int64_t *count = nsources < 0 ? NULL
                                 : omptpy_get_items(objs[2], &bufs[2], 8, &nsources, 1,
                                                    "proto_slots count");
  int64_t *first = count ? omptpy_get_items(objs[3], &bufs[3], 8, &nsources, 1,
                                            "proto_slots first")
                         : NULL;
  int64_t *slots =
      first ? omptpy_get_items(objs[4], &bufs[4], 8, &nslots, 1, "proto_slots slots") : NULL;
  if (!slots) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "proto_slots: starts, a source's first slice and an end");
    goto done;
  }
  if (nslots < nseq) {
    PyErr_SetString(PyExc_ValueError, "proto_slots: slots shorter than seq");
    goto done;
  }
  const char *bad = NULL;
  Py_ssize_t nbegins = 0;
  Py_BEGIN_ALLOW_THREADS;
  /* The begins' slices into slots (no branch on the data: begins and ends come
   * in no pattern), then each one's source (into srcs, by a branchless binary
   * search: the sources come in no pattern either), the sources' counts and
   * firsts, then each begin's slot. */
  int outside = 0;
  for (Py_ssize_t k = 0; k < nseq; k++) {
    int negative;
    uint64_t e = omptpy_ints_get(&seqs, k, &negative);
    outside |= negative;
    slots[nbegins] = (int64_t)(e / 2);
    nbegins += !(e & 1);
  }
  int64_t *base = malloc((size_t)(nsources + 1) * sizeof *base);
  Py_ssize_t *srcs = malloc((size_t)nbegins * sizeof *srcs + 1);
  if (!base || !srcs) bad = "";
  for (Py_ssize_t j = 0; !bad && j < nsources; j++) {
    count[j] = 0;
    first[j] = INT64_MAX;
  }
  for (Py_ssize_t k = 0; !bad && k < nbegins; k++) {
    int64_t i = slots[k];
    const int64_t *at = starts;
    for (Py_ssize_t len = nsources + 1; len > 1; len -= len / 2)
      at = at[len / 2] <= i ? at + len / 2 : at;
    Py_ssize_t src = at - starts;
    int out = (i < starts[0]) | (src >= nsources);
    outside |= out;
    src = out ? 0 : src;
    count[src]++;
    first[src] = i < first[src] ? i : first[src];
    srcs[k] = src;
  }
  if (!bad && (outside || (nsources == 0 && nbegins > 0)))
    bad = "proto_slots: seq names a slice that is not there";
  for (Py_ssize_t j = 0, at = 0; !bad && j < nsources; j++) {
    base[j] = at;
    at += count[j];
    if (!count[j]) first[j] = 0;
  }
  int ranged = 1;
  for (Py_ssize_t k = 0; !bad && k < nbegins; k++) {
    Py_ssize_t src = srcs[k];
    int64_t from_first = slots[k] - first[src];
    ranged &= from_first < count[src];
    slots[k] = base[src] + from_first;
  }
  if (!bad && !ranged) bad = "proto_slots: a source's begins are not a range of slices";
  free(srcs);
  free(base);
  Py_END_ALLOW_THREADS;
  if (bad && !*bad)
    PyErr_NoMemory();
  else if (bad)
    PyErr_SetString(PyExc_ValueError, bad);
  else
    result = PyLong_FromSsize_t(nbegins);
done:
  for (int b = 0; b < 5; b++)
    if (bufs[b].obj) PyBuffer_Release(&bufs[b]);
  return result;
}

/* ---- proto_packets, the counter's packets ----------------------------------------------------- */

/* The flows from or to the slice `slice`: the range of `pos` (sorted) equal to it.
 * Most slices have none and lie outside pos's range (the flows are the tasks'):
 * found so without a search. */
static void flow_range(const int64_t *pos, Py_ssize_t n, int64_t slice, Py_ssize_t *first,
                       Py_ssize_t *last) {
  Py_ssize_t lo = 0, hi = n;
  if (n == 0 || slice < pos[0] || slice > pos[n - 1]) {
    *first = *last = 0;
    return;
  }
  while (lo < hi) {
    Py_ssize_t mid = lo + (hi - lo) / 2;
    if (pos[mid] < slice) lo = mid + 1;
    else hi = mid;
  }
  *first = lo;
  while (lo < n && pos[lo] == slice) lo++;
  *last = lo;
}

/* A TracePacket's head: Trace.packet's tag and length, the timestamp and the
 * sequence (and its flags, when nonzero), and the track_event's tag and length. */
static unsigned char *put_packet_head(unsigned char *p, uint64_t time, uint64_t sequence,
                                      uint64_t flags, size_t event_len) {
  size_t inner = 1 + varint_size(time) + 1 + varint_size(sequence) +
                 (flags ? 1 + varint_size(flags) : 0) + 1 + varint_size(event_len) + event_len;
  *p++ = (unsigned char)TAG(TRACE_PACKET, WIRE_LEN);
  p = put_varint(p, inner);
  *p++ = (unsigned char)TAG(PACKET_TIMESTAMP, WIRE_VARINT);
  p = put_varint(p, time);
  *p++ = (unsigned char)TAG(PACKET_SEQUENCE_ID, WIRE_VARINT);
  p = put_varint(p, sequence);
  if (flags) {
    *p++ = (unsigned char)TAG(PACKET_SEQUENCE_FLAGS, WIRE_VARINT);
    p = put_varint(p, flags);
  }
  *p++ = (unsigned char)TAG(PACKET_TRACK_EVENT, WIRE_LEN);
  return put_varint(p, event_len);
}

/* proto_packets(seq, begin, end, track, uuids, payload, offsets, slots, flows_from,
 * from_ids, flows_to, to_ids, sequence): the TracePackets (as a Trace's
 * bytes) of the begins and ends `seq` lists (proto_nest's, or a part of it):
 * a begin of slice i at begin[i] on the track of uuid uuids[track[i]], with
 * the k-th begin's fields payload[offsets[s]:offsets[s + 1]], s = slots[k], and the flows
 * from it (ids from_ids where flows_from, sorted, is i) and to it (to_ids
 * where flows_to is i); an end at end[i].  All on trusted sequence
 * `sequence`, whose interned data the begins need. */
PyObject *omptpy_py_proto_packets(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *objs[11], *result = NULL;
  Py_buffer bufs[11] = {{0}};
  unsigned long long sequence;
  Py_ssize_t n = -1, nseq = -1, ntracks = -1, nfrom = -1, nto = -1, nslots = -1;
  omptpy_ints seqs, track, uuids, from_ids, to_ids, slots;
  const char *payload;
  Py_ssize_t payload_len;
  if (!PyArg_ParseTuple(args, "OOOOOy#OOOOOOK", &objs[0], &objs[1], &objs[2], &objs[3],
                        &objs[4], &payload, &payload_len, &objs[5], &objs[10], &objs[6],
                        &objs[7], &objs[8], &objs[9], &sequence))
    return NULL;
  if (omptpy_get_ints(objs[0], &bufs[0], &seqs, &nseq, "proto_packets seq") < 0 ||
      omptpy_get_ints(objs[3], &bufs[3], &track, &n, "proto_packets track") < 0 ||
      omptpy_get_ints(objs[4], &bufs[4], &uuids, &ntracks, "proto_packets uuids") < 0)
    goto done;
  const int64_t *begin = omptpy_get_items(objs[1], &bufs[1], 8, &n, 0, "proto_packets begin");
  const int64_t *end =
      begin ? omptpy_get_items(objs[2], &bufs[2], 8, &n, 0, "proto_packets end") : NULL;
  if (!end) goto done;
  Py_ssize_t nbegins = 0;
  int bad = 0;
  Py_BEGIN_ALLOW_THREADS; /* the checks too: the other batches' threads go on */
  for (Py_ssize_t k = 0; k < nseq && !bad; k++) { /* the slices seq names (tracks: below) */
    int negative;
    uint64_t e = omptpy_ints_get(&seqs, k, &negative);
    bad = negative || e / 2 >= (uint64_t)n;
    nbegins += !(e & 1);
  }
  Py_END_ALLOW_THREADS;
  if (bad) {
    PyErr_SetString(PyExc_ValueError, "proto_packets: seq names a slice that is not there");
    goto done;
  }
  nslots = nbegins;
  Py_ssize_t noffsets = nbegins + 1;
  const int64_t *offsets =
      omptpy_get_items(objs[5], &bufs[5], 8, &noffsets, 0, "proto_packets offsets");
  if (!offsets || omptpy_get_ints(objs[10], &bufs[10], &slots, &nslots, "proto_packets slots") < 0)
    goto done;
  Py_BEGIN_ALLOW_THREADS;
  for (Py_ssize_t k = 0; k < nbegins && !bad; k++) {
    int negative;
    uint64_t slot = omptpy_ints_get(&slots, k, &negative);
    bad = offsets[k] < 0 || offsets[k] > offsets[k + 1] || offsets[k + 1] > payload_len ||
          negative || slot >= (uint64_t)nbegins;
  }
  Py_END_ALLOW_THREADS;
  if (bad) {
    PyErr_SetString(PyExc_ValueError, "proto_packets: offsets outside the payload");
    goto done;
  }
  const int64_t *from =
      omptpy_get_items(objs[6], &bufs[6], 8, &nfrom, 0, "proto_packets flows_from");
  if (!from || omptpy_get_ints(objs[7], &bufs[7], &from_ids, &nfrom, "proto_packets from_ids") < 0)
    goto done;
  const int64_t *to = omptpy_get_items(objs[8], &bufs[8], 8, &nto, 0, "proto_packets flows_to");
  if (!to || omptpy_get_ints(objs[9], &bufs[9], &to_ids, &nto, "proto_packets to_ids") < 0)
    goto done;
  /* Bound: a packet's head and type and track, its payload and flows. */
  Py_ssize_t bound = nseq * (3 * VARINT_MAX + 16) + payload_len + 10 * (nfrom + nto) + 1;
  result = PyBytes_FromStringAndSize(NULL, bound);
  if (!result) goto done;
  unsigned char *start = (unsigned char *)PyBytes_AS_STRING(result), *p = start;
  int no_uuid = 0;
  Py_BEGIN_ALLOW_THREADS;
  Py_ssize_t k = 0;
  for (Py_ssize_t j = 0; j < nseq; j++) {
    int negative;
    if (j + OMPTPY_FETCH_AHEAD < nseq) { /* the slices seq names lie far apart: fetched ahead */
      uint64_t ahead = omptpy_ints_get(&seqs, j + OMPTPY_FETCH_AHEAD, &negative);
      __builtin_prefetch(track.values + track.itemsize * (Py_ssize_t)(ahead / 2));
      __builtin_prefetch((ahead & 1 ? end : begin) + ahead / 2);
    }
    uint64_t e = omptpy_ints_get(&seqs, j, &negative);
    int64_t i = (int64_t)(e / 2);
    uint64_t t = omptpy_ints_get(&track, i, &negative);
    if (negative || t >= (uint64_t)ntracks) { /* read here, where it is used */
      no_uuid = 1;
      break;
    }
    uint64_t uuid = omptpy_ints_bits(&uuids, (Py_ssize_t)t);
    size_t event_len = 2 + 1 + varint_size(uuid);
    if (e & 1) {
      p = put_packet_head(p, (uint64_t)end[i], sequence, 0, event_len);
      *p++ = (unsigned char)TAG(EVENT_TYPE, WIRE_VARINT);
      *p++ = TYPE_SLICE_END;
    } else {
      Py_ssize_t f0, f1, t0, t1;
      flow_range(from, nfrom, i, &f0, &f1);
      flow_range(to, nto, i, &t0, &t1);
      Py_ssize_t slot = (Py_ssize_t)omptpy_ints_get(&slots, k, &negative);
      size_t len = (size_t)(offsets[slot + 1] - offsets[slot]);
      event_len += len + 10 * (size_t)(f1 - f0 + t1 - t0);
      p = put_packet_head(p, (uint64_t)begin[i], sequence, SEQ_NEEDS_INCREMENTAL_STATE, event_len);
      *p++ = (unsigned char)TAG(EVENT_TYPE, WIRE_VARINT);
      *p++ = TYPE_SLICE_BEGIN;
      memcpy(p, payload + offsets[slot], len);
      p += len;
      k++;
      for (Py_ssize_t f = f0; f < f1; f++) {
        p = put_varint(p, TAG(EVENT_FLOW_IDS, WIRE_FIXED64));
        p = put_fixed64(p, omptpy_ints_bits(&from_ids, f));
      }
      for (Py_ssize_t f = t0; f < t1; f++) {
        p = put_varint(p, TAG(EVENT_TERMINATING_FLOW_IDS, WIRE_FIXED64));
        p = put_fixed64(p, omptpy_ints_bits(&to_ids, f));
      }
    }
    *p++ = (unsigned char)TAG(EVENT_TRACK_UUID, WIRE_VARINT);
    p = put_varint(p, uuid);
  }
  Py_END_ALLOW_THREADS;
  if (no_uuid) {
    PyErr_SetString(PyExc_ValueError, "proto_packets: a track without a uuid");
    Py_CLEAR(result);
  } else if (_PyBytes_Resize(&result, p - start) < 0) {
    result = NULL;
  }
done:
  for (int b = 0; b < 11; b++)
    if (bufs[b].obj) PyBuffer_Release(&bufs[b]);
  return result;
}

/* A counter's TracePacket (at most OMPTPY_COUNTER_PACKET_MAX bytes) at p: counter
 * `uuid`'s value at `time`, on trusted sequence `sequence`; returns its end. */
unsigned char *omptpy_put_counter(unsigned char *p, uint64_t time, uint64_t uuid,
                                  uint64_t value, uint64_t sequence) {
  p = put_packet_head(p, time, sequence, 0, 2 + 1 + varint_size(uuid) + 2 + varint_size(value));
  *p++ = (unsigned char)TAG(EVENT_TYPE, WIRE_VARINT);
  *p++ = TYPE_COUNTER;
  *p++ = (unsigned char)TAG(EVENT_TRACK_UUID, WIRE_VARINT);
  p = put_varint(p, uuid);
  p = put_varint(p, TAG(EVENT_COUNTER_VALUE, WIRE_VARINT));
  return put_varint(p, value);
}
