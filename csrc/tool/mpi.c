/*
 * MPI: the records of MPI calls and the clock measurements of the ranks,
 * given by ompt-py's MPI interposition library (csrc/mpi) or by ompt_py.mpi
 * (mpi4py programs).  The tool itself calls no MPI function: it stores what
 * they measured and writes it into every STATS document ("mpi"), from which
 * the reader fits each rank's clock to the reference rank's
 * (ompt_py/io/clocks.py).  A measurement is a triple of clock readings
 * (omptpy_clock_ns): the reference's when it sent a message, this process's
 * when it answered, the reference's when the answer came back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "omptpy_internal.h"

static const char *const PHASES[2] = {"init", "finalize"};

static struct {
  pthread_mutex_t lock;
  int rank, size; /* -1: not told */
  char source[16];
  int reference[2];
  uint32_t n[2];
  uint64_t pairs[2][OMPTPY_MPI_MAX_PAIRS][3];
} M = {PTHREAD_MUTEX_INITIALIZER, -1, -1, "", {-1, -1}, {0, 0}, {{{0}}}};

OMPTPY_API void omptpy_mpi_call(int call, uint64_t begin_ticks, uint64_t bytes, int32_t peer,
                                uint32_t comm_size, uintptr_t codeptr) {
  if (omptpy_init() != 0) return;
  omptpy_emit_span(OMPTPY_EVENT_MPI, call, codeptr, begin_ticks, bytes, (uint32_t)peer,
                   comm_size);
}

OMPTPY_API void omptpy_mpi_world(int rank, int size, const char *source) {
  if (omptpy_init() != 0) return;
  pthread_mutex_lock(&M.lock);
  M.rank = rank;
  M.size = size;
  snprintf(M.source, sizeof M.source, "%s", source ? source : "");
  pthread_mutex_unlock(&M.lock);
}

OMPTPY_API int omptpy_mpi_clock_pairs(int phase, int reference, const uint64_t *triples,
                                      uint32_t n) {
  if (phase < 0 || phase > 1 || reference < 0 || (n && !triples)) return -EINVAL;
  if (omptpy_init() != 0) return 0;
  if (n > OMPTPY_MPI_MAX_PAIRS) n = OMPTPY_MPI_MAX_PAIRS;
  pthread_mutex_lock(&M.lock);
  M.reference[phase] = reference;
  memcpy(M.pairs[phase], triples, n * sizeof M.pairs[phase][0]);
  M.n[phase] = n;
  pthread_mutex_unlock(&M.lock);
  return 0;
}

OMPTPY_API int omptpy_mpi_measured(int phase) {
  pthread_mutex_lock(&M.lock);
  int done = phase >= 0 && phase <= 1 && M.reference[phase] >= 0;
  pthread_mutex_unlock(&M.lock);
  return done;
}

/* ,"mpi":{"rank","size","source","sync":[{"phase","reference","pairs":[[a,b,c]...]}...]}
 * when MPI told anything; nothing otherwise. */
int omptpy_mpi_json(omptpy_str *s) {
  pthread_mutex_lock(&M.lock);
  int rc = 0;
  if (M.rank >= 0) {
    rc = omptpy_put(s, ",\"mpi\":{\"rank\":%d,\"size\":%d,\"source\":", M.rank, M.size);
    rc = rc ? rc : omptpy_put_string(s, M.source, strlen(M.source));
    rc = rc ? rc : omptpy_put(s, ",\"sync\":[");
    for (int phase = 0, first = 1; rc == 0 && phase < 2; phase++) {
      if (M.reference[phase] < 0) continue;
      rc = omptpy_put(s, "%s{\"phase\":\"%s\",\"reference\":%d,\"pairs\":[", first ? "" : ",",
                      PHASES[phase], M.reference[phase]);
      first = 0;
      for (uint32_t i = 0; rc == 0 && i < M.n[phase]; i++)
        rc = omptpy_put(s, "%s[%llu,%llu,%llu]", i ? "," : "",
                        (unsigned long long)M.pairs[phase][i][0],
                        (unsigned long long)M.pairs[phase][i][1],
                        (unsigned long long)M.pairs[phase][i][2]);
      rc = rc ? rc : omptpy_put(s, "]}");
    }
    rc = rc ? rc : omptpy_put(s, "]}");
  }
  pthread_mutex_unlock(&M.lock);
  return rc;
}

void omptpy_mpi_after_fork_child(void) { pthread_mutex_init(&M.lock, NULL); }
