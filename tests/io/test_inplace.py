"""In-place raw files (REGION blocks: threads' chunks leased in the file, the
ledger's WINDOWS block), made by tests/inplace_raw.py: read as the RECORDS
blocks of the same records are, threads' chunks interleaved; records outside
the sink's windows left out and counted nowhere as lost; corrupt prefixes,
descriptors, windows and files cut short said and never a crash; the streamed
merge writes what loading and saving writes."""

from __future__ import annotations

import json
import re
import struct
import warnings

import inplace_raw as ip
import numpy as np
import pyarrow.parquet as pq
import pytest

import ompt_py
from ompt_py import _core
from ompt_py.io import ledger, parquet, rawfile

OPEN = 2**64 - 1


@pytest.fixture(scope="module")
def src() -> ip.Source:
    return ip.source()


@pytest.fixture(scope="module")
def chunks(src) -> list[np.ndarray]:
    return ip.lease(src.records, 5)


def write(tmp_path, data: bytes, name: str = "ompt-22406-0.omptraw"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def quiet_load(path) -> ompt_py.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ompt_py.TraceWarning)
        return ompt_py.load(path)


def partial_load(path, match: str) -> ompt_py.Trace:
    """The trace of ``path``, whose loading warns (TraceWarning) as ``match`` says."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ompt_py.TraceWarning)
        t = ompt_py.load(path)
    assert any(re.search(match, str(w.message)) for w in caught), [str(w.message) for w in caught]
    return t


def without_sources(meta: dict) -> str:
    procs = [{k: v for k, v in p.items() if k != "source"} for p in meta["processes"]]
    return json.dumps({**meta, "processes": procs}, sort_keys=True)


def test_interleaved_chunks_load_as_records_blocks_do(src, chunks, tmp_path):
    raw = write(tmp_path, ip.in_place(src, chunks))
    copied = write(tmp_path, ip.as_records(src, chunks), "ompt-1-0.omptraw")
    scanned = rawfile.scan(str(raw))
    threads = [int(c["thread"][0]) for c in chunks]
    assert len(set(threads[:2])) == 2 and len(scanned.counts) == len(chunks)  # interleaved
    assert list(scanned.counts) == [len(c) for c in chunks] and not scanned.skipped
    a, b = quiet_load(raw), quiet_load(copied)
    assert len(a) == len(src.records) == 48
    assert np.array_equal(a.events, b.events) and np.array_equal(a.pids, b.pids)
    assert without_sources(a.meta) == without_sources(b.meta)
    assert a.lost == 0 and [t["written"] for t in a.meta["processes"][0]["threads"]] == [28, 20]
    assert a.to_pandas().equals(b.to_pandas())
    for thread in (0, 1):  # each thread's records in its time order, as read
        assert (np.diff(a.events["time_ns"][a.events["thread"] == thread]) >= 0).all()


def expected_kept(records: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """Which records lie in one of the windows, one by one."""
    return np.array([any(f <= t < u for f, u in spans) for t in records["time"].tolist()])


def spans_of(records: np.ndarray) -> list[tuple[int, int]]:
    """Windows over parts of the records' times, out of order and overlapping, one
    still open."""
    t = np.unique(records["time"]).tolist()
    return [(t[30], OPEN), (t[5], t[10]), (t[8], t[15]), (t[20], t[20])]


def test_records_outside_the_windows_are_discarded_not_lost(src, chunks, tmp_path):
    spans = spans_of(src.records)
    raw = write(tmp_path, ip.in_place(src, chunks, spans))
    copied = write(tmp_path, ip.as_records(src, chunks), "ompt-1-0.omptraw")
    order = np.concatenate(chunks)
    keep = expected_kept(order, spans)
    assert 10 < keep.sum() < len(order) - 10
    t = quiet_load(raw)
    whole = quiet_load(copied)
    assert np.array_equal(t.events, whole.events[keep])
    assert t.lost == 0 and not t.meta["processes"][0]["lost_reasons"]
    rows = t.meta["processes"][0]["threads"]
    assert [r["written"] for r in rows] == [int((order["thread"][keep] == i).sum()) for i in (0, 1)]
    assert [r["lost"] for r in rows] == [0, 0]
    proc = rawfile.scan(str(raw))
    for _ in proc.records(7):
        pass
    assert proc.discarded == {i: int((order["thread"][~keep] == i).sum()) for i in (0, 1)}
    assert sum(proc.kept.values()) == keep.sum()


def test_no_window_keeps_nothing_and_no_windows_block_keeps_everything(src, chunks, tmp_path):
    assert len(quiet_load(write(tmp_path, ip.in_place(src, chunks, [])))) == 0
    assert len(quiet_load(write(tmp_path, ip.in_place(src, chunks, None)))) == len(src.records)


def region_at(data: bytes) -> int:
    """The payload offset of a file's REGION block."""
    return next(off for off, kind, _ in ip.blocks(data) if kind == _core.BLOCK_REGION) + 16


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


@pytest.mark.parametrize("n, thread", [(ip.CHUNK_RECORDS + 1, None), (2**32 - 1, None),
                                       (3, 0)])
def test_corrupt_descriptor_leaves_its_chunk_out(src, chunks, tmp_path, n, thread):
    data = ip.in_place(src, chunks)
    desc = region_at(data) + ip.PAGE + 2 * _core.LEDGER_DESC_SIZE  # the third chunk's
    data = patched(data, desc, "<I", n)
    if thread is not None:
        data = patched(data, desc + _core.DESC_THREAD_OFFSET, "<I", thread)
    t = partial_load(write(tmp_path, data), "chunk descriptors are corrupt")
    assert len(t) == len(src.records) - len(chunks[2])
    assert t.meta["skipped"] and t.lost == 0


#: Fields of the REGION prefix (byte offset, format) and bad values for them.
PREFIX_DAMAGE = [(0, "<I", 2), (4, "<I", ip.CHUNK_RECORDS * 2), (4, "<I", 0), (8, "<I", 2**32 - 1),
                 (12, "<I", 32), (16, "<Q", 0), (16, "<Q", 2**63), (24, "<Q", 64),
                 (24, "<Q", 2**64 - 1)]


@pytest.mark.parametrize("at, fmt, value", PREFIX_DAMAGE)
def test_bad_prefix_leaves_the_block_out(src, chunks, tmp_path, at, fmt, value):
    data = patched(ip.in_place(src, chunks), region_at(ip.in_place(src, chunks)) + at, fmt,
                   value)
    t = partial_load(write(tmp_path, data), "its prefix is corrupt")
    assert len(t) == 0 and not t.meta["processes"][0]["truncated"]
    assert t.meta["processes"][0]["complete"]  # the blocks after it are read


def test_region_cut_short_keeps_what_is_inside(src, chunks, tmp_path):
    data = ip.in_place(src, chunks)
    body = region_at(data)
    data_offset = struct.unpack_from("<Q", data, body + 24)[0]
    chunk_bytes = ip.CHUNK_RECORDS * 64
    for cut, kept in [(body + 10, 0), (body + ip.PAGE + 100, 0),
                      (body + data_offset + 2 * chunk_bytes + 3 * 64 + 5,
                       len(chunks[0]) + len(chunks[1]) + 3)]:
        path = write(tmp_path, data[:cut])
        t = partial_load(path, "REGION block .* is cut short .*copied or truncated")
        proc = t.meta["processes"][0]
        assert len(t) == kept and proc["truncated"]
        if cut > body + ip.PAGE + len(chunks) * 64:  # every descriptor in the file
            assert proc["lost"] == len(src.records) - kept
            assert proc["lost_reasons"] == {ledger.CUT_REASON: len(src.records) - kept}


@pytest.mark.parametrize("count, cap", [(9, 8), (2**32 - 1, 8), (1, 2**32 - 1)])
def test_corrupt_windows_are_the_ledgers_corruption(src, chunks, tmp_path, count, cap):
    data = ip.in_place(src, chunks, spans_of(src.records))
    windows = next(off for off, kind, _ in ip.blocks(data)
                   if kind == _core.BLOCK_LEDGER and struct.unpack_from("<I", data, off + 16)[0]
                   == _core.LEDGER_WINDOWS) + 16 + ip.PAGE
    data = patched(patched(data, windows, "<I", count), windows + 4, "<I", cap)
    t = partial_load(write(tmp_path, data), "its ledger .*windows")
    assert len(t) == len(src.records)  # without the ledger, nothing is known to discard


def streamed(raw, out, rows: int) -> parquet.Converted:
    return parquet.convert(rawfile.scan_run([str(raw)], str(raw)), out, rows)


@pytest.mark.parametrize("spans", [None, "some"])
def test_streamed_merge_writes_what_load_and_save_write(src, chunks, tmp_path, spans):
    raw = write(tmp_path, ip.in_place(src, chunks, spans and spans_of(src.records)))
    t = quiet_load(raw)
    t.save(tmp_path / "saved.parquet")
    for rows in (1, 7, None):
        out = tmp_path / f"{rows}.parquet"
        with warnings.catch_warnings():
            warnings.simplefilter("error", ompt_py.TraceWarning)
            events, meta = (ompt_py.convert(raw, out, "64M") if rows is None
                            else streamed(raw, out, rows))
        assert events == len(t) and meta["written"] == t.meta["written"]
        assert pq.read_table(out).equals(pq.read_table(tmp_path / "saved.parquet"))
