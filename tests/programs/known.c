/* known MODE ARGS: workloads of known timing, for the analyses (tests/test_metrics.py).
 * Work is busy-waiting on CLOCK_MONOTONIC; each mode also prints what the
 * program measured itself, the reference when the machine is busy.
 *
 *   known skewed UNIT_US N    after a warm-up region, one parallel loop of 2N
 *                             iterations on 2 threads, schedule(runtime)
 *                             (OMP_SCHEDULE): iteration i is UNIT_US of work if
 *                             i < N, else 4 x UNIT_US.  Under static, thread 1
 *                             has four times thread 0's work.  A thread's work
 *                             ends at its start plus the work it was given (time
 *                             lost to preemption is caught up).  Prints when
 *                             each thread entered the region (CLOCK_MONOTONIC)
 *                             and its time in the loop: "start_ns S0 S1",
 *                             "busy_ns B0 B1".
 *   known tasks A A_US B B_US one region of 2 threads; one thread creates A
 *                             tasks of A_US and B tasks of B_US microseconds.
 *                             Prints each task's duration: "task_ns D1 D2 ...".
 *   known lock N HOLD_US      2 threads take one lock N times each and hold it
 *                             HOLD_US microseconds; prints the time the lock was
 *                             held, summed over both threads: "held_ns H". */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void spin_us(double us) {
  double end = now_us() + us;
  while (now_us() < end) __asm__ volatile("" ::: "memory");
}

static void skewed(double unit, int n) {
  double start[2] = {0, 0}, busy[2] = {0, 0};
#pragma omp parallel num_threads(2)
  __asm__ volatile("" ::: "memory"); /* warm-up: the team's threads exist */
#pragma omp parallel num_threads(2)
  {
    double t0 = now_us(), work = 0;
#pragma omp for schedule(runtime) nowait
    for (int i = 0; i < 2 * n; i++) {
      work += i < n ? unit : 4 * unit;
      double end = t0 + work;
      while (now_us() < end) __asm__ volatile("" ::: "memory");
    }
    start[omp_get_thread_num()] = t0;
    busy[omp_get_thread_num()] = now_us() - t0;
  }
  printf("start_ns %.0f %.0f\nbusy_ns %.0f %.0f\n", start[0] * 1e3, start[1] * 1e3,
         busy[0] * 1e3, busy[1] * 1e3);
}

#define MAX_TASKS 4096
static double task_us[MAX_TASKS];

static void tasks(int a, double a_us, int b, double b_us) {
#pragma omp parallel num_threads(2)
#pragma omp single
  for (int i = 0; i < a + b; i++) {
#pragma omp task firstprivate(i)
    {
      double t0 = now_us();
      spin_us(i < a ? a_us : b_us);
      task_us[i] = now_us() - t0;
    }
  }
  printf("task_ns");
  for (int i = 0; i < a + b; i++) printf(" %.0f", task_us[i] * 1e3);
  printf("\n");
}

static void lock(int n, double hold) {
  omp_lock_t l;
  omp_init_lock(&l);
  double held = 0;
#pragma omp parallel num_threads(2) reduction(+ : held)
  for (int i = 0; i < n; i++) {
    omp_set_lock(&l);
    double t0 = now_us();
    spin_us(hold);
    held += now_us() - t0;
    omp_unset_lock(&l);
  }
  omp_destroy_lock(&l);
  printf("held_ns %.0f\n", held * 1e3);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  double arg[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4 && i + 2 < argc; i++) arg[i] = atof(argv[i + 2]);
  if (!strcmp(mode, "skewed")) {
    skewed(arg[0], (int)arg[1]);
  } else if (!strcmp(mode, "tasks") && arg[0] + arg[2] <= MAX_TASKS) {
    tasks((int)arg[0], arg[1], (int)arg[2], arg[3]);
  } else if (!strcmp(mode, "lock")) {
    lock((int)arg[0], arg[1]);
  } else {
    fprintf(stderr, "usage: known skewed UNIT_US N | tasks A A_US B B_US (A + B <= %d) | "
            "lock N HOLD_US\n", MAX_TASKS);
    return 2;
  }
  return 0;
}
