"""Answers from a profile (``ompt-py run --profile``, OMPTPY_PROFILE=on): the
trace's answers (metrics.constructs, imbalance, lock_contention,
task_granularity and summary.summary) with the same columns where per-thread
aggregates can give them.

A profile keeps, per thread, construct kind and source location, a count, a
total, a min, a max and a log2 histogram of durations; it keeps no instance.
So counts, totals, means and maxima are those of a trace of the same run;
quantiles (p50_ns, p95_ns) are estimated from the histogram (see ``quantile``:
in the bucket of the duration at their rank, between the min and the max); what
needs instances (a region's begin time, each instance's
imbalance, Python locations, a lock's hold-time median, task creation cost) is
left out, and each function says what.
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..records import CONSTRUCTS, PROFILE_BUCKETS, normalised_kind
from ..units import TEXT, format_ns, text, text_columns
from . import advice as rules
from . import symbols, tables
from .columns import TABLES, conform
from .metrics import top_holder
from .summary import Summary, regions_per_location

if TYPE_CHECKING:
    from ..io.profile import ProfileParts
    from ..profile import Profile

_STAT_COLUMNS = ["count", "total_ns", "mean_ns", "p50_ns", "p95_ns", "max_ns"]
#: Bucket b of a histogram counts durations in [_LO[b], _HI[b]) ns (b = 0: under 1 ns).
_HI = 2.0 ** np.arange(PROFILE_BUCKETS)
_LO = np.r_[0.0, _HI[:-1]]
#: The source locations of each profile's tables (a profile recording in process
#: gets new tables at each stop()).
_SOURCES: weakref.WeakKeyDictionary[ProfileParts, pd.DataFrame] = weakref.WeakKeyDictionary()


def _no_instances(what: str, by: str, allowed: tuple[str, ...]) -> None:
    if by not in allowed:
        raise ValueError(f"by={by!r}: a profile keeps no {what}; use "
                         + " or ".join(f"'{a}'" for a in allowed)
                         + " (or trace the run: ompt-py run without --profile)")


def quantile(hist: np.ndarray, q: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per row of log2 histograms (one per row, PROFILE_BUCKETS counts), the ``q``
    quantile estimated: the duration of rank floor(q (n - 1)) (the lower of the two
    that pandas interpolates between), placed in its bucket linearly by its rank
    there (so at most a factor of 2 off it) and kept within the row's [lo, hi] (its
    min and max).  NaN for an empty row."""
    hist = np.asarray(hist, np.float64).reshape(-1, PROFILE_BUCKETS)
    n = hist.sum(axis=1)
    cum = np.cumsum(hist, axis=1)
    rank = np.floor(q * np.maximum(n - 1, 0))
    bucket = np.minimum((cum <= rank[:, None]).sum(axis=1), PROFILE_BUCKETS - 1)
    rows = np.arange(len(hist))
    before = cum[rows, bucket] - hist[rows, bucket]
    inside = np.where(hist[rows, bucket] > 0,
                      (rank - before + 0.5) / np.maximum(hist[rows, bucket], 1), 0.5)
    value = _LO[bucket] + (_HI[bucket] - _LO[bucket]) * inside
    return np.where(n > 0, np.clip(value, lo, np.maximum(lo, hi)), np.nan)


def histograms(values: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """Per group (0 .. n - 1), the log2 histogram of its ``values`` (durations in
    ns) as a profile keeps one: bucket b counts those in [_LO[b], _HI[b]); NaN
    values are not counted.  An array of n rows of PROFILE_BUCKETS counts."""
    values, groups = np.asarray(values, np.float64), np.asarray(groups)
    kept = ~np.isnan(values)
    if not kept.all():  # (else no copies)
        values, groups = values[kept], groups[kept]
    del kept
    bucket = np.frexp(values)[1]  # v = m 2^e, 0.5 <= m < 1: v in [2^(e-1), 2^e)
    bucket[values < 1] = 0
    np.clip(bucket, 0, PROFILE_BUCKETS - 1, out=bucket)
    out = np.zeros((n, PROFILE_BUCKETS), np.int64)
    np.add.at(out, (groups, bucket), 1)
    return out


def _sources(prof: Profile) -> pd.DataFrame:
    """pid, codeptr, function, name, location of every code address of the profile
    (symbols.resolve with each process's modules), made once per profile."""
    found = _SOURCES.get(prof.parts)
    if found is None:
        p, frames = prof.parts, []
        for proc in prof.meta["processes"]:
            pid = proc["pid"]
            codes = np.unique(np.concatenate([
                t.loc[t["pid"] == pid, "codeptr"].to_numpy(np.uint64)
                for t in (p.constructs, p.regions_threads, p.locks, p.tasks)]))
            codes = codes[codes != 0]  # no code address: no location, as in a trace
            src = symbols.resolve(symbols.Modules(proc.get("modules", [])), codes)
            frames.append(src[["codeptr", "function", "name", "location"]].assign(pid=pid))
        found = pd.concat(frames, ignore_index=True) if frames else text_columns(pd.DataFrame(
            columns=["codeptr", "function", "name", "location", "pid"]), tables.SOURCE_COLUMNS)
        found["codeptr"] = found["codeptr"].astype(np.uint64)
        _SOURCES[prof.parts] = found
    return found


def _with_source(prof: Profile, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with the function, name and location of its pid and codeptr."""
    src = _sources(prof)
    out = table.assign(codeptr=table["codeptr"].astype(np.uint64)).merge(
        src, on=["pid", "codeptr"], how="left")
    return out


def stats(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Count, total, mean, p50, p95 and max per group of ``keys`` of rows with
    count, total_ns, min_ns, max_ns and hist (a profile's, or the per-partition
    statistics of a dataset merged: analysis.dataset); p50 and p95 estimated from
    the histograms (quantile).  Sorted by total time."""
    g = rows.groupby(keys, sort=False, dropna=False)
    out = g.agg(count=("count", "sum"), total_ns=("total_ns", "sum"), min_ns=("min_ns", "min"),
                max_ns=("max_ns", "max"))
    hist = np.stack(rows["hist"].to_list()) if len(rows) else np.zeros((0, PROFILE_BUCKETS))
    which = g.ngroup().to_numpy()
    sums = np.zeros((len(out), PROFILE_BUCKETS))
    np.add.at(sums, which, hist)
    lo, hi = out["min_ns"].to_numpy(np.float64), out["max_ns"].to_numpy(np.float64)
    out["mean_ns"] = out["total_ns"] / out["count"].where(out["count"] > 0)
    out["p50_ns"] = quantile(sums, 0.5, lo, hi)
    out["p95_ns"] = quantile(sums, 0.95, lo, hi)
    out = out.astype({"total_ns": np.float64, "max_ns": np.float64})
    return out[_STAT_COLUMNS].sort_values("total_ns", ascending=False).reset_index()


_EVENTS = {name: event for event, name in CONSTRUCTS.items()}


def _construct_rows(prof: Profile, raw: bool) -> pd.DataFrame:
    """The constructs table and the explicit tasks that ran (construct ``task``,
    kind ``explicit``, per creation site), in one shape; kinds normalised unless
    ``raw``."""
    c = prof.parts.constructs
    t = prof.parts.tasks
    t = t[t["ran"] > 0]
    tasks = pd.DataFrame({"pid": t["pid"], "thread": t["thread"], "codeptr": t["codeptr"],
                          "construct": CONSTRUCTS["task_schedule"], "kind": "explicit",
                          "count": t["ran"], "total_ns": t["run_total_ns"],
                          "min_ns": t["run_min_ns"], "max_ns": t["run_max_ns"],
                          "hist": t["hist"]})
    rows = pd.concat([c, tasks], ignore_index=True) if len(tasks) else c
    rows = rows.astype({"construct": TEXT, "kind": TEXT})
    if not raw:
        rows["kind"] = text([normalised_kind(_EVENTS.get(c, c), k)
                             for c, k in zip(rows["construct"], rows["kind"])])
    return rows


def constructs(prof: Profile, by: str = "construct", raw: bool = False) -> pd.DataFrame:
    """metrics.constructs from a profile: count, total, mean, p50, p95 and max time
    per construct and kind (normalised; ``raw=True``: the runtime's names)
    (``by="construct"``), or per construct, kind and source location
    (``by="source"``, with pid, function and name).  The constructs a
    profile keeps (no ``user region``: region markers are not profiled); p50_ns and
    p95_ns estimated from the histograms (see the module).  No ``by="python"``: a
    profile has no Python stacks."""
    _no_instances("Python stacks", by, ("construct", "source"))
    rows = _construct_rows(prof, raw)
    if by == "construct":
        return conform(stats(rows, ["construct", "kind"]), "constructs")
    keys = ["construct", "kind", "pid", "location"]
    located = _with_source(prof, rows)
    func = located[["pid", "location", "function", "name"]].drop_duplicates(["pid", "location"])
    out = stats(located, keys).merge(func, on=["pid", "location"], how="left")
    return conform(out[[*keys, "function", "name", *_STAT_COLUMNS]], "constructs(source)")


def imbalance(prof: Profile, per_thread: bool = False, by: str = "source") -> pd.DataFrame:
    """metrics.imbalance from a profile, per pid and source location of parallel
    regions (``by="source"``; a profile keeps no region instances): function,
    regions (instances), threads (the team: implicit tasks per instance),
    duration_ns (the regions' total), imbalance, lost_ns, barrier_wait_share and
    wait_share; most time lost first.

    ``imbalance`` and ``lost_ns`` are those of each thread's busy time summed over
    the location's instances (max over mean; threads that ran them x max - sum):
    the trace's per-instance figures when the same thread is the busiest in
    every instance, less when it changes, and not meaningful for a nested
    region whose teams run on changing threads (imbalance_max, the worst
    instance, is left out).  ``fork_join_ns`` is the regions' total duration
    less the largest time one thread was busy or waiting in taskwait or for a
    lock in them, summed over them: the trace's figure (per instance) when the
    same thread is the longest at work in every instance, more when it changes.  Left out: the
    loops' ``schedule`` (a profile does not tie a loop to its region).
    ``per_thread=True``: one row per pid, location and thread: implicit_tasks,
    duration_ns, busy_ns and the waits, busy_share, barrier_wait_share."""
    _no_instances("region instances", by, ("source",))
    rt = _with_source(prof, prof.parts.regions_threads)
    times = ["duration_ns", "busy_ns", "barrier_wait_ns", "sync_wait_ns", "lock_wait_ns"]
    per = rt.groupby(["pid", "location", "thread"], sort=False, dropna=False).agg(
        function=("function", "first"), implicit_tasks=("implicit_tasks", "sum"),
        **{c: (c, "sum") for c in times}).reset_index()
    if per_thread:
        dur = per["duration_ns"].where(per["duration_ns"] > 0)
        return conform(per.assign(busy_share=per["busy_ns"] / dur,
                                  barrier_wait_share=per["barrier_wait_ns"] / dur),
                       "Profile.imbalance(per_thread)")
    per["_wait"] = per["barrier_wait_ns"] + per["sync_wait_ns"] + per["lock_wait_ns"]
    per["_active"] = per["busy_ns"] + per["sync_wait_ns"] + per["lock_wait_ns"]
    out = per.groupby(["pid", "location"], sort=False, dropna=False).agg(
        function=("function", "first"), threads=("thread", "size"),
        busy_mean=("busy_ns", "mean"), busy_max=("busy_ns", "max"),
        busy_total=("busy_ns", "sum"), tasks_ns=("duration_ns", "sum"),
        implicit_tasks=("implicit_tasks", "sum"), barrier_wait_ns=("barrier_wait_ns", "sum"),
        wait_ns=("_wait", "sum"), active_max=("_active", "max")).reset_index()
    c = _with_source(prof, prof.parts.constructs)
    c = c[c["construct"] == "parallel region"]
    regions = c.groupby(["pid", "location"], sort=False, dropna=False).agg(
        regions=("count", "sum"), duration_ns=("total_ns", "sum")).reset_index()
    out = out.merge(regions, on=["pid", "location"], how="left")
    out[["regions", "duration_ns"]] = out[["regions", "duration_ns"]].fillna(0).astype(np.int64)
    tasks = out["tasks_ns"].where(out["tasks_ns"] > 0)
    out["imbalance"] = out["busy_max"] / out["busy_mean"].where(out["busy_mean"] > 0)
    out["lost_ns"] = out["threads"] * out["busy_max"] - out["busy_total"]
    # The team: implicit tasks per instance (the trace's largest team when teams
    # do not change), not the threads that ran them (nested teams move).
    team = out["implicit_tasks"] / out["regions"].where(out["regions"] > 0)
    out["threads"] = np.rint(team.fillna(out["threads"])).astype(np.int64)
    out["barrier_wait_share"] = out["barrier_wait_ns"] / tasks
    out["wait_share"] = out["wait_ns"] / tasks
    out["busy_ns"] = out["busy_total"]
    out["fork_join_ns"] = (out["duration_ns"] - out["active_max"]).clip(lower=0)
    out["fork_join_share"] = out["fork_join_ns"] / out["duration_ns"].where(
        out["duration_ns"] > 0)
    out = out.sort_values("lost_ns", ascending=False, kind="stable").reset_index(drop=True)
    return conform(out[list(TABLES["Profile.imbalance"].columns)], "Profile.imbalance")


def lock_contention(prof: Profile, by: str = "lock") -> pd.DataFrame:
    """metrics.lock_contention from a profile: per lock, critical section or ordered
    region (pid, kind, wait_id; ``by="source"``: and the codeptr where it was
    taken): acquisitions, threads, wait time (total, mean, p95 estimated from the
    histogram, max), hold time (total, mean, max), the thread that held it longest
    and its share, and where it was most often taken (codeptr, function,
    location).  Left out: hold_p50_ns (hold times have no histogram) and
    py_location (no Python stacks).  Sorted by total wait."""
    _no_instances("Python stacks", by, ("lock", "source"))
    m = prof.parts.locks.astype({"kind": TEXT})
    keys = ["pid", "kind", "wait_id"] + (["codeptr"] if by == "source" else [])
    if m.empty:
        return conform(pd.DataFrame(), "Profile.lock_contention")
    g = m.groupby(keys, sort=False)
    out = g.agg(acquisitions=("acquisitions", "sum"),
                wait_total_ns=("wait_total_ns", "sum"), wait_min_ns=("wait_min_ns", "min"),
                wait_max_ns=("wait_max_ns", "max"), hold_total_ns=("hold_total_ns", "sum"),
                hold_max_ns=("hold_max_ns", "max"))
    n = out["acquisitions"].where(out["acquisitions"] > 0)
    out["wait_mean_ns"] = out["wait_total_ns"] / n
    out["hold_mean_ns"] = out["hold_total_ns"] / n
    sums = np.zeros((len(out), PROFILE_BUCKETS))
    np.add.at(sums, g.ngroup().to_numpy(), np.stack(m["hist"].to_list()))
    out["wait_p95_ns"] = quantile(sums, 0.95, out["wait_min_ns"].to_numpy(np.float64),
                                  out["wait_max_ns"].to_numpy(np.float64))
    top_holder(m, keys, "hold_total_ns", out)
    if by == "lock":  # where it was taken most often
        sites = m.groupby([*keys, "codeptr"], sort=False)["acquisitions"].sum().reset_index()
        sites = sites.sort_values("acquisitions", ascending=False, kind="stable")
        out["codeptr"] = sites.drop_duplicates(keys).set_index(keys)["codeptr"]
    out = _with_source(prof, out.reset_index())
    out = out[list(TABLES["Profile.lock_contention"].columns)]
    return conform(out.sort_values("wait_total_ns", ascending=False).reset_index(drop=True),
                   "Profile.lock_contention")


def task_granularity(prof: Profile) -> pd.DataFrame:
    """metrics.task_granularity from a profile: the explicit tasks' run times on the
    profile's own log2 bins (lo_ns, hi_ns, label, tasks, task_share), from the
    first bin that holds a task to the last.  A task's run time is all its pieces,
    waits in its own taskwait included (the trace's busy_ns leaves them out).
    Left out: busy_ns and time_share per bin (a profile sums times per creation
    site, not per bin).

    ``attrs``: ``tasks`` (created), ``ran``, ``outside_bins`` (0),
    ``median_busy_ns`` (estimated from the histogram), ``run_total_ns``;
    ``create_ns`` and ``creation_overhead_share`` are NaN (a profile does not
    time creations)."""
    t = prof.parts.tasks
    hist = np.stack(t["hist"].to_list()).sum(axis=0) if len(t) else np.zeros(PROFILE_BUCKETS)
    used = np.flatnonzero(hist)
    span = slice(used[0], used[-1] + 1) if len(used) else slice(0, 0)
    counts = hist[span].astype(np.int64)
    lo, hi = _LO[span], _HI[span]
    ran = int(t["ran"].sum())
    out = pd.DataFrame({"lo_ns": lo, "hi_ns": hi,
                        "label": text([f"{format_ns(a)} - {format_ns(b)}"
                                       for a, b in zip(lo, hi)]),
                        "tasks": counts,
                        "task_share": counts / counts.sum() if counts.sum() else counts * 0.0})
    low = float(t["run_min_ns"][t["ran"] > 0].min()) if ran else math.nan
    median = quantile(hist, 0.5, np.array([low]), np.array([float(t["run_max_ns"].max())]))
    out.attrs.update({"tasks": int(t["created"].sum()), "ran": ran, "outside_bins": 0,
                      "median_busy_ns": float(median[0]) if ran else math.nan,
                      "run_total_ns": int(t["run_total_ns"].sum()),
                      "create_ns": math.nan, "creation_overhead_share": math.nan})
    return conform(out, "Profile.task_granularity")


def thread_totals(prof: Profile) -> pd.DataFrame:
    """Per thread, its implicit tasks' time in each state (busy_ns, barrier_wait_ns,
    sync_wait_ns, lock_wait_ns, summed over parallel regions) and busy_share.
    Left out: idle_ns (a profile does not know when a thread was outside
    every region)."""
    rt = prof.parts.regions_threads
    states = ["busy_ns", "barrier_wait_ns", "sync_wait_ns", "lock_wait_ns"]
    out = rt.groupby(["pid", "thread"], sort=True)[states].sum().reset_index()
    working = out[states].sum(axis=1)
    out["busy_share"] = out["busy_ns"] / working.where(working > 0)
    return conform(out, "Profile.summary.threads")


def advice(prof: Profile) -> pd.DataFrame:
    """advice.advice from a profile: the rules its aggregates allow (short regions,
    from imbalance(); contended locks, from lock_contention()), with the time at
    stake measured against the threads' time in parallel regions.  ``attrs
    ["cannot"]``: the rules a profile cannot give, and why
    (advice.CANNOT_FROM_PROFILE)."""
    p = prof.parts
    out = rules.advise(float(p.regions_threads["busy_ns"].sum()),
                       regions=imbalance(prof) if len(p.regions_threads) else None,
                       locks=lock_contention(prof) if len(p.locks) else None)
    out.attrs["cannot"] = dict(rules.CANNOT_FROM_PROFILE)
    return out


def overview(prof: Profile) -> dict:
    """Counts of the profile: aggregates, processes, threads, and what was lost
    (overflow: aggregates not made; unmapped: threads without tables)."""
    procs = prof.meta["processes"]
    p = prof.parts
    return {"aggregates": sum(len(t) for t in (p.constructs, p.regions_threads, p.locks,
                                                 p.tasks)),
            "processes": len(procs),
            "threads": sum(len(s["threads"]) for proc in procs for s in proc["slots"]),
            "overflow": sum(s["overflow"] for proc in procs for s in proc["slots"]),
            "unmapped": sum(proc["unmapped"] for proc in procs),
            "skipped": len(prof.meta.get("skipped", []))}


def summary(prof: Profile, top: int = 10) -> Summary:
    """summary.summary from a profile: the same sections where the profile has the
    data (regions per source location; no Python table; threads without idle
    time; tasks on log2 bins; the advice its aggregates allow, see advice);
    ``notes`` says what a profile cannot answer."""
    p = prof.parts
    notes = ["a profile: per source location, not per instance (no begin times, no "
             "timeline); quantiles estimated from log2 histograms"]
    regions = regions_per_location(imbalance(prof)).head(top) if len(p.regions_threads) \
        else None
    tasks = None
    if len(p.tasks):
        tasks = task_granularity(prof)
        attrs = tasks.attrs
        tasks = tasks[tasks["tasks"] > 0].drop(columns=["lo_ns", "hi_ns"])
        tasks.attrs = attrs
    locks = lock_contention(prof).head(top)[list(TABLES["Profile.summary.locks"].columns)] \
        if len(p.locks) else None
    sources = constructs(prof, by="source")
    sources = sources[sources["construct"] != "implicit task"].head(top)
    return Summary(overview(prof), constructs(prof), sources.drop(columns="pid"),
                   threads=thread_totals(prof) if len(p.regions_threads) else None,
                   regions=regions, tasks=tasks, locks=locks, notes=notes,
                   advice=advice(prof))

