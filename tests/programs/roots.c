/* roots N: N POSIX threads, one after another, each running one parallel
 * region of 2 threads.  Each becomes an initial thread of the runtime (a new
 * root) and ends with its pthread; the runtime's worker is reused. */
#include <pthread.h>
#include <stdlib.h>

static void *root(void *arg) {
  (void)arg;
#pragma omp parallel num_threads(2)
  { __asm__ volatile("" ::: "memory"); }
  return NULL;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20;
  for (int i = 0; i < n; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, root, NULL) != 0) return 1;
    pthread_join(t, NULL);
  }
  return 0;
}
