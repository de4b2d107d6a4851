"""Profile files (Profile.save, ompt-py run --profile): written and read back
whole, on every supported Python (make test-pythons: each installs another
pyarrow), as are the files of earlier ompt-py (histograms as fixed-size lists,
which pyarrow before 26 cannot read as they are); ompt_py.load tells them from
traces by their metadata; a damaged one is a TraceFileError that says what is
wrong.  Synthetic aggregates and the stored profiles, nothing built."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ompt_py
from ompt_py import _core, schema
from ompt_py.errors import TraceFileError
from ompt_py.io import profile
from ompt_py.records import EVENT_CODES, PROFILE_BUCKETS, PROFILE_ROW_DTYPE

DATA = __import__("pathlib").Path(__file__).parents[1] / "data"

pytestmark = pytest.mark.pythons


def _parts() -> profile.ProfileParts:
    rows = np.zeros(5, PROFILE_ROW_DTYPE)
    rows["table"] = [_core.PROFILE_CONSTRUCT, _core.PROFILE_CONSTRUCT, _core.PROFILE_REGION,
                     _core.PROFILE_LOCK, _core.PROFILE_TASK]
    rows["event"] = [EVENT_CODES["parallel_begin"], EVENT_CODES["work"], 0,
                     EVENT_CODES["mutex_acquire"], EVENT_CODES["task_create"]]
    rows["codeptr"] = [2**63 + 5, 0x401000, 2**63 + 5, 0x402000, 0x403000]
    rows["wait_id"][3] = 2**64 - 8  # an address above 2^53: kept exactly
    rows["thread"] = [0, 1, 1, 0, 1]
    rows["count"] = [3, 7, 3, 11, 13]
    rows["total"], rows["min"], rows["max"] = 1000, 10, 500
    rows["a"], rows["b"], rows["c"] = 12, 5, 1
    rows["hist"][:, 4] = 3
    parts = profile.tables(rows, 42, 1.0)
    meta = {"processes": [{"pid": 42, "source": "x.omptraw", "unmapped": 0, "exe": "/bin/x",
                           "argv": ["x"], "modules": [],
                           "slots": [{"slot": 0, "overflow": 0, "threads": [0, 1]}]}]}
    return profile.ProfileParts(**parts, meta=meta)


def _same(a: profile.ProfileParts, b: profile.ProfileParts) -> None:
    for name in schema.PROFILE_COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        assert list(x.columns) == list(y.columns), name
        for c in x.columns:
            if c == "hist":
                assert all((p == q).all() for p, q in zip(x[c], y[c])), name
            else:
                assert x[c].tolist() == y[c].tolist(), (name, c)
                assert x[c].dtype == y[c].dtype or not len(x), (name, c)
    assert a.meta == b.meta


def test_a_profile_file_reads_back_as_written(tmp_path):
    parts = _parts()
    path = tmp_path / "prof.parquet"
    ompt_py.Profile(parts).save(path)
    loaded = ompt_py.load(path)
    assert isinstance(loaded, ompt_py.Profile)
    _same(parts, loaded.parts)
    assert loaded.parts.locks["wait_id"].tolist() == [2**64 - 8]
    # For other readers: one table at a time, by the table column.
    locks = pq.read_table(path, filters=[("table", "=", "locks")])
    assert locks.num_rows == 1


def test_new_files_hold_no_fixed_size_list(tmp_path):
    # What pyarrow before 26 reads (apache/arrow#35692): a fixed-size list column
    # with nulls (the hist of the regions_threads rows) it cannot.
    ompt_py.Profile(_parts()).save(tmp_path / "p.parquet")
    types = pq.read_schema(tmp_path / "p.parquet").types
    assert pa.list_(pa.int64()) in types
    assert not [t for t in types if pa.types.is_fixed_size_list(t)]


def _as_before(src, dst, **options):
    """The profile file ``src`` as ompt-py wrote it before: its histograms a
    fixed-size list column, null in the rows of the tables without one
    (``options``: pq.write_table's).  Made as that writer made it, one table after
    the other and the missing columns null, which pyarrow before 26 can write."""
    table = pq.read_table(src)
    pieces = []
    for name, own in schema.PROFILE_COLUMNS.items():
        rows = table.filter(pc.equal(table.column("table"), name))
        hist = rows.column_names.index("hist")
        pieces.append(rows.set_column(hist, "hist", rows.column(hist).cast(
            pa.list_(pa.int64(), PROFILE_BUCKETS))) if "hist" in own else rows.remove_column(hist))
    pq.write_table(pa.concat_tables(pieces, promote_options="default"), dst, **options)


def test_a_file_of_fixed_size_histograms_reads_back(tmp_path):
    parts = _parts()
    ompt_py.Profile(parts).save(tmp_path / "new.parquet")
    _as_before(tmp_path / "new.parquet", tmp_path / "old.parquet")
    hist = pq.read_table(tmp_path / "new.parquet").column("hist")
    assert hist.null_count  # the regions_threads rows: what pyarrow before 26 fails on
    assert pa.types.is_fixed_size_list(pq.read_schema(tmp_path / "old.parquet").field("hist").type)
    _same(parts, ompt_py.load(tmp_path / "old.parquet").parts)


def test_another_writer_s_fixed_size_histograms_without_nulls_read_back(tmp_path):
    # A Parquet list of another shape (element named item): read as it is, which
    # every pyarrow can where no histogram is null (no regions_threads rows).
    full = _parts()
    parts = profile.ProfileParts(**{name: getattr(full, name) for name in schema.PROFILE_COLUMNS
                                    if name != "regions_threads"},
                                 regions_threads=full.regions_threads.iloc[:0], meta=full.meta)
    ompt_py.Profile(parts).save(tmp_path / "new.parquet")
    _as_before(tmp_path / "new.parquet", tmp_path / "item.parquet",
               use_compliant_nested_type=False)
    leaves = pq.ParquetFile(tmp_path / "item.parquet").schema
    assert "hist.list.item" in [leaves.column(i).path for i in range(len(leaves))]
    _same(parts, ompt_py.load(tmp_path / "item.parquet").parts)


@pytest.mark.parametrize("name", ["profile-mixed", "profile-cxx", "profile-known-tasks"])
def test_the_stored_profiles_load(name):
    hist = pq.read_schema(DATA / f"{name}.parquet").field("hist").type
    assert pa.types.is_fixed_size_list(hist), (
        f"{name} was remade: the stored profiles are of the form users have, written "
        "before the histograms were lists of variable size (tests/data/README.md)")
    parts = ompt_py.load(DATA / f"{name}.parquet").parts
    assert len(parts.constructs) and len(parts.regions_threads) and len(parts.tasks)
    for table, count in (("constructs", "count"), ("locks", "acquisitions"), ("tasks", "ran")):
        frame = getattr(parts, table)
        assert all(len(h) == PROFILE_BUCKETS for h in frame["hist"]), table
        # every duration the tool measured is in one bucket of its histogram
        assert [int(h.sum()) for h in frame["hist"]] == frame[count].tolist(), table


def test_an_empty_profile_reads_back(tmp_path):
    parts = profile.ProfileParts(**profile.tables(np.zeros(0, PROFILE_ROW_DTYPE), 1, 1.0),
                                 meta={"processes": []})
    ompt_py.Profile(parts).save(tmp_path / "p.parquet")
    _same(parts, ompt_py.load(tmp_path / "p.parquet").parts)


def test_a_trace_still_loads_as_a_trace():
    assert isinstance(ompt_py.load(DATA / "known-lock.parquet"), ompt_py.Trace)


def _rewrite(src, dst, meta=None, drop=None):
    table = pq.read_table(src)
    old = json.loads(table.schema.metadata[b"ompt_py"])
    if drop:
        table = table.drop_columns([drop])
    new = old if meta is None else meta(old)
    pq.write_table(table.replace_schema_metadata({b"ompt_py": json.dumps(new).encode()}), dst)


@pytest.mark.parametrize(("change", "drop", "message"), [
    (lambda m: {**m, "profile": 99}, None, "profile format 99"),
    (lambda m: {**m, "processes": "x"}, None, "metadata is corrupt"),
    (None, "wait_id", "lacks the column wait_id"),
    (None, "table", "lacks the column table"),
])
def test_a_damaged_profile_file_says_what_is_wrong(tmp_path, change, drop, message):
    good = tmp_path / "good.parquet"
    ompt_py.Profile(_parts()).save(good)
    bad = tmp_path / "bad.parquet"
    _rewrite(good, bad, change, drop)
    with pytest.raises(TraceFileError, match=message):
        ompt_py.Profile.from_parquet(bad)


def test_a_column_of_another_type_or_with_nulls_is_refused(tmp_path):
    good = tmp_path / "good.parquet"
    ompt_py.Profile(_parts()).save(good)
    table = pq.read_table(good)
    i = table.column_names.index("count")
    nulls = table.set_column(i, "count", pa.array([None] * table.num_rows, pa.int64()))
    pq.write_table(nulls, tmp_path / "nulls.parquet")
    with pytest.raises(TraceFileError, match="null count"):
        ompt_py.Profile.from_parquet(tmp_path / "nulls.parquet")
    text = table.set_column(i, "count", pa.array(["x"] * table.num_rows))
    pq.write_table(text, tmp_path / "text.parquet")
    with pytest.raises(TraceFileError, match="column count"):
        ompt_py.Profile.from_parquet(tmp_path / "text.parquet")


def test_a_histogram_of_another_size_is_refused(tmp_path):
    good = tmp_path / "good.parquet"
    ompt_py.Profile(_parts()).save(good)
    table = pq.read_table(good)
    short = pc.list_slice(table.column("hist"), 0, 32)
    pq.write_table(table.set_column(table.column_names.index("hist"), "hist", short),
                   tmp_path / "short.parquet")
    with pytest.raises(TraceFileError, match="histograms of \\[32\\] counts, not 64"):
        ompt_py.Profile.from_parquet(tmp_path / "short.parquet")
    holes = pc.if_else(pc.equal(table.column("table"), "constructs"),
                       pa.scalar([None] * PROFILE_BUCKETS, pa.list_(pa.int64())),
                       table.column("hist"))
    pq.write_table(table.set_column(table.column_names.index("hist"), "hist", holes),
                   tmp_path / "holes.parquet")
    with pytest.raises(TraceFileError, match="histograms with null counts"):
        ompt_py.Profile.from_parquet(tmp_path / "holes.parquet")


def test_a_file_that_is_not_parquet_is_a_trace_file_error(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(TraceFileError):
        ompt_py.load(path)
    with pytest.raises(TraceFileError, match="cannot be read as a Parquet file"):
        ompt_py.Profile.from_parquet(path)


def test_a_trace_is_not_read_as_a_profile():
    with pytest.raises(TraceFileError, match="not an ompt-py profile"):
        ompt_py.Profile.from_parquet(DATA / "known-lock.parquet")


def test_the_tables_have_the_schemas_columns():
    parts = _parts()
    for name, own in schema.PROFILE_COLUMNS.items():
        assert list(getattr(parts, name).columns) == [*schema.PROFILE_KEYS, *own]
    assert isinstance(parts.constructs, pd.DataFrame)
