"""Reading the files the tool writes with OMPTPY_OUTPUT (one per process).

A file is a sequence of blocks, each a 16-byte header (magic, type, length)
and its payload: META (JSON, first), LEDGER (what each thread wrote into its
buffers, kept up to date however the process ends: see ``ledger``), RECORDS
(64-byte records of one thread, in order) and STATS (JSON counters with a
clock anchor; the tool writes one as it goes and a final one at exit).
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from dataclasses import dataclass, field

import numpy as np

from .. import _core
from .. import meta as trace_meta
from ..errors import TraceFileError, TraceWarning
from ..records import RAW_DTYPE, RECORD_SIZE, to_events
from . import Parts
from . import ledger as raw_ledger

MAGIC = _core.FILE_MAGIC
BLOCK_META, BLOCK_RECORDS, BLOCK_STATS = _core.BLOCK_META, _core.BLOCK_RECORDS, _core.BLOCK_STATS
BLOCK_STACKS, BLOCK_LEDGER = _core.BLOCK_STACKS, _core.BLOCK_LEDGER
HEADER = struct.Struct("<IIQ")  # magic, type, payload length (csrc/tool/omptpy_file.h)
if HEADER.size != _core.BLOCK_HEADER_SIZE:
    raise ImportError("ompt_py._core was built for another raw file format; reinstall the "
                      "package so both parts come from one build")
SUFFIX = ".omptraw"


@dataclass
class RawProcess:
    """What one file holds: its META, its records (raw ticks), its STATS and STACKS blocks."""

    path: str
    meta: dict
    records: np.ndarray
    stats: list[dict] = field(default_factory=list)
    stacks: list[dict] = field(default_factory=list)
    truncated: bool = False
    ledger: raw_ledger.Ledger | None = None


def read(path: str) -> RawProcess:
    """Parse one .omptraw file; TraceFileError when it is not one or is corrupt.

    Records are read straight into one array (one copy, from the kernel).  A
    file cut short in its last block (the process was killed while the tool
    wrote) keeps what is complete and is marked ``truncated`` with a warning.
    """
    try:
        f = open(path, "rb", buffering=0)  # noqa: SIM115 (closed below)
    except OSError as e:
        raise TraceFileError(f"cannot read trace file {path}: {e.strerror}") from e
    with f:
        size = os.fstat(f.fileno()).st_size
        records = np.empty(size // RECORD_SIZE, dtype=RAW_DTYPE)
        out = memoryview(records.view(np.uint8))
        off = nrec = 0
        meta, stats, stacks, truncated, ledgers = None, [], [], False, []
        header = bytearray(HEADER.size)
        while off < size:
            if f.readinto(header) != HEADER.size:
                truncated = True
                break
            magic, kind, length = HEADER.unpack(header)
            if magic != MAGIC:
                what = "is not an ompt-py trace file" if off == 0 else "is corrupt"
                raise TraceFileError(f"{path} {what} (bad block header at byte {off})")
            if kind not in (BLOCK_META, BLOCK_RECORDS, BLOCK_STATS, BLOCK_STACKS, BLOCK_LEDGER):
                raise TraceFileError(
                    f"{path} is corrupt (unknown block type {kind} at byte {off})"
                )
            body = off + HEADER.size
            whole = body + length <= size
            if kind == BLOCK_RECORDS:
                if whole and length % RECORD_SIZE:
                    raise TraceFileError(
                        f"{path} is corrupt (records block of {length} bytes at byte {off})"
                    )
                # A cut-short last block keeps its complete records.
                take = length if whole else (size - body) // RECORD_SIZE * RECORD_SIZE
                start = nrec * RECORD_SIZE
                got = f.readinto(out[start : start + take])
                nrec += (got or 0) // RECORD_SIZE
            elif kind == BLOCK_LEDGER and whole:
                ledgers.append(f.read(length))
            elif whole:
                try:
                    doc = json.loads(f.read(length))
                except ValueError as e:
                    raise TraceFileError(
                        f"{path} is corrupt (bad JSON at byte {body}: {e})"
                    ) from e
                if kind == BLOCK_META:
                    meta = doc
                else:
                    (stats if kind == BLOCK_STATS else stacks).append(doc)
            if not whole:
                truncated = True
                break
            off = body + length
    if meta is None:
        raise TraceFileError(f"{path} has no META block; it is not a complete ompt-py trace file")
    if meta.get("record_size") != RECORD_SIZE:
        raise TraceFileError(
            f"{path} was written with {meta.get('record_size')}-byte records; this ompt_py "
            f"reads {RECORD_SIZE}-byte records (format {meta.get('record_version')})"
        )
    ledger = raw_ledger.parse(ledgers, path)
    if truncated:
        why = (f"writing it failed: {raw_ledger.errno_text(ledger.sink_errno)}"
               if ledger and ledger.sink_errno else "the process was killed while writing")
        warnings.warn(f"{path} ends in the middle of a block ({why}); the complete part is kept",
                      TraceWarning, stacklevel=2)
    return RawProcess(path, meta, records[:nrec], stats, stacks, truncated, ledger)


def list_dir(directory: str) -> list[str]:
    """The trace files of a directory written with OMPTPY_OUTPUT, sorted."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX))
    except OSError as e:
        raise TraceFileError(f"cannot list {directory}: {e.strerror}") from e
    return [os.path.join(directory, n) for n in names]


def load(paths: list[str], source: str) -> Parts:
    """The trace of the raw files ``paths`` (one per process; ``source`` names them
    in errors), on one time axis whose origin is the earliest process start."""
    if not paths:
        raise TraceFileError(
            f"{source} holds no trace files (*{SUFFIX}): no process in the run "
            "started an OpenMP runtime with OMPT support (LLVM libomp)."
        )
    every = [read(p) for p in paths]
    procs = [p for p in every if not _empty(p)] or every
    origin = min(p.meta["start_anchor"]["mono_ns"] for p in procs)
    segments, pids, entries = [], [], []
    for chain in raw_ledger.images(procs):
        images = []
        for p in chain:
            last = p.stats[-1] if p.stats else None
            events = to_events(p.records, p.meta["start_anchor"],
                               last["anchor"] if last else None, p.meta["tick_ns_estimate"],
                               origin)
            segments.append(events)
            pids.append((p.meta["pid"], len(events)))
            threads = trace_meta.thread_rows(last) if last else []
            losses = raw_ledger.account(p, threads)
            images.append(trace_meta.process_entry(
                p.meta, last, threads, p.stacks,
                complete=any(s["final"] for s in p.stats),
                modules=trace_meta.modules(p.meta, *p.stats),
                truncated=p.truncated,
                source=p.path,
                **losses,
            ))
            if p.ledger is None and not threads:  # killed before any counters: count the file
                images[-1]["written"] = len(events)
        entries.append(raw_ledger.merge_images(images))
        raw_ledger.warn(entries[-1])
    return Parts(segments, trace_meta.trace_meta(entries, origin), pids)


def _empty(p: RawProcess) -> bool:
    """A file of a process that traced nothing (a forked child that ran no OpenMP
    code, an image that exec'd before recording): no record, nothing lost."""
    return (len(p.records) == 0 and p.ledger is not None and not p.ledger.unaccounted
            and not any(c.buffered or c.dropped or c.nobuf for c in p.ledger.threads.values()))
