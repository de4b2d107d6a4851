"""A job's dataset opened lazily (``ompt_py.open_dataset``): its partitions found
and checked from their Parquet footers alone, each read into a trace of its own
on the dataset's time axis when asked, and exports made a part per partition
where the partition is read and joined into one file (``export``).

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
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

import numpy as np

from ..errors import TraceFileError
from ..meta import trace_meta
from ..records import shift_times
from . import Parts, plan_merge, regular_files, warn_skipped
from . import parquet as parquet_io
from .streaming import ArrayWriter, Progress, Writable, output

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
    def label(self) -> str:
        """Its name in what is said of it: "rank R (pid P)", or "pid P"."""
        return f"rank {self.rank} (pid {self.pid})" if self.rank is not None else f"pid {self.pid}"

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


#: The formats a dataset exports to (Dataset.to_perfetto, to_csv, to_otf2).
FORMATS = ("perfetto", "perfetto-proto", "csv", "otf2")


@dataclass(frozen=True)
class Slot:
    """Where a partition's part of an export goes and what it is: the partition's
    position (``index``; the protobuf's packet sequence and track uuids:
    perfetto_proto.part_ids), the first id of its flows (after the records of
    the partitions before it: each has fewer flows than records), its part
    file, the partition's name (for errors)."""

    index: int
    first_flow: int
    path: str
    label: str


class Made(NamedTuple):
    """A part made (make_part): its file (OTF2: its archive's directory), its size
    (OTF2: of its event files), and what the file's ends need of it (the JSON's
    otherData, perfetto_proto.Written, the CSV's header; OTF2: the part's
    definitions, otf2.Definitions)."""

    path: str
    size: int
    result: Any


def make_part(format: str, ranked: bool, scratch: str, slot: Slot, trace: Trace) -> Made:
    """Writes the part of ``trace`` (a partition, read where this runs: a Dask
    worker or the driver) of an export in ``format`` to ``slot.path``: the JSON's
    events each after SEP, the protobuf's packets on their own sequence, the
    CSV's rows (``ranked``: with a rank column) without a header; OTF2: an archive
    in the directory ``slot.path`` with the partition's own string and region ids."""
    from .filters import ExportFilter

    if format == "otf2":
        from . import otf2

        defs = otf2.write_archive(trace, slot.path, ExportFilter())
        return Made(slot.path, _events_size(slot.path, defs), defs)
    with open(slot.path, "wb") as out:
        if format == "perfetto":
            from . import perfetto

            with Progress(0, "perfetto") as progress:
                result: Any = perfetto.write_events(trace, out, ExportFilter(), slot.first_flow,
                                                    scratch, progress)
        elif format == "perfetto-proto":
            from . import perfetto_proto

            result = perfetto_proto.write_events(trace, out, ExportFilter(), slot.first_flow,
                                                 *perfetto_proto.part_ids(slot.index))
        else:
            from . import csv

            csv.write_rows(trace, out, ranked)
            result = csv.header(trace, ranked)
        return Made(slot.path, out.tell(), result)


def export(map_parts: Callable[[list[Callable[[Trace], Made]]], list[Made]],
           partitions: list[Partition], path: str | os.PathLike, format: str, ranked: bool
           ) -> None:
    """Writes a dataset's ``partitions`` into one file at ``path`` in ``format``
    (FORMATS): each partition's part made where it is read (``map_parts``: runs
    a function per partition, each on its Trace, in this process or on Dask
    workers: Dataset._map) into a file of a temporary directory beside ``path``,
    then the parts joined here in partition order, a part at a time (each
    removed once copied), between the file's beginning and end, which this
    process makes from the parts' small results (the JSON's otherData merged,
    the protobuf's "ompt-py" track on a sequence of its own, the CSV's header).
    OTF2: each part an archive of the partition's own ids, and the archive at
    ``path`` made of them (otf2.join: the definitions unified here, the parts'
    event files moved in).  The directory is removed whatever happens.  A part
    file missing or short (workers that do not see the files this process
    sees) is a TraceFileError."""
    if format not in FORMATS:
        raise ValueError(f"a dataset exports as {', '.join(FORMATS)}, not {format!r}: "
                         "export a partition's Trace (Dataset.partition(i)) to the others")
    path = os.fspath(path)
    if format == "otf2":
        from . import otf2

        otf2.target(path)
    where = os.path.dirname(os.path.abspath(path))
    try:
        scratch = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.parts-", dir=where)
    except OSError as e:
        raise type(e)(e.errno, f"cannot write the export's parts beside {path} (in {where}): "
                      f"{e.strerror}; choose another path") from e
    try:
        suffix = {"perfetto": ".json", "perfetto-proto": ".pftrace", "csv": ".csv",
                  "otf2": ".otf2"}[format]
        first = np.cumsum([1] + [p.rows for p in partitions])
        slots = [Slot(i, int(first[i]), os.path.join(scratch, f"part-{i:06d}{suffix}"), p.label)
                 for i, p in enumerate(partitions)]
        made = map_parts([partial(make_part, format, ranked, scratch, s) for s in slots])
        if not made:
            raise TraceFileError(f"no partition of the dataset could be read: {path} is not "
                                 "written (the warnings say why)")
        labels = {s.path: s.label for s in slots}
        _join(made, path, format, len(partitions), labels)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _join(made: list[Made], path: str, format: str, count: int, labels: dict[str, str]
          ) -> None:
    """The parts ``made`` (of ``count`` partitions) joined into ``path``, streaming."""
    if format == "otf2":
        from . import otf2

        for part in made:
            try:
                size: int | None = _events_size(part.path, part.result)
            except FileNotFoundError:
                size = None
            _check(part, labels[part.path], path, size)
        otf2.join([(part.path, part.result) for part in made], path)
        return
    with output(path) as out:
        if format == "perfetto":
            from . import perfetto

            out.write(perfetto.HEAD)
            body: Writable = ArrayWriter(out)  # the file's first SEP dropped
        else:
            body = out
        if format == "csv":
            out.write(made[0].result)
        for part in made:
            with _opened(part, labels[part.path], path) as src:
                shutil.copyfileobj(src, body, 1 << 24)
            os.remove(part.path)
        if format == "perfetto":
            out.write(perfetto.tail(p.result for p in made))
        elif format == "perfetto-proto":
            from . import perfetto_proto

            out.write(perfetto_proto.ending([p.result for p in made],
                                            *perfetto_proto.part_ids(count)))


@contextmanager
def _opened(part: Made, label: str, path: str) -> Iterator[BinaryIO]:
    """The part file of ``part``, checked to be as long as it was written; a
    TraceFileError that says what happened otherwise."""
    _check(part, label, path, None if not os.path.exists(part.path) else part.size)
    with open(part.path, "rb") as src:
        _check(part, label, path, os.fstat(src.fileno()).st_size)
        yield src


def _events_size(directory: str, defs: Any) -> int:
    """The bytes of the event files of an OTF2 part (FileNotFoundError: one is missing)."""
    from . import otf2

    return sum(os.path.getsize(evt) for evt in otf2.event_files(directory, defs))


def _check(part: Made, label: str, path: str, size: int | None) -> None:
    """A TraceFileError that says what happened unless the part of ``part`` is there
    (``size`` not None) and as long as it was written."""
    where = ("the parts are written where the partitions are read (on the Dask workers) "
             f"and joined here: the workers must see the directory {os.path.dirname(part.path)} "
             "as this process does (the same machine, or a shared file system)")
    if size is None:
        raise TraceFileError(f"the part of {label} of {path} is missing ({part.path}): "
                             f"{where}")
    if size != part.size:
        raise TraceFileError(f"the part of {label} of {path} ({part.path}) has {size:,} "
                             f"bytes of the {part.size:,} written: {where}")
