"""A job's dataset opened lazily (``ompt_py.open_dataset``): its partitions found
and checked from their Parquet footers alone, each read into a trace of its own
on the dataset's time axis when asked, and exports written partition after
partition.

A dataset is a directory of Parquet trace files, one per process
(``pid=N/part-0.parquet``, as ``Trace.save`` and ``ompt-py run -o DIR/``
write it).  ``scan`` reads each file's footer (its trace metadata and its
number of rows: no row), leaves out what ``ompt_py.load`` of the directory
leaves out (io.plan_merge, the same checks: files that cannot be read, parts
of another MPI job, parts without a clock origin; missing ranks said) and
gives the dataset's origin, the earliest of the partitions'.  ``read``
gives one partition's data with its times moved to that origin: what
``ompt_py.load`` of the whole directory holds of that process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import TraceFileError
from ..meta import trace_meta
from ..records import shift_times
from . import Parts, plan_merge, regular_files, warn_skipped
from . import parquet as parquet_io

if TYPE_CHECKING:
    from ..trace import Trace


@dataclass(frozen=True)
class Partition:
    """One partition of a dataset: its file, its process (pid, job rank: None
    without one, and its metadata, as Trace.meta["processes"] has it), its
    number of events and its trace's origin (origin_mono_ns)."""

    path: str
    pid: int
    rank: int | None
    rows: int
    origin: int | None
    process: dict = field(compare=False, repr=False)

    @property
    def clock(self) -> dict | None:
        """The fit of its clock to rank 0's (docs/mpi.md, Clocks; None: not fitted)."""
        return self.process.get("clock_alignment")


@dataclass
class Scan:
    """A dataset's partitions (in rank order, then pid), its origin (the earliest
    of theirs) and its metadata (as Trace.meta of the whole dataset: every
    partition's process, ``skipped`` what was left out)."""

    partitions: list[Partition]
    origin: int | None
    meta: dict


def scan(path: str, stacklevel: int) -> Scan:
    """The partitions of the dataset at ``path``, read from their footers and checked
    as ``ompt_py.load`` checks a directory's parts (io.plan_merge; what is left
    out is said with a TraceWarning, ``stacklevel`` as warnings.warn's from the
    caller).  TraceFileError when ``path`` is not a directory or holds no
    readable partition."""
    if not os.path.isdir(path):
        raise TraceFileError(f"{path} is not a directory: open_dataset opens a dataset "
                             "(DIR/pid=N/part-0.parquet, as ompt-py run -o DIR/ and "
                             "Trace.save(DIR) write it); ompt_py.load reads one file")
    files, skipped = regular_files(parquet_io.trace_files(path))
    metas, sources, rows = [], [], []
    for file in files:
        try:
            meta, n = parquet_io.read_meta(file)
        except TraceFileError as e:
            skipped.append({"source": file, "reason": str(e)})
            continue
        metas.append(meta)
        sources.append(file)
        rows.append(n)
    if not metas:
        why = "; ".join(f"{s['source']}: {s['reason']}" for s in skipped)
        raise TraceFileError(f"{path} holds no readable partition" + (f": {why}" if why else
                             " (no pid=N/*.parquet; raw files are made a dataset by "
                             "ompt_py.convert(raw_dir, DIR))"))
    warn_skipped(skipped, stacklevel=stacklevel + 1)
    plan = plan_merge(metas, sources, skipped, path, stacklevel=stacklevel + 1)
    parts = []
    for i in plan.kept:
        for proc in metas[i]["processes"]:  # one: a partition (a whole file: several)
            parts.append(Partition(sources[i], proc["pid"], proc.get("rank"), rows[i],
                                   metas[i].get("origin_mono_ns"), proc))
    parts.sort(key=lambda p: (p.rank is None, p.rank or 0, p.pid))
    if len({p.path for p in parts}) != len(parts):
        several = sorted({p.path for p in parts if sum(q.path == p.path for q in parts) > 1})
        raise TraceFileError(f"{', '.join(several)} hold(s) several processes: a dataset has "
                             "one file per process; save it with Trace.save(DIR) (no .parquet "
                             "suffix) or load it whole with ompt_py.load")
    return Scan(parts, plan.origin,
                trace_meta([p.process for p in parts], plan.origin, plan.skipped))


def read(part: Partition, origin: int | None) -> Parts:
    """The data of one partition, its times from ``origin`` (the dataset's)."""
    parts = parquet_io.read(part.path)
    if part.origin is not None and origin is not None and part.origin != origin:
        for events in parts.segments:
            shift_times(events, part.origin - origin)
        parts.meta = {**parts.meta, "origin_mono_ns": origin}
    return parts


def export(traces: Iterable[Trace], path: str | os.PathLike, format: str, ranked: bool
           ) -> None:
    """Writes the traces (a dataset's partitions, each made when its turn comes) one
    after the other into one file at ``path``: ``perfetto`` (JSON: each partition's
    process with its tracks) or ``csv`` (each partition's rows in time order, the
    partitions one after the other; ``ranked``: with a rank column)."""
    if format == "perfetto":
        from .perfetto import write_all

        write_all(traces, path)
    elif format == "csv":
        from . import csv

        csv.write_all(traces, path, ranked)
    else:
        raise ValueError(f"a dataset exports as 'perfetto' or 'csv', not {format!r}: export a "
                         "partition's Trace (Dataset.partition(i)) to the other formats")
