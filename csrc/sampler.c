/*
 * Asynchronous state sampling, as the OMPT design intends: a per-thread POSIX
 * timer (CLOCK_MONOTONIC, so waiting and sleeping threads are sampled too)
 * sends a signal to its thread; the handler calls only the async-signal-safe
 * inquiry functions (ompt_get_state, ompt_get_parallel_info,
 * ompt_get_task_info) and writes one sample record into the thread's own
 * buffer.  It never takes the slow path (no lock, no allocation): a sample
 * that finds the thread inside the tool or its chunk full (or its limit
 * lowered by take()) is counted as skipped.  It marks itself in_tool around
 * the write, as a callback does, so take() waits for it.  Off unless OMPTPY_SAMPLE_HZ is set.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
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

static int sample_signal;
static long period_ns;

static void on_sample(int sig, siginfo_t *si, void *ucontext) {
  (void)sig, (void)si;
  omptpy_thread *t = omptpy_tls_thread;
  if (!t || !omptpy_recording()) return;
  /* Expirations while this signal was still pending (the thread got no CPU
   * for more than a period) were merged into it: owed samples, counted. */
  int merged = t->has_timer ? timer_getoverrun(t->timer) : 0;
  if (merged > 0) t->samples_skipped += (uint64_t)merged;
  if (atomic_load_explicit(&t->in_tool, memory_order_relaxed)) {
    t->samples_skipped++;
    return;
  }
  /* Inside the tool from here on, as a callback is: take() may be waiting. */
  omptpy_enter(t);
  if (t->pos >= atomic_load_explicit(&t->limit, memory_order_relaxed)) {
    omptpy_leave(t);
    t->samples_skipped++;
    return;
  }
  int saved_errno = errno;
  const omptpy_runtime *rt = &omptpy_g.runtimes[t->runtime];
  ompt_wait_id_t wait_id = 0;
  int state = rt->get_state ? rt->get_state(&wait_id) : -1;
  ompt_data_t *parallel = NULL, *task = NULL, *task_parallel = NULL;
  int team_size = 0, flags = 0, thread_num = 0;
  ompt_frame_t *frame = NULL;
  if (rt->get_parallel_info) rt->get_parallel_info(0, &parallel, &team_size);
  if (rt->get_task_info) rt->get_task_info(0, &flags, &task, &frame, &task_parallel, &thread_num);
  /* The innermost task's frame, packed (omptpy.h): the exit frame (else the
   * enter frame) in full, the enter frame as its distance below the exit frame. */
  uint8_t frame_bits = omptpy_frame_bits(frame);
  uint64_t exit_frame = frame ? frame->exit_frame.value : 0;
  uint64_t enter_frame = frame ? frame->enter_frame.value : 0;
  uint32_t below = 0;
  if (exit_frame && enter_frame) {
    int64_t d = (int64_t)(exit_frame - enter_frame);
    below = d > INT32_MIN && d <= INT32_MAX ? (uint32_t)(int32_t)d : (uint32_t)INT32_MIN;
  }
  uint64_t pc = 0;
#if defined(__x86_64__)
  pc = (uint64_t)((ucontext_t *)ucontext)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  pc = (uint64_t)((ucontext_t *)ucontext)->uc_mcontext.pc;
#else
  (void)ucontext;
#endif
  omptpy_record *r = &t->recs[t->pos];
  r->time = omptpy_now();
  r->codeptr = pc;
  r->parallel_id = parallel ? parallel->value : 0;
  r->task_id = task ? task->value : 0;
  r->u64a = wait_id;
  r->u64b = exit_frame ? exit_frame : enter_frame;
  r->thread = t->index;
  r->event = OMPTPY_EVENT_SAMPLE;
  r->endpoint = 0;
  r->kind = frame_bits;
  r->u32a = (uint32_t)state;
  r->u32b = below;
  omptpy_commit(t);
  omptpy_leave(t);
  errno = saved_errno;
}

int omptpy_sampler_init(const omptpy_config *cfg) {
  if (cfg->sample_hz == 0) return 0;
  sample_signal = cfg->sample_signal;
  period_ns = 1000000000L / (long)cfg->sample_hz;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sample;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  return sigaction(sample_signal, &sa, NULL) == 0 ? 0 : -errno;
}

void omptpy_sampler_thread_start(omptpy_thread *t) {
  if (period_ns == 0 || t->has_timer) return;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = sample_signal;
  ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
  if (timer_create(CLOCK_MONOTONIC, &ev, &t->timer) != 0) return;
  struct itimerspec spec = {{0, period_ns}, {0, period_ns}};
  if (timer_settime(t->timer, 0, &spec, NULL) != 0) {
    timer_delete(t->timer);
    return;
  }
  t->has_timer = true;
}

void omptpy_sampler_thread_stop(omptpy_thread *t) {
  if (!t->has_timer) return;
  timer_delete(t->timer);
  t->has_timer = false;
}
