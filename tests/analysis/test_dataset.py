"""A job's dataset analysed partition by partition (ompt_py.open_dataset,
analysis/dataset.py), in this process and on a local Dask cluster.

Spec (docs/dataset.md): open_dataset reads the partitions' footers only; each
partition's Trace is what ``ompt_py.load`` of the directory holds of that process
(on the same time axis); the merged answers equal load's (every exact figure
equal; p50/p95 and the medians of tasks and creation gaps estimated, within
their log2 bucket: at most a factor of 2 off); on Dask the answers are those of
this process, and a dataset of 64 ranks larger than the workers' memory limit
is summarised without a worker dying; parts missing or cut short and a second
job's parts are said and the rest analysed, as ``load`` says them.

The datasets are made at test time from generated records
(tests/synthetic_dataset.py: the stored known-tasks and contended traces,
repeated, per rank).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import DASK_MEMORY_LIMIT as LIMIT
from synthetic_dataset import FIRST_PID, rank_trace, write_dataset

import ompt_py
from ompt_py.analysis import metrics
from ompt_py.errors import ConfigError, TraceWarning
from ompt_py.records import EVENT_DTYPE
from ompt_py.units import TEXT

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("dask.distributed")

RANKS = 6
EXACT = ["count", "total_ns", "mean_ns", "max_ns"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A dataset of 6 ranks small enough to load whole, and the whole trace."""
    path = tmp_path_factory.mktemp("small") / "run1"
    write_dataset(path, RANKS, 1200)
    return path, ompt_py.load(path)


def _same_rows(a: pd.DataFrame, b: pd.DataFrame, keys: list[str]) -> None:
    """a and b hold the same rows (whatever their order; a missing name None or NaN)."""
    def plain(f: pd.DataFrame) -> pd.DataFrame:
        f = f.astype({c: object for c in f.columns if isinstance(f[c].dtype, pd.CategoricalDtype)
                      or f[c].dtype == object})
        f = f.assign(**{c: f[c].where(f[c].notna(), None) for c in f.columns
                        if f[c].dtype == object})
        return f.sort_values(keys).reset_index(drop=True)
    a, b = plain(a), plain(b)
    pd.testing.assert_frame_equal(a, b[a.columns], check_dtype=False, check_categorical=False)


def _lower_rank(values: pd.Series, q: float) -> float:
    """The duration of rank floor(q (n - 1)): the lower of the two pandas
    interpolates between, whose log2 bucket holds the estimate (profile.quantile)."""
    v = np.sort(values.dropna().to_numpy(np.float64))
    return float(v[int(np.floor(q * (len(v) - 1)))])


def _within_bucket(estimate: float, exact: float) -> None:
    """The estimate is in the log2 bucket of the exact value: at most 2x off it."""
    assert exact / 2 <= estimate <= exact * 2, (estimate, exact)


def test_open_reads_the_partitions_metadata(small):
    path, t = small
    d = ompt_py.open_dataset(path)
    assert len(d) == RANKS and d.partition_ranks == list(range(RANKS))
    assert d.pids == [FIRST_PID + r for r in range(RANKS)]
    assert sum(p.rows for p in d.partitions) == len(t)
    assert d.origin == t.meta["origin_mono_ns"]
    assert [p["pid"] for p in d.meta["processes"]] == d.pids
    assert [p.process for p in d.partitions] == t.meta["processes"]
    assert all(p.clock is None for p in d.partitions)  # no clock fit: one machine's clock
    assert "6 partitions" in repr(d)


def test_a_partition_is_what_load_holds_of_its_process(small):
    path, t = small
    d = ompt_py.open_dataset(path)
    part = d.trace(rank=3)
    mine = t.events[t.pids == FIRST_PID + 3]
    assert len(part) == len(mine)
    assert (np.sort(part.events["time_ns"]) == np.sort(mine["time_ns"])).all()
    assert part.meta["origin_mono_ns"] == t.meta["origin_mono_ns"]
    with pytest.raises(KeyError, match="no partition of rank 99"):
        d.trace(rank=99)


def test_constructs_merged_equal_loads(small):
    path, t = small
    d = ompt_py.open_dataset(path)
    merged, whole = d.constructs(), t.constructs()
    keys = ["construct", "kind"]
    _same_rows(merged.drop(columns=["p50_ns", "p95_ns"]), whole.drop(columns=["p50_ns",
                                                                             "p95_ns"]), keys)
    instances = metrics.construct_instances(t)
    for row in merged.itertuples():
        mine = instances.loc[(instances["construct"] == row.construct)
                             & (instances["kind"] == row.kind), "duration_ns"]
        _within_bucket(row.p50_ns, _lower_rank(mine, 0.5))
        _within_bucket(row.p95_ns, _lower_rank(mine, 0.95))
    _same_rows(d.constructs(by="source"), t.constructs(by="source"),
               ["construct", "kind", "pid", "location"])


def test_per_process_tables_merged_equal_loads(small):
    path, t = small
    d = ompt_py.open_dataset(path)
    _same_rows(d.imbalance(), t.imbalance(by="source"), ["pid", "location"])
    _same_rows(d.imbalance(by="region"), t.imbalance(by="region"), ["pid", "parallel_id"])
    _same_rows(d.lock_contention(), t.lock_contention(), ["pid", "kind", "wait_id"])


def test_merged_text_columns_are_the_trace_s(small):
    """The merged tables' text columns are of units.TEXT, as the whole trace's, and
    hold its texts (NaN where it has none)."""
    path, t = small
    d = ompt_py.open_dataset(path)
    merged, whole = d.summary(), t.summary()
    for mine, theirs, keys in (
            (d.imbalance(), t.imbalance(by="source"), ["pid", "location"]),
            (d.imbalance(by="region"), t.imbalance(by="region"), ["pid", "parallel_id"]),
            (d.lock_contention(), t.lock_contention(), ["pid", "kind", "wait_id"]),
            (d.constructs(by="source"), t.constructs(by="source"),
             ["construct", "kind", "pid", "location"]),
            (merged.regions, whole.regions, ["location"]),
            (merged.locks, whole.locks, ["kind", "location", "acquisitions"])):
        text = [c for c in theirs.columns if theirs[c].dtype == TEXT]
        assert text and all(mine[c].dtype == TEXT for c in text), (text, mine.dtypes)
        pd.testing.assert_frame_equal(_text_rows(mine, keys, text), _text_rows(theirs, keys, text))


def _text_rows(frame: pd.DataFrame, keys: list[str], text: list[str]) -> pd.DataFrame:
    """The ``text`` columns of ``frame``, its rows in the order of ``keys`` (as text:
    a categorical and a text column sort alike)."""
    return frame.sort_values(keys, key=lambda column: column.astype(str), kind="stable",
                             ignore_index=True)[text]


def test_task_histogram_merged_equals_loads(small):
    path, t = small
    merged = ompt_py.open_dataset(path).task_granularity()
    whole = t.task_granularity()
    pd.testing.assert_frame_equal(merged, whole, check_dtype=False)
    for key in ("tasks", "ran", "outside_bins"):
        assert merged.attrs[key] == whole.attrs[key]
    _within_bucket(merged.attrs["median_busy_ns"],
                   _lower_rank(metrics.task_runs(t)["busy_ns"], 0.5))
    _within_bucket(merged.attrs["create_ns"],
                   _lower_rank(metrics._creation_gaps(t)["gap_ns"], 0.5))


def _check_summary(merged, whole) -> None:
    assert merged.overview == whole.overview
    keys = ["construct", "kind"]
    _same_rows(merged.constructs[[*keys, *EXACT]], whole.constructs[[*keys, *EXACT]], keys)
    _same_rows(merged.sources, whole.sources, ["construct", "kind", "location", "count"])
    _same_rows(merged.threads, whole.threads, ["pid", "thread"])
    pd.testing.assert_frame_equal(merged.regions, whole.regions, check_dtype=False)
    pd.testing.assert_frame_equal(merged.locks, whole.locks, check_dtype=False)
    pd.testing.assert_frame_equal(merged.tasks, whole.tasks, check_dtype=False)
    assert merged.tasks.attrs["tasks"] == whole.tasks.attrs["tasks"]
    assert set(merged.advice["rule"]) == set(whole.advice["rule"])
    assert merged.python is None and whole.python is None


def test_summary_merged_equals_loads(small):
    path, t = small
    _check_summary(ompt_py.open_dataset(path).summary(), t.summary())


def test_on_dask_the_answers_are_this_process_s(small, dask_client):
    path, t = small
    d = ompt_py.open_dataset(path)
    on_dask = d.summary(client=dask_client)
    _check_summary(on_dask, t.summary())
    pd.testing.assert_frame_equal(on_dask.constructs, d.summary().constructs)
    pd.testing.assert_frame_equal(d.lock_contention(client=dask_client), d.lock_contention())
    pids = d.map(lambda trace: int(trace.pids[0]), client=dask_client)
    assert pids == d.pids


def test_map_refuses_what_is_not_a_client(small):
    d = ompt_py.open_dataset(small[0])
    with pytest.raises(TypeError, match=r"dask\.distributed\.Client"):
        d.map(len, client="tcp://scheduler:8786")


def test_without_dask_the_message_says_what_to_install(small, monkeypatch):
    d = ompt_py.open_dataset(small[0])
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(ConfigError, match=r"pip install 'ompt-py\[dask\]'"):
        d.map(len, client=object())


def _rss_peak() -> int:
    """The worker's peak resident size (VmHWM: its own, where getrusage's ru_maxrss
    starts from what the process that started it had reached)."""
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmHWM"].split()[0]) << 10


def _rss() -> int:
    import psutil  # dask.distributed's

    return psutil.Process().memory_info().rss


@pytest.mark.slow
def test_64_ranks_larger_than_a_worker_s_memory_are_summarised(tmp_path, dask_client):
    """The dataset's events alone (64 bytes each, as a Trace holds them) need more
    than the room the workers' limit leaves beyond their own memory, which holds
    two partitions."""
    write_dataset(tmp_path / "big", 64, 70_000)
    d = ompt_py.open_dataset(tmp_path / "big")
    sizes = [p.rows * EVENT_DTYPE.itemsize for p in d.partitions]
    dask_client.run(lambda: __import__("ompt_py.analysis.dataset"))
    own = max(dask_client.run(_rss).values())
    assert 2 * max(sizes) < LIMIT - own < sum(sizes)
    workers = set(dask_client.scheduler_info()["workers"])
    s = d.summary(client=dask_client)
    assert set(dask_client.scheduler_info()["workers"]) == workers  # none died and came back
    assert max(dask_client.run(_rss_peak).values()) < LIMIT
    assert s.overview["events"] == sum(p.rows for p in d.partitions)
    assert s.overview["processes"] == 64


# ---- bad input -------------------------------------------------------------------------------


def test_a_missing_rank_is_said_and_the_others_analysed(tmp_path):
    write_dataset(tmp_path, 4, 300, leave_out=(2,))
    with pytest.warns(TraceWarning, match="ranks 2 of the job's 4 have no part here"):
        d = ompt_py.open_dataset(tmp_path)
    assert d.partition_ranks == [0, 1, 3]
    assert d.summary().overview["processes"] == 3


def test_a_truncated_part_is_said_and_the_others_analysed(tmp_path):
    files = write_dataset(tmp_path, 4, 300)
    data = files[1].read_bytes()
    files[1].write_bytes(data[: len(data) // 2])  # a rank killed while writing
    with pytest.warns(TraceWarning) as said:
        d = ompt_py.open_dataset(tmp_path)
    text = " ".join(str(w.message) for w in said)
    assert str(files[1]) in text and "ranks 1 of the job's 4 have no part here" in text
    assert d.partition_ranks == [0, 2, 3]
    assert d.meta["skipped"][0]["source"] == str(files[1])
    assert d.summary().overview["events"] == sum(p.rows for p in d.partitions)


def test_a_part_damaged_after_its_footer_is_left_out_when_mapped(tmp_path):
    files = write_dataset(tmp_path, 3, 300)
    d = ompt_py.open_dataset(tmp_path)
    files[2].write_bytes(b"PAR1 not any more")
    with pytest.warns(TraceWarning, match="left out, the rest is loaded"):
        pids = d.map(lambda trace: int(trace.pids[0]))
    assert pids == [FIRST_PID, FIRST_PID + 1] and d.partition_ranks == [0, 1]
    assert d.meta["skipped"][-1]["source"] == str(files[2])


def test_a_second_job_s_parts_are_left_out(tmp_path):
    write_dataset(tmp_path, 4, 300, job="A")
    rank_trace(0, 2, 300, job="B", pid=9000).save(tmp_path)
    with pytest.warns(TraceWarning, match="processes 9000 belong to MPI job B, the other 4 to "
                      "job A"):
        d = ompt_py.open_dataset(tmp_path)
    assert d.pids == [FIRST_PID + r for r in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        whole = ompt_py.load(tmp_path)
    assert d.summary().overview == whole.summary().overview


def test_a_directory_without_partitions_is_refused(tmp_path):
    with pytest.raises(ompt_py.TraceFileError, match="holds no readable partition"):
        ompt_py.open_dataset(tmp_path)
    with pytest.raises(ompt_py.TraceFileError, match="is not a directory"):
        ompt_py.open_dataset(tmp_path / "x.parquet")


def test_duckdb_reads_the_same_files_as_one_table(small):
    duckdb = pytest.importorskip("duckdb")
    d = ompt_py.open_dataset(small[0])
    rows = duckdb.sql(f"""
        SELECT rank, count(*) AS events
        FROM read_parquet('{small[0]}/*/*.parquet', hive_partitioning = true)
        GROUP BY rank ORDER BY rank""").fetchall()
    assert rows == [(p.rank, p.rows) for p in d.partitions]


# The hand-made job's hosts have no clock fits (said on loading).
@pytest.mark.filterwarnings("ignore:the processes ran on several machines")
def test_a_job_s_ranks_and_late_rank_merged_equal_loads(tmp_path):
    """A hand-made job (tests/mpi_records.py: rank 2 late at four of six barriers)
    saved as a dataset: its ranks' table, its phases and the summary's Ranks
    section and late-rank advice, merged from the partitions, are the whole
    trace's."""
    from mpi_records import RANKS, barriers, job

    arrive = [[100_000_000 * k + 10 * r + (50_000_000 if k % 3 != 1 and r == 2 else 0)
               for r in range(RANKS)] for k in range(6)]
    job(barriers(arrive)).save(tmp_path / "run1")
    t = ompt_py.load(tmp_path / "run1")
    d = ompt_py.open_dataset(tmp_path / "run1")
    pd.testing.assert_frame_equal(d.ranks(), t.ranks())
    for by in ("phase", "rank", "arrival"):
        pd.testing.assert_frame_equal(d.rank_imbalance(by), t.rank_imbalance(by))
    merged, whole = d.summary(), t.summary()
    assert merged.ranks["late"].tolist() == [0, 0, 4, 2]
    pd.testing.assert_frame_equal(merged.ranks, whole.ranks)
    pd.testing.assert_frame_equal(merged.phases, whole.phases)
    assert merged.phases.attrs["phases"] == whole.phases.attrs["phases"] == 6
    assert "late rank" in set(merged.advice["rule"])
    assert "Ranks (late" in merged.document(100).text()
