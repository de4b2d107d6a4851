/* critical [N]: one region; each thread takes a critical section and a lock n times (see work.h). */
#include <stdlib.h>

#include "work.h"

static int arg(int argc, char **argv, int i, int dflt) { return argc > i ? atoi(argv[i]) : dflt; }

int main(int argc, char **argv) {
  (void)arg;
  long n = arg(argc, argv, 1, 10);
  if (work_critical((int)n) != 4 * n) return 1;
  return 0;
}
