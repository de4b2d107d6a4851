"""The Trace: events of one or more processes, as numpy, pandas and Parquet.

A Trace is data: ``events`` (the records, one row per OMPT event), ``pids``
(each row's process), ``meta`` (the processes, runtimes, callbacks and the
exact written/dropped counts per thread) and ``to_pandas()``.  It is recorded
in this process (``ompt_py.trace()``: start/stop, or a ``with`` block; the
windows are ompt_py.live.recording's) or loaded (``ompt_py.load``,
``Trace.from_parquet``, ``Trace.from_raw``, ``Trace.from_records``) from the
files of ompt_py.io.

Its tables, analyses, plots and exports are a thin facade: each method imports
its layer (ompt_py.analysis, ompt_py.presentation, ompt_py.io) when first
called, as pandas' accessors do, so that those layers depend on the Trace and
never the other way round at import time.
"""

from __future__ import annotations

import atexit

# Imported now: a save at exit (_stop_at_exit) needs it (pyarrow's pandas shim imports
# it; pandas 3 does at import, pandas 2 does not), and its import after threading's
# shutdown raises "can't register atexit after shutdown".
import concurrent.futures.thread  # noqa: F401
import contextlib
import functools
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from . import _core
from .errors import ConfigError, OmptPyError, TraceFileError
from .meta import interned_strings, ranks, record_versions, trace_meta
from .records import (
    ARGUMENT_COLUMNS,
    ENDPOINT_CATEGORIES,
    EVENT_CATEGORIES,
    EVENT_CODES,
    EVENT_DTYPE,
    EVENTS,
    FRAME_COLUMNS,
    FRAME_EVENTS,
    ID_FIELDS,
    INT64_COLUMNS,
    KIND_CATEGORIES,
    KIND_RAW_CATEGORIES,
    MESSAGE_COLUMN,
    MESSAGE_FIELD,
    NULL_NEXT_TASK,
    SCOPE_BEGIN,
    SIGNED_COLUMNS,
    SINCE,
    of_events,
    python_stack_ids,
    shift_times,
    time_order,
)

if TYPE_CHECKING:
    from .analysis.summary import Summary
    from .io import Parts
    from .io.parquet import Converted
    from .live.recording import Recorder
    from .profile import Profile

_ID_COLUMNS = ("parallel_id", "task_id", "codeptr")

#: The trace recording in this process, if any (one at a time).
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
    and the exact written/dropped counts per thread.  ``revision`` counts the
    changes of the events (a trace recording in this process grows at each
    ``stop()``): what was derived from an older revision is made anew.
    """

    def __init__(self, path: str | os.PathLike | None = None,
                 python_stacks: bool | int | None = None, native_depth: int | None = None
                 ) -> None:
        """A trace to record in this process; ``path``: save there at stop();
        ``python_stacks``, ``native_depth``: see trace()."""
        from .live import runhook

        self._python_depth = runhook.python_stacks_depth(python_stacks,
                                                         _core.PYTHON_STACKS_MAX_DEPTH)
        self._native_depth = runhook.native_depth(native_depth, _core.NATIVE_STACKS_MAX_DEPTH)
        self._path = os.fspath(path) if path is not None else None
        self._segments: list[np.ndarray] = []
        self._pid_runs: list[tuple[int, int]] = []  # (pid, rows) in the order of the rows
        self._events: np.ndarray | None = None
        self._pids: np.ndarray | None = None
        self._recorder: Recorder | None = None
        self._recordable = True
        self.revision = 0
        self.meta: dict[str, Any] = trace_meta([], None)

    # ---- constructors ----------------------------------------------------------

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
        meta = meta if meta is not None else trace_meta([], None)
        if pids is None:
            procs = meta.get("processes", [])
            pids = procs[0]["pid"] if len(procs) == 1 else 0
        if isinstance(pids, (int, np.integer)):
            return cls._from_parts([events], meta, [(int(pids), len(events))])
        pids = np.asarray(pids, dtype=np.int32)
        if len(pids) != len(events):
            raise ValueError(f"pids has {len(pids)} rows, events {len(events)}")
        return cls._from_parts([events], meta, [], pids)

    @classmethod
    def from_parquet(cls, path: str | os.PathLike) -> Trace:
        """A trace saved as Parquet (``Trace.save``, ``ompt-py run -o X.parquet``): one
        file, or one process's partition of a dataset."""
        from .io import parquet

        return cls._from(parquet.read(os.fspath(path)))

    @classmethod
    def from_raw(cls, paths: str | os.PathLike | list[str | os.PathLike]) -> Trace:
        """The trace of raw files (``.omptraw``, one per process: ``OMPTPY_OUTPUT``),
        or of every raw file of a directory, on one time axis.  A file that cannot
        be read, or only in part, is left out with a TraceWarning and listed in
        ``meta["skipped"]``; TraceFileError when none can be read."""
        from .io import rawfile

        return cls._from(rawfile.load(*_raw_files(paths)))

    @classmethod
    def _from(cls, parts: Parts) -> Trace:
        return cls._from_parts(parts.segments, parts.meta, parts.pid_runs, parts.pids)

    @classmethod
    def _from_parts(cls, segments: list[np.ndarray], meta: dict, pid_runs: list[tuple[int, int]],
                    pids: np.ndarray | None = None) -> Trace:
        t = cls(python_stacks=False, native_depth=0)
        t._recordable = False
        t._segments, t._pid_runs, t._pids, t.meta = segments, pid_runs, pids, meta
        t._fit_clocks()
        return t

    def _fit_clocks(self) -> None:
        """meta["devices"][i]["clock"]: the fit of each device's clock to the host's."""
        from .analysis import offload

        pid = self.single_pid
        offload.attach_clocks(self.meta, self.events, pid if pid is not None else self.pids)

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
        from .live.recording import Recorder

        if self._recorder is None:
            self._recorder = Recorder(self._python_depth, self._native_depth)
        self._recorder.start()
        _active = self
        return self

    def stop(self) -> Trace:
        """Stop recording; the events so far become available. start() resumes."""
        global _active
        if _active is not self or self._recorder is None:
            return self
        _active = None
        events, pid, self.meta = self._recorder.stop()
        self._segments.append(events)
        self._pid_runs.append((pid, len(events)))
        self._changed()
        self._fit_clocks()
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

    def _changed(self) -> None:
        """The events changed: arrays made from them are made anew."""
        self._events = self._pids = None
        self.revision += 1

    def _forked(self) -> None:
        """In a child made by fork(): the tool emptied its buffers; so does the trace."""
        self._segments, self._pid_runs = [], []
        if self._recorder is not None:
            self._recorder.forked()
        self._changed()

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

    @property
    def single_pid(self) -> int | None:
        """The process of every event when the events are of one process and
        ``pids`` is not made yet (the exports then do without it), else None."""
        if self._pids is None and len(self._pid_runs) == 1:
            return self._pid_runs[0][0]
        return None

    def pids_at(self, rows: np.ndarray | slice) -> np.ndarray:
        """``pids[rows]``, without making ``pids`` for the events of one process."""
        pid = self.single_pid
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

    @property
    def lost(self) -> int:
        """Records the program's threads produced that are in no part of the trace
        (killed, _exit, exec, disk full...: ``meta["processes"][i]["lost_reasons"]``)."""
        return self.meta.get("lost", 0)

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
    def to_pandas(self, events: Any = None, columns: Any = None) -> pd.DataFrame:
        """One row per event, in time order, with names for events, endpoints and kinds.

        ``events`` (event names: "task_create", ["mutex_acquire",
        "mutex_acquired"]) keeps the rows of those events only, and ``columns``
        (column names) makes only those columns, in that order: a frame of a
        few columns of a few events costs memory for those alone.

        Columns: time_ns, pid, rank (only when a process had a job rank: the
        OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or SLURM_PROCID it was started
        with), thread, event, endpoint, parallel_id, task_id,
        codeptr, kind (the name of the event's enumeration value, one
        vocabulary for every libomp version: `loop`, `barrier_implicit`...),
        kind_raw (the runtime's own name: `loop_dynamic`,
        `barrier_implicit_parallel`...), then the event arguments (see
        ARGUMENT_COLUMNS), then ``message`` (the text of an error event's
        message, a categorical), then the task frames (FRAME_COLUMNS) of
        task_create and parallel_begin (the encountering task's) and sample
        (the innermost task's): exit_frame (where the runtime called the task's
        code), enter_frame (where that code called into the runtime), both
        stack addresses, and their ompt_frame_flag_t; then py_stack, the
        Python call stack of the thread that began a parallel, teams or target
        region or a region marker, or created an explicit task outside any
        region (an id of python_stacks(); <NA> for other events and threads
        that ran no Python).

        <NA> is a value the event does not have (records.ID_FIELDS for the
        ids and codeptr, ARGUMENT_COLUMNS for the arguments), or that the
        record version of its process did not keep (records.SINCE), or that
        the tool could not keep (an enter frame too far from the exit frame,
        a message the full table of strings refused, the flags of a missing
        frame address).  A NULL the runtime passed is 0 (an id, codeptr or
        frame address), or NULL_NEXT_TASK (-1) for task_schedule's next task.

        The nullable and categorical columns are read-only (the argument
        columns share their values and masks with each other): assigning into
        one of their cells raises ValueError; ``df.copy()`` gives a frame to
        edit in place.  Adding columns works.
        """
        ev = self.events
        order = time_order(ev["time_ns"])
        if events is not None:
            wanted = [events] if isinstance(events, str) else list(events)
            unknown = sorted(set(wanted) - set(EVENT_CODES))
            if unknown:
                raise ValueError(f"to_pandas(events=...): {unknown} are not event names; the "
                                 f"names are {sorted(EVENT_CODES)}")
            order = order[of_events(ev["event"][order], [EVENT_CODES[e] for e in wanted])]
        return self.frame_at(order, columns)

    @_small_pages()
    def frame_at(self, order: np.ndarray, columns: Any = None) -> pd.DataFrame:
        """``to_pandas()``'s frame of the records at positions ``order`` of
        ``events``, in that order (``columns``: those only, in that order).  The
        analysis gathers the rows it needs this way, in time order
        (records.time_order), without making the whole frame."""
        ev = np.ascontiguousarray(self.events)
        order = np.ascontiguousarray(order, np.intp)
        n = len(order)
        every = self._column_names()
        wanted_columns = every if columns is None else (
            [columns] if isinstance(columns, str) else list(columns))
        unknown = [c for c in wanted_columns if c not in every]
        if unknown:
            raise ValueError(f"{unknown} are not columns of this trace's frame; its columns are "
                             f"{every}")
        want = set(wanted_columns)
        # Which events the rows have (the last count: events beyond EVENTS).
        kinds = ev["event"] if n == len(ev) else ev["event"][order]  # (in any order)
        counts = np.bincount(np.minimum(kinds, max(EVENTS) + 1), minlength=max(EVENTS) + 2)
        present = set(np.flatnonzero(counts[:-1]).tolist())
        place_info = any(p["config"].get("place_info") for p in self.meta.get("processes", []))
        # One pass over the records in ``order`` fills every column asked for: the
        # fields, and bytes looked up by each record's event, endpoint or kind
        # (category codes, masks of the rows without a value).
        lookups: list[tuple] = []

        def lookup(table: np.ndarray, key: int, dtype: type = bool) -> np.ndarray:
            out = np.empty(n, dtype)
            lookups.append((out, table, key))
            return out

        # The event's codes: the ``event`` column, and the other columns' masks.
        codes = {name: lookup(names.lookup, key, np.int8)
                 for name, (names, key) in _CATEGORICALS.items()
                 if name in want or name == "event"}
        missing = {name: lookup(table, _core.KEY_EVENT) for name, table in _ID_MISSING.items()
                   if name in want}
        # The argument columns with values: those of events the rows have, each
        # with the mask of the rows whose event lacks it (shared by the columns
        # of one set of events).
        plan: list[tuple[str, str, np.ndarray | None]] = []
        masks: dict[tuple[tuple[str, ...], bool], np.ndarray] = {}
        for name, (source, users) in ARGUMENT_COLUMNS.items():
            if name not in want:
                continue
            place = source in _PLACE_HALVES  # processor and place: implicit-task begins,
            if present.isdisjoint(EVENT_CODES[u] for u in users) or (place and not place_info):
                plan.append((name, source, None))  # and only with OMPTPY_PLACE_INFO
                continue
            if (users, place) not in masks:
                masks[users, place] = lookup(*_lacks(users, place))
            plan.append((name, source, masks[users, place]))
        frames = (not want.isdisjoint(FRAME_COLUMNS)
                  and not present.isdisjoint(EVENT_CODES[e] for e in FRAME_EVENTS))
        frame_out = ((np.empty(n, np.uint64), np.empty(n, np.uint64), np.empty(n, np.uint8),
                      np.empty(n, np.uint8), *(np.empty(n, bool) for _ in range(4)))
                     if frames else None)
        errors = MESSAGE_COLUMN in want and EVENT_CODES["error"] in present
        needed = {*(c for c in ("time_ns", "thread", *_ID_COLUMNS) if c in want),
                  *([MESSAGE_FIELD] if errors else []),
                  *(_PART_OF.get(source, source) for _, source, mask in plan if mask is not None)}
        field = {name: np.empty(n, dtype) for name, (_, dtype) in _FIELDS.items()
                 if name in needed}
        _core.columns(ev, order, [(field[name], _FIELDS[name][0], _FIELDS[name][1].itemsize)
                                  for name in field], lookups, frame_out)
        sorted_pids = self.pids_at(order)
        # Records of older versions lack some columns (records.SINCE): <NA> there.
        versions = record_versions(self.meta, sorted_pids)

        def older(column: str) -> np.ndarray | None:
            """The rows of the events whose records (of their version) lack ``column``."""
            if versions is None:
                return None
            rows = np.zeros(n, bool)
            for event, since in SINCE[column].items():
                rows |= (codes["event"] == _EVENT_INDEX[event]) & (versions < since)
            return rows if rows.any() else None

        cols: dict[str, Any] = {}
        if "time_ns" in want:
            cols["time_ns"] = field["time_ns"]
        if "pid" in want:
            cols["pid"] = sorted_pids
        if "rank" in want:
            cols["rank"] = ranks(self.meta, sorted_pids)
        if "thread" in want:
            cols["thread"] = field["thread"]
        for name, categories in (("event", EVENT_CATEGORIES), ("endpoint", ENDPOINT_CATEGORIES)):
            if name in want:
                cols[name] = categories.from_codes(codes[name])
        for name in _ID_COLUMNS:
            if name in want:
                cols[name] = pd.arrays.IntegerArray(field[name], missing[name])
        for name, categories in (("kind", KIND_CATEGORIES), ("kind_raw", KIND_RAW_CATEGORIES)):
            if name in want:
                cols[name] = categories.from_codes(codes[name])
        absent: dict[np.dtype, pd.arrays.IntegerArray] = {}  # one all-NA array per dtype

        def no_values(dtype: np.dtype) -> pd.arrays.IntegerArray:
            if dtype not in absent:
                absent[dtype] = pd.arrays.IntegerArray(np.zeros(n, dtype), np.ones(n, bool))
            return absent[dtype]

        for name, source, mask in plan:
            half = _HALVES.get(source)  # a half of a field (little-endian)
            dtype = (np.dtype(half[2]) if half else np.dtype(np.int32) if name in SIGNED_COLUMNS
                     else np.dtype(np.int64) if name in INT64_COLUMNS
                     else _FIELDS[_PART_OF.get(source, source)][1])
            if mask is None:
                cols[name] = no_values(dtype)
                continue
            if name in SINCE and (old := older(name)) is not None:
                mask = mask | old  # its own mask: the shared one stays as it is
            if source in _LOW_BITS:
                values = field[_LOW_BITS[source]] & 1
            elif half:
                whole, index, _ = half
                values = np.ascontiguousarray(field[whole].view(dtype)[index::2])
            else:
                values = field[source].view(dtype)
            if name == "other_task_id":  # a NULL next task, as LLVM's reference tool shows it
                null = (codes["event"] == _EVENT_INDEX["task_schedule"]) & (values == 0)
                if null.any():
                    values = np.where(null, NULL_NEXT_TASK, values)
            cols[name] = pd.arrays.IntegerArray(values, mask)
        if MESSAGE_COLUMN in want:
            cols[MESSAGE_COLUMN] = self._messages(codes["event"], sorted_pids,
                                                  field.get(MESSAGE_FIELD))
        if frame_out is not None:
            exit_, enter, exit_flags, enter_flags, none, no_enter, no_exit_flags, no_enter_flags = (
                frame_out)
            if (old := older("frames")) is not None:
                for mask in (none, no_enter, no_exit_flags, no_enter_flags):
                    mask |= old
            made = {"exit_frame": (exit_, none), "enter_frame": (enter, no_enter),
                    "exit_frame_flags": (exit_flags, no_exit_flags | none),
                    "enter_frame_flags": (enter_flags, no_enter_flags | none)}
            for name, (values, mask) in made.items():
                if name in want:
                    cols[name] = pd.arrays.IntegerArray(values, mask)
        else:
            for name in FRAME_COLUMNS:
                if name in want:
                    cols[name] = no_values(np.dtype(np.uint8 if name.endswith("_flags")
                                                    else np.uint64))
        if "py_stack" in want:
            stacks = (python_stack_ids(ev, order)
                      if any("python" in p for p in self.meta.get("processes", []))
                      else np.zeros(n, np.uint32))
            cols["py_stack"] = pd.arrays.IntegerArray(stacks, stacks == 0)
        frame = pd.DataFrame({name: cols[name] for name in wanted_columns}, copy=False)
        _read_only(frame)
        return frame

    def _column_names(self) -> list[str]:
        """The columns of to_pandas(), in its order (``rank``: in a job's trace)."""
        job = ranks(self.meta, np.empty(0, np.int32)) is not None
        return ["time_ns", "pid", *(["rank"] if job else []), "thread", "event", "endpoint",
                *_ID_COLUMNS, "kind", "kind_raw", *ARGUMENT_COLUMNS, MESSAGE_COLUMN,
                *FRAME_COLUMNS, "py_stack"]

    # ---- tables (ompt_py.analysis.tables) -----------------------------------------
    # One row per instance of a construct.  Begins or ends that could not be
    # paired (outside the trace window) are counted in df.attrs.

    def parallel_regions(self) -> pd.DataFrame:
        """Parallel regions: id, parent, nesting level, begin, end, duration, requested
        and actual team size, invoker (program or runtime), source address."""
        from .analysis import tables

        return _table(tables.parallel_regions(self), "parallel_regions")

    def implicit_tasks(self) -> pd.DataFrame:
        """Implicit tasks, one per thread and region (ends reported late by libomp for
        workers are moved to the end of their region)."""
        from .analysis import tables

        return _table(tables.implicit_tasks(self), "implicit_tasks")

    def tasks(self) -> pd.DataFrame:
        """Explicit tasks: creation, parent, first start, completion, time running,
        threads, flags and dependences (variable, type)."""
        from .analysis import tables

        return _table(tables.tasks(self), "tasks")

    def work(self) -> pd.DataFrame:
        """Worksharing constructs per thread (loops, sections, single, ...) with counts."""
        from .analysis import tables

        return _table(tables.work(self), "work")

    def sync(self) -> pd.DataFrame:
        """Barriers, taskwait and taskgroup per thread, with the time spent waiting."""
        from .analysis import tables

        return _table(tables.sync(self), "sync")

    def mutex(self) -> pd.DataFrame:
        """Lock, nest lock, critical and ordered acquisitions: wait and hold times."""
        from .analysis import tables

        return _table(tables.mutex(self).copy(), "mutex")

    def task_graph(self) -> pd.DataFrame:
        """The task dependence graph as edges (source_id -> sink_id)."""
        from .analysis import tables

        return _table(tables.task_graph(self), "task_graph")

    def user_regions(self) -> pd.DataFrame:
        """Regions of user code marked with ``ompt_py.region`` or omptpy_region.h: pid,
        thread, id, name, level (0: outermost), parent_id and parent (name) of the
        enclosing region on the same thread, begin_ns, end_ns, duration_ns, codeptr,
        and the Python code that began it (py_stack, py_location, py_inherited)."""
        from .analysis import tables

        return _table(tables.user_regions(self).copy(), "user_regions")

    def mpi_calls(self) -> pd.DataFrame:
        """The MPI calls of the trace (``ompt-py run --mpi``, ``ompt_py.mpi.traced``),
        one row each: pid, rank, thread, call, kind (setup, barrier, collective,
        point_to_point, wait), begin_ns, end_ns, duration_ns, bytes, peer (or root),
        comm_size, codeptr (see analysis/tables.py mpi_calls; docs/mpi.md)."""
        from .analysis import tables

        return tables.mpi_calls(self).copy()

    def time_ns_raw(self) -> np.ndarray:
        """Each event's time on its own process's clock, as the tool read it
        (nanoseconds, CLOCK_MONOTONIC of its machine), where ``time_ns`` has it on
        the MPI reference rank's clock from the trace's origin: the fit of each
        process's clock (``meta["processes"][i]["clock_alignment"]``) undone, to the
        nanosecond.  Processes without a fit: their ``time_ns`` plus the origin."""
        from .io import mpi

        out = self.events["time_ns"] + (self.meta.get("origin_mono_ns") or 0)
        for proc in self.meta.get("processes", []):
            clock = proc.get("clock_alignment")
            if clock:
                mine = self.pids == proc["pid"] if self.single_pid is None else slice(None)
                out[mine] = mpi.raw_ns(clock, out[mine])
        return out

    def python_stacks(self) -> pd.DataFrame:
        """The Python call stacks that started the trace's constructs, one row per
        frame, outermost first: pid, stack (the ``py_stack`` of the events and
        tables), level, file, line, function, first_line, user (not library
        code: the frame a stack's ``py_location`` names is its innermost user
        frame), truncated and location ("file:line in function").  Empty when
        nothing was captured: see ``meta["processes"][i]["python"]`` for why
        (status, reason) and ompt_py.trace(python_stacks=...)."""
        from .analysis import pystacks

        return pystacks.python_stacks(self).copy()

    def symbolize(self, codeptrs: Any = None, pid: int | None = None) -> pd.DataFrame:
        """Source of code addresses: pid, codeptr, module, offset, function (as the
        symbolizer demangled it), name (readable: a Cython function by its Python
        name, C++ templates and parameters shortened), file, line, location
        ("file:line", or name (module), or module+offset) and how it was found.
        By default every codeptr of the trace; cached."""
        from .analysis import tables

        return tables.symbolize(self, codeptrs, pid)

    def samples(self) -> pd.DataFrame:
        """State samples (OMPTPY_SAMPLE_HZ): time, thread, state, state_raw, missed
        periods, wait id, region, task, code address, the innermost task's frames
        and ``where`` the thread was (user or runtime code); see
        ompt_py.analysis.samples.samples."""
        from .analysis import samples

        return samples.samples(self)

    def state_breakdown(self, by: str = "thread", raw: bool = False) -> pd.DataFrame:
        """Share of each thread's sampled time in each state of the runtime, per
        thread (``by="thread"``) or per parallel region (``by="region"``), each
        sample weighed by the timer periods it stands for; ``raw=True``: the
        runtime's own state names.  See ompt_py.analysis.samples.state_breakdown."""
        from .analysis import samples

        return samples.state_breakdown(self, by=by, raw=raw)

    # ---- offload (ompt_py.analysis.offload) ------------------------------------------------

    def target_regions(self) -> pd.DataFrame:
        """Target, target enter/exit data and target update constructs: kind, nowait,
        device, host begin/end/duration, encountering task, target id, source and
        Python location.  See ompt_py.analysis.offload.target_regions."""
        from .analysis import offload

        return _table(offload.target_regions(self), "target_regions")

    def data_ops(self) -> pd.DataFrame:
        """Data operations (alloc, transfers, delete...): bytes, source and destination
        device and address, host begin/end, bandwidth, the target region.  See
        ompt_py.analysis.offload.data_ops."""
        from .analysis import offload

        return _table(_shared(offload.data_ops(self)), "data_ops")

    def kernels(self) -> pd.DataFrame:
        """Kernel submissions: requested and granted teams, host begin/end, the target
        region.  See ompt_py.analysis.offload.kernels."""
        from .analysis import offload

        return _table(_shared(offload.kernels(self)), "kernels")

    def device_ops(self) -> pd.DataFrame:
        """The device's own records (device tracing): device begin/end on the host
        clock and raw, the host rows they belong to.  See
        ompt_py.analysis.offload.device_ops."""
        from .analysis import offload

        return _table(_shared(offload.device_ops(self)), "device_ops")

    # ---- answers (ompt_py.analysis.metrics, .summary) ---------------------------------

    def ranks(self) -> pd.DataFrame:
        """Per rank of an MPI job (per process), its OpenMP figures side by side:
        rank, pid, host, local_rank, threads, wall span, time in parallel
        regions, its threads' busy and waiting time, its own OpenMP imbalance,
        and its time in MPI calls by kind when they were recorded (see
        analysis/ranks.py rank_rows; docs/mpi.md)."""
        from .analysis import ranks

        return ranks.ranks(self)

    def rank_imbalance(self, by: str = "phase") -> pd.DataFrame:
        """Across ranks: per phase (between MPI barriers and collectives every rank
        takes part in, or region markers without MPI calls), the rank that
        arrived last and the time the others lost waiting for it; ``by="rank"``:
        per rank, how often it was late and what the others lost for it;
        ``by="arrival"``: each rank's arrival per phase (see analysis/ranks.py
        rank_imbalance; docs/mpi.md)."""
        from .analysis import ranks

        return ranks.rank_imbalance(self, by=by)

    def summary(self, top: int = 10) -> Summary:
        """The main answers together: time per Python line (with Python stacks),
        construct and source location, thread states, the most imbalanced regions,
        task granularity, lock contention."""
        from .analysis import summary

        return summary.summary(self, top=top)

    def constructs(self, by: str = "construct", raw: bool = False) -> pd.DataFrame:
        """Count, total, mean, p50, p95, max time per construct and kind (``by="source"``:
        and per source location; ``by="python"``: per Python location, construct,
        kind and source location, with the location's time, py_time_ns).  Kinds are
        normalised (``loop``, ``barrier_implicit``); ``raw=True``: the runtime's own
        names (``loop_static``, ``barrier_implicit_parallel``)."""
        from .analysis import metrics

        return metrics.constructs(self, by=by, raw=raw)

    def imbalance(self, per_thread: bool = False, by: str = "region") -> pd.DataFrame:
        """Per parallel region: max over mean busy time of its implicit tasks, time
        lost, barrier-wait share, source and Python location (``per_thread=True``:
        one row per implicit task; ``by="source"`` or ``"python"``: summed per
        source location, or per Python and source location)."""
        from .analysis import metrics

        return metrics.imbalance(self, per_thread=per_thread, by=by)

    def task_granularity(self, bins: Any = None) -> pd.DataFrame:
        """Histogram of explicit task run times (log bins); creation overhead in attrs."""
        from .analysis import metrics

        return metrics.task_granularity(self, bins=bins)

    def lock_contention(self, by: str = "lock") -> pd.DataFrame:
        """Wait and hold time per lock, critical section and ordered region, with the
        source and Python location where it was most often taken (``by="source"``
        or ``"python"``: per lock and source location, or per lock, Python and
        source location)."""
        from .analysis import metrics

        return metrics.lock_contention(self, by=by)

    def advice(self) -> pd.DataFrame:
        """What to do, computed from the figures, per place (Python line first, source
        location beside it): regions too short for their team, static schedules on
        uneven work, tasks below their creation cost, contended locks; one row per
        place and rule with the time at stake, the finding and the advice.  See
        ompt_py.analysis.advice and docs/reports.md (the rules and thresholds)."""
        from .analysis import advice

        return advice.advice(self)

    def utilisation(self, bin_ns: int | None = None) -> pd.DataFrame:
        """Per thread and time bin: time busy, waiting (barrier, taskwait/taskgroup,
        lock) and idle."""
        from .analysis import metrics

        return _table(metrics.utilisation(self, bin_ns=bin_ns), "utilisation")

    def thread_states(self) -> pd.DataFrame:
        """Per thread over the whole trace: time busy, waiting (barrier,
        taskwait/taskgroup, lock), stalled by the tool (tool_stall: see tool_stalls)
        and idle, and the busy share of the time neither idle nor stalled."""
        from .analysis import states

        return states.thread_totals(self)

    def tool_stalls(self) -> pd.DataFrame:
        """When the tool stopped a thread to make room for the trace (the in-place
        file route of ``ompt-py run``, when the program held every CPU), one row
        each: pid, thread, begin_ns, end_ns, duration_ns, reason (region, populate,
        wait), bytes made resident, region (see docs/stalls.md).  The thread states
        and the imbalance leave this time out of the program's."""
        from .analysis import states

        return _table(states.tool_stalls(self).copy(), "tool_stalls")

    def _messages(self, events: np.ndarray, pids: np.ndarray, ids: np.ndarray | None
                  ) -> pd.Categorical:
        """to_pandas()'s ``message``: the text of each error event's message (<NA> for
        other events, and where it was not kept); ``events``: the rows' event codes
        (EVENT_CATEGORIES), ``ids``: their message field (None: no error events)."""
        at = (np.flatnonzero(events == _EVENT_INDEX["error"]) if ids is not None
              else np.empty(0, np.intp))
        codes, categories = np.full(len(events), -1, np.int32), []
        if len(at):
            codes[at], categories = pd.factorize(interned_strings(self.meta, pids[at], ids[at]))
        return pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=object))

    def _repr_html_(self) -> str:
        from .analysis import summary

        return summary.html_overview(self)

    # ---- plots (ompt_py.presentation.plots) -------------------------------------------

    def plot_timeline(self, start_ns: int | None = None, end_ns: int | None = None,
                      threads: Any = None, ax: Any = None) -> Any:
        """Per-thread timeline of regions, work, tasks and waits (with offload: a lane
        per device, its kernels and transfers); returns the Figure."""
        from .presentation import plots

        return plots.timeline(self, start_ns=start_ns, end_ns=end_ns, threads=threads, ax=ax)

    def plot_states(self, ax: Any = None) -> Any:
        """Stacked bars of each thread's time per state; returns the Figure."""
        from .presentation import plots

        return plots.states(self, ax=ax)

    def plot_task_durations(self, ax: Any = None) -> Any:
        """Histogram of explicit task run times; returns the Figure."""
        from .presentation import plots

        return plots.task_durations(self, ax=ax)

    def plot_flame(self, path_or_ax: Any = None) -> Any:
        """The threads' time in parallel regions per Python stack, native location,
        region and thread state, as an icicle (a flame graph, outermost frame on
        top; ompt_py.analysis.flame); ``path_or_ax``: a file to write (.png, .svg,
        .pdf), an Axes to draw into, or None.  Returns the Figure."""
        from .presentation import plots

        return plots.flame(self, path_or_ax)

    def view(self, path: str | os.PathLike | None = None, start_ns: int | None = None,
             end_ns: int | None = None, open_browser: bool | None = None) -> Any:
        """The interactive view (needs Bokeh: pip install 'ompt-py[view]'): one
        self-contained HTML file with the timeline of the threads and devices (zoom,
        pan, a hover on each bar; levels of detail for large traces) and the flame
        view.  Written to ``path`` (outside Jupyter without one: a new file in the
        temporary directory) and opened in the browser when there is a display
        (``open_browser``: force it on or off); in Jupyter it shows inline.
        ``start_ns``/``end_ns``: the window (ns from the trace start).  Returns a
        View (``path``, ``opened``).  See ompt_py.presentation.view."""
        from .presentation import view

        return view.view(self, path, start_ns, end_ns, open_browser)

    def plot_imbalance(self, ax: Any = None) -> Any:
        """Busy and waiting time per thread of the most imbalanced regions; the Figure."""
        from .presentation import plots

        return plots.imbalance(self, ax=ax)

    def plot_locks(self, ax: Any = None) -> Any:
        """Time waited for and time held of the most waited-for locks; the Figure."""
        from .presentation import plots

        return plots.locks(self, ax=ax)

    # ---- files (ompt_py.io) -------------------------------------------------------------

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
        from .io import parquet

        parquet.write(self, path)

    def to_perfetto(self, path: str | os.PathLike, *, start: Any = None, end: Any = None,
                    threads: Any = None, pid: Any = None) -> None:
        """Write a Perfetto trace for ui.perfetto.dev: a process per pid, a track per
        thread, nested slices for regions, implicit tasks, work, barriers and
        waits, tasks and locks (with Python stacks: the Python frames above the
        constructs they started), flow arrows from task creation to execution,
        and a threads-waiting counter; with offload, target constructs, data
        operations and submissions on the threads, a track per device (kernels,
        transfers) and flows to it.

        A path ending in ``.pftrace`` or ``.perfetto-trace``: Perfetto's protobuf
        trace (a third of the JSON's size or less); any other: the JSON Trace
        Event Format (which chrome://tracing opens too).  ``start``, ``end``,
        ``threads``, ``pid``: what to keep (``ompt_py.io.export``)."""
        from .io import export, format_of

        export(self, path, "perfetto-proto" if format_of(path) == "perfetto-proto"
               else "perfetto", start=start, end=end, threads=threads, pid=pid)

    def to_otf2(self, path: str | os.PathLike, *, start: Any = None, end: Any = None,
                threads: Any = None, pid: Any = None) -> None:
        """Write an OTF2 archive (the directory ``path``, its anchor file
        ``traces.otf2``) for Vampir, Score-P's tools and ``otf2-print``: a location
        per thread in a group per process, Enter/Leave of regions for the
        constructs.  Needs ompt-py built with libotf2 (docs/exports.md).
        ``start``, ``end``, ``threads``, ``pid``: what to keep
        (``ompt_py.io.export``)."""
        from .io import export

        export(self, path, "otf2", start=start, end=end, threads=threads, pid=pid)

    def to_speedscope(self, path: str | os.PathLike, *, threads: Any = None,
                      pid: Any = None) -> None:
        """Write the flame's stacks (ompt_py.analysis.flame) for speedscope.app: a
        sampled profile per thread, in nanoseconds (``threads``, ``pid``: what to
        keep, ``ompt_py.io.export``; its samples are not cut to a time window)."""
        from .io import export

        export(self, path, "speedscope", threads=threads, pid=pid)

    def to_csv(self, path: str | os.PathLike, *, start: Any = None, end: Any = None,
               threads: Any = None, pid: Any = None) -> None:
        """Write one CSV row per event, with the columns and order of ``to_pandas()``
        (``start``, ``end``, ``threads``, ``pid``: what to keep, ``ompt_py.io.export``)."""
        from .io import export

        export(self, path, "csv", start=start, end=end, threads=threads, pid=pid)


def _table(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """``frame``, a table the analyses also use as they made it (cached, or with
    their own dtypes), as the public table ``name`` (analysis.columns: its dtypes)."""
    from .analysis.columns import conform

    return conform(frame, name)


def _shared(frame: pd.DataFrame) -> pd.DataFrame:
    """A cached table for the user: a frame of its own (adding or dropping columns
    leaves the cache alone) on the cache's buffers, read-only (a write raises
    instead of changing the cache); no copy of the data."""
    _read_only(frame)
    return frame.copy(deep=False)


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
    "event": (EVENT_CATEGORIES, _core.KEY_EVENT),
    "endpoint": (ENDPOINT_CATEGORIES, _core.KEY_ENDPOINT),
    "kind": (KIND_CATEGORIES, _core.KEY_EVENT_KIND),
    "kind_raw": (KIND_RAW_CATEGORIES, _core.KEY_EVENT_KIND),
}
# Per event, whether its id column is <NA> (records.ID_FIELDS: the event has no
# such field; the last entry: events beyond EVENTS).
_ID_MISSING = {name: np.ones(max(EVENTS) + 2, np.uint8) for name in _ID_COLUMNS}
for _name, _users in ID_FIELDS.items():
    _ID_MISSING[_name][[EVENT_CODES[u] for u in _users]] = 0
# An event's code in the ``event`` categorical (codes of EVENT_CATEGORIES).
_EVENT_INDEX = {name: int(EVENT_CATEGORIES.lookup[code]) for code, name in EVENTS.items()}
# The record fields to_pandas() reads (name -> offset, dtype), and the control_tool
# arg pointer: u32a (low half) and u32b (high half) together, a little-endian uint64.
_FIELDS = {name: (EVENT_DTYPE.fields[name][1], EVENT_DTYPE[name]) for name in EVENT_DTYPE.names}
_FIELDS["u32ab"] = (EVENT_DTYPE.fields["u32a"][1], np.dtype("<u8"))
# Argument columns that are half of a field (ARGUMENT_COLUMNS): the field, which
# half (little-endian) and its type.  The u64b halves are the processor and
# place of implicit-task begins (OMPTPY_PLACE_INFO).
_HALVES = {"u64b_lo": ("u64b", 0, np.int32), "u64b_hi": ("u64b", 1, np.int32),
           "u32a_lo": ("u32a", 0, np.uint16), "u32a_hi": ("u32a", 1, np.uint16)}
# Argument columns that are the lowest bit of a field (has_dependences, below the stack id).
_LOW_BITS = {"u32a_bit0": "u32a"}
# The field each part of a field is read from.
_PART_OF = {**{part: whole for part, (whole, _, _) in _HALVES.items()}, **_LOW_BITS}
_PLACE_HALVES = ("u64b_lo", "u64b_hi")


@functools.cache
def _lacks(users: tuple[str, ...], begins_only: bool) -> tuple[np.ndarray, int]:
    """The lookup (table, key of _core.columns) of the rows without an argument of
    these events (``begins_only``: of their begins): 1 for every other event."""
    codes = [EVENT_CODES[u] for u in users]
    if begins_only:
        codes = [code << 8 | SCOPE_BEGIN for code in codes]
    table = np.ones(max(codes) + 2, np.uint8)  # the last entry: every key beyond
    table[codes] = 0
    return table, _core.KEY_EVENT_ENDPOINT if begins_only else _core.KEY_EVENT


def _merge(parts: list[Trace], sources: list[str], skipped: list[dict], path: str) -> Trace:
    """One trace of several (the parts of the directory ``path``), on one time axis:
    each part's times are from its own origin (a CLOCK_MONOTONIC time, or the MPI
    reference rank's where the part's clock was fitted to it); the merged origin
    is the earliest.  The parts are checked first (io.plan_merge: a part without
    an origin, or of another MPI job, is left out, with a TraceWarning).  Its
    ``skipped``: the parts', these and those left out here."""
    from .io import plan_merge

    plan = plan_merge([p.meta for p in parts], sources, skipped, path, stacklevel=4)
    if len(plan.kept) == 1:
        part = parts[plan.kept[0]]
        part.meta = {**part.meta, "skipped": trace_meta([], None, plan.skipped)["skipped"]}
        return part
    parts = [parts[i] for i in plan.kept]
    for part in parts:
        if part.meta["origin_mono_ns"] != plan.origin:
            shift_times(part.events, part.meta["origin_mono_ns"] - plan.origin)
    procs = [proc for part in parts for proc in part.meta["processes"]]
    return Trace._from_parts([part.events for part in parts],
                             trace_meta(procs, plan.origin, plan.skipped), [],
                             np.concatenate([part.pids for part in parts]))


def _from_directory(path: str) -> Trace:
    """Every trace in a directory: raw files (one run, OMPTPY_OUTPUT), Parquet files
    and dataset partitions (pid=N/*.parquet), merged into one trace.  Each part that
    cannot be read (or is not a regular file) is left out with a TraceWarning and
    listed in ``meta["skipped"]``; TraceFileError when no part can be read."""
    from .io import parquet as parquet_io
    from .io import rawfile, regular_files, warn_skipped

    raw = rawfile.list_dir(path)
    parquet, skipped = regular_files(parquet_io.trace_files(path))
    if not parquet and not skipped:
        return Trace._from(rawfile.load(raw, path))
    parts, sources = [], []
    readers = ([(path if len(raw) > 1 else raw[0], lambda: Trace._from(rawfile.load(raw, path)))]
               if raw else [])
    readers += [(p, functools.partial(Trace.from_parquet, p)) for p in parquet]
    for source, reader in readers:
        try:
            parts.append(reader())
            sources.append(source)
        except TraceFileError as e:
            skipped.append({"source": source, "reason": str(e)})
    if not parts:
        raise TraceFileError(f"{path} holds no readable trace: "
                             + "; ".join(f"{s['source']}: {s['reason']}" for s in skipped))
    warn_skipped(skipped, stacklevel=3)
    return _merge(parts, sources, skipped, path)


def load(path: str | os.PathLike) -> Trace | Profile:
    """Load a trace: a Parquet file (Trace.save, ompt-py run), one raw ``.omptraw``
    file, or a directory: the raw per-process files of a run (OMPTPY_OUTPUT), a
    dataset written by Trace.save (pid=N/ partitions), Parquet files, or a mix,
    merged into one trace with the clocks aligned (origin: the earliest).

    TraceFileError when the path holds no readable trace.  A directory's parts
    that cannot be read (or are not regular files: never opened), or can be read
    only in part, are left out with a TraceWarning and listed in
    ``meta["skipped"]`` ({"source", "reason"} each; empty when nothing was).

    A profile (a file of Profile.save or ``ompt-py run --profile``, or raw files
    written in profile mode, as their metadata says) loads as a ``Profile``.
    """
    from .io import rawfile
    from .io.profile import holds_profile
    from .profile import Profile

    path = os.fspath(path)
    if holds_profile(path):
        return (Profile.from_raw(path) if os.path.isdir(path) or path.endswith(rawfile.SUFFIX)
                else Profile.from_parquet(path))
    if os.path.isdir(path):
        return _from_directory(path)
    if not os.path.exists(path):
        raise TraceFileError(f"no trace at {path}: the file or directory does not exist")
    if path.endswith(rawfile.SUFFIX):
        return Trace.from_raw([path])
    return Trace.from_parquet(path)


def _raw_files(paths: str | os.PathLike | list[str | os.PathLike]) -> tuple[list[str], str]:
    """The raw files of a directory, of a file, or of a list of them, and how to
    name them in errors."""
    from .io import rawfile

    if isinstance(paths, (str, os.PathLike)):
        source = os.fspath(paths)
        return (rawfile.list_dir(source) if os.path.isdir(source) else [source]), source
    files = [os.fspath(p) for p in paths]
    return files, ", ".join(files) or "the list of raw files"


def convert(raw: str | os.PathLike | list[str | os.PathLike], path: str | os.PathLike,
            memory: int | str | None = None) -> Converted:
    """Writes the trace of raw files (a run's directory, an ``.omptraw`` file or a
    list of them, as ``Trace.from_raw`` reads them) as Parquet at ``path`` (as
    ``Trace.save`` writes it), streaming: in memory bounded by ``memory`` (bytes,
    or a size such as ``"512M"``; default: the environment's OMPTPY_MERGE_MEMORY,
    else 256M) beyond the interpreter's own, whatever the trace's size.
    ``ompt_py.load(path)`` then gives what ``ompt_py.load(raw)`` gives.  Returns
    the number of events written and the trace's metadata (as ``Trace.meta``).
    What cannot be read is left out and said as from_raw says it; ConfigError
    for a bad ``memory``, or one too small for the trace (the Parquet footer
    grows with the trace: a trace of 5 x 10^8 events needs about 127M)."""
    from .io import parquet, rawfile

    parquet.chunk_rows(memory)  # a bad bound is said before any file is read
    run = rawfile.scan_run(*_raw_files(raw))
    events = sum(image.nrecords for process in run.processes for image in process)
    return parquet.convert(run, path, parquet.chunk_rows(memory, events=events))


def trace(path: str | os.PathLike | None = None,
          python_stacks: bool | int | None = None, native_depth: int | None = None,
          profile: bool = False) -> Trace | Profile:
    """A trace of this process's OpenMP events: ``with ompt_py.trace() as t: ...``
    or ``t = ompt_py.trace(); t.start(); ...; t.stop()``.  With ``path``, the
    trace is saved there (Parquet) at each stop() and at interpreter exit.

    ``profile=True``: a ``Profile`` instead (per-thread aggregates, see
    ``ompt-py run --profile``), aggregated from start() to stop() and taken at
    stop(); profile mode must be on from the tool's start: OMPTPY_PROFILE=on in
    the environment before ompt_py is imported (ConfigError otherwise; a trace
    cannot record in profile mode).  The tool's tables are the process's: a
    profile holds what every profile window of the process aggregated so far.
    No Python stacks (python_stacks, native_depth).

    ``python_stacks``: record the Python call stack of every parallel, teams
    and target region, region marker and explicit task that a Python thread
    starts outside any parallel region (with or without the GIL): True (32
    frames), False, or the number of frames to keep (1 to 256, innermost
    first).  Default: the environment's OMPTPY_PYTHON_STACKS (on, off or a
    depth), else on.  A capture costs about a hundred nanoseconds once its
    stack is known (bench/pystacks.py).  Where this Python's frames cannot be
    read, the trace's ``meta`` and ``ompt_py.status()`` say why and nothing
    is captured.  See Trace.python_stacks().

    ``native_depth``: with each Python stack, the return addresses of up to
    this many native frames (0 to 16) above the construct's own code, found
    by unwinding the thread (glibc's backtrace(): no frame pointers needed),
    so that regions of one generic native function (PyTorch's
    TensorIteratorBase::for_each) are told apart by the native code that
    called it.  Default: the environment's OMPTPY_NATIVE_DEPTH, else 0 (off):
    unwinding costs a few microseconds per construct (bench/pystacks.py)."""
    if profile:
        from .profile import Profile

        if python_stacks or native_depth:
            raise ConfigError("python_stacks and native_depth: a profile keeps no Python "
                              "stacks; leave them out with profile=True")
        return Profile(path=path)
    return Trace(path, python_stacks, native_depth)


def _stop_at_exit() -> None:
    if _active is not None:
        _active.stop()


def _after_fork_in_child() -> None:
    if _active is not None:
        _active._forked()


atexit.register(_stop_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
