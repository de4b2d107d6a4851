"""Answers from a trace: where the time goes, which parallel region is imbalanced,
whether tasks are too small, who waits for which lock, how busy each thread was.

Every analysis returns a pandas DataFrame (times in nanoseconds), computed with
numpy and pandas over whole columns, from the paired tables of analysis.py.

Thread states.  At any moment a thread is in one state:

* ``busy``: in a parallel region (an implicit task other than the initial
  one) or running an explicit task, and not waiting;
* ``barrier_wait``: waiting in a barrier (any kind);
* ``sync_wait``: waiting in taskwait, taskgroup or a reduction;
* ``lock_wait``: waiting for a lock, critical section or ordered region;
* ``idle``: none of these (a worker in the runtime's pool, or the initial
  thread running serial code).

A thread waiting in a barrier or taskwait runs other tasks meanwhile: that
time is the tasks' (busy), not waiting.  So a wait owned by the implicit task
counts only while no explicit task runs, and a taskwait of an explicit task
only while that task itself is the one running (from task_schedule switches).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from . import analysis
from ._records import EVENT_CODES, EVENTS
from .errors import MissingEventsError

if TYPE_CHECKING:
    from .trace import Trace

#: Thread states other than idle, in the order of the state columns.
STATES = ("busy", "barrier_wait", "sync_wait", "lock_wait")
STATE_COLUMNS = [f"{s}_ns" for s in STATES] + ["idle_ns"]
_BUSY, _BARRIER, _SYNC, _LOCK = range(len(STATES))

_STAT_COLUMNS = ["count", "total_ns", "mean_ns", "p50_ns", "p95_ns", "max_ns"]
_USABLE_LEVELS = ("always", "sometimes", "sometimes_paired")


# ---- events an analysis needs -------------------------------------------------------------


def present_events(trace: Trace) -> set[str]:
    """Names of the events the trace holds at least once."""
    return trace._cached("metrics.present", lambda df: _present(trace))


def _present(trace: Trace) -> set[str]:
    codes = trace.events["event"]
    found = np.flatnonzero(np.bincount(codes)) if len(codes) else []
    return {EVENTS[c] for c in np.asarray(found).tolist() if c in EVENTS}


def _threads(trace: Trace) -> np.ndarray:
    """The thread keys (pid << 32 | thread) of the trace, sorted."""
    return np.sort(pd.unique(_thread_key(trace.pids, trace.events["thread"])))


#: Stands, in ``when`` of require, for implicit tasks of teams of several threads
#: (a region run by one thread has no barrier).
TEAM = "implicit_task (of a team of 2 or more threads)"
# What the thread states need: (events, when the trace has any of these).
_STATE_NEEDS = ((["implicit_task"], ["parallel_begin"]), (["sync_region_wait"], [TEAM]),
                (["task_schedule"], ["task_create"]), (["mutex_acquired"], ["mutex_acquire"]))


def _triggers(trace: Trace) -> set[str]:
    def build(df: pd.DataFrame) -> set[str]:
        found = present_events(trace)
        ev = trace.events
        begins = (ev["event"] == EVENT_CODES["implicit_task"]) & (ev["endpoint"] == 1)
        return found | {TEAM} if (ev["u32a"][begins] > 1).any() else found  # u32a: team_size
    return trace._cached("metrics.triggers", build)


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


def _require_states(trace: Trace, analysis_name: str) -> None:
    """The events the thread states are made of (see thread_states)."""
    for needs, when in _STATE_NEEDS:
        require(trace, analysis_name, needs, when)


# ---- vectorised interval machinery -------------------------------------------------------


@dataclass
class Segments:
    """Disjoint time segments per group, sorted by (group, begin), each with a state."""

    group: np.ndarray  # int64
    begin: np.ndarray  # int64
    end: np.ndarray  # int64
    state: np.ndarray  # int8


def _thread_key(pid: Iterable, thread: Iterable) -> np.ndarray:
    """One int64 per (pid, thread)."""
    p = np.asarray(pid, dtype=np.int64)
    t = np.asarray(thread, dtype=np.int64)
    return (p << 32) | t


def _key_pid_thread(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (key >> 32).astype(np.int64), (key & 0xFFFFFFFF).astype(np.int64)


def _sweep(group: np.ndarray, begin: np.ndarray, end: np.ndarray, layer: np.ndarray,
           classify: Callable[[Callable[[int], np.ndarray]], np.ndarray]) -> Segments:
    """Cuts each group's time at every interval boundary and classifies the pieces.

    ``classify(depth)`` gets a function giving, for a layer, how many of its
    intervals are open over each piece, and returns each piece's state (-1: no
    segment).  Adjacent pieces of one group and state are merged.
    """
    n = len(group)
    if n == 0:
        return Segments(*(np.empty(0, np.int64) for _ in range(3)), np.empty(0, np.int8))
    g = np.concatenate([group, group])
    t = np.concatenate([begin, end])
    order = np.lexsort((t, g))
    g, t = g[order], t[order]
    lay = np.concatenate([layer, layer])[order]
    delta = np.where(order < n, 1, -1).astype(np.int32)

    def depth(k: int) -> np.ndarray:
        # Every group opens and closes as many intervals as it has: the running
        # sum over all groups is each group's own count.
        return np.cumsum(np.where(lay == k, delta, 0), dtype=np.int32)

    state = classify(depth)
    keep = (g[:-1] == g[1:]) & (t[1:] > t[:-1]) & (state[:-1] >= 0)
    sg, sb, se, ss = g[:-1][keep], t[:-1][keep], t[1:][keep], state[:-1][keep]
    if not len(sg):
        return Segments(sg, sb, se, ss)
    new = np.ones(len(sg), dtype=bool)
    new[1:] = (sg[1:] != sg[:-1]) | (ss[1:] != ss[:-1]) | (sb[1:] != se[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(sg) - 1)
    return Segments(sg[first], sb[first], se[last], ss[first])


def _cumulative(seg: Segments, n_states: int, group: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time each group spent in each state before each time: shape (len(t), n_states)."""
    n, m = len(seg.group), len(group)
    out = np.zeros((m, n_states), dtype=np.int64)
    if n == 0 or m == 0:
        return out
    order = np.lexsort((np.concatenate([np.zeros(n, np.int8), np.ones(m, np.int8)]),
                        np.concatenate([seg.begin, t]), np.concatenate([seg.group, group])))
    is_seg = order < n
    # The last segment at or before each position (segments are in sorted order).
    last = np.maximum.accumulate(np.where(is_seg, order, -1))
    query = order[~is_seg] - n
    idx = np.empty(m, dtype=np.int64)
    idx[query] = last[~is_seg]
    first = np.searchsorted(seg.group, group, side="left")
    safe = np.maximum(idx, 0)
    valid = (idx >= 0) & (seg.group[safe] == group)
    length = seg.end - seg.begin
    inside = np.clip(t - seg.begin[safe], 0, length[safe])
    for s in range(n_states):
        cum = np.concatenate([[0], np.cumsum(np.where(seg.state == s, length, 0))])
        before = np.where(valid, cum[safe] + np.where(seg.state[safe] == s, inside, 0),
                          cum[first])
        out[:, s] = before - cum[first]
    return out


def _overlap(seg: Segments, group: np.ndarray, begin: np.ndarray,
             end: np.ndarray) -> np.ndarray:
    """Time in each state within each [begin, end) of a group: shape (len(begin), states)."""
    m = len(group)
    both = _cumulative(seg, len(STATES), np.concatenate([group, group]),
                       np.concatenate([begin, end]))
    return both[m:] - both[:m]


# ---- the tables the analyses share (computed once per trace) -------------------------------


def _int(series: pd.Series, dtype: type = np.int64) -> np.ndarray:
    return series.to_numpy(dtype=dtype, na_value=0)


def _pieces(trace: Trace) -> pd.DataFrame:
    """Explicit task executions (one row per uninterrupted run on a thread)."""
    return trace._cached("metrics.pieces", analysis.task_executions)


def _mutex(trace: Trace) -> pd.DataFrame:
    return trace._cached("metrics.mutex", analysis.mutex_table)


def _work(trace: Trace) -> pd.DataFrame:
    return trace._cached("metrics.work", lambda df: analysis.work(df).table)


def _created(trace: Trace) -> pd.DataFrame:
    """task_create rows: pid, creator thread, time, task, parent, code address."""
    def build(df: pd.DataFrame) -> pd.DataFrame:
        return df.loc[df["event"] == "task_create",
                      ["pid", "thread", "time_ns", "task_id", "other_task_id", "codeptr"]
                      ].reset_index(drop=True)
    return trace._cached("metrics.created", build)


def intervals(trace: Trace, what: str) -> pd.DataFrame:
    """The paired table ``what`` ("regions", "implicit", "waits" of Trace._paired)
    plus the intervals the trace window cut off (begun, never ended), closed at
    the last event of their process, or at the end of their parallel region if
    that ended; ``complete`` tells them apart.  Computed once per trace."""
    return trace._cached(f"metrics.closed.{what}", lambda df: _close(trace, what))


def _close(trace: Trace, what: str) -> pd.DataFrame:
    iv = trace._paired(what)
    opened = iv.open
    if opened is None or opened.empty:
        return iv.table.assign(complete=True)
    if what == "regions":
        opened = opened.rename(columns={"team_size": "requested_team_size"})
    last = pd.Series(trace.events["time_ns"]).groupby(trace.pids).max()
    opened = opened.assign(end_ns=last.reindex(_int(opened["pid"])).to_numpy(np.int64))
    opened["duration_ns"] = opened["end_ns"] - opened["begin_ns"]
    if what != "regions":
        cut = analysis.Intervals(opened, 0, 0)
        analysis._clamp_to_region(cut, intervals(trace, "regions"))
        opened = cut.table
    return pd.concat([iv.table.assign(complete=True), opened.assign(complete=False)],
                     ignore_index=True)


def _in_regions(implicit: pd.DataFrame) -> pd.DataFrame:
    """Implicit tasks of parallel regions (not the initial task of a thread)."""
    return implicit[(_int(implicit["flags"]) & 1) == 0]


def thread_states(trace: Trace) -> Segments:
    """Per thread (group = pid << 32 | thread), disjoint segments in the states of STATES;
    the time between them is idle.  Computed once per trace."""
    return trace._cached("metrics.states", lambda df: _thread_states(trace))


def _explicit_owned(trace: Trace) -> np.ndarray:
    """Which rows of intervals(trace, "waits") belong to explicit tasks (taskwait in a task)."""
    waits = intervals(trace, "waits")
    explicit = np.unique(_int(_created(trace)["task_id"], np.uint64))
    return np.isin(_int(waits["task_id"], np.uint64), explicit)


def task_waits(trace: Trace) -> pd.DataFrame:
    """When explicit tasks waited (taskwait, taskgroup) while being the task their
    thread ran: pid, thread, task_id, begin_ns, end_ns.  Computed once per trace."""
    return trace._cached("metrics.task_waits", lambda df: _task_waits(trace))


def _task_waits(trace: Trace) -> pd.DataFrame:
    waits = intervals(trace, "waits")
    pieces = _pieces(trace)
    cols = ["pid", "thread", "task_id"]
    mine = waits.loc[_explicit_owned(trace), [*cols, "begin_ns", "end_ns"]]
    own = pieces[pieces["task_id"].isin(pd.unique(mine["task_id"]))] if len(mine) else pieces[:0]
    keys = pd.concat([mine[cols], own[cols]], ignore_index=True)
    if not len(keys):
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in [*cols, "begin_ns", "end_ns"]})
    # A task's wait counts while the task runs: its waits intersected with its
    # own executions, per (thread, task).
    gid = keys.groupby(cols, sort=False).ngroup().to_numpy(np.int64)
    seg = _sweep(gid,
                 np.concatenate([_int(mine["begin_ns"]), _int(own["begin_ns"])]),
                 np.concatenate([_int(mine["end_ns"]), _int(own["end_ns"])]),
                 np.repeat([0, 1], [len(mine), len(own)]),
                 lambda depth: np.where((depth(0) > 0) & (depth(1) > 0), 0, -1).astype(np.int8))
    row = np.zeros(gid.max() + 1, np.int64)
    row[gid] = np.arange(len(gid))  # a row of each group, for its pid, thread and task
    at = row[seg.group]
    return pd.DataFrame({"pid": _int(keys["pid"])[at], "thread": _int(keys["thread"])[at],
                         "task_id": _int(keys["task_id"], np.uint64)[at],
                         "begin_ns": seg.begin, "end_ns": seg.end})


def _thread_states(trace: Trace) -> Segments:
    implicit = _in_regions(intervals(trace, "implicit"))
    waits = intervals(trace, "waits")
    pieces = _pieces(trace)
    mutex = _mutex(trace)
    by_task = _explicit_owned(trace)
    barrier = waits["kind"].astype(str).str.startswith("barrier").to_numpy()
    tw = task_waits(trace)

    locked = mutex.dropna(subset=["acquire_ns", "acquired_ns"]) if len(mutex) else mutex
    region, piece, bar, sync, xwait, lock = range(6)
    parts = [
        (region, implicit["pid"], implicit["thread"], implicit["begin_ns"], implicit["end_ns"]),
        (piece, pieces["pid"], pieces["thread"], pieces["begin_ns"], pieces["end_ns"]),
        (bar, *(waits.loc[~by_task & barrier, c] for c in ("pid", "thread", "begin_ns",
                                                          "end_ns"))),
        (sync, *(waits.loc[~by_task & ~barrier, c] for c in ("pid", "thread", "begin_ns",
                                                            "end_ns"))),
        (xwait, tw["pid"], tw["thread"], tw["begin_ns"], tw["end_ns"]),
        (lock, locked["pid"], locked["thread"], locked["acquire_ns"], locked["acquired_ns"]),
    ]
    group = np.concatenate([_thread_key(p[1], p[2]) for p in parts])
    begin = np.concatenate([np.asarray(p[3], dtype=np.int64) for p in parts])
    end = np.concatenate([np.asarray(p[4], dtype=np.int64) for p in parts])
    layer = np.repeat([p[0] for p in parts], [len(p[1]) for p in parts])

    def classify(depth: Callable[[int], np.ndarray]) -> np.ndarray:
        state = np.full(len(group) * 2, -1, dtype=np.int8)
        state[depth(region) > 0] = _BUSY
        state[depth(sync) > 0] = _SYNC
        state[depth(bar) > 0] = _BARRIER
        running = depth(piece) > 0
        state[running] = _BUSY
        state[running & (depth(xwait) > 0)] = _SYNC
        state[depth(lock) > 0] = _LOCK
        return state

    return _sweep(group, begin, end, layer, classify)


# ---- per construct and per source location ---------------------------------------------------


def construct_instances(trace: Trace) -> pd.DataFrame:
    """One row per construct instance: construct, kind, pid, thread, codeptr,
    parallel_id, begin_ns, duration_ns.  Instances without a code address of their
    own (implicit tasks, a worker's implicit barrier) take their region's."""
    return trace._cached("metrics.instances", lambda df: _construct_instances(trace, df))


def _construct_instances(trace: Trace, df: pd.DataFrame) -> pd.DataFrame:
    regions = trace._paired("regions").table
    implicit = trace._paired("implicit").table
    sync = trace._paired("sync").table
    work = _work(trace)
    masked = analysis.masked(df).table
    mutex = _mutex(trace)
    pieces = _pieces(trace)
    created = _created(trace)

    names: list[str] = []
    kinds: list[pd.Categorical] = []
    columns: dict[str, list[np.ndarray]] = {c: [] for c in (
        "pid", "thread", "codeptr", "parallel_id", "begin_ns", "duration_ns")}

    def add(construct: str, kind: pd.Categorical, t: pd.DataFrame, duration: pd.Series,
            begin: pd.Series, codeptr: pd.Series | None = None,
            parallel_id: pd.Series | None = None) -> None:
        n = len(t)
        names.append(construct)
        kinds.append(kind)
        columns["pid"].append(_int(t["pid"]))
        columns["thread"].append(_int(t["thread"]) if "thread" in t else np.full(n, -1))
        columns["codeptr"].append(_int(codeptr, np.uint64) if codeptr is not None
                                  else np.zeros(n, np.uint64))
        columns["parallel_id"].append(_int(parallel_id, np.uint64) if parallel_id is not None
                                      else np.zeros(n, np.uint64))
        columns["begin_ns"].append(np.asarray(begin, dtype=np.int64))
        columns["duration_ns"].append(np.asarray(duration, dtype=np.float64))

    def one(kind: str, n: int) -> pd.Categorical:
        return pd.Categorical.from_codes(np.zeros(n, np.int8), [kind])

    def named(values: pd.Series) -> pd.Categorical:
        cat = values.astype("category").array
        return pd.Categorical.from_codes(cat.codes, list(cat.categories))  # one category dtype

    add("parallel region", pd.Categorical.from_codes(regions["league"].to_numpy(np.int8),
                                                     ["team", "league"]),
        regions, regions["duration_ns"], regions["begin_ns"], regions["codeptr"],
        regions["parallel_id"])
    add("implicit task", pd.Categorical.from_codes((_int(implicit["flags"]) & 1).astype(np.int8),
                                                   ["implicit", "initial"]),
        implicit, implicit["duration_ns"], implicit["begin_ns"], None, implicit["parallel_id"])
    add("work", named(work["kind_raw"]), work, work["duration_ns"], work["begin_ns"],
        work["codeptr"], work["parallel_id"])
    add("sync", named(sync["kind_raw"]), sync, sync["duration_ns"], sync["begin_ns"],
        sync["codeptr"], sync["parallel_id"])
    if len(mutex):
        waited, held = mutex[mutex["wait_ns"].notna()], mutex[mutex["hold_ns"].notna()]
        add("mutex wait", named(waited["kind"]), waited, waited["wait_ns"],
            waited["acquire_ns"], waited["codeptr"])
        add("mutex hold", named(held["kind"]), held, held["hold_ns"], held["acquired_ns"],
            held["codeptr"])
    add("masked", one("masked", len(masked)), masked, masked["duration_ns"], masked["begin_ns"],
        masked["codeptr"], masked["parallel_id"])
    if len(pieces):
        runs = pieces.groupby(["pid", "task_id"], sort=False).agg(
            thread=("thread", "first"), begin_ns=("begin_ns", "min"),
            duration_ns=("duration_ns", "sum")).reset_index()
        runs = runs.merge(created[["pid", "task_id", "codeptr"]].drop_duplicates(
            ["pid", "task_id"]), on=["pid", "task_id"], how="left")
        add("task", one("explicit", len(runs)), runs, runs["duration_ns"], runs["begin_ns"],
            runs["codeptr"])
    user = trace.user_regions()
    if len(user):  # ompt_py.region / omptpy_region.h: the kind is the region's name
        add("user region", named(user["name"]), user, user["duration_ns"], user["begin_ns"],
            user["codeptr"])
    sizes = [len(k) for k in kinds]
    out = pd.DataFrame({
        "construct": pd.Categorical.from_codes(np.repeat(np.arange(len(names)), sizes), names),
        "kind": union_categoricals(kinds),
        **{c: np.concatenate(v) for c, v in columns.items()},
    })
    # No code address of its own: the region's.
    no_code = (out["codeptr"].to_numpy() == 0) & (out["parallel_id"].to_numpy() != 0)
    if no_code.any() and len(regions):
        where = pd.Series(_int(regions["codeptr"], np.uint64),
                          index=pd.MultiIndex.from_arrays([_int(regions["pid"]),
                                                           _int(regions["parallel_id"],
                                                                np.uint64)]))
        where = where[~where.index.duplicated()]
        idx = pd.MultiIndex.from_arrays([out["pid"].to_numpy()[no_code],
                                         out["parallel_id"].to_numpy()[no_code]])
        filled = where.reindex(idx).fillna(0).to_numpy(np.uint64)
        codeptr = out["codeptr"].to_numpy().copy()
        codeptr[no_code] = filled
        out["codeptr"] = codeptr
    return out


def _group_stats(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    g = frame.groupby(keys, observed=True, sort=False, dropna=False)["duration_ns"]
    stats = g.agg(["count", "sum", "mean", "max"]).rename(
        columns={"sum": "total_ns", "mean": "mean_ns", "max": "max_ns"})
    stats["p50_ns"], stats["p95_ns"] = g.quantile(0.5), g.quantile(0.95)
    return stats[_STAT_COLUMNS].sort_values("total_ns", ascending=False).reset_index()


def constructs(trace: Trace, by: str = "construct") -> pd.DataFrame:
    """Count, total, mean, p50, p95 and max time per construct and kind (``by=
    "construct"``), or per construct, kind and source location (``by="source"``).

    Constructs: ``parallel region`` (team or league), ``implicit task`` (initial
    or implicit), ``work`` (by the runtime's kind: loop_static, single_executor,
    ...), ``sync`` (barrier kinds, taskwait, taskgroup: from entry to exit,
    including tasks run while waiting), ``mutex wait`` and ``mutex hold`` (lock,
    critical, ordered ...), ``masked``, ``task`` (time an explicit task ran,
    all its pieces).  Sorted by total time.
    """
    if by not in ("construct", "source"):
        raise ValueError(f"by={by!r}: use 'construct' or 'source'")
    inst = construct_instances(trace)
    if by == "construct":
        return _group_stats(inst, ["construct", "kind"])
    # Symbolise each (pid, code address) once, then give every instance its row's.
    places = inst[["pid", "codeptr"]]
    which = places.groupby(["pid", "codeptr"], sort=False).ngroup().to_numpy()
    first = np.zeros(which.max() + 1 if len(which) else 0, dtype=np.int64)
    first[which] = np.arange(len(which))
    unique = places.iloc[first].reset_index(drop=True)
    code = unique["codeptr"].to_numpy()
    src = trace._with_source(unique.assign(codeptr=pd.arrays.IntegerArray(code, code == 0)))
    keys = ["construct", "kind", "pid", "location"]
    located = inst.assign(location=pd.Categorical(src["location"].to_numpy(object)[which]))
    stats = _group_stats(located, keys)
    func = pd.DataFrame({"pid": src["pid"], "location": src["location"],
                         "function": src["function"]}).drop_duplicates(["pid", "location"])
    out = stats.merge(func, on=["pid", "location"], how="left")
    return out[[*keys, "function", *_STAT_COLUMNS]]


# ---- load imbalance per parallel region --------------------------------------------------------


def region_threads(trace: Trace) -> pd.DataFrame:
    """One row per implicit task of a parallel region: pid, parallel_id, thread,
    thread_num, begin_ns, end_ns, duration_ns, complete (False: cut off by the
    trace window, see intervals) and its time in each state (busy_ns,
    barrier_wait_ns, sync_wait_ns, lock_wait_ns, idle_ns)."""
    _require_states(trace, "imbalance()")
    it = _in_regions(intervals(trace, "implicit"))
    out = it[["pid", "parallel_id", "thread", "thread_num", "begin_ns", "end_ns",
              "duration_ns", "complete"]].reset_index(drop=True)
    times = _overlap(thread_states(trace), _thread_key(out["pid"], out["thread"]),
                     _int(out["begin_ns"]), _int(out["end_ns"]))
    for i, s in enumerate(STATES):
        out[f"{s}_ns"] = times[:, i]
    out["idle_ns"] = out["duration_ns"] - times.sum(axis=1)
    return out


def imbalance(trace: Trace, per_thread: bool = False) -> pd.DataFrame:
    """Load imbalance per parallel region: ``imbalance`` = max over mean busy time
    of the region's implicit tasks (1.0: perfectly balanced; with n threads at most
    n), ``lost_ns`` = what the threads waited for the busiest one (sum of max - busy),
    ``barrier_wait_share`` = time waiting at barriers over the implicit tasks' time,
    ``wait_share`` the same for every wait (barriers, taskwait/taskgroup, locks).
    Busy time excludes waits but includes the tasks a thread ran while waiting.

    A region the trace window cut off is listed with ``complete`` False and
    measured up to the end of the trace; one whose implicit tasks all lie
    outside the window has no figures (NaN).  ``per_thread=True``: one row per
    implicit task (region_threads), with its busy and waiting shares.
    """
    rt = trace._cached("metrics.region_threads", lambda df: region_threads(trace))
    if per_thread:
        dur = rt["duration_ns"].where(rt["duration_ns"] > 0)
        return rt.assign(busy_share=rt["busy_ns"] / dur,
                         barrier_wait_share=rt["barrier_wait_ns"] / dur)
    waiting = rt["barrier_wait_ns"] + rt["sync_wait_ns"] + rt["lock_wait_ns"]
    per = rt.assign(_waiting=waiting).groupby(["pid", "parallel_id"], sort=False).agg(
        threads=("thread", "size"), busy_mean_ns=("busy_ns", "mean"),
        busy_min_ns=("busy_ns", "min"), busy_max_ns=("busy_ns", "max"),
        busy_total_ns=("busy_ns", "sum"), tasks_ns=("duration_ns", "sum"),
        barrier_wait_ns=("barrier_wait_ns", "sum"), wait_ns=("_waiting", "sum"))
    paired = trace._paired("regions")
    regions = trace._with_source(intervals(trace, "regions")[[
        "pid", "parallel_id", "begin_ns", "duration_ns", "requested_team_size", "codeptr",
        "complete"]])
    out = regions.merge(per.reset_index(), on=["pid", "parallel_id"], how="left")
    mean = out["busy_mean_ns"].where(out["busy_mean_ns"] > 0)
    tasks = out["tasks_ns"].where(out["tasks_ns"] > 0)
    out["imbalance"] = out["busy_max_ns"] / mean
    out["lost_ns"] = out["threads"] * out["busy_max_ns"] - out["busy_total_ns"]
    out["barrier_wait_share"] = out["barrier_wait_ns"] / tasks
    out["wait_share"] = out["wait_ns"] / tasks
    out.attrs.update(unmatched_begins=paired.unmatched_begins,
                     unmatched_ends=paired.unmatched_ends)
    return out.drop(columns=["busy_total_ns", "tasks_ns"])


# ---- tasks -------------------------------------------------------------------------------------


def _decade_edges(lo: float, hi: float) -> np.ndarray:
    first = math.floor(math.log10(max(lo, 1)))
    last = max(math.floor(math.log10(max(hi, 1))) + 1, first + 1)
    return 10.0 ** np.arange(first, last + 1)


def _duration_label(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:g} {unit}"
    return f"{ns:g} ns"


def task_runs(trace: Trace) -> pd.DataFrame:
    """One row per explicit task that ran: pid, task_id, run_ns (time it was the
    task its thread ran, all pieces), wait_ns (of that, waiting in its own taskwait
    or taskgroup) and busy_ns (the rest: its own work)."""
    require(trace, "task_granularity()", ["task_schedule"], ["task_create"])
    keys = ["pid", "task_id"]
    runs = _pieces(trace).groupby(keys, sort=False)["duration_ns"].sum().rename("run_ns")
    tw = task_waits(trace)
    waited = (tw["end_ns"] - tw["begin_ns"]).groupby([tw["pid"], tw["task_id"]]).sum()
    out = runs.reset_index()
    idx = pd.MultiIndex.from_arrays([_int(out["pid"]), _int(out["task_id"], np.uint64)])
    out["wait_ns"] = waited.reindex(idx).fillna(0).to_numpy(np.int64)
    out["busy_ns"] = out["run_ns"] - out["wait_ns"]
    return out


def creation_cost(trace: Trace) -> float:
    """Estimated time to create one explicit task: the median gap between two
    task_create events of one thread and parent with nothing else recorded between
    them (back-to-back creations).  NaN when no such pair exists."""
    ev, pids = trace.events, trace.pids
    at = np.flatnonzero(ev["event"] == EVENT_CODES["task_create"])
    at = at[at > 0]
    # events holds each thread's records in order: the one before a record of
    # the same thread is that thread's previous record.
    before = at - 1
    pair = ((ev["event"][before] == EVENT_CODES["task_create"])
            & (ev["thread"][before] == ev["thread"][at]) & (pids[before] == pids[at])
            & (ev["u64a"][before] == ev["u64a"][at]))  # the parent task (other_task_id)
    gaps = ev["time_ns"][at[pair]] - ev["time_ns"][before[pair]]
    return float(np.median(gaps)) if len(gaps) else float("nan")


def task_granularity(trace: Trace, bins: int | Sequence[float] | None = None) -> pd.DataFrame:
    """Histogram of explicit task durations (each task's own work: busy_ns of
    task_runs) on log bins: lo_ns, hi_ns, label, tasks, task_share, busy_ns,
    time_share.  ``bins``: None (one bin per decade), a number of log-spaced bins
    over the range, or the edges in nanoseconds.

    ``attrs``: ``tasks`` (created), ``ran``, ``outside_bins``, ``median_busy_ns``,
    ``create_ns`` (the estimated cost of creating one task, see creation_cost) and
    ``creation_overhead_share`` = tasks x create_ns / (that + the tasks' busy time):
    near 1 when tasks are too small for what creating them costs.
    """
    busy = task_runs(trace)["busy_ns"].to_numpy(np.float64)
    if bins is None or isinstance(bins, (int, np.integer)):
        lo, hi = (float(busy.min()), float(busy.max())) if len(busy) else (1.0, 1.0)
        if not len(busy):
            edges = np.empty(1)  # no tasks, no bins
        elif bins is None:
            edges = _decade_edges(lo, hi)
        else:
            edges = np.geomspace(max(lo, 1), max(hi, lo + 1, 2) * (1 + 1e-9), int(bins) + 1)
    else:
        edges = np.asarray(bins, dtype=np.float64)
        if edges.ndim != 1 or len(edges) < 2 or (np.diff(edges) <= 0).any():
            raise ValueError("bins: give increasing edges in nanoseconds (at least two)")
    which = np.searchsorted(edges, busy, side="right") - 1
    inside = (which >= 0) & (which < len(edges) - 1)
    counts = np.bincount(which[inside], minlength=len(edges) - 1)
    times = np.bincount(which[inside], weights=busy[inside], minlength=len(edges) - 1)
    total = busy.sum()
    out = pd.DataFrame({
        "lo_ns": edges[:-1], "hi_ns": edges[1:],
        "label": [f"{_duration_label(a)} - {_duration_label(b)}"
                  for a, b in zip(edges[:-1], edges[1:])],
        "tasks": counts,
        "task_share": counts / len(busy) if len(busy) else np.zeros(len(counts)),
        "busy_ns": times,
        "time_share": times / total if total > 0 else np.zeros(len(counts)),
    })
    create = creation_cost(trace)
    n_created = len(_created(trace))
    overhead = n_created * create
    out.attrs.update({
        "tasks": n_created, "ran": len(busy), "outside_bins": int((~inside).sum()),
        "median_busy_ns": float(np.median(busy)) if len(busy) else float("nan"),
        "create_ns": create,
        "creation_overhead_share": float(overhead / (overhead + total))
        if n_created and not math.isnan(create) else float("nan"),
    })
    return out


# ---- locks and critical sections -----------------------------------------------------------


def lock_contention(trace: Trace) -> pd.DataFrame:
    """Per lock, critical section or ordered region (pid, kind, wait_id): acquisitions,
    threads, wait time (total, mean, p95, max), hold time (total, mean, p50, max), the
    thread that held it longest and its share of the hold time, and the source
    location where it was most often taken.  Sorted by total wait."""
    require(trace, "lock_contention()", ["mutex_acquire", "mutex_acquired", "mutex_released"],
            ["mutex_acquire", "mutex_acquired", "mutex_released"])
    m = _mutex(trace)
    keys = ["pid", "kind", "wait_id"]
    columns = [*keys, "acquisitions", "threads", "wait_total_ns", "wait_mean_ns", "wait_p95_ns",
               "wait_max_ns", "hold_total_ns", "hold_mean_ns", "hold_p50_ns", "hold_max_ns",
               "top_holder",
               "top_holder_share", "codeptr", "function", "location"]
    if m.empty:
        return pd.DataFrame(columns=columns)
    m = m.assign(kind=m["kind"].astype(str))
    g = m.groupby(keys, sort=False)
    out = g.agg(acquisitions=("thread", "size"), threads=("thread", "nunique"),
                wait_total_ns=("wait_ns", "sum"), wait_mean_ns=("wait_ns", "mean"),
                wait_max_ns=("wait_ns", "max"), hold_total_ns=("hold_ns", "sum"),
                hold_mean_ns=("hold_ns", "mean"), hold_max_ns=("hold_ns", "max"))
    out["wait_p95_ns"] = g["wait_ns"].quantile(0.95)
    out["hold_p50_ns"] = g["hold_ns"].median()
    held = m.groupby([*keys, "thread"], sort=False)["hold_ns"].sum().reset_index()
    held = held.sort_values("hold_ns", ascending=False, kind="stable").drop_duplicates(keys)
    held = held.set_index(keys)
    out["top_holder"] = held["thread"]
    out["top_holder_share"] = held["hold_ns"] / out["hold_total_ns"].where(
        out["hold_total_ns"] > 0)
    sites = m.groupby([*keys, "codeptr"], sort=False).size().rename("n").reset_index()
    sites = sites.sort_values("n", ascending=False, kind="stable").drop_duplicates(keys)
    out["codeptr"] = sites.set_index(keys)["codeptr"]
    out = trace._with_source(out.reset_index())
    return out[columns].sort_values("wait_total_ns", ascending=False).reset_index(drop=True)


# ---- thread utilisation over time ----------------------------------------------------------


def _nice(ns: float) -> int:
    """1, 2 or 5 times a power of ten, at least ns (and at least 1)."""
    if ns <= 1:
        return 1
    p = 10 ** math.floor(math.log10(ns))
    return int(next(m * p for m in (1, 2, 5, 10) if m * p >= ns))


def utilisation(trace: Trace, bin_ns: int | None = None) -> pd.DataFrame:
    """Per thread and time bin: busy_ns, barrier_wait_ns, sync_wait_ns, lock_wait_ns,
    idle_ns (they add up to the bin's length), with the bin's begin_ns/end_ns.
    ``bin_ns``: the bin width (default: the span over about 100 bins, rounded)."""
    _require_states(trace, "utilisation()")
    columns = ["pid", "thread", "begin_ns", "end_ns", *STATE_COLUMNS]
    t = trace.events["time_ns"]
    if not len(t):
        return pd.DataFrame(columns=columns)
    start, stop = int(t.min()), int(t.max())
    span = max(stop - start, 1)
    if bin_ns is not None and bin_ns <= 0:
        raise ValueError(f"bin_ns={bin_ns}: give a positive width in nanoseconds")
    width = int(bin_ns) if bin_ns else _nice(span / 100)
    n_bins = max(math.ceil(span / width), 1)
    edges = np.minimum(start + width * np.arange(n_bins + 1, dtype=np.int64), start + span)
    threads = _threads(trace)
    cum = _cumulative(thread_states(trace), len(STATES), np.repeat(threads, n_bins + 1),
                      np.tile(edges, len(threads)))
    per = np.diff(cum.reshape(len(threads), n_bins + 1, len(STATES)), axis=1)
    per = per.reshape(-1, len(STATES))
    pid, thread = _key_pid_thread(np.repeat(threads, n_bins))
    out = pd.DataFrame({"pid": pid, "thread": thread,
                        "begin_ns": np.tile(edges[:-1], len(threads)),
                        "end_ns": np.tile(edges[1:], len(threads))})
    for i, s in enumerate(STATES):
        out[f"{s}_ns"] = per[:, i]
    out["idle_ns"] = (out["end_ns"] - out["begin_ns"]) - per.sum(axis=1)
    return out


def thread_totals(trace: Trace) -> pd.DataFrame:
    """Per thread over the whole trace: time in each state (the columns of
    utilisation) and busy_share, the busy part of the time not idle."""
    _require_states(trace, "thread_totals()")
    threads = _threads(trace)
    seg = thread_states(trace)
    row = np.searchsorted(threads, seg.group)
    totals = np.zeros((len(threads), len(STATES)), dtype=np.int64)
    np.add.at(totals, (row, seg.state), seg.end - seg.begin)
    pid, thread = _key_pid_thread(threads)
    out = pd.DataFrame({"pid": pid, "thread": thread})
    for i, s in enumerate(STATES):
        out[f"{s}_ns"] = totals[:, i]
    t = trace.events["time_ns"]
    out["idle_ns"] = (int(t.max() - t.min()) if len(t) else 0) - totals.sum(axis=1)
    working = totals.sum(axis=1)
    out["busy_share"] = out["busy_ns"] / np.where(working > 0, working, np.nan)
    return out


# ---- the summary ---------------------------------------------------------------------------------


def format_ns(ns: float) -> str:
    """A duration in readable units (ns, us, ms, s)."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    a = abs(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if a >= scale:
            return f"{ns / scale:,.3g} {unit}" if a < 100 * scale else f"{ns / scale:,.0f} {unit}"
    return f"{ns:,.0f} ns"


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy for display: *_ns columns as durations, shares as percentages."""
    out = frame.copy()
    for c in out.columns:
        name = str(c)
        if name.endswith("_ns"):
            out[c] = [format_ns(v) for v in out[c].astype("float64")]
            out = out.rename(columns={c: name[:-3]})
        elif name.endswith("share"):
            out[c] = [("-" if pd.isna(v) else f"{100 * v:.1f} %") for v in out[c]]
        elif name == "imbalance":
            out[c] = [("-" if pd.isna(v) else f"{v:.2f}x") for v in out[c]]
    return out


@dataclass
class Summary:
    """The main answers about a trace, as tables (pandas DataFrames, times in ns).

    ``overview``: what the trace holds; ``constructs`` and ``sources``: time per
    construct and per source location; ``threads``: each thread's time per state;
    ``regions``: the most imbalanced parallel regions (by time lost); ``tasks``:
    task durations (histogram, creation overhead in attrs); ``locks``: lock and
    critical section contention.  A table is None where the trace has nothing of
    the kind; ``notes`` says what could not be computed and why.
    """

    overview: dict
    constructs: pd.DataFrame
    sources: pd.DataFrame
    threads: pd.DataFrame | None
    regions: pd.DataFrame | None
    tasks: pd.DataFrame | None
    locks: pd.DataFrame | None
    notes: list[str] = field(default_factory=list)

    def sections(self) -> list[tuple[str, pd.DataFrame]]:
        """(title, display table) per section, in order."""
        out = [("Time per construct", self.constructs), ("Time per source location",
                                                         self.sources)]
        if self.threads is not None:
            out.append(("Threads: time per state", self.threads))
        if self.regions is not None:
            out.append(("Parallel regions: load imbalance (most time lost first)",
                        self.regions))
        if self.tasks is not None:
            out.append(("Explicit tasks: duration histogram", self.tasks))
        if self.locks is not None:
            out.append(("Locks and critical sections: contention", self.locks))
        return [(title, readable(t)) for title, t in out]

    def headline(self) -> list[str]:
        """The overview and the short answers, one line each."""
        o = self.overview
        lines = [f"{o['events']:,} events over {format_ns(o['span_ns'])}, "
                 f"{o['processes']} process(es), {o['threads']} thread(s); records written "
                 f"{o['written']:,}, dropped {o['dropped']:,}"]
        if self.threads is not None and len(self.threads):
            t = self.threads[STATE_COLUMNS].sum()
            inside = t.sum() - t["idle_ns"]
            if inside > 0:
                lines.append(f"threads were busy {100 * t['busy_ns'] / inside:.1f} % of the "
                             f"time they spent in parallel regions and tasks; waiting at "
                             f"barriers {100 * t['barrier_wait_ns'] / inside:.1f} %, in "
                             f"taskwait/taskgroup {100 * t['sync_wait_ns'] / inside:.1f} %, "
                             f"for locks {100 * t['lock_wait_ns'] / inside:.1f} %")
        if self.regions is not None and len(self.regions):
            r = self.regions.iloc[0]
            lines.append(f"most time lost to imbalance: region at {_where(r['location'])} "
                         f"({r['imbalance']:.2f}x, {format_ns(r['lost_ns'])} lost)")
        if self.tasks is not None:
            a = self.tasks.attrs
            lines.append(f"{a['tasks']:,} explicit tasks, median duration "
                         f"{format_ns(a['median_busy_ns'])}; creating one costs about "
                         f"{format_ns(a['create_ns'])} "
                         f"({_percent(a['creation_overhead_share'])} of task time)")
        if self.locks is not None and len(self.locks):
            k = self.locks.iloc[0]
            lines.append(f"most waited-for {k['kind']}: {_where(k['location'])} "
                         f"({format_ns(k['wait_total_ns'])} waited over "
                         f"{k['acquisitions']:,} acquisitions)")
        return lines

    def __str__(self) -> str:
        parts = ["ompt-py summary", *("  " + line for line in self.headline())]
        parts += ["  note: " + n for n in self.notes]
        for title, table in self.sections():
            body = table.to_string(index=False) if len(table) else "(none)"
            parts += ["", title, *("  " + line for line in body.splitlines())]
        return "\n".join(parts) + "\n"

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self.headline())
        notes = "".join(f"<li><i>{html.escape(n)}</i></li>" for n in self.notes)
        body = [f"<div class='ompt-py-summary'><h3>ompt-py summary</h3><ul>{items}{notes}</ul>"]
        for title, table in self.sections():
            body.append(f"<h4>{html.escape(title)}</h4>")
            body.append(table.to_html(index=False, border=0) if len(table) else "<p>(none)</p>")
        body.append("</div>")
        return "\n".join(body)


def _where(location: object) -> str:
    return location if isinstance(location, str) else "(no source location)"


def _percent(share: float) -> str:
    return "-" if share is None or math.isnan(share) else f"{100 * share:.1f} %"


def overview(trace: Trace) -> dict:
    """Counts of the trace: events, processes, threads, span, written, dropped."""
    t = trace.events["time_ns"]
    threads = len(_threads(trace))
    return {"events": len(t), "processes": len(trace.meta.get("processes", [])),
            "threads": threads, "span_ns": int(t.max() - t.min()) if len(t) else 0,
            "written": trace.written, "dropped": trace.dropped}


def summary(trace: Trace, top: int = 10) -> Summary:
    """The main analyses together (see Summary); ``top`` rows per ranked table."""
    notes = []

    def attempt(build: Callable[[], pd.DataFrame | None]) -> pd.DataFrame | None:
        try:
            return build()
        except MissingEventsError as e:
            notes.append(str(e))
            return None

    present = present_events(trace)
    threads = attempt(lambda: thread_totals(trace))
    regions = attempt(lambda: imbalance(trace).sort_values("lost_ns", ascending=False)
                      .head(top)[["location", "begin_ns", "duration_ns", "complete", "threads",
                                  "imbalance", "lost_ns", "barrier_wait_share", "wait_share"]]
                      if "parallel_begin" in present else None)
    tasks = attempt(lambda: task_granularity(trace) if "task_create" in present else None)
    if tasks is not None:
        attrs = tasks.attrs
        tasks = tasks[tasks["tasks"] > 0].drop(columns=["lo_ns", "hi_ns"])
        tasks.attrs = attrs
    locks = attempt(lambda: lock_contention(trace).head(top)[
        ["kind", "location", "acquisitions", "threads", "wait_total_ns", "wait_p95_ns",
         "hold_total_ns", "hold_mean_ns", "top_holder", "top_holder_share"]]
        if present & {"mutex_acquire", "mutex_acquired"} else None)
    sources = constructs(trace, by="source")
    sources = sources[sources["construct"] != "implicit task"].head(top)
    for name, iv in (("parallel", trace._paired("regions")),
                     ("implicit_task", trace._paired("implicit")),
                     ("sync_region_wait", trace._paired("waits"))):
        if iv.unmatched_begins or iv.unmatched_ends:
            notes.append(f"{name}: {iv.unmatched_begins} begins and {iv.unmatched_ends} ends "
                         "whose other half lies outside the trace window: not in the construct "
                         "times; begun intervals count up to the end of the trace in the "
                         "thread states and imbalance")
    return Summary(overview(trace), constructs(trace), sources.drop(columns="pid"), threads,
                   regions, tasks, locks, notes)


def processes(trace: Trace) -> pd.DataFrame:
    """One row per process: pid, command, threads, written, dropped, runtime."""
    rows = []
    for p in trace.meta.get("processes", []):
        runtime = ", ".join(sorted({r["version"] for r in p.get("runtimes", [])})) or "-"
        rows.append({"pid": p["pid"], "command": " ".join(p.get("argv", []))[:80],
                     "threads": len(p.get("threads", [])), "written": p.get("written", 0),
                     "dropped": p.get("dropped", 0), "runtime": runtime})
    return pd.DataFrame(rows, columns=["pid", "command", "threads", "written", "dropped",
                                       "runtime"])


def html_overview(trace: Trace, top: int = 5, max_events: int = 2_000_000) -> str:
    """HTML for Trace._repr_html_: processes, counts, span and the top constructs
    (computed only up to ``max_events`` events, to keep display quick)."""
    if trace.recording:
        return "<b>ompt_py.Trace</b>: recording (stop() it to see the events)"
    o = overview(trace)
    parts = [f"<b>ompt_py.Trace</b>: {o['events']:,} events over {format_ns(o['span_ns'])}, "
             f"{o['processes']} process(es), {o['threads']} thread(s), records written "
             f"{o['written']:,}, dropped {o['dropped']:,}",
             processes(trace).to_html(index=False, border=0)]
    if 0 < o["events"] <= max_events:
        parts.append(f"<p>Top constructs by total time (t.summary() for more):</p>"
                     f"{readable(constructs(trace).head(top)).to_html(index=False, border=0)}")
    elif o["events"]:
        parts.append("<p>t.summary(), t.constructs(), t.plot_timeline(): the answers.</p>")
    return "\n".join(parts)
