"""Pairing begin/end events into intervals, and the tables the report is made of.

Scoped OMPT events nest per thread.  Pairing keeps that order: within one
key (process, thread, event, kind ...) an end closes the latest open begin.
An end with no begin before it (its begin came before the trace window) and
a begin with no end (its end comes after the window) are kept and counted
as unmatched, never paired wrongly or dropped silently.

libomp reports a worker's implicit-barrier end and implicit-task end only
when the worker is released for the next parallel region; those intervals
are clamped to the end of their parallel region, which is when the worker
really became idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import _core

_BASE = ["pid", "thread"]


@dataclass
class Intervals:
    """Paired intervals of one kind of construct, and what could not be paired."""

    table: pd.DataFrame  # one row per matched begin/end: begin_ns, end_ns, duration_ns, ...
    unmatched_begins: int
    unmatched_ends: int
    open: pd.DataFrame | None = None  # the unmatched begins (columns of table, no end)


def _group_ids(keys: pd.DataFrame) -> tuple[np.ndarray, int]:
    """A number in [0, count) per distinct row of ``keys`` (missing values are a
    value of their own), and count."""
    ids = np.zeros(len(keys), np.int64)
    count = 1
    for name in keys:
        codes, uniques = pd.factorize(keys[name], use_na_sentinel=False)
        if count * len(uniques) >= 1 << 62:  # renumber before the product overflows
            ids, seen = pd.factorize(ids)
            count = len(seen)
        ids = ids * len(uniques) + codes
        count *= len(uniques)
    if count > len(ids):  # numbers as many as the rows at most (the pairing's stacks)
        ids, seen = pd.factorize(ids)
        count = len(seen)
    return ids, count


def column(values: np.ndarray, missing_if_zero: bool = False, table: Any = None) -> tuple:
    """A key column of _core.pair and _core.find: the integers ``values`` (bytes:
    read through ``table``, bytes too, when given); ``missing_if_zero``: rows
    where it is 0 have no key (find)."""
    return np.ascontiguousarray(values), missing_if_zero, table


def _pair(rows: pd.DataFrame, keys: list[str]) -> Intervals:
    """Pairs begin/end rows (time-ordered) that nest within each key; the begin's
    columns stand for the pair, in the order of the begins.  One pass in C
    (per key, an end closes the latest open begin); the other columns are
    gathered once, at the rows of the pairs."""
    is_begin = (rows["endpoint"] == "begin").to_numpy()
    partner = np.empty(len(rows), np.intp)
    _core.pair([column(_group_ids(rows[keys])[0])], column(is_begin), 1, partner)
    unmatched = partner < 0
    begin_rows = np.flatnonzero(is_begin & ~unmatched)
    times = rows["time_ns"].to_numpy()
    table = _begin_rows(rows, begin_rows)
    table["end_ns"] = times[partner[begin_rows]]
    table["duration_ns"] = table["end_ns"] - table["begin_ns"]
    return Intervals(table, unmatched_begins=int(np.count_nonzero(is_begin & unmatched)),
                     unmatched_ends=int(np.count_nonzero(~is_begin & unmatched)),
                     open=_begin_rows(rows, np.flatnonzero(is_begin & unmatched)))


def _begin_rows(rows: pd.DataFrame, at: np.ndarray) -> pd.DataFrame:
    """The rows at positions ``at``, without their endpoint, time_ns as begin_ns."""
    out = rows.drop(columns="endpoint").take(at).rename(columns={"time_ns": "begin_ns"})
    return out.set_axis(pd.RangeIndex(len(out)))


def _scoped(df: pd.DataFrame, event: str, keys: list[str], columns: list[str]) -> Intervals:
    chosen = (df["event"] == event).to_numpy() & df["endpoint"].isin(["begin", "end"]).to_numpy()
    return _pair(df.loc[chosen, ["time_ns", "endpoint", *keys, *columns]], keys)


def parallel_regions(df: pd.DataFrame) -> Intervals:
    """parallel_begin/parallel_end pairs, one per region."""
    rows = df.loc[
        df["event"].isin(["parallel_begin", "parallel_end"]),
        ["time_ns", "endpoint", "pid", "parallel_id", "thread", "task_id", "codeptr",
         "team_size", "flags"],
    ]
    out = _pair(rows, ["pid", "parallel_id"])
    t = out.table.rename(columns={"team_size": "requested_team_size"})
    # Who started the region: the program's own code (gcc-built code on libomp
    # calls GOMP_parallel) or the runtime on its behalf (clang-built code).
    flags = t["flags"].fillna(0).astype(np.int64)
    t["invoker"] = np.where(flags & 1, "program", np.where(flags & 2, "runtime", "unknown"))
    t["league"] = (flags & 0x40000000) != 0  # a teams construct's league, not a team
    out.table = t
    return out


def _find(table: pd.DataFrame, query: pd.DataFrame) -> np.ndarray:
    """For each row of ``query``, the position of the first row of ``table`` with
    the same values (columns in the same order); -1 where there is none or where
    a value is missing."""
    both = pd.concat([table.set_axis(query.columns, axis=1), query], ignore_index=True)
    ids = _group_ids(both)[0] + 1
    ids[both.isna().any(axis=1).to_numpy()] = 0  # no key
    found = np.empty(len(query), np.intp)
    n = len(table)
    _core.find([column(ids[:n], missing_if_zero=True)], [column(ids[n:], missing_if_zero=True)],
               found)
    return found


def clamped_ends(end: np.ndarray, region: np.ndarray, region_end: np.ndarray) -> np.ndarray:
    """``end`` of intervals, each moved back to the end of its parallel region
    (``region``: its row in ``region_end``, which is not empty; -1 for none)
    where it was reported after that."""
    late = region_end[np.maximum(region, 0)]
    return np.where((region >= 0) & (end > late), late, end)


def _clamp_to_region(iv: Intervals, regions: pd.DataFrame) -> None:
    """Ends reported after their parallel region ended are moved to the region's end."""
    t = iv.table
    if t.empty or regions.empty or "parallel_id" not in t:
        return
    end = t["end_ns"].to_numpy()
    keys = ["pid", "parallel_id"]
    clamped = clamped_ends(end, _find(regions[keys], t[keys]), regions["end_ns"].to_numpy(np.int64))
    if (clamped != end).any():
        t["end_ns"] = clamped
        t["duration_ns"] = t["end_ns"] - t["begin_ns"]


def implicit_tasks(df: pd.DataFrame, regions: pd.DataFrame | None = None) -> Intervals:
    out = _scoped(df, "implicit_task", ["pid", "task_id"],
                  ["thread", "parallel_id", "team_size", "thread_num", "flags"])
    if regions is not None:
        _clamp_to_region(out, regions)
    return out


def sync_waits(df: pd.DataFrame, regions: pd.DataFrame | None = None) -> Intervals:
    """Time threads spent waiting in barriers, taskwait and taskgroup (sync_region_wait)."""
    out = _scoped(df, "sync_region_wait", [*_BASE, "kind_raw"], ["kind", "parallel_id",
                                                                  "task_id"])
    if regions is not None:
        _clamp_to_region(out, regions)
    return out


def work(df: pd.DataFrame) -> Intervals:
    return _scoped(df, "work", [*_BASE, "kind_raw"], ["kind", "parallel_id", "codeptr", "count"])


def masked(df: pd.DataFrame) -> Intervals:
    return _scoped(df, "masked", _BASE, ["parallel_id", "codeptr"])


def _mutex_intervals(df: pd.DataFrame, opening: str, closing: str) -> pd.DataFrame:
    """From one mutex event to the next (per thread and wait id), as intervals."""
    rows = df.loc[df["event"].isin([opening, closing]),
                  ["time_ns", "event", "pid", "thread", "kind", "wait_id", "codeptr"]].copy()
    rows["endpoint"] = np.where(rows["event"] == opening, "begin", "end")
    return _pair(rows.drop(columns="event"), [*_BASE, "wait_id"]).table


def mutex_waits(df: pd.DataFrame) -> pd.DataFrame:
    """acquire -> acquired per thread and wait id: how long each lock/critical was waited for."""
    return _mutex_intervals(df, "mutex_acquire", "mutex_acquired")


def task_executions(df: pd.DataFrame) -> pd.DataFrame:
    """Intervals in which an explicit task ran on a thread, from task_schedule switches.

    After task_schedule(prior, status, next) the thread runs `next` until its
    next task_schedule; a task that yields runs in several pieces.
    """
    sched = df.loc[df["event"] == "task_schedule",
                   ["time_ns", "pid", "thread", "task_id", "other_task_id", "kind"]]
    if sched.empty:
        return pd.DataFrame(columns=["pid", "thread", "task_id", "begin_ns", "end_ns",
                                     "duration_ns", "status"])
    explicit = df.loc[df["event"] == "task_create", "task_id"].dropna()
    run, nxt = task_runs(sched[_BASE], sched["task_id"].to_numpy(np.uint64, na_value=0),
                         sched["other_task_id"].to_numpy(np.uint64, na_value=0),
                         explicit.to_numpy(np.uint64))
    time = sched["time_ns"].to_numpy()
    running = pd.DataFrame({
        "pid": sched["pid"].to_numpy()[run], "thread": sched["thread"].to_numpy()[run],
        "task_id": sched["other_task_id"].array[run], "begin_ns": time[run],
        "end_ns": time[nxt], "status": sched["kind"].array[nxt],
    })
    running["duration_ns"] = running["end_ns"] - running["begin_ns"]
    return running


def task_runs(threads: pd.DataFrame, prior: np.ndarray, switched_to: np.ndarray,
              explicit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of task_schedule events in time order (``threads``: their pid and thread;
    ``prior``, ``switched_to``: the tasks they switch from and to, 0 for none),
    those after which an explicit task (one of ``explicit``) ran until the next
    task_schedule of the thread, which switches away from it: their rows, and
    the rows of those next ones."""
    group, _ = _group_ids(threads)
    order = np.argsort(group, kind="stable")  # each thread's switches, in time order
    same = group[order[1:]] == group[order[:-1]]
    following = np.full(len(group), -1, np.intp)
    following[order[:-1][same]] = order[1:][same]
    run = np.flatnonzero(following >= 0)
    nxt = following[run]
    task = switched_to[run]
    ran = (prior[nxt] == task) & (task != 0) & np.isin(task, explicit)
    return run[ran], nxt[ran]


def thread_time(df: pd.DataFrame, implicit: pd.DataFrame, waits: pd.DataFrame,
                mutex: pd.DataFrame) -> pd.DataFrame:
    """Per thread: time inside implicit tasks of parallel regions, split into busy and waiting."""
    in_parallel = implicit[(implicit["flags"].fillna(0).astype(np.int64) & 1) == 0]

    def total(table: pd.DataFrame, name: str) -> pd.Series:
        if table.empty:
            index = pd.MultiIndex.from_arrays([[], []], names=_BASE)
            return pd.Series(dtype="float64", index=index, name=name)
        return table.groupby(_BASE)["duration_ns"].sum().rename(name)

    threads = df.groupby(_BASE).size().rename("events")
    out = pd.concat([threads, total(in_parallel, "in_regions_ns"), total(waits, "sync_wait_ns"),
                     total(mutex, "mutex_wait_ns")], axis=1).fillna(0)
    out.index.names = _BASE
    out["waiting_ns"] = out["sync_wait_ns"] + out["mutex_wait_ns"]
    out["busy_ns"] = (out["in_regions_ns"] - out["waiting_ns"]).clip(lower=0)
    return out.reset_index()


def sync_regions(df: pd.DataFrame, regions: pd.DataFrame | None = None,
                 waits: pd.DataFrame | None = None) -> Intervals:
    """Barriers, taskwait, taskgroup per thread (sync_region), with the time spent
    waiting inside each (sync_region_wait) as ``wait_ns``; ``waits``: the table
    of sync_waits(df, regions), if already made."""
    out = _scoped(df, "sync_region", [*_BASE, "kind_raw"], ["kind", "parallel_id", "task_id",
                                                             "codeptr"])
    if waits is None:
        waits = sync_waits(df, regions).table
    if regions is not None:
        _clamp_to_region(out, regions)
    t = out.table
    if t.empty:
        t["wait_ns"] = pd.Series(dtype="int64")
        return out
    t = t.sort_values("begin_ns", kind="stable").reset_index(drop=True)
    w = waits.sort_values("begin_ns", kind="stable")
    keys = [*_BASE, "kind_raw"]
    ids, _ = _group_ids(pd.concat([t[keys], w[keys]], ignore_index=True))
    t["wait_ns"] = waits_per_region(
        len(t), [column(ids[:len(t)])], column(t["begin_ns"].to_numpy(np.int64)),
        [column(ids[len(t):])], column(w["begin_ns"].to_numpy(np.int64)),
        w["duration_ns"].to_numpy(np.int64))
    out.table = t
    return out


def waits_per_region(regions: int, region_keys: list[tuple], region_begin: tuple,
                     wait_keys: list[tuple], wait_begin: tuple, wait_ns: np.ndarray
                     ) -> np.ndarray:
    """For each of ``regions`` sync regions (key columns: thread and kind; a column
    of begin times, in ascending order) the total ``wait_ns`` of the waits (the
    same columns) inside it: a wait belongs to the region of its keys that began
    last at or before the wait."""
    region = np.empty(len(wait_ns), np.intp)
    _core.find(region_keys, wait_keys, region, region_begin, wait_begin)
    totals = np.zeros(regions, np.int64)
    np.add.at(totals, region[region >= 0], wait_ns[region >= 0])
    return totals


def mutex_holds(df: pd.DataFrame) -> pd.DataFrame:
    """acquired -> released per thread and wait id: how long each lock/critical was held."""
    return _mutex_intervals(df, "mutex_acquired", "mutex_released")


def region_tree(regions: pd.DataFrame, implicit: pd.DataFrame) -> pd.DataFrame:
    """Adds parent region, nesting level and actual team size to the regions table.

    A region's parent is the region of the implicit task that encountered it;
    regions started from outside any region of the trace have level 1.
    """
    t = regions.reset_index(drop=True)
    keys = ["pid", "parallel_id"]
    t["parent_id"], t["level"], t["team_size"] = region_links(
        _find(implicit[["pid", "task_id"]], t[["pid", "task_id"]]),
        _find(t[keys], implicit[keys]), _find(t[keys], t[keys]),
        t["parallel_id"].to_numpy(np.uint64, na_value=0), implicit["team_size"].array)
    return t


def region_links(task: np.ndarray, region_of: np.ndarray, same: np.ndarray,
                 parallel_id: np.ndarray, team_size: pd.api.extensions.ExtensionArray
                 ) -> tuple[pd.api.extensions.ExtensionArray, np.ndarray, np.ndarray]:
    """The parent_id, level and team_size of region_tree, from lookups (-1: none):
    per region, the row of the implicit task that encountered it (``task``) and
    the first region with its pid and parallel_id (``same``); per implicit task,
    the first region with its pid and parallel_id (``region_of``) and its
    ``team_size``.  ``parallel_id``: the regions' ids."""
    up = np.full(len(task), -1, np.intp)  # the parent region's row
    inside = task >= 0
    up[inside] = region_of[task[inside]]
    parent = pd.array(np.where(up >= 0, parallel_id[np.maximum(up, 0)], 0), dtype="UInt64")
    parent[up < 0] = pd.NA
    # Levels: walk up all chains at once (as many steps as the deepest nesting).
    level = np.ones(len(task), dtype=np.int64)
    cur = up.copy()
    for _ in range(len(task)):
        alive = cur >= 0
        if not alive.any():
            break
        level[alive] += 1
        cur[alive] = up[cur[alive]]
    # The team: the largest team_size of the implicit tasks with the region's keys.
    sizes = team_size.to_numpy(np.int64, na_value=-1)
    largest = np.full(len(task), -1, np.int64)
    counted = (region_of >= 0) & (sizes >= 0)
    np.maximum.at(largest, region_of[counted], sizes[counted])
    team = np.full(len(task), -1, np.int64)
    team[same >= 0] = largest[same[same >= 0]]
    sized = pd.array(np.maximum(team, 0), dtype=team_size.dtype)
    sized[team < 0] = pd.NA
    return parent, level, pd.Series(sized).to_numpy()


def task_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per explicit task: creation, first start, completion, run time, dependences."""
    created = df.loc[df["event"] == "task_create",
                     ["pid", "task_id", "other_task_id", "thread", "time_ns", "flags",
                      "has_dependences", "codeptr"]].rename(
        columns={"other_task_id": "parent_id", "thread": "creator_thread",
                 "time_ns": "created_ns"})
    runs = task_executions(df)
    agg = runs.groupby(["pid", "task_id"]).agg(
        first_start_ns=("begin_ns", "min"), end_ns=("end_ns", "max"),
        run_ns=("duration_ns", "sum"), pieces=("duration_ns", "size"),
        threads=("thread", lambda s: sorted(set(s.tolist()))))
    done = df.loc[(df["event"] == "task_schedule") & (df["kind_raw"] == "complete"),
                  ["pid", "task_id", "time_ns"]].rename(columns={"time_ns": "completed_ns"})
    deps = df.loc[df["event"] == "dependences", ["pid", "task_id", "variable", "kind"]]
    dep_lists = deps.groupby(["pid", "task_id"]).apply(
        lambda g: list(zip(g["variable"].tolist(), g["kind"].astype(str).tolist())),
        include_groups=False).rename("dependences") if not deps.empty else None
    out = created.merge(agg.reset_index(), on=["pid", "task_id"], how="left")
    out = out.merge(done.drop_duplicates(["pid", "task_id"]), on=["pid", "task_id"], how="left")
    if dep_lists is not None:
        out = out.merge(dep_lists.reset_index(), on=["pid", "task_id"], how="left")
    else:
        out["dependences"] = None
    out["dependences"] = [d if isinstance(d, list) else [] for d in out["dependences"]]
    return out.reset_index(drop=True)


def dependence_edges(df: pd.DataFrame) -> pd.DataFrame:
    """The task dependence graph as edges (task_dependence events): source -> sink."""
    e = df.loc[df["event"] == "task_dependence", ["pid", "task_id", "other_task_id", "time_ns"]]
    return e.rename(columns={"task_id": "source_id", "other_task_id": "sink_id"}).reset_index(
        drop=True)


def mutex_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per acquisition of a lock, nest lock, critical or ordered: when it was
    asked for, got and given back, ``wait_ns`` and ``hold_ns``."""
    waits = mutex_waits(df).rename(columns={"begin_ns": "acquire_ns", "end_ns": "acquired_ns",
                                            "duration_ns": "wait_ns"})
    holds = mutex_holds(df).rename(columns={"begin_ns": "acquired_ns", "end_ns": "released_ns",
                                            "duration_ns": "hold_ns"})
    keys = [*_BASE, "wait_id", "acquired_ns"]

    def key_arrays(t: pd.DataFrame) -> list[np.ndarray]:
        return [t["pid"].to_numpy(), t["thread"].to_numpy(),
                t["wait_id"].to_numpy(np.uint64, na_value=0), t["acquired_ns"].to_numpy()]

    w, h = acquisitions(key_arrays(waits), key_arrays(holds))
    out = waits.reindex(w).reset_index(drop=True)  # label -1: a hold without its wait (NaN)
    for key in keys:  # from either side
        both = pd.concat([waits[key], holds[key]], ignore_index=True)
        out[key] = both.array.take(np.where(w >= 0, w, len(waits) + h))
    held = holds[["released_ns", "hold_ns"]].reindex(h).reset_index(drop=True)
    out[["released_ns", "hold_ns"]] = held
    return out


def acquisitions(waits: list[np.ndarray], holds: list[np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The rows of mutex_table: an outer join of the waits (acquire -> acquired)
    and holds (acquired -> released) with the same keys (arrays of pid, thread,
    wait id and acquired time), as positions in each (-1: none), ordered by the
    acquired time, then pid, thread and wait id."""
    n = len(waits[0])
    keys = [np.concatenate(pair) for pair in zip(waits, holds)]
    group, count = _group_ids(pd.DataFrame(dict(enumerate(keys)), copy=False))
    of_wait, of_hold = group[:n], group[n:]
    holds_of = np.bincount(of_hold, minlength=count)
    by_group = np.argsort(of_hold, kind="stable")
    first = np.cumsum(holds_of) - holds_of
    # Each wait once per hold of its keys (once if none), then the holds without a wait.
    times = np.maximum(holds_of[of_wait], 1)
    w = np.repeat(np.arange(n), times)
    h = np.full(len(w), -1, np.intp)
    held = holds_of[of_wait[w]] > 0
    nth = np.arange(len(w)) - np.repeat(np.cumsum(times) - times, times)
    h[held] = by_group[first[of_wait[w[held]]] + nth[held]]
    alone = np.flatnonzero(np.bincount(of_wait, minlength=count)[of_hold] == 0)
    w = np.concatenate([w, np.full(len(alone), -1, np.intp)])
    h = np.concatenate([h, alone])
    at = np.where(w >= 0, w, n + h)
    order = np.lexsort([keys[2][at], keys[1][at], keys[0][at], keys[3][at]])
    return w[order], h[order]
