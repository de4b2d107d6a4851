"""The Trace: events of one or more processes, as numpy, pandas and Parquet.

A Trace is either recorded in this process (``ompt_py.trace()``: start/stop,
or a ``with`` block) or loaded (``ompt_py.load``) from a Parquet file that
``Trace.save`` or ``ompt-py run`` wrote, or from the raw files of a process
run with OMPTPY_OUTPUT.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import json
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from . import _attach, _core, analysis, metrics, rawfile, symbols
from ._records import (
    ARGUMENT_COLUMNS,
    ENDPOINTS,
    EVENT_CODES,
    EVENT_DTYPE,
    EVENTS,
    FRAME_COLUMNS,
    FRAME_EVENTS,
    KIND_NAMES,
    NORMALISED,
    NORMALISED_STATES,
    RAW_DTYPE,
    SIGNED_COLUMNS,
    STATES,
    THREAD_TYPES,
)
from .errors import OmptPyError, TraceFileError

FORMAT = 1
PARQUET_KEY = b"ompt_py"
_ID_COLUMNS = ("parallel_id", "task_id", "codeptr")


def _convert_times(records: np.ndarray, first: dict, last: dict | None,
                   tick_ns_estimate: float, origin_ns: int) -> np.ndarray:
    """Raw records (RAW_DTYPE) -> events (EVENT_DTYPE), in place: ticks become
    nanoseconds from ``origin_ns`` on one line through the first and last anchors."""
    if last is not None and last["ticks"] - first["ticks"] > 1_000_000:
        scale = (last["mono_ns"] - first["mono_ns"]) / (last["ticks"] - first["ticks"])
    else:
        scale = tick_ns_estimate
    _core.ticks_to_ns(records, first["ticks"], first["mono_ns"], scale, origin_ns)
    return records.view(EVENT_DTYPE)


def _thread_rows(stats: dict, before: dict[int, tuple[int, int]] | None = None) -> list[dict]:
    rows = []
    for th in stats["threads"]:
        w0, d0 = (before or {}).get(th["thread"], (0, 0))
        written, dropped = th["written"] - w0, th["dropped"] - d0
        if before is not None and th["thread"] in before and not (written or dropped):
            continue
        rows.append(
            {
                "thread": th["thread"],
                "type": THREAD_TYPES.get(th["type"], str(th["type"])),
                "runtime": th.get("runtime", 0),
                "tid": th["tid"],
                "written": written,
                "dropped": dropped,
                "samples_skipped": th.get("samples_skipped", 0),
            }
        )
    return sorted(rows, key=lambda r: r["thread"])


def _modules(*docs: dict | None) -> list[dict]:
    """The union of the module lists of several meta/stats documents."""
    seen: dict[tuple, dict] = {}
    for doc in docs:
        for m in (doc or {}).get("modules", []):
            seen.setdefault((m["path"], m["start"], m["end"]), m)
    return list(seen.values())


def _process_entry(meta: dict, last_stats: dict | None, threads: list[dict], **extra) -> dict:
    keep = ("pid", "ppid", "hostname", "exe", "argv", "ld_preload", "clock", "config",
            "runtimes")
    entry = {k: meta[k] for k in keep}
    # The latest state of each runtime: the meta is written once, when the trace starts.
    states = (last_stats or {}).get("runtime_states", [])
    entry["runtimes"] = [{**rt, **(states[i] if i < len(states) else {})}
                         for i, rt in enumerate(meta["runtimes"])]
    entry["tool"] = {
        "start_tool_calls": meta["start_tool_calls"],
        "declined": meta["declined"],
        "record_version": meta["record_version"],
    }
    rank = meta.get("rank", -1)  # -1: no launcher rank variable (or an older tool)
    entry["rank"] = rank if rank >= 0 else None
    entry["start_realtime_ns"] = meta["start_realtime_ns"]
    entry["stop_realtime_ns"] = last_stats["realtime_ns"] if last_stats else None
    entry["threads"] = threads
    entry["written"] = sum(t["written"] for t in threads)
    entry["dropped"] = sum(t["dropped"] for t in threads)
    entry["sink_lost"] = last_stats["sink_lost"] if last_stats else 0
    entry["buffer_bytes"] = last_stats["buffer_bytes"] if last_stats else None
    # Region names grow as the run goes: the longest list is the latest.
    entry["region_names"] = max(meta.get("region_names", []),
                                (last_stats or {}).get("region_names", []), key=len)
    entry.update(extra)
    return entry


def _totals(meta: dict) -> dict:
    procs = meta["processes"]
    meta["written"] = sum(p["written"] for p in procs)
    meta["dropped"] = sum(p["dropped"] for p in procs)
    return meta


_active: Trace | None = None


try:  # numpy >= 2
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage
    except ImportError:
        _set_madvise_hugepage = None


@contextlib.contextmanager
def _small_pages() -> Iterator[None]:
    """Allocate large arrays without numpy's transparent-huge-page advice.

    Where the kernel compacts memory to find huge pages on first touch
    (defrag=madvise, as on many VMs) that advice made filling fresh columns
    about three times slower; the columns are written once, in order.
    """
    if _set_madvise_hugepage is None:
        yield
        return
    previous = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(previous)


class Trace:
    """OpenMP runtime events, one row per OMPT callback.

    ``events`` is a numpy structured array (fields of ``EVENT_DTYPE``: the C
    record, with ``time_ns`` in nanoseconds from the trace start), in
    per-thread order; ``pids`` gives each row's process; ``to_pandas()``
    names everything; ``meta`` describes the processes, runtimes, callbacks
    and the exact written/dropped counts per thread.
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        """A trace to record in this process; ``path``: save there at stop()."""
        self._path = os.fspath(path) if path is not None else None
        self._segments: list[np.ndarray] = []
        self._pid_runs: list[tuple[int, int]] = []  # (pid, rows) in the order of the rows
        self._events: np.ndarray | None = None
        self._pids: np.ndarray | None = None
        self._frame: pd.DataFrame | None = None
        self._symbols: dict[int, pd.DataFrame] = {}
        self._before: dict[int, tuple[int, int]] = {}
        self._threads: dict[int, dict] = {}
        self._origin: int | None = None
        self._recordable = True
        self.meta: dict[str, Any] = {"format": FORMAT, "processes": []}

    @classmethod
    def from_records(cls, events: np.ndarray, meta: dict[str, Any] | None = None,
                     pids: np.ndarray | int | None = None) -> Trace:
        """A loaded trace of ``events`` (a structured array of EVENT_DTYPE, times in
        nanoseconds from the trace's origin) and its metadata ``meta`` (as
        ``Trace.meta``; default: none).  ``pids``: the process of every row (an
        int), of each row (an array), or None: the one process of ``meta`` (0
        when it has none)."""
        if events.dtype != EVENT_DTYPE:
            raise TypeError(f"events must have the dtype ompt_py.records.EVENT_DTYPE, "
                            f"not {events.dtype}")
        meta = meta if meta is not None else {"format": FORMAT, "processes": []}
        t = cls()
        t._recordable = False
        t._segments, t.meta = [events], meta
        if pids is None:
            procs = meta.get("processes", [])
            pids = procs[0]["pid"] if len(procs) == 1 else 0
        if isinstance(pids, (int, np.integer)):
            t._pid_runs = [(int(pids), len(events))]
        else:
            pids = np.asarray(pids, dtype=np.int32)
            if len(pids) != len(events):
                raise ValueError(f"pids has {len(pids)} rows, events {len(events)}")
            t._pid_runs, t._pids = [], pids
        return t

    # ---- recording -------------------------------------------------------

    def start(self) -> Trace:
        """Start (or resume) recording this process's OpenMP events into this trace.

        Raises AttachError when the runtime cannot be observed (initialised
        before ``import ompt_py``, GNU libgomp only, tool switched off).
        """
        global _active
        if not self._recordable:
            raise OmptPyError("a loaded trace cannot record; use ompt_py.trace() for a new one")
        if _active is self:
            return self
        if _active is not None:
            raise OmptPyError(
                "another ompt_py trace is recording in this process; stop() it first"
            )
        _attach.ensure_attachable()
        _core.flush()
        _core.take()  # drop what was recorded outside any trace window
        stats = json.loads(_core.stats())
        self._before = {t["thread"]: (t["written"], t["dropped"]) for t in stats["threads"]}
        if self._origin is None:
            self._origin = stats["anchor"]["mono_ns"]
            self._start_realtime = stats["realtime_ns"]
        _active = self
        _core.set_recording(True)
        return self

    def stop(self) -> Trace:
        """Stop recording; the events so far become available. start() resumes."""
        global _active
        if _active is not self:
            return self
        _core.set_recording(False)
        _active = None
        _core.flush()
        records = _core.take()
        stats = json.loads(_core.stats())
        meta = _attach.meta()
        events = _convert_times(np.frombuffer(records, RAW_DTYPE), meta["start_anchor"],
                                stats["anchor"], meta["tick_ns_estimate"], self._origin)
        self._segments.append(events)
        self._pid_runs.append((meta["pid"], len(events)))
        for row in _thread_rows(stats, self._before):
            prev = self._threads.get(row["thread"])
            if prev:
                prev["written"] += row["written"]
                prev["dropped"] += row["dropped"]
            else:
                self._threads[row["thread"]] = row
        threads = sorted(self._threads.values(), key=lambda r: r["thread"])
        if not any(rt["initialized"] for rt in meta["runtimes"]):
            warnings.warn(
                "no OpenMP runtime attached to ompt_py during this trace, so it is empty: "
                "the code that ran used no OpenMP, or a runtime without OMPT (GNU libgomp)",
                stacklevel=2,
            )
        fb = _attach.FALLBACK
        proc = _process_entry(meta, stats, threads, complete=True, truncated=False,
                              source="in-process", modules=_modules(meta, stats),
                              fallback={"policy": fb.policy, "libomp": fb.libomp, "how": fb.how,
                                        "early_gnu_modules": fb.early_gnu_modules})
        proc["start_realtime_ns"] = self._start_realtime
        self.meta = _totals(
            {"format": FORMAT, "origin_mono_ns": self._origin, "processes": [proc]}
        )
        self._events = self._pids = self._frame = None
        if self._path:
            self.save(self._path)
        return self

    def __enter__(self) -> Trace:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def recording(self) -> bool:
        return _active is self

    # ---- data ----------------------------------------------------------------

    @property
    def events(self) -> np.ndarray:
        """All events (structured array of EVENT_DTYPE), per-thread order, no copy if possible."""
        if self._events is None:
            if len(self._segments) == 1:
                self._events = self._segments[0]
            else:
                self._events = (
                    np.concatenate(self._segments) if self._segments
                    else np.empty(0, EVENT_DTYPE)
                )
                self._segments = [self._events]
        return self._events

    @property
    def pids(self) -> np.ndarray:
        """The process id of each row of ``events``."""
        if self._pids is None:
            pids = np.asarray([pid for pid, _ in self._pid_runs], dtype=np.int32)
            self._pids = np.repeat(pids, [rows for _, rows in self._pid_runs])
        return self._pids

    def _single_pid(self) -> int | None:
        """The process of every event when the events are of one process and
        ``pids`` is not made yet (the exports then do without it), else None."""
        if self._pids is None and len(self._pid_runs) == 1:
            return self._pid_runs[0][0]
        return None

    def _pids_at(self, rows: np.ndarray | slice) -> np.ndarray:
        """``pids[rows]``, without making ``pids`` for the events of one process."""
        pid = self._single_pid()
        if pid is None:
            return self.pids[rows]
        count = len(range(len(self))[rows]) if isinstance(rows, slice) else len(rows)
        return np.full(count, pid, np.int32)

    @property
    def written(self) -> int:
        return self.meta.get("written", 0)

    @property
    def dropped(self) -> int:
        return self.meta.get("dropped", 0)

    def __len__(self) -> int:
        return sum(len(s) for s in self._segments)

    def __repr__(self) -> str:
        procs = self.meta.get("processes", [])
        state = "recording" if self.recording else f"{len(self)} events"
        return (
            f"<ompt_py.Trace {state}, {len(procs)} process(es), "
            f"written={self.written}, dropped={self.dropped}>"
        )

    @_small_pages()
    def to_pandas(self) -> pd.DataFrame:
        """One row per event, in time order, with names for events, endpoints and kinds.

        Columns: time_ns, pid, rank (only when a process had a job rank: the
        OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or SLURM_PROCID it was started
        with), thread, event, endpoint, parallel_id, task_id,
        codeptr, kind (the name of the event's enumeration value, one
        vocabulary for every libomp version: `loop`, `barrier_implicit`...),
        kind_raw (the runtime's own name: `loop_dynamic`,
        `barrier_implicit_parallel`...), then the event arguments (see
        ARGUMENT_COLUMNS), which are <NA> for events that do not have them, then
        the task frames (FRAME_COLUMNS) of task_create (the encountering task's)
        and sample (the innermost task's): exit_frame (where the runtime called
        the task's code), enter_frame (where that code called into the
        runtime), both stack addresses, and their ompt_frame_flag_t.

        The nullable and categorical columns are read-only (the argument
        columns share their values and masks with each other): assigning into
        one of their cells raises ValueError; ``df.copy()`` gives a frame to
        edit in place.  Adding columns works.
        """
        ev, pids = np.ascontiguousarray(self.events), self.pids
        n = len(ev)
        # One pass gives the sort key and which events the trace has (the last
        # count: events beyond EVENTS).
        times, counts = np.empty(n, np.int64), np.zeros(max(EVENTS) + 2, np.int64)
        _core.scan(ev, times, counts)
        order = np.argsort(times, kind="stable")  # fast on the per-thread runs
        present = set(np.flatnonzero(counts[:-1]).tolist())
        place_info = any(p["config"].get("place_info") for p in self.meta.get("processes", []))
        # A second pass, over the records in time order, fills every column: the
        # fields, and bytes looked up by each record's event, endpoint or kind
        # (category codes, masks of the rows without a value).
        lookups: list[tuple] = []

        def lookup(table: np.ndarray, key: int, dtype: type = bool, *zero_field: int
                   ) -> np.ndarray:
            out = np.empty(n, dtype)
            lookups.append((out, table, key, *zero_field))
            return out

        codes = {name: lookup(names.lookup, key, np.int8)
                 for name, (names, key) in _CATEGORICALS.items()}
        missing = {name: lookup(table, _core.KEY_EVENT, bool, EVENT_DTYPE.fields[name][1],
                                EVENT_DTYPE[name].itemsize)
                   for name, table in _ID_MISSING.items()}
        # The argument columns with values: those of events the trace has, each
        # with the mask of the rows whose event lacks it (shared by the columns
        # of one set of events).
        plan: list[tuple[str, str, np.ndarray | None]] = []
        masks: dict[tuple[tuple[str, ...], bool], np.ndarray] = {}
        for name, (source, users) in ARGUMENT_COLUMNS.items():
            place = source in _PLACE_HALVES  # processor and place: implicit-task begins,
            if present.isdisjoint(EVENT_CODES[u] for u in users) or (place and not place_info):
                plan.append((name, source, None))  # and only with OMPTPY_PLACE_INFO
                continue
            if (users, place) not in masks:
                masks[users, place] = lookup(*_lacks(users, place))
            plan.append((name, source, masks[users, place]))
        # Task frames (task_create, sample): the exit frames are the u64b field.
        frames = not present.isdisjoint(EVENT_CODES[e] for e in FRAME_EVENTS)
        frame_out = (np.empty(n, np.uint64), np.empty(n, np.uint8), np.empty(n, np.uint8),
                     np.empty(n, bool), np.empty(n, bool), np.empty(n, bool)) if frames else None
        wanted = {"time_ns", "thread", *_ID_COLUMNS, *(["u64b"] if frames else []),
                  *(_HALVES[source][0] if source in _HALVES else source
                    for _, source, mask in plan if mask is not None)}
        field = {name: np.empty(n, EVENT_DTYPE[name]) for name in EVENT_DTYPE.names
                 if name in wanted}
        _core.columns(ev, order, [(field[name], EVENT_DTYPE.fields[name][1],
                                   EVENT_DTYPE[name].itemsize) for name in field],
                      lookups, frame_out)
        cols: dict[str, Any] = {
            "time_ns": field["time_ns"],
            "pid": pids[order] if len(self._pid_runs) != 1 else pids,  # one process: all equal
            "thread": field["thread"],
            "event": _EVENT_NAMES.from_codes(codes["event"]),
            "endpoint": _ENDPOINT_NAMES.from_codes(codes["endpoint"]),
            **{name: pd.arrays.IntegerArray(field[name], missing[name]) for name in _ID_COLUMNS},
            "kind": _KIND_NAMES.from_codes(codes["kind"]),
            "kind_raw": _KIND_RAW_NAMES.from_codes(codes["kind_raw"]),
        }
        absent: dict[np.dtype, pd.arrays.IntegerArray] = {}  # one all-NA array per dtype

        def no_values(dtype: np.dtype) -> pd.arrays.IntegerArray:
            if dtype not in absent:
                absent[dtype] = pd.arrays.IntegerArray(np.zeros(n, dtype), np.ones(n, bool))
            return absent[dtype]

        for name, source, mask in plan:
            half = _HALVES.get(source)  # a half of a field (little-endian)
            dtype = (np.dtype(half[2]) if half else np.dtype(np.int32) if name in SIGNED_COLUMNS
                     else EVENT_DTYPE[source])
            if mask is None:
                cols[name] = no_values(dtype)
            elif half:
                whole, index, _ = half
                cols[name] = pd.arrays.IntegerArray(
                    np.ascontiguousarray(field[whole].view(dtype)[index::2]), mask)
            else:
                cols[name] = pd.arrays.IntegerArray(field[source].view(dtype), mask)
        if frame_out is not None:
            enter, exit_flags, enter_flags, no_exit, no_enter, no_enter_flags = frame_out
            cols["exit_frame"] = pd.arrays.IntegerArray(field["u64b"], no_exit)
            cols["enter_frame"] = pd.arrays.IntegerArray(enter, no_enter)
            cols["exit_frame_flags"] = pd.arrays.IntegerArray(exit_flags, no_exit)
            cols["enter_frame_flags"] = pd.arrays.IntegerArray(enter_flags, no_enter_flags)
        else:
            for name in FRAME_COLUMNS:
                cols[name] = no_values(np.dtype(np.uint8 if name.endswith("_flags")
                                                else np.uint64))
        frame = pd.DataFrame(cols, copy=False)
        ranks = self._ranks(frame["pid"].to_numpy())
        if ranks is not None:
            frame.insert(2, "rank", ranks)
        _read_only(frame)
        return frame

    def _ranks(self, pids: np.ndarray) -> pd.arrays.IntegerArray | None:
        """The job rank of each row's process (``<NA>`` where the process had none);
        None when no process of the trace had a rank."""
        known = {p["pid"]: p.get("rank") for p in self.meta.get("processes", [])}
        if all(r is None for r in known.values()):
            return None
        keys = np.array(sorted(known), dtype=np.int64)
        values = np.array([-1 if known[k] is None else known[k] for k in keys], dtype=np.int32)
        found = values[np.minimum(np.searchsorted(keys, pids), len(keys) - 1)]
        return pd.arrays.IntegerArray(found, found < 0)

    # ---- paired tables -----------------------------------------------------------
    # One row per instance of a construct.  Begins or ends that could not be
    # paired (outside the trace window) are counted in df.attrs.

    def _events_frame(self) -> pd.DataFrame:
        if self._frame is None:
            self._frame = self.to_pandas()
            self._pairs: dict[str, Any] = {}
        return self._frame

    def _cached(self, key: str, build: Callable[[pd.DataFrame], Any]) -> Any:
        """``build(events frame)``, computed once per trace (the analyses of metrics.py)."""
        df = self._events_frame()
        if key not in self._pairs:
            self._pairs[key] = build(df)
        return self._pairs[key]

    def _paired(self, what: str) -> analysis.Intervals:
        """Pairing shared by the tables, computed once per trace."""
        df = self._events_frame()
        if what not in self._pairs:
            if what == "regions":
                self._pairs[what] = analysis.parallel_regions(df)
            elif what == "implicit":
                self._pairs[what] = analysis.implicit_tasks(df, self._paired("regions").table)
            elif what == "waits":
                self._pairs[what] = analysis.sync_waits(df, self._paired("regions").table)
            else:
                self._pairs[what] = analysis.sync_regions(df, self._paired("regions").table,
                                                          self._paired("waits").table)
        return self._pairs[what]

    def symbolize(self, codeptrs: Any = None, pid: int | None = None) -> pd.DataFrame:
        """Source of code addresses: pid, codeptr, module, offset, function, file,
        line, location ("file:line", or function, or module+offset) and how it was
        found.  By default every codeptr of the trace; cached."""
        frames = []
        for proc in self.meta.get("processes", []):
            if pid is not None and proc["pid"] != pid:
                continue
            known = self._symbols.get(proc["pid"])
            if codeptrs is None:
                ev = self.events
                wanted = np.unique(ev["codeptr"][self.pids == proc["pid"]])
            else:
                wanted = np.unique(np.asarray(codeptrs, dtype=np.uint64))
            if known is not None:
                wanted = np.setdiff1d(wanted, known["codeptr"].to_numpy(np.uint64))
            if len(wanted):
                found = symbols.resolve(symbols.Modules(proc.get("modules", [])), wanted)
                found.insert(0, "pid", proc["pid"])
                known = found if known is None else pd.concat([known, found], ignore_index=True)
                self._symbols[proc["pid"]] = known
            if known is not None:
                frames.append(known)
        out = pd.concat(frames, ignore_index=True) if frames else symbols.resolve(
            symbols.Modules([]), np.empty(0, np.uint64)).assign(pid=pd.Series(dtype=int))
        if codeptrs is not None:
            out = out[out["codeptr"].isin(np.asarray(codeptrs, dtype=np.uint64).tolist())]
        return out.reset_index(drop=True)

    def _with_source(self, table: pd.DataFrame) -> pd.DataFrame:
        """Adds function and location columns for the table's codeptr."""
        if table.empty:
            return table.assign(function=pd.Series(dtype=object),
                                location=pd.Series(dtype=object))
        src = self.symbolize(table["codeptr"].dropna().to_numpy(np.uint64))
        src = src[["pid", "codeptr", "function", "location"]]
        key = table["codeptr"].astype("float64").fillna(0).astype(np.uint64)
        merged = table.assign(_cp=key).merge(
            src.rename(columns={"codeptr": "_cp"}), on=["pid", "_cp"], how="left")
        return merged.drop(columns="_cp")

    def parallel_regions(self) -> pd.DataFrame:
        """Parallel regions: id, parent, nesting level, begin, end, duration, requested
        and actual team size, invoker (program or runtime), source address."""
        regions = self._paired("regions")
        t = analysis.region_tree(regions.table, self._paired("implicit").table)
        t = t.rename(columns={"thread": "encountering_thread",
                              "task_id": "encountering_task_id"})
        columns = ["pid", "parallel_id", "parent_id", "level", "begin_ns", "end_ns",
                   "duration_ns", "requested_team_size", "team_size", "invoker", "league", "flags",
                   "codeptr", "encountering_thread", "encountering_task_id"]
        return _unmatched(self._with_source(t[columns]), regions)

    def implicit_tasks(self) -> pd.DataFrame:
        """Implicit tasks, one per thread and region (ends reported late by libomp for
        workers are moved to the end of their region)."""
        iv = self._paired("implicit")
        return _unmatched(iv.table, iv)

    def tasks(self) -> pd.DataFrame:
        """Explicit tasks: creation, parent, first start, completion, time running,
        threads, flags and dependences (variable, type)."""
        return analysis.task_table(self._events_frame())

    def work(self) -> pd.DataFrame:
        """Worksharing constructs per thread (loops, sections, single, ...) with counts."""
        iv = analysis.work(self._events_frame())
        return _unmatched(self._with_source(iv.table), iv)

    def sync(self) -> pd.DataFrame:
        """Barriers, taskwait and taskgroup per thread, with the time spent waiting."""
        iv = self._paired("sync")
        return _unmatched(iv.table, iv)

    def samples(self) -> pd.DataFrame:
        """State samples (OMPTPY_SAMPLE_HZ): time, thread, state (one vocabulary for
        every libomp version: libomp 19's kinds of barrier wait become `wait_barrier`
        and `wait_barrier_implicit`, as libomp 14 and 16 say), state_raw (the
        runtime's own name), missed (the timer periods just before the sample in
        which the thread had no CPU: the kernel merged their expirations into
        this sample's signal, and the thread, running none of its code, was in
        this state all along), wait id, parallel region and task of the moment, the
        interrupted code address (codeptr), the innermost task's frames
        (exit_frame, enter_frame: stack addresses, see to_pandas) and ``where``
        the thread was: ``runtime`` when the task had called into the runtime (its
        enter frame is set: a barrier, taskwait, task creation, the start of a
        parallel region...) or the state is not a work state (waits, idle,
        overhead: libomp sets no enter frame for lock and critical waits, nor in
        the barrier after an implicit task's end), else ``user`` (the task's own
        code).  Samples of one task invocation share its exit frame; a task run
        inside another task's runtime call on the same thread (at a taskwait or
        barrier, or undeferred) has its exit frame below that task's."""
        df = self._events_frame()
        s = df.loc[df["event"] == "sample",
                   ["time_ns", "pid", "thread", "state", "missed", "wait_id", "parallel_id",
                    "task_id", "codeptr", "exit_frame", "enter_frame"]].reset_index(drop=True)
        codes = [int(v) for v in s["state"].fillna(-1)]
        s["state"] = pd.Categorical.from_codes(
            np.array([_NORMALISED_STATE_INDEX.get(v, -1) for v in codes], dtype=np.int16),
            categories=_NORMALISED_STATE_NAMES)
        s.insert(4, "state_raw", pd.Categorical.from_codes(
            np.array([_STATE_INDEX.get(v, -1) for v in codes], dtype=np.int16),
            categories=_STATE_NAMES))
        working = np.isin(np.array(codes, dtype=np.int64), _WORK_STATES)
        runtime = s["enter_frame"].notna().to_numpy() | ~working
        s["where"] = pd.Categorical.from_codes(runtime.astype(np.int8),
                                               categories=["user", "runtime"])
        return s

    def state_breakdown(self, by: str = "thread", raw: bool = False) -> pd.DataFrame:
        """Share of each thread's time in each state (work, barrier waits,
        lock/critical/ordered waits, taskwait/taskgroup, idle, overhead), per thread
        (``by="thread"``) or per parallel region (``by="region"``: samples taken
        inside it, all threads).  Each sample stands for its timer period and the
        periods the thread missed just before it (samples()["missed"]: it had no
        CPU, and was in the sampled state then too), so a thread that other
        processes keep off its CPU more in one state than in another is still
        measured right.  A ``samples`` column gives the number of samples,
        ``periods`` the periods they stand for.  States are named in one
        vocabulary for every libomp version (samples()["state"]); ``raw=True``:
        the runtime's own names (libomp 19 tells explicit, worksharing and
        region-end barrier waits apart)."""
        keys = {"thread": ["pid", "thread"], "region": ["pid", "parallel_id"]}.get(by)
        if keys is None:
            raise ValueError(f"by={by!r}: use 'thread' or 'region'")
        s = self.samples()
        if by == "region":
            s = s[s["parallel_id"].notna()]
        state = "state_raw" if raw else "state"
        s = s.assign(periods=s["missed"].to_numpy(np.int64, na_value=0) + 1)
        per_state = s.groupby([*keys, state], observed=True)["periods"].agg(["size", "sum"])
        periods = per_state["sum"].unstack(state, fill_value=0)
        periods.columns.name = "state"
        total = periods.sum(axis=1)
        shares = periods.div(total, axis=0)
        shares.insert(0, "samples", per_state["size"].groupby(level=list(range(len(keys)))).sum())
        shares.insert(1, "periods", total)
        return shares

    def user_regions(self) -> pd.DataFrame:
        """Regions of user code marked with ``ompt_py.region`` or omptpy_region.h: pid,
        thread, id, name, level (0: outermost), parent_id and parent (name) of the
        enclosing region on the same thread, begin_ns, end_ns, duration_ns, codeptr."""
        from .regions import REGION, user_regions

        markers = np.flatnonzero(self.events["event"] == REGION)
        return user_regions(self.events[markers], self._pids_at(markers), self.meta)

    def mutex(self) -> pd.DataFrame:
        """Lock, nest lock, critical and ordered acquisitions: wait and hold times."""
        return analysis.mutex_table(self._events_frame())

    def task_graph(self) -> pd.DataFrame:
        """The task dependence graph as edges (source_id -> sink_id)."""
        return analysis.dependence_edges(self._events_frame())

    # ---- answers and plots (metrics.py, plots.py) ------------------------------------

    def summary(self, top: int = 10) -> metrics.Summary:
        """The main answers together: time per construct and source location, thread
        states, the most imbalanced regions, task granularity, lock contention."""
        return metrics.summary(self, top=top)

    def constructs(self, by: str = "construct") -> pd.DataFrame:
        """Count, total, mean, p50, p95, max time per construct and kind (``by="source"``:
        and per source location)."""
        return metrics.constructs(self, by=by)

    def imbalance(self, per_thread: bool = False) -> pd.DataFrame:
        """Per parallel region: max over mean busy time of its implicit tasks, time
        lost, barrier-wait share (``per_thread=True``: one row per implicit task)."""
        return metrics.imbalance(self, per_thread=per_thread)

    def task_granularity(self, bins: Any = None) -> pd.DataFrame:
        """Histogram of explicit task run times (log bins); creation overhead in attrs."""
        return metrics.task_granularity(self, bins=bins)

    def lock_contention(self) -> pd.DataFrame:
        """Wait and hold time per lock, critical section and ordered region."""
        return metrics.lock_contention(self)

    def utilisation(self, bin_ns: int | None = None) -> pd.DataFrame:
        """Per thread and time bin: time busy, waiting (barrier, taskwait/taskgroup,
        lock) and idle."""
        return metrics.utilisation(self, bin_ns=bin_ns)

    def plot_timeline(self, start_ns: int | None = None, end_ns: int | None = None,
                      threads: Any = None, ax: Any = None) -> Any:
        """Per-thread timeline of regions, work, tasks and waits; returns the Figure."""
        from . import plots

        return plots.timeline(self, start_ns=start_ns, end_ns=end_ns, threads=threads, ax=ax)

    def plot_states(self, ax: Any = None) -> Any:
        """Stacked bars of each thread's time per state; returns the Figure."""
        from . import plots

        return plots.states(self, ax=ax)

    def plot_task_durations(self, ax: Any = None) -> Any:
        """Histogram of explicit task run times; returns the Figure."""
        from . import plots

        return plots.task_durations(self, ax=ax)

    def plot_imbalance(self, ax: Any = None) -> Any:
        """Busy and waiting time per thread of the most imbalanced regions; the Figure."""
        from . import plots

        return plots.imbalance(self, ax=ax)

    def _repr_html_(self) -> str:
        return metrics.html_overview(self)

    # ---- files -----------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write the trace as Parquet (zstd); ``ompt_py.load`` reads it back.

        A path ending in ``.parquet``: one file holding every process (a ``pid``
        column).  Any other path: a directory holding a dataset partitioned by
        process, ``path/pid=<pid>/part-0.parquet`` (hive style), that DuckDB,
        polars, Dask or pyarrow read as one table; each file carries its
        process's metadata.  A partition of one of this trace's processes that
        is already there is replaced; other partitions are kept, so several
        processes can save into one directory and ``load`` merges them.
        """
        from . import export

        export.write_parquet(self, path)

    def to_perfetto(self, path: str | os.PathLike) -> None:
        """Write a Perfetto / Chrome trace (JSON Trace Event Format) for ui.perfetto.dev
        and chrome://tracing: a process per pid, a track per thread, nested slices for
        regions, implicit tasks, work, barriers and waits, tasks and locks, flow
        arrows from task creation to execution, and a threads-waiting counter."""
        from . import export

        export.to_perfetto(self, path)

    def to_csv(self, path: str | os.PathLike) -> None:
        """Write one CSV row per event, with the columns and order of ``to_pandas()``."""
        from . import export

        export.to_csv(self, path)


def _unmatched(table: pd.DataFrame, iv: analysis.Intervals) -> pd.DataFrame:
    table = table.reset_index(drop=True)
    table.attrs["unmatched_begins"] = iv.unmatched_begins
    table.attrs["unmatched_ends"] = iv.unmatched_ends
    return table


class _Names:
    """Integer codes -> a categorical whose categories are every name the code
    can have, in every trace: frames of several traces concatenate as categoricals."""

    def __init__(self, names: dict[int, str]) -> None:
        self.categories = sorted(set(names.values()))
        index = {name: i for i, name in enumerate(self.categories)}
        # One entry more than the codes need: every code beyond the table (a
        # newer runtime's enum value) reads it, clipped, and becomes <NA>.
        self.lookup = np.full(max(names) + 2, -1, dtype=np.int8)
        for code, name in names.items():
            self.lookup[code] = index[name]

    @functools.cached_property
    def dtype(self) -> pd.CategoricalDtype:
        return pd.CategoricalDtype(self.categories)

    def codes(self, codes: np.ndarray) -> np.ndarray:
        """The index of each code's name in ``categories`` (int8; -1: none).  ``codes``:
        non-negative integers (np.intp ones are indexed without a cast)."""
        return np.take(self.lookup, codes, mode="clip")

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """``codes``: as for codes()."""
        return self.from_codes(self.codes(codes))

    def from_codes(self, mapped: np.ndarray) -> pd.Categorical:
        """``mapped``: codes already looked up in ``lookup`` (-1: <NA>)."""
        return pd.Categorical.from_codes(mapped, dtype=self.dtype)


def _kind_keys(codes: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """The keys of _KIND_NAMES and _KIND_RAW_NAMES: event number << 8 | kind byte."""
    keys = codes.astype(np.intp)
    keys <<= 8
    keys |= kinds
    return keys


_EVENT_NAMES = _Names(EVENTS)
_STATE_NAMES = sorted(set(STATES.values()))
_STATE_INDEX = {code: _STATE_NAMES.index(name) for code, name in STATES.items()}
_WORK_STATES = [code for code, name in STATES.items() if name.startswith("work_")]
_NORMALISED_STATE_NAMES = sorted({NORMALISED_STATES.get(n, n) for n in STATES.values()})
_NORMALISED_STATE_INDEX = {code: _NORMALISED_STATE_NAMES.index(NORMALISED_STATES.get(name, name))
                           for code, name in STATES.items()}
_ENDPOINT_NAMES = _Names(ENDPOINTS)
# `kind` is named by the enumeration of its event: keyed by event << 8 | kind.
_RAW_KINDS = {
    code << 8 | value: name
    for code, event in EVENTS.items()
    for value, name in KIND_NAMES.get(event, {}).items()
}
_KIND_RAW_NAMES = _Names(_RAW_KINDS)
_KIND_NAMES = _Names({key: NORMALISED.get(name, {}).get(EVENTS[key >> 8], name)
                      for key, name in _RAW_KINDS.items()})
def _read_only(frame: pd.DataFrame) -> None:
    """Marks the numpy buffers behind every column of ``frame`` read-only, so
    that writing into one column cannot change another that shares them."""
    for _, column in frame.items():
        array = column.array
        for attr in ("_data", "_mask", "_ndarray", "_codes"):
            buf = getattr(array, attr, None)
            if isinstance(buf, np.ndarray):
                buf.flags.writeable = False


# The categorical columns of to_pandas(): their names and what _core.columns
# looks their codes up by.
_CATEGORICALS = {
    "event": (_EVENT_NAMES, _core.KEY_EVENT),
    "endpoint": (_ENDPOINT_NAMES, _core.KEY_ENDPOINT),
    "kind": (_KIND_NAMES, _core.KEY_EVENT_KIND),
    "kind_raw": (_KIND_RAW_NAMES, _core.KEY_EVENT_KIND),
}
# Per event, whether its id column is <NA> whatever the field holds (0 is <NA>
# too): task_create keeps a frame in parallel_id (enter_frame).
_ID_MISSING = {name: np.zeros(1, np.uint8) for name in _ID_COLUMNS}
_ID_MISSING["parallel_id"] = np.zeros(EVENT_CODES["task_create"] + 2, np.uint8)
_ID_MISSING["parallel_id"][EVENT_CODES["task_create"]] = 1
# Argument sources that are one of the two C ints packed in u64b: which half.
# Argument columns that are half of a field (ARGUMENT_COLUMNS): the field, which
# half (little-endian) and its type.  The u64b halves are the processor and
# place of implicit-task begins (OMPTPY_PLACE_INFO).
_HALVES = {"u64b_lo": ("u64b", 0, np.int32), "u64b_hi": ("u64b", 1, np.int32),
           "u32a_lo": ("u32a", 0, np.uint16), "u32a_hi": ("u32a", 1, np.uint16)}
_PLACE_HALVES = ("u64b_lo", "u64b_hi")
_SCOPE_BEGIN = next(code for code, name in ENDPOINTS.items() if name == "begin")


@functools.cache
def _lacks(users: tuple[str, ...], begins_only: bool) -> tuple[np.ndarray, int]:
    """The lookup (table, key of _core.columns) of the rows without an argument of
    these events (``begins_only``: of their begins): 1 for every other event."""
    codes = [EVENT_CODES[u] for u in users]
    if begins_only:
        codes = [code << 8 | _SCOPE_BEGIN for code in codes]
    table = np.ones(max(codes) + 2, np.uint8)  # the last entry: every key beyond
    table[codes] = 0
    return table, _core.KEY_EVENT_ENDPOINT if begins_only else _core.KEY_EVENT


def _loaded(segments: list[np.ndarray], pid_runs: list[tuple[int, int]], meta: dict) -> Trace:
    t = Trace()
    t._recordable = False
    t._segments, t._pid_runs, t.meta = segments, pid_runs, meta
    return t


def _from_raw(paths: list[str], source: str) -> Trace:
    if not paths:
        raise TraceFileError(
            f"{source} holds no trace files (*{rawfile.SUFFIX}): no process in the run "
            "started an OpenMP runtime with OMPT support (LLVM libomp)."
        )
    procs = [rawfile.read(p) for p in paths]
    origin = min(p.meta["start_anchor"]["mono_ns"] for p in procs)
    segments, pids, entries = [], [], []
    for p in procs:
        last = p.stats[-1] if p.stats else None
        events = _convert_times(p.records, p.meta["start_anchor"],
                                last["anchor"] if last else None, p.meta["tick_ns_estimate"],
                                origin)
        segments.append(events)
        pids.append((p.meta["pid"], len(events)))
        threads = _thread_rows(last) if last else []
        entries.append(
            _process_entry(
                p.meta, last, threads,
                complete=any(s["final"] for s in p.stats),
                modules=_modules(p.meta, *p.stats),
                truncated=p.truncated,
                source=p.path,
            )
        )
        if not threads:  # killed before any counters were written: count what is there
            entries[-1]["written"] = len(events)
    return _loaded(segments, pids,
                   _totals({"format": FORMAT, "origin_mono_ns": origin, "processes": entries}))


def _from_parquet(path: str) -> Trace:
    """One Parquet file: a whole trace (Trace.save to a .parquet path) or the
    partition of one process of a dataset (no pid column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        table = pq.read_table(path, columns=[n for n in (*EVENT_DTYPE.names, "pid")
                                             if n in names])
    except (pa.ArrowException, OSError) as e:
        raise TraceFileError(
            f"{path} cannot be read as a Parquet trace ({e}); it may be truncated or not a "
            "trace file"
        ) from e
    raw_meta = (table.schema.metadata or {}).get(PARQUET_KEY)
    if raw_meta is None:
        raise TraceFileError(f"{path} is a Parquet file but not an ompt-py trace (no metadata)")
    meta = json.loads(raw_meta)
    if meta.get("format") != FORMAT:
        raise TraceFileError(f"{path} has trace format {meta.get('format')}; expected {FORMAT}")
    one_process = len(meta.get("processes", [])) == 1
    missing = [n for n in (*EVENT_DTYPE.names, "pid") if n not in table.column_names
               and not (n == "pid" and one_process)]
    if missing:
        raise TraceFileError(f"{path} lacks the columns {missing}; it is not an ompt-py trace")
    events = np.empty(table.num_rows, EVENT_DTYPE)
    for name in EVENT_DTYPE.names:
        events[name] = table.column(name).to_numpy()
    trace = _loaded([events], [], meta)
    if "pid" in table.column_names:
        trace._pids = table.column("pid").to_numpy().astype(np.int32)
    else:  # a dataset partition: the pid is its process's
        trace._pids = np.full(table.num_rows, meta["processes"][0]["pid"], dtype=np.int32)
    return trace


def _from_directory(path: str) -> Trace:
    """Every trace in a directory: raw files (one run, OMPTPY_OUTPUT), Parquet files
    and dataset partitions (pid=N/*.parquet), merged into one trace."""
    raw = rawfile.list_dir(path)
    parquet = sorted(glob.glob(os.path.join(glob.escape(path), "*.parquet"))) + sorted(
        glob.glob(os.path.join(glob.escape(path), "pid=*", "*.parquet")))
    if not parquet:
        return _from_raw(raw, path)
    parts = ([_from_raw(raw, path)] if raw else []) + [_from_parquet(p) for p in parquet]
    return parts[0] if len(parts) == 1 else _merge(parts, [path] * bool(raw) + parquet)


def _merge(parts: list[Trace], sources: list[str]) -> Trace:
    """One trace of several, on one time axis: each part's times are from its own
    origin (a CLOCK_MONOTONIC time); the merged origin is the earliest."""
    origins = [p.meta.get("origin_mono_ns") for p in parts]
    for origin, source in zip(origins, sources):
        if origin is None:
            raise TraceFileError(f"{source} has no clock origin (origin_mono_ns in its "
                                 "metadata), so it cannot be aligned with the other traces")
    first = min(origins)
    owner: dict[int, str] = {}
    for part, source in zip(parts, sources):
        for proc in part.meta["processes"]:
            if proc["pid"] in owner:
                raise TraceFileError(
                    f"process {proc['pid']} is in both {owner[proc['pid']]} and {source}; "
                    "load them separately or keep one of them in the directory")
            owner[proc["pid"]] = source
    for part, origin in zip(parts, origins):
        if origin != first:
            part.events["time_ns"] += origin - first
    procs = [proc for part in parts for proc in part.meta["processes"]]
    hosts = sorted({proc["hostname"] for proc in procs})
    if len(hosts) > 1:
        warnings.warn(f"the processes ran on several machines ({', '.join(hosts)}): their "
                      "clocks are not aligned with each other", stacklevel=4)
    merged = _loaded([part.events for part in parts], [],
                     _totals({"format": FORMAT, "origin_mono_ns": first, "processes": procs}))
    merged._pids = np.concatenate([part.pids for part in parts])
    return merged


def load(path: str | os.PathLike) -> Trace:
    """Load a trace: a Parquet file (Trace.save, ompt-py run), one raw ``.omptraw``
    file, or a directory: the raw per-process files of a run (OMPTPY_OUTPUT), a
    dataset written by Trace.save (pid=N/ partitions), Parquet files, or a mix,
    merged into one trace with the clocks aligned (origin: the earliest)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return _from_directory(path)
    if not os.path.exists(path):
        raise TraceFileError(f"no trace at {path}: the file or directory does not exist")
    if path.endswith(rawfile.SUFFIX):
        return _from_raw([path], path)
    return _from_parquet(path)


def trace(path: str | os.PathLike | None = None) -> Trace:
    """A trace of this process's OpenMP events: ``with ompt_py.trace() as t: ...``
    or ``t = ompt_py.trace(); t.start(); ...; t.stop()``.  With ``path``, the
    trace is saved there (Parquet) at each stop() and at interpreter exit."""
    return Trace(path)


def _stop_at_exit() -> None:
    if _active is not None:
        _active.stop()


def _after_fork_in_child() -> None:
    # The tool empties its buffers in the child; so does the active trace.
    if _active is not None:
        _active._segments, _active._pid_runs = [], []
        _active._events = _active._pids = _active._frame = None
        _active._before, _active._threads = {}, {}


atexit.register(_stop_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
