/*
 * OpenMP workloads of known structure, shared by the test programs
 * (one main per tests/programs/NAME.c) and the CPython extension module the
 * in-process tests build (tests/programs/ext/ompt_work_ext.c).
 *
 * Every parallel region asks for num_threads(2); bodies are opaque to the
 * optimiser (clang -O2 deletes empty regions).  The comments give what each
 * workload makes the runtime report; the tests count exactly that.
 */
#ifndef OMPT_TEST_WORK_H
#define OMPT_TEST_WORK_H

#include <omp.h>

#define OPAQUE() __asm__ volatile("" ::: "memory")

/* n parallel regions of 2 threads, empty bodies. */
static inline void work_parallel(int n) {
  for (int i = 0; i < n; i++) {
#pragma omp parallel num_threads(2)
    OPAQUE();
  }
}

/* One region; one thread (single) creates n explicit tasks, which the team runs. */
static inline void work_tasks(int n) {
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    for (int i = 0; i < n; i++) {
#pragma omp task
      OPAQUE();
    }
  }
}

/* One region: a schedule(static) loop of n iterations, then a dynamic,1 loop of
 * n iterations (n dispatch events of one iteration each). */
static inline void work_loops(int n) {
#pragma omp parallel num_threads(2)
  {
#pragma omp for schedule(static)
    for (int i = 0; i < n; i++) OPAQUE();
#pragma omp for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) OPAQUE();
  }
}

/* n regions, each with a sections construct of 3 sections. */
static inline void work_sections(int n) {
  for (int i = 0; i < n; i++) {
#pragma omp parallel num_threads(2)
    {
#pragma omp sections
      {
#pragma omp section
        OPAQUE();
#pragma omp section
        OPAQUE();
#pragma omp section
        OPAQUE();
      }
    }
  }
}

/* n regions, each with one single construct (one executor, one other). */
static inline void work_single(int n) {
  for (int i = 0; i < n; i++) {
#pragma omp parallel num_threads(2)
    {
#pragma omp single
      OPAQUE();
    }
  }
}

/* One region with n explicit barriers. */
static inline void work_barrier(int n) {
#pragma omp parallel num_threads(2)
  for (int i = 0; i < n; i++) {
    OPAQUE();
#pragma omp barrier
  }
}

static omp_lock_t work_lock_;
static volatile long work_in_critical_, work_in_lock_;

/* One region; each thread enters a critical section n times and takes a lock
 * n times: 2n critical and 2n lock acquisitions, one lock init and destroy.
 * Returns the two counters' sum (4n) so the work cannot be optimised away;
 * each counter has its own mutex. */
static inline long work_critical(int n) {
  work_in_critical_ = work_in_lock_ = 0;
  omp_init_lock(&work_lock_);
#pragma omp parallel num_threads(2)
  for (int i = 0; i < n; i++) {
#pragma omp critical
    work_in_critical_++;
    omp_set_lock(&work_lock_);
    work_in_lock_++;
    omp_unset_lock(&work_lock_);
  }
  omp_destroy_lock(&work_lock_);
  return work_in_critical_ + work_in_lock_;
}

/* n regions, each with one masked construct (thread 0 executes it). */
static inline void work_masked(int n) {
  for (int i = 0; i < n; i++) {
#pragma omp parallel num_threads(2)
    {
#pragma omp masked
      OPAQUE();
    }
  }
}

/* One outer region of 2 threads; each outer thread opens an inner region of 2
 * threads: 3 regions, 6 implicit tasks. */
static inline void work_nested(void) {
  omp_set_max_active_levels(2);
#pragma omp parallel num_threads(2)
  {
#pragma omp parallel num_threads(2)
    OPAQUE();
  }
}

/* One region with a dynamic,1 loop of n iterations: n dispatch events, the
 * cheapest way to make many events (overflow tests). */
static inline void work_dispatch(long n) {
#pragma omp parallel num_threads(2)
  {
#pragma omp for schedule(dynamic, 1)
    for (long i = 0; i < n; i++) OPAQUE();
  }
}

#endif
