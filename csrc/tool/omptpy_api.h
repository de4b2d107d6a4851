/*
 * The functions libomptpy.so exports besides ompt_start_tool, used by the
 * Python extension module (csrc/ext/).  Implemented in tool.c, clock.c for
 * the conversion of times, and tap.c, native.c, region.c and callbacks.c for
 * the scripting part.
 */
#ifndef OMPTPY_API_H
#define OMPTPY_API_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "omptpy.h"

/* Reads the configuration once; 0, or -EINVAL with omptpy_config_error() set. */
int omptpy_init(void);
const char *omptpy_config_error(void);
/* Checks the OMPTPY_* variables of the environment as it is now (for launchers). */
int omptpy_config_check(char *error, size_t size);
void omptpy_set_recording(int on);
int omptpy_is_recording(void);
/* Moves every buffered record, partial chunks included, into the sink. */
void omptpy_flush_all(void);
/* Flushes everything and writes the final counters, for a process that ends
 * without exit() (os._exit, a fatal signal); used by ompt-py run's Python hook. */
void omptpy_finish(void);
/* Memory sink: takes the records gathered so far (release with omptpy_release). */
void *omptpy_take(size_t *nrecs, size_t *mapped);
void omptpy_release(void *base, size_t mapped);
/* JSON documents to free() with free(), or NULL when out of memory. */
char *omptpy_meta(void);
char *omptpy_stats(void);
char *omptpy_runtime_info(void);
/* Profile mode (OMPTPY_PROFILE=on), in memory: every thread slot's PROFILE block
 * (header and payload, as in the file: omptpy_file.h), `*len` bytes, to free()
 * with free(); NULL when out of memory. */
char *omptpy_profile_take(size_t *len);
const char *omptpy_tool_path(void);

/* ---- times: raw clock ticks to CLOCK_MONOTONIC nanoseconds ------------------------- */

/* A tick count of the tool's clock and the CLOCK_MONOTONIC time read with it. */
typedef struct omptpy_anchor {
  uint64_t ticks;
  uint64_t mono_ns;
} omptpy_anchor;

/* Nanoseconds per tick: the slope from `first` to `last` (later) when they are
 * far enough apart, else `estimate` (the tool's tick_ns_estimate; pass last =
 * first when there is no second anchor). */
double omptpy_tick_scale(omptpy_anchor first, omptpy_anchor last, double estimate);

/* The CLOCK_MONOTONIC time of `ticks` on the line through `anchor` of slope
 * `scale` (omptpy_tick_scale), to the nearest nanosecond (halves away from
 * zero).  Ticks before the anchor give earlier times. */
static inline int64_t omptpy_ticks_to_ns(uint64_t ticks, omptpy_anchor anchor, double scale) {
  return (int64_t)anchor.mono_ns + llround((double)(int64_t)(ticks - anchor.ticks) * scale);
}

/* ---- scripting callbacks: handlers, tool control, region markers -------------------- */

#define OMPTPY_TAP_MAX_FILTERS 16
#define OMPTPY_TAP_MAX_THREADS 64

/* A record reaches the handlers' queue when one filter accepts it: its event
 * is in `events` (bit e: event number e, 0-127), its codeptr in
 * [codeptr_lo, codeptr_hi) unless codeptr_hi is 0, its thread among
 * `threads` unless nthreads is 0. */
typedef struct omptpy_tap_filter {
  uint64_t events[2];
  uint64_t codeptr_lo, codeptr_hi;
  uint32_t nthreads;
  uint32_t threads[OMPTPY_TAP_MAX_THREADS];
} omptpy_tap_filter;

typedef struct omptpy_tap_counters {
  uint64_t queued;   /* records put in the queue, ever */
  uint64_t dropped;  /* records that passed a filter but found the queue full */
  uint64_t filtered; /* records no filter accepted */
  uint64_t position; /* queue position after the last record queued (== queued) */
  uint64_t backlog;  /* records waiting to be read */
  uint64_t capacity; /* records the queue holds (OMPTPY_HANDLER_QUEUE) */
  int active;
} omptpy_tap_counters;

/* Starts the handlers' queue or changes its filters: records are delivered
 * at most about delay_ns after they were written; block: writers wait when
 * the queue is full instead of dropping.  0 or -errno. */
int omptpy_tap_configure(const omptpy_tap_filter *filters, int nfilters, uint64_t delay_ns,
                         int block);
void omptpy_tap_stop(void);
/* Waits at most timeout_ns for records: how many are queued (> 0), 0 after the
 * timeout, -1 when the tap is stopped. */
long omptpy_tap_wait(int64_t timeout_ns);
/* Moves up to max records into dst, times converted to CLOCK_MONOTONIC
 * nanoseconds (int64); *position: the queue position after them. */
size_t omptpy_tap_read(omptpy_record *dst, size_t max, uint64_t *position);
void omptpy_tap_stats(omptpy_tap_counters *c);

/* Native handlers: a slot id (>= 0) or -errno; at most OMPTPY_NATIVE_MAX at once. */
#define OMPTPY_NATIVE_MAX 16
int omptpy_native_add(omptpy_native_fn fn, void *state, const uint64_t events[2]);
int omptpy_native_remove(int id);
/* Zeroed memory for a native handler's state; never freed. */
void *omptpy_native_alloc(size_t bytes);

/* omp_control_tool's commands from the tool's side (codeptr 0): the result
 * omp_control_tool would return. */
int omptpy_control_tool(uint64_t command, uint64_t modifier);

/* Region markers: omptpy_region_begin/end for C code (see omptpy_region.h),
 * omptpy_region_mark for bindings (endpoint 1 begin, 2 end). */
void omptpy_region_begin(const char *name);
void omptpy_region_end(const char *name);
void omptpy_region_mark(int endpoint, const char *name, uintptr_t codeptr);
/* Interned names: ids 1 to omptpy_region_count(). */
uint32_t omptpy_region_count(void);
const char *omptpy_region_name(uint32_t id);

/* ---- MPI (mpi.c): the interposition library (csrc/mpi) and ompt_py.mpi ------------ */

/* The process's place in a parallel job as its launcher's variables say (the
 * META document's rank, local_rank and job_id): -1 and "" where none. */
void omptpy_job(int *rank, int *local_rank, char *id, size_t size);
/* The tool's clock now: ticks (a record's time) and nanoseconds on the clock
 * anchors' scale (CLOCK_MONOTONIC; skewed under OMPTPY_TEST_CLOCK_SKEW). */
uint64_t omptpy_clock_ticks(void);
uint64_t omptpy_clock_ns(void);
/* An `mpi` record (omptpy.h) on the calling thread for a call that began at
 * begin_ticks and returns now; call: OMPTPY_MPI_*. */
void omptpy_mpi_call(int call, uint64_t begin_ticks, uint64_t bytes, int32_t peer,
                     uint32_t comm_size, uintptr_t codeptr);
/* The process's place in MPI_COMM_WORLD, as MPI says it, and who tells
 * ("pmpi": the interposition library, "mpi4py": ompt_py.mpi). */
void omptpy_mpi_world(int rank, int size, const char *source);
/* The clock measurements of one phase (0: after MPI_Init, 1: before
 * MPI_Finalize) against rank `reference`: n triples (the reference's clock
 * when it sent, this process's when it answered, the reference's when the
 * answer came back; omptpy_clock_ns of each), at most OMPTPY_MPI_MAX_PAIRS
 * kept.  They go into every STATS document ("mpi").  0, or -EINVAL. */
#define OMPTPY_MPI_MAX_PAIRS 64
int omptpy_mpi_clock_pairs(int phase, int reference, const uint64_t *triples, uint32_t n);
/* Whether a phase's measurements are kept (one source measures: the other skips). */
int omptpy_mpi_measured(int phase);

/* ---- interpreter call stacks (stacks.c): the extension's Python stacks ----------- */

/* A capture hook, installed by the extension: which call stack the calling
 * thread's interpreter is in (its stack id, 0 when the thread runs none), and
 * whether it runs one at all (cheaply).  Called inside OMPT callbacks on any
 * thread: they must not block, lock, or allocate once their stacks are known.
 * The tool calls them for parallel, teams and target regions and region
 * markers, and for tasks created outside every parallel region. */
/* capture: `native` holds the return addresses of the n native frames above
 * the construct's own (innermost first; n = 0 unless omptpy_stacks_set_native),
 * to be part of the stack. */
typedef struct omptpy_stack_hooks {
  uint32_t (*capture)(const uint64_t *native, uint32_t n);
  bool (*runs)(void);
} omptpy_stack_hooks;

/* Installs the hooks (static storage; NULL: capture off), making the tables
 * the first time.  0, or -ENOMEM. */
int omptpy_stacks_set_hooks(const omptpy_stack_hooks *hooks);

/* Native frames with each stack: the return addresses of up to `depth` frames
 * (0: none, at most OMPTPY_STACK_MAX_NATIVE) above the construct's code
 * address, found by unwinding the calling thread (libgcc's _Unwind_Backtrace,
 * which reads the unwind tables: no frame pointers needed).  Costs
 * microseconds per capture (bench/pystacks.py).  0, or -EINVAL. */
#define OMPTPY_STACK_MAX_NATIVE 16
int omptpy_stacks_set_native(int depth);

/* The tables behind the hooks.  Keys are the caller's words (at most
 * OMPTPY_STACK_MAX_KEY), identifying a stack or, two words, a code (a
 * function); the tool hashes and compares them and knows nothing else of them.
 * Lookups and additions never lock or block; ids start at 1; 0 means not
 * found, or not added because a table is full (counted in the JSON). */
#define OMPTPY_STACK_MAX_KEY 1024
typedef struct omptpy_stack_frame {
  uint32_t code; /* a code id */
  int32_t line;  /* 0: unknown */
} omptpy_stack_frame;

uint32_t omptpy_stack_find(const uint64_t *key, uint32_t nkey);
/* frames innermost first; truncated: the stack went deeper than the frames kept;
 * native: return addresses of native frames, innermost first. */
uint32_t omptpy_stack_add(const uint64_t *key, uint32_t nkey, const omptpy_stack_frame *frames,
                          uint32_t nframes, bool truncated, const uint64_t *native,
                          uint32_t nnative);
uint32_t omptpy_code_find(const uint64_t key[2]);
/* file and name: UTF-8, not NUL-terminated. */
uint32_t omptpy_code_add(const uint64_t key[2], const char *file, size_t file_len,
                         const char *name, size_t name_len, int32_t first_line);
/* The interpreter's description (a JSON value, copied), given with the
 * tables; 0 or -ENOMEM. */
int omptpy_stacks_describe(const char *json);
/* The codes and stacks from these ids on, as JSON (free() it; NULL: out of
 * memory): {"interpreter" (omptpy_stacks_describe, or null), "codes_from",
 * "codes": [[file, name, first line]...], "stacks_from", "stacks": [[truncated,
 * code, line, code, line..., [native return address...]]...] (frames outermost
 * first; the list of native frames only when there are some), "codes_refused",
 * "stacks_refused"}. */
char *omptpy_stacks(uint32_t codes_from, uint32_t stacks_from);

#endif /* OMPTPY_API_H */
