"""Offload: the host's target constructs, data operations and kernel submissions,
the device's own records, and the fit of device time to host time.

``Trace.target_regions()``, ``data_ops()``, ``kernels()`` and ``device_ops()``
are these functions; ``offload_totals`` is the summary's and the report's
"Offload" section; ``device_track`` what the timeline plot and the Perfetto
export draw on a track per device.  They read the records (not the events
frame), so that 10^6 data operations make their tables in well under a second
(bench/offload_tables.py).

A record that had more fields than a record holds is followed by a ``more``
record written by the same thread (csrc/include/omptpy.h): ``more_links``
pairs them, in each (pid, thread)'s own record order, once for every table.
A ``more`` without its primary, and a primary without the ``more`` its record
version has (records.MORE_SINCE), are counted (MoreLinks) and reported in the
tables' attrs and the summary, never dropped silently.

Host times are nanoseconds from the trace's origin (CLOCK_MONOTONIC, like every
table).  Device times are the device's own clock; ``clock_fits`` maps them to
host time by a least-squares line per device through the trace's
``device_clock`` pairs, robust to a pair whose host reads were far apart (see
fit_clock); ``attach_clocks`` writes each fit into ``meta["devices"]`` when a
trace is loaded or recorded.

Host time blocked waiting for the device (``blocked_ns``, BLOCKED_DEFINITION):
the time the encountering threads spent inside target constructs without
``nowait`` (target, target enter/exit data, target update): the thread waits
there until the device is done.  A ``nowait`` construct runs as a target task
and blocks no program thread until a taskwait, whose wait is in sync().
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .. import _core
from ..meta import record_versions
from ..records import (
    DEVICE_RECORD_TYPES,
    EVENT_CODES,
    MORE_SINCE,
    SCOPE_BEGIN,
    SCOPE_END,
    TARGET_DATA_OPS,
    TARGET_KINDS,
    TARGET_NOWAIT_BIT,
    TASK_TARGET,
    TRANSFERS_FROM_DEVICE,
    TRANSFERS_TO_DEVICE,
    Names,
    python_stack_ids,
)
from . import pystacks
from .cache import per_trace
from .columns import TABLES, conform
from .pairing import column, pair
from .tables import present_events, with_source

if TYPE_CHECKING:
    from ..trace import Trace

_MORE, _DEVICE, _CLOCK = (EVENT_CODES[e] for e in ("more", "device", "device_clock"))
_TARGET = (EVENT_CODES["target_emi"], EVENT_CODES["target"])
_DATA_OP = (EVENT_CODES["target_data_op_emi"], EVENT_CODES["target_data_op"])
_SUBMIT = (EVENT_CODES["target_submit_emi"], EVENT_CODES["target_submit"])
#: The event numbers of the offload events (has_offload).
OFFLOAD_CODES = (*_TARGET, *_DATA_OP, *_SUBMIT, _DEVICE)
# The non-EMI data op and submit callbacks fire once, at the operation's start:
# their rows are instants (no end).
_INSTANTS = (EVENT_CODES["target_data_op"], EVENT_CODES["target_submit"])

#: What offload_totals calls host time blocked waiting for the device.
BLOCKED_DEFINITION = ("host time inside target constructs without nowait (target, enter/exit "
                      "data, update): the encountering thread waits there for the device")

_NOT_NOWAIT = np.uint8(0xFF & ~TARGET_NOWAIT_BIT)
_TARGET_NAMES = Names({code & _NOT_NOWAIT: name for code, name in TARGET_KINDS.items()
                       if not code & TARGET_NOWAIT_BIT})
_DATA_OP_NAMES = Names(TARGET_DATA_OPS)
_DEVICE_TYPES = Names(DEVICE_RECORD_TYPES)
_TRANSFER_CODES = [code for code, name in TARGET_DATA_OPS.items()
                   if name in TRANSFERS_TO_DEVICE + TRANSFERS_FROM_DEVICE]


# ---- primary records and their `more` -------------------------------------------------------


@per_trace
def codes(trace: Trace) -> np.ndarray:
    """The event number of every record, contiguous (to select rows by)."""
    return np.ascontiguousarray(trace.events["event"])


def take(events: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``events[rows]``, copied as whole 64-byte words: several times faster than
    numpy's gather of a structured dtype with offsets."""
    if not events.flags.c_contiguous:
        return events[rows]
    words = events.view(np.uint64).reshape(-1, events.dtype.itemsize // 8)
    return words[rows].view(events.dtype).reshape(-1)


@dataclass
class MoreLinks:
    """The ``more`` record of each primary that has one (rows of trace.events, the
    primaries ascending), ``orphans``: ``more`` records without a primary, and
    ``missing``: per event, the primaries whose record version has a ``more``
    that came without it."""

    primary: np.ndarray
    more: np.ndarray
    orphans: int
    missing: dict[str, int]

    def of(self, rows: np.ndarray) -> np.ndarray:
        """The ``more`` row of each of ``rows`` (-1: none)."""
        at = np.minimum(np.searchsorted(self.primary, rows), max(len(self.primary) - 1, 0))
        if not len(self.primary):
            return np.full(len(rows), -1, np.intp)
        return np.where(self.primary[at] == rows, self.more[at], -1)

    def counts(self) -> dict[str, int]:
        """The losses, for a table's attrs: more_orphans, more_missing (all events)."""
        return {"more_orphans": self.orphans, "more_missing": sum(self.missing.values())}


def _previous_of_thread(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The row before each of ``rows`` in its (pid, thread)'s record order (-1: none)."""
    ev = trace.events
    key = trace.pids.astype(np.int64) << 32 | ev["thread"].astype(np.int64)
    order = np.argsort(key, kind="stable")
    position = np.empty(len(order), np.intp)
    position[order] = np.arange(len(order))
    at = position[rows]
    before = order[np.maximum(at - 1, 0)]
    return np.where((at > 0) & (key[before] == key[rows]), before, -1)


@per_trace
def more_links(trace: Trace) -> MoreLinks:
    """Each ``more`` record paired with the record before it in its (pid,
    thread)'s order, when that is its primary: the event its kind names, or a
    device record (whose ``more`` keeps another kind there)."""
    ev = trace.events
    code = codes(trace)
    more = np.flatnonzero(code == _MORE)
    prev = more - 1
    adjacent = prev >= 0
    before = np.maximum(prev, 0)
    adjacent &= ev["thread"][before] == ev["thread"][more]
    if trace.single_pid is None:
        adjacent &= trace.pids[before] == trace.pids[more]
    if not adjacent.all():  # threads' records interleaved (Trace.from_records)
        prev[~adjacent] = _previous_of_thread(trace, more[~adjacent])
    before = np.maximum(prev, 0)
    # Its kind names its primary's event, but for a device record's (whose more
    # holds the data operation's or target construct's kind there).
    linked = (prev >= 0) & (code[before] != _MORE) & (
        (code[before] == ev["kind"][more]) | (code[before] == _DEVICE))
    primary, more = prev[linked], more[linked]
    order = np.argsort(primary, kind="stable")
    primary, more = primary[order], more[order]
    has = np.zeros(len(ev), bool)
    has[primary] = True
    missing = {}
    for event, since in MORE_SINCE.items():
        rows = np.flatnonzero(code == EVENT_CODES[event])
        if not len(rows):
            continue
        versions = record_versions(trace.meta, trace.pids_at(rows))
        expected = rows if versions is None else rows[versions >= since]
        if n := int(np.count_nonzero(~has[expected])):
            missing[event] = n
    return MoreLinks(primary, more, int(np.count_nonzero(~linked)), missing)


# ---- the clock fit -----------------------------------------------------------------------

#: A clock pair whose host reads were more than this many times the median gap
#: apart (and more than OUTLIER_FLOOR_NS) is left out of the fit: the thread was
#: preempted between them, so its midpoint says little.
OUTLIER_GAP_FACTOR = 4.0
OUTLIER_FLOOR_NS = 1000.0


@dataclass
class ClockFit:
    """A device's time -> host nanoseconds: host = ref_host + slope * (device -
    ref_device); ``residual_ns``: the largest |fit - pair midpoint| over the
    ``pairs`` used (``dropped``: those left out as outliers).  ``translate``:
    (ref_s, slope_s) of the line through ompt_translate_time's answers (seconds
    of the runtime's clock), or None where the runtime gave none."""

    ref_device: int
    ref_host: float
    slope: float
    residual_ns: float
    pairs: int
    dropped: int
    translate: tuple[float, float] | None

    def host_ns(self, device: np.ndarray) -> np.ndarray:
        """Device times (uint64) as host nanoseconds from the trace's origin (float)."""
        return self.ref_host + self.slope * _since(device, self.ref_device)

    def translated_s(self, device: np.ndarray) -> np.ndarray:
        """Device times as ompt_translate_time would give them (NaN: no answers)."""
        if self.translate is None:
            return np.full(len(device), np.nan)
        ref_s, slope_s = self.translate
        return ref_s + slope_s * _since(device, self.ref_device)

    def meta(self) -> dict:
        """The fit as meta["devices"][i]["clock"]: host_ns = slope * device + offset_ns."""
        return {"slope": self.slope, "offset_ns": self.ref_host - self.slope * self.ref_device,
                "residual_ns": self.residual_ns, "pairs": self.pairs,
                "pairs_dropped": self.dropped}


def _since(device: np.ndarray, ref: int) -> np.ndarray:
    """Device times minus ``ref`` as float, exact while they are within 2^63 of it."""
    return (np.asarray(device, np.uint64) - np.uint64(ref)).view(np.int64).astype(np.float64)


def _line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted least squares y = a + b x; b = 1 when x does not vary."""
    mx, my = np.average(x, weights=w), np.average(y, weights=w)
    var = np.average((x - mx) ** 2, weights=w)
    b = np.average((x - mx) * (y - my), weights=w) / var if var > 0 else 1.0
    return my - b * mx, b


def fit_clock(before_ns: np.ndarray, after_ns: np.ndarray, device: np.ndarray,
              translated: np.ndarray) -> ClockFit | None:
    """The fit of one device's clock pairs: host reads before and after its device
    time (ns), the device time (uint64), ompt_translate_time's answer (NaN: none).
    Each pair's host time is its reads' midpoint; pairs with a gap far above the
    median are left out (OUTLIER_GAP_FACTOR), the others weigh 1/gap (a tighter
    pair bounds its midpoint better).  One pair: an offset (slope 1).  None when
    no pair has a gap >= 0."""
    gap = (after_ns - before_ns).astype(np.float64)
    usable = gap >= 0
    if not usable.any():
        return None
    limit = max(OUTLIER_GAP_FACTOR * float(np.median(gap[usable])), OUTLIER_FLOOR_NS)
    kept = usable & (gap <= limit)
    mid = before_ns[kept] + gap[kept] / 2
    ref_device = int(device[kept][0])
    ref_host = float(mid[0])
    x = _since(device[kept], ref_device)
    w = 1.0 / np.maximum(gap[kept], 1.0)
    a, slope = _line(x, mid - ref_host, w) if kept.sum() > 1 else (0.0, 1.0)
    residual = float(np.abs(a + slope * x - (mid - ref_host)).max())
    answers = kept & ~np.isnan(translated)
    translate = None
    if answers.sum() > 1:
        xt = _since(device[answers], ref_device)
        yt = translated[answers]
        ta, tb = _line(xt, yt - yt[0], np.ones(len(xt)))
        translate = (float(yt[0] + ta), float(tb))
    return ClockFit(ref_device, ref_host + a, float(slope), residual, int(kept.sum()),
                    int(usable.sum() - kept.sum()), translate)


def clock_fits_of(events: np.ndarray, pids: np.ndarray) -> dict[tuple[int, int], ClockFit | None]:
    """The fit of each (pid, device) with clock pairs in ``events`` (their ``pids``)."""
    rows = np.flatnonzero(events["event"] == _CLOCK)
    if not len(rows):
        return {}
    pairs = events[rows]
    pid = np.asarray(pids[rows], np.int64)
    device = pairs["u32a"].view(np.int32)
    bits = pairs["codeptr"]
    translated = np.where(bits == 0, np.nan, bits.view(np.float64))
    out: dict[tuple[int, int], ClockFit | None] = {}
    for p, d in sorted(set(zip(pid.tolist(), device.tolist()))):
        mine = (pid == p) & (device == d)
        out[p, d] = fit_clock(pairs["time_ns"][mine], pairs["u64b"][mine].view(np.int64),
                              pairs["u64a"][mine], translated[mine])
    return out


@per_trace
def clock_fits(trace: Trace) -> dict[tuple[int, int], ClockFit | None]:
    """clock_fits_of the trace's records."""
    rows = np.flatnonzero(trace.events["event"] == _CLOCK)
    pids = np.zeros(len(trace), np.int32)
    pids[rows] = trace.pids_at(rows)
    return clock_fits_of(trace.events, pids)


def device_entries(meta: dict) -> list[tuple[int | None, dict]]:
    """Every device entry of a trace's metadata, with its process: each process's
    (``meta["processes"][i]["devices"]``, where the tool writes them), then those of
    ``meta["devices"]`` that are in no process (a trace made from records with such
    a list, a device with clock pairs but no entry; an entry without "pid" belongs
    to the trace's one process)."""
    procs = meta.get("processes", [])
    out = [(p["pid"], d) for p in procs for d in p.get("devices", [])]
    known = {(pid, d.get("device")) for pid, d in out}
    only = procs[0]["pid"] if len(procs) == 1 else None
    out += [(d.get("pid", only), d) for d in meta.get("devices", [])
            if (d.get("pid", only), d.get("device")) not in known]
    return out


NO_CLOCK = {"slope": None, "offset_ns": None, "residual_ns": None, "pairs": 0,
            "pairs_dropped": 0}


def attach_clocks(meta: dict, events: np.ndarray, pids: np.ndarray | int) -> None:
    """Writes the clock fit of every device into ``meta`` (at load and record):
    each device entry's "clock" (NO_CLOCK where the trace has no usable pair: its
    device times stay raw); a device with pairs but no entry gets one
    ({"pid", "device", "clock"}).  ``meta["devices"]`` becomes the list of every
    device of every process, each entry with its "pid": the same dicts as the
    processes' (a view, not a copy; [] without devices)."""
    rows = np.flatnonzero(events["event"] == _CLOCK)
    entries = device_entries(meta)
    if len(rows) or entries:
        full = np.full(len(events), pids, np.int32) if isinstance(pids, int) else pids
        fits = clock_fits_of(events, full)
        for pid, entry in entries:
            fit = fits.pop((pid, entry.get("device")), None)
            entry["clock"] = fit.meta() if fit is not None else dict(NO_CLOCK)
        entries += [(pid, {"pid": pid, "device": device,
                           "clock": fit.meta() if fit is not None else dict(NO_CLOCK)})
                    for (pid, device), fit in fits.items()]
    for pid, entry in entries:
        if pid is not None:
            entry["pid"] = pid
    meta["devices"] = [entry for _, entry in entries]


# ---- the host tables --------------------------------------------------------------------------


def _rows(trace: Trace, events: tuple[int, ...]) -> np.ndarray:
    code = codes(trace)
    wanted = code == events[0]
    for c in events[1:]:
        wanted |= code == c
    return np.flatnonzero(wanted)


@dataclass
class _Ops:
    """Host operations of some events: the row of each one's begin (or instant),
    its end time (-1: none), and the unpaired counts."""

    rows: np.ndarray
    end: np.ndarray
    unmatched_begins: int
    unmatched_ends: int


def _host_ops(trace: Trace, codes: tuple[int, ...], tag: str) -> _Ops:
    """The begin/end records of ``codes`` paired per pid, thread and event (an end
    closes the latest open begin with its ``tag`` field), the instants of the
    non-EMI events as operations without an end; in time order."""
    ev = trace.events
    rows = _rows(trace, codes)
    code, endpoint = ev["event"][rows], ev["endpoint"][rows]
    instant = np.isin(code, _INSTANTS)
    scoped = rows[~instant & ((endpoint == SCOPE_BEGIN) | (endpoint == SCOPE_END))]
    found = pair([column(trace.pids_at(scoped)), column(ev["thread"][scoped]),
                  column(ev["event"][scoped])], ev["endpoint"][scoped] == SCOPE_BEGIN,
                 tags=column(ev[tag][scoped]))
    begins = np.concatenate([scoped[found.begins], rows[instant]])
    end = np.concatenate([ev["time_ns"][scoped[found.ends]],
                          np.full(int(instant.sum()), -1, np.int64)])
    order = np.argsort(ev["time_ns"][begins], kind="stable")
    return _Ops(begins[order], end[order], len(found.open), found.unmatched_ends)


def _times(ev: np.ndarray, ops: _Ops) -> dict[str, Any]:
    begin = ev["time_ns"][ops.rows]
    none = ops.end < 0
    end = pd.arrays.IntegerArray(np.where(none, 0, ops.end), none.copy())
    duration = pd.arrays.IntegerArray(np.where(none, 0, ops.end - begin), none.copy())
    return {"begin_ns": begin, "end_ns": end, "duration_ns": duration}


def _nullable(values: np.ndarray, missing: np.ndarray, dtype: Any = np.uint64) -> Any:
    return pd.arrays.IntegerArray(np.where(missing, 0, values).astype(dtype), missing)


def _find(trace_keys: list[np.ndarray], query_keys: list[np.ndarray]) -> np.ndarray:
    """For each query row, the first table row with equal keys (the last key: an id,
    0 matching nothing); -1 where none."""
    out = np.empty(len(query_keys[0]), np.intp)
    last = len(trace_keys) - 1
    _core.find([column(k, i == last) for i, k in enumerate(trace_keys)],
               [column(k, i == last) for i, k in enumerate(query_keys)], out)
    return out


def _row_refs(found: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.maximum(found, 0).astype(np.int64), found < 0)


@per_trace
def _target_ops(trace: Trace) -> _Ops:
    return _host_ops(trace, _TARGET, "u64a")


def target_regions(trace: Trace) -> pd.DataFrame:
    """One row per target, target enter/exit data and target update construct
    (target_emi and non-EMI target events; a ``target data`` construct is
    reported by the runtime as an enter data and an exit data construct): pid,
    thread, target_id, kind, nowait (the nowait bit of its kind, or run in a
    target task: libomp 19 reports a nowait target so), device, begin_ns, end_ns, duration_ns
    (host time), task_id (the encountering task), target_task_id, codeptr,
    the Python code that started it (pystacks.COLUMNS) and the function, name
    and location of the code address.  Begins and ends that could not be
    paired are counted in attrs (unmatched_begins, unmatched_ends)."""
    table = _target_table(trace)
    out = with_source(trace, table)
    out.attrs = dict(table.attrs)
    return out


@per_trace
def _target_table(trace: Trace) -> pd.DataFrame:
    """target_regions() without the source locations."""
    ev = trace.events
    ops = _target_ops(trace)
    r = take(ev, ops.rows)
    stacks = python_stack_ids(r)
    table = pd.DataFrame({
        "pid": trace.pids_at(ops.rows).astype(np.int64),
        "thread": r["thread"].astype(np.int64),
        "target_id": r["u64a"],
        "kind": _TARGET_NAMES.categorical(r["kind"] & _NOT_NOWAIT),
        "nowait": ((r["kind"] & TARGET_NOWAIT_BIT) != 0) | _in_target_task(trace, ops.rows),
        "device": r["u32a"].view(np.int32).astype(np.int64),
        **_times(ev, ops),
        "task_id": r["task_id"],
        "target_task_id": r["u64b"],
        "codeptr": r["codeptr"],
        "py_stack": pd.arrays.IntegerArray(stacks.astype(np.int64), stacks == 0),
    }, copy=False)
    table = pystacks.with_python(trace, table)
    table.attrs.update(unmatched_begins=ops.unmatched_begins, unmatched_ends=ops.unmatched_ends)
    return table


def _in_target_task(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Whether the encountering task of each of these target records is a target
    task (task_create with ompt_task_target): a nowait construct, which libomp 19
    reports with the construct's kind without the nowait bit."""
    ev = trace.events
    created = np.flatnonzero(codes(trace) == EVENT_CODES["task_create"])
    created = created[(ev["u32b"][created] & TASK_TARGET) != 0]
    if not len(created):
        return np.zeros(len(rows), bool)
    return _find([trace.pids_at(created).astype(np.int64), ev["task_id"][created]],
                 [trace.pids_at(rows).astype(np.int64), ev["task_id"][rows]]) >= 0


def _target_of(trace: Trace, pid: np.ndarray, target_id: np.ndarray) -> np.ndarray:
    """The target_regions() row of each (pid, target id) (-1: none)."""
    t = _target_table(trace)
    return _find([t["pid"].to_numpy(np.int64), t["target_id"].to_numpy(np.uint64)],
                 [np.asarray(pid, np.int64), np.asarray(target_id, np.uint64)])


@per_trace
def data_ops(trace: Trace) -> pd.DataFrame:
    """One row per data operation (target_data_op_emi, and non-EMI target_data_op,
    whose rows have no end): pid, thread, host_op_id, kind (alloc,
    transfer_to_device...), bytes, src_device, dest_device, src_addr, dest_addr
    (from the operation's ``more`` record: <NA> in traces without it), begin_ns,
    end_ns, duration_ns (host time), bandwidth (bytes per second of host time,
    for transfers), target_id and target_region (its row of target_regions()),
    codeptr.  attrs: unmatched_begins/ends, more_orphans and more_missing
    (MoreLinks)."""
    ev = trace.events
    ops = _host_ops(trace, _DATA_OP, "task_id")
    r = take(ev, ops.rows)
    more = more_links(trace).of(ops.rows)
    has = more >= 0
    extra = take(ev, np.maximum(more, 0))
    pid = trace.pids_at(ops.rows).astype(np.int64)
    times = _times(ev, ops)
    kind = _DATA_OP_NAMES.categorical(r["kind"])
    moving = np.isin(r["kind"], _TRANSFER_CODES)
    duration = times["duration_ns"].to_numpy(np.float64, na_value=np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        bandwidth = np.where(moving & (duration > 0), r["u64a"] / duration * 1e9, np.nan)
    table = pd.DataFrame({
        "pid": pid, "thread": r["thread"].astype(np.int64), "host_op_id": r["task_id"],
        "kind": kind, "bytes": r["u64a"],
        "src_device": r["u32a"].view(np.int32).astype(np.int64),
        "dest_device": r["u32b"].view(np.int32).astype(np.int64),
        "src_addr": _nullable(extra["u64a"], ~has), "dest_addr": _nullable(extra["u64b"], ~has),
        **times, "bandwidth": bandwidth, "target_id": r["u64b"],
        "target_region": _row_refs(_target_of(trace, pid, r["u64b"])),
        "codeptr": r["codeptr"],
    }, copy=False)
    table.attrs.update(unmatched_begins=ops.unmatched_begins, unmatched_ends=ops.unmatched_ends,
                       **more_links(trace).counts())
    return table


@per_trace
def kernels(trace: Trace) -> pd.DataFrame:
    """One row per kernel submission (target_submit_emi, and non-EMI target_submit,
    whose rows have no end): pid, thread, host_op_id, device (its target
    region's), requested_teams, granted_teams (from the device's kernel record,
    <NA> without one), begin_ns, end_ns, duration_ns (host time), target_id and
    target_region (its row of target_regions()).  attrs: unmatched_begins/ends."""
    ev = trace.events
    ops = _host_ops(trace, _SUBMIT, "task_id")
    r = take(ev, ops.rows)
    pid = trace.pids_at(ops.rows).astype(np.int64)
    region = _target_of(trace, pid, r["u64b"])
    devices = _target_table(trace)["device"].to_numpy(np.int64)
    device = devices[np.maximum(region, 0)] if len(devices) else np.zeros(len(region), np.int64)
    granted = np.full(len(r), -1, np.int64)
    dev = _device_kernels(trace)
    if len(dev["pid"]):
        at = _find([dev["pid"], dev["host_op_id"]], [pid, r["task_id"]])
        granted[at >= 0] = dev["granted"][at[at >= 0]]
    table = pd.DataFrame({
        "pid": pid, "thread": r["thread"].astype(np.int64), "host_op_id": r["task_id"],
        "device": pd.arrays.IntegerArray(device, region < 0),
        "requested_teams": r["u32a"].astype(np.int64),
        "granted_teams": pd.arrays.IntegerArray(np.maximum(granted, 0), granted < 0),
        **_times(ev, ops), "target_id": r["u64b"], "target_region": _row_refs(region),
    }, copy=False)
    table.attrs.update(unmatched_begins=ops.unmatched_begins, unmatched_ends=ops.unmatched_ends)
    return table


# ---- the device's records ------------------------------------------------------------------------


def _device_kernels(trace: Trace) -> dict[str, np.ndarray]:
    """pid, host_op_id and granted teams of the device's kernel records."""
    ev = trace.events
    rows = np.flatnonzero(codes(trace) == _DEVICE)
    rows = rows[np.isin(ev["kind"][rows], [k for k, v in DEVICE_RECORD_TYPES.items()
                                            if v == "kernel"])]
    more = more_links(trace).of(rows)
    rows, more = rows[more >= 0], more[more >= 0]
    return {"pid": trace.pids_at(rows).astype(np.int64), "host_op_id": ev["task_id"][rows],
            "granted": ev["u32b"][more].astype(np.int64)}


@per_trace
def device_ops(trace: Trace) -> pd.DataFrame:
    """One row per device trace record (``device`` records, from device trace
    buffers): pid, device, type (target, data_op, kernel; <NA>: a type the
    tool did not know, record_type its number), begin_ns and end_ns (the device
    times on the host clock, nanoseconds from the trace's origin, by the
    device's clock fit; <NA> where the device has none), device_begin and
    device_end (the raw device times; end 0 for target records), bad_time (end
    before begin: kept, flagged), translated_begin_s and translated_end_s
    (ompt_translate_time's answers, seconds of the runtime's clock, NaN where it
    gave none), consumed_ns (host time the tool copied the record), host_op_id
    with data_op and kernel (the row of data_ops() or kernels() with it),
    target_id with target_region (its row of target_regions()), codeptr, and
    from the record's ``more``: record_thread, op (the data operation's kind, or
    the target construct's), bytes, src/dest device and address, requested and
    granted teams.  attrs: more_orphans, more_missing, and ``clock``: per
    device, its meta["devices"] clock (NO_CLOCK: device times left raw)."""
    ev = trace.events
    rows = np.flatnonzero(codes(trace) == _DEVICE)
    r = take(ev, rows)
    more = more_links(trace).of(rows)
    has = more >= 0
    m = take(ev, np.maximum(more, 0))
    pid = trace.pids_at(rows).astype(np.int64)
    device = r["u32a"].view(np.int32).astype(np.int64)
    rtype = _DEVICE_TYPES.categorical(r["kind"])
    kind = np.asarray(rtype.astype(object))
    is_data, is_kernel, is_target = kind == "data_op", kind == "kernel", kind == "target"
    has_end = ~is_target
    begin = np.full(len(r), np.nan)
    end = np.full(len(r), np.nan)
    begin_s, end_s = np.full(len(r), np.nan), np.full(len(r), np.nan)
    fits = clock_fits(trace)
    clocks = {}
    for p, d in sorted(set(zip(pid.tolist(), device.tolist()))):
        fit = fits.get((p, d))
        clocks[p, d] = fit.meta() if fit is not None else dict(NO_CLOCK)
        if fit is None:
            continue
        mine = (pid == p) & (device == d)
        begin[mine] = fit.host_ns(r["u64a"][mine])
        end[mine] = fit.host_ns(r["u64b"][mine])
        begin_s[mine] = fit.translated_s(r["u64a"][mine])
        end_s[mine] = fit.translated_s(r["u64b"][mine])
    end[~has_end] = np.nan
    end_s[~has_end] = np.nan

    def host_ns(values: np.ndarray) -> pd.arrays.IntegerArray:
        missing = np.isnan(values)
        return pd.arrays.IntegerArray(np.where(missing, 0, np.round(values)).astype(np.int64),
                                      missing)

    data = data_ops(trace)
    kern = kernels(trace)
    op = np.full(len(r), None, object)  # a data op's kind, or a target record's construct
    op[is_data & has] = np.asarray(_DATA_OP_NAMES.categorical(m["kind"][is_data & has]), object)
    target_kind = m["kind"][is_target & has] & _NOT_NOWAIT
    op[is_target & has] = np.asarray(_TARGET_NAMES.categorical(target_kind), object)
    table = pd.DataFrame({
        "pid": pid, "device": device, "type": rtype, "record_type": r["kind"].astype(np.int64),
        "begin_ns": host_ns(begin), "end_ns": host_ns(end),
        "device_begin": r["u64a"], "device_end": _nullable(r["u64b"], ~has_end),
        "bad_time": has_end & (r["u64b"] < r["u64a"]),
        "translated_begin_s": begin_s, "translated_end_s": end_s,
        "consumed_ns": r["time_ns"], "host_op_id": r["task_id"],
        "data_op": _row_refs(np.where(is_data, _find(
            [data["pid"].to_numpy(np.int64), data["host_op_id"].to_numpy(np.uint64)],
            [pid, r["task_id"]]), -1)),
        "kernel": _row_refs(np.where(is_kernel, _find(
            [kern["pid"].to_numpy(np.int64), kern["host_op_id"].to_numpy(np.uint64)],
            [pid, r["task_id"]]), -1)),
        "target_id": r["parallel_id"],
        "target_region": _row_refs(_target_of(trace, pid, r["parallel_id"])),
        "codeptr": r["codeptr"],
        "record_thread": _nullable(m["task_id"], ~has),
        "op": pd.Categorical(op),
        "bytes": _nullable(m["parallel_id"], ~(has & is_data)),
        "src_device": _nullable(m["u32a"].view(np.int32), ~(has & is_data), np.int64),
        "dest_device": _nullable(m["u32b"].view(np.int32), ~(has & is_data), np.int64),
        "src_addr": _nullable(m["u64a"], ~(has & is_data)),
        "dest_addr": _nullable(m["u64b"], ~(has & is_data)),
        "requested_teams": _nullable(m["u32a"], ~(has & is_kernel), np.int64),
        "granted_teams": _nullable(m["u32b"], ~(has & is_kernel), np.int64),
    }, copy=False)
    table.attrs.update(clock=clocks, **more_links(trace).counts())
    return table


# ---- the device tracks of the timeline and the Perfetto export ----------------------------------


def transfer_device(kind: pd.Series, src: np.ndarray,
                    dest: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of data operations (``kind``: their kind names, ``src``/``dest``: their
    devices): the device end of each (its destination going to the device, its
    source coming back), and which move bytes to the device and from it
    (TRANSFERS_TO_DEVICE, TRANSFERS_FROM_DEVICE)."""
    names = kind.astype(object)
    to_dev = names.isin(TRANSFERS_TO_DEVICE).to_numpy()
    from_dev = names.isin(TRANSFERS_FROM_DEVICE).to_numpy()
    return np.where(from_dev, src, dest), to_dev, from_dev


def sub_tracks(begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A sub-track for each interval (``begin`` ascending) such that no two intervals
    of a sub-track overlap: sub-track 0 takes the greedy chain from the first
    interval (each next one the first to begin at or after the last one's end),
    sub-track 1 the same chain among the rest, and so on.  Per sub-track, a few
    numpy passes: the chain is followed by pointer doubling, not row by row."""
    if not len(begin) or (begin[1:] >= np.maximum.accumulate(end)[:-1]).all():
        return np.zeros(len(begin), np.int64)  # nothing overlaps: one track
    out = np.full(len(begin), -1, np.int64)
    rest = np.arange(len(begin))
    track = 0
    while len(rest):
        b, e = begin[rest], end[rest]
        m = len(rest)
        # The next of each interval in a chain; m: none (its own next, past the end).
        jump = np.append(np.maximum(np.searchsorted(b, e, "left"), np.arange(1, m + 1)), m)
        chain = np.zeros(1, np.intp)
        while True:  # chain: its first 2^k members, jump: 2^k steps
            step = jump[chain]
            step = step[step < m]
            if not len(step):
                break
            chain = np.concatenate([chain, step])
            jump = jump[jump]
        out[rest[chain]] = track
        keep = np.ones(m, bool)
        keep[chain] = False
        rest = rest[keep]
        track += 1
    return out


@per_trace
def device_track(trace: Trace) -> pd.DataFrame:
    """What the timeline plot and the Perfetto export draw on the device tracks:
    one row per kernel and transfer, by pid, device and begin: pid, device, name
    ("kernel" or the transfer's kind), begin_ns, end_ns (host clock), source
    ("device": a record of device_ops(), its times by the device's clock fit;
    "host": a row of kernels() or data_ops(), in a process without device
    records, as host-offload runtimes give), bytes (<NA> for kernels),
    sub_track (0, or more where operations of a device overlap: sub_tracks),
    and the host operation it belongs to, where a flow starts: host_thread and
    host_ns (its thread and begin; <NA>: none), host_op_id.  A transfer's
    device: its destination going to the device, its source coming back; a
    kernel's on the host: its target region's.  An operation without an end
    (a non-EMI instant) or ending before its begin (bad_time) is zero long.
    attrs: unplaced, per reason, the kernels and transfers not drawn: "no
    clock fit" (device records of a device without clock pairs: no host
    time), "no device" (host kernel submissions outside any known target
    region)."""
    ops, data, kern = device_ops(trace), data_ops(trace), kernels(trace)
    rtype = ops["type"].astype(object).to_numpy()
    # A device record is on its own device's track (its op: <NA> without its more).
    src, dest = (ops[c].to_numpy(np.int64, na_value=-1) for c in ("src_device", "dest_device"))
    _, to_dev, from_dev = transfer_device(ops["op"], src, dest)
    dev = (rtype == "kernel") | ((rtype == "data_op") & (to_dev | from_dev))
    placed = dev & ops["begin_ns"].notna().to_numpy()
    traced = np.unique(ops["pid"].to_numpy(np.int64))
    d_device, to_dev, from_dev = transfer_device(data["kind"], data["src_device"].to_numpy(),
                                                 data["dest_device"].to_numpy())
    d_rows = np.flatnonzero((to_dev | from_dev) & ~np.isin(data["pid"].to_numpy(np.int64), traced))
    k_host = ~np.isin(kern["pid"].to_numpy(np.int64), traced)
    k_rows = np.flatnonzero(k_host & kern["device"].notna().to_numpy())
    o = ops[placed]
    is_kernel = (o["type"] == "kernel").to_numpy()
    host_thread, host_ns = np.zeros(len(o), np.int64), np.zeros(len(o), np.int64)
    linked = np.zeros(len(o), bool)
    for mine, table, ref in ((is_kernel, kern, "kernel"), (~is_kernel, data, "data_op")):
        row = o[ref].to_numpy(np.int64, na_value=-1)
        mine = mine & (row >= 0)
        host_thread[mine] = table["thread"].to_numpy(np.int64)[row[mine]]
        host_ns[mine] = table["begin_ns"].to_numpy(np.int64)[row[mine]]
        linked |= mine
    d, k = data.iloc[d_rows], kern.iloc[k_rows]
    begin = np.concatenate([o["begin_ns"].to_numpy(np.int64), d["begin_ns"].to_numpy(np.int64),
                            k["begin_ns"].to_numpy(np.int64)])
    end = np.concatenate([o["end_ns"].to_numpy(np.float64, na_value=np.nan),
                          d["end_ns"].to_numpy(np.float64, na_value=np.nan),
                          k["end_ns"].to_numpy(np.float64, na_value=np.nan)])
    end = np.maximum(np.where(np.isnan(end), begin, end), begin).astype(np.int64)
    linked = np.concatenate([linked, np.ones(len(d) + len(k), bool)])
    out = pd.DataFrame({
        "pid": np.concatenate([o["pid"], d["pid"], k["pid"]]).astype(np.int64),
        "device": np.concatenate([o["device"], d_device[d_rows],
                                  k["device"].to_numpy(np.int64)]).astype(np.int64),
        "name": pd.Categorical(np.concatenate([
            np.where(is_kernel, "kernel", o["op"].astype(object).to_numpy()),
            d["kind"].astype(object).to_numpy(), np.full(len(k), "kernel", object)])),
        "begin_ns": begin, "end_ns": end,
        "source": pd.Categorical(np.repeat(["device", "host"], [len(o), len(d) + len(k)]),
                                 categories=["device", "host"]),
        "bytes": pd.arrays.IntegerArray(
            np.concatenate([o["bytes"].to_numpy(np.int64, na_value=0),
                            d["bytes"].to_numpy(np.int64), np.zeros(len(k), np.int64)]),
            np.concatenate([o["bytes"].isna().to_numpy() | is_kernel,
                            np.zeros(len(d), bool), np.ones(len(k), bool)])),
        "sub_track": 0,
        "host_thread": pd.arrays.IntegerArray(
            np.concatenate([host_thread, d["thread"], k["thread"]]).astype(np.int64), ~linked),
        "host_ns": pd.arrays.IntegerArray(
            np.concatenate([host_ns, d["begin_ns"], k["begin_ns"]]).astype(np.int64), ~linked),
        "host_op_id": np.concatenate([o["host_op_id"], d["host_op_id"],
                                      k["host_op_id"]]).astype(np.uint64),
    }, copy=False)
    out = out.sort_values(["pid", "device", "begin_ns"], kind="stable").reset_index(drop=True)
    track = out["sub_track"].to_numpy().copy()
    keys = out["pid"].to_numpy() * (1 << 32) + out["device"].to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(out) else []
    for a, b in zip(starts, [*starts[1:], len(out)]):  # per device (a few)
        track[a:b] = sub_tracks(out["begin_ns"].to_numpy()[a:b], out["end_ns"].to_numpy()[a:b])
    out["sub_track"] = track
    out.attrs["unplaced"] = {"no clock fit": int((dev & ~placed).sum()),
                             "no device": int((k_host & kern["device"].isna().to_numpy()).sum())}
    return out


# ---- the summary's section ------------------------------------------------------------------


def has_offload(trace: Trace) -> bool:
    """Whether the trace holds any target construct, data operation, submission or
    device record (the trace's event counts: no pass over the records)."""
    return not present_events(trace).isdisjoint(
        name for name, code in EVENT_CODES.items() if code in OFFLOAD_CODES)


@per_trace
def offload_totals(trace: Trace) -> pd.DataFrame:
    """Per device (of the host operations: a target construct's device, a
    transfer's other end): target constructs and their host time, the host
    time blocked waiting for it (BLOCKED_DEFINITION), bytes moved to and from
    it, the host time of those transfers and their bandwidth (bytes per
    second of transfer time), kernel submissions and their host time; from the
    device's own records (device_ops, on the host clock) where it has some, the
    device's time in kernels and in transfers (<NA> without).  attrs: unpaired
    counts of the host tables and MoreLinks."""
    t = _target_table(trace)
    d = data_ops(trace)
    k = kernels(trace)
    d_device, to_dev, from_dev = transfer_device(d["kind"], d["src_device"].to_numpy(),
                                                 d["dest_device"].to_numpy())
    duration = d["duration_ns"].to_numpy(np.int64, na_value=0)
    ops = device_ops(trace)
    own = (ops["end_ns"] - ops["begin_ns"]).to_numpy(np.float64, na_value=np.nan)
    ops_kernel = (ops["type"] == "kernel").to_numpy()
    ops_transfer = ops["op"].isin(TRANSFERS_TO_DEVICE + TRANSFERS_FROM_DEVICE).to_numpy()
    rows = []
    devices = sorted(set(t["device"].tolist()) | set(d_device[to_dev | from_dev].tolist())
                     | set(k["device"].dropna().astype(int).tolist())
                     | set(ops["device"].tolist()))
    for dev in devices:
        mine = (t["device"] == dev).to_numpy()
        tx = (d_device == dev) & (to_dev | from_dev)
        kd = (k["device"] == dev).fillna(False).to_numpy()
        td = t["duration_ns"].to_numpy(np.int64, na_value=0)
        moved = d["bytes"].to_numpy(np.int64)
        transfer_ns = int(duration[tx].sum())
        on_device = (ops["device"] == dev).to_numpy() & ~np.isnan(own)
        rows.append({
            "device": dev, "target_regions": int(mine.sum()),
            "target_ns": int(td[mine].sum()),
            "blocked_ns": int(td[mine & ~t["nowait"].to_numpy()].sum()),
            "bytes_to_device": int(moved[tx & to_dev].sum()),
            "bytes_from_device": int(moved[tx & from_dev].sum()),
            "transfers": int(tx.sum()), "transfer_ns": transfer_ns,
            "bandwidth": (moved[tx].sum() / transfer_ns * 1e9) if transfer_ns else np.nan,
            "kernels": int(kd.sum()),
            "kernel_ns": int(k["duration_ns"].to_numpy(np.int64, na_value=0)[kd].sum()),
            "device_kernel_ns": (round(own[on_device & ops_kernel].sum()) if on_device.any()
                                 else pd.NA),
            "device_transfer_ns": (round(own[on_device & ops_transfer].sum())
                                   if on_device.any() else pd.NA),
        })
    out = conform(pd.DataFrame(rows, columns=list(TABLES["summary.offload"].columns)),
                  "summary.offload")
    unpaired = {f"{name}_{side}": table.attrs[f"unmatched_{side}"]
                for name, table in (("target", t), ("data_op", d), ("kernel", k))
                for side in ("begins", "ends")}
    out.attrs.update(unpaired, **more_links(trace).counts())
    return out
