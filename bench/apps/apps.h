/* Application kernels of bench/apps.py (kernels.c, epcc.c, registry.c -> libapps.so; main.c -> apps). */
#ifndef APPS_H
#define APPS_H

/* What one kernel run reports.  EPCC-style kernels also time the same work
 * without the construct (reference) and give the number of constructs (ops):
 * the construct's overhead is (seconds - reference) / ops. */
typedef struct app_result {
  double seconds;   /* the kernel alone: set-up and checks are outside */
  double checksum;  /* same in every run of a size, whatever the tool */
  double reference; /* EPCC: the reference work's seconds, else 0 */
  double ops;       /* EPCC: constructs executed, else 0 */
} app_result_t;

typedef void (*app_fn_t)(long size, app_result_t *out);

typedef struct app_kernel {
  const char *name;
  app_fn_t run;
  long size;       /* default: 0.2-1 s with no tool on the 2-core VM */
  long quick_size; /* --quick: a few ms */
  const char *what;
} app_kernel_t;

/* Seconds of CLOCK_MONOTONIC. */
double apps_now(void);

/* The kernels, in the order the benchmark prints them; NULL past the end. */
const app_kernel_t *apps_kernel(int i);

/* Starts the team and the task machinery (runtime and tool start-up). */
void apps_warmup(void);

/* Runs kernel `name` at `size` into *out: 0, or -1 for an unknown name. */
int apps_run(const char *name, long size, app_result_t *out);

/* The kernels (kernels.c, epcc.c). */
void app_fib(long n, app_result_t *out);
void app_nqueens(long n, app_result_t *out);
void app_sparselu(long nb, app_result_t *out);
void app_sort(long n, app_result_t *out);
void app_health(long steps, app_result_t *out);
void app_dynamic(long n, app_result_t *out);
void epcc_parallel(long reps, app_result_t *out);
void epcc_for(long reps, app_result_t *out);
void epcc_barrier(long reps, app_result_t *out);
void epcc_single(long reps, app_result_t *out);
void epcc_critical(long reps, app_result_t *out);
void epcc_lock(long reps, app_result_t *out);
void epcc_reduction(long reps, app_result_t *out);
void epcc_tasks(long reps, app_result_t *out);
void epcc_taskwait(long reps, app_result_t *out);

#endif /* APPS_H */
