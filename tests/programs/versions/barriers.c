/* One region with 3 explicit barriers.  Prints the passages: 2 * 3 = 6. */
#include "common.h"

int main(void) {
  long passed = 0;
#pragma omp parallel num_threads(2) reduction(+ : passed)
  for (int i = 0; i < 3; i++) {
    OPAQUE();
#pragma omp barrier
    passed++;
  }
  printf("%ld\n", passed);
  return 0;
}
