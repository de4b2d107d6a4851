/*
 * Call stacks of the interpreter that drives the program (Python, through the
 * extension's hooks; see omptpy_api.h), kept in two tables the trace carries:
 * codes (a function: file, name, first line) and stacks (frames, each a code
 * id and a line).  The tool knows nothing of Python: a hook turns the calling
 * thread's stack into key words, finds them here, and on a miss adds the
 * stack's frames, resolved while the interpreter's objects are certainly
 * alive (the thread is inside them).
 *
 * Lookups and additions never lock, block or call malloc: entries are carved
 * from one reserved mapping with an atomic bump, published by a
 * compare-and-swap into an open-addressed slot array (at most half full), and
 * never change or move.  Ids are handed out in order of addition; when two
 * threads add the same key at once both entries get an id and stay listed
 * (same content), and the loser uses the winner's id.  A table or the mapping
 * that fills up refuses, counted ("codes_refused", "stacks_refused").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unwind.h>

#include "omptpy_internal.h"

#define MAX_CODES (1u << 16)
#define MAX_STACKS (1u << 18)
#define ARENA_BYTES ((size_t)256 << 20)
/* Frames searched for the construct's return address: this file's, the
 * callback's and the runtime's own frames are below it. */
#define NATIVE_SEARCH 24

typedef struct entry {
  uint64_t hash;
  uint32_t id;
  uint32_t nkey;    /* key words */
  uint32_t nbytes;  /* payload bytes, after the key */
  uint32_t pad;
  uint64_t words[]; /* the key, then the payload */
} entry;

typedef struct table {
  _Atomic(entry *) *slots; /* 2 * max, a power of two */
  _Atomic(entry *) *by_id; /* id - 1 -> entry */
  uint32_t max;
  _Atomic uint32_t count; /* ids handed out */
  _Atomic uint64_t refused;
} table;

static struct {
  table codes, stacks;
  char *arena;
  _Atomic size_t used;
  bool ready;
  pthread_mutex_t lock; /* making the tables, once */
  /* file sink: what the last STACKS block reached (drain lock) */
  uint32_t codes_written, stacks_written;
  /* The interpreter's own description (JSON), replaced whole, never freed: a
   * writer may still be reading the previous one. */
  _Atomic(const char *) interpreter;
  _Atomic uint32_t interpreter_changes;
  uint32_t interpreter_written;
  _Atomic int native_depth;       /* omptpy_stacks_set_native */
  _Atomic uint64_t native_missed; /* captures whose construct address was not found */
} S = {.lock = PTHREAD_MUTEX_INITIALIZER};

_Atomic(const omptpy_stack_hooks *) omptpy_stack_hooks_now;

static void *map(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* The slots are populated now (5 MiB for both tables, about a millisecond):
 * a new stack lands on a random slot, and would otherwise take a page fault
 * in the callback.  The other arrays fill in order. */
static int table_init(table *t, uint32_t max) {
  size_t slot_bytes = 2 * (size_t)max * sizeof *t->slots;
  t->slots = map(slot_bytes);
  t->by_id = map((size_t)max * sizeof *t->by_id);
  t->max = max;
  if (t->slots) madvise(t->slots, slot_bytes, MADV_POPULATE_WRITE);
  return t->slots && t->by_id ? 0 : -ENOMEM;
}

OMPTPY_API int omptpy_stacks_set_hooks(const omptpy_stack_hooks *hooks) {
  pthread_mutex_lock(&S.lock);
  int rc = 0;
  if (hooks && !S.ready) {
    S.arena = map(ARENA_BYTES);
    rc = S.arena ? 0 : -ENOMEM;
    rc = rc ? rc : table_init(&S.codes, MAX_CODES);
    rc = rc ? rc : table_init(&S.stacks, MAX_STACKS);
    S.ready = rc == 0;
  }
  if (rc == 0) atomic_store_explicit(&omptpy_stack_hooks_now, hooks, memory_order_release);
  pthread_mutex_unlock(&S.lock);
  return rc;
}

OMPTPY_API int omptpy_stacks_describe(const char *json) {
  char *copy = strdup(json ? json : "null");
  if (!copy) return -ENOMEM;
  atomic_store_explicit(&S.interpreter, copy, memory_order_release);
  atomic_fetch_add(&S.interpreter_changes, 1);
  return 0;
}

typedef struct walk {
  uint64_t codeptr;
  uint64_t *out;
  int seen;  /* frames walked */
  int found; /* frames kept after codeptr's, -1 before it */
  int depth;
} walk;

static _Unwind_Reason_Code step(struct _Unwind_Context *ctx, void *arg) {
  walk *w = arg;
  uint64_t ip = (uint64_t)_Unwind_GetIP(ctx);
  if (!ip) return _URC_END_OF_STACK;
  if (w->found >= 0) w->out[w->found++] = ip;
  else if (ip == w->codeptr) w->found = 0;
  else if (++w->seen >= NATIVE_SEARCH) return _URC_END_OF_STACK;
  return w->found >= w->depth ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* Up to `depth` return addresses of the frames above the one returning to
 * codeptr (the construct's code), innermost first; how many (0 when codeptr is
 * not among the innermost frames: counted).  The walk stops there: the
 * interpreter's frames above are not unwound. */
static uint32_t native_frames(uint64_t codeptr, int depth, uint64_t *out) {
  walk w = {codeptr, out, 0, -1, depth};
  _Unwind_Backtrace(step, &w);
  if (w.found < 0) {
    atomic_fetch_add_explicit(&S.native_missed, 1, memory_order_relaxed);
    return 0;
  }
  return (uint32_t)w.found;
}

OMPTPY_API int omptpy_stacks_set_native(int depth) {
  if (depth < 0 || depth > OMPTPY_STACK_MAX_NATIVE) return -EINVAL;
  if (depth) {
    /* The unwinder's first walk sets up its caches: not in a callback. */
    uint64_t out[1];
    native_frames(0, 1, out);
    atomic_store(&S.native_missed, 0);
  }
  atomic_store(&S.native_depth, depth);
  return 0;
}

uint32_t omptpy_stack_capture(const omptpy_stack_hooks *h, omptpy_thread *t, uint64_t gate,
                              uint64_t codeptr) {
  int depth = atomic_load_explicit(&S.native_depth, memory_order_relaxed);
  /* Ask whether the thread runs Python before costlier work: the runtime's
   * task info, the unwinding. */
  if ((gate || depth) && !h->runs()) return 0;
  if (gate) {
    /* A task created inside a parallel region inherits its region's stack:
     * only capture when the encountering task is an initial task. */
    ompt_get_task_info_t info = omptpy_g.runtimes[t->runtime].get_task_info;
    int flags = 0;
    if (!info || info(0, &flags, NULL, NULL, NULL, NULL) != 2 || !(flags & ompt_task_initial)) {
      t->inner_task = gate; /* its other tasks skip the question */
      return 0;
    }
  }
  uint64_t native[OMPTPY_STACK_MAX_NATIVE];
  uint32_t n = depth && codeptr ? native_frames(codeptr, depth, native) : 0;
  return h->capture(native, n);
}

/* Four independent lanes (a stack of depth 32 is 65 words: one chain of
 * multiplications would wait on each), mixed at the end. */
static inline uint64_t hash_words(const uint64_t *w, uint32_t n) {
  uint64_t h[4] = {0x9e3779b97f4a7c15u ^ n, 0xc2b2ae3d27d4eb4fu, 0x165667b19e3779f9u,
                   0x27d4eb2f165667c5u};
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; k++) h[k] = (h[k] ^ w[i + k]) * 0xff51afd7ed558ccdu;
  for (int k = 0; i < n; i++, k++) h[k] = (h[k] ^ w[i]) * 0xff51afd7ed558ccdu;
  uint64_t x =
      h[0] ^ (h[1] >> 17 | h[1] << 47) ^ (h[2] >> 31 | h[2] << 33) ^ (h[3] >> 45 | h[3] << 19);
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53u;
  x ^= x >> 29;
  return x ? x : 1;
}

static inline bool same(const entry *e, uint64_t h, const uint64_t *key, uint32_t nkey) {
  return e->hash == h && e->nkey == nkey && memcmp(e->words, key, nkey * sizeof *key) == 0;
}

/* The entry of key, or NULL; *slot: where the probe stopped (an empty slot). */
static entry *probe(table *t, uint64_t h, const uint64_t *key, uint32_t nkey, size_t *slot) {
  size_t mask = 2 * (size_t)t->max - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    entry *e = atomic_load_explicit(&t->slots[i], memory_order_acquire);
    if (!e || same(e, h, key, nkey)) {
      *slot = i;
      return e;
    }
  }
}

static uint32_t find(table *t, const uint64_t *key, uint32_t nkey) {
  if (!S.ready || nkey > OMPTPY_STACK_MAX_KEY) return 0;
  size_t slot;
  entry *e = probe(t, hash_words(key, nkey), key, nkey, &slot);
  return e ? e->id : 0;
}

/* A new entry for key with room for `payload` bytes (filled by the caller
 * before publish), or NULL when the table or the arena is full. */
static entry *carve(table *t, const uint64_t *key, uint32_t nkey, size_t payload) {
  if (!S.ready || nkey > OMPTPY_STACK_MAX_KEY) return NULL;
  size_t bytes = sizeof(entry) + nkey * sizeof *key + ((payload + 7) & ~(size_t)7);
  size_t at = atomic_fetch_add_explicit(&S.used, bytes, memory_order_relaxed);
  if (at + bytes > ARENA_BYTES) {
    atomic_fetch_sub_explicit(&S.used, bytes, memory_order_relaxed);
    return NULL;
  }
  uint32_t n = atomic_load_explicit(&t->count, memory_order_relaxed);
  do {
    if (n >= t->max) return NULL; /* the arena bytes stay used: the table is full for good */
  } while (!atomic_compare_exchange_weak_explicit(&t->count, &n, n + 1, memory_order_relaxed,
                                                  memory_order_relaxed));
  entry *e = (entry *)(S.arena + at);
  e->hash = hash_words(key, nkey);
  e->id = n + 1;
  e->nkey = nkey;
  e->nbytes = (uint32_t)payload;
  memcpy(e->words, key, nkey * sizeof *key);
  return e;
}

/* Lists e under its id and puts it in the table: its id, or the id of an equal
 * entry published first. */
static uint32_t publish(table *t, entry *e) {
  atomic_store_explicit(&t->by_id[e->id - 1], e, memory_order_release);
  size_t slot;
  for (;;) {
    entry *found = probe(t, e->hash, e->words, e->nkey, &slot);
    if (found) return found->id;
    entry *empty = NULL;
    if (atomic_compare_exchange_strong_explicit(&t->slots[slot], &empty, e, memory_order_release,
                                                memory_order_acquire))
      return e->id;
  }
}

static inline void *payload(entry *e) { return e->words + e->nkey; }

OMPTPY_API uint32_t omptpy_stack_find(const uint64_t *key, uint32_t nkey) {
  return find(&S.stacks, key, nkey);
}

OMPTPY_API uint32_t omptpy_code_find(const uint64_t key[2]) {
  return find(&S.codes, key, 2);
}

/* Stack payload: a uint32 of flags (1: truncated), the number of frames, then
 * the native return addresses and the frames (8-byte aligned: the payload
 * follows the key's words). */
OMPTPY_API uint32_t omptpy_stack_add(const uint64_t *key, uint32_t nkey,
                                     const omptpy_stack_frame *frames, uint32_t nframes,
                                     bool truncated, const uint64_t *native, uint32_t nnative) {
  entry *e = carve(&S.stacks, key, nkey,
                   2 * sizeof(uint32_t) + nnative * sizeof *native + nframes * sizeof *frames);
  if (!e) {
    atomic_fetch_add_explicit(&S.stacks.refused, 1, memory_order_relaxed);
    return 0;
  }
  uint32_t *p = payload(e);
  p[0] = truncated;
  p[1] = nframes;
  memcpy(p + 2, native, nnative * sizeof *native);
  memcpy((uint64_t *)(p + 2) + nnative, frames, nframes * sizeof *frames);
  return publish(&S.stacks, e);
}

/* Code payload: the first line (int32), the file's length (uint32), then the
 * file and the name. */
OMPTPY_API uint32_t omptpy_code_add(const uint64_t key[2], const char *file, size_t file_len,
                         const char *name, size_t name_len, int32_t first_line) {
  if (file_len > UINT32_MAX / 2 || name_len > UINT32_MAX / 2) return 0;
  entry *e = carve(&S.codes, key, 2, 2 * sizeof(uint32_t) + file_len + name_len);
  if (!e) {
    atomic_fetch_add_explicit(&S.codes.refused, 1, memory_order_relaxed);
    return 0;
  }
  uint32_t *p = payload(e);
  p[0] = (uint32_t)first_line;
  p[1] = (uint32_t)file_len;
  memcpy(p + 2, file, file_len);
  memcpy((char *)(p + 2) + file_len, name, name_len);
  return publish(&S.codes, e);
}

/* The entries of t from *from on that are listed (an id being added may not
 * be yet: the list stops before it); *from moves past them. */
static int put_entries(omptpy_str *s, table *t, uint32_t *from, bool codes) {
  int rc = 0;
  uint32_t n = atomic_load_explicit(&t->count, memory_order_acquire);
  uint32_t id = *from;
  for (; rc == 0 && S.ready && id < n; id++) {
    entry *e = atomic_load_explicit(&t->by_id[id], memory_order_acquire);
    if (!e) break;
    const uint32_t *p = payload(e);
    rc = omptpy_put(s, id > *from ? ",[" : "[");
    if (codes) {
      const char *file = (const char *)(p + 2);
      rc = rc ? rc : omptpy_put_string(s, file, p[1]);
      rc = rc ? rc : omptpy_put(s, ",");
      rc = rc ? rc : omptpy_put_string(s, file + p[1], e->nbytes - 2 * sizeof(uint32_t) - p[1]);
      rc = rc ? rc : omptpy_put(s, ",%d]", (int32_t)p[0]);
    } else {
      uint32_t nframes = p[1];
      const uint64_t *native = (const uint64_t *)(p + 2);
      uint32_t nnative = (uint32_t)((e->nbytes - 2 * sizeof(uint32_t) -
                                     nframes * sizeof(omptpy_stack_frame)) / sizeof *native);
      const omptpy_stack_frame *f = (const omptpy_stack_frame *)(native + nnative);
      rc = rc ? rc : omptpy_put(s, "%u", p[0]);
      for (uint32_t k = nframes; rc == 0 && k-- > 0;) /* outermost first */
        rc = omptpy_put(s, ",%u,%d", f[k].code, f[k].line);
      for (uint32_t k = nnative; rc == 0 && k-- > 0;)
        rc = omptpy_put(s, "%s%llu", k == nnative - 1 ? ",[" : ",", (unsigned long long)native[k]);
      rc = rc ? rc : omptpy_put(s, nnative ? "]]" : "]");
    }
  }
  *from = id;
  return rc;
}

int omptpy_stacks_json(omptpy_str *s, uint32_t *codes_from, uint32_t *stacks_from) {
  const char *interpreter = atomic_load_explicit(&S.interpreter, memory_order_acquire);
  int rc = omptpy_put(s, "{\"interpreter\":%s,\"codes_from\":%u,\"codes\":[",
                      interpreter ? interpreter : "null", *codes_from);
  rc = rc ? rc : put_entries(s, &S.codes, codes_from, true);
  rc = rc ? rc : omptpy_put(s, "],\"stacks_from\":%u,\"stacks\":[", *stacks_from);
  rc = rc ? rc : put_entries(s, &S.stacks, stacks_from, false);
  rc = rc ? rc : omptpy_put(s, "],\"codes_refused\":%llu,\"stacks_refused\":%llu,"
                            "\"native_depth\":%d,\"native_missed\":%llu}",
                            (unsigned long long)atomic_load(&S.codes.refused),
                            (unsigned long long)atomic_load(&S.stacks.refused),
                            atomic_load(&S.native_depth),
                            (unsigned long long)atomic_load(&S.native_missed));
  if (rc) omptpy_str_free(s);
  return rc;
}

OMPTPY_API char *omptpy_stacks(uint32_t codes_from, uint32_t stacks_from) {
  omptpy_str s = {0};
  return omptpy_stacks_json(&s, &codes_from, &stacks_from) == 0 ? s.p : NULL;
}

void omptpy_stacks_to_sink(void) {
  uint32_t changes = atomic_load(&S.interpreter_changes);
  if (!omptpy_sink_is_file() || (changes == S.interpreter_written &&
                                 (!S.ready || (atomic_load(&S.codes.count) == S.codes_written &&
                                               atomic_load(&S.stacks.count) == S.stacks_written))))
    return;
  omptpy_str s = {0};
  uint32_t codes = S.codes_written, stacks = S.stacks_written;
  if (omptpy_stacks_json(&s, &codes, &stacks) == 0 &&
      omptpy_sink_json(OMPTPY_BLOCK_STACKS, s.p, s.len)) {
    S.codes_written = codes;
    S.stacks_written = stacks;
    S.interpreter_written = changes;
  }
  omptpy_str_free(&s);
}

/* The child writes its own file: every code and stack goes into it again. */
void omptpy_stacks_after_fork_child(void) {
  pthread_mutex_init(&S.lock, NULL);
  S.codes_written = S.stacks_written = S.interpreter_written = 0;
}
