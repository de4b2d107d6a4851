/* cxx_names: OpenMP in C++ functions of long names (namespaces, templates, as in
 * PyTorch or Eigen), each doing what one rule of the report's advice is about
 * (ompt_py/analysis/advice.py), for the stored trace tests/data/report-cxx:
 *
 *   regions too short for their team   200 empty parallel regions;
 *   a static schedule on uneven work    a schedule(static) loop of 2N iterations on 2
 *                                       threads, iteration i UNIT_US of work if i < N,
 *                                       else 4 x UNIT_US (N = 50, UNIT_US = 10);
 *   tasks below their creation cost     10000 empty tasks;
 *   a contended lock                    2 threads take one lock 20 times each and hold
 *                                       it 50 us, from a barrier on.
 *
 * The first region (the team's threads start) runs with the tool paused
 * (omp_control_tool), so the trace holds only the work.  Each function is kept
 * out of line, so that its regions have a source location of their own.  Built
 * without -g: the report names the functions (C++ names shortened), not file:line.  Prints the
 * busy time of each thread in the static loop: "busy_ns B0 B1". */
#include <omp.h>
#include <stdio.h>
#include <time.h>

static double now_us() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void spin_us(double us) {
  double end = now_us() + us;
  while (now_us() < end) __asm__ volatile("" ::: "memory");
}

volatile int task_sink; /* what a task does */

namespace ompt_py_examples {
namespace tensor_kernels_with_a_rather_long_namespace_name {

template <typename Scalar, int Rank>
struct TensorIteratorOverStridedMemoryWithBroadcasting {
  __attribute__((noinline)) static void for_each_chunk_in_its_own_parallel_region(int regions) {
    for (int r = 0; r < regions; r++) {
#pragma omp parallel num_threads(2)
      __asm__ volatile("" ::: "memory");
    }
  }
};

template <typename Accumulator>
struct RowReductionKernelWithStaticSchedule {
  __attribute__((noinline)) static void reduce_rows_of_uneven_length(double unit, int n,
                                                                     double busy[2]) {
#pragma omp parallel num_threads(2)
    {
      double t0 = now_us(), work = 0;
#pragma omp for schedule(static) nowait
      for (int i = 0; i < 2 * n; i++) {
        work += i < n ? unit : 4 * unit;
        double end = t0 + work;
        while (now_us() < end) __asm__ volatile("" ::: "memory");
      }
      busy[omp_get_thread_num()] = now_us() - t0;
    }
  }
};

template <typename Node, typename Edge>
struct AutogradGraphTaskSchedulerForTinyNodes {
  __attribute__((noinline)) static void spawn_one_task_per_node(int nodes) {
#pragma omp parallel num_threads(2)
#pragma omp single
    for (int i = 0; i < nodes; i++) {
#pragma omp task firstprivate(i)
      task_sink = i;
    }
  }
};

template <typename Key, typename Value>
struct ParameterServerWithOneGlobalLock {
  __attribute__((noinline)) static void update_shared_parameters(int updates, double hold) {
    omp_lock_t lock;
    omp_init_lock(&lock);
#pragma omp parallel num_threads(2)
    {
#pragma omp barrier
      for (int i = 0; i < updates; i++) {
        omp_set_lock(&lock);
        spin_us(hold);
        omp_unset_lock(&lock);
      }
    }
    omp_destroy_lock(&lock);
  }
};

}  // namespace tensor_kernels_with_a_rather_long_namespace_name
}  // namespace ompt_py_examples

namespace k = ompt_py_examples::tensor_kernels_with_a_rather_long_namespace_name;

int main() {
  omp_control_tool(omp_control_tool_pause, 0, NULL);
#pragma omp parallel num_threads(2)
  __asm__ volatile("" ::: "memory"); /* warm-up: the team's threads exist */
  omp_control_tool(omp_control_tool_start, 0, NULL);
  double busy[2] = {0, 0};
  k::TensorIteratorOverStridedMemoryWithBroadcasting<float, 4>::
      for_each_chunk_in_its_own_parallel_region(200);
  k::RowReductionKernelWithStaticSchedule<double>::reduce_rows_of_uneven_length(10, 50, busy);
  k::AutogradGraphTaskSchedulerForTinyNodes<int, long>::spawn_one_task_per_node(10000);
  k::ParameterServerWithOneGlobalLock<long, double>::update_shared_parameters(20, 50);
  printf("busy_ns %.0f %.0f\n", busy[0] * 1e3, busy[1] * 1e3);
  return 0;
}
