"""The answers of a dataset (``ompt_py.open_dataset``) computed partition by
partition and merged: each partition (one process) is a Trace, the same
per-trace analysis runs on it (metrics, states, summary, offload, advice) and
gives small tables, and these are merged.

What is exact after the merge and what is estimated:

* Tables keyed by process (a ``pid`` column: constructs by source or Python
  location, imbalance, lock contention, the threads' states, task sites) hold
  rows of one partition each: concatenated, they are the whole trace's, every
  figure exact.  The threads' ``idle_ns`` is made exact by the dataset's span
  (each partition measures it against its own).
* Counts, totals, minima and maxima merge exactly (sums, min, max), and so do
  the means made of them: constructs() by construct, the overview, the task
  histogram (its bins are computed from the dataset's range first, in a pass of
  their own, then each partition counts its tasks in them), offload per device.
* Quantiles are estimated, from log2 histograms merged (analysis.profile, as a
  profile's): constructs() by construct's p50_ns and p95_ns, the tasks'
  median_busy_ns, create_ns (the median back-to-back creation gap) and so
  creation_overhead_share; each within the log2 bucket of the true value (at
  most a factor of 2 off it, kept between the minimum and maximum).
* advice: its rules run on the merged tables; a task site without back-to-back
  creations of its own takes its partition's creation cost, not the dataset's.
* ranks() and rank_imbalance() (a job of several ranks): a rank's row and its
  arrivals at the phases' synchronisations are each of its own partition
  (ranks.rank_rows, ranks.arrivals); concatenated, they are the whole trace's,
  and the phases are compared from them as in one process: exact.

The partitions are given by a ``mapper``: a function that runs ``fn(trace)`` on
every partition (in this process or on Dask: Dataset.map) and returns the
results in partition order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd

from ..errors import MissingEventsError
from ..meta import why_empty
from ..records import CONSTRUCTS
from ..units import TEXT
from . import advice, cache, metrics, offload, profile, pystacks, ranks, summary, tables
from .columns import conform
from .pairing import key_groups
from .states import task_waits, thread_totals, tool_stalls
from .states import threads as thread_keys

if TYPE_CHECKING:
    from ..trace import Trace

R = TypeVar("R")
#: Runs a function on every partition's Trace and returns its results in order.
Mapper = Callable[[Callable[["Trace"], Any]], list]

_HIST_KEYS = ["construct", "kind"]


def _sorted(table: pd.DataFrame, column: str) -> pd.DataFrame:
    return table.sort_values(column, ascending=False, kind="stable").reset_index(drop=True)


def _concat(frames: Sequence[pd.DataFrame | None]) -> pd.DataFrame | None:
    """The frames one after the other (categoricals as their values: text of units.TEXT,
    what the partitions' categories differ in); None for none."""
    kept = [f.astype({c: TEXT for c in f.columns if isinstance(f[c].dtype, pd.CategoricalDtype)})
            for f in frames if f is not None]
    return pd.concat(kept, ignore_index=True) if kept else None


# ---- constructs ----------------------------------------------------------------------------


def construct_stats(trace: Trace, raw: bool = False) -> pd.DataFrame:
    """Per construct and kind (normalised; ``raw``: the runtime's): count, total_ns,
    min_ns, max_ns and hist (the durations' log2 histogram, profile.histograms):
    what merges into metrics.constructs(by="construct")."""
    kind = "kind_raw" if raw else "kind"
    parts = []
    for inst in metrics.per_construct(metrics.construct_instances(trace)):
        # Grouped by one number per group (pairing.key_groups; as metrics.constructs).
        codes, index = key_groups(inst, ["construct", kind])
        g = inst["duration_ns"].groupby(codes, observed=True, sort=False)
        out = g.agg(["count", "sum", "min", "max"]).rename(
            columns={"sum": "total_ns", "min": "min_ns", "max": "max_ns"})
        del g
        out.index = index
        out = out.reset_index().rename(columns={kind: "kind"})
        out["hist"] = list(profile.histograms(inst["duration_ns"].to_numpy(), codes.codes,
                                              len(out)))
        parts.append(out)
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def merge_constructs(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """metrics.constructs(by="construct") of the partitions' construct_stats: count,
    total, mean and max exact; p50 and p95 estimated (profile.stats)."""
    return conform(profile.stats(_concat(parts), _HIST_KEYS), "constructs")


def constructs(mapper: Mapper, by: str = "construct", raw: bool = False) -> pd.DataFrame:
    """metrics.constructs of the dataset (see the module for what is exact)."""
    metrics._check_by(by, ("construct", "source", "python"))
    if by == "construct":
        return merge_constructs(mapper(lambda t: construct_stats(t, raw)))
    out = _concat(mapper(lambda t: metrics.constructs(t, by=by, raw=raw)))
    return conform(metrics.python_order(out) if by == "python" else _sorted(out, "total_ns"),
                   f"constructs({by})")


# ---- imbalance, locks ------------------------------------------------------------------------


def imbalance(mapper: Mapper, per_thread: bool = False, by: str = "source") -> pd.DataFrame:
    """metrics.imbalance of the dataset: its rows are each of one process (exact);
    per location, most time lost first."""
    out = _concat(mapper(lambda t: metrics.imbalance(t, per_thread=per_thread, by=by)))
    if by == "region":
        return conform(out, "imbalance(per_thread)" if per_thread else "imbalance")
    return conform(_sorted(out, "lost_ns"), f"imbalance({by})")


def lock_contention(mapper: Mapper, by: str = "lock") -> pd.DataFrame:
    """metrics.lock_contention of the dataset: its rows are each of one process
    (exact); most wait first."""
    return conform(_sorted(_concat(mapper(lambda t: metrics.lock_contention(t, by=by))),
                           "wait_total_ns"),
                   "lock_contention(python)" if by == "python" else "lock_contention")


# ---- ranks -------------------------------------------------------------------------------------


def rank_table(mapper: Mapper) -> pd.DataFrame:
    """ranks.ranks of the dataset: each partition's rows (exact)."""
    return ranks.rank_table(_concat(mapper(ranks.rank_rows)))


def rank_imbalance(mapper: Mapper, processes: int, by: str = "phase") -> pd.DataFrame:
    """ranks.rank_imbalance of a dataset of ``processes`` processes: the partitions'
    arrivals compared (exact)."""
    return ranks.compare(_concat(mapper(ranks.arrivals)), by, processes)


# ---- tasks ------------------------------------------------------------------------------------


@dataclass
class TaskStats:
    """A partition's explicit tasks, as merges: created, ran, their busy time's
    total, min and max and log2 histogram, and the back-to-back creation gaps'
    min, max and histogram (metrics.creation_cost)."""

    created: int
    ran: int
    busy_total: float
    busy_lo: float
    busy_hi: float
    busy_hist: np.ndarray
    gap_lo: float
    gap_hi: float
    gap_hist: np.ndarray

    @classmethod
    def of(cls, trace: Trace) -> TaskStats:
        busy = metrics.task_runs(trace)["busy_ns"].to_numpy(np.float64)
        gaps = metrics._creation_gaps(trace)["gap_ns"].to_numpy(np.float64)

        def span(v: np.ndarray) -> tuple[float, float]:
            return (float(v.min()), float(v.max())) if len(v) else (math.nan, math.nan)

        return cls(len(tables.created(trace)), len(busy), float(busy.sum()), *span(busy),
                   profile.histograms(busy, np.zeros(len(busy), np.intp), 1)[0], *span(gaps),
                   profile.histograms(gaps, np.zeros(len(gaps), np.intp), 1)[0])


def _median(hist: np.ndarray, lo: float, hi: float) -> float:
    return float(profile.quantile(hist, 0.5, np.array([lo]), np.array([hi]))[0])


def _task_bins(mapper: Mapper, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per bin of ``edges``, the dataset's tasks and their busy time; those outside."""
    parts = mapper(lambda t: metrics.task_counts(
        metrics.task_runs(t)["busy_ns"].to_numpy(np.float64), edges))
    return (sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts))


def merge_tasks(parts: Sequence[TaskStats | None], mapper: Mapper,
                bins: int | Sequence[float] | None) -> pd.DataFrame:
    """metrics.task_granularity of the dataset from its partitions' TaskStats (None:
    a partition without tasks) and a second pass for the bins' counts (exact);
    median_busy_ns, create_ns and creation_overhead_share estimated."""
    parts = [p for p in parts if p is not None and (p.ran or p.created)]
    ran = sum(p.ran for p in parts)
    lo = min((p.busy_lo for p in parts if p.ran), default=math.nan)
    hi = max((p.busy_hi for p in parts if p.ran), default=math.nan)
    edges = metrics.task_edges(lo, hi, bins)
    counts, times, outside = (_task_bins(mapper, edges) if ran and len(edges) > 1 else
                              (np.zeros(len(edges) - 1, np.int64), np.zeros(len(edges) - 1), 0))
    busy = sum(p.busy_total for p in parts)
    out = metrics.task_table(edges, counts, times, ran, busy)
    created = sum(p.created for p in parts)
    gapped = [p for p in parts if not math.isnan(p.gap_lo)]
    create = (_median(sum(p.gap_hist for p in gapped), min(p.gap_lo for p in gapped),
                      max(p.gap_hi for p in gapped)) if gapped else math.nan)
    out.attrs.update({
        "tasks": created, "ran": ran, "outside_bins": outside,
        "median_busy_ns": _median(sum(p.busy_hist for p in parts if p.ran), lo, hi)
        if ran else math.nan,
        "create_ns": create,
        "creation_overhead_share": metrics.overhead_share(created, create, busy),
    })
    return out


def task_granularity(mapper: Mapper, bins: int | Sequence[float] | None = None
                     ) -> pd.DataFrame:
    """metrics.task_granularity of the dataset (see merge_tasks)."""
    return merge_tasks(mapper(TaskStats.of), mapper, bins)


# ---- the summary ----------------------------------------------------------------------------


@dataclass
class PartialSummary:
    """What a partition gives to the dataset's summary (summary.summary's parts):
    small tables of its process, and the notes of what it could not compute."""

    events: int
    threads: int
    first_ns: int | None
    last_ns: int | None
    constructs: pd.DataFrame
    sources: pd.DataFrame
    python_stacks: bool
    thread_states: pd.DataFrame | None = None
    by_location: pd.DataFrame | None = None
    tasks: TaskStats | None = None
    locks: pd.DataFrame | None = None
    python: pd.DataFrame | None = None
    offload: pd.DataFrame | None = None
    sites: pd.DataFrame | None = None
    busy_ns: float | None = None
    rank_rows: pd.DataFrame | None = None
    arrivals: pd.DataFrame | None = None
    stalls: int = 0  # the tool's stalls (states.tool_stalls)
    notes: list[str] = field(default_factory=list)


#: What partial_summary holds of a partition's tables for the locks: the mutex
#: table, and the small ones that the analyses read (made again, they would
#: cost more time than their memory is worth).
LOCK_TABLES = (tables.order, tables.kinds, tables.event_counts, tables.paired,
               tables.region_intervals, tables.symbol_cache, pystacks.python_stacks,
               pystacks.locations, metrics.has_python_stacks, tables.mutex)
#: ... for the tasks (TaskStats, task_sites) then the locks.
TASK_TABLES = (*LOCK_TABLES, tables.created, tables.task_pieces, task_waits)


def partial_summary(trace: Trace, top: int, python: bool, job: bool) -> PartialSummary:
    """A partition's part of the dataset's summary: summary.summary's analyses of
    its trace, as tables to merge (``python``: the dataset has Python stacks,
    so its tables are per Python location; ``job``: it holds several ranks, so
    each partition gives its rank's row and arrivals)."""
    notes: list[str] = []
    said: dict[str, list[str]] = {}  # per part, what could not be computed

    def attempt(part: str, build: Callable[[], R]) -> R | None:
        try:
            return build()
        except MissingEventsError as e:
            said.setdefault(part, []).append(str(e))
            return None

    t = trace.events["time_ns"]
    present = tables.present_events(trace)
    by = "python" if python else "source"
    sources = metrics.constructs(trace, by="source")
    out = PartialSummary(
        len(t), len(thread_keys(trace)), int(t.min()) if len(t) else None,
        int(t.max()) if len(t) else None, construct_stats(trace),
        sources[sources["construct"] != CONSTRUCTS["implicit_task"]].head(top),
        metrics.has_python_stacks(trace), notes=notes)
    if python:
        by_line = metrics.constructs(trace, by="python")
        out.python = by_line[by_line["construct"] != CONSTRUCTS["implicit_task"]]
    # The instances are the constructs' alone: not held through the other analyses
    # (the partition is summarised once).
    cache.forget(trace, metrics.construct_instances)
    out.thread_states = attempt("thread_states", lambda: thread_totals(trace))
    out.stalls = len(tool_stalls(trace))
    if "parallel_begin" in present:
        out.by_location = attempt("by_location", lambda: metrics.imbalance(trace, by=by))
    if offload.has_offload(trace):
        out.offload = offload.offload_totals(trace)
    if out.thread_states is not None:
        out.busy_ns = attempt("busy_ns", lambda: float(
            metrics.region_threads(trace)["busy_ns"].sum()))
    if job:  # (its note, if any, is the thread states': then there are no task sites)
        out.rank_rows = attempt("rank_rows", lambda: ranks.rank_rows(trace))
        out.arrivals = ranks.arrivals(trace)
    # Every analysis that reads the thread states and the intervals is made.  The
    # tasks, then the locks, each with only the tables it reads held: the rest
    # dropped and given back to the system (cache.give_back: glibc and Arrow's
    # allocator keep what freed tables leave).
    if "task_create" in present:
        cache.keep(trace, *TASK_TABLES)
        cache.give_back()
        out.tasks = attempt("tasks", lambda: TaskStats.of(trace))
        if out.thread_states is not None and "task_schedule" in present:
            out.sites = attempt("sites", lambda: metrics.task_sites(trace, by=by))
    if present & {"mutex_acquire", "mutex_acquired"}:
        cache.keep(trace, *LOCK_TABLES)
        cache.give_back()
        out.locks = attempt("locks", lambda: metrics.lock_contention(trace))
    # The notes in the order of summary.summary's parts, whatever order they were
    # made in.
    notes += [n for part in ("thread_states", "by_location", "tasks", "locks", "busy_ns",
                             "rank_rows", "sites") for n in said.get(part, [])]
    notes += [n for n in [summary.window_note(trace)] if n]
    return out


def _merge_offload(parts: list[pd.DataFrame]) -> pd.DataFrame | None:
    """offload.offload_totals of the partitions', summed per device."""
    if not parts:
        return None
    both = pd.concat(parts, ignore_index=True)
    out = both.drop(columns="bandwidth").groupby("device", sort=True).sum(min_count=1)
    moved = out["bytes_to_device"] + out["bytes_from_device"]
    out.insert(list(both.columns).index("bandwidth") - 1, "bandwidth",
               (moved / out["transfer_ns"].where(out["transfer_ns"] > 0) * 1e9))
    out = out.reset_index()
    for key in parts[0].attrs:
        out.attrs[key] = sum(p.attrs.get(key, 0) for p in parts)
    return conform(out, "summary.offload")


def _source_form(table: pd.DataFrame | None) -> pd.DataFrame | None:
    """A table per Python location of partitions without Python stacks (every row
    ``(no Python stack)``) in the form per source location."""
    return None if table is None else table.drop(columns="py_location")


def merge_summary(parts: Sequence[PartialSummary], meta: dict, mapper: Mapper, top: int,
                  labels: Sequence[str]) -> summary.Summary:
    """summary.Summary of the dataset from its partitions' PartialSummary (``labels``:
    how to name each partition in the notes)."""
    firsts = [p.first_ns for p in parts if p.first_ns is not None]
    lasts = [p.last_ns for p in parts if p.last_ns is not None]
    span = max(lasts) - min(firsts) if firsts else 0
    events = sum(p.events for p in parts)
    overview = {"events": events, "processes": len(meta["processes"]),
                "threads": sum(p.threads for p in parts), "span_ns": span,
                "written": meta["written"], "dropped": meta["dropped"], "lost": meta["lost"],
                "stalls": sum(p.stalls for p in parts),
                "why_empty": None if events else why_empty(meta)}
    notes = list(dict.fromkeys(f"{label}: {n}" for p, label in zip(parts, labels)
                               for n in p.notes))
    stacks = any(p.python_stacks for p in parts)
    by_location = _concat([p.by_location for p in parts])
    sites = _concat([p.sites for p in parts])
    if not stacks and by_location is not None and "py_location" in by_location:
        by_location, sites = _source_form(by_location), _source_form(sites)
    threads = _concat([None if p.thread_states is None else p.thread_states.assign(
        idle_ns=p.thread_states["idle_ns"] + span - ((p.last_ns or 0) - (p.first_ns or 0)))
        for p in parts])
    tasks = None
    if any(p.tasks is not None for p in parts):
        tasks = summary.task_table(merge_tasks([p.tasks for p in parts], mapper, None))
    all_locks = _concat([p.locks for p in parts])
    all_locks = None if all_locks is None else conform(_sorted(all_locks, "wait_total_ns"),
                                                       "lock_contention")
    locks = summary.lock_table(all_locks, top)
    python = None
    if stacks:
        python = summary.python_table(metrics.python_order(_concat([p.python for p in parts])),
                                      top)
    totals = _merge_offload([p.offload for p in parts if p.offload is not None])
    notes += summary.offload_notes(totals)
    sources = _sorted(_concat([p.sources for p in parts]), "total_ns").head(top)
    per_rank = phases = late = None
    if any(p.arrivals is not None for p in parts):
        rows = _concat([p.rank_rows for p in parts])
        per_rank, phases, late = summary.job_answers(
            _concat([p.arrivals for p in parts]), len(meta["processes"]),
            None if rows is None else ranks.rank_table(rows), top, notes)
    what_to_do = None
    if threads is not None:
        base = sum(p.busy_ns for p in parts if p.busy_ns is not None)
        what_to_do = advice.advise(base, by_location, sites, all_locks, late)
    regions = (summary.regions_per_location(by_location).head(top)
               if by_location is not None else None)
    return summary.Summary(overview, merge_constructs([p.constructs for p in parts]),
                           conform(sources.drop(columns="pid"), "summary.sources"),
                           threads=threads,
                           regions=regions, tasks=tasks, locks=locks, python=python,
                           offload=totals, notes=notes, advice=what_to_do, ranks=per_rank,
                           phases=phases)
