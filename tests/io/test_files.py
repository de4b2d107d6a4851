"""Reading trace files: raw per-process files (OMPTPY_OUTPUT) and Parquet,
whole, truncated, corrupt or missing: a stored raw file, cut and damaged."""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import parallel_records, stored_path

import ompt_py
from ompt_py import schema
from ompt_py.io import parquet
from ompt_py.records import EVENT_DTYPE

HEADER = struct.Struct("<IIQ")
MAGIC = 0x5450504F
META, RECORDS, STATS = 1, 2, 3
N_REGIONS = 300


def blocks(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, type, length) of each block of a raw file."""
    out, off = [], 0
    while off < len(data):
        magic, kind, length = HEADER.unpack_from(data, off)
        assert magic == MAGIC
        out.append((off, kind, length))
        off += HEADER.size + length
    assert off == len(data)
    return out


@pytest.fixture(scope="module")
def raw_file() -> bytes:
    """The bytes of one complete raw file: `parallel 300` under the tool, drained every
    millisecond (OMPTPY_DRAIN_MS=1) so that the records come in more than one block
    (stored: tests/data/parallel-300.omptraw)."""
    return stored_path("parallel-300.omptraw").read_bytes()


@pytest.fixture
def write(tmp_path):
    def write(data: bytes, name: str = "ompt-1234-0.omptraw"):
        d = tmp_path / "raw"
        d.mkdir(exist_ok=True)
        p = d / name
        p.write_bytes(data)
        return p

    return write


def records_of(data: bytes) -> np.ndarray:
    """Every record of a raw file, in file order (raw bytes, 64 each)."""
    parts = [data[o + 16: o + 16 + n] for o, k, n in blocks(data) if k == RECORDS]
    return np.frombuffer(b"".join(parts), dtype=np.uint8).reshape(-1, 64)


def event_bytes(t) -> np.ndarray:
    """The records of a loaded trace without the time field (converted on load)."""
    return t.events.view(np.uint8).reshape(-1, 64)[:, 8:]


def test_complete_raw_file(raw_file, write):
    bl = blocks(raw_file)
    assert bl[0][1] == META
    assert sum(1 for b in bl if b[1] == RECORDS) >= 2
    assert bl[-1][1] == STATS
    p = write(raw_file)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = ompt_py.load(p)  # a single .omptraw file
        u = ompt_py.load(p.parent)  # its directory
    assert len(t.events) == parallel_records(N_REGIONS) == len(u.events)
    (proc,) = t.meta["processes"]
    assert proc["complete"] is True and proc["truncated"] is False
    assert np.array_equal(event_bytes(t), records_of(raw_file)[:, 8:])


@pytest.mark.parametrize("where", ["records", "header", "stats"])
def test_truncated_raw_file_keeps_complete_part(raw_file, write, where):
    bl = blocks(raw_file)
    recs = [b for b in bl if b[1] == RECORDS]
    all_records = records_of(raw_file)
    if where == "records":
        # cut in the middle of a record of the second records block
        off, _, length = recs[1]
        cut = off + 16 + (length // 64 // 2) * 64 + 30
        keep = recs[0][2] // 64 + (length // 64 // 2)
    elif where == "header":
        # cut 10 bytes into the header of the second records block
        cut = recs[1][0] + 10
        keep = recs[0][2] // 64
    else:
        # cut inside the last (stats) block: every record is there
        off, _, length = bl[-1]
        cut = off + 16 + length // 2
        keep = len(all_records)
    p = write(raw_file[:cut])
    with pytest.warns(UserWarning, match="complete part"):
        t = ompt_py.load(p)
    assert len(t.events) == keep
    assert np.array_equal(event_bytes(t), all_records[:keep, 8:])
    (proc,) = t.meta["processes"]
    assert proc["truncated"] is True
    if where != "stats":
        assert proc["complete"] is False


def test_raw_file_without_stats_counts_records(raw_file, write):
    bl = blocks(raw_file)
    first_stats = next(b for b in bl if b[1] == STATS)
    t = ompt_py.load(write(raw_file[: first_stats[0]]))  # ends exactly before a block
    (proc,) = t.meta["processes"]
    assert proc["complete"] is False
    assert proc["written"] == len(t.events) > 0


def _patched(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new):]


@pytest.mark.parametrize("damage", ["first_magic", "meta_json", "meta_key", "empty",
                                    "record_size", "record_version"])
def test_corrupt_raw_file(raw_file, write, damage):
    """Damage that leaves no META to trust: TraceFileError naming the file."""
    bl = blocks(raw_file)
    meta = json.loads(raw_file[16: 16 + bl[0][2]])
    if damage == "first_magic":
        data = _patched(raw_file, 0, b"XXXX")
    elif damage == "meta_json":
        data = _patched(raw_file, 16, b"{{{{")
    elif damage == "empty":
        data = b""
    else:
        if damage == "meta_key":
            del meta["start_anchor"]
        else:
            # a version after ours
            meta[damage] = 72 if damage == "record_size" else schema.RECORD_VERSIONS[-1] + 1
        body = json.dumps(meta).encode()
        data = HEADER.pack(MAGIC, META, len(body)) + body + raw_file[16 + bl[0][2]:]
    p = write(data)
    with pytest.raises(ompt_py.TraceFileError) as e:
        ompt_py.load(p)
    assert str(p) in str(e.value)
    if damage == "meta_key":
        assert "start_anchor is missing" in str(e.value)
    with pytest.raises(ompt_py.TraceFileError):
        ompt_py.load(p.parent)


@pytest.mark.parametrize("damage", ["later_magic", "block_type", "records_length",
                                    "stats_json", "stats_key", "huge_length"])
def test_damaged_raw_file_keeps_the_good_part(raw_file, write, damage):
    """Damage after the META block: what can be read is kept, what cannot is said in a
    TraceWarning and in meta["skipped"]."""
    bl = blocks(raw_file)
    recs = [b for b in bl if b[1] == RECORDS]
    stats = next(b for b in bl if b[1] == STATS)
    kept = recs[:1]  # the records blocks kept
    if damage == "later_magic":
        data, reason = _patched(raw_file, recs[1][0], b"XXXX"), "header"
    elif damage == "block_type":
        data, reason = _patched(raw_file, recs[1][0] + 4, struct.pack("<I", 99)), "unknown type"
        kept = [b for b in recs if b != recs[1]]
    elif damage == "records_length":  # not whole records: the headers after it are lost
        data = _patched(raw_file, recs[1][0] + 8, struct.pack("<Q", 100))
        reason = "header"
    elif damage == "huge_length":  # beyond the file: taken as a cut, nothing allocated for it
        data = _patched(raw_file, stats[0] + 8, struct.pack("<Q", 2**63))
        reason, kept = "cut short", [b for b in recs if b[0] < stats[0]]
    else:
        doc = json.loads(raw_file[stats[0] + 16: stats[0] + 16 + stats[2]])
        payload = b"{{" if damage == "stats_json" else json.dumps({**doc, "threads": 3}).encode()
        data = (raw_file[:stats[0]] + HEADER.pack(MAGIC, STATS, len(payload)) + payload
                + raw_file[stats[0] + 16 + stats[2]:])
        reason, kept = "STATS block", recs
    p = write(data)
    with pytest.warns(ompt_py.TraceWarning, match=reason):
        t = ompt_py.load(p)
    expected = np.frombuffer(b"".join(raw_file[o + 16: o + 16 + n] for o, _, n in kept),
                             np.uint8).reshape(-1, 64)
    assert np.array_equal(event_bytes(t), expected[:, 8:])
    (skipped,) = t.meta["skipped"]
    assert skipped["source"] == str(p) and reason in skipped["reason"]
    t.to_pandas()
    t.summary()


def test_good_and_corrupt_file_in_one_directory(raw_file, write):
    """One good file and one that is empty (the disk filled up before its process
    wrote a block) or junk: the good one, with a warning naming the other."""
    good = write(raw_file, "ompt-1-0.omptraw")
    for content, name in ((b"", "ompt-2-0.omptraw"), (b"junk" * 10, "ompt-3-0.omptraw")):
        bad = write(content, name)
        with pytest.warns(ompt_py.TraceWarning, match=str(bad)):
            t = ompt_py.load(good.parent)
        assert len(t) == parallel_records(N_REGIONS)
        assert [s["source"] for s in t.meta["skipped"]] == [str(bad)]
        bad.unlink()
    assert ompt_py.load(good.parent).meta["skipped"] == []


def test_only_corrupt_files_in_a_directory(write):
    p = write(b"", "ompt-2-0.omptraw")
    write(b"junk" * 10, "ompt-3-0.omptraw")
    with pytest.raises(ompt_py.TraceFileError, match="no readable trace file") as e:
        ompt_py.load(p.parent)
    assert "ompt-2-0.omptraw has no META block" in str(e.value)


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket"])
def test_parts_that_are_not_regular_files_are_never_opened(raw_file, write, kind):
    """A FIFO (a plain open would block), a directory or a socket named like a part."""
    good = write(raw_file, "ompt-1-0.omptraw")
    d = good.parent
    odd = [d / "ompt-2-0.omptraw", d / "x.parquet", d / "pid=3" / "part-0.parquet"]
    odd[2].parent.mkdir()
    for p in odd:
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "directory":
            p.mkdir()
        else:
            import socket

            with socket.socket(socket.AF_UNIX) as s:
                cwd = os.getcwd()
                os.chdir(p.parent)
                try:
                    s.bind(p.name)
                finally:
                    os.chdir(cwd)
    with pytest.warns(ompt_py.TraceWarning, match="not a trace file"):
        t = ompt_py.load(d)
    assert len(t) == parallel_records(N_REGIONS)
    assert sorted(s["source"] for s in t.meta["skipped"]) == sorted(map(str, odd))
    if kind != "directory":
        with pytest.raises(ompt_py.TraceFileError, match="not a trace file"):
            ompt_py.load(odd[0])
        with pytest.raises(ompt_py.TraceFileError, match="not a trace file"):
            ompt_py.load(odd[1])


# ---- Parquet --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parquet_file(raw_file, tmp_path_factory) -> bytes:
    d = tmp_path_factory.mktemp("pq")
    (d / "ompt-7-0.omptraw").write_bytes(raw_file)
    t = ompt_py.load(d)
    t.save(d / "t.parquet")
    return (d / "t.parquet").read_bytes()


@pytest.mark.pythons
def test_parquet_round_trip_of_raw(parquet_file, raw_file, tmp_path):
    p = tmp_path / "t.parquet"
    p.write_bytes(parquet_file)
    t = ompt_py.load(p)
    assert len(t.events) == parallel_records(N_REGIONS)
    assert np.array_equal(event_bytes(t), records_of(raw_file)[:, 8:])
    assert t.meta["processes"][0]["complete"] is True


@pytest.mark.parametrize("processes", ["interleaved", "one then the other", "one"])
def test_parquet_of_several_row_groups_and_batches(tmp_path, processes):
    """The reader decodes a row group parquet.FILL_ROWS rows at a time: a file whose
    row groups hold several batches and a partial one reads into its rows, in
    order (each told apart by its time), each row's process with it (the rows of
    one process: its pid once; a second process from the second row group on:
    the first's rows keep theirs); a null value in the last batch is refused as one
    in the first is."""
    table = pq.read_table(stored_path("export-mixed.parquet"))
    rows, group_rows = 2 * parquet.FILL_ROWS + 1001, parquet.FILL_ROWS + 7
    tiled = pa.concat_tables([table] * -(-rows // len(table))).slice(0, rows)
    tiled = tiled.set_column(tiled.column_names.index("time_ns"), "time_ns",
                             pa.array(np.arange(rows, dtype=np.int64)))
    first, second = np.unique(tiled.column("pid").to_numpy())
    if processes != "interleaved":
        later = np.arange(rows) >= (group_rows if processes != "one" else rows)
        tiled = tiled.set_column(tiled.column_names.index("pid"), "pid",
                                 pa.array(np.where(later, second, first).astype(np.int32)))
    path = tmp_path / "t.parquet"
    pq.write_table(tiled, path, row_group_size=group_rows)
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    t = ompt_py.load(path)
    for name in EVENT_DTYPE.names:
        assert np.array_equal(t.events[name], tiled.column(name).to_numpy()), name
    assert t.single_pid == (first if processes == "one" else None)
    assert np.array_equal(t.pids, tiled.column("pid").to_numpy())
    i = tiled.column_names.index("thread")
    last_null = pa.array(tiled.column(i).to_numpy(), mask=np.arange(rows) == rows - 1)
    pq.write_table(tiled.set_column(i, "thread", last_null), path, row_group_size=group_rows)
    with pytest.raises(ompt_py.TraceFileError, match="its column thread has null values"):
        ompt_py.load(path)


def test_parquet_refused_early_stops_its_decoding(tmp_path):
    """A row refused in the first batch, with many decoded ahead of it on their own
    thread: the error is raised and that thread is gone (no batch left waiting)."""
    table = pq.read_table(stored_path("export-mixed.parquet"))
    rows = (parquet.BATCHES_AHEAD + 4) * parquet.FILL_ROWS
    tiled = pa.concat_tables([table] * -(-rows // len(table))).slice(0, rows)
    i = tiled.column_names.index("thread")
    tiled = tiled.set_column(i, "thread", pa.array(tiled.column(i).to_numpy(),
                                                   mask=np.arange(rows) == 5))
    path = tmp_path / "t.parquet"
    pq.write_table(tiled, path, row_group_size=rows)
    with pytest.raises(ompt_py.TraceFileError, match="its column thread has null values"):
        ompt_py.load(path)
    assert not [t for t in threading.enumerate() if t.name == "ompt-py: Parquet decoding"]


@pytest.mark.parametrize("damage", ["truncated", "half", "footer", "garbage", "empty"])
def test_bad_parquet(parquet_file, tmp_path, damage):
    data = {
        "truncated": parquet_file[:-100],
        "half": parquet_file[: len(parquet_file) // 2],
        "footer": parquet_file[:-8] + b"\xff\xff\xff\x7fPAR1",
        "garbage": b"this is not a parquet file\n" * 10,
        "empty": b"",
    }[damage]
    p = tmp_path / "bad.parquet"
    p.write_bytes(data)
    with pytest.raises(ompt_py.TraceFileError) as e:
        ompt_py.load(p)
    assert str(p) in str(e.value)


def test_parquet_that_is_not_a_trace(tmp_path):
    p = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3]}), p)
    with pytest.raises(ompt_py.TraceFileError, match="not an ompt-py trace"):
        ompt_py.load(p)


def test_parquet_with_missing_columns(parquet_file, tmp_path):
    src = tmp_path / "t.parquet"
    src.write_bytes(parquet_file)
    table = pq.read_table(src)
    p = tmp_path / "fewer.parquet"
    pq.write_table(table.drop(["codeptr"]), p)
    with pytest.raises(ompt_py.TraceFileError, match="codeptr"):
        ompt_py.load(p)


# ---- missing ---------------------------------------------------------------------------------


def test_nonexistent_path(tmp_path):
    for p in (tmp_path / "nope.parquet", tmp_path / "nope", tmp_path / "nope.omptraw"):
        with pytest.raises(ompt_py.TraceFileError, match="does not exist"):
            ompt_py.load(p)


def test_directory_without_trace_files(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises(ompt_py.TraceFileError):
        ompt_py.load(d)
    (d / "notes.txt").write_text("not a trace")
    (d / "ompt-1-0.omptraw.tmp").write_bytes(b"")
    with pytest.raises(ompt_py.TraceFileError):
        ompt_py.load(d)


def test_unreadable_file(raw_file, write):
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    p = write(raw_file)
    p.chmod(0)
    try:
        with pytest.raises(ompt_py.TraceFileError):
            ompt_py.load(p)
    finally:
        p.chmod(0o644)


def test_directory_of_two_runs(raw_file, tmp_path):
    """Two files of one pid that no exec links (here: copies of one file) are two
    processes that cannot be told apart: an error naming both, not a merge."""
    d = tmp_path / "two"
    d.mkdir()
    for name in ("ompt-100-0.omptraw", "ompt-200-0.omptraw"):
        (d / name).write_bytes(raw_file)
    with pytest.raises(ompt_py.TraceFileError) as e:
        ompt_py.load(d)
    assert "ompt-100-0.omptraw" in str(e.value) and "ompt-200-0.omptraw" in str(e.value)
    assert "one by one" in str(e.value)
    assert len(ompt_py.load(d / "ompt-100-0.omptraw").events) == parallel_records(N_REGIONS)
    shutil.rmtree(d)
