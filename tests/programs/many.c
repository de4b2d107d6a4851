/* many [N]: one region with a dynamic,1 loop of N iterations (N dispatch events). */
#include <stdlib.h>

#include "work.h"

int main(int argc, char **argv) {
  work_dispatch(argc > 1 ? atol(argv[1]) : 1000000);
  return 0;
}
