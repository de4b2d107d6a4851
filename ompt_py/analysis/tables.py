"""The tables of a trace: one row per construct instance, paired from its events.

``Trace.parallel_regions()``, ``implicit_tasks()``, ``tasks()``, ``work()``,
``sync()``, ``mutex()``, ``task_graph()``, ``user_regions()`` and ``mpi_calls()`` are these
functions.  Each is made from the trace's events frame (``frame``), once per
trace (``cache.per_trace``); the begins and ends of every kind of construct
are paired at once, in one pass over the records (``paired``:
``pairing.pair_events``, as the slice exports pair them).
Begins or ends that could not be paired (outside the trace window) are counted
in the table's ``attrs``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..meta import interned_strings, ranks
from ..records import (
    EVENT_CODES,
    MPI_BYTES_UNKNOWN,
    MPI_CALL_KINDS,
    MPI_CALLS,
    PARALLEL_INVOKER_PROGRAM,
    PARALLEL_INVOKER_RUNTIME,
    PARALLEL_LEAGUE,
    SCOPE_BEGIN,
    Census,
    Names,
    census,
    event_groups,
    of_events,
    python_stack_ids,
    time_order,
)
from ..units import text, text_columns
from . import pairing, pystacks, symbols
from .cache import per_trace
from .columns import conform
from .pairing import Intervals, clamp_to_region, column, find, pair

if TYPE_CHECKING:
    from ..trace import Trace

_BASE = ["pid", "thread"]
#: The columns with_source() adds, text (units.TEXT: NaN where not known).
SOURCE_COLUMNS = ["function", "name", "location"]


@per_trace
def order(trace: Trace) -> np.ndarray:
    """The records' positions in time order (records.time_order): the rows of
    ``trace.to_pandas()``, the positions the pairings give.  Kept as int32 while
    they fit (half the memory, held as long as the trace)."""
    at = time_order(trace.events["time_ns"])
    return at.astype(np.int32) if len(at) <= np.iinfo(np.int32).max else at


def select(trace: Trace, at: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """``columns`` of the frame's rows at positions ``at`` (of ``order``), made
    from the records for those rows alone (Trace.frame_at): no table needs the
    whole frame."""
    return trace.frame_at(order(trace)[at], columns)


@per_trace
def kinds(trace: Trace) -> np.ndarray:
    """The records' event codes in time order (``order``)."""
    return trace.events["event"][order(trace)]


@per_trace
def census_of(trace: Trace) -> Census:
    """The records.census of the trace's records: what each event number counts,
    the thread keys and the rows of the rare events, found in one pass, once."""
    pid = trace.single_pid
    return census(trace.events, None if pid is not None else trace.pids, pid or 0)


def counts_by_number(trace: Trace) -> np.ndarray:
    """The records of each event number (census_of: counted once)."""
    return census_of(trace).counts


def rows_of_groups(trace: Trace, groups: Iterable[Iterable[str]]) -> list[np.ndarray]:
    """The rows of each group of events, in the records' order: those census_of
    keeps, where it keeps those of each event of the group (the rare events':
    records.RARE_ROWS), the other groups' found together in one pass
    (records.event_groups)."""
    found = census_of(trace)
    codes = [sorted({EVENT_CODES[e] for e in group}) for group in groups]
    rare = [all(k in found.rare or not found.counts[k] for k in c) for c in codes]
    scanned = iter(event_groups(trace.events, [c for c, r in zip(codes, rare) if not r],
                                found.counts))
    out = []
    for c, r in zip(codes, rare):
        if not r:
            out.append(next(scanned))
            continue
        parts = [found.rare[k] for k in c if found.counts[k]]
        out.append(np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64))
    return out


def rows_of(trace: Trace, *events: str) -> np.ndarray:
    """The rows of these events in the records' order (rows_of_groups)."""
    return rows_of_groups(trace, [events])[0]


def event_rows(trace: Trace, events: list[str], columns: list[str]) -> pd.DataFrame:
    """``columns`` of the rows of ``events``, in time order."""
    at = np.flatnonzero(of_events(kinds(trace), [EVENT_CODES[e] for e in events]))
    return select(trace, at, columns)


# ---- pairing the events of a frame ---------------------------------------------------------


#: What the tables look up as they pair (pair_events): each wait's sync region.
_LOOKUPS = {"waits' region": pairing.WAITS_REGION}


@per_trace
def paired(trace: Trace) -> pairing.Paired:
    """Every pairing of the tables (pairing.PAIRINGS) and _LOOKUPS, made in one
    pass over the records: positions in time order (``order``)."""
    return _pair(trace, list(pairing.PAIRINGS))


def _pair(trace: Trace, names: list[str]) -> pairing.Paired:
    """The pairings ``names`` of pairing.PAIRINGS, and the _LOOKUPS among them, in
    one pass over the records."""
    return pairing.pair_events(trace.events,
                               None if trace.single_pid is not None else trace.pids,
                               order(trace), names, lookups={
                                   k: lk for k, lk in _LOOKUPS.items()
                                   if lk.of in names and lk.into in names})


def _pairs(trace: Trace, name: str) -> pairing.Pairs:
    """The pairs of a pairing of ``paired``.  Each table made of a pairing is kept
    (cache.per_trace, or made by a function that is), so its pairs leave
    ``paired`` here, not to be held as long as the trace; a pairing asked for
    again is paired anew, alone."""
    pairs = paired(trace).pairs
    return pairs.pop(name) if name in pairs else _pair(trace, [name]).pairs[name]


def _found(trace: Trace, name: str) -> np.ndarray:
    """What a lookup of _LOOKUPS found (as _pairs, it leaves ``paired``; asked for
    again, its pairings are paired anew, the same pairs in the same order)."""
    found = paired(trace).found
    if name in found:
        return found.pop(name)
    lk = _LOOKUPS[name]
    return _pair(trace, [lk.of, lk.into]).found[name]


def _scoped(trace: Trace, name: str, columns: list[str]) -> Intervals:
    """The intervals of a pairing of ``paired`` (``_pairs``): its begins' ``columns``."""
    ev, at = trace.events, order(trace)
    return pairing.intervals(lambda rows, cols: select(trace, rows, cols),
                             lambda rows: ev["time_ns"][at[rows]], _pairs(trace, name), columns)


@per_trace
def region_intervals(trace: Trace) -> Intervals:
    """parallel_begin/parallel_end pairs, one per region."""
    out = _scoped(trace, "parallel", ["pid", "parallel_id", "thread", "task_id", "codeptr",
                                      "team_size", "flags", "py_stack"])
    t = out.table.rename(columns={"team_size": "requested_team_size"})
    # Who started the region: the program's own code (gcc-built code on libomp
    # calls GOMP_parallel) or the runtime on its behalf (clang-built code).
    flags = t["flags"].fillna(0).astype(np.int64)
    t["invoker"] = text(np.where(flags & PARALLEL_INVOKER_PROGRAM, "program",
                                 np.where(flags & PARALLEL_INVOKER_RUNTIME, "runtime",
                                          "unknown")), index=t.index)
    t["league"] = (flags & PARALLEL_LEAGUE) != 0  # a teams construct's league, not a team
    out.table = t
    return out


@per_trace
def implicit_intervals(trace: Trace) -> Intervals:
    """Implicit tasks, their late ends clamped to their region's end."""
    out = _scoped(trace, "implicit_task",
                  ["pid", "task_id", "thread", "parallel_id", "team_size", "thread_num", "flags"])
    clamp_to_region(out, region_intervals(trace).table)
    return out


@per_trace
def wait_intervals(trace: Trace) -> Intervals:
    """Time threads spent waiting in barriers, taskwait and taskgroup (sync_region_wait)."""
    out = _scoped(trace, "sync_region_wait",
                  [*_BASE, "kind_raw", "kind", "parallel_id", "task_id"])
    clamp_to_region(out, region_intervals(trace).table)
    return out


@per_trace
def sync_intervals(trace: Trace) -> Intervals:
    """Barriers, taskwait, taskgroup per thread (sync_region), with the time spent
    waiting inside each (sync_region_wait) as ``wait_ns``."""
    out = _scoped(trace, "sync_region",
                  [*_BASE, "kind_raw", "kind", "parallel_id", "task_id", "codeptr"])
    waits = wait_intervals(trace).table
    clamp_to_region(out, region_intervals(trace).table)
    # the pairs of both, in the order of their begins, as the lookup numbers them
    out.table["wait_ns"] = pairing.waits_per_region(
        len(out.table), _found(trace, "waits' region"), waits["duration_ns"].to_numpy(np.int64))
    return out


@per_trace
def work_intervals(trace: Trace) -> Intervals:
    return _scoped(trace, "work", [*_BASE, "kind_raw", "kind", "parallel_id", "codeptr", "count"])


@per_trace
def masked_intervals(trace: Trace) -> Intervals:
    return _scoped(trace, "masked", [*_BASE, "parallel_id", "codeptr"])


@per_trace
def task_pieces(trace: Trace) -> pd.DataFrame:
    """Intervals in which an explicit task ran on a thread, from task_schedule switches.

    After task_schedule(prior, status, next) the thread runs `next` until its
    next task_schedule; a task that yields runs in several pieces.
    """
    sched = event_rows(trace, ["task_schedule"],
                       ["time_ns", "pid", "thread", "task_id", "other_task_id", "kind"])
    if sched.empty:
        return pd.DataFrame(columns=["pid", "thread", "task_id", "begin_ns", "end_ns",
                                     "duration_ns", "status"])
    explicit = event_rows(trace, ["task_create"], ["task_id"])["task_id"].dropna()
    switched_to = np.maximum(sched["other_task_id"].to_numpy(np.int64, na_value=0),
                             0)  # (-1: no next task)
    run, nxt = pairing.task_runs(sched[_BASE], sched["task_id"].to_numpy(np.uint64, na_value=0),
                                 switched_to.view(np.uint64), explicit.to_numpy(np.uint64))
    del switched_to
    time = sched["time_ns"].to_numpy()
    running = pd.DataFrame({
        "pid": sched["pid"].to_numpy()[run], "thread": sched["thread"].to_numpy()[run],
        "task_id": sched["task_id"].array[nxt], "begin_ns": time[run],  # nxt switches from it
        "end_ns": time[nxt], "status": sched["kind"].array[nxt],
    })
    running["duration_ns"] = running["end_ns"] - running["begin_ns"]
    return running


@per_trace
def created(trace: Trace) -> pd.DataFrame:
    """task_create rows, in time order: pid, task_id, other_task_id (the parent),
    codeptr (what the analyses look up; tasks() has the rest)."""
    return event_rows(trace, ["task_create"], ["pid", "task_id", "other_task_id", "codeptr"])


# ---- the tables of Trace ------------------------------------------------------------------------


_SYMBOLIZING = threading.Lock()


@per_trace
def symbol_cache(trace: Trace) -> dict[int, pd.DataFrame]:
    """The code addresses symbolized so far, per process (grows with symbolize())."""
    return {}


def symbolize(trace: Trace, codeptrs: Any = None, pid: int | None = None) -> pd.DataFrame:
    """Source of code addresses: pid, codeptr, module, offset, function, name (the
    function's readable name: Python-level for Cython, C++ shortened), file, line,
    location ("file:line", or name, or module+offset) and how it was found; the
    text columns of units.TEXT.  By default every codeptr of the trace; cached.
    A process's rows in codeptr order, whichever were symbolized first."""
    with _SYMBOLIZING:  # one thread at a time adds to the trace's cache
        known_by_pid = symbol_cache(trace)
        frames = []
        for proc in trace.meta.get("processes", []):
            if pid is not None and proc["pid"] != pid:
                continue
            known = known_by_pid.get(proc["pid"])
            if codeptrs is None:
                wanted = np.unique(trace.events["codeptr"][trace.pids == proc["pid"]])
            else:
                wanted = np.unique(np.asarray(codeptrs, dtype=np.uint64))
            if known is not None:
                wanted = np.setdiff1d(wanted, known["codeptr"].to_numpy(np.uint64))
            if len(wanted):
                found = symbols.resolve(symbols.Modules(proc.get("modules", [])), wanted)
                found.insert(0, "pid", proc["pid"])
                known = found if known is None else pd.concat(
                    [known, found], ignore_index=True).sort_values("codeptr", kind="stable",
                                                                   ignore_index=True)
                known_by_pid[proc["pid"]] = known
            if known is not None:
                frames.append(known)
    out = pd.concat(frames, ignore_index=True) if frames else symbols.resolve(
        symbols.Modules([]), np.empty(0, np.uint64)).assign(pid=pd.Series(dtype=int))
    if codeptrs is not None:
        out = out[out["codeptr"].isin(np.unique(np.asarray(codeptrs, dtype=np.uint64)))]
    return conform(out.reset_index(drop=True), "symbolize")


def with_source(trace: Trace, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with the function, name and location (SOURCE_COLUMNS) of its pid and
    codeptr columns."""
    if table.empty:
        return text_columns(table.reindex(columns=[*table.columns, *SOURCE_COLUMNS]),
                            SOURCE_COLUMNS)
    src = symbolize(trace, table["codeptr"].dropna().to_numpy(np.uint64))
    src = src[["pid", "codeptr", "function", "name", "location"]]
    key = table["codeptr"].astype("float64").fillna(0).astype(np.uint64)
    merged = table.assign(_cp=key).merge(
        src.rename(columns={"codeptr": "_cp"}), on=["pid", "_cp"], how="left")
    return merged.drop(columns="_cp")


@per_trace
def linked_regions(trace: Trace) -> Intervals:
    """parallel_regions() before symbolization: the regions with their parents,
    levels and Python stacks (for the analyses that need no source location)."""
    regions = region_intervals(trace)
    implicit = implicit_intervals(trace).table
    t = regions.table.reset_index(drop=True)
    keys = ["pid", "parallel_id"]
    t["parent_id"], t["level"], t["team_size"] = pairing.region_links(
        find(implicit[["pid", "task_id"]], t[["pid", "task_id"]]),
        find(t[keys], implicit[keys]), find(t[keys], t[keys]),
        t["parallel_id"].to_numpy(np.uint64, na_value=0), implicit["team_size"].array)
    t = t.rename(columns={"thread": "encountering_thread", "task_id": "encountering_task_id"})
    columns = ["pid", "parallel_id", "parent_id", "level", "begin_ns", "end_ns",
               "duration_ns", "requested_team_size", "team_size", "invoker", "league", "flags",
               "codeptr", "encountering_thread", "encountering_task_id", "py_stack"]
    t = pystacks.with_python(trace, t[columns], parent=("parent_id", "parallel_id"))
    return Intervals(t, regions.unmatched_begins, regions.unmatched_ends)


def parallel_regions(trace: Trace) -> pd.DataFrame:
    """Parallel regions: pid, parallel_id, parent_id, level (1: outermost), begin_ns,
    end_ns, duration_ns, requested and actual team size, invoker (program or
    runtime), league, flags, codeptr, the encountering thread and task, the
    Python code that started it (pystacks.COLUMNS: py_stack, py_location,
    py_inherited, native_callers), and the function, name and location of the
    code address.

    A region's parent is the region of the implicit task that encountered it;
    regions started from outside any region of the trace have level 1.
    Nested regions without a Python stack of their own inherit their parent's.
    """
    linked = linked_regions(trace)
    return Intervals(with_source(trace, linked.table), linked.unmatched_begins,
                     linked.unmatched_ends).counted()


def implicit_tasks(trace: Trace) -> pd.DataFrame:
    """Implicit tasks, one per thread and region (ends reported late by libomp for
    workers are moved to the end of their region)."""
    return implicit_intervals(trace).counted()


def work(trace: Trace) -> pd.DataFrame:
    """Worksharing constructs per thread (loops, sections, single, ...) with counts."""
    iv = work_intervals(trace)
    return Intervals(with_source(trace, iv.table), iv.unmatched_begins,
                     iv.unmatched_ends).counted()


def sync(trace: Trace) -> pd.DataFrame:
    """Barriers, taskwait and taskgroup per thread, with the time spent waiting."""
    return sync_intervals(trace).counted()


def tasks(trace: Trace) -> pd.DataFrame:
    """One row per explicit task: creation, first start, completion, run time,
    dependences, and the Python code that created it (task_stacks)."""
    made = event_rows(trace, ["task_create"],
                      ["pid", "task_id", "other_task_id", "thread", "time_ns", "flags",
                       "has_dependences", "codeptr"]).rename(
        columns={"other_task_id": "parent_id", "thread": "creator_thread",
                 "time_ns": "created_ns"}).astype({"parent_id": "UInt64"})  # a task id
    runs = task_pieces(trace)
    agg = runs.groupby(["pid", "task_id"]).agg(
        first_start_ns=("begin_ns", "min"), end_ns=("end_ns", "max"),
        run_ns=("duration_ns", "sum"), pieces=("duration_ns", "size"))
    agg["threads"] = _thread_lists(runs, agg.index)
    switches = event_rows(trace, ["task_schedule"], ["pid", "task_id", "time_ns", "kind_raw"])
    done = switches.loc[switches["kind_raw"] == "complete", ["pid", "task_id", "time_ns"]
                          ].rename(columns={"time_ns": "completed_ns"})
    deps = event_rows(trace, ["dependences"], ["pid", "task_id", "variable", "kind"])
    dep_lists = deps.groupby(["pid", "task_id"]).apply(
        lambda g: list(zip(g["variable"].tolist(), g["kind"].astype(str).tolist())),
        include_groups=False).rename("dependences") if not deps.empty else None
    out = made.merge(agg.reset_index(), on=["pid", "task_id"], how="left")
    out = out.merge(done.drop_duplicates(["pid", "task_id"]), on=["pid", "task_id"], how="left")
    if dep_lists is not None:
        out = out.merge(dep_lists.reset_index(), on=["pid", "task_id"], how="left")
    else:
        out["dependences"] = None
    out["dependences"] = [d if isinstance(d, list) else [] for d in out["dependences"]]
    return pd.concat([out.reset_index(drop=True), task_stacks(trace)], axis=1)


def task_stacks(trace: Trace) -> pd.DataFrame:
    """The Python code that created each explicit task (pystacks.COLUMNS), a row
    per task_create record in time order (as created()): a task created inside a
    region inherits the region's, or its parent task's."""
    made = created(trace)[["pid", "task_id", "other_task_id"]].rename(
        columns={"other_task_id": "parent_id"}).astype({"parent_id": "UInt64"})  # a task id
    made["py_stack"] = event_rows(trace, ["task_create"], ["py_stack"])["py_stack"].array
    regions = linked_regions(trace).table[["pid", "parallel_id", "py_stack"]]
    around = None
    if regions["py_stack"].notna().any():  # else no region gives its tasks a stack
        # Created by an implicit task: the stack of its region.
        implicit = implicit_intervals(trace).table[["pid", "task_id", "parallel_id"]]
        implicit = implicit[implicit["task_id"].isin(made["parent_id"].dropna().unique())]
        in_region = made[["pid", "parent_id"]].merge(
            implicit.merge(regions, on=["pid", "parallel_id"]).drop_duplicates(
                ["pid", "task_id"]).rename(columns={"task_id": "parent_id"}),
            on=["pid", "parent_id"], how="left")
        around = in_region["py_stack"].astype("Int64")
    stacks = pystacks.with_python(trace, made, parent=("parent_id", "task_id"), around=around)
    return stacks.drop(columns=["pid", "task_id", "parent_id"])


def _thread_lists(runs: pd.DataFrame, tasks: pd.MultiIndex) -> list[list[int]]:
    """For each (pid, task_id) of ``tasks`` (sorted, as groupby makes them), the
    threads its pieces ran on, sorted (groupby leaves out a task id of <NA>, and so
    does this)."""
    distinct = runs[["pid", "task_id", "thread"]].dropna().drop_duplicates().sort_values(
        ["pid", "task_id", "thread"], kind="stable")
    pid, task = distinct["pid"].to_numpy(), distinct["task_id"].to_numpy(np.uint64, na_value=0)
    starts = np.flatnonzero(np.r_[True, (pid[1:] != pid[:-1]) | (task[1:] != task[:-1])])
    threads = distinct["thread"].to_numpy().tolist()
    bounds = [*starts.tolist(), len(threads)] if len(threads) else [0]
    lists = [threads[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    assert len(lists) == len(tasks)  # the same groups, in the same order
    return lists


def task_graph(trace: Trace) -> pd.DataFrame:
    """The task dependence graph as edges (task_dependence events): source -> sink."""
    e = event_rows(trace, ["task_dependence"], ["pid", "task_id", "other_task_id", "time_ns"])
    return e.rename(columns={"task_id": "source_id", "other_task_id": "sink_id"}).astype(
        {"sink_id": "UInt64"}).reset_index(drop=True)


@per_trace
def mutex(trace: Trace) -> pd.DataFrame:
    """One row per acquisition of a lock, nest lock, critical or ordered: when it was
    asked for, got and given back, ``wait_ns`` and ``hold_ns``.

    The waits (acquire -> acquired per thread and wait id) and holds (acquired ->
    released) joined (pairing.acquisitions); a hold's kind and code address are
    its wait's (a hold without its wait, or a wait without its hold: NaN in the
    other's columns).  Made a column at a time, each from the records at the
    pairs' rows, the inputs dropped as they are read: no table of the waits or
    of the holds (the table is the largest of a contended trace)."""
    waits, holds = _pairs(trace, "mutex_wait"), _pairs(trace, "mutex_hold")
    at, time = order(trace), trace.events["time_ns"]

    def keys(begins: np.ndarray, acquired: np.ndarray) -> pd.DataFrame:
        out = select(trace, begins, [*_BASE, "wait_id"])
        out["acquired_ns"] = acquired
        return out

    def key_arrays(t: pd.DataFrame) -> list[np.ndarray]:
        return [t["pid"].to_numpy(), t["thread"].to_numpy(),
                t["wait_id"].to_numpy(np.uint64, na_value=0), t["acquired_ns"].to_numpy()]

    acquire, acquired = time[at[waits.begins]], time[at[waits.ends]]
    of_wait = keys(waits.begins, acquired)
    held_from = time[at[holds.begins]]
    of_hold = keys(holds.begins, held_from)
    wait_rows, hold_ends = waits.begins, holds.ends
    del waits, holds
    w, h = pairing.acquisitions(key_arrays(of_wait), key_arrays(of_hold))
    # The keys from either side (label -1: the other's row, a hold without its
    # wait); the rest of the wait's or the hold's (-1: NaN), a column at a time.
    rows = np.where(w >= 0, w, len(of_wait) + h)

    def of(values: Any, labels: np.ndarray) -> Any:
        return pd.Series(values).reindex(labels).array

    out = {"acquire_ns": of(acquire, w)}
    for c in [*_BASE, "kind", "wait_id", "codeptr", "acquired_ns"]:
        if c in of_hold:  # a key
            out[c] = pd.concat([of_wait.pop(c), of_hold.pop(c)], ignore_index=True
                               ).array.take(rows)
        else:
            out[c] = of(select(trace, wait_rows, [c])[c], w)
    del wait_rows, rows
    out["wait_ns"] = of(acquired - acquire, w)
    del acquire, acquired, w
    released = time[at[hold_ends]]
    del hold_ends
    out["released_ns"] = of(released, h)
    out["hold_ns"] = of(released - held_from, h)
    return pd.DataFrame(out, copy=False)


# ---- regions of user code (ompt_py.region, omptpy_region.h) ------------------------------------

USER_REGION_COLUMNS = ["pid", "thread", "id", "name", "level", "parent_id", "parent", "begin_ns",
                       "end_ns", "duration_ns", "codeptr", *pystacks.COLUMNS]


@per_trace
def user_regions(trace: Trace) -> pd.DataFrame:
    """The region markers of a trace paired per process and thread: pid, thread, id,
    name, level (0: outermost), parent_id and parent (name) of the enclosing
    region on the same thread, begin_ns, end_ns, duration_ns, codeptr, and the
    Python code that began it (pystacks.COLUMNS; inherited from the enclosing
    region).

    An end closes the innermost open region of its name (the innermost one
    when it has no name: a name id of 0); regions opened above it without an
    end of their own, and ends that close nothing (their begin was outside the
    trace window), are counted in ``attrs["unmatched_begins"]`` and
    ``["unmatched_ends"]``; such a region is not in the table, though its
    children name it as their parent.  Ids number the begins by process,
    thread and time.  name and parent are text (units.TEXT), NaN for a region
    without a name and for no parent.
    """
    ev = trace.events
    rows = rows_of(trace, "region")
    pids = trace.pids_at(rows)
    order = np.lexsort((ev["time_ns"][rows], ev["thread"][rows], pids))
    markers, pids = ev[rows[order]], pids[order]
    is_begin = markers["endpoint"] == SCOPE_BEGIN
    found = pair([column(pids), column(markers["thread"])], is_begin,
                 tags=column(markers["u64a"]), enclosing=True)
    # Ids and levels over every begin, closed or not (a child names an unclosed parent).
    begin_rows = np.flatnonzero(is_begin)
    number = np.full(len(markers), -1, np.intp)
    number[begin_rows] = np.arange(len(begin_rows))
    outer = found.enclosing[begin_rows]
    up = np.where(outer >= 0, number[np.maximum(outer, 0)], -1)
    level = pairing.nesting_levels(up)
    names = interned_strings(trace.meta, pids, markers["u64a"])
    b = found.begins
    stacks = python_stack_ids(markers[b])
    at = number[b]
    parent = up[at]
    table = pd.DataFrame({
        "pid": pids[b].astype(np.int64),
        "thread": markers["thread"][b].astype(np.int64),
        "id": at.astype(np.int64),
        "name": text(names[b]),
        "level": level[at],
        "parent_id": pd.arrays.IntegerArray(np.maximum(parent, 0).astype(np.int64), parent < 0),
        "parent": text(np.where(parent >= 0, names[begin_rows[np.maximum(parent, 0)]], None)),
        "begin_ns": markers["time_ns"][b],
        "end_ns": markers["time_ns"][found.ends],
        "codeptr": markers["codeptr"][b],
        "py_stack": pd.arrays.IntegerArray(stacks.astype(np.int64), stacks == 0),
    })
    table["duration_ns"] = table["end_ns"] - table["begin_ns"]
    table = pystacks.with_python(trace, table, parent=("parent_id", "id"))
    table = table[USER_REGION_COLUMNS].sort_values(["pid", "begin_ns", "thread", "level"],
                                                   kind="stable").reset_index(drop=True)
    table.attrs["unmatched_begins"] = len(found.open)
    table.attrs["unmatched_ends"] = found.unmatched_ends
    return table


_MPI_CALL_NAMES = Names(MPI_CALLS)
#: The columns of Trace.mpi_calls().
MPI_CALL_COLUMNS = ["pid", "rank", "thread", "call", "kind", "begin_ns", "end_ns", "duration_ns",
                    "bytes", "peer", "comm_size", "codeptr"]


@per_trace
def mpi_calls(trace: Trace) -> pd.DataFrame:
    """The MPI calls of a trace (``mpi`` events: ``ompt-py run --mpi``,
    ``ompt_py.mpi.traced``), one row each, by process and time: pid, rank (<NA>
    without one), thread, call (records.MPI_CALLS: init, finalize, clock_sync,
    barrier, bcast, allreduce, send, recv...), kind (records.MPI_CALL_KINDS:
    setup, barrier, collective, point_to_point, wait), begin_ns and end_ns (on
    the trace's time axis: the ranks' clocks put on the reference rank's),
    duration_ns, bytes (this rank's part: what it sends, what a recv received;
    <NA> where not known), peer (point-to-point: the other rank; rooted
    collectives: the root; <NA> where none), comm_size (the communicator's size,
    <NA> where not known) and codeptr (the caller of the MPI function, 0 from
    Python)."""
    ev = trace.events
    rows = rows_of(trace, "mpi")
    calls, pids = ev[rows], trace.pids_at(rows)
    peer = calls["u32a"].view(np.int32)
    rank = ranks(trace.meta, pids)
    table = pd.DataFrame({
        "pid": pids.astype(np.int64),
        "rank": rank if rank is not None else pd.array([None] * len(rows), dtype="Int32"),
        "thread": calls["thread"].astype(np.int64),
        "call": _MPI_CALL_NAMES.categorical(calls["kind"]),
        "begin_ns": calls["time_ns"],
        "end_ns": calls["u64b"].view(np.int64),
        "bytes": pd.arrays.IntegerArray(calls["u64a"].astype(np.int64),
                                        calls["u64a"] == MPI_BYTES_UNKNOWN),
        "peer": pd.arrays.IntegerArray(peer.copy(), peer < 0),
        "comm_size": pd.arrays.IntegerArray(calls["u32b"].astype(np.int64), calls["u32b"] == 0),
        "codeptr": calls["codeptr"],
    })
    table["kind"] = pd.Categorical(table["call"].map(MPI_CALL_KINDS, na_action="ignore"),
                                   categories=sorted(set(MPI_CALL_KINDS.values())))
    table["duration_ns"] = table["end_ns"] - table["begin_ns"]
    return conform(table[MPI_CALL_COLUMNS].sort_values(["pid", "begin_ns", "thread"],
                                                       kind="stable").reset_index(drop=True),
                   "mpi_calls")


@per_trace
def event_counts(trace: Trace) -> pd.Series:
    """How many records of each event the trace holds (the events it has, by name,
    the most first)."""
    counts = counts_by_number(trace)
    names = {code: name for name, code in EVENT_CODES.items()}
    known = [c for c in np.flatnonzero(counts).tolist() if c in names]
    return pd.Series(counts[known], index=[names[c] for c in known], name="count",
                     dtype=np.int64).sort_values(ascending=False, kind="stable")


def present_events(trace: Trace) -> set[str]:
    """Names of the events the trace holds at least once."""
    return set(event_counts(trace).index)
