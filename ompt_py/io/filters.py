"""The filters of every export (``export(trace, path, format, start=, end=,
threads=, pid=)``, the ``Trace.to_*`` methods, ``ompt-py export --start --end
--threads --pid``): one ``ExportFilter`` that each writer applies.

* ``start``, ``end``: a time window, in the trace's own times (nanoseconds from
  its origin, as ``time_ns``, the tables' ``begin_ns`` and the exports'
  timestamps), written as nanoseconds or with a unit (``1.5s``, ``200ms``,
  ``30us``, ``100ns``);
* ``threads``: thread numbers (the tables' ``thread``);
* ``pid``: one or more process ids.

The writers of events (CSV, Parquet) keep the events in the window of the
threads and processes chosen (``events``).  The writers of slices (Perfetto,
OTF2) make their slices from the whole trace (a slice is paired from its
begin and end wherever they are), then keep those of the threads and
processes chosen that overlap the window, clipped to it (``clip``): a slice
that crosses the window's start or end is cut there and counted, never
dropped; the counters start with their value at the window's start
(_core.waiting, given ``start_ns`` and ``end_ns``), and a flow (task creation
to first start) is kept when both its ends are in the window and on tracks
kept (``points``), the others counted.  What was filtered and clipped goes
into each format's metadata (``meta``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from ..meta import trace_meta
from ..units import format_ns, parse_ns

if TYPE_CHECKING:
    from ..trace import Trace

__all__ = ["ExportFilter", "parse_numbers", "parse_time"]


def parse_numbers(text: str, what: str) -> list[int]:
    """Integers written as a list, ``0,2,5-7``; ConfigError naming ``what`` otherwise."""
    numbers: list[int] = []
    for item in text.split(","):
        low, dash, high = item.strip().partition("-")
        if not low.isdigit() or (dash and not high.strip().isdigit()):
            raise ConfigError(f"{what} {text!r} is not a list of numbers: give numbers "
                              "separated by commas, or ranges, e.g. 0,2,4-7")
        numbers += range(int(low), int(high) + 1) if dash else [int(low)]
    return numbers


def parse_time(value: Any, what: str) -> int | None:
    """Nanoseconds from a time (a number of them, or a string with a unit: ``1.5s``,
    ``200ms``) or None; ConfigError naming ``what`` otherwise."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0:
        return int(value)
    ns = parse_ns(value) if isinstance(value, str) else None
    if ns is None:
        raise ConfigError(f"{what} {value!r} is not a time: give nanoseconds from the trace's "
                          "origin, or a number with a unit: ns, us, ms or s (e.g. 1.5s, 200ms)")
    return ns


def _numbers(value: Any, what: str) -> frozenset[int] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return frozenset(parse_numbers(value, what))
    values = [value] if isinstance(value, (int, np.integer)) else list(value)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0
               for v in values):
        raise ConfigError(f"{what} {value!r} is not a list of numbers: give numbers of 0 or "
                          "more, e.g. [0, 2] or '0,2,4-7'")
    return frozenset(int(v) for v in values)


def _listed(values: Iterable[int]) -> str:
    values = sorted(values)
    shown = ", ".join(map(str, values[:20]))
    return shown + (f" ... ({len(values)} in all)" if len(values) > 20 else "") or "none"


@dataclass
class ExportFilter:
    """What an export keeps: the window [``start_ns``, ``end_ns``] (None: open),
    the ``threads`` and ``pids`` (None: all); and, as the export goes, how many
    slices it clipped and flows it left out (for the metadata)."""

    start_ns: int | None = None
    end_ns: int | None = None
    threads: frozenset[int] | None = None
    pids: frozenset[int] | None = None
    clipped: int = field(default=0, compare=False)
    flows_outside: int = field(default=0, compare=False)

    @classmethod
    def of(cls, trace: Trace, start: Any = None, end: Any = None, threads: Any = None,
           pid: Any = None) -> ExportFilter:
        """The filter of these arguments for ``trace``; ConfigError, saying what is
        allowed, for a value that is not a time or a list of numbers, a window that
        is empty or after the trace's last event, a thread or process the trace
        does not have."""
        flt = cls(parse_time(start, "start"), parse_time(end, "end"), _numbers(threads, "threads"),
                  _numbers(pid, "pid"))
        if flt.start_ns is not None and flt.end_ns is not None and flt.start_ns >= flt.end_ns:
            raise ConfigError(f"the window is empty: start ({format_ns(flt.start_ns)}) must "
                              f"be before end ({format_ns(flt.end_ns)})")
        times = trace.events["time_ns"]
        last = int(times.max()) if flt.start_ns is not None and len(times) else 0
        if flt.start_ns is not None and flt.start_ns > last:
            raise ConfigError(f"start {format_ns(flt.start_ns)} is after the trace's last "
                              f"event ({format_ns(last)} from its origin): give an earlier "
                              "start")
        known_pids = {p["pid"] for p in trace.meta.get("processes", [])}
        if flt.pids is not None and not flt.pids <= known_pids:
            raise ConfigError(f"pid {_listed(flt.pids - known_pids)} is not in the trace; its "
                              f"processes: {_listed(known_pids)}")
        if flt.threads is not None:
            known = set(np.unique(trace.events["thread"]).tolist())
            known |= {th["thread"] for p in trace.meta.get("processes", [])
                      for th in p.get("threads", [])}
            if not flt.threads <= known:
                raise ConfigError(f"thread {_listed(flt.threads - known)} is not in the "
                                  f"trace; its threads: {_listed(known)}")
        return flt

    @property
    def active(self) -> bool:
        return (self.start_ns, self.end_ns, self.threads, self.pids) != (None,) * 4

    @property
    def windowed(self) -> bool:
        return self.start_ns is not None or self.end_ns is not None

    # ---- what is kept ---------------------------------------------------------------

    def tracks(self, pid: np.ndarray, thread: np.ndarray | None) -> np.ndarray:
        """Whether each (pid, thread) is kept; ``thread`` None: a process's own
        tracks (its devices, its counters), kept with the process."""
        keep = np.ones(len(pid), bool)
        if self.pids is not None:
            keep &= np.isin(pid, list(self.pids))
        if self.threads is not None and thread is not None:
            keep &= np.isin(thread, list(self.threads))
        return keep

    def process_kept(self, pid: int) -> bool:
        return self.pids is None or pid in self.pids

    def thread_kept(self, pid: int, thread: int) -> bool:
        return self.process_kept(pid) and (self.threads is None or thread in self.threads)

    def in_window(self, time: np.ndarray) -> np.ndarray:
        keep = np.ones(len(time), bool)
        if self.start_ns is not None:
            keep &= time >= self.start_ns
        if self.end_ns is not None:
            keep &= time <= self.end_ns
        return keep

    def events(self, trace: Trace) -> Trace:
        """For the writers of events: the events of the threads and processes kept,
        in the window (the trace itself when nothing is filtered), with the
        filter in its metadata (``meta["export_filter"]``)."""
        if not self.active:
            return trace
        keep = self.in_window(trace.events["time_ns"])
        keep &= self.tracks(trace.pids, trace.events["thread"])
        processes = [p for p in trace.meta.get("processes", []) if self.process_kept(p["pid"])]
        meta = {**trace.meta, **trace_meta(processes, trace.meta.get("origin_mono_ns"),
                                           trace.meta.get("skipped")),
                "export_filter": self.meta()}
        return type(trace).from_records(trace.events[keep], meta, trace.pids[keep])

    def clip(self, pid: np.ndarray, thread: np.ndarray | None, begin: np.ndarray,
             end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the writers of slices: the slices kept (positions), and their begin
        and end clipped to the window (counted in ``clipped``).  ``thread`` None:
        slices of the process's own tracks (devices)."""
        begin, end = np.asarray(begin, np.int64), np.asarray(end, np.int64)
        keep = self.tracks(np.asarray(pid), None if thread is None else np.asarray(thread))
        if self.start_ns is not None:
            keep &= end >= self.start_ns
        if self.end_ns is not None:
            keep &= begin <= self.end_ns
        at = np.flatnonzero(keep)
        begin, end = begin[at], end[at]
        low = self.start_ns if self.start_ns is not None else np.iinfo(np.int64).min
        high = self.end_ns if self.end_ns is not None else np.iinfo(np.int64).max
        clipped_begin, clipped_end = np.maximum(begin, low), np.minimum(end, high)
        self.clipped += int(((clipped_begin != begin) | (clipped_end != end)).sum())
        return at, clipped_begin, clipped_end

    def points(self, pid: np.ndarray, thread: np.ndarray, time: np.ndarray) -> np.ndarray:
        """Whether each point (a flow's end) is on a track kept, in the window."""
        return self.tracks(pid, thread) & self.in_window(np.asarray(time, np.int64))

    def flows(self, start: tuple[np.ndarray, ...], finish: tuple[np.ndarray, ...]
              ) -> np.ndarray:
        """The flows kept (positions): both ends (pid, thread, time) kept; the
        others counted in ``flows_outside``."""
        keep = self.points(*start) & self.points(*finish)
        self.flows_outside += int((~keep).sum())
        return np.flatnonzero(keep)

    def meta(self) -> dict:
        """The filter as the formats' metadata record it (None: not filtered)."""
        return {"start_ns": self.start_ns, "end_ns": self.end_ns,
                "threads": None if self.threads is None else sorted(self.threads),
                "pids": None if self.pids is None else sorted(self.pids),
                "clipped_slices": self.clipped, "flows_outside": self.flows_outside}
