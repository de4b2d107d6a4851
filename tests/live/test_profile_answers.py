"""A profile gives the answers a trace of the same run gives (#15).

Each known-behaviour program runs twice through ``ompt-py run``, once traced and
once with ``--profile``, both without address randomisation (setarch -R) so that
code addresses and source locations match.  Every figure of constructs(),
imbalance(), lock_contention(), task_granularity() and summary() that counts
something must be equal: counts per construct and kind and per source
location, regions and threads per region location, acquisitions and locks per
kind, tasks created and run, the summary's overview and sections.

Times differ between two runs on a busy 2-core machine (waits and thread
start-up by tens of percent), so each time of the programs of known timing
(tests/programs/known.c: busy-waits of set lengths, which the program measures
itself) is compared with what the program printed of the profiled run: within
5 % plus 2 ms (TOLERANCE, MARGIN_NS), as tests/analysis compares a trace's.
Quantiles, estimated from log2 histograms, are checked to lie within a factor
of 2 of the printed duration at their rank.
"""

from __future__ import annotations

import math
import platform
import shutil

import numpy as np
import pandas as pd
import pytest
from conftest import cli, ok, printed, run_python

import ompt_py

pytestmark = [pytest.mark.needs_clang]

NO_ASLR = ["setarch", platform.machine(), "-R"]
CASES = [("mixed", ["20"]), ("critical", ["50"]), ("tasks", ["200"]), ("nested", []),
         ("sections", []), ("single", []), ("masked", []), ("barrier", []),
         ("known", ["skewed", "2000", "20"]), ("known", ["tasks", "20", "500", "20", "2000"]),
         ("known", ["lock", "50", "200"])]
TOLERANCE, MARGIN_NS = 0.05, 2_000_000


def _near(got: float, want: float) -> bool:
    return abs(got - want) <= TOLERANCE * abs(want) + MARGIN_NS


def _run(programs, tmp_path, name, args, profile):
    if shutil.which("setarch") is None:
        pytest.skip("setarch is needed to run both ways without address randomisation")
    out = tmp_path / ("prof.parquet" if profile else "trace.parquet")
    r = ok(cli("run", "-q", *(["--profile"] if profile else []), "-o", out, "--", *NO_ASLR,
               programs[name], *args, timeout=180))
    return ompt_py.load(out), r.stdout


def _counts(frame: pd.DataFrame, keys: list[str], value: str = "count") -> dict:
    frame = frame.astype({k: object for k in keys})
    return frame.groupby(keys, dropna=False)[value].sum().to_dict()


def _constructs(t: pd.DataFrame) -> pd.DataFrame:
    """Without the initial task (its end is not in every trace) and region markers
    (not profiled); mutex constructs per kind (libomp may pass its own code address
    for one acquisition: tests/tool/test_profile_tool.py)."""
    t = t.astype({"construct": object, "kind": object})
    t = t[(t["kind"] != "initial") & (t["construct"] != "user region")]
    if "location" in t:
        t = t.assign(location=t["location"].where(~t["construct"].str.startswith("mutex"),
                                                  "-").fillna("-"))
    return t


@pytest.mark.parametrize(("name", "args"), CASES,
                         ids=[f"{n}-{'-'.join(a[:1])}" for n, a in CASES])
def test_profile_answers_as_the_trace(programs, tmp_path, name, args):
    trace, _ = _run(programs, tmp_path, name, args, profile=False)
    prof, stdout = _run(programs, tmp_path, name, args, profile=True)
    assert isinstance(prof, ompt_py.Profile) and isinstance(trace, ompt_py.Trace)

    # constructs(): counts per construct and kind, and per source location
    for by, keys in (("construct", ["construct", "kind"]),
                     ("source", ["construct", "kind", "location"])):
        want = _counts(_constructs(trace.constructs(by=by)), keys)
        got = _counts(_constructs(prof.constructs(by=by)), keys)
        assert got == want, f"constructs(by={by!r}) counts differ"
        c = prof.constructs(by=by)
        assert ((c["p50_ns"] <= c["max_ns"]) & (c["mean_ns"] <= c["max_ns"])).all()

    # imbalance(): regions and threads per region location
    traced = trace.imbalance(by="source")
    profiled = prof.imbalance()
    assert _counts(profiled, ["location"], "regions") == _counts(traced, ["location"], "regions")
    assert _counts(profiled, ["location"], "threads") == \
        traced.astype({"location": object}).groupby("location", dropna=False)["threads"].max(
        ).to_dict()

    # lock_contention(): acquisitions, locks and threads per kind
    tl, pl = trace.lock_contention(), prof.lock_contention()
    for column, how in (("acquisitions", "sum"), ("wait_id", "nunique"), ("threads", "max")):
        assert pl.groupby("kind")[column].agg(how).to_dict() == \
            tl.groupby(tl["kind"].astype(str))[column].agg(how).to_dict(), column

    # task_granularity(): tasks created and run
    ta = trace.task_granularity().attrs
    pg = prof.task_granularity()
    assert (pg.attrs["tasks"], pg.attrs["ran"]) == (ta["tasks"], ta["ran"])
    assert pg["tasks"].sum() == pg.attrs["ran"]

    # summary(): the overview's counts and the same sections where the data exists
    ts, ps = trace.summary(), prof.summary()
    assert (ps.overview["processes"], ps.overview["overflow"]) == (ts.overview["processes"], 0)
    if name not in ("nested", "mixed"):  # both run nested teams (work_nested): an inner
        # team takes a new thread or one that an inner team before it gave back to the pool
        assert ps.overview["threads"] == ts.overview["threads"]
    assert {title for title, _ in ps.sections()} == {title for title, _ in ts.sections()}
    assert _counts(_constructs(ps.constructs), ["construct", "kind"]) == \
        _counts(_constructs(ts.constructs), ["construct", "kind"])

    if name == "known":
        _against_the_programs_truth(prof, trace, args, stdout)


def _against_the_programs_truth(prof, trace, args, stdout):
    """The times of the profiled run against what the program measured in it."""
    mode = args[0]
    if mode == "skewed":  # the loop's region (the one that lost most): each thread's busy time
        busy = printed(stdout, "busy_ns")
        region = prof.imbalance().iloc[0]
        threads = prof.imbalance(per_thread=True)
        threads = threads[threads["location"] == region["location"]].sort_values("thread")
        assert all(_near(g, w) for g, w in zip(sorted(threads["busy_ns"]), sorted(busy))), \
            (threads, busy)
        truth = max(busy) / np.mean(busy)
        assert abs(region["imbalance"] - truth) <= TOLERANCE * truth, (region, busy)
        assert _near(region["lost_ns"], 2 * max(busy) - sum(busy)), (region, busy)
        traced = trace.imbalance(by="source").iloc[0]
        assert traced["location"] == region["location"]
    elif mode == "tasks":
        durations = sorted(printed(stdout, "task_ns"))
        task = prof.constructs().set_index("construct").loc["task"]
        assert _near(task["total_ns"], sum(durations)), (task, durations)
        assert _near(task["max_ns"], durations[-1])
        g = prof.task_granularity()
        assert _near(g.attrs["run_total_ns"], sum(durations))
        at_rank = durations[math.floor(0.5 * (len(durations) - 1))]
        assert at_rank / 2.1 <= g.attrs["median_busy_ns"] <= at_rank * 2.1, g.attrs
        # Each bin's count is the printed durations' in it, but for those within the
        # tolerance of its edges (they may fall on either side).
        for lo, hi, n in zip(g["lo_ns"], g["hi_ns"], g["tasks"]):
            sure = sum(lo * (1 + TOLERANCE) <= d < hi / (1 + TOLERANCE) for d in durations)
            maybe = sum(lo / (1 + TOLERANCE) <= d < hi * (1 + TOLERANCE) for d in durations)
            assert sure <= n <= maybe, (g, durations)
    else:
        held = sum(printed(stdout, "held_ns"))
        lock = prof.lock_contention().iloc[0]
        n, hold_us = int(args[1]), float(args[2])
        assert lock["acquisitions"] == 2 * n
        assert _near(lock["hold_total_ns"], held), (lock, held)
        assert _near(lock["hold_mean_ns"] * lock["acquisitions"], held)
        assert lock["hold_max_ns"] >= hold_us * 1e3


def test_in_process_profile(omp_ext, tmp_path):
    """ompt_py.trace(profile=True) with OMPTPY_PROFILE=on from the start: the
    aggregates of this process at stop(), saved at its path; a clear error without
    profile mode, and for a trace in profile mode (which records no events)."""
    path = tmp_path / "p.parquet"
    code = f"""
        import ompt_py, ompt_work_ext as w
        with ompt_py.trace(profile=True, path={str(path)!r}) as p:
            w.parallel(7)
            w.critical(5)  # one region: 5 critical and 5 lock per thread, 2 threads
        c = p.constructs().set_index(["construct", "kind"])["count"]
        print(c["parallel region", "team"], p.lock_contention()["acquisitions"].sum())
        try:
            ompt_py.trace().start()
        except ompt_py.ConfigError as e:
            print("trace:", e)
    """
    r = run_python(code, {"OMPTPY_PROFILE": "on"}, path=[omp_ext])
    regions, acquisitions, *_ = r.stdout.split()
    assert int(regions) == 7 + 1 and int(acquisitions) == 2 * 2 * 5, r.stdout
    assert "profile mode (OMPTPY_PROFILE=on), which records no events" in r.stdout
    saved = ompt_py.load(path)
    assert isinstance(saved, ompt_py.Profile)
    assert saved.constructs().set_index(["construct", "kind"])["count"][
        "parallel region", "team"] == 8
    r = run_python("""
        import ompt_py
        try:
            ompt_py.trace(profile=True).start()
        except ompt_py.ConfigError as e:
            print(e)
    """, path=[omp_ext])
    assert "set OMPTPY_PROFILE=on in the environment before ompt_py is imported" in r.stdout


def test_run_profile_says_what_was_lost(programs, tmp_path):
    """Aggregates not made (tables too small): the profile is written, the loss said,
    the raw files kept, exit status 1, as for a trace; the kept raw files read as the
    profile (ompt-py report of the directory)."""
    out, raw = tmp_path / "p.parquet", tmp_path / "raw"
    r = cli("run", "--profile", "-o", out, "--keep-raw", raw, "--", programs.mixed, "20",
            env={"OMPTPY_PROFILE_ENTRIES": "16"})
    assert r.returncode == 1, r.stderr
    assert "the profile holds less than was profiled" in r.stderr
    assert "OMPTPY_PROFILE_ENTRIES" in r.stderr and str(raw) in r.stderr
    with pytest.warns(ompt_py.TraceWarning, match="OMPTPY_PROFILE_ENTRIES"):
        kept = ompt_py.load(raw)
    assert isinstance(kept, ompt_py.Profile)
    assert ompt_py.load(out).summary().overview["overflow"] == kept.summary().overview[
        "overflow"] > 0
    report = ok(cli("report", raw))
    assert "ompt-py profile: 1 process(es)" in report.stdout
