/* taskchain [DEPTH] [REPEAT]: REPEAT times, one thread of a region starts a
 * chain of DEPTH nested tasks, each creating the next and waiting for it in a
 * taskwait: the thread that runs the chain holds DEPTH suspended tasks (what a
 * recursive task program without a cut-off does: fib, n-queens, a sort).
 * Prints "tasks T" (T = DEPTH * REPEAT). */
#include <stdio.h>
#include <stdlib.h>

static void chain(int n) {
  if (n == 0) return;
#pragma omp task
  chain(n - 1);
#pragma omp taskwait
}

int main(int argc, char **argv) {
  int depth = argc > 1 ? atoi(argv[1]) : 100, repeat = argc > 2 ? atoi(argv[2]) : 10;
#pragma omp parallel
#pragma omp single
  for (int r = 0; r < repeat; r++) chain(depth);
  printf("tasks %ld\n", (long)depth * repeat);
  return 0;
}
