"""The columns of every public table and the one dtype of each, in one place.

``TABLES`` names each table as it is asked for (``"imbalance(source)"``: a
Trace's ``imbalance(by="source")``; ``"summary.locks"``: a Summary's ``locks``;
a ``"Profile."`` or ``"Dataset."`` entry where a Profile's or a Dataset's
table has other columns than a Trace's; ``"arrivals"`` and ``"task_sites"``,
what the analyses exchange) and lists its columns in order with their dtypes; ``conform(frame,
name)`` casts a frame to them, and gives an empty table every column, so that a
table has the same dtypes on every input: a full trace, an empty one, a
profile, a dataset.  docs/tables.md says what the dtypes promise.

The choices: a value that can be missing in some input is of a nullable dtype
(``Int64``, ``UInt64``, ``Int32``: <NA>), one that never can of a plain one;
counts are integers; times are integer nanoseconds (``*_ns``), never floats;
``pid`` is ``int32`` in every table (``Int32`` where it can be missing); text
is ``units.TEXT``; the runtime's vocabularies (``construct``, ``kind``,
``state``, ...) are categorical; a task's lists of threads and dependences are
objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..records import MPI_CALL_KINDS
from ..units import TEXT

#: A categorical column (its categories: the values the table holds).
CATEGORY = "category"
#: A column of Python lists.
LIST = "object"

Dtype = object  # a numpy or pandas dtype, its name, or CATEGORY


@dataclass(frozen=True)
class Table:
    """A table's columns in order, each with its dtype; ``optional``: the columns
    some inputs give and others not (said where the table is made);
    ``others``: the dtype of columns named by the data (state_breakdown's
    states), None when the table has no such columns."""

    columns: dict[str, Dtype]
    optional: frozenset[str] = field(default_factory=frozenset)
    others: Dtype | None = None


def _pick(table: Table, *names: str, optional: tuple[str, ...] = ()) -> Table:
    """A table of ``names`` of ``table``'s columns (with their dtypes), in that order."""
    return Table({n: table.columns[n] for n in names}, frozenset(optional))


def _without(table: Table, *names: str) -> Table:
    """``table`` without the columns ``names``."""
    return Table({n: d for n, d in table.columns.items() if n not in names},
                 table.optional - set(names), table.others)


_SOURCE = {"function": TEXT, "name": TEXT, "location": TEXT}
_PYTHON = {"py_stack": "Int64", "py_inherited": "bool", "py_location": TEXT,
           "native_callers": TEXT}
_STATES = {"busy_ns": "int64", "barrier_wait_ns": "int64", "sync_wait_ns": "int64",
           "lock_wait_ns": "int64", "tool_stall_ns": "int64", "idle_ns": "int64"}
_STATS = {"count": "int64", "total_ns": "Int64", "mean_ns": "Int64", "p50_ns": "Int64",
          "p95_ns": "Int64", "max_ns": "Int64"}
_BY_PLACE = {"regions": "int64", "threads": "Int64", "duration_ns": "int64",
             "imbalance": "float64", "imbalance_max": "float64", "lost_ns": "int64",
             "busy_ns": "int64", "fork_join_ns": "int64", "barrier_wait_share": "float64",
             "wait_share": "float64", "fork_join_share": "float64", "schedule": TEXT}
_LOCK_STATS = {"acquisitions": "int64", "threads": "int64", "wait_total_ns": "int64",
               "wait_mean_ns": "Int64", "wait_p95_ns": "Int64", "wait_max_ns": "Int64",
               "hold_total_ns": "int64", "hold_mean_ns": "Int64", "hold_p50_ns": "Int64",
               "hold_max_ns": "Int64", "top_holder": "uint32", "top_holder_share": "float64"}
_LOCK = {"pid": "int32", "kind": TEXT, "wait_id": "UInt64"}
#: The MPI kinds of ranks()' columns (``mpi_KIND_ns``; records.MPI_CALL_KINDS), setup
#: last: ``mpi_ns`` is the sum of the others (setup: MPI_Init, MPI_Finalize and
#: ompt-py's clock measurement).
MPI_KINDS = (*sorted(set(MPI_CALL_KINDS.values()) - {"setup"}), "setup")
#: ranks()' MPI columns: there when a process made MPI calls.
_MPI = ("mpi_ns", *(f"mpi_{k}_ns" for k in MPI_KINDS))

_BREAKDOWN = Table({"samples": "int64", "periods": "int64"}, others="float64")
_CONSTRUCTS = Table({"construct": CATEGORY, "kind": CATEGORY, **_STATS})
_CONSTRUCTS_SOURCE = Table({"construct": CATEGORY, "kind": CATEGORY, "pid": "int32",
                            "location": TEXT, "function": TEXT, "name": TEXT, **_STATS})
_CONSTRUCTS_PYTHON = Table({"pid": "int32", "py_location": TEXT, "py_time_ns": "Int64",
                            "construct": CATEGORY, "kind": CATEGORY, "location": TEXT,
                            "function": TEXT, "name": TEXT, **_STATS})
_IMBALANCE_SOURCE = Table({"pid": "int32", "location": TEXT, "function": TEXT, **_BY_PLACE})
_IMBALANCE_PYTHON = Table({"pid": "int32", "py_location": TEXT, "location": TEXT,
                           "function": TEXT, **_BY_PLACE})
_TASK_BINS = Table({"lo_ns": "int64", "hi_ns": "int64", "label": TEXT, "tasks": "int64",
                    "task_share": "float64", "busy_ns": "int64", "time_share": "float64"})
_LOCKS = Table({**_LOCK, **_LOCK_STATS, "codeptr": "UInt64", "function": TEXT,
                "location": TEXT, "py_location": TEXT})
_LOCKS_PYTHON = Table({"pid": "int32", "py_location": TEXT, "kind": TEXT,
                       "wait_id": "UInt64", **_LOCK_STATS, "codeptr": "UInt64",
                       "function": TEXT, "location": TEXT})
_ADVICE = Table({"rule": TEXT, "pid": "int32", "py_location": TEXT, "location": TEXT,
                 "stake_ns": "int64", "finding": TEXT, "advice": TEXT})
_THREAD_STATES = Table({"pid": "int32", "thread": "uint32", **_STATES, "busy_share": "float64"})
_RANKS = Table({"rank": "Int64", "pid": "int32", "host": TEXT, "local_rank": "Int64",
                "threads": "int64", "begin_ns": "Int64", "end_ns": "Int64", "span_ns": "Int64",
                "parallel_ns": "int64", "parallel_share": "Float64", "busy_ns": "int64",
                "barrier_wait_ns": "int64", "sync_wait_ns": "int64", "lock_wait_ns": "int64",
                "waiting_ns": "int64", "busy_share": "float64", "regions": "int64",
                "imbalance": "float64", "omp_lost_ns": "int64", **dict.fromkeys(_MPI, "Int64")},
               frozenset(_MPI))
_PHASES = Table({"phase": "int64", "call": TEXT, "calls_match": "bool", "ranks": "int64",
                 "begin_ns": "int64", "end_ns": "Int64", "first_arrival_ns": "int64",
                 "last_arrival_ns": "int64", "late_rank": "Int64", "late_pid": "Int32",
                 "lost_ns": "int64", "wait_max_ns": "int64"})
_REGIONS = Table({"py_location": TEXT, "location": TEXT, "regions": "int64", "threads": "Int64",
                  "duration_ns": "int64", "mean_ns": "Int64", "imbalance": "float64",
                  "lost_ns": "int64", "barrier_wait_share": "float64",
                  "fork_join_share": "float64", "schedule": TEXT},
                 frozenset({"py_location", "schedule"}))
_SUMMARY_RANKS = Table({**_pick(_RANKS, "rank", "pid", "host", "threads", "span_ns",
                                "parallel_share", "busy_share", "imbalance", "omp_lost_ns",
                                "mpi_ns").columns,
                        "late": "Int64", "caused_ns": "Int64", "waited_ns": "Int64"},
                       frozenset({"mpi_ns"}))
_PROFILE_LOCKS = _without(_LOCKS, "hold_p50_ns", "py_location")
_LOCK_SUMMARY = ("kind", "py_location", "location", "acquisitions", "threads", "wait_total_ns",
                 "wait_p95_ns", "hold_total_ns", "hold_mean_ns", "top_holder",
                 "top_holder_share")

TABLES: dict[str, Table] = {
    # ---- a Trace's tables of construct instances (analysis.tables) ----
    "parallel_regions": Table({
        "pid": "int32", "parallel_id": "UInt64", "parent_id": "UInt64", "level": "int64",
        "begin_ns": "int64", "end_ns": "int64", "duration_ns": "int64",
        "requested_team_size": "UInt32", "team_size": "uint32", "invoker": TEXT,
        "league": "bool", "flags": "UInt32", "codeptr": "UInt64",
        "encountering_thread": "uint32", "encountering_task_id": "UInt64", **_PYTHON,
        **_SOURCE}),
    "implicit_tasks": Table({
        "begin_ns": "int64", "pid": "int32", "task_id": "UInt64", "thread": "uint32",
        "parallel_id": "UInt64", "team_size": "UInt32", "thread_num": "UInt32",
        "flags": "UInt32", "end_ns": "int64", "duration_ns": "int64"}),
    "tasks": Table({
        "pid": "int32", "task_id": "UInt64", "parent_id": "UInt64", "creator_thread": "uint32",
        "created_ns": "int64", "flags": "UInt32", "has_dependences": "UInt32",
        "codeptr": "UInt64", "first_start_ns": "Int64", "end_ns": "Int64", "run_ns": "Int64",
        "pieces": "Int64", "threads": LIST, "completed_ns": "Int64", "dependences": LIST,
        **_PYTHON}),
    "work": Table({
        "begin_ns": "int64", "pid": "int32", "thread": "uint32", "kind_raw": CATEGORY,
        "kind": CATEGORY, "parallel_id": "UInt64", "codeptr": "UInt64", "count": "UInt64",
        "end_ns": "int64", "duration_ns": "int64", **_SOURCE}),
    "sync": Table({
        "begin_ns": "int64", "pid": "int32", "thread": "uint32", "kind_raw": CATEGORY,
        "kind": CATEGORY, "parallel_id": "UInt64", "task_id": "UInt64", "codeptr": "UInt64",
        "end_ns": "int64", "duration_ns": "int64", "wait_ns": "int64"}),
    "mutex": Table({
        "acquire_ns": "Int64", "pid": "int32", "thread": "uint32", "kind": CATEGORY,
        "wait_id": "UInt64", "codeptr": "UInt64", "acquired_ns": "int64", "wait_ns": "Int64",
        "released_ns": "Int64", "hold_ns": "Int64"}),
    "task_graph": Table({"pid": "int32", "source_id": "UInt64", "sink_id": "UInt64",
                         "time_ns": "int64"}),
    "user_regions": Table({
        "pid": "int32", "thread": "uint32", "id": "int64", "name": TEXT, "level": "int64",
        "parent_id": "Int64", "parent": TEXT, "begin_ns": "int64", "end_ns": "int64",
        "duration_ns": "int64", "codeptr": "uint64", "py_stack": "Int64", "py_location": TEXT,
        "py_inherited": "bool", "native_callers": TEXT}),
    "mpi_calls": Table({
        "pid": "int32", "rank": "Int32", "thread": "uint32", "call": CATEGORY, "kind": CATEGORY,
        "begin_ns": "int64", "end_ns": "int64", "duration_ns": "int64", "bytes": "Int64",
        "peer": "Int32", "comm_size": "Int64", "codeptr": "uint64"}),
    "python_stacks": Table({
        "pid": "int32", "stack": "int64", "level": "int64", "file": TEXT, "line": "int64",
        "function": TEXT, "first_line": "int64", "user": "bool", "truncated": "bool",
        "location": TEXT, "native": "bool", "interpreter": "bool"}),
    "symbolize": Table({
        "pid": "int32", "codeptr": "uint64", "module": TEXT, "offset": "UInt64",
        "function": TEXT, "name": TEXT, "file": TEXT, "line": "Int64", "location": TEXT,
        "how": TEXT}),
    # ---- samples, offload ----
    "samples": Table({
        "time_ns": "int64", "pid": "int32", "thread": "uint32", "state": CATEGORY,
        "state_raw": CATEGORY, "missed": "UInt16", "wait_id": "UInt64",
        "parallel_id": "UInt64", "task_id": "UInt64", "codeptr": "UInt64",
        "exit_frame": "UInt64", "enter_frame": "UInt64", "where": CATEGORY}),
    "state_breakdown": _BREAKDOWN,
    "state_breakdown(region)": _BREAKDOWN,
    "target_regions": Table({
        "pid": "int32", "thread": "uint32", "target_id": "uint64", "kind": CATEGORY,
        "nowait": "bool", "device": "int64", "begin_ns": "int64", "end_ns": "Int64",
        "duration_ns": "Int64", "task_id": "uint64", "target_task_id": "uint64",
        "codeptr": "uint64", **_PYTHON, **_SOURCE}),
    "data_ops": Table({
        "pid": "int32", "thread": "uint32", "host_op_id": "uint64", "kind": CATEGORY,
        "bytes": "uint64", "src_device": "int64", "dest_device": "int64",
        "src_addr": "UInt64", "dest_addr": "UInt64", "begin_ns": "int64", "end_ns": "Int64",
        "duration_ns": "Int64", "bandwidth": "float64", "target_id": "uint64",
        "target_region": "Int64", "codeptr": "uint64"}),
    "kernels": Table({
        "pid": "int32", "thread": "uint32", "host_op_id": "uint64", "device": "Int64",
        "requested_teams": "int64", "granted_teams": "Int64", "begin_ns": "int64",
        "end_ns": "Int64", "duration_ns": "Int64", "target_id": "uint64",
        "target_region": "Int64"}),
    "device_ops": Table({
        "pid": "int32", "device": "int64", "type": CATEGORY, "record_type": "int64",
        "begin_ns": "Int64", "end_ns": "Int64", "device_begin": "uint64",
        "device_end": "UInt64", "bad_time": "bool", "translated_begin_s": "float64",
        "translated_end_s": "float64", "consumed_ns": "int64", "host_op_id": "uint64",
        "data_op": "Int64", "kernel": "Int64", "target_id": "uint64",
        "target_region": "Int64", "codeptr": "uint64", "record_thread": "UInt64",
        "op": CATEGORY, "bytes": "UInt64", "src_device": "Int64", "dest_device": "Int64",
        "src_addr": "UInt64", "dest_addr": "UInt64", "requested_teams": "Int64",
        "granted_teams": "Int64"}),
    # ---- ranks ----
    "ranks": _RANKS,
    # what each process gives rank_imbalance (ranks.arrivals; a dataset's partitions)
    "arrivals": Table({
        "pid": "int32", "rank": "Int64", "source": TEXT, "call": TEXT, "n": "int64",
        "begin_ns": "int64", "end_ns": "Int64", "since_ns": "Int64"}),
    "rank_imbalance": _PHASES,
    "rank_imbalance(rank)": Table({
        "rank": "Int64", "pid": "int32", "phases": "int64", "late": "int64",
        "late_share": "float64", "caused_ns": "int64", "waited_ns": "int64"}),
    "rank_imbalance(arrival)": Table({
        "phase": "int64", "rank": "Int64", "pid": "int32", "call": TEXT, "begin_ns": "int64",
        "end_ns": "Int64", "since_ns": "int64", "wait_ns": "int64", "late": "bool"}),
    # ---- answers (analysis.metrics, .states, .advice) ----
    "constructs": _CONSTRUCTS,
    "constructs(source)": _CONSTRUCTS_SOURCE,
    "constructs(python)": _CONSTRUCTS_PYTHON,
    "imbalance": Table({
        "pid": "int32", "parallel_id": "UInt64", "begin_ns": "int64", "duration_ns": "int64",
        "requested_team_size": "UInt32", "codeptr": "UInt64", "complete": "bool",
        "function": TEXT, "location": TEXT, "py_stack": "Int64", "py_location": TEXT,
        "py_inherited": "bool", "native_callers": TEXT, "name": TEXT, "threads": "Int64",
        "busy_mean_ns": "Int64", "busy_min_ns": "Int64", "busy_max_ns": "Int64",
        "barrier_wait_ns": "Int64", "wait_ns": "Int64", "imbalance": "float64",
        "lost_ns": "Int64", "barrier_wait_share": "float64", "wait_share": "float64",
        "fork_join_ns": "Int64", "schedule": TEXT}),
    "imbalance(per_thread)": Table({
        "pid": "int32", "parallel_id": "UInt64", "thread": "uint32", "thread_num": "UInt32",
        "begin_ns": "int64", "end_ns": "int64", "duration_ns": "int64", "complete": "bool",
        **_STATES, "busy_share": "float64", "barrier_wait_share": "float64"}),
    "imbalance(source)": _IMBALANCE_SOURCE,
    "imbalance(python)": _IMBALANCE_PYTHON,
    "task_granularity": _TASK_BINS,
    # explicit tasks per creation site (metrics.task_sites: for the advice)
    "task_sites": Table({
        "pid": "int32", "py_location": TEXT, "location": TEXT, "function": TEXT,
        "tasks": "int64", "ran": "int64", "busy_ns": "int64", "median_busy_ns": "Int64",
        "create_ns": "Int64", "creation_overhead_share": "float64"},
        frozenset({"py_location"})),
    "lock_contention": _LOCKS,
    "lock_contention(source)": _LOCKS,
    "lock_contention(python)": _LOCKS_PYTHON,
    "advice": _ADVICE,
    "utilisation": Table({"pid": "int32", "thread": "uint32", "begin_ns": "int64",
                          "end_ns": "int64", **_STATES}),
    "thread_states": _THREAD_STATES,
    "tool_stalls": Table({
        "pid": "int32", "thread": "uint32", "begin_ns": "int64", "end_ns": "int64",
        "duration_ns": "int64", "reason": CATEGORY, "bytes": "int64", "region": "int64"}),
    # ---- a Summary's tables (py_location: there when the trace has Python stacks) ----
    "summary.constructs": _CONSTRUCTS,
    "summary.sources": _without(_CONSTRUCTS_SOURCE, "pid"),
    "summary.threads": _THREAD_STATES,
    "summary.regions": _REGIONS,
    "summary.tasks": _without(_TASK_BINS, "lo_ns", "hi_ns"),
    "summary.locks": _pick(_LOCKS, *_LOCK_SUMMARY),
    "summary.python": _pick(_CONSTRUCTS_PYTHON, "pid", "py_location", "py_time_ns",
                            "construct", "kind", "location", "count", "total_ns", "mean_ns",
                            "max_ns"),
    "summary.offload": Table({
        "device": "int64", "target_regions": "int64", "target_ns": "int64",
        "blocked_ns": "int64", "bytes_to_device": "int64", "bytes_from_device": "int64",
        "transfers": "int64", "transfer_ns": "int64", "bandwidth": "float64",
        "kernels": "int64", "kernel_ns": "int64", "device_kernel_ns": "Int64",
        "device_transfer_ns": "Int64"}),
    "summary.advice": _ADVICE,
    "summary.ranks": _SUMMARY_RANKS,
    "summary.phases": _pick(_PHASES, "phase", "call", "calls_match", "ranks", "begin_ns",
                            "late_rank", "late_pid", "lost_ns", "wait_max_ns",
                            optional=("calls_match",)),
    # ---- a Profile's tables where they differ from a Trace's (analysis.profile) ----
    "Profile.imbalance": _without(_IMBALANCE_SOURCE, "imbalance_max", "schedule"),
    "Profile.imbalance(per_thread)": Table({
        "pid": "int32", "location": TEXT, "thread": "uint32", "function": TEXT,
        "implicit_tasks": "int64", "duration_ns": "int64", "busy_ns": "int64",
        "barrier_wait_ns": "int64", "sync_wait_ns": "int64", "lock_wait_ns": "int64",
        "busy_share": "float64", "barrier_wait_share": "float64"}),
    "Profile.task_granularity": _without(_TASK_BINS, "busy_ns", "time_share"),
    "Profile.lock_contention": _PROFILE_LOCKS,
    "Profile.lock_contention(source)": _PROFILE_LOCKS,
    "Profile.summary.threads": _without(_THREAD_STATES, "tool_stall_ns", "idle_ns"),
    "Profile.summary.tasks": _without(_TASK_BINS, "lo_ns", "hi_ns", "busy_ns", "time_share"),
    "Profile.summary.locks": _pick(_LOCKS, *(c for c in _LOCK_SUMMARY if c != "py_location")),
    # ---- a Dataset's, where they differ (analysis.dataset: imbalance by source) ----
    "Dataset.imbalance": _IMBALANCE_SOURCE,
}


def has_dtype(dtype: object, wanted: Dtype) -> bool:
    """Whether a column of ``dtype`` has the dtype ``wanted`` (TABLES: CATEGORY is any
    categorical dtype)."""
    if wanted == CATEGORY:
        return isinstance(dtype, pd.CategoricalDtype)
    return dtype == wanted


def _cast(values: pd.Series, wanted: Dtype) -> pd.Series:
    """``values`` as ``wanted``; floats made integers are rounded (a mean time).  A
    column of a plain integer dtype that holds a missing value after all (an input
    no stored trace has shown: tests/analysis/test_columns.py checks those) is
    given the nullable dtype of the same width rather than an error."""
    if wanted != CATEGORY and wanted != LIST and pd.api.types.is_integer_dtype(
            pd.api.types.pandas_dtype(wanted)):
        if pd.api.types.is_float_dtype(values.dtype):
            values = values.astype("Float64").round()
        elif values.dtype == object:
            values = pd.to_numeric(values).astype("Float64").round()
        dtype = pd.api.types.pandas_dtype(wanted)
        if not isinstance(dtype, pd.api.extensions.ExtensionDtype) and values.hasnans:
            wanted = dtype.name.capitalize().replace("Ui", "UI")
    return values.astype(wanted)


def conform(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """``frame`` (the table ``name`` of TABLES) with every column of its dtype there
    (a column the table does not list is left as it is); an empty frame with
    every column of the table (but the optional ones it lacks), in the table's
    order.  Its attrs are kept."""
    spec = TABLES[name]
    changed = {}
    for column in frame.columns:
        wanted = spec.columns.get(str(column), spec.others)
        if wanted is not None and not has_dtype(frame[column].dtype, wanted):
            changed[column] = _cast(frame[column], wanted)
    if len(frame):
        return frame.assign(**changed) if changed else frame
    changed.update({c: pd.Series(dtype=d) for c, d in spec.columns.items()
                    if c not in frame and c not in spec.optional})
    order = [c for c in spec.columns if c in frame or c in changed]
    order += [c for c in frame.columns if c not in spec.columns]
    return frame.assign(**changed)[order]
