/*
 * Keys, pairing and lookups, for the analysis and the exports: pair() (begin
 * and end records of the same key) and find() (the row of a table with a
 * query's key), through open-addressing hash tables of rows.
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

/* A row's key is a value from each of a few columns.  A column is an integer
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

/* pair(keys, begins, begin_value, partner[, tags, enclosing]): begin/end
 * pairing in one pass over rows in time order.  keys: a list of columns (see
 * above); a row is a begin when its value in the column `begins` is
 * begin_value, else an end.  Within a key an end closes the latest open begin;
 * with `tags` (a column, or None), the latest open begin with the end's tag (a
 * tag of 0 on an end matches any), and the begins opened after that one are
 * dropped, never closed.  Writes partner (intp per row): a begin's end row, an
 * end's begin row, or -1 for a begin never closed and an end with no open
 * begin; and `enclosing` (intp per row, or None): for a begin, the latest open
 * begin of its key when it opened (-1: none), -1 for an end.  The table holds
 * the keys with open begins (the top of each one's stack); while a begin is
 * open, its partner entry links to the begin below it (-2 - row; -1 for none). */
PyObject *omptpy_py_pair(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *keys_list, *begins_spec, *partner, *tags_spec = Py_None, *enclosing = Py_None;
  PyObject *result = NULL;
  unsigned long long begin_value;
  if (!PyArg_ParseTuple(args, "OOKO|OO", &keys_list, &begins_spec, &begin_value, &partner,
                        &tags_spec, &enclosing))
    return NULL;
  keyset keys;
  column begins, tags = {0};
  Py_buffer p = {0}, e = {0};
  table t = {0};
  Py_ssize_t n = -1;
  int tagged = tags_spec != Py_None;
  if (keyset_get(&keys, keys_list, &n) < 0) return NULL;
  if (column_get(&begins, begins_spec, &n) < 0) goto release_keys;
  if (tagged && column_get(&tags, tags_spec, &n) < 0) goto done;
  if (PyObject_GetBuffer(partner, &p, PyBUF_WRITABLE) < 0) goto done;
  if (enclosing != Py_None && PyObject_GetBuffer(enclosing, &e, PyBUF_WRITABLE) < 0) goto done;
  if (p.len != n * (Py_ssize_t)sizeof(Py_ssize_t) ||
      (e.obj && e.len != n * (Py_ssize_t)sizeof(Py_ssize_t))) {
    PyErr_SetString(PyExc_ValueError, "pair: partner or enclosing has another length");
    goto done;
  }
  if (table_init(&t, 512) < 0) {
    PyErr_NoMemory();
    goto done;
  }
  Py_ssize_t *out = p.buf, *outer = e.obj ? e.buf : NULL;
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS
  key q;
  for (Py_ssize_t i = 0; i < n; i++) {
    key_read(&keys, i, &q);
    Py_ssize_t s = table_slot(&t, &keys, &q), top = t.slots[s].row;
    if (outer) outer[i] = -1;
    if (column_read(&begins, i) == begin_value) {
      out[i] = -2 - top;
      if (outer) outer[i] = top;
      if (table_set(&t, s, q.hash, i) < 0) {
        failed = 1;
        break;
      }
      continue;
    }
    /* The begin this end closes: the top, or the latest with the end's tag. */
    Py_ssize_t open = top;
    uint64_t tag = tagged ? column_read(&tags, i) : 0;
    while (tag && open >= 0 && column_read(&tags, open) != tag) open = -2 - out[open];
    if (open < 0) {
      out[i] = -1;
      continue;
    }
    for (Py_ssize_t above = top; above != open;) { /* dropped: never closed */
      Py_ssize_t below = -2 - out[above];
      out[above] = -1;
      above = below;
    }
    Py_ssize_t below = -2 - out[open];
    out[open] = i;
    out[i] = open;
    if (below >= 0)
      t.slots[s].row = below;
    else
      table_remove(&t, s);
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (out[i] < -1) out[i] = -1; /* a begin never closed */
  Py_END_ALLOW_THREADS
  result = failed ? PyErr_NoMemory() : omptpy_py_none();
done:
  table_free(&t);
  if (e.obj) PyBuffer_Release(&e);
  if (p.obj) PyBuffer_Release(&p);
  column_release(&tags);
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
PyObject *omptpy_py_find(PyObject *m, PyObject *args) {
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
  result = failed ? PyErr_NoMemory() : omptpy_py_none();
done:
  table_free(&t);
  if (o.obj) PyBuffer_Release(&o);
  column_release(&qtime);
  column_release(&ttime);
  keyset_release(&qkeys);
  keyset_release(&tkeys);
  return result;
}

