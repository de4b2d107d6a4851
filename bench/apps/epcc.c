/*
 * Per-construct overheads in the style of the EPCC OpenMP micro-benchmarks
 * (syncbench, taskbench): each kernel runs `reps` constructs around a short
 * delay and, in the same call, the reference: the same delays without the
 * construct, on one thread.  The construct's overhead is
 * (seconds - reference) / ops.
 */
#include <omp.h>

#include "apps.h"

/* About 0.1 us on the development VM, as EPCC's default delay length. */
#define DELAY 64

static void delay(int n) {
  double a = 0.0;
  for (int i = 0; i < n; i++) {
    a += i;
    __asm__ volatile("" : "+m"(a)); /* keeps the loop: clang -O2 would fold it */
  }
}

static double reference(long reps) {
  double t0 = apps_now();
  for (long i = 0; i < reps; i++)
    delay(DELAY);
  return apps_now() - t0;
}

/* Each thread's share of reps, for the constructs every thread runs alone. */
static long share(long reps) {
  int n = omp_get_num_threads(), t = omp_get_thread_num();
  return reps / n + (t < reps % n);
}

static void finish(app_result_t *out, double t0, long reps, double check) {
  out->seconds = apps_now() - t0;
  out->reference = reference(reps);
  out->ops = (double)reps;
  out->checksum = check;
}

void epcc_parallel(long reps, app_result_t *out) {
  double t0 = apps_now();
  for (long i = 0; i < reps; i++) {
#pragma omp parallel
    delay(DELAY);
  }
  finish(out, t0, reps, (double)reps);
}

void epcc_for(long reps, app_result_t *out) {
  double t0 = apps_now();
#pragma omp parallel
  {
    int n = omp_get_num_threads();
    for (long i = 0; i < reps; i++) {
#pragma omp for
      for (int j = 0; j < n; j++)
        delay(DELAY);
    }
  }
  finish(out, t0, reps, (double)reps);
}

void epcc_barrier(long reps, app_result_t *out) {
  double t0 = apps_now();
#pragma omp parallel
  for (long i = 0; i < reps; i++) {
    delay(DELAY);
#pragma omp barrier
  }
  finish(out, t0, reps, (double)reps);
}

void epcc_single(long reps, app_result_t *out) {
  long done = 0;
  double t0 = apps_now();
#pragma omp parallel
  for (long i = 0; i < reps; i++) {
#pragma omp single
    {
      delay(DELAY);
      done++;
    }
  }
  finish(out, t0, reps, (double)done);
}

void epcc_critical(long reps, app_result_t *out) {
  long done = 0;
  double t0 = apps_now();
#pragma omp parallel
  {
    long mine = share(reps);
    for (long i = 0; i < mine; i++) {
#pragma omp critical
      {
        delay(DELAY);
        done++;
      }
    }
  }
  finish(out, t0, reps, (double)done);
}

void epcc_lock(long reps, app_result_t *out) {
  long done = 0;
  omp_lock_t lock;
  omp_init_lock(&lock);
  double t0 = apps_now();
#pragma omp parallel
  {
    long mine = share(reps);
    for (long i = 0; i < mine; i++) {
      omp_set_lock(&lock);
      delay(DELAY);
      done++;
      omp_unset_lock(&lock);
    }
  }
  finish(out, t0, reps, (double)done);
  omp_destroy_lock(&lock);
}

void epcc_reduction(long reps, app_result_t *out) {
  long total = 0;
  double t0 = apps_now();
  for (long i = 0; i < reps; i++) {
    long a = 0;
#pragma omp parallel reduction(+ : a)
    {
      delay(DELAY);
      a += 1;
    }
    total += a;
  }
  finish(out, t0, reps, (double)total);
}

/* EPCC taskbench's "parallel task generation": every thread creates its
 * share of the tasks; the reference is a thread's share of the delays. */
void epcc_tasks(long reps, app_result_t *out) {
  long done = 0;
  double t0 = apps_now();
#pragma omp parallel
  {
    long mine = share(reps);
    for (long i = 0; i < mine; i++) {
#pragma omp task
      {
        delay(DELAY);
#pragma omp atomic
        done++;
      }
    }
  }
  out->seconds = apps_now() - t0;
  out->reference = reference(reps / omp_get_max_threads());
  out->ops = (double)reps;
  out->checksum = (double)done;
}
