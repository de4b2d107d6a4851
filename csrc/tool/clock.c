/*
 * The clock.  Records carry raw ticks: the TSC where it is invariant (read
 * with rdtsc, about 20 cycles, no system call), CLOCK_MONOTONIC otherwise.
 * Anchors pair a tick count with CLOCK_MONOTONIC; readers convert ticks to
 * nanoseconds with one linear map through the first and the last anchor of
 * a trace, so the conversion is monotonic per thread.  That map is here and
 * in omptpy_api.h, once for every reader: the handlers' queue (tap.c), the
 * extension (traces, ompt_py.native) through omptpy_tick_scale and
 * omptpy_ticks_to_ns.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "omptpy_internal.h"

omptpy_clock_kind omptpy_clock_kind_used = OMPTPY_CLOCK_MONOTONIC;

static inline uint64_t ns_of(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t omptpy_monotonic_ns(void) { return ns_of(CLOCK_MONOTONIC); }

/* OMPTPY_TEST_CLOCK_SKEW (tests only): ranks of one machine given clocks as
 * different as those of several machines, t + offset + drift * t, so that the
 * alignment of ranks' clocks (ompt_py/io/clocks.py) can be checked against
 * known values.  Applied to every time a trace holds: the anchors that give
 * ticks their times, the monotonic clock's records, the wall-clock start and
 * stop, and the MPI clock measurements. */
static bool skewed;
static double skew_offset_ns, skew_drift;

static uint64_t skew(uint64_t ns) {
  return (uint64_t)((double)ns + skew_offset_ns + skew_drift * (double)ns);
}

uint64_t omptpy_trace_ns(void) {
  uint64_t ns = ns_of(CLOCK_MONOTONIC);
  return OMPTPY_UNLIKELY(skewed) ? skew(ns) : ns;
}

uint64_t omptpy_realtime_ns(void) {
  uint64_t ns = ns_of(CLOCK_REALTIME);
  return skewed ? skew(ns) : ns;
}

/* For the MPI library and ompt_py.mpi, which may come before the runtime
 * started the tool: the tool (and so its clock) is set up first. */
OMPTPY_API uint64_t omptpy_clock_ns(void) {
  omptpy_init();
  return omptpy_trace_ns();
}

OMPTPY_API uint64_t omptpy_clock_ticks(void) {
  omptpy_init();
  return omptpy_now();
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

void omptpy_clock_init(const omptpy_config *cfg) {
  skew_offset_ns = cfg->skew_offset_ns;
  skew_drift = cfg->skew_ppm * 1e-6;
  skewed = skew_offset_ns != 0 || skew_drift != 0;
  int requested = cfg->clock;
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
    uint64_t ns = omptpy_trace_ns();
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

/* Nanoseconds per tick from a to b (later). */
static double slope(omptpy_anchor a, omptpy_anchor b) {
  return (double)(int64_t)(b.mono_ns - a.mono_ns) / (double)(b.ticks - a.ticks);
}

/* Over at least 200 us: a slope over fewer ticks than TICK_SCALE_MIN_TICKS
 * (below) is no better. */
double omptpy_clock_estimate(omptpy_anchor a) {
  if (omptpy_clock_kind_used != OMPTPY_CLOCK_TSC) return 1.0;
  omptpy_anchor b;
  do b = omptpy_clock_anchor();
  while (b.mono_ns - a.mono_ns < 200000);
  return slope(a, b);
}

/* Anchors closer than this (a third of a millisecond at 3 GHz) give a slope
 * no better than the estimate. */
#define TICK_SCALE_MIN_TICKS 1000000u

OMPTPY_API double omptpy_tick_scale(omptpy_anchor first, omptpy_anchor last, double estimate) {
  return last.ticks > first.ticks && last.ticks - first.ticks > TICK_SCALE_MIN_TICKS
             ? slope(first, last)
             : estimate;
}
