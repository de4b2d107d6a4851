/* mixed [N]: a little of everything, for the export tests: N explicit tasks
 * that each create two child tasks and wait for them (taskwait), a static and
 * a dynamic loop of 4N iterations, N critical sections and lock acquisitions
 * per thread, and a nested region (see work.h). */
#include <stdlib.h>

#include "work.h"

static void nested_tasks(int n) {
#pragma omp parallel num_threads(2)
#pragma omp single
  for (int i = 0; i < n; i++) {
#pragma omp task
    {
#pragma omp task
      OPAQUE();
#pragma omp task
      OPAQUE();
#pragma omp taskwait
    }
  }
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 8;
  nested_tasks(n);
  work_loops(4 * n);
  if (work_critical(n) != 4L * n) return 1;
  work_nested();
  return 0;
}
