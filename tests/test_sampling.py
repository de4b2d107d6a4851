"""Asynchronous state sampling (OMPTPY_SAMPLE_HZ): per-thread timers whose
signal handler asks the runtime what the thread is doing."""

from __future__ import annotations

import pytest
from conftest import run_with_tool

import ompt_py

pytestmark = pytest.mark.needs_clang


def test_waiting_thread_is_sampled_at_the_barrier(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.imbalance, "0.2"], out, OMPTPY_SAMPLE_HZ="1000")
    assert r.returncode == 0, r.stderr
    waited, inside = (float(x) for x in r.stdout.split()[1::2])
    expected = waited / inside  # about 2/3: the worker waits 0.2 s of its 0.3 s
    t = ompt_py.load(out)
    shares = t.state_breakdown()
    workers = [th["thread"] for th in t.meta["processes"][0]["threads"] if th["type"] == "worker"]
    (worker,) = workers
    row = shares.xs(worker, level="thread").iloc[0]
    assert row["samples"] >= 200  # 1 kHz over about 0.3 s
    assert abs(row["wait_barrier_explicit"] - expected) <= 0.10, (row.to_dict(), expected)
    # the computing thread was never seen waiting at it
    initial = shares.drop(index=worker, level="thread").iloc[0]
    assert initial.get("wait_barrier_explicit", 0) <= 0.05
    # samples carry the region they were taken in and where the thread was
    s = t.samples()
    (region,) = t.parallel_regions()["parallel_id"].tolist()
    in_region = s[s["parallel_id"].notna()]
    assert set(in_region["parallel_id"].tolist()) == {region}
    assert (s["codeptr"].notna()).all()
    assert t.meta["processes"][0]["config"]["sample_hz"] == 1000


def test_no_samples_unless_asked(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.imbalance, "0.01"], out)
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    assert len(t.samples()) == 0
    assert t.meta["processes"][0]["config"]["sample_hz"] == 0


def test_sampling_in_process(run_traced):
    t = run_traced("""
import ompt_py
import ompt_work_ext as w
with ompt_py.trace() as t:
    w.parallel(50)
t.save(TRACE_PATH)
""", env={"OMPTPY_SAMPLE_HZ": "2000"})
    assert len(t.samples()) > 0
    assert set(t.samples()["state"].dropna().astype(str)) <= set(ompt_py._records.STATES.values())


def test_bad_sample_rate_is_refused(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.imbalance, "0.01"], out, OMPTPY_SAMPLE_HZ="fast")
    assert "OMPTPY_SAMPLE_HZ='fast' is not valid" in r.stderr
    assert not out.exists() or not list(out.iterdir())
