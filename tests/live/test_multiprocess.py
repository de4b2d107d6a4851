"""Recording several processes: ``ompt-py run`` over commands that start several
processes (a shell running programs one after another, a Python program using
multiprocessing with the fork, spawn and forkserver start methods).  Reading such
traces, datasets and directories of saved traces back: tests/io/test_datasets.py.

Spec (README, "Exports" and "Several processes"): every process is recorded, with
its rank when it had OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or SLURM_PROCID
(the first of them that is a number).  multiprocessing workers are traced
whole although they end with os._exit (fork) or are terminated by
``Pool.__exit__`` (SIGTERM).
"""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
from conftest import (
    NO_RANK,
    RANKS,
    by_regions,
    cli,
    n_of,
    no_traceback,
    ok,
    parallel_records,
    stored_path,
)

import ompt_py

pytestmark = pytest.mark.needs_clang


def test_run_of_several_processes_is_one_trace(programs, tmp_path):
    """``ompt-py run -o DIR`` over a shell that runs `parallel` 7 times in a row, with
    rank variables: every process recorded whole, with its rank (the trace read back,
    its rank column, clocks and dataset: tests/io/test_datasets.py, on a stored run)."""
    out = tmp_path / "trace"
    script = "; ".join(f"{env} {programs.parallel} {n}" for env, n, _ in RANKS)
    ok(cli("run", "-o", out, "--", "bash", "-c", script, env=NO_RANK))
    t = ompt_py.load(out)
    which = by_regions(t)
    assert sorted(which) == [n for _, n, _ in RANKS]
    for _, n, rank in RANKS:
        proc = next(p for p in t.meta["processes"] if p["pid"] == which[n])
        assert len(t.events[t.pids == which[n]]) == parallel_records(n) == proc["written"]
        assert proc["rank"] == rank and proc["complete"] is True


def test_run_into_a_directory_that_is_not_empty(programs, tmp_path):
    dataset = tmp_path / "trace"
    shutil.copytree(stored_path("ranks"), dataset)  # a dataset of an earlier run
    r = cli("run", "-o", dataset, "--", programs.parallel, "1")
    assert r.returncode != 0
    no_traceback(r)
    assert str(dataset) in r.stderr and "empty" in r.stderr


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


@pytest.mark.pythons
def test_multiprocessing_workers(tmp_path, omp_ext):
    script = tmp_path / "mp_work.py"
    script.write_text(MP_PROGRAM)
    out = tmp_path / "mp"
    r = ok(cli("run", "-o", out, script, path=[omp_ext], timeout=180))
    ran = {int(pid): n for pid, n in json.loads(r.stdout.splitlines()[-1]).items()}
    t = ompt_py.load(out)
    procs = {p["pid"]: p for p in t.meta["processes"]}
    # A pool worker may get no job (its sibling took them all, as on a busy machine):
    # it is traced all the same, with no region.
    assert set(ran) <= set(procs)
    for pid in set(procs) - set(ran):
        assert n_of(t.events[t.pids == pid], "parallel_begin") == 0, procs[pid]["argv"]
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
