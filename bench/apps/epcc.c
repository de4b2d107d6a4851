/*
 * Per-construct overheads in the style of the EPCC OpenMP micro-benchmarks
 * (syncbench, taskbench): a kernel of size `reps` runs OUTER timed batches of
 * reps / OUTER constructs around a short delay (EPCC: outer repetitions of
 * about 1 ms each), and as many batches of the reference: the same delays
 * without the construct, on one thread.  The result is the fastest batch and
 * the fastest reference (EPCC prints the minimum too): a batch during which
 * another process held one of the CPUs, which stalls every barrier of a
 * 2-thread team on a 2-core machine, is left out.  The construct's overhead
 * is (seconds - reference) / ops, ops = constructs per batch.
 */
#include <math.h>
#include <omp.h>

#include "apps.h"

#define OUTER 50
/* About 0.1 us on the development VM, as EPCC's default delay length. */
#define DELAY 64

static void delay(int n) {
  double a = 0.0;
  for (int i = 0; i < n; i++) {
    a += i;
    __asm__ volatile("" : "+m"(a)); /* keeps the loop: clang -O2 would fold it */
  }
}

/* One batch of n constructs; returns its seconds, adds to *done what the
 * constructs counted (the checksum). */
typedef double (*batch_fn)(long n, long *done);

/* Each thread's share of n, for the constructs every thread runs alone. */
static long share(long n) {
  int t = omp_get_num_threads(), me = omp_get_thread_num();
  return n / t + (me < n % t);
}

/* The fastest of OUTER batches of the construct and of the reference; the
 * reference is a thread's share of the delays when the threads run the
 * delays side by side (`shared_delays`), else all of them. */
static void measure(batch_fn batch, long reps, int shared_delays, app_result_t *out) {
  long n = reps >= OUTER ? reps / OUTER : 1, done = 0;
  long ref = shared_delays ? n / omp_get_max_threads() : n;
  double best = INFINITY, best_ref = INFINITY;
  for (int o = 0; o < OUTER; o++) {
    double t = batch(n, &done);
    best = t < best ? t : best;
  }
  for (int o = 0; o < OUTER; o++) {
    double t0 = apps_now();
    for (long i = 0; i < ref; i++)
      delay(DELAY);
    double t = apps_now() - t0;
    best_ref = t < best_ref ? t : best_ref;
  }
  out->seconds = best;
  out->reference = best_ref;
  out->ops = (double)n;
  out->checksum = (double)done;
}

static double b_parallel(long n, long *done) {
  double t0 = apps_now();
  for (long i = 0; i < n; i++) {
#pragma omp parallel
    delay(DELAY);
  }
  *done += n;
  return apps_now() - t0;
}

static double b_for(long n, long *done) {
  double t0 = apps_now();
#pragma omp parallel
  {
    int threads = omp_get_num_threads();
    for (long i = 0; i < n; i++) {
#pragma omp for
      for (int j = 0; j < threads; j++)
        delay(DELAY);
    }
  }
  *done += n;
  return apps_now() - t0;
}

static double b_barrier(long n, long *done) {
  double t0 = apps_now();
#pragma omp parallel
  for (long i = 0; i < n; i++) {
    delay(DELAY);
#pragma omp barrier
  }
  *done += n;
  return apps_now() - t0;
}

static double b_single(long n, long *done) {
  long count = 0;
  double t0 = apps_now();
#pragma omp parallel
  for (long i = 0; i < n; i++) {
#pragma omp single
    {
      delay(DELAY);
      count++;
    }
  }
  double t = apps_now() - t0;
  *done += count;
  return t;
}

static double b_critical(long n, long *done) {
  long count = 0;
  double t0 = apps_now();
#pragma omp parallel
  {
    long mine = share(n);
    for (long i = 0; i < mine; i++) {
#pragma omp critical
      {
        delay(DELAY);
        count++;
      }
    }
  }
  double t = apps_now() - t0;
  *done += count;
  return t;
}

static double b_lock(long n, long *done) {
  long count = 0;
  omp_lock_t lock;
  omp_init_lock(&lock);
  double t0 = apps_now();
#pragma omp parallel
  {
    long mine = share(n);
    for (long i = 0; i < mine; i++) {
      omp_set_lock(&lock);
      delay(DELAY);
      count++;
      omp_unset_lock(&lock);
    }
  }
  double t = apps_now() - t0;
  omp_destroy_lock(&lock);
  *done += count;
  return t;
}

static double b_reduction(long n, long *done) {
  long total = 0;
  double t0 = apps_now();
  for (long i = 0; i < n; i++) {
    long a = 0;
#pragma omp parallel reduction(+ : a)
    {
      delay(DELAY);
      a += 1;
    }
    total += a;
  }
  double t = apps_now() - t0;
  *done += total;
  return t;
}

/* EPCC taskbench's "parallel task generation" (wait 0) and "task wait" (wait
 * 1: each task waited for, taskwait, before the next is made): every thread
 * creates its share of the tasks. */
static inline double task_batch(long n, long *done, int wait) {
  long count = 0;
  double t0 = apps_now();
#pragma omp parallel
  {
    long mine = share(n);
    for (long i = 0; i < mine; i++) {
#pragma omp task
      {
        delay(DELAY);
#pragma omp atomic
        count++;
      }
      if (wait) {
#pragma omp taskwait
      }
    }
  }
  double t = apps_now() - t0;
  *done += count;
  return t;
}

static double b_tasks(long n, long *done) { return task_batch(n, done, 0); }
static double b_taskwait(long n, long *done) { return task_batch(n, done, 1); }

void epcc_parallel(long reps, app_result_t *out) { measure(b_parallel, reps, 0, out); }
void epcc_for(long reps, app_result_t *out) { measure(b_for, reps, 0, out); }
void epcc_barrier(long reps, app_result_t *out) { measure(b_barrier, reps, 0, out); }
void epcc_single(long reps, app_result_t *out) { measure(b_single, reps, 0, out); }
void epcc_critical(long reps, app_result_t *out) { measure(b_critical, reps, 0, out); }
void epcc_lock(long reps, app_result_t *out) { measure(b_lock, reps, 0, out); }
void epcc_reduction(long reps, app_result_t *out) { measure(b_reduction, reps, 0, out); }
void epcc_tasks(long reps, app_result_t *out) { measure(b_tasks, reps, 1, out); }
void epcc_taskwait(long reps, app_result_t *out) { measure(b_taskwait, reps, 1, out); }
