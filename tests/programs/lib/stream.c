/* A shared library for ctypes: run(n) runs parallel regions of a dynamic,1
 * loop of n iterations until stop() is called, and returns how many it ran.
 * ctypes releases the GIL around run(), so Python can open and close trace
 * windows while the OpenMP threads are inside callbacks. */
static volatile int stop_flag;

void stop(void) { stop_flag = 1; }

long run(long n) {
  long regions = 0;
  while (!stop_flag) {
#pragma omp parallel num_threads(2)
    {
#pragma omp for schedule(dynamic, 1)
      for (long i = 0; i < n; i++) __asm__ volatile("" ::: "memory");
    }
    regions++;
  }
  return regions;
}
