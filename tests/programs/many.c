/* many [N] [_exit]: one region with a dynamic,1 loop of N iterations (N dispatch
 * events).  With "_exit" the program ends by _exit(0): no runtime shutdown, no
 * tool finalize. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "work.h"

int main(int argc, char **argv) {
  work_dispatch(argc > 1 ? atol(argv[1]) : 1000000);
  if (argc > 2 && strcmp(argv[2], "_exit") == 0) _exit(0);
  return 0;
}
