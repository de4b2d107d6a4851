/*
 * Shared by the programs of tests/programs/versions/: built with gcc -fopenmp
 * (the GOMP_ ABI, which every LLVM libomp implements), so one binary runs on
 * libomp 14, 16 and 19 when that libomp is LD_PRELOADed.  Every region asks
 * for num_threads(2); bodies are opaque to the optimiser.  Each program
 * prints a checksum that does not depend on the runtime, and the test checks
 * it, so a wrong result on an old runtime is caught too.
 */
#ifndef VERSIONS_COMMON_H
#define VERSIONS_COMMON_H

#include <omp.h>
#include <stdio.h>

#define OPAQUE() __asm__ volatile("" ::: "memory")

#endif
