/* One region: a schedule(dynamic, 1) loop of 20 iterations (20 chunks), then a
 * schedule(dynamic, 5) loop of 40 iterations (8 chunks); each loop ends with a
 * GOMP_loop_end barrier (barrier_implementation for libomp).  Prints the
 * number of iterations run: 60. */
#include "common.h"

int main(void) {
  long done = 0;
#pragma omp parallel num_threads(2) reduction(+ : done)
  {
#pragma omp for schedule(dynamic, 1)
    for (int i = 0; i < 20; i++) {
      OPAQUE();
      done++;
    }
#pragma omp for schedule(dynamic, 5)
    for (int i = 0; i < 40; i++) {
      OPAQUE();
      done++;
    }
  }
  printf("%ld\n", done);
  return 0;
}
