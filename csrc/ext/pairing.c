/*
 * Keys, pairing and lookups, for the analysis and the exports: pair() (begin
 * and end rows of the same key), pair_events() (every pairing of the tables at
 * once, in one pass over the records in time order, or in two halves by time in
 * two threads; the same pairing step as pair()) and find() (the row of a table
 * with a query's key), through open-addressing hash tables of rows.
 */
#include "ext.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A row's key is a value from each of a few columns.  A column is an integer
 * field of a buffer of one dimension and any stride (an array, or one field of
 * the records: numpy's view of a field of a structured array, read in place),
 * of 1, 2, 4 or 8-byte items read as unsigned; optionally through rows (int64:
 * the column's value i is the item at rows[i]); bytes may be read through a
 * table of bytes (value = table[byte], the last entry for bytes beyond it).
 * Python gives it as the tuple (array, missing_if_zero, table or None[, rows or
 * None]).  Rows with equal keys are found through an open-addressing hash table
 * of rows. */

enum { MAX_KEYS = 8, MAX_PAIRINGS = 16 };

typedef struct {
  Py_buffer data, table, rows;
  const char *base;
  Py_ssize_t stride, size;
  const int64_t *at; /* rows, or NULL */
  int zero_missing;  /* a row whose value is 0 has no key (find) */
} column;

static void column_release(column *c) {
  if (c->rows.obj) PyBuffer_Release(&c->rows);
  if (c->table.obj) PyBuffer_Release(&c->table);
  if (c->data.obj) PyBuffer_Release(&c->data);
  memset(c, 0, sizeof *c);
}

/* Reads a column's spec; *n: its rows (set when negative, else checked). */
static int column_get(column *c, PyObject *spec, Py_ssize_t *n) {
  PyObject *data, *table, *rows = Py_None;
  memset(c, 0, sizeof *c);
  if (!PyArg_ParseTuple(spec, "OpO|O", &data, &c->zero_missing, &table, &rows)) return -1;
  if (PyObject_GetBuffer(data, &c->data, PyBUF_STRIDES | PyBUF_FORMAT) < 0 ||
      (table != Py_None && PyObject_GetBuffer(table, &c->table, PyBUF_SIMPLE) < 0) ||
      (rows != Py_None &&
       PyObject_GetBuffer(rows, &c->rows, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)) {
    column_release(c);
    return -1;
  }
  const char *bad = NULL;
  Py_ssize_t items = c->data.ndim == 1 ? c->data.shape[0] : -1, count = items;
  c->size = c->data.itemsize;
  c->base = c->data.buf;
  c->stride = items >= 0 ? c->data.strides[0] : 0;
  if (items < 0)
    bad = "a column of one dimension";
  else if (c->size != 1 && c->size != 2 && c->size != 4 && c->size != 8)
    bad = "a column of 1, 2, 4 or 8-byte integers";
  else if (c->table.obj && (c->size != 1 || c->table.len < 1))
    bad = "a table for a column of bytes, not empty";
  else if (c->rows.obj && !omptpy_is_int64(&c->rows))
    bad = "rows of a column: an array of int64";
  if (!bad && c->rows.obj) {
    c->at = c->rows.buf;
    count = c->rows.len / 8;
    for (Py_ssize_t i = 0; i < count && !bad; i++)
      if (c->at[i] < 0 || c->at[i] >= items) bad = "rows of a column outside it";
  }
  if (!bad && *n >= 0 && count != *n) bad = "columns of different lengths";
  if (bad) {
    PyErr_SetString(PyExc_ValueError, bad);
    column_release(c);
    return -1;
  }
  *n = count;
  return 0;
}

/* The value of a column at the item `row` of its data (not through its rows). */
static inline uint64_t column_at(const column *c, Py_ssize_t row) {
  const char *p = c->base + row * c->stride;
  switch (c->size) {
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

static inline uint64_t column_read(const column *c, Py_ssize_t i) {
  return column_at(c, c->at ? c->at[i] : i);
}

/* Columns of a key; `packed`: their values fit in one word together (at most 8
 * bytes, a column read through a table of bytes counting 1), so that the key is
 * that word, and its hash (a bijection) tells it from every other. */
typedef struct {
  Py_ssize_t ncol, n;
  int packed, may_miss; /* may_miss: a column is missing_if_zero */
  int shift[MAX_KEYS];  /* packed: where each column's value lies in the word */
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
  Py_ssize_t bytes = 0;
  k->may_miss = 0;
  for (Py_ssize_t j = 0; j < k->ncol; j++) {
    k->shift[j] = 8 * (int)bytes;
    bytes += k->col[j].size;
    k->may_miss |= k->col[j].zero_missing;
  }
  k->packed = bytes <= 8;
  return 0;
}

/* A row's key, read once: its values, their hash, and whether it has none. */
typedef struct {
  uint64_t word[MAX_KEYS], hash;
  int missing;
} key;

/* A word's hash: a bijection (xor, a multiplication by an odd number, an xorshift). */
static inline uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0xBF58476D1CE4E5B9u;
  return h ^ h >> 31;
}

/* The key's missing flag and hash, from its words. */
static inline void key_hash(const keyset *k, key *q) {
  uint64_t h = 0x9E3779B97F4A7C15u, packed = 0;
  int missing = 0;
  if (k->packed) {
    for (Py_ssize_t j = 0; j < k->ncol; j++) packed |= q->word[j] << k->shift[j];
    h = mix(h, packed);
  } else {
    for (Py_ssize_t j = 0; j < k->ncol; j++) h = mix(h, q->word[j]);
  }
  if (k->may_miss)
    for (Py_ssize_t j = 0; j < k->ncol; j++) missing |= k->col[j].zero_missing && q->word[j] == 0;
  q->hash = h;
  q->missing = missing;
}

/* The key of row i (each column through its own rows). */
static inline void key_read(const keyset *k, Py_ssize_t i, key *out) {
  for (Py_ssize_t j = 0; j < k->ncol; j++) out->word[j] = column_read(&k->col[j], i);
  key_hash(k, out);
}

/* The key of the item `row` of every column's data (columns read through the same
 * rows, as pair_events' are: the row read once). */
static inline void key_at(const keyset *k, Py_ssize_t row, key *out) {
  if (k->ncol == 1 && k->col[0].size == 8) { /* an id (most keys of pair_events) */
    const column *c = &k->col[0];
    uint64_t v;
    memcpy(&v, c->base + row * c->stride, 8);
    out->word[0] = v;
    out->hash = mix(0x9E3779B97F4A7C15u, v);
    out->missing = c->zero_missing && v == 0;
    return;
  }
  for (Py_ssize_t j = 0; j < k->ncol; j++) out->word[j] = column_at(&k->col[j], row);
  key_hash(k, out);
}

/* The columns' item i (each through its own rows, as key_read reads them) fetched
 * into the cache, when i < k->n: rows read far apart (find's, of records). */
static inline void key_read_prefetch(const keyset *k, Py_ssize_t i) {
  if (i >= k->n) return;
  for (Py_ssize_t j = 0; j < k->ncol; j++) {
    const column *c = &k->col[j];
    __builtin_prefetch(c->base + (c->at ? c->at[i] : i) * c->stride);
  }
}

/* The key columns of the record `row` fetched into the cache (read later by key_at). */
static inline void key_prefetch(const keyset *k, Py_ssize_t row) {
  for (Py_ssize_t j = 0; j < k->ncol; j++)
    __builtin_prefetch(k->col[j].base + row * k->col[j].stride);
}

static int key_matches(const keyset *k, Py_ssize_t row, const key *q) {
  for (Py_ssize_t j = 0; j < k->ncol; j++)
    if (column_read(&k->col[j], row) != q->word[j]) return 0;
  return 1;
}

/* Slots of (hash, entry), entry -1 when empty; a power of two of them, at most
 * half used.  An entry is a row of the keyset, or an index that `rows` maps to
 * one (pair_events: a begin's slot, `rows` the begins' rows). */
typedef struct {
  uint64_t hash;
  Py_ssize_t row;
} slot;

typedef struct {
  slot *slots;
  Py_ssize_t mask, used;
  const int64_t *rows; /* an entry's row, or NULL: the entry is the row */
} table;

static int table_init(table *t, Py_ssize_t rows) {
  Py_ssize_t size = 16;
  while (size < 2 * rows) size *= 2;
  t->slots = malloc((size_t)size * sizeof *t->slots);
  t->mask = size - 1;
  t->used = 0;
  t->rows = NULL;
  if (!t->slots) return -1;
  for (Py_ssize_t s = 0; s < size; s++) t->slots[s].row = -1;
  return 0;
}

static void table_free(table *t) { free(t->slots); }

/* The slot holding an entry of `keys` with the key q, or the empty slot where it
 * would go.  A packed key is its hash (key_at), so the entry's own values, far in
 * memory, are not read again. */
static Py_ssize_t table_slot(const table *t, const keyset *keys, const key *q) {
  Py_ssize_t s = (Py_ssize_t)(q->hash & (uint64_t)t->mask);
  for (;;) {
    Py_ssize_t e = t->slots[s].row;
    if (e < 0 || (t->slots[s].hash == q->hash &&
                  (keys->packed ||
                   key_matches(keys, t->rows ? (Py_ssize_t)t->rows[e] : e, q))))
      return s;
    s = (s + 1) & t->mask;
  }
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
  bigger.rows = t->rows;
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

/* ---- the pairing step: one implementation for pair() and pair_events() ------------- */

/* The begins open per key, each key's a stack: the table maps a key to its
 * latest open begin, and per begin (an entry of the table: a row, or a slot of
 * pair_events), link[begin] is, while it is open, -2 - the begin below it (-1:
 * none); once closed, its end's row; -1 if it was dropped. */
typedef struct {
  table open;
  const keyset *keys;
  const column *tags; /* or NULL */
  Py_ssize_t *link;
} stacks;

/* Opens the begin `entry` of key q on top of its key's stack: returns the begin
 * below it (-1: none), or -2 when out of memory. */
static Py_ssize_t stacks_open(stacks *st, const key *q, Py_ssize_t entry) {
  Py_ssize_t s = table_slot(&st->open, st->keys, q), top = st->open.slots[s].row;
  st->link[entry] = -2 - top;
  return table_set(&st->open, s, q->hash, entry) < 0 ? -2 : top;
}

/* The end at row i of key q closes the latest open begin of its key (with tags:
 * the latest with the end's tag, a tag of 0 matching any; the begins opened
 * above that one are dropped, never closed).  Returns the begin closed, or -1
 * when none is open. */
static Py_ssize_t stacks_close(stacks *st, const key *q, Py_ssize_t i) {
  Py_ssize_t s = table_slot(&st->open, st->keys, q), top = st->open.slots[s].row, open = top;
  uint64_t tag = st->tags ? column_read(st->tags, i) : 0;
  const int64_t *rows = st->open.rows;
  while (tag && open >= 0 &&
         column_read(st->tags, rows ? (Py_ssize_t)rows[open] : open) != tag)
    open = -2 - st->link[open];
  if (open < 0) return -1;
  for (Py_ssize_t above = top; above != open;) {
    Py_ssize_t below = -2 - st->link[above];
    st->link[above] = -1;
    above = below;
  }
  Py_ssize_t below = -2 - st->link[open];
  st->link[open] = i;
  if (below >= 0)
    st->open.slots[s].row = below;
  else
    table_remove(&st->open, s);
  return open;
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
 * begin of its key when it opened (-1: none), -1 for an end.  The rows are the
 * entries of the stacks, partner their links. */
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
  stacks st = {0};
  Py_ssize_t n = -1;
  if (keyset_get(&keys, keys_list, &n) < 0) return NULL;
  if (column_get(&begins, begins_spec, &n) < 0) goto release_keys;
  if (tags_spec != Py_None && column_get(&tags, tags_spec, &n) < 0) goto done;
  if (PyObject_GetBuffer(partner, &p, PyBUF_WRITABLE) < 0) goto done;
  if (enclosing != Py_None && PyObject_GetBuffer(enclosing, &e, PyBUF_WRITABLE) < 0) goto done;
  if (p.len != n * (Py_ssize_t)sizeof(Py_ssize_t) ||
      (e.obj && e.len != n * (Py_ssize_t)sizeof(Py_ssize_t))) {
    PyErr_SetString(PyExc_ValueError, "pair: partner or enclosing has another length");
    goto done;
  }
  if (table_init(&st.open, 512) < 0) {
    PyErr_NoMemory();
    goto done;
  }
  st.keys = &keys;
  st.tags = tags_spec != Py_None ? &tags : NULL;
  st.link = p.buf;
  Py_ssize_t *out = p.buf, *outer = e.obj ? e.buf : NULL;
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS
  key q;
  for (Py_ssize_t i = 0; i < n; i++) {
    key_read(&keys, i, &q);
    if (outer) outer[i] = -1;
    if (column_read(&begins, i) == begin_value) {
      Py_ssize_t below = stacks_open(&st, &q, i);
      if (below == -2) {
        failed = 1;
        break;
      }
      if (outer) outer[i] = below;
      continue;
    }
    out[i] = stacks_close(&st, &q, i);
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (out[i] < -1) out[i] = -1; /* a begin never closed */
  Py_END_ALLOW_THREADS
  result = failed ? PyErr_NoMemory() : omptpy_py_none();
done:
  table_free(&st.open);
  if (e.obj) PyBuffer_Release(&e);
  if (p.obj) PyBuffer_Release(&p);
  column_release(&tags);
  column_release(&begins);
release_keys:
  keyset_release(&keys);
  return result;
}

/* ---- pair_events --------------------------------------------------------------------- */

/* The last key looked up in a pairing (look_in), when (its changes then), and
 * what it found. */
typedef struct {
  Py_ssize_t changes;
  key q;
  int64_t found;
} look_memo;

typedef struct {
  Py_buffer roles;
  keyset keys;
  stacks st;
  PyObject *begins, *ends; /* bytes: int64 per begin */
  Py_ssize_t count, closed, unmatched_ends;
  /* Looked into (see lookup): its keys seen (a Bloom filter, 16 bits a begin, of
   * seen_mask + 1 words) and
   * those that may have begun twice; per begin, once paired, its index among
   * those closed, or -1. */
  uint64_t *seen;
  Py_ssize_t seen_mask;
  table twice;
  int ranked; /* looked into by any lookup: its closed begins numbered (rank) */
  int64_t *rank;
  int64_t *end_time; /* with end_times: per begin, its end's time once closed */
  /* Looked into: the changes of its stacks so far (opens and ends), and the last
   * key the pass looked up in it: a lookup of the same key with no change since
   * finds the same (the begins of a region look up its id one after the other). */
  Py_ssize_t changes;
  look_memo memo;
  /* The second half of a split pass: its ends that closed none of its begins (a
   * row and what the pass holds of it, in order), which may close begins of the
   * first half (see split_merge). */
  int64_t *loose;
  Py_ssize_t nloose, loose_cap;
} pairing;

/* A lookup: per begin of pairing `of`, the begin of pairing `in` with the key of
 * its own record (`in`'s key): the one open then (found[begin], its slot), when
 * no other begun before has the key; -1 when the key is missing; LOOK_AGAIN when
 * it may not be the first begun, or none is open.  An `enclosing` lookup finds
 * the begin open with the key then, the latest begun of those open (-1: none);
 * in the second half of a split pass, with none of its own open, ENCLOSING_AGAIN
 * - (the loose ends of `in` so far): split_merge finds it in the first half's. */
typedef struct {
  Py_ssize_t of, in;
  int enclosing;
  keyset keys;
  int64_t *found; /* out's bytes */
  PyObject *out;  /* bytearray: int64 per begin, then per closed begin (resized) */
} lookup;

enum { LOOK_AGAIN = -2, ENCLOSING_AGAIN = -3 };

/* What a half's own state holds (split_pass): its stacks, filter and loose ends. */
static void half_release(pairing *g) {
  free(g->loose);
  free(g->seen);
  table_free(&g->twice);
  table_free(&g->st.open);
}

static void pairing_release(pairing *g) {
  free(g->loose);
  free(g->rank);
  free(g->end_time);
  free(g->seen);
  table_free(&g->twice);
  table_free(&g->st.open);
  keyset_release(&g->keys);
  Py_XDECREF(g->ends);
  Py_XDECREF(g->begins);
  if (g->roles.obj) PyBuffer_Release(&g->roles);
}

/* The index of roles of a record of `event` and `endpoint`. */
static inline Py_ssize_t role_index(uint64_t event, uint64_t endpoint) {
  return (Py_ssize_t)(4 * event + (endpoint < 4 ? endpoint : 0));
}

/* Reads the keys of a spec (a list), every column of the records (no rows of their
 * own), then made to read through `order` (NULL: read by row). */
static int keys_through(keyset *k, PyObject *spec, Py_ssize_t *records, const int64_t *order) {
  if (keyset_get(k, spec, records) < 0) return -1;
  for (Py_ssize_t j = 0; j < k->ncol; j++) {
    if (k->col[j].at) {
      PyErr_SetString(PyExc_ValueError, "pair_events: columns read through order, not rows");
      return -1;
    }
    k->col[j].at = order;
  }
  return 0;
}

/* Pairing p's key q (of its begin at slot s) seen: a key the filter may have seen
 * before goes into p->twice.  The filter sets 3 bits of one word per key, the
 * bits from the hash, the word from the key's last value without its 3 low bits:
 * ids given in sequence share words, read from the cache (a key sharing a word
 * with many more only raises the false positives, which are looked up again).
 * -1: out of memory. */
static inline uint64_t *seen_word(const pairing *p, const key *q, uint64_t *bits) {
  uint64_t last = q->word[p->keys.ncol - 1], mixed = last >> 3;
  for (Py_ssize_t j = 0; j < p->keys.ncol; j++) /* the rest, and the high bits, moved far */
    mixed ^= (j + 1 < p->keys.ncol ? q->word[j] : last >> 32) * 0x9E3779B97F4A7C15u;
  *bits = (uint64_t)1 << (q->hash >> 58) | (uint64_t)1 << (q->hash >> 52 & 63) |
          (uint64_t)1 << (q->hash >> 46 & 63);
  return &p->seen[mixed & (uint64_t)p->seen_mask];
}

/* Whether pairing p's filter may have seen the key q (no: it never began). */
static inline int seen_maybe(const pairing *p, const key *q) {
  uint64_t bits, *word = seen_word(p, q, &bits);
  return (*word & bits) == bits;
}

static int see(pairing *p, const key *q, Py_ssize_t s) {
  uint64_t bits, *word = seen_word(p, q, &bits);
  int before = (*word & bits) == bits;
  *word |= bits;
  if (!before) return 0;
  Py_ssize_t h = table_slot(&p->twice, &p->keys, q);
  return p->twice.slots[h].row >= 0 ? 0 : table_set(&p->twice, h, q->hash, s);
}

/* Pairing p looked into, of `begins` begins: its filter of the keys seen (a power
 * of two of words, 16 bits a begin) and its table of those that may have begun
 * twice (entries: its begins' slots, as its stacks').  -1: out of memory. */
static int filter_init(pairing *p, Py_ssize_t begins) {
  p->seen_mask = 0;
  while (64 * (p->seen_mask + 1) < 16 * begins) p->seen_mask = 2 * p->seen_mask + 1;
  p->seen = calloc((size_t)p->seen_mask + 1, 8);
  if (!p->seen || table_init(&p->twice, 512) < 0) return -1;
  p->twice.rows = p->st.open.rows;
  return 0;
}

/* The begin of pairing `in` open with the key q now, the latest begun of those
 * open (its slot), or -1. */
static inline int64_t open_in(const pairing *in, const key *q) {
  return in->st.open.slots[table_slot(&in->st.open, &in->keys, q)].row;
}

/* What a lookup of the key q (not missing) in pairing `in` finds now: the begin
 * open with it (its slot), or LOOK_AGAIN where another of its key may have begun
 * before or none is open.  The last answer is kept (in m: the pass's in->memo,
 * or a thread's own while `in` does not change). */
static int64_t look_in(const pairing *in, const key *q, look_memo *m) {
  if (m->changes == in->changes && m->q.hash == q->hash &&
      (in->keys.packed || !memcmp(m->q.word, q->word, (size_t)in->keys.ncol * sizeof *q->word)))
    return m->found;
  int64_t found = LOOK_AGAIN;
  if (in->twice.slots[table_slot(&in->twice, &in->keys, q)].row < 0) {
    int64_t e = open_in(in, q);
    if (e >= 0) found = e;
  }
  m->q = *q;
  m->changes = in->changes;
  return m->found = found;
}

/* ---- the pass ---------------------------------------------------------------------- */

/* What the pass reads: the records in time order (`order`, n of them, or as
 * `merge` makes it), per record its role index (of its event and endpoint; the
 * last, nroles - 1: nothing to do), per role index the pairings it opens and
 * closes (bit k: pairing k), per pairing the lookups of its begins (their
 * indices); `as_rows`: the begins and ends are held as rows, else as positions
 * in the order. */
typedef struct {
  pairing *g;
  lookup *lk;
  const int64_t *order;
  omptpy_order *merge;
  Py_ssize_t n, nroles;
  const column *events, *endpoints, *times; /* times: of the ends, with end_times */
  int as_rows;
  const uint32_t *opens, *closes;
  const Py_ssize_t *capacity; /* per pairing: its begins counted before the pass */
  Py_ssize_t looks[MAX_PAIRINGS][MAX_PAIRINGS], nlooks[MAX_PAIRINGS];
  /* A half of a split pass (merged order only): the first takes the records before
   * `before` (INT64_MAX: all), the second keeps its loose ends. */
  int64_t before;
  int second;
} passing;

/* The role index of the record at `row`. */
static inline Py_ssize_t role_at(const passing *w, Py_ssize_t row) {
  Py_ssize_t at = role_index(column_at(w->events, row), column_at(w->endpoints, row));
  return at < w->nroles ? at : w->nroles - 1;
}

/* The lookups of the begin at record `row`, slot s, of pairing k (its key: own;
 * an enclosing lookup's, whose keys are those of k's key). */
static void look_up(const passing *w, Py_ssize_t k, Py_ssize_t s, Py_ssize_t row,
                    const key *own) {
  key q;
  for (Py_ssize_t j = 0; j < w->nlooks[k]; j++) {
    lookup *l = &w->lk[w->looks[k][j]];
    pairing *in = &w->g[l->in];
    if (l->enclosing) {
      if (own->missing)
        l->found[s] = -1;
      else if ((l->found[s] = open_in(in, own)) < 0 && w->second)
        l->found[s] = ENCLOSING_AGAIN - in->nloose; /* open in the first half, if any */
      continue;
    }
    key_at(&l->keys, row, &q);
    l->found[s] = q.missing ? -1 : look_in(in, &q, &in->memo);
  }
}

/* An end of the second half that closed none of its begins, kept. -1: out of memory. */
static int keep_loose(pairing *p, Py_ssize_t row, Py_ssize_t held) {
  if (p->nloose == p->loose_cap) {
    Py_ssize_t cap = p->loose_cap ? 2 * p->loose_cap : 64;
    int64_t *more = realloc(p->loose, (size_t)cap * 2 * sizeof *more);
    if (!more) return -1;
    p->loose = more;
    p->loose_cap = cap;
  }
  p->loose[2 * p->nloose] = row;
  p->loose[2 * p->nloose++ + 1] = held;
  return 0;
}

/* The records' rows a merged order gives at a time. */
enum { BLOCK = 1024 };

/* The pass over the records in time order, a block of them at a time.  Returns
 * 0, 1 when out of memory, 2 when order names a row twice. */
static int pass(const passing *w) {
  key q;
  int64_t block[BLOCK];
  for (Py_ssize_t first = 0;; first += BLOCK) {
    const int64_t *rows = block;
    Py_ssize_t m;
    int last = 0;
    if (w->merge) {
      m = omptpy_order_fill(w->merge, block, BLOCK);
      for (Py_ssize_t j = 0; w->before != INT64_MAX && j < m; j++)
        if ((int64_t)column_at(w->times, block[j]) >= w->before) { /* the rest: later */
          m = j;
          last = 1;
        }
    } else {
      rows = w->order + first;
      m = w->n - first < BLOCK ? w->n - first : BLOCK;
    }
    if (m <= 0) return 0;
    for (Py_ssize_t j = 0; j < m; j++) {
      Py_ssize_t row = rows[j], at = role_at(w, row), held = w->as_rows ? row : first + j;
      uint32_t opening = w->opens[at];
      for (uint32_t todo = opening | w->closes[at]; todo; todo &= todo - 1) {
        Py_ssize_t k = __builtin_ctz(todo), s;
        pairing *p = &w->g[k];
        key_at(&p->keys, row, &q);
        p->changes++;
        if (!(opening >> k & 1)) {
          Py_ssize_t closed = stacks_close(&p->st, &q, held);
          if (closed < 0 && w->second) {
            if (keep_loose(p, row, held) < 0) return 1;
          } else if (closed < 0) {
            p->unmatched_ends++;
          } else if (p->end_time)
            p->end_time[closed] = (int64_t)column_at(w->times, row);
          continue;
        }
        if ((s = p->count) == w->capacity[k]) return 2;
        ((int64_t *)PyBytes_AS_STRING(p->begins))[s] = held;
        if (stacks_open(&p->st, &q, s) == -2 || (p->seen && see(p, &q, s) < 0)) return 1;
        p->count++;
        look_up(w, k, s, row, &q);
      }
    }
    if (last) return 0;
  }
}

/* ---- a pass split in two halves by time, each in a thread -------------------------- */

/* Records from which a merged pass is split (unless the caller says where). */
enum { SPLIT_MIN = 1 << 20, SPLIT_SAMPLE = 1023 };

/* Where to split the records: the median time of a sample of them, evenly spread
 * over the rows (a thread's records lie together, in time order). */
static int64_t split_time(const column *times, Py_ssize_t records) {
  int64_t sample[SPLIT_SAMPLE];
  for (Py_ssize_t i = 0; i < SPLIT_SAMPLE; i++)
    sample[i] = (int64_t)column_at(times, (Py_ssize_t)((double)i * (double)records / SPLIT_SAMPLE));
  qsort(sample, SPLIT_SAMPLE, sizeof *sample, omptpy_cmp_int64);
  return sample[SPLIT_SAMPLE / 2];
}

/* The records [from, to) counted per role index into there, and into there2 those
 * of a split pass's second half (at or after split_at); with `runs`, where their
 * runs in time order start (starts, nstarts of them; a run's first record is
 * earlier than the record before it), read with the records: the merge chains
 * the runs without reading every time again.  Past as many as the merge takes
 * (too_many), or out of memory, it stops noting them (the merge reads them). */
typedef struct {
  const passing *w;
  const column *times;
  int split, runs, too_many;
  int64_t split_at;
  Py_ssize_t from, to, *there, *there2;
  Py_ssize_t *starts, nstarts, cap;
} count_job;

static void run_starts_at(count_job *c, Py_ssize_t r) {
  if (c->too_many) return;
  if (c->nstarts == c->cap) {
    Py_ssize_t most = (c->w->n / OMPTPY_MIN_RUN + OMPTPY_MAX_CHAINS + 2), cap = 2 * c->cap + 64;
    Py_ssize_t *more = c->cap < most ? realloc(c->starts, (size_t)cap * sizeof *more) : NULL;
    if (!more) {
      c->too_many = 1;
      return;
    }
    c->starts = more;
    c->cap = cap;
  }
  c->starts[c->nstarts++] = r;
}

static void *count_roles(void *arg) {
  count_job *c = arg;
  int64_t before = c->runs && c->from > 0 ? (int64_t)column_at(c->times, c->from - 1) : INT64_MIN;
  if (c->runs && c->from == 0 && c->to > 0) run_starts_at(c, 0);
  for (Py_ssize_t r = c->from; r < c->to; r++) {
    Py_ssize_t at = role_at(c->w, r);
    c->there[at]++;
    if (!c->split && !c->runs) continue;
    int64_t t = (int64_t)column_at(c->times, r);
    if (c->split && t >= c->split_at) c->there2[at]++;
    if (c->runs && t < before) run_starts_at(c, r);
    before = t;
  }
  return NULL;
}

/* The CPUs this process may run on. */
static int usable_cpus(void) {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

/* The second half's state of pairing p (the first half's, g): the same keys and
 * outputs, its begins numbered from `from` (the first half's count), its own
 * stacks, and its own filter when it is looked into (`begins`: its own).
 * -1: out of memory (what it holds: half_release). */
static int half_init(pairing *p, const pairing *g, Py_ssize_t from, Py_ssize_t begins) {
  *p = *g;
  p->st.open = (table){0};
  p->twice = (table){0};
  p->seen = NULL;
  p->loose = NULL;
  p->nloose = p->loose_cap = 0;
  p->rank = NULL;
  p->count = from;
  p->changes = 0;
  p->memo.changes = -1;
  if (table_init(&p->st.open, 512) < 0) return -1;
  p->st.open.rows = g->st.open.rows;
  p->st.keys = &g->keys;
  return g->seen ? filter_init(p, begins) : 0;
}

typedef struct {
  const passing *w;
  int failed;
} half_job;

static void *second_half(void *arg) {
  half_job *job = arg;
  job->failed = pass(job->w);
  return NULL;
}

/* Tasks 0 to n - 1, each run(ctx, task) once, taken in turn by two threads (this
 * one and another, when there are two CPUs and it starts): the joins' parts that
 * are apart. */
typedef struct {
  void (*run)(void *, Py_ssize_t);
  void *ctx;
  Py_ssize_t n;
  atomic_ptrdiff_t next;
} tasks;

static void *tasks_take(void *arg) {
  tasks *t = arg;
  for (Py_ssize_t i; (i = (Py_ssize_t)atomic_fetch_add(&t->next, 1)) < t->n;) t->run(t->ctx, i);
  return NULL;
}

static void in_two(void (*run)(void *, Py_ssize_t), void *ctx, Py_ssize_t n) {
  tasks t = {run, ctx, n, 0};
  pthread_t other;
  int two = n > 1 && usable_cpus() > 1 && pthread_create(&other, NULL, tasks_take, &t) == 0;
  tasks_take(&t);
  if (two) pthread_join(other, NULL);
}

/* The enclosing lookups into pairing k (of the first half's states g) of the
 * second half's begins that found none of its own open (ENCLOSING_AGAIN - j),
 * up to those made after j of its loose ends (h: the second half's states;
 * next: per lookup, the first of its begins not yet seen): they find the begin
 * open then in the first half's stacks, as the pass would have. */
static void enclosing_again(const pairing *g, const pairing *h, const Py_ssize_t *from,
                            lookup *lk, Py_ssize_t nlk, Py_ssize_t k, Py_ssize_t j,
                            Py_ssize_t *next) {
  key q;
  for (Py_ssize_t l = 0; l < nlk; l++) {
    if (!lk[l].enclosing || lk[l].in != k) continue;
    const int64_t *rows = (const int64_t *)PyBytes_AS_STRING(g[lk[l].of].begins);
    Py_ssize_t s = next[l] > from[lk[l].of] ? next[l] : from[lk[l].of];
    for (; s < h[lk[l].of].count; s++) {
      int64_t e = lk[l].found[s];
      if (e > ENCLOSING_AGAIN) continue; /* found in the second half */
      if (ENCLOSING_AGAIN - e > j) break; /* after more loose ends */
      key_at(&lk[l].keys, (Py_ssize_t)rows[s], &q);
      lk[l].found[s] = open_in(&g[k], &q);
    }
    next[l] = s;
  }
}

/* What the second half's lookups (not enclosing) look up again in the first's
 * states (split_merge), in parts of MERGE_PART_MIN begins at least (a few: the
 * tests' small traces are cut too), MERGE_PARTS at most per lookup: a task a part. */
enum { MERGE_PARTS = 8, MERGE_PART_MIN = 64 };

typedef struct {
  const pairing *g, *h;
  const Py_ssize_t *from;
  lookup *lk;
} merge_job;

static void look_again_part(void *arg, Py_ssize_t task) {
  const merge_job *m = arg;
  lookup *l = &m->lk[task / MERGE_PARTS];
  if (l->enclosing) return;
  const pairing *in = &m->g[l->in];
  const int64_t *rows = (const int64_t *)PyBytes_AS_STRING(m->g[l->of].begins);
  Py_ssize_t first = m->from[l->of], count = m->h[l->of].count - first;
  Py_ssize_t parts = count / MERGE_PART_MIN + 1, part = task % MERGE_PARTS;
  if (parts > MERGE_PARTS) parts = MERGE_PARTS;
  if (part >= parts) return;
  Py_ssize_t start = first + count * part / parts, stop = first + count * (part + 1) / parts;
  look_memo memo = {.changes = -1}; /* its own: `in` does not change now */
  key q;
  for (Py_ssize_t s = start; s < stop; s++) {
    /* the rows lie far apart, read long after the pass: fetched ahead */
    if (s + OMPTPY_FETCH_AHEAD < stop)
      key_prefetch(&l->keys, (Py_ssize_t)rows[s + OMPTPY_FETCH_AHEAD]);
    key_at(&l->keys, (Py_ssize_t)rows[s], &q);
    if (!q.missing && seen_maybe(in, &q)) l->found[s] = look_in(in, &q, &memo);
  }
}

/* The second half's results joined to the first's (g: the first half's states,
 * h: the second's).  First its lookups: one of a key that began in the first
 * half finds that begin when it is the key's only one there and was open at the
 * split (the first of its key, as the pass would have found it), else
 * LOOK_AGAIN (the caller finds those), in parts taken by two threads
 * (look_again_part); then its loose ends close the begins left open by the
 * first half, in order, as if read in one pass, and between them its enclosing
 * lookups that found none of its own open find theirs in the first half's
 * stacks (enclosing_again).  -1: the first half did not fill its begins
 * (an order that names a row twice). */
static int split_merge(pairing *g, pairing *h, const Py_ssize_t *from, Py_ssize_t npairings,
                       lookup *lk, Py_ssize_t nlk, const column *times) {
  key q;
  for (Py_ssize_t k = 0; k < npairings; k++)
    if (g[k].count != from[k]) return -1;
  merge_job job = {g, h, from, lk};
  in_two(look_again_part, &job, nlk * MERGE_PARTS);
  Py_ssize_t next[MAX_PAIRINGS] = {0};
  for (Py_ssize_t k = 0; k < npairings; k++) {
    pairing *p = &g[k];
    for (Py_ssize_t j = 0; j < h[k].nloose; j++) {
      enclosing_again(g, h, from, lk, nlk, k, j, next);
      Py_ssize_t row = (Py_ssize_t)h[k].loose[2 * j];
      key_at(&p->keys, row, &q);
      Py_ssize_t closed = stacks_close(&p->st, &q, (Py_ssize_t)h[k].loose[2 * j + 1]);
      if (closed < 0)
        p->unmatched_ends++;
      else if (p->end_time)
        p->end_time[closed] = (int64_t)column_at(times, row);
    }
    enclosing_again(g, h, from, lk, nlk, k, h[k].nloose, next);
  }
  for (Py_ssize_t k = 0; k < npairings; k++) g[k].count = h[k].count;
  return 0;
}

/* The end of pair_events, a pairing or a lookup a task (in_two): `failed` 1 when
 * out of memory. */
typedef struct {
  pairing *g;
  lookup *lk;
  atomic_int failed;
} tail_job;

/* Pairing k, looked into: its closed begins numbered (rank, -1: not closed). */
static void rank_pairing(void *arg, Py_ssize_t k) {
  tail_job *t = arg;
  pairing *p = &t->g[k];
  if (!p->ranked) return;
  if (!(p->rank = malloc(8 * (size_t)p->count + 1))) {
    t->failed = 1;
    return;
  }
  for (Py_ssize_t s = 0, closed = 0; s < p->count; s++)
    p->rank[s] = p->st.link[s] >= 0 ? closed++ : -1;
}

/* Lookup l's found, per closed begin, as the index of a closed pair. */
static void number_found(void *arg, Py_ssize_t l) {
  tail_job *t = arg;
  const lookup *lk = &t->lk[l];
  const pairing *p = &t->g[lk->of], *in = &t->g[lk->in];
  int64_t *found = lk->found, closed = 0; /* written over as it is read: closed <= s */
  for (Py_ssize_t s = 0; s < p->count; s++) {
    if (p->st.link[s] < 0) continue;
    int64_t e = found[s];
    found[closed++] = e < 0                 ? e
                      : in->rank[e] >= 0    ? in->rank[e]
                      : lk->enclosing       ? -1
                                            : LOOK_AGAIN;
  }
}

/* Pairing k's closed pairs first, then the begins never closed (each in begin
 * order), as the pass held them: positions in order or, with as_rows, rows; the
 * ends of those closed (their times, with end_times) in its links. */
static void closed_first(void *arg, Py_ssize_t k) {
  tail_job *t = arg;
  pairing *p = &t->g[k];
  int64_t *begins = (int64_t *)PyBytes_AS_STRING(p->begins), *open_begins;
  Py_ssize_t *link = p->st.link, closed = 0, open = 0;
  for (Py_ssize_t s = 0; s < p->count; s++) open += link[s] < 0;
  if (!(open_begins = malloc((size_t)open * sizeof *open_begins + 1))) {
    t->failed = 1;
    return;
  }
  open = 0;
  for (Py_ssize_t s = 0; s < p->count; s++) { /* closed <= s: read before written */
    int64_t begin = begins[s];
    if (link[s] < 0) {
      open_begins[open++] = begin;
      continue;
    }
    link[closed] = p->end_time ? p->end_time[s] : link[s];
    begins[closed++] = begin;
  }
  memcpy(begins + closed, open_begins, (size_t)open * sizeof *begins);
  free(open_begins);
  p->closed = closed;
}

/* pair_events(order, events, endpoints, pairings[, as_rows, lookups, times, end_times,
 * split]):
 * several pairings of the records in one pass over them in time order, each as
 * pair() pairs (no tags), for the tables and the exports.  The columns (see
 * above; no rows of their own) are of the records: `events` and `endpoints`
 * their event numbers and endpoints; `order` (int64) the records in time order,
 * through which the pass reads every column, or None with as_rows: the pass
 * merges the time order of `times` (the records' int64 times, any stride) as
 * it goes (time_order's merge, no array of it), and returns None when they are
 * not in a few chains of runs (the caller orders them then); with end_times
 * (and times), the ends are given as their records' times, read as the pass
 * closes them (no gather of them after it).  A pairing is (roles, keys): roles, bytes,
 * 4 per event number e: what a record of e does (PAIR_*) at roles[4 e +
 * endpoint], the endpoint 1 to 3, 0 for any other (event numbers beyond:
 * nothing); keys, a list of columns.  A lookup is (pairing, in, keys[,
 * enclosing]): for each begin of the pairing, the pair of pairing `in` whose
 * begin is the first with the keys (of `in`) that its own record has in `keys`
 * (as find() finds it among the closed pairs; a missing key finds none).  It is
 * looked up as the pair begins, in the begins open then, the one of the key when
 * no other of the key had begun (a Bloom filter of the keys begun, 16 bits a
 * begin, says which may have): no table of every begin, whose rows would be far
 * in memory.  With `enclosing` true, the pair of `in` open with the keys as the
 * pair begins, the latest begun of those open (none, or one never closed: -1);
 * its keys are those of its pairing's key, read once for both.
 * Returns
 * (per pairing (begins, ends, ends closing nothing), per lookup found): bytes of
 * int64, the begins' positions in `order` (with as_rows, their rows), those
 * closed first, then those never closed, each in order, and the ends'
 * positions (rows) of those closed; found, a bytearray of int64 (the caller
 * writes what it finds again into it, no copy), per closed begin the index of
 * the pair found among the closed ones, -1 for none, LOOK_AGAIN (-2) where it
 * was not open or another of its key may have begun before (find() those; an
 * enclosing lookup finds every one).
 * A merged pass is split at the time `split` (None: from SPLIT_MIN records on,
 * with two CPUs, at split_time) into two halves, the records before it and those
 * from it on, the second read in a thread of its own as the first is read here,
 * into the same outputs (its begins after the first's, counted apart), then
 * joined (split_merge): the same results as one pass. */
PyObject *omptpy_py_pair_events(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *order_obj, *events_spec, *endpoints_spec, *list, *result = NULL;
  PyObject *lookup_list = NULL, *times_obj = Py_None, *split_obj = Py_None;
  int as_rows = 0, end_times = 0;
  if (!PyArg_ParseTuple(args, "OOOO!|pO!OpO", &order_obj, &events_spec, &endpoints_spec,
                        &PyList_Type, &list, &as_rows, &PyList_Type, &lookup_list, &times_obj,
                        &end_times, &split_obj))
    return NULL;
  Py_ssize_t records = -1, npairings = PyList_GET_SIZE(list);
  Py_ssize_t nlk = lookup_list ? PyList_GET_SIZE(lookup_list) : 0;
  uint32_t *opens = NULL, *closes = NULL;
  Py_ssize_t *there = NULL;
  column events = {0}, endpoints = {0};
  Py_buffer order_buf = {0}, times_buf = {0};
  omptpy_order merge = {0}, merge2;
  Py_ssize_t *run_starts = NULL, nrun_starts = 0; /* where the runs of times start */
  pairing g[MAX_PAIRINGS], h[MAX_PAIRINGS]; /* h: the second half's, when split */
  lookup lk[MAX_PAIRINGS];
  int split = 0;
  int64_t split_at = 0;
  memset(g, 0, sizeof g);
  memset(h, 0, sizeof h);
  memset(lk, 0, sizeof lk);
  if (npairings > MAX_PAIRINGS || nlk > MAX_PAIRINGS) {
    PyErr_Format(PyExc_ValueError, "pair_events: at most %d pairings and lookups",
                 (int)MAX_PAIRINGS);
    return NULL;
  }
  if (column_get(&events, events_spec, &records) < 0 ||
      column_get(&endpoints, endpoints_spec, &records) < 0)
    goto done;
  const char *bad = NULL;
  column times = {0}; /* the records' times (read in place, never released as a column) */
  if (times_obj != Py_None) {
    if (PyObject_GetBuffer(times_obj, &times_buf, PyBUF_STRIDES | PyBUF_FORMAT) < 0) goto done;
    if (times_buf.ndim != 1 || !omptpy_is_int64(&times_buf) || times_buf.shape[0] != records)
      bad = "pair_events: times, int64 of one dimension, one a record";
    else
      times.base = times_buf.buf, times.stride = times_buf.strides[0], times.size = 8;
  }
  if (order_obj != Py_None) {
    if (PyObject_GetBuffer(order_obj, &order_buf, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    if (!omptpy_is_int64(&order_buf)) bad = "pair_events: order, an array of int64";
  } else if (!as_rows || times_obj == Py_None) {
    bad = "pair_events: without an order, times to merge and as_rows";
  }
  if (end_times && times_obj == Py_None) bad = "pair_events: end_times without times";
  if (split_obj != Py_None) { /* split where told (tests), or as the records' number says */
    split_at = PyLong_AsLongLong(split_obj);
    if (split_at == -1 && PyErr_Occurred()) goto done;
    split = 1;
    if (order_obj != Py_None) bad = "pair_events: a split is of the merged order (order None)";
  }
  const int64_t *order = order_buf.obj ? order_buf.buf : NULL;
  Py_ssize_t n = order ? order_buf.len / 8 : records;
  if (events.at || endpoints.at) bad = "pair_events: events read through order, not rows";
  if (bad) {
    PyErr_SetString(PyExc_ValueError, bad);
    goto done;
  }
  /* With rows held (as_rows), the keys are read by row: no order between. */
  const int64_t *through = as_rows ? NULL : order;
  for (Py_ssize_t k = 0; k < npairings; k++) {
    PyObject *roles, *keys;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(list, k), "OO", &roles, &keys) ||
        PyObject_GetBuffer(roles, &g[k].roles, PyBUF_SIMPLE) < 0 ||
        keys_through(&g[k].keys, keys, &records, through) < 0)
      goto done;
  }
  for (Py_ssize_t l = 0; l < nlk && !bad; l++) {
    PyObject *keys;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(lookup_list, l), "nnO|p", &lk[l].of, &lk[l].in, &keys,
                          &lk[l].enclosing) ||
        keys_through(&lk[l].keys, keys, &records, through) < 0)
      goto done;
    int same = lk[l].of >= 0 && lk[l].of < npairings && lk[l].in >= 0 && lk[l].in < npairings &&
               lk[l].keys.ncol == g[lk[l].in].keys.ncol;
    /* an enclosing lookup reads its pairing's own key (its keys: those) */
    if (same && lk[l].enclosing) same = g[lk[l].of].keys.ncol == lk[l].keys.ncol;
    for (Py_ssize_t j = 0; same && j < lk[l].keys.ncol; j++)
      same = lk[l].keys.col[j].size == g[lk[l].in].keys.col[j].size &&
             (!lk[l].enclosing || g[lk[l].of].keys.col[j].size == lk[l].keys.col[j].size);
    if (!same) bad = "pair_events: a lookup of no pairing, or of keys of other sizes";
  }
  if (bad) {
    PyErr_SetString(PyExc_ValueError, bad);
    goto done;
  }
  /* Per role index, the pairings a record there opens and closes (bit k: pairing k),
   * and how many records are there; the records beyond every pairing's roles are
   * counted at the last index, which opens and closes nothing. */
  Py_ssize_t nroles = 1;
  for (Py_ssize_t k = 0; k < npairings; k++)
    if (g[k].roles.len + 1 > nroles) nroles = g[k].roles.len + 1;
  if (nroles > UINT16_MAX) {
    PyErr_SetString(PyExc_ValueError, "pair_events: roles of at most 16,383 events");
    goto done;
  }
  opens = PyMem_Calloc((size_t)nroles, sizeof *opens);
  closes = PyMem_Calloc((size_t)nroles, sizeof *closes);
  there = PyMem_Calloc((size_t)nroles, sizeof *there);
  if (!opens || !closes || !there) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t k = 0; k < npairings; k++)
    for (Py_ssize_t at = 0; at < g[k].roles.len; at++) {
      int role = ((const uint8_t *)g[k].roles.buf)[at];
      if (role == PAIR_OPEN) opens[at] |= 1u << k;
      if (role == PAIR_CLOSE) closes[at] |= 1u << k;
    }
  passing w = {.g = g, .lk = lk, .order = order, .n = n, .nroles = nroles, .events = &events,
               .endpoints = &endpoints, .times = &times, .as_rows = as_rows, .opens = opens,
               .closes = closes};
  /* How many records have each role index; order checked. */
  for (Py_ssize_t i = 0; order && i < n && !bad; i++)
    if (order[i] < 0 || order[i] >= records) bad = "pair_events: order names rows not there";
  if (bad) {
    PyErr_SetString(PyExc_ValueError, bad);
    goto done;
  }
  /* A merged order of many records is split at a time into two halves, each read in
   * a thread of its own when there are two CPUs (split_merge joins them). */
  if (!split && !order && records >= SPLIT_MIN && usable_cpus() > 1) {
    split = 1;
    split_at = split_time(&times, records);
  }
  Py_ssize_t *there2 = split ? PyMem_Calloc((size_t)nroles, sizeof *there2) : NULL;
  if (split && !there2) {
    PyErr_NoMemory();
    goto done;
  }
  Py_ssize_t *later = split ? PyMem_Calloc(2 * (size_t)nroles, sizeof *later) : NULL;
  if (split && !later) {
    PyMem_Free(there2);
    PyErr_NoMemory();
    goto done;
  }
  /* Counted without the GIL; for a split pass in two threads, as its halves are read
   * (the later rows into `later`, then added). */
  count_job mine = {.w = &w, .times = &times, .split = split, .runs = !order,
                    .split_at = split_at, .from = 0, .to = records, .there = there,
                    .there2 = there2};
  count_job theirs = mine;
  theirs.from = records / 2;
  theirs.there = later;
  theirs.there2 = later + nroles;
  Py_BEGIN_ALLOW_THREADS
  pthread_t counter;
  int counting = split && pthread_create(&counter, NULL, count_roles, &theirs) == 0;
  mine.to = counting ? records / 2 : records;
  count_roles(&mine);
  if (counting) {
    pthread_join(counter, NULL);
    for (Py_ssize_t at = 0; at < nroles; at++) {
      there[at] += later[at];
      there2[at] += later[nroles + at];
    }
    /* the runs' starts of both, one after the other */
    Py_ssize_t *all = mine.too_many || theirs.too_many
                          ? NULL
                          : realloc(mine.starts, (size_t)(mine.nstarts + theirs.nstarts + 1) *
                                                     sizeof *all);
    if (all) {
      memcpy(all + mine.nstarts, theirs.starts, (size_t)theirs.nstarts * sizeof *all);
      mine.starts = all;
      mine.nstarts += theirs.nstarts;
    } else {
      mine.too_many = 1;
    }
    free(theirs.starts);
  }
  Py_END_ALLOW_THREADS
  PyMem_Free(later);
  run_starts = mine.too_many ? NULL : mine.starts;
  nrun_starts = mine.nstarts;
  if (!run_starts) free(mine.starts);
  /* The begins of each pairing, counted: its outputs are made that long; and those
   * of the first half, which the second's follow. */
  Py_ssize_t counts[MAX_PAIRINGS] = {0}, first[MAX_PAIRINGS] = {0};
  for (Py_ssize_t at = 0; at < nroles; at++)
    for (Py_ssize_t k = 0; k < npairings; k++)
      if (opens[at] >> k & 1) {
        counts[k] += there[at];
        first[k] += there[at] - (split ? there2[at] : 0);
      }
  PyMem_Free(there2);
  w.capacity = counts;
  for (Py_ssize_t k = 0; k < npairings; k++) {
    g[k].begins = PyBytes_FromStringAndSize(NULL, 8 * counts[k]);
    g[k].ends = PyBytes_FromStringAndSize(NULL, 8 * counts[k]);
    if (!g[k].begins || !g[k].ends || table_init(&g[k].st.open, 512) < 0) {
      if (!PyErr_Occurred()) PyErr_NoMemory();
      goto done;
    }
    if (end_times && !(g[k].end_time = malloc(8 * (size_t)counts[k] + 1))) {
      PyErr_NoMemory();
      goto done;
    }
    g[k].st.open.rows = (const int64_t *)PyBytes_AS_STRING(g[k].begins);
    g[k].st.keys = &g[k].keys;
    g[k].st.link = (Py_ssize_t *)PyBytes_AS_STRING(g[k].ends);
    g[k].memo.changes = -1; /* no key looked up yet */
  }
  for (Py_ssize_t l = 0; l < nlk; l++) {
    pairing *in = &g[lk[l].in];
    if (!(lk[l].out = PyByteArray_FromStringAndSize(NULL, 8 * counts[lk[l].of]))) goto done;
    lk[l].found = (int64_t *)PyByteArray_AS_STRING(lk[l].out);
    in->ranked = 1;
    if (lk[l].enclosing || in->seen) continue;
    if (filter_init(in, counts[lk[l].in]) < 0) {
      PyErr_NoMemory();
      goto done;
    }
  }
  for (Py_ssize_t l = 0; l < nlk; l++) w.looks[lk[l].of][w.nlooks[lk[l].of]++] = l;
  w.before = INT64_MAX;
  passing w2 = w;
  if (split) {
    Py_ssize_t second[MAX_PAIRINGS];
    for (Py_ssize_t k = 0; k < npairings; k++) second[k] = counts[k] - first[k];
    for (Py_ssize_t k = 0; k < npairings; k++)
      if (half_init(&h[k], &g[k], first[k], second[k]) < 0) {
        PyErr_NoMemory();
        goto done;
      }
    w.before = split_at;
    w.capacity = first;
    w2.g = h;
    w2.merge = &merge2;
    w2.second = 1;
  }
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS
  if (!order) {
    /* the runs as the count found them (or, past as many as it takes, read again) */
    int chains = omptpy_order_start(&merge, times.base, times.stride, records, run_starts,
                                    run_starts ? nrun_starts : 0);
    failed = chains < 0 ? 1 : chains == 0 && records > 0 ? 3 : 0;
    w.merge = &merge;
  }
  if (!failed && split) { /* the second half in a thread (or after the first) */
    merge2 = merge; /* the same runs, read only */
    omptpy_order_seek(&merge2, split_at);
    half_job job = {&w2, 0};
    pthread_t thread;
    int threaded = pthread_create(&thread, NULL, second_half, &job) == 0;
    failed = pass(&w);
    if (threaded)
      pthread_join(thread, NULL);
    else
      second_half(&job);
    if (!failed) failed = job.failed;
    if (!failed && split_merge(g, h, first, npairings, lk, nlk, &times) < 0) failed = 2;
  } else if (!failed) {
    failed = pass(&w);
  }
  /* Each pairing looked into, its closed begins numbered; then each lookup's found,
   * per closed begin, as the index of a closed pair; then the closed pairs first:
   * each a task of its own, taken by two threads (a phase's tasks read what the
   * phase before wrote). */
  if (!failed) {
    tail_job tail = {g, lk, 0};
    in_two(rank_pairing, &tail, npairings);
    if (!tail.failed) in_two(number_found, &tail, nlk);
    if (!tail.failed) in_two(closed_first, &tail, npairings);
    failed = tail.failed;
  }
  Py_END_ALLOW_THREADS
  if (failed == 3) { /* times not in a few chains of runs: the caller orders them */
    result = omptpy_py_none();
    goto done;
  }
  if (failed) {
    if (failed == 1) PyErr_NoMemory();
    else PyErr_SetString(PyExc_ValueError, "pair_events: order names a row twice");
    goto done;
  }
  for (Py_ssize_t k = 0; k < npairings; k++) /* rows order leaves out: fewer begins */
    if (_PyBytes_Resize(&g[k].begins, 8 * g[k].count) < 0 ||
        _PyBytes_Resize(&g[k].ends, 8 * g[k].closed) < 0)
      goto done;
  for (Py_ssize_t l = 0; l < nlk; l++)
    if (PyByteArray_Resize(lk[l].out, 8 * g[lk[l].of].closed) < 0) goto done;
  PyObject *paired = PyList_New(npairings), *looked = PyList_New(nlk);
  result = paired && looked ? Py_BuildValue("NN", paired, looked) : NULL;
  if (!result) {
    Py_XDECREF(paired);
    Py_XDECREF(looked);
    goto done;
  }
  for (Py_ssize_t k = 0; k < npairings; k++) {
    PyObject *found = Py_BuildValue("NNn", g[k].begins, g[k].ends, g[k].unmatched_ends);
    g[k].begins = g[k].ends = NULL;
    if (!found) {
      Py_CLEAR(result);
      goto done;
    }
    PyList_SET_ITEM(paired, k, found);
  }
  for (Py_ssize_t l = 0; l < nlk; l++) {
    PyList_SET_ITEM(looked, l, lk[l].out);
    lk[l].out = NULL;
  }
done:
  for (Py_ssize_t l = 0; l < nlk; l++) {
    Py_XDECREF(lk[l].out);
    keyset_release(&lk[l].keys);
  }
  omptpy_order_end(&merge);
  free(run_starts);
  for (Py_ssize_t k = 0; split && k < npairings; k++) half_release(&h[k]);
  PyMem_Free(there);
  PyMem_Free(closes);
  PyMem_Free(opens);
  for (Py_ssize_t k = 0; k < npairings; k++) pairing_release(&g[k]);
  if (order_buf.obj) PyBuffer_Release(&order_buf);
  if (times_buf.obj) PyBuffer_Release(&times_buf);
  column_release(&endpoints);
  column_release(&events);
  return result;
}

/* ---- find ----------------------------------------------------------------------------- */

/* find(table_keys, query_keys, out[, table_times, query_times, first]): for each
 * query row, the first table row with the same keys (lists of as many columns, of
 * the same sizes); with times (columns of int64, each side in ascending order),
 * the last table row with the same keys at or before the query's time; with
 * times and `first`, the first table row with the same keys, as without times,
 * but found with the table filled up to each query's time (the rows of a key a
 * query looks for lie in the cache while the rows are in time order), and the
 * queries without one looked up again once it is full.  -1 where there is none,
 * or where a row is missing (a missing_if_zero column reads 0).  out: intp per
 * query row. */
PyObject *omptpy_py_find(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *tk, *qk, *out_obj, *tt = Py_None, *qt = Py_None, *result = NULL;
  int first = 0;
  if (!PyArg_ParseTuple(args, "OOO|OOp", &tk, &qk, &out_obj, &tt, &qt, &first)) return NULL;
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
             (!timed || (ttime.size == 8 && qtime.size == 8));
  for (Py_ssize_t j = 0; same && j < tkeys.ncol; j++)
    same = tkeys.col[j].size == qkeys.col[j].size;
  if (!same || o.len != nq * (Py_ssize_t)sizeof(Py_ssize_t)) {
    PyErr_SetString(PyExc_ValueError, "find: keys of other sizes, or out of another length");
    goto done;
  }
  if (table_init(&t, timed && !first ? 512 : nt) < 0) { /* first: every row goes in */
    PyErr_NoMemory();
    goto done;
  }
  Py_ssize_t *out = o.buf;
  int failed = 0, keep_first = !timed || first;
  Py_BEGIN_ALLOW_THREADS
  /* Untimed: every table row first; timed: the rows up to each query's time (the
   * last of equal ones stays, or with `first` the first). */
  Py_ssize_t next = 0;
  key q;
  for (Py_ssize_t i = 0; i < nq || (!timed && next < nt); i++) {
    for (; next < nt && (!timed || (i < nq && (int64_t)column_read(&ttime, next) <=
                                                   (int64_t)column_read(&qtime, i)));
         next++) {
      key_read_prefetch(&tkeys, next + OMPTPY_FETCH_AHEAD);
      key_read(&tkeys, next, &q);
      if (q.missing) continue;
      Py_ssize_t s = table_slot(&t, &tkeys, &q);
      if (keep_first && t.slots[s].row >= 0) continue;
      if (table_set(&t, s, q.hash, next) < 0) {
        failed = 1;
        break;
      }
    }
    if (failed || i >= nq) break;
    key_read_prefetch(&qkeys, i + OMPTPY_FETCH_AHEAD);
    key_read(&qkeys, i, &q);
    out[i] = q.missing ? -1 : t.slots[table_slot(&t, &tkeys, &q)].row;
  }
  if (timed && first && !failed) { /* the rest of the table, then the queries not found */
    for (; next < nt && !failed; next++) {
      key_read(&tkeys, next, &q);
      if (q.missing) continue;
      Py_ssize_t s = table_slot(&t, &tkeys, &q);
      if (t.slots[s].row < 0) failed = table_set(&t, s, q.hash, next) < 0;
    }
    for (Py_ssize_t i = 0; i < nq && !failed; i++) {
      if (out[i] >= 0) continue;
      key_read(&qkeys, i, &q);
      if (!q.missing) out[i] = t.slots[table_slot(&t, &tkeys, &q)].row;
    }
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
