/*
 * Profile mode (OMPTPY_PROFILE=on): per-thread aggregates instead of records,
 * for runs too long to trace (what Score-P and HPCToolkit do by default).
 *
 * Each thread slot owns one fixed open-addressing table of rows (the layout
 * and what each table holds: omptpy_file.h), mapped when the slot's first
 * thread attaches: only the owning thread writes it, no lock, no allocation
 * afterwards; a key that finds the table full is not made and counted as the
 * slot's overflow.  The handlers here replace the recording ones of the
 * events they aggregate (callbacks.c registers them); they keep what is begun
 * and not yet ended in small fixed per-thread stacks (regions, scopes, running
 * contexts, held locks), whose overflow is counted too.  Times are clock ticks
 * (converted with the file's anchors on load); the histograms' buckets are
 * nanoseconds from the start's tick estimate, a multiply per update.
 *
 * Rows are read at the end (finalize, exit, omptpy_finish, the hook's
 * endings; in memory when Python asks) while their threads may still run:
 * a row read then may be a few updates behind, never torn in its key.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "omptpy_internal.h"

bool omptpy_profiling;
static uint32_t entries; /* rows a slot may make */
static uint32_t mask;    /* the table's capacity - 1: a power of two, at least twice entries */
static uint64_t tick_ns32; /* the start's tick estimate in ns, times 2^32: histogram buckets */
static _Atomic uint64_t unmapped;

/* Per-thread nesting kept: running contexts, scopes, regions, held locks.  A
 * recursive task program (fib, n-queens, a sort without a cut-off) suspends a
 * task and its taskwait per level on the thread that runs its children. */
#define DEPTH 512

enum { WAIT_NONE = 0, WAIT_BARRIER = 1, WAIT_SYNC = 2, WAIT_LOCK = 3 };

/* A running context of the thread: an implicit task (of a region or the
 * initial one) or an explicit task, innermost last.  Waits (barrier, taskwait)
 * belong to the context that waits and count only while it is the one running
 * (as the trace's thread states count them). */
typedef struct ctx {
  const ompt_data_t *task;
  const ompt_data_t *parallel; /* implicit: its region's data, the key of the region's end */
  uint64_t codeptr;            /* implicit: the region's; explicit: the creation site */
  uint64_t begin;              /* implicit: its begin; explicit: this piece's begin */
  uint64_t acc;                /* explicit: the time of its earlier pieces */
  uint64_t wait_begin;
  uint64_t waits[3];           /* implicit: barrier, sync, lock waits inside it */
  uint8_t wait;                /* WAIT_*: the open wait of this context */
  bool implicit, initial;
} ctx;

typedef struct scope { /* a work, sync or masked construct begun */
  uint64_t codeptr, begin;
  uint16_t event;
  uint8_t kind;
} scope;

typedef struct region { /* a parallel region this thread began */
  const ompt_data_t *encountering, *parallel;
  uint64_t codeptr, begin;
  uint8_t kind;
} region;

typedef struct held { /* a lock acquired, or being waited for (acquired == 0) */
  uint64_t wait_id, codeptr, begin, acquired;
  uint8_t kind;
} held;

/* The rows a thread used last, direct-mapped by key: a construct, a task
 * site or a lock met again is found without probing the table (rows never
 * move; the cache is emptied when the slot's next thread starts, whose index
 * the rows' keys hold).  Instructions of the handlers (callgrind): 265
 * instead of 366 per task, 1,450 instead of 1,830 per region of 2 threads. */
#define ROW_CACHE 16 /* indexed by a hash's top four bits */
typedef struct cached_row {
  uint64_t codeptr, wait_id;
  uint32_t what; /* table, event and kind, packed; 0: empty */
  omptpy_profile_row *row;
} cached_row;

typedef struct omptpy_profile {
  uint32_t slot, used;
  uint32_t stamp_for; /* STAMP(kind, endpoint) of the callback that may take stamp; 0: none */
  uint64_t stamp;
  cached_row cache[ROW_CACHE];
  _Atomic uint64_t overflow;
  uint32_t nctx, nscope, nregion, nheld;
  uint32_t implicit; /* 1 + the index of the innermost implicit context; 0: none */
  ctx ctx[DEPTH];
  scope scope[DEPTH];
  region region[DEPTH];
  held held[DEPTH];
  struct omptpy_profile *next; /* every slot's tables, push-only */
  omptpy_profile_row *rows;    /* mask + 1 */
} omptpy_profile;

static _Atomic(omptpy_profile *) all;
static _Atomic uint32_t nslots;

/* ---- the end of a region, for the late ends of its workers ------------------------------
 * The thread that began a region publishes when it ended, keyed by the
 * region's ompt_data_t (libomp reuses teams: a stale entry is older than the
 * worker's implicit task and is ignored). */
#define ENDS 256
static struct {
  _Atomic(const void *) key;
  _Atomic uint64_t end;
} ends[ENDS];

static inline uint32_t ptr_hash(const void *p) {
  return (uint32_t)(((uintptr_t)p >> 6) * 0x9E3779B1u) >> 24; /* 8 bits: ENDS */
}

static void publish_end(const void *parallel, uint64_t end) {
  uint32_t h = ptr_hash(parallel);
  atomic_store_explicit(&ends[h].key, NULL, memory_order_relaxed);
  atomic_store_explicit(&ends[h].end, end, memory_order_release);
  atomic_store_explicit(&ends[h].key, parallel, memory_order_release);
}

/* The time to end something of the innermost implicit task at: now, or its
 * region's end if that is published (after the task's begin) and earlier. */
static uint64_t end_at(const omptpy_profile *p, uint64_t now) {
  if (!p->implicit) return now;
  const ctx *c = &p->ctx[p->implicit - 1];
  if (c->initial || !c->parallel) return now;
  uint32_t h = ptr_hash(c->parallel);
  if (atomic_load_explicit(&ends[h].key, memory_order_acquire) != c->parallel) return now;
  uint64_t end = atomic_load_explicit(&ends[h].end, memory_order_acquire);
  if (atomic_load_explicit(&ends[h].key, memory_order_acquire) != c->parallel) return now;
  return end >= c->begin && end < now ? end : now;
}

/* ---- the table ----------------------------------------------------------------------------- */

static inline uint32_t bucket(uint64_t ticks) {
  uint64_t ns = (uint64_t)((unsigned __int128)ticks * tick_ns32 >> 32);
  return ns ? (uint32_t)(64 - __builtin_clzll(ns)) & (OMPTPY_PROFILE_BUCKETS - 1) : 0;
}

/* The row of a key in the table, made if new; NULL (counted) when the table is full. */
static omptpy_profile_row *probe(omptpy_profile *p, uint32_t thread, int table, int event, int kind,
                               uint64_t codeptr, uint64_t wait_id) {
  uint64_t h = (codeptr ^ wait_id * 0x9E3779B97F4A7C15u ^ (uint64_t)event << 48 ^
                (uint64_t)kind << 56 ^ (uint64_t)table << 40 ^ thread) * 0xFF51AFD7ED558CCDu;
  for (uint32_t i = (uint32_t)(h >> 32) & mask;; i = (i + 1) & mask) {
    omptpy_profile_row *r = &p->rows[i];
    if (r->table == 0) {
      if (p->used == entries) {
        atomic_fetch_add_explicit(&p->overflow, 1, memory_order_relaxed);
        return NULL;
      }
      p->used++;
      r->codeptr = codeptr;
      r->wait_id = wait_id;
      r->thread = thread;
      r->event = (uint16_t)event;
      r->kind = (uint8_t)kind;
      r->min = UINT64_MAX;
      atomic_store_explicit((_Atomic uint8_t *)&r->table, (uint8_t)table, memory_order_release);
      return r;
    }
    if (r->codeptr == codeptr && r->wait_id == wait_id && r->thread == thread &&
        r->event == event && r->kind == kind && r->table == table)
      return r;
  }
}

/* The row of a key, from the thread's cache or the table. */
static inline omptpy_profile_row *row(omptpy_profile *p, uint32_t thread, int table, int event,
                                      int kind, uint64_t codeptr, uint64_t wait_id) {
  uint32_t what = (uint32_t)table << 24 | (uint32_t)event << 8 | (uint32_t)kind;
  uint64_t h = (codeptr ^ wait_id ^ what) * 0x9E3779B97F4A7C15u;
  cached_row *e = &p->cache[h >> 60];
  if (OMPTPY_LIKELY(e->what == what && e->codeptr == codeptr && e->wait_id == wait_id))
    return e->row;
  omptpy_profile_row *r = probe(p, thread, table, event, kind, codeptr, wait_id);
  if (r) *e = (cached_row){codeptr, wait_id, what, r};
  return r;
}

/* A duration into total, min, max and the histogram. */
static inline void add_time(omptpy_profile_row *r, uint64_t d) {
  r->total += d;
  if (d < r->min) r->min = d;
  if (d > r->max) r->max = d;
  r->hist[bucket(d)]++;
}

static inline void add(omptpy_profile_row *r, uint64_t d) {
  r->count++;
  add_time(r, d);
}

static void construct(omptpy_thread *t, int event, int kind, uint64_t codeptr, uint64_t d) {
  omptpy_profile_row *r = row(t->prof, t->index, OMPTPY_PROFILE_CONSTRUCT, event, kind, codeptr, 0);
  if (r) add(r, d);
}

static inline void lost(omptpy_profile *p) {
  atomic_fetch_add_explicit(&p->overflow, 1, memory_order_relaxed);
}

/* The innermost implicit task's context, NULL outside every one. */
static inline ctx *implicit_ctx(omptpy_profile *p) {
  return p->implicit ? &p->ctx[p->implicit - 1] : NULL;
}

/* The contexts from n up are given up (ended, or gone to another thread). */
static void ctx_truncate(omptpy_profile *p, uint32_t n) {
  p->nctx = n;
  if (p->implicit <= n) return;
  while (n > 0 && !p->ctx[n - 1].implicit) n--;
  p->implicit = n;
}

static void add_wait(omptpy_profile *p, int kind, uint64_t d) {
  ctx *c = implicit_ctx(p);
  if (c) c->waits[kind - 1] += d;
}

/* The running context stops (a task switch): its open wait's piece counted. */
static void pause_ctx(omptpy_profile *p, ctx *c, uint64_t now) {
  if (c->wait && now > c->wait_begin) add_wait(p, c->wait, now - c->wait_begin);
  if (!c->implicit) c->acc += now - c->begin;
}

static void resume_ctx(ctx *c, uint64_t now) {
  c->wait_begin = now;
  if (!c->implicit) c->begin = now;
}

#define PGUARD_KEEP_STAMP()                       \
  if (!omptpy_recording()) return;                \
  omptpy_thread *t = omptpy_self();               \
  if (OMPTPY_UNLIKELY(!t || !t->prof)) return;    \
  omptpy_profile *p = t->prof

#define PGUARD()       \
  PGUARD_KEEP_STAMP(); \
  p->stamp_for = 0

/* One clock read for two callbacks that libomp makes one right after the
 * other, with nothing of the program's between them: a sync region's begin
 * and its wait's begin, its wait's end and its end (kmp_barrier.cpp,
 * kmp_tasking.cpp).  The first leaves its time for the second, which takes it
 * only if no other callback came on the thread in between (every handler but
 * these two forgets it).  In traces of the test programs and the kernels of
 * bench/apps.py the two came 20 ns apart (the median: one recording handler's
 * time), and the second always came next.  A clock read costs 12 ns on the
 * development VM: an empty taskwait in profile mode took 79 ns with four, 57
 * with two (the noop tool: 18). */
#define STAMP(kind, endpoint) (1u + (uint32_t)(kind) * 4u + (uint32_t)(endpoint))

static inline uint32_t take_stamp_for(omptpy_profile *p) {
  uint32_t stamp_for = p->stamp_for;
  p->stamp_for = 0;
  return stamp_for;
}

static inline uint64_t stamp_or_now(omptpy_profile *p, uint32_t stamp_for, uint32_t tag) {
  return stamp_for == tag ? p->stamp : omptpy_now();
}

static inline void leave_stamp(omptpy_profile *p, uint32_t tag, uint64_t now) {
  p->stamp = now;
  p->stamp_for = tag;
}

/* ---- handlers ------------------------------------------------------------------------------- */

/* In profile mode the region's data holds its codeptr (no ids are made): its
 * workers' implicit tasks read it. */
static void on_parallel_begin(ompt_data_t *encountering_task, const ompt_frame_t *frame,
                              ompt_data_t *parallel_data, unsigned int requested, int flags,
                              const void *codeptr) {
  (void)frame, (void)requested;
  PGUARD();
  if (parallel_data) parallel_data->value = (uint64_t)(uintptr_t)codeptr;
  if (p->nregion == DEPTH) {
    lost(p);
    return;
  }
  p->region[p->nregion++] = (region){encountering_task, parallel_data, (uint64_t)(uintptr_t)codeptr,
                                     omptpy_now(), (flags & ompt_parallel_league) != 0};
}

/* parallel_data is not read (libomp 19 gave the team back already): the region
 * is the innermost one begun by this encountering task. */
static void on_parallel_end(ompt_data_t *parallel_data, ompt_data_t *encountering_task, int flags,
                            const void *codeptr) {
  (void)parallel_data, (void)flags, (void)codeptr;
  PGUARD();
  uint64_t now = omptpy_now();
  for (uint32_t i = p->nregion; i-- > 0;)
    if (p->region[i].encountering == encountering_task) {
      region *r = &p->region[i];
      if (r->parallel) publish_end(r->parallel, now);
      construct(t, ompt_callback_parallel_begin, r->kind, r->codeptr, now - r->begin);
      p->nregion = i;
      return;
    }
}

static void on_implicit_task(ompt_scope_endpoint_t endpoint, ompt_data_t *parallel_data,
                             ompt_data_t *task_data, unsigned int actual, unsigned int index,
                             int flags) {
  (void)actual, (void)index;
  PGUARD();
  if (endpoint == ompt_scope_begin) {
    if (p->nctx == DEPTH) {
      lost(p);
      return;
    }
    bool initial = (flags & ompt_task_initial) != 0;
    p->implicit = p->nctx + 1;
    p->ctx[p->nctx++] = (ctx){.task = task_data, .parallel = initial ? NULL : parallel_data,
                              .codeptr = !initial && parallel_data ? parallel_data->value : 0,
                              .begin = omptpy_now(), .implicit = true, .initial = initial};
    return;
  }
  /* A worker's late end passes libomp's copy of the task data: the innermost
   * implicit task of a region then. */
  uint32_t i = p->nctx;
  while (i > 0 && !(p->ctx[i - 1].implicit && p->ctx[i - 1].task == task_data)) i--;
  if (i == 0) {
    i = p->nctx;
    while (i > 0 && !(p->ctx[i - 1].implicit && !p->ctx[i - 1].initial)) i--;
  }
  if (i-- > 0) {
    ctx_truncate(p, i + 1);
    uint64_t end = end_at(p, omptpy_now());
    ctx *c = &p->ctx[i];
    if (c->wait && end > c->wait_begin) c->waits[c->wait - 1] += end - c->wait_begin;
    uint64_t d = end > c->begin ? end - c->begin : 0;
    construct(t, ompt_callback_implicit_task, c->initial, c->codeptr, d);
    if (!c->initial) {
      omptpy_profile_row *r =
          row(p, t->index, OMPTPY_PROFILE_REGION, ompt_callback_parallel_begin, 0, c->codeptr, 0);
      if (r) {
        r->count++;
        r->total += d;
        r->a += c->waits[0];
        r->b += c->waits[1];
        r->c += c->waits[2];
      }
    }
    ctx_truncate(p, i);
  }
}

/* Explicit tasks carry their creation site in their data (the top bit marks
 * them: user-space addresses are below 2^47), and a mark once they have run
 * (a task that starts is pushed without looking for it among the contexts). */
#define EXPLICIT_BIT ((uint64_t)1 << 63)
#define STARTED_BIT ((uint64_t)1 << 62)

static void on_task_create(ompt_data_t *encountering_task, const ompt_frame_t *frame,
                           ompt_data_t *new_task, int flags, int has_dependences,
                           const void *codeptr) {
  (void)encountering_task, (void)frame, (void)flags, (void)has_dependences;
  PGUARD();
  uint64_t site = (uint64_t)(uintptr_t)codeptr;
  if (new_task) new_task->value = site | EXPLICIT_BIT;
  omptpy_profile_row *r = row(p, t->index, OMPTPY_PROFILE_TASK, ompt_callback_task_create, 0, site, 0);
  if (r) r->count++;
}

static void on_task_schedule(ompt_data_t *prior, ompt_task_status_t status, ompt_data_t *next) {
  PGUARD();
  uint64_t now = omptpy_now();
  uint32_t i = p->nctx;
  while (i > 0 && p->ctx[i - 1].task != prior) i--;
  if (i > 0) {
    ctx *c = &p->ctx[i - 1];
    pause_ctx(p, c, now);
    if (status != ompt_task_yield && status != ompt_task_switch && !c->implicit) {
      omptpy_profile_row *r = row(p, t->index, OMPTPY_PROFILE_TASK, ompt_callback_task_create, 0,
                                  c->codeptr, 0);
      if (r) { /* count is of the tasks created here, a of those run */
        add_time(r, c->acc);
        r->a++;
      }
      ctx_truncate(p, i - 1);
    }
  }
  if (!next) return;
  uint64_t value = next->value;
  if ((value & (EXPLICIT_BIT | STARTED_BIT)) != EXPLICIT_BIT) /* resumed: find it */
    for (uint32_t j = p->nctx; j-- > 0;)
      if (p->ctx[j].task == next) {
        ctx_truncate(p, j + 1); /* contexts above it (untied tasks gone elsewhere) are given up */
        resume_ctx(&p->ctx[j], now);
        return;
      }
  if (value & EXPLICIT_BIT) {
    if (p->nctx == DEPTH) {
      lost(p);
      return;
    }
    next->value = value | STARTED_BIT;
    p->ctx[p->nctx++] =
        (ctx){.task = next, .codeptr = value & ~(EXPLICIT_BIT | STARTED_BIT), .begin = now};
  }
}

static void scope_begin(omptpy_profile *p, int event, int kind, uint64_t codeptr, uint64_t now) {
  if (p->nscope == DEPTH) {
    lost(p);
    return;
  }
  p->scope[p->nscope++] = (scope){codeptr, now, (uint16_t)event, (uint8_t)kind};
}

static void scope_end(omptpy_thread *t, omptpy_profile *p, int event, int kind, uint64_t now) {
  for (uint32_t i = p->nscope; i-- > 0;)
    if (p->scope[i].event == event && p->scope[i].kind == kind) {
      scope *s = &p->scope[i];
      uint64_t end = end_at(p, now);
      uint64_t codeptr = s->codeptr;
      if (!codeptr) { /* a worker's implicit barrier: the region's */
        ctx *c = implicit_ctx(p);
        codeptr = c ? c->codeptr : 0;
      }
      construct(t, event, kind, codeptr, end > s->begin ? end - s->begin : 0);
      p->nscope = i;
      return;
    }
}

static void on_work(ompt_work_t type, ompt_scope_endpoint_t endpoint, ompt_data_t *parallel_data,
                    ompt_data_t *task_data, uint64_t count, const void *codeptr) {
  (void)parallel_data, (void)task_data, (void)count;
  PGUARD();
  if (endpoint == ompt_scope_begin)
    scope_begin(p, ompt_callback_work, type, (uint64_t)(uintptr_t)codeptr, omptpy_now());
  else
    scope_end(t, p, ompt_callback_work, type, omptpy_now());
}

static void on_masked(ompt_scope_endpoint_t endpoint, ompt_data_t *parallel_data,
                      ompt_data_t *task_data, const void *codeptr) {
  (void)parallel_data, (void)task_data;
  PGUARD();
  if (endpoint == ompt_scope_begin)
    scope_begin(p, ompt_callback_masked, 0, (uint64_t)(uintptr_t)codeptr, omptpy_now());
  else
    scope_end(t, p, ompt_callback_masked, 0, omptpy_now());
}

static void on_sync_region(ompt_sync_region_t kind, ompt_scope_endpoint_t endpoint,
                           ompt_data_t *parallel_data, ompt_data_t *task_data,
                           const void *codeptr) {
  (void)parallel_data, (void)task_data;
  PGUARD_KEEP_STAMP();
  uint32_t stamp_for = take_stamp_for(p);
  if (endpoint == ompt_scope_begin) {
    uint64_t now = omptpy_now();
    scope_begin(p, ompt_callback_sync_region, kind, (uint64_t)(uintptr_t)codeptr, now);
    leave_stamp(p, STAMP(kind, ompt_scope_begin), now);
  } else {
    scope_end(t, p, ompt_callback_sync_region, kind,
              stamp_or_now(p, stamp_for, STAMP(kind, ompt_scope_end)));
  }
}

/* Barrier kinds wait as barriers; taskwait, taskgroup and reduction as sync
 * (ompt_py.analysis.states). */
static inline int wait_class(int kind) {
  return kind == ompt_sync_region_taskwait || kind == ompt_sync_region_taskgroup ||
                 kind == ompt_sync_region_reduction
             ? WAIT_SYNC
             : WAIT_BARRIER;
}

static void on_sync_region_wait(ompt_sync_region_t kind, ompt_scope_endpoint_t endpoint,
                                ompt_data_t *parallel_data, ompt_data_t *task_data,
                                const void *codeptr) {
  (void)parallel_data, (void)task_data, (void)codeptr;
  PGUARD_KEEP_STAMP();
  uint32_t stamp_for = take_stamp_for(p);
  if (!p->nctx) return;
  ctx *c = &p->ctx[p->nctx - 1];
  if (endpoint == ompt_scope_begin) {
    c->wait = (uint8_t)wait_class(kind);
    c->wait_begin = stamp_or_now(p, stamp_for, STAMP(kind, ompt_scope_begin));
  } else if (c->wait) {
    uint64_t now = omptpy_now(), end = end_at(p, now);
    if (end > c->wait_begin) add_wait(p, c->wait, end - c->wait_begin);
    c->wait = WAIT_NONE;
    leave_stamp(p, STAMP(kind, ompt_scope_end), now);
  }
}

static void on_mutex_acquire(ompt_mutex_t kind, unsigned int hint, unsigned int impl,
                             ompt_wait_id_t wait_id, const void *codeptr) {
  (void)hint, (void)impl;
  PGUARD();
  if (p->nheld == DEPTH) {
    lost(p);
    return;
  }
  p->held[p->nheld++] =
      (held){wait_id, (uint64_t)(uintptr_t)codeptr, omptpy_now(), 0, (uint8_t)kind};
}

static held *find_held(omptpy_profile *p, ompt_wait_id_t wait_id, bool acquired) {
  for (uint32_t i = p->nheld; i-- > 0;)
    if (p->held[i].wait_id == wait_id && (p->held[i].acquired != 0) == acquired) return &p->held[i];
  return NULL;
}

static void on_mutex_acquired(ompt_mutex_t kind, ompt_wait_id_t wait_id, const void *codeptr) {
  (void)codeptr;
  PGUARD();
  held *h = find_held(p, wait_id, false);
  if (!h) return;
  uint64_t now = omptpy_now(), d = now - h->begin;
  h->acquired = now;
  construct(t, ompt_callback_mutex_acquire, kind, h->codeptr, d);
  add_wait(p, WAIT_LOCK, d);
  omptpy_profile_row *r =
      row(p, t->index, OMPTPY_PROFILE_LOCK, ompt_callback_mutex_acquire, kind, h->codeptr, wait_id);
  if (r) add(r, d);
}

static void on_mutex_released(ompt_mutex_t kind, ompt_wait_id_t wait_id, const void *codeptr) {
  (void)codeptr;
  PGUARD();
  held *h = find_held(p, wait_id, true);
  if (!h) return;
  uint64_t d = omptpy_now() - h->acquired;
  construct(t, ompt_callback_mutex_acquired, kind, h->codeptr, d);
  omptpy_profile_row *r =
      row(p, t->index, OMPTPY_PROFILE_LOCK, ompt_callback_mutex_acquire, kind, h->codeptr, wait_id);
  if (r) {
    r->a += d;
    if (d > r->b) r->b = d;
  }
  *h = p->held[--p->nheld];
}

/* ---- setup and output ----------------------------------------------------------------------- */

static const struct {
  int event;
  ompt_callback_t fn;
} HANDLERS[] = {
#define H(ev, fn) {ompt_callback_##ev, (ompt_callback_t)(fn)}
    H(parallel_begin, on_parallel_begin), H(parallel_end, on_parallel_end),
    H(implicit_task, on_implicit_task),   H(task_create, on_task_create),
    H(task_schedule, on_task_schedule),   H(work, on_work),
    H(masked, on_masked),                 H(sync_region, on_sync_region),
    H(sync_region_wait, on_sync_region_wait), H(mutex_acquire, on_mutex_acquire),
    H(mutex_acquired, on_mutex_acquired), H(mutex_released, on_mutex_released),
#undef H
};

ompt_callback_t omptpy_profile_handler(int event) {
  for (size_t i = 0; i < sizeof HANDLERS / sizeof *HANDLERS; i++)
    if (HANDLERS[i].event == event) return HANDLERS[i].fn;
  return NULL;
}

uint64_t omptpy_profile_events(void) {
  uint64_t events = 0;
  for (size_t i = 0; i < sizeof HANDLERS / sizeof *HANDLERS; i++)
    events |= (uint64_t)1 << HANDLERS[i].event;
  return events;
}

void omptpy_profile_init(const omptpy_config *cfg) {
  omptpy_profiling = cfg->profile;
  entries = cfg->profile_entries;
  uint32_t cap = 16;
  while (cap < 2 * entries) cap *= 2;
  mask = cap - 1;
  double tick_ns = omptpy_g.tick_ns_estimate > 0 ? omptpy_g.tick_ns_estimate : 1.0;
  tick_ns32 = (uint64_t)(tick_ns * 4294967296.0);
}

uint64_t omptpy_profile_unmapped(void) { return atomic_load(&unmapped); }

/* Not on the steady-state path: a thread's start. */
void omptpy_profile_thread_start(omptpy_thread *t) {
  if (!omptpy_profiling) return;
  if (!t->prof) {
    omptpy_profile *p = calloc(1, sizeof *p);
    void *rows = mmap(NULL, (size_t)(mask + 1) * sizeof(omptpy_profile_row),
                      PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!p || rows == MAP_FAILED) {
      free(p);
      if (rows != MAP_FAILED) munmap(rows, (size_t)(mask + 1) * sizeof(omptpy_profile_row));
      atomic_fetch_add(&unmapped, 1);
      return;
    }
    p->rows = rows;
    p->slot = atomic_fetch_add(&nslots, 1);
    p->next = atomic_load(&all);
    while (!atomic_compare_exchange_weak(&all, &p->next, p)) {}
    t->prof = p;
  }
  t->prof->nctx = t->prof->nscope = t->prof->nregion = t->prof->nheld = t->prof->implicit = 0;
  t->prof->stamp_for = 0;
  memset(t->prof->cache, 0, sizeof t->prof->cache);
}

int omptpy_profile_blocks(omptpy_str *s) {
  for (omptpy_profile *p = atomic_load(&all); p; p = p->next) {
    omptpy_profile_head head = {OMPTPY_PROFILE_VERSION, sizeof(omptpy_profile_row), p->slot, 0,
                                atomic_load_explicit(&p->overflow, memory_order_relaxed), {0}};
    size_t start = s->len;
    omptpy_block_header h = {OMPTPY_FILE_MAGIC, OMPTPY_BLOCK_PROFILE, 0};
    if (omptpy_put(s, "%*s", (int)(sizeof h + sizeof head), "") != 0) return -ENOMEM;
    for (uint32_t i = 0; i <= mask; i++) {
      const omptpy_profile_row *r = &p->rows[i];
      if (!atomic_load_explicit((_Atomic uint8_t *)&r->table, memory_order_acquire)) continue;
      if (omptpy_put(s, "%*s", (int)sizeof *r, "") != 0) return -ENOMEM;
      memcpy(s->p + s->len - sizeof *r, r, sizeof *r);
      head.nrows++;
    }
    h.length = sizeof head + (uint64_t)head.nrows * sizeof(omptpy_profile_row);
    memcpy(s->p + start, &h, sizeof h);
    memcpy(s->p + start + sizeof h, &head, sizeof head);
  }
  return 0;
}

void omptpy_profile_to_sink(void) {
  if (!omptpy_profiling || !omptpy_sink_is_file()) return;
  omptpy_str s = {0};
  if (omptpy_profile_blocks(&s) == 0) {
    const omptpy_block_header *h;
    for (size_t off = 0; off < s.len; off += sizeof *h + h->length) {
      h = (const omptpy_block_header *)(s.p + off);
      omptpy_sink_json(OMPTPY_BLOCK_PROFILE, s.p + off + sizeof *h, h->length);
    }
  }
  omptpy_str_free(&s);
}
