"""Traces of several processes read back: one trace with every process (a ``pid``
column), a ``rank`` column, times on one axis; Parquet datasets partitioned by
process; directories of several saved traces.

Spec (README, "Exports" and "Several processes"): ``ompt_py.load`` of such a run
or directory gives one trace with every process (a ``pid`` column), a ``rank``
column when a process had OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or
SLURM_PROCID (the first of them that is a number), and times on one axis: the
CLOCK_MONOTONIC anchors of each process, origin at the earliest start.
``save(DIR)`` writes DIR/pid=N/part-0.parquet, which DuckDB and pyarrow read
as one table; ``load(DIR)`` reads it back.

Stored (tests/data): ranks/, the dataset ``ompt-py run -o DIR`` wrote for a shell
running `parallel N` 7 times (conftest.RANKS); saved/a.parquet and b.parquet,
two ``ompt-py run`` of `parallel 2` and then `parallel 3` (PMI_RANK=1).  The runs
themselves: tests/live/test_multiprocess.py.
"""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest
from conftest import RANKS, by_regions, parallel_records, stored_path

import ompt_py


@pytest.fixture(scope="module")
def dataset():
    """``ompt-py run -o DIR`` over a shell that runs `parallel` 7 times in a row."""
    return stored_path("ranks")


def test_run_of_several_processes_is_one_trace(dataset):
    t = ompt_py.load(dataset)
    which = by_regions(t)
    assert sorted(which) == [n for _, n, _ in RANKS]
    df = t.to_pandas()
    assert list(df.columns[:3]) == ["time_ns", "pid", "rank"]
    assert df["rank"].dtype == "Int32"
    for _, n, rank in RANKS:
        mine = df[df["pid"] == which[n]]
        assert len(mine) == parallel_records(n)
        expected = [pd.NA] if rank is None else [rank]
        assert mine["rank"].unique().tolist() == expected
        proc = next(p for p in t.meta["processes"] if p["pid"] == which[n])
        assert proc["rank"] == rank and proc["complete"] is True


def test_clocks_are_aligned(dataset):
    """The shell runs the programs one after another: on the common time axis each
    process's events all come after the previous one's."""
    t = ompt_py.load(dataset)
    which = by_regions(t)
    spans = [(t.events["time_ns"][t.pids == which[n]].min(),
              t.events["time_ns"][t.pids == which[n]].max()) for _, n, _ in RANKS]
    assert spans[0][0] >= 0
    assert spans[0][0] < 5e9  # origin: the first process's start
    for (_, end), (begin, _) in zip(spans, spans[1:]):
        assert end < begin


def test_dataset_layout_and_queries(dataset):
    import duckdb

    t = ompt_py.load(dataset)
    pids = sorted(p["pid"] for p in t.meta["processes"])
    assert sorted(p.name for p in dataset.iterdir()) == sorted(f"pid={p}" for p in pids)
    for pid in pids:
        assert [f.name for f in (dataset / f"pid={pid}").iterdir()] == ["part-0.parquet"]
    df = t.to_pandas()
    expected = df.groupby(["pid", "event"], observed=True).size()
    got = duckdb.sql(
        f"SELECT pid, event_name AS event, count(*) AS n FROM "
        f"read_parquet('{dataset}/*/*.parquet', hive_partitioning = true) GROUP BY ALL"
    ).df().set_index(["pid", "event"])["n"]
    assert got.sort_index().to_dict() == expected.sort_index().to_dict()
    ranks = duckdb.sql(f"SELECT DISTINCT pid, rank FROM read_parquet('{dataset}/*/*.parquet', "
                       "hive_partitioning = true)").fetchall()
    which = by_regions(t)
    assert sorted(ranks, key=str) == sorted(((which[n], r) for _, n, r in RANKS), key=str)
    table = ds.dataset(dataset, partitioning="hive").to_table()
    assert table.num_rows == len(t)
    assert sorted(np.unique(table.column("pid").to_numpy()).tolist()) == pids


@pytest.mark.pythons
def test_dataset_round_trip(dataset, tmp_path):
    t = ompt_py.load(dataset)
    single = tmp_path / "one.parquet"
    t.save(single)
    again = ompt_py.load(single)
    t.save(tmp_path / "copy")
    copy = ompt_py.load(tmp_path / "copy")
    for u in (again, copy):
        assert u.meta["processes"] == t.meta["processes"]
        order_t = np.lexsort((t.events["time_ns"], t.pids))
        order_u = np.lexsort((u.events["time_ns"], u.pids))
        assert np.array_equal(u.events[order_u], t.events[order_t])
        assert np.array_equal(u.pids[order_u], t.pids[order_t])
    assert copy.to_pandas()["rank"].equals(t.to_pandas()["rank"])


def test_directory_of_saved_traces(tmp_path):
    d = tmp_path / "saved"
    shutil.copytree(stored_path("saved"), d)  # a.parquet: parallel 2; b.parquet: parallel 3
    a, b = ompt_py.load(d / "a.parquet"), ompt_py.load(d / "b.parquet")
    t = ompt_py.load(d)
    which = by_regions(t)
    assert sorted(which) == [2, 3]
    assert t.written == a.written + b.written == len(t)
    first, second = (t.events["time_ns"][t.pids == which[n]] for n in (2, 3))
    assert first.min() >= 0 and first.max() < second.min()  # b ran after a
    # b's times moved by the difference of the two origins, nothing else
    shift = b.meta["origin_mono_ns"] - a.meta["origin_mono_ns"]
    assert np.array_equal(np.sort(second), np.sort(b.events["time_ns"]) + shift)
    ranks = t.to_pandas().groupby("pid")["rank"].agg(lambda r: r.dropna().unique().tolist())
    assert ranks.to_dict() == {which[2]: [], which[3]: [1]}
    shutil.copy(d / "a.parquet", d / "a-again.parquet")
    with pytest.raises(ompt_py.TraceFileError, match="is in both"):
        ompt_py.load(d)
