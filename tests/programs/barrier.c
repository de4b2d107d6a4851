/* barrier [N]: one region with n explicit barriers (see work.h). */
#include <stdlib.h>

#include "work.h"

static int arg(int argc, char **argv, int i, int dflt) { return argc > i ? atoi(argv[i]) : dflt; }

int main(int argc, char **argv) {
  (void)arg;
  work_barrier(arg(argc, argv, 1, 10));
  return 0;
}
