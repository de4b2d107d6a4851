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

#define OMPTPY_RECORD_VERSION 8

/*
 * Field use per event (event = OMPT callback number, see omptpy_ompt.h):
 *   parallel_begin  (teams too: flags has ompt_parallel_league) parallel_id,
 *                   task_id = encountering task, u32a = requested team size
 *                   (teams: number of teams), u32b = flags, u64a = stack id
 *                   (see below) in the low 32 bits; the encountering task's
 *                   frame (record version 5; 0 before), packed as a
 *                   sample's: u64b = exit frame, or the enter frame when
 *                   there is no exit frame; high 32 bits of u64a = exit frame
 *                   - enter frame (int32) when there are both (INT32_MIN: too
 *                   far apart, the enter frame is not recorded); kind =
 *                   frame bits
 *   parallel_end    parallel_id, task_id = encountering task, u32b = flags
 *   implicit_task   parallel_id (0 at end if the runtime passes none),
 *                   task_id, u32a = actual team size, u64a = thread number
 *                   (index), u32b = flags, u64b = place number << 32 |
 *                   processor id at begin (int32 each, with OMPTPY_PLACE_INFO)
 *   task_create     task_id = new task, u64a = encountering task,
 *                   u32b = flags, u32a = has_dependences (0 or 1) | stack id
 *                   << 1 (explicit tasks created outside every parallel
 *                   region, see below); the encountering
 *                   task's frame (see "Frames" below): u64b = exit frame,
 *                   parallel_id = enter frame (no parallel id at this event),
 *                   kind = frame bits
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
 *   control_tool    u64a = command, u64b = modifier, u32a/u32b = low/high
 *                   32 bits of the arg pointer, i.e. the little-endian
 *                   uint64 at u32a's offset (omp_control_tool, or
 *                   ompt_py.control: codeptr 0; record version 1: 0)
 *   error           kind = severity, u64a = message length (as the runtime
 *                   passed it), u64b = the message's id in the table of
 *                   strings that holds the region names (the first
 *                   OMPTPY_MESSAGE_MAX = 512 bytes of the text, up to a NUL;
 *                   0: no message, or the table was full, counted in the
 *                   meta's error_messages_unkept; record version 5, 0
 *                   before)
 *   device_initialize, device_finalize
 *                   u32a = device number
 *   device_load     u32a = device number, u64a = bytes, u64b = module id,
 *                   codeptr = host address of the loaded code
 *   target_emi      kind = target construct kind, endpoint, task_id =
 *                   encountering task, u64a = target region id, u64b =
 *                   target task id, u32a = device number, u32b = stack id
 *                   (at begin)
 *   target_data_op_emi
 *                   kind = data operation, endpoint, task_id = operation id,
 *                   u64a = bytes, u64b = target region id, u32a = source
 *                   device, u32b = destination device
 *                   (record version 6: followed by a `more`: u64a =
 *                   source address, u64b = destination address)
 *   target_submit_emi
 *                   endpoint, task_id = operation id, u64b = target region
 *                   id, u32a = requested number of teams
 *   target, target_data_op, target_submit (record version 6; registered
 *                   only where the runtime answers ompt_set_never for the
 *                   EMI event): as their EMI events; target: u64a = the
 *                   target_id the runtime passes, u64b = 0; data op:
 *                   endpoint 0, u64b = target_id, followed by a `more` as
 *                   above; submit: endpoint 0, task_id = host_op_id, u64b =
 *                   target_id
 *   more (102, record version 6): the fields its primary record had no room
 *                   for.  Written by the same thread right after its
 *                   primary in one reservation (never across two chunks:
 *                   the pair is kept or dropped whole, a dropped pair
 *                   counts 2), so in a thread's own record order it always
 *                   follows its primary immediately.  time and thread are
 *                   the primary's; kind = the primary's event number unless
 *                   the primary's entry says otherwise
 *   device (103, record version 6): one OMPT device trace record
 *                   (ompt_record_ompt_t) from a device buffer, followed by
 *                   a `more`.  time = host ticks when the tool consumed it;
 *                   kind = the record's type (8/33 target, 9/34 data op,
 *                   10/35 kernel); endpoint = a target record's endpoint (0
 *                   for others); u32a = device number; u32b = 0; u64a =
 *                   device begin time (the record's `time`, raw
 *                   ompt_device_time_t); u64b = device end time (data op,
 *                   kernel; 0 for target records); task_id = host_op_id
 *                   (data op, kernel) or the target record's task_id;
 *                   parallel_id = the record's target_id; codeptr =
 *                   codeptr_ra (0 where none).  Its `more`: task_id = the
 *                   record's thread_id; data op: kind = optype, u64a =
 *                   source address, u64b = destination address,
 *                   parallel_id = bytes, u32a = source device, u32b =
 *                   destination device; kernel: kind = 103, u32a =
 *                   requested teams, u32b = granted teams; target: kind =
 *                   target kind, u32a = the record's device_num, u64a =
 *                   target_id of the record's `record.target` part
 *   device_clock (104, record version 6): one (host, device) clock pair:
 *                   time = host ticks read right before, u64b = host ticks
 *                   read right after ompt_get_device_time (the pair's host
 *                   time is the midpoint, the gap bounds its error), u64a =
 *                   the device time, u32a = device number, codeptr =
 *                   ompt_translate_time(device, u64a) as IEEE double bits
 *                   (0 when the runtime offers none).  Taken when tracing
 *                   starts, at a buffer_complete (at most every 10 ms per
 *                   device) and at each flush and stop
 *   sample (100, ompt-py's own: OMPTPY_SAMPLE_HZ)
 *                   u32a = ompt_state_t in the low 16 bits, in the high 16
 *                   bits the timer periods the thread missed just before
 *                   (their expirations merged into this sample's signal
 *                   while the thread had no CPU; at most 0xFFFF; record
 *                   version 2 had 0 there), u64a = wait id, parallel_id and
 *                   task_id of the moment (as the thread's callbacks last
 *                   reported them: the sampler asks the runtime nothing),
 *                   codeptr = interrupted address; the running task's frame
 *                   as its callbacks kept it (none in a region-end barrier),
 *                   packed: u64b = exit frame, or the enter frame when
 *                   there is no exit frame; u32b = exit frame - enter frame
 *                   (int32) when there are both (INT32_MIN: too far apart,
 *                   the enter frame is not recorded); kind = frame bits.
 *                   (Record version 1 held the team size and thread number
 *                   in u64b and u32b: the region's implicit_task events
 *                   carry them.)
 *   thread_begin    kind = thread type, u64a = OS thread id, u32a = runtime
 *                   instance
 *   region (101, ompt-py's own: omptpy_region.h, ompt_py.region)
 *                   endpoint, u64a = name id (1 and up, 0 for an end without
 *                   a name; names in the meta JSON), codeptr = caller,
 *                   u64b = stack id (at begin)
 *   mpi (105, record version 7; ompt-py's own: the MPI interposition
 *                   library, csrc/mpi, and ompt_py.mpi): one MPI call, written
 *                   when it returns.  time = ticks when it was called, u64b =
 *                   ticks when it returned; endpoint = beginend; kind = the
 *                   call (OMPTPY_MPI_* below); u64a = bytes this rank sends
 *                   (receives, for recv and irecv; OMPTPY_MPI_BYTES_UNKNOWN:
 *                   not known); u32a = peer (point-to-point) or root
 *                   (rooted collectives) as int32, -1 where none; u32b =
 *                   the communicator's size; codeptr = caller
 *   tool_stall (106, record version 8; ompt-py's own): the thread stopped
 *                   recording the program to make room for the trace (the
 *                   in-place file route, csrc/tool/zerocopy.c: its region was
 *                   full and the next one not resident yet).  time = ticks
 *                   when it began, u64b = ticks when it ended; endpoint =
 *                   beginend; kind = why (OMPTPY_STALL_* below); u64a = bytes
 *                   this thread made resident (0 for a wait); u32a = the
 *                   number of the region it made room in (the first is 1)
 * Stack ids (record version 4; 0 in version 3): the interpreter call stack
 * (Python's) of the thread that started the construct, when it runs one and
 * capture is on (0: none); the stacks are in the trace's STACKS documents
 * (omptpy_stacks in tool/omptpy_api.h).
 * Frames (ompt_frame_t, OpenMP 5.2 19.4.4.29): stack addresses the runtime
 * gives for a task: exit frame, where the runtime called the task's user
 * code (none for the initial task and for a task not started); enter
 * frame, where the task's code called into the runtime (none while it runs
 * its own code).  Frame bits in kind: 0x01 exit frame present, 0x02 enter
 * frame present, bits 2-4 the exit frame's flags and bits 5-7 the enter
 * frame's, each as (flags & 1) | (flags >> 4 & 3) << 1 (application bit;
 * 1 cfa, 2 framepointer, 3 stackaddress).
 * Every record: time (raw clock ticks, see omptpy_clock_*), codeptr (return
 * address, 0 where the event has none or the runtime passed NULL), thread
 * (the tool's index of the OS thread, unique for the process), endpoint
 * (ompt_scope_endpoint_t, 0 where the event has none).  Ids are 1 and up: 0
 * is a NULL ompt_data_t the runtime passed (which fields an event has:
 * ompt_py/records.py, ID_FIELDS).
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

/* ompt-py's own events, numbered beyond OMPT's callbacks: state samples
 * (sampler), user-code region markers, and the device's (device.c). */
#define OMPTPY_EVENT_SAMPLE 100
#define OMPTPY_EVENT_REGION 101
/* Record version 6: the second record of a pair, device trace records and
 * device clock pairs (see above). */
#define OMPTPY_EVENT_MORE 102
#define OMPTPY_EVENT_DEVICE 103
#define OMPTPY_EVENT_DEVICE_CLOCK 104
/* Record version 7: an MPI call (see above). */
#define OMPTPY_EVENT_MPI 105
/* Record version 8: a stall of a writer making room for the trace (see above). */
#define OMPTPY_EVENT_TOOL_STALL 106

/* Why a tool_stall record's thread stalled (its kind; ompt_py/records.py
 * STALL_REASONS names them): it made the file's next region and made it
 * resident; the drainer had made it, the thread made the rest of it resident;
 * another thread (a writer, or the drainer's last step) was doing either, and
 * this one waited for it. */
enum { OMPTPY_STALL_REGION = 1, OMPTPY_STALL_POPULATE = 2, OMPTPY_STALL_WAIT = 3 };

/* The MPI calls of an mpi record's kind (ompt_py/records.py MPI_CALLS names
 * them): setup, barrier, collectives, point-to-point and its waits, and the
 * clock measurement against the reference rank that follows MPI_Init and
 * precedes MPI_Finalize. */
enum {
  OMPTPY_MPI_INIT = 1,
  OMPTPY_MPI_FINALIZE = 2,
  OMPTPY_MPI_BARRIER = 3,
  OMPTPY_MPI_BCAST = 4,
  OMPTPY_MPI_REDUCE = 5,
  OMPTPY_MPI_ALLREDUCE = 6,
  OMPTPY_MPI_GATHER = 7,
  OMPTPY_MPI_ALLGATHER = 8,
  OMPTPY_MPI_SCATTER = 9,
  OMPTPY_MPI_ALLTOALL = 10,
  OMPTPY_MPI_SEND = 11,
  OMPTPY_MPI_RECV = 12,
  OMPTPY_MPI_ISEND = 13,
  OMPTPY_MPI_IRECV = 14,
  OMPTPY_MPI_WAIT = 15,
  OMPTPY_MPI_WAITALL = 16,
  OMPTPY_MPI_SENDRECV = 17,
  OMPTPY_MPI_CLOCK_SYNC = 18
};
#define OMPTPY_MPI_BYTES_UNKNOWN UINT64_MAX

/* A native handler (ompt_py.native_handler): called on the OpenMP thread right
 * after the tool wrote `record`, without the GIL, concurrently on every thread
 * (`record->thread` tells which: per-thread slots or atomics in `state`). */
typedef void (*omptpy_native_fn)(const omptpy_record *record, void *state);

#ifdef __cplusplus
}
#endif

#endif /* OMPTPY_H */
