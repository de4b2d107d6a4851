"""Synthetic in-place raw files (csrc/tool/omptpy_file.h: REGION blocks, the
ledger's WINDOWS block and ``in_place`` flag), made without the C tool from the
stored raw-ledger.omptraw (two threads, a ledger): its records laid out in
leased chunks of several threads interleaved (``in_place``), or the same
chunks as RECORDS blocks (``as_records``), to compare.  Its chunks are of
CHUNK_RECORDS records (the file's META and ledger say so), so that a file is
a few KiB.  Shared by tests/io's in-place tests and the mutation test."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import numpy as np
from conftest import stored_path

from ompt_py import _core
from ompt_py.io import ledger
from ompt_py.io.rawfile import REGION_PREFIX
from ompt_py.records import RAW_DTYPE

HEADER = struct.Struct("<IIQ")
PAGE = 4096
CHUNK_RECORDS = 16
SOURCE = "raw-ledger.omptraw"


@dataclass
class Source:
    """A stored raw file taken apart: its META document, the payload of its
    ledger's PROCESS block, its records (in file order) and its STATS blocks."""

    meta: dict
    process: bytes
    records: np.ndarray
    stats: list[bytes]


def source() -> Source:
    data = stored_path(SOURCE).read_bytes()
    meta, process, records, stats, off = None, None, [], [], 0
    while off < len(data):
        _, kind, length = HEADER.unpack_from(data, off)
        payload = data[off + HEADER.size: off + HEADER.size + length]
        if kind == _core.BLOCK_META:
            meta = json.loads(payload)
        elif kind == _core.BLOCK_LEDGER and ledger.PREFIX.unpack_from(payload)[0] == \
                _core.LEDGER_PROCESS:
            process = payload
        elif kind == _core.BLOCK_RECORDS:
            records.append(np.frombuffer(payload, RAW_DTYPE))
        elif kind == _core.BLOCK_STATS:
            stats.append(data[off: off + HEADER.size + length])
        off += HEADER.size + length
    return Source(meta, process, np.concatenate(records), stats)


def lease(records: np.ndarray, per_chunk: int) -> list[np.ndarray]:
    """The records of each thread in chunks of ``per_chunk`` (the last one less),
    in lease order: one chunk of each thread in turn, as threads writing at once
    lease them."""
    own = [[records[records["thread"] == t][i:i + per_chunk]
            for i in range(0, int((records["thread"] == t).sum()), per_chunk)]
           for t in np.unique(records["thread"])]
    return [chunk for turn in range(max(map(len, own))) for chunks in own
            for chunk in chunks[turn:turn + 1]]


def block(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(_core.FILE_MAGIC, kind, len(payload)) + payload


def _up(n: int) -> int:
    return -(-n // PAGE) * PAGE


def region(chunks: list[np.ndarray], spare: int = 2) -> bytes:
    """A REGION block whose first chunks hold ``chunks`` (each leased to the thread
    of its records) and ``spare`` more never leased."""
    nchunks = len(chunks) + spare
    desc_offset, data_offset = PAGE, PAGE + _up(nchunks * _core.LEDGER_DESC_SIZE)
    payload = bytearray(data_offset + nchunks * CHUNK_RECORDS * RAW_DTYPE.itemsize)
    REGION_PREFIX.pack_into(payload, 0, 1, CHUNK_RECORDS, nchunks, _core.LEDGER_DESC_SIZE,
                            desc_offset, data_offset)
    for i, chunk in enumerate(chunks):
        at = desc_offset + i * _core.LEDGER_DESC_SIZE
        struct.pack_into("<I", payload, at, len(chunk))
        struct.pack_into("<I", payload, at + _core.DESC_THREAD_OFFSET, int(chunk["thread"][0]) + 1)
        start = data_offset + i * CHUNK_RECORDS * RAW_DTYPE.itemsize
        payload[start:start + chunk.nbytes] = chunk.tobytes()
    return block(_core.BLOCK_REGION, bytes(payload))


def ledger_block(kind: int, data: bytes) -> bytes:
    """A LEDGER block of ``kind`` holding ``data`` from a page on, as the tool lays it out."""
    payload = bytearray(PAGE) + data
    ledger.PREFIX.pack_into(payload, 0, kind, PAGE, len(data), 0)
    return block(_core.BLOCK_LEDGER, bytes(payload))


def windows(spans: list[tuple[int, int]], cap: int = 8, count: int | None = None) -> bytes:
    """A WINDOWS ledger block of the windows ``spans`` ([from, until) ticks), in a
    table of ``cap`` (``count``: what its head says is used)."""
    table = np.zeros((cap, 2), "<u8")
    if spans:
        table[:len(spans)] = spans
    head = ledger.WINDOWS_HEAD.pack(len(spans) if count is None else count, cap)
    return ledger_block(_core.LEDGER_WINDOWS, head + table.tobytes())


def _process(src: Source, in_place: bool) -> bytes:
    """The ledger's PROCESS block of ``src``, its chunk size CHUNK_RECORDS; in place:
    its head's in_place set and its threads' buffering counts cleared (the tool
    keeps none)."""
    payload = bytearray(src.process)
    _, at, _, _ = ledger.PREFIX.unpack_from(payload)
    head = np.frombuffer(payload, ledger.HEAD, 1, at)
    head["chunk_records"] = CHUNK_RECORDS
    head["in_place"] = int(in_place)
    if in_place:
        threads = np.frombuffer(payload, ledger.THREAD, int(head["thread_cap"][0]),
                                at + ledger.HEAD.itemsize)
        threads["handed"], threads["cur"] = 0, _core.LEDGER_NONE
    return block(_core.BLOCK_LEDGER, bytes(payload))


def _meta(src: Source) -> bytes:
    return block(_core.BLOCK_META, json.dumps({**src.meta, "chunk_records": CHUNK_RECORDS})
                 .encode())


def in_place(src: Source, chunks: list[np.ndarray],
             spans: list[tuple[int, int]] | None = None, spare: int = 2) -> bytes:
    """An in-place raw file of ``src``'s process: META, the ledger (with a WINDOWS
    block of ``spans`` unless None), a REGION block of ``chunks`` and the STATS blocks."""
    return b"".join([_meta(src), _process(src, True),
                     *([] if spans is None else [windows(spans)]),
                     region(chunks, spare), *src.stats])


def as_records(src: Source, chunks: list[np.ndarray]) -> bytes:
    """The raw file the copying file sink writes of the same chunks: a RECORDS block
    each, in the same order, and the ledger as the source's."""
    return b"".join([_meta(src), _process(src, False),
                     *(block(_core.BLOCK_RECORDS, c.tobytes()) for c in chunks), *src.stats])


def sample() -> bytes:
    """An in-place raw file of the source: two threads' chunks interleaved in a REGION
    block, and windows that leave some of their records out (the mutation test's
    and the fuzzer's seed)."""
    src = source()
    times = np.unique(src.records["time"]).tolist()
    return in_place(src, lease(src.records, 5), [(times[3], times[20]), (times[30], 2**64 - 1)])


def blocks(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, type, length) of each block of a raw file."""
    out, off = [], 0
    while off < len(data):
        _, kind, length = HEADER.unpack_from(data, off)
        out.append((off, kind, length))
        off += HEADER.size + length
    return out
