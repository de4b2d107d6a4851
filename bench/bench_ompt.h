/*
 * Minimal OMPT declarations for the benchmark tools (bench/null_tool.c,
 * bench/min_recorder.c).
 *
 * Own copy, prefixed "bo_", so that the tools build with gcc as well as clang:
 * clang's omp-tools.h cannot be used from gcc (its stddef.h needs
 * __has_feature).  Only what the tools use is declared.  Values and layouts
 * follow the OpenMP 5.1 spec; bench/ompt_decls_check.c compares them with
 * clang's omp-tools.h at build time when clang is the compiler.
 */
#ifndef BENCH_OMPT_H
#define BENCH_OMPT_H

#include <stdint.h>

typedef union bo_data_t {
  uint64_t value;
  void *ptr;
} bo_data_t;

typedef struct bo_frame_t bo_frame_t; /* only passed through, never read */

typedef uint64_t bo_wait_id_t;

/* ompt_callbacks_t values used here */
enum {
  BO_CB_THREAD_BEGIN = 1,
  BO_CB_THREAD_END = 2,
  BO_CB_PARALLEL_BEGIN = 3,
  BO_CB_PARALLEL_END = 4,
  BO_CB_TASK_CREATE = 5,
  BO_CB_TASK_SCHEDULE = 6,
  BO_CB_IMPLICIT_TASK = 7,
  BO_CB_SYNC_REGION_WAIT = 16,
  BO_CB_MUTEX_RELEASED = 17,
  BO_CB_WORK = 20,
  BO_CB_MASKED = 21,
  BO_CB_SYNC_REGION = 23,
  BO_CB_LOCK_INIT = 24,
  BO_CB_LOCK_DESTROY = 25,
  BO_CB_MUTEX_ACQUIRE = 26,
  BO_CB_MUTEX_ACQUIRED = 27,
  BO_CB_NEST_LOCK = 28,
  BO_CB_FLUSH = 29,
  BO_CB_CANCEL = 30,
  BO_CB_REDUCTION = 31,
  BO_CB_DISPATCH = 32
};

/* ompt_scope_endpoint_t */
enum { BO_SCOPE_BEGIN = 1, BO_SCOPE_END = 2, BO_SCOPE_BEGINEND = 3 };

/* ompt_set_result_t */
enum { BO_SET_ERROR = 0, BO_SET_NEVER = 1 };

/*
 * Enumerated parameters (ompt_thread_t, ompt_scope_endpoint_t, ...) are
 * declared as int: a C enum with these small values is passed as an int.
 */
typedef void (*bo_interface_fn_t)(void);
typedef bo_interface_fn_t (*bo_function_lookup_t)(const char *name);
typedef void (*bo_callback_t)(void);
typedef int (*bo_set_callback_t)(int event, bo_callback_t callback);

typedef int (*bo_initialize_t)(bo_function_lookup_t lookup,
                               int initial_device_num, bo_data_t *tool_data);
typedef void (*bo_finalize_t)(bo_data_t *tool_data);

typedef struct bo_start_tool_result_t {
  bo_initialize_t initialize;
  bo_finalize_t finalize;
  bo_data_t tool_data;
} bo_start_tool_result_t;

/* Callback signatures (OpenMP 5.1, section 4.5.2) */
typedef void (*bo_cb_thread_begin_t)(int thread_type, bo_data_t *thread_data);
typedef void (*bo_cb_thread_end_t)(bo_data_t *thread_data);
typedef void (*bo_cb_parallel_begin_t)(bo_data_t *encountering_task_data,
                                       const bo_frame_t *encountering_task_frame,
                                       bo_data_t *parallel_data,
                                       unsigned int requested_parallelism,
                                       int flags, const void *codeptr_ra);
typedef void (*bo_cb_parallel_end_t)(bo_data_t *parallel_data,
                                     bo_data_t *encountering_task_data,
                                     int flags, const void *codeptr_ra);
typedef void (*bo_cb_work_t)(int work_type, int endpoint,
                             bo_data_t *parallel_data, bo_data_t *task_data,
                             uint64_t count, const void *codeptr_ra);
typedef void (*bo_cb_dispatch_t)(bo_data_t *parallel_data,
                                 bo_data_t *task_data, int kind,
                                 bo_data_t instance);
typedef void (*bo_cb_task_create_t)(bo_data_t *encountering_task_data,
                                    const bo_frame_t *encountering_task_frame,
                                    bo_data_t *new_task_data, int flags,
                                    int has_dependences,
                                    const void *codeptr_ra);
typedef void (*bo_cb_task_schedule_t)(bo_data_t *prior_task_data,
                                      int prior_task_status,
                                      bo_data_t *next_task_data);
typedef void (*bo_cb_implicit_task_t)(int endpoint, bo_data_t *parallel_data,
                                      bo_data_t *task_data,
                                      unsigned int actual_parallelism,
                                      unsigned int index, int flags);
typedef void (*bo_cb_masked_t)(int endpoint, bo_data_t *parallel_data,
                               bo_data_t *task_data, const void *codeptr_ra);
/* also used for sync_region_wait and reduction */
typedef void (*bo_cb_sync_region_t)(int kind, int endpoint,
                                    bo_data_t *parallel_data,
                                    bo_data_t *task_data,
                                    const void *codeptr_ra);
/* also used for lock_init */
typedef void (*bo_cb_mutex_acquire_t)(int kind, unsigned int hint,
                                      unsigned int impl, bo_wait_id_t wait_id,
                                      const void *codeptr_ra);
/* mutex_acquired, mutex_released, lock_destroy */
typedef void (*bo_cb_mutex_t)(int kind, bo_wait_id_t wait_id,
                              const void *codeptr_ra);
typedef void (*bo_cb_nest_lock_t)(int endpoint, bo_wait_id_t wait_id,
                                  const void *codeptr_ra);
typedef void (*bo_cb_flush_t)(bo_data_t *thread_data, const void *codeptr_ra);
typedef void (*bo_cb_cancel_t)(bo_data_t *task_data, int flags,
                               const void *codeptr_ra);

#define BO_EXPORT __attribute__((visibility("default")))

#endif /* BENCH_OMPT_H */
