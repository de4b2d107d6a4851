/* One region: thread 0 creates 8 explicit tasks, then waits for them
 * (taskwait).  No `single`: under gcc's ABI libomp reports its begin without
 * an end.  Prints 0 + 1 + ... + 7 = 28. */
#include "common.h"

int main(void) {
  long total = 0;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
      for (int i = 0; i < 8; i++) {
#pragma omp task shared(total)
        {
          OPAQUE();
#pragma omp atomic
          total += i;
        }
      }
#pragma omp taskwait
    }
  }
  printf("%ld\n", total);
  return 0;
}
