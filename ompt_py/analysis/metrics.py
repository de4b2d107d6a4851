"""Answers from a trace: where the time goes, which parallel region is imbalanced,
whether tasks are too small, who waits for which lock, how busy each thread was
over time.

Every analysis returns a pandas DataFrame (times in nanoseconds), computed with
numpy and pandas over whole columns, from the paired tables (``tables``) and
the thread states (``states``).  With Python stacks, constructs(),
imbalance() and lock_contention() also answer per Python location
(``by="python"``): the line of the user's code that started the construct,
or the construct around it (python_stacks_at).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ..records import (
    CONSTRUCTS,
    EVENT_CODES,
    IMPLICIT_KINDS,
    LOOP_SCHEDULES,
    PARALLEL_KINDS,
    TASK_INITIAL,
    python_stack_ids,
)
from ..units import TEXT, format_ns, text, text_columns
from . import pystacks, tables
from .cache import per_trace
from .columns import TABLES, conform
from .pairing import (
    find,
    first_rows,
    first_seen_groups,
    group_ids,
    group_quantiles,
    grouper,
    innermost,
    kept_groups,
    key_groups,
)
from .states import (
    STATE_COLUMNS,
    THREAD_STATES,
    closed,
    cumulative,
    in_regions,
    key_pid_thread,
    overlap,
    region_tasks,
    require,
    require_states,
    task_waits,
    thread_key,
    thread_states,
    threads,
    to_int,
)

if TYPE_CHECKING:
    from ..trace import Trace

_STAT_COLUMNS = ["count", "total_ns", "mean_ns", "p50_ns", "p95_ns", "max_ns"]
#: The Python location of rows without a Python stack, where rows are grouped by it.
NO_PYTHON = "(no Python stack)"


def _check_by(by: str, allowed: tuple[str, ...]) -> None:
    if by not in allowed:
        raise ValueError(f"by={by!r}: use " + ", ".join(f"'{a}'" for a in allowed[:-1])
                         + f" or '{allowed[-1]}'")


# ---- the Python code around what ran ---------------------------------------------------------


@per_trace
def has_python_stacks(trace: Trace) -> bool:
    """Whether a construct of the trace has a Python stack of its own (a process's
    stacks in ``meta`` may all belong to other traces of it; without any, no
    record has one, and the records need no look)."""
    if not any((p.get("python") or {}).get("stacks") for p in trace.meta.get("processes", [])):
        return False
    return bool((python_stack_ids(trace.events) > 0).any())


@per_trace
def _python_intervals(trace: Trace) -> tuple[np.ndarray, ...]:
    """The intervals that carry a Python stack, per thread (key, begin, end,
    py_stack): parallel regions on the thread that started them, the implicit
    tasks of regions, the pieces of explicit tasks, region markers."""
    if not has_python_stacks(trace):
        return tuple(np.empty(0, np.int64) for _ in range(4))
    regions = tables.parallel_regions(trace)
    implicit = in_regions(tables.implicit_intervals(trace).table)[
        ["pid", "thread", "parallel_id", "begin_ns", "end_ns"]].merge(
        regions[["pid", "parallel_id", "py_stack"]], on=["pid", "parallel_id"])
    pieces = tables.task_pieces(trace)[["pid", "thread", "task_id", "begin_ns", "end_ns"]]
    pieces = pieces.merge(tables.tasks(trace)[["pid", "task_id", "py_stack"]].drop_duplicates(
        ["pid", "task_id"]), on=["pid", "task_id"])
    user = tables.user_regions(trace)
    parts = [regions.rename(columns={"encountering_thread": "thread"}), implicit, pieces, user]
    both = pd.concat([p[["pid", "thread", "begin_ns", "end_ns", "py_stack"]] for p in parts],
                     ignore_index=True)
    both = both[both["py_stack"].notna()]
    return (thread_key(both["pid"], both["thread"]), to_int(both["begin_ns"]),
            to_int(both["end_ns"]), to_int(both["py_stack"]))


def python_stacks_at(trace: Trace, pid: np.ndarray, thread: np.ndarray,
                     time: np.ndarray) -> pd.Series:
    """The Python stack (``py_stack``) behind what a thread ran at a time: that
    of the innermost construct with a stack around it on that thread (a
    parallel region on the thread that started it, an implicit task of a
    region, a piece of an explicit task, a region marker); <NA> for none."""
    key, begin, end, stack = _python_intervals(trace)
    if not len(key):  # no construct has a stack: nothing to look for
        return pd.Series(pd.arrays.IntegerArray(np.zeros(len(time), np.int64),
                                                np.ones(len(time), bool)))
    at = innermost(key, begin, end, thread_key(pid, thread), np.asarray(time, np.int64))
    return pd.Series(pd.arrays.IntegerArray(stack[np.maximum(at, 0)], at < 0))


def python_locations_at(trace: Trace, pid: np.ndarray, thread: np.ndarray,
                        time: np.ndarray) -> pd.Series:
    """The ``py_location`` of python_stacks_at (units.TEXT, NaN for no stack), a
    row for each time."""
    stack = python_stacks_at(trace, pid, thread, time)
    names = pystacks.locations(trace)
    if names.empty or not stack.notna().any():
        return no_python_locations(len(stack))
    found = pd.DataFrame({"pid": np.asarray(pid, np.int64), "py_stack": stack}).merge(
        names[["pid", "py_stack", "py_location"]], on=["pid", "py_stack"], how="left")
    return found["py_location"]


def no_python_locations(rows: int) -> pd.Series:
    """python_locations_at's answer where no row has a Python stack."""
    return pd.Series(index=range(rows), dtype=TEXT)


def union_ns(group: np.ndarray, begin: np.ndarray, end: np.ndarray, groups: int) -> np.ndarray:
    """Per group (0 .. groups - 1), the time its intervals cover, overlaps once."""
    order = np.lexsort((begin, group))
    g, b, e = group[order], begin[order], end[order]
    reach = pd.Series(e).groupby(g).cummax().to_numpy()
    # Where an interval starts past everything before it in its group, a new block.
    new = np.ones(len(g), bool)
    new[1:] = (g[1:] != g[:-1]) | (b[1:] > reach[:-1])
    block = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    covered = pd.Series(reach).groupby(block).max().to_numpy() - b[first]
    return np.bincount(g[first], weights=covered, minlength=groups)


def _python_time(trace: Trace) -> pd.DataFrame:
    """Per pid and py_location: py_time_ns, the time the constructs it started
    took on the thread that started them (parallel regions and region markers
    from begin to end, explicit tasks created outside any region while they
    ran; overlaps once)."""
    regions = tables.parallel_regions(trace).rename(columns={"encountering_thread": "thread"})
    user = tables.user_regions(trace)
    tasks = tables.tasks(trace)
    own_tasks = tasks.loc[~tasks["py_inherited"] & tasks["py_location"].notna(),
                          ["pid", "task_id", "py_location"]]
    pieces = tables.task_pieces(trace).merge(own_tasks, on=["pid", "task_id"])
    parts = [t.loc[~t["py_inherited"] & t["py_location"].notna(),
                   ["pid", "thread", "begin_ns", "end_ns", "py_location"]]
             for t in (regions, user)]
    own = pd.concat([*parts, pieces[["pid", "thread", "begin_ns", "end_ns", "py_location"]]],
                    ignore_index=True)
    if own.empty:
        return pd.DataFrame({"pid": pd.Series(dtype=np.int64),
                             "py_location": pd.Series(dtype=TEXT),
                             "py_time_ns": pd.Series(dtype=np.float64)})
    place, places = pd.factorize(pd.MultiIndex.from_frame(own[["pid", "py_location"]]))
    lane, lanes = pd.factorize(pd.MultiIndex.from_arrays([place, to_int(own["thread"])]))
    covered = union_ns(lane, to_int(own["begin_ns"]), to_int(own["end_ns"]), len(lanes))
    total = np.bincount(lanes.get_level_values(0), weights=covered, minlength=len(places))
    return pd.DataFrame({"pid": places.get_level_values(0).to_numpy(np.int64),
                         "py_location": text(places.get_level_values(1).to_numpy(object)),
                         "py_time_ns": total})


# ---- per construct and per source location ---------------------------------------------------


@per_trace
def construct_instances(trace: Trace) -> pd.DataFrame:
    """One row per construct instance: construct, kind (normalised), kind_raw (the
    runtime's), pid, codeptr, duration_ns and, where the trace has Python stacks
    (has_python_stacks: what constructs(by="python") looks up), thread (int32)
    and begin_ns; the rows of a construct together (per_construct).  Instances
    without a code address of their own (implicit tasks, a worker's implicit
    barrier) take their region's."""
    regions = tables.region_intervals(trace).table
    implicit = tables.implicit_intervals(trace).table
    sync = tables.sync_intervals(trace).table
    work = tables.work_intervals(trace).table
    masked = tables.masked_intervals(trace).table
    mutex = tables.mutex(trace)
    pieces = tables.task_pieces(trace)
    created = tables.created(trace)
    # Each construct's kinds, table and columns (duration, begin, codeptr,
    # parallel_id), and which rows of the table (None: all): the columns are
    # made once their lengths are known, each part written into them in turn.
    parts: list[tuple[str, pd.Categorical, pd.Categorical, pd.DataFrame, np.ndarray | None,
                      tuple[str, str, str | None, str | None]]] = []

    def add(construct: str, kind: pd.Categorical, t: pd.DataFrame, duration: str, begin: str,
            codeptr: str | None = None, parallel_id: str | None = None,
            raw: pd.Categorical | None = None, rows: np.ndarray | None = None) -> None:
        parts.append((construct, kind, kind if raw is None else raw, t, rows,
                      (duration, begin, codeptr, parallel_id)))

    def one(kind: str, n: int) -> pd.Categorical:
        return pd.Categorical.from_codes(np.zeros(n, np.int8), [kind])

    def named(values: pd.Series) -> pd.Categorical:
        cat = values.astype("category").array
        return pd.Categorical.from_codes(cat.codes, list(cat.categories))  # one category dtype

    add(CONSTRUCTS["parallel_begin"], pd.Categorical.from_codes(
        regions["league"].to_numpy(np.int8), list(PARALLEL_KINDS)),
        regions, "duration_ns", "begin_ns", "codeptr", "parallel_id")
    add(CONSTRUCTS["implicit_task"], pd.Categorical.from_codes(
        (to_int(implicit["flags"]) & TASK_INITIAL).astype(np.int8), list(IMPLICIT_KINDS)),
        implicit, "duration_ns", "begin_ns", None, "parallel_id")
    add(CONSTRUCTS["work"], named(work["kind"]), work, "duration_ns", "begin_ns", "codeptr",
        "parallel_id", named(work["kind_raw"]))
    add(CONSTRUCTS["sync_region"], named(sync["kind"]), sync, "duration_ns", "begin_ns",
        "codeptr", "parallel_id", named(sync["kind_raw"]))
    if len(mutex):
        waited, held = mutex["wait_ns"].notna().to_numpy(), mutex["hold_ns"].notna().to_numpy()
        add(CONSTRUCTS["mutex_acquire"], named(mutex["kind"][waited]), mutex, "wait_ns",
            "acquire_ns", "codeptr", rows=waited)
        add(CONSTRUCTS["mutex_acquired"], named(mutex["kind"][held]), mutex, "hold_ns",
            "acquired_ns", "codeptr", rows=held)
    add(CONSTRUCTS["masked"], one("masked", len(masked)), masked, "duration_ns", "begin_ns",
        "codeptr", "parallel_id")
    if len(pieces):
        runs = pieces.groupby(["pid", "task_id"], sort=False).agg(
            thread=("thread", "first"), begin_ns=("begin_ns", "min"),
            duration_ns=("duration_ns", "sum")).reset_index()
        runs["codeptr"] = created["codeptr"].array.take(  # the task's first creation's
            find(created[["pid", "task_id"]], runs[["pid", "task_id"]]), allow_fill=True)
        add(CONSTRUCTS["task_schedule"], one("explicit", len(runs)), runs, "duration_ns",
            "begin_ns", "codeptr")
    user = tables.user_regions(trace)
    if len(user):  # ompt_py.region / omptpy_region.h: the kind is the region's name
        add(CONSTRUCTS["region"], named(user["name"]), user, "duration_ns", "begin_ns",
            "codeptr")
    sizes = [len(p[1]) for p in parts]
    n = sum(sizes)
    places = has_python_stacks(trace)  # where each ran: only the Python stacks' look-up reads it
    columns = {"pid": np.empty(n, np.int64),
               **({"thread": np.empty(n, np.int32)} if places else {}),
               "codeptr": np.empty(n, np.uint64),
               **({"begin_ns": np.empty(n, np.int64)} if places else {}),
               "duration_ns": np.empty(n, np.float64)}
    region_code: pd.Series | None = None  # each region's code address, by pid and parallel_id
    at = 0
    for (_, _, _, t, rows, (duration, begin, codeptr, parallel_id)), size in zip(parts, sizes):
        into = slice(at, at + size)

        def put(name: str, v: np.ndarray, rows: np.ndarray | None = rows,
                into: slice = into) -> None:
            """``v`` (at ``rows``) into the column ``name``, without a copy of the rows."""
            if rows is None:
                columns[name][into] = v
            else:
                np.compress(rows, v, out=columns[name][into])

        put("pid", to_int(t["pid"]))
        if places:
            put("thread", to_int(t["thread"]) if "thread" in t else np.full(len(t), -1))
            put("begin_ns", to_int(t[begin]))
        put("duration_ns", t[duration].to_numpy(np.float64, na_value=np.nan))
        code = columns["codeptr"][into]
        put("codeptr", to_int(t[codeptr], np.uint64) if codeptr is not None else
            np.zeros(len(t), np.uint64))
        if parallel_id is not None and len(regions):  # no code address of its own: the region's
            ids = to_int(t[parallel_id], np.uint64)
            ids = ids if rows is None else ids[rows]
            no_code = (code == 0) & (ids != 0)
            if no_code.any():
                if region_code is None:
                    region_code = pd.Series(to_int(regions["codeptr"], np.uint64),
                                            index=pd.MultiIndex.from_arrays(
                                                [to_int(regions["pid"]),
                                                 to_int(regions["parallel_id"], np.uint64)]))
                    region_code = region_code[~region_code.index.duplicated()]
                idx = pd.MultiIndex.from_arrays([columns["pid"][into][no_code], ids[no_code]])
                code[no_code] = region_code.reindex(idx).fillna(0).to_numpy(np.uint64)
        at += size
    return pd.DataFrame({
        "construct": pd.Categorical.from_codes(np.repeat(np.arange(len(parts), dtype=np.int8),
                                                         sizes), [p[0] for p in parts]),
        "kind": union_categoricals([p[1] for p in parts]),
        "kind_raw": union_categoricals([p[2] for p in parts]),
        **columns,
    }, copy=False)


def per_construct(frame: pd.DataFrame) -> list[pd.DataFrame]:
    """``frame`` (construct_instances' rows in its order, with any columns) a
    construct at a time: views of its rows.  No group of the analyses spans two
    constructs, so grouped a construct at a time, in order, they give the groups
    of the whole in the same order, for a fraction of the memory."""
    codes = np.asarray(frame["construct"].array.codes)
    bounds = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1], True]) if len(codes) else []
    parts = [frame.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return parts or [frame]


def _group_stats(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """_STAT_COLUMNS per group of ``keys`` of ``frame`` (per_construct's; missing
    values a key of their own), the most total time first.  Grouped by one number
    per group (key_groups), the groups' keys put back after."""
    parts = []
    for part in per_construct(frame):
        codes, index = key_groups(part, keys)
        g = part["duration_ns"].groupby(codes, observed=True, sort=False)
        stats = g.agg(["count", "sum", "mean", "max"]).rename(
            columns={"sum": "total_ns", "mean": "mean_ns", "max": "max_ns"})
        del g
        stats["p50_ns"], stats["p95_ns"] = group_quantiles(
            part["duration_ns"].to_numpy(), codes.codes, len(index), (0.5, 0.95))
        stats.index = index
        parts.append(stats[_STAT_COLUMNS])
    stats = pd.concat(parts) if len(parts) > 1 else parts[0]
    return stats.sort_values("total_ns", ascending=False).reset_index()


def _located(trace: Trace, inst: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``inst`` with the source location of its code address (a categorical
    ``location``), and the function of each (pid, location)."""
    # Symbolise each (pid, code address) once, then give every instance its row's.
    places = inst[["pid", "codeptr"]]
    which = first_seen_groups([places["pid"], places["codeptr"]])
    unique = places.iloc[first_rows(which)].reset_index(drop=True)
    code = unique["codeptr"].to_numpy()
    src = tables.with_source(trace, unique.assign(codeptr=pd.arrays.IntegerArray(code, code == 0)))
    places = pd.Categorical(src["location"])  # each place's, then each row's
    located = inst.assign(location=pd.Categorical.from_codes(places.codes[which],
                                                             dtype=places.dtype))
    func = pd.DataFrame({"pid": src["pid"], "location": src["location"],
                         "function": src["function"], "name": src["name"]}
                        ).drop_duplicates(["pid", "location"])
    return located, func


def constructs(trace: Trace, by: str = "construct", raw: bool = False) -> pd.DataFrame:
    """Count, total, mean, p50, p95 and max time per construct and kind (``by=
    "construct"``), per construct, kind and source location (``by="source"``),
    or per Python location (``by="python"``).  Times in integer nanoseconds.

    Constructs: ``parallel region`` (team or league), ``implicit task`` (initial
    or implicit), ``work`` (by the runtime's kind: loop_static, single_executor,
    ...), ``sync`` (barrier kinds, taskwait, taskgroup: from entry to exit,
    including tasks run while waiting), ``mutex wait`` and ``mutex hold`` (lock,
    critical, ordered ...), ``masked``, ``task`` (time an explicit task ran,
    all its pieces), ``user region`` (by name).  Sorted by total time.
    The names are records.CONSTRUCTS; kinds are normalised (``loop``,
    ``barrier_implicit``: one vocabulary for every libomp version), the
    runtime's own names (``loop_static``, ``barrier_implicit_parallel``) with
    ``raw=True``.

    ``by="python"``: where the time goes in the Python code, one row per pid,
    ``py_location`` (the line of the user's code that started the construct,
    or the construct around it: see python_stacks_at), construct, kind and
    source ``location`` (with its function); ``py_time_ns`` is the time of the
    location as a whole: what the constructs it started took on the thread
    that started them (parallel regions and region markers from begin to end,
    explicit tasks created outside any region while they ran; overlaps once),
    NaN for the rows without a Python stack, whose py_location is
    ``"(no Python stack)"``.  Sorted by py_time_ns, then by total time.
    ``function`` is the symbolizer's name, ``name`` the readable one (Trace.symbolize).
    """
    _check_by(by, ("construct", "source", "python"))
    inst = construct_instances(trace)
    inst = inst.drop(columns="kind").rename(columns={"kind_raw": "kind"}) if raw else \
        inst.drop(columns="kind_raw")
    if by == "construct":
        return conform(_group_stats(inst, ["construct", "kind"]), "constructs")
    located, func = _located(trace, inst)
    if by == "source":
        keys = ["construct", "kind", "pid", "location"]
        out = _group_stats(located, keys).merge(func, on=["pid", "location"], how="left")
        return conform(out[[*keys, "function", "name", *_STAT_COLUMNS]], "constructs(source)")
    where = (python_locations_at(trace, inst["pid"].to_numpy(), inst["thread"].to_numpy(),
                                 inst["begin_ns"].to_numpy()) if "thread" in inst else
             no_python_locations(len(inst)))
    located["py_location"] = pd.Categorical(where.fillna(NO_PYTHON))
    keys = ["pid", "py_location", "construct", "kind", "location"]
    out = _text_locations(_group_stats(located, keys).merge(func, on=["pid", "location"],
                                                            how="left"))
    out = out.merge(_python_time(trace), on=["pid", "py_location"], how="left")
    out["py_time_ns"] = out["py_time_ns"].where(out["py_location"] == NO_PYTHON,
                                                out["py_time_ns"].fillna(0))
    return conform(python_order(out)[list(TABLES["constructs(python)"].columns)],
                   "constructs(python)")


def _text_locations(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its locations, grouped by as categoricals, as units.TEXT (the
    dtype of every table's text)."""
    return text_columns(table, ["py_location", "location", "function", "name"])


def python_order(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of constructs(by="python") in its order: by py_time_ns (the most
    first, no Python stack last), pid, py_location, then by total time."""
    return table.sort_values(["py_time_ns", "pid", "py_location", "total_ns"],
                             ascending=[False, True, True, False], na_position="last",
                             kind="stable").reset_index(drop=True)


# ---- load imbalance per parallel region --------------------------------------------------------


@per_trace
def region_threads(trace: Trace) -> pd.DataFrame:
    """One row per implicit task of a parallel region: pid, parallel_id, thread,
    thread_num, begin_ns, end_ns, duration_ns, complete (False: cut off by the
    trace window, see intervals) and its time in each state (busy_ns,
    barrier_wait_ns, sync_wait_ns, lock_wait_ns, idle_ns)."""
    require_states(trace, "imbalance()")
    it = region_tasks(trace)
    out = it[["pid", "parallel_id", "thread", "thread_num", "begin_ns", "end_ns",
              "duration_ns", "complete"]].reset_index(drop=True)
    times = overlap(thread_states(trace), thread_key(out["pid"], out["thread"]),
                     to_int(out["begin_ns"]), to_int(out["end_ns"]))
    for i, s in enumerate(THREAD_STATES):
        out[f"{s}_ns"] = times[:, i]
    out["idle_ns"] = out["duration_ns"] - times.sum(axis=1)
    return out


@per_trace
def region_rows(trace: Trace) -> np.ndarray:
    """The row of tables.parallel_regions() (the same as linked_regions') of each
    row of region_threads() (the implicit tasks of regions: region_tasks(trace), in
    that order); -1 for none."""
    it = region_tasks(trace)
    regions = tables.linked_regions(trace).table
    if regions.empty or it.empty:
        return np.full(len(it), -1, np.intp)
    keys = ["pid", "parallel_id"]
    return find(regions[keys], it[keys])


@per_trace
def region_sites(trace: Trace) -> tuple[np.ndarray, pd.DataFrame]:
    """The code behind each parallel region: a row of a table of the distinct
    (pid, py_stack, codeptr) of the regions (py_stack 0: none), with their
    py_location and location (as parallel_regions() has them), and that table."""
    regions = tables.linked_regions(trace).table
    columns = ["pid", "py_stack", "codeptr"]
    keys = pd.DataFrame({"pid": regions["pid"].to_numpy(np.int64),
                         "py_stack": regions["py_stack"].to_numpy(np.int64, na_value=0),
                         "codeptr": regions["codeptr"].to_numpy(np.uint64, na_value=0)})
    _, first, row = np.unique(group_ids(keys)[0], return_index=True, return_inverse=True)
    sites = keys.iloc[first].reset_index(drop=True)
    names = pystacks.locations(trace)[["pid", "py_stack", "py_location"]]
    sites = sites.merge(names, on=["pid", "py_stack"], how="left")
    sites = tables.with_source(trace, sites)
    return np.asarray(row, np.intp), sites[[*columns, "py_location", "location"]]


def imbalance(trace: Trace, per_thread: bool = False, by: str = "region") -> pd.DataFrame:
    """Load imbalance per parallel region: ``imbalance`` = max over mean busy time
    of the region's implicit tasks (1.0: perfectly balanced; with n threads at most
    n), ``lost_ns`` = what the threads waited for the busiest one (sum of max - busy),
    ``barrier_wait_share`` = time waiting at barriers over the implicit tasks' time,
    ``wait_share`` the same for every wait (barriers, taskwait/taskgroup, locks).
    Busy time excludes waits but includes the tasks a thread ran while waiting.
    Each region has its source ``location`` and the Python code that started it
    (py_stack, py_location, py_inherited: see Trace.parallel_regions).

    A region the trace window cut off is listed with ``complete`` False and
    measured up to the end of the trace; one whose implicit tasks all lie
    outside the window has no figures (NaN).  ``per_thread=True``: one row per
    implicit task (region_threads), with its busy and waiting shares.

    ``by="source"``: one row per pid and source location, ``by="python"``: per
    pid, py_location (``"(no Python stack)"`` for regions without one) and
    source location, with the regions' count, largest team (threads), total
    duration_ns, mean and largest imbalance (imbalance, imbalance_max), total
    lost_ns, the shares of their implicit tasks' time, busy_ns (the threads'
    busy time), fork_join_ns and fork_join_share (of duration_ns) and the
    most common schedule; most time lost first.

    ``fork_join_ns``: a region's duration less the longest time one of its
    threads was busy or waiting in taskwait/taskgroup or for a lock there: what
    no thread spent on the region's work (starting and ending the team, and
    waiting for it); ``schedule``: of the region's worksharing loops (records.
    LOOP_SCHEDULES: static, dynamic, guided, other; unknown on a runtime that
    does not tell, libomp before 19; mixed; NaN: no loop).  The text columns
    (function, location, py_location, schedule ...) are of units.TEXT.
    """
    _check_by(by, ("region", "source", "python"))
    if per_thread and by != "region":
        raise ValueError(f"per_thread=True gives a row per implicit task: use by='region', "
                         f"not by={by!r}")
    rt = region_threads(trace)
    if per_thread:
        dur = rt["duration_ns"].where(rt["duration_ns"] > 0)
        return conform(rt.assign(busy_share=rt["busy_ns"] / dur,
                                 barrier_wait_share=rt["barrier_wait_ns"] / dur),
                       "imbalance(per_thread)")
    waiting = rt["barrier_wait_ns"] + rt["sync_wait_ns"] + rt["lock_wait_ns"]
    active = rt["busy_ns"] + rt["sync_wait_ns"] + rt["lock_wait_ns"]
    per = rt.assign(_waiting=waiting, _active=active).groupby(
        ["pid", "parallel_id"], sort=False).agg(
        threads=("thread", "size"), busy_mean_ns=("busy_ns", "mean"),
        busy_min_ns=("busy_ns", "min"), busy_max_ns=("busy_ns", "max"),
        busy_total_ns=("busy_ns", "sum"), tasks_ns=("duration_ns", "sum"),
        barrier_wait_ns=("barrier_wait_ns", "sum"), wait_ns=("_waiting", "sum"),
        active_max_ns=("_active", "max"))
    paired = tables.region_intervals(trace)
    regions = closed(trace, tables.region_intervals)[[
        "pid", "parallel_id", "begin_ns", "duration_ns", "requested_team_size", "codeptr",
        "complete", "py_stack"]]
    # Nested regions inherit the stack of their parent (parallel_regions, closed ones).
    parents = regions[["pid", "parallel_id"]].merge(
        tables.linked_regions(trace).table[["pid", "parallel_id", "py_stack"]].drop_duplicates(
            ["pid", "parallel_id"]), on=["pid", "parallel_id"], how="left")
    regions = pystacks.with_python(trace, regions.reset_index(drop=True),
                                   around=parents["py_stack"].astype("Int64"))
    regions = tables.with_source(trace, regions)
    out = regions.merge(per.reset_index(), on=["pid", "parallel_id"], how="left")
    mean = out["busy_mean_ns"].where(out["busy_mean_ns"] > 0)
    tasks = out["tasks_ns"].where(out["tasks_ns"] > 0)
    out["imbalance"] = out["busy_max_ns"] / mean
    out["lost_ns"] = out["threads"] * out["busy_max_ns"] - out["busy_total_ns"]
    out["barrier_wait_share"] = out["barrier_wait_ns"] / tasks
    out["wait_share"] = out["wait_ns"] / tasks
    # What no thread spent on the region's work: starting the team, ending it (the
    # thread longest at work, or waiting in taskwait or for a lock, is the least a
    # region of this team could take).
    out["fork_join_ns"] = (out["duration_ns"] - out.pop("active_max_ns")).clip(lower=0)
    out["schedule"] = _schedules(trace, out[["pid", "parallel_id"]]).array
    if by != "region":
        return conform(_imbalance_by(out, by), f"imbalance({by})")
    out.attrs.update(unmatched_begins=paired.unmatched_begins,
                     unmatched_ends=paired.unmatched_ends)
    columns = ["pid", "parallel_id", "begin_ns", "duration_ns", "requested_team_size",
               "codeptr", "complete", "function", "location", "py_stack", "py_location",
               "py_inherited"]
    return conform(out[[*columns, *(c for c in out.columns
                                    if c not in columns and c not in ("busy_total_ns",
                                                                      "tasks_ns"))]],
                   "imbalance")


def _schedules(trace: Trace, regions: pd.DataFrame) -> pd.Series:
    """The schedule of each region's worksharing loops (see imbalance; units.TEXT,
    NaN for a region without loops), a row for each of ``regions``."""
    work = tables.work_intervals(trace).table
    loops = work[work["kind_raw"].astype(str).isin(list(LOOP_SCHEDULES))]
    if loops.empty:
        return pd.Series(index=range(len(regions)), dtype=TEXT)
    kinds = loops.assign(schedule=loops["kind_raw"].astype(str).map(LOOP_SCHEDULES)).groupby(
        ["pid", "parallel_id"], sort=False)["schedule"].agg(
        lambda s: s.iat[0] if s.nunique() == 1 else "mixed")
    found = regions.merge(kinds.reset_index(), on=["pid", "parallel_id"], how="left")
    return found["schedule"].astype(TEXT)


def _most_common(values: pd.Series) -> object:
    counts = values.dropna().value_counts()
    return counts.index[0] if len(counts) else None


def _imbalance_by(regions: pd.DataFrame, by: str) -> pd.DataFrame:
    """imbalance() per region, summed per source or Python location."""
    keys = ["pid", "location"] if by == "source" else ["pid", "py_location", "location"]
    if by == "python":
        regions = regions.assign(py_location=regions["py_location"].fillna(NO_PYTHON))
    g = regions.groupby(keys, sort=False, dropna=False)
    out = g.agg(function=("function", "first"), regions=("parallel_id", "size"),
                threads=("threads", "max"), duration_ns=("duration_ns", "sum"),
                imbalance=("imbalance", "mean"), imbalance_max=("imbalance", "max"),
                lost_ns=("lost_ns", "sum"), barrier_wait_ns=("barrier_wait_ns", "sum"),
                wait_ns=("wait_ns", "sum"), tasks_ns=("tasks_ns", "sum"),
                busy_ns=("busy_total_ns", "sum"), fork_join_ns=("fork_join_ns", "sum"),
                schedule=("schedule", _most_common)).reset_index()
    tasks = out["tasks_ns"].where(out["tasks_ns"] > 0)
    out["barrier_wait_share"] = out["barrier_wait_ns"] / tasks
    out["wait_share"] = out["wait_ns"] / tasks
    out["fork_join_share"] = out["fork_join_ns"] / out["duration_ns"].where(
        out["duration_ns"] > 0)
    schedule = out.pop("schedule").astype(TEXT)  # _most_common's None where no loop
    out = out.drop(columns=["barrier_wait_ns", "wait_ns", "tasks_ns"]).assign(schedule=schedule)
    return out.sort_values("lost_ns", ascending=False, kind="stable").reset_index(drop=True)


# ---- tasks -------------------------------------------------------------------------------------


#: The task histogram's default bins: log-spaced, at least TASK_BINS over the
#: tasks' range, between 3 and 20 a decade, on edges 10^(k/n) ns rounded to whole
#: nanoseconds (so every decade starts a bin).
TASK_BINS, _PER_DECADE = 12, (3, 20)


def log_edges(lo: float, hi: float) -> np.ndarray:
    """Bin edges (integer ns) for durations from ``lo`` to ``hi``: see TASK_BINS."""
    lo, hi = max(lo, 1.0), max(hi, 1.0)
    decades = max(math.log10(hi) - math.log10(lo), 1e-9)
    per = min(max(math.ceil(TASK_BINS / decades), _PER_DECADE[0]), _PER_DECADE[1])
    first = math.floor(math.log10(lo) * per)
    last = math.floor(math.log10(hi) * per) + 1
    edges = np.unique(np.round(10.0 ** (np.arange(first, last + 1) / per)))
    return edges if edges[-1] > hi else np.append(edges, math.floor(hi) + 1)


def task_runs(trace: Trace) -> pd.DataFrame:
    """One row per explicit task that ran: pid, task_id, run_ns (time it was the
    task its thread ran, all pieces), wait_ns (of that, waiting in its own taskwait
    or taskgroup) and busy_ns (the rest: its own work)."""
    require(trace, "task_granularity()", ["task_schedule"], ["task_create"])
    keys = ["pid", "task_id"]
    runs = tables.task_pieces(trace).groupby(keys, sort=False)["duration_ns"].sum()
    runs = runs.rename("run_ns")
    tw = task_waits(trace)
    waited = (tw["end_ns"] - tw["begin_ns"]).groupby([tw["pid"], tw["task_id"]]).sum()
    out = runs.reset_index()
    at = find(waited.index.to_frame(index=False), out[keys])  # -1: no wait, the 0 appended
    out["wait_ns"] = np.append(waited.to_numpy(np.int64), 0)[at]
    out["busy_ns"] = out["run_ns"] - out["wait_ns"]
    return out


def _creation_gaps(trace: Trace) -> pd.DataFrame:
    """pid, codeptr and gap_ns of each task_create that follows another of the same
    thread and parent with nothing else recorded between them (back-to-back
    creations: the gap is what creating the second cost)."""
    ev = trace.events
    at = tables.rows_of(trace, "task_create")
    at = at[at > 0]
    # events holds each thread's records in order: the one before a record of
    # the same thread is that thread's previous record.
    before = at - 1
    pair = ((ev["event"][before] == EVENT_CODES["task_create"])
            & (ev["thread"][before] == ev["thread"][at])
            & (trace.pids_at(before) == trace.pids_at(at))
            & (ev["u64a"][before] == ev["u64a"][at]))  # the parent task (other_task_id)
    return pd.DataFrame({"pid": trace.pids_at(at[pair]).astype(np.int64),
                         "codeptr": ev["codeptr"][at[pair]],
                         "gap_ns": ev["time_ns"][at[pair]] - ev["time_ns"][before[pair]]})


def creation_cost(trace: Trace) -> float:
    """Estimated time to create one explicit task: the median gap between two
    task_create events of one thread and parent with nothing else recorded between
    them (back-to-back creations).  NaN when no such pair exists."""
    return _median_gap(_creation_gaps(trace))


def _median_gap(gaps: pd.DataFrame) -> float:
    """creation_cost of the gaps of _creation_gaps."""
    return float(np.median(gaps["gap_ns"])) if len(gaps) else float("nan")


def task_sites(trace: Trace, by: str = "source") -> pd.DataFrame:
    """Explicit tasks per creation site: per pid and source location (``by=
    "source"``), or per pid, Python location (``"(no Python stack)"`` for none)
    and source location (``by="python"``): function, tasks (created), ran,
    busy_ns (their own work, task_runs), median_busy_ns, create_ns (the median
    back-to-back creation gap at the site, see creation_cost; the trace's where
    the site has none) and creation_overhead_share (tasks x create_ns over that
    plus busy_ns).  Most busy time first."""
    _check_by(by, ("source", "python"))
    keys = ["pid", "location"] if by == "source" else ["pid", "py_location", "location"]
    made = tables.created(trace)[["pid", "task_id", "codeptr"]]
    if by == "python":
        where = tables.task_stacks(trace)["py_location"]
        made = made.assign(py_location=where.fillna(NO_PYTHON))
    # Each task's busy time (NaN for a task that did not run) by positions (find:
    # a merge's hash tables of the keys are sized for the rows); with no rows on a
    # side, merged (its keys' dtypes are the table's, as they always were).
    runs = task_runs(trace)[["pid", "task_id", "busy_ns"]]
    if len(made) and len(runs):
        ran = find(runs[["pid", "task_id"]], made[["pid", "task_id"]])
        made = made.assign(busy_ns=runs["busy_ns"].array.take(ran, allow_fill=True))
        del ran
    else:
        made = made.merge(runs, on=["pid", "task_id"], how="left")
    made = tables.with_source(trace, made)
    # The tasks' table and its grouping dropped before the gaps are made (a held
    # groupby keeps its group indices).
    out = made.groupby(keys, sort=False, dropna=False).agg(
        function=("function", "first"), tasks=("task_id", "size"), ran=("busy_ns", "count"),
        busy_ns=("busy_ns", "sum"), median_busy_ns=("busy_ns", "median")).reset_index()
    del made, runs
    gaps = tables.with_source(trace, _creation_gaps(trace))
    site = gaps.groupby(["pid", "location"], sort=False)["gap_ns"].median().rename("create_ns")
    out = out.merge(site.reset_index(), on=["pid", "location"], how="left")
    out["create_ns"] = out["create_ns"].fillna(_median_gap(gaps))
    overhead = out["tasks"] * out["create_ns"]
    out["creation_overhead_share"] = overhead / (overhead + out["busy_ns"]).where(
        overhead + out["busy_ns"] > 0)
    out = out.sort_values("busy_ns", ascending=False, kind="stable").reset_index(drop=True)
    return conform(out, "task_sites")


def task_edges(lo: float, hi: float, bins: int | Sequence[float] | None) -> np.ndarray:
    """The edges (ns) of task_granularity's histogram for tasks whose busy times go
    from ``lo`` to ``hi`` (NaN: no task) and its ``bins`` (see task_granularity)."""
    if bins is None or isinstance(bins, (int, np.integer)):
        if math.isnan(lo):
            return np.empty(1)  # no tasks, no bins
        if bins is None:
            return log_edges(lo, hi)
        return np.unique(np.round(np.geomspace(max(lo, 1), max(hi, lo + 1, 2) + 1,
                                               int(bins) + 1)))
    edges = np.round(np.asarray(bins, dtype=np.float64))
    if edges.ndim != 1 or len(edges) < 2 or (np.diff(edges) <= 0).any():
        raise ValueError("bins: give increasing edges in nanoseconds (at least two, "
                         "at least 1 ns apart)")
    return edges


def task_counts(busy: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per bin of ``edges``: the tasks of these busy times and their busy time (ns,
    float); and how many fall outside every bin."""
    which = np.searchsorted(edges, busy, side="right") - 1
    inside = (which >= 0) & (which < len(edges) - 1)
    counts = np.bincount(which[inside], minlength=len(edges) - 1)
    times = np.bincount(which[inside], weights=busy[inside], minlength=len(edges) - 1)
    return counts, times, int((~inside).sum())


def task_table(edges: np.ndarray, counts: np.ndarray, times: np.ndarray, ran: int,
               total: float) -> pd.DataFrame:
    """task_granularity's table of the tasks ``counts`` and their busy ``times`` per
    bin of ``edges``, of ``ran`` tasks that ran for ``total`` ns in all."""
    return conform(pd.DataFrame({
        "lo_ns": edges[:-1].astype(np.int64), "hi_ns": edges[1:].astype(np.int64),
        "label": text([f"{format_ns(a)} - {format_ns(b)}"
                       for a, b in zip(edges[:-1], edges[1:])]),
        "tasks": counts,
        "task_share": counts / ran if ran else np.zeros(len(counts)),
        "busy_ns": np.round(times).astype(np.int64),
        "time_share": times / total if total > 0 else np.zeros(len(counts)),
    }), "task_granularity")


def overhead_share(created: int, create_ns: float, busy_ns: float) -> float:
    """task_granularity's creation_overhead_share: created x create_ns over that plus
    the tasks' busy time (NaN without tasks or without a creation cost)."""
    overhead = created * create_ns
    return float(overhead / (overhead + busy_ns)) if created and not math.isnan(create_ns) \
        else float("nan")


def task_granularity(trace: Trace, bins: int | Sequence[float] | None = None) -> pd.DataFrame:
    """Histogram of explicit task durations (each task's own work: busy_ns of
    task_runs) on log bins: lo_ns, hi_ns, label, tasks, task_share, busy_ns,
    time_share.  ``bins``: None (log-spaced bins, at least TASK_BINS over the
    tasks' range, see log_edges), a number of log-spaced bins over the range,
    or the edges in nanoseconds (rounded to whole nanoseconds).

    ``attrs``: ``tasks`` (created), ``ran``, ``outside_bins``, ``median_busy_ns``,
    ``create_ns`` (the estimated cost of creating one task, see creation_cost) and
    ``creation_overhead_share`` = tasks x create_ns / (that + the tasks' busy time):
    near 1 when tasks are too small for what creating them costs.
    """
    busy = task_runs(trace)["busy_ns"].to_numpy(np.float64)
    edges = task_edges(float(busy.min()) if len(busy) else math.nan,
                       float(busy.max()) if len(busy) else math.nan, bins)
    counts, times, outside = task_counts(busy, edges)
    out = task_table(edges, counts, times, len(busy), float(busy.sum()))
    create = creation_cost(trace)
    n_created = len(tables.created(trace))
    out.attrs.update({
        "tasks": n_created, "ran": len(busy), "outside_bins": outside,
        "median_busy_ns": float(np.median(busy)) if len(busy) else float("nan"),
        "create_ns": create,
        "creation_overhead_share": overhead_share(n_created, create, float(busy.sum())),
    })
    return out


# ---- locks and critical sections -----------------------------------------------------------


def lock_contention(trace: Trace, by: str = "lock") -> pd.DataFrame:
    """Per lock, critical section or ordered region (pid, kind, wait_id): acquisitions,
    threads, wait time (total, mean, p95, max), hold time (total, mean, p50, max), the
    thread that held it longest and its share of the hold time, the source
    location where it was most often taken (codeptr, function, location) and
    the Python code behind that most often (``py_location``: of the construct
    around the acquisition, see python_stacks_at; NaN for none).  Sorted by
    total wait.

    ``by="source"``: one row per lock and source location (codeptr) where it was
    taken; ``by="python"``: per lock, ``py_location`` (``"(no Python stack)"``
    for acquisitions without one) and source location."""
    _check_by(by, ("lock", "source", "python"))
    require(trace, "lock_contention()", ["mutex_acquire", "mutex_acquired", "mutex_released"],
            ["mutex_acquire", "mutex_acquired", "mutex_released"])
    m = tables.mutex(trace)
    lock = ["pid", "kind", "wait_id"]
    keys = lock + {"lock": [], "source": ["codeptr"], "python": ["py_location", "codeptr"]}[by]
    name = "lock_contention(python)" if by == "python" else "lock_contention"
    if m.empty:
        return conform(pd.DataFrame(), name)
    where = python_locations_at(trace, m["pid"].to_numpy(), m["thread"].to_numpy(),
                                m["acquire_ns"].fillna(m["acquired_ns"]).to_numpy(np.int64))
    if by == "python":
        where = where.fillna(NO_PYTHON)
    m = m.assign(py_location=where.array)
    # Grouped by one number per lock (first_seen_groups: groupby's hash tables of
    # each key are sized for the rows), the locks' keys put back after.
    m, group = kept_groups(m, keys)
    m = m.assign(_lock=grouper(group))
    # (Each grouping made where it is used: a groupby keeps its group indices and
    # sort orders while it is held.)
    out = m.groupby("_lock", sort=False, observed=True).agg(
        acquisitions=("thread", "size"), wait_total_ns=("wait_ns", "sum"),
        wait_mean_ns=("wait_ns", "mean"), wait_max_ns=("wait_ns", "max"),
        hold_total_ns=("hold_ns", "sum"), hold_mean_ns=("hold_ns", "mean"),
        hold_max_ns=("hold_ns", "max"))
    out["wait_p95_ns"] = m.groupby("_lock", sort=False, observed=True)["wait_ns"].quantile(0.95)
    out["hold_p50_ns"] = m.groupby("_lock", sort=False, observed=True)["hold_ns"].median()
    top_holder(m, ["_lock"], "hold_ns", out)
    for most in ("codeptr", "py_location"):  # where it was taken most often
        if most not in keys:
            sites = m.groupby(["_lock", most], sort=False, observed=True).size().rename(
                "n").reset_index()
            sites = sites.sort_values("n", ascending=False, kind="stable").drop_duplicates(
                "_lock")
            out[most] = sites.set_index("_lock")[most]
    out.index = pd.MultiIndex.from_frame(m[keys].iloc[first_rows(group)].reset_index(drop=True))
    out = tables.with_source(trace, out.reset_index())[list(TABLES[name].columns)]
    return conform(out.sort_values("wait_total_ns", ascending=False).reset_index(drop=True),
                   name)


# ---- thread utilisation over time ----------------------------------------------------------


def top_holder(m: pd.DataFrame, keys: list[str], hold: str, out: pd.DataFrame) -> None:
    """``out``'s threads (per lock of ``keys``: how many threads took it),
    top_holder (the thread that held it longest, by the sum of ``m[hold]``) and
    top_holder_share (of out's hold_total_ns)."""
    # Per lock and thread (first_seen_groups, as for lock_contention's locks).
    m, pair = kept_groups(m, [*keys, "thread"])
    sums = m[hold].groupby(grouper(pair), sort=False, observed=True).sum()
    held = m[[*keys, "thread"]].iloc[first_rows(pair)].reset_index(drop=True)
    out["threads"] = held.groupby(keys, sort=False, observed=True).size()
    held[hold] = sums.to_numpy()
    held = held.sort_values(hold, ascending=False, kind="stable").drop_duplicates(keys)
    held = held.set_index(keys)
    out["top_holder"] = held["thread"]
    out["top_holder_share"] = held[hold] / out["hold_total_ns"].where(out["hold_total_ns"] > 0)


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
    require_states(trace, "utilisation()")
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
    keys = threads(trace)
    cum = cumulative(thread_states(trace), len(THREAD_STATES), np.repeat(keys, n_bins + 1),
                     np.tile(edges, len(keys)))
    per = np.diff(cum.reshape(len(keys), n_bins + 1, len(THREAD_STATES)), axis=1)
    per = per.reshape(-1, len(THREAD_STATES))
    pid, thread = key_pid_thread(np.repeat(keys, n_bins))
    out = pd.DataFrame({"pid": pid, "thread": thread,
                        "begin_ns": np.tile(edges[:-1], len(keys)),
                        "end_ns": np.tile(edges[1:], len(keys))})
    for i, s in enumerate(THREAD_STATES):
        out[f"{s}_ns"] = per[:, i]
    out["idle_ns"] = (out["end_ns"] - out["begin_ns"]) - per.sum(axis=1)
    return out
