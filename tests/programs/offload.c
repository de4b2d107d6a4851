/* Target offload on two devices, for the offload tables (tests/analysis/test_offload.py,
 * tests/live/test_offload_live.py).  Built with clang-19 -fopenmp
 * -fopenmp-targets=x86_64-pc-linux-gnu it runs on libomptarget's host plugin
 * (no GPU needed).  The bytes each construct moves are in its map clauses:
 * per device d (0 and 1), with N doubles per array (8000 bytes):
 *   target enter data   map(to: a) map(alloc: b)        8000 bytes to the device
 *   target teams distribute parallel for num_teams(2)   a, b present: nothing moved
 *   target update from(b)                               8000 bytes from the device
 *   target data map(tofrom: c) { target (c present) }   8000 to, 8000 from
 *   target exit data map(from: b) map(release: a)       8000 bytes from the device
 *   2 x target nowait map(tofrom: x) + taskwait         4 to, 4 from each
 * The sums printed check the results. */
#include <omp.h>
#include <stdio.h>

#define N 1000

static double a[N], b[N], c[N];

static void on_device(int d) {
  for (int i = 0; i < N; i++) a[i] = i, b[i] = 0, c[i] = 1;
#pragma omp target enter data map(to : a[0:N]) map(alloc : b[0:N]) device(d)
#pragma omp target teams distribute parallel for num_teams(2) device(d)
  for (int i = 0; i < N; i++) b[i] = 2 * a[i];
#pragma omp target update from(b[0:N]) device(d)
#pragma omp target data map(tofrom : c[0:N]) device(d)
  {
#pragma omp target device(d)
    for (int i = 0; i < N; i++) c[i] += b[i];
  }
#pragma omp target exit data map(from : b[0:N]) map(release : a[0:N]) device(d)
  int x = 1, y = 2;
#pragma omp target nowait map(tofrom : x) device(d)
  x += 10;
#pragma omp target nowait map(tofrom : y) device(d)
  y += 20;
#pragma omp taskwait
  double sum = 0;
  for (int i = 0; i < N; i++) sum += c[i];
  printf("device %d: sum=%.0f x=%d y=%d\n", d, sum, x, y);
}

int main(void) {
  int devices = omp_get_num_devices();
  printf("devices=%d\n", devices);
  for (int d = 0; d < 2 && d < (devices > 0 ? devices : 1); d++) on_device(d);
  return 0;
}
