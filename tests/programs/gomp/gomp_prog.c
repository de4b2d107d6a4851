/*
 * gomp_prog [REGIONS] [ITERATIONS]: the workloads of gomp_work.h in an
 * executable built with gcc -fopenmp (links libgomp), for `ompt-py run`:
 * REGIONS empty regions, then one region each with a dynamic,1 loop of
 * ITERATIONS, a static loop of ITERATIONS and 3 explicit barriers.  Prints the
 * results (the same on libgomp and libomp) and, last, the runtime that served
 * GOMP_parallel.
 */
#include "gomp_work.h" /* first: it defines _GNU_SOURCE (dladdr) */

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  int regions = argc > 1 ? atoi(argv[1]) : 10;
  long iterations = argc > 2 ? atol(argv[2]) : 100;
  double *out = malloc(sizeof(double) * (size_t)(iterations > 0 ? iterations : 1));
  if (!out) return 1;
  printf("parallel %ld\n", gw_parallel(regions));
  printf("dynamic %llu\n", (unsigned long long)gw_dynamic(iterations, out));
  printf("static %llu\n", (unsigned long long)gw_static(iterations));
  printf("barrier %ld\n", gw_barrier(3));
  printf("runtime %s\n", gw_runtime());
  free(out);
  return 0;
}
