/* imbalance [SECONDS]: a region of 2 threads; both compute 0.1 s, then thread 0
 * computes SECONDS more (default 0.2) while thread 1 waits at an explicit
 * barrier.  Prints the time thread 1 spent at the barrier and in the region. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static void spin(double seconds) {
  double end = omp_get_wtime() + seconds;
  while (omp_get_wtime() < end) __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
  double extra = argc > 1 ? atof(argv[1]) : 0.2;
  double waited = 0, inside = 0;
#pragma omp parallel num_threads(2)
  {
    double start = omp_get_wtime();
    spin(0.1);
    if (omp_get_thread_num() == 0) spin(extra);
    double before = omp_get_wtime();
#pragma omp barrier
    if (omp_get_thread_num() == 1) {
      waited = omp_get_wtime() - before;
      inside = omp_get_wtime() - start;
    }
  }
  printf("waited %.6f inside %.6f\n", waited, inside);
  return 0;
}
