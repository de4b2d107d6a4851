"""Input and output: the files traces live in.

* ``rawfile``: the per-process files the C tool writes (``OMPTPY_OUTPUT``,
  ``ompt-py run``): blocks of JSON metadata and 64-byte records.
* ``parquet``: ``Trace.save`` and its reader, one file or a dataset
  partitioned by process.
* ``profile``: profile mode's aggregates (``load_profile``) and profile files.
* ``dataset``: a dataset's partitions found from their footers alone
  (``ompt_py.open_dataset``), read one at a time on the dataset's time axis,
  and exported one after the other into one file.
* exports (``export``): ``perfetto`` (JSON) and ``csv``, streamed in batches
  whose text is written in C (``streaming``); ``perfetto_proto`` (Perfetto's
  protobuf trace, its packets written in C from the JSON export's slices);
  ``otf2`` (an OTF2 archive, written through libotf2 by the optional
  ``_otf2`` extension); ``speedscope`` (the flame's stacks per thread,
  for speedscope.app); each filtered by ``filters.ExportFilter``.

Readers return ``Parts`` (the data of a trace), from which ``ompt_py.trace``
makes a Trace: this layer never imports ``ompt_py.trace`` at import time.  It
may import the base modules and the analysis layer's pairing (the Perfetto
slices are paired as the tables are); nothing here imports the presentation
layer.
"""

from __future__ import annotations

import importlib
import os
import stat
import warnings
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from ..errors import TraceFileError, TraceWarning

__all__ = ["EXPORT_FORMATS", "MergePlan", "Parts", "export", "format_of", "load_profile",
           "open_regular", "plan_merge", "regular_files", "warn_skipped"]

#: The formats of ``ompt-py export`` and ``export()``, each written by the module
#: of its name (a dash an underscore).
EXPORT_FORMATS = ("perfetto", "perfetto-proto", "otf2", "csv", "parquet", "speedscope")
#: The format an output's name says, when no format is given.
SUFFIX_FORMATS = {".json": "perfetto", ".pftrace": "perfetto-proto",
                  ".perfetto-trace": "perfetto-proto", ".otf2": "otf2", ".csv": "csv",
                  ".parquet": "parquet"}


@dataclass
class Parts:
    """A trace's data as a reader makes it: events (EVENT_DTYPE) in one or more
    segments, its metadata, and each row's process: ``pid_runs`` ((pid, rows) in
    the order of the rows) or ``pids`` (one per row)."""

    segments: list[np.ndarray]
    meta: dict
    pid_runs: list[tuple[int, int]]
    pids: np.ndarray | None = None


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _not_regular(mode: int) -> str | None:
    """What a file of this mode is when it is not a regular file (None: it is one)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_files(paths: list[str]) -> tuple[list[str], list[dict]]:
    """The regular files among ``paths`` (symbolic links followed), found without
    opening any, and the others as ``meta["skipped"]`` entries: a FIFO, a socket or
    a directory named like a trace file is never opened (a FIFO would block)."""
    files, skipped = [], []
    for p in paths:
        try:
            kind = _not_regular(os.stat(p).st_mode)
        except OSError as e:
            skipped.append({"source": p, "reason": f"cannot be read: {e.strerror}"})
            continue
        if kind:
            skipped.append({"source": p, "reason": f"it is {kind}, not a trace file"})
        else:
            files.append(p)
    return files, skipped


def warn_skipped(skipped: list[dict], stacklevel: int) -> None:
    """A TraceWarning for each ``meta["skipped"]`` entry (the warning of a partial load)."""
    for s in skipped:
        where = "" if s["source"] in s["reason"] else f"{s['source']}: "
        warnings.warn(f"{where}{s['reason']}; left out, the rest is loaded", TraceWarning,
                      stacklevel=stacklevel + 1)


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading, unbuffered; TraceFileError when it cannot be or
    is not a regular file (opened without blocking, then checked: a FIFO named like a
    trace file would block a plain open)."""
    try:
        kind = _not_regular(os.stat(path).st_mode)
        fd = None if kind else os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        kind = kind or _not_regular(os.fstat(fd).st_mode)  # replaced in between
    except OSError as e:
        raise TraceFileError(f"cannot read trace file {path}: {e.strerror}") from e
    if kind:
        if fd is not None:
            os.close(fd)
        raise TraceFileError(f"{path} is {kind}, not a trace file")
    return os.fdopen(fd, "rb", buffering=0)


def format_of(path: str | os.PathLike) -> str | None:
    """The export format ``path``'s suffix names (SUFFIX_FORMATS), or None."""
    name = os.fspath(path).rstrip("/").lower()
    return next((f for suffix, f in SUFFIX_FORMATS.items() if name.endswith(suffix)), None)


def export(trace: Any, path: str | os.PathLike, format: str | None = None, *,
           start: Any = None, end: Any = None, threads: Any = None, pid: Any = None) -> None:
    """Writes ``trace`` to ``path`` in ``format``, one of EXPORT_FORMATS (None: the
    one ``path``'s suffix names, SUFFIX_FORMATS).

    Filters (``filters.ExportFilter``; ConfigError for a value not allowed):
    ``start`` and ``end``, a window of the trace's times (nanoseconds from its
    origin, or a string with a unit: ``"1.5s"``, ``"200ms"``); ``threads``,
    thread numbers; ``pid``, process ids (a number, a list, or a string
    ``"0,2-3"``).  Slices that cross the window are clipped to it, and the
    file's metadata says what was filtered and clipped."""
    if format is None:
        format = format_of(path)
        if format is None:
            raise ValueError(f"no export format given, and {os.fspath(path)} does not end "
                             f"with one of {', '.join(SUFFIX_FORMATS)}: give one of "
                             f"{', '.join(EXPORT_FORMATS)}")
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r}; use one of: "
                         f"{', '.join(EXPORT_FORMATS)}")
    from .filters import ExportFilter

    flt = ExportFilter.of(trace, start=start, end=end, threads=threads, pid=pid)
    writer = importlib.import_module(f".{format.replace('-', '_')}", __name__)
    writer.write(trace, path, flt)


def load_profile(path: str | os.PathLike) -> Any:
    """The profile's tables (``io.profile.ProfileParts``) of a raw file or a directory
    of them written with ``OMPTPY_PROFILE=on``: see ``io.profile.load_profile``
    (``ompt_py.load`` makes a ``Profile`` of them)."""
    from .profile import load_profile as load

    return load(path)


@dataclass
class MergePlan:
    """Which parts of a directory make one trace (``plan_merge``): the indices of
    the parts kept, in order, the trace's origin (the earliest of theirs; None for
    one part without one) and what was left out (``meta["skipped"]`` entries: the
    parts' own and those left out here)."""

    kept: list[int]
    origin: int | None
    skipped: list[dict]


def plan_merge(metas: list[dict], sources: list[str], skipped: list[dict], path: str,
               stacklevel: int) -> MergePlan:
    """The checks of parts (their trace metadata ``metas``, read from ``sources``) to
    be put on one time axis, made on their metadata alone (``ompt_py.load`` of a
    directory, ``ompt_py.open_dataset``): a part without a clock origin is left
    out when others have one; the parts of an MPI job are checked (mpi.check_job:
    those of another job are left out, missing ranks and poor clock fits said);
    each is said with a TraceWarning (``stacklevel``: as warnings.warn's, from the
    caller).  TraceFileError when none has a clock
    origin, or a process is in two parts."""
    from .mpi import check_job

    skipped = [s for meta in metas for s in meta.get("skipped", [])] + skipped
    kept = list(range(len(metas)))
    origins = [meta.get("origin_mono_ns") for meta in metas]
    if len(kept) > 1 and any(o is not None for o in origins):
        unaligned = [{"source": sources[i], "reason": "it has no clock origin (origin_mono_ns in "
                      "its metadata), so it cannot be aligned with the other parts: load it "
                      "alone"} for i in kept if origins[i] is None]
        warn_skipped(unaligned, stacklevel=stacklevel + 1)
        skipped += unaligned
        kept = [i for i in kept if origins[i] is not None]
    if len(kept) == 1:
        return MergePlan(kept, origins[kept[0]], skipped)
    if any(origins[i] is None for i in kept):
        raise TraceFileError(f"none of {', '.join(sources)} has a clock origin (origin_mono_ns "
                             "in its metadata), so they cannot be aligned: load them one by one")
    left_out, said = check_job([p for i in kept for p in metas[i]["processes"]], path)
    warn_skipped(said, stacklevel=stacklevel + 1)
    skipped += said
    kept = [i for i in kept if not {p["pid"] for p in metas[i]["processes"]} <= left_out]
    owner: dict[int, str] = {}
    for i in kept:
        for proc in metas[i]["processes"]:
            if proc["pid"] in owner:
                raise TraceFileError(
                    f"process {proc['pid']} is in both {owner[proc['pid']]} and {sources[i]}; "
                    "load them separately or keep one of them in the directory")
            owner[proc["pid"]] = sources[i]
    procs = [proc for i in kept for proc in metas[i]["processes"]]
    hosts = sorted({proc["hostname"] for proc in procs})
    if len(hosts) > 1 and not all(proc.get("clock_alignment") for proc in procs):
        warnings.warn(f"the processes ran on several machines ({', '.join(hosts)}): their "
                      "clocks are not aligned with each other (ompt-py run --mpi aligns an "
                      "MPI job's: docs/mpi.md)", stacklevel=stacklevel + 1)
    return MergePlan(kept, min(origins[i] for i in kept), skipped)
