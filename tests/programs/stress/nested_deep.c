/* nested_deep [LEVELS] [ROUNDS] [SERIAL]: ROUNDS rounds of parallel regions
 * nested LEVELS deep (omp_set_max_active_levels(LEVELS), so every level gets
 * a real team), with team sizes that change from round to round and level to
 * level, so the runtime frees, pools and reaps nested teams while other
 * threads begin and end theirs.  Each implicit task creates two tasks.  With
 * SERIAL=1 every other level is serialized (if(0)), so real and serialized
 * regions alternate.  Prints "sum N": the number of implicit tasks that ran. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define OPAQUE() __asm__ volatile("" ::: "memory")

static long nest(int level, int levels, int round, int serial) {
  long sum = 0;
  if (level == levels) return 0;
  /* 1 to 4 threads, differing between siblings: teams of every size are freed
   * to the pool and reaped from it at once */
  int width = 1 + (round + level + omp_get_thread_num()) % 4;
#pragma omp parallel num_threads(width) if (!serial || level % 2 == 0) reduction(+ : sum)
  {
    sum += 1;
    for (int k = 0; k < 2; k++) {
#pragma omp task
      OPAQUE();
    }
    sum += nest(level + 1, levels, round, serial);
#pragma omp taskwait
  }
  return sum;
}

int main(int argc, char **argv) {
  int levels = argc > 1 ? atoi(argv[1]) : 4;
  int rounds = argc > 2 ? atoi(argv[2]) : 50;
  int serial = argc > 3 ? atoi(argv[3]) : 0;
  omp_set_max_active_levels(levels);
  long sum = 0;
  for (int r = 0; r < rounds; r++) sum += nest(0, levels, r, serial);
  printf("sum %ld\n", sum);
  return 0;
}
