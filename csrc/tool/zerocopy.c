/*
 * The zero-copy memory sink.
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
 * membarrier (or with OMPTPY_ZERO_COPY=0) the memory sink copies (buffer.c).
 *
 * The file sink (OMPTPY_OUTPUT) works the same way in the file itself: a
 * region is a REGION block of the raw file (omptpy_file.h), allocated and
 * mapped shared, so threads write their records into the page cache in
 * place, with no copy while the program runs, and what a killed process
 * wrote stays in the file.  The first region is made when the first thread
 * attaches (OMPTPY_RESERVE of it made resident then, before the program's
 * work); the drainer appends the next one when the current one is seven
 * eighths leased and makes it resident a step at a time, each step only on a
 * CPU no thread of the program wants (drainer.c).  A region is the current
 * one only once it is wholly resident: a writer that finds the current one
 * full while the next is not (the program holds every CPU, or the region
 * filled before the drainer could make the next) makes it, or the rest of it,
 * resident itself (MADV_POPULATE_WRITE, ZC_PIECE at a time), with every other
 * writer that finds it so taking pieces too, and waits for the pieces still
 * being made.  Each such interval is a stall,
 * not a loss: written into the trace as a tool_stall record of the thread
 * (why, bytes, the region), first in the chunk it leases next, and counted
 * and timed in the stats; the analysis shows stalls and leaves them out of
 * the program's time.  So the writers never take the scattered page faults of
 * a region being made resident under them.  (OMPTPY_OVERFLOW=drop: a writer
 * never stalls; without a next region it drops.)  The current region moves on
 * by a compare-and-swap; older regions stay until the drainer has seen all
 * their chunks done, then are unmapped (the kernel writes the pages back).
 * Windows go into the file too (ledger.c): the loader discards what lies
 * outside them.  take() does not apply: the trace is the file.
 */
#define _GNU_SOURCE
#include <linux/membarrier.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "omptpy_internal.h"

#define ZC_PREFAULT_AHEAD ((size_t)32 << 20)
/* What one populator makes resident at a time (a few ms): writers stalled on
 * the same region share its pieces, and none waits long for another's. */
#define ZC_PIECE ((size_t)4 << 20)
/* Chunks leased while no window is open are only for handlers: past this
 * much, the drainer swaps the region for a fresh one. */
#define ZC_RECYCLE_BYTES ((size_t)64 << 20)

typedef struct zc_window {
  uint64_t from, until;
} zc_window;

typedef struct omptpy_region {
  omptpy_file_span span; /* the in-place route: the REGION block's mapping, else map NULL */
  _Atomic(struct omptpy_region *) succ; /* the in-place route: the region after this one */
  omptpy_record *base;
  size_t bytes;
  omptpy_chunk *desc;
  size_t desc_bytes;
  uint32_t cap; /* chunks */
  _Atomic uint32_t next;
  uint64_t epoch;
  uint32_t number;  /* the in-place route: the file's regions from 1 */
  /* Making base resident goes a piece at a time (ZC_PIECE): `claimed`, the
   * bytes handed out to populators, and `populated`, the bytes they have
   * made resident (the same as claimed where one thread populates: the
   * drainer under drain_lock for a current region; a file's next region is
   * shared by the drainer and every writer that stalls on it). */
  _Atomic size_t claimed;
  _Atomic size_t populated;
  uint32_t cursor;  /* chunks before it are wholly done (drain_lock) */
  zc_window *win;   /* sink windows that overlap this region's life (drain_lock) */
  size_t nwin, capwin;
} omptpy_region;

static _Atomic(omptpy_region *) R;
static uint64_t zc_epochs;
static bool zc_window_open;
static uint64_t zc_window_from;

/* The in-place file route. */
static struct {
  bool on;
  uint32_t chunks;          /* per region */
  size_t resident;          /* of the first region, made resident when it is made */
  bool drop;                /* OMPTPY_OVERFLOW=drop: a full region without a next drops */
  bool forked;              /* a forked child: its threads have slots already */
  omptpy_region *first;     /* the first region: the others follow it by succ */
  bool told;                /* a region that could not be made was reported */
  bool started;             /* the first region was tried (drain_lock) */
  int error;                /* why the last region could not be made (errno), 0 */
  _Atomic uint64_t retry_ns; /* after a failure, no new try before then (monotonic) */
  _Atomic uint64_t lost;    /* records with no region to go to for that reason */
  omptpy_region *oldest;    /* the oldest region not yet done (drain_lock) */
  pthread_mutex_t grow;     /* making the next region */
  uint32_t nregions;        /* regions made (under grow) */
  _Atomic uint64_t stalls, stall_ns; /* writers that made room themselves, or waited */
} F = {.grow = PTHREAD_MUTEX_INITIALIZER};

/* Chunks left allocated past the leased ones at a clean end: records still
 * to come (threads ending after finalize) go there, never into a hole. */
#define F_SLACK_CHUNKS 64u
/* After a region could not be made (disk full), the next try waits this long:
 * the writers that find no room go on dropping at the cost of a compare. */
#define F_RETRY_NS 1000000000u

static bool region_in_file(omptpy_region *r) {
  int rc = omptpy_sink_region_block(F.chunks, &r->span);
  if (rc != 0) {
    F.error = -rc;
    atomic_store(&F.retry_ns, omptpy_monotonic_ns() + F_RETRY_NS);
    if (F.started) { /* else omptpy_zc_file_start falls back to write() and says so */
      if (!F.told)
        fprintf(stderr, "ompt-py: cannot add %zu MiB to the trace file %s: %s; the records "
                "that do not fit are counted as lost (free space there, or set OMPTPY_OUTPUT "
                "elsewhere)\n", ((size_t)F.chunks * OMPTPY_CHUNK_BYTES) >> 20,
                omptpy_sink_path(), strerror(-rc));
      F.told = true;
      omptpy_ledger_sink_failed(-rc);
    }
    return false;
  }
  F.error = 0;
  r->desc = r->span.map;
  r->desc_bytes = r->span.desc_bytes;
  r->base = (omptpy_record *)((char *)r->span.map + r->span.desc_bytes);
  r->cap = F.chunks;
  r->bytes = (size_t)F.chunks * OMPTPY_CHUNK_BYTES;
  r->number = ++F.nregions;
  return true;
}

static bool region_in_memory(omptpy_region *r) {
  r->base = omptpy_sink_reserve(&r->bytes);
  if (!r->base) return false;
  r->cap = (uint32_t)(r->bytes / OMPTPY_CHUNK_BYTES);
  r->desc_bytes = (size_t)r->cap * sizeof(omptpy_chunk);
  void *d = mmap(NULL, r->desc_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (d == MAP_FAILED) {
    munmap(r->base, r->bytes);
    return false;
  }
  r->desc = d;
  return true;
}

static omptpy_region *region_new(void) {
  omptpy_region *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  if (!(F.on ? region_in_file(r) : region_in_memory(r))) {
    free(r);
    return NULL;
  }
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

/* Makes base resident up to `upto` bytes, a piece at a time, with any other
 * thread doing the same (each piece is made by one of them); returns the
 * bytes this one made resident.  The others' pieces may still be under way:
 * resident() says when all are done. */
static size_t region_populate(omptpy_region *r, size_t upto) {
  if (upto > r->bytes) upto = r->bytes;
  size_t made = 0;
  while (atomic_load_explicit(&r->claimed, memory_order_relaxed) < upto) {
    size_t from = atomic_fetch_add_explicit(&r->claimed, ZC_PIECE, memory_order_relaxed);
    if (from >= r->bytes) break;
    size_t n = r->bytes - from < ZC_PIECE ? r->bytes - from : ZC_PIECE;
    madvise((char *)r->base + from, n, MADV_POPULATE_WRITE);
    atomic_fetch_add_explicit(&r->populated, n, memory_order_release);
    made += n;
  }
  return made;
}

static bool resident(omptpy_region *r) {
  return atomic_load_explicit(&r->populated, memory_order_acquire) >= r->bytes;
}

/* Keeps ZC_PREFAULT_AHEAD bytes past the leased chunks populated (drainer). */
static void region_populate_ahead(omptpy_region *r) {
  uint32_t next = atomic_load_explicit(&r->next, memory_order_relaxed);
  size_t used = (size_t)(next < r->cap ? next : r->cap) * OMPTPY_CHUNK_BYTES;
  if (atomic_load_explicit(&r->populated, memory_order_relaxed) < used + ZC_PREFAULT_AHEAD / 2)
    region_populate(r, used + ZC_PREFAULT_AHEAD);
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

static bool may_grow(void) {
  return !F.error || omptpy_monotonic_ns() >= atomic_load(&F.retry_ns);
}

/* A writer's stall (file_next), written as a tool_stall record first in the
 * chunk it leases next.  why: OMPTPY_STALL_*, 0 for none. */
typedef struct zc_stall {
  uint64_t begin, end; /* ticks */
  uint64_t bytes;
  uint32_t region;
  int why;
} zc_stall;

/* The in-place route: the region after full region r, once wholly resident,
 * installed as the current one.  If the drainer has not made it resident, the
 * calling writer does (makes it first, if need be), sharing the pieces left
 * with every other writer that finds it so (a team that has stalled on it
 * makes it resident on all its CPUs at once), and waits for the pieces others
 * are making: a stall, told in *st and counted.  NULL when there is none
 * (dropped). */
static omptpy_region *file_next(omptpy_region *r, zc_stall *st) {
  omptpy_region *s = atomic_load(&r->succ);
  if (s ? !resident(s) && !F.drop : !F.drop && may_grow()) {
    uint64_t t0 = omptpy_monotonic_ns();
    st->begin = omptpy_now();
    st->bytes = 0;
    bool made = false;
    if (!s) {
      pthread_mutex_lock(&F.grow);
      s = atomic_load(&r->succ); /* another writer, or the drainer, made it meanwhile */
      if (!s && (s = region_new())) {
        atomic_store(&r->succ, s);
        made = true;
      }
      pthread_mutex_unlock(&F.grow);
    }
    if (s) {
      st->bytes = region_populate(s, s->bytes);
      /* The pieces others are making, asleep: the drainer may be making one
       * at idle priority (a process that may not raise its own), and would
       * get no CPU from a writer that yields. */
      while (!resident(s)) nanosleep(&(struct timespec){0, 20000}, NULL);
      /* region: this writer made it; populate: it made part of it resident;
       * wait: others (the drainer's last piece too) made it all */
      st->why = made ? OMPTPY_STALL_REGION : st->bytes ? OMPTPY_STALL_POPULATE
                                                       : OMPTPY_STALL_WAIT;
      st->region = s->number;
    } else {
      st->why = 0; /* no region: the records are lost, counted */
    }
    st->end = omptpy_now();
    if (st->why) { /* as many as tool_stall records */
      atomic_fetch_add_explicit(&F.stalls, 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&F.stall_ns, omptpy_monotonic_ns() - t0, memory_order_relaxed);
    }
  }
  if (s) atomic_compare_exchange_strong(&R, &r, s);
  return s;
}

/* The stall as the first record of t's new chunk. */
static void write_stall(omptpy_thread *t, zc_stall *st) {
  omptpy_record *x = &t->recs[0];
  omptpy_fill(x, t, OMPTPY_EVENT_TOOL_STALL, ompt_scope_beginend, st->why, 0, 0, 0, st->bytes,
              st->end, st->region, 0);
  x->time = st->begin;
  omptpy_commit(t);
  st->why = 0;
}

/* Lease order: slow path of a thread whose chunk is full, whose limit was
 * lowered by take(), or that has none.  No lock: an atomic bump, and a
 * re-check of the region after publishing the limit (a take() that installed
 * a new region meanwhile either sees this thread in_tool or has lowered the
 * limit after it was raised).  A stall on the way (file_next) is the first
 * record of the chunk leased after it. */
omptpy_record *omptpy_zc_slot_slow(omptpy_thread *t) {
  zc_stall st = {0};
  for (;;) {
    atomic_thread_fence(memory_order_acquire);
    omptpy_region *r = atomic_load(&R);
    if (!r && F.on && !F.started) { /* a forked child's first record */
      omptpy_zc_file_start();
      continue;
    }
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
    uint32_t i = r->cap;
    if (atomic_load_explicit(&r->next, memory_order_relaxed) < r->cap)
      i = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
    if (i >= r->cap) {
      if (F.on && file_next(r, &st)) continue;
      break;
    }
    omptpy_chunk *c = &r->desc[i];
    c->recs = r->base + (size_t)i * OMPTPY_CHUNK_RECORDS;
    c->region = r;
    c->taken = 0;
    c->retired = false;
    atomic_store_explicit(&c->closed, false, memory_order_relaxed);
    atomic_store_explicit(&c->n, 0, memory_order_relaxed);
    c->thread = t->index + 1;
    atomic_store_explicit(&c->owner, t, memory_order_release);
    t->cur = c;
    t->cur_epoch = r->epoch;
    t->recs = c->recs;
    t->pos = 0;
    atomic_store_explicit(&t->cur_pub, c, memory_order_release);
    atomic_store(&t->limit, OMPTPY_CHUNK_RECORDS);
    if (atomic_load(&R) != r) continue; /* leased from a region take() retired: leave it */
    if ((size_t)(i + 1) * OMPTPY_CHUNK_BYTES + ZC_PREFAULT_AHEAD / 2 >
        atomic_load_explicit(&r->populated, memory_order_relaxed))
      omptpy_drainer_wake();
    if (st.why) write_stall(t, &st);
    return &t->recs[t->pos];
  }
  /* No region, or it is full: drop and count (the in-place route's loss when
   * the file could not grow). */
  t->cur = NULL;
  t->pos = 0;
  atomic_store(&t->limit, 0);
  if (F.on && F.error && !F.drop) omptpy_count_sink_lost(t);
  else omptpy_count_dropped(t);
  return NULL;
}

void omptpy_zc_file_lost_add(uint64_t n) {
  atomic_fetch_add_explicit(&F.lost, n, memory_order_relaxed);
}

uint64_t omptpy_zc_file_lost(void) { return atomic_load_explicit(&F.lost, memory_order_relaxed); }

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
  omptpy_buf.drain_stalled = true;
  return false;
}

/* Walks r's chunks in lease order from the cursor: full ones (and, if
 * partial, the ones being filled) go to the tap and are counted.  Stops at a
 * chunk the tap could not take whole, so each thread's records reach the tap
 * in order.  Returns the number of chunks finished. */
static uint32_t drain_region(omptpy_region *r, bool partial) {
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
    /* closed first: once it is seen, the count read after it is final */
    bool closed = atomic_load_explicit(&c->closed, memory_order_acquire);
    uint32_t n = atomic_load_explicit(&c->n, memory_order_acquire);
    bool full = n == OMPTPY_CHUNK_RECORDS || closed;
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

/* The in-place route's pass: the regions from the oldest not yet done to the
 * current one, in order (a thread's chunks in an older region come first);
 * an older region whose chunks are all done is unmapped. */
static uint32_t file_drain(bool partial) {
  omptpy_region *cur = atomic_load(&R);
  if (!F.oldest) F.oldest = cur;
  uint32_t nfull = 0;
  for (omptpy_region *r = F.oldest; r; r = atomic_load(&r->succ)) {
    nfull += drain_region(r, partial);
    if (omptpy_buf.drain_stalled || r == cur) break;
    if (r == F.oldest && r->cursor >= r->cap) {
      /* Its records are the file's: the mapping goes, the description stays
       * (a writer that read R just before it moved on may still look at it). */
      F.oldest = atomic_load(&r->succ);
      munmap(r->span.map, r->span.map_bytes);
      r->span.map = NULL;
    }
  }
  return nfull;
}

/* An ended thread's chunks in the current region are finished: drained whole
 * (partial), and skipped by the cursor from then on. */
void omptpy_zc_retire(omptpy_thread *t) {
  omptpy_region *r = atomic_load(&R);
  if (!r) return;
  if (F.on) file_drain(true);
  else drain_region(r, true);
  if (omptpy_buf.drain_stalled) return;
  /* Never written again: the cursor may pass it once drained.  A full chunk
   * needs no mark (in the in-place route its region may be gone already);
   * one that is not full is in the current region, or in an older one of
   * the file that waits for it. */
  if (t->cur && t->pos < OMPTPY_CHUNK_RECORDS && (t->cur_epoch == r->epoch || F.on))
    t->cur->retired = true;
  t->cur = NULL;
  /* Nothing reads its chunk any more (the ledger's entry of an in-place
   * thread needs no count: every record is in the file). */
  atomic_store(&t->cur_pub, NULL);
}

/* Stops every writer from using region `old` (installed as R) and installs a
 * new one.  Under drain_lock.  Returns false (old left in place) when no new
 * region could be made. */
static bool zc_quiesce(void) {
  omptpy_region *nw = region_new();
  if (!nw) return false;
  pthread_mutex_lock(&omptpy_buf.lock); /* no thread attaches meanwhile */
  atomic_store(&R, nw);
  for (omptpy_thread *t = atomic_load(&omptpy_buf.all); t; t = t->all_next)
    if (atomic_load(&t->state) != OMPTPY_THREAD_FREE) atomic_store(&t->limit, 0);
  syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  for (omptpy_thread *t = atomic_load(&omptpy_buf.all); t; t = t->all_next)
    while (atomic_load_explicit(&t->state, memory_order_acquire) != OMPTPY_THREAD_FREE &&
           atomic_load_explicit(&t->in_tool, memory_order_acquire))
      sched_yield();
  pthread_mutex_unlock(&omptpy_buf.lock);
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
  omptpy_buf.drain_stalled = false;
  drain_region(old, true);
  /* Chunks the tap could not take (a blocking handlers' queue that is full)
   * stay in the trace; the handlers miss them. */
  if (omptpy_buf.drain_stalled) {
    uint32_t next = atomic_load(&old->next);
    for (uint32_t i = 0; i < next && i < old->cap; i++) {
      omptpy_chunk *c = &old->desc[i];
      uint32_t n = atomic_load(&c->n);
      if (c->owner && c->taken < n) {
        c->owner->drained += count_kept(old, c->recs + c->taken, n - c->taken);
        c->taken = n;
      }
    }
    omptpy_buf.drain_stalled = false;
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
  if (F.on) return (omptpy_block){0}; /* the trace is the file */
  pthread_mutex_lock(&omptpy_buf.drain_lock);
  omptpy_block b = zc_take_locked(true);
  omptpy_region *r = atomic_load(&R);
  if (r && b.base) region_populate(r, (size_t)1 << 20);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
  return b;
}

bool omptpy_zero_copy(void) { return omptpy_buf.zc; }

/* OMPTPY_RESERVE: populate that much of the region before a window. */
void omptpy_zc_prepare(size_t bytes) {
  if (!omptpy_buf.zc) return;
  pthread_mutex_lock(&omptpy_buf.drain_lock);
  omptpy_region *r = atomic_load(&R);
  if (r) region_populate(r, bytes);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
}

/* A drainer pass over the current region (under drain_lock). */
uint32_t omptpy_zc_drain(bool partial) {
  omptpy_buf.drain_stalled = false;
  if (F.on) return file_drain(partial);
  omptpy_region *r = atomic_load(&R);
  if (!r) return 0;
  uint32_t nfull = drain_region(r, partial);
  /* Chunks written only for handlers (no window since the region was
   * installed) are let go once they add up. */
  if (r->nwin == 0 && !zc_window_open &&
      (size_t)atomic_load(&r->next) * OMPTPY_CHUNK_BYTES > ZC_RECYCLE_BYTES &&
      !omptpy_buf.drain_stalled)
    zc_take_locked(false);
  return nfull;
}

/* In the file, the next region is due once seven eighths of the current one
 * are leased. */
static bool next_due(omptpy_region *r) {
  return r && F.on && atomic_load(&r->next) >= r->cap / 8 * 7;
}

/* Page faults off the writers' path: populate ahead of the leases (drainer).
 * In the file, the next region is made once seven eighths of the current one
 * are leased: late enough that a trace which fits its reserve never pays for
 * one while the program runs, early enough (an eighth of a region: 8 MiB at
 * the least) that a drainer with a CPU has it ready in time.  It is made
 * resident ZC_PREFAULT_AHEAD at a call (not under drain_lock: a flush need
 * not wait for it), in pieces that writers stalled on it share.  Returns
 * whether the next region has pieces left to make resident. */
bool omptpy_zc_populate_ahead(void) {
  pthread_mutex_lock(&omptpy_buf.drain_lock);
  omptpy_region *r = atomic_load(&R);
  if (r) region_populate_ahead(r);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
  if (!next_due(r)) return false;
  pthread_mutex_lock(&F.grow);
  omptpy_region *s = atomic_load(&r->succ);
  if (!s && may_grow() && (s = region_new())) atomic_store(&r->succ, s);
  pthread_mutex_unlock(&F.grow);
  if (!s) return false;
  region_populate(s, atomic_load(&s->claimed) + ZC_PREFAULT_AHEAD);
  return atomic_load(&s->claimed) < s->bytes;
}

bool omptpy_zc_next_wanted(void) {
  omptpy_region *r = atomic_load(&R);
  if (!next_due(r)) return false;
  omptpy_region *s = atomic_load(&r->succ);
  return s ? !resident(s) : may_grow();
}

/* The in-place route's first region, when a thread attaches (buffer.c) and
 * there is none yet: made and OMPTPY_RESERVE of it made resident before the
 * thread records. */
void omptpy_zc_file_start(void) {
  if (!F.on || atomic_load(&R)) return;
  pthread_mutex_lock(&omptpy_buf.drain_lock);
  pthread_mutex_lock(&F.grow);
  if (!F.started) {
    omptpy_region *r = region_new();
    F.started = true;
    if (r) {
      region_populate(r, F.resident ? F.resident : ZC_PREFAULT_AHEAD);
      omptpy_ledger_in_place(zc_window_open, zc_window_from);
      F.first = r;
      atomic_store(&R, r);
    } else if (!F.forked) {
      /* No thread has a slot yet: the file is written with write() instead,
       * from per-thread buffers (buffer.c), as far as it can be. */
      fprintf(stderr, "ompt-py: cannot write the trace in place in the file in %s (%s); "
              "writing it with write() instead\n", omptpy_sink_path()[0] ? omptpy_sink_path()
              : "OMPTPY_OUTPUT", strerror(F.error));
      F.on = false;
      omptpy_buf.zc = false;
    }
  }
  pthread_mutex_unlock(&F.grow);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
}

/* The in-place route at a clean end: the current region's chunks beyond the
 * leased ones (and a slack for records still to come) and an unused next
 * region give their blocks back. */
void omptpy_zc_file_finish(void) {
  if (!F.on) return;
  pthread_mutex_lock(&omptpy_buf.drain_lock);
  pthread_mutex_lock(&F.grow);
  omptpy_region *r = atomic_load(&R);
  if (r) {
    uint64_t next = atomic_load(&r->next) + F_SLACK_CHUNKS;
    if (next < r->cap)
      omptpy_sink_release(r->span.data_at + next * OMPTPY_CHUNK_BYTES,
                          (r->cap - next) * OMPTPY_CHUNK_BYTES);
    omptpy_region *s = atomic_load(&r->succ);
    if (s && atomic_load(&s->next) == 0)
      omptpy_sink_release(s->span.data_at, (uint64_t)s->cap * OMPTPY_CHUNK_BYTES);
  }
  pthread_mutex_unlock(&F.grow);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
}

void omptpy_zc_file_stats(uint64_t *stalls, uint64_t *stall_ns) {
  *stalls = atomic_load(&F.stalls);
  *stall_ns = atomic_load(&F.stall_ns);
}

void omptpy_zc_set_window(bool open, uint64_t now) {
  omptpy_region *r = atomic_load(&R);
  zc_window_open = open;
  if (open) zc_window_from = now;
  if (F.on) omptpy_ledger_window(open, now);
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

bool omptpy_zc_init(const omptpy_config *cfg) {
  if (!cfg->zero_copy) return false;
  if (cfg->output[0] != '\0') {
    /* Profile mode writes no records: the file gets its profile at the end. */
    if (cfg->profile) return false;
    /* The file: regions come with the first thread (omptpy_zc_file_start). */
    size_t bytes = cfg->file_region_bytes;
    F.on = true;
    F.chunks = (uint32_t)(bytes / OMPTPY_CHUNK_BYTES);
    F.resident = cfg->reserve_bytes < bytes ? cfg->reserve_bytes : bytes;
    F.drop = cfg->overflow == OMPTPY_OVERFLOW_DROP;
    return true;
  }
  /* In memory only if take() can quiesce the writers (membarrier). */
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0) return false;
  omptpy_region *r = region_new();
  if (r) atomic_store(&R, r);
  return r != NULL;
}

/* fork: the parent's regions are the parent's (in the file: mapped shared, so
 * the child must not write there); the child starts an empty one, in its own
 * file when its first thread attaches. */
void omptpy_zc_after_fork_child(void) {
  pthread_mutex_init(&F.grow, NULL);
  omptpy_region *old = atomic_load(&R);
  atomic_store(&R, NULL);
  if (F.on) {
    for (omptpy_region *r = F.first, *next; r; r = next) {
      next = atomic_load(&r->succ);
      if (r->span.map) munmap(r->span.map, r->span.map_bytes);
      free(r->win);
      free(r);
    }
    F.first = F.oldest = NULL;
    F.started = false;
    F.forked = true;
    F.error = 0;
    atomic_store(&F.lost, 0);
    atomic_store(&F.stalls, 0);
    atomic_store(&F.stall_ns, 0);
    return;
  }
  if (old) {
    munmap(old->base, old->bytes);
    region_free_meta(old);
  }
  omptpy_region *r = region_new();
  atomic_store(&R, r);
}
