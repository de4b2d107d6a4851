/*
 * Workloads of the overhead benchmark, built into bench/build/libbenchwork.so
 * with clang -O2 -fopenmp.  The asm statement is an opaque body: clang -O2
 * deletes empty parallel regions and tasks otherwise.
 */
#include <omp.h>

#include "benchwork.h"

#define OPAQUE() __asm__ volatile("" ::: "memory")

void bench_regions(long n) {
  for (long i = 0; i < n; i++) {
#pragma omp parallel
    { OPAQUE(); }
  }
}

/* Every thread creates its share of the tasks.  With one creator (single)
 * the run time depended on whether the other thread got to steal, and went
 * from one mode to the other between runs; this way both threads do the
 * same work in every run. */
void bench_tasks(long n) {
#pragma omp parallel
  {
    long share = n / omp_get_num_threads() + (omp_get_thread_num() < n % omp_get_num_threads());
    for (long i = 0; i < share; i++) {
#pragma omp task
      { OPAQUE(); }
    }
  }
}
