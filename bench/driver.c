/*
 * Driver of the overhead benchmark: benchwork <regions|tasks> N
 *
 * Runs a short warm-up (creates the thread team and the task machinery, so
 * that runtime and tool start-up stay out of the measurement), then the
 * workload, and prints the workload's elapsed wall time in seconds
 * (CLOCK_MONOTONIC) on stdout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchwork.h"

#define WARMUP 1000L

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  void (*work)(long) = NULL;
  char *end = NULL;
  long n = -1;

  if (argc == 3) {
    if (strcmp(argv[1], "regions") == 0)
      work = bench_regions;
    else if (strcmp(argv[1], "tasks") == 0)
      work = bench_tasks;
    n = strtol(argv[2], &end, 10);
  }
  if (work == NULL || end == NULL || *end != '\0' || n < 0) {
    fprintf(stderr, "usage: %s <regions|tasks> N\n", argv[0]);
    return 2;
  }

  bench_regions(WARMUP);
  bench_tasks(WARMUP);

  double t0 = now();
  work(n);
  double t1 = now();
  printf("%.9f\n", t1 - t0);
  return 0;
}
