/*
 * The one internal header of the extension: every file of csrc/ext includes
 * it first.  It brings in Python.h and the tool's exported API, declares what
 * each file adds to the module (module.c's method table lists them all), and
 * holds the error helpers, so that every binding raises the same way.
 */
#ifndef OMPTPY_EXT_H
#define OMPTPY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "omptpy.h"
#include "tool/omptpy_api.h"

/* ---- results and errors ------------------------------------------------------- */

/* OSError for a tool function's -errno result, about `what`; returns NULL (module.c). */
PyObject *omptpy_py_oserror(int rc, const char *what);

/* A new reference to None: the result of a kernel that writes its outputs in
 * place (Py_NewRef(Py_None), which Python 3.9 lacks). */
static inline PyObject *omptpy_py_none(void) {
  Py_INCREF(Py_None);
  return Py_None;
}

/* How many items ahead of where they are read the kernels that read far apart
 * (records at rows, slices in nesting order) fetch them into the cache. */
enum { OMPTPY_FETCH_AHEAD = 16 };

/* A tuple of bytes (a table of encoded entries) read in place: *text and *len,
 * PyMem arrays of len(table) + 1 the caller frees (also on error, NULL then or
 * partly filled), *n its entries and *longest the longest (format.c).  -1 with
 * an exception. */
int omptpy_bytes_table(PyObject *table, const char ***text, Py_ssize_t **len, Py_ssize_t *n,
                       Py_ssize_t *longest);

/* Faults in the whole pages of [p, p + len) in one call (columns.c): fresh
 * output pages cost much less this way than one trap per page (on virtual
 * machines). */
void omptpy_populate(void *p, Py_ssize_t len);

/* ---- records.c: the Records type --------------------------------------------- */

int omptpy_py_add_records_type(PyObject *module);
PyObject *omptpy_py_take(PyObject *m, PyObject *args);

/* ---- columns.c: record columns in bulk --------------------------------------- */

/* What indexes the table of a lookup of columns() (the module's KEY_*). */
enum {
  KEY_EVENT,          /* the event number */
  KEY_ENDPOINT,       /* the endpoint byte */
  KEY_EVENT_KIND,     /* event << 8 | kind */
  KEY_EVENT_ENDPOINT, /* event << 8 | endpoint */
  KEYS
};

PyObject *omptpy_py_columns(PyObject *m, PyObject *args);
/* The event numbers a record can hold (its uint16 field): census' and
 * event_rows' tables are this long. */
enum { OMPTPY_EVENT_NUMBERS = 1 << 16 };
PyObject *omptpy_py_census(PyObject *m, PyObject *args);
PyObject *omptpy_py_event_rows(PyObject *m, PyObject *args);
PyObject *omptpy_py_take_records(PyObject *m, PyObject *args);
/* qsort's order of int64 values. */
int omptpy_cmp_int64(const void *a, const void *b);

/* A set of distinct uint64 keys (open addressing, kept at most half full), each
 * numbered in the order it was first added.  No Python: it may run without the
 * GIL. */
typedef struct {
  uint64_t key;
  int64_t index; /* -1: an empty slot */
} omptpy_keyslot;
typedef struct {
  omptpy_keyslot *slots;
  size_t mask;  /* slots - 1 (a power of two less one) */
  size_t count; /* the keys in it, numbered 0 to count - 1 */
} omptpy_keyset;
/* 0, or -1 out of memory (nothing to free). */
int omptpy_keyset_init(omptpy_keyset *s);
/* The number of key, added if new (then it is the count before it); -1 out of
 * memory (the set stays as it was). */
int64_t omptpy_keyset_add(omptpy_keyset *s, uint64_t key);
void omptpy_keyset_free(omptpy_keyset *s);
PyObject *omptpy_py_tick_scale(PyObject *m, PyObject *args);
PyObject *omptpy_py_ticks_to_ns(PyObject *m, PyObject *args);

/* ---- order.c: the records' time order --------------------------------------------- */

/* At most OMPTPY_MAX_CHAINS chains of runs of OMPTPY_MIN_RUN records on average at
 * least (shorter runs: the runs' list would take more memory than numpy's sort,
 * 24 bytes a run, for no gain). */
enum { OMPTPY_MAX_CHAINS = 64, OMPTPY_MIN_RUN = 16 };

typedef struct {
  Py_ssize_t start, stop, next; /* next: the chain's run after this one, -1: none */
} omptpy_run;

typedef struct {
  Py_ssize_t last;     /* its last run */
  int64_t last_time;   /* the time of that run's last record */
  Py_ssize_t at, stop; /* the merge's cursor: a position, the end of its run */
  Py_ssize_t run;      /* the run of the cursor */
} omptpy_chain;

/* The records' time order as it is merged: time_order() makes it an array,
 * pair_events() reads it a block at a time (no array of it). */
typedef struct {
  const char *base; /* the times: int64 at base + i * stride */
  Py_ssize_t stride;
  omptpy_run *runs;
  omptpy_chain chains[OMPTPY_MAX_CHAINS];
  int heap[OMPTPY_MAX_CHAINS], size; /* the chains not done, a heap by their cursors */
} omptpy_order;

/* Chains the runs of the n times (each a maximal run in ascending order; where
 * they start, when known: `starts`, the nstarts runs' first positions, from 0
 * on; NULL: found by reading every time): the number of chains, 0 when they are
 * not in a few chains of runs (the caller sorts them), -1 out of memory.  No
 * Python: it may run without the GIL.  omptpy_order_end() frees it, whatever
 * it returned. */
int omptpy_order_start(omptpy_order *o, const char *base, Py_ssize_t stride, Py_ssize_t n,
                       const Py_ssize_t *starts, Py_ssize_t nstarts);
/* The next positions in time order, at most max of them, into out: how many (0:
 * none left). */
Py_ssize_t omptpy_order_fill(omptpy_order *o, int64_t *out, Py_ssize_t max);
/* The merge moved on to the records at or after time t. */
void omptpy_order_seek(omptpy_order *o, int64_t t);
void omptpy_order_end(omptpy_order *o);

PyObject *omptpy_py_time_order(PyObject *m, PyObject *args);

/* ---- pairing.c: keys, hash tables, begin/end pairing, lookups ------------------ */

/* What a row does in a pairing of pair_events() (the module's PAIR_*). */
enum {
  PAIR_NONE,  /* nothing */
  PAIR_OPEN,  /* a begin */
  PAIR_CLOSE, /* an end */
};

PyObject *omptpy_py_pair(PyObject *m, PyObject *args);
PyObject *omptpy_py_pair_events(PyObject *m, PyObject *args);
PyObject *omptpy_py_find(PyObject *m, PyObject *args);

/* ---- states.c: the thread states' sweep and times per state --------------------- */

PyObject *omptpy_py_sweep(PyObject *m, PyObject *args);
PyObject *omptpy_py_cumulative(PyObject *m, PyObject *args);
PyObject *omptpy_py_waiting(PyObject *m, PyObject *args);
PyObject *omptpy_py_proto_waiting(PyObject *m, PyObject *args);

/* ---- format.c: rows of text, and the integer columns the exports' kernels read --- */

/* An integer array of any width (1, 2, 4 or 8-byte items) and sign: a buffer's. */
typedef struct {
  const char *values;
  Py_ssize_t itemsize, n;
  int is_signed;
} omptpy_ints;

/* `ints` over a buffer got with PyBUF_C_CONTIGUOUS | PyBUF_FORMAT; -1 (ValueError
 * about `what`) when its items are not such integers. */
int omptpy_ints_from(const Py_buffer *buf, omptpy_ints *ints, const char *what);

/* The kernels' array arguments: C-contiguous integer arrays of *n items (*n < 0:
 * any number, set in *n).  On error: -1 or NULL with ValueError naming `what`,
 * and b released (b->obj NULL), so that a caller releases whatever it holds. */

/* Integers of any width: 0, their items in `ints`. */
int omptpy_get_ints(PyObject *obj, Py_buffer *b, omptpy_ints *ints, Py_ssize_t *n,
                    const char *what);
/* Whether a buffer (got with PyBUF_FORMAT) holds signed 8-byte integers. */
static inline int omptpy_is_int64(const Py_buffer *b) {
  const char *format = b->format ? b->format : "B";
  char letter = *format ? format[strlen(format) - 1] : 'B';
  return b->itemsize == 8 && (letter == 'q' || letter == 'l');
}
/* Integers of `size` bytes (writable if asked): their items. */
void *omptpy_get_items(PyObject *obj, Py_buffer *b, Py_ssize_t size, Py_ssize_t *n, int writable,
                       const char *what);

/* Item i: its magnitude, and whether it is negative. */
static inline uint64_t omptpy_ints_get(const omptpy_ints *c, Py_ssize_t i, int *negative) {
  const char *at = c->values + c->itemsize * i;
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

/* Item i as the 64 bits of its two's complement (what a protobuf varint holds). */
static inline uint64_t omptpy_ints_bits(const omptpy_ints *c, Py_ssize_t i) {
  int negative;
  uint64_t u = omptpy_ints_get(c, i, &negative);
  return negative ? 0 - u : u;
}

/* How format_rows() writes a column's values (the module's FORMAT_*). */
enum {
  FORMAT_NUMBER, /* in decimal */
  FORMAT_MICROS, /* nanoseconds as microseconds with three decimals: -1234 -> -1.234 */
  FORMAT_HEX,    /* as a JSON string "0x1f" */
  FORMAT_TEXT,   /* a code: table[code]; `null` for a code outside the table */
  FORMAT_KINDS
};

PyObject *omptpy_py_format_rows(PyObject *m, PyObject *args);

/* ---- lod.c: the aggregates of the view's levels of detail ------------------------ */

PyObject *omptpy_py_lod_sum(PyObject *m, PyObject *args);

/* ---- proto.c: the Perfetto protobuf export's packets ------------------------------ */

/* What proto_payloads() makes of a column (the module's PROTO_*). */
enum {
  PROTO_FIELD,   /* a varint field of the TrackEvent (key: its number) */
  PROTO_NUMBER,  /* a debug annotation's int_value, uint_value if unsigned (key: name iid) */
  PROTO_POINTER, /* a debug annotation's pointer_value (key: name iid) */
  PROTO_TABLE,   /* table[code]: encoded fields; a debug annotation's value, key 0: as is */
  PROTO_KINDS
};

PyObject *omptpy_py_proto_payloads(PyObject *m, PyObject *args);
PyObject *omptpy_py_proto_nest(PyObject *m, PyObject *args);
PyObject *omptpy_py_proto_slots(PyObject *m, PyObject *args);
PyObject *omptpy_py_proto_packets(PyObject *m, PyObject *args);
/* The bytes a counter's packet takes at most (omptpy_put_counter). */
enum { OMPTPY_COUNTER_PACKET_MAX = 72 };
unsigned char *omptpy_put_counter(unsigned char *p, uint64_t time, uint64_t uuid,
                                  uint64_t value, uint64_t sequence);

/* ---- pystack.c: Python call stacks for the tool's records ------------------------ */

#define OMPTPY_PY_MAX_DEPTH 256
/* Why this build cannot capture Python stacks, or NULL. */
const char *omptpy_py_stacks_unsupported(void);
PyObject *omptpy_py_python_stacks(PyObject *m, PyObject *arg);
PyObject *omptpy_py_stack_tables(PyObject *m, PyObject *args);
PyObject *omptpy_py_time_captures(PyObject *m, PyObject *arg);

#endif /* OMPTPY_EXT_H */
