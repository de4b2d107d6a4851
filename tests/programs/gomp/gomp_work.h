/*
 * Workloads with checksums, for the runtime-fallback tests: built with
 * gcc -fopenmp (libgomp's ABI, GOMP_*), run on libgomp or, through the
 * fallback, on LLVM libomp.  Every region asks for num_threads(2).  The
 * checksums do not depend on which thread ran which iteration, so a traced
 * run (libomp) and an untraced one (libgomp) must give the same numbers.
 */
#ifndef GOMP_WORK_H
#define GOMP_WORK_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#define GW_OPAQUE() __asm__ volatile("" ::: "memory")

/* A value per iteration that only depends on i. */
static inline uint64_t gw_mix(uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

/* n regions of 2 threads; each thread adds its number and the team size:
 * returns n * (0 + 1 + 2 * 2) = 5n when every region has 2 threads. */
static inline long gw_parallel(int n) {
  long total = 0;
  for (int r = 0; r < n; r++) {
#pragma omp parallel num_threads(2) reduction(+ : total)
    total += omp_get_thread_num() + omp_get_num_threads();
  }
  return total;
}

/* One region: a schedule(dynamic, 1) loop of n iterations writing out[i]
 * (n dispatch events on libomp), then a sum in iteration order. */
static inline uint64_t gw_dynamic(long n, double *out) {
#pragma omp parallel num_threads(2)
  {
#pragma omp for schedule(dynamic, 1)
    for (long i = 0; i < n; i++) out[i] = (double)(gw_mix((uint64_t)i) >> 11) * 0x1p-53 + (double)i;
  }
  uint64_t h = 1469598103934665603ull;
  for (long i = 0; i < n; i++) {
    double v = out[i];
    uint64_t bits;
    __builtin_memcpy(&bits, &v, sizeof bits);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

/* One region: a schedule(static) loop of n iterations, reduction of gw_mix
 * (wrapping, so the order does not matter); gcc inlines static loops. */
static inline uint64_t gw_static(long n) {
  uint64_t total = 0;
#pragma omp parallel for num_threads(2) schedule(static) reduction(+ : total)
  for (long i = 0; i < n; i++) total += gw_mix((uint64_t)i);
  return total;
}

/* One region with n explicit barriers; returns the number of barrier
 * passages counted by both threads (2n). */
static inline long gw_barrier(int n) {
  long passed = 0;
#pragma omp parallel num_threads(2) reduction(+ : passed)
  for (int i = 0; i < n; i++) {
    GW_OPAQUE();
#pragma omp barrier
    passed++;
  }
  return passed;
}

/* The file of the library that serves this object's GOMP_parallel calls. */
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);

static inline const char *gw_runtime(void) {
  void (*volatile f)(void (*)(void *), void *, unsigned, unsigned) = GOMP_parallel;
  Dl_info info;
  if (!dladdr((void *)f, &info) || !info.dli_fname) return "";
  return info.dli_fname;
}

#endif
