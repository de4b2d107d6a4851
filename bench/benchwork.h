/* Workloads of the overhead benchmark (bench/work.c -> libbenchwork.so). */
#ifndef BENCHWORK_H
#define BENCHWORK_H

/* n empty parallel regions (opaque body), one after another. */
void bench_regions(long n);

/* One parallel region in which one thread (single) creates n trivial tasks
 * (opaque body); both threads of the team execute them. */
void bench_tasks(long n);

#endif /* BENCHWORK_H */
