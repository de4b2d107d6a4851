/* An outer region of 2 threads, each running an inner region of 2 threads
 * (2 active levels): 3 regions, 6 implicit tasks.  Prints the threads of
 * the inner regions: 4. */
#include "common.h"

int main(void) {
  long inner = 0;
  omp_set_max_active_levels(2);
#pragma omp parallel num_threads(2) reduction(+ : inner)
  {
#pragma omp parallel num_threads(2) reduction(+ : inner)
    inner += omp_get_level() == 2 && omp_get_num_threads() == 2;
  }
  printf("%ld\n", inner);
  return 0;
}
