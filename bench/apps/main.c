/*
 * Driver of bench/apps.py:
 *   apps --list                  one line per kernel: name size quick_size what
 *   apps [KERNEL[=SIZE] ...]     warm-up, then each kernel in turn, one line each:
 *     APP name size seconds checksum reference ops window=BEGIN:END
 * (BEGIN, END: CLOCK_MONOTONIC ns around the kernel's run, in which
 * bench/apps.py finds the tool's stalls that the kernel's time holds).
 * SIZE defaults to the kernel's default size; with no kernel, only the
 * warm-up runs (bench/apps.py counts its events to subtract them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps.h"

static long long mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int usage(const char *prog) {
  fprintf(stderr, "usage: %s --list | [KERNEL[=SIZE] ...]\n", prog);
  return 2;
}

static const app_kernel_t *find(const char *name, size_t len) {
  const app_kernel_t *k;
  for (int i = 0; (k = apps_kernel(i)) != NULL; i++)
    if (strlen(k->name) == len && strncmp(k->name, name, len) == 0)
      return k;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--list") == 0) {
    const app_kernel_t *k;
    for (int i = 0; (k = apps_kernel(i)) != NULL; i++)
      printf("%s %ld %ld %s\n", k->name, k->size, k->quick_size, k->what);
    return 0;
  }
  /* Check every argument before running anything. */
  for (int a = 1; a < argc; a++) {
    const char *eq = strchr(argv[a], '=');
    size_t len = eq ? (size_t)(eq - argv[a]) : strlen(argv[a]);
    if (find(argv[a], len) == NULL) {
      fprintf(stderr, "%s: unknown kernel '%.*s' (--list lists them)\n", argv[0], (int)len,
              argv[a]);
      return usage(argv[0]);
    }
    if (eq != NULL) {
      char *end = NULL;
      long size = strtol(eq + 1, &end, 10);
      if (end == eq + 1 || *end != '\0' || size < 0) {
        fprintf(stderr, "%s: bad size in '%s' (a whole number >= 0)\n", argv[0], argv[a]);
        return 2;
      }
    }
  }
  apps_warmup();
  for (int a = 1; a < argc; a++) {
    const char *eq = strchr(argv[a], '=');
    size_t len = eq ? (size_t)(eq - argv[a]) : strlen(argv[a]);
    const app_kernel_t *k = find(argv[a], len);
    long size = eq ? strtol(eq + 1, NULL, 10) : k->size;
    app_result_t r;
    long long begin = mono_ns();
    apps_run(k->name, size, &r);
    long long end = mono_ns();
    printf("APP %s %ld %.9f %.17g %.9f %.0f window=%lld:%lld\n", k->name, size, r.seconds,
           r.checksum, r.reference, r.ops, begin, end);
    fflush(stdout);
  }
  return 0;
}
