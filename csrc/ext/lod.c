/*
 * The aggregates of the view's levels of detail (ompt_py/presentation/lod.py):
 * lod_sum() cuts bars at the time bins of one level, adds the rows of the level
 * below, and sums the rows of each (bin, group): node by node (a node's rows fit
 * in a processor's cache), in one pass after a stable radix sort of their keys,
 * without the GIL.
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

/* A row of a node before the sum: its key in the node (bin from the node's first
 * << gbits | group) and where it comes from: below the number of rows of the level
 * below, one of them; else a bar's piece (src - rows below: the bar). */
typedef struct {
  uint64_t key;
  int64_t src;
} piece;

enum { DIGIT = 11, BUCKETS = 1 << DIGIT, PASSES = (64 + DIGIT - 1) / DIGIT };

/* Sorts a[0..n) by key, stably (least significant digit first, the passes whose
 * digit is the same in every row skipped), with b as the other buffer and count
 * as the histograms; returns the buffer that holds the result. */
static piece *radix_sort(piece *a, piece *b, Py_ssize_t n, Py_ssize_t (*count)[BUCKETS]) {
  memset(count, 0, sizeof *count * PASSES);
  for (Py_ssize_t i = 0; i < n; i++)
    for (int p = 0; p < PASSES; p++) count[p][a[i].key >> (p * DIGIT) & (BUCKETS - 1)]++;
  for (int p = 0; p < PASSES && n; p++) {
    Py_ssize_t *c = count[p];
    if (c[a[0].key >> (p * DIGIT) & (BUCKETS - 1)] == n) continue;
    for (Py_ssize_t d = 0, at = 0; d < BUCKETS; d++) {
      Py_ssize_t k = c[d];
      c[d] = at;
      at += k;
    }
    for (Py_ssize_t i = 0; i < n; i++) b[c[a[i].key >> (p * DIGIT) & (BUCKETS - 1)]++] = a[i];
    piece *t = a;
    a = b, b = t;
  }
  return a;
}

enum { IN_BEGIN, IN_END, IN_GROUP, IN_SITE, BAR_COLUMNS };
enum { OUT_KEY, OUT_COVERED, OUT_BARS, OUT_LARGEST, OUT_SITE, TABLE_COLUMNS };

/* An integer array of *n items (set when negative), int64 only when wide. */
static int int_array(PyObject *obj, Py_buffer *b, omptpy_ints *ints, int wide, Py_ssize_t *n,
                     const char *what) {
  if (omptpy_get_ints(obj, b, ints, n, what) < 0) return -1;
  if (wide && !(ints->itemsize == 8 && ints->is_signed)) {
    PyErr_Format(PyExc_ValueError, "%s: an array of int64", what);
    PyBuffer_Release(b);
    b->obj = NULL;
    return -1;
  }
  return 0;
}

PyObject *omptpy_py_lod_sum(PyObject *m, PyObject *args) {
  (void)m;
  static const char *const bar_names[] = {"lod_sum: begin", "lod_sum: end", "lod_sum: group",
                                          "lod_sum: site"};
  static const char *const table_names[] = {"lod_sum: the key below", "lod_sum: covered below",
                                            "lod_sum: bars below", "lod_sum: largest below",
                                            "lod_sum: site below"};
  PyObject *bar_objs[BAR_COLUMNS], *below;
  int shift, node_bits, delta, gbits;
  if (!PyArg_ParseTuple(args, "OOOOiiOii", &bar_objs[0], &bar_objs[1], &bar_objs[2],
                        &bar_objs[3], &shift, &node_bits, &below, &delta, &gbits))
    return NULL;
  if (shift < 0 || node_bits < shift || node_bits > 62 || delta < 0 || delta > 62 ||
      gbits < 0 || gbits > 62 ||
      (below != Py_None && (!PyTuple_Check(below) || PyTuple_GET_SIZE(below) != TABLE_COLUMNS))) {
    PyErr_SetString(PyExc_ValueError,
                    "lod_sum: 0 <= shift <= node_bits <= 62, delta and gbits from 0 to 62, the "
                    "level below a tuple of 5 arrays (a result of lod_sum) or None");
    return NULL;
  }
  Py_buffer bar[BAR_COLUMNS] = {{0}}, table[TABLE_COLUMNS] = {{0}};
  omptpy_ints ints[BAR_COLUMNS], table_ints;
  Py_ssize_t nbars = -1, nbelow = below == Py_None ? 0 : -1;
  PyObject *result = NULL;
  piece *a = NULL, *b = NULL;
  Py_ssize_t(*count)[BUCKETS] = NULL;
  int64_t *out[TABLE_COLUMNS] = {NULL};
  for (int c = 0; c < BAR_COLUMNS; c++)
    if (int_array(bar_objs[c], &bar[c], &ints[c], c == IN_BEGIN || c == IN_END, &nbars,
                  bar_names[c]) < 0)
      goto done;
  for (int c = 0; c < TABLE_COLUMNS && below != Py_None; c++)
    if (int_array(PyTuple_GET_ITEM(below, c), &table[c], &table_ints, 1, &nbelow,
                  table_names[c]) < 0)
      goto done;
  const int64_t *begin = bar[IN_BEGIN].buf, *end = bar[IN_END].buf;
  const omptpy_ints *group = &ints[IN_GROUP], *site = &ints[IN_SITE];
  const int64_t *tkey = table[OUT_KEY].buf, *tcovered = table[OUT_COVERED].buf,
                *tbars = table[OUT_BARS].buf, *tlargest = table[OUT_LARGEST].buf,
                *tsite = table[OUT_SITE].buf;
  /* A node's rows: those below in it, then the pieces of its bars (one per bin a bar
   * touches), which it holds whole: the bars and the rows below come node by node. */
  const int per_node = node_bits - shift;
  const uint64_t groups = (uint64_t)1 << gbits;
  Py_ssize_t n = nbelow;
  const char *bad = NULL;
  for (Py_ssize_t i = 0; i < nbars && !bad; i++) {
    int64_t last = (end[i] > begin[i] ? end[i] - 1 : begin[i]) >> shift;
    if (begin[i] < 0 || end[i] < begin[i] || end[i] >> 62)
      bad = "lod_sum: bars with 0 <= begin <= end < 2**62";
    else if (omptpy_ints_bits(group, i) >= groups)
      bad = "lod_sum: groups from 0 below 2**gbits";
    else if ((uint64_t)last > (uint64_t)INT64_MAX >> gbits)
      bad = "lod_sum: bins too large for the groups (bin << gbits beyond int64)";
    else if (last >> per_node != begin[i] >> node_bits ||
             (i && begin[i] >> node_bits < begin[i - 1] >> node_bits))
      bad = "lod_sum: bars held whole by their nodes, in the order of the nodes";
    else n += last - (begin[i] >> shift) + 1;
  }
  for (Py_ssize_t r = 1; r < nbelow && !bad; r++)
    if (tkey[r] < tkey[r - 1]) bad = "lod_sum: the rows below in the order of their keys";
  if (bad) {
    PyErr_SetString(PyExc_ValueError, bad);
    goto done;
  }
  Py_ssize_t rows = 0, room = 0;
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS;
  for (int c = 0; c < TABLE_COLUMNS; c++)
    if (!(out[c] = malloc(8 * (size_t)n + 1))) failed = 1;
  if (!(count = malloc(sizeof *count * PASSES))) failed = 1;
  int64_t *key = out[OUT_KEY], *covered = out[OUT_COVERED], *bars = out[OUT_BARS],
          *largest = out[OUT_LARGEST], *largest_site = out[OUT_SITE];
  for (Py_ssize_t i = 0, r = 0; !failed && (i < nbars || r < nbelow);) {
    /* The next node: its rows below (r to r_end) and bars (i to i_end). */
    int64_t node_r = r < nbelow ? tkey[r] >> gbits >> delta >> per_node : INT64_MAX;
    int64_t node = i < nbars && begin[i] >> node_bits < node_r ? begin[i] >> node_bits : node_r;
    Py_ssize_t r_end = r, i_end = i, k = 0, size;
    while (r_end < nbelow && tkey[r_end] >> gbits >> delta >> per_node == node) r_end++;
    size = r_end - r;
    for (; i_end < nbars && begin[i_end] >> node_bits == node; i_end++)
      size += ((end[i_end] > begin[i_end] ? end[i_end] - 1 : begin[i_end]) >> shift) -
              (begin[i_end] >> shift) + 1;
    if (size > room) {
      free(a);
      free(b);
      room = size;
      a = malloc(sizeof *a * (size_t)room);
      b = malloc(sizeof *b * (size_t)room);
      if (!a || !b) {
        failed = 1;
        break;
      }
    }
    const int64_t first_bin = node << per_node;
    for (; r < r_end; r++) {
      uint64_t bin = (uint64_t)tkey[r] >> gbits >> delta;
      a[k++] = (piece){(bin - first_bin) << gbits | ((uint64_t)tkey[r] & (groups - 1)), r};
    }
    for (; i < i_end; i++) {
      int64_t last = (end[i] > begin[i] ? end[i] - 1 : begin[i]) >> shift;
      for (int64_t bin = begin[i] >> shift; bin <= last; bin++)
        a[k++] = (piece){(uint64_t)(bin - first_bin) << gbits | omptpy_ints_bits(group, i),
                         nbelow + i};
    }
    const piece *sorted = radix_sort(a, b, k, count);
    /* The rows of one key as one: covered and bars summed, the first largest kept. */
    const Py_ssize_t node_rows = rows;
    for (Py_ssize_t s = 0; s < k; s++) {
      int64_t src = sorted[s].src, c, nb, big, where, at = (int64_t)sorted[s].key;
      if (src < nbelow) {
        c = tcovered[src], nb = tbars[src], big = tlargest[src], where = tsite[src];
      } else {
        int64_t bar = src - nbelow, lo = (first_bin + (at >> gbits)) << shift,
                hi = lo + ((int64_t)1 << shift);
        c = (end[bar] < hi ? end[bar] : hi) - (begin[bar] > lo ? begin[bar] : lo);
        nb = 1, big = end[bar] - begin[bar], where = (int64_t)omptpy_ints_bits(site, bar);
      }
      at += first_bin << gbits;
      if (rows > node_rows && key[rows - 1] == at) {
        covered[rows - 1] += c;
        bars[rows - 1] += nb;
        if (big > largest[rows - 1]) largest[rows - 1] = big, largest_site[rows - 1] = where;
      } else {
        key[rows] = at, covered[rows] = c, bars[rows] = nb;
        largest[rows] = big, largest_site[rows] = where;
        rows++;
      }
    }
  }
  Py_END_ALLOW_THREADS;
  if (failed) {
    PyErr_NoMemory();
    goto done;
  }
  result = PyTuple_New(TABLE_COLUMNS);
  for (int c = 0; c < TABLE_COLUMNS && result; c++) {
    PyObject *column = PyBytes_FromStringAndSize((const char *)out[c], 8 * rows);
    if (!column) Py_CLEAR(result);
    else PyTuple_SET_ITEM(result, c, column);
  }
done:
  for (int c = 0; c < TABLE_COLUMNS; c++) {
    free(out[c]);
    if (table[c].obj) PyBuffer_Release(&table[c]);
  }
  for (int c = 0; c < BAR_COLUMNS; c++)
    if (bar[c].obj) PyBuffer_Release(&bar[c]);
  free(count);
  free(a);
  free(b);
  return result;
}
