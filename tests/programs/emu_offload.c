/*
 * emu_offload: an emulated OpenMP offload runtime for ompt-py's device
 * tracing tests (built by the tests, never shipped).  No libomp: it loads the
 * tool named in OMP_TOOL_LIBRARIES and calls its ompt_start_tool as libomp
 * does, answers the host lookup, calls device_initialize with a device lookup
 * that implements OMPT's device tracing entry points, runs "target regions"
 * (host target / data op / submit callbacks, EMI or not) whose device records
 * it writes into the tool's buffers and hands back through buffer_complete,
 * and at the end writes a ground truth (--truth FILE, JSON) of every record
 * it produced, every buffer it received and the device clocks.
 *
 * What the real runtimes do (read 2026-11; the switches below select each
 * behaviour that differs):
 *
 * ROCm/AOMP (AMD GPUs), github.com/ROCm/llvm-project, amd-staging:
 *   offload/plugins-nextgen/common/OMPT/OmptTracing.cpp (the device lookup's
 *   functions), and libomptarget's OmptTracingBuffer.cpp / OmptTracing.cpp
 *   (the buffer manager and the record generators; openmp/libomptarget/src in
 *   older trees, offload/libomptarget/OpenMP/OMPT in newer ones).
 *   - buffer_request is called by the OpenMP thread that writes a record when
 *     its per-thread, per-device buffer has no room left
 *     (OmptTracingBufferMgr::assignCursor; "TODO Move the buffer allocation to
 *     a helper thread").  A buffer smaller than one record (or NULL, 0 bytes)
 *     makes the runtime drop that record, with no report to the tool.
 *   - A buffer that fills is queued; a helper thread of the runtime (a plain
 *     std::thread, no thread_begin) calls buffer_complete once per contiguous
 *     run of ready records (flushBuffer), with bytes = the run's span and
 *     begin = its first record, buffer_owned 0.  A record still being written
 *     splits runs, and its run comes in a later call: runs of one buffer come
 *     out of time order.  When a full buffer's records were all released, one
 *     more call hands it back: bytes 0, begin 0, buffer_owned 1
 *     (dispatchBufferOwnedCallback).  A buffer that never fills is delivered
 *     by flush/stop (flushAllBuffers, from the current cursor) but never
 *     handed back owned: the tool frees it.  ompt_flush_trace called from the
 *     helper thread returns 0 (amIHelperThread); stop_trace flushes, then
 *     joins the helper threads.  "There is a small window when the
 *     buffer-completion callback may be invoked even after tracing has been
 *     disabled" (dispatchCallback): records after stop.
 *   - Record stride: getTRSize() = sizeof(ompt_record_ompt_t) plus the
 *     runtime's own status word (TraceRecord { ompt_record_ompt_t; atomic
 *     TRState }), so larger than sizeof(ompt_record_ompt_t) = 104 bytes on
 *     x86-64; advance_buffer_cursor ignores `size` and answers 0 (next = 0)
 *     at the last record of the run being delivered (isLastCursor).
 *     get_record_type always answers ompt_record_ompt; get_record_ompt
 *     returns the cursor itself.
 *   - Record fields (set_trace_record_common and the type helpers): type =
 *     the non-EMI callback code (8, 9, 10) even when EMI types were enabled;
 *     time = the operation's device start (0 for target records: "no
 *     consumer"); thread_id = std::hash of the std::thread::id; target_id =
 *     TargetData.value, i.e. the value the tool stored in target_emi's
 *     target_data; data op and kernel host_op_id = the runtime's HostOpId,
 *     the storage whose address target_data_op_emi / target_submit_emi pass
 *     (so the value the tool set there); target record task_id = the
 *     encountering task's ompt_data_t value.
 *   - set_trace_ompt(dev, 1, 0) (all types) answers ompt_set_sometimes, one of
 *     the target types (8/9/10/33/34/35) ompt_set_always, others never.
 *   - Device lookup: nine names; NULL for pause_trace, set_trace_native,
 *     get_record_native, get_record_abstract.  get_device_time returns the
 *     device's system timestamp in ns; translate_time returns
 *     time * HostToDeviceSlope + HostToDeviceOffset, a double in seconds of
 *     the host's gettimeofday clock, not the tool's clock.
 * Intel (INTEL_COLLAB libomptarget, OpenCL plugin's OMPT entries, as mirrored
 *   in public Intel-derived llvm trees): the device lookup offers every entry
 *   point, but set_trace_ompt answers ompt_set_never, start_trace returns 0
 *   (OMPT_FAIL), translate_time returns 0.0, get_device_time reads
 *   clGetDeviceAndHostTimer.  The oneAPI Level Zero plugin (L0OMPT.cpp) is
 *   reported to implement tracing; its source was not found in the index.
 * OpenMP 5.2, 19.5: "Prior to dispatching a finalization callback for a
 *   device on which tracing is active, the OpenMP implementation stops
 *   tracing on the device and synchronously flushes all trace records".
 *
 * Usage: emu_offload [switches]; `emu_offload --help` lists them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <omp-tools.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEVICES 8
#define RECORD_SIZE sizeof(ompt_record_ompt_t)
#define UNKNOWN_TYPE 999 /* a type no OMPT version defines */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin_ns(uint64_t ns) {
  uint64_t end = mono_ns() + ns;
  while (mono_ns() < end) {
  }
}

/* ---- switches ------------------------------------------------------------ */

static struct {
  int devices, regions, ops, kernels;
  size_t stride;
  int helper;            /* buffer_complete from a helper thread (1) or the calling thread */
  int runs;              /* each delivery split into this many runs, delivered last first */
  int owned_last;        /* owned on a full buffer's last run instead of ROCm's extra call */
  int hold;              /* deliver only at flush/stop, never when a buffer fills */
  int non_emi;           /* set_callback answers never for the EMI target callbacks */
  int emi_types;         /* records carry the EMI type codes (33/34/35) */
  int target_time_zero;  /* target records have time 0 (ROCm) */
  int start_fail;
  int unknown, bad_time, after_stop;
  int control_flush_at, flush_all_at; /* after this many regions (-1: never) */
  int translate;         /* translate_time: 1 seconds of gettimeofday, 0 answers 0.0 */
  double offset_ns, drift;
  uint64_t op_ns;
  long bench;            /* records produced before the timed flush (no host callbacks) */
  int baseline;          /* bench: walk the buffers with no tool */
  const char *truth;
  const char *null_names; /* comma-separated device entry points answered NULL */
  const char *set_trace;  /* "rocm", "always", ..., or "TYPE=ANSWER,..." */
} opt = {
    .devices = 1, .regions = 4, .ops = 3, .kernels = 1, .stride = RECORD_SIZE, .helper = 1,
    .runs = 1, .control_flush_at = -1, .flush_all_at = -1, .translate = 1,
    .offset_ns = 5e12, .drift = 1e-4, .op_ns = 20000,
    .null_names = "ompt_pause_trace,ompt_set_trace_native,ompt_get_record_native,"
                  "ompt_get_record_abstract",
    .set_trace = "rocm",
};

static const char USAGE[] =
    "usage: emu_offload [switch ...]\n"
    "  --devices N --regions N --ops N --kernels N   what runs (per device / region)\n"
    "  --stride BYTES        record stride in buffers (>= 104; ROCm: larger)\n"
    "  --complete helper|caller   who calls buffer_complete\n"
    "  --runs K              each delivery in K runs, last run first (out of time order)\n"
    "  --owned empty|last    a full buffer handed back by an extra (0 bytes, owned) call\n"
    "                        (ROCm) or on its last run\n"
    "  --hold                deliver only at flush/stop (buffers pile up in the tool's pool)\n"
    "  --non-emi             set_callback answers never for target*_emi\n"
    "  --emi-types           records carry types 33/34/35 (ROCm: 8/9/10)\n"
    "  --target-time-zero    target records have time 0 (ROCm)\n"
    "  --set-trace SPEC      rocm | always | sometimes | never | error | TYPE=ANSWER,...\n"
    "                        (TYPE 0 = all types; sometimes on one type: every other record)\n"
    "  --null LIST           device entry points answered NULL (comma-separated full\n"
    "                        names, or 'none'; default ROCm's four)\n"
    "  --start-fail          ompt_start_trace returns 0\n"
    "  --unknown N           N records of an unknown type per device\n"
    "  --bad-time N          N kernel records per device with end before begin\n"
    "  --after-stop N        N records delivered after stop_trace, inside it\n"
    "  --control-flush-at K  omp_control_tool(flush) after K regions\n"
    "  --flush-all-at K      the tool's omptpy_flush_all after K regions\n"
    "  --translate seconds|zero   translate_time's answer\n"
    "  --offset-ns X --drift D    device clock = X + host monotonic ns * (1 + D)\n"
    "  --op-ns NS            host time each operation takes\n"
    "  --bench N             N kernel records made before a timed flush\n"
    "  --baseline            with --bench: no tool, the emulator walks the buffers\n"
    "  --truth FILE          ground truth JSON\n";

/* ---- ground truth ---------------------------------------------------------- */

typedef struct truth_rec {
  ompt_record_ompt_t r;
  int device, buffer, slot; /* buffer -1: lost */
  const char *lost;
  uint64_t host_begin_ns, host_end_ns;
  int after_stop, delivered;
} truth_rec;

static struct {
  truth_rec *v;
  size_t n, cap;
} truth;

static truth_rec *truth_add(void) {
  if (truth.n == truth.cap) {
    truth.cap = truth.cap ? 2 * truth.cap : 1024;
    truth.v = realloc(truth.v, truth.cap * sizeof *truth.v);
    if (!truth.v) {
      perror("emu_offload");
      abort();
    }
  }
  return &truth.v[truth.n++];
}

/* ---- devices and their buffers ------------------------------------------- */

enum { SLOT_FREE, SLOT_READY, SLOT_RELEASED };

typedef struct delivery {
  size_t first, count;
  int owned;
} delivery;

typedef struct emu_buffer {
  int id, device;
  char *base;
  size_t bytes, nslots, used;
  unsigned char *state; /* per slot: the runtime's own metadata, kept beside the buffer */
  size_t *rec;          /* per slot: index in truth */
  int full, queued, handed_back;
  delivery *del;
  size_t ndel, capdel;
  struct emu_buffer *next;
} emu_buffer;

typedef struct emu_device {
  int num;
  int started, stopped, finalized;
  ompt_callback_buffer_request_t request;
  ompt_callback_buffer_complete_t complete;
  int answered[64]; /* what set_trace_ompt returned per type (0 = all types); -1: not asked */
  int mode[64];     /* per record type: 0 not produced, 1 every record, 2 every other one */
  unsigned alternate[64];
  emu_buffer *cur;
  char *run_end;   /* end of the run being delivered (advance_buffer_cursor) */
  int flush_wanted;
  long zero_buffers, lost, late;
} emu_device;

static emu_device devices[MAX_DEVICES];
static emu_buffer *buffers; /* every buffer the tool gave, newest first */
static int nbuffers;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* buffers, slots, flush requests */
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static pthread_t helper;
static int helper_running, helper_busy, helper_quit;
static pthread_t helper_id;
static uint64_t flush_gen, flush_done_gen;

static const char *answer_name(int a) {
  static const char *names[] = {"error", "never", "impossible", "sometimes", "sometimes_paired",
                                "always"};
  return a >= 0 && a <= 5 ? names[a] : "?";
}

static int answer_of(const char *s) {
  for (int a = 0; a <= 5; a++)
    if (strcmp(s, answer_name(a)) == 0) return a;
  fprintf(stderr, "emu_offload: unknown set_trace answer '%s'\n", s);
  exit(2);
}

static int is_target_type(unsigned t) {
  return t == 8 || t == 9 || t == 10 || t == 33 || t == 34 || t == 35;
}

/* What set_trace_ompt answers for one type (0 = all). */
static int trace_answer(unsigned etype) {
  const char *s = opt.set_trace;
  if (strcmp(s, "rocm") == 0)
    return etype == 0 ? ompt_set_sometimes : is_target_type(etype) ? ompt_set_always : ompt_set_never;
  if (!strchr(s, '=')) return answer_of(s);
  char buf[512];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    char *eq = strchr(tok, '=');
    if (eq && (unsigned)atoi(tok) == etype) return answer_of(eq + 1);
  }
  return etype == 0 || is_target_type(etype) ? ompt_set_always : ompt_set_never;
}

/* Records of a target type are made when its EMI or its non-EMI type was
 * enabled (ROCm checks both). */
static int record_mode(const emu_device *d, int type) {
  int plain = type == 33 ? 8 : type == 34 ? 9 : type == 35 ? 10 : type;
  if (plain < 8 || plain > 10) return 0;
  int a = d->mode[plain], b = d->mode[plain + 25];
  return a == 1 || b == 1 ? 1 : a ? a : b;
}

static uint64_t device_time(const emu_device *d, uint64_t host_ns) {
  (void)d;
  return (uint64_t)(opt.offset_ns + (double)host_ns * (1.0 + opt.drift));
}

/* ---- delivery ---------------------------------------------------------- */

static void note_delivery(emu_buffer *b, size_t first, size_t count, int owned) {
  if (b->ndel == b->capdel) {
    b->capdel = b->capdel ? 2 * b->capdel : 8;
    b->del = realloc(b->del, b->capdel * sizeof *b->del);
    if (!b->del) abort();
  }
  b->del[b->ndel++] = (delivery){first, count, owned};
}

static void complete(emu_device *d, emu_buffer *b, size_t first, size_t count, int owned) {
  char *begin = count ? b->base + first * opt.stride : NULL;
  d->run_end = count ? begin + count * opt.stride : NULL;
  d->complete(d->num, b->base, count * opt.stride, (ompt_buffer_cursor_t)begin, owned);
  d->run_end = NULL;
}

/* Hands the tool the ready records of b (runs of consecutive ready slots),
 * then b itself when it is full and wholly released.  `final`: the last
 * delivery there will be (stop). */
static void deliver(emu_device *d, emu_buffer *b, int final) {
  pthread_mutex_lock(&lock);
  size_t ranges[64][2], nr = 0, i = 0;
  while (i < b->used && nr < 64) {
    if (b->state[i] != SLOT_READY) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < b->used && b->state[j] == SLOT_READY) b->state[j++] = SLOT_RELEASED;
    ranges[nr][0] = i, ranges[nr][1] = j - i, nr++;
    i = j;
  }
  for (size_t r = 0; r < nr; r++)
    for (size_t k = ranges[r][0]; k < ranges[r][0] + ranges[r][1]; k++) truth.v[b->rec[k]].delivered++;
  int whole = b->full || final;
  for (size_t k = 0; k < b->used; k++) whole &= b->state[k] == SLOT_RELEASED;
  int hand_back = whole && !b->handed_back && (b->full || opt.owned_last);
  if (hand_back) b->handed_back = 1;
  pthread_mutex_unlock(&lock);

  /* Each range in opt.runs pieces, the last piece first. */
  for (size_t r = 0; r < nr; r++) {
    size_t first = ranges[r][0], count = ranges[r][1];
    int pieces = opt.runs < (int)count ? opt.runs : (int)count;
    for (int p = pieces - 1; p >= 0; p--) {
      size_t a = first + count * (size_t)p / (size_t)pieces;
      size_t e = first + count * (size_t)(p + 1) / (size_t)pieces;
      int owned = hand_back && opt.owned_last && r == nr - 1 && p == 0;
      note_delivery(b, a, e - a, owned);
      complete(d, b, a, e - a, owned);
    }
  }
  if (hand_back && (!opt.owned_last || nr == 0)) {
    note_delivery(b, 0, 0, 1);
    complete(d, b, 0, 0, 1);
  }
}

static void deliver_device(emu_device *d, int include_current, int final) {
  for (emu_buffer *b = buffers; b; b = b->next) {
    if (b->device != d->num || b->handed_back) continue;
    if (b->full || include_current || final) deliver(d, b, final);
  }
}

static void *helper_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (!helper_quit && flush_done_gen == flush_gen) {
      int queued = 0;
      for (emu_buffer *b = buffers; b; b = b->next) queued |= b->queued;
      if (queued) break;
      pthread_cond_wait(&work_cv, &lock);
    }
    if (helper_quit) break;
    uint64_t gen = flush_gen;
    helper_busy = 1;
    for (emu_buffer *b = buffers; b; b = b->next) {
      if (!b->queued) continue;
      b->queued = 0;
      pthread_mutex_unlock(&lock);
      deliver(&devices[b->device], b, 0);
      pthread_mutex_lock(&lock);
    }
    for (int i = 0; i < opt.devices; i++) {
      if (!devices[i].flush_wanted) continue;
      devices[i].flush_wanted = 0;
      pthread_mutex_unlock(&lock);
      deliver_device(&devices[i], 1, 0);
      pthread_mutex_lock(&lock);
    }
    helper_busy = 0;
    flush_done_gen = gen;
    pthread_cond_broadcast(&done_cv);
  }
  pthread_mutex_unlock(&lock);
  return NULL;
}

/* A full buffer: to the helper thread, or delivered by this thread. */
static void buffer_filled(emu_device *d, emu_buffer *b) {
  if (opt.hold) return;
  if (opt.helper) {
    pthread_mutex_lock(&lock);
    b->queued = 1;
    pthread_cond_signal(&work_cv);
    pthread_mutex_unlock(&lock);
  } else {
    deliver(d, b, 0);
  }
}

static int flush_device(emu_device *d) {
  if (opt.helper) {
    if (helper_running && pthread_equal(pthread_self(), helper_id)) return 0; /* ROCm */
    pthread_mutex_lock(&lock);
    d->flush_wanted = 1;
    uint64_t gen = ++flush_gen;
    pthread_cond_signal(&work_cv);
    while (flush_done_gen < gen) pthread_cond_wait(&done_cv, &lock);
    pthread_mutex_unlock(&lock);
  } else {
    deliver_device(d, 1, 0);
  }
  return 1;
}

/* ---- producing records ----------------------------------------------------- */

static int next_slot(emu_device *d, emu_buffer **out) {
  emu_buffer *b = d->cur;
  if (b) {
    pthread_mutex_lock(&lock); /* the helper reads `used` of a buffer it flushes */
    int slot = b->used < b->nslots ? (int)b->used++ : -1;
    pthread_mutex_unlock(&lock);
    if (slot >= 0) {
      *out = b;
      return slot;
    }
  }
  emu_buffer *filled = b;
  if (filled) filled->full = 1;
  d->cur = NULL;
  ompt_buffer_t *base = NULL;
  size_t bytes = 0;
  d->request(d->num, &base, &bytes); /* on the thread that writes the record (ROCm) */
  if (filled) buffer_filled(d, filled);
  if (!base || bytes < opt.stride) {
    d->zero_buffers++;
    return -1;
  }
  b = calloc(1, sizeof *b);
  if (!b) abort();
  b->id = nbuffers++;
  b->device = d->num;
  b->base = base;
  b->bytes = bytes;
  b->nslots = bytes / opt.stride;
  b->state = calloc(b->nslots, 1);
  b->rec = calloc(b->nslots, sizeof *b->rec);
  if (!b->state || !b->rec) abort();
  pthread_mutex_lock(&lock);
  b->next = buffers;
  buffers = b;
  b->used = 1;
  pthread_mutex_unlock(&lock);
  d->cur = b;
  *out = b;
  return 0;
}

/* Writes one record for device d if its type is traced; `force`: whatever
 * the tracing state (records after stop). */
static void produce(emu_device *d, ompt_record_ompt_t *r, uint64_t hb, uint64_t he, int force) {
  if (!force) {
    if (!d->started || d->stopped) return;
    if ((int)r->type != UNKNOWN_TYPE) {
      int mode = record_mode(d, (int)r->type);
      if (mode == 0 || (mode == 2 && d->alternate[r->type]++ % 2)) return;
    }
  }
  if (opt.emi_types && r->type >= 8 && r->type <= 10) r->type = (ompt_callbacks_t)(r->type + 25);
  truth_rec t = {.r = *r, .device = d->num, .host_begin_ns = hb, .host_end_ns = he,
                 .after_stop = force, .buffer = -1, .slot = -1};
  emu_buffer *b;
  int slot = next_slot(d, &b);
  if (slot < 0) {
    t.lost = "buffer_request gave no room for a record";
    d->lost++;
    pthread_mutex_lock(&lock);
    *truth_add() = t;
    pthread_mutex_unlock(&lock);
    return;
  }
  char *p = b->base + (size_t)slot * opt.stride;
  memcpy(p, r, RECORD_SIZE);
  if (opt.stride > RECORD_SIZE) /* the runtime's own words past the record: not the tool's */
    memset(p + RECORD_SIZE, 0xA5, opt.stride - RECORD_SIZE);
  t.buffer = b->id;
  t.slot = slot;
  pthread_mutex_lock(&lock); /* truth grows under the lock: the helper counts deliveries in it */
  *truth_add() = t;
  b->rec[slot] = truth.n - 1;
  b->state[slot] = SLOT_READY;
  pthread_mutex_unlock(&lock);
}

/* ---- the device lookup -------------------------------------------------- */

static emu_device *dev_of(ompt_device_t *device) {
  emu_device *d = device;
  return d >= devices && d < devices + MAX_DEVICES ? d : NULL;
}

static ompt_set_result_t emu_set_trace_ompt(ompt_device_t *device, unsigned int enable,
                                            unsigned int etype) {
  emu_device *d = dev_of(device);
  if (!d || etype >= 64) return ompt_set_error;
  int a = trace_answer(etype);
  d->answered[etype] = a;
  /* All types at once: every target type in full, whatever the answer
   * (ROCm's "sometimes" means that other types are never traced); one type:
   * "sometimes" makes every other record of it. */
  int on = enable && a != ompt_set_never && a != ompt_set_error && a != ompt_set_impossible;
  int mode = !on ? 0 : etype != 0 && a == ompt_set_sometimes ? 2 : 1;
  for (unsigned t = 1; t < 64; t++)
    if (is_target_type(t) && (etype == 0 || etype == t)) d->mode[t] = mode;
  return (ompt_set_result_t)a;
}

static ompt_set_result_t emu_set_trace_native(ompt_device_t *device, int enable, int flags) {
  (void)device, (void)enable, (void)flags;
  return ompt_set_never;
}

static int emu_start_trace(ompt_device_t *device, ompt_callback_buffer_request_t request,
                           ompt_callback_buffer_complete_t complete_fn) {
  emu_device *d = dev_of(device);
  if (!d || opt.start_fail || !request || !complete_fn) return 0;
  d->request = request;
  d->complete = complete_fn;
  d->started = 1;
  d->stopped = 0;
  if (opt.helper && !helper_running) {
    helper_running = 1;
    pthread_create(&helper, NULL, helper_main, NULL);
    helper_id = helper;
  }
  return 1;
}

static int emu_pause_trace(ompt_device_t *device, int begin_pause) {
  (void)device, (void)begin_pause;
  return 0;
}

static int emu_flush_trace(ompt_device_t *device) {
  emu_device *d = dev_of(device);
  if (!d || !d->started || d->stopped) return 0;
  return flush_device(d);
}

static int emu_stop_trace(ompt_device_t *device) {
  emu_device *d = dev_of(device);
  if (!d || !d->started || d->stopped) return 0;
  if (opt.helper && helper_running && pthread_equal(pthread_self(), helper_id)) return 0;
  int rc = flush_device(d);
  d->stopped = 1;
  /* ROCm's window: the helper may still hand over records after tracing was
   * disabled.  Written into the current buffer's room only (no request after
   * stop), and delivered here, before stop returns. */
  if (opt.after_stop && d->cur) {
    uint64_t now = mono_ns();
    for (int i = 0; i < opt.after_stop && d->cur->used < d->cur->nslots; i++) {
      ompt_record_ompt_t r = {0};
      r.type = ompt_callback_target_submit;
      r.time = device_time(d, now);
      r.thread_id = (uint64_t)pthread_self();
      r.record.target_kernel.host_op_id = 0xAF7E0000u + (unsigned)i;
      r.record.target_kernel.requested_num_teams = 1;
      r.record.target_kernel.granted_num_teams = 1;
      r.record.target_kernel.end_time = r.time + 1000;
      produce(d, &r, now, now, 1);
      d->late++;
    }
    deliver(d, d->cur, 0);
  }
  return rc;
}

static int emu_advance_buffer_cursor(ompt_device_t *device, ompt_buffer_t *buffer, size_t size,
                                     ompt_buffer_cursor_t current, ompt_buffer_cursor_t *next) {
  (void)buffer, (void)size; /* ROCm ignores size too: the run's end is the runtime's */
  emu_device *d = dev_of(device);
  char *cur = (char *)current;
  if (!d || !cur || !d->run_end || cur + opt.stride >= d->run_end) {
    *next = 0;
    return 0;
  }
  *next = (ompt_buffer_cursor_t)(cur + opt.stride);
  return 1;
}

static ompt_record_t emu_get_record_type(ompt_buffer_t *buffer, ompt_buffer_cursor_t current) {
  (void)buffer;
  return current ? ompt_record_ompt : ompt_record_invalid;
}

static ompt_record_ompt_t *emu_get_record_ompt(ompt_buffer_t *buffer,
                                               ompt_buffer_cursor_t current) {
  (void)buffer;
  return (ompt_record_ompt_t *)current;
}

static void *emu_get_record_native(ompt_buffer_t *buffer, ompt_buffer_cursor_t current,
                                   ompt_id_t *host_op_id) {
  (void)buffer, (void)current, (void)host_op_id;
  return NULL;
}

static ompt_record_abstract_t *emu_get_record_abstract(void *native) {
  (void)native;
  return NULL;
}

static ompt_device_time_t emu_get_device_time(ompt_device_t *device) {
  emu_device *d = dev_of(device);
  return d ? device_time(d, mono_ns()) : 0;
}

/* ROCm: seconds of gettimeofday's clock (the host's wall clock). */
static double emu_translate_time(ompt_device_t *device, ompt_device_time_t time) {
  if (!dev_of(device) || !opt.translate) return 0.0;
  double host_mono = ((double)time - opt.offset_ns) / (1.0 + opt.drift);
  struct timeval tv;
  gettimeofday(&tv, NULL);
  double wall_minus_mono = (double)tv.tv_sec * 1e9 + (double)tv.tv_usec * 1e3 - (double)mono_ns();
  return (host_mono + wall_minus_mono) / 1e9;
}

static int emu_get_device_num_procs(ompt_device_t *device) { return dev_of(device) ? 64 : 0; }

static const struct {
  const char *name;
  ompt_interface_fn_t fn;
} DEVICE_ENTRIES[] = {
#define E(n) {"ompt_" #n, (ompt_interface_fn_t)emu_##n}
    E(set_trace_ompt), E(set_trace_native), E(start_trace), E(pause_trace),
    E(flush_trace), E(stop_trace), E(advance_buffer_cursor), E(get_record_type),
    E(get_record_ompt), E(get_record_native), E(get_record_abstract), E(get_device_time),
    E(translate_time), E(get_device_num_procs),
#undef E
};

static int listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)); p += n)
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

static ompt_interface_fn_t device_lookup(const char *name) {
  for (size_t i = 0; i < sizeof DEVICE_ENTRIES / sizeof *DEVICE_ENTRIES; i++)
    if (strcmp(name, DEVICE_ENTRIES[i].name) == 0)
      return listed(opt.null_names, name) ? NULL : DEVICE_ENTRIES[i].fn;
  return NULL;
}

/* ---- the host side: callbacks the tool registers, and the host lookup ---- */

static ompt_callback_t callbacks[64];
static _Thread_local ompt_data_t thread_data;
static ompt_data_t initial_task;
static uint64_t unique_id;

#define CB(type, ev) ((type)callbacks[ompt_callback_##ev])
/* Calls the tool's callback for ev if it registered one. */
#define CALL(type, ev, ...) \
  (callbacks[ompt_callback_##ev] ? CB(type, ev)(__VA_ARGS__) : (void)0)

static int set_answer(int event) {
  switch (event) {
    case ompt_callback_device_unload:
    case ompt_callback_target_map:
    case ompt_callback_target_map_emi: return ompt_set_never;
    case ompt_callback_target_emi:
    case ompt_callback_target_data_op_emi:
    case ompt_callback_target_submit_emi: return opt.non_emi ? ompt_set_never : ompt_set_always;
    default: return event >= 1 && event <= 37 ? ompt_set_always : ompt_set_error;
  }
}

static ompt_set_result_t emu_set_callback(ompt_callbacks_t event, ompt_callback_t callback) {
  int a = set_answer((int)event);
  if (a == ompt_set_always) callbacks[event] = callback;
  return (ompt_set_result_t)a;
}

static int emu_get_callback(ompt_callbacks_t event, ompt_callback_t *callback) {
  if ((int)event < 1 || (int)event > 37 || !callbacks[event]) return 0;
  *callback = callbacks[event];
  return 1;
}

static ompt_data_t *emu_get_thread_data(void) { return &thread_data; }

static const struct {
  int value;
  const char *name;
} STATES[] = {{ompt_state_work_serial, "ompt_state_work_serial"},
              {ompt_state_work_parallel, "ompt_state_work_parallel"},
              {ompt_state_idle, "ompt_state_idle"},
              {ompt_state_overhead, "ompt_state_overhead"},
              {ompt_state_wait_barrier, "ompt_state_wait_barrier"}};

/* The walk starts at ompt_state_undefined (not listed). */
static int emu_enumerate_states(int current, int *next, const char **name) {
  size_t n = sizeof STATES / sizeof *STATES, i = 0;
  if (current != ompt_state_undefined) {
    while (i < n && STATES[i].value != current) i++;
    i++;
  }
  if (i >= n) return 0;
  *next = STATES[i].value;
  *name = STATES[i].name;
  return 1;
}

static int emu_enumerate_mutex_impls(int current, int *next, const char **name) {
  static const char *impls[] = {"mutex_impl_none", "mutex_impl_spin", "mutex_impl_queuing"};
  if (current < 0 || current >= 2) return 0;
  *next = current + 1;
  *name = impls[current + 1];
  return 1;
}

static ompt_state_t emu_get_state(ompt_wait_id_t *wait_id) {
  if (wait_id) *wait_id = 0;
  return ompt_state_work_serial;
}

static int emu_get_parallel_info(int level, ompt_data_t **parallel_data, int *team_size) {
  (void)level, (void)parallel_data, (void)team_size;
  return 0;
}

static int emu_get_task_info(int level, int *flags, ompt_data_t **task_data,
                             ompt_frame_t **task_frame, ompt_data_t **parallel_data,
                             int *thread_num) {
  static ompt_frame_t frame;
  if (level != 0) return 0;
  if (flags) *flags = ompt_task_initial;
  if (task_data) *task_data = &initial_task;
  if (task_frame) *task_frame = &frame;
  if (parallel_data) *parallel_data = NULL;
  if (thread_num) *thread_num = 0;
  return 2;
}

static int emu_get_num_procs(void) { return (int)sysconf(_SC_NPROCESSORS_ONLN); }
static int emu_get_num_places(void) { return 0; }
static int emu_get_place_proc_ids(int place, int n, int *ids) {
  (void)place, (void)n, (void)ids;
  return 0;
}
static int emu_get_place_num(void) { return -1; }
static int emu_get_proc_id(void) { return sched_getcpu(); }
static int emu_get_num_devices(void) { return opt.devices; }
static uint64_t emu_get_unique_id(void) { return __atomic_add_fetch(&unique_id, 1, __ATOMIC_RELAXED); }
static int emu_get_target_info(uint64_t *device_num, ompt_id_t *target_id, ompt_id_t *host_op_id) {
  (void)device_num, (void)target_id, (void)host_op_id;
  return 0;
}

static ompt_interface_fn_t host_lookup(const char *name) {
  static const struct {
    const char *name;
    ompt_interface_fn_t fn;
  } HOST[] = {
#define E(n) {"ompt_" #n, (ompt_interface_fn_t)emu_##n}
      E(set_callback), E(get_callback), E(get_thread_data), E(enumerate_states),
      E(enumerate_mutex_impls), E(get_state), E(get_parallel_info), E(get_task_info),
      E(get_num_procs), E(get_num_places), E(get_place_proc_ids), E(get_place_num),
      E(get_proc_id), E(get_num_devices), E(get_unique_id), E(get_target_info),
#undef E
  };
  for (size_t i = 0; i < sizeof HOST / sizeof *HOST; i++)
    if (strcmp(name, HOST[i].name) == 0) return HOST[i].fn;
  return NULL; /* get_task_memory, finalize_tool, partition places: not offered */
}

/* ---- the tool -------------------------------------------------------------- */

static ompt_start_tool_result_t *tool;
static void *tool_handle;

static void load_tool(void) {
  const char *libs = getenv("OMP_TOOL_LIBRARIES");
  if (!libs || !*libs) return;
  char buf[8192];
  snprintf(buf, sizeof buf, "%s", libs);
  for (char *save, *path = strtok_r(buf, ":", &save); path; path = strtok_r(NULL, ":", &save)) {
    void *h = dlopen(path, RTLD_LAZY);
    if (!h) {
      fprintf(stderr, "emu_offload: %s\n", dlerror());
      continue;
    }
    ompt_start_tool_result_t *(*start)(unsigned, const char *) =
        (ompt_start_tool_result_t * (*)(unsigned, const char *)) dlsym(h, "ompt_start_tool");
    ompt_start_tool_result_t *r = start ? start(201611, "emu_offload (ompt-py tests)") : NULL;
    if (r) {
      tool = r;
      tool_handle = h;
      return;
    }
  }
}

/* omp_control_tool as libomp implements it: the tool's callback, or -2. */
static int emu_omp_control_tool(int command, int modifier, void *arg) {
  ompt_callback_control_tool_t cb = CB(ompt_callback_control_tool_t, control_tool);
  return cb ? cb((uint64_t)command, (uint64_t)modifier, arg, __builtin_return_address(0)) : -2;
}

/* ---- the program: target regions ------------------------------------------ */

static uint64_t next_runtime_id = 1; /* non-EMI target ids and host op ids */

static void *fake_addr(int device, int region, int op) {
  return (void *)(uintptr_t)(0x7f0000000000ull + ((uint64_t)device << 32) +
                             ((uint64_t)region << 16) + ((uint64_t)op << 8));
}

static const ompt_target_data_op_t OPTYPES[] = {
    ompt_target_data_alloc, ompt_target_data_transfer_to_device,
    ompt_target_data_transfer_from_device, ompt_target_data_delete};

static void target_callback(emu_device *d, ompt_scope_endpoint_t ep, ompt_data_t *target_data,
                            uint64_t runtime_target_id, const void *codeptr) {
  if (!opt.non_emi && callbacks[ompt_callback_target_emi])
    CB(ompt_callback_target_emi_t, target_emi)(ompt_target, ep, d->num, &initial_task, NULL,
                                                target_data, codeptr);
  else if (opt.non_emi && callbacks[ompt_callback_target])
    CB(ompt_callback_target_t, target)(ompt_target, ep, d->num, &initial_task,
                                        runtime_target_id, codeptr);
}

static uint64_t record_target_id(ompt_data_t *target_data, uint64_t runtime_target_id) {
  return opt.non_emi ? runtime_target_id : target_data->value;
}

static void target_record(emu_device *d, ompt_scope_endpoint_t ep, uint64_t target_id,
                          const void *codeptr, uint64_t host_ns) {
  ompt_record_ompt_t r = {0};
  r.type = ompt_callback_target;
  r.time = opt.target_time_zero ? 0 : device_time(d, host_ns);
  r.thread_id = (uint64_t)pthread_self();
  r.target_id = target_id;
  r.record.target.kind = ompt_target;
  r.record.target.endpoint = ep;
  r.record.target.device_num = d->num;
  r.record.target.task_id = initial_task.value;
  r.record.target.target_id = target_id;
  r.record.target.codeptr_ra = codeptr;
  produce(d, &r, host_ns, host_ns, 0);
}

static void run_region(emu_device *d, int region, int *bad_time_left) {
  const void *codeptr = (const void *)(uintptr_t)(0x401000 + 0x40 * region);
  ompt_data_t target_data = {0};
  uint64_t runtime_target_id = next_runtime_id++;
  ompt_id_t host_op_id = 0; /* one storage for every operation, as libomptarget's HostOpId */
  int initial_device = opt.devices;

  target_callback(d, ompt_scope_begin, &target_data, runtime_target_id, codeptr);
  uint64_t tid = record_target_id(&target_data, runtime_target_id);
  target_record(d, ompt_scope_begin, tid, codeptr, mono_ns());

  for (int op = 0; op < opt.ops; op++) {
    ompt_target_data_op_t optype = OPTYPES[op % 4];
    int to_device = optype != ompt_target_data_transfer_from_device;
    void *host = fake_addr(initial_device, region, op), *dev = fake_addr(d->num, region, op);
    void *src = to_device ? host : dev, *dst = to_device ? dev : host;
    int srcdev = to_device ? initial_device : d->num, dstdev = to_device ? d->num : initial_device;
    size_t bytes = (size_t)64 * (size_t)(op + 1) * (size_t)(region + 1);
    uint64_t runtime_op = next_runtime_id++;
    if (!opt.non_emi) {
      CALL(ompt_callback_target_data_op_emi_t, target_data_op_emi,
          ompt_scope_begin, NULL, &target_data, &host_op_id, optype, src, srcdev, dst, dstdev,
          bytes, codeptr);
    } else if (callbacks[ompt_callback_target_data_op]) {
      CB(ompt_callback_target_data_op_t, target_data_op)(runtime_target_id, runtime_op, optype,
                                                          src, srcdev, dst, dstdev, bytes,
                                                          codeptr);
    }
    uint64_t hb = mono_ns();
    spin_ns(opt.op_ns);
    uint64_t he = mono_ns();
    uint64_t op_id = opt.non_emi ? runtime_op : host_op_id;
    if (!opt.non_emi)
      CALL(ompt_callback_target_data_op_emi_t, target_data_op_emi,
          ompt_scope_end, NULL, &target_data, &host_op_id, optype, src, srcdev, dst, dstdev,
          bytes, codeptr);
    ompt_record_ompt_t r = {0};
    r.type = ompt_callback_target_data_op;
    r.time = device_time(d, hb);
    r.thread_id = (uint64_t)pthread_self();
    r.target_id = tid;
    r.record.target_data_op.host_op_id = op_id;
    r.record.target_data_op.optype = optype;
    r.record.target_data_op.src_addr = src;
    r.record.target_data_op.src_device_num = srcdev;
    r.record.target_data_op.dest_addr = dst;
    r.record.target_data_op.dest_device_num = dstdev;
    r.record.target_data_op.bytes = bytes;
    r.record.target_data_op.end_time = device_time(d, he);
    r.record.target_data_op.codeptr_ra = codeptr;
    produce(d, &r, hb, he, 0);
  }

  for (int k = 0; k < opt.kernels; k++) {
    unsigned teams = 1u + (unsigned)((region + k) % 8) * 16u;
    uint64_t runtime_op = next_runtime_id++;
    if (!opt.non_emi)
      CALL(ompt_callback_target_submit_emi_t, target_submit_emi, ompt_scope_begin, &target_data,
                                                                &host_op_id, teams);
    else if (callbacks[ompt_callback_target_submit])
      CB(ompt_callback_target_submit_t, target_submit)(runtime_target_id, runtime_op, teams);
    uint64_t hb = mono_ns();
    spin_ns(opt.op_ns);
    uint64_t he = mono_ns();
    uint64_t op_id = opt.non_emi ? runtime_op : host_op_id;
    if (!opt.non_emi)
      CALL(ompt_callback_target_submit_emi_t, target_submit_emi, ompt_scope_end, &target_data,
                                                                &host_op_id, teams);
    ompt_record_ompt_t r = {0};
    r.type = ompt_callback_target_submit;
    r.time = device_time(d, hb);
    r.thread_id = (uint64_t)pthread_self();
    r.target_id = tid;
    r.record.target_kernel.host_op_id = op_id;
    r.record.target_kernel.requested_num_teams = teams;
    r.record.target_kernel.granted_num_teams = teams < 64 ? teams : 64;
    r.record.target_kernel.end_time = device_time(d, he);
    if (*bad_time_left > 0) { /* end before begin */
      (*bad_time_left)--;
      uint64_t t = r.time;
      r.time = r.record.target_kernel.end_time;
      r.record.target_kernel.end_time = t - 1;
    }
    produce(d, &r, hb, he, 0);
  }

  uint64_t end_ns = mono_ns();
  target_record(d, ompt_scope_end, tid, codeptr, end_ns);
  target_callback(d, ompt_scope_end, &target_data, runtime_target_id, codeptr);
}

static void unknown_records(emu_device *d) {
  for (int i = 0; i < opt.unknown; i++) {
    uint64_t now = mono_ns();
    ompt_record_ompt_t r = {0};
    r.type = (ompt_callbacks_t)UNKNOWN_TYPE;
    r.time = device_time(d, now);
    r.thread_id = (uint64_t)pthread_self();
    produce(d, &r, now, now, 0);
  }
}

/* ---- bench: records made first, their delivery timed ------------------------- */

static ompt_buffer_t *bench_pool_next;
static void bench_request(int device, ompt_buffer_t **buffer, size_t *bytes) {
  (void)device;
  *bytes = (size_t)1 << 20;
  *buffer = bench_pool_next = malloc(*bytes);
}

static volatile uint64_t bench_sink;
static void bench_complete(int device, ompt_buffer_t *buffer, size_t bytes,
                           ompt_buffer_cursor_t begin, int owned) {
  emu_device *d = &devices[device];
  uint64_t sum = 0;
  ompt_buffer_cursor_t cur = begin;
  for (size_t n = 0; bytes && n < bytes / opt.stride; n++) {
    ompt_record_ompt_t *r = emu_get_record_ompt(buffer, cur);
    if (emu_get_record_type(buffer, cur) == ompt_record_ompt)
      sum += r->time + r->record.target_kernel.end_time + r->record.target_kernel.host_op_id;
    if (!emu_advance_buffer_cursor(d, buffer, bytes, cur, &cur)) break;
  }
  bench_sink += sum;
  if (owned) free(buffer);
}

static void bench(void) {
  emu_device *d = &devices[0];
  if (!d->started) {
    fprintf(stderr, "emu_offload: --bench needs tracing started on device 0\n");
    return;
  }
  opt.hold = 1;
  uint64_t now = mono_ns();
  for (long i = 0; i < opt.bench; i++) {
    ompt_record_ompt_t r = {0};
    r.type = ompt_callback_target_submit;
    r.time = device_time(d, now + (uint64_t)i * 100);
    r.thread_id = 1;
    r.target_id = 1 + (uint64_t)i / 100;
    r.record.target_kernel.host_op_id = 1 + (uint64_t)i;
    r.record.target_kernel.requested_num_teams = 8;
    r.record.target_kernel.granted_num_teams = 8;
    r.record.target_kernel.end_time = r.time + 50;
    produce(d, &r, now, now, 0);
  }
  uint64_t t0 = mono_ns();
  deliver_device(d, 1, 1); /* on this thread: the time is the consumer's, not a hand-over's */
  uint64_t t1 = mono_ns();
  printf("{\"bench_records\": %ld, \"seconds\": %.6f, \"records_per_s\": %.0f, \"tool\": %s}\n",
         opt.bench, (double)(t1 - t0) / 1e9, (double)opt.bench / ((double)(t1 - t0) / 1e9),
         opt.baseline ? "false" : "true");
  fflush(stdout);
}

/* ---- ground truth ---------------------------------------------------------- */

static void write_truth(void) {
  if (!opt.truth) return;
  FILE *f = fopen(opt.truth, "w");
  if (!f) {
    perror(opt.truth);
    return;
  }
  fprintf(f, "{\"stride\": %zu, \"clock\": \"CLOCK_MONOTONIC\", \"offset_ns\": %.17g, "
             "\"drift\": %.17g, \"tool\": %s,\n \"devices\": [",
          opt.stride, opt.offset_ns, opt.drift, tool ? "true" : "false");
  for (int i = 0; i < opt.devices; i++) {
    emu_device *d = &devices[i];
    fprintf(f, "%s\n  {\"device\": %d, \"started\": %s, \"stopped\": %s, \"zero_byte_buffers\": %ld, "
               "\"records_lost\": %ld, \"records_after_stop\": %ld, \"set_trace\": {",
            i ? "," : "", i, d->started ? "true" : "false", d->stopped ? "true" : "false",
            d->zero_buffers, d->lost, d->late);
    int first = 1;
    for (int t = 0; t < 64; t++)
      if (d->answered[t] >= 0) {
        fprintf(f, "%s\"%d\": \"%s\"", first ? "" : ", ", t, answer_name(d->answered[t]));
        first = 0;
      }
    fprintf(f, "}}");
  }
  fprintf(f, "],\n \"buffers\": [");
  int nb = 0;
  for (int id = 0; id < nbuffers; id++)
    for (emu_buffer *b = buffers; b; b = b->next) {
      if (b->id != id) continue;
      fprintf(f, "%s\n  {\"id\": %d, \"device\": %d, \"address\": %" PRIu64 ", \"bytes\": %zu, "
                 "\"records\": %zu, \"full\": %s, \"handed_back\": %s, \"deliveries\": [",
              nb++ ? "," : "", b->id, b->device, (uint64_t)(uintptr_t)b->base, b->bytes,
              b->used, b->full ? "true" : "false", b->handed_back ? "true" : "false");
      for (size_t k = 0; k < b->ndel; k++)
        fprintf(f, "%s[%zu, %zu, %d]", k ? ", " : "", b->del[k].first, b->del[k].count,
                b->del[k].owned);
      fprintf(f, "]}");
    }
  fprintf(f, "],\n \"records\": [");
  for (size_t i = 0; i < truth.n; i++) {
    truth_rec *t = &truth.v[i];
    const ompt_record_ompt_t *r = &t->r;
    fprintf(f, "%s\n  {\"device\": %d, \"buffer\": %d, \"slot\": %d, \"delivered\": %d, "
               "\"after_stop\": %s, \"lost\": %s%s%s, \"host_begin_ns\": %" PRIu64
               ", \"host_end_ns\": %" PRIu64 ", \"type\": %d, \"time\": %" PRIu64
               ", \"thread_id\": %" PRIu64 ", \"target_id\": %" PRIu64,
            i ? "," : "", t->device, t->buffer, t->slot, t->delivered,
            t->after_stop ? "true" : "false", t->lost ? "\"" : "", t->lost ? t->lost : "null",
            t->lost ? "\"" : "", t->host_begin_ns, t->host_end_ns, (int)r->type, r->time,
            r->thread_id, r->target_id);
    int type = (int)r->type > 25 && (int)r->type != UNKNOWN_TYPE ? (int)r->type - 25 : (int)r->type;
    if (type == ompt_callback_target) {
      const ompt_record_target_t *x = &r->record.target;
      fprintf(f, ", \"kind\": %d, \"endpoint\": %d, \"device_num\": %d, \"task_id\": %" PRIu64
                 ", \"record_target_id\": %" PRIu64 ", \"codeptr\": %" PRIu64,
              (int)x->kind, (int)x->endpoint, x->device_num, x->task_id, x->target_id,
              (uint64_t)(uintptr_t)x->codeptr_ra);
    } else if (type == ompt_callback_target_data_op) {
      const ompt_record_target_data_op_t *x = &r->record.target_data_op;
      fprintf(f, ", \"host_op_id\": %" PRIu64 ", \"optype\": %d, \"src_addr\": %" PRIu64
                 ", \"src_device_num\": %d, \"dest_addr\": %" PRIu64 ", \"dest_device_num\": %d"
                 ", \"bytes\": %zu, \"end_time\": %" PRIu64 ", \"codeptr\": %" PRIu64,
              x->host_op_id, (int)x->optype, (uint64_t)(uintptr_t)x->src_addr, x->src_device_num,
              (uint64_t)(uintptr_t)x->dest_addr, x->dest_device_num, x->bytes, x->end_time,
              (uint64_t)(uintptr_t)x->codeptr_ra);
    } else if (type == ompt_callback_target_submit) {
      const ompt_record_target_kernel_t *x = &r->record.target_kernel;
      fprintf(f, ", \"host_op_id\": %" PRIu64 ", \"requested_num_teams\": %u"
                 ", \"granted_num_teams\": %u, \"end_time\": %" PRIu64,
              x->host_op_id, x->requested_num_teams, x->granted_num_teams, x->end_time);
    }
    fprintf(f, "}");
  }
  fprintf(f, "]}\n");
  fclose(f);
}

/* ---- main ---------------------------------------------------------------- */

static void parse(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define INT(name, field)                        \
  if (strcmp(a, name) == 0 && v) {              \
    opt.field = atoi(v), i++;                   \
    continue;                                   \
  }
#define FLAG(name, field)     \
  if (strcmp(a, name) == 0) { \
    opt.field = 1;            \
    continue;                 \
  }
    INT("--devices", devices) INT("--regions", regions) INT("--ops", ops)
    INT("--kernels", kernels) INT("--runs", runs) INT("--unknown", unknown)
    INT("--bad-time", bad_time) INT("--after-stop", after_stop)
    INT("--control-flush-at", control_flush_at) INT("--flush-all-at", flush_all_at)
    FLAG("--hold", hold) FLAG("--non-emi", non_emi) FLAG("--emi-types", emi_types)
    FLAG("--target-time-zero", target_time_zero) FLAG("--start-fail", start_fail)
    FLAG("--baseline", baseline)
#undef INT
#undef FLAG
    if (strcmp(a, "--stride") == 0 && v) opt.stride = (size_t)atol(v), i++;
    else if (strcmp(a, "--complete") == 0 && v) opt.helper = strcmp(v, "helper") == 0, i++;
    else if (strcmp(a, "--owned") == 0 && v) opt.owned_last = strcmp(v, "last") == 0, i++;
    else if (strcmp(a, "--set-trace") == 0 && v) opt.set_trace = v, i++;
    else if (strcmp(a, "--null") == 0 && v) opt.null_names = strcmp(v, "none") ? v : "", i++;
    else if (strcmp(a, "--translate") == 0 && v) opt.translate = strcmp(v, "zero") != 0, i++;
    else if (strcmp(a, "--offset-ns") == 0 && v) opt.offset_ns = atof(v), i++;
    else if (strcmp(a, "--drift") == 0 && v) opt.drift = atof(v), i++;
    else if (strcmp(a, "--op-ns") == 0 && v) opt.op_ns = (uint64_t)atoll(v), i++;
    else if (strcmp(a, "--bench") == 0 && v) opt.bench = atol(v), i++;
    else if (strcmp(a, "--truth") == 0 && v) opt.truth = v, i++;
    else {
      fputs(strcmp(a, "--help") == 0 ? "" : "emu_offload: unknown switch\n", stderr);
      fputs(USAGE, strcmp(a, "--help") == 0 ? stdout : stderr);
      exit(strcmp(a, "--help") == 0 ? 0 : 2);
    }
  }
  if (opt.devices < 1 || opt.devices > MAX_DEVICES || opt.stride < RECORD_SIZE || opt.runs < 1) {
    fprintf(stderr, "emu_offload: --devices 1..%d, --stride >= %zu, --runs >= 1\n", MAX_DEVICES,
            RECORD_SIZE);
    exit(2);
  }
}

int main(int argc, char **argv) {
  parse(argc, argv);
  for (int i = 0; i < opt.devices; i++) {
    devices[i].num = i;
    for (int t = 0; t < 64; t++) devices[i].answered[t] = -1;
  }
  if (opt.bench && opt.baseline) {
    devices[0].started = 1;
    devices[0].request = bench_request;
    devices[0].complete = bench_complete;
    for (int t = 8; t <= 10; t++) devices[0].mode[t] = 1;
    bench();
    write_truth();
    return 0;
  }
  load_tool();
  int initialized = tool && tool->initialize(host_lookup, opt.devices, &tool->tool_data);
  if (tool && !initialized) tool = NULL;

  if (callbacks[ompt_callback_thread_begin])
    CB(ompt_callback_thread_begin_t, thread_begin)(ompt_thread_initial, &thread_data);
  if (callbacks[ompt_callback_implicit_task])
    CB(ompt_callback_implicit_task_t, implicit_task)(ompt_scope_begin, NULL, &initial_task, 1, 1,
                                                      ompt_task_initial);
  for (int i = 0; i < opt.devices; i++)
    if (callbacks[ompt_callback_device_initialize])
      CB(ompt_callback_device_initialize_t, device_initialize)(
          i, "emu-gpu", &devices[i], device_lookup,
          "emu_offload: an emulated device (ompt-py tests)");

  if (opt.bench) {
    bench();
  } else {
    int done = 0;
    for (int r = 0; r < opt.regions; r++)
      for (int i = 0; i < opt.devices; i++) {
        int bad = r == 0 ? opt.bad_time : 0;
        run_region(&devices[i], r, &bad);
        if (++done == opt.control_flush_at) emu_omp_control_tool(3 /* omp_control_tool_flush */, 0, NULL);
        if (done == opt.flush_all_at) {
          void (*flush_all)(void) = tool_handle ? (void (*)(void))dlsym(tool_handle,
                                                                        "omptpy_flush_all")
                                                : NULL;
          if (flush_all) flush_all();
        }
      }
    for (int i = 0; i < opt.devices; i++) unknown_records(&devices[i]);
  }

  /* Device finalization: tracing stopped and flushed by the runtime first
   * when the tool has not done it (OpenMP 5.2, 19.5); the tool may still call
   * flush/stop inside the callback. */
  for (int i = 0; i < opt.devices; i++) {
    emu_device *d = &devices[i];
    if (d->started && !d->stopped) flush_device(d);
    if (callbacks[ompt_callback_device_finalize])
      CB(ompt_callback_device_finalize_t, device_finalize)(i);
    if (d->started && !d->stopped) {
      deliver_device(d, 1, 1);
      d->stopped = 1;
    }
    d->finalized = 1;
  }
  if (helper_running) {
    pthread_mutex_lock(&lock);
    helper_quit = 1;
    pthread_cond_broadcast(&work_cv);
    pthread_mutex_unlock(&lock);
    pthread_join(helper, NULL);
  }
  if (callbacks[ompt_callback_implicit_task])
    CB(ompt_callback_implicit_task_t, implicit_task)(ompt_scope_end, NULL, &initial_task, 1, 1,
                                                      ompt_task_initial);
  if (callbacks[ompt_callback_thread_end])
    CB(ompt_callback_thread_end_t, thread_end)(&thread_data);
  if (tool) tool->finalize(&tool->tool_data);
  write_truth();
  return 0;
}
