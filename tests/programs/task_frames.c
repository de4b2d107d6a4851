/* task_frames [SECONDS]: the initial task creates a task in serial code, then
 * one region of 2 threads: both compute SECONDS/2 and meet at a barrier, then
 * one thread (single) creates a task that computes SECONDS and waits for it
 * (taskwait) while the other thread waits at the single's barrier, unless it
 * runs the task itself.  Prints the number of the thread that ran the task. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static void spin(double seconds) {
  double end = omp_get_wtime() + seconds;
  while (omp_get_wtime() < end) __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 0.1;
  int ran = -1;
#pragma omp task
  spin(0);
#pragma omp parallel num_threads(2)
  {
    spin(seconds / 2);
#pragma omp barrier
#pragma omp single
    {
#pragma omp task shared(ran)
      {
        ran = omp_get_thread_num();
        spin(seconds);
      }
#pragma omp taskwait
    }
  }
  printf("%d\n", ran);
  return 0;
}
