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

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..errors import TraceFileError
from ..meta import ranks, trace_meta, with_losses
from ..records import EVENT_CATEGORIES, EVENT_DTYPE, KIND_CATEGORIES, RAW_FIELDS, kind_keys
from ..schema import FORMAT, PARQUET_COLUMNS, TRACE_META, parse
from . import Parts, open_regular
from .streaming import Progress, batches

if TYPE_CHECKING:
    from ..trace import Trace

#: The key of the trace metadata in a file's key-value metadata.
PARQUET_KEY = b"ompt_py"
ROW_GROUP_ROWS = 1 << 20  # rows per Parquet row group


def _arrow_rows(trace: Trace, rows: slice, with_pid: bool) -> pa.Table:
    """The Parquet columns of some rows of ``trace.events``."""
    ev = trace.events[rows]
    pids = trace.pids[rows]
    columns: dict[str, Any] = {"time_ns": ev["time_ns"]}
    if with_pid:
        columns["pid"] = pids
    for name, _ in RAW_FIELDS[1:]:
        columns[name] = np.ascontiguousarray(ev[name])
    codes = columns["event"]
    columns["event_name"] = pa.array(EVENT_CATEGORIES.categorical(codes))
    columns["kind_name"] = pa.array(KIND_CATEGORIES.categorical(kind_keys(codes,
                                                                          columns["kind"])))
    rank = ranks(trace.meta, pids)
    if rank is not None:
        columns["rank"] = pa.array(rank)
    return pa.table(columns)


def _pid_runs(pids: np.ndarray) -> dict[int, list[slice]]:
    """Each process's runs of consecutive rows, in row order."""
    edges = np.flatnonzero(pids[1:] != pids[:-1]) + 1
    starts, stops = np.r_[0, edges], np.r_[edges, len(pids)]
    runs: dict[int, list[slice]] = {}
    for start, stop in zip(starts.tolist(), stops.tolist()):
        if stop > start:
            runs.setdefault(int(pids[start]), []).append(slice(start, stop))
    return runs


def _write_file(path: str, trace: Trace, runs: list[slice], meta: dict, with_pid: bool,
                progress: Progress) -> None:
    import pyarrow.parquet as pq

    writer = None
    try:
        for run in runs or [slice(0, 0)]:
            for part in batches(max(run.stop - run.start, 1), ROW_GROUP_ROWS):
                table = _arrow_rows(trace, slice(run.start + part.start, run.start + part.stop),
                                    with_pid)
                if writer is None:
                    schema = table.schema.with_metadata({PARQUET_KEY: json.dumps(meta).encode()})
                    writer = pq.ParquetWriter(path, schema, compression="zstd")
                writer.write_table(table)
                progress.update(table.num_rows)
    finally:
        if writer is not None:
            writer.close()


def write(trace: Trace, path: str | os.PathLike) -> None:
    """``Trace.save``: one file (a path ending in .parquet) or a dataset partitioned
    by process, ``path/pid=<pid>/part-0.parquet``."""
    path = os.fspath(path)
    with Progress(len(trace), "parquet") as progress:
        if path.endswith(".parquet"):
            _write_file(path, trace, [slice(0, len(trace))], trace.meta, True, progress)
            return
        os.makedirs(path, exist_ok=True)
        runs = _pid_runs(trace.pids)
        for proc in trace.meta.get("processes", []):
            part_dir = os.path.join(path, f"pid={proc['pid']}")
            os.makedirs(part_dir, exist_ok=True)
            meta = trace_meta([proc], trace.meta.get("origin_mono_ns"),
                              trace.meta.get("skipped"))
            _write_file(os.path.join(part_dir, "part-0.parquet"), trace,
                        runs.get(proc["pid"], []), meta, False, progress)


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


def read(path: str) -> Parts:
    """One Parquet file: a whole trace (``Trace.save`` to a .parquet path) or the
    partition of one process of a dataset (no pid column); TraceFileError when it
    is not one, or its metadata or columns are not of the schema's shape."""
    import pyarrow.parquet as pq

    open_regular(path).close()  # a FIFO would block pyarrow
    try:
        parquet_file = pq.ParquetFile(path)
        arrow_schema = parquet_file.schema_arrow
        meta = _meta(path, (arrow_schema.metadata or {}).get(PARQUET_KEY))
        wanted = _columns(path, arrow_schema, one_process=len(meta["processes"]) == 1)
        table = parquet_file.read(columns=wanted)
    except (pa.ArrowException, OSError, ValueError) as e:
        if isinstance(e, TraceFileError):
            raise
        raise TraceFileError(
            f"{path} cannot be read as a Parquet trace ({type(e).__name__}: {e}); it may be "
            "truncated or not a trace file"
        ) from e
    columns = {}
    for name in wanted:
        kind = pa.from_numpy_dtype(PARQUET_COLUMNS[name])
        try:
            columns[name] = table.column(name).cast(kind)
        except pa.ArrowInvalid as e:
            raise TraceFileError(f"{path}: its column {name} has values that are not {kind} "
                                 "values; it is not an ompt-py trace (Trace.save writes them)"
                                 ) from e
    nulls = [name for name, column in columns.items() if column.null_count]
    if nulls:
        raise TraceFileError(f"{path}: its columns {nulls} have null values; it is not an "
                             "ompt-py trace (Trace.save writes none)")
    events = np.empty(table.num_rows, EVENT_DTYPE)
    for name in EVENT_DTYPE.names:
        events[name] = columns[name].to_numpy()
    if "pid" in columns:
        return Parts([events], meta, [], columns["pid"].to_numpy())
    # A dataset partition: the pid is its process's.
    return Parts([events], meta, [(meta["processes"][0]["pid"], table.num_rows)])
