/* contended [N] [HOLD_US]: 2 threads take one lock N times each and hold it for
 * about HOLD_US microseconds.  Prints the time the threads measured themselves
 * blocked in omp_set_lock, summed over both threads, in nanoseconds. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static void spin(double seconds) {
  double end = omp_get_wtime() + seconds;
  while (omp_get_wtime() < end) __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 200;
  double hold = (argc > 2 ? atof(argv[2]) : 50) * 1e-6;
  omp_lock_t lock;
  omp_init_lock(&lock);
  double blocked = 0;
#pragma omp parallel num_threads(2) reduction(+ : blocked)
  {
#pragma omp barrier /* both threads start taking the lock together */
    for (int i = 0; i < n; i++) {
      double t0 = omp_get_wtime();
      omp_set_lock(&lock);
      blocked += omp_get_wtime() - t0;
      spin(hold);
      omp_unset_lock(&lock);
    }
  }
  omp_destroy_lock(&lock);
  printf("blocked_ns %.0f\n", blocked * 1e9);
  return 0;
}
