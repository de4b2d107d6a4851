/* One region: each of the 2 threads enters a critical section 4 times.
 * Prints 2 * 4 = 8. */
#include "common.h"

int main(void) {
  long entered = 0;
#pragma omp parallel num_threads(2)
  for (int i = 0; i < 4; i++) {
#pragma omp critical
    {
      OPAQUE();
      entered++;
    }
  }
  printf("%ld\n", entered);
  return 0;
}
