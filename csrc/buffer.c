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
static omptpy_chunk *arena_new(void) {
  size_t bytes = (size_t)B.max_chunks * sizeof(omptpy_chunk);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 0, bytes); /* fault every page in now, not on the hot path */
  return p;
}

static bool in_arena(const omptpy_thread *t, const omptpy_chunk *c) {
  return c >= t->arena && c < t->arena + B.max_chunks;
}

static omptpy_chunk *extra_chunk_new(void) {
  omptpy_chunk *c;
  if (posix_memalign((void **)&c, OMPTPY_CACHELINE, sizeof *c) != 0) return NULL;
  memset(c, 0, sizeof *c);
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
  t->full.mask = t->free.mask = B.ring_cap - 1;
  t->full.slots = calloc(B.ring_cap, sizeof(omptpy_chunk *));
  t->free.slots = calloc(B.ring_cap, sizeof(omptpy_chunk *));
  t->arena = arena_new();
  if (!t->full.slots || !t->free.slots || !t->arena) {
    free(t->full.slots);
    free(t->free.slots);
    if (t->arena) munmap(t->arena, (size_t)B.max_chunks * sizeof(omptpy_chunk));
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
  ring_reset(&t->full);
  ring_reset(&t->free);
  for (uint32_t i = 0; i < B.max_chunks; i++) {
    chunk_reset(&t->arena[i]);
    if (i) ring_push(&t->free, &t->arena[i]);
  }
  atomic_store(&t->nchunks, B.max_chunks);
  t->cur = &t->arena[0];
  t->pos = 0;
  t->index = atomic_fetch_add(&B.next_index, 1);
  t->next_id = 0;
  atomic_store(&t->dropped, 0);
  atomic_store(&t->cur_pub, t->cur);
  t->drained = 0;
  t->type = type;
  t->runtime = runtime;
  t->tid = (pid_t)syscall(SYS_gettid);
  t->in_tool = 0;
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

omptpy_record *omptpy_slot_slow(omptpy_thread *t) {
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
  drain_thread(t, true);
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
  return slots * B.max_chunks * sizeof(omptpy_chunk);
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
  /* In memory with the flush policy, copying a chunk costs a writer no more
   * than it costs the drainer, and a drainer that takes a CPU from a busy
   * OpenMP thread stalls its whole team: so the drainer only uses idle CPUs,
   * and on a saturated machine the writers move their own chunks. */
  B.idle_drainer = cfg->output[0] == '\0' && cfg->overflow == OMPTPY_OVERFLOW_FLUSH;
  B.max_chunks = (uint32_t)(cfg->buffer_bytes / sizeof(omptpy_chunk));
  if (B.max_chunks < 2) B.max_chunks = 2;
  uint32_t need = (cfg->overflow == OMPTPY_OVERFLOW_GROW ? GROW_FACTOR : 1) * B.max_chunks + 1;
  B.ring_cap = 1;
  while (B.ring_cap < need) B.ring_cap <<= 1;
  if (pthread_key_create(&exit_key, thread_exited) != 0) return -EAGAIN;
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
