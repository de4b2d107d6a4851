/* 5 parallel regions of 2 threads, empty bodies.  Prints 5 * (1 + 2 * 2) = 25. */
#include "common.h"

int main(void) {
  long total = 0;
  for (int r = 0; r < 5; r++) {
#pragma omp parallel num_threads(2) reduction(+ : total)
    total += omp_get_thread_num() + omp_get_num_threads();
  }
  printf("%ld\n", total);
  return 0;
}
