/* The kernels' table, the clock, the warm-up and apps_run (libapps.so). */
#include <string.h>
#include <time.h>

#include "apps.h"

/* Default sizes: each kernel ran 0.2-1 s with no tool on 2 threads of the
 * development VM, shared with other jobs (bench/README.md; an idle machine
 * runs the EPCC kernels several times faster); quick sizes a few ms. */
static const app_kernel_t kernels[] = {
    {"fib", app_fib, 28, 16, "recursive Fibonacci, a task per call, no cut-off"},
    {"nqueens", app_nqueens, 11, 7, "n-queens, a task per placement at every level"},
    {"sparselu", app_sparselu, 64, 10, "blocked sparse LU (32x32 blocks), tasks per block"},
    {"sort", app_sort, 6000000, 100000, "merge sort, halves as tasks above 2048 elements"},
    {"health", app_health, 2000, 20, "tree of 85 villages, a task per village per step"},
    {"dynamic", app_dynamic, 500000, 20000, "loop of uneven iterations, schedule(dynamic,1)"},
    {"epcc_parallel", epcc_parallel, 40000, 2000, "EPCC: parallel"},
    {"epcc_for", epcc_for, 40000, 2000, "EPCC: for"},
    {"epcc_barrier", epcc_barrier, 40000, 2000, "EPCC: barrier"},
    {"epcc_single", epcc_single, 40000, 2000, "EPCC: single"},
    {"epcc_critical", epcc_critical, 200000, 4000, "EPCC: critical"},
    {"epcc_lock", epcc_lock, 200000, 4000, "EPCC: lock"},
    {"epcc_reduction", epcc_reduction, 40000, 2000, "EPCC: reduction"},
    {"epcc_tasks", epcc_tasks, 400000, 4000, "EPCC: tasks"},
    {"epcc_taskwait", epcc_taskwait, 200000, 4000, "EPCC: taskwait"},
};

#define N_KERNELS ((int)(sizeof kernels / sizeof kernels[0]))

double apps_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const app_kernel_t *apps_kernel(int i) {
  return i >= 0 && i < N_KERNELS ? &kernels[i] : NULL;
}

void apps_warmup(void) {
  for (int i = 0; i < 100; i++) {
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
      for (int j = 0; j < 16; j++)
        __asm__ volatile("" ::: "memory");
      for (int j = 0; j < 10; j++) {
#pragma omp task
        __asm__ volatile("" ::: "memory");
      }
    }
  }
}

int apps_run(const char *name, long size, app_result_t *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < N_KERNELS; i++)
    if (strcmp(kernels[i].name, name) == 0) {
      kernels[i].run(size, out);
      return 0;
    }
  return -1;
}
