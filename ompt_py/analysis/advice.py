"""What to do about where the time goes, computed from the figures of a trace or a
profile: one rule per known cause of lost time, each read from an answer per
source location (metrics.imbalance per location, task_sites, lock_contention)
and each with its threshold (docs/reports.md lists them):

* **short regions** (``SHORT_REGIONS``): parallel regions too short for their
  team: fork/join (a region's duration less its busiest thread's busy time,
  what no thread spent working) is at least FORK_JOIN_SHARE of the regions'
  time, over at least SHORT_MIN_REGIONS regions of the location;
* **static imbalance** (``STATIC_IMBALANCE``): a schedule(static) loop on uneven
  work: the regions' loops are static (or of a runtime that does not tell)
  and the busiest thread's busy time is at least IMBALANCE times the mean;
* **small tasks** (``SMALL_TASKS``): tasks below their creation cost: at least
  TASK_MIN tasks of a creation site whose median own work is under
  TASK_COST_FACTOR times what creating one costs;
* **contended lock** (``CONTENDED_LOCK``): a lock (critical section, ordered
  region) held most of the time it is waited for: two or more threads, and
  the time they waited for it at least LOCK_WAIT_SHARE of the time it was held.
* **late rank** (``LATE_RANK``): across the ranks of an MPI job, one rank
  arrives last at the synchronisations that end the phases (ranks.
  rank_imbalance) in more than LATE_SHARE of the phases it takes part in, over
  at least LATE_MIN_PHASES phases; the time at stake is what the other ranks
  lost waiting for it there.

A rule speaks only where the time at stake (threads' time lost to fork/join,
to the imbalance, to creating the tasks, waiting for the lock) is at least
STAKE_SHARE of the threads' busy time in parallel regions (their own work): what
fixing it could save, against the work done.  A profile has no
loops tied to regions and does not time task creation: ``CANNOT_FROM_PROFILE``
says which rules it cannot give and why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ..units import format_ns, format_share
from . import metrics, ranks, tables
from .columns import TABLES, conform
from .metrics import NO_PYTHON
from .states import require_states

if TYPE_CHECKING:
    from ..trace import Trace

SHORT_REGIONS, STATIC_IMBALANCE = "short regions", "static imbalance"
SMALL_TASKS, CONTENDED_LOCK = "small tasks", "contended lock"
LATE_RANK = "late rank"
#: The least time at stake, as a share of the threads' busy time in parallel regions.
STAKE_SHARE = 0.05
#: Short regions: fork/join's least share of the regions' time, the least regions.
FORK_JOIN_SHARE, SHORT_MIN_REGIONS = 0.3, 10
#: Static imbalance: the least max-over-mean busy time.
IMBALANCE = 1.2
#: Small tasks: median own work under this times the creation cost; the least tasks.
TASK_COST_FACTOR, TASK_MIN = 2.0, 100
#: Contended lock: the least time waited, as a share of the time held.
LOCK_WAIT_SHARE = 0.5
#: Late rank: the share of its phases one rank must arrive last in (more than), the
#: least phases.
LATE_SHARE, LATE_MIN_PHASES = 0.5, 3
#: The rules a profile cannot give, and why.
CANNOT_FROM_PROFILE = {
    STATIC_IMBALANCE: "a profile does not tie a loop (and its schedule) to its region",
    SMALL_TASKS: "a profile does not time task creation",
}
COLUMNS = list(TABLES["advice"].columns)


def where(python: object, location: object) -> str:
    """A place named by its Python line first, the native source location beside it."""
    native = location if isinstance(location, str) else "(no source location)"
    if isinstance(python, str) and python != NO_PYTHON:
        return f"{python} ({native})"
    return native


def _row(rule: str, r: object, stake: float, finding: str, advice: str) -> dict:
    python = getattr(r, "py_location", None)
    return {"rule": rule, "pid": r.pid,
            "py_location": python if isinstance(python, str) and python != NO_PYTHON else None,
            "location": r.location if isinstance(r.location, str) else None,
            "stake_ns": stake, "finding": finding, "advice": advice}


def short_regions(regions: pd.DataFrame, least_ns: float) -> list[dict]:
    """SHORT_REGIONS over regions per location (metrics.imbalance by location)."""
    out = []
    for r in regions.itertuples():
        if not (r.regions >= SHORT_MIN_REGIONS and pd.notna(r.fork_join_share)
                and r.fork_join_share >= FORK_JOIN_SHARE):
            continue
        stake = r.threads * r.fork_join_ns
        if stake < least_ns:
            continue
        mean = r.duration_ns / r.regions
        out.append(_row(SHORT_REGIONS, r, stake,
                        f"{r.regions:,} regions of {format_ns(mean)} on {r.threads} threads at "
                        f"{where(getattr(r, 'py_location', None), r.location)}: the threads "
                        f"wait {format_share(r.barrier_wait_share)} of their time at the "
                        f"barriers; fork/join costs {format_share(r.fork_join_share)} of each "
                        f"region ({format_ns(r.fork_join_ns / r.regions)} of "
                        f"{format_ns(mean)})",
                        "regions too short for their team: give each more work (one parallel "
                        "region around the loop that starts them, with omp for inside it; or "
                        "parallelise an outer loop), or run small ones on fewer threads "
                        "(num_threads, or an if clause)"))
    return out


def static_imbalance(regions: pd.DataFrame, least_ns: float) -> list[dict]:
    """STATIC_IMBALANCE over regions per location with their ``schedule``."""
    out = []
    for r in regions.itertuples():
        if r.schedule not in ("static", "unknown") or not (
                pd.notna(r.imbalance) and r.imbalance >= IMBALANCE) or r.lost_ns < least_ns:
            continue
        known = r.schedule == "static"
        out.append(_row(STATIC_IMBALANCE, r, r.lost_ns,
                        f"{r.regions:,} region{'s' if r.regions != 1 else ''} on {r.threads} "
                        f"threads at "
                        f"{where(getattr(r, 'py_location', None), r.location)}"
                        + (" with schedule(static) loops" if known else "")
                        + f": the busiest thread works {r.imbalance:.2f}x the mean; the others "
                        f"wait {format_ns(r.lost_ns)} for it",
                        ("" if known else "the runtime does not say the loops' schedule "
                         "(libomp before 19); if it is static: ")
                        + "uneven work on a static schedule: use schedule(dynamic) or "
                        "schedule(guided) (or schedule(runtime) and OMP_SCHEDULE), so that "
                        "threads done early take the iterations left"))
    return out


def small_tasks(sites: pd.DataFrame, least_ns: float) -> list[dict]:
    """SMALL_TASKS over explicit tasks per creation site (metrics.task_sites)."""
    out = []
    for r in sites.itertuples():
        if not (r.tasks >= TASK_MIN and pd.notna(r.create_ns) and pd.notna(r.median_busy_ns)
                and r.median_busy_ns < TASK_COST_FACTOR * r.create_ns):
            continue
        stake = r.tasks * r.create_ns
        if stake < least_ns:
            continue
        out.append(_row(SMALL_TASKS, r, stake,
                        f"{r.tasks:,} tasks created at "
                        f"{where(getattr(r, 'py_location', None), r.location)}: median own "
                        f"work {format_ns(r.median_busy_ns)}, creating one costs about "
                        f"{format_ns(r.create_ns)} ({format_share(r.creation_overhead_share)} "
                        "of their time)",
                        "tasks below their creation cost: give each task more work (a larger "
                        "grain), or stop making tasks below a size (a cut-off: if() or final() "
                        "clauses, or run small pieces inline)"))
    return out


def contended_locks(locks: pd.DataFrame, least_ns: float) -> list[dict]:
    """CONTENDED_LOCK over locks (metrics.lock_contention)."""
    out = []
    for r in locks.itertuples():
        hold = r.hold_total_ns
        if not (r.threads >= 2 and pd.notna(hold) and hold > 0
                and r.wait_total_ns >= LOCK_WAIT_SHARE * hold) or r.wait_total_ns < least_ns:
            continue
        out.append(_row(CONTENDED_LOCK, r, r.wait_total_ns,
                        f"{r.kind} taken {r.acquisitions:,} times by {r.threads} threads at "
                        f"{where(getattr(r, 'py_location', None), r.location)}: they waited "
                        f"{format_ns(r.wait_total_ns)} for it in all, and it was held "
                        f"{format_ns(hold)} (mean hold {format_ns(r.hold_mean_ns)})",
                        "a lock held most of the time it is waited for: hold it for less "
                        "(move work out of the critical section), or lock finer (a lock per "
                        "item, atomics, or per-thread copies combined at the end)"))
    return out


def late_rank(late: pd.DataFrame, least_ns: float) -> list[dict]:
    """LATE_RANK over the ranks' lateness (ranks.rank_imbalance by="rank")."""
    out = []
    for r in late.itertuples():
        if not (r.phases >= LATE_MIN_PHASES and r.late > LATE_SHARE * r.phases
                and r.caused_ns >= least_ns):
            continue
        who = f"pid {r.pid}" if pd.isna(r.rank) else f"rank {r.rank} (pid {r.pid})"
        out.append({"rule": LATE_RANK, "pid": r.pid, "py_location": None, "location": None,
                    "stake_ns": r.caused_ns,
                    "finding": f"{who} arrived last in {r.late:,} of the {r.phases:,} phases "
                               f"it took part in ({format_share(r.late_share)}); the other "
                               f"ranks lost {format_ns(r.caused_ns)} waiting for it there",
                    "advice": "one rank holds the others back at their synchronisations: give "
                              "it less work (balance the decomposition across ranks), or find "
                              "what makes it slower: its row of t.ranks() against the others' "
                              "(OpenMP time lost to imbalance inside it, fewer threads, time "
                              "in MPI calls, its node), its time per phase in "
                              "t.rank_imbalance(by='arrival')"})
    return out


def advise(base_ns: float, regions: pd.DataFrame | None = None,
           sites: pd.DataFrame | None = None, locks: pd.DataFrame | None = None,
           late: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every rule over the answers given (None: not in the trace or profile), the
    time at stake measured against ``base_ns`` (the threads' busy time in
    parallel regions): rule, pid, py_location, location, stake_ns, finding,
    advice; most time at stake first.  ``late``: the ranks' lateness
    (ranks.rank_imbalance by="rank") of a job of several ranks."""
    least = STAKE_SHARE * base_ns
    rows = []
    if regions is not None:
        rows += short_regions(regions, least)
        if "schedule" in regions:
            rows += static_imbalance(regions, least)
    if sites is not None:
        rows += small_tasks(sites, least)
    if locks is not None:
        rows += contended_locks(locks, least)
    if late is not None:
        rows += late_rank(late, least)
    out = pd.DataFrame(rows, columns=COLUMNS)
    return conform(out.sort_values("stake_ns", ascending=False, kind="stable")
                   .reset_index(drop=True), "advice")


def advice(trace: Trace, regions: pd.DataFrame | None = None,
           locks: pd.DataFrame | None = None, late: pd.DataFrame | None = None
           ) -> pd.DataFrame:
    """What to do (see the module), from a trace: one row per place and rule that
    fires (advise).  ``regions`` (metrics.imbalance by Python location, or by
    source without Python stacks), ``locks`` (metrics.lock_contention) and
    ``late`` (ranks.rank_imbalance by="rank", for a job of several ranks): the
    caller's, when it made them already."""
    require_states(trace, "advice()")
    by = "python" if metrics.has_python_stacks(trace) else "source"
    present = tables.present_events(trace)
    if regions is None and "parallel_begin" in present:
        regions = metrics.imbalance(trace, by=by)
    sites = metrics.task_sites(trace, by=by) if {"task_create", "task_schedule"} <= present \
        else None
    if locks is None and {"mutex_acquire", "mutex_acquired", "mutex_released"} <= present:
        locks = metrics.lock_contention(trace)
    if late is None and ranks.several(trace.meta):
        late = ranks.compare(ranks.arrivals(trace), "rank", len(ranks.processes(trace)))
    base = float(metrics.region_threads(trace)["busy_ns"].sum())
    return advise(base, regions, sites, locks, late)
