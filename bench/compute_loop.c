/* A compute-bound parallel loop of about 1 s on 2 threads, for the sampling
 * benchmark: one region, a static loop, no OpenMP events inside. */
#include <math.h>
#include <omp.h>
#include <stdio.h>

int main(void) {
  double t0 = omp_get_wtime(), sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (long i = 0; i < 1000000000L; i++) sum += sqrt((double)i) * 1e-9;
  double t1 = omp_get_wtime();
  fprintf(stderr, "checksum %.6f\n", sum);
  printf("%.6f\n", t1 - t0);
  return 0;
}
