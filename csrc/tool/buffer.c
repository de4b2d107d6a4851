/*
 * Per-thread record buffers and the drainer.
 *
 * Each OS thread owns a chunk it fills (omptpy_slot/omptpy_commit in the
 * internal header: no lock, no allocation, no system call).  A full chunk is
 * pushed onto the thread's `full` ring and the next one popped from its
 * `free` ring; both rings are single-producer single-consumer, so the hot
 * path only pays for one release store per record and a few relaxed loads
 * per 1024 records.  The drainer (one pthread of the tool, or a caller of
 * omptpy_flush) is the single consumer: under drain_lock it moves full chunks
 * to the sink and hands them back.  A thread's chunks (OMPTPY_BUFFER_SIZE of
 * them, 8 MiB by default) are mapped and faulted in when the thread begins.
 * When a thread has no free chunk (the drainer fell behind, e.g. it got no
 * CPU) the overflow policy applies: flush (the thread moves its own full
 * chunks to the sink, as Score-P does; the default), drop (count the
 * record), or grow (allocate another chunk).
 *
 * That is the copying scheme of the file sink (and of the memory sink without
 * membarrier, or with OMPTPY_ZERO_COPY=0).  The memory sink otherwise has
 * threads write in place into the trace region: see "zero-copy memory sink"
 * below.  Both share the hot path: one compare of pos against the thread's
 * limit, a cached record pointer, one release store of the count.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "omptpy_internal.h"

_Thread_local omptpy_thread *omptpy_tls_thread __attribute__((tls_model("initial-exec")));

#define GROW_FACTOR 64u /* the grow policy may own this many times the bound */

typedef struct retired_stats {
  uint32_t index;
  int type;
  int runtime;
  pid_t tid;
  uint64_t written, dropped, samples_skipped;
} retired_stats;

static struct {
  omptpy_overflow overflow;
  unsigned drain_ms;
  uint32_t max_chunks; /* per-thread bound: the arena of every thread */
  uint32_t ring_cap;
  _Atomic(omptpy_thread *) all; /* registry: push-only list */
  _Atomic uint32_t next_index;
  pthread_mutex_t lock;       /* registry claims, drainer start/stop */
  pthread_mutex_t drain_lock; /* held by the single consumer */
  retired_stats *retired;     /* counters of threads that ended, under drain_lock */
  size_t nretired, capretired;
  pthread_t drainer;
  _Atomic uint32_t wake;         /* futex word the drainer sleeps on */
  _Atomic int wake_pending;      /* a writer already woke the drainer */
  _Atomic int drainer_run;
  bool drainer_started;
  bool idle_drainer; /* runs only on otherwise idle CPUs (SCHED_IDLE) */
  bool zc;           /* zero-copy memory sink (see below) */
  bool ready;
} B = {.lock = PTHREAD_MUTEX_INITIALIZER, .drain_lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- rings --------------------------------------------------------------- */

static bool ring_push(omptpy_ring *r, omptpy_chunk *c) {
  uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  uint32_t tl = atomic_load_explicit(&r->tail, memory_order_acquire);
  if (h - tl > r->mask) return false;
  r->slots[h & r->mask] = c;
  atomic_store_explicit(&r->head, h + 1, memory_order_release);
  return true;
}

static omptpy_chunk *ring_pop(omptpy_ring *r) {
  uint32_t tl = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint32_t h = atomic_load_explicit(&r->head, memory_order_acquire);
  if (tl == h) return NULL;
  omptpy_chunk *c = r->slots[tl & r->mask];
  atomic_store_explicit(&r->tail, tl + 1, memory_order_release);
  return c;
}

static omptpy_chunk *ring_peek(omptpy_ring *r) {
  uint32_t tl = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint32_t h = atomic_load_explicit(&r->head, memory_order_acquire);
  return tl == h ? NULL : r->slots[tl & r->mask];
}

static uint32_t ring_count(omptpy_ring *r) {
  return atomic_load_explicit(&r->head, memory_order_acquire) -
         atomic_load_explicit(&r->tail, memory_order_relaxed);
}

static void ring_reset(omptpy_ring *r) {
  atomic_store_explicit(&r->head, 0, memory_order_relaxed);
  atomic_store_explicit(&r->tail, 0, memory_order_relaxed);
}

/* ---- chunks --------------------------------------------------------------- */

/* Each thread slot owns an arena of max_chunks chunks, mapped and faulted in
 * once when the slot is created and reused by every thread that takes the
 * slot later.  Only the grow policy allocates chunks outside it. */
#define CHUNK_BYTES ((size_t)OMPTPY_CHUNK_RECORDS * sizeof(omptpy_record))

_Static_assert(sizeof(omptpy_chunk) == OMPTPY_CACHELINE, "a chunk descriptor is one cache line");

static bool arena_new(omptpy_thread *t) {
  size_t bytes = (size_t)B.max_chunks * CHUNK_BYTES;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 0, bytes); /* fault every page in now, not on the hot path */
  size_t desc_bytes = (size_t)B.max_chunks * sizeof(omptpy_chunk);
  t->arena = aligned_alloc(OMPTPY_CACHELINE, desc_bytes);
  if (!t->arena) {
    munmap(p, bytes);
    return false;
  }
  memset(t->arena, 0, desc_bytes);
  t->arena_recs = p;
  for (uint32_t i = 0; i < B.max_chunks; i++)
    t->arena[i].recs = t->arena_recs + (size_t)i * OMPTPY_CHUNK_RECORDS;
  return true;
}

static bool in_arena(const omptpy_thread *t, const omptpy_chunk *c) {
  return c >= t->arena && c < t->arena + B.max_chunks;
}

/* A grown chunk: its descriptor, then its records, in one allocation. */
static omptpy_chunk *extra_chunk_new(void) {
  omptpy_chunk *c;
  if (posix_memalign((void **)&c, OMPTPY_CACHELINE, sizeof *c + CHUNK_BYTES) != 0) return NULL;
  memset(c, 0, sizeof *c + CHUNK_BYTES);
  c->recs = (omptpy_record *)(c + 1);
  return c;
}

static void chunk_reset(omptpy_chunk *c) {
  c->taken = 0;
  atomic_store_explicit(&c->n, 0, memory_order_relaxed);
}

/* ---- threads -------------------------------------------------------------- */

static omptpy_thread *thread_new(void) {
  omptpy_thread *t;
  if (posix_memalign((void **)&t, OMPTPY_CACHELINE, sizeof *t) != 0) return NULL;
  memset(t, 0, sizeof *t);
  if (B.zc) return t; /* zero-copy: chunks are leased from the region, no rings */
  t->full.mask = t->free.mask = B.ring_cap - 1;
  t->full.slots = calloc(B.ring_cap, sizeof(omptpy_chunk *));
  t->free.slots = calloc(B.ring_cap, sizeof(omptpy_chunk *));
  if (!t->full.slots || !t->free.slots || !arena_new(t)) {
    free(t->full.slots);
    free(t->free.slots);
    free(t);
    return NULL;
  }
  return t;
}

/* Called once per OS thread (thread_begin, or the first event of a thread the
 * runtime did not announce).  Not on the steady-state path. */
static void retire_ended(void);

/* Threads the runtime never announced (a Python thread that marked regions
 * or called ompt_py.control, say) give their slot back when they exit.  The
 * runtime's own threads end with thread_end, which may come after this
 * destructor (destructors run in no set order): they are left alone. */
static pthread_key_t exit_key;

static void thread_exited(void *p) {
  omptpy_thread *t = p;
  if (omptpy_tls_thread == t && t->type == ompt_thread_unknown) omptpy_thread_detach(t);
}

omptpy_thread *omptpy_thread_attach(int type, int runtime) {
  if (!B.ready) return NULL;
  /* Slots of threads that ended are drained and freed first, so a program
   * that starts threads one after another reuses one buffer. */
  retire_ended();
  pthread_mutex_lock(&B.lock);
  omptpy_thread *t = NULL;
  for (omptpy_thread *p = atomic_load(&B.all); p; p = p->all_next)
    if (atomic_load(&p->state) == OMPTPY_THREAD_FREE) {
      t = p;
      break;
    }
  bool fresh = t == NULL;
  if (fresh && !(t = thread_new())) {
    pthread_mutex_unlock(&B.lock);
    return NULL;
  }
  if (B.zc) {
    /* The first record takes the slow path, which leases a chunk. */
    t->cur = NULL;
    t->recs = NULL;
    t->cur_epoch = 0;
    atomic_store(&t->limit, 0);
  } else {
    ring_reset(&t->full);
    ring_reset(&t->free);
    for (uint32_t i = 0; i < B.max_chunks; i++) {
      chunk_reset(&t->arena[i]);
      if (i) ring_push(&t->free, &t->arena[i]);
    }
    atomic_store(&t->nchunks, B.max_chunks);
    t->cur = &t->arena[0];
    t->recs = t->cur->recs;
    atomic_store(&t->limit, OMPTPY_CHUNK_RECORDS);
  }
  t->pos = 0;
  t->index = atomic_fetch_add(&B.next_index, 1);
  t->next_id = 0;
  atomic_store(&t->dropped, 0);
  atomic_store(&t->cur_pub, t->cur);
  t->drained = 0;
  t->type = type;
  t->runtime = runtime;
  t->tid = (pid_t)syscall(SYS_gettid);
  atomic_store(&t->in_tool, 0);
  t->samples_skipped = 0;
  atomic_store_explicit(&t->state, OMPTPY_THREAD_LIVE, memory_order_release);
  if (fresh) {
    t->all_next = atomic_load(&B.all);
    atomic_store_explicit(&B.all, t, memory_order_release);
  }
  pthread_mutex_unlock(&B.lock);
  omptpy_tls_thread = t;
  pthread_setspecific(exit_key, t);
  omptpy_sampler_thread_start(t);
  return t;
}

void omptpy_thread_detach(omptpy_thread *t) {
  omptpy_sampler_thread_stop(t);
  omptpy_tls_thread = NULL;
  pthread_setspecific(exit_key, NULL);
  atomic_store_explicit(&t->state, OMPTPY_THREAD_ENDED, memory_order_release);
}

/* Wakes the drainer early, once per pass, when a thread runs low on free chunks:
 * a system call, but only once a buffer is three-quarters full. */
static void wake_drainer(void) {
  if (atomic_exchange_explicit(&B.wake_pending, 1, memory_order_acq_rel)) return;
  atomic_fetch_add_explicit(&B.wake, 1, memory_order_release);
  syscall(SYS_futex, &B.wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static uint32_t drain_thread(omptpy_thread *t, bool partial);

/* No free chunk: the overflow policy gives one, or NULL to drop the record. */
static omptpy_chunk *overflow(omptpy_thread *t) {
  omptpy_chunk *c = NULL;
  switch (B.overflow) {
    case OMPTPY_OVERFLOW_FLUSH:
      /* Become the consumer for a moment; waits at most for one drainer pass. */
      pthread_mutex_lock(&B.drain_lock);
      drain_thread(t, false);
      pthread_mutex_unlock(&B.drain_lock);
      c = ring_pop(&t->free);
      break;
    case OMPTPY_OVERFLOW_GROW:
      if (atomic_load_explicit(&t->nchunks, memory_order_relaxed) + 1 < B.ring_cap &&
          (c = extra_chunk_new()))
        atomic_fetch_add_explicit(&t->nchunks, 1, memory_order_relaxed);
      break;
    case OMPTPY_OVERFLOW_DROP:
      break;
  }
  return c;
}

static omptpy_record *slot_slow_zc(omptpy_thread *t);

omptpy_record *omptpy_slot_slow(omptpy_thread *t) {
  if (B.zc) return slot_slow_zc(t);
  if (t->cur) {
    ring_push(&t->full, t->cur); /* cannot fail: the ring holds every chunk the thread owns */
    t->cur = NULL;
    atomic_store_explicit(&t->cur_pub, NULL, memory_order_release);
  }
  if (ring_count(&t->free) < B.max_chunks / 4) wake_drainer();
  omptpy_chunk *c = ring_pop(&t->free);
  if (!c) c = overflow(t);
  if (!c) {
    t->pos = OMPTPY_CHUNK_RECORDS;
    atomic_store_explicit(&t->dropped, atomic_load_explicit(&t->dropped, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    return NULL;
  }
  atomic_store_explicit(&c->n, 0, memory_order_relaxed);
  t->cur = c;
  t->recs = c->recs;
  t->pos = 0;
  atomic_store_explicit(&t->cur_pub, c, memory_order_release);
  return &c->recs[0];
}

/* ---- draining (under drain_lock) -------------------------------------------- */

/* The sink window: records stamped in [from, until) go to the sink (a trace
 * window, or OMPTPY_RECORD); the others were written only for handlers.
 * Changed and read under drain_lock. */
static struct {
  uint64_t from, until;
} W = {UINT64_MAX, 0};

/* Writes the records of recs[0..n) stamped inside the window to the sink;
 * returns how many.  A thread's records are in time order, so only a range
 * that straddles an edge of the window is looked at record by record. */
static size_t to_sink(const omptpy_record *r, size_t n) {
  if (n == 0 || W.from >= W.until) return 0;
  if (r[0].time >= W.from && r[n - 1].time < W.until) {
    omptpy_sink_write(r, n);
    return n;
  }
  size_t kept = 0;
  for (size_t i = 0, j; i < n; i = j) {
    for (; i < n && (r[i].time < W.from || r[i].time >= W.until); i++) continue;
    for (j = i; j < n && r[j].time >= W.from && r[j].time < W.until; j++) continue;
    if (j > i) omptpy_sink_write(r + i, j - i);
    kept += j - i;
  }
  return kept;
}

/* Set when the handlers' queue took only part of a range (its consumer drains
 * with block=True and found it full): the rest stays for a later pass. */
static bool drain_stalled;

/* Moves what c holds beyond c->taken to the sink and the handlers' queue;
 * false when part of it had to stay. */
static bool take_records(omptpy_thread *t, omptpy_chunk *c) {
  uint32_t n = atomic_load_explicit(&c->n, memory_order_acquire);
  if (n > c->taken) {
    const omptpy_record *r = &c->recs[c->taken];
    size_t k = omptpy_tap_push(r, n - c->taken);
    t->drained += to_sink(r, k);
    c->taken += (uint32_t)k;
  }
  if (c->taken == n) return true;
  drain_stalled = true;
  return false;
}

/* A drained chunk goes back to its thread; grown chunks beyond the bound are freed. */
static void recycle(omptpy_thread *t, omptpy_chunk *c) {
  chunk_reset(c);
  if (!in_arena(t, c) && atomic_load(&t->nchunks) > B.max_chunks) {
    free(c);
    atomic_fetch_sub_explicit(&t->nchunks, 1, memory_order_relaxed);
  } else {
    ring_push(&t->free, c);
  }
}

/* Moves t's full chunks (and, if partial, the one being filled) to the sink.
 * Returns the number of full chunks seen. */
static uint32_t drain_thread(omptpy_thread *t, bool partial) {
  uint32_t nfull = 0;
  omptpy_chunk *c;
  while ((c = ring_peek(&t->full))) {
    if (!take_records(t, c)) return nfull;
    ring_pop(&t->full);
    recycle(t, c);
    nfull++;
  }
  if (partial && (c = atomic_load_explicit(&t->cur_pub, memory_order_acquire))) take_records(t, c);
  return nfull;
}

/* ---- zero-copy memory sink --------------------------------------------------
 *
 * In memory mode (no OMPTPY_OUTPUT) records are written where the trace will
 * live: threads lease 64 KiB chunks from one region (a large NORESERVE
 * huge-page mapping, sink.c) by an atomic bump, so the region is a plain
 * array of records; the chunks' counts live apart, in a descriptor array
 * indexed by chunk number.  Nothing is copied or recycled.  The drainer walks
 * the descriptors in lease order, feeds the handlers' tap and counts the
 * records that fall inside the sink's windows (per thread, exact), and keeps
 * the region populated ahead of the lease cursor.
 *
 * take() quiesces the writers without a lock on their path: it installs a
 * new region (epoch + 1), lowers every live thread's limit to 0, runs
 * membarrier() (so a writer that has not yet seen the lower limit has its
 * in_tool store visible), and waits for each thread's in_tool to drop to 0.
 * From then on no thread writes into the old region: a thread's next record
 * takes the slow path, which sees the epoch changed and leases from the new
 * region.  The old region is then compacted in place (records outside the
 * windows and the unused tails of chunks removed, order kept) and handed over
 * whole.  A region that cannot provide a chunk drops records (counted): the
 * flush and grow policies only concern the copying sinks.  Without
 * membarrier (or with OMPTPY_ZERO_COPY=0) the memory sink copies, as the file
 * sink does.
 */

#define ZC_PREFAULT_AHEAD ((size_t)32 << 20)
/* Chunks leased while no window is open are only for handlers: past this
 * much, the drainer swaps the region for a fresh one. */
#define ZC_RECYCLE_BYTES ((size_t)64 << 20)

typedef struct zc_window {
  uint64_t from, until;
} zc_window;

typedef struct omptpy_region {
  omptpy_record *base;
  size_t bytes;
  omptpy_chunk *desc;
  size_t desc_bytes;
  uint32_t cap; /* chunks */
  _Atomic uint32_t next;
  uint64_t epoch;
  size_t populated; /* bytes of base known to be faulted in (under drain_lock) */
  uint32_t cursor;  /* chunks before it are wholly done (drain_lock) */
  zc_window *win;   /* sink windows that overlap this region's life (drain_lock) */
  size_t nwin, capwin;
} omptpy_region;

static _Atomic(omptpy_region *) R;
static uint64_t zc_epochs;
static bool zc_window_open;
static uint64_t zc_window_from;

static omptpy_region *region_new(void) {
  omptpy_region *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->base = omptpy_sink_reserve(&r->bytes);
  if (!r->base) {
    free(r);
    return NULL;
  }
  r->cap = (uint32_t)(r->bytes / CHUNK_BYTES);
  r->desc_bytes = (size_t)r->cap * sizeof(omptpy_chunk);
  void *d = mmap(NULL, r->desc_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (d == MAP_FAILED) {
    munmap(r->base, r->bytes);
    free(r);
    return NULL;
  }
  r->desc = d;
  r->epoch = ++zc_epochs;
  if (zc_window_open) {
    r->win = malloc(sizeof *r->win);
    if (r->win) {
      r->win[0] = (zc_window){zc_window_from, UINT64_MAX};
      r->nwin = r->capwin = 1;
    }
  }
  return r;
}

/* Frees everything but the records (handed over, or unmapped by the caller). */
static void region_free_meta(omptpy_region *r) {
  munmap(r->desc, r->desc_bytes);
  free(r->win);
  free(r);
}

static void region_populate(omptpy_region *r, size_t upto) {
  if (upto > r->bytes) upto = r->bytes;
  if (r->populated >= upto) return;
  madvise((char *)r->base + r->populated, upto - r->populated, MADV_POPULATE_WRITE);
  r->populated = upto;
}

/* Keeps ZC_PREFAULT_AHEAD bytes past the leased chunks populated (drainer). */
static void region_populate_ahead(omptpy_region *r) {
  uint32_t next = atomic_load_explicit(&r->next, memory_order_relaxed);
  size_t used = (size_t)(next < r->cap ? next : r->cap) * CHUNK_BYTES;
  if (r->populated < used + ZC_PREFAULT_AHEAD / 2) region_populate(r, used + ZC_PREFAULT_AHEAD);
}

static bool in_windows(const omptpy_region *r, uint64_t time) {
  for (size_t i = 0; i < r->nwin; i++)
    if (time >= r->win[i].from && time < r->win[i].until) return true;
  return false;
}

/* Records of recs[0..n) (one thread's, in time order) inside r's windows. */
static size_t count_kept(const omptpy_region *r, const omptpy_record *recs, size_t n) {
  if (n == 0 || r->nwin == 0) return 0;
  for (size_t i = 0; i < r->nwin; i++)
    if (recs[0].time >= r->win[i].from && recs[n - 1].time < r->win[i].until) return n;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += in_windows(r, recs[i].time);
  return k;
}

/* Lease order: slow path of a thread whose chunk is full, whose limit was
 * lowered by take(), or that has none.  No lock: an atomic bump, and a
 * re-check of the region after publishing the limit (a take() that installed
 * a new region meanwhile either sees this thread in_tool or has lowered the
 * limit after it was raised). */
static omptpy_record *slot_slow_zc(omptpy_thread *t) {
  for (;;) {
    atomic_thread_fence(memory_order_acquire);
    omptpy_region *r = atomic_load(&R);
    if (!r) break;
    if (t->cur && t->cur_epoch == r->epoch && t->pos < OMPTPY_CHUNK_RECORDS) {
      /* Only the limit was lowered: carry on in the same chunk. */
      atomic_store(&t->limit, OMPTPY_CHUNK_RECORDS);
      if (atomic_load(&R) == r) return &t->recs[t->pos];
      continue;
    }
    /* A full chunk of this region is the drainer's now; one of an older
     * region was accounted for by the take() that retired it. */
    t->cur = NULL;
    atomic_store_explicit(&t->cur_pub, NULL, memory_order_relaxed);
    if (atomic_load_explicit(&r->next, memory_order_relaxed) >= r->cap) break;
    uint32_t i = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
    if (i >= r->cap) break;
    omptpy_chunk *c = &r->desc[i];
    c->recs = r->base + (size_t)i * OMPTPY_CHUNK_RECORDS;
    c->region = r;
    c->taken = 0;
    c->retired = false;
    atomic_store_explicit(&c->n, 0, memory_order_relaxed);
    atomic_store_explicit(&c->owner, t, memory_order_release);
    t->cur = c;
    t->cur_epoch = r->epoch;
    t->recs = c->recs;
    t->pos = 0;
    atomic_store_explicit(&t->cur_pub, c, memory_order_release);
    atomic_store(&t->limit, OMPTPY_CHUNK_RECORDS);
    if (atomic_load(&R) != r) continue; /* leased from a region take() retired: leave it */
    if ((size_t)(i + 1) * CHUNK_BYTES + ZC_PREFAULT_AHEAD / 2 > r->populated) wake_drainer();
    return &t->recs[0];
  }
  /* No region, or it is full: drop and count. */
  t->cur = NULL;
  t->pos = 0;
  atomic_store(&t->limit, 0);
  atomic_store_explicit(&t->dropped, atomic_load_explicit(&t->dropped, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  return NULL;
}

/* Gives what chunk c holds beyond c->taken to the tap and counts it; false
 * when the tap took only part of it. */
static bool zc_take_records(omptpy_region *r, omptpy_chunk *c) {
  uint32_t n = atomic_load_explicit(&c->n, memory_order_acquire);
  if (n > c->taken) {
    const omptpy_record *recs = &c->recs[c->taken];
    size_t k = omptpy_tap_push(recs, n - c->taken);
    c->owner->drained += count_kept(r, recs, k);
    c->taken += (uint32_t)k;
  }
  if (c->taken == n) return true;
  drain_stalled = true;
  return false;
}

/* Walks r's chunks in lease order from the cursor: full ones (and, if
 * partial, the ones being filled) go to the tap and are counted.  Stops at a
 * chunk the tap could not take whole, so each thread's records reach the tap
 * in order.  Returns the number of chunks finished. */
static uint32_t zc_drain(omptpy_region *r, bool partial) {
  uint32_t next = atomic_load_explicit(&r->next, memory_order_acquire);
  if (next > r->cap) next = r->cap;
  uint32_t nfull = 0;
  bool advance = true;
  for (uint32_t i = r->cursor; i < next; i++) {
    omptpy_chunk *c = &r->desc[i];
    if (!atomic_load_explicit(&c->owner, memory_order_acquire)) { /* leased, not set up yet */
      advance = false;
      continue;
    }
    uint32_t n = atomic_load_explicit(&c->n, memory_order_acquire);
    bool full = n == OMPTPY_CHUNK_RECORDS;
    if (full || partial) {
      if (c->taken < n) {
        if (!zc_take_records(r, c)) break;
        if (full) nfull++;
      }
    }
    if (advance && (full || c->retired) && c->taken == n) r->cursor = i + 1;
    else advance = false;
  }
  return nfull;
}

/* An ended thread's chunks in the current region are finished: drained whole
 * (partial), and skipped by the cursor from then on. */
static void zc_retire(omptpy_thread *t) {
  omptpy_region *r = atomic_load(&R);
  if (!r) return;
  zc_drain(r, true);
  if (drain_stalled) return;
  /* Never written again: the cursor may pass it once drained. */
  if (t->cur && t->cur_epoch == r->epoch) t->cur->retired = true;
  t->cur = NULL;
}

/* Stops every writer from using region `old` (installed as R) and installs a
 * new one.  Under drain_lock.  Returns false (old left in place) when no new
 * region could be made. */
static bool zc_quiesce(void) {
  omptpy_region *nw = region_new();
  if (!nw) return false;
  pthread_mutex_lock(&B.lock); /* no thread attaches meanwhile */
  atomic_store(&R, nw);
  for (omptpy_thread *t = atomic_load(&B.all); t; t = t->all_next)
    if (atomic_load(&t->state) != OMPTPY_THREAD_FREE) atomic_store(&t->limit, 0);
  syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  for (omptpy_thread *t = atomic_load(&B.all); t; t = t->all_next)
    while (atomic_load_explicit(&t->state, memory_order_acquire) != OMPTPY_THREAD_FREE &&
           atomic_load_explicit(&t->in_tool, memory_order_acquire))
      sched_yield();
  pthread_mutex_unlock(&B.lock);
  return true;
}

/* Removes, in place and in order, the records outside old's windows and the
 * unused tails of its chunks; returns how many remain. */
static size_t zc_compact(omptpy_region *old) {
  uint32_t next = atomic_load(&old->next);
  if (next > old->cap) next = old->cap;
  size_t out = 0;
  omptpy_record *dst = old->base;
  for (uint32_t i = 0; i < next; i++) {
    omptpy_chunk *c = &old->desc[i];
    if (!c->owner) continue;
    uint32_t n = atomic_load(&c->n);
    const omptpy_record *src = old->base + (size_t)i * OMPTPY_CHUNK_RECORDS;
    size_t k = count_kept(old, src, n);
    if (k == n) {
      if (dst + out != src) memmove(dst + out, src, n * sizeof *src);
      out += n;
    } else if (k) {
      for (uint32_t j = 0; j < n; j++)
        if (in_windows(old, src[j].time)) dst[out++] = src[j];
    }
  }
  return out;
}

/* take(): the records of the current region, compacted, or none. */
static omptpy_block zc_take_locked(bool keep) {
  omptpy_block b = {0};
  omptpy_region *old = atomic_load(&R);
  if (!old || !zc_quiesce()) return b;
  /* Every count in old is final: the tap and the counters get the rest. */
  drain_stalled = false;
  zc_drain(old, true);
  /* Chunks the tap could not take (a blocking handlers' queue that is full)
   * stay in the trace; the handlers miss them. */
  if (drain_stalled) {
    uint32_t next = atomic_load(&old->next);
    for (uint32_t i = 0; i < next && i < old->cap; i++) {
      omptpy_chunk *c = &old->desc[i];
      uint32_t n = atomic_load(&c->n);
      if (c->owner && c->taken < n) {
        c->owner->drained += count_kept(old, c->recs + c->taken, n - c->taken);
        c->taken = n;
      }
    }
    drain_stalled = false;
  }
  b.base = old->base;
  b.bytes = old->bytes;
  b.nrecs = keep ? zc_compact(old) : 0;
  region_free_meta(old);
  if (!keep) {
    munmap(b.base, b.bytes);
    b = (omptpy_block){0};
  }
  return b;
}

omptpy_block omptpy_zc_take(void) {
  pthread_mutex_lock(&B.drain_lock);
  omptpy_block b = zc_take_locked(true);
  omptpy_region *r = atomic_load(&R);
  if (r && b.base) region_populate(r, (size_t)1 << 20);
  pthread_mutex_unlock(&B.drain_lock);
  return b;
}

bool omptpy_zero_copy(void) { return B.zc; }

/* OMPTPY_RESERVE: populate that much of the region before a window. */
void omptpy_zc_prepare(size_t bytes) {
  if (!B.zc) return;
  pthread_mutex_lock(&B.drain_lock);
  omptpy_region *r = atomic_load(&R);
  if (r) region_populate(r, bytes);
  pthread_mutex_unlock(&B.drain_lock);
}

static void zc_set_window(bool open, uint64_t now) {
  omptpy_region *r = atomic_load(&R);
  zc_window_open = open;
  if (open) zc_window_from = now;
  if (!r) return;
  if (open) {
    if (r->nwin == r->capwin) {
      size_t cap = r->capwin ? 2 * r->capwin : 4;
      zc_window *w = realloc(r->win, cap * sizeof *w);
      if (!w) return;
      r->win = w;
      r->capwin = cap;
    }
    r->win[r->nwin++] = (zc_window){now, UINT64_MAX};
  } else if (r->nwin) {
    r->win[r->nwin - 1].until = now;
  }
}

static void remember_retired(omptpy_thread *t) {
  if (B.nretired == B.capretired) {
    size_t cap = B.capretired ? 2 * B.capretired : 64;
    retired_stats *p = realloc(B.retired, cap * sizeof *p);
    if (!p) return;
    B.retired = p;
    B.capretired = cap;
  }
  B.retired[B.nretired++] = (retired_stats){t->index, t->type, t->runtime, t->tid, t->drained,
                                            atomic_load(&t->dropped), t->samples_skipped};
}

/* Chunks a slot holds outside its arena (grow policy) are freed when it is released. */
static void release_slot(omptpy_thread *t) {
  omptpy_chunk *c;
  if (B.zc) {
    atomic_store(&t->cur_pub, NULL);
    t->cur = NULL;
    atomic_store(&t->limit, 0);
    atomic_store_explicit(&t->state, OMPTPY_THREAD_FREE, memory_order_release);
    return;
  }
  while ((c = ring_pop(&t->full)))
    if (!in_arena(t, c)) free(c);
  while ((c = ring_pop(&t->free)))
    if (!in_arena(t, c)) free(c);
  if ((c = atomic_load(&t->cur_pub)) && !in_arena(t, c)) free(c);
  atomic_store(&t->cur_pub, NULL);
  t->cur = NULL;
  atomic_store(&t->nchunks, 0);
  atomic_store_explicit(&t->state, OMPTPY_THREAD_FREE, memory_order_release);
}

/* An ended thread: drain it whole, keep its counters, free the slot for reuse. */
static void retire(omptpy_thread *t) {
  drain_stalled = false;
  if (B.zc) zc_retire(t);
  else drain_thread(t, true);
  if (drain_stalled) return; /* retired at a later pass, once drained whole */
  remember_retired(t);
  pthread_mutex_lock(&B.lock);
  release_slot(t);
  pthread_mutex_unlock(&B.lock);
}

static void retire_ended(void) {
  pthread_mutex_lock(&B.drain_lock);
  for (omptpy_thread *t = atomic_load_explicit(&B.all, memory_order_acquire); t; t = t->all_next)
    if (atomic_load_explicit(&t->state, memory_order_acquire) == OMPTPY_THREAD_ENDED) retire(t);
  pthread_mutex_unlock(&B.drain_lock);
}

static uint32_t drain_all(bool partial) {
  uint32_t nfull = 0;
  if (B.zc) {
    omptpy_region *r = atomic_load(&R);
    if (r) {
      drain_stalled = false;
      nfull = zc_drain(r, partial);
      /* Chunks written only for handlers (no window since the region was
       * installed) are let go once they add up. */
      if (r->nwin == 0 && !zc_window_open &&
          (size_t)atomic_load(&r->next) * CHUNK_BYTES > ZC_RECYCLE_BYTES && !drain_stalled)
        zc_take_locked(false);
    }
    for (omptpy_thread *t = atomic_load_explicit(&B.all, memory_order_acquire); t; t = t->all_next)
      if (atomic_load_explicit(&t->state, memory_order_acquire) == OMPTPY_THREAD_ENDED) retire(t);
    return nfull;
  }
  for (omptpy_thread *t = atomic_load_explicit(&B.all, memory_order_acquire); t; t = t->all_next) {
    int s = atomic_load_explicit(&t->state, memory_order_acquire);
    if (s == OMPTPY_THREAD_LIVE) {
      nfull += drain_thread(t, partial);
    } else if (s == OMPTPY_THREAD_ENDED) {
      retire(t);
    }
  }
  return nfull;
}

void omptpy_flush(void) {
  if (!B.ready) return;
  pthread_mutex_lock(&B.drain_lock);
  drain_all(true);
  pthread_mutex_unlock(&B.drain_lock);
}

bool omptpy_flush_try(void) {
  if (!B.ready || pthread_mutex_trylock(&B.drain_lock) != 0) return false;
  drain_all(true);
  pthread_mutex_unlock(&B.drain_lock);
  return true;
}

void omptpy_sink_window(bool open) {
  if (B.ready) pthread_mutex_lock(&B.drain_lock);
  if (open) {
    /* What was written before belongs to the previous window (or to none). */
    if (B.ready) drain_all(true);
    W.from = omptpy_now();
    W.until = UINT64_MAX;
  } else {
    W.until = omptpy_now();
  }
  if (B.zc) zc_set_window(open, open ? W.from : W.until);
  if (B.ready) pthread_mutex_unlock(&B.drain_lock);
}

static void *drainer_main(void *arg) {
  (void)arg;
  if (B.idle_drainer) {
    struct sched_param none = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
  }
  unsigned sleep_ms = 1;
  uint64_t last_stats = 0;
  while (atomic_load_explicit(&B.drainer_run, memory_order_acquire)) {
    uint32_t seq = atomic_load_explicit(&B.wake, memory_order_acquire);
    atomic_store_explicit(&B.wake_pending, 0, memory_order_release);
    /* An idle-priority drainer leaves the draining to the handlers' dispatcher
     * while handlers are registered: holding the drain lock while it gets no
     * CPU would hold up the dispatcher and the delay bound (tap.c). */
    uint32_t nfull = 0;
    if (!(B.idle_drainer && omptpy_tap_active())) {
      pthread_mutex_lock(&B.drain_lock);
      nfull = drain_all(false);
      pthread_mutex_unlock(&B.drain_lock);
    }
    if (B.zc) {
      /* Page faults off the writers' path: populate ahead of the leases. */
      pthread_mutex_lock(&B.drain_lock);
      omptpy_region *r = atomic_load(&R);
      if (r) region_populate_ahead(r);
      pthread_mutex_unlock(&B.drain_lock);
    }
    /* Poll fast while chunks arrive, back off to drain_ms when idle. */
    sleep_ms = nfull ? 1 : (sleep_ms * 2 > B.drain_ms ? B.drain_ms : sleep_ms * 2);
    if (nfull && omptpy_sink_is_file() && omptpy_monotonic_ns() - last_stats > 200000000u) {
      /* Counters and a clock anchor on disk as the run goes, for processes
       * that end without finalize. */
      omptpy_str s = {0};
      if (omptpy_stats_json(&s, false) == 0) omptpy_sink_json(OMPTPY_BLOCK_STATS, s.p, s.len);
      omptpy_str_free(&s);
      last_stats = omptpy_monotonic_ns();
    }
    struct timespec ts = {0, (long)sleep_ms * 1000000L};
    syscall(SYS_futex, &B.wake, FUTEX_WAIT_PRIVATE, seq, &ts, NULL, 0);
  }
  return NULL;
}

int omptpy_drainer_start(void) {
  if (!B.ready) return -EINVAL;
  pthread_mutex_lock(&B.lock);
  int rc = 0;
  if (!B.drainer_started) {
    atomic_store(&B.drainer_run, 1);
    /* The drainer must not receive the application's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = -pthread_create(&B.drainer, NULL, drainer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) B.drainer_started = true;
    else atomic_store(&B.drainer_run, 0);
  }
  pthread_mutex_unlock(&B.lock);
  return rc;
}

void omptpy_drainer_stop(void) {
  pthread_mutex_lock(&B.lock);
  bool join = B.drainer_started;
  B.drainer_started = false;
  atomic_store(&B.drainer_run, 0);
  pthread_mutex_unlock(&B.lock);
  atomic_fetch_add(&B.wake, 1);
  syscall(SYS_futex, &B.wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  if (join) pthread_join(B.drainer, NULL);
}

size_t omptpy_buffer_bytes(void) {
  size_t slots = 0;
  for (omptpy_thread *t = atomic_load(&B.all); t; t = t->all_next) slots++;
  /* Zero-copy: a thread holds one chunk of the trace, nothing of its own. */
  return slots * (B.zc ? 1 : B.max_chunks) * CHUNK_BYTES;
}

void omptpy_visit_threads(omptpy_thread_visit fn, void *ctx) {
  if (!B.ready) return;
  pthread_mutex_lock(&B.drain_lock);
  for (size_t i = 0; i < B.nretired; i++) {
    retired_stats *r = &B.retired[i];
    fn(ctx, r->index, r->type, r->runtime, r->tid, r->written, r->dropped, r->samples_skipped,
       false);
  }
  for (omptpy_thread *t = atomic_load(&B.all); t; t = t->all_next) {
    int s = atomic_load(&t->state);
    if (s == OMPTPY_THREAD_LIVE || s == OMPTPY_THREAD_ENDED)
      fn(ctx, t->index, t->type, t->runtime, t->tid, t->drained, atomic_load(&t->dropped),
         t->samples_skipped,
         s == OMPTPY_THREAD_LIVE);
  }
  pthread_mutex_unlock(&B.drain_lock);
}

int omptpy_buffers_init(const omptpy_config *cfg) {
  B.overflow = cfg->overflow;
  B.drain_ms = cfg->drain_ms;
  /* With the flush policy, moving a chunk (a copy, or a write() into the
   * page cache) costs a writer no more than it costs the drainer, and a
   * drainer that takes a CPU from a busy OpenMP thread stalls its whole team:
   * so the drainer only uses idle CPUs, and on a saturated machine the
   * writers move their own chunks (10^6 tasks to a file on 2 busy CPUs: 0.098
   * to 0.118 s instead of 0.117 to 0.145 s, min to median). */
  B.idle_drainer = cfg->overflow == OMPTPY_OVERFLOW_FLUSH;
  B.max_chunks = (uint32_t)(cfg->buffer_bytes / CHUNK_BYTES);
  if (B.max_chunks < 2) B.max_chunks = 2;
  uint32_t need = (cfg->overflow == OMPTPY_OVERFLOW_GROW ? GROW_FACTOR : 1) * B.max_chunks + 1;
  B.ring_cap = 1;
  while (B.ring_cap < need) B.ring_cap <<= 1;
  if (pthread_key_create(&exit_key, thread_exited) != 0) return -EAGAIN;
  /* Zero-copy memory sink, if take() can quiesce the writers (membarrier). */
  const char *zc = getenv("OMPTPY_ZERO_COPY");
  if (cfg->output[0] == '\0' && !(zc && strcmp(zc, "0") == 0) &&
      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0) {
    B.zc = true;
    omptpy_region *r = region_new();
    if (r) atomic_store(&R, r);
    else B.zc = false;
  }
  B.ready = true;
  return 0;
}

/* fork: the child keeps only the forking thread, with empty buffers. */
void omptpy_buffers_atfork_prepare(void) {
  pthread_mutex_lock(&B.drain_lock);
  pthread_mutex_lock(&B.lock);
}

void omptpy_buffers_atfork_parent(void) {
  pthread_mutex_unlock(&B.lock);
  pthread_mutex_unlock(&B.drain_lock);
}

void omptpy_buffers_after_fork_child(void) {
  pthread_mutex_init(&B.lock, NULL);
  pthread_mutex_init(&B.drain_lock, NULL);
  B.drainer_started = false;
  atomic_store(&B.drainer_run, 0);
  B.nretired = 0;
  omptpy_thread *self = omptpy_tls_thread;
  if (B.zc) {
    /* The parent's region is the parent's: the child starts an empty one. */
    omptpy_region *old = atomic_load(&R);
    atomic_store(&R, NULL);
    if (old) {
      munmap(old->base, old->bytes);
      region_free_meta(old);
    }
    omptpy_region *r = region_new();
    atomic_store(&R, r);
    for (omptpy_thread *t = atomic_load(&B.all); t; t = t->all_next) {
      if (atomic_load(&t->state) == OMPTPY_THREAD_FREE) continue;
      release_slot(t);
      if (t != self) continue;
      atomic_store(&t->state, OMPTPY_THREAD_LIVE);
      t->pos = 0;
      t->drained = 0;
      atomic_store(&t->dropped, 0);
      t->tid = (pid_t)syscall(SYS_gettid);
      t->has_timer = false;
      omptpy_sampler_thread_start(t);
    }
    return;
  }
  for (omptpy_thread *t = atomic_load(&B.all); t; t = t->all_next) {
    if (atomic_load(&t->state) == OMPTPY_THREAD_FREE) continue;
    if (t != self) {
      release_slot(t);
      continue;
    }
    omptpy_chunk *c;
    while ((c = ring_pop(&t->full))) {
      chunk_reset(c);
      ring_push(&t->free, c);
    }
    if (t->cur) {
      chunk_reset(t->cur);
      t->pos = 0;
    }
    t->drained = 0;
    atomic_store(&t->dropped, 0);
    t->tid = (pid_t)syscall(SYS_gettid);
    t->has_timer = false; /* timers are not inherited by a child */
    omptpy_sampler_thread_start(t);
  }
}
