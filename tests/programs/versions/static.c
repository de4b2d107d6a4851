/* One region with a schedule(static) loop of 100 iterations: gcc computes the
 * bounds itself (no GOMP_loop call) and drops the loop's barrier (the
 * region's implicit barrier follows), so the runtime sees only the region.
 * Prints 0 + 1 + ... + 99 = 4950. */
#include "common.h"

int main(void) {
  long total = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp for schedule(static) reduction(+ : total)
    for (int i = 0; i < 100; i++) {
      OPAQUE();
      total += i;
    }
  }
  printf("%ld\n", total);
  return 0;
}
