/*
 * The clock.  Records carry raw ticks: the TSC where it is invariant (read
 * with rdtsc, about 20 cycles, no system call), CLOCK_MONOTONIC otherwise.
 * Anchors pair a tick count with CLOCK_MONOTONIC; readers convert ticks to
 * nanoseconds with one linear map through the first and the last anchor of
 * a trace, so the conversion is monotonic per thread.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "omptpy_internal.h"

omptpy_clock_kind omptpy_clock_kind_used = OMPTPY_CLOCK_MONOTONIC;

uint64_t omptpy_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The TSC is usable only when it ticks at a constant rate through sleep states. */
static bool tsc_invariant(void) {
#if defined(__x86_64__) || defined(__i386__)
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[4096];
  bool constant = false, nonstop = false;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "flags", 5) != 0) continue;
    constant = strstr(line, " constant_tsc") != NULL;
    nonstop = strstr(line, " nonstop_tsc") != NULL;
    break;
  }
  fclose(f);
  return constant && nonstop;
#else
  return false;
#endif
}

void omptpy_clock_init(int requested) {
  if (requested == OMPTPY_CLOCK_MONOTONIC) omptpy_clock_kind_used = OMPTPY_CLOCK_MONOTONIC;
  else if (requested == OMPTPY_CLOCK_TSC)
#if defined(__x86_64__) || defined(__i386__)
    omptpy_clock_kind_used = OMPTPY_CLOCK_TSC;
#else
    omptpy_clock_kind_used = OMPTPY_CLOCK_MONOTONIC;
#endif
  else omptpy_clock_kind_used = tsc_invariant() ? OMPTPY_CLOCK_TSC : OMPTPY_CLOCK_MONOTONIC;
}

/* The tightest of a few (ticks, ns) readings: the ns read closest to its ticks. */
omptpy_anchor omptpy_clock_anchor(void) {
  omptpy_anchor best = {0, 0};
  uint64_t best_gap = UINT64_MAX;
  for (int i = 0; i < 5; i++) {
    uint64_t t0 = omptpy_now();
    uint64_t ns = omptpy_monotonic_ns();
    uint64_t t1 = omptpy_now();
    if (t1 - t0 < best_gap) {
      best_gap = t1 - t0;
      best.ticks = t0 + (t1 - t0) / 2;
      best.mono_ns = ns;
    }
  }
  return best;
}

const char *omptpy_clock_name(void) {
  return omptpy_clock_kind_used == OMPTPY_CLOCK_TSC ? "tsc" : "monotonic";
}
