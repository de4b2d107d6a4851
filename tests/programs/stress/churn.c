/* churn [ROUNDS] [TASKS]: threads come and go: ROUNDS regions whose team size
 * changes every round (1 to 4 threads, then nested teams of 1 to 3 inside some
 * of them), each with TASKS tasks (some with dependences, some in a
 * taskgroup), a lock, a nest lock, a critical section, an atomic counter and a
 * dynamic loop.  Prints "count N" (the tasks that ran) and "locked N". */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define OPAQUE() __asm__ volatile("" ::: "memory")

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 200;
  int tasks = argc > 2 ? atoi(argv[2]) : 20;
  long count = 0, locked = 0;
  omp_lock_t lock;
  omp_nest_lock_t nlock;
  omp_init_lock(&lock);
  omp_init_nest_lock(&nlock);
  omp_set_max_active_levels(2);
  for (int r = 0; r < rounds; r++) {
    int width = 1 + r % 4;
#pragma omp parallel num_threads(width)
    {
#pragma omp single
      {
        int dep = 0;
        for (int i = 0; i < tasks; i++) {
#pragma omp task depend(inout : dep) if (i % 5 != 0)
          {
#pragma omp atomic
            count++;
          }
        }
#pragma omp taskgroup
        for (int i = 0; i < tasks; i++) {
#pragma omp task untied
          {
#pragma omp atomic
            count++;
#pragma omp taskyield
          }
        }
      }
      omp_set_lock(&lock);
      locked++;
      omp_unset_lock(&lock);
      omp_set_nest_lock(&nlock);
      omp_set_nest_lock(&nlock);
      locked++;
      omp_unset_nest_lock(&nlock);
      omp_unset_nest_lock(&nlock);
#pragma omp critical
      locked++;
#pragma omp for schedule(dynamic, 1)
      for (int i = 0; i < 8; i++) OPAQUE();
      if (r % 3 == 0) {
#pragma omp parallel num_threads(1 + (r + omp_get_thread_num()) % 3)
        {
#pragma omp task
          OPAQUE();
#pragma omp barrier
        }
      }
    }
  }
  omp_destroy_lock(&lock);
  omp_destroy_nest_lock(&nlock);
  printf("count %ld\nlocked %ld\n", count, locked);
  return 0;
}
