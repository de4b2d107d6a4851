/* sampler_cost MODE [HZ]: a compute-bound parallel loop (about 1 s on 2
 * threads, one region, a static loop, no OpenMP events inside) under one way
 * of sampling, to find where the cost of sampling goes (bench/analysis.py).
 * The program is its own OMPT tool (its ompt_start_tool comes first); in mode
 * `ompt-py` it declines, so that the tool of OMP_TOOL_LIBRARIES attaches.
 * Prints the loop's seconds, then the signals each thread handled.
 *
 * MODE is none, tool, ompt-py or TIMER-HANDLER:
 *   none      no tool at all
 *   tool      a tool whose thread_begin callback notes the thread, no timer
 *   TIMER     mono    per-thread timer, CLOCK_MONOTONIC, SIGEV_THREAD_ID,
 *                     started at thread begin (ompt-py's first design)
 *             grid    the same, expiring on multiples of the period (absolute
 *                     times, as the kernel's tick does)
 *             pair    two such timers per thread taking turns, each at twice
 *                     the period, one period apart (ompt-py's design: see
 *                     csrc/tool/sampler.c)
 *             tcpu    per-thread timer, CLOCK_THREAD_CPUTIME_ID
 *             proc    one timer per process, CLOCK_MONOTONIC, SIGEV_SIGNAL,
 *                     at HZ times the number of threads
 *             pcpu    one timer per process, CLOCK_PROCESS_CPUTIME_ID, HZ per
 *                     CPU second (what ITIMER_PROF does)
 *             tgkill  a sampler thread sleeping until the next period
 *                     (clock_nanosleep, absolute), then tgkill to each thread
 *   HANDLER   empty   counts the signal
 *             overrun + timer_getoverrun (a system call; per-thread timers)
 *             clock   + the period number from clock_gettime (vDSO)
 *             inquiry + ompt_get_state, ompt_get_parallel_info, ompt_get_task_info
 *             record  clock, inquiry, a time stamp and a 64-byte record in a
 *                     thread-local ring: what ompt-py's handler does
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <omp-tools.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

enum timer_kind { T_NONE, T_MONO, T_GRID, T_PAIR, T_TCPU, T_PROC, T_PCPU, T_TGKILL, T_KINDS };
enum handler_kind { H_EMPTY, H_OVERRUN, H_CLOCK, H_INQUIRY, H_RECORD, H_KINDS };
static const char *const timer_names[T_KINDS] = {"", "mono", "grid", "pair", "tcpu",
                                                 "proc", "pcpu", "tgkill"};
static const char *const handler_names[H_KINDS] = {"empty", "overrun", "clock", "inquiry",
                                                   "record"};

typedef struct {
  uint64_t time, pc, parallel, task, wait, frame;
  uint32_t thread, state, a, b;
  uint64_t pad;
} record;

enum { MAX_THREADS = 64, RING = 64 };

typedef struct {
  _Alignas(64) timer_t timers[2];
  pid_t tid;
  unsigned long signals, overruns;
  uint64_t index;
  unsigned pos;
  record ring[RING];
} thread_slot;

static enum timer_kind timer_kind;
static enum handler_kind handler_kind;
static uint64_t period_ns;
static thread_slot slots[MAX_THREADS];
static atomic_int nslots;
static __thread thread_slot *self;
static ompt_get_state_t get_state;
static ompt_get_parallel_info_t get_parallel_info;
static ompt_get_task_info_t get_task_info;
static timer_t process_timer;
static atomic_int stop_sampler;
static pthread_t sampler;
static const char *mode = "none";

static void die(const char *what) {
  perror(what);
  abort();
}

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct timespec timespec_of(uint64_t ns) {
  return (struct timespec){(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
  (void)sig, (void)si, (void)uc;
  thread_slot *t = self;
  if (!t) return;
  t->signals++;
  if (handler_kind == H_EMPTY) return;
  int saved = errno;
  if (handler_kind == H_OVERRUN) {
    int n = timer_getoverrun(t->timers[0]);
    if (n > 0) t->overruns += (unsigned long)n;
  }
  if (handler_kind == H_CLOCK || handler_kind == H_RECORD) {
    uint64_t index = monotonic_ns() / period_ns;
    if (index > t->index + 1) t->overruns += index - t->index - 1;
    if (index > t->index) t->index = index;
  }
  if (handler_kind == H_INQUIRY || handler_kind == H_RECORD) {
    ompt_wait_id_t wait = 0;
    int state = get_state(&wait);
    ompt_data_t *parallel = NULL, *task = NULL, *task_parallel = NULL;
    int team = 0, flags = 0, num = 0;
    ompt_frame_t *frame = NULL;
    get_parallel_info(0, &parallel, &team);
    get_task_info(0, &flags, &task, &frame, &task_parallel, &num);
    if (handler_kind == H_RECORD) {
      uint32_t lo, hi;
      __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
      record *r = &t->ring[t->pos++ % RING];
      r->time = (uint64_t)hi << 32 | lo;
      r->parallel = parallel ? parallel->value : 0;
      r->task = task ? task->value : 0;
      r->wait = wait;
      r->frame = frame ? frame->exit_frame.value : 0;
      r->thread = (uint32_t)(t - slots);
      r->state = (uint32_t)state;
      r->a = (uint32_t)team;
      r->b = (uint32_t)num;
    }
  }
  errno = saved;
}

/* A timer of `period` ns; on the grid of `step` ns (first expiration at
 * `offset` past the next multiple), or relative when step is 0. */
static void start_timer(clockid_t clock, struct sigevent *ev, timer_t *timer, uint64_t period,
                        uint64_t step, uint64_t offset) {
  if (timer_create(clock, ev, timer) != 0) die("timer_create");
  struct itimerspec spec = {timespec_of(period), timespec_of(period)};
  if (step) spec.it_value = timespec_of((monotonic_ns() / step + 1) * step + offset);
  if (timer_settime(*timer, step ? TIMER_ABSTIME : 0, &spec, NULL) != 0) die("timer_settime");
}

static void *sampler_main(void *arg) {
  (void)arg;
  pid_t pid = getpid();
  uint64_t next = monotonic_ns();
  while (!atomic_load(&stop_sampler)) {
    next += period_ns;
    struct timespec at = timespec_of(next);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {
    }
    int n = atomic_load(&nslots);
    for (int i = 0; i < n; i++) syscall(SYS_tgkill, pid, slots[i].tid, SIGRTMIN + 4);
  }
  return NULL;
}

static void on_thread_begin(ompt_thread_t type, ompt_data_t *data) {
  (void)type, (void)data;
  int i = atomic_fetch_add(&nslots, 1);
  if (i >= MAX_THREADS) abort();
  thread_slot *t = &slots[i];
  t->tid = (pid_t)syscall(SYS_gettid);
  t->index = monotonic_ns() / period_ns;
  self = t;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGRTMIN + 4;
  ev.sigev_notify_thread_id = t->tid;
  if (timer_kind == T_MONO) start_timer(CLOCK_MONOTONIC, &ev, &t->timers[0], period_ns, 0, 0);
  if (timer_kind == T_GRID)
    start_timer(CLOCK_MONOTONIC, &ev, &t->timers[0], period_ns, period_ns, 0);
  if (timer_kind == T_PAIR)
    for (int k = 0; k < 2; k++)
      start_timer(CLOCK_MONOTONIC, &ev, &t->timers[k], 2 * period_ns, period_ns,
                  (uint64_t)k * period_ns);
  if (timer_kind == T_TCPU)
    start_timer(CLOCK_THREAD_CPUTIME_ID, &ev, &t->timers[0], period_ns, 0, 0);
}

static int initialize(ompt_function_lookup_t lookup, int device, ompt_data_t *data) {
  (void)device, (void)data;
  ompt_set_callback_t set_callback = (ompt_set_callback_t)lookup("ompt_set_callback");
  get_state = (ompt_get_state_t)lookup("ompt_get_state");
  get_parallel_info = (ompt_get_parallel_info_t)lookup("ompt_get_parallel_info");
  get_task_info = (ompt_get_task_info_t)lookup("ompt_get_task_info");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (timer_kind != T_NONE && sigaction(SIGRTMIN + 4, &sa, NULL) != 0) die("sigaction");
  set_callback(ompt_callback_thread_begin, (ompt_callback_t)on_thread_begin);
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGRTMIN + 4;
  /* omp_get_max_threads() here would deadlock: the runtime is initializing */
  const char *env = getenv("OMP_NUM_THREADS");
  uint64_t threads = env && atoi(env) > 0 ? (uint64_t)atoi(env) : 2;
  if (timer_kind == T_PROC)
    start_timer(CLOCK_MONOTONIC, &ev, &process_timer, period_ns / threads, 0, 0);
  if (timer_kind == T_PCPU)
    start_timer(CLOCK_PROCESS_CPUTIME_ID, &ev, &process_timer, period_ns, 0, 0);
  if (timer_kind == T_TGKILL && pthread_create(&sampler, NULL, sampler_main, NULL) != 0)
    die("pthread_create");
  return 1;
}

static void finalize(ompt_data_t *data) { (void)data; }

ompt_start_tool_result_t *ompt_start_tool(unsigned int version, const char *runtime) {
  (void)version, (void)runtime;
  static ompt_start_tool_result_t result = {initialize, finalize, {0}};
  return strcmp(mode, "none") && strcmp(mode, "ompt-py") ? &result : NULL;
}

static int parse_mode(void) {
  if (!strcmp(mode, "none") || !strcmp(mode, "tool") || !strcmp(mode, "ompt-py")) return 1;
  const char *dash = strchr(mode, '-');
  if (!dash) return 0;
  size_t len = (size_t)(dash - mode);
  for (int i = 1; i < T_KINDS; i++)
    if (len == strlen(timer_names[i]) && !strncmp(mode, timer_names[i], len))
      timer_kind = (enum timer_kind)i;
  int handler = -1;
  for (int i = 0; i < H_KINDS; i++)
    if (!strcmp(dash + 1, handler_names[i])) handler = i;
  if (timer_kind == T_NONE || handler < 0) return 0;
  handler_kind = (enum handler_kind)handler;
  return handler_kind != H_OVERRUN || timer_kind <= T_TCPU;
}

int main(int argc, char **argv) {
  mode = argc > 1 ? argv[1] : "none";
  long hz = argc > 2 ? atol(argv[2]) : 1000;
  if (hz <= 0 || hz > 1000000 || !parse_mode()) {
    fprintf(stderr, "usage: sampler_cost none|tool|ompt-py|TIMER-HANDLER [HZ]\n");
    return 2;
  }
  period_ns = 1000000000u / (uint64_t)hz;
  double t0 = omp_get_wtime(), sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (long i = 0; i < 1000000000L; i++) sum += sqrt((double)i) * 1e-9;
  double t1 = omp_get_wtime();
  atomic_store(&stop_sampler, 1);
  if (timer_kind == T_TGKILL) pthread_join(sampler, NULL);
  fprintf(stderr, "checksum %.6f\n", sum);
  printf("%.6f", t1 - t0);
  for (int i = 0; i < atomic_load(&nslots); i++) printf(" %lu", slots[i].signals);
  printf("\n");
  return 0;
}
