/*
 * ompt-py's MPI interposition library (README.md): the MPI calls of a traced
 * rank as `mpi` records, and each rank's clock measured against rank 0's after
 * MPI_Init and before MPI_Finalize.  Each wrapper calls the PMPI_ function it
 * wraps; the tool (libomptpy.so) is found at the first MPI_Init and gets the
 * records and the measurements through its MPI functions (omptpy_api.h).
 * Without the tool the wrappers only measure (every rank takes part in the
 * measurement, or the ranks that have the tool would wait for those without).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "omptpy.h"
#include "../tool/omptpy_api.h"

#define MPI_API __attribute__((visibility("default")))
/* Round trips per rank and phase: the one of shortest round trip is the best
 * measurement, and the tool keeps up to OMPTPY_MPI_MAX_PAIRS. */
#define PINGS 32
#define SYNC_TAG 0x6f6d

static struct {
  __typeof__(omptpy_clock_ticks) *ticks;
  __typeof__(omptpy_clock_ns) *ns;
  __typeof__(omptpy_mpi_call) *call;
  __typeof__(omptpy_mpi_world) *world;
  __typeof__(omptpy_mpi_clock_pairs) *pairs;
} tool;

/* The tool: in the process already (preloaded, or loaded by a runtime), else
 * the libomptpy.so of OMP_TOOL_LIBRARIES (ompt-py run sets it), loaded now
 * so that MPI_Init is recorded before the OpenMP runtime starts (the runtime
 * later loads the same library, by the same path). */
static void find_tool(void) {
  void *lib = NULL;
  if (!dlsym(RTLD_DEFAULT, "omptpy_mpi_call")) {
    const char *list = getenv("OMP_TOOL_LIBRARIES");
    char path[4096];
    while (list && *list && !lib) {
      size_t n = strcspn(list, ":");
      if (n < sizeof path && n >= 12 && memcmp(list + n - 12, "libomptpy.so", 12) == 0) {
        memcpy(path, list, n);
        path[n] = '\0';
        lib = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
      }
      list += n + (list[n] == ':');
    }
    if (!lib) lib = dlopen("libomptpy.so", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) return;
  }
  void *from = lib ? lib : RTLD_DEFAULT;
  tool.ticks = (__typeof__(tool.ticks))dlsym(from, "omptpy_clock_ticks");
  tool.ns = (__typeof__(tool.ns))dlsym(from, "omptpy_clock_ns");
  tool.world = (__typeof__(tool.world))dlsym(from, "omptpy_mpi_world");
  tool.pairs = (__typeof__(tool.pairs))dlsym(from, "omptpy_mpi_clock_pairs");
  tool.call = (__typeof__(tool.call))dlsym(from, "omptpy_mpi_call");
  if (!tool.ticks || !tool.ns || !tool.world || !tool.pairs || !tool.call) tool.call = NULL;
}

static uint64_t ticks(void) { return tool.call ? tool.ticks() : 0; }

static uint64_t now_ns(void) {
  if (tool.call) return tool.ns();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int comm_size(MPI_Comm comm) {
  int size = 0;
  if (comm != MPI_COMM_NULL) PMPI_Comm_size(comm, &size);
  return size;
}

static uint64_t bytes_of(int count, MPI_Datatype type) {
  int size = 0;
  if (type == MPI_DATATYPE_NULL || PMPI_Type_size(type, &size) != MPI_SUCCESS || count < 0)
    return OMPTPY_MPI_BYTES_UNKNOWN;
  return (uint64_t)count * (uint64_t)size;
}

static void record(int call, uint64_t begin, uint64_t bytes, int peer, int size, void *codeptr) {
  if (tool.call) tool.call(call, begin, bytes, peer, (uint32_t)size, (uintptr_t)codeptr);
}

/* Ping-pong between rank 0 and each other rank in turn (Score-P's scheme):
 * rank 0 reads its clock, sends, the rank answers with its clock, rank 0
 * reads its clock again; PINGS times, then rank 0 sends its readings over.
 * Every rank keeps its own triples (rank 0: none, it is the reference); the
 * reader fits the offsets of the shortest round trips (ompt_py/io/clocks.py). */
/* Rank 0's first message of a rank's turn, waited for without spinning: on a
 * node with more ranks than cores the ranks whose turn has not come would
 * otherwise take the CPUs of the two that measure (that round trip, slowed by
 * the sleeps, is one of the longest: the fit leaves it out). */
static void wait_turn(uint64_t *t, MPI_Comm comm) {
  MPI_Request request;
  int done = 0;
  const struct timespec pause = {0, 20000};
  PMPI_Irecv(t, 1, MPI_UINT64_T, 0, SYNC_TAG, comm, &request);
  while (PMPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done)
    nanosleep(&pause, NULL);
}

static void clock_sync(int phase, const char *source, void *codeptr) {
  uint64_t begin = ticks();
  int rank, size;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm comm; /* of its own: the program's messages cannot match these */
  if (PMPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) return;
  uint64_t triples[PINGS][3], t;
  for (int peer = 1; peer < size; peer++) {
    if (rank == 0) {
      for (int i = 0; i < PINGS; i++) {
        triples[i][0] = now_ns();
        PMPI_Send(&triples[i][0], 1, MPI_UINT64_T, peer, SYNC_TAG, comm);
        PMPI_Recv(&triples[i][1], 1, MPI_UINT64_T, peer, SYNC_TAG, comm, MPI_STATUS_IGNORE);
        triples[i][2] = now_ns();
      }
      PMPI_Send(triples, 3 * PINGS, MPI_UINT64_T, peer, SYNC_TAG, comm);
    } else if (rank == peer) {
      for (int i = 0; i < PINGS; i++) {
        if (i == 0) wait_turn(&t, comm);
        else PMPI_Recv(&t, 1, MPI_UINT64_T, 0, SYNC_TAG, comm, MPI_STATUS_IGNORE);
        t = now_ns();
        PMPI_Send(&t, 1, MPI_UINT64_T, 0, SYNC_TAG, comm);
      }
      PMPI_Recv(triples, 3 * PINGS, MPI_UINT64_T, 0, SYNC_TAG, comm, MPI_STATUS_IGNORE);
    }
  }
  PMPI_Comm_free(&comm);
  if (!tool.call) return;
  tool.world(rank, size, source);
  tool.pairs(phase, 0, (const uint64_t *)triples, rank == 0 ? 0 : PINGS);
  record(OMPTPY_MPI_CLOCK_SYNC, begin, OMPTPY_MPI_BYTES_UNKNOWN, rank ? 0 : -1, size, codeptr);
}

static int after_init(int rc, uint64_t begin, void *codeptr) {
  if (rc != MPI_SUCCESS) return rc;
  record(OMPTPY_MPI_INIT, begin, OMPTPY_MPI_BYTES_UNKNOWN, -1, comm_size(MPI_COMM_WORLD),
         codeptr);
  clock_sync(0, "pmpi", codeptr);
  return rc;
}

MPI_API int MPI_Init(int *argc, char ***argv) {
  find_tool();
  uint64_t begin = ticks();
  return after_init(PMPI_Init(argc, argv), begin, __builtin_return_address(0));
}

MPI_API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  find_tool();
  uint64_t begin = ticks();
  return after_init(PMPI_Init_thread(argc, argv, required, provided), begin,
                    __builtin_return_address(0));
}

MPI_API int MPI_Finalize(void) {
  void *codeptr = __builtin_return_address(0);
  clock_sync(1, "pmpi", codeptr);
  int size = comm_size(MPI_COMM_WORLD);
  uint64_t begin = ticks();
  int rc = PMPI_Finalize();
  record(OMPTPY_MPI_FINALIZE, begin, OMPTPY_MPI_BYTES_UNKNOWN, -1, size, codeptr);
  return rc;
}

MPI_API int MPI_Barrier(MPI_Comm comm) {
  uint64_t begin = ticks();
  int rc = PMPI_Barrier(comm);
  record(OMPTPY_MPI_BARRIER, begin, OMPTPY_MPI_BYTES_UNKNOWN, -1, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  uint64_t begin = ticks();
  int rc = PMPI_Bcast(buf, count, type, root, comm);
  record(OMPTPY_MPI_BCAST, begin, bytes_of(count, type), root, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Reduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op,
                       int root, MPI_Comm comm) {
  uint64_t begin = ticks();
  int rc = PMPI_Reduce(send, recv, count, type, op, root, comm);
  record(OMPTPY_MPI_REDUCE, begin, bytes_of(count, type), root, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Allreduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op,
                          MPI_Comm comm) {
  uint64_t begin = ticks();
  int rc = PMPI_Allreduce(send, recv, count, type, op, comm);
  record(OMPTPY_MPI_ALLREDUCE, begin, bytes_of(count, type), -1, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Gather(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount,
                       MPI_Datatype rtype, int root, MPI_Comm comm) {
  uint64_t begin = ticks();
  int rc = PMPI_Gather(send, scount, stype, recv, rcount, rtype, root, comm);
  record(OMPTPY_MPI_GATHER, begin, bytes_of(scount, stype), root, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Allgather(const void *send, int scount, MPI_Datatype stype, void *recv,
                          int rcount, MPI_Datatype rtype, MPI_Comm comm) {
  uint64_t begin = ticks();
  int rc = PMPI_Allgather(send, scount, stype, recv, rcount, rtype, comm);
  record(OMPTPY_MPI_ALLGATHER, begin, bytes_of(scount, stype), -1, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Scatter(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount,
                        MPI_Datatype rtype, int root, MPI_Comm comm) {
  uint64_t begin = ticks();
  int rc = PMPI_Scatter(send, scount, stype, recv, rcount, rtype, root, comm);
  record(OMPTPY_MPI_SCATTER, begin, bytes_of(rcount, rtype), root, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Alltoall(const void *send, int scount, MPI_Datatype stype, void *recv,
                         int rcount, MPI_Datatype rtype, MPI_Comm comm) {
  uint64_t begin = ticks();
  int rc = PMPI_Alltoall(send, scount, stype, recv, rcount, rtype, comm);
  int size = comm_size(comm);
  uint64_t each = bytes_of(scount, stype);
  record(OMPTPY_MPI_ALLTOALL, begin,
         each == OMPTPY_MPI_BYTES_UNKNOWN ? each : each * (uint64_t)size, -1, size,
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag,
                     MPI_Comm comm) {
  uint64_t begin = ticks();
  int rc = PMPI_Send(buf, count, type, dest, tag, comm);
  record(OMPTPY_MPI_SEND, begin, bytes_of(count, type), dest, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

/* The source and size of what came (a status of our own if the caller ignores it). */
static void received(MPI_Status *status, MPI_Datatype type, int *source, uint64_t *bytes) {
  int count;
  *source = status->MPI_SOURCE;
  *bytes = PMPI_Get_count(status, type, &count) == MPI_SUCCESS && count != MPI_UNDEFINED
               ? bytes_of(count, type)
               : OMPTPY_MPI_BYTES_UNKNOWN;
}

MPI_API int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                     MPI_Status *status) {
  MPI_Status own;
  if (status == MPI_STATUS_IGNORE) status = &own;
  uint64_t begin = ticks();
  int rc = PMPI_Recv(buf, count, type, source, tag, comm, status);
  uint64_t bytes = OMPTPY_MPI_BYTES_UNKNOWN;
  if (rc == MPI_SUCCESS) received(status, type, &source, &bytes);
  record(OMPTPY_MPI_RECV, begin, bytes, source, comm_size(comm), __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Sendrecv(const void *send, int scount, MPI_Datatype stype, int dest, int stag,
                         void *recv, int rcount, MPI_Datatype rtype, int source, int rtag,
                         MPI_Comm comm, MPI_Status *status) {
  uint64_t begin = ticks();
  int rc = PMPI_Sendrecv(send, scount, stype, dest, stag, recv, rcount, rtype, source, rtag, comm,
                         status);
  record(OMPTPY_MPI_SENDRECV, begin, bytes_of(scount, stype), dest, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag,
                      MPI_Comm comm, MPI_Request *request) {
  uint64_t begin = ticks();
  int rc = PMPI_Isend(buf, count, type, dest, tag, comm, request);
  record(OMPTPY_MPI_ISEND, begin, bytes_of(count, type), dest, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag,
                      MPI_Comm comm, MPI_Request *request) {
  uint64_t begin = ticks();
  int rc = PMPI_Irecv(buf, count, type, source, tag, comm, request);
  record(OMPTPY_MPI_IRECV, begin, bytes_of(count, type), source, comm_size(comm),
         __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Wait(MPI_Request *request, MPI_Status *status) {
  uint64_t begin = ticks();
  int rc = PMPI_Wait(request, status);
  record(OMPTPY_MPI_WAIT, begin, OMPTPY_MPI_BYTES_UNKNOWN, -1, 0, __builtin_return_address(0));
  return rc;
}

MPI_API int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  uint64_t begin = ticks();
  int rc = PMPI_Waitall(count, requests, statuses);
  record(OMPTPY_MPI_WAITALL, begin, OMPTPY_MPI_BYTES_UNKNOWN, -1, 0,
         __builtin_return_address(0));
  return rc;
}

/* Fortran (gfortran's names, mpif.h / use mpi, and use mpi_f08): Open MPI's
 * Fortran bindings call PMPI_ directly, so the C wrappers above never see a
 * Fortran program's calls.  Setup and barriers are wrapped here (the clock
 * measurements need MPI_Init and MPI_Finalize); a Fortran program's other
 * calls are not recorded.  ierr may be absent (an optional argument of
 * mpi_f08: NULL). */
static void fortran_result(MPI_Fint *ierr, int rc) {
  if (ierr) *ierr = (MPI_Fint)rc;
}

MPI_API void mpi_init_(MPI_Fint *ierr) {
  find_tool();
  uint64_t begin = ticks();
  fortran_result(ierr, after_init(PMPI_Init(NULL, NULL), begin, __builtin_return_address(0)));
}

MPI_API void mpi_init_thread_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr) {
  find_tool();
  uint64_t begin = ticks();
  int got = 0;
  int rc = after_init(PMPI_Init_thread(NULL, NULL, (int)*required, &got), begin,
                      __builtin_return_address(0));
  *provided = (MPI_Fint)got;
  fortran_result(ierr, rc);
}

MPI_API void mpi_finalize_(MPI_Fint *ierr) { fortran_result(ierr, MPI_Finalize()); }

MPI_API void mpi_barrier_(MPI_Fint *comm, MPI_Fint *ierr) {
  fortran_result(ierr, MPI_Barrier(PMPI_Comm_f2c(*comm)));
}

MPI_API void mpi_init_f08_(MPI_Fint *ierr) { mpi_init_(ierr); }

MPI_API void mpi_init_thread_f08_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr) {
  mpi_init_thread_(required, provided, ierr);
}

MPI_API void mpi_finalize_f08_(MPI_Fint *ierr) { mpi_finalize_(ierr); }

/* type(MPI_Comm) is a derived type of one integer: passed by reference. */
MPI_API void mpi_barrier_f08_(MPI_Fint *comm, MPI_Fint *ierr) { mpi_barrier_(comm, ierr); }

/* ompt_py.mpi (mpi4py programs): the same measurement, called through ctypes
 * from a process where this library is loaded but does not interpose. */
MPI_API void omptpy_mpi_sync(int phase) {
  if (!tool.call) find_tool();
  clock_sync(phase, "ompt_py.mpi", __builtin_return_address(0));
}

/* The MPI library this one calls, as PMPI_Get_library_version says (callable
 * before MPI_Init): ompt_py.mpi checks that mpi4py runs on the same one. */
MPI_API int omptpy_mpi_library_version(char *out, int *len) {
  return PMPI_Get_library_version(out, len);
}
