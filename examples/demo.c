/*
 * The bundled example of `make demo`: the shapes OpenMP programs are made of.
 *  - an imbalanced loop (iteration i costs ~i) under schedule(static) and
 *    schedule(dynamic): static leaves one thread waiting at the barrier;
 *  - a task tree (recursive Fibonacci with a cut-off);
 *  - a histogram updated under a critical section (contention).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static double work(long n) {
  double x = 0;
  for (long k = 0; k < n; k++) x += 1.0 / (double)(k + 1);
  return x;
}

static long fib(int n) {
  if (n < 2) return n;
  if (n < 18) return fib(n - 1) + fib(n - 2);
  long a, b;
#pragma omp task shared(a)
  a = fib(n - 1);
#pragma omp task shared(b)
  b = fib(n - 2);
#pragma omp taskwait
  return a + b;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 400;
  double sum = 0;

#pragma omp parallel for schedule(static) reduction(+ : sum)
  for (int i = 0; i < n; i++) sum += work(1000L * i);

#pragma omp parallel for schedule(dynamic, 4) reduction(+ : sum)
  for (int i = 0; i < n; i++) sum += work(1000L * i);

  long f = 0;
#pragma omp parallel
#pragma omp single
  f = fib(27);

  long histogram[16] = {0};
#pragma omp parallel for
  for (int i = 0; i < 20000; i++) {
    int bin = (int)(work(50 + i % 200) * 1000) % 16;
#pragma omp critical(histogram)
    histogram[bin]++;
  }

  printf("demo: sum=%.3f fib(27)=%ld histogram[0]=%ld threads=%d\n", sum, f, histogram[0],
         omp_get_max_threads());
  return 0;
}
