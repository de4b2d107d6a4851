/* pairs_lib: run_regions(n) runs n target regions on the host "device",
 * each with data operations (a record and its `more` each); every other one
 * is followed by a tool-control command (one record), so that the pairs fall
 * at odd and even places of the chunks. */
#include <omp.h>

int run_regions(int n) {
  int a[64], sum = 0;
  for (int i = 0; i < 64; i++) a[i] = i;
  for (int r = 0; r < n; r++) {
#pragma omp target map(to : a) map(tofrom : sum)
    for (int i = 0; i < 64; i++) sum += a[i];
    if (r % 2) omp_control_tool(64, r, 0);
  }
  return sum;
}
