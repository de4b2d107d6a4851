/* single [N]: n regions, each with one single construct (see work.h). */
#include <stdlib.h>

#include "work.h"

static int arg(int argc, char **argv, int i, int dflt) { return argc > i ? atoi(argv[i]) : dflt; }

int main(int argc, char **argv) {
  (void)arg;
  work_single(arg(argc, argv, 1, 10));
  return 0;
}
