/* control: omp_control_tool pauses and restarts recording: regions 1 and 3
 * are recorded, region 2 (paused) is not. */
#include <omp.h>
#include <stdio.h>

static void region(void) {
#pragma omp parallel num_threads(2)
  { __asm__ volatile("" ::: "memory"); }
}

int main(void) {
  region();
  int paused = omp_control_tool(omp_control_tool_pause, 0, NULL);
  region();
  int started = omp_control_tool(omp_control_tool_start, 0, NULL);
  region();
  int flushed = omp_control_tool(omp_control_tool_flush, 0, NULL);
  printf("%d %d %d\n", paused, started, flushed);
  return 0;
}
