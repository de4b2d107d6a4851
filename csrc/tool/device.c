/*
 * Device tracing (OpenMP 5.2, 19.6.2 and 19.12): the runtime fills buffers
 * the tool gives it with records of what ran on a device, and hands them
 * back; the tool copies each record into the trace as a `device` record and
 * its `more` (csrc/include/omptpy.h), on the thread that hands the buffer
 * back.
 *
 * At device_initialize the device lookup is asked for the 12 entry points;
 * where ompt_start_trace is offered (and OMPTPY_DEVICE_TRACE is on), the
 * target, data operation and kernel record types are enabled, EMI and not,
 * and tracing starts.  Buffers come from one pool for every device: a
 * reservation of OMPTPY_DEVICE_MEMORY bytes cut into OMPTPY_DEVICE_BUFFER
 * pieces, touched when first handed out (the pool's only growth) and reused
 * through a lock-free free list, so the runtime's threads never lock or
 * allocate here.  Past the bound a request is answered with 0 bytes, and the
 * record the runtime wanted to place is counted lost.  A buffer is walked
 * with ompt_advance_buffer_cursor and read with ompt_get_record_type /
 * ompt_get_record_ompt only: runtimes place records at strides of their own
 * (ROCm: larger than sizeof(ompt_record_ompt_t)).  A buffer handed back as
 * owned returns to the pool; the others (ROCm never hands back a buffer that
 * did not fill) are released when tracing stops.
 *
 * Device time goes to the host clock in Python, by a fit over `device_clock`
 * pairs taken when tracing starts, at a buffer's completion (at most every
 * CLOCK_EVERY_NS per device) and at each flush and stop.
 *
 * Everything odd the runtime does is counted (the devices' entries of the
 * meta), never fatal: NULL entry points, start_trace returning 0, records of
 * an unknown type or ending before they begin, 0-byte buffers, records after
 * stop (counted, not written: the trace may be closed by then).  Tracing
 * starts only where it can work: ompt_start_trace, ompt_set_trace_ompt,
 * ompt_advance_buffer_cursor and ompt_get_record_ompt all offered.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "omptpy_internal.h"

#define MAX_DEVICES 64 /* device numbers traced: 0 to 63 */
#define CLOCK_EVERY_NS 10000000u

enum {
  EP_SET_TRACE_OMPT,
  EP_START_TRACE,
  EP_PAUSE_TRACE,
  EP_FLUSH_TRACE,
  EP_STOP_TRACE,
  EP_ADVANCE_BUFFER_CURSOR,
  EP_GET_RECORD_TYPE,
  EP_GET_RECORD_OMPT,
  EP_GET_DEVICE_TIME,
  EP_TRANSLATE_TIME,
  EP_SET_TRACE_NATIVE,
  EP_GET_RECORD_NATIVE,
  EP_COUNT
};

static const char *const EP_NAMES[EP_COUNT] = {
    "ompt_set_trace_ompt",      "ompt_start_trace",        "ompt_pause_trace",
    "ompt_flush_trace",         "ompt_stop_trace",         "ompt_advance_buffer_cursor",
    "ompt_get_record_type",     "ompt_get_record_ompt",    "ompt_get_device_time",
    "ompt_translate_time",      "ompt_set_trace_native",   "ompt_get_record_native"};

/* The record types enabled, EMI and not (meta: "tracing"). */
static const int TRACED[] = {ompt_callback_target,      ompt_callback_target_data_op,
                             ompt_callback_target_submit, ompt_callback_target_emi,
                             ompt_callback_target_data_op_emi, ompt_callback_target_submit_emi};
#define NTRACED (sizeof TRACED / sizeof *TRACED)
#define ANSWER_NO_ENTRY_POINT (-1)
#define ANSWER_NOT_ASKED (-2)

enum { DEV_NONE = 0, DEV_SETTING_UP = 1, DEV_LISTED = 2 };

typedef struct device {
  _Atomic int state; /* DEV_LISTED is stored with release after what it publishes */
  int num, runtime;
  char type[128];
  ompt_device_t *dev;
  ompt_interface_fn_t ep[EP_COUNT];
  int answers[NTRACED]; /* ompt_set_result_t, or ANSWER_* */
  bool started;
  char start_error[192];
  _Atomic bool stopped;
  _Atomic uint64_t last_clock_ns;
  _Atomic uint64_t requested, completed, freed, bytes, records, lost, after_stop, unknown_type,
      bad_time, zero_byte;
} device;

static device D[MAX_DEVICES];
/* Serialises flush and stop (the OpenMP program's threads, finalize, Python);
 * never taken by the buffer callbacks. */
static pthread_mutex_t control_lock = PTHREAD_MUTEX_INITIALIZER;

static inline device *device_of(int num) {
  return num >= 0 && num < MAX_DEVICES ? &D[num] : NULL;
}

static inline void add(_Atomic uint64_t *counter, uint64_t n) {
  atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

/* ---- the pool of buffers ----------------------------------------------------- */

static struct {
  char *base; /* cap buffers of size bytes, reserved (not committed) at once */
  size_t size;
  uint32_t cap;
  _Atomic uint32_t made;        /* buffers handed out at least once */
  _Atomic uint64_t head;        /* free list: ABA tag << 32 | (index + 1); 0: empty */
  _Atomic uint32_t *next;       /* free list links, index + 1 */
  _Atomic int32_t *holder;      /* device number + 1 holding a buffer (-1: a number
                                 * beyond those traced); 0: in the pool */
  pthread_once_t once;
  bool ready;
} P = {.once = PTHREAD_ONCE_INIT};

static void pool_init(void) {
  const omptpy_config *cfg = &omptpy_g.cfg;
  P.size = cfg->device_buffer_bytes;
  P.cap = (uint32_t)(cfg->device_memory_bytes / P.size);
  void *p = mmap(NULL, (size_t)P.cap * P.size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  P.next = calloc(P.cap, sizeof *P.next);
  P.holder = calloc(P.cap, sizeof *P.holder);
  if (p == MAP_FAILED || !P.next || !P.holder) {
    if (p != MAP_FAILED) munmap(p, (size_t)P.cap * P.size);
    free((void *)P.next);
    free((void *)P.holder);
    return;
  }
  P.base = p;
  P.ready = true;
}

static int64_t pool_pop(void) {
  uint64_t h = atomic_load_explicit(&P.head, memory_order_acquire);
  while ((uint32_t)h) {
    uint32_t i = (uint32_t)h - 1;
    uint64_t next = ((h >> 32) + 1) << 32 | atomic_load_explicit(&P.next[i], memory_order_relaxed);
    if (atomic_compare_exchange_weak_explicit(&P.head, &h, next, memory_order_acquire,
                                              memory_order_acquire))
      return i;
  }
  return -1;
}

static void pool_push(uint32_t i) {
  uint64_t h = atomic_load_explicit(&P.head, memory_order_relaxed), want;
  do {
    atomic_store_explicit(&P.next[i], (uint32_t)h, memory_order_relaxed);
    want = ((h >> 32) + 1) << 32 | (i + 1);
  } while (!atomic_compare_exchange_weak_explicit(&P.head, &h, want, memory_order_release,
                                                  memory_order_relaxed));
}

/* The pool's index of a buffer, -1 for one that is not the pool's. */
static int64_t pool_index(const void *buffer) {
  const char *b = buffer;
  if (!P.ready || b < P.base || b >= P.base + (size_t)P.cap * P.size ||
      (size_t)(b - P.base) % P.size)
    return -1;
  return (int64_t)((size_t)(b - P.base) / P.size);
}

/* Back to the pool, once (a runtime that hands a buffer back twice does not
 * put it on the free list twice). */
static void pool_release(uint32_t i) {
  int32_t holder = atomic_exchange_explicit(&P.holder[i], 0, memory_order_acq_rel);
  if (!holder) return;
  device *d = holder > 0 ? device_of(holder - 1) : NULL;
  if (d) add(&d->freed, 1);
  pool_push(i);
}

/* ---- the buffer callbacks (the runtime's threads) ------------------------------ */

static void on_buffer_request(int device_num, ompt_buffer_t **buffer, size_t *bytes) {
  device *d = device_of(device_num);
  if (d) add(&d->requested, 1);
  int64_t i = P.ready ? pool_pop() : -1;
  if (i < 0 && P.ready) {
    uint32_t m = atomic_load_explicit(&P.made, memory_order_relaxed);
    while (m < P.cap && !atomic_compare_exchange_weak_explicit(&P.made, &m, m + 1,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed)) {
    }
    if (m < P.cap) i = m;
  }
  if (i < 0) { /* the pool's bound: the runtime drops the record it wanted to place */
    *buffer = NULL;
    *bytes = 0;
    if (d) add(&d->lost, 1);
    return;
  }
  atomic_store_explicit(&P.holder[i], d ? device_num + 1 : -1, memory_order_relaxed);
  *buffer = P.base + (size_t)i * P.size;
  *bytes = P.size;
  if (d) add(&d->bytes, P.size);
}

/* The thread that hands buffers back is often a helper of the runtime that
 * never had thread_begin: it gets a slot of type "other", given back when it
 * exits. */
static inline omptpy_thread *consumer(void) {
  omptpy_thread *t = omptpy_tls_thread;
  if (OMPTPY_LIKELY(t != NULL)) return t;
  return omptpy_thread_adopt(ompt_thread_other);
}

static void clock_pair(device *d) {
  ompt_get_device_time_t get_time = (ompt_get_device_time_t)d->ep[EP_GET_DEVICE_TIME];
  ompt_translate_time_t translate = (ompt_translate_time_t)d->ep[EP_TRANSLATE_TIME];
  omptpy_thread *t;
  if (!get_time || !omptpy_recording() || !(t = consumer())) return;
  uint64_t before = omptpy_now();
  ompt_device_time_t device_time = get_time(d->dev);
  uint64_t after = omptpy_now();
  uint64_t bits = 0;
  if (translate) {
    double seconds = translate(d->dev, device_time);
    memcpy(&bits, &seconds, sizeof bits);
  }
  omptpy_enter(t);
  omptpy_record *r = omptpy_slot(t);
  if (r) {
    omptpy_fill(r, t, OMPTPY_EVENT_DEVICE_CLOCK, 0, 0, bits, 0, 0, device_time, after,
                (uint32_t)d->num, 0);
    r->time = before;
    omptpy_commit(t);
    omptpy_native_after(r);
  }
  omptpy_leave(t);
  atomic_store_explicit(&d->last_clock_ns, omptpy_monotonic_ns(), memory_order_relaxed);
}

/* A pair at most every CLOCK_EVERY_NS per device, by one thread. */
static void clock_pair_due(device *d) {
  uint64_t now = omptpy_monotonic_ns();
  uint64_t last = atomic_load_explicit(&d->last_clock_ns, memory_order_relaxed);
  if (now - last >= CLOCK_EVERY_NS &&
      atomic_compare_exchange_strong_explicit(&d->last_clock_ns, &last, now, memory_order_relaxed,
                                              memory_order_relaxed))
    clock_pair(d);
}

static inline uint64_t addr(const void *p) { return (uint64_t)(uintptr_t)p; }

/* A buffer's counts, added to the device's once it is walked (one atomic
 * add per buffer and counter, not per record). */
typedef struct walk_counts {
  uint64_t records, unknown_type, bad_time, after_stop;
} walk_counts;

/* One device record into t's buffer (t NULL: counted only, no trace wants it). */
static inline void copy_record(device *d, omptpy_thread *t, const ompt_record_ompt_t *r,
                               walk_counts *n) {
  int type = r->type;
  bool target = type == ompt_callback_target || type == ompt_callback_target_emi;
  bool data_op = type == ompt_callback_target_data_op || type == ompt_callback_target_data_op_emi;
  bool kernel = type == ompt_callback_target_submit || type == ompt_callback_target_submit_emi;
  if (OMPTPY_UNLIKELY(!target && !data_op && !kernel)) {
    n->unknown_type++;
    return;
  }
  n->records++;
  uint64_t end = data_op ? r->record.target_data_op.end_time
                 : kernel ? r->record.target_kernel.end_time : 0;
  if (OMPTPY_UNLIKELY(!target && end < r->time)) n->bad_time++; /* kept, flagged */
  if (!t) return;
  omptpy_enter(t);
  omptpy_record *o = omptpy_slot2(t);
  if (OMPTPY_UNLIKELY(!o)) {
    omptpy_leave(t);
    return;
  }
  uint32_t num = (uint32_t)d->num;
  if (target) {
    const ompt_record_target_t *g = &r->record.target;
    omptpy_fill(o, t, OMPTPY_EVENT_DEVICE, g->endpoint, type, addr(g->codeptr_ra), r->target_id,
                g->task_id, r->time, 0, num, 0);
    omptpy_fill_more(o, g->kind, 0, 0, r->thread_id, g->target_id, 0, (uint32_t)g->device_num, 0);
  } else if (data_op) {
    const ompt_record_target_data_op_t *p = &r->record.target_data_op;
    omptpy_fill(o, t, OMPTPY_EVENT_DEVICE, 0, type, addr(p->codeptr_ra), r->target_id,
                p->host_op_id, r->time, end, num, 0);
    omptpy_fill_more(o, p->optype, 0, p->bytes, r->thread_id, addr(p->src_addr),
                     addr(p->dest_addr), (uint32_t)p->src_device_num,
                     (uint32_t)p->dest_device_num);
  } else {
    const ompt_record_target_kernel_t *k = &r->record.target_kernel;
    omptpy_fill(o, t, OMPTPY_EVENT_DEVICE, 0, type, 0, r->target_id, k->host_op_id, r->time, end,
                num, 0);
    omptpy_fill_more(o, OMPTPY_EVENT_DEVICE, 0, 0, r->thread_id, 0, 0, k->requested_num_teams,
                     k->granted_num_teams);
  }
  omptpy_commit2(t);
  omptpy_native_after(o);
  omptpy_native_after(o + 1);
  omptpy_leave(t);
}

/* Walks bytes of records from begin.  Each record takes at least one byte, so
 * a runtime whose cursor never reports the end cannot keep the walk going. */
static void consume(device *d, ompt_buffer_t *buffer, size_t bytes, ompt_buffer_cursor_t begin) {
  ompt_advance_buffer_cursor_t advance =
      (ompt_advance_buffer_cursor_t)d->ep[EP_ADVANCE_BUFFER_CURSOR];
  ompt_get_record_type_t get_type = (ompt_get_record_type_t)d->ep[EP_GET_RECORD_TYPE];
  ompt_get_record_ompt_t get_ompt = (ompt_get_record_ompt_t)d->ep[EP_GET_RECORD_OMPT];
  bool stopped = atomic_load_explicit(&d->stopped, memory_order_acquire);
  omptpy_thread *t = !stopped && omptpy_recording() ? consumer() : NULL;
  ompt_buffer_cursor_t cur = begin;
  walk_counts n = {0};
  for (size_t i = 0; i < bytes; i++) {
    /* Without ompt_get_record_type every record is taken for an OMPT one. */
    ompt_record_t kind = get_type ? get_type(buffer, cur) : ompt_record_ompt;
    const ompt_record_ompt_t *r = kind == ompt_record_ompt ? get_ompt(buffer, cur) : NULL;
    if (OMPTPY_UNLIKELY(!r)) n.unknown_type++;
    else if (OMPTPY_UNLIKELY(stopped)) n.after_stop++;
    else copy_record(d, t, r, &n);
    ompt_buffer_cursor_t next = cur;
    if (!advance(d->dev, buffer, bytes, cur, &next) || next == cur) break;
    cur = next;
  }
  if (n.records) add(&d->records, n.records);
  if (n.unknown_type) add(&d->unknown_type, n.unknown_type);
  if (n.bad_time) add(&d->bad_time, n.bad_time);
  if (n.after_stop) add(&d->after_stop, n.after_stop);
}

static void on_buffer_complete(int device_num, ompt_buffer_t *buffer, size_t bytes,
                               ompt_buffer_cursor_t begin, int buffer_owned) {
  device *d = device_of(device_num);
  if (d && atomic_load_explicit(&d->state, memory_order_acquire) != DEV_NONE) {
    add(&d->completed, 1);
    if (bytes == 0) add(&d->zero_byte, 1);
    else if (buffer) consume(d, buffer, bytes, begin);
    if (!atomic_load_explicit(&d->stopped, memory_order_relaxed)) clock_pair_due(d);
  }
  int64_t i = buffer_owned && buffer ? pool_index(buffer) : -1;
  if (i >= 0) pool_release((uint32_t)i);
}

/* ---- device_initialize / finalize, flush, stop -------------------------------- */

static void answer_all(device *d, int answer) {
  for (size_t k = 0; k < NTRACED; k++) d->answers[k] = answer;
}

void omptpy_device_initialize(int device_num, const char *type, ompt_device_t *device_ptr,
                              ompt_function_lookup_t lookup) {
  device *d = device_of(device_num);
  int none = DEV_NONE;
  if (!d || !atomic_compare_exchange_strong(&d->state, &none, DEV_SETTING_UP)) return;
  d->num = device_num;
  d->runtime = omptpy_tls_thread ? omptpy_tls_thread->runtime : 0;
  snprintf(d->type, sizeof d->type, "%s", type ? type : "");
  d->dev = device_ptr;
  for (int i = 0; i < EP_COUNT; i++) d->ep[i] = lookup ? lookup(EP_NAMES[i]) : NULL;
  ompt_set_trace_ompt_t set_trace = (ompt_set_trace_ompt_t)d->ep[EP_SET_TRACE_OMPT];
  ompt_start_trace_t start = (ompt_start_trace_t)d->ep[EP_START_TRACE];
  answer_all(d, set_trace ? ANSWER_NOT_ASKED : ANSWER_NO_ENTRY_POINT);
  const char *why = NULL;
  if (!omptpy_g.cfg.device_trace) why = "OMPTPY_DEVICE_TRACE is off";
  else if (!start) why = "the runtime offers no ompt_start_trace for this device";
  else if (!set_trace)
    why = "the runtime offers ompt_start_trace but not ompt_set_trace_ompt: no record type "
          "can be enabled";
  else if (!d->ep[EP_ADVANCE_BUFFER_CURSOR] || !d->ep[EP_GET_RECORD_OMPT])
    why = "the runtime offers ompt_start_trace but not ompt_advance_buffer_cursor and "
          "ompt_get_record_ompt, without which its buffers cannot be read";
  if (!why) {
    for (size_t k = 0; k < NTRACED; k++)
      d->answers[k] = (int)set_trace(device_ptr, 1, (unsigned)TRACED[k]);
    pthread_once(&P.once, pool_init);
    if (!P.ready) why = "no memory for the device buffers' pool (lower OMPTPY_DEVICE_MEMORY)";
    else if (!start(device_ptr, on_buffer_request, on_buffer_complete))
      why = "ompt_start_trace returned 0: the runtime did not start tracing this device";
  }
  if (why) snprintf(d->start_error, sizeof d->start_error, "%s", why);
  d->started = why == NULL;
  atomic_store_explicit(&d->state, DEV_LISTED, memory_order_release);
  if (d->started) clock_pair(d);
}

static bool tracing(device *d) {
  return atomic_load_explicit(&d->state, memory_order_acquire) == DEV_LISTED && d->started &&
         !atomic_load_explicit(&d->stopped, memory_order_acquire);
}

/* Under control_lock: whether the runtime flushed. */
static bool flush_device(device *d) {
  ompt_flush_trace_t flush = (ompt_flush_trace_t)d->ep[EP_FLUSH_TRACE];
  bool flushed = flush && flush(d->dev);
  clock_pair(d);
  return flushed;
}

/* Under control_lock.  Once flushed, records still handed back (ROCm's
 * window: inside stop_trace, after tracing was disabled) are counted, not
 * written; without a flush, stop_trace's own is the only one, and what it
 * hands back is kept. */
static void stop_device(device *d) {
  bool flushed = flush_device(d);
  if (flushed) atomic_store_explicit(&d->stopped, true, memory_order_release);
  ompt_stop_trace_t stop = (ompt_stop_trace_t)d->ep[EP_STOP_TRACE];
  if (stop) stop(d->dev);
  atomic_store_explicit(&d->stopped, true, memory_order_release);
}

void omptpy_devices_flush(void) {
  pthread_mutex_lock(&control_lock);
  for (int i = 0; i < MAX_DEVICES; i++)
    if (tracing(&D[i])) flush_device(&D[i]);
  pthread_mutex_unlock(&control_lock);
}

void omptpy_device_finalize(int device_num) {
  device *d = device_of(device_num);
  if (!d) return;
  pthread_mutex_lock(&control_lock);
  if (tracing(d)) stop_device(d);
  pthread_mutex_unlock(&control_lock);
}

/* The tool goes away: every device stops, and the buffers the runtime kept
 * (ROCm never hands back one that did not fill) are released and their
 * memory given back.  The reservation stays mapped: a runtime that still
 * read or wrote one would find zeros, not a fault. */
void omptpy_devices_stop(void) {
  pthread_mutex_lock(&control_lock);
  for (int i = 0; i < MAX_DEVICES; i++)
    if (tracing(&D[i])) stop_device(&D[i]);
  if (P.ready) {
    uint32_t made = atomic_load(&P.made);
    for (uint32_t i = 0; i < made; i++) pool_release(i);
    madvise(P.base, (size_t)made * P.size, MADV_DONTNEED);
  }
  pthread_mutex_unlock(&control_lock);
}

/* fork: the child has none of the runtime's helper threads nor its tracing
 * state; its devices count as stopped (what a runtime still hands back there
 * is counted after stop), and the lock is free again. */
void omptpy_devices_after_fork_child(void) {
  pthread_mutex_init(&control_lock, NULL);
  for (int i = 0; i < MAX_DEVICES; i++) atomic_store(&D[i].stopped, true);
}

/* ---- the devices' descriptions (meta, stats, runtime_info) --------------------- */

static const char *answer_name(int answer) {
  static const char *names[] = {"error", "never", "impossible", "sometimes", "sometimes_paired",
                                "always"};
  if (answer == ANSWER_NO_ENTRY_POINT) return "no entry point";
  if (answer == ANSWER_NOT_ASKED) return "not asked";
  return answer >= 0 && answer <= 5 ? names[answer] : "unknown";
}

int omptpy_devices_json(omptpy_str *s, int runtime) {
  int rc = omptpy_put(s, "[");
  for (int i = 0, first = 1; rc == 0 && i < MAX_DEVICES; i++) {
    device *d = &D[i];
    if (atomic_load_explicit(&d->state, memory_order_acquire) != DEV_LISTED ||
        (runtime >= 0 && d->runtime != runtime))
      continue;
    rc = omptpy_put(s, "%s{\"device\":%d,\"runtime\":%d,\"type\":", first ? "" : ",", d->num,
                    d->runtime);
    first = 0;
    rc = rc ? rc : omptpy_put_string(s, d->type, strlen(d->type));
    rc = rc ? rc : omptpy_put(s, ",\"entry_points\":{");
    for (int k = 0; rc == 0 && k < EP_COUNT; k++)
      rc = omptpy_put(s, "%s\"%s\":%s", k ? "," : "", EP_NAMES[k], d->ep[k] ? "true" : "false");
    rc = rc ? rc : omptpy_put(s, "},\"tracing\":{");
    for (size_t k = 0; rc == 0 && k < NTRACED; k++)
      rc = omptpy_put(s, "%s\"%s\":\"%s\"", k ? "," : "", omptpy_event_name(TRACED[k]),
                      answer_name(d->answers[k]));
    rc = rc ? rc : omptpy_put(s, "},\"started\":%s,\"stopped\":%s,\"start_error\":",
                              d->started ? "true" : "false",
                              atomic_load(&d->stopped) ? "true" : "false");
    rc = rc ? rc : d->started ? omptpy_put(s, "null")
                              : omptpy_put_string(s, d->start_error, strlen(d->start_error));
    rc = rc ? rc : omptpy_put(s,
                              ",\"buffers_requested\":%llu,\"buffers_completed\":%llu,"
                              "\"buffers_freed\":%llu,\"buffer_bytes\":%llu,\"records\":%llu,"
                              "\"records_lost\":%llu,\"records_after_stop\":%llu,"
                              "\"records_unknown_type\":%llu,\"records_bad_time\":%llu,"
                              "\"zero_byte_buffers\":%llu}",
                              (unsigned long long)atomic_load(&d->requested),
                              (unsigned long long)atomic_load(&d->completed),
                              (unsigned long long)atomic_load(&d->freed),
                              (unsigned long long)atomic_load(&d->bytes),
                              (unsigned long long)atomic_load(&d->records),
                              (unsigned long long)atomic_load(&d->lost),
                              (unsigned long long)atomic_load(&d->after_stop),
                              (unsigned long long)atomic_load(&d->unknown_type),
                              (unsigned long long)atomic_load(&d->bad_time),
                              (unsigned long long)atomic_load(&d->zero_byte));
  }
  return rc ? rc : omptpy_put(s, "]");
}
