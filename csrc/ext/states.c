/*
 * The thread states' interval kernels (ompt_py/analysis/states.py), each a
 * pass without the GIL:
 *
 * - sweep(): every group's intervals (begin and end points of several layers,
 *   each layer's arrays read where they are) in time order, the layers open
 *   over each piece between two points, that set's state from a table,
 *   adjacent pieces of one group and state merged (counted, then written into
 *   outputs of their exact size);
 * - cumulative(): the time a group spent in each state of such segments
 *   before each of some times, or between two.
 *
 * Both put their points in group order (a counting sort), then each group's
 * in time order (sort_keys: a merge of the runs the tables come in, or a radix
 * sort).  The order of points of one group and time does not matter: a
 * piece's state is taken after every point at its start.
 *
 * - waiting(): the exports' counter of threads waiting, per process after each
 *   change: each thread's waits made spells, their points sorted by process and
 *   time (sort_keys), counted.
 */
#include "ext.h"

#include <stdlib.h>

enum { DIGIT_BITS = 11, DIGITS = 1 << DIGIT_BITS, MAX_RUNS = 64 };

/* Moves item i of (keys, payload) to item j of (to, to_payload). */
static inline void move(uint64_t *to, uint32_t *to_payload, size_t j, const uint64_t *keys,
                        const uint32_t *payload, size_t i) {
  to[j] = keys[i];
  if (payload) to_payload[j] = payload[i];
}

/* After a pass: what it wrote is read by the next. */
static inline void flip(uint64_t **src, uint64_t **dst, uint32_t **psrc, uint32_t **pdst) {
  uint64_t *k = *src;
  *src = *dst;
  *dst = k;
  uint32_t *p = *psrc;
  *psrc = *pdst;
  *pdst = p;
}

/* The runs of keys in order (keys >> low not decreasing): their starts into
 * run[0..], n at the end; the number of runs, or MAX_RUNS + 1 when more. */
static int find_runs(const uint64_t *keys, size_t n, int low, size_t *run) {
  int runs = 0;
  run[runs++] = 0;
  for (size_t i = 1; i < n; i++) {
    if (keys[i] >> low < keys[i - 1] >> low) {
      if (runs == MAX_RUNS) return MAX_RUNS + 1;
      run[runs++] = i;
    }
  }
  run[runs] = n;
  return runs;
}

/* Sorts keys[0..n) (and payload with them, when not NULL) by their bits from
 * `low` up, with tmp and tmp_payload as large; the result is left in keys and
 * payload.  The tables come as a few runs in order (a layer's begins, its
 * ends), which a merge of the runs sorts in a few sequential passes; else a
 * least-significant-digit radix sort (11-bit digits, the digits every key
 * shares skipped): a fixed few passes whatever the order. */
static void sort_keys(uint64_t *keys, uint32_t *payload, uint64_t *tmp, uint32_t *tmp_payload,
                      size_t n, int low, size_t *counts) {
  size_t run[MAX_RUNS + 1];
  int runs = n ? find_runs(keys, n, low, run) : 1;
  uint64_t *src = keys, *dst = tmp;
  uint32_t *psrc = payload, *pdst = tmp_payload;
  if (runs <= MAX_RUNS) {
    while (runs > 1) { /* each pass merges pairs of runs */
      int merged = 0;
      for (int r = 0; r < runs; r += 2) {
        size_t i = run[r], mid = run[r + 1], j = mid, stop = r + 2 <= runs ? run[r + 2] : mid;
        size_t at = i;
        while (i < mid && j < stop)
          if (src[j] >> low < src[i] >> low) move(dst, pdst, at++, src, psrc, j++);
          else move(dst, pdst, at++, src, psrc, i++);
        for (; i < mid; i++) move(dst, pdst, at++, src, psrc, i);
        for (; j < stop; j++) move(dst, pdst, at++, src, psrc, j);
        run[merged++] = run[r];
      }
      run[merged] = n;
      runs = merged;
      flip(&src, &dst, &psrc, &pdst);
    }
  } else {
    int digits = (64 - low + DIGIT_BITS - 1) / DIGIT_BITS;
    memset(counts, 0, (size_t)digits * DIGITS * sizeof(size_t));
    for (size_t i = 0; i < n; i++)
      for (int d = 0; d < digits; d++)
        counts[d * DIGITS + ((keys[i] >> (low + d * DIGIT_BITS)) & (DIGITS - 1))]++;
    for (int d = 0; d < digits; d++) {
      size_t *c = counts + (size_t)d * DIGITS, sum = 0, largest = 0;
      for (size_t b = 0; b < DIGITS; b++) {
        size_t k = c[b];
        if (k > largest) largest = k;
        c[b] = sum;
        sum += k;
      }
      if (largest == n) continue; /* every key has this digit */
      int shift = low + d * DIGIT_BITS;
      for (size_t i = 0; i < n; i++) move(dst, pdst, c[(src[i] >> shift) & (DIGITS - 1)]++, src, psrc, i);
      flip(&src, &dst, &psrc, &pdst);
    }
  }
  if (src != keys) {
    memcpy(keys, src, n * sizeof(uint64_t));
    if (payload) memcpy(payload, psrc, n * sizeof(uint32_t));
  }
}

/* Where each group's points start in an array of them in group order: first[g]
 * from the count of group g - 1 in first[g] (first has groups + 1 items). */
static void starts(size_t *first, uint32_t groups) {
  for (uint32_t g = 1; g <= groups; g++) first[g] += first[g - 1];
}

/* Memory for the kernels' points: NULL when out of it. */
static void *scratch(size_t n, size_t size) {
  void *p = malloc(n ? n * size : 1);
  if (p) omptpy_populate(p, (Py_ssize_t)(n * size));
  return p;
}

static void release_all(Py_buffer *b, int n) {
  for (int i = 0; i < n; i++)
    if (b[i].obj) PyBuffer_Release(&b[i]);
}

/* A bytearray of n items of `size` bytes, NULL with an exception. */
static PyObject *new_output(Py_ssize_t n, Py_ssize_t size) {
  return PyByteArray_FromStringAndSize(NULL, n * size > 0 ? n * size : 0);
}

/* A point's key in sweep(): its time from the earliest above TAG_BITS bits
 * of layer << 1 | is_end. */
enum { TAG_BITS = 5, MAX_LAYERS = 1 << (TAG_BITS - 1) };

/* The position of key among the sorted distinct keys[0..n), or -1. */
static Py_ssize_t key_at(const int64_t *keys, Py_ssize_t n, int64_t key) {
  Py_ssize_t lo = 0, hi = n;
  while (lo < hi) {
    Py_ssize_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && keys[lo] == key ? lo : -1;
}

/* A layer's intervals: their groups' keys, begins and ends. */
typedef struct {
  const int64_t *group, *begin, *end;
  Py_ssize_t n;
} sweep_layer;

/* Where sweep() writes its segments (first: where each group's start). */
typedef struct {
  int64_t *first, *begin, *end;
  int8_t *state;
} sweep_out;

/* The walk over every group's points: each layer's depth (intervals begun and
 * not ended), the set of open layers, the segments so far and the last one. */
typedef struct {
  int64_t depth[MAX_LAYERS];
  uint32_t open;
  size_t count;
  uint32_t last_group;
  int8_t last_state;
  int64_t last_end;
} sweep_walk;

/* The segments of group g's points keys[from..to) (in time order): each
 * written at w->count when out is not NULL (else only counted), or the last
 * one extended when it goes on in the same state. */
static void walk_group(sweep_walk *w, const uint64_t *keys, size_t from, size_t to, uint32_t g,
                       int64_t lo, const int8_t *table, const sweep_out *out) {
  for (size_t i = from; i < to; i++) {
    int k = (int)(keys[i] >> 1 & (MAX_LAYERS - 1));
    w->depth[k] += (keys[i] & 1) ? -1 : 1;
    w->open = w->depth[k] > 0 ? w->open | (1u << k) : w->open & ~(1u << k);
    uint64_t t = keys[i] >> TAG_BITS;
    if (i + 1 == to || keys[i + 1] >> TAG_BITS == t) continue;
    int8_t state = table[w->open];
    if (state < 0) continue;
    int64_t a = (int64_t)(t + (uint64_t)lo), z = (int64_t)((keys[i + 1] >> TAG_BITS) + (uint64_t)lo);
    if (w->count && w->last_group == g && w->last_state == state && w->last_end == a) {
      if (out) out->end[w->count - 1] = z;
    } else {
      if (out) {
        out->begin[w->count] = a;
        out->end[w->count] = z;
        out->state[w->count] = state;
      }
      w->count++;
      w->last_group = g;
      w->last_state = state;
    }
    w->last_end = z;
  }
}

/* sweep(layers, keys, table) -> (first, begin, end, state)
 * layers: a sequence of (group, begin, end), int64 arrays of one length each,
 * layer k the k-th; keys: int64, the groups' keys, sorted and distinct, every
 * group among them; table: int8, the state of each set of open layers (bit k:
 * layer k has more intervals begun than ended), -1 for none, 2**len(layers)
 * items.  Returns four bytearrays: where each group's segments start (int64,
 * one per key and their number at the end: group g's are [first[g],
 * first[g + 1])) and the segments' begin, end (int64) and state (int8), sorted
 * by group then begin.  The layers are read where they are (no array of them
 * all made). */
PyObject *omptpy_py_sweep(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *layers_arg, *keys_obj, *table_obj, *result = NULL, *outs[4] = {0};
  if (!PyArg_ParseTuple(args, "OOO", &layers_arg, &keys_obj, &table_obj)) return NULL;
  PyObject *seq = PySequence_Fast(layers_arg, "sweep: layers, a sequence of (group, begin, end)");
  if (!seq) return NULL;
  Py_ssize_t nl = PySequence_Fast_GET_SIZE(seq), nkeys = -1, nt = -1;
  Py_buffer b[3 * MAX_LAYERS + 2] = {{0}};
  sweep_layer lay[MAX_LAYERS];
  uint64_t *keys = NULL, *tmp = NULL;
  size_t *first = NULL, *counts = NULL;
  if (nl > MAX_LAYERS) {
    PyErr_Format(PyExc_ValueError, "sweep: at most %d layers", (int)MAX_LAYERS);
    goto done;
  }
  if (!omptpy_get_items(keys_obj, &b[0], 8, &nkeys, 0, "sweep: keys") ||
      !omptpy_get_items(table_obj, &b[1], 1, &nt, 0, "sweep: table"))
    goto done;
  if (nt != (Py_ssize_t)1 << nl) {
    PyErr_Format(PyExc_ValueError, "sweep: a table of 2**%zd states for %zd layers, not %zd", nl,
                 nl, nt);
    goto done;
  }
  const int64_t *gkeys = b[0].buf;
  const int8_t *table = b[1].buf;
  for (Py_ssize_t i = 1; i < nkeys; i++) {
    if (gkeys[i] <= gkeys[i - 1]) {
      PyErr_SetString(PyExc_ValueError, "sweep: keys not sorted and distinct");
      goto done;
    }
  }
  if (nkeys >= UINT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "sweep: groups in 32 bits");
    goto done;
  }
  size_t n = 0;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (Py_ssize_t k = 0; k < nl; k++) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, k), *g, *bg, *en;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
      PyErr_SetString(PyExc_TypeError, "sweep: a layer is a tuple (group, begin, end)");
      goto done;
    }
    g = PyTuple_GET_ITEM(item, 0);
    bg = PyTuple_GET_ITEM(item, 1);
    en = PyTuple_GET_ITEM(item, 2);
    Py_ssize_t len = -1;
    Py_buffer *kb = &b[2 + 3 * k];
    if (!omptpy_get_items(g, &kb[0], 8, &len, 0, "sweep: group") ||
        !omptpy_get_items(bg, &kb[1], 8, &len, 0, "sweep: begin") ||
        !omptpy_get_items(en, &kb[2], 8, &len, 0, "sweep: end"))
      goto done;
    lay[k] = (sweep_layer){kb[0].buf, kb[1].buf, kb[2].buf, len};
    for (Py_ssize_t i = 0; i < len; i++) {
      if (key_at(gkeys, nkeys, lay[k].group[i]) < 0) {
        PyErr_Format(PyExc_ValueError, "sweep: interval %zd of layer %zd has a group not in keys",
                     i, k);
        goto done;
      }
      int64_t a = lay[k].begin[i], z = lay[k].end[i];
      lo = a < lo ? a : lo;
      lo = z < lo ? z : lo;
      hi = a > hi ? a : hi;
      hi = z > hi ? z : hi;
    }
    n += (size_t)len;
  }
  if (n && ((uint64_t)hi - (uint64_t)lo) >> (64 - TAG_BITS)) {
    PyErr_SetString(PyExc_ValueError,
                    "sweep: the intervals span more than 2**59 ns (18 years): their times are "
                    "not a trace's");
    goto done;
  }
  if (n > (PY_SSIZE_T_MAX / 4) / sizeof(uint64_t)) {
    PyErr_NoMemory();
    goto done;
  }
  uint32_t groups = (uint32_t)nkeys;
  keys = scratch(2 * n, sizeof(uint64_t));
  first = calloc((size_t)groups + 2, sizeof(size_t));
  counts = malloc((64 / DIGIT_BITS + 1) * DIGITS * sizeof(size_t));
  if (!keys || !first || !counts) {
    PyErr_NoMemory();
    goto done;
  }
  /* The points in group order (a counting sort), each group's begins then its
   * ends (a layer's in its order: runs, see sort_keys); the largest group's. */
  size_t largest = 0;
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t k = 0; k < nl; k++)
    for (Py_ssize_t i = 0; i < lay[k].n; i++) first[key_at(gkeys, nkeys, lay[k].group[i]) + 1] += 2;
  for (uint32_t g = 1; g <= groups; g++) largest = first[g] > largest ? first[g] : largest;
  starts(first, groups);
  for (int end = 0; end < 2; end++)
    for (Py_ssize_t k = 0; k < nl; k++)
      for (Py_ssize_t i = 0; i < lay[k].n; i++)
        keys[first[key_at(gkeys, nkeys, lay[k].group[i])]++] =
            ((uint64_t)(end ? lay[k].end : lay[k].begin)[i] - (uint64_t)lo) << TAG_BITS |
            (uint64_t)k << 1 | (uint64_t)end;
  Py_END_ALLOW_THREADS
  tmp = scratch(largest, sizeof(uint64_t));
  if (!tmp) {
    PyErr_NoMemory();
    goto done;
  }
  /* Each group sorted by time and its segments counted; then written, exactly
   * as many (each layer's depth is a running sum over every group before: a
   * group ends where it began). */
  sweep_walk w = {{0}, 0, 0, 0, 0, 0};
  Py_BEGIN_ALLOW_THREADS
  size_t from = 0;
  for (uint32_t g = 0; g < groups; g++) {
    sort_keys(keys + from, NULL, tmp, NULL, first[g] - from, TAG_BITS, counts);
    walk_group(&w, keys, from, first[g], g, lo, table, NULL);
    from = first[g];
  }
  Py_END_ALLOW_THREADS
  free(tmp);
  tmp = NULL;
  Py_ssize_t count = (Py_ssize_t)w.count;
  for (int k = 0; k < 4; k++)
    if (!(outs[k] = new_output(k == 0 ? (Py_ssize_t)groups + 1 : count, k == 3 ? 1 : 8))) goto done;
  sweep_out out = {(int64_t *)PyByteArray_AS_STRING(outs[0]), (int64_t *)PyByteArray_AS_STRING(outs[1]),
                   (int64_t *)PyByteArray_AS_STRING(outs[2]), (int8_t *)PyByteArray_AS_STRING(outs[3])};
  w = (sweep_walk){{0}, 0, 0, 0, 0, 0};
  Py_BEGIN_ALLOW_THREADS
  size_t from = 0;
  for (uint32_t g = 0; g < groups; g++) {
    out.first[g] = (int64_t)w.count;
    walk_group(&w, keys, from, first[g], g, lo, table, &out);
    from = first[g];
  }
  out.first[groups] = (int64_t)w.count;
  Py_END_ALLOW_THREADS
  result = PyTuple_Pack(4, outs[0], outs[1], outs[2], outs[3]);
done:
  free(keys);
  free(tmp);
  free(first);
  free(counts);
  for (int k = 0; k < 4; k++) Py_XDECREF(outs[k]);
  release_all(b, 3 * MAX_LAYERS + 2);
  Py_DECREF(seq);
  return result;
}

/* cumulative(first, begin, end, state, query_group, query_time, out, spans)
 * The segments (sweep's: first, int64, where each group's start and their
 * number at the end; begin, end: int64, disjoint in a group and sorted by
 * begin; state: int8) and queries (query_group: int32, a group or -1 for one
 * without segments; query_time: int64): out
 * (int64, zeros) gets, per state, each query's group's time before its time
 * (spans false: queries x states), or with spans the time between each of the
 * first half of the queries and the same one of the second half (the spans'
 * begins then ends: queries / 2 x states). */
PyObject *omptpy_py_cumulative(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *objs[7], *result = NULL;
  int spans;
  if (!PyArg_ParseTuple(args, "OOOOOOOp", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                        &objs[5], &objs[6], &spans))
    return NULL;
  Py_buffer b[7] = {{0}};
  Py_ssize_t nf = -1, n = -1, q = -1, no = -1;
  if (!omptpy_get_items(objs[0], &b[0], 8, &nf, 0, "cumulative: first") ||
      !omptpy_get_items(objs[1], &b[1], 8, &n, 0, "cumulative: begin") ||
      !omptpy_get_items(objs[2], &b[2], 8, &n, 0, "cumulative: end") ||
      !omptpy_get_items(objs[3], &b[3], 1, &n, 0, "cumulative: state") ||
      !omptpy_get_items(objs[4], &b[4], 4, &q, 0, "cumulative: query_group") ||
      !omptpy_get_items(objs[5], &b[5], 8, &q, 0, "cumulative: query_time") ||
      !omptpy_get_items(objs[6], &b[6], 8, &no, 1, "cumulative: out"))
    goto done;
  Py_ssize_t states = b[6].ndim == 2 ? b[6].shape[1] : 0;
  Py_ssize_t out_rows = spans ? q / 2 : q;
  if (b[6].ndim != 2 || b[6].shape[0] != out_rows || (spans && q % 2) || states < 1 ||
      states > 64 || q >= UINT32_MAX || nf < 1 || nf > UINT32_MAX) {
    PyErr_SetString(PyExc_ValueError,
                    "cumulative: out of shape (queries, states) or, with spans, (queries / 2, "
                    "states), at most 64 states, 2**32 rows; first of 1 to 2**32 items");
    goto done;
  }
  const int32_t *qgroup = b[4].buf;
  const int64_t *first_seg = b[0].buf, *begin = b[1].buf, *end = b[2].buf, *qtime = b[5].buf;
  const int8_t *state = b[3].buf;
  int64_t *out = b[6].buf;
  uint32_t groups = (uint32_t)(nf - 1);
  for (uint32_t g = 0; g <= groups; g++) {
    if ((g ? first_seg[g] < first_seg[g - 1] : first_seg[g] != 0) || first_seg[g] > n ||
        (g == groups && first_seg[g] != n)) {
      PyErr_Format(PyExc_ValueError,
                   "cumulative: first[%u] = %lld: not where group %u's segments start (from 0, "
                   "not decreasing, the segments' number at the end)", (unsigned)g,
                   (long long)first_seg[g], (unsigned)g);
      goto done;
    }
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    if (state[i] < 0 || state[i] >= states) {
      PyErr_Format(PyExc_ValueError, "cumulative: segment %zd has state %d, not one of %zd", i,
                   (int)state[i], states);
      goto done;
    }
  }
  int64_t lo = INT64_MAX;
  for (Py_ssize_t i = 0; i < q; i++) {
    if (qgroup[i] < -1 || qgroup[i] >= (int64_t)groups) {
      PyErr_Format(PyExc_ValueError, "cumulative: query %zd has group %d, not a segment's", i,
                   (int)qgroup[i]);
      goto done;
    }
    lo = qtime[i] < lo ? qtime[i] : lo;
  }
  uint64_t *keys = scratch((size_t)q, sizeof(uint64_t)), *tmp = scratch((size_t)q, sizeof(uint64_t));
  uint32_t *rows = scratch((size_t)q, sizeof(uint32_t)), *tmp_rows = scratch((size_t)q, sizeof(uint32_t));
  size_t *first = calloc((size_t)groups + 2, sizeof(size_t));
  size_t *counts = malloc((64 / DIGIT_BITS + 1) * DIGITS * sizeof(size_t));
  int failed = !keys || !tmp || !rows || !tmp_rows || !first || !counts;
  Py_BEGIN_ALLOW_THREADS
  if (!failed) {
    /* The queries in group order (a counting sort), then each group's by time. */
    for (Py_ssize_t i = 0; i < q; i++)
      if (qgroup[i] >= 0) first[qgroup[i] + 1]++;
    starts(first, groups);
    for (Py_ssize_t i = 0; i < q; i++) {
      if (qgroup[i] < 0) continue;
      size_t at = first[qgroup[i]]++;
      keys[at] = (uint64_t)qtime[i] - (uint64_t)lo;
      rows[at] = (uint32_t)i;
    }
    int64_t sums[64];
    size_t from = 0;
    for (uint32_t g = 0; g < groups; g++) {
      size_t to = first[g];
      sort_keys(keys + from, rows + from, tmp, tmp_rows, to - from, 0, counts);
      /* The group's segments walked once along its queries in time order. */
      size_t j = (size_t)first_seg[g], stop = (size_t)first_seg[g + 1];
      memset(sums, 0, sizeof(sums));
      for (size_t i = from; i < to; i++) {
        int64_t t = (int64_t)(keys[i] + (uint64_t)lo);
        for (; j < stop && begin[j] < t && end[j] <= t; j++) sums[state[j]] += end[j] - begin[j];
        int64_t partial = j < stop && begin[j] < t ? t - begin[j] : 0;
        if (!spans) {
          int64_t *row = out + (size_t)rows[i] * (size_t)states;
          memcpy(row, sums, (size_t)states * sizeof(int64_t));
          if (partial) row[state[j]] += partial;
          continue;
        }
        /* A span's begin takes the time before it off, its end adds the time before it. */
        int after = rows[i] >= (uint32_t)out_rows;
        int64_t *row = out + (size_t)(rows[i] - (after ? out_rows : 0)) * (size_t)states;
        for (Py_ssize_t k = 0; k < states; k++) row[k] += after ? sums[k] : -sums[k];
        if (partial) row[state[j]] += after ? partial : -partial;
      }
      from = to;
    }
  }
  free(keys);
  free(tmp);
  free(rows);
  free(tmp_rows);
  free(first);
  free(counts);
  Py_END_ALLOW_THREADS
  result = failed ? PyErr_NoMemory() : omptpy_py_none();
done:
  release_all(b, 7);
  return result;
}

/* ---- waiting(): the threads waiting per process ------------------------------------ */

enum { MAX_SERIES = 8 };

/* A thread's spell of waiting under way (its waits that nest or touch are one). */
typedef struct {
  int64_t reach; /* the latest end of its waits so far */
  int open;
  Py_ssize_t at; /* its place in the heap of open spells */
} spell;

/* A series' waits (in the order of their begins), its threads' spells and where
 * the sweep of a process is in them. */
typedef struct {
  omptpy_ints pid, thread;
  const int64_t *begin, *end;
  Py_ssize_t n;
  omptpy_keyset keys; /* (pid << 32) ^ thread -> its spell's index */
  spell *spells;
  size_t nspells, cap;
  /* With several processes, the waits by process (each's in order): order[first[r]
   * .. first[r + 1]) are process r's; else NULL (all, in order). */
  Py_ssize_t *order, *first;
  Py_ssize_t next, stop; /* the sweep's next wait of the process, and its end */
} series_waits;

/* The spell of (pid, thread) in series w, made if new; NULL: out of memory. */
static spell *spell_of(series_waits *w, int64_t pid, uint64_t thread) {
  int64_t k = omptpy_keyset_add(&w->keys, (uint64_t)pid << 32 ^ thread);
  if (k < 0) return NULL;
  if ((size_t)k == w->nspells) {
    if (w->nspells == w->cap) {
      size_t cap = w->cap ? 2 * w->cap : 16;
      spell *more = realloc(w->spells, cap * sizeof *more);
      if (!more) return NULL;
      w->spells = more;
      w->cap = cap;
    }
    w->spells[w->nspells++] = (spell){0, 0, -1};
  }
  return &w->spells[k];
}

/* The open spells, a heap by reach: the next to end first. */
typedef struct {
  spell **at;
  Py_ssize_t n, cap;
  uint8_t *series; /* per entry, its series (parallel to at) */
} open_spells;

static void heap_set(open_spells *h, Py_ssize_t i, spell *sp, uint8_t series) {
  h->at[i] = sp;
  h->series[i] = series;
  sp->at = i;
}

static void heap_down(open_spells *h, Py_ssize_t i) {
  spell *sp = h->at[i];
  uint8_t series = h->series[i];
  for (;;) {
    Py_ssize_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && h->at[c + 1]->reach < h->at[c]->reach) c++;
    if (h->at[c]->reach >= sp->reach) break;
    heap_set(h, i, h->at[c], h->series[c]);
    i = c;
  }
  heap_set(h, i, sp, series);
}

static int heap_push(open_spells *h, spell *sp, uint8_t series) {
  if (h->n == h->cap) {
    Py_ssize_t cap = h->cap ? 2 * h->cap : 64;
    spell **at = realloc(h->at, (size_t)cap * sizeof *at);
    if (!at) return -1;
    h->at = at;
    uint8_t *more = realloc(h->series, (size_t)cap);
    if (!more) return -1;
    h->series = more;
    h->cap = cap;
  }
  Py_ssize_t i = h->n++;
  while (i > 0 && h->at[(i - 1) / 2]->reach > sp->reach) {
    heap_set(h, i, h->at[(i - 1) / 2], h->series[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  heap_set(h, i, sp, series);
  return 0;
}

/* Where the sweep's rows go: a row per process and time at which a spell begins
 * or ends, the count of each series after every change then; those in the window
 * [start, end] (INT64_MIN, INT64_MAX: none), and a process's last row before start
 * moved to start unless it has one there; into arrays (waiting) or, with `write`,
 * as the counter's packets (proto_waiting: per series its first value in the
 * process, then each change), given to write a part at a time. */
typedef struct {
  Py_ssize_t nseries;
  int64_t start, end;
  int32_t now[MAX_SERIES]; /* the counts so far */
  int64_t at;              /* the time of the row under way */
  int pending, holding;
  int32_t held[MAX_SERIES]; /* the last row before start */
  /* waiting: */
  int32_t *pid, *count[MAX_SERIES];
  int64_t *time;
  Py_ssize_t rows;
  /* proto_waiting: */
  PyObject *write;
  PyThreadState **save; /* the thread's state while the GIL is released */
  const uint64_t *uuid; /* per process rank and series */
  Py_ssize_t rank;
  uint64_t sequence;
  int32_t last[MAX_SERIES];
  int first, failed; /* first: the process's first row to come; failed: write raised */
  unsigned char *part, *p;
} counter_rows;

enum { COUNTER_PART = 1 << 20 }; /* the packets' bytes given to write at a time */

/* The packets made so far given to write (with the GIL, then released again);
 * once it has raised, the rest are dropped. */
static void give_part(counter_rows *c) {
  if (c->p == c->part || c->failed) {
    c->p = c->part;
    return;
  }
  PyEval_RestoreThread(*c->save);
  PyObject *view = PyMemoryView_FromMemory((char *)c->part, c->p - c->part, PyBUF_READ);
  PyObject *r = view ? PyObject_CallOneArg(c->write, view) : NULL;
  c->failed = !r;
  Py_XDECREF(r);
  Py_XDECREF(view);
  *c->save = PyEval_SaveThread();
  c->p = c->part;
}

static void row_out(counter_rows *c, int32_t pid, int64_t t, const int32_t *counts) {
  if (!c->write) {
    Py_ssize_t r = c->rows++;
    c->pid[r] = pid;
    c->time[r] = t;
    for (Py_ssize_t k = 0; k < c->nseries; k++) c->count[k][r] = counts[k];
    return;
  }
  for (Py_ssize_t k = 0; k < c->nseries; k++) {
    if (!c->first && counts[k] == c->last[k]) continue;
    if (c->p + OMPTPY_COUNTER_PACKET_MAX > c->part + COUNTER_PART) give_part(c);
    c->p = omptpy_put_counter(c->p, (uint64_t)t, c->uuid[c->rank * c->nseries + k],
                              (uint64_t)(int64_t)counts[k], c->sequence);
    c->last[k] = counts[k];
  }
  c->first = 0;
}

/* The row at time t, through the window. */
static void row_done(counter_rows *c, int32_t pid, int64_t t) {
  if (t < c->start) {
    memcpy(c->held, c->now, sizeof c->held);
    c->holding = 1;
    return;
  }
  if (c->holding && t != c->start) row_out(c, pid, c->start, c->held);
  c->holding = 0;
  if (t <= c->end) row_out(c, pid, t, c->now);
}

/* A spell of series s begins (+1) or ends (-1) at time t of process pid: the row
 * of the time before made first (the points come in time order). */
static void point(counter_rows *c, int32_t pid, int64_t t, Py_ssize_t s, int delta) {
  if (c->pending && t != c->at) row_done(c, pid, c->at);
  c->pending = 1;
  c->at = t;
  c->now[s] += delta;
}

/* The process's points over: its last row made, and the one held before start. */
static void process_over(counter_rows *c, int32_t pid) {
  if (c->pending) row_done(c, pid, c->at);
  if (c->holding) row_out(c, pid, c->start, c->held);
  c->pending = c->holding = 0;
  c->first = 1;
}

/* One process's waits swept in time order (each series' next wait at w[s].next,
 * to w[s].stop): each wait extends its thread's spell under way when it begins at
 * or before its reach, else starts one; a spell ends at its reach once no wait of
 * its thread begins by then.  -1: out of memory. */
static int sweep_process(series_waits *w, Py_ssize_t nseries, int32_t pid, open_spells *h,
                         counter_rows *c) {
  for (;;) {
    Py_ssize_t best = -1, i = -1;
    int64_t b = INT64_MAX;
    for (Py_ssize_t s = 0; s < nseries; s++) {
      if (w[s].next >= w[s].stop) continue;
      Py_ssize_t j = w[s].order ? w[s].order[w[s].next] : w[s].next;
      if (w[s].begin[j] < b) b = w[s].begin[j], best = s, i = j;
    }
    while (h->n && h->at[0]->reach < b) { /* the spells over before this begin */
      spell *sp = h->at[0];
      uint8_t series = h->series[0];
      sp->open = 0;
      if (--h->n) {
        heap_set(h, 0, h->at[h->n], h->series[h->n]);
        heap_down(h, 0);
      }
      point(c, pid, sp->reach, series, -1);
    }
    if (best < 0) break;
    series_waits *ws = &w[best];
    ws->next++;
    spell *sp = spell_of(ws, pid, omptpy_ints_bits(&ws->thread, i) & 0xFFFFFFFFu);
    if (!sp) return -1;
    int64_t end = ws->end[i] > b ? ws->end[i] : b; /* one ending before it begins: no length */
    if (sp->open) { /* it began by the spell's reach (else the spell was over) */
      if (end > sp->reach) {
        sp->reach = end;
        heap_down(h, sp->at);
      }
      continue;
    }
    sp->open = 1;
    sp->reach = end;
    if (heap_push(h, sp, (uint8_t)best) < 0) return -1;
    point(c, pid, b, best, +1);
  }
  process_over(c, pid);
  return 0;
}

/* The processes of the series' waits (sorted, distinct, into *pids, malloc'd) and,
 * with more than one, each series' waits by process (order, first).  -1: out of
 * memory. */
static int by_process(series_waits *w, Py_ssize_t nseries, int64_t **pids, size_t *npids) {
  omptpy_keyset seen;
  if (omptpy_keyset_init(&seen) < 0) return -1;
  int failed = 0;
  for (Py_ssize_t s = 0; s < nseries && !failed; s++) {
    uint64_t last = 0;
    for (Py_ssize_t i = 0; i < w[s].n && !failed; i++) {
      uint64_t key = omptpy_ints_bits(&w[s].pid, i);
      if (i > 0 && key == last) continue;
      last = key;
      failed = omptpy_keyset_add(&seen, key) < 0;
    }
  }
  *npids = seen.count;
  if (!failed && !(*pids = malloc((seen.count ? seen.count : 1) * sizeof **pids))) failed = 1;
  for (size_t k = 0; !failed && k <= seen.mask; k++)
    if (seen.slots[k].index >= 0) (*pids)[seen.slots[k].index] = (int64_t)seen.slots[k].key;
  omptpy_keyset_free(&seen);
  if (failed) return -1;
  qsort(*pids, *npids, sizeof **pids, omptpy_cmp_int64);
  for (Py_ssize_t s = 0; s < nseries && *npids > 1; s++) {
    int32_t *rank = malloc((size_t)w[s].n * sizeof *rank + 1);
    w[s].order = malloc((size_t)w[s].n * sizeof *w[s].order + 1);
    w[s].first = calloc(*npids + 1, sizeof *w[s].first);
    if (!rank || !w[s].order || !w[s].first) {
      free(rank);
      return -1;
    }
    for (Py_ssize_t i = 0; i < w[s].n; i++) {
      int64_t pid = (int64_t)omptpy_ints_bits(&w[s].pid, i);
      rank[i] = (int32_t)((int64_t *)bsearch(&pid, *pids, *npids, sizeof **pids,
                                             omptpy_cmp_int64) - *pids);
      w[s].first[rank[i] + 1]++;
    }
    for (size_t r = 0; r < *npids; r++) w[s].first[r + 1] += w[s].first[r];
    Py_ssize_t *fill = malloc((*npids + 1) * sizeof *fill);
    if (!fill) {
      free(rank);
      return -1;
    }
    memcpy(fill, w[s].first, (*npids + 1) * sizeof *fill);
    for (Py_ssize_t i = 0; i < w[s].n; i++) w[s].order[fill[rank[i]]++] = i;
    free(fill);
    free(rank);
  }
  return 0;
}

/* A time of the window from Python (None: `none`). */
static int window_time(PyObject *o, int64_t none, int64_t *out) {
  if (o == Py_None) {
    *out = none;
    return 0;
  }
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) return -1;
  *out = v;
  return 0;
}

/* waiting() and proto_waiting(): the series read, swept a process at a time into
 * c (its sink set by the caller, but for the window, read here from start and
 * end, and waiting's arrays, made here into outs); `tracks`: proto_waiting's,
 * called with the processes (their pids, int64 bytes, sorted) for their tracks'
 * uuids (held in c until the sweep is over), else NULL.  Returns 0, or -1 with an
 * exception. */
static int count_waits(PyObject *list, PyObject *start, PyObject *end, PyObject *tracks,
                       counter_rows *c, PyObject **outs) {
  Py_ssize_t nseries = PyList_GET_SIZE(list);
  if (nseries > MAX_SERIES) {
    PyErr_Format(PyExc_ValueError, "waiting: at most %d series", (int)MAX_SERIES);
    return -1;
  }
  if (window_time(start, INT64_MIN, &c->start) < 0 || window_time(end, INT64_MAX, &c->end) < 0)
    return -1;
  series_waits w[MAX_SERIES];
  Py_buffer bufs[4 * MAX_SERIES], uuids = {0};
  memset(w, 0, sizeof w);
  memset(bufs, 0, sizeof bufs);
  int64_t *pids = NULL;
  size_t npids = 0;
  open_spells heap = {0};
  Py_ssize_t waits = 0;
  int result = -1, failed = 0;
  for (Py_ssize_t s = 0; s < nseries; s++) {
    PyObject *pid, *thread, *begin, *wait_end;
    Py_ssize_t n = -1;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(list, s), "OOOO", &pid, &thread, &begin, &wait_end) ||
        omptpy_get_ints(pid, &bufs[4 * s], &w[s].pid, &n, "waiting pid") < 0 ||
        omptpy_get_ints(thread, &bufs[4 * s + 1], &w[s].thread, &n, "waiting thread") < 0 ||
        !(w[s].begin = omptpy_get_items(begin, &bufs[4 * s + 2], 8, &n, 0, "waiting begin")) ||
        !(w[s].end = omptpy_get_items(wait_end, &bufs[4 * s + 3], 8, &n, 0, "waiting end")))
      goto done;
    w[s].n = n;
    waits += n;
    for (Py_ssize_t i = 1; i < n; i++)
      if (w[s].begin[i] < w[s].begin[i - 1]) {
        PyErr_SetString(PyExc_ValueError, "waiting: a series' waits out of the order of "
                                          "their begins");
        goto done;
      }
  }
  c->nseries = nseries;
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t s = 0; s < nseries && !failed; s++)
    failed = omptpy_keyset_init(&w[s].keys) < 0;
  if (!failed) failed = by_process(w, nseries, &pids, &npids) < 0;
  Py_END_ALLOW_THREADS
  if (failed) {
    PyErr_NoMemory();
    goto done;
  }
  if (tracks) {
    PyObject *given = PyBytes_FromStringAndSize((const char *)pids,
                                                (Py_ssize_t)(npids * sizeof *pids));
    PyObject *got = given ? PyObject_CallOneArg(tracks, given) : NULL;
    Py_XDECREF(given);
    Py_ssize_t nuuids = -1;
    c->uuid = got ? omptpy_get_items(got, &uuids, 8, &nuuids, 0, "proto_waiting uuids") : NULL;
    Py_XDECREF(got); /* held by uuids */
    if (!c->uuid) goto done;
    if (nuuids != (Py_ssize_t)(npids * (size_t)nseries)) {
      PyErr_Format(PyExc_ValueError, "proto_waiting: uuids, uint64, %zu processes x %zd series",
                   npids, nseries);
      goto done;
    }
  }
  if (outs) { /* waiting: at most a row per begin and end of every wait, cut to size after */
    for (Py_ssize_t o = 0; o < 2 + nseries; o++)
      if (!(outs[o] = new_output(2 * waits, o == 1 ? 8 : 4))) goto done;
    c->pid = (int32_t *)PyByteArray_AS_STRING(outs[0]);
    c->time = (int64_t *)PyByteArray_AS_STRING(outs[1]);
    for (Py_ssize_t s = 0; s < nseries; s++)
      c->count[s] = (int32_t *)PyByteArray_AS_STRING(outs[2 + s]);
  }
  c->first = 1;
  PyThreadState *save = PyEval_SaveThread();
  c->save = &save;
  for (size_t r = 0; r < npids && !failed && !c->failed; r++) {
    for (Py_ssize_t s = 0; s < nseries; s++) {
      w[s].next = w[s].order ? w[s].first[r] : 0;
      w[s].stop = w[s].order ? w[s].first[r + 1] : w[s].n;
    }
    c->rank = (Py_ssize_t)r;
    failed = sweep_process(w, nseries, (int32_t)pids[r], &heap, c) < 0;
  }
  if (c->write && !failed) give_part(c);
  PyEval_RestoreThread(save);
  if (failed) PyErr_NoMemory();
  result = failed || c->failed ? -1 : 0;
done:
  for (Py_ssize_t s = 0; s < MAX_SERIES; s++) {
    omptpy_keyset_free(&w[s].keys);
    free(w[s].spells);
    free(w[s].order);
    free(w[s].first);
  }
  release_all(bufs, 4 * MAX_SERIES);
  if (uuids.obj) PyBuffer_Release(&uuids);
  free(heap.at);
  free(heap.series);
  free(pids);
  return result;
}

/* waiting(series[, start, end]): how many threads wait per process, after each
 * change: series, a list (of at most MAX_SERIES: sync, mutex) of (pid, thread,
 * begin, end), a series' waits in the order of their begins (pid and thread
 * integers of any width, begin and end int64); a thread's waits that nest or
 * touch count once, from the first begin to the last end (a spell).  Swept in
 * time order, a process at a time (no sort: the heap of open spells holds one
 * per thread).  Returns (pid, time, counts): bytearrays of int32 and int64, a row
 * per process and time at which a spell of any series begins or ends (by
 * process, then time) in the window [start, end] (None: open; a process's last
 * row before start moved to start unless it has one there), and per series one
 * of int32, its threads waiting after every change at that time. */
PyObject *omptpy_py_waiting(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *list, *start = Py_None, *end = Py_None, *result = NULL, *outs[2 + MAX_SERIES] = {0};
  if (!PyArg_ParseTuple(args, "O!|OO", &PyList_Type, &list, &start, &end)) return NULL;
  counter_rows c = {0};
  if (count_waits(list, start, end, NULL, &c, outs) < 0) goto done;
  Py_ssize_t nseries = PyList_GET_SIZE(list);
  for (Py_ssize_t o = 0; o < 2 + nseries; o++)
    if (PyByteArray_Resize(outs[o], c.rows * (o == 1 ? 8 : 4)) < 0) goto done;
  PyObject *per_series = PyList_New(nseries);
  if (!per_series) goto done;
  for (Py_ssize_t s = 0; s < nseries; s++) {
    PyList_SET_ITEM(per_series, s, outs[2 + s]);
    outs[2 + s] = NULL;
  }
  result = Py_BuildValue("NNN", outs[0], outs[1], per_series);
  outs[0] = outs[1] = NULL;
done:
  for (int o = 0; o < 2 + MAX_SERIES; o++) Py_XDECREF(outs[o]);
  return result;
}

/* proto_waiting(series, tracks, sequence, write[, start, end]): waiting()'s rows
 * as the Perfetto counter's packets (omptpy_put_counter, on trusted sequence
 * `sequence`): per process (in the order of their pids) and series, its first
 * value, then each change, on the track uuids[rank * series + series] (uint64),
 * uuids = tracks(the processes' pids, int64 bytes, sorted), given to write (a
 * callable of a bytes-like object, which it must not keep) COUNTER_PART bytes or
 * so at a time.  Returns None. */
PyObject *omptpy_py_proto_waiting(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *list, *tracks, *write, *start = Py_None, *end = Py_None;
  unsigned long long sequence;
  if (!PyArg_ParseTuple(args, "O!OKO|OO", &PyList_Type, &list, &tracks, &sequence, &write,
                        &start, &end))
    return NULL;
  if (!PyCallable_Check(tracks) || !PyCallable_Check(write)) {
    PyErr_SetString(PyExc_TypeError, "proto_waiting: tracks and write, callables");
    return NULL;
  }
  PyObject *result = NULL;
  counter_rows c = {.write = write, .sequence = sequence};
  if (!(c.part = c.p = malloc(COUNTER_PART))) return PyErr_NoMemory();
  if (count_waits(list, start, end, tracks, &c, NULL) == 0) result = omptpy_py_none();
  free(c.part);
  return result;
}
