/*
 * Build-time check (clang only, compiled with -fsyntax-only): the values and
 * layouts in bench_ompt.h match clang's omp-tools.h.
 */
#include <omp-tools.h>
#include <stddef.h>

#include "bench_ompt.h"

#define SAME(a, b) _Static_assert((a) == (b), #a " != " #b)

SAME(BO_CB_THREAD_BEGIN, ompt_callback_thread_begin);
SAME(BO_CB_THREAD_END, ompt_callback_thread_end);
SAME(BO_CB_PARALLEL_BEGIN, ompt_callback_parallel_begin);
SAME(BO_CB_PARALLEL_END, ompt_callback_parallel_end);
SAME(BO_CB_TASK_CREATE, ompt_callback_task_create);
SAME(BO_CB_TASK_SCHEDULE, ompt_callback_task_schedule);
SAME(BO_CB_IMPLICIT_TASK, ompt_callback_implicit_task);
SAME(BO_CB_SYNC_REGION_WAIT, ompt_callback_sync_region_wait);
SAME(BO_CB_MUTEX_RELEASED, ompt_callback_mutex_released);
SAME(BO_CB_WORK, ompt_callback_work);
SAME(BO_CB_MASKED, ompt_callback_masked);
SAME(BO_CB_SYNC_REGION, ompt_callback_sync_region);
SAME(BO_CB_LOCK_INIT, ompt_callback_lock_init);
SAME(BO_CB_LOCK_DESTROY, ompt_callback_lock_destroy);
SAME(BO_CB_MUTEX_ACQUIRE, ompt_callback_mutex_acquire);
SAME(BO_CB_MUTEX_ACQUIRED, ompt_callback_mutex_acquired);
SAME(BO_CB_NEST_LOCK, ompt_callback_nest_lock);
SAME(BO_CB_FLUSH, ompt_callback_flush);
SAME(BO_CB_CANCEL, ompt_callback_cancel);
SAME(BO_CB_REDUCTION, ompt_callback_reduction);
SAME(BO_CB_DISPATCH, ompt_callback_dispatch);

SAME(BO_SCOPE_BEGIN, ompt_scope_begin);
SAME(BO_SCOPE_END, ompt_scope_end);
SAME(BO_SCOPE_BEGINEND, ompt_scope_beginend);
SAME(BO_SET_ERROR, ompt_set_error);
SAME(BO_SET_NEVER, ompt_set_never);

SAME(sizeof(bo_data_t), sizeof(ompt_data_t));
SAME(_Alignof(bo_data_t), _Alignof(ompt_data_t));
SAME(sizeof(bo_wait_id_t), sizeof(ompt_wait_id_t));
SAME(sizeof(bo_start_tool_result_t), sizeof(ompt_start_tool_result_t));
SAME(offsetof(bo_start_tool_result_t, initialize),
     offsetof(ompt_start_tool_result_t, initialize));
SAME(offsetof(bo_start_tool_result_t, finalize),
     offsetof(ompt_start_tool_result_t, finalize));
SAME(offsetof(bo_start_tool_result_t, tool_data),
     offsetof(ompt_start_tool_result_t, tool_data));

/* enum parameters are declared as int in bench_ompt.h */
SAME(sizeof(ompt_thread_t), sizeof(int));
SAME(sizeof(ompt_scope_endpoint_t), sizeof(int));
SAME(sizeof(ompt_work_t), sizeof(int));
SAME(sizeof(ompt_dispatch_t), sizeof(int));
SAME(sizeof(ompt_task_status_t), sizeof(int));
SAME(sizeof(ompt_sync_region_t), sizeof(int));
SAME(sizeof(ompt_mutex_t), sizeof(int));
SAME(sizeof(ompt_set_result_t), sizeof(int));
SAME(sizeof(ompt_callbacks_t), sizeof(int));
