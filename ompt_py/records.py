"""The record layout and the names of OMPT's enumerations: the vocabulary every
layer shares (base layer: imports only the C extension).

The numpy dtype is built from the offsets the C extension reports, and the
module refuses to load when they differ from what this file expects: a
record layout change must bump OMPTPY_RECORD_VERSION in csrc/include/omptpy.h.
Names are applied here, never in C: the categorical names of ``to_pandas()``
(``EVENT_CATEGORIES``, ``KIND_CATEGORIES``...) are made once here for every layer.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import pandas as pd

from . import _core

RECORD_VERSION = 8
RECORD_SIZE = 64

# (field, numpy type) in the order of struct omptpy_record.
RAW_FIELDS: list[tuple[str, str]] = [
    ("time", "<u8"),
    ("codeptr", "<u8"),
    ("parallel_id", "<u8"),
    ("task_id", "<u8"),
    ("u64a", "<u8"),
    ("u64b", "<u8"),
    ("thread", "<u4"),
    ("event", "<u2"),
    ("endpoint", "u1"),
    ("kind", "u1"),
    ("u32a", "<u4"),
    ("u32b", "<u4"),
]


def _dtype(time_name: str, time_type: str) -> np.dtype:
    names, formats, offsets = [], [], []
    offset = 0
    for name, fmt in RAW_FIELDS:
        names.append(time_name if name == "time" else name)
        formats.append(time_type if name == "time" else fmt)
        offsets.append(offset)
        offset += np.dtype(fmt).itemsize
    return np.dtype(
        {"names": names, "formats": formats, "offsets": offsets, "itemsize": RECORD_SIZE}
    )


#: Records as the tool writes them: `time` in raw clock ticks.
RAW_DTYPE = _dtype("time", "<u8")
#: `Trace.events`: the same bytes, time converted to nanoseconds from the trace start.
EVENT_DTYPE = _dtype("time_ns", "<i8")


def check_layout(layout: dict) -> None:
    """Raise ImportError when the compiled record layout differs from RAW_DTYPE."""
    expected = [
        (name, RAW_DTYPE.fields[name][1], RAW_DTYPE[name].itemsize) for name, _ in RAW_FIELDS
    ]
    actual = [tuple(f) for f in layout["fields"]]
    if (
        layout["version"] != RECORD_VERSION
        or layout["size"] != RECORD_SIZE
        or actual != expected
    ):
        raise ImportError(
            "ompt_py._core was built for another record layout "
            f"(version {layout['version']}, size {layout['size']}, fields {actual}); "
            f"this ompt_py expects version {RECORD_VERSION}. Reinstall the package "
            "(pip install --force-reinstall ompt-py) so both parts come from one build."
        )


#: OMPT callback numbers (ompt_callbacks_t) -> event names without `ompt_callback_`.
EVENTS: dict[int, str] = {
    1: "thread_begin",
    2: "thread_end",
    3: "parallel_begin",
    4: "parallel_end",
    5: "task_create",
    6: "task_schedule",
    7: "implicit_task",
    8: "target",
    9: "target_data_op",
    10: "target_submit",
    11: "control_tool",
    12: "device_initialize",
    13: "device_finalize",
    14: "device_load",
    15: "device_unload",
    16: "sync_region_wait",
    17: "mutex_released",
    18: "dependences",
    19: "task_dependence",
    20: "work",
    21: "masked",
    22: "target_map",
    23: "sync_region",
    24: "lock_init",
    25: "lock_destroy",
    26: "mutex_acquire",
    27: "mutex_acquired",
    28: "nest_lock",
    29: "flush",
    30: "cancel",
    31: "reduction",
    32: "dispatch",
    33: "target_emi",
    34: "target_data_op_emi",
    35: "target_submit_emi",
    36: "target_map_emi",
    37: "error",
    _core.EVENT_SAMPLE: "sample",  # ompt-py's own: a state sample (OMPTPY_SAMPLE_HZ)
    _core.EVENT_REGION: "region",  # ompt-py's own: a user-code region marker (ompt_py.region)
    102: "more",
    103: "device",
    104: "device_clock",
    _core.EVENT_MPI: "mpi",  # ompt-py's own: an MPI call (ompt-py run --mpi, ompt_py.mpi)
    # ompt-py's own: a thread stopped to make room for the trace (record version 8)
    _core.EVENT_TOOL_STALL: "tool_stall",
}

#: ompt_state_t (OpenMP 5.2, 19.4.4.27): what a sampled thread was doing (the
#: runtime's states; ompt-py's derived thread states are
#: ompt_py.analysis.states.THREAD_STATES).
OMPT_STATES: dict[int, str] = {
    0x000: "work_serial",
    0x001: "work_parallel",
    0x002: "work_reduction",
    0x010: "wait_barrier",
    0x011: "wait_barrier_implicit_parallel",
    0x012: "wait_barrier_implicit_workshare",
    0x013: "wait_barrier_implicit",
    0x014: "wait_barrier_explicit",
    0x015: "wait_barrier_implementation",
    0x016: "wait_barrier_teams",
    0x020: "wait_taskwait",
    0x021: "wait_taskgroup",
    0x040: "wait_mutex",
    0x041: "wait_lock",
    0x042: "wait_critical",
    0x043: "wait_atomic",
    0x044: "wait_ordered",
    0x080: "wait_target",
    0x081: "wait_target_map",
    0x082: "wait_target_update",
    0x100: "idle",
    0x101: "overhead",
    0x102: "undefined",
}
#: One vocabulary for sampled states across runtime versions, as NORMALISED is
#: for kinds: libomp 14 and 16 report a wait at the barrier that ends a
#: parallel region as `wait_barrier_implicit` and every other barrier wait
#: (explicit, end of a worksharing construct) as `wait_barrier`; libomp 19
#: tells them apart.  `Trace.samples()["state"]` holds these names,
#: `["state_raw"]` the runtime's own.
NORMALISED_STATES: dict[str, str] = {
    "wait_barrier_implicit_parallel": "wait_barrier_implicit",
    "wait_barrier_implicit_workshare": "wait_barrier",
    "wait_barrier_explicit": "wait_barrier",
    "wait_barrier_implementation": "wait_barrier",
    "wait_barrier_teams": "wait_barrier",
}
EVENT_CODES: dict[str, int] = {name: code for code, name in EVENTS.items()}

#: ompt_scope_endpoint_t, and the OMPT flag bits the analyses read (from the C headers).
SCOPE_BEGIN, SCOPE_END, SCOPE_BEGINEND = _core.SCOPE_BEGIN, _core.SCOPE_END, _core.SCOPE_BEGINEND
TASK_INITIAL = _core.TASK_INITIAL
TASK_TARGET = _core.TASK_TARGET  # a target task: a deferred (nowait) target construct's
PARALLEL_INVOKER_PROGRAM = _core.PARALLEL_INVOKER_PROGRAM
PARALLEL_INVOKER_RUNTIME = _core.PARALLEL_INVOKER_RUNTIME
PARALLEL_LEAGUE = _core.PARALLEL_LEAGUE
ENDPOINTS: dict[int, str] = {SCOPE_BEGIN: "begin", SCOPE_END: "end", SCOPE_BEGINEND: "beginend"}

THREAD_TYPES = {1: "initial", 2: "worker", 3: "other", 4: "unknown"}
SYNC_KINDS = {
    1: "barrier",
    2: "barrier_implicit",
    3: "barrier_explicit",
    4: "barrier_implementation",
    5: "taskwait",
    6: "taskgroup",
    7: "reduction",
    8: "barrier_implicit_workshare",
    9: "barrier_implicit_parallel",
    10: "barrier_teams",
}
WORK_TYPES = {
    1: "loop",
    2: "sections",
    3: "single_executor",
    4: "single_other",
    5: "workshare",
    6: "distribute",
    7: "taskloop",
    8: "scope",
    10: "loop_static",
    11: "loop_dynamic",
    12: "loop_guided",
    13: "loop_other",
}
MUTEX_KINDS = {
    1: "lock",
    2: "test_lock",
    3: "nest_lock",
    4: "test_nest_lock",
    5: "critical",
    6: "atomic",
    7: "ordered",
}
TASK_STATUS = {
    1: "complete",
    2: "yield",
    3: "cancel",
    4: "detach",
    5: "early_fulfill",
    6: "late_fulfill",
    7: "switch",
    8: "taskwait_complete",
}
DISPATCH_KINDS = {
    1: "iteration",
    2: "section",
    3: "ws_loop_chunk",
    4: "taskloop_chunk",
    5: "distribute_chunk",
}
SEVERITIES = {1: "warning", 2: "fatal"}
DEPENDENCE_TYPES = {
    1: "in",
    2: "out",
    3: "inout",
    4: "mutexinoutset",
    5: "source",
    6: "sink",
    7: "inoutset",
    34: "out_all_memory",
    35: "inout_all_memory",
}

#: The MPI calls of an ``mpi`` record's kind (csrc/include/omptpy.h OMPTPY_MPI_*).
MPI_CALLS = {_core.MPI_INIT: "init", _core.MPI_FINALIZE: "finalize",
             _core.MPI_BARRIER: "barrier", _core.MPI_BCAST: "bcast", _core.MPI_REDUCE: "reduce",
             _core.MPI_ALLREDUCE: "allreduce", _core.MPI_GATHER: "gather",
             _core.MPI_ALLGATHER: "allgather", _core.MPI_SCATTER: "scatter",
             _core.MPI_ALLTOALL: "alltoall", _core.MPI_SEND: "send", _core.MPI_RECV: "recv",
             _core.MPI_ISEND: "isend", _core.MPI_IRECV: "irecv", _core.MPI_WAIT: "wait",
             _core.MPI_WAITALL: "waitall", _core.MPI_SENDRECV: "sendrecv",
             _core.MPI_CLOCK_SYNC: "clock_sync"}
#: The few kinds of MPI call (``Trace.mpi_calls()["kind"]``), by call name.
MPI_CALL_KINDS = {
    "init": "setup", "finalize": "setup", "clock_sync": "setup", "barrier": "barrier",
    **{c: "collective" for c in ("bcast", "reduce", "allreduce", "gather", "allgather",
                                 "scatter", "alltoall")},
    **{c: "point_to_point" for c in ("send", "recv", "isend", "irecv", "sendrecv")},
    "wait": "wait", "waitall": "wait"}
#: Why a ``tool_stall`` record's thread stalled (its kind; csrc/include/omptpy.h
#: OMPTPY_STALL_*): it made the trace file's next region and made it resident; it
#: made the rest of a region the drainer had made resident; it waited for another
#: thread (a writer, or the drainer's last step) doing either.
STALL_REASONS = {_core.STALL_REGION: "region", _core.STALL_POPULATE: "populate",
                 _core.STALL_WAIT: "wait"}
#: An ``mpi`` record's bytes when they are not known (u64a).
MPI_BYTES_UNKNOWN = 2**64 - 1

TARGET_KINDS = {
    1: "target",
    2: "target_enter_data",
    3: "target_exit_data",
    4: "target_update",
    9: "target_nowait",
    10: "target_enter_data_nowait",
    11: "target_exit_data_nowait",
    12: "target_update_nowait",
}
TARGET_DATA_OPS = {
    1: "alloc",
    2: "transfer_to_device",
    3: "transfer_from_device",
    4: "delete",
    5: "associate",
    6: "disassociate",
    17: "alloc_async",
    18: "transfer_to_device_async",
    19: "transfer_from_device_async",
    20: "delete_async",
}

#: One vocabulary across runtime versions: libomp 14/16 report every loop as
#: `loop` and every implicit barrier as `barrier_implicit`, libomp 19 says
#: `loop_static`/`loop_dynamic`/... and `barrier_implicit_workshare`/
#: `barrier_implicit_parallel`.  `kind` holds these normalised names,
#: `kind_raw` the runtime's own.
NORMALISED: dict[str, dict[str, str]] = {
    "loop_static": {"work": "loop"},
    "loop_dynamic": {"work": "loop"},
    "loop_guided": {"work": "loop"},
    "loop_other": {"work": "loop"},
    "barrier_implicit_workshare": {s: "barrier_implicit" for s in (
        "sync_region", "sync_region_wait", "reduction")},
    "barrier_implicit_parallel": {s: "barrier_implicit" for s in (
        "sync_region", "sync_region_wait", "reduction")},
}

#: A worksharing loop's schedule by the runtime's name of its kind: libomp 19
#: tells it, older ones say ``loop`` for every schedule (``unknown``).
LOOP_SCHEDULES = {"loop_static": "static", "loop_dynamic": "dynamic",
                  "loop_guided": "guided", "loop_other": "other", "loop": "unknown"}


def normalised_kind(event: str, raw: str) -> str:
    """The ``kind`` (NORMALISED) of the runtime's name ``raw`` for a kind of ``event``
    (an event name of EVENTS): ``loop`` for libomp 19's ``loop_static`` of ``work``."""
    return NORMALISED.get(raw, {}).get(event, raw)


#: Which enumeration names the `kind` byte of each event.
KIND_NAMES: dict[str, dict[int, str]] = {
    "thread_begin": THREAD_TYPES,
    "thread_end": THREAD_TYPES,
    "task_schedule": TASK_STATUS,
    "work": WORK_TYPES,
    "dispatch": DISPATCH_KINDS,
    "sync_region": SYNC_KINDS,
    "sync_region_wait": SYNC_KINDS,
    "reduction": SYNC_KINDS,
    "mutex_acquire": MUTEX_KINDS,
    "mutex_acquired": MUTEX_KINDS,
    "mutex_released": MUTEX_KINDS,
    "lock_init": MUTEX_KINDS,
    "lock_destroy": MUTEX_KINDS,
    "error": SEVERITIES,
    "dependences": DEPENDENCE_TYPES,
    "target_emi": TARGET_KINDS,
    "target_data_op_emi": TARGET_DATA_OPS,
    "target": TARGET_KINDS,
    "target_data_op": TARGET_DATA_OPS,
    "mpi": MPI_CALLS,
    "tool_stall": STALL_REASONS,
}

#: The constructs, by the event that begins each (a mutex's wait by its acquire,
#: its hold by its acquired, an explicit task's run by the switch to it, a region
#: marker by its begin): the one vocabulary of ``Trace.constructs()``, a
#: profile's, the summary, ``ompt-py report`` and the plots.  Their kinds are
#: ``kind`` (NORMALISED, one vocabulary for every libomp version); ``raw=True``
#: and the ``kind_raw`` columns give the runtime's own names.
CONSTRUCTS = {"parallel_begin": "parallel region", "implicit_task": "implicit task",
              "work": "work", "sync_region": "sync", "masked": "masked",
              "mutex_acquire": "mutex wait", "mutex_acquired": "mutex hold",
              "task_schedule": "task", "region": "user region"}
#: Their kinds where no OMPT enumeration names them: a parallel region's by its
#: league flag, an implicit task's by its initial-task flag.
PARALLEL_KINDS = ("team", "league")
IMPLICIT_KINDS = ("implicit", "initial")

#: Named argument columns of Trace.to_pandas(): column -> (raw field, events using it).
#: A field's halves (little-endian): u64b_lo/_hi two C ints, u32a_lo/_hi two uint16.
ARGUMENT_COLUMNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "team_size": ("u32a", ("parallel_begin", "implicit_task")),
    "thread_num": ("u64a", ("implicit_task",)),
    "proc_id": ("u64b_lo", ("implicit_task",)),  # with OMPTPY_PLACE_INFO=on
    "place_num": ("u64b_hi", ("implicit_task",)),
    "flags": ("u32b", ("parallel_begin", "parallel_end", "implicit_task", "task_create", "cancel")),
    "has_dependences": ("u32a_bit0", ("task_create",)),
    "other_task_id": ("u64a", ("task_create", "task_schedule", "task_dependence")),
    "variable": ("u64a", ("dependences",)),
    "dependence_index": ("u32a", ("dependences",)),
    "dependence_count": ("u32b", ("dependences",)),
    "count": ("u64a", ("work",)),
    "instance": ("u64a", ("dispatch",)),
    "chunk_iterations": ("u64b", ("dispatch",)),
    "wait_id": (
        "u64a",
        (
            "mutex_acquire",
            "mutex_acquired",
            "mutex_released",
            "lock_init",
            "lock_destroy",
            "nest_lock",
            "sample",
        ),
    ),
    "hint": ("u32a", ("mutex_acquire", "lock_init")),
    "impl": ("u32b", ("mutex_acquire", "lock_init")),
    "os_tid": ("u64a", ("thread_begin", "thread_end")),
    "state": ("u32a_lo", ("sample",)),
    "missed": ("u32a_hi", ("sample",)),
    "runtime": ("u32a", ("thread_begin",)),
    "command": ("u64a", ("control_tool",)),
    "modifier": ("u64b", ("control_tool",)),
    "arg": ("u32ab", ("control_tool",)),  # the pointer, u32a low and u32b high
    "message_length": ("u64a", ("error",)),
    "device_num": ("u32a", ("device_initialize", "device_finalize", "device_load",
                            "target_emi", "target")),
    "target_id": ("u64a", ("target_emi", "target")),
    "target_region_id": ("u64b", ("target_data_op_emi", "target_submit_emi", "target_data_op",
                                  "target_submit")),
    "bytes": ("u64a", ("target_data_op_emi", "device_load", "target_data_op", "mpi",
                       "tool_stall")),
    "peer": ("u32a", ("mpi",)),  # point-to-point peer, or a collective's root; -1: none
    "comm_size": ("u32b", ("mpi",)),
    "src_device": ("u32a", ("target_data_op_emi", "target_data_op")),
    "dest_device": ("u32b", ("target_data_op_emi", "target_data_op")),
    "requested_num_teams": ("u32a", ("target_submit_emi", "target_submit")),
}


#: The error callback's message: the column of Trace.to_pandas() holding its text
#: (the record: its id in the process's table of strings, meta "region_names").
MESSAGE_COLUMN, MESSAGE_FIELD = "message", "u64b"

#: The id fields each event has (the others are <NA> in Trace.to_pandas(); in a
#: field an event has, 0 is a NULL the runtime passed, or none at that moment).
ID_FIELDS: dict[str, tuple[str, ...]] = {
    "parallel_id": ("parallel_begin", "parallel_end", "implicit_task", "work", "dispatch",
                    "sync_region", "sync_region_wait", "reduction", "masked", "sample"),
    "task_id": ("parallel_begin", "parallel_end", "implicit_task", "task_create",
                "task_schedule", "work", "dispatch", "sync_region", "sync_region_wait",
                "reduction", "masked", "cancel", "dependences", "task_dependence", "target_emi",
                "target_data_op_emi", "target_submit_emi", "target", "target_data_op",
                "target_submit", "sample"),
    "codeptr": ("parallel_begin", "parallel_end", "task_create", "work", "sync_region",
                "sync_region_wait", "reduction", "mutex_acquire", "mutex_acquired",
                "mutex_released", "lock_init", "lock_destroy", "nest_lock", "masked", "flush",
                "cancel", "control_tool", "error", "device_load", "target_emi",
                "target_data_op_emi", "target", "target_data_op", "sample", "region", "mpi"),
}

#: How Trace.to_pandas() shows a NULL the runtime passed where 0 is not it: the next
#: task of task_schedule (other_task_id) is -1, as LLVM's reference tool prints it.
NULL_NEXT_TASK = -1

#: The first record version that keeps a column for an event (before it the
#: column is <NA> for that event's records): column -> {event: version}.
#: FRAME_COLUMNS share the entry "frames".
SINCE: dict[str, dict[str, int]] = {
    "arg": {"control_tool": 2},
    MESSAGE_COLUMN: {"error": 5},
    "frames": {"task_create": 2, "sample": 2, "parallel_begin": 5},
}


#: Where a record keeps the id of its Python call stack (0: none; see "Stack ids"
#: in csrc/include/omptpy.h): event -> (field, right shift); the id is 32 bits.
PY_STACK_FIELDS = {"parallel_begin": ("u64a", 0), "task_create": ("u32a", 1),
                   "target_emi": ("u32b", 0), "target": ("u32b", 0), "region": ("u64b", 0)}


def of_events(codes: np.ndarray, events: Iterable[int]) -> np.ndarray:
    """Whether each of ``codes`` (event numbers: the records' field, or a copy) is one
    of ``events``: a comparison per event, where np.isin took 10 to 30 times as long
    on 10^7 records (it makes a table over the codes' range)."""
    wanted = np.zeros(len(codes), bool)
    for event in events:
        wanted |= codes == event
    return wanted


#: The numbers a record's event field can hold: census' and event_groups' tables
#: have an entry each.
EVENT_NUMBERS = 1 << 16
#: The most records of an event whose rows census keeps (a rare event's: the
#: tool's stalls, MPI calls, user regions, a few tasks), so that they are found
#: without a pass of their own; 32 KiB each at most.
RARE_ROWS = 1 << 12


class Census(NamedTuple):
    """What census finds in one pass over the records: the records of each event
    number (``counts``, int64, EVENT_NUMBERS entries), the distinct thread keys
    (``threads``: pid << 32 | thread, sorted) and the rows of each event number of
    at most RARE_ROWS records (``rare``: int64, in the records' order)."""

    counts: np.ndarray
    threads: np.ndarray
    rare: dict[int, np.ndarray]


def census(records: np.ndarray, pids: np.ndarray | None = None, pid: int = 0) -> Census:
    """The Census of the ``records`` (a contiguous array of them), counted in C in one
    pass; ``pids``: each record's process (None: ``pid`` for all)."""
    counts = np.empty(EVENT_NUMBERS, np.int64)
    keys, rare = _core.census(np.ascontiguousarray(records),
                              None if pids is None else np.ascontiguousarray(pids, np.int32),
                              pid, counts, RARE_ROWS)
    return Census(counts, np.frombuffer(keys, np.int64),
                  {number: np.frombuffer(rows, np.int64) for number, rows in rare})


def event_groups(records: np.ndarray, groups: Iterable[Iterable[int]],
                 counts: np.ndarray | None = None) -> list[np.ndarray]:
    """The rows (int64, in the records' order) of each group of event numbers, in one
    pass over the ``records`` (a contiguous array of them) whatever the groups, where
    ``of_events`` compares the whole field once per event; ``counts``: their
    census' counts, if made already (else counted first: a pass more)."""
    if counts is None:
        counts = census(records).counts
    table = np.zeros(EVENT_NUMBERS, np.uint8)
    outs = []
    for number, events in enumerate(groups, 1):
        codes = np.unique(np.fromiter(events, np.int64))
        if table[codes].any():
            raise ValueError("event_groups: an event in two groups")
        table[codes] = number
        outs.append(np.empty(int(counts[codes].sum()), np.int64))
    if any(len(rows) for rows in outs):
        _core.event_rows(np.ascontiguousarray(records), table, outs)
    return outs


def time_order(times: np.ndarray) -> np.ndarray:
    """The rows of records in time order (``times``: their time_ns), at equal times in
    the order of the records: the order of to_pandas()'s rows, of the pairings
    (analysis.pairing.pair_events) and of the CSV export.  Fast on the records' runs
    of one thread in time order: merged in C (_core.time_order), reading ``times``
    in place (a field of the records); other times are sorted by numpy."""
    out = np.empty(len(times), np.int64)
    if _core.time_order(np.asarray(times, np.int64), out):
        return out
    return np.argsort(np.ascontiguousarray(times), kind="stable")


def python_stack_ids(events: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """The Python stack id of each record (uint32; 0: none); ``rows``: of the
    records at those positions only, in that order."""
    codes = events["event"] if rows is None else events["event"][rows]
    out = np.zeros(len(codes), np.uint32)
    for name, (field, shift) in PY_STACK_FIELDS.items():
        at = np.flatnonzero(codes == EVENT_CODES[name])
        if len(at):
            out[at] = (events[field][at if rows is None else rows[at]] >> shift) & 0xFFFF_FFFF
    return out


# ---- offload: host target events, device records (their fields: csrc/include/omptpy.h) ----

#: The events whose records are followed by a ``more`` record (the fields the
#: primary had no room for), from this record version on.
MORE_SINCE: dict[str, int] = {"target_data_op_emi": 6, "target_data_op": 6, "device": 6}
#: A device record's type (its kind byte: the ompt_callbacks_t of the record,
#: EMI or not) -> what Trace.device_ops() calls it.
DEVICE_RECORD_TYPES: dict[int, str] = {8: "target", 33: "target", 9: "data_op", 34: "data_op",
                                       10: "kernel", 35: "kernel"}
#: ompt_target_t values of the ``nowait`` constructs: the construct's value | this bit.
TARGET_NOWAIT_BIT = 8
#: Data operations that move bytes, by direction (TARGET_DATA_OPS names).
TRANSFERS_TO_DEVICE = ("transfer_to_device", "transfer_to_device_async")
TRANSFERS_FROM_DEVICE = ("transfer_from_device", "transfer_from_device_async")


#: Argument columns holding a C int (device numbers: -1 is the host, or none).
SIGNED_COLUMNS = frozenset({"device_num", "src_device", "dest_device", "peer"})
#: Argument columns holding an int64 (task ids, NULL_NEXT_TASK for none).
INT64_COLUMNS = frozenset({"other_task_id"})


# ---- task frames (task_create, sample): see "Frames" in csrc/include/omptpy.h ----------------

#: Columns of Trace.to_pandas() holding task frames (decoded by _core.columns), and
#: the events that have them: the encountering task's (task_create, parallel_begin)
#: or the innermost task's (sample).
FRAME_COLUMNS = ("exit_frame", "enter_frame", "exit_frame_flags", "enter_frame_flags")
FRAME_EVENTS = tuple(SINCE["frames"])


check_layout(_core.record_layout())

# ---- profile mode's rows (PROFILE blocks: csrc/tool/omptpy_file.h) ---------------------

PROFILE_VERSION = 1
PROFILE_BUCKETS = 64
#: struct omptpy_profile_head: the start of a PROFILE block's payload.
PROFILE_HEAD_DTYPE = np.dtype([("version", "<u4"), ("row_size", "<u4"), ("slot", "<u4"),
                               ("nrows", "<u4"), ("overflow", "<u8"), ("reserved", "<u8", 5)])
#: struct omptpy_profile_row: one aggregate (times in clock ticks).
PROFILE_ROW_DTYPE = np.dtype([
    ("codeptr", "<u8"), ("wait_id", "<u8"), ("thread", "<u4"), ("event", "<u2"), ("kind", "u1"),
    ("table", "u1"), ("count", "<u8"), ("total", "<u8"), ("min", "<u8"), ("max", "<u8"),
    ("a", "<u8"), ("b", "<u8"), ("c", "<u8"), ("reserved", "<u8", 6),
    ("hist", "<u8", PROFILE_BUCKETS)])
#: The tables of a profile, by their number in a row's ``table``.
PROFILE_TABLES = {_core.PROFILE_CONSTRUCT: "constructs", _core.PROFILE_REGION: "regions_threads",
                  _core.PROFILE_LOCK: "locks", _core.PROFILE_TASK: "tasks"}
if (PROFILE_HEAD_DTYPE.itemsize, PROFILE_ROW_DTYPE.itemsize, PROFILE_VERSION,
        PROFILE_BUCKETS) != (_core.PROFILE_HEAD_SIZE, _core.PROFILE_ROW_SIZE,
                             _core.PROFILE_VERSION, _core.PROFILE_BUCKETS):
    raise ImportError("ompt_py._core was built for another profile row layout; reinstall the "
                      "package (pip install --force-reinstall ompt-py) so both parts come from "
                      "one build")


# ---- names as categoricals (to_pandas(), the exports, Parquet) ------------------------


class Names:
    """Integer codes -> a categorical whose categories are every name the code
    can have, in every trace: frames of several traces concatenate as categoricals."""

    def __init__(self, names: dict[int, str]) -> None:
        self.categories = sorted(set(names.values()))
        index = {name: i for i, name in enumerate(self.categories)}
        # One entry more than the codes need: every code beyond the table (a
        # newer runtime's enum value) reads it, clipped, and becomes <NA>.
        self.lookup = np.full(max(names) + 2, -1, dtype=np.int8)
        for code, name in names.items():
            self.lookup[code] = index[name]

    @functools.cached_property
    def dtype(self) -> pd.CategoricalDtype:
        return pd.CategoricalDtype(self.categories)

    def codes(self, codes: np.ndarray) -> np.ndarray:
        """The index of each code's name in ``categories`` (int8; -1: none).  ``codes``:
        non-negative integers (np.intp ones are indexed without a cast)."""
        return np.take(self.lookup, codes, mode="clip")

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """``codes``: as for codes()."""
        return self.from_codes(self.codes(codes))

    def from_codes(self, mapped: np.ndarray) -> pd.Categorical:
        """``mapped``: codes already looked up in ``lookup`` (-1: <NA>)."""
        return pd.Categorical.from_codes(mapped, dtype=self.dtype)


def kind_keys(codes: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """The keys of KIND_CATEGORIES and KIND_RAW_CATEGORIES: event number << 8 | kind byte."""
    keys = codes.astype(np.intp)
    keys <<= 8
    keys |= kinds
    return keys


#: to_pandas()'s ``event`` and ``endpoint``.
EVENT_CATEGORIES = Names(EVENTS)
ENDPOINT_CATEGORIES = Names(ENDPOINTS)
# `kind` is named by the enumeration of its event: keyed by event << 8 | kind.
_RAW_KINDS = {
    code << 8 | value: name
    for code, event in EVENTS.items()
    for value, name in KIND_NAMES.get(event, {}).items()
}
#: to_pandas()'s ``kind_raw`` (the runtime's names) and ``kind`` (one vocabulary
#: for every libomp version), by kind_keys().
KIND_RAW_CATEGORIES = Names(_RAW_KINDS)
KIND_CATEGORIES = Names({key: normalised_kind(EVENTS[key >> 8], name)
                         for key, name in _RAW_KINDS.items()})
#: Sampled states (ompt_state_t): the runtime's names and the normalised ones.
STATE_RAW_CATEGORIES = Names(OMPT_STATES)
STATE_CATEGORIES = Names({code: NORMALISED_STATES.get(name, name)
                          for code, name in OMPT_STATES.items()})
#: The work states of ompt_state_t (a thread running its own code or the runtime's).
WORK_STATES = tuple(code for code, name in OMPT_STATES.items() if name.startswith("work_"))


def tick_scale(first: dict, last: dict | None, tick_ns_estimate: float) -> float:
    """Nanoseconds per tick on the line through the clock anchors ``first`` and
    ``last`` (``{"ticks", "mono_ns"}``), or the tool's estimate when ``last`` is
    None or too close."""
    return _core.tick_scale(first["ticks"], first["mono_ns"],
                            last["ticks"] if last else None, last["mono_ns"] if last else None,
                            tick_ns_estimate)


#: The events whose u64b is a second time in ticks (converted as ``time`` is): a
#: device_clock pair's host time after the device's, an MPI call's return, a
#: tool stall's end.
SECOND_TIME_EVENTS = (EVENT_CODES["device_clock"], EVENT_CODES["mpi"],
                      EVENT_CODES["tool_stall"])


def shift_times(events: np.ndarray, delta: int) -> None:
    """Moves events (EVENT_DTYPE) by ``delta`` ns, in place: every time_ns and the
    second time of SECOND_TIME_EVENTS (a trace's origin changed)."""
    events["time_ns"] += delta
    second = np.flatnonzero(of_events(events["event"], SECOND_TIME_EVENTS))
    events["u64b"][second] = (events["u64b"][second].view(np.int64) + delta).view(np.uint64)


def to_events(records: np.ndarray, first: dict, last: dict | None, tick_ns_estimate: float,
              origin_ns: int) -> np.ndarray:
    """Raw records (RAW_DTYPE) -> events (EVENT_DTYPE), in place: ticks become
    nanoseconds from ``origin_ns`` on the line through the clock anchors
    ``first`` and ``last`` (``{"ticks", "mono_ns"}``; the tool's estimate of the
    tick's length when ``last`` is None or too close): every record's time, and
    the second time of SECOND_TIME_EVENTS (u64b: int64 nanoseconds in the
    events, as time_ns)."""
    scale = tick_scale(first, last, tick_ns_estimate)
    _core.ticks_to_ns(records, first["ticks"], first["mono_ns"], scale, origin_ns)
    # A second time (u64b) is in ticks too: on the same line.
    pairs = np.flatnonzero(of_events(records["event"], SECOND_TIME_EVENTS))
    if len(pairs):
        after = records[pairs]
        after["time"] = after["u64b"]
        _core.ticks_to_ns(after, first["ticks"], first["mono_ns"], scale, origin_ns)
        records["u64b"][pairs] = after["time"]
    return records.view(EVENT_DTYPE)
