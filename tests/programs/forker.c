/* forker P C: the parent runs P regions, forks, the child runs C regions and
 * exits, the parent waits for it and runs P more regions.  Prints the child's
 * pid.  Exit status 0 when the child succeeded. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "work.h"

int main(int argc, char **argv) {
  int p = argc > 1 ? atoi(argv[1]) : 2;
  int c = argc > 2 ? atoi(argv[2]) : 3;
  work_parallel(p);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    work_parallel(c);
    exit(0);
  }
  printf("%d\n", (int)pid);
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 3;
  work_parallel(p);
  return 0;
}
