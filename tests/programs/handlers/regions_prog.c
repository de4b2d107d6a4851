/* regions_prog: region markers (omptpy_region.h) in a program without
 * Python.  With the tool (OMP_TOOL_LIBRARIES) they are recorded; without it
 * they do nothing.  Marks "main" around n parallel regions of 2 threads, in
 * each of which every thread marks "work". */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include <omptpy_region.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3;
  ompt_py_region_begin("main");
  for (int i = 0; i < n; i++) {
#pragma omp parallel num_threads(2)
    {
      ompt_py_region_begin("work");
      __asm__ volatile("" ::: "memory");
      ompt_py_region_end("work");
    }
  }
  ompt_py_region_end("main");
  printf("done %d\n", n);
  return 0;
}
