/*
 * Internal header shared by every C file of the tool (not installed).
 *
 * Layers: clock.c (time stamps), buffer.c (per-thread chunk buffers: the
 * thread registry and the copying rings), zerocopy.c (the zero-copy memory
 * sink's regions), drainer.c (the drain passes and the drainer thread),
 * sink.c (where drained records go: memory or a file), meta.c (JSON
 * descriptions of the process and the counters), config.c (environment
 * variables), tool.c (ompt_start_tool, initialize, finalize, registration,
 * the public omptpy_* API), callbacks.c (one handler per OMPT event),
 * device.c (device tracing: the device's entry points, its buffers),
 * sampler.c (state samples), tap.c (the Python handlers' queue), native.c
 * (native handlers), region.c (region markers), mpi.c (MPI calls and clock
 * measurements), stacks.c (interpreter call
 * stacks, through the extension's hooks), profile.c (profile mode: per-thread
 * aggregates instead of records).  Internal functions return 0
 * or a negative errno-style code; only the Python module raises.
 */
#ifndef OMPTPY_INTERNAL_H
#define OMPTPY_INTERNAL_H

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "omptpy.h"
#include "omptpy_api.h"
#include "omptpy_file.h"
#include "omptpy_ompt.h"

#define OMPTPY_API __attribute__((visibility("default")))

/* Everything declared below is internal to libomptpy.so: hidden visibility
 * lets the hot path reach globals without a GOT load. */
#pragma GCC visibility push(hidden)
#define OMPTPY_LIKELY(x) __builtin_expect(!!(x), 1)
#define OMPTPY_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define OMPTPY_CACHELINE 64

/* ---- configuration (config.c) ------------------------------------------ */

/* What a thread does when its buffer is full (the drainer fell behind). */
typedef enum omptpy_overflow {
  OMPTPY_OVERFLOW_FLUSH = 0, /* move its own full chunks to the sink, then go on */
  OMPTPY_OVERFLOW_DROP = 1,  /* count the record as dropped and go on */
  OMPTPY_OVERFLOW_GROW = 2   /* allocate more chunks */
} omptpy_overflow;

typedef enum omptpy_clock_kind { OMPTPY_CLOCK_TSC = 0, OMPTPY_CLOCK_MONOTONIC = 1 } omptpy_clock_kind;

typedef struct omptpy_config {
  bool enabled;           /* OMPTPY_TOOL */
  int record;             /* OMPTPY_RECORD: 1 on, 0 off, -1 unset (sink decides) */
  size_t buffer_bytes;    /* OMPTPY_BUFFER_SIZE: per-thread bound */
  size_t reserve_bytes;   /* OMPTPY_RESERVE: trace storage provisioned before recording */
  size_t file_region_bytes; /* the in-place file route: each REGION block (from the reserve) */
  omptpy_overflow overflow;
  int clock;              /* OMPTPY_CLOCK: -1 auto, else omptpy_clock_kind */
  unsigned drain_ms;      /* OMPTPY_DRAIN_MS: longest sleep of the drainer */
  bool populate_ahead;    /* the drainer makes the file's next region resident
                           * (OMPTPY_TEST_POPULATE_AHEAD=off: never, a writer always does) */
  unsigned sample_hz;     /* OMPTPY_SAMPLE_HZ: state samples per second and thread, 0 off */
  int sample_signal;      /* OMPTPY_SAMPLE_SIGNAL: the signal the sampling timers send */
  char sample_error[160]; /* why the sampler is not armed ("" if it is, or is off) */
  bool zero_copy;         /* OMPTPY_ZERO_COPY: the memory sink may write in place */
  bool place_info;        /* OMPTPY_PLACE_INFO: processor and place at implicit task begin */
  size_t handler_queue_bytes; /* OMPTPY_HANDLER_QUEUE: bound of the Python handlers' queue */
  bool device_trace;          /* OMPTPY_DEVICE_TRACE: start device tracing where offered */
  size_t device_buffer_bytes; /* OMPTPY_DEVICE_BUFFER: one device trace buffer */
  size_t device_memory_bytes; /* OMPTPY_DEVICE_MEMORY: bound of the device buffers' pool */
  bool profile;           /* OMPTPY_PROFILE: aggregates per thread instead of records */
  uint32_t profile_entries; /* OMPTPY_PROFILE_ENTRIES: aggregates per thread slot */
  double skew_offset_ns;  /* OMPTPY_TEST_CLOCK_SKEW (tests only): this rank's clock offset */
  double skew_ppm;        /* and drift, parts per million (clock.c) */
  char output[4096];      /* OMPTPY_OUTPUT: directory of the file sink, "" for memory */
  char error[512];        /* why the configuration was refused, "" if valid */
} omptpy_config;

int omptpy_config_read(omptpy_config *cfg);
/* The job rank from the launcher's variables (Open MPI, MPICH, PMIx, Slurm); -1 if none. */
int omptpy_job_rank(void);
/* The node-local rank (Open MPI, MPICH, Slurm); -1 if none. */
int omptpy_job_local_rank(void);
/* The job's id into out ("" if none): PMIx's namespace, Open MPI's job id,
 * else "slurm:JOB.STEP", so that the parts of two jobs are told apart. */
void omptpy_job_id(char *out, size_t size);
/* MemAvailable of /proc/meminfo in bytes, 0 when unknown. */
size_t omptpy_mem_available(void);
/* Whether `bytes` more may be committed without risking the OOM killer: at
 * most three quarters of MemAvailable (the program needs memory too). */
bool omptpy_mem_fits(size_t bytes);

/* ---- clock (clock.c; the conversion of ticks is in omptpy_api.h) ---------- */

extern omptpy_clock_kind omptpy_clock_kind_used;
/* CLOCK_MONOTONIC, for timeouts and rates (never skewed). */
uint64_t omptpy_monotonic_ns(void);
/* The times a trace holds (clock anchors, records on the monotonic clock, MPI
 * clock measurements): CLOCK_MONOTONIC, skewed under OMPTPY_TEST_CLOCK_SKEW. */
uint64_t omptpy_trace_ns(void);
uint64_t omptpy_realtime_ns(void); /* CLOCK_REALTIME, for the wall-clock time of a trace */
static inline struct timespec omptpy_timespec(uint64_t ns) {
  return (struct timespec){(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
}
/* The clock kind, and the test skew (OMPTPY_TEST_CLOCK_SKEW) from cfg. */
void omptpy_clock_init(const omptpy_config *cfg);
omptpy_anchor omptpy_clock_anchor(void);
/* A coarse tick length from `a` (the start anchor), for traces cut short
 * before a second anchor was written. */
double omptpy_clock_estimate(omptpy_anchor a);
const char *omptpy_clock_name(void);

static inline uint64_t omptpy_now(void) {
#if defined(__x86_64__) || defined(__i386__)
  if (OMPTPY_LIKELY(omptpy_clock_kind_used == OMPTPY_CLOCK_TSC)) {
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
  }
#endif
  return omptpy_trace_ns();
}

/* ---- buffers (buffer.c) ------------------------------------------------- */

#define OMPTPY_CHUNK_RECORDS 1024u /* 64 KiB of records per chunk */
#define OMPTPY_CHUNK_BYTES ((size_t)OMPTPY_CHUNK_RECORDS * sizeof(omptpy_record))

struct omptpy_thread;
struct omptpy_region;

/* A chunk's descriptor: its records live elsewhere (a thread's arena, or the
 * memory sink's region in zero-copy mode), so the records of a region form
 * one plain array.  One cache line each: the writer stores n after every
 * record, and neighbouring descriptors belong to other threads. */
typedef struct omptpy_chunk {
  _Alignas(OMPTPY_CACHELINE) _Atomic uint32_t n; /* records written; stored with release */
  uint32_t taken;                /* records already given to the tap/sink (drainer only) */
  omptpy_record *recs;           /* OMPTPY_CHUNK_RECORDS records */
  /* zero-copy: the thread it was leased to, stored last (release) when the
   * chunk is set up */
  _Atomic(struct omptpy_thread *) owner;
  struct omptpy_region *region;  /* zero-copy: the region it was carved from, else NULL */
  bool retired;                  /* zero-copy: its thread ended, n is final */
  /* zero-copy: its writer left it with one record free (a pair would not
   * fit): n is final, the chunk is done as a full one is.  Stored before
   * the writer's next release store of a count. */
  _Atomic bool closed;
  /* in-place file route: the owner's thread index + 1, stored before owner
   * (the file's REGION descriptor, OMPTPY_DESC_THREAD_OFFSET) */
  uint32_t thread;
} omptpy_chunk;
_Static_assert(offsetof(omptpy_chunk, thread) == OMPTPY_DESC_THREAD_OFFSET,
               "the thread index of a descriptor is where the raw file says");

/* Single-producer single-consumer ring of chunk pointers. */
typedef struct omptpy_ring {
  _Alignas(OMPTPY_CACHELINE) _Atomic uint32_t head; /* producer */
  _Alignas(OMPTPY_CACHELINE) _Atomic uint32_t tail; /* consumer */
  uint32_t mask;
  omptpy_chunk **slots;
} omptpy_ring;

enum { OMPTPY_THREAD_FREE = 0, OMPTPY_THREAD_LIVE = 1, OMPTPY_THREAD_ENDED = 2 };

/* Frames of suspended tasks a thread keeps for samples; deeper ones are not
 * kept (samples then have no frame once they resume). */
#define OMPTPY_SUSPENDED_MAX 16

/* A parallel region a thread began and has not ended (callbacks.c). */
typedef struct omptpy_begun {
  uint64_t encountering; /* the encountering task's id, looked for at parallel_end */
  uint64_t parallel_id;
  uint64_t run_task, run_parallel; /* the encountering task's, for samples after the end */
} omptpy_begun;

typedef struct omptpy_thread {
  /* Written by the owning thread on the hot path. */
  _Alignas(OMPTPY_CACHELINE) omptpy_chunk *cur; /* chunk being filled, NULL if none */
  omptpy_record *recs;                          /* cur->recs */
  uint32_t pos;                                 /* == cur->n */
  /* Records may be written while pos < limit: OMPTPY_CHUNK_RECORDS, or 0 when
   * take() quiesces the thread (zero-copy memory sink) or it has no chunk. */
  _Atomic uint32_t limit;
  uint32_t index;                               /* the tool's thread index */
  uint64_t next_id;                             /* per-thread id counter */
  _Atomic uint64_t handed;                      /* records in chunks handed over */
  _Atomic uint64_t dropped;                     /* records lost to overflow */
  _Atomic(omptpy_chunk *) cur_pub;              /* cur, for the drainer's partial reads */
  omptpy_ring full;                             /* writer -> drainer */
  omptpy_ring free;                             /* drainer -> writer */
  /* Drainer side. */
  _Alignas(OMPTPY_CACHELINE) _Atomic int state;
  _Atomic uint32_t nchunks; /* chunks this thread owns */
  omptpy_chunk *arena;      /* copying mode: the slot's chunk descriptors, reused across threads */
  omptpy_record *arena_recs; /* and their pre-faulted records */
  uint64_t cur_epoch;        /* zero-copy: epoch of the region cur was carved from */
  /* Sampling (sampler.c). */
  /* Inside a callback or the sampling handler: a sample now would race it, and
   * take() waits for it to drop to 0 (stored with release). */
  _Atomic int in_tool;
  /* Written by the sampling handler, read by the drainer (stats). */
  _Atomic uint64_t samples_skipped;
  uint64_t sample_index; /* the period of the last sample (periods since the clock's 0) */
  timer_t timers[2];      /* taking turns, see sampler.c */
  bool has_timer;
  uint64_t drained; /* records moved to the sink */
  /* The ledger (ledger.c): the thread's entry (NULL: none), the slot's number,
   * whether the arena's descriptors are in the file. */
  omptpy_ledger_thread *led;
  uint32_t slot_no;
  bool arena_shared;
  uint64_t nobuf; /* records lost because the slot has no buffer (no memory for it) */
  /* stacks.c: the last encountering task found inside a parallel region (task
   * ids are never reused): its next tasks need no question to the runtime. */
  uint64_t inner_task;
  /* callbacks.c: the parallel regions this thread began and has not ended,
   * innermost last; the array is kept when the slot is reused. */
  omptpy_begun *begun;
  uint32_t nbegun, capbegun;
  /* What the thread runs now, as its own callbacks said (kept only while
   * sampling): the sampling handler reads these, never the runtime's objects.
   * run_frame is the running task's frame, cleared before that task can end
   * or be freed (NULL: none that is sure to be alive). */
  _Atomic uint64_t run_task, run_parallel;
  _Atomic(const ompt_frame_t *) run_frame;
  uint64_t barrier_task; /* the implicit task whose region-end barrier the thread is in, else 0 */
  bool run_untied;       /* the running task is untied: another thread may resume it */
  /* Tied tasks suspended on this thread (a task scheduling point ran another
   * task), with their frames, innermost last: taken back when they resume. */
  struct {
    const ompt_data_t *task;
    const ompt_frame_t *frame;
  } suspended[OMPTPY_SUSPENDED_MAX];
  uint32_t nsuspended;
  struct omptpy_profile *prof; /* profile.c: the slot's tables (profile mode), NULL otherwise */
  int type;         /* ompt_thread_t */
  bool self_detach; /* no thread_end will come: the slot is given back at thread exit */
  int runtime;      /* runtime instance that began the thread */
  pid_t tid;
  struct omptpy_thread *all_next; /* registry, push-only */
} omptpy_thread;

extern _Thread_local omptpy_thread *omptpy_tls_thread
    __attribute__((tls_model("initial-exec")));

/* What buffer.c, zerocopy.c and drainer.c share (defined in buffer.c). */
typedef struct omptpy_buffers {
  _Atomic(omptpy_thread *) all; /* the registry of thread slots: push-only list */
  pthread_mutex_t lock;         /* registry claims, drainer start/stop */
  pthread_mutex_t drain_lock;   /* held by the single consumer (drainer.c) */
  /* Set under drain_lock when the handlers' queue took only part of a range
   * (its consumer drains with block=True and found it full): the rest stays
   * for a later pass. */
  bool drain_stalled;
  bool zc; /* the zero-copy memory sink (zerocopy.c), else the copying rings */
  bool ready;
} omptpy_buffers;

extern omptpy_buffers omptpy_buf;

int omptpy_buffers_init(const omptpy_config *cfg);
omptpy_thread *omptpy_thread_attach(int type, int runtime);
/* A thread the runtime never announced and never will (a runtime's helper
 * that hands device buffers back): a slot of that type, given back when the
 * thread exits. */
omptpy_thread *omptpy_thread_adopt(int type);
void omptpy_thread_detach(omptpy_thread *t);
omptpy_record *omptpy_slot_slow(omptpy_thread *t);
omptpy_record *omptpy_slot2_slow(omptpy_thread *t);
/* Copying buffers, under drain_lock: moves t's full chunks (and, if partial,
 * the one being filled) to the handlers' tap and the sink, and hands them
 * back; returns the number of full chunks seen. */
uint32_t omptpy_drain_thread(omptpy_thread *t, bool partial);
/* Under drain_lock: an ended thread, drained whole, its counters kept, its
 * slot free for a later thread (or left for a later pass if it stalled). */
void omptpy_thread_retire(omptpy_thread *t);
void omptpy_buffers_after_fork_child(void);
void omptpy_buffers_atfork_prepare(void);
void omptpy_buffers_atfork_parent(void);
/* Calls fn for each thread whose counters are of interest, under the drain lock. */
typedef void (*omptpy_thread_visit)(void *ctx, uint32_t index, int type, int runtime, pid_t tid,
                                    uint64_t written, uint64_t dropped, uint64_t samples_skipped,
                                    uint64_t nobuf, bool live);
void omptpy_visit_threads(omptpy_thread_visit fn, void *ctx);
/* Memory mapped for per-thread buffers: one arena per thread slot ever needed
 * at once (slots are reused by later threads). */
size_t omptpy_buffer_bytes(void);
/* The index the next thread will get (an exec's successor goes on from it). */
uint32_t omptpy_next_thread_index(void);

static inline omptpy_thread *omptpy_self(void) {
  omptpy_thread *t = omptpy_tls_thread;
  if (OMPTPY_UNLIKELY(t == NULL)) t = omptpy_thread_attach(ompt_thread_unknown, 0);
  return t;
}

/* A slot for one record, or NULL when it has to be dropped. */
static inline omptpy_record *omptpy_slot(omptpy_thread *t) {
  if (OMPTPY_LIKELY(t->pos < atomic_load_explicit(&t->limit, memory_order_relaxed)))
    return &t->recs[t->pos];
  return omptpy_slot_slow(t);
}

/* Two adjacent slots in one chunk, for a record and its `more` (written
 * with omptpy_commit2), or NULL when the pair has to be dropped (counted 2). */
static inline omptpy_record *omptpy_slot2(omptpy_thread *t) {
  if (OMPTPY_LIKELY(t->pos + 2 <= atomic_load_explicit(&t->limit, memory_order_relaxed)))
    return &t->recs[t->pos];
  return omptpy_slot2_slow(t);
}

/* Around every write of a record (callbacks, sampler): take() waits for
 * in_tool == 0.  The entry store needs no fence: take() runs membarrier()
 * between lowering the limits and reading in_tool. */
static inline void omptpy_enter(omptpy_thread *t) {
  atomic_store_explicit(&t->in_tool, 1, memory_order_relaxed);
  atomic_signal_fence(memory_order_seq_cst);
}

static inline void omptpy_leave(omptpy_thread *t) {
  atomic_signal_fence(memory_order_seq_cst);
  atomic_store_explicit(&t->in_tool, 0, memory_order_release);
}

/* Writes every field of a record (callbacks, sampler): chunks are reused,
 * nothing stale may remain. */
static inline void omptpy_fill(omptpy_record *r, const omptpy_thread *t, int event, int endpoint,
                               int kind, uint64_t codeptr, uint64_t parallel_id, uint64_t task_id,
                               uint64_t u64a, uint64_t u64b, uint32_t u32a, uint32_t u32b) {
  r->time = omptpy_now();
  r->codeptr = codeptr;
  r->parallel_id = parallel_id;
  r->task_id = task_id;
  r->u64a = u64a;
  r->u64b = u64b;
  r->thread = t->index;
  r->event = (uint16_t)event;
  r->endpoint = (uint8_t)endpoint;
  r->kind = (uint8_t)kind;
  r->u32a = u32a;
  r->u32b = u32b;
}

static inline void omptpy_commit(omptpy_thread *t) {
  t->pos++;
  atomic_store_explicit(&t->cur->n, t->pos, memory_order_release);
}

/* A pair is published by one store: a reader sees both records or neither. */
static inline void omptpy_commit2(omptpy_thread *t) {
  t->pos += 2;
  atomic_store_explicit(&t->cur->n, t->pos, memory_order_release);
}

/* The `more` record of the primary at r[0], in r[1]: time, thread, the
 * primary's event number in kind (unless the caller sets another). */
static inline void omptpy_fill_more(omptpy_record *r, int kind, uint64_t codeptr,
                                    uint64_t parallel_id, uint64_t task_id, uint64_t u64a,
                                    uint64_t u64b, uint32_t u32a, uint32_t u32b) {
  omptpy_record *m = r + 1;
  m->time = r->time;
  m->codeptr = codeptr;
  m->parallel_id = parallel_id;
  m->task_id = task_id;
  m->u64a = u64a;
  m->u64b = u64b;
  m->thread = r->thread;
  m->event = OMPTPY_EVENT_MORE;
  m->endpoint = 0;
  m->kind = (uint8_t)kind;
  m->u32a = u32a;
  m->u32b = u32b;
}

/* Ids unique in the process: the thread index above a per-thread counter. */
static inline uint64_t omptpy_new_id(omptpy_thread *t) {
  return ((uint64_t)(t->index + 1) << 40) | ++t->next_id;
}

/* ---- sampling (sampler.c) ------------------------------------------------ */

/* OMPTPY_SAMPLE_HZ is set and its handler installed: the callbacks keep what
 * samples read (run_* above). */
extern bool omptpy_sampling;
int omptpy_sampler_init(omptpy_config *cfg); /* on failure: cfg->sample_error */
void omptpy_sampler_thread_start(omptpy_thread *t);
void omptpy_sampler_thread_stop(omptpy_thread *t);

/* ---- sink (sink.c) ------------------------------------------------------ */

int omptpy_sink_open(const omptpy_config *cfg);
/* Creates this process's file now (the file sink; under no drain-side lock
 * but the registry's): whether it is there. */
bool omptpy_sink_file_open(void);
/* The file's path, "" before it is created. */
const char *omptpy_sink_path(void);
/* Appends a LEDGER block of `bytes` of data and maps the data (at `at` if not
 * NULL); NULL if it cannot.  _locked: the caller holds the file lock (the
 * ledger's first block, from the file's creation). */
void *omptpy_sink_ledger_block(uint32_t kind, uint32_t slot, size_t bytes, void *at);
void *omptpy_sink_ledger_block_locked(uint32_t kind, uint32_t slot, size_t bytes, void *at);
void omptpy_sink_atfork_prepare(void);
void omptpy_sink_atfork_parent(void);
/* Provisions the OMPTPY_RESERVE memory, if any, before a recording starts. */
void omptpy_sink_prepare(void);
/* Appends n records (one thread's, in order); returns n, or 0 when they could
 * not be stored (counted as the sink's loss).  Called under the drain lock. */
size_t omptpy_sink_write(const omptpy_record *recs, size_t n);
/* A JSON document written to the file sink (stats or stacks block), once records
 * opened the file: whether it was written. */
bool omptpy_sink_json(int block_type, const char *json, size_t len);
bool omptpy_sink_is_file(void);
/* Records that reached the sink but could not be stored (memory or disk full). */
uint64_t omptpy_sink_lost(void);
void omptpy_sink_after_fork_child(void);
/* A REGION block of the file (the in-place route, zerocopy.c): one shared
 * mapping of its descriptors (desc_bytes, page-rounded) and then its data. */
typedef struct omptpy_file_span {
  void *map;
  size_t map_bytes;
  size_t desc_bytes;
  uint64_t data_at; /* the file offset of the data */
} omptpy_file_span;
/* Appends a REGION block of nchunks chunks, allocated, and maps it: 0 or -errno. */
int omptpy_sink_region_block(uint32_t nchunks, omptpy_file_span *out);
/* Gives the file's blocks of that span back (a hole reads as zeros). */
void omptpy_sink_release(uint64_t at, uint64_t bytes);
/* Memory sink: hands the records gathered so far to the caller. */
typedef struct omptpy_block {
  void *base;
  size_t bytes;  /* mapped */
  size_t nrecs;  /* used */
} omptpy_block;
omptpy_block omptpy_sink_take(void);
/* sink.c's reservation of a large NORESERVE huge-page range. */
void *omptpy_sink_reserve(size_t *bytes);
void omptpy_block_free(omptpy_block b);

/* ---- zero-copy memory sink (zerocopy.c) ---------------------------------- */

/* Records are written in place into a region the sink hands over whole.
 * Whether the memory sink can work so (then its first region is made). */
bool omptpy_zc_init(const omptpy_config *cfg);
bool omptpy_zero_copy(void);
omptpy_record *omptpy_zc_slot_slow(omptpy_thread *t);
omptpy_block omptpy_zc_take(void);
/* Populates that many bytes of the region (OMPTPY_RESERVE). */
void omptpy_zc_prepare(size_t bytes);
/* Under drain_lock: a pass over the region's chunks, full ones (and, if
 * partial, those being filled) to the tap and counted; returns the number of
 * full chunks. */
uint32_t omptpy_zc_drain(bool partial);
/* Under drain_lock: an ended thread's chunks are finished. */
void omptpy_zc_retire(omptpy_thread *t);
/* Under drain_lock: the sink window opened or closed at `now` (ticks). */
void omptpy_zc_set_window(bool open, uint64_t now);
/* The drainer: populates ahead of the leases, and makes the file's next region
 * and a step of it resident; whether that region has more steps to go. */
bool omptpy_zc_populate_ahead(void);
/* Whether the file's next region is due and not yet wholly resident. */
bool omptpy_zc_next_wanted(void);
void omptpy_zc_after_fork_child(void);
/* The in-place file route (the file sink's zero-copy regions): its first
 * region (a thread attaches), its end (finalize) and its writers' stalls. */
void omptpy_zc_file_start(void);
void omptpy_zc_file_finish(void);
void omptpy_zc_file_stats(uint64_t *stalls, uint64_t *stall_ns);
/* A record lost for want of room: the thread's count and its ledger entry. */
void omptpy_count_dropped(omptpy_thread *t);
/* A record the in-place route had no file for (its region could not be made:
 * the ledger's sink_errno says why): the sink's loss. */
void omptpy_count_sink_lost(omptpy_thread *t);
void omptpy_zc_file_lost_add(uint64_t n);
uint64_t omptpy_zc_file_lost(void);

/* ---- the ledger (ledger.c; the format in omptpy_file.h) --------------------- */

/* Reads OMPTPY_EXEC_FROM (before the buffers: their indices start at its base). */
void omptpy_ledger_init(uint32_t max_chunks);
uint32_t omptpy_ledger_base(void);
const char *omptpy_ledger_exec_from(void); /* "" when this image is no exec's successor */
bool omptpy_ledger_on(void);
/* sink.c: the file was just created. */
void omptpy_ledger_open(void);
/* The chunk descriptors of a new slot, in the file; NULL if they cannot be. */
omptpy_chunk *omptpy_ledger_slot(uint32_t slot);
/* Thread index's entry, NULL without a ledger or beyond its capacity (counted
 * as unaccounted).  Under the registry lock. */
omptpy_ledger_thread *omptpy_ledger_thread_entry(uint32_t index);
void omptpy_ledger_end(int how); /* OMPTPY_END_* */
void omptpy_ledger_end_exit(void); /* OMPTPY_END_EXIT unless an ending is recorded */
void omptpy_ledger_sink_failed(int err);
/* The in-place route (zerocopy.c) writes into the file; the sink's window,
 * open or not, from `from` (ticks). */
void omptpy_ledger_in_place(bool open, uint64_t from);
void omptpy_ledger_window(bool open, uint64_t now);
void omptpy_ledger_after_fork_child(void);

/* ---- draining (drainer.c) ----------------------------------------------- */

/* Futex words: the drainer's wake-up word, and the handlers' queue's (tap.c). */
static inline void omptpy_futex_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Sleeps while *word == seen, at most ns nanoseconds. */
static inline void omptpy_futex_wait(_Atomic uint32_t *word, uint32_t seen, uint64_t ns) {
  struct timespec ts = omptpy_timespec(ns);
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

void omptpy_drainer_init(const omptpy_config *cfg);
int omptpy_drainer_start(void);
void omptpy_drainer_stop(void);
/* A writer running low on room wakes the drainer early. */
void omptpy_drainer_wake(void);
void omptpy_drainer_after_fork_child(void);
/* Drains every thread, partial chunks included, into the sink. */
void omptpy_flush(void);
/* omptpy_flush unless another thread is draining now (then false). */
bool omptpy_flush_try(void);
/* The sink keeps the records stamped while it is open: opening drains what was
 * written before; closing takes effect for records stamped after it. */
void omptpy_sink_window(bool open);
/* Under drain_lock: writes the records of r[0..n) (one thread's, in order)
 * stamped inside the sink window to the sink; returns how many, and adds
 * those the sink could not store to *lost. */
size_t omptpy_to_sink(const omptpy_record *r, size_t n, uint64_t *lost);
/* omptpy_flush, waiting at most `ns` for the drain lock (false: not done). */
bool omptpy_flush_within(uint64_t ns);

/* ---- tool state (tool.c) ------------------------------------------------ */

#define OMPTPY_MAX_EVENTS 64
#define OMPTPY_MAX_RUNTIMES 8

typedef struct omptpy_runtime {
  ompt_start_tool_result_t result;
  unsigned int omp_version;
  char version[256];
  char path[1024];
  /* Set under tool.c's control lock, read without it (meta.c, the drainer's
   * stats): stored with release after everything they publish. */
  _Atomic int initialized;
  _Atomic int finalized;
  uint64_t registered; /* events whose callbacks are registered (callbacks.c) */
  /* Entry points, looked up once at initialize. */
  ompt_set_callback_t set_callback;
  ompt_enumerate_states_t enumerate_states;
  ompt_enumerate_mutex_impls_t enumerate_mutex_impls;
  ompt_get_num_procs_t get_num_procs;
  ompt_get_num_places_t get_num_places;
  ompt_get_place_proc_ids_t get_place_proc_ids;
  ompt_get_num_devices_t get_num_devices;
  ompt_get_state_t get_state;
  ompt_get_parallel_info_t get_parallel_info;
  ompt_get_task_info_t get_task_info;
  ompt_get_proc_id_t get_proc_id;
  ompt_get_place_num_t get_place_num;
  int levels[OMPTPY_MAX_EVENTS]; /* ompt_set_result_t per callback, -1 not asked */
} omptpy_runtime;

typedef struct omptpy_tool {
  omptpy_config cfg;
  /* Records are written (the flag every callback tests): the trace sink, a
   * Python handler or a native handler wants them (omptpy_consumers_changed). */
  _Atomic int recording;
  /* The OMPT events (bit = callback number) whose records are wanted; the
   * callbacks of the others may stay registered (callbacks.c) and return. */
  _Atomic uint64_t wanted;
  _Atomic int sink_on; /* the sink keeps records: trace window, OMPTPY_RECORD, control_tool */
  _Atomic int nruntimes;
  omptpy_runtime runtimes[OMPTPY_MAX_RUNTIMES];
  omptpy_anchor start_anchor;
  double tick_ns_estimate;
  uint64_t start_realtime_ns;
  int start_tool_calls;
  int declined; /* 1 switched off, 2 invalid configuration, 3 too many runtimes */
} omptpy_tool;

extern omptpy_tool omptpy_g;

static inline bool omptpy_recording(void) {
  return atomic_load_explicit(&omptpy_g.recording, memory_order_relaxed) != 0;
}

/* ---- callbacks (callbacks.c) -------------------------------------------- */

void omptpy_register_callbacks(omptpy_runtime *rt);
/* Registers the handlers of the OMPT events in `events` (bit = callback
 * number) that are not registered yet (see callbacks.c); which records are
 * kept is omptpy_g.wanted, set by the tool with it. */
void omptpy_callbacks_enable(omptpy_runtime *rt, uint64_t events);
/* Records one of ompt-py's own events (region markers) on the calling thread;
 * stack: with the thread's stack id in u64b. */
void omptpy_emit_own(int event, int endpoint, uint64_t codeptr, uint64_t u64a, bool stack);
/* Records one of ompt-py's own events that spans a time: begun at `begin`
 * (ticks, the record's time), ending now (u64b); endpoint beginend. */
void omptpy_emit_span(int event, int kind, uint64_t codeptr, uint64_t begin, uint64_t u64a,
                      uint32_t u32a, uint32_t u32b);
/* omp_control_tool, from the runtime or from ompt_py.control. */
int omptpy_control(uint64_t command, uint64_t modifier, void *arg, const void *codeptr);
/* Opens or closes the trace sink (tool.c). */
void omptpy_recording_set(int on);
/* Re-derives which callbacks are registered and whether records are written,
 * after the sink, the handlers' tap or the native handlers changed (tool.c). */
void omptpy_consumers_changed(void);
const char *omptpy_event_name(int event);

/* ---- metadata (meta.c) --------------------------------------------------- */

typedef struct omptpy_str {
  char *p;
  size_t len, cap;
} omptpy_str;
void omptpy_str_free(omptpy_str *s);
/* Appends to s: printf-formatted text, or a JSON string literal of n bytes.
 * 0 or -ENOMEM. */
int omptpy_put(omptpy_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int omptpy_put_string(omptpy_str *s, const char *v, size_t n);
/* Both return 0, or -ENOMEM with s emptied. */
int omptpy_meta_json(omptpy_str *s);
int omptpy_stats_json(omptpy_str *s, bool final);
void omptpy_meta_atfork_prepare(void);
void omptpy_meta_atfork_parent(void);
void omptpy_meta_after_fork_child(void);
/* mpi.c: the MPI document of STATS (",\"mpi\":{...}"; nothing before MPI told
 * anything), 0 or -ENOMEM. */
int omptpy_mpi_json(omptpy_str *s);
void omptpy_mpi_after_fork_child(void);
/* What the inquiry functions of each initialised runtime answer now. */
int omptpy_runtime_info_json(omptpy_str *s);

/* ---- profile mode (profile.c; the block format in omptpy_file.h) ------------------- */

/* OMPTPY_PROFILE=on: the handlers of profile.c replace the recording ones of
 * the events they aggregate (omptpy_profile_handler), and no record is written
 * for the sink. */
extern bool omptpy_profiling;
void omptpy_profile_init(const omptpy_config *cfg);
/* The profile handler of an OMPT event, NULL when profile mode has none. */
ompt_callback_t omptpy_profile_handler(int event);
/* The events profile mode registers (bit = callback number). */
uint64_t omptpy_profile_events(void);
/* At thread attach (buffer.c): the slot's tables made on its first thread (mmap), the
 * thread's own nesting state reset. */
void omptpy_profile_thread_start(omptpy_thread *t);
/* Every slot's PROFILE block (header and payload, as in the file) appended to s;
 * 0 or -ENOMEM. */
int omptpy_profile_blocks(omptpy_str *s);
/* The file sink: the PROFILE blocks written (at the end). */
void omptpy_profile_to_sink(void);
/* Threads whose tables could not be mapped (their events are not counted anywhere else). */
uint64_t omptpy_profile_unmapped(void);

/* ---- device tracing (device.c) ------------------------------------------- */

/* At device_initialize: the device's entry points, and tracing started where
 * offered (any thread; not under the tool's control lock). */
void omptpy_device_initialize(int device_num, const char *type, ompt_device_t *device,
                              ompt_function_lookup_t lookup);
/* Flushes and stops the device's tracing (device_finalize). */
void omptpy_device_finalize(int device_num);
/* ompt_flush_trace on every traced device, then a clock pair each; call it
 * before omptpy_flush and under no drain-side lock: the runtime may hand
 * buffers back on another thread and wait for it. */
void omptpy_devices_flush(void);
/* Flushes and stops every traced device, then releases the buffers (the tool
 * goes away: finalize, exit). */
void omptpy_devices_stop(void);
void omptpy_devices_after_fork_child(void);
/* The devices initialised (those of one runtime, or all for -1) as a JSON list. */
int omptpy_devices_json(omptpy_str *s, int runtime);

/* ---- scripting callbacks (tap.c, native.c, region.c) ---------------------- */

/* Called with every range of records drained (one thread's), under the drain lock.  Returns
 * how many it took: n, except for the handlers' consumer draining with
 * block=True into a full queue (the rest must stay in the buffer). */
size_t omptpy_tap_push(const omptpy_record *recs, size_t n);
bool omptpy_tap_active(void);
uint64_t omptpy_tap_events(void); /* OMPT callbacks the handlers' filters want */
/* At finalize or unload: a full queue no longer makes anyone wait. */
void omptpy_tap_shutdown(void);
void omptpy_tap_after_fork_child(void);

extern _Atomic uint32_t omptpy_native_count;
void omptpy_native_run(const omptpy_record *r);
uint64_t omptpy_native_events(void); /* OMPT callbacks the native handlers want */
void omptpy_native_after_fork_child(void);

/* Right after a record is written on the hot path: one load and one branch
 * while no native handler is installed. */
static inline void omptpy_native_after(const omptpy_record *r) {
  if (OMPTPY_UNLIKELY(atomic_load_explicit(&omptpy_native_count, memory_order_relaxed)))
    omptpy_native_run(r);
}

/* ---- interpreter call stacks (stacks.c) ----------------------------------- */

/* The hooks the extension installed (NULL: no capture): loaded with one relaxed
 * load on the hot path. */
extern _Atomic(const omptpy_stack_hooks *) omptpy_stack_hooks_now;

/* The calling thread's stack id for a record (0: none), outside the hot path's
 * inline code; codeptr: the construct's return address, above which the native
 * frames are (omptpy_stacks_set_native). */
uint32_t omptpy_stack_capture(const omptpy_stack_hooks *h, omptpy_thread *t, uint64_t gate,
                              uint64_t codeptr);

/* gate: 0, or the id of the encountering task, for a capture only when it is an
 * initial task (outside every parallel region). */
static inline uint32_t omptpy_stack_id(omptpy_thread *t, uint64_t gate, uint64_t codeptr) {
  const omptpy_stack_hooks *h = atomic_load_explicit(&omptpy_stack_hooks_now, memory_order_relaxed);
  return OMPTPY_UNLIKELY(h != NULL) && (!gate || gate != t->inner_task)
             ? omptpy_stack_capture(h, t, gate, codeptr)
             : 0;
}

/* New codes and stacks since *codes_from / *stacks_from (updated) as a JSON
 * document; 0 or -ENOMEM. */
int omptpy_stacks_json(omptpy_str *s, uint32_t *codes_from, uint32_t *stacks_from);
/* Under the drain lock: a STACKS block of what was added since the last one, if anything was
 * (file sink). */
void omptpy_stacks_to_sink(void);
void omptpy_stacks_after_fork_child(void);

#define OMPTPY_REGION_MAX_NAMES 16384
uint64_t omptpy_region_unnamed(void); /* markers past the name limit */
/* Error messages share the table of region names, each cut to its first
 * OMPTPY_MESSAGE_MAX bytes (the record keeps the full length). */
#define OMPTPY_MESSAGE_MAX 512
/* The id of an error message's text (0: none, or the table is full). */
uint64_t omptpy_intern_message(const char *message, size_t length);
uint64_t omptpy_messages_unkept(void); /* error messages past the table's limit */
void omptpy_region_after_fork_child(void);

#pragma GCC visibility pop

#endif /* OMPTPY_INTERNAL_H */
