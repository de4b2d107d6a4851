"""Thread states: at any moment a thread is in one state, derived from the paired
tables by a sweep over each thread's intervals.  The one definition of "busy"
that every analysis, the report and the plots use.

* ``busy``: in a parallel region (an implicit task other than the initial
  one) or running an explicit task, and not waiting;
* ``barrier_wait``: waiting in a barrier (any kind);
* ``sync_wait``: waiting in taskwait, taskgroup or a reduction;
* ``lock_wait``: waiting for a lock, critical section or ordered region;
* ``tool_stall``: stopped by the tool itself, making room for the trace
  (``tool_stalls``: the in-place file route's stalls, docs/stalls.md); this
  overrides every other state: that time is neither the program's work nor a
  wait of OpenMP's, and no answer counts it as either;
* ``idle``: none of these (a worker in the runtime's pool, or the initial
  thread running serial code).

A thread waiting in a barrier or taskwait runs other tasks meanwhile: that
time is the tasks' (busy), not waiting.  So a wait owned by the implicit task
counts only while no explicit task runs, and a taskwait of an explicit task
only while that task itself is the one running (from task_schedule switches).
(The runtime's own states, sampled, are ``ompt_py.records.OMPT_STATES``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .. import _core
from ..errors import MissingEventsError
from ..records import EVENT_CODES, SCOPE_BEGIN, STALL_REASONS, TASK_INITIAL, Names
from . import tables
from .cache import per_trace
from .columns import conform
from .pairing import Intervals, clamp_to_region, distinct

if TYPE_CHECKING:
    from ..trace import Trace

#: ompt-py's thread states other than idle, in the order of the state columns.
THREAD_STATES = ("busy", "barrier_wait", "sync_wait", "lock_wait", "tool_stall")
STATE_COLUMNS = [f"{s}_ns" for s in THREAD_STATES] + ["idle_ns"]
_BUSY, _BARRIER, _SYNC, _LOCK, _STALL = range(len(THREAD_STATES))

_USABLE_LEVELS = ("always", "sometimes", "sometimes_paired")


# ---- events an analysis needs -------------------------------------------------------------


def threads(trace: Trace) -> np.ndarray:
    """The thread keys (pid << 32 | thread) of the trace, sorted (tables.census_of)."""
    return tables.census_of(trace).threads


@per_trace
def process_spans(trace: Trace) -> pd.DataFrame:
    """Per process with events (the index: pid, sorted): the time of its first and
    last event (first_ns, last_ns), from each run of its records (no key per
    record for a trace of one process)."""
    time, pid = trace.events["time_ns"], trace.single_pid
    if not len(time):
        pids = starts = np.empty(0, np.intp)
    elif pid is not None:
        pids, starts = np.array([pid]), np.zeros(1, np.intp)
    else:
        every = trace.pids
        starts = np.flatnonzero(np.r_[True, every[1:] != every[:-1]])
        pids = every[starts]
    runs = pd.DataFrame({"pid": pids.astype(np.int64),
                         "first_ns": np.minimum.reduceat(time, starts) if len(starts) else
                         np.empty(0, np.int64),
                         "last_ns": np.maximum.reduceat(time, starts) if len(starts) else
                         np.empty(0, np.int64)})
    return runs.groupby("pid").agg(first_ns=("first_ns", "min"), last_ns=("last_ns", "max"))


#: Stands, in ``when`` of require, for implicit tasks of teams of several threads
#: (a region run by one thread has no barrier).
TEAM = "implicit_task (of a team of 2 or more threads)"
# What the thread states need: (events, when the trace has any of these).
_STATE_NEEDS = ((["implicit_task"], ["parallel_begin"]), (["sync_region_wait"], [TEAM]),
                (["task_schedule"], ["task_create"]), (["mutex_acquired"], ["mutex_acquire"]))


@per_trace
def _triggers(trace: Trace) -> set[str]:
    found = tables.present_events(trace)
    ev = trace.events
    begins = (ev["event"] == EVENT_CODES["implicit_task"]) & (ev["endpoint"] == SCOPE_BEGIN)
    return found | {TEAM} if (ev["u32a"][begins] > 1).any() else found  # u32a: team_size


def require(trace: Trace, analysis_name: str, needs: Iterable[str], when: Iterable[str]) -> None:
    """Raise MissingEventsError when the trace holds any of the events ``when``
    (so the analysis has something to answer about; or TEAM) but none of some of
    ``needs``."""
    present = _triggers(trace)
    triggers = sorted(set(when) & present)
    missing = tuple(e for e in needs if e not in present)
    if not triggers or not missing:
        return
    refused = sorted({
        f"{e} ({rt.get('callbacks', {}).get(e, 'not registered')})"
        for p in trace.meta.get("processes", []) for rt in p.get("runtimes", [])
        for e in missing if rt.get("callbacks", {}).get(e) not in _USABLE_LEVELS
    })
    if refused:
        why = ("the runtime did not accept these callbacks: " + ", ".join(refused)
               + " (levels from t.meta['processes'][i]['runtimes'][j]['callbacks'])")
    else:
        why = (f"the runtime accepted the callbacks, so the records were lost "
               f"({trace.dropped:,} dropped) or filtered out of the trace")
    raise MissingEventsError(
        f"{analysis_name} needs {', '.join(missing)} events, and this trace has none although "
        f"it has {', '.join(triggers)} events: {why}.  Trace the program again on a runtime "
        "that reports them (LLVM libomp 14 or later does), with no records dropped "
        "(OMPTPY_OVERFLOW=flush); constructs() works without them.",
        missing,
    )


def require_states(trace: Trace, analysis_name: str) -> None:
    """The events the thread states are made of (see thread_states)."""
    for needs, when in _STATE_NEEDS:
        require(trace, analysis_name, needs, when)


# ---- vectorised interval machinery -------------------------------------------------------


@dataclass
class Segments:
    """Disjoint time segments per group, sorted by (group, begin), each with a state."""

    first: np.ndarray  # int64: where each group's segments start, and their number
    keys: np.ndarray  # int64: the distinct groups, sorted (keys[g]: segments first[g:g + 2])
    begin: np.ndarray  # int64
    end: np.ndarray  # int64
    state: np.ndarray  # int8

    def per_segment(self, values: np.ndarray) -> np.ndarray:
        """A value per group (one per key) repeated for each of its segments."""
        return np.repeat(values, np.diff(self.first))

    @property
    def group(self) -> np.ndarray:
        """Each segment's group (int64)."""
        return self.per_segment(self.keys)


def thread_key(pid: Iterable, thread: Iterable) -> np.ndarray:
    """One int64 per (pid, thread)."""
    p = np.asarray(pid, dtype=np.int64)
    t = np.asarray(thread, dtype=np.int64)
    return (p << 32) | t


def key_pid_thread(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (key >> 32).astype(np.int64), (key & 0xFFFFFFFF).astype(np.int64)


#: A layer of sweep(): its intervals' groups (int64 keys), begins and ends.
Layer = tuple[np.ndarray, np.ndarray, np.ndarray]


def sweep(layers: list[Layer], classify: Callable[[Callable[[int], np.ndarray]], np.ndarray]
          ) -> Segments:
    """Cuts each group's time at every interval boundary and classifies the pieces.

    ``layers``: the intervals of each layer (the k-th: layer k), read where they
    are (no array of every layer's made).  ``classify(opened)`` gets a function
    giving, for a layer, whether it is open (more of its intervals begun than
    ended) in each set of open layers (bit k of a set: layer k), and returns
    each set's state (-1: no segment).  Adjacent pieces of one group and state
    are merged (``_core.sweep``).
    """
    layers = [tuple(np.ascontiguousarray(a, np.int64) for a in layer) for layer in layers]
    sets = np.arange(1 << len(layers))
    table = np.asarray(classify(lambda k: (sets >> k & 1).astype(bool)), np.int8)
    keys = distinct(np.concatenate([distinct(group) for group, _, _ in layers]))
    f, b, e, s = _core.sweep(layers, keys, table)
    return Segments(np.frombuffer(f, np.int64), keys, np.frombuffer(b, np.int64),
                    np.frombuffer(e, np.int64), np.frombuffer(s, np.int8))


def _state_times(seg: Segments, n_states: int, group: np.ndarray, t: np.ndarray,
                 spans: bool) -> np.ndarray:
    """``_core.cumulative`` on the segments and queries (group, t)."""
    out = np.zeros((len(group) // 2 if spans else len(group), n_states), dtype=np.int64)
    group = np.asarray(group, np.int64)
    at = np.searchsorted(seg.keys, group)
    known = at < len(seg.keys)
    known[known] = seg.keys[at[known]] == group[known]
    _core.cumulative(seg.first, seg.begin, seg.end, seg.state,
                     np.where(known, at, -1).astype(np.int32), np.asarray(t, np.int64), out, spans)
    return out


def cumulative(seg: Segments, n_states: int, group: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time each group spent in each state before each time: shape (len(t), n_states)."""
    return _state_times(seg, n_states, group, t, False)


def overlap(seg: Segments, group: np.ndarray, begin: np.ndarray,
            end: np.ndarray) -> np.ndarray:
    """Time in each state within each [begin, end) of a group: shape (len(begin), states)."""
    return _state_times(seg, len(THREAD_STATES), np.concatenate([group, group]),
                        np.concatenate([begin, end]), True)


# ---- intervals the trace window cut off -------------------------------------------------------


def to_int(series: pd.Series, dtype: type = np.int64) -> np.ndarray:
    """A column as integers, missing values as 0."""
    return series.to_numpy(dtype=dtype, na_value=0)


@per_trace
def closed(trace: Trace, paired: Callable[[Trace], Intervals]) -> pd.DataFrame:
    """The table of ``paired`` (tables.region_intervals, implicit_intervals or
    wait_intervals) plus the intervals the trace window cut off (begun, never
    ended), closed at the last event of their process, or at the end of their
    parallel region if that ended; ``complete`` tells them apart."""
    iv = paired(trace)
    opened = iv.open
    if opened is None or opened.empty:
        return iv.table.assign(complete=True)
    if paired is tables.region_intervals:
        opened = opened.rename(columns={"team_size": "requested_team_size"})
    last = process_spans(trace)["last_ns"]
    opened = opened.assign(end_ns=last.reindex(to_int(opened["pid"])).to_numpy(np.int64))
    opened["duration_ns"] = opened["end_ns"] - opened["begin_ns"]
    if paired is not tables.region_intervals:
        cut = Intervals(opened, 0, 0)
        clamp_to_region(cut, closed(trace, tables.region_intervals))
        opened = cut.table
    return pd.concat([iv.table.assign(complete=True), opened.assign(complete=False)],
                     ignore_index=True)


def is_barrier(kind: pd.Series) -> np.ndarray:
    """Whether each of these sync kinds (a categorical column of the tables) is a
    barrier's, from the categories (no string made per row)."""
    kinds = kind.astype("category").array
    barrier = np.asarray(kinds.categories.astype(str).str.startswith("barrier"), bool)
    return (kinds.codes >= 0) & barrier[kinds.codes] if len(barrier) else np.zeros(
        len(kind), bool)


def in_regions(implicit: pd.DataFrame) -> pd.DataFrame:
    """Implicit tasks of parallel regions (not the initial task of a thread)."""
    return implicit[(to_int(implicit["flags"]) & TASK_INITIAL) == 0]


@per_trace
def region_tasks(trace: Trace) -> pd.DataFrame:
    """The implicit tasks of parallel regions, with those the trace window cut off:
    in_regions(closed(trace, tables.implicit_intervals)), made once per trace."""
    return in_regions(closed(trace, tables.implicit_intervals))


# ---- the states ------------------------------------------------------------------------------


_STALL_REASON_NAMES = Names(STALL_REASONS)
#: What the views and exports call a tool stall (a slice on its thread, as Score-P
#: marks its buffer flushes).
STALL_LABEL = "ompt-py: stall"


@per_trace
def tool_stalls(trace: Trace) -> pd.DataFrame:
    """The tool's stalls (``tool_stall`` records, record version 8): when a thread
    stopped recording the program to make room for the trace (the in-place file
    route, when the program held every CPU and the drainer could not make the file's
    next region resident in time).  One row each, in time order: pid, thread,
    begin_ns, end_ns, duration_ns, reason (records.STALL_REASONS: ``region`` made
    the region and made it resident, ``populate`` made the rest of it resident,
    ``wait`` waited for another thread, or the drainer, doing either), bytes (made
    resident) and region (the file's region it made room in, from 1)."""
    ev = trace.events
    rows = tables.rows_of(trace, "tool_stall")
    begin = ev["time_ns"][rows]
    end = ev["u64b"][rows].view(np.int64)
    out = pd.DataFrame({
        "pid": trace.pids_at(rows).astype(np.int64), "thread": ev["thread"][rows].astype(np.int64),
        "begin_ns": begin, "end_ns": end, "duration_ns": end - begin,
        "reason": _STALL_REASON_NAMES.categorical(ev["kind"][rows]),
        "bytes": ev["u64a"][rows].astype(np.int64), "region": ev["u32a"][rows].astype(np.int64)})
    return out.iloc[np.argsort(begin, kind="stable")].reset_index(drop=True)


@per_trace
def _explicit_owned(trace: Trace) -> np.ndarray:
    """Which rows of closed(trace, wait_intervals) belong to explicit tasks (taskwait in a task)."""
    waits = to_int(closed(trace, tables.wait_intervals)["task_id"], np.uint64)
    explicit = np.sort(to_int(tables.created(trace)["task_id"], np.uint64))
    if not len(explicit):
        return np.zeros(len(waits), bool)
    return explicit[np.minimum(np.searchsorted(explicit, waits), len(explicit) - 1)] == waits


@per_trace
def task_waits(trace: Trace) -> pd.DataFrame:
    """When explicit tasks waited (taskwait, taskgroup) while being the task their
    thread ran: pid, thread, task_id, begin_ns, end_ns."""
    waits = closed(trace, tables.wait_intervals)
    pieces = tables.task_pieces(trace)
    cols = ["pid", "thread", "task_id"]
    mine = waits.loc[_explicit_owned(trace), [*cols, "begin_ns", "end_ns"]]
    own = pieces[pieces["task_id"].isin(pd.unique(mine["task_id"]))] if len(mine) else pieces[:0]
    keys = pd.concat([mine[cols], own[cols]], ignore_index=True)
    if not len(keys):
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in [*cols, "begin_ns", "end_ns"]})
    # A task's wait counts while the task runs: its waits intersected with its
    # own executions, per (thread, task).
    gid = keys.groupby(cols, sort=False).ngroup().to_numpy(np.int64)
    seg = sweep([(gid[:len(mine)], to_int(mine["begin_ns"]), to_int(mine["end_ns"])),
                 (gid[len(mine):], to_int(own["begin_ns"]), to_int(own["end_ns"]))],
                lambda opened: np.where(opened(0) & opened(1), 0, -1))
    row = np.zeros(gid.max() + 1, np.int64)
    row[gid] = np.arange(len(gid))  # a row of each group, for its pid, thread and task
    at = seg.per_segment(row[seg.keys])
    return pd.DataFrame({"pid": to_int(keys["pid"])[at], "thread": to_int(keys["thread"])[at],
                         "task_id": to_int(keys["task_id"], np.uint64)[at],
                         "begin_ns": seg.begin, "end_ns": seg.end})


def _layer(table: pd.DataFrame, begin: str = "begin_ns", end: str = "end_ns",
           rows: np.ndarray | None = None) -> Layer:
    """A layer of sweep(): the intervals of ``table`` (its ``rows``; None: all) per
    thread, as int64 arrays (the table's own where they are int64 already)."""
    def ints(name: str) -> np.ndarray:
        values = table[name].to_numpy()
        return np.asarray(values if rows is None else values[rows], np.int64)

    return thread_key(ints("pid"), ints("thread")), ints(begin), ints(end)


@per_trace
def thread_states(trace: Trace) -> Segments:
    """Per thread (group = pid << 32 | thread), disjoint segments in the states of
    THREAD_STATES; the time between them is idle."""
    waits = closed(trace, tables.wait_intervals)
    by_task = _explicit_owned(trace)
    barrier = is_barrier(waits["kind"])
    mutex = tables.mutex(trace)
    # The locks waited for: both ends known (a hold without its wait has no acquire).
    asked = mutex["acquire_ns"].notna().to_numpy() & mutex["acquired_ns"].notna().to_numpy()
    region, piece, bar, sync, xwait, lock, stall = range(7)
    # A layer at a time, each of int64 arrays (no frame per kind of interval).
    layers = [
        _layer(region_tasks(trace)),
        _layer(tables.task_pieces(trace)),
        _layer(waits, rows=np.flatnonzero(~by_task & barrier)),
        _layer(waits, rows=np.flatnonzero(~by_task & ~barrier)),
        _layer(task_waits(trace)),
        _layer(mutex, "acquire_ns", "acquired_ns", None if asked.all() else np.flatnonzero(asked)),
        _layer(tool_stalls(trace)),
    ]

    def classify(opened: Callable[[int], np.ndarray]) -> np.ndarray:
        state = np.full(len(opened(region)), -1, dtype=np.int8)
        state[opened(region)] = _BUSY
        state[opened(sync)] = _SYNC
        state[opened(bar)] = _BARRIER
        state[opened(piece)] = _BUSY
        state[opened(piece) & opened(xwait)] = _SYNC
        state[opened(lock)] = _LOCK
        state[opened(stall)] = _STALL
        return state

    return sweep(layers, classify)


def thread_totals(trace: Trace) -> pd.DataFrame:
    """Per thread over the whole trace: time in each state (busy_ns, barrier_wait_ns,
    sync_wait_ns, lock_wait_ns, tool_stall_ns, idle_ns) and busy_share, the busy
    part of the time neither idle nor stalled by the tool."""
    require_states(trace, "thread_totals()")
    keys = threads(trace)
    seg = thread_states(trace)
    # Each thread's time per state before the end of its last segment: its totals
    # (in C, nothing made per segment).
    totals = cumulative(seg, len(THREAD_STATES), keys,
                        np.full(len(keys), seg.end.max() if len(seg.end) else 0))
    pid, thread = key_pid_thread(keys)
    out = pd.DataFrame({"pid": pid, "thread": thread})
    for i, s in enumerate(THREAD_STATES):
        out[f"{s}_ns"] = totals[:, i]
    t = trace.events["time_ns"]
    out["idle_ns"] = (int(t.max() - t.min()) if len(t) else 0) - totals.sum(axis=1)
    working = totals.sum(axis=1) - totals[:, _STALL]
    out["busy_share"] = out["busy_ns"] / np.where(working > 0, working, np.nan)
    return conform(out, "thread_states")
