"""Reading the files the tool writes with OMPTPY_OUTPUT (one per process).

A file is a sequence of blocks, each a 16-byte header (magic, type, length)
and its payload: META (JSON, first), RECORDS (64-byte records of one
thread, in order) and STATS (JSON counters with a clock anchor; the tool
writes one as it goes and a final one at exit).
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from dataclasses import dataclass, field

import numpy as np

from ._records import RAW_DTYPE, RECORD_SIZE
from .errors import TraceFileError

MAGIC = 0x5450504F
BLOCK_META, BLOCK_RECORDS, BLOCK_STATS = 1, 2, 3
HEADER = struct.Struct("<IIQ")
SUFFIX = ".omptraw"


@dataclass
class RawProcess:
    """What one file holds: its META, its records (raw ticks), its STATS blocks."""

    path: str
    meta: dict
    records: np.ndarray
    stats: list[dict] = field(default_factory=list)
    truncated: bool = False


def read(path: str) -> RawProcess:
    """Parse one .omptraw file; TraceFileError when it is not one or is corrupt.

    A file cut short in its last block (the process was killed while the tool
    wrote) keeps what is complete and is marked ``truncated`` with a warning.
    """
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise TraceFileError(f"cannot read trace file {path}: {e.strerror}") from e
    buf = memoryview(data)
    off, meta, stats, pieces, truncated = 0, None, [], [], False
    while off < len(buf):
        if len(buf) - off < HEADER.size:
            truncated = True
            break
        magic, kind, length = HEADER.unpack_from(buf, off)
        if magic != MAGIC:
            what = "is not an ompt-py trace file" if off == 0 else "is corrupt"
            raise TraceFileError(f"{path} {what} (bad block header at byte {off})")
        body = off + HEADER.size
        if kind not in (BLOCK_META, BLOCK_RECORDS, BLOCK_STATS):
            raise TraceFileError(f"{path} is corrupt (unknown block type {kind} at byte {off})")
        if body + length > len(buf):
            truncated = True
            if kind == BLOCK_RECORDS:  # keep the complete records of the last block
                whole = (len(buf) - body) // RECORD_SIZE * RECORD_SIZE
                pieces.append(data[body : body + whole])
            break
        if kind == BLOCK_RECORDS:
            if length % RECORD_SIZE:
                raise TraceFileError(
                    f"{path} is corrupt (records block of {length} bytes at byte {off})"
                )
            pieces.append(data[body : body + length])
        else:
            try:
                doc = json.loads(bytes(buf[body : body + length]))
            except ValueError as e:
                raise TraceFileError(f"{path} is corrupt (bad JSON at byte {body}: {e})") from e
            if kind == BLOCK_META:
                meta = doc
            else:
                stats.append(doc)
        off = body + length
    if meta is None:
        raise TraceFileError(f"{path} has no META block; it is not a complete ompt-py trace file")
    if meta.get("record_size") != RECORD_SIZE:
        raise TraceFileError(
            f"{path} was written with {meta.get('record_size')}-byte records; this ompt_py "
            f"reads {RECORD_SIZE}-byte records (format {meta.get('record_version')})"
        )
    raw = np.concatenate(pieces) if pieces else np.empty(0, np.uint8)
    if truncated:
        warnings.warn(
            f"{path} ends in the middle of a block (the process was killed while writing); "
            "the complete part is kept",
            stacklevel=2,
        )
    return RawProcess(path, meta, raw.view(RAW_DTYPE), stats, truncated)


def list_dir(directory: str) -> list[str]:
    """The trace files of a directory written with OMPTPY_OUTPUT, sorted."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX))
    except OSError as e:
        raise TraceFileError(f"cannot list {directory}: {e.strerror}") from e
    return [os.path.join(directory, n) for n in names]
