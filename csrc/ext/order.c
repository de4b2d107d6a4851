/*
 * The records' time order (records.time_order): their positions sorted by time,
 * at equal times in the order of the records (a stable sort).
 *
 * The records come in runs in time order, a thread's buffer at a time (1024
 * records in a trace of 10^7 events of 2 threads: 8,393 runs), and a thread's
 * runs follow each other in time.  So the runs are chained, each after a chain
 * whose last time is at most its first (the chain ending latest that way), and
 * the chains merged by (time, position): as many chains as there are threads
 * writing at once, a few, each read in order, the times read in place (numpy's
 * stable argsort needs them contiguous: a copy of 8 bytes a record, in memory
 * first touched then; in a fresh process it took twice as long on that trace,
 * 0.53 against 0.25 s, and about as long once its memory was reused).  More chains than
 * OMPTPY_MAX_CHAINS, or runs shorter than OMPTPY_MIN_RUN (times in no such runs): not ordered,
 * the caller sorts them.  The merge fills a block of positions at a time: the
 * whole array (time_order), or a small block as pair_events' pass reads them
 * (no array of the order: 8 bytes a record of fresh memory, and its pages'
 * faults, that the export need not pay); a merge may start at a time
 * (omptpy_order_seek: pair_events' second half).
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

static inline int64_t time_at(const omptpy_order *o, Py_ssize_t i) {
  int64_t v;
  memcpy(&v, o->base + i * o->stride, sizeof v);
  return v;
}

/* Whether the record at a comes before the one at b. */
static inline int before(const omptpy_order *o, Py_ssize_t a, Py_ssize_t b) {
  int64_t ta = time_at(o, a), tb = time_at(o, b);
  return ta < tb || (ta == tb && a < b);
}

/* Moves chain c's cursor on; 0 when the chain is done. */
static inline int advance(omptpy_chain *c, const omptpy_run *runs) {
  if (++c->at < c->stop) return 1;
  Py_ssize_t r = runs[c->run].next;
  if (r < 0) return 0;
  c->run = r;
  c->at = runs[r].start;
  c->stop = runs[r].stop;
  return 1;
}

/* Chains the runs of the n records (where they start: `starts`, nstarts of them
 * from 0 on, or NULL: found by reading every time); returns the number of
 * chains, 0 for more than OMPTPY_MAX_CHAINS or too many runs, -1 out of memory
 * (o->runs: the runs, to free). */
static int chain_runs(omptpy_order *o, Py_ssize_t n, const Py_ssize_t *starts,
                      Py_ssize_t nstarts) {
  Py_ssize_t cap = 1024, nruns = 0;
  omptpy_run *runs = malloc((size_t)cap * sizeof *runs);
  omptpy_chain *chains = o->chains;
  o->runs = runs;
  if (!runs) return -1;
  int nchains = 0;
  for (Py_ssize_t start = 0; start < n;) {
    Py_ssize_t stop = start + 1;
    if (nruns > n / OMPTPY_MIN_RUN + OMPTPY_MAX_CHAINS) return 0;
    int64_t first = time_at(o, start), last = first;
    if (starts) {
      stop = nruns + 1 < nstarts ? starts[nruns + 1] : n;
      last = time_at(o, stop - 1);
    } else {
      for (int64_t next; stop < n && (next = time_at(o, stop)) >= last; stop++) last = next;
    }
    int best = -1;
    for (int c = 0; c < nchains; c++)
      if (chains[c].last_time <= first && (best < 0 || chains[c].last_time > chains[best].last_time))
        best = c;
    if (best < 0) {
      if (nchains == OMPTPY_MAX_CHAINS) return 0;
      best = nchains++;
      chains[best].run = nruns;
    } else {
      runs[chains[best].last].next = nruns;
    }
    if (nruns == cap) {
      omptpy_run *more = realloc(runs, (size_t)(cap *= 2) * sizeof *runs);
      if (!more) return -1;
      o->runs = runs = more;
    }
    runs[nruns] = (omptpy_run){start, stop, -1};
    chains[best].last = nruns++;
    chains[best].last_time = last;
    start = stop;
  }
  for (int c = 0; c < nchains; c++) {
    chains[c].at = runs[chains[c].run].start;
    chains[c].stop = runs[chains[c].run].stop;
  }
  return nchains;
}

/* Moves heap[p] down to its place in the heap of chains (by their cursors). */
static void sift_down(omptpy_order *o, int p) {
  const omptpy_chain *chains = o->chains;
  int *heap = o->heap;
  for (;;) {
    int l = 2 * p + 1, m = p;
    if (l < o->size && before(o, chains[heap[l]].at, chains[heap[m]].at)) m = l;
    if (l + 1 < o->size && before(o, chains[heap[l + 1]].at, chains[heap[m]].at)) m = l + 1;
    if (m == p) return;
    int swap = heap[p];
    heap[p] = heap[m];
    heap[m] = swap;
    p = m;
  }
}

int omptpy_order_start(omptpy_order *o, const char *base, Py_ssize_t stride, Py_ssize_t n,
                       const Py_ssize_t *starts, Py_ssize_t nstarts) {
  memset(o, 0, sizeof *o);
  o->base = base;
  o->stride = stride;
  int nchains = chain_runs(o, n, starts, nstarts);
  o->size = nchains > 0 ? nchains : 0;
  for (int c = 0; c < o->size; c++) o->heap[c] = c;
  if (o->size > 2)
    for (int i = o->size / 2 - 1; i >= 0; i--) sift_down(o, i);
  return nchains;
}

/* Moves every chain's cursor to its first record at or after time t (a chain with
 * none leaves the merge), so that the merge gives the records from t on: the
 * runs before t skipped by their last time, the run holding t searched. */
void omptpy_order_seek(omptpy_order *o, int64_t t) {
  int live = 0;
  for (int h = 0; h < o->size; h++) {
    omptpy_chain *c = &o->chains[o->heap[h]];
    while (time_at(o, c->stop - 1) < t) { /* the whole run before t */
      Py_ssize_t r = o->runs[c->run].next;
      if (r < 0) break;
      c->run = r;
      c->at = o->runs[r].start;
      c->stop = o->runs[r].stop;
    }
    Py_ssize_t lo = c->at, hi = c->stop; /* the first at or after t in the run */
    while (lo < hi) {
      Py_ssize_t mid = lo + (hi - lo) / 2;
      if (time_at(o, mid) < t) lo = mid + 1;
      else hi = mid;
    }
    if (lo == c->stop) continue; /* nothing at or after t */
    c->at = lo;
    o->heap[live++] = o->heap[h];
  }
  o->size = live;
  if (o->size > 2)
    for (int i = o->size / 2 - 1; i >= 0; i--) sift_down(o, i);
}

void omptpy_order_end(omptpy_order *o) {
  free(o->runs);
  o->runs = NULL;
}

/* Two chains (the common case: two threads) are compared directly, which took
 * 0.057 s on 10^7 records where the heap took 0.089 s; one is read in order. */
Py_ssize_t omptpy_order_fill(omptpy_order *o, int64_t *out, Py_ssize_t max) {
  Py_ssize_t k = 0;
  const omptpy_run *runs = o->runs;
  if (o->size == 2) {
    omptpy_chain *a = &o->chains[o->heap[0]], *b = &o->chains[o->heap[1]];
    while (k < max) {
      omptpy_chain *first = before(o, a->at, b->at) ? a : b;
      out[k++] = first->at;
      if (!advance(first, runs)) {
        o->heap[0] = first == a ? o->heap[1] : o->heap[0];
        o->size = 1;
        break;
      }
    }
  }
  if (o->size == 1) {
    omptpy_chain *c = &o->chains[o->heap[0]];
    while (k < max) {
      out[k++] = c->at;
      if (!advance(c, runs)) {
        o->size = 0;
        break;
      }
    }
  }
  while (o->size > 2 && k < max) {
    omptpy_chain *top = &o->chains[o->heap[0]];
    out[k++] = top->at;
    if (!advance(top, runs)) o->heap[0] = o->heap[--o->size];
    sift_down(o, 0);
  }
  if (o->size == 2 && k < max) k += omptpy_order_fill(o, out + k, max - k);
  return k;
}

/* time_order(times, out): out (int64, as many) = the positions of times (int64,
 * one dimension, any stride: the records' field read in place) in time order,
 * stable; True, or False (out untouched) when they are not in a few chains of
 * runs. */
PyObject *omptpy_py_time_order(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *times_obj, *out_obj;
  if (!PyArg_ParseTuple(args, "OO", &times_obj, &out_obj)) return NULL;
  Py_buffer tb, ob;
  if (PyObject_GetBuffer(times_obj, &tb, PyBUF_STRIDES | PyBUF_FORMAT) < 0) return NULL;
  if (tb.ndim != 1 || !omptpy_is_int64(&tb)) {
    PyBuffer_Release(&tb);
    PyErr_SetString(PyExc_ValueError, "time_order: times, int64 of one dimension");
    return NULL;
  }
  Py_ssize_t n = tb.shape[0];
  int64_t *out = omptpy_get_items(out_obj, &ob, 8, &n, 1, "time_order: out");
  if (!out) {
    PyBuffer_Release(&tb);
    return NULL;
  }
  omptpy_order o;
  int nchains;
  Py_BEGIN_ALLOW_THREADS
  nchains = omptpy_order_start(&o, tb.buf, tb.strides[0], n, NULL, 0);
  if (nchains > 0) omptpy_order_fill(&o, out, n);
  Py_END_ALLOW_THREADS
  omptpy_order_end(&o);
  PyBuffer_Release(&ob);
  PyBuffer_Release(&tb);
  if (nchains < 0) return PyErr_NoMemory();
  return PyBool_FromLong(nchains > 0 || n == 0);
}
