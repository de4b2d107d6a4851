/*
 * Per-thread record buffers: the registry of thread slots, the chunks each
 * OS thread fills and, for the copying sinks, the rings that carry them to
 * the consumer (drainer.c) and back.
 *
 * Each OS thread owns a chunk it fills (omptpy_slot/omptpy_commit in the
 * internal header: no lock, no allocation, no system call).  A full chunk is
 * pushed onto the thread's `full` ring and the next one popped from its
 * `free` ring; both rings are single-producer single-consumer, so the hot
 * path only pays for one release store per record and a few relaxed loads
 * per 1024 records.  The consumer moves full chunks to the sink and hands
 * them back.  A thread's chunks (OMPTPY_BUFFER_SIZE of them, 8 MiB by
 * default) are mapped and faulted in when the thread begins.  When a thread
 * has no free chunk (the drainer fell behind, e.g. it got no CPU) the
 * overflow policy applies: flush (the thread moves its own full chunks to
 * the sink, as Score-P does; the default), drop (count the record), or grow
 * (allocate another chunk).
 *
 * That is the copying scheme of the file sink (and of the memory sink without
 * membarrier, or with OMPTPY_ZERO_COPY=0).  The memory sink otherwise has
 * threads write in place into the trace region (zerocopy.c).  Both share the
 * hot path: one compare of pos against the thread's limit, a cached record
 * pointer, one release store of the count.
 *
 * With the file sink a slot's chunk descriptors live in the raw file (a
 * LEDGER block mapped shared, ledger.c), and each thread's ledger entry is
 * kept on the slow path (a chunk handed over, a record dropped, a chunk
 * drained): the loader counts from them what a killed process lost.  A slot
 * whose buffer would not fit in the memory the machine has left gets none:
 * its thread's records are counted (nobuf) instead of getting the program
 * OOM-killed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "omptpy_internal.h"

_Thread_local omptpy_thread *omptpy_tls_thread __attribute__((tls_model("initial-exec")));

omptpy_buffers omptpy_buf = {.lock = PTHREAD_MUTEX_INITIALIZER,
                             .drain_lock = PTHREAD_MUTEX_INITIALIZER};

#define GROW_FACTOR 64u /* the grow policy may own this many times the bound */

typedef struct retired_stats {
  uint32_t index;
  int type;
  int runtime;
  pid_t tid;
  uint64_t written, dropped, samples_skipped, nobuf;
} retired_stats;

static struct {
  omptpy_overflow overflow;
  uint32_t max_chunks; /* per-thread bound: the arena of every thread */
  uint32_t ring_cap;
  _Atomic uint32_t next_index;
  uint32_t nslots;     /* slots made, under the registry lock */
  bool nobuf_told;     /* the missing buffer was reported on stderr */
  retired_stats *retired; /* counters of threads that ended, under drain_lock */
  size_t nretired, capretired;
} B;

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

_Static_assert(sizeof(omptpy_chunk) == OMPTPY_CACHELINE, "a chunk descriptor is one cache line");

/* Under the registry lock.  The descriptors go into the file's ledger once and
 * stay (a slot whose records could not be mapped tries again, with the same
 * descriptors, when a later thread takes it). */
static bool no_buffer(size_t bytes, const char *why) {
  if (!B.nobuf_told)
    fprintf(stderr, "ompt-py: no memory for a thread's %zu MiB buffer (%s): its records are "
            "counted as lost; lower OMPTPY_BUFFER_SIZE\n", bytes >> 20, why);
  B.nobuf_told = true;
  return false;
}

static bool arena_new(omptpy_thread *t) {
  size_t bytes = (size_t)B.max_chunks * OMPTPY_CHUNK_BYTES;
  if (!omptpy_mem_fits(bytes)) return no_buffer(bytes, "too little memory available");
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return no_buffer(bytes, strerror(errno));
  madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 0, bytes); /* fault every page in now, not on the hot path */
  size_t desc_bytes = (size_t)B.max_chunks * sizeof(omptpy_chunk);
  if (!t->arena && omptpy_sink_is_file()) {
    t->arena = omptpy_ledger_slot(t->slot_no);
    t->arena_shared = t->arena != NULL;
  }
  if (!t->arena) t->arena = aligned_alloc(OMPTPY_CACHELINE, desc_bytes);
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
  return t->arena_recs && c >= t->arena && c < t->arena + B.max_chunks;
}

/* A grown chunk: its descriptor, then its records, in one allocation. */
static omptpy_chunk *extra_chunk_new(void) {
  omptpy_chunk *c;
  if (posix_memalign((void **)&c, OMPTPY_CACHELINE, sizeof *c + OMPTPY_CHUNK_BYTES) != 0)
    return NULL;
  memset(c, 0, sizeof *c + OMPTPY_CHUNK_BYTES);
  c->recs = (omptpy_record *)(c + 1);
  return c;
}

static void chunk_reset(omptpy_chunk *c) {
  c->taken = 0;
  atomic_store_explicit(&c->closed, false, memory_order_relaxed);
  atomic_store_explicit(&c->n, 0, memory_order_relaxed);
}

/* ---- the thread's ledger entry (ledger.c) --------------------------------- */

/* The entry is read after the process died, in the order its stores were
 * made (one thread's stores, to memory the kernel keeps): a kill between two
 * of them leaves it counting a chunk once or not at all, never twice. */
static inline void ledger_store_u32(uint32_t *p, uint32_t v) {
  atomic_signal_fence(memory_order_seq_cst);
  *(volatile uint32_t *)p = v;
}

static inline void ledger_add(uint64_t *p, uint64_t v) {
  atomic_signal_fence(memory_order_seq_cst);
  *(volatile uint64_t *)p += v;
}

/* The chunk c becomes the thread's current one (slow path). */
static void ledger_current(omptpy_thread *t, omptpy_chunk *c) {
  omptpy_ledger_thread *e = t->led;
  if (!e) return;
  bool known = t->arena_shared && in_arena(t, c);
  ledger_store_u32(&e->cur, known ? (uint32_t)(c - t->arena) : OMPTPY_LEDGER_NONE);
  ledger_store_u32(&e->flags, known ? e->flags & ~(uint32_t)OMPTPY_LEDGER_UNKNOWN
                                    : e->flags | OMPTPY_LEDGER_UNKNOWN);
}

void omptpy_count_dropped(omptpy_thread *t) {
  atomic_store_explicit(&t->dropped, atomic_load_explicit(&t->dropped, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  if (t->led) ledger_add(&t->led->dropped, 1);
}

void omptpy_count_sink_lost(omptpy_thread *t) {
  omptpy_zc_file_lost_add(1);
  if (t->led) ledger_add(&t->led->sink_lost, 1);
}

/* Under the registry lock: a thread takes a slot. */
static void ledger_enter(omptpy_thread *t) {
  omptpy_ledger_thread *e = t->led = omptpy_ledger_thread_entry(t->index);
  if (!e) return;
  *e = (omptpy_ledger_thread){.used = t->index + 1, .slot = t->arena_shared ? t->slot_no + 1 : 0,
                              .tid = t->tid, .cur = OMPTPY_LEDGER_NONE, .type = t->type,
                              .flags = t->arena_recs || omptpy_buf.zc ? 0 : OMPTPY_LEDGER_NOBUF};
  if (t->cur) ledger_current(t, t->cur);
}

/* Under drain_lock: the thread ended and was drained whole; its entry is final. */
static void ledger_final(omptpy_thread *t) {
  omptpy_ledger_thread *e = t->led;
  if (!e) return;
  omptpy_chunk *c = atomic_load(&t->cur_pub);
  ledger_store_u32(&e->cur, OMPTPY_LEDGER_NONE);
  ledger_add(&e->handed, c ? atomic_load(&c->n) : 0);
  ledger_store_u32(&e->flags, (e->flags & ~(uint32_t)OMPTPY_LEDGER_UNKNOWN) | OMPTPY_LEDGER_FINAL);
  t->led = NULL;
}

/* ---- threads -------------------------------------------------------------- */

static omptpy_thread *thread_new(void) {
  omptpy_thread *t;
  if (posix_memalign((void **)&t, OMPTPY_CACHELINE, sizeof *t) != 0) return NULL;
  memset(t, 0, sizeof *t);
  if (omptpy_buf.zc) return t; /* zero-copy: chunks are leased from the region, no rings */
  t->full.mask = t->free.mask = B.ring_cap - 1;
  t->full.slots = calloc(B.ring_cap, sizeof(omptpy_chunk *));
  t->free.slots = calloc(B.ring_cap, sizeof(omptpy_chunk *));
  if (!t->full.slots || !t->free.slots) {
    free(t->full.slots);
    free(t->free.slots);
    free(t);
    return NULL;
  }
  t->slot_no = B.nslots++;
  arena_new(t); /* without one (no memory), the slot's threads count their records as nobuf */
  return t;
}

static void retire_ended(void);

/* Threads the runtime never announced (a Python thread that marked regions
 * or called ompt_py.control, a runtime's helper that hands device buffers
 * back) give their slot back when they exit.  The runtime's own threads end
 * with thread_end, which may come after this destructor (destructors run in
 * no set order): they are left alone. */
static pthread_key_t exit_key;

static void thread_exited(void *p) {
  omptpy_thread *t = p;
  if (omptpy_tls_thread == t && t->self_detach) omptpy_thread_detach(t);
}

/* Called once per OS thread (thread_begin, or the first event of a thread the
 * runtime did not announce).  Not on the steady-state path. */
omptpy_thread *omptpy_thread_attach(int type, int runtime) {
  if (!omptpy_buf.ready) return NULL;
  /* Slots of threads that ended are drained and freed first, so a program
   * that starts threads one after another reuses one buffer. */
  retire_ended();
  omptpy_zc_file_start(); /* the file and its first region, before the thread's ledger entry */
  pthread_mutex_lock(&omptpy_buf.lock);
  omptpy_thread *t = NULL;
  for (omptpy_thread *p = atomic_load(&omptpy_buf.all); p; p = p->all_next)
    if (atomic_load(&p->state) == OMPTPY_THREAD_FREE) {
      t = p;
      break;
    }
  bool fresh = t == NULL;
  if (fresh && !(t = thread_new())) {
    pthread_mutex_unlock(&omptpy_buf.lock);
    return NULL;
  }
  if (omptpy_buf.zc) {
    /* The first record takes the slow path, which leases a chunk. */
    t->cur = NULL;
    t->recs = NULL;
    t->cur_epoch = 0;
    atomic_store(&t->limit, 0);
  } else {
    ring_reset(&t->full);
    ring_reset(&t->free);
    if (!t->arena_recs && !fresh) arena_new(t);
    if (t->arena_recs) {
      for (uint32_t i = 0; i < B.max_chunks; i++) {
        chunk_reset(&t->arena[i]);
        if (i) ring_push(&t->free, &t->arena[i]);
      }
      atomic_store(&t->nchunks, B.max_chunks);
      t->cur = &t->arena[0];
      t->recs = t->cur->recs;
      atomic_store(&t->limit, OMPTPY_CHUNK_RECORDS);
    } else {
      atomic_store(&t->nchunks, 0);
      t->cur = NULL;
      t->recs = NULL;
      atomic_store(&t->limit, 0);
    }
  }
  t->pos = 0;
  t->index = atomic_fetch_add(&B.next_index, 1);
  t->next_id = 0;
  t->inner_task = 0;
  t->nbegun = 0;
  atomic_store(&t->run_task, 0);
  atomic_store(&t->run_parallel, 0);
  atomic_store(&t->run_frame, NULL);
  t->barrier_task = 0;
  t->nsuspended = 0;
  atomic_store(&t->dropped, 0);
  atomic_store(&t->cur_pub, t->cur);
  t->drained = 0;
  t->type = type;
  t->self_detach = type == ompt_thread_unknown;
  t->runtime = runtime;
  t->tid = (pid_t)syscall(SYS_gettid);
  atomic_store(&t->in_tool, 0);
  atomic_store(&t->samples_skipped, 0);
  t->nobuf = 0;
  ledger_enter(t);
  atomic_store_explicit(&t->state, OMPTPY_THREAD_LIVE, memory_order_release);
  if (fresh) {
    t->all_next = atomic_load(&omptpy_buf.all);
    atomic_store_explicit(&omptpy_buf.all, t, memory_order_release);
  }
  pthread_mutex_unlock(&omptpy_buf.lock);
  omptpy_profile_thread_start(t);
  omptpy_tls_thread = t;
  pthread_setspecific(exit_key, t);
  omptpy_sampler_thread_start(t);
  return t;
}

omptpy_thread *omptpy_thread_adopt(int type) {
  omptpy_thread *t = omptpy_thread_attach(type, 0);
  if (t) t->self_detach = true;
  return t;
}

void omptpy_thread_detach(omptpy_thread *t) {
  omptpy_sampler_thread_stop(t);
  omptpy_tls_thread = NULL;
  pthread_setspecific(exit_key, NULL);
  atomic_store_explicit(&t->state, OMPTPY_THREAD_ENDED, memory_order_release);
}

/* No free chunk: the overflow policy gives one, or NULL to drop the record. */
static omptpy_chunk *overflow(omptpy_thread *t) {
  omptpy_chunk *c = NULL;
  switch (B.overflow) {
    case OMPTPY_OVERFLOW_FLUSH:
      /* Become the consumer for a moment; waits at most for one drainer pass. */
      pthread_mutex_lock(&omptpy_buf.drain_lock);
      omptpy_drain_thread(t, false);
      pthread_mutex_unlock(&omptpy_buf.drain_lock);
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

omptpy_record *omptpy_slot_slow(omptpy_thread *t) {
  if (omptpy_buf.zc) return omptpy_zc_slot_slow(t);
  if (OMPTPY_UNLIKELY(!t->arena_recs)) { /* no buffer: counted, not written */
    t->nobuf++;
    if (t->led) ledger_add(&t->led->nobuf, 1);
    return NULL;
  }
  if (t->cur) {
    ring_push(&t->full, t->cur); /* cannot fail: the ring holds every chunk the thread owns */
    if (t->led) {
      ledger_store_u32(&t->led->cur, OMPTPY_LEDGER_NONE);
      ledger_add(&t->led->handed, t->pos);
    }
    t->cur = NULL;
    atomic_store_explicit(&t->cur_pub, NULL, memory_order_release);
  }
  if (ring_count(&t->free) < B.max_chunks / 4) omptpy_drainer_wake();
  omptpy_chunk *c = ring_pop(&t->free);
  if (!c) c = overflow(t);
  if (!c) {
    t->pos = OMPTPY_CHUNK_RECORDS;
    omptpy_count_dropped(t);
    return NULL;
  }
  atomic_store_explicit(&c->n, 0, memory_order_relaxed);
  ledger_current(t, c);
  t->cur = c;
  t->recs = c->recs;
  t->pos = 0;
  atomic_store_explicit(&t->cur_pub, c, memory_order_release);
  return &c->recs[0];
}

/* A record and its `more` share one reservation that never spans two chunks,
 * so the pair is kept or dropped whole.  A chunk with one record free is
 * left (closed: done with n records, as a full one), and the pair goes into
 * the next.  The copying scheme's slow path already moves on from a chunk
 * that is not full; the zero-copy one carries on in it unless told. */
omptpy_record *omptpy_slot2_slow(omptpy_thread *t) {
  uint64_t nobuf = t->nobuf, dropped = atomic_load_explicit(&t->dropped, memory_order_relaxed);
  omptpy_record *r = omptpy_slot_slow(t);
  if (r && t->pos + 2 > OMPTPY_CHUNK_RECORDS) {
    atomic_store_explicit(&t->cur->closed, true, memory_order_release);
    t->pos = OMPTPY_CHUNK_RECORDS;
    r = omptpy_slot_slow(t);
  }
  if (r) return r;
  /* The slow path counted one record lost: the pair's other one too. */
  if (t->nobuf != nobuf) {
    t->nobuf++;
    if (t->led) ledger_add(&t->led->nobuf, 1);
  } else if (atomic_load_explicit(&t->dropped, memory_order_relaxed) != dropped) {
    omptpy_count_dropped(t);
  } else {
    omptpy_count_sink_lost(t);
  }
  return NULL;
}

/* ---- draining (under drain_lock) -------------------------------------------- */

/* Moves what c holds beyond c->taken to the sink and the handlers' queue;
 * false when part of it had to stay. */
static bool take_records(omptpy_thread *t, omptpy_chunk *c) {
  uint32_t n = atomic_load_explicit(&c->n, memory_order_acquire);
  if (n > c->taken) {
    const omptpy_record *r = &c->recs[c->taken];
    size_t k = omptpy_tap_push(r, n - c->taken);
    uint64_t lost = 0;
    size_t kept = omptpy_to_sink(r, k, &lost);
    t->drained += kept;
    if (t->led) {
      ledger_add(&t->led->discarded, k - kept);
      ledger_add(&t->led->sink_lost, lost);
    }
    c->taken += (uint32_t)k;
  }
  if (c->taken == n) return true;
  omptpy_buf.drain_stalled = true;
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

uint32_t omptpy_drain_thread(omptpy_thread *t, bool partial) {
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

static void remember_retired(omptpy_thread *t) {
  if (B.nretired == B.capretired) {
    size_t cap = B.capretired ? 2 * B.capretired : 64;
    retired_stats *p = realloc(B.retired, cap * sizeof *p);
    if (!p) return;
    B.retired = p;
    B.capretired = cap;
  }
  B.retired[B.nretired++] = (retired_stats){t->index,   t->type,
                                            t->runtime, t->tid,
                                            t->drained, atomic_load(&t->dropped),
                                            atomic_load(&t->samples_skipped), t->nobuf};
}

/* Chunks a slot holds outside its arena (grow policy) are freed when it is released. */
static void release_slot(omptpy_thread *t) {
  omptpy_chunk *c;
  if (omptpy_buf.zc) {
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
  t->led = NULL;
  atomic_store(&t->nchunks, 0);
  atomic_store_explicit(&t->state, OMPTPY_THREAD_FREE, memory_order_release);
}

/* An ended thread: drain it whole, keep its counters, free the slot for reuse. */
void omptpy_thread_retire(omptpy_thread *t) {
  omptpy_buf.drain_stalled = false;
  if (omptpy_buf.zc) omptpy_zc_retire(t);
  else omptpy_drain_thread(t, true);
  if (omptpy_buf.drain_stalled) return; /* retired at a later pass, once drained whole */
  ledger_final(t);
  remember_retired(t);
  pthread_mutex_lock(&omptpy_buf.lock);
  release_slot(t);
  pthread_mutex_unlock(&omptpy_buf.lock);
}

static void retire_ended(void) {
  pthread_mutex_lock(&omptpy_buf.drain_lock);
  for (omptpy_thread *t = atomic_load_explicit(&omptpy_buf.all, memory_order_acquire); t;
       t = t->all_next)
    if (atomic_load_explicit(&t->state, memory_order_acquire) == OMPTPY_THREAD_ENDED)
      omptpy_thread_retire(t);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
}

uint32_t omptpy_next_thread_index(void) { return atomic_load(&B.next_index); }

size_t omptpy_buffer_bytes(void) {
  size_t slots = 0;
  for (omptpy_thread *t = atomic_load(&omptpy_buf.all); t; t = t->all_next) slots++;
  /* Zero-copy: a thread holds one chunk of the trace, nothing of its own. */
  return slots * (omptpy_buf.zc ? 1 : B.max_chunks) * OMPTPY_CHUNK_BYTES;
}

void omptpy_visit_threads(omptpy_thread_visit fn, void *ctx) {
  if (!omptpy_buf.ready) return;
  pthread_mutex_lock(&omptpy_buf.drain_lock);
  for (size_t i = 0; i < B.nretired; i++) {
    retired_stats *r = &B.retired[i];
    fn(ctx, r->index, r->type, r->runtime, r->tid, r->written, r->dropped, r->samples_skipped,
       r->nobuf, false);
  }
  for (omptpy_thread *t = atomic_load(&omptpy_buf.all); t; t = t->all_next) {
    int s = atomic_load(&t->state);
    if (s == OMPTPY_THREAD_LIVE || s == OMPTPY_THREAD_ENDED)
      fn(ctx, t->index, t->type, t->runtime, t->tid, t->drained, atomic_load(&t->dropped),
         atomic_load(&t->samples_skipped), t->nobuf, s == OMPTPY_THREAD_LIVE);
  }
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
}

int omptpy_buffers_init(const omptpy_config *cfg) {
  B.overflow = cfg->overflow;
  B.max_chunks = (uint32_t)(cfg->buffer_bytes / OMPTPY_CHUNK_BYTES);
  if (B.max_chunks < 2) B.max_chunks = 2;
  uint32_t need = (cfg->overflow == OMPTPY_OVERFLOW_GROW ? GROW_FACTOR : 1) * B.max_chunks + 1;
  B.ring_cap = 1;
  while (B.ring_cap < need) B.ring_cap <<= 1;
  if (pthread_key_create(&exit_key, thread_exited) != 0) return -EAGAIN;
  omptpy_ledger_init(B.max_chunks);
  atomic_store(&B.next_index, omptpy_ledger_base()); /* after an exec: the previous image's */
  omptpy_buf.zc = omptpy_zc_init(cfg);
  omptpy_buf.ready = true;
  return 0;
}

/* fork: the child keeps only the forking thread, with empty buffers. */
void omptpy_buffers_atfork_prepare(void) {
  pthread_mutex_lock(&omptpy_buf.drain_lock);
  pthread_mutex_lock(&omptpy_buf.lock);
}

void omptpy_buffers_atfork_parent(void) {
  pthread_mutex_unlock(&omptpy_buf.lock);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
}

void omptpy_buffers_after_fork_child(void) {
  pthread_mutex_init(&omptpy_buf.lock, NULL);
  pthread_mutex_init(&omptpy_buf.drain_lock, NULL);
  B.nretired = 0;
  if (omptpy_buf.zc) omptpy_zc_after_fork_child();
  omptpy_thread *self = omptpy_tls_thread;
  for (omptpy_thread *t = atomic_load(&omptpy_buf.all); t; t = t->all_next) {
    if (atomic_load(&t->state) == OMPTPY_THREAD_FREE) continue;
    /* Zero-copy: the forking thread's chunk is in the parent's region, so its
     * slot is released too, and its next record leases from the child's. */
    if (omptpy_buf.zc || t != self) release_slot(t);
    if (t != self) continue;
    if (omptpy_buf.zc) {
      atomic_store(&t->state, OMPTPY_THREAD_LIVE);
      t->pos = 0;
    } else {
      omptpy_chunk *c;
      while ((c = ring_pop(&t->full))) {
        chunk_reset(c);
        ring_push(&t->free, c);
      }
      if (t->cur) {
        chunk_reset(t->cur);
        t->pos = 0;
      }
    }
    t->drained = 0;
    t->nobuf = 0;
    atomic_store(&t->dropped, 0);
    t->tid = (pid_t)syscall(SYS_gettid);
    ledger_enter(t); /* the child's own ledger (omptpy_ledger_after_fork_child) */
    t->has_timer = false; /* timers are not inherited by a child */
    omptpy_sampler_thread_start(t);
  }
}
