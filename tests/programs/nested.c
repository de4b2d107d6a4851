/* nested [N]: one region of 2 threads, each opening an inner region of 2 threads (see work.h). */
#include <stdlib.h>

#include "work.h"

static int arg(int argc, char **argv, int i, int dflt) { return argc > i ? atoi(argv[i]) : dflt; }

int main(int argc, char **argv) {
  (void)arg, (void)argc, (void)argv;
  work_nested();
  return 0;
}
