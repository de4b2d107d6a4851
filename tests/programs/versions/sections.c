/* 2 regions, each with a sections construct of 3 sections (GOMP_sections_*: a
 * dynamic loop over the sections for libomp; no barrier of its own, the
 * region's implicit barrier follows).  Prints 2 * (1 + 2 + 3) = 12. */
#include "common.h"

int main(void) {
  long total = 0;
  for (int r = 0; r < 2; r++) {
#pragma omp parallel num_threads(2)
    {
#pragma omp sections reduction(+ : total)
      {
#pragma omp section
        total += 1;
#pragma omp section
        total += 2;
#pragma omp section
        total += 3;
      }
    }
  }
  printf("%ld\n", total);
  return 0;
}
