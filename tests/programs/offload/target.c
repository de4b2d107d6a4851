/* target: one target region on the host "device" (libomptarget's x86_64
 * plugin), mapping a 100-int array to it and one int both ways; prints the
 * host addresses of both. */
#include <stdio.h>

int main(void) {
  int a[100];
  for (int i = 0; i < 100; i++) a[i] = i;
  int sum = 0;
#pragma omp target map(to : a) map(tofrom : sum)
  for (int i = 0; i < 100; i++) sum += a[i];
  printf("sum=%d\n", sum);
  printf("a=%p sum_at=%p\n", (void *)a, (void *)&sum); /* the data ops' host addresses */
  return 0;
}
