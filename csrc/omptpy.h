/*
 * ompt-py's public C interface: the trace record and the tool's controls.
 *
 * One record is written per OMPT event.  The layout is defined here once;
 * ompt_py/_records.py builds the numpy dtype from the offsets that the
 * extension module reports (omptpy_record_layout) and refuses to load when
 * they differ.  Bump OMPTPY_RECORD_VERSION on any change to the struct or to
 * the meaning of a field.
 */
#ifndef OMPTPY_H
#define OMPTPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OMPTPY_RECORD_VERSION 1

/*
 * Field use per event (event = OMPT callback number, see omptpy_ompt.h):
 *   parallel_begin  parallel_id, task_id = encountering task, u32a = requested
 *                   team size, u32b = flags
 *   parallel_end    parallel_id, task_id = encountering task, u32b = flags
 *   implicit_task   parallel_id (0 at end if the runtime passes none),
 *                   task_id, u32a = actual team size, u64a = thread number
 *                   (index), u32b = flags, u64b = place number << 32 |
 *                   processor id at begin (int32 each, with OMPTPY_PLACE_INFO)
 *   task_create     task_id = new task, u64a = encountering task,
 *                   u32b = flags, u32a = has_dependences
 *   task_schedule   task_id = prior task, u64a = next task, kind = status
 *   work            parallel_id, task_id, kind = work type, u64a = count
 *   dispatch        parallel_id, task_id, kind = dispatch kind,
 *                   u64a = instance (iteration, section codeptr, or chunk
 *                   start), u64b = chunk iterations
 *   sync_region(_wait), reduction
 *                   parallel_id, task_id, kind = sync region kind
 *   masked          parallel_id, task_id
 *   mutex_acquire, lock_init
 *                   kind = mutex kind, u64a = wait id, u32a = hint,
 *                   u32b = implementation
 *   mutex_acquired, mutex_released, lock_destroy
 *                   kind = mutex kind, u64a = wait id
 *   nest_lock       u64a = wait id
 *   cancel          task_id, u32b = flags
 *   dependences     one record per dependence of a task: task_id, u64a =
 *                   variable address, kind = dependence type, u32a = index in
 *                   the list, u32b = length of the list
 *   task_dependence task_id = source task, u64a = sink task
 *   control_tool    u64a = command, u64b = modifier
 *   error           kind = severity, u64a = message length
 *   device_initialize, device_finalize
 *                   u32a = device number
 *   device_load     u32a = device number, u64a = bytes, u64b = module id,
 *                   codeptr = host address of the loaded code
 *   target_emi      kind = target construct kind, endpoint, task_id =
 *                   encountering task, u64a = target region id, u64b =
 *                   target task id, u32a = device number
 *   target_data_op_emi
 *                   kind = data operation, endpoint, task_id = operation id,
 *                   u64a = bytes, u64b = target region id, u32a = source
 *                   device, u32b = destination device
 *   target_submit_emi
 *                   endpoint, task_id = operation id, u64b = target region
 *                   id, u32a = requested number of teams
 *   sample (100, ompt-py's own: OMPTPY_SAMPLE_HZ)
 *                   u32a = ompt_state_t, u64a = wait id, parallel_id and
 *                   task_id of the moment, codeptr = interrupted address,
 *                   u64b = team size, u32b = thread number
 *   thread_begin    kind = thread type, u64a = OS thread id, u32a = runtime
 *                   instance
 * Every record: time (raw clock ticks, see omptpy_clock_*), codeptr (return
 * address, 0 where the event has none), thread (the tool's index of the OS
 * thread, unique for the process), endpoint (ompt_scope_endpoint_t, 0 where
 * the event has none).
 */
typedef struct omptpy_record {
  uint64_t time;
  uint64_t codeptr;
  uint64_t parallel_id;
  uint64_t task_id;
  uint64_t u64a;
  uint64_t u64b;
  uint32_t thread;
  uint16_t event;
  uint8_t endpoint;
  uint8_t kind;
  uint32_t u32a;
  uint32_t u32b;
} omptpy_record;

_Static_assert(sizeof(omptpy_record) == 64, "a record is one cache line");

#ifdef __cplusplus
}
#endif

#endif /* OMPTPY_H */
