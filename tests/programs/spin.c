/* spin [ignore|count] [fork]: parallel regions until a signal ends it, for the
 * signal tests of ompt-py run.  Prints "ready PID" once it has run 200 regions.
 *   ignore: SIGINT, SIGTERM, SIGHUP and SIGQUIT are ignored (only SIGKILL ends it);
 *   count:  the first of them stops the regions; 300 ms later it prints
 *           "signals N" (how many it got, so a signal delivered twice shows) and
 *           dies of the first, as it would have without a handler;
 *   fork:   first forks a child that does the same (its own "ready PID" line). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "work.h"

static volatile sig_atomic_t got, first;

static void count(int sig) {
  if (!got) first = sig;
  got++;
}

int main(int argc, char **argv) {
  int ignore = 0, counting = 0;
  for (int i = 1; i < argc; i++) {
    ignore |= strcmp(argv[i], "ignore") == 0;
    counting |= strcmp(argv[i], "count") == 0;
    if (strcmp(argv[i], "fork") == 0 && fork() < 0) return 2;
  }
  const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  for (unsigned i = 0; i < sizeof sigs / sizeof *sigs; i++) {
    if (ignore) signal(sigs[i], SIG_IGN);
    if (counting) signal(sigs[i], count);
  }
  work_parallel(200);
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  while (!got) work_parallel(100);
  struct timespec wait = {0, 300 * 1000 * 1000};
  while (nanosleep(&wait, &wait) != 0) continue;
  printf("signals %d\n", (int)got);
  fflush(stdout);
  signal(first, SIG_DFL);
  raise(first);
  return 1;
}
