/* deps: four tasks with dependences a -> c, b -> c, c -> d. */
#include <stdio.h>

int main(void) {
  int a = 0, b = 0, c = 0;
#pragma omp parallel num_threads(2)
#pragma omp single
  {
#pragma omp task depend(out : a)
    a = 1;
#pragma omp task depend(out : b)
    b = 2;
#pragma omp task depend(in : a, b) depend(out : c)
    c = a + b;
#pragma omp task depend(in : c)
    printf("c=%d\n", c);
  }
  return 0;
}
