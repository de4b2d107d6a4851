"""Asynchronous state sampling (OMPTPY_SAMPLE_HZ): per-thread timers whose
signal handler asks the runtime what the thread is doing.  What the samples
say (states, frames, regions) is analysed in tests/analysis/test_states.py,
on stored traces of the same programs."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import run_with_tool, select

import ompt_py

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]


def test_waiting_thread_is_sampled_at_the_barrier(programs, tmp_path):
    """Both threads sampled at 1 kHz (what the samples say, the shares of states:
    tests/analysis/test_states.py)."""
    out = tmp_path / "raw"
    r = run_with_tool([programs.imbalance, "0.2"], out, OMPTPY_SAMPLE_HZ="1000")
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    (info,) = (th for th in proc["threads"] if th["type"] == "worker")
    samples = select(t.events, "sample")
    mine = samples[samples["thread"] == info["thread"]]
    # 1 kHz over the worker's time in the region, as the program measured it (about
    # 0.3 s; less when the machine started the worker late): each period taken, or
    # skipped because the worker had no CPU then (other processes: most of them)
    inside_ms = float(r.stdout.split()[3]) * 1e3
    assert len(mine) + info["samples_skipped"] >= 0.9 * inside_ms, (info, inside_ms)
    assert len(mine) >= 10
    assert proc["config"]["sample_hz"] == 1000


def test_task_frames_place_samples_in_nested_tasks(programs, tmp_path):
    """The frames of task_create (OMPT's ompt_frame_t) under sampling (what the
    samples' frames say: tests/analysis/test_states.py)."""
    seconds = 0.2
    out = tmp_path / "raw"
    r = run_with_tool([programs.task_frames, str(seconds)], out, OMPTPY_SAMPLE_HZ="1000")
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    df = t.to_pandas()
    serial, inner = df[df["event"] == "task_create"].itertuples()
    # The initial task was not called by the runtime (no exit frame), but it
    # called into the runtime to create its task (an enter frame): a NULL the
    # runtime passed is 0, with no flags.
    assert serial.exit_frame == 0 and pd.isna(serial.exit_frame_flags)
    assert serial.enter_frame > 0
    # The single's implicit task: started by the runtime, calling into it to
    # create the task, a few frames deeper on the same stack.
    assert 0 < inner.exit_frame - inner.enter_frame < 1 << 16
    # libomp 14, 16 and 19 give frame pointers of runtime frames (0x20)
    assert inner.exit_frame_flags == inner.enter_frame_flags == 0x20
    assert (df.loc[df["event"] == "task_create", "parallel_id"].isna()).all()
    assert int(r.stdout) in (0, 1)  # the runner's thread number


def test_no_samples_unless_asked(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.imbalance, "0.01"], out)
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    assert len(t.samples()) == 0
    assert t.meta["processes"][0]["config"]["sample_hz"] == 0


def test_sampling_in_process(run_traced):
    """Samples in a trace window (50 ms long: the regions alone may end before
    the first period of 0.5 ms)."""
    t = run_traced("""
import time
import ompt_py
import ompt_work_ext as w
with ompt_py.trace() as t:
    w.parallel(50)
    time.sleep(0.05)
t.save(TRACE_PATH)
""", env={"OMPTPY_SAMPLE_HZ": "2000"})
    assert len(t.samples()) > 0
    assert set(t.samples()["state"].dropna().astype(str)) <= set(
        ompt_py.records.OMPT_STATES.values())


def test_bad_sample_rate_is_refused(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.imbalance, "0.01"], out, OMPTPY_SAMPLE_HZ="fast")
    assert "OMPTPY_SAMPLE_HZ='fast' is not valid" in r.stderr
    assert not out.exists() or not list(out.iterdir())
