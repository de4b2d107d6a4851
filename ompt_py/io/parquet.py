"""Parquet: ``Trace.save`` and its reader.

A path ending in ``.parquet`` is one file holding every process (a ``pid``
column); any other path a dataset partitioned by process,
``path/pid=<pid>/part-0.parquet`` (hive style).  Each file holds the record
fields as stored (``time_ns`` in nanoseconds from the trace's origin), the
``event_name`` and ``kind_name`` of each row and its process's ``rank`` (when a
process had one), for queries in DuckDB, polars or Dask; its key-value
metadata ``ompt_py`` holds the trace metadata (JSON) of its processes, from
which the reader rebuilds the trace.  ompt_py.schema writes down the columns
(PARQUET_COLUMNS) and the metadata (TRACE_META); the reader checks a file
against both before it reads a row.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import math
import os
import queue
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa

from ..analysis import offload
from ..errors import ConfigError, TraceFileError
from ..meta import ranks, trace_meta, with_losses
from ..records import (
    EVENT_CATEGORIES,
    EVENT_CODES,
    EVENT_DTYPE,
    KIND_CATEGORIES,
    RAW_FIELDS,
    kind_keys,
)
from ..schema import FORMAT, PARQUET_COLUMNS, TRACE_META, parse
from ..units import parse_size
from . import Parts, open_regular
from .filters import ExportFilter
from .streaming import Progress, batches, output

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from ..trace import Trace
    from .rawfile import Run

#: The key of the trace metadata in a file's key-value metadata.
PARQUET_KEY = b"ompt_py"
ROW_GROUP_ROWS = 1 << 20  # rows per Parquet row group
FILL_ROWS = 1 << 14  # rows of a file decoded into the records at a time (in the cache)
BATCHES_AHEAD = 4  # batches of FILL_ROWS rows decoded ahead of the records written
#: The bound on the memory a conversion of raw files (``convert``) holds for the
#: trace's rows, beyond the interpreter and its libraries: ``memory=`` of
#: ompt_py.convert, ``ompt-py run --merge-memory``, else this variable, else
#: DEFAULT_MEMORY.
MEMORY_VARIABLE = "OMPTPY_MERGE_MEMORY"
DEFAULT_MEMORY = 256 << 20
MIN_MEMORY = 64 << 20
#: The memory a conversion takes (bench/merge_memory.py measured about 28 MiB,
#: 110 to 254 bytes per row (the most when glibc's heap, not mmap, holds chunks
#: of under 32 MB and keeps the freed one) and 12 KiB per row group; these have
#: margins): what
#: it takes whatever its chunks' size (the Parquet encoder's and the memory
#: pools' first allocations), what one row of a chunk takes while it is converted
#: and written (the record, its columns, the encoder's buffers), and what each
#: row group (a chunk) adds until the file is closed (its column chunks'
#: metadata, for the footer: so a trace of N events needs at least FIXED_BYTES +
#: 2 sqrt(ROW_BYTES * GROUP_BYTES * N), about 127 MiB for 5 x 10^8 events).
FIXED_BYTES = 40 << 20
ROW_BYTES = 280
GROUP_BYTES = 14 << 10
_CLOCK = EVENT_CODES["device_clock"]
_ARROW_TYPES = {name: pa.from_numpy_dtype(kind) for name, kind in PARQUET_COLUMNS.items()}


class Converted(NamedTuple):
    """What ``convert`` wrote: its events and the trace's metadata (as Trace.meta)."""

    events: int
    meta: dict


def _arrow_rows(events: np.ndarray, pids: np.ndarray, with_pid: bool, known: dict) -> pa.Table:
    """The Parquet columns of some events and their ``pids`` (``known``: a trace
    metadata that gives each process's rank, meta.ranks)."""
    columns: dict[str, Any] = {"time_ns": events["time_ns"]}
    if with_pid:
        columns["pid"] = pids
    for name, _ in RAW_FIELDS[1:]:
        columns[name] = np.ascontiguousarray(events[name])
    codes = columns["event"]
    columns["event_name"] = pa.array(EVENT_CATEGORIES.categorical(codes))
    columns["kind_name"] = pa.array(KIND_CATEGORIES.categorical(kind_keys(codes,
                                                                          columns["kind"])))
    rank = ranks(known, pids)
    if rank is not None:
        columns["rank"] = pa.array(rank)
    return pa.table(columns)


class _File:
    """One Parquet trace file written some rows at a time (each ``write``: row
    groups of at most ROW_GROUP_ROWS), with its metadata given when it is opened
    or, when it is known only after the rows (a conversion that streams them),
    when it is closed.  It appears at its path only once written whole."""

    def __init__(self, path: str, with_pid: bool, known: dict, meta: dict | None = None
                 ) -> None:
        self.with_pid, self.known, self.meta = with_pid, known, meta
        self.stack = contextlib.ExitStack()
        self.out = self.stack.enter_context(output(path))
        self.writer: Any = None

    def write(self, events: np.ndarray, pids: np.ndarray | int) -> None:
        import pyarrow.parquet as pq

        if isinstance(pids, (int, np.integer)):
            pids = np.full(len(events), pids, np.int32)
        table = _arrow_rows(events, pids, self.with_pid, self.known)
        if self.writer is None:
            schema = table.schema
            if self.meta is not None:
                schema = schema.with_metadata({PARQUET_KEY: json.dumps(self.meta).encode()})
            self.writer = pq.ParquetWriter(self.out, schema, compression="zstd")
        self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        # Arrow's allocator keeps freed pages for seconds: the encoders' buffers of
        # several row groups would stay resident, beyond the bound.
        pa.default_memory_pool().release_unused()

    def close(self, meta: dict | None = None) -> None:
        """Writes the metadata (``meta``, when not given at the start) and closes."""
        if self.writer is None:  # no rows: the columns all the same
            self.write(np.empty(0, EVENT_DTYPE), np.empty(0, np.int32))
        if meta is not None:
            self.writer.add_key_value_metadata({PARQUET_KEY: json.dumps(meta).encode()})
        self.writer.close()
        self.stack.close()

    def __enter__(self) -> _File:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is not None:  # failed: the partial file goes
            if self.writer is not None:
                with contextlib.suppress(Exception):
                    self.writer.close()
            self.stack.__exit__(kind, *exc)


def _pid_runs(pids: np.ndarray) -> dict[int, list[slice]]:
    """Each process's runs of consecutive rows, in row order."""
    edges = np.flatnonzero(pids[1:] != pids[:-1]) + 1
    starts, stops = np.r_[0, edges], np.r_[edges, len(pids)]
    runs: dict[int, list[slice]] = {}
    for start, stop in zip(starts.tolist(), stops.tolist()):
        if stop > start:
            runs.setdefault(int(pids[start]), []).append(slice(start, stop))
    return runs


def _partition(path: str, pid: int) -> str:
    """The file of process ``pid`` in the dataset at ``path`` (its folder made)."""
    part_dir = os.path.join(path, f"pid={pid}")
    os.makedirs(part_dir, exist_ok=True)
    return os.path.join(part_dir, "part-0.parquet")


def write(trace: Trace, path: str | os.PathLike, flt: ExportFilter | None = None) -> None:
    """``Trace.save``: one file (a path ending in .parquet) or a dataset partitioned
    by process, ``path/pid=<pid>/part-0.parquet``; of the events ``flt`` keeps
    (default: all; the metadata's ``export_filter`` says what it kept)."""
    path = os.fspath(path)
    trace = (flt or ExportFilter()).events(trace)
    with Progress(len(trace), "parquet") as progress:
        if path.endswith(".parquet"):
            files = [(path, [slice(0, len(trace))], trace.meta, True)]
        else:
            os.makedirs(path, exist_ok=True)
            runs = _pid_runs(trace.pids)
            filtered = {k: trace.meta[k] for k in ("export_filter",) if k in trace.meta}
            files = [(_partition(path, proc["pid"]), runs.get(proc["pid"], []),
                      {**trace_meta([proc], trace.meta.get("origin_mono_ns"),
                                    trace.meta.get("skipped")), **filtered}, False)
                     for proc in trace.meta.get("processes", [])]
        for file, rows, meta, with_pid in files:
            with _File(file, with_pid, trace.meta, meta) as out:
                for run in rows:
                    for part in batches(run.stop - run.start, ROW_GROUP_ROWS):
                        at = slice(run.start + part.start, run.start + part.stop)
                        out.write(trace.events[at], trace.pids[at])
                        progress.update(at.stop - at.start)
                out.close()


def chunk_rows(memory: int | str | None = None, name: str = "memory", events: int = 0
               ) -> int:
    """The rows ``convert`` handles at a time (each chunk a row group) for a trace of
    ``events`` events within ``memory`` bytes (a number, a size such as ``512M``,
    or None: MEMORY_VARIABLE, else DEFAULT_MEMORY): the most that fit, at most
    ROW_GROUP_ROWS.  ConfigError when it is not a size of at least MIN_MEMORY, or
    too small for the row groups' metadata of so many events (``name``: what the
    user gave it as)."""
    given = memory
    if memory is None:
        given, name = os.environ.get(MEMORY_VARIABLE) or DEFAULT_MEMORY, MEMORY_VARIABLE
    size = parse_size(given) if isinstance(given, str) else given
    if not isinstance(size, int) or isinstance(size, bool) or size < MIN_MEMORY:
        raise ConfigError(f"{name} {given!r} is not valid; use a size of at least "
                          f"{MIN_MEMORY >> 20}M, such as 256M or 1G")
    # FIXED_BYTES + ROW_BYTES * rows + GROUP_BYTES * (events / rows + 1) <= size
    # (the last row group is partial): the larger root of the quadratic in rows.
    room = size - FIXED_BYTES - GROUP_BYTES
    square = room * room - 4 * ROW_BYTES * GROUP_BYTES * events
    if square < 0:
        need = (FIXED_BYTES + GROUP_BYTES + 2 * math.isqrt(ROW_BYTES * GROUP_BYTES * events)
                + (1 << 20))
        raise ConfigError(f"{name} {given!r} is too small for a trace of {events:,} events "
                          "(the Parquet file's metadata grows with its row groups): give at "
                          f"least {-(-need >> 20)}M")
    return min((room + math.isqrt(square)) // (2 * ROW_BYTES), ROW_GROUP_ROWS)


def convert(run: Run, path: str | os.PathLike, rows: int) -> Converted:
    """Writes the trace of scanned raw files (rawfile.scan_run) as ``write`` writes
    a loaded one, streaming: ``rows`` events at a time (chunk_rows), so that the
    memory it takes does not grow with the trace.  The metadata, known once every
    record was read (the ledger counts what each thread's file holds, the device
    clocks are fitted to the clock pairs, kept aside as they pass), is written
    at the end of each file."""
    path = os.fspath(path)
    single = path.endswith(".parquet")
    if not single:
        os.makedirs(path, exist_ok=True)
    known = run.ranks()
    clocks: list[tuple[np.ndarray, int]] = []  # each process's clock pairs
    entries, total = [], 0
    with contextlib.ExitStack() as stack:
        progress = stack.enter_context(
            Progress(sum(image.nrecords for process in run.processes for image in process),
                     "parquet"))
        out = stack.enter_context(_File(path, True, known)) if single else None
        for process in run.processes:
            pid = process[0].meta["pid"]
            part = None if single else stack.enter_context(_File(_partition(path, pid), False,
                                                                 known))
            pairs = []
            for image in process:
                for events in run.events(image, rows):
                    (out or part).write(events, pid)
                    pairs.append(events[events["event"] == _CLOCK])
                    total += len(events)
                    progress.update(len(events))
            entries.append(run.entry(process))
            clocks.append((np.concatenate(pairs) if pairs else np.empty(0, EVENT_DTYPE), pid))
            if part is not None:
                own = trace_meta([entries[-1]], run.origin, run.skipped)
                offload.attach_clocks(own, clocks[-1][0], pid)
                part.close(trace_meta([entries[-1]], run.origin, run.skipped))
        meta = trace_meta(entries, run.origin, run.skipped)
        events = np.concatenate([pairs for pairs, _ in clocks])
        offload.attach_clocks(meta, events, np.repeat(
            np.array([pid for _, pid in clocks], np.int32), [len(p) for p, _ in clocks]))
        if out is not None:
            out.close(meta)
    return Converted(total, meta)


def _columns(path: str, arrow_schema: pa.Schema, one_process: bool) -> list[str]:
    """The columns to read, checked against schema.PARQUET_COLUMNS before any is
    read: each there (``pid`` but in the partition of one process), of an integer
    type (cast to the record's type on reading, refused if a value does not fit)."""
    names = arrow_schema.names
    missing = [n for n in PARQUET_COLUMNS if n not in names and not (n == "pid" and one_process)]
    if missing:
        raise TraceFileError(f"{path} lacks the columns {missing}; it is not an ompt-py trace "
                             "(Trace.save writes them)")
    wanted = [n for n in PARQUET_COLUMNS if n in names]
    if len(set(names)) != len(names):
        raise TraceFileError(f"{path} has several columns of one name; it is not an ompt-py "
                             "trace (Trace.save writes each once)")
    for name in wanted:
        kind = arrow_schema.field(name).type
        if not pa.types.is_integer(kind):
            raise TraceFileError(
                f"{path}: its column {name} is of type {kind}, not an integer column "
                f"({PARQUET_COLUMNS[name]}); it is not an ompt-py trace (Trace.save writes it)")
    return wanted


def _meta(path: str, raw: bytes | None) -> dict:
    """The trace metadata of a file, checked against schema.TRACE_META."""
    if raw is None:
        raise TraceFileError(f"{path} is a Parquet file but not an ompt-py trace (no "
                             f"{PARQUET_KEY.decode()} metadata)")
    meta, bad = parse(raw, TRACE_META, "meta")
    if not bad and meta["format"] != FORMAT:
        raise TraceFileError(f"{path} has trace format {meta['format']}; this ompt_py reads "
                             f"format {FORMAT}: read it with the ompt-py that wrote it (or a "
                             "newer one)")
    pids = [] if bad else [p["pid"] for p in meta["processes"]]
    if not bad and len(set(pids)) != len(pids):
        bad = "processes holds a process twice"
    if bad:
        raise TraceFileError(f"{path}: its ompt_py metadata is corrupt ({bad}); the file was "
                             "damaged or not written by Trace.save")
    meta.setdefault("skipped", [])  # saved before partial loads were said there
    return with_losses(meta)


def open_file(path: str) -> pq.ParquetFile:
    """A Parquet file opened for reading; TraceFileError when it cannot be (not a
    regular file, not Parquet, damaged: pyarrow raises ValueError on a damaged
    footer's strings)."""
    import pyarrow.parquet as pq

    open_regular(path).close()  # a FIFO would block pyarrow
    try:
        return pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise TraceFileError(f"{path} cannot be read as a Parquet file ({type(e).__name__}: "
                             f"{e}); it may be truncated or not an ompt-py file") from e


def trace_files(path: str) -> list[str]:
    """The Parquet files of a directory: its own (``*.parquet``), then its dataset
    partitions' (``pid=N/*.parquet``), each sorted."""
    escaped = glob.escape(path)
    return (sorted(glob.glob(os.path.join(escaped, "*.parquet")))
            + sorted(glob.glob(os.path.join(escaped, "pid=*", "*.parquet"))))


def read_meta(path: str) -> tuple[dict, int]:
    """The trace metadata and the number of rows of a Parquet trace file, from its
    footer alone (no row is read), checked as ``read`` checks them; TraceFileError
    when it is not a trace file (truncated: no footer)."""
    parquet_file = open_file(path)
    meta = _meta(path, (parquet_file.metadata.metadata or {}).get(PARQUET_KEY))
    _columns(path, parquet_file.schema_arrow, one_process=len(meta["processes"]) == 1)
    return meta, parquet_file.metadata.num_rows


def read(path: str) -> Parts:
    """One Parquet file: a whole trace (``Trace.save`` to a .parquet path) or the
    partition of one process of a dataset (no pid column); TraceFileError when it
    is not one, or its metadata or columns are not of the schema's shape."""
    parquet_file = open_file(path)
    try:
        arrow_schema = parquet_file.schema_arrow
        # The file's key-value metadata: Trace.save's schema metadata is there too.
        meta = _meta(path, (parquet_file.metadata.metadata or {}).get(PARQUET_KEY))
        wanted = _columns(path, arrow_schema, one_process=len(meta["processes"]) == 1)
        events, pids = _records(path, parquet_file, wanted)
    except (pa.ArrowException, OSError, ValueError) as e:
        if isinstance(e, TraceFileError):
            raise
        raise TraceFileError(
            f"{path} cannot be read as a Parquet trace ({type(e).__name__}: {e}); it may be "
            "truncated or not a trace file"
        ) from e
    finally:
        # The reader's buffers, freed: Arrow's allocator would keep them for seconds.
        pa.default_memory_pool().release_unused()
    if "pid" not in wanted:  # a dataset partition: the pid is its process's
        return Parts([events], meta, [(meta["processes"][0]["pid"], len(events))])
    if isinstance(pids, int):  # one process: its pid once, not per row
        return Parts([events], meta, [(pids, len(events))])
    return Parts([events], meta, [], pids)


def _records(path: str, parquet_file: pq.ParquetFile, wanted: list[str]
             ) -> tuple[np.ndarray, np.ndarray | int | None]:
    """The rows of a trace file (its columns ``wanted``) as records (EVENT_DTYPE) and
    their process: each row's pid when they differ, else the pid of them all (an
    int), None without a pid column or a row.  The rows are decoded FILL_ROWS at a
    time (``_decoded``) and written into the records, each block while it is in the
    cache: beyond the records, the read holds BATCHES_AHEAD batches' columns and the
    reader's buffers (a row group's compressed columns, a page of each column), 10
    to 20 MiB for Trace.save's row groups whatever the file's size (bench/README.md,
    Dataset benchmark)."""
    footer = parquet_file.metadata
    rows, groups = footer.num_rows, range(footer.num_row_groups)
    ends = list(itertools.accumulate(footer.row_group(group).num_rows for group in groups))
    held = ends[-1] if ends else 0
    if held != rows:
        raise TraceFileError(f"{path}: its row groups hold {held:,} rows, not the {rows:,} its "
                             "footer says; the file is damaged")
    events = np.empty(rows, EVENT_DTYPE)
    into = {name: events[name] for name in wanted if name != "pid"}
    first, pids = None, None  # the first row's pid; each row's, made once one differs
    at = start = 0
    with contextlib.closing(_decoded(parquet_file, wanted, groups)) as decoded:
        for group, batch in decoded:
            if batch is None:  # the group's end
                end = ends[group]
                if at != end:
                    raise TraceFileError(f"{path}: its row group {group} holds {at - start:,} "
                                         f"rows, not the {end - start:,} its footer says; the "
                                         "file is damaged")
                start = at
                continue
            block = slice(at, at + batch.num_rows)
            for name, column in into.items():
                column[block] = _column(path, batch.column(name), name)
            if "pid" in wanted and batch.num_rows:
                values = _column(path, batch.column("pid"), "pid")
                first = int(values[0]) if first is None else first
                if pids is None and (values != first).any():
                    pids = np.full(rows, first, values.dtype)
                if pids is not None:
                    pids[block] = values
            at = block.stop
    return events, first if pids is None else pids


def _decoded(parquet_file: pq.ParquetFile, wanted: list[str], groups: range
             ) -> Iterator[tuple[int, pa.RecordBatch | None]]:
    """The row groups' rows, FILL_ROWS at a time: (group, batch), then (group, None)
    at the end of each group.  Decoded on a thread of their own, which Arrow's
    decoding leaves the GIL to, while the caller writes the batches before into the
    records (1.0 s against 1.8 s for 10^7 rows on two cores): at most
    BATCHES_AHEAD ahead.  A row group at a time: the reader buffers the compressed
    columns of all the row groups it is given.  Not on Arrow's pool: its threads
    saved no time on batches this small, and what they allocate stays in their
    heaps (release_unused gives back the calling thread's, so the decoding thread
    calls it before it ends).  Closed (the caller's ``with closing``), it stops
    that thread, whatever it was doing."""
    ahead: queue.Queue[Any] = queue.Queue(BATCHES_AHEAD)
    stop = threading.Event()

    def decode() -> None:
        try:
            for group in groups:
                for batch in parquet_file.iter_batches(FILL_ROWS, row_groups=[group],
                                                       columns=wanted, use_threads=False):
                    if stop.is_set():
                        return
                    ahead.put((group, batch))
                ahead.put((group, None))
            ahead.put(None)
        except BaseException as e:  # raised where the rows are asked for
            ahead.put(e)
        finally:
            pa.default_memory_pool().release_unused()

    thread = threading.Thread(target=decode, name="ompt-py: Parquet decoding", daemon=True)
    thread.start()
    try:
        while (item := ahead.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # a put waiting for room, given it
            with contextlib.suppress(queue.Empty):
                ahead.get(timeout=0.01)
        thread.join()


def _column(path: str, column: pa.Array, name: str) -> np.ndarray:
    """One column of some rows of a trace file as the records' type
    (schema.PARQUET_COLUMNS); TraceFileError when its values do not fit that type
    or are null."""
    kind = _ARROW_TYPES[name]
    if column.type != kind:  # Trace.save writes the records' types: no cast then
        try:
            column = column.cast(kind)
        except pa.ArrowInvalid as e:
            raise TraceFileError(f"{path}: its column {name} has values that are not {kind} "
                                 "values; it is not an ompt-py trace (Trace.save writes them)"
                                 ) from e
    if column.null_count:
        raise TraceFileError(f"{path}: its column {name} has null values; it is not an "
                             "ompt-py trace (Trace.save writes none)")
    return column.to_numpy()
