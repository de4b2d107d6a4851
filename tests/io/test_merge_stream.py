"""The merge of raw files into Parquet, streamed (ompt_py.convert, ompt-py run):
what it writes is what loading the raw files and saving them writes, whatever
the chunks (a `more` record and its primary in two chunks included), with the
same partial loads and losses; and its memory stays within its bound for a
trace several times larger."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import clean_env, grown_raw_file, parallel_records, stored_path
from offload_records import OffloadRecords, program

import ompt_py
from ompt_py.io import parquet, rawfile
from ompt_py.records import EVENT_CODES, RAW_DTYPE

HEADER = struct.Struct("<IIQ")

SOURCES = ["offload.omptraw", "parallel-300.omptraw", "raw-ledger.omptraw", "format-v1/raw"]


def same(a: ompt_py.Trace, b: ompt_py.Trace) -> None:
    assert np.array_equal(a.events, b.events)
    assert np.array_equal(a.pids, b.pids)
    assert json.dumps(a.meta, sort_keys=True) == json.dumps(b.meta, sort_keys=True)


def streamed(raw, out, rows: int) -> parquet.Converted:
    """ompt_py.convert with chunks of ``rows`` (fewer than any bound gives)."""
    files = rawfile.list_dir(str(raw)) if raw.is_dir() else [str(raw)]
    return parquet.convert(rawfile.scan_run(files, str(raw)), out, rows)


@pytest.mark.parametrize("name", SOURCES)
@pytest.mark.parametrize("output", ["trace.parquet", "dataset"])
def test_streamed_equals_in_memory(name, output, tmp_path):
    raw = stored_path(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ompt_py.TraceWarning)
        whole = ompt_py.load(raw)
        whole.save(tmp_path / f"saved-{output}")
        saved = ompt_py.load(tmp_path / f"saved-{output}")
        for rows in (1, 7, None):
            out = tmp_path / f"{rows}-{output}"
            if rows is None:
                events, meta = ompt_py.convert(raw, out, "64M")
            else:
                events, meta = streamed(raw, out, rows)
            assert events == len(whole)
            assert meta["written"] == whole.meta["written"]
            same(saved, ompt_py.load(out))
    if output == "trace.parquet":  # the same columns, for other readers too
        assert pq.read_table(out).equals(pq.read_table(tmp_path / f"saved-{output}"))


def offload_raw_file(path) -> None:
    """A raw file of record version 6 (its META: the stored raw-ledger.omptraw's),
    holding offload_records.program's records, device records and clock pairs:
    data operations and device records each followed by its `more` record."""
    data = stored_path("raw-ledger.omptraw").read_bytes()
    magic, kind, length = HEADER.unpack_from(data)
    meta = json.loads(data[HEADER.size: HEADER.size + length])
    meta["record_version"] = 6
    b = OffloadRecords()
    program(b)
    for i in range(3):
        b.device(10_000 + i, 10, 1, 500 + 100 * i, 550 + 100 * i, host_op_id=i + 1)
        b.clock(20_000 + i * 1000, 20_010 + i * 1000, 1, 900 + 1000 * i)
    records = b.events().view(RAW_DTYPE).copy()
    records["time"] += meta["start_anchor"]["ticks"]
    clocks = records["event"] == EVENT_CODES["device_clock"]
    records["u64b"][clocks] += meta["start_anchor"]["ticks"]
    doc = json.dumps(meta).encode()
    path.write_bytes(HEADER.pack(magic, kind, len(doc)) + doc
                     + HEADER.pack(magic, 2, records.nbytes) + records.tobytes())


def test_more_records_across_chunks(tmp_path):
    """A `more` record and its primary in two chunks (every chunk one record):
    paired alike, and the device clocks fitted alike."""
    raw = tmp_path / "ompt-22406-0.omptraw"
    offload_raw_file(raw)
    streamed(raw, tmp_path / "t.parquet", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ompt_py.TraceWarning)
        a, b = ompt_py.load(raw), ompt_py.load(tmp_path / "t.parquet")
    same(a, b)
    assert (a.events["event"] == EVENT_CODES["more"]).sum() > 10
    assert len(a.data_ops()) == 5 and a.data_ops().equals(b.data_ops())
    assert len(a.device_ops()) == 3 and a.device_ops().equals(b.device_ops())
    assert a.meta["devices"] and a.meta["devices"] == b.meta["devices"]


def test_partial_loads_and_losses_as_load_says_them(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    data = stored_path("parallel-300.omptraw").read_bytes()
    (raw / "ompt-1-0.omptraw").write_bytes(data[: len(data) // 2 + 10])  # cut: records kept
    (raw / "ompt-2-0.omptraw").write_bytes(b"not a trace file at all" * 4)
    data = stored_path("raw-ledger.omptraw").read_bytes()  # cut: the ledger counts the rest
    (raw / "ompt-3-0.omptraw").write_bytes(data[: len(data) * 3 // 4])
    said = []
    for run in (lambda: ompt_py.load(raw), lambda: ompt_py.convert(raw, tmp_path / "t.parquet")):
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always", ompt_py.TraceWarning)
            run()
        said.append(sorted(str(w.message) for w in warned))
    assert said[0] == said[1] and len(said[0]) >= 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ompt_py.TraceWarning)
        t = ompt_py.load(tmp_path / "t.parquet")
        same(ompt_py.load(raw), t)
    assert t.meta["skipped"] and t.lost


@pytest.mark.parametrize("memory", ["1M", "63M", "lots", -5, True, "12Q"])
def test_bad_bound(memory, tmp_path):
    with pytest.raises(ompt_py.ConfigError, match="at least 64M"):
        ompt_py.convert(stored_path("parallel-300.omptraw"), tmp_path / "t.parquet", memory)
    assert not list(tmp_path.iterdir())


def test_bound_from_the_environment(monkeypatch):
    monkeypatch.setenv(parquet.MEMORY_VARIABLE, "2G")
    assert parquet.chunk_rows() == parquet.ROW_GROUP_ROWS
    monkeypatch.setenv(parquet.MEMORY_VARIABLE, "64MiB")
    assert parquet.chunk_rows() == ((64 << 20) - parquet.FIXED_BYTES
                                    - parquet.GROUP_BYTES) // parquet.ROW_BYTES
    monkeypatch.setenv(parquet.MEMORY_VARIABLE, "8M")
    with pytest.raises(ompt_py.ConfigError, match=parquet.MEMORY_VARIABLE):
        parquet.chunk_rows()


def test_the_bound_covers_the_row_groups_metadata():
    """Each chunk is a row group whose metadata stays until the file is closed:
    the chunks are sized so that both fit, and a bound too small for a trace is
    refused with the bound it needs."""
    def memory(rows: int, events: int) -> int:
        return (parquet.FIXED_BYTES + parquet.ROW_BYTES * rows
                + parquet.GROUP_BYTES * -(-events // rows))

    small, large = (parquet.chunk_rows("64M", events=n) for n in (10**6, 10**7))
    for rows, events in ((small, 10**6), (large, 10**7)):
        assert memory(rows, events) <= 64 << 20
    rows = parquet.chunk_rows("256M", events=5 * 10**8)
    assert rows > parquet.ROW_GROUP_ROWS // 2 and memory(rows, 5 * 10**8) <= 256 << 20
    with pytest.raises(ompt_py.ConfigError, match=r"at least \d+M") as refused:
        parquet.chunk_rows("100M", events=5 * 10**8)
    need = int(re.search(r"at least (\d+)M", str(refused.value))[1])
    assert 100 < need < 160
    assert memory(parquet.chunk_rows(f"{need}M", events=5 * 10**8), 5 * 10**8) <= need << 20


# In a fresh process: the libraries loaded first, then the conversion alone measured.
MEASURE = """
import json, sys
import numpy, pandas, pyarrow.parquet
import ompt_py

def memory():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {k: int(fields[k].split()[0]) << 10 for k in ("VmRSS", "VmHWM")}

before = memory()["VmRSS"]
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
events, meta = ompt_py.convert(sys.argv[1], sys.argv[2], sys.argv[3])
print(json.dumps({"events": events, "added": memory()["VmHWM"] - before}))
"""
BOUND = 64 << 20


def test_memory_stays_within_the_bound(tmp_path):
    """A raw trace 5 times the bound (320 MiB, 5.2 million records) converts with
    at most the bound added to the process at its peak (measured about 0.85 of it:
    the margin is the allocator's, not the machine's load), and gives what
    loading it whole gives."""
    raw = tmp_path / "raw"
    raw.mkdir()
    source = stored_path("parallel-300.omptraw")
    copies = 5 * BOUND // (parallel_records(300) * 64) + 1  # the stored file: `parallel 300`
    records = grown_raw_file(source, raw / "ompt-1-0.omptraw", copies)
    assert records * 64 > 5 * BOUND
    done = subprocess.run([sys.executable, "-c", MEASURE, str(raw), str(tmp_path / "t.parquet"),
                           str(BOUND)], env=clean_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["events"] == records
    assert got["added"] <= BOUND, f"{got['added'] / 2**20:.0f} MiB added, bound 64 MiB"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ompt_py.TraceWarning)
        whole = ompt_py.load(raw)
        assert len(whole) == records
        same(whole, ompt_py.load(tmp_path / "t.parquet"))
