/* many [N] [_exit] [pause=MS]: one region with a dynamic,1 loop of N iterations
 * (N dispatch events).  With "_exit" the program ends by _exit(0): no runtime
 * shutdown, no tool finalize.  With "pause=MS" it starts the runtime (the tool
 * and its drainer with it) and sleeps MS milliseconds before the region: the
 * drainer, idle meanwhile, has backed off to its longest sleeps when the
 * records come. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "work.h"

int main(int argc, char **argv) {
  int quick_exit = 0;
  long pause_ms = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "_exit") == 0) quick_exit = 1;
    else if (strncmp(argv[i], "pause=", 6) == 0) pause_ms = atol(argv[i] + 6);
  }
  if (pause_ms > 0) {
    (void)omp_get_max_threads(); /* the runtime, and the tool, started */
    struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  work_dispatch(argc > 1 ? atol(argv[1]) : 1000000);
  if (quick_exit) _exit(0);
  return 0;
}
