"""Across the ranks of an MPI job (or the processes of any trace): each rank's
OpenMP figures side by side (``ranks``), and which rank the others wait for
(``rank_imbalance``).

Both are made of per-process parts, so that a dataset too large for one
process can compute them partition by partition and concatenate:

* ``rank_rows(trace)`` is one row per process of ``trace``, each a function of
  that process's events and metadata alone: ``rank_rows`` of each partition (a
  process's trace), concatenated, is ``ranks()`` of the whole, row for row
  (``begin_ns``/``end_ns`` are on each trace's own time axis: shift a
  partition's by its origin's distance to the merged trace's,
  ``meta["origin_mono_ns"]``).
* ``arrivals(trace)`` is each process's arrivals at the synchronisations that
  close the phases (a function of each process alone, as rank_rows);
  ``compare(arrivals)`` matches them across ranks: ``rank_imbalance`` is
  ``compare(arrivals(trace))``, and ``compare`` of the partitions' arrivals
  concatenated gives the same answer.

Busy and waiting are the thread states' (``states``: the one definition),
the rank's own OpenMP imbalance is metrics.imbalance's, the MPI calls are
tables.mpi_calls'.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import TraceWarning
from ..meta import ranks as ranks_of
from ..units import text
from . import metrics, tables
from .columns import MPI_KINDS, TABLES, conform
from .states import closed, key_pid_thread, process_spans, thread_totals, threads, to_int

if TYPE_CHECKING:
    from ..trace import Trace

#: The kinds of MPI call that close a phase when every rank takes part
#: (records.MPI_CALL_KINDS).
SYNC_KINDS = ("barrier", "collective")
_WAITS = ("barrier_wait_ns", "sync_wait_ns", "lock_wait_ns")
#: The columns of rank_rows (and ranks(), which leaves out the mpi ones when no
#: process made MPI calls).
RANK_COLUMNS = list(TABLES["ranks"].columns)
ARRIVAL_COLUMNS = list(TABLES["arrivals"].columns)


def _ints(values: object) -> pd.arrays.IntegerArray:
    """Nullable integers (<NA> for None)."""
    return pd.array(values, dtype="Int64")


# ---- per rank: its OpenMP figures ------------------------------------------------------------


def rank_rows(trace: Trace) -> pd.DataFrame:
    """One row per process of ``trace``, each computed from that process's events
    and metadata alone (see the module: the rows of partitions concatenate into
    the rows of their whole).  Columns (RANK_COLUMNS):

    * ``rank`` (the job's rank, <NA> without one), ``pid``, ``host``,
      ``local_rank`` (on its node, <NA> where not known), ``threads`` (with events);
    * ``begin_ns``, ``end_ns``, ``span_ns``: its first and last event and the time
      between them (its wall span);
    * ``parallel_ns``: the wall time during which at least one of its parallel
      regions ran (nested and concurrent regions once), ``parallel_share`` of its
      span;
    * ``busy_ns``, ``barrier_wait_ns``, ``sync_wait_ns`` (taskwait, taskgroup,
      reductions), ``lock_wait_ns``: its threads' time in each state (states:
      the one definition of busy and waiting), ``waiting_ns`` their sum,
      ``busy_share`` = busy / (busy + waiting);
    * ``regions`` (parallel regions), ``imbalance`` (the mean over them of max
      over mean busy time of their threads) and ``omp_lost_ns`` (what its
      threads waited for the busiest of each region: metrics.imbalance's
      lost_ns, summed): its own OpenMP imbalance;
    * ``mpi_ns``: its time in MPI calls other than setup, and ``mpi_KIND_ns`` per
      kind of call (MPI_KINDS; setup: MPI_Init, MPI_Finalize, ompt-py's clock
      measurement); <NA> for a process without MPI calls recorded.
    """
    procs = {p["pid"]: p for p in trace.meta.get("processes", [])}
    pids = processes(trace)
    out = pd.DataFrame({"pid": pids})
    rank = ranks_of(trace.meta, pids)
    out["rank"] = rank.astype("Int64") if rank is not None else _ints([None] * len(pids))
    out["host"] = text([procs.get(p, {}).get("hostname") for p in pids])
    out["local_rank"] = _ints([procs.get(p, {}).get("local_rank") for p in pids])
    out["threads"] = _fill(pd.Series(key_pid_thread(threads(trace))[0]).value_counts(), pids, 0)
    spans = process_spans(trace)
    out["begin_ns"] = _ints(spans["first_ns"].reindex(pids))
    out["end_ns"] = _ints(spans["last_ns"].reindex(pids))
    out["span_ns"] = out["end_ns"] - out["begin_ns"]
    present = tables.present_events(trace)
    parallel = _parallel_ns(trace) if "parallel_begin" in present else pd.Series(dtype=float)
    out["parallel_ns"] = _fill(parallel, pids, 0)
    out["parallel_share"] = out["parallel_ns"] / out["span_ns"].where(out["span_ns"] > 0)
    states = thread_totals(trace).groupby("pid")[["busy_ns", *_WAITS]].sum()
    for c in ("busy_ns", *_WAITS):
        out[c] = _fill(states[c], pids, 0)
    out["waiting_ns"] = out[list(_WAITS)].sum(axis=1)
    active = out["busy_ns"] + out["waiting_ns"]
    out["busy_share"] = out["busy_ns"] / active.where(active > 0)
    if "parallel_begin" in present:
        own = metrics.imbalance(trace).groupby("pid").agg(
            regions=("parallel_id", "size"), imbalance=("imbalance", "mean"),
            omp_lost_ns=("lost_ns", "sum"))
    else:
        own = pd.DataFrame(columns=["regions", "imbalance", "omp_lost_ns"])
    out["regions"] = _fill(own["regions"], pids, 0)
    out["imbalance"] = own["imbalance"].reindex(pids).to_numpy(np.float64)
    out["omp_lost_ns"] = _fill(own["omp_lost_ns"], pids, 0)
    calls = tables.mpi_calls(trace)
    by_kind = calls.pivot_table(index="pid", columns="kind", values="duration_ns",
                                aggfunc="sum", observed=False, fill_value=0)
    made = np.isin(pids, calls["pid"].unique())  # the others: <NA>
    for k in MPI_KINDS:
        spent = by_kind[k].reindex(pids).fillna(0) if k in by_kind else pd.Series(0, index=pids)
        out[f"mpi_{k}_ns"] = pd.arrays.IntegerArray(spent.to_numpy(np.int64), ~made)
    out["mpi_ns"] = out[[f"mpi_{k}_ns" for k in MPI_KINDS if k != "setup"]].sum(
        axis=1, min_count=1).astype("Int64")
    return conform(out[RANK_COLUMNS], "ranks")


def processes(trace: Trace) -> np.ndarray:
    """The pids of the trace's processes: those with events or metadata, sorted."""
    known = np.array([p["pid"] for p in trace.meta.get("processes", [])], np.int64)
    return np.union1d(process_spans(trace).index.to_numpy(np.int64), known).astype(np.int64)


def several(meta: dict) -> bool:
    """Whether a trace's (or dataset's) metadata holds more than one rank of a job
    (processes with a rank)."""
    return len({p.get("rank") for p in meta.get("processes", [])} - {None}) > 1


def _fill(values: pd.Series, pids: np.ndarray, default: int) -> np.ndarray:
    """``values`` (indexed by pid) for ``pids``, ``default`` where it has none."""
    at = values.index.get_indexer(pids)
    out = np.full(len(pids), default, np.int64)
    out[at >= 0] = values.to_numpy()[at[at >= 0]]
    return out


def _parallel_ns(trace: Trace) -> pd.Series:
    """Per pid: the wall time covered by its parallel regions (overlaps once)."""
    regions = closed(trace, tables.region_intervals)
    pid = to_int(regions["pid"])
    codes, pids = pd.factorize(pid, sort=True)
    begin = to_int(regions["begin_ns"])
    covered = metrics.union_ns(codes.astype(np.int64), begin,
                               begin + to_int(regions["duration_ns"]), len(pids))
    return pd.Series(covered, index=pids)


def ranks(trace: Trace) -> pd.DataFrame:
    """Per rank (per process), its OpenMP figures side by side: rank_table of the
    trace's rank_rows."""
    return rank_table(rank_rows(trace))


def rank_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The ranks' table from rank_rows (of a trace, or of a dataset's partitions
    concatenated): by rank (then pid); the mpi columns left out when no process
    made MPI calls."""
    out = rows.sort_values(["rank", "pid"], kind="stable").reset_index(drop=True)
    mpi = [c for c in out.columns if c.startswith("mpi_")]
    return out.drop(columns=mpi) if out[mpi].isna().all().all() else out


# ---- across ranks: who is late, who waits -----------------------------------------------------


def _world_sizes(trace: Trace, pids: np.ndarray, sizes: pd.Series) -> np.ndarray:
    """Each row's job size: its process's MPI world size (meta), else the largest
    communicator its process used (``sizes``: comm_size of its calls)."""
    known = {p["pid"]: (p.get("mpi") or {}).get("size") for p in trace.meta.get("processes", [])}
    largest = pd.Series(sizes.to_numpy(np.float64, na_value=np.nan)).groupby(pids).max()
    return np.array([known.get(p) or largest.get(p, np.nan) for p in pids], np.float64)


def arrivals(trace: Trace) -> pd.DataFrame:
    """Each process's arrivals at the synchronisations that close phases, in its
    order: pid, rank, source, call, n (its n-th such call; of its name, for
    region markers), begin_ns (its arrival), end_ns (its exit; <NA> for markers)
    and since_ns (from its exit from the previous one, or from its first event,
    to this arrival: its own time in the phase).  Each process's rows are a
    function of its own events and metadata.

    ``source`` ``"mpi"``: its MPI barriers and collectives on a communicator of
    the job's size (its MPI world size, as its metadata says; else the largest
    communicator it used), when the trace has MPI calls; ``"region"``: without
    MPI calls, the ends of its outermost region markers (ompt_py.region,
    omptpy_region.h; any thread)."""
    calls = tables.mpi_calls(trace)
    if len(calls):
        sync = calls[calls["kind"].isin(SYNC_KINDS)]
        pids = sync["pid"].to_numpy(np.int64)
        world = _world_sizes(trace, pids, sync["comm_size"])
        sync = sync[sync["comm_size"].to_numpy(np.float64, na_value=np.nan) == world]
        out = sync[["pid", "rank", "call", "begin_ns", "end_ns"]].assign(source="mpi")
        out["end_ns"] = _ints(out["end_ns"])
        key = ["pid"]
    else:
        user = tables.user_regions(trace)
        user = user[user["level"] == 0].sort_values(["pid", "end_ns"], kind="stable")
        rank = ranks_of(trace.meta, user["pid"].to_numpy(np.int64))
        out = pd.DataFrame({"pid": user["pid"].to_numpy(np.int64),
                            "rank": rank if rank is not None else _ints([None] * len(user)),
                            "call": user["name"].array,
                            "begin_ns": user["end_ns"].to_numpy(np.int64),
                            "end_ns": _ints([None] * len(user)), "source": "region",
                            "since_ns": user["duration_ns"].to_numpy(np.int64)})
        key = ["pid", "call"]
    out = out.sort_values(["pid", "begin_ns"], kind="stable").reset_index(drop=True)
    out["n"] = out.groupby(key, sort=False).cumcount()
    if out["source"].eq("mpi").all() and len(out):
        first = process_spans(trace)["first_ns"]
        before = out.groupby("pid")["end_ns"].shift().astype("Float64")
        start = before.fillna(pd.Series(first.reindex(out["pid"]).to_numpy(np.float64)))
        out["since_ns"] = out["begin_ns"] - start
    elif not len(out):
        out["since_ns"] = pd.Series(dtype=np.int64)
    out["rank"] = out["rank"].astype("Int64")
    return conform(out[ARRIVAL_COLUMNS], "arrivals")


#: rank_imbalance's columns by="phase", "rank" and "arrival" (analysis.columns).
PHASE_COLUMNS = list(TABLES["rank_imbalance"].columns)
RANK_LATE_COLUMNS = list(TABLES["rank_imbalance(rank)"].columns)
ARRIVAL_BY_COLUMNS = list(TABLES["rank_imbalance(arrival)"].columns)
_TABLE_BY = {"phase": "rank_imbalance", "rank": "rank_imbalance(rank)",
             "arrival": "rank_imbalance(arrival)"}


def compare(arrived: pd.DataFrame, by: str = "phase", processes: int | None = None
            ) -> pd.DataFrame:
    """rank_imbalance from arrivals (``arrivals`` of a trace, or of the partitions
    of a dataset concatenated) of a job of ``processes`` processes (default: those
    that arrived anywhere): see rank_imbalance.  Where some are MPI calls, region
    markers (of partitions without MPI calls) are left out, as ``arrivals`` of
    the whole trace leaves them."""
    if by not in ("phase", "rank", "arrival"):
        raise ValueError(f"by={by!r}: use 'phase', 'rank' or 'arrival'")
    notes: list[str] = []
    a = arrived.reset_index(drop=True)
    if (a["source"] == "mpi").any():  # partitions without MPI calls gave region markers
        a = a[a["source"] == "mpi"].reset_index(drop=True)
    region = bool(len(a)) and (a["source"] == "region").all()
    arriving = a["pid"].nunique()
    if arriving < 2:
        notes.append(_why_none(arriving, arriving if processes is None else processes))
        return _empty(by, notes)
    key = ["call", "n"] if region else ["n"]
    # Phases in the order of their last arrival (markers of several names interleave).
    last = a.groupby(key)["begin_ns"].transform("max")
    order = a.assign(_last=last).groupby(key)["_last"].first().sort_values(kind="stable")
    number = pd.Series(np.arange(len(order)), index=order.index)
    a["phase"] = number.reindex(pd.MultiIndex.from_frame(a[key]) if region
                                else a["n"]).to_numpy(np.int64)
    a = a.sort_values(["phase", "begin_ns", "rank", "pid"], kind="stable").reset_index(drop=True)
    g = a.groupby("phase", sort=True)
    last = g["begin_ns"].transform("max").to_numpy(np.int64)
    begin = a["begin_ns"].to_numpy(np.int64)
    if region:  # no call seen: as if they synchronised after the region
        wait = last - begin
    else:  # inside its call until the late rank arrived
        wait = np.clip(np.minimum(a["end_ns"].to_numpy(np.int64, na_value=0), last) - begin,
                       0, None)
    a["wait_ns"] = wait
    count = g["pid"].transform("size").to_numpy()
    a["late"] = (a.groupby("phase").cumcount(ascending=False).to_numpy() == 0) & (count > 1)
    if by == "arrival":
        out = a[ARRIVAL_BY_COLUMNS]
    else:
        late = a[a["late"]].set_index("phase")
        calls, names = g["call"].first(), g["call"].nunique()
        for phase in names.index[names > 1]:  # calls matched by order that differ
            calls[phase] = "/".join(pd.unique(a.loc[a["phase"] == phase, "call"]))
        phases = pd.DataFrame({
            "phase": calls.index.to_numpy(np.int64), "call": text(calls.to_numpy(object)),
            "calls_match": names.to_numpy() == 1,
            "ranks": g["pid"].size().to_numpy(),
            "first_arrival_ns": g["begin_ns"].min().to_numpy(np.int64),
            "last_arrival_ns": g["begin_ns"].max().to_numpy(np.int64),
            "lost_ns": g["wait_ns"].sum().to_numpy(np.int64),
            "wait_max_ns": g["wait_ns"].max().to_numpy(np.int64)})
        start = (a["begin_ns"] - a["since_ns"]).groupby(a["phase"]).min()
        phases.insert(4, "begin_ns", start.to_numpy(np.int64))
        phases["end_ns"] = (g["end_ns"].max().to_numpy(np.float64, na_value=np.nan) if not region
                            else phases["last_arrival_ns"].to_numpy(np.float64))
        phases["late_rank"] = _ints(late["rank"].reindex(phases["phase"]).tolist())
        phases["late_pid"] = _ints(late["pid"].reindex(phases["phase"]).tolist())
        notes += _mismatches(a, phases, region)
        out = phases[PHASE_COLUMNS] if by == "phase" else _per_rank(a, phases)
    out = conform(out.reset_index(drop=True), _TABLE_BY[by])
    if region:
        notes.append("phases from region markers (no MPI calls recorded): a rank's wait is "
                     "estimated, the time from its region's end to the last rank's, as if "
                     "the ranks synchronised after it (trace with ompt-py run --mpi to see "
                     "the calls)")
    out.attrs["notes"] = notes
    return out


def _per_rank(a: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """by="rank": per rank, the phases it took part in, was late in, what the
    others lost waiting for it and what it lost waiting for them."""
    caused = phases.dropna(subset=["late_pid"]).groupby("late_pid")["lost_ns"].sum()
    g = a.groupby("pid", sort=False)
    out = g.agg(rank=("rank", "first"), phases=("phase", "size"), late=("late", "sum"),
                waited_ns=("wait_ns", "sum")).reset_index()
    out["caused_ns"] = caused.reindex(out["pid"]).fillna(0).to_numpy(np.int64)
    out["late_share"] = out["late"] / out["phases"]
    return out[RANK_LATE_COLUMNS].sort_values(["caused_ns", "rank"], ascending=[False, True],
                                              kind="stable")


def _mismatches(a: pd.DataFrame, phases: pd.DataFrame, region: bool) -> list[str]:
    """What to say about calls matched by order that differ, and ranks without
    some phases."""
    notes = []
    odd = phases[~phases["calls_match"]]
    if len(odd):
        first = int(odd["phase"].iat[0])
        at = a[a["phase"] == first]
        said = ", ".join(f"{_who(r)}: {c}" for r, c in zip(at.itertuples(), at["call"]))
        notes.append(f"the ranks' synchronising calls differ in {len(odd):,} phase(s), from "
                     f"phase {first} ({said}): calls are matched by their order, so from there "
                     "a phase may pair calls that do not belong together (a rank made a call "
                     "the others did not, or its part was cut short)")
    everyone = a["pid"].nunique()
    short = phases[phases["ranks"] < everyone]
    if len(short):
        made = a.groupby("pid").agg(rank=("rank", "first"), n=("phase", "size"))
        most = int(made["n"].max())
        fewer = made[made["n"] < most]
        what = "region markers" if region else "synchronising calls"
        names = ", ".join(f"{_who(r)} has {r.n:,}" for r in fewer.reset_index().itertuples())
        notes.append(f"{len(short):,} phase(s) lack some ranks ({names} {what}, the others up "
                     f"to {most:,}: a part cut short, or ranks that made different calls): "
                     "those phases compare the ranks present")
    return notes


def _who(row: object) -> str:
    rank = getattr(row, "rank", None)
    return f"pid {row.pid}" if rank is None or pd.isna(rank) else f"rank {rank}"


def _why_none(arriving: int, processes: int) -> str:
    if processes < 2:
        return ("the trace has one process: nothing to compare across ranks (load the "
                "directory that holds every rank's part)")
    what = ("no MPI barrier or collective on a communicator of the job's size, and no region "
            "markers" if not arriving else "only one process made them")
    return (f"no phases: {what} (trace the job with ompt-py run --mpi, or mark its phases "
            "with ompt_py.region on every rank)")


def _empty(by: str, notes: list[str]) -> pd.DataFrame:
    out = conform(pd.DataFrame(), _TABLE_BY[by])
    out.attrs["notes"] = notes
    return out


def rank_imbalance(trace: Trace, by: str = "phase") -> pd.DataFrame:
    """Across ranks: the rank that is late in each phase and what the others lost
    waiting for it.

    A phase ends at a synchronisation every rank takes part in: an MPI barrier
    or collective on a communicator of the job's size (MPI_COMM_WORLD's),
    matched across ranks by order (the k-th such call of each rank closes
    phase k; ``calls_match`` says whether they are calls of one name, and
    ``attrs["notes"]`` says from which phase they differ); it begins when the
    first rank leaves the previous one (the first phase: at the first rank's
    first event).  Without MPI calls in the trace, phases end at the ends of
    region markers (ompt_py.region, omptpy_region.h; the outermost ones),
    matched by name and order (the k-th region of a name on each rank), in the
    order of their last end.

    Counted per phase: each rank's arrival (the time it entered the closing
    call: its begin), the late rank (the last to arrive), each other rank's
    wait (as Scalasca's "wait at barrier": its time inside the closing call
    until the late rank arrived; a call that returned earlier, a rooted
    collective's, counts until it returned) and ``lost_ns``, the waits summed.
    With region markers no call is seen: a rank's wait is estimated as the
    time from its region's end to the last rank's.

    ``by="phase"``: one row per phase (phase, call, calls_match, ranks taking
    part, begin_ns, end_ns (the last exit from its call), first_arrival_ns,
    last_arrival_ns, late_rank, late_pid, lost_ns, wait_max_ns); ``by="rank"``:
    per rank, the phases it took part in, ``late`` (how many it was last in),
    late_share, ``caused_ns`` (what the others lost in those phases) and
    ``waited_ns`` (what it lost waiting for others), most caused first;
    ``by="arrival"``: one row per rank and phase (its call, arrival begin_ns,
    exit end_ns, since_ns: its own time in the phase, from its previous exit;
    wait_ns; late).

    Phases that lack some ranks (a part cut short, a rank that made other
    calls) compare the ranks present, and ``attrs["notes"]`` says so; a phase
    of one rank has no late rank.  A trace of one process has no phases: an
    empty table, and a TraceWarning saying why (also in ``attrs["notes"]``).
    """
    out = compare(arrivals(trace), by, len(processes(trace)))
    if out.empty:
        for note in out.attrs["notes"]:
            warnings.warn(note, TraceWarning, stacklevel=3)
    return out

