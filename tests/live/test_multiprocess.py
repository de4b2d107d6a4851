"""Traces of several processes: ``ompt-py run`` over commands that start several
processes (a shell running programs one after another, a Python program using
multiprocessing with the fork, spawn and forkserver start methods), Parquet
datasets partitioned by process, and directories of several saved traces.

Spec (README, "Export and several processes"): ``ompt_py.load`` of such a run
or directory gives one trace with every process (a ``pid`` column), a ``rank``
column when a process had OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or
SLURM_PROCID (the first of them that is a number), and times on one axis: the
CLOCK_MONOTONIC anchors of each process, origin at the earliest start.
``save(DIR)`` writes DIR/pid=N/part-0.parquet, which DuckDB and pyarrow read
as one table; ``load(DIR)`` reads it back.  multiprocessing workers are traced
whole although they end with os._exit (fork) or are terminated by
``Pool.__exit__`` (SIGTERM).
"""

from __future__ import annotations

import json
import shutil
import textwrap

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest
from conftest import cli, n_of, no_traceback, ok, parallel_records

import ompt_py

pytestmark = pytest.mark.needs_clang

RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
NO_RANK = {v: "" for v in RANK_VARIABLES}

# `parallel N` runs N regions; each process is told apart by its N.
RANKS = [  # (variables, N, expected rank)
    ("OMPI_COMM_WORLD_RANK=0", 1, 0),
    ("PMI_RANK=1", 2, 1),
    ("PMIX_RANK=2", 3, 2),
    ("SLURM_PROCID=3", 4, 3),
    ("", 5, None),
    ("SLURM_PROCID=x", 6, None),  # not a number: no rank
    ("OMPI_COMM_WORLD_RANK=4 SLURM_PROCID=9", 7, 4),  # Open MPI's first
]


@pytest.fixture(scope="module")
def dataset(programs, tmp_path_factory):
    """``ompt-py run -o DIR`` over a shell that runs `parallel` 7 times in a row."""
    out = tmp_path_factory.mktemp("run") / "trace"
    script = "; ".join(f"{env} {programs.parallel} {n}" for env, n, _ in RANKS)
    ok(cli("run", "-o", out, "--", "bash", "-c", script, env=NO_RANK))
    return out


def by_regions(trace):
    """{number of parallel regions: pid}: which process is which."""
    return {n_of(trace.events[trace.pids == p["pid"]], "parallel_begin"): p["pid"]
            for p in trace.meta["processes"]}


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


def test_run_into_a_directory_that_is_not_empty(dataset, programs):
    r = cli("run", "-o", dataset, "--", programs.parallel, "1")
    assert r.returncode != 0
    no_traceback(r)
    assert str(dataset) in r.stderr and "empty" in r.stderr


def test_directory_of_saved_traces(programs, tmp_path):
    d = tmp_path / "saved"
    d.mkdir()
    ok(cli("run", "-o", d / "a.parquet", "--", programs.parallel, "2", env=NO_RANK))
    ok(cli("run", "-o", d / "b.parquet", "--", programs.parallel, "3",
           env={**NO_RANK, "PMI_RANK": "1"}))
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


MP_PROGRAM = textwrap.dedent("""
    import json, multiprocessing as mp, os
    import ompt_work_ext as w

    def job(n):
        w.parallel(n)
        return os.getpid(), n

    if __name__ == "__main__":
        w.parallel(1)  # the parent's runtime runs before the children are made
        ran = {os.getpid(): 1}
        for method in ("fork", "spawn", "forkserver"):
            ctx = mp.get_context(method)
            with ctx.Pool(2) as pool:  # ends with terminate(): SIGTERM to the workers
                for pid, n in pool.map(job, [2, 3, 4], chunksize=1):
                    ran[pid] = ran.get(pid, 0) + n
            p = ctx.Process(target=job, args=(5,))  # fork: ends with os._exit
            p.start()
            p.join()
            ran[p.pid] = 5
        print(json.dumps(ran))
""")


def test_multiprocessing_workers(tmp_path, omp_ext):
    script = tmp_path / "mp_work.py"
    script.write_text(MP_PROGRAM)
    out = tmp_path / "mp"
    r = ok(cli("run", "-o", out, script, path=[omp_ext], timeout=180))
    ran = {int(pid): n for pid, n in json.loads(r.stdout.splitlines()[-1]).items()}
    t = ompt_py.load(out)
    procs = {p["pid"]: p for p in t.meta["processes"]}
    assert set(procs) == set(ran)
    for pid, n in ran.items():
        mine = t.events[t.pids == pid]
        assert n_of(mine, "parallel_begin") == n
        assert procs[pid]["complete"] is True, procs[pid]["argv"]
        assert procs[pid]["dropped"] == 0
    spawned = [p for p in procs.values() if "--multiprocessing-fork" in p["argv"]]
    assert spawned  # spawn and forkserver children are fresh interpreters


def test_user_sitecustomize_still_runs(tmp_path, omp_ext):
    """ompt-py run puts its own sitecustomize first on PYTHONPATH; the user's runs too."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE = 'yes'\n")
    script = tmp_path / "check.py"
    script.write_text("import builtins, ompt_work_ext as w\nw.parallel(1)\n"
                      "print('user site:', getattr(builtins, 'USER_SITE', 'no'))\n")
    r = ok(cli("run", "-o", tmp_path / "t.parquet", script, path=[site, omp_ext]))
    assert "user site: yes" in r.stdout
    assert n_of(ompt_py.load(tmp_path / "t.parquet").events, "parallel_begin") == 1
