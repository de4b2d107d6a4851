/*
 * The consumer side of the buffers: the drain passes and the drainer thread.
 *
 * One consumer at a time, under drain_lock: the drainer (a pthread of the
 * tool), a writer whose buffer is full (the flush policy, buffer.c), a
 * flush (omptpy_flush: take(), finalize, the handlers' dispatcher).  A pass
 * gives every thread's new records to the handlers' tap and to the sink:
 * with the copying buffers (buffer.c) it moves full chunks (and, on a flush,
 * the chunks being filled) and hands them back; with the zero-copy memory
 * sink (zerocopy.c) it walks the region's chunks and counts the records.
 * Threads that ended are retired in the same pass.  The sink keeps only the
 * records stamped inside its window (a trace window, OMPTPY_RECORD): the
 * others were written for handlers only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "omptpy_internal.h"

static struct {
  unsigned drain_ms;             /* longest sleep (OMPTPY_DRAIN_MS) */
  bool populates_ahead;          /* makes the file's next region resident (a test turns it off) */
  bool idle;                     /* runs only on otherwise idle CPUs (SCHED_IDLE) */
  pthread_t thread;
  _Atomic int tid;               /* the drainer's kernel thread id (0: none) */
  _Atomic int boosted;           /* raised to normal priority by a waiting ending */
  _Atomic uint32_t wake;         /* futex word the drainer sleeps on */
  _Atomic int wake_pending;      /* a writer already woke the drainer */
  _Atomic int run;
  bool started;                  /* under the registry lock */
  int loadavg;                   /* /proc/loadavg, -1 where it cannot be read */
  long cpus;                     /* online CPUs */
} D = {.loadavg = -1};

/* ---- the sink window (under drain_lock) ------------------------------------- */

/* Records stamped in [from, until) go to the sink (a trace window, or
 * OMPTPY_RECORD); the others were written only for handlers.  The zero-copy
 * sink keeps its own list of windows (zerocopy.c). */
static struct {
  uint64_t from, until;
} W = {UINT64_MAX, 0};

/* A thread's records are in time order, so only a range that straddles an
 * edge of the window is looked at record by record. */
size_t omptpy_to_sink(const omptpy_record *r, size_t n, uint64_t *lost) {
  if (n == 0 || W.from >= W.until) return 0;
  if (r[0].time >= W.from && r[n - 1].time < W.until) {
    *lost += n - omptpy_sink_write(r, n);
    return n;
  }
  size_t kept = 0;
  for (size_t i = 0, j; i < n; i = j) {
    for (; i < n && (r[i].time < W.from || r[i].time >= W.until); i++) continue;
    for (j = i; j < n && r[j].time >= W.from && r[j].time < W.until; j++) continue;
    if (j > i) *lost += (j - i) - omptpy_sink_write(r + i, j - i);
    kept += j - i;
  }
  return kept;
}

/* ---- drain passes (under drain_lock) ---------------------------------------- */

/* Returns the number of full chunks drained. */
static uint32_t drain_all(bool partial) {
  uint32_t nfull = omptpy_buf.zc ? omptpy_zc_drain(partial) : 0;
  for (omptpy_thread *t = atomic_load_explicit(&omptpy_buf.all, memory_order_acquire); t;
       t = t->all_next) {
    int s = atomic_load_explicit(&t->state, memory_order_acquire);
    if (s == OMPTPY_THREAD_LIVE && !omptpy_buf.zc) {
      nfull += omptpy_drain_thread(t, partial);
    } else if (s == OMPTPY_THREAD_ENDED) {
      omptpy_thread_retire(t);
    }
  }
  return nfull;
}

void omptpy_flush(void) {
  if (!omptpy_buf.ready) return;
  pthread_mutex_lock(&omptpy_buf.drain_lock);
  drain_all(true);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
}

bool omptpy_flush_try(void) {
  if (!omptpy_buf.ready || pthread_mutex_trylock(&omptpy_buf.drain_lock) != 0) return false;
  drain_all(true);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
  return true;
}

/* For the endings the preload hook sees (_exit, abort, exec), which may come
 * from a signal handler that interrupted this very thread's drain pass: the
 * lock is only tried, for at most `ns`, never waited for. */
/* An idle-priority drainer that holds the drain lock while other processes
 * take every CPU gets next to no CPU (SCHED_IDLE): an ending that waits for
 * it (exec, _exit) raises it to normal priority, by a system call (this may
 * run in a signal handler), so that it finishes its pass; it goes back to
 * idle once it lets the lock go.  Where the process may not raise it (no
 * RLIMIT_NICE), the wait is as before. */
static void boost_drainer(void) {
  int tid = atomic_load_explicit(&D.tid, memory_order_acquire);
  if (!D.idle || !tid || atomic_exchange_explicit(&D.boosted, 1, memory_order_acq_rel)) return;
  struct sched_param none = {0};
  syscall(SYS_sched_setscheduler, tid, SCHED_OTHER, &none);
}

bool omptpy_flush_within(uint64_t ns) {
  if (!omptpy_buf.ready) return false;
  uint64_t until = omptpy_monotonic_ns() + ns;
  while (pthread_mutex_trylock(&omptpy_buf.drain_lock) != 0) {
    boost_drainer();
    if (omptpy_monotonic_ns() >= until) return false;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  drain_all(true);
  pthread_mutex_unlock(&omptpy_buf.drain_lock);
  return true;
}

void omptpy_sink_window(bool open) {
  if (omptpy_buf.ready) pthread_mutex_lock(&omptpy_buf.drain_lock);
  /* What was written before belongs to the previous window (or to none). */
  if (open && omptpy_buf.ready) drain_all(true);
  uint64_t now = omptpy_now();
  if (open) {
    W.from = now;
    W.until = UINT64_MAX;
  } else {
    W.until = now;
  }
  if (omptpy_buf.zc) omptpy_zc_set_window(open, now);
  if (omptpy_buf.ready) pthread_mutex_unlock(&omptpy_buf.drain_lock);
}

/* ---- the drainer thread ------------------------------------------------------ */

/* Wakes the drainer early, once per pass: a system call, but writers call it
 * only once a buffer is three-quarters full (buffer.c) or the region is about
 * to need populating (zerocopy.c). */
void omptpy_drainer_wake(void) {
  if (atomic_exchange_explicit(&D.wake_pending, 1, memory_order_acq_rel)) return;
  atomic_fetch_add_explicit(&D.wake, 1, memory_order_release);
  omptpy_futex_wake(&D.wake);
}

static void set_idle(bool idle) {
  struct sched_param none = {0};
  pthread_setschedparam(pthread_self(), idle ? SCHED_IDLE : SCHED_OTHER, &none);
}

/* Populating the zero-copy region holds the process's mmap lock, which every
 * mmap (a thread's stack, a large array) waits for: at idle priority, with
 * other processes on every CPU, that took 27 s (a team's first region waited
 * to create its threads).  So the drainer populates at normal priority where
 * the process may raise its own (root, or RLIMIT_NICE; else it stays idle, as
 * before), a step at a time, and only on a CPU nobody else wants: at idle
 * priority it yields first, and takes the step only if it got its CPU back
 * within YIELD_BUSY_NS.  Where the program holds every CPU, no step is taken
 * and a writer makes the file's next region resident in one recorded stall
 * (zerocopy.c), rather than the drainer taking CPU time from the program's
 * threads unseen (taking a first step at normal priority each pass, as it did
 * before, made the regions workload's file at defaults cost twice the in-memory
 * trace with its stalls discounted).  The yield alone is not enough: OpenMP
 * threads that spin between tasks or at a barrier yield their CPU in their
 * loop (libomp does), so an idle-priority yield comes back at once while they
 * hold every CPU; on recursive fib at defaults the drainer took its steps,
 * 90 ms of the program's CPU time that no stall showed.  So the kernel's
 * count of runnable threads (/proc/loadavg's fourth field, machine-wide, this
 * one included) must leave a CPU too.  The memory sink's region is the other
 * case: a writer past its populated part takes the page faults itself, unseen,
 * so the first step of a pass is taken whatever the CPUs do. */
#define YIELD_BUSY_NS 1000000u

static bool runnable_leave_cpu(void) {
  char b[128];
  ssize_t n = D.loadavg < 0 ? -1 : pread(D.loadavg, b, sizeof b - 1, 0);
  if (n <= 0) return true; /* not known: the yield decides */
  b[n] = 0;
  const char *p = b;
  for (int i = 0; i < 3 && p; i++)
    if ((p = strchr(p, ' '))) p++;
  return !p || strtol(p, NULL, 10) <= D.cpus;
}

static bool cpu_unwanted(void) {
  uint64_t t0 = omptpy_monotonic_ns();
  sched_yield();
  return omptpy_monotonic_ns() - t0 <= YIELD_BUSY_NS && runnable_leave_cpu();
}

static void populate_ahead(void) {
  for (bool ask = omptpy_zc_next_wanted();; ask = true) {
    if (D.idle && ask && !cpu_unwanted()) return; /* a CPU was wanted: leave it */
    if (D.idle) set_idle(false);
    bool more = omptpy_zc_populate_ahead();
    if (!D.idle) return;
    set_idle(true);
    if (!more || !atomic_load_explicit(&D.run, memory_order_acquire)) return;
  }
}

static void *drainer_main(void *arg) {
  (void)arg;
  if (D.idle) set_idle(true);
  if (D.loadavg < 0) D.loadavg = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  D.cpus = sysconf(_SC_NPROCESSORS_ONLN);
  atomic_store_explicit(&D.tid, (int)syscall(SYS_gettid), memory_order_release);
  unsigned sleep_ms = 1;
  uint64_t last_stats = 0;
  while (atomic_load_explicit(&D.run, memory_order_acquire)) {
    uint32_t seq = atomic_load_explicit(&D.wake, memory_order_acquire);
    atomic_store_explicit(&D.wake_pending, 0, memory_order_release);
    /* An idle-priority drainer leaves the draining to the handlers' dispatcher
     * while handlers are registered: holding the drain lock while it gets no
     * CPU would hold up the dispatcher and the delay bound (tap.c). */
    uint32_t nfull = 0;
    if (!(D.idle && omptpy_tap_active())) {
      pthread_mutex_lock(&omptpy_buf.drain_lock);
      nfull = drain_all(false);
      omptpy_stacks_to_sink(); /* the stacks of the records just written */
      pthread_mutex_unlock(&omptpy_buf.drain_lock);
      if (atomic_exchange_explicit(&D.boosted, 0, memory_order_acq_rel)) set_idle(true);
    }
    if (omptpy_buf.zc && D.populates_ahead) populate_ahead();
    /* Poll fast while chunks arrive, back off to drain_ms when idle. */
    sleep_ms = nfull ? 1 : (sleep_ms * 2 > D.drain_ms ? D.drain_ms : sleep_ms * 2);
    if (nfull && omptpy_sink_is_file() && omptpy_monotonic_ns() - last_stats > 200000000u) {
      /* Counters and a clock anchor on disk as the run goes, for processes
       * that end without finalize. */
      omptpy_str s = {0};
      if (omptpy_stats_json(&s, false) == 0) omptpy_sink_json(OMPTPY_BLOCK_STATS, s.p, s.len);
      omptpy_str_free(&s);
      last_stats = omptpy_monotonic_ns();
    }
    omptpy_futex_wait(&D.wake, seq, (uint64_t)sleep_ms * 1000000u);
  }
  return NULL;
}

int omptpy_drainer_start(void) {
  if (!omptpy_buf.ready) return -EINVAL;
  pthread_mutex_lock(&omptpy_buf.lock);
  int rc = 0;
  if (!D.started) {
    atomic_store(&D.run, 1);
    /* The drainer must not receive the application's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = -pthread_create(&D.thread, NULL, drainer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) D.started = true;
    else atomic_store(&D.run, 0);
  }
  pthread_mutex_unlock(&omptpy_buf.lock);
  return rc;
}

void omptpy_drainer_stop(void) {
  pthread_mutex_lock(&omptpy_buf.lock);
  bool join = D.started;
  D.started = false;
  atomic_store(&D.run, 0);
  pthread_mutex_unlock(&omptpy_buf.lock);
  atomic_fetch_add(&D.wake, 1);
  omptpy_futex_wake(&D.wake);
  if (join) pthread_join(D.thread, NULL);
  atomic_store(&D.tid, 0);
}

void omptpy_drainer_init(const omptpy_config *cfg) {
  D.drain_ms = cfg->drain_ms;
  D.populates_ahead = cfg->populate_ahead;
  /* With the flush policy, moving a chunk (a copy, or a write() into the
   * page cache) costs a writer no more than it costs the drainer, and a
   * drainer that takes a CPU from a busy OpenMP thread stalls its whole team:
   * so the drainer only uses idle CPUs, and on a saturated machine the
   * writers move their own chunks (10^6 tasks to a file on 2 busy CPUs: 0.098
   * to 0.118 s instead of 0.117 to 0.145 s, min to median). */
  D.idle = cfg->overflow == OMPTPY_OVERFLOW_FLUSH;
}

/* fork: the child has no drainer thread (tool.c starts one if a runtime is live). */
void omptpy_drainer_after_fork_child(void) {
  D.started = false;
  atomic_store(&D.run, 0);
  atomic_store(&D.tid, 0); /* the parent's drainer's */
  atomic_store(&D.boosted, 0);
}
