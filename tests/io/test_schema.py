"""The written schema of the trace files (ompt_py/schema.py): what the writers
write fits it, what the readers refuse is named (file, block or key, what to do),
and a dataset loads every partition it can read."""

from __future__ import annotations

import json
import shutil
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import stored_path

import ompt_py
from ompt_py import _core, schema
from ompt_py.io import rawfile


def test_every_block_type_of_the_tool_is_in_the_schema():
    assert {k: b.name for k, b in schema.BLOCKS.items()} == {
        _core.BLOCK_META: "META", _core.BLOCK_RECORDS: "RECORDS", _core.BLOCK_STATS: "STATS",
        _core.BLOCK_STACKS: "STACKS", _core.BLOCK_LEDGER: "LEDGER",
        _core.BLOCK_PROFILE: "PROFILE", _core.BLOCK_REGION: "REGION"}
    assert schema.HEADER.size == _core.BLOCK_HEADER_SIZE
    assert ompt_py.records.RECORD_VERSION in schema.RECORD_VERSIONS


@pytest.mark.parametrize("name", ["format-v1/raw", "parallel-300.omptraw"])
def test_the_tools_documents_fit_the_schema(name):
    path = stored_path(name)
    for p in sorted(path.glob("*.omptraw")) if path.is_dir() else [path]:
        raw = rawfile.scan(str(p))
        assert not raw.skipped
        assert schema.problem(raw.meta, schema.META_DOC) is None
        assert raw.stats and all(schema.problem(d, schema.STATS_DOC) is None for d in raw.stats)


@pytest.mark.parametrize("name", ["format-v1/raw", "format-v1/trace.parquet", "ranks",
                                  "pystacks-inprocess", "report-incomplete", "inprocess-empty"])
def test_the_trace_metadata_fits_the_schema(name, tmp_path):
    """Made from raw files, recorded in process, or saved: what Trace.save writes
    is what the Parquet reader accepts."""
    t = ompt_py.load(stored_path(name))
    assert schema.problem(t.meta, schema.TRACE_META) is None
    assert t.meta["skipped"] == []
    t.save(tmp_path / "t.parquet")
    written = pq.read_schema(tmp_path / "t.parquet")
    for column, dtype in schema.PARQUET_COLUMNS.items():
        assert written.field(column).type == pa.from_numpy_dtype(dtype)
    assert schema.problem(json.loads(written.metadata[b"ompt_py"]), schema.TRACE_META) is None


def test_the_validator_names_the_key():
    meta = json.loads(pq.read_schema(stored_path("format-v1/trace.parquet")).metadata[b"ompt_py"])
    meta["processes"][1]["threads"][0]["written"] = "12"
    assert schema.problem(meta, schema.TRACE_META, "meta") == (
        "meta.processes[1].threads[0].written is a string, not an integer")
    meta["processes"][1]["threads"][0]["written"] = -1
    assert "outside [0, " in schema.problem(meta, schema.TRACE_META)
    del meta["processes"][0]["modules"][0]["start"]
    assert schema.problem(meta, schema.TRACE_META) == (
        "the document.processes[0].modules[0].start is missing")
    assert schema.problem(True, schema.Int()) == "the document is a boolean, not an integer"
    assert schema.problem(float("nan"), schema.Num()) is not None
    assert schema.problem("a\0b", schema.Str()) is not None
    assert schema.problem([0, 3, 7, 4, 9, [1, 2]], schema.PythonStack()) is None
    assert schema.problem([0, 3, 7, 4], schema.PythonStack()) is not None
    assert schema.problem([0, 3, 7.5], schema.PythonStack()) is not None
    assert schema.parse(b"\xff", schema.Int())[1].startswith("not JSON (UnicodeDecodeError")
    assert schema.parse(b"[" * 100_000, schema.Int())[1].startswith("not JSON")


def _with_meta(tmp_path, change) -> str:
    src = stored_path("format-v1/trace.parquet")
    table = pq.read_table(src)
    meta = json.loads(table.schema.metadata[b"ompt_py"])
    change(meta)
    path = tmp_path / "t.parquet"
    pq.write_table(table.replace_schema_metadata({b"ompt_py": json.dumps(meta).encode()}), path)
    return path


@pytest.mark.parametrize("change, named", [
    (lambda m: m["processes"][0].pop("config"), "meta.processes[0].config is missing"),
    (lambda m: m["processes"][0].update(rank=2**40), "meta.processes[0].rank is 1099511627776"),
    (lambda m: m["processes"][1]["runtimes"][0].update(version=None), "runtimes[0].version"),
    (lambda m: m.update(format=2), "has trace format 2; this ompt_py reads format 1"),
    (lambda m: m["processes"].append(m["processes"][0]), "a process twice"),
])
def test_corrupt_parquet_metadata_is_named(tmp_path, change, named):
    path = _with_meta(tmp_path, change)
    with pytest.raises(ompt_py.TraceFileError) as e:
        ompt_py.load(path)
    assert str(path) in str(e.value) and named in str(e.value)


@pytest.mark.parametrize("values, named", [
    (pa.array([[1]] * 80), "its column thread is of type list<"),
    (pa.array(["1"] * 80), "its column thread is of type string"),
    (pa.array([2**40] * 80, pa.int64()), "its column thread has values that are not uint32"),
    (pa.array([None] + [1] * 79, pa.uint32()), "its column thread has null values"),
])
def test_parquet_columns_of_another_type(tmp_path, values, named):
    table = pq.read_table(stored_path("format-v1/trace.parquet"))
    i = table.column_names.index("thread")
    path = tmp_path / "t.parquet"
    pq.write_table(table.set_column(i, "thread", values), path)
    with pytest.raises(ompt_py.TraceFileError) as e:
        ompt_py.load(path)
    assert str(path) in str(e.value) and named in str(e.value)


def test_parquet_integer_columns_of_a_wider_type_are_read(tmp_path):
    table = pq.read_table(stored_path("format-v1/trace.parquet"))
    i = table.column_names.index("thread")
    path = tmp_path / "t.parquet"
    pq.write_table(table.set_column(i, "thread", table.column("thread").cast(pa.int64())), path)
    assert ompt_py.load(path).events["thread"].tolist() == ompt_py.load(
        stored_path("format-v1/trace.parquet")).events["thread"].tolist()


def test_a_dataset_loads_every_readable_partition(tmp_path):
    d = tmp_path / "ranks"
    shutil.copytree(stored_path("ranks"), d)
    whole = ompt_py.load(d)
    first, second, *_ = sorted(d.glob("pid=*/part-0.parquet"))
    first.write_bytes(first.read_bytes()[:1000])
    second.write_bytes(b"")
    with pytest.warns(ompt_py.TraceWarning) as caught:
        t = ompt_py.load(d)
    assert {str(first), str(second)} <= {str(w.message).split(" ")[0] for w in caught}
    assert sorted(s["source"] for s in t.meta["skipped"]) == [str(first), str(second)]
    assert len(t.meta["processes"]) == len(whole.meta["processes"]) - 2
    t.summary()
    for p in d.glob("pid=*/part-0.parquet"):
        p.write_bytes(b"junk")
    with pytest.raises(ompt_py.TraceFileError, match="holds no readable trace"):
        ompt_py.load(d)


def test_skipped_parts_are_kept_by_save(tmp_path):
    """A trace loaded in part says so after Trace.save and load, one file or a dataset."""
    d = tmp_path / "raw"
    shutil.copytree(stored_path("format-v1/raw"), d)
    (d / "ompt-1-0.omptraw").write_bytes(b"")
    with pytest.warns(ompt_py.TraceWarning):
        t = ompt_py.load(d)
    for name in ("t.parquet", "dataset"):
        t.save(tmp_path / name)
        again = ompt_py.load(tmp_path / name)
        assert again.meta["skipped"] == t.meta["skipped"] == [
            {"source": str(d / "ompt-1-0.omptraw"), "reason": again.meta["skipped"][0]["reason"]}]


def test_a_raw_file_of_another_record_size_names_what_to_do(tmp_path):
    data = stored_path("parallel-300.omptraw").read_bytes()
    _, _, length = struct.unpack_from("<IIQ", data)
    meta = json.loads(data[16:16 + length])
    meta["record_version"] = 9
    body = json.dumps(meta).encode()
    path = tmp_path / "ompt-1-0.omptraw"
    path.write_bytes(struct.pack("<IIQ", schema.MAGIC, _core.BLOCK_META, len(body)) + body
                     + data[16 + length:])
    newest = schema.RECORD_VERSIONS[-1]
    with pytest.raises(ompt_py.TraceFileError, match=f"versions 1 to {newest}: read it with the "
                                                     "ompt-py that wrote it"):
        ompt_py.load(path)
