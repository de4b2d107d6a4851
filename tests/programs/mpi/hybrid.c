/* A hybrid MPI + OpenMP program for tests/live/test_mpi.py: each rank runs
 * parallel regions between barriers, an allreduce, a bcast and a ring of
 * send/recv, for about argv[1] milliseconds (default 200), so that the clock
 * measurements at MPI_Init and MPI_Finalize are that far apart.  argv[2],
 * "R:MS": rank R sleeps MS milliseconds before each barrier (a rank known to be
 * late; default none).  Prints "rank R of N: sum S steps K" once the
 * allreduce agrees. */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double work(int rank, int step) {
  double sum = 0;
#pragma omp parallel for reduction(+ : sum)
  for (int i = 0; i < 20000; i++) sum += (double)((i + rank + step) % 7);
  return sum;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double ms = argc > 1 ? atof(argv[1]) : 200;
  int late = -1;
  double late_ms = 0;
  if (argc > 2 && sscanf(argv[2], "%d:%lf", &late, &late_ms) != 2) {
    fprintf(stderr, "hybrid: argv[2] must be RANK:MS, not %s\n", argv[2]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  double start = now_ms(), total = 0;
  int step = 0, go = 1;
  while (go) {
    double local = work(rank, step), sum;
    if (rank == late) {
      long long ns = (long long)(late_ms * 1e6);
      struct timespec pause = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
      nanosleep(&pause, NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    total += sum;
    int token = step, next = (rank + 1) % size, prev = (rank + size - 1) % size;
    if (size > 1) {
      if (rank == 0) {
        MPI_Send(&token, 1, MPI_INT, next, 7, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(&token, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&token, 1, MPI_INT, next, 7, MPI_COMM_WORLD);
      }
    }
    go = now_ms() - start < ms; /* rank 0 decides for all */
    MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    step++;
  }
  printf("rank %d of %d: sum %.0f steps %d\n", rank, size, total, step);
  MPI_Finalize();
  return 0;
}
