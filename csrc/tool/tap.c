/*
 * The handler tap: records for Python handlers (ompt_py.on).
 *
 * Whoever drains records (the drainer, a writer moving its own chunks, a
 * flush; always under the drain lock) passes them through omptpy_tap_push.
 * Those that one of the handlers' C filters accepts (event kinds, thread
 * indices, a code address range) are copied into one bounded ring, which the
 * dispatcher, a Python thread, empties with omptpy_tap_wait/omptpy_tap_read
 * without holding any lock of the tool or the GIL.  One producer at a time
 * (the drain lock), one consumer.  When the ring is full a record is dropped
 * and counted, unless the handlers asked for back-pressure (block): then the
 * producer waits for room, and writers wait behind it through their overflow
 * path.  The OpenMP threads never wait for Python here unless block was
 * asked for.
 *
 * The delay bound: while it waits, the consumer drains every thread's
 * buffer, the chunk being filled included, every delay/4 (unless someone
 * else is draining at that moment).  The drainer cannot be relied on for
 * this: it sleeps up to OMPTPY_DRAIN_MS and may run at idle priority.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "omptpy_internal.h"

#define MIN_RING_RECORDS 1024u
#define ANCHOR_EVERY_NS 100000000u /* the consumer's clock anchor is refreshed this often */
#define BLOCK_POLL_NS 10000000L    /* a blocked producer re-checks its conditions this often */
#define RETRY_DRAIN_NS 1000000u    /* the consumer tries again this soon when the lock was busy */

static struct {
  pthread_mutex_t lock; /* the filters; held by the producer while it pushes */
  omptpy_record *ring;
  uint64_t cap; /* records, a power of two */
  omptpy_tap_filter filters[OMPTPY_TAP_MAX_FILTERS];
  int nfilters;
  bool pass_all;         /* one filter, every event, no thread or code restriction */
  uint64_t ompt_events;  /* OMPT callbacks (numbers < 64) some filter wants */
  _Alignas(OMPTPY_CACHELINE) _Atomic uint64_t head; /* records pushed, ever (producer) */
  _Alignas(OMPTPY_CACHELINE) _Atomic uint64_t tail; /* records read, ever (consumer) */
  _Atomic uint32_t seq;   /* futex word of the consumer: bumped by pushes and stop */
  _Atomic uint32_t space; /* futex word of a blocked producer: bumped by reads */
  _Atomic int consumer_waiting, producer_waiting;
  _Atomic int active, block;
  _Atomic uint64_t period_ns; /* the consumer drains this often while it waits */
  _Atomic uint64_t queued, dropped, filtered;
  /* Consumer only. */
  uint64_t drained_at_ns; /* its last drain */
  omptpy_anchor anchor;   /* the latest clock anchor, for ticks -> nanoseconds */
  uint64_t anchor_at_ns;
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local bool consuming; /* this thread is the consumer, draining */

static bool event_in(const uint64_t events[2], uint32_t e) {
  return e < 128 && (events[e >> 6] >> (e & 63) & 1);
}

/* The filters that accept a thread: a range of records is one thread's, so
 * the thread lists are looked at once per range, not per record. */
static int filters_of(uint32_t thread, const omptpy_tap_filter **out) {
  int m = 0;
  for (int i = 0; i < T.nfilters; i++) {
    const omptpy_tap_filter *f = &T.filters[i];
    bool found = f->nthreads == 0;
    for (uint32_t k = 0; k < f->nthreads && !found; k++) found = f->threads[k] == thread;
    if (found) out[m++] = f;
  }
  return m;
}

static bool passes(const omptpy_record *r, const omptpy_tap_filter *const *f, int m) {
  for (int i = 0; i < m; i++) {
    if (!event_in(f[i]->events, r->event)) continue;
    if (f[i]->codeptr_hi && (r->codeptr < f[i]->codeptr_lo || r->codeptr >= f[i]->codeptr_hi))
      continue;
    return true;
  }
  return false;
}

/* Wakes the consumer if it sleeps (after records were pushed, or at stop). */
static void wake_consumer(void) {
  atomic_fetch_add(&T.seq, 1);
  if (atomic_load(&T.consumer_waiting)) omptpy_futex_wake(&T.seq);
}

/* Block mode, ring full: waits until the consumer makes room or block is
 * switched off.  Returns the consumer's position then.  The filters' lock is
 * let go meanwhile: a handler may change the handlers (ompt_py.on/off) on the
 * consumer's thread, and the producer stays the only one (drain lock). */
static uint64_t wait_for_room(uint64_t head) {
  uint64_t tl = atomic_load(&T.tail);
  pthread_mutex_unlock(&T.lock);
  while (head - tl >= T.cap && atomic_load(&T.block) && atomic_load(&T.active)) {
    uint32_t seen = atomic_load(&T.space);
    atomic_store(&T.producer_waiting, 1);
    tl = atomic_load(&T.tail);
    if (head - tl < T.cap) break;
    omptpy_futex_wait(&T.space, seen, BLOCK_POLL_NS);
    tl = atomic_load(&T.tail);
  }
  atomic_store(&T.producer_waiting, 0);
  pthread_mutex_lock(&T.lock);
  return tl;
}

/* recs[0..n) are one thread's records, in order. */
size_t omptpy_tap_push(const omptpy_record *r, size_t n) {
  if (OMPTPY_LIKELY(!atomic_load_explicit(&T.active, memory_order_acquire)) || n == 0) return n;
  pthread_mutex_lock(&T.lock);
  const omptpy_tap_filter *mine[OMPTPY_TAP_MAX_FILTERS];
  int m = T.pass_all ? 0 : filters_of(r[0].thread, mine);
  if (!T.pass_all && m == 0) { /* no handler wants this thread */
    pthread_mutex_unlock(&T.lock);
    atomic_fetch_add_explicit(&T.filtered, n, memory_order_relaxed);
    return n;
  }
  uint64_t h = atomic_load_explicit(&T.head, memory_order_relaxed);
  uint64_t tl = atomic_load_explicit(&T.tail, memory_order_acquire);
  uint64_t pushed = 0, dropped = 0, filtered = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    if (!T.pass_all && !passes(&r[i], mine, m)) {
      filtered++;
      continue;
    }
    if (h - tl >= T.cap) {
      tl = atomic_load_explicit(&T.tail, memory_order_acquire);
      if (h - tl >= T.cap && atomic_load(&T.block)) {
        if (consuming) break; /* the consumer cannot wait for itself: the rest stays */
        atomic_store_explicit(&T.head, h, memory_order_release); /* let it read what is there */
        wake_consumer();
        tl = wait_for_room(h);
      }
      if (h - tl >= T.cap) {
        dropped++;
        continue;
      }
    }
    T.ring[h & (T.cap - 1)] = r[i];
    h++;
    pushed++;
  }
  atomic_store_explicit(&T.head, h, memory_order_release);
  pthread_mutex_unlock(&T.lock);
  if (filtered) atomic_fetch_add_explicit(&T.filtered, filtered, memory_order_relaxed);
  if (dropped) atomic_fetch_add_explicit(&T.dropped, dropped, memory_order_relaxed);
  if (pushed) {
    atomic_fetch_add_explicit(&T.queued, pushed, memory_order_relaxed);
    wake_consumer();
  }
  return i;
}

bool omptpy_tap_active(void) { return atomic_load_explicit(&T.active, memory_order_acquire) != 0; }

uint64_t omptpy_tap_events(void) { return omptpy_tap_active() ? T.ompt_events : 0; }

static int ring_alloc(void) {
  uint64_t want = omptpy_g.cfg.handler_queue_bytes / sizeof(omptpy_record);
  uint64_t cap = MIN_RING_RECORDS;
  while (cap * 2 <= want) cap *= 2;
  /* Pages are committed as the ring first fills, by the producer, never by an OpenMP
   * thread's hot path. */
  void *p = mmap(NULL, cap * sizeof(omptpy_record), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return -errno;
  T.ring = p;
  T.cap = cap;
  return 0;
}

OMPTPY_API int omptpy_tap_configure(const omptpy_tap_filter *filters, int nfilters,
                                    uint64_t delay_ns, int block) {
  if (omptpy_init() != 0) return -EINVAL;
  if (nfilters < 1 || nfilters > OMPTPY_TAP_MAX_FILTERS || delay_ns == 0) return -EINVAL;
  for (int i = 0; i < nfilters; i++)
    if (filters[i].nthreads > OMPTPY_TAP_MAX_THREADS) return -EINVAL;
  pthread_mutex_lock(&T.lock);
  int rc = T.ring ? 0 : ring_alloc();
  if (rc == 0) {
    memcpy(T.filters, filters, (size_t)nfilters * sizeof *filters);
    T.nfilters = nfilters;
    const omptpy_tap_filter *f = &filters[0];
    T.pass_all = nfilters == 1 && f->events[0] == UINT64_MAX && f->events[1] == UINT64_MAX &&
                 !f->codeptr_hi && !f->nthreads;
    T.ompt_events = 0;
    for (int i = 0; i < nfilters; i++) T.ompt_events |= filters[i].events[0];
    atomic_store(&T.period_ns, delay_ns / 4 ? delay_ns / 4 : 1);
    atomic_store(&T.block, block != 0);
    /* What a stopped tap left queued is read by the next consumer, which gives
     * each handler only the events stamped after it was registered. */
    atomic_store(&T.active, 1);
  }
  pthread_mutex_unlock(&T.lock);
  if (rc != 0) return rc;
  omptpy_consumers_changed();
  return 0;
}

/* Stops the tap without taking its lock first: a producer blocked on a full
 * ring (holding the lock) is released by the flags. */
OMPTPY_API void omptpy_tap_stop(void) {
  atomic_store(&T.block, 0);
  atomic_store(&T.active, 0);
  atomic_fetch_add(&T.space, 1);
  omptpy_futex_wake(&T.space);
  wake_consumer();
  omptpy_futex_wake(&T.seq);
  if (omptpy_init() == 0) omptpy_consumers_changed();
}

void omptpy_tap_shutdown(void) {
  atomic_store(&T.block, 0);
  atomic_fetch_add(&T.space, 1);
  omptpy_futex_wake(&T.space);
}

/* Drains every buffer into the ring now.  From the consumer's thread, a push
 * never waits for room (the consumer is the one that makes room): with block,
 * what does not fit stays in the buffers (omptpy_tap_push returns less). */
static bool consumer_drain(uint64_t now) {
  consuming = true;
  bool done = omptpy_flush_try();
  if (done) T.drained_at_ns = now;
  consuming = false;
  return done;
}

OMPTPY_API long omptpy_tap_wait(int64_t timeout_ns) {
  uint64_t deadline = omptpy_monotonic_ns() + (uint64_t)(timeout_ns > 0 ? timeout_ns : 0);
  bool drained = false, busy = false; /* busy: someone else held the drain lock */
  for (;;) {
    if (!atomic_load(&T.active)) return -1;
    uint64_t tl = atomic_load(&T.tail);
    uint64_t h = atomic_load(&T.head), now = omptpy_monotonic_ns();
    uint64_t period = atomic_load(&T.period_ns);
    if (!drained && now - T.drained_at_ns >= period) {
      busy = !consumer_drain(now);
      drained = true;
      continue;
    }
    if (h > tl) return (long)(h - tl);
    uint32_t seen = atomic_load(&T.seq);
    atomic_store(&T.consumer_waiting, 1);
    if (atomic_load(&T.head) > tl || !atomic_load(&T.active)) {
      atomic_store(&T.consumer_waiting, 0);
      continue;
    }
    if (now >= deadline) {
      atomic_store(&T.consumer_waiting, 0);
      return 0;
    }
    uint64_t next_drain = busy ? now + RETRY_DRAIN_NS : T.drained_at_ns + period;
    uint64_t until = next_drain > now && next_drain < deadline ? next_drain : deadline;
    omptpy_futex_wait(&T.seq, seen, until - now);
    atomic_store(&T.consumer_waiting, 0);
    drained = false;
  }
}

/* Ticks -> CLOCK_MONOTONIC nanoseconds (int64, in place), on the line through
 * the tool's start anchor and an anchor at most ANCHOR_EVERY_NS old. */
static void ticks_to_monotonic_ns(omptpy_record *r, size_t n) {
  if (omptpy_clock_kind_used == OMPTPY_CLOCK_MONOTONIC) return; /* ticks are those nanoseconds */
  uint64_t now = omptpy_monotonic_ns();
  if (!T.anchor_at_ns || now - T.anchor_at_ns > ANCHOR_EVERY_NS) {
    T.anchor = omptpy_clock_anchor();
    T.anchor_at_ns = now;
  }
  omptpy_anchor start = omptpy_g.start_anchor;
  double scale = omptpy_tick_scale(start, T.anchor, omptpy_g.tick_ns_estimate);
  for (size_t i = 0; i < n; i++) {
    int64_t t = omptpy_ticks_to_ns(r[i].time, start, scale);
    memcpy(&r[i].time, &t, sizeof t);
  }
}

OMPTPY_API size_t omptpy_tap_read(omptpy_record *dst, size_t max, uint64_t *position) {
  uint64_t tl = atomic_load(&T.tail);
  uint64_t h = atomic_load_explicit(&T.head, memory_order_acquire);
  size_t n = h - tl < max ? (size_t)(h - tl) : max;
  if (position) *position = tl + n;
  if (n == 0) return 0;
  uint64_t at = tl & (T.cap - 1);
  size_t first = n < T.cap - at ? n : (size_t)(T.cap - at);
  memcpy(dst, T.ring + at, first * sizeof *dst);
  memcpy(dst + first, T.ring, (n - first) * sizeof *dst);
  atomic_store_explicit(&T.tail, tl + n, memory_order_release);
  atomic_fetch_add(&T.space, 1);
  if (atomic_load(&T.producer_waiting)) omptpy_futex_wake(&T.space);
  ticks_to_monotonic_ns(dst, n);
  return n;
}

OMPTPY_API void omptpy_tap_stats(omptpy_tap_counters *c) {
  c->queued = atomic_load(&T.queued);
  c->dropped = atomic_load(&T.dropped);
  c->filtered = atomic_load(&T.filtered);
  c->position = atomic_load(&T.head);
  c->backlog = c->position - atomic_load(&T.tail);
  c->capacity = T.cap ? T.cap
                      : omptpy_g.cfg.handler_queue_bytes / sizeof(omptpy_record);
  c->active = atomic_load(&T.active);
}

/* fork: the child keeps the handlers' configuration; what was queued is the parent's. */
void omptpy_tap_after_fork_child(void) {
  pthread_mutex_init(&T.lock, NULL);
  atomic_store(&T.tail, atomic_load(&T.head));
  atomic_store(&T.consumer_waiting, 0);
  atomic_store(&T.producer_waiting, 0);
  T.drained_at_ns = 0;
}
