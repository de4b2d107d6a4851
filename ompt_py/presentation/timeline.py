"""What a timeline of a trace draws: the bars of each thread and device.

One table of bars, made from the trace's tables (ompt_py.analysis), for the
matplotlib timeline (``plots.timeline``) and the interactive view
(``view``): per thread, the implicit tasks of parallel regions (one bar per
thread and region), work-sharing constructs, the waits at barriers, in
taskwait/taskgroup and for locks, explicit tasks (the pieces a thread ran),
locks and critical sections held, and with offload the target constructs, data
operations and kernel submissions on the host thread; per device, its kernels
and transfers (``offload.device_track``, on the host clock).

Each bar has a ``kind`` (a row of KINDS: its name, colour, band within the lane
and drawing layer) and a ``site`` (a row of the table of (Python line, native
location) pairs: the code behind it), its team size and the time its thread
waited in it.  Codes, not strings: a trace of 10^7 events has millions of bars.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..analysis import metrics, offload, tables
from ..analysis.cache import per_trace
from ..analysis.pairing import find, group_ids
from ..analysis.states import (
    closed,
    is_barrier,
    region_tasks,
    task_waits,
    thread_key,
    thread_states,
    to_int,
    tool_stalls,
)
from ..errors import MissingEventsError
from ..records import TRANSFERS_TO_DEVICE, WORK_TYPES

if TYPE_CHECKING:
    from ..trace import Trace


@dataclass(frozen=True)
class Kind:
    """A kind of bar: its name (the legend's, the hover's construct), colour, the
    band it fills within its lane (bottom, top: -0.5 to 0.5 around the lane's
    centre) and its layer (drawing order: higher on top)."""

    label: str
    colour: str
    bottom: float
    top: float
    layer: int


#: Colours of the thread states (also used for the timeline's waits).
STATE_COLOURS = {"busy": "#55a868", "barrier_wait": "#c44e52", "sync_wait": "#e377c2",
                 "lock_wait": "#8172b2", "tool_stall": "#000000", "idle": "#dddddd"}
_WORK_COLOURS = {"loop_static": "#4c72b0", "loop_dynamic": "#64b5cd", "loop_guided": "#2a4d80",
                 "loop": "#4c72b0", "sections": "#8c8cd9", "single_executor": "#ccb974",
                 "single_other": "#e8dcae"}
_OTHER_WORK = "#9fb6cd"
_REGION, _MID, _TASK, _HELD = (-0.45, 0.45), (-0.32, 0.32), (-0.2, 0.2), (0.32, 0.45)

#: Every kind of bar; a bar's ``kind`` is its position here.
KINDS: list[Kind] = [
    Kind("parallel region", "#d9d9d9", *_REGION, 0),
    Kind("target", "#b5cf6b", *_REGION, 0),
    *(Kind(f"work: {name}", _WORK_COLOURS.get(name, _OTHER_WORK), *_MID, 1)
      for name in WORK_TYPES.values()),
    Kind("target data op", "#9edae5", *_MID, 1),
    Kind("target submit", "#17becf", *_MID, 1),
    Kind("barrier wait", STATE_COLOURS["barrier_wait"], *_MID, 2),
    Kind("taskwait/taskgroup wait", STATE_COLOURS["sync_wait"], *_MID, 2),
    Kind("lock/critical wait", STATE_COLOURS["lock_wait"], *_MID, 2),
    Kind("explicit task", "#dd8452", *_TASK, 3),
    Kind("lock/critical held", "#4d4d4d", *_HELD, 4),
    Kind("device: kernel", "#2ca02c", *_REGION, 0),
    Kind("device: transfer to device", "#1f77b4", *_REGION, 0),
    Kind("device: transfer from device", "#ff7f0e", *_REGION, 0),
]
KIND = {k.label: i for i, k in enumerate(KINDS)}
_WORK_KIND = {name: KIND[f"work: {name}"] for name in WORK_TYPES.values()}

#: The columns of bars(): the thread (key: pid << 32 | thread), the interval, the
#: kind (a row of KINDS), the site (a row of sites(); 0: none known), the team size
#: of its parallel region (0: none), the time its thread waited in it (-1: not
#: known) and the sub-track (device bars where operations overlap; else 0) of
#: ``tracks`` sub-tracks.
BAR_COLUMNS = ["key", "begin_ns", "end_ns", "kind", "site", "team", "wait_ns", "sub", "tracks"]


class _Sites:
    """The (Python line, native location) pairs of the bars, numbered from 1 as
    they are first met (0: no code known)."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, str], int] = {}

    def codes(self, py: pd.Series | np.ndarray, loc: pd.Series | np.ndarray) -> np.ndarray:
        """The site of each row of ``py`` and ``loc`` (missing values: empty)."""
        pairs = pd.DataFrame({"py": np.asarray(py, dtype=object),
                              "loc": np.asarray(loc, dtype=object)}).fillna("")
        if pairs.empty:
            return np.empty(0, np.int64)
        _, first, local = np.unique(group_ids(pairs)[0], return_index=True,
                                    return_inverse=True)
        distinct = zip(pairs["py"].to_numpy()[first].tolist(),
                       pairs["loc"].to_numpy()[first].tolist())
        mapping = np.array([0 if pair == ("", "") else
                            self.index.setdefault(pair, len(self.index) + 1)
                            for pair in distinct], np.int64)
        return mapping[local.ravel()]

    def table(self) -> pd.DataFrame:
        pairs = [("", ""), *self.index]
        return pd.DataFrame(pairs, columns=["py_location", "location"])


@dataclass
class Bars:
    """The bars of the threads (``table``, BAR_COLUMNS, in no particular order) and
    the sites their ``site`` numbers (``sites``: py_location, location; row 0 empty)."""

    table: pd.DataFrame
    sites: pd.DataFrame


def _part(key: np.ndarray, begin: np.ndarray, end: np.ndarray, kind: np.ndarray | int,
          site: np.ndarray | int = 0, team: np.ndarray | int = 0,
          wait: np.ndarray | int = -1) -> dict[str, np.ndarray]:
    """Bars of one kind as the columns of BAR_COLUMNS (constants broadcast, not copied)."""
    n = len(key)
    return {
        "key": np.asarray(key, np.int64), "begin_ns": np.asarray(begin, np.int64),
        "end_ns": np.asarray(end, np.int64),
        "kind": np.broadcast_to(np.asarray(kind, np.int16), n),
        "site": np.broadcast_to(np.asarray(site, np.int64), n),
        "team": np.broadcast_to(np.asarray(team, np.int32), n),
        "wait_ns": np.broadcast_to(np.asarray(wait, np.int64), n),
        "sub": np.broadcast_to(np.int8(0), n), "tracks": np.broadcast_to(np.int8(1), n)}


def _implicit(trace: Trace) -> pd.DataFrame:
    """The implicit tasks of parallel regions with the time their thread waited in
    each (metrics.region_threads: the thread states within each; -1 when the trace
    lacks the events of the thread states)."""
    try:
        rt = metrics.region_threads(trace)
    except MissingEventsError:
        it = region_tasks(trace)
        return it[["pid", "parallel_id", "thread", "begin_ns", "end_ns"]].assign(wait_ns=-1)
    wait = rt["barrier_wait_ns"] + rt["sync_wait_ns"] + rt["lock_wait_ns"]
    return rt[["pid", "parallel_id", "thread", "begin_ns", "end_ns"]].assign(wait_ns=wait)


def _waits(trace: Trace) -> pd.DataFrame:
    return closed(trace, tables.wait_intervals)


#: What bars() asks for beside the regions' tables (tables.linked_regions, which it
#: asks for first): a caller can have them made ``ahead`` while it makes those
#: (cache.ahead).  The thread states' layers that need no region come first, then
#: the thread states and the regions' threads, which wait for the regions' implicit
#: tasks (region_tasks) if those are still being made.
AHEAD = (_waits, tables.mutex, tables.task_pieces, tool_stalls, task_waits, thread_states,
         metrics.region_threads)


@per_trace
def bars(trace: Trace) -> Bars:
    """The bars of every thread of the trace (see the module's docstring)."""
    sites = _Sites()
    regions = tables.linked_regions(trace).table
    region_row, distinct = metrics.region_sites(trace)
    region_site = sites.codes(distinct["py_location"], distinct["location"])[region_row]
    region_team = regions["team_size"].to_numpy(np.int64, na_value=0)
    region_py = regions["py_location"].to_numpy(object)
    keys = ["pid", "parallel_id"]

    def at_region(row: np.ndarray, values: np.ndarray, none: object) -> np.ndarray:
        """``values`` of the region of each row (``none`` where there is none)."""
        if not len(values):
            return np.full(len(row), none)
        return np.where(row >= 0, values[np.maximum(row, 0)], none)

    def region_of(t: pd.DataFrame) -> np.ndarray:
        return (find(regions[keys], t[keys]) if len(regions) and len(t)
                else np.full(len(t), -1, np.intp))

    parts: list[dict[str, np.ndarray]] = []
    implicit = _implicit(trace)
    row = metrics.region_rows(trace)
    parts.append(_part(thread_key(implicit["pid"], implicit["thread"]),
                        to_int(implicit["begin_ns"]), to_int(implicit["end_ns"]),
                        KIND["parallel region"], at_region(row, region_site, 0),
                        at_region(row, region_team, 0), to_int(implicit["wait_ns"])))
    work = tables.work(trace)
    if len(work):
        row = region_of(work)
        kind = work["kind_raw"].astype(str).map(_WORK_KIND).fillna(KIND["work: loop"])
        parts.append(_part(thread_key(work["pid"], work["thread"]), to_int(work["begin_ns"]),
                            to_int(work["end_ns"]), kind.to_numpy(np.int16),
                            sites.codes(at_region(row, region_py, None), work["location"]),
                            at_region(row, region_team, 0)))
    waits = _waits(trace)
    if len(waits):
        barrier = is_barrier(waits["kind"])
        row = region_of(waits)
        duration = to_int(waits["end_ns"]) - to_int(waits["begin_ns"])
        parts.append(_part(thread_key(waits["pid"], waits["thread"]), to_int(waits["begin_ns"]),
                            to_int(waits["end_ns"]),
                            np.where(barrier, KIND["barrier wait"],
                                     KIND["taskwait/taskgroup wait"]),
                            at_region(row, region_site, 0), at_region(row, region_team, 0),
                            duration))
    mutex = tables.mutex(trace)
    if len(mutex):
        located = tables.with_source(trace, mutex)
        py = metrics.python_locations_at(trace, to_int(mutex["pid"]), to_int(mutex["thread"]),
                                         to_int(mutex["acquire_ns"]))
        site = sites.codes(py, located["location"])
        key = thread_key(to_int(mutex["pid"]), to_int(mutex["thread"]))
        for begin, end, label in (("acquire_ns", "acquired_ns", "lock/critical wait"),
                                  ("acquired_ns", "released_ns", "lock/critical held")):
            known = (mutex[begin].notna() & mutex[end].notna()).to_numpy()
            b, e = to_int(mutex[begin])[known], to_int(mutex[end])[known]
            parts.append(_part(key[known], b, e, KIND[label], site[known],
                                wait=to_int(mutex["wait_ns"])[known]))
    pieces = tables.task_pieces(trace)
    if len(pieces):
        # created() and task_stacks() have a row per task_create in the same order: the
        # columns the bars read, without tasks()'s other figures (its thread lists:
        # 0.74 s for 245,910 tasks)
        made = tables.created(trace)[["pid", "task_id", "codeptr"]].assign(
            py_location=tables.task_stacks(trace)["py_location"].array)
        made = tables.with_source(trace, made)
        row = find(made[["pid", "task_id"]], pieces[["pid", "task_id"]])
        parts.append(_part(thread_key(pieces["pid"], pieces["thread"]),
                            to_int(pieces["begin_ns"]), to_int(pieces["end_ns"]),
                            KIND["explicit task"],
                            at_region(row, sites.codes(made["py_location"], made["location"]),
                                      0)))
    if offload.has_offload(trace):
        parts += _host_offload(trace, sites)
    # Each column made once from the parts' (no frame per part, no concat of frames).
    columns = {c: np.concatenate([p[c] for p in parts]) for c in BAR_COLUMNS}
    ordered = columns["end_ns"] >= columns["begin_ns"]
    if not ordered.all():
        columns = {c: v[ordered] for c, v in columns.items()}
    return Bars(pd.DataFrame(columns, copy=False), sites.table())


def _host_offload(trace: Trace, sites: _Sites) -> list[dict[str, np.ndarray]]:
    """The bars of the target constructs, data operations and kernel submissions on
    the threads that ran them (those without an end are left out)."""
    targets = offload.target_regions(trace)
    target_site = sites.codes(targets["py_location"], targets["location"])
    parts = []
    done = targets["end_ns"].notna().to_numpy()
    parts.append(_part(thread_key(targets["pid"], targets["thread"])[done],
                        to_int(targets["begin_ns"])[done], to_int(targets["end_ns"])[done],
                        KIND["target"], target_site[done]))
    for table, label in ((offload.data_ops(trace), "target data op"),
                         (offload.kernels(trace), "target submit")):
        done = table["end_ns"].notna().to_numpy()
        region = table["target_region"].to_numpy(np.int64, na_value=-1)
        site = np.where(region >= 0, target_site[np.maximum(region, 0)]
                        if len(target_site) else 0, 0)
        parts.append(_part(thread_key(table["pid"], table["thread"])[done],
                            to_int(table["begin_ns"])[done], to_int(table["end_ns"])[done],
                            KIND[label], site[done]))
    return parts


#: The columns of device_bars(): BAR_COLUMNS (key: pid << 32 | device, the device's
#: lane) and the host operation each belongs to (host_thread, host_ns: its thread and
#: begin; <NA>: none).
DEVICE_COLUMNS = [*BAR_COLUMNS, "pid", "device", "host_thread", "host_ns"]


@per_trace
def device_bars(trace: Trace) -> pd.DataFrame:
    """The bars of the devices' lanes, one per kernel and transfer of
    offload.device_track (host clock), in bands where they overlap (``sub`` of
    ``tracks`` per device)."""
    if not offload.has_offload(trace):
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in DEVICE_COLUMNS})
    t = offload.device_track(trace)
    name = t["name"].astype(object)
    kind = np.where(name == "kernel", KIND["device: kernel"],
                    np.where(name.isin(TRANSFERS_TO_DEVICE), KIND["device: transfer to device"],
                             KIND["device: transfer from device"]))
    sub = t["sub_track"].to_numpy(np.int64)
    tracks = t.groupby(["pid", "device"])["sub_track"].transform("max").to_numpy() + 1
    out = pd.DataFrame(_part(device_key(t["pid"], t["device"]), to_int(t["begin_ns"]),
                             to_int(t["end_ns"]), kind))
    return out.assign(sub=sub.astype(np.int8), tracks=tracks.astype(np.int8),
                      pid=t["pid"].to_numpy(np.int64), device=t["device"].to_numpy(np.int64),
                      host_thread=t["host_thread"].array, host_ns=t["host_ns"].array)


def device_key(pid: pd.Series | np.ndarray, device: pd.Series | np.ndarray) -> np.ndarray:
    """The lane key of each (pid, device): pid << 32 | device (a 32-bit pattern)."""
    return thread_key(pid, np.asarray(device, np.int64) & 0xFFFFFFFF)


def bands(kind: np.ndarray, sub: np.ndarray, tracks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bottom and top of each bar within its lane: its kind's band, cut into
    ``tracks`` sub-tracks (the ``sub``-th)."""
    bottom = np.array([k.bottom for k in KINDS])[kind]
    top = np.array([k.top for k in KINDS])[kind]
    height = (top - bottom) / tracks
    return bottom + height * sub, bottom + height * (sub + 1)
