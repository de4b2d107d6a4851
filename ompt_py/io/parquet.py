"""Parquet: ``Trace.save`` and its reader.

A path ending in ``.parquet`` is one file holding every process (a ``pid``
column); any other path a dataset partitioned by process,
``path/pid=<pid>/part-0.parquet`` (hive style).  Each file holds the record
fields as stored (``time_ns`` in nanoseconds from the trace's origin), the
``event_name`` and ``kind_name`` of each row and its process's ``rank`` (when a
process had one), for queries in DuckDB, polars or Dask; its key-value
metadata ``ompt_py`` holds the trace metadata (JSON) of its processes, from
which the reader rebuilds the trace.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..errors import TraceFileError
from ..meta import FORMAT, ranks, trace_meta, with_losses
from ..records import EVENT_CATEGORIES, EVENT_DTYPE, KIND_CATEGORIES, RAW_FIELDS, kind_keys
from . import Parts
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
            meta = trace_meta([proc], trace.meta.get("origin_mono_ns"))
            _write_file(os.path.join(part_dir, "part-0.parquet"), trace,
                        runs.get(proc["pid"], []), meta, False, progress)



def read(path: str) -> Parts:
    """One Parquet file: a whole trace (``Trace.save`` to a .parquet path) or the
    partition of one process of a dataset (no pid column)."""
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
    meta = with_losses(json.loads(raw_meta))
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
    if "pid" in table.column_names:
        return Parts([events], meta, [], table.column("pid").to_numpy().astype(np.int32))
    # A dataset partition: the pid is its process's.
    return Parts([events], meta, [(meta["processes"][0]["pid"], table.num_rows)])
