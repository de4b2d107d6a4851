/*
 * Asynchronous state sampling, as the OMPT design intends: per-thread POSIX
 * timers (CLOCK_MONOTONIC, so waiting and sleeping threads are sampled too)
 * send a signal to their thread; the handler writes one sample record into
 * the thread's own buffer.  It never takes the slow path (no lock, no
 * allocation): a sample that finds the thread inside the tool or its chunk
 * full (or its limit lowered by take()) is counted as skipped.  It marks
 * itself in_tool around the write, as a callback does, so take() waits for
 * it.  Off unless OMPTPY_SAMPLE_HZ is set.
 *
 * What a sample reads: the state and wait id from ompt_get_state (the
 * thread's own descriptor, which lives as long as the thread), the
 * interrupted address, and what the thread's callbacks kept for it
 * (callbacks.c, track_*): the running task, its region and its frame.  It
 * does not ask ompt_get_task_info or ompt_get_parallel_info: they hand out
 * the runtime's task and team objects, which the signal may find freed (a
 * task just finished, a team reaped by another thread: AddressSanitizer saw
 * the frame of a freed task read here).  A frame is read only through the
 * pointer the callbacks keep, which they clear before its task can end: so
 * samples have no frames where the tool cannot be sure the task is alive
 * (from the barrier that ends a region until the thread's next task, before
 * the initial task's first region, on a thread the runtime did not announce).
 *
 * Where the time goes (docs/limits.md): on a virtual machine a sample costs
 * the timer interrupt, and each write of the CPU's timer register, far more
 * than the handler.  Hence:
 *  - The expirations fall on multiples of the period (absolute CLOCK_MONOTONIC
 *    times), as the kernel's tick does: where the period divides the tick's,
 *    or the tick's divides it, a sample shares the tick's interrupt instead
 *    of taking one of its own.
 *  - Two timers per thread take turns (each at twice the period, one period
 *    apart).  The kernel re-arms a timer when its signal is delivered; with a
 *    single timer that expiration comes before the next one the CPU's timer
 *    is programmed for (the tick), so the register is written a second time
 *    per sample.  The other timer's expiration is due earlier, so it is not.
 *  - The expirations are numbered by the clock: a sample knows without a
 *    system call how many periods passed since the last one.  A thread that
 *    had no CPU (or had the signal blocked) misses periods: the kernel merges
 *    each timer's expirations into one pending signal.  It ran none of its own
 *    code meanwhile, so it was in the sampled state all along: the record
 *    says how many periods it missed (they are also counted as skipped), and
 *    a signal whose period the last sample already stood for is ignored.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "omptpy_frames.h"
#include "omptpy_internal.h"

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

bool omptpy_sampling;
static int sample_signal;
static uint64_t period_ns;

/* Only the interrupted thread writes its counter (the signal is blocked while
 * its handler runs); the drainer reads it. */
static inline void skipped(omptpy_thread *t, uint64_t n) {
  atomic_store_explicit(&t->samples_skipped,
                        atomic_load_explicit(&t->samples_skipped, memory_order_relaxed) + n,
                        memory_order_relaxed);
}

static void sample(omptpy_thread *t, void *ucontext) {
  uint64_t index = omptpy_monotonic_ns() / period_ns; /* the expiration it stands for */
  if (index <= t->sample_index) return;
  uint64_t missed = index - t->sample_index - 1;
  t->sample_index = index;
  if (!omptpy_recording()) return;
  if (missed) skipped(t, missed);
  if (atomic_load_explicit(&t->in_tool, memory_order_relaxed)) {
    skipped(t, 1);
    return;
  }
  /* Inside the tool from here on, as a callback is: take() may be waiting. */
  omptpy_enter(t);
  if (t->pos >= atomic_load_explicit(&t->limit, memory_order_relaxed)) {
    omptpy_leave(t);
    skipped(t, 1);
    return;
  }
  const omptpy_runtime *rt = &omptpy_g.runtimes[t->runtime];
  ompt_wait_id_t wait_id = 0;
  int state = rt->get_state ? rt->get_state(&wait_id) : -1;
  /* The running task's frame, packed (omptpy.h): the exit frame (else the
   * enter frame) in full, the enter frame as its distance below the exit frame. */
  const ompt_frame_t *frame = atomic_load_explicit(&t->run_frame, memory_order_relaxed);
  uint32_t below;
  uint64_t frame_addr = omptpy_frame_pack(frame, &below);
  uint64_t pc = 0;
#if defined(__x86_64__)
  pc = (uint64_t)((ucontext_t *)ucontext)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  pc = (uint64_t)((ucontext_t *)ucontext)->uc_mcontext.pc;
#else
  (void)ucontext;
#endif
  omptpy_fill(&t->recs[t->pos], t, OMPTPY_EVENT_SAMPLE, 0, omptpy_frame_bits(frame), pc,
              atomic_load_explicit(&t->run_parallel, memory_order_relaxed),
              atomic_load_explicit(&t->run_task, memory_order_relaxed), wait_id, frame_addr,
              ((uint32_t)state & 0xFFFF) | (uint32_t)(missed < 0xFFFF ? missed : 0xFFFF) << 16,
              below);
  omptpy_commit(t);
  omptpy_leave(t);
}

/* errno is the interrupted code's: saved before anything that may set it. */
static void on_sample(int sig, siginfo_t *si, void *ucontext) {
  (void)sig, (void)si;
  int saved_errno = errno;
  omptpy_thread *t = omptpy_tls_thread;
  if (t) sample(t, ucontext);
  errno = saved_errno;
}

/* The timers are armed only once the handler is installed: a timer whose
 * signal has no handler would end the program. */
int omptpy_sampler_init(omptpy_config *cfg) {
  if (cfg->sample_hz == 0) return 0;
  if (cfg->profile) {
    snprintf(cfg->sample_error, sizeof cfg->sample_error,
             "OMPTPY_SAMPLE_HZ is not used in profile mode (OMPTPY_PROFILE=on): no samples "
             "are taken");
    return -EINVAL;
  }
  sample_signal = cfg->sample_signal;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sample;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sample_signal, &sa, NULL) != 0) {
    int e = errno;
    snprintf(cfg->sample_error, sizeof cfg->sample_error,
             "cannot install the sampling signal handler for signal %d: %s; no samples are "
             "taken", sample_signal, strerror(e));
    return -e;
  }
  period_ns = 1000000000u / cfg->sample_hz;
  omptpy_sampling = true;
  return 0;
}

void omptpy_sampler_thread_start(omptpy_thread *t) {
  if (period_ns == 0 || t->has_timer) return;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = sample_signal;
  ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
  t->sample_index = omptpy_monotonic_ns() / period_ns;
  int made = 0;
  for (; made < 2; made++) {
    if (timer_create(CLOCK_MONOTONIC, &ev, &t->timers[made]) != 0) break;
    uint64_t first = (t->sample_index + 1 + (uint64_t)made) * period_ns;
    struct itimerspec spec = {omptpy_timespec(2 * period_ns), omptpy_timespec(first)};
    if (timer_settime(t->timers[made], TIMER_ABSTIME, &spec, NULL) != 0) {
      timer_delete(t->timers[made]);
      break;
    }
  }
  if (made == 2) {
    t->has_timer = true;
  } else if (made == 1) {
    timer_delete(t->timers[0]);
  }
}

void omptpy_sampler_thread_stop(omptpy_thread *t) {
  if (!t->has_timer) return;
  timer_delete(t->timers[0]);
  timer_delete(t->timers[1]);
  t->has_timer = false;
}
