/* faults MODE N: runs N rounds of work_loops (two threads) with a counting tool
 * beside ompt-py's, then ends as MODE says.  The counting tool is a native
 * handler installed into the ompt-py tool (OMP_TOOL_LIBRARIES) before the
 * runtime starts: it is called after every record a thread writes and counts
 * it, by thread index, in the file $FAULTS_COUNTS (an array of uint64, mapped
 * shared, so the counts survive any ending): the reference the ledger's
 * figures are checked against.  MODE: exit (return from main), kill (print
 * "ready", then wait to be killed), _exit, abort, exec (exec itself in mode
 * "after", which works as much again and returns). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../csrc/include/omptpy.h"
#include "work.h"

#define MAX_THREADS 4096

static void count(const omptpy_record *r, void *state) {
  uint64_t *counts = state;
  if (r->thread < MAX_THREADS) counts[r->thread]++;
}

static int install_counter(void) {
  const char *tool = getenv("OMP_TOOL_LIBRARIES"), *path = getenv("FAULTS_COUNTS");
  int fd = path ? open(path, O_RDWR) : -1;
  if (!tool || fd < 0) return -1;
  void *counts = mmap(NULL, MAX_THREADS * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED,
                      fd, 0);
  close(fd);
  void *lib = dlopen(tool, RTLD_NOW);
  int (*add)(omptpy_native_fn, void *, const uint64_t[2]) =
      lib ? (int (*)(omptpy_native_fn, void *, const uint64_t[2]))dlsym(lib, "omptpy_native_add")
          : NULL;
  const uint64_t every[2] = {~(uint64_t)0, ~(uint64_t)0};
  return counts != MAP_FAILED && add && add(count, counts, every) >= 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "exit";
  int n = argc > 2 ? atoi(argv[2]) : 10;
  if (install_counter() != 0) {
    fprintf(stderr, "faults: cannot install the counting handler\n");
    return 2;
  }
  for (int i = 0; i < n; i++) work_loops(1000);
  if (strcmp(mode, "kill") == 0) {
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
  }
  if (strcmp(mode, "_exit") == 0) _exit(0);
  if (strcmp(mode, "abort") == 0) abort();
  if (strcmp(mode, "exec") == 0) {
    char rounds[16];
    snprintf(rounds, sizeof rounds, "%d", n);
    execl("/proc/self/exe", argv[0], "after", rounds, (char *)NULL);
    return 3;
  }
  return 0;
}
