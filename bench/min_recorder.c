/*
 * Minimal hand-written OMPT recorder: the reference that ompt-py's recording
 * cost is compared with.
 *
 * Registers the same callbacks as ompt-py and, in each, writes one 40-byte
 * record {rdtsc, id1, id2, codeptr-or-arg, event, thread} into a per-thread
 * buffer that is allocated and pre-faulted (MAP_POPULATE) at thread_begin and
 * large enough for the whole run (no wrap-around; records past the end are
 * counted as dropped).  The buffer is reached through an initial-exec TLS
 * pointer.  Ids stored into ompt_data_t come from a per-thread counter.
 *
 * Built with -DMINREC_NOOP, it registers the same callbacks and records
 * nothing (bench/apps.py's "noop tool"; its finalize line says events=0).
 *
 * Environment: MINREC_RECORDS = buffer capacity in records per thread
 * (default 16M, i.e. 640 MiB per thread).
 * At finalize it prints to stderr:
 *   minrec events=N written=W dropped=D threads=T registered=R
 *
 * MINREC_SINK (with MINREC_DIR, a directory) makes it write its records to a
 * file per thread instead, one design of a file route each, for
 * bench/file_route.py to compare with recording in memory (the default, `mem`):
 *   write     a 1024-record buffer, written with write() whenever it fills
 *             (ompt-py's file sink until issue 15, without its drainer);
 *   reserve   the MINREC_RECORDS buffer as in memory, written with write()
 *             when it fills and at finalize (reserve-and-flush, Score-P's way);
 *   map       the file itself, fallocate'd and mapped MAP_SHARED, made
 *             resident (MADV_POPULATE_WRITE) at thread_begin, written in place
 *             (the page cache outlives a killed process); truncated at finalize;
 *   consumer  a ring of 128 1024-record chunks that a consumer thread writes
 *             with write() while the program runs (a full ring drops).
 * Then finalize also prints `flush_ms=F flushes=K`: the time finalize (and the
 * flushes of a full reserve or mapping, K of them) spent writing.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "bench_ompt.h"

#define DEFAULT_RECORDS (16UL << 20)
#define MAX_THREADS 1024
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define INLINE static inline __attribute__((always_inline))

typedef struct record {
  uint64_t tsc;
  uint64_t id1;
  uint64_t id2;
  uint64_t arg; /* codeptr_ra or a callback argument */
  uint32_t event; /* callback | endpoint-or-status << 8 | kind << 16 */
  uint32_t thread;
} record_t;
_Static_assert(sizeof(record_t) == 40, "record must be 40 bytes");

typedef struct __attribute__((aligned(64))) thread_state {
  record_t *buf;
  uint64_t cap;     /* records may be written while written < cap */
  uint64_t written; /* owner thread writes, finalize reads (relaxed) */
  uint64_t dropped;
  uint64_t next_id;
  uint32_t tid;
  /* File sinks (slow path only). */
  int fd;
  uint64_t flushed;                 /* records moved out of buf (write, reserve, map) */
  uint64_t map_off;                 /* map: file offset of buf, in records */
  uint64_t head __attribute__((aligned(64))); /* consumer: chunks filled (release) */
  uint64_t tail __attribute__((aligned(64))); /* consumer: chunks written (release) */
} thread_state_t;

enum { SINK_MEM, SINK_WRITE, SINK_RESERVE, SINK_MAP, SINK_CONSUMER };
#define CHUNK 1024u
#define RING_CHUNKS 128u

static thread_state_t states[MAX_THREADS];
static uint32_t n_threads;
static uint64_t capacity = DEFAULT_RECORDS;
static int registered;
static int sink = SINK_MEM;
static const char *sink_dir;
static uint64_t flush_ns, flushes; /* under flush_lock */
#ifndef MINREC_NOOP
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
#endif
static pthread_t consumer;
static int consumer_run;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void write_recs(int fd, const record_t *r, uint64_t n) {
  const char *p = (const char *)r;
  size_t left = n * sizeof *r;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w <= 0) {
      perror("minrec: write");
      return;
    }
    p += w;
    left -= (size_t)w;
  }
}

#ifdef MINREC_NOOP
/* Built with -DMINREC_NOOP as noop_tool.so (bench/overhead.py, bench/apps.py): the same
 * callbacks registered, none records (no buffer, no clock, no id): what the
 * runtime's calls into a tool cost, apart from recording. */
INLINE thread_state_t *state(void) { return NULL; }

INLINE uint64_t new_id(thread_state_t *s) {
  (void)s;
  return 0;
}
#else
/* map: the next `capacity` records of the file, allocated, mapped and resident. */
static record_t *map_window(thread_state_t *s) {
  size_t bytes = capacity * sizeof(record_t);
  off_t off = (off_t)(s->map_off * sizeof(record_t));
  if (fallocate(s->fd, 0, off, (off_t)bytes) != 0) perror("minrec: fallocate");
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, off);
  if (p == MAP_FAILED) return NULL;
  madvise(p, bytes, MADV_POPULATE_WRITE);
  return p;
}

static __thread thread_state_t *tls_state
    __attribute__((tls_model("initial-exec")));

static __attribute__((noinline)) thread_state_t *attach_thread(void) {
  uint32_t tid = __atomic_fetch_add(&n_threads, 1, __ATOMIC_RELAXED);
  if (tid >= MAX_THREADS) {
    fprintf(stderr, "minrec: more than %d threads\n", MAX_THREADS);
    abort();
  }
  thread_state_t *s = &states[tid];
  s->tid = tid;
  uint64_t n = sink == SINK_WRITE ? CHUNK : sink == SINK_CONSUMER ? CHUNK * RING_CHUNKS : capacity;
  s->cap = sink == SINK_CONSUMER ? CHUNK : n;
  void *p = MAP_FAILED;
  if (sink != SINK_MEM) {
    char path[4096];
    snprintf(path, sizeof path, "%s/minrec-%d-%u", sink_dir, (int)getpid(), tid);
    s->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s->fd < 0) perror("minrec: open");
  }
  if (sink == SINK_MAP) {
    record_t *m = s->fd >= 0 ? map_window(s) : NULL;
    p = m ? (void *)m : MAP_FAILED;
  } else if (sink == SINK_MEM || s->fd >= 0) {
    p = mmap(NULL, n * sizeof(record_t), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  }
  if (p == MAP_FAILED) {
    perror("minrec: mmap");
    s->cap = 0; /* every record of this thread is dropped */
    p = NULL;
  }
  __atomic_store_n(&s->buf, (record_t *)p, __ATOMIC_RELEASE); /* the consumer reads it */
  tls_state = s;
  return s;
}

INLINE uint64_t timestamp(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

INLINE thread_state_t *state(void) {
  thread_state_t *s = tls_state;
  return LIKELY(s != NULL) ? s : attach_thread();
}

INLINE uint64_t new_id(thread_state_t *s) {
  return ((uint64_t)(s->tid + 1) << 40) | ++s->next_id;
}
#endif

INLINE uint64_t dv(const bo_data_t *d) { return d ? d->value : 0; }

INLINE uint32_t ev(int callback, int sub, int kind) {
  return (uint32_t)callback | ((uint32_t)sub & 0xffu) << 8 |
         ((uint32_t)kind & 0xffffu) << 16;
}

#ifndef MINREC_NOOP
/* The buffer is full: the file sink makes room (false: the record is dropped). */
static __attribute__((noinline)) int full(thread_state_t *s) {
  if (sink == SINK_MEM || s->buf == NULL) return 0;
  if (sink == SINK_CONSUMER) {
    uint64_t h = s->head + 1;
    __atomic_store_n(&s->head, h, __ATOMIC_RELEASE);
    if (h - __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE) >= RING_CHUNKS) {
      __atomic_store_n(&s->head, h - 1, __ATOMIC_RELAXED); /* this chunk is refilled */
      s->written = s->cap - CHUNK;
      s->dropped += CHUNK;
      return 1;
    }
    s->written = (h % RING_CHUNKS) * CHUNK;
    s->cap = s->written + CHUNK;
    return 1;
  }
  uint64_t t0 = mono_ns();
  if (sink == SINK_MAP) {
    munmap(s->buf, capacity * sizeof(record_t));
    s->map_off += capacity;
    s->buf = map_window(s);
    if (s->buf == NULL) s->cap = 0;
  } else {
    write_recs(s->fd, s->buf, s->written);
  }
  s->flushed += s->written;
  s->written = 0;
  if (sink != SINK_WRITE) {
    pthread_mutex_lock(&flush_lock);
    flush_ns += mono_ns() - t0;
    flushes++;
    pthread_mutex_unlock(&flush_lock);
  }
  return s->buf != NULL;
}
#endif

INLINE void put(thread_state_t *s, uint32_t event, uint64_t id1, uint64_t id2,
                uint64_t arg) {
#ifdef MINREC_NOOP
  (void)s, (void)event, (void)id1, (void)id2, (void)arg;
#else
  uint64_t i = s->written;
  if (UNLIKELY(i >= s->cap) && full(s)) i = s->written;
  if (LIKELY(i < s->cap)) {
    record_t *r = &s->buf[i];
    r->tsc = timestamp();
    r->id1 = id1;
    r->id2 = id2;
    r->arg = arg;
    r->event = event;
    r->thread = s->tid;
    __atomic_store_n(&s->written, i + 1, __ATOMIC_RELAXED);
  } else {
    __atomic_store_n(&s->dropped, s->dropped + 1, __ATOMIC_RELAXED);
  }
#endif
}

INLINE void emit(uint32_t event, uint64_t id1, uint64_t id2, uint64_t arg) {
  put(state(), event, id1, id2, arg);
}

#define PTR(p) ((uint64_t)(uintptr_t)(p))

/* ---- callbacks ---------------------------------------------------------- */

static void on_thread_begin(int thread_type, bo_data_t *thread_data) {
  thread_state_t *s = state();
  thread_data->value = new_id(s);
  put(s, ev(BO_CB_THREAD_BEGIN, 0, thread_type), thread_data->value, 0, 0);
}

static void on_thread_end(bo_data_t *thread_data) {
  emit(ev(BO_CB_THREAD_END, 0, 0), dv(thread_data), 0, 0);
}

static void on_parallel_begin(bo_data_t *encountering_task_data,
                              const bo_frame_t *encountering_task_frame,
                              bo_data_t *parallel_data,
                              unsigned int requested_parallelism, int flags,
                              const void *codeptr_ra) {
  (void)encountering_task_frame;
  (void)requested_parallelism;
  thread_state_t *s = state();
  parallel_data->value = new_id(s);
  put(s, ev(BO_CB_PARALLEL_BEGIN, 0, flags), parallel_data->value,
      dv(encountering_task_data), PTR(codeptr_ra));
}

static void on_parallel_end(bo_data_t *parallel_data,
                            bo_data_t *encountering_task_data, int flags,
                            const void *codeptr_ra) {
  emit(ev(BO_CB_PARALLEL_END, 0, flags), dv(parallel_data),
       dv(encountering_task_data), PTR(codeptr_ra));
}

static void on_task_create(bo_data_t *encountering_task_data,
                           const bo_frame_t *encountering_task_frame,
                           bo_data_t *new_task_data, int flags,
                           int has_dependences, const void *codeptr_ra) {
  (void)encountering_task_frame;
  thread_state_t *s = state();
  new_task_data->value = new_id(s);
  put(s, ev(BO_CB_TASK_CREATE, has_dependences, flags), new_task_data->value,
      dv(encountering_task_data), PTR(codeptr_ra));
}

static void on_task_schedule(bo_data_t *prior_task_data, int prior_task_status,
                             bo_data_t *next_task_data) {
  emit(ev(BO_CB_TASK_SCHEDULE, prior_task_status, 0), dv(prior_task_data),
       dv(next_task_data), 0);
}

static void on_implicit_task(int endpoint, bo_data_t *parallel_data,
                             bo_data_t *task_data,
                             unsigned int actual_parallelism,
                             unsigned int index, int flags) {
  thread_state_t *s = state();
  if (endpoint == BO_SCOPE_BEGIN)
    task_data->value = new_id(s);
  put(s, ev(BO_CB_IMPLICIT_TASK, endpoint, flags), dv(task_data),
      dv(parallel_data), (uint64_t)actual_parallelism << 32 | index);
}

static void on_work(int work_type, int endpoint, bo_data_t *parallel_data,
                    bo_data_t *task_data, uint64_t count,
                    const void *codeptr_ra) {
  (void)count;
  emit(ev(BO_CB_WORK, endpoint, work_type), dv(parallel_data), dv(task_data),
       PTR(codeptr_ra));
}

static void on_dispatch(bo_data_t *parallel_data, bo_data_t *task_data,
                        int kind, bo_data_t instance) {
  emit(ev(BO_CB_DISPATCH, 0, kind), dv(parallel_data), dv(task_data),
       instance.value);
}

INLINE void sync_like(int callback, int kind, int endpoint,
                      bo_data_t *parallel_data, bo_data_t *task_data,
                      const void *codeptr_ra) {
  emit(ev(callback, endpoint, kind), dv(parallel_data), dv(task_data),
       PTR(codeptr_ra));
}

static void on_sync_region(int kind, int endpoint, bo_data_t *parallel_data,
                           bo_data_t *task_data, const void *codeptr_ra) {
  sync_like(BO_CB_SYNC_REGION, kind, endpoint, parallel_data, task_data,
            codeptr_ra);
}

static void on_sync_region_wait(int kind, int endpoint,
                                bo_data_t *parallel_data, bo_data_t *task_data,
                                const void *codeptr_ra) {
  sync_like(BO_CB_SYNC_REGION_WAIT, kind, endpoint, parallel_data, task_data,
            codeptr_ra);
}

static void on_reduction(int kind, int endpoint, bo_data_t *parallel_data,
                         bo_data_t *task_data, const void *codeptr_ra) {
  sync_like(BO_CB_REDUCTION, kind, endpoint, parallel_data, task_data,
            codeptr_ra);
}

static void on_mutex_acquire(int kind, unsigned int hint, unsigned int impl,
                             bo_wait_id_t wait_id, const void *codeptr_ra) {
  emit(ev(BO_CB_MUTEX_ACQUIRE, 0, kind), wait_id,
       (uint64_t)hint << 32 | impl, PTR(codeptr_ra));
}

static void on_lock_init(int kind, unsigned int hint, unsigned int impl,
                         bo_wait_id_t wait_id, const void *codeptr_ra) {
  emit(ev(BO_CB_LOCK_INIT, 0, kind), wait_id, (uint64_t)hint << 32 | impl,
       PTR(codeptr_ra));
}

static void on_mutex_acquired(int kind, bo_wait_id_t wait_id,
                              const void *codeptr_ra) {
  emit(ev(BO_CB_MUTEX_ACQUIRED, 0, kind), wait_id, 0, PTR(codeptr_ra));
}

static void on_mutex_released(int kind, bo_wait_id_t wait_id,
                              const void *codeptr_ra) {
  emit(ev(BO_CB_MUTEX_RELEASED, 0, kind), wait_id, 0, PTR(codeptr_ra));
}

static void on_lock_destroy(int kind, bo_wait_id_t wait_id,
                            const void *codeptr_ra) {
  emit(ev(BO_CB_LOCK_DESTROY, 0, kind), wait_id, 0, PTR(codeptr_ra));
}

static void on_nest_lock(int endpoint, bo_wait_id_t wait_id,
                         const void *codeptr_ra) {
  emit(ev(BO_CB_NEST_LOCK, endpoint, 0), wait_id, 0, PTR(codeptr_ra));
}

static void on_masked(int endpoint, bo_data_t *parallel_data,
                      bo_data_t *task_data, const void *codeptr_ra) {
  emit(ev(BO_CB_MASKED, endpoint, 0), dv(parallel_data), dv(task_data),
       PTR(codeptr_ra));
}

static void on_flush(bo_data_t *thread_data, const void *codeptr_ra) {
  emit(ev(BO_CB_FLUSH, 0, 0), dv(thread_data), 0, PTR(codeptr_ra));
}

static void on_cancel(bo_data_t *task_data, int flags,
                      const void *codeptr_ra) {
  emit(ev(BO_CB_CANCEL, 0, flags), dv(task_data), 0, PTR(codeptr_ra));
}

/* ---- the consumer thread (MINREC_SINK=consumer) --------------------------- */

/* Writes the thread's filled chunks. */
static void consume_thread(thread_state_t *s) {
  uint64_t h = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
  for (uint64_t t = s->tail; t < h; t++) {
    write_recs(s->fd, s->buf + (t % RING_CHUNKS) * CHUNK, CHUNK);
    __atomic_store_n(&s->tail, t + 1, __ATOMIC_RELEASE);
  }
}

static void *consume(void *arg) {
  (void)arg;
  while (__atomic_load_n(&consumer_run, __ATOMIC_RELAXED)) {
    uint32_t n = __atomic_load_n(&n_threads, __ATOMIC_ACQUIRE);
    uint64_t before = 0, after = 0;
    for (uint32_t i = 0; i < n && i < MAX_THREADS; i++) {
      thread_state_t *s = &states[i];
      if (__atomic_load_n(&s->buf, __ATOMIC_ACQUIRE) == NULL) continue;
      before += s->tail;
      consume_thread(s);
      after += s->tail;
    }
    if (before == after) {
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
  }
  return NULL;
}

/* ---- tool life cycle ---------------------------------------------------- */

#define CB(f) ((bo_callback_t)(f))

static int minrec_initialize(bo_function_lookup_t lookup,
                             int initial_device_num, bo_data_t *tool_data) {
  (void)initial_device_num;
  (void)tool_data;
  const char *env = getenv("MINREC_RECORDS");
  if (env != NULL && *env != '\0') {
    char *end = NULL;
    unsigned long long v = strtoull(env, &end, 10);
    if (end != NULL && *end == '\0' && v > 0)
      capacity = v;
  }
  static const char *const sinks[] = {"mem", "write", "reserve", "map", "consumer"};
  const char *name = getenv("MINREC_SINK");
  for (int i = 0; name && i < (int)(sizeof sinks / sizeof *sinks); i++)
    if (strcmp(name, sinks[i]) == 0) sink = i;
  sink_dir = getenv("MINREC_DIR");
  if (sink != SINK_MEM && (sink_dir == NULL || *sink_dir == '\0')) {
    fprintf(stderr, "minrec: MINREC_SINK=%s needs MINREC_DIR\n", name);
    return 0;
  }
  if (sink == SINK_CONSUMER) {
    __atomic_store_n(&consumer_run, 1, __ATOMIC_RELAXED);
    pthread_create(&consumer, NULL, consume, NULL);
  }

  bo_set_callback_t set_callback =
      (bo_set_callback_t)lookup("ompt_set_callback");
  if (set_callback == NULL)
    return 0;

  static const struct {
    int event;
    bo_callback_t fn;
  } table[] = {
      {BO_CB_THREAD_BEGIN, CB(on_thread_begin)},
      {BO_CB_THREAD_END, CB(on_thread_end)},
      {BO_CB_PARALLEL_BEGIN, CB(on_parallel_begin)},
      {BO_CB_PARALLEL_END, CB(on_parallel_end)},
      {BO_CB_IMPLICIT_TASK, CB(on_implicit_task)},
      {BO_CB_TASK_CREATE, CB(on_task_create)},
      {BO_CB_TASK_SCHEDULE, CB(on_task_schedule)},
      {BO_CB_WORK, CB(on_work)},
      {BO_CB_DISPATCH, CB(on_dispatch)},
      {BO_CB_SYNC_REGION, CB(on_sync_region)},
      {BO_CB_SYNC_REGION_WAIT, CB(on_sync_region_wait)},
      {BO_CB_MUTEX_ACQUIRE, CB(on_mutex_acquire)},
      {BO_CB_MUTEX_ACQUIRED, CB(on_mutex_acquired)},
      {BO_CB_MUTEX_RELEASED, CB(on_mutex_released)},
      {BO_CB_MASKED, CB(on_masked)},
      {BO_CB_NEST_LOCK, CB(on_nest_lock)},
      {BO_CB_LOCK_INIT, CB(on_lock_init)},
      {BO_CB_LOCK_DESTROY, CB(on_lock_destroy)},
      {BO_CB_FLUSH, CB(on_flush)},
      {BO_CB_CANCEL, CB(on_cancel)},
      {BO_CB_REDUCTION, CB(on_reduction)},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    int r = set_callback(table[i].event, table[i].fn);
    if (r != BO_SET_ERROR && r != BO_SET_NEVER)
      registered++;
  }
  return 1;
}

static void minrec_finalize(bo_data_t *tool_data) {
  (void)tool_data;
  uint32_t n = __atomic_load_n(&n_threads, __ATOMIC_RELAXED);
  if (n > MAX_THREADS)
    n = MAX_THREADS;
  if (sink == SINK_CONSUMER) {
    __atomic_store_n(&consumer_run, 0, __ATOMIC_RELAXED);
    pthread_join(consumer, NULL);
  }
  uint64_t t0 = mono_ns();
  unsigned long long written = 0, dropped = 0;
  for (uint32_t i = 0; i < n; i++) {
    thread_state_t *s = &states[i];
    uint64_t w = __atomic_load_n(&s->written, __ATOMIC_RELAXED);
    if (sink == SINK_CONSUMER && s->buf) {
      consume_thread(s);
      write_recs(s->fd, s->buf + (s->cap - CHUNK), w - (s->cap - CHUNK));
      written += s->tail * CHUNK + w - (s->cap - CHUNK);
    } else if (sink == SINK_MAP && s->buf) {
      if (ftruncate(s->fd, (off_t)((s->map_off + w) * sizeof(record_t))) != 0)
        perror("minrec: ftruncate");
      munmap(s->buf, capacity * sizeof(record_t));
      written += s->flushed + w;
    } else {
      if (sink != SINK_MEM && s->buf) write_recs(s->fd, s->buf, w);
      written += s->flushed + w;
    }
    dropped += __atomic_load_n(&s->dropped, __ATOMIC_RELAXED);
    if (sink != SINK_MEM && s->fd >= 0) close(s->fd);
  }
  fprintf(stderr,
          "minrec events=%llu written=%llu dropped=%llu threads=%u "
          "registered=%d\n",
          written + dropped, written, dropped, n, registered);
  if (sink != SINK_MEM)
    fprintf(stderr, "minrec flush_ms=%.1f flushes=%llu\n",
            (double)(flush_ns + mono_ns() - t0) / 1e6, (unsigned long long)flushes);
}

BO_EXPORT bo_start_tool_result_t *ompt_start_tool(unsigned int omp_version,
                                                  const char *runtime_version);

bo_start_tool_result_t *ompt_start_tool(unsigned int omp_version,
                                        const char *runtime_version) {
  static bo_start_tool_result_t result = {minrec_initialize, minrec_finalize,
                                          {0}};
  (void)omp_version;
  (void)runtime_version;
  return &result;
}
