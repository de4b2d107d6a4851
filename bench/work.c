/*
 * Workloads of the overhead benchmark, built into bench/build/libbenchwork.so
 * with clang -O2 -fopenmp.  The asm statement is an opaque body: clang -O2
 * deletes empty parallel regions and tasks otherwise.
 */
#include "benchwork.h"

#define OPAQUE() __asm__ volatile("" ::: "memory")

void bench_regions(long n) {
  for (long i = 0; i < n; i++) {
#pragma omp parallel
    { OPAQUE(); }
  }
}

void bench_tasks(long n) {
#pragma omp parallel
#pragma omp single
  for (long i = 0; i < n; i++) {
#pragma omp task
    { OPAQUE(); }
  }
}
