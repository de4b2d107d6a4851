/*
 * One handler per OMPT event: each writes one record into the calling
 * thread's buffer.  Nothing here locks, allocates (beyond a thread's first
 * event, or its deepest nesting of parallel regions so far) or calls into
 * Python.  Ids are assigned into the runtime's ompt_data_t the first time
 * the tool sees an object.
 *
 * What the runtime hands a callback is read only while it is sure to be
 * alive: libomp 19 calls parallel_end after it gave the team back (another
 * thread may have reaped it), so parallel_end takes the region's id from the
 * thread's own list of the regions it began (begun_*).  Samples (sampler.c)
 * read only what these callbacks kept for them (track_*).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>

#include "omptpy_frames.h"
#include "omptpy_internal.h"

/* Threads of a team may see an object first at the same time (a region whose
 * begin came while the tool was paused): one id wins.  Atomic accesses, as
 * the runtime's synchronisation of its objects is invisible to
 * ThreadSanitizer (libomp is not instrumented); plain moves on x86-64. */
static inline uint64_t id_of(omptpy_thread *t, ompt_data_t *d) {
  if (!d) return 0;
  uint64_t id = __atomic_load_n(&d->value, __ATOMIC_RELAXED);
  if (OMPTPY_UNLIKELY(id == 0)) {
    uint64_t mine = omptpy_new_id(t);
    id = __atomic_compare_exchange_n(&d->value, &id, mine, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED) ? mine : id;
  }
  return id;
}

/* An object the runtime has just made, which no other thread can see yet
 * (parallel_begin's region, task_create's new task, a thread's implicit task
 * at its begin): its id by plain moves.  A locked compare-and-swap would first
 * wait for the stores of the records before it to leave the store buffer, a
 * cost per task the hand-written recorder of bench/ does not pay. */
static inline uint64_t new_id_of(omptpy_thread *t, ompt_data_t *d) {
  if (!d) return 0;
  uint64_t id = __atomic_load_n(&d->value, __ATOMIC_RELAXED);
  if (OMPTPY_LIKELY(id == 0)) __atomic_store_n(&d->value, id = omptpy_new_id(t), __ATOMIC_RELAXED);
  return id;
}

static inline uint64_t addr(const void *p) { return (uint64_t)(uintptr_t)p; }

/* Whether records of this event are kept (the others' callbacks may stay registered). */
static inline bool keeps(int event) {
  return event >= 64 || atomic_load_explicit(&omptpy_g.wanted, memory_order_relaxed) >> event & 1;
}

static inline void emit(omptpy_thread *t, int event, int endpoint, int kind, uint64_t codeptr,
                        uint64_t parallel_id, uint64_t task_id, uint64_t u64a, uint64_t u64b,
                        uint32_t u32a, uint32_t u32b) {
  if (OMPTPY_UNLIKELY(!keeps(event))) return;
  omptpy_enter(t);
  omptpy_record *r = omptpy_slot(t);
  if (OMPTPY_UNLIKELY(!r)) {
    omptpy_leave(t);
    return;
  }
  omptpy_fill(r, t, event, endpoint, kind, codeptr, parallel_id, task_id, u64a, u64b, u32a, u32b);
  omptpy_commit(t);
  omptpy_native_after(r);
  omptpy_leave(t);
}

/* A record followed by its `more` (u64a, u64b: the fields the primary had no
 * room for), kept or dropped as a pair. */
static inline void emit_pair(omptpy_thread *t, int event, int endpoint, int kind,
                             uint64_t codeptr, uint64_t parallel_id, uint64_t task_id,
                             uint64_t u64a, uint64_t u64b, uint32_t u32a, uint32_t u32b,
                             uint64_t more_a, uint64_t more_b) {
  if (OMPTPY_UNLIKELY(!keeps(event))) return;
  omptpy_enter(t);
  omptpy_record *r = omptpy_slot2(t);
  if (OMPTPY_UNLIKELY(!r)) {
    omptpy_leave(t);
    return;
  }
  omptpy_fill(r, t, event, endpoint, kind, codeptr, parallel_id, task_id, u64a, u64b, u32a, u32b);
  omptpy_fill_more(r, event, 0, 0, 0, more_a, more_b, 0, 0);
  omptpy_commit2(t);
  omptpy_native_after(r);
  omptpy_native_after(r + 1);
  omptpy_leave(t);
}

#define GUARD()                          \
  if (!omptpy_recording()) return;       \
  omptpy_thread *t = omptpy_self();      \
  if (OMPTPY_UNLIKELY(!t)) return

/* ---- the regions a thread began (parallel_end's id) ------------------------ */

static __attribute__((noinline, cold)) bool begun_grow(omptpy_thread *t) {
  uint32_t cap = t->capbegun ? 2 * t->capbegun : 16;
  omptpy_begun *p = realloc(t->begun, cap * sizeof *p);
  if (!p) return false;
  t->begun = p;
  t->capbegun = cap;
  return true;
}

/* Out of memory: the region is not listed, and its end record has parallel id 0. */
static inline void begun_push(omptpy_thread *t, uint64_t encountering, uint64_t id) {
  if (OMPTPY_UNLIKELY(t->nbegun == t->capbegun) && !begun_grow(t)) return;
  t->begun[t->nbegun++] = (omptpy_begun){
      encountering, id,
      atomic_load_explicit(&t->run_task, memory_order_relaxed),
      atomic_load_explicit(&t->run_parallel, memory_order_relaxed)};
}

/* The innermost region begun by this encountering task (its id), taken off
 * the list with any inside it whose end was not seen; NULL if its begin was
 * not seen.  The task is the key, by id: libomp hands parallel_begin a
 * variable on its stack (copied into the team afterwards), and nested
 * serialized regions share one task descriptor whose contents it swaps.  A
 * task that began a region waits in it until it ends, so no two regions on
 * the list have the same encountering task. */
static inline const omptpy_begun *begun_pop(omptpy_thread *t, uint64_t encountering) {
  for (uint32_t i = t->nbegun; i-- > 0;)
    if (t->begun[i].encountering == encountering) {
      t->nbegun = i;
      return &t->begun[i];
    }
  return NULL;
}

/* ---- what samples read (OMPTPY_SAMPLE_HZ) --------------------------------------
 * The thread's running task, its region and its frame, set by the thread's
 * own callbacks and read by its sampling handler (same thread: relaxed
 * atomics suffice, the handler runs between two of the thread's
 * instructions).  The frame pointer is taken from the runtime in a callback,
 * only when the runtime's current task is the one the callback names, and
 * cleared before that task can end or be freed: when it completes or is
 * switched away from (task_schedule), at the barrier that ends its region
 * (another thread frees the team after it), at its end.  The initial task's
 * begin asks nothing: libomp runs it inside its root registration, in a
 * forked child inside its post-fork handler. */

static inline void run_frame_set(omptpy_thread *t, const ompt_frame_t *frame) {
  atomic_store_explicit(&t->run_frame, frame, memory_order_relaxed);
}

/* The frame of `task` if it is the task the runtime says the thread runs
 * (and whether it is untied), else NULL. */
static const ompt_frame_t *frame_if_running(omptpy_thread *t, const ompt_data_t *task) {
  const omptpy_runtime *rt = &omptpy_g.runtimes[t->runtime];
  ompt_data_t *running = NULL, *parallel = NULL;
  ompt_frame_t *frame = NULL;
  int flags = 0, thread_num = 0;
  if (!task || !rt->get_task_info ||
      rt->get_task_info(0, &flags, &running, &frame, &parallel, &thread_num) != 2 ||
      running != task)
    return NULL;
  t->run_untied = (flags & ompt_task_untied) != 0;
  return frame;
}

static void track_implicit(omptpy_thread *t, ompt_scope_endpoint_t endpoint,
                           ompt_data_t *parallel_data, ompt_data_t *task_data, int flags) {
  run_frame_set(t, NULL);
  t->nsuspended = 0;
  t->barrier_task = 0;
  if (endpoint == ompt_scope_begin) {
    atomic_store_explicit(&t->run_task, new_id_of(t, task_data), memory_order_relaxed);
    atomic_store_explicit(&t->run_parallel, id_of(t, parallel_data), memory_order_relaxed);
    if (!(flags & ompt_task_initial)) run_frame_set(t, frame_if_running(t, task_data));
  } else {
    atomic_store_explicit(&t->run_task, 0, memory_order_relaxed);
    atomic_store_explicit(&t->run_parallel, 0, memory_order_relaxed);
  }
}

/* The barrier at the end of an implicit task's region (libomp 19 names it,
 * 14 and 16 call it and a worksharing construct's barrier_implicit).  Once a
 * thread arrived, the team may be freed: the implicit task's frame is
 * dropped, and not taken again when a task run in the barrier ends. */
static inline bool region_end_barrier(int kind) {
  return kind == ompt_sync_region_barrier_implicit_parallel ||
         kind == ompt_sync_region_barrier_teams || kind == ompt_sync_region_barrier_implicit;
}

static void track_sync(omptpy_thread *t, int kind, ompt_scope_endpoint_t endpoint,
                       ompt_data_t *task_data) {
  if (!region_end_barrier(kind)) return;
  if (endpoint == ompt_scope_begin) {
    run_frame_set(t, NULL);
    t->barrier_task = atomic_load_explicit(&t->run_task, memory_order_relaxed);
  } else if (kind == ompt_sync_region_barrier_implicit) {
    /* libomp 14/16: the end of a worksharing construct's barrier (a region's
     * comes late, followed by the implicit task's end) */
    t->barrier_task = 0;
    run_frame_set(t, frame_if_running(t, task_data));
  }
}

/* The prior task stops running here: it is suspended (yield, switch: the
 * next task runs on top of it, and it resumes on this thread when that one is
 * done, unless untied) or done.  libomp names the next task while its own
 * current task is still the prior one when a task completes: a resumed task's
 * frame is the one kept when it was suspended. */
static void track_schedule(omptpy_thread *t, ompt_data_t *prior, ompt_task_status_t status,
                           ompt_data_t *next) {
  const ompt_frame_t *prior_frame = atomic_load_explicit(&t->run_frame, memory_order_relaxed);
  run_frame_set(t, NULL);
  if ((status == ompt_task_yield || status == ompt_task_switch) && prior_frame && !t->run_untied &&
      t->nsuspended < OMPTPY_SUSPENDED_MAX) {
    t->suspended[t->nsuspended].task = prior;
    t->suspended[t->nsuspended++].frame = prior_frame;
  }
  uint64_t id = id_of(t, next);
  atomic_store_explicit(&t->run_task, id, memory_order_relaxed);
  const ompt_frame_t *kept = NULL;
  if (t->nsuspended && t->suspended[t->nsuspended - 1].task == next) {
    kept = t->suspended[--t->nsuspended].frame;
    t->run_untied = false;
  }
  const ompt_frame_t *frame = frame_if_running(t, next);
  if (id != t->barrier_task) run_frame_set(t, frame ? frame : kept);
}

static void thread_begin(ompt_thread_t type, ompt_data_t *thread_data, int runtime) {
  /* A thread the tool already knows (announced again, e.g. by the runtime of a
   * forked child) keeps its buffer and index. */
  omptpy_thread *t = omptpy_tls_thread;
  if (t) {
    t->type = type;
    t->self_detach = false; /* the runtime's now: thread_end gives the slot back */
  } else if (!(t = omptpy_thread_attach(type, runtime))) return;
  thread_data->ptr = t;
  if (omptpy_recording())
    emit(t, ompt_callback_thread_begin, ompt_scope_begin, type, 0, 0, 0, (uint64_t)t->tid, 0,
         (uint32_t)runtime, 0);
}

/* Callbacks do not say which runtime calls them; thread_begin is registered
 * once per runtime instance so that each thread knows its runtime. */
#define THREAD_BEGIN(i) \
  static void on_thread_begin_##i(ompt_thread_t type, ompt_data_t *data) { \
    thread_begin(type, data, i); \
  }
THREAD_BEGIN(0)
THREAD_BEGIN(1)
THREAD_BEGIN(2)
THREAD_BEGIN(3)
THREAD_BEGIN(4)
THREAD_BEGIN(5)
THREAD_BEGIN(6)
THREAD_BEGIN(7)
static const ompt_callback_t THREAD_BEGIN_FOR[OMPTPY_MAX_RUNTIMES] = {
    (ompt_callback_t)on_thread_begin_0, (ompt_callback_t)on_thread_begin_1,
    (ompt_callback_t)on_thread_begin_2, (ompt_callback_t)on_thread_begin_3,
    (ompt_callback_t)on_thread_begin_4, (ompt_callback_t)on_thread_begin_5,
    (ompt_callback_t)on_thread_begin_6, (ompt_callback_t)on_thread_begin_7,
};

static void on_thread_end(ompt_data_t *thread_data) {
  omptpy_thread *t = omptpy_tls_thread;
  (void)thread_data;
  if (!t) return;
  if (omptpy_recording())
    emit(t, ompt_callback_thread_end, ompt_scope_end, t->type, 0, 0, 0, (uint64_t)t->tid, 0, 0, 0);
  omptpy_thread_detach(t);
}

/* Regions are listed while the tool is paused too (begin and end may fall on
 * either side of a trace window), by every thread the tool knows.  The
 * encountering task's frame, packed (omptpy_frame_pack): the exit frame, else
 * the enter frame, in u64b; the enter frame's distance below the exit frame
 * in the high half of u64a, the stack id in its low half; frame bits in kind.
 * Teams constructs come here too (flags: ompt_parallel_league). */
static void on_parallel_begin(ompt_data_t *encountering_task, const ompt_frame_t *frame,
                              ompt_data_t *parallel_data, unsigned int requested, int flags,
                              const void *codeptr) {
  bool recording = omptpy_recording();
  omptpy_thread *t = recording ? omptpy_self() : omptpy_tls_thread;
  if (OMPTPY_UNLIKELY(!t)) return;
  uint64_t id = new_id_of(t, parallel_data), encountering = id_of(t, encountering_task);
  begun_push(t, encountering, id);
  if (!recording) return;
  uint32_t stack =
      keeps(ompt_callback_parallel_begin) ? omptpy_stack_id(t, 0, addr(codeptr)) : 0;
  uint32_t below;
  uint64_t frame_addr = omptpy_frame_pack(frame, &below);
  emit(t, ompt_callback_parallel_begin, ompt_scope_begin, omptpy_frame_bits(frame), addr(codeptr),
       id, encountering, (uint64_t)below << 32 | stack, frame_addr, requested, (uint32_t)flags);
}

/* parallel_data is not read: libomp 19 gives the team back to its pool before
 * this callback, and another thread may free it meanwhile (AddressSanitizer
 * saw it under nested regions of changing sizes).  The encountering task is
 * the thread's own, running again. */
static void on_parallel_end(ompt_data_t *parallel_data, ompt_data_t *encountering_task, int flags,
                            const void *codeptr) {
  bool recording = omptpy_recording();
  omptpy_thread *t = recording ? omptpy_self() : omptpy_tls_thread;
  if (OMPTPY_UNLIKELY(!t)) return;
  (void)parallel_data;
  uint64_t encountering = id_of(t, encountering_task);
  const omptpy_begun *b = begun_pop(t, encountering);
  if (OMPTPY_UNLIKELY(omptpy_sampling)) {
    atomic_store_explicit(&t->run_task, b ? b->run_task : 0, memory_order_relaxed);
    atomic_store_explicit(&t->run_parallel, b ? b->run_parallel : 0, memory_order_relaxed);
    run_frame_set(t, frame_if_running(t, encountering_task));
  }
  if (!recording) return;
  emit(t, ompt_callback_parallel_end, ompt_scope_end, 0, addr(codeptr), b ? b->parallel_id : 0,
       encountering, 0, 0, 0, (uint32_t)flags);
}

/* OMPTPY_PLACE_INFO: place number << 32 | processor, at an implicit task's
 * begin.  The processor from sched_getcpu() (what libomp's ompt_get_proc_id
 * answers); the place from the runtime, but not for the initial task: libomp
 * begins it while it registers the thread, holding its own lock, and
 * ompt_get_place_num would register the thread again and wait for that lock
 * (a forked child hung so in libomp's post-fork handler).  Its place is -1,
 * what libomp answered there anyway (affinity is set up later). */
static uint64_t where_now(const omptpy_thread *t, int flags) {
  const omptpy_runtime *rt = &omptpy_g.runtimes[t->runtime];
  int proc = sched_getcpu();
  int place = (flags & ompt_task_initial) || !rt->get_place_num ? -1 : rt->get_place_num();
  return (uint64_t)(uint32_t)place << 32 | (uint32_t)proc;
}

static void on_implicit_task(ompt_scope_endpoint_t endpoint, ompt_data_t *parallel_data,
                             ompt_data_t *task_data, unsigned int actual, unsigned int index,
                             int flags) {
  omptpy_thread *t = omptpy_tls_thread;
  if (OMPTPY_UNLIKELY(omptpy_sampling) && t)
    track_implicit(t, endpoint, parallel_data, task_data, flags);
  if (omptpy_recording() && (t || (t = omptpy_self()))) {
    uint64_t where = OMPTPY_UNLIKELY(omptpy_g.cfg.place_info) && endpoint == ompt_scope_begin
                         ? where_now(t, flags) : 0;
    emit(t, ompt_callback_implicit_task, endpoint, 0, 0, id_of(t, parallel_data),
         endpoint == ompt_scope_begin ? new_id_of(t, task_data) : id_of(t, task_data), index,
         where, actual, (uint32_t)flags);
  }
  /* The task's id goes with it: a worker released from its team ends its
   * implicit task late, with libomp's copy of the task data in the thread,
   * which libomp later requires empty (KMP_ASSERT(taskwait_task_data->ptr ==
   * NULL) at an undeferred task with dependences: an abort). */
  if (endpoint == ompt_scope_end && task_data) __atomic_store_n(&task_data->value, 0, __ATOMIC_RELAXED);
}

/* The encountering task's frame: exit frame in u64b, enter frame in
 * parallel_id (the event has no parallel id), which of them and their flags
 * in kind (omptpy_frames.h).  u32a: has_dependences in bit 0, the stack id
 * above it (explicit tasks created outside every parallel region). */
static void on_task_create(ompt_data_t *encountering_task, const ompt_frame_t *frame,
                           ompt_data_t *new_task, int flags, int has_dependences,
                           const void *codeptr) {
  GUARD();
  uint64_t encountering = id_of(t, encountering_task);
  uint32_t stack = keeps(ompt_callback_task_create) && (flags & ompt_task_explicit)
                       ? omptpy_stack_id(t, encountering ? encountering : 1, addr(codeptr)) : 0;
  emit(t, ompt_callback_task_create, 0, omptpy_frame_bits(frame), addr(codeptr),
       frame ? frame->enter_frame.value : 0, new_id_of(t, new_task), encountering,
       frame ? frame->exit_frame.value : 0, (uint32_t)(has_dependences != 0) | stack << 1,
       (uint32_t)flags);
}

static void on_task_schedule(ompt_data_t *prior, ompt_task_status_t status, ompt_data_t *next) {
  if (OMPTPY_UNLIKELY(omptpy_sampling) && omptpy_tls_thread)
    track_schedule(omptpy_tls_thread, prior, status, next);
  GUARD();
  emit(t, ompt_callback_task_schedule, 0, status, 0, 0, id_of(t, prior), id_of(t, next), 0, 0, 0);
}

static void on_work(ompt_work_t type, ompt_scope_endpoint_t endpoint, ompt_data_t *parallel_data,
                    ompt_data_t *task_data, uint64_t count, const void *codeptr) {
  GUARD();
  emit(t, ompt_callback_work, endpoint, type, addr(codeptr), id_of(t, parallel_data),
       id_of(t, task_data), count, 0, 0, 0);
}

static void on_dispatch(ompt_data_t *parallel_data, ompt_data_t *task_data, ompt_dispatch_t kind,
                        ompt_data_t instance) {
  GUARD();
  uint64_t a = instance.value, b = 0;
  if (kind >= ompt_dispatch_ws_loop_chunk && instance.ptr) {
    const ompt_dispatch_chunk_t *chunk = instance.ptr;
    a = chunk->start;
    b = chunk->iterations;
  }
  emit(t, ompt_callback_dispatch, 0, kind, 0, id_of(t, parallel_data), id_of(t, task_data), a, b,
       0, 0);
}

static void on_sync_region(ompt_sync_region_t kind, ompt_scope_endpoint_t endpoint,
                           ompt_data_t *parallel_data, ompt_data_t *task_data,
                           const void *codeptr) {
  if (OMPTPY_UNLIKELY(omptpy_sampling) && omptpy_tls_thread)
    track_sync(omptpy_tls_thread, kind, endpoint, task_data);
  GUARD();
  emit(t, ompt_callback_sync_region, endpoint, kind, addr(codeptr), id_of(t, parallel_data),
       id_of(t, task_data), 0, 0, 0, 0);
}

#define SYNC_HANDLER(name, event)                                                              \
  static void name(ompt_sync_region_t kind, ompt_scope_endpoint_t endpoint,                    \
                   ompt_data_t *parallel_data, ompt_data_t *task_data, const void *codeptr) {  \
    GUARD();                                                                                   \
    emit(t, event, endpoint, kind, addr(codeptr), id_of(t, parallel_data), id_of(t, task_data), \
         0, 0, 0, 0);                                                                          \
  }
SYNC_HANDLER(on_sync_region_wait, ompt_callback_sync_region_wait)
SYNC_HANDLER(on_reduction, ompt_callback_reduction)

#define ACQUIRE_HANDLER(name, event)                                                     \
  static void name(ompt_mutex_t kind, unsigned int hint, unsigned int impl,              \
                   ompt_wait_id_t wait_id, const void *codeptr) {                        \
    GUARD();                                                                             \
    emit(t, event, 0, kind, addr(codeptr), 0, 0, wait_id, 0, hint, impl);                \
  }
ACQUIRE_HANDLER(on_mutex_acquire, ompt_callback_mutex_acquire)
ACQUIRE_HANDLER(on_lock_init, ompt_callback_lock_init)

#define MUTEX_HANDLER(name, event)                                                         \
  static void name(ompt_mutex_t kind, ompt_wait_id_t wait_id, const void *codeptr) {       \
    GUARD();                                                                               \
    emit(t, event, 0, kind, addr(codeptr), 0, 0, wait_id, 0, 0, 0);                        \
  }
MUTEX_HANDLER(on_mutex_acquired, ompt_callback_mutex_acquired)
MUTEX_HANDLER(on_mutex_released, ompt_callback_mutex_released)
MUTEX_HANDLER(on_lock_destroy, ompt_callback_lock_destroy)

static void on_nest_lock(ompt_scope_endpoint_t endpoint, ompt_wait_id_t wait_id,
                         const void *codeptr) {
  GUARD();
  emit(t, ompt_callback_nest_lock, endpoint, 0, addr(codeptr), 0, 0, wait_id, 0, 0, 0);
}

static void on_masked(ompt_scope_endpoint_t endpoint, ompt_data_t *parallel_data,
                      ompt_data_t *task_data, const void *codeptr) {
  GUARD();
  emit(t, ompt_callback_masked, endpoint, 0, addr(codeptr), id_of(t, parallel_data),
       id_of(t, task_data), 0, 0, 0, 0);
}

static void on_flush(ompt_data_t *thread_data, const void *codeptr) {
  (void)thread_data;
  GUARD();
  emit(t, ompt_callback_flush, 0, 0, addr(codeptr), 0, 0, 0, 0, 0, 0);
}

static void on_cancel(ompt_data_t *task_data, int flags, const void *codeptr) {
  GUARD();
  emit(t, ompt_callback_cancel, 0, 0, addr(codeptr), 0, id_of(t, task_data), 0, 0, 0,
       (uint32_t)flags);
}

/* The dependence list is variable-length: one record per dependence, kept
 * whole (u32a = its index, u32b = the list's length). */
static void on_dependences(ompt_data_t *task_data, const ompt_dependence_t *deps, int ndeps) {
  GUARD();
  uint64_t task = id_of(t, task_data);
  for (int i = 0; i < ndeps; i++)
    emit(t, ompt_callback_dependences, 0, deps[i].dependence_type, 0, 0, task,
         deps[i].variable.value, 0, (uint32_t)i, (uint32_t)ndeps);
}

static void on_task_dependence(ompt_data_t *src, ompt_data_t *sink) {
  GUARD();
  emit(t, ompt_callback_task_dependence, 0, 0, 0, 0, id_of(t, src), id_of(t, sink), 0, 0, 0);
}

/* The message's text goes to the table of strings (region.c: bounded, a
 * lock only for a text not seen before; errors are rare), its id into u64b. */
static void on_error(ompt_severity_t severity, const char *message, size_t length,
                     const void *codeptr) {
  GUARD();
  uint64_t text = keeps(ompt_callback_error) ? omptpy_intern_message(message, length) : 0;
  emit(t, ompt_callback_error, 0, severity, addr(codeptr), 0, 0, length, text, 0, 0);
}

/* Device and target events that fire on the host.  A target region's id is
 * stored in its target_data; a data operation's or submission's id in
 * *host_op_id. */
static inline uint64_t op_id(omptpy_thread *t, ompt_id_t *host_op_id, int endpoint) {
  if (!host_op_id) return 0;
  /* A new id at each begin: libomp passes the same storage for every operation. */
  if (endpoint == ompt_scope_begin || *host_op_id == 0) *host_op_id = omptpy_new_id(t);
  return *host_op_id;
}

/* Device tracing is set up (device.c) whether or not records are wanted now:
 * a trace window opened later gets the device's records too. */
static void on_device_initialize(int device_num, const char *type, ompt_device_t *device,
                                 ompt_function_lookup_t lookup, const char *documentation) {
  (void)documentation;
  if (omptpy_recording()) {
    omptpy_thread *t = omptpy_self();
    if (t) emit(t, ompt_callback_device_initialize, 0, 0, 0, 0, 0, 0, 0, (uint32_t)device_num, 0);
  }
  omptpy_device_initialize(device_num, type, device, lookup);
}

static void on_device_finalize(int device_num) {
  omptpy_device_finalize(device_num);
  GUARD();
  emit(t, ompt_callback_device_finalize, 0, 0, 0, 0, 0, 0, 0, (uint32_t)device_num, 0);
}

static void on_device_load(int device_num, const char *filename, int64_t offset_in_file,
                           void *vma_in_file, size_t bytes, void *host_addr, void *device_addr,
                           uint64_t module_id) {
  (void)filename, (void)offset_in_file, (void)vma_in_file, (void)device_addr;
  GUARD();
  emit(t, ompt_callback_device_load, 0, 0, addr(host_addr), 0, 0, bytes, module_id,
       (uint32_t)device_num, 0);
}

static void on_target_emi(ompt_target_t kind, ompt_scope_endpoint_t endpoint, int device_num,
                          ompt_data_t *task_data, ompt_data_t *target_task_data,
                          ompt_data_t *target_data, const void *codeptr) {
  GUARD();
  uint32_t stack = endpoint == ompt_scope_begin && keeps(ompt_callback_target_emi)
                       ? omptpy_stack_id(t, 0, addr(codeptr)) : 0;
  emit(t, ompt_callback_target_emi, endpoint, kind, addr(codeptr), 0, id_of(t, task_data),
       id_of(t, target_data), id_of(t, target_task_data), (uint32_t)device_num, stack);
}

static void on_target_data_op_emi(ompt_scope_endpoint_t endpoint, ompt_data_t *target_task_data,
                                  ompt_data_t *target_data, ompt_id_t *host_op_id,
                                  ompt_target_data_op_t optype, void *src_addr,
                                  int src_device_num, void *dest_addr, int dest_device_num,
                                  size_t bytes, const void *codeptr) {
  (void)target_task_data;
  GUARD();
  emit_pair(t, ompt_callback_target_data_op_emi, endpoint, optype, addr(codeptr), 0,
            op_id(t, host_op_id, endpoint), bytes, id_of(t, target_data),
            (uint32_t)src_device_num, (uint32_t)dest_device_num, addr(src_addr), addr(dest_addr));
}

static void on_target_submit_emi(ompt_scope_endpoint_t endpoint, ompt_data_t *target_data,
                                 ompt_id_t *host_op_id, unsigned int requested_num_teams) {
  GUARD();
  emit(t, ompt_callback_target_submit_emi, endpoint, 0, 0, 0, op_id(t, host_op_id, endpoint), 0,
       id_of(t, target_data), requested_num_teams, 0);
}

/* The non-EMI target events (OpenMP 5.0), registered only where the EMI ones
 * are never called: the same fields as their EMI events, with the ids the
 * runtime passes (target_id, host_op_id) in place of the tool's. */
static void on_target(ompt_target_t kind, ompt_scope_endpoint_t endpoint, int device_num,
                      ompt_data_t *task_data, ompt_id_t target_id, const void *codeptr) {
  GUARD();
  uint32_t stack = endpoint == ompt_scope_begin && keeps(ompt_callback_target)
                       ? omptpy_stack_id(t, 0, addr(codeptr)) : 0;
  emit(t, ompt_callback_target, endpoint, kind, addr(codeptr), 0, id_of(t, task_data), target_id,
       0, (uint32_t)device_num, stack);
}

static void on_target_data_op(ompt_id_t target_id, ompt_id_t host_op_id,
                              ompt_target_data_op_t optype, void *src_addr, int src_device_num,
                              void *dest_addr, int dest_device_num, size_t bytes,
                              const void *codeptr) {
  GUARD();
  emit_pair(t, ompt_callback_target_data_op, 0, optype, addr(codeptr), 0, host_op_id, bytes,
            target_id, (uint32_t)src_device_num, (uint32_t)dest_device_num, addr(src_addr),
            addr(dest_addr));
}

static void on_target_submit(ompt_id_t target_id, ompt_id_t host_op_id,
                             unsigned int requested_num_teams) {
  GUARD();
  emit(t, ompt_callback_target_submit, 0, 0, 0, 0, host_op_id, 0, target_id, requested_num_teams,
       0);
}

void omptpy_emit_own(int event, int endpoint, uint64_t codeptr, uint64_t u64a, bool stack) {
  if (omptpy_profiling) return; /* profile mode writes no record (region markers included) */
  GUARD();
  emit(t, event, endpoint, 0, codeptr, 0, 0, u64a, stack ? omptpy_stack_id(t, 0, codeptr) : 0,
       0, 0);
}

void omptpy_emit_span(int event, int kind, uint64_t codeptr, uint64_t begin, uint64_t u64a,
                      uint32_t u32a, uint32_t u32b) {
  if (omptpy_profiling) return;
  GUARD();
  omptpy_enter(t);
  omptpy_record *r = omptpy_slot(t);
  if (OMPTPY_UNLIKELY(!r)) {
    omptpy_leave(t);
    return;
  }
  omptpy_fill(r, t, event, ompt_scope_beginend, kind, codeptr, 0, 0, u64a, 0, u32a, u32b);
  r->u64b = r->time;
  r->time = begin;
  omptpy_commit(t);
  omptpy_native_after(r);
  omptpy_leave(t);
}

/* omp_control_tool: 1 start, 2 pause, 3 flush, 4 end (OpenMP 5.2, 3.14); 64
 * and up are the tool's own: recorded (with the arg pointer in u32a/u32b) for
 * the handlers, and answered with success.  Start and pause act on the trace
 * sink; handlers keep receiving events. */
int omptpy_control(uint64_t command, uint64_t modifier, void *arg, const void *codeptr) {
  /* The command is recorded when recording is on after a start or before a
   * pause, so that both show in the trace where they happened. */
  if (command == 1) omptpy_recording_set(1);
  omptpy_thread *t = omptpy_recording() ? omptpy_self() : NULL;
  uint64_t a = addr(arg);
  if (t && omptpy_recording())
    emit(t, ompt_callback_control_tool, 0, 0, addr(codeptr), 0, 0, command, modifier,
         (uint32_t)a, (uint32_t)(a >> 32));
  switch (command) {
    case 1: omptpy_recording_set(1); return 0;
    case 2:
    case 4: omptpy_recording_set(0); return 0;
    case 3: /* the devices' buffers first: their records land in the threads' */
      omptpy_devices_flush();
      omptpy_flush();
      return 0;
    default: return command >= 64 ? 0 : 1; /* 1: omp_control_tool_ignored */
  }
}

static int on_control_tool(uint64_t command, uint64_t modifier, void *arg, const void *codeptr) {
  return omptpy_control(command, modifier, arg, codeptr);
}

static const struct {
  int event;
  const char *name;
  ompt_callback_t fn;
} TABLE[] = {
#define E(ev, fn) {ompt_callback_##ev, #ev, (ompt_callback_t)(fn)}
    E(thread_begin, on_thread_begin_0),
    E(thread_end, on_thread_end),
    E(parallel_begin, on_parallel_begin),
    E(parallel_end, on_parallel_end),
    E(task_create, on_task_create),
    E(task_schedule, on_task_schedule),
    E(implicit_task, on_implicit_task),
    E(control_tool, on_control_tool),
    E(sync_region_wait, on_sync_region_wait),
    E(mutex_released, on_mutex_released),
    E(dependences, on_dependences),
    E(task_dependence, on_task_dependence),
    E(work, on_work),
    E(masked, on_masked),
    E(sync_region, on_sync_region),
    E(lock_init, on_lock_init),
    E(lock_destroy, on_lock_destroy),
    E(mutex_acquire, on_mutex_acquire),
    E(mutex_acquired, on_mutex_acquired),
    E(nest_lock, on_nest_lock),
    E(flush, on_flush),
    E(cancel, on_cancel),
    E(reduction, on_reduction),
    E(dispatch, on_dispatch),
    E(error, on_error),
    E(device_initialize, on_device_initialize),
    E(device_finalize, on_device_finalize),
    E(device_load, on_device_load),
    E(target_emi, on_target_emi),
    E(target_data_op_emi, on_target_data_op_emi),
    E(target_submit_emi, on_target_submit_emi),
    E(target, on_target),
    E(target_data_op, on_target_data_op),
    E(target_submit, on_target_submit),
#undef E
};

const char *omptpy_event_name(int event) {
  for (size_t i = 0; i < sizeof TABLE / sizeof *TABLE; i++)
    if (TABLE[i].event == event) return TABLE[i].name;
  return NULL;
}

/* The EMI event a non-EMI target event stands in for (0: none). */
static int emi_of(int event) {
  switch (event) {
    case ompt_callback_target: return ompt_callback_target_emi;
    case ompt_callback_target_data_op: return ompt_callback_target_data_op_emi;
    case ompt_callback_target_submit: return ompt_callback_target_submit_emi;
    default: return 0;
  }
}

/* The handler registered for TABLE[i]: profile mode's where it has one. */
static ompt_callback_t handler(size_t i) {
  ompt_callback_t fn = omptpy_profiling ? omptpy_profile_handler(TABLE[i].event) : NULL;
  return fn ? fn : TABLE[i].fn;
}

/* The non-EMI target events come after the EMI ones in TABLE: each is
 * registered only when its EMI event is never called (libomp 19 calls only
 * the EMI one when both are registered, another runtime might call both). */
void omptpy_register_callbacks(omptpy_runtime *rt) {
  for (size_t i = 0; i < sizeof TABLE / sizeof *TABLE; i++) {
    ompt_callback_t fn = handler(i);
    int emi = emi_of(TABLE[i].event);
    if (emi && rt->levels[emi] != ompt_set_never) continue;
    if (TABLE[i].event == ompt_callback_thread_begin)
      fn = THREAD_BEGIN_FOR[rt - omptpy_g.runtimes];
    rt->levels[TABLE[i].event] = rt->set_callback(TABLE[i].event, fn);
    if (rt->levels[TABLE[i].event] != ompt_set_never) rt->registered |= (uint64_t)1 << TABLE[i].event;
  }
}

/* An event is registered when its records are first wanted, and stays
 * registered: libomp cannot take a callback back while its threads run
 * (ompt_set_callback clears the pointer before the enabled flag, so a thread
 * that has just seen the flag calls NULL: a SIGSEGV in __kmpc_dispatch_next_8
 * when a window closed under dynamic loops).  Records nobody wants are dropped
 * in emit(), and a paused tool costs an empty callback per event.  During
 * initialisation (the runtime runs no OpenMP code yet) the events nobody
 * wants are unregistered, so a tool that never records costs no callback at
 * all.  Thread, tool-control and device initialize/finalize events stay
 * registered: the tool needs them (device tracing is set up at the latter).
 * Called under the tool's control lock. */
void omptpy_callbacks_enable(omptpy_runtime *rt, uint64_t events) {
  /* parallel_end's id comes from parallel_begin; samples need what these
   * events tell (track_*): registered even when their records are not wanted. */
#define BIT(ev) ((uint64_t)1 << ompt_callback_##ev)
  if (events & BIT(parallel_end)) events |= BIT(parallel_begin);
  if (omptpy_sampling)
    events |= BIT(parallel_begin) | BIT(parallel_end) | BIT(implicit_task) | BIT(task_schedule) |
              BIT(sync_region);
#undef BIT
  for (size_t i = 0; i < sizeof TABLE / sizeof *TABLE; i++) {
    int ev = TABLE[i].event;
    uint64_t bit = (uint64_t)1 << ev;
    if (ev == ompt_callback_thread_begin || ev == ompt_callback_thread_end ||
        ev == ompt_callback_control_tool || ev == ompt_callback_device_initialize ||
        ev == ompt_callback_device_finalize || rt->levels[ev] == ompt_set_never ||
        rt->levels[ev] < 0)
      continue;
    if (events & bit) {
      if (!(rt->registered & bit)) rt->set_callback(ev, handler(i));
      rt->registered |= bit;
    } else if (!atomic_load_explicit(&rt->initialized, memory_order_relaxed) &&
               (rt->registered & bit)) {
      rt->set_callback(ev, NULL);
      rt->registered &= ~bit;
    }
  }
}
