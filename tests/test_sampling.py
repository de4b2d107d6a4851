"""Asynchronous state sampling (OMPTPY_SAMPLE_HZ): per-thread timers whose
signal handler asks the runtime what the thread is doing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import LIBOMP_VERSION, run_with_tool

import ompt_py

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]


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
    (info,) = (th for th in t.meta["processes"][0]["threads"] if th["thread"] == worker)
    # 1 kHz over about 0.3 s: taken, or skipped because the worker got no CPU
    assert row["samples"] + info["samples_skipped"] >= 200, info
    assert row["samples"] >= 50
    # the periods it had no CPU for are skipped, and stand with the next sample: the
    # shares weigh them, or a worker that other processes keep off its CPU more
    # while it waits (libomp's spin-wait yields) would seem to wait less
    assert row["samples"] <= row["periods"] <= row["samples"] + info["samples_skipped"]
    # one vocabulary for every version: the wait at an explicit barrier is `wait_barrier`
    assert abs(row["wait_barrier"] - expected) <= 0.10, (row.to_dict(), expected)
    # the runtime's own name: libomp 19 tells explicit barriers apart, 14 and 16 do not
    raw = t.state_breakdown(raw=True).xs(worker, level="thread").iloc[0]
    own = "wait_barrier_explicit" if LIBOMP_VERSION >= 19 else "wait_barrier"
    assert raw[own] == row["wait_barrier"]
    # the computing thread was never seen waiting at it
    initial = shares.drop(index=worker, level="thread").iloc[0]
    assert initial.get("wait_barrier", 0) <= 0.05
    # samples carry the region they were taken in and where the thread was
    s = t.samples()
    waiting = s[(s["thread"] == worker) & (s["state"] == "wait_barrier")]
    assert set(waiting["state_raw"].astype(str)) == {own}
    # at the barrier the worker's implicit task has called into the runtime: its
    # enter frame is set, below its exit frame on the same stack
    entered = waiting.dropna(subset=["enter_frame", "exit_frame"])
    assert len(entered) >= 0.95 * len(waiting) > 0
    assert (entered["enter_frame"] < entered["exit_frame"]).all()
    assert entered["exit_frame"].nunique() == 1  # one implicit task invocation
    assert (waiting["where"] == "runtime").all()
    computing = s[(s["thread"] != worker) & (s["state"] == "work_parallel")]
    assert len(computing) >= 20 and (computing["where"] == "user").mean() >= 0.95
    (region,) = t.parallel_regions()["parallel_id"].tolist()
    # outside it (a sample just before the fork or after the join) the initial
    # thread is in the initial task's implicit parallel region
    implicit = t.implicit_tasks()
    outer = implicit.loc[(implicit["flags"].astype(int) & 1) == 1, "parallel_id"].tolist()
    in_region = s[s["parallel_id"].notna()]
    assert region in set(in_region["parallel_id"].tolist()) <= {region, *outer}
    assert set(in_region.loc[in_region["thread"] == worker, "parallel_id"].tolist()) == {region}
    assert (s["codeptr"].notna()).all()
    assert t.meta["processes"][0]["config"]["sample_hz"] == 1000


def test_task_frames_place_samples_in_nested_tasks(programs, tmp_path):
    """The frames of task_create and of samples (OMPT's ompt_frame_t): which task
    invocation a sample belongs to, how tasks nest on a thread's stack, and
    whether the thread ran the task's code or the runtime."""
    seconds = 0.2
    out = tmp_path / "raw"
    r = run_with_tool([programs.task_frames, str(seconds)], out, OMPTPY_SAMPLE_HZ="1000")
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    df = t.to_pandas()
    serial, inner = df[df["event"] == "task_create"].itertuples()
    # The initial task was not called by the runtime (no exit frame), but it
    # called into the runtime to create its task (an enter frame).
    assert pd.isna(serial.exit_frame) and pd.notna(serial.enter_frame)
    # The single's implicit task: started by the runtime, calling into it to
    # create the task, a few frames deeper on the same stack.
    assert 0 < inner.exit_frame - inner.enter_frame < 1 << 16
    # libomp 14, 16 and 19 give frame pointers of runtime frames (0x20)
    assert inner.exit_frame_flags == inner.enter_frame_flags == 0x20
    assert (df.loc[df["event"] == "task_create", "parallel_id"].isna()).all()

    s = t.samples()
    creator = s[s["task_id"] == inner.other_task_id]
    task = s[s["task_id"] == inner.task_id]
    assert len(creator) >= 10 and len(task) >= 20, (len(creator), len(task))
    # Samples of one task invocation share its exit frame: the creator's are the
    # task_create's (none once its code has returned, in the region's last barrier).
    assert set(creator["exit_frame"].dropna().tolist()) == {inner.exit_frame}
    assert creator["exit_frame"].notna().sum() >= 10
    (runner,) = set(task["thread"].tolist())
    assert int(r.stdout) in (0, 1)  # the runner's thread number
    implicit = df[(df["event"] == "implicit_task") & (df["endpoint"] == "begin")
                  & (df["thread"] == runner) & (df["team_size"] == 2)]
    (runner_task,) = implicit["task_id"].tolist()
    runner_frames = set(s.loc[s["task_id"] == runner_task, "exit_frame"].dropna().tolist())
    assert len(runner_frames) == 1
    # The task ran inside its thread's implicit task (at the taskwait or the
    # single's barrier): its frames lie below that task's exit frame.  (A sample
    # may catch the runtime starting or ending the task, before or after its
    # code: hence 95 %.)
    frames = task["exit_frame"].dropna()
    assert len(frames) >= 0.95 * len(task) and frames.nunique() == 1
    assert (frames < min(runner_frames)).all()
    running = (task["where"] == "user") & (task["state"] == "work_parallel")
    assert running.mean() >= 0.95 and task["enter_frame"].isna().mean() >= 0.95
    # Meanwhile the other thread was in the runtime: waiting for the task at the
    # taskwait, or at the single's barrier (10 ms after the task started: the
    # thread may still have been on its way there).
    margin = 10_000_000
    during = s[(s["thread"] != runner) & (s["time_ns"] > task["time_ns"].min() + margin)
               & (s["time_ns"] < task["time_ns"].max())]
    assert len(during) >= 10
    assert (during["where"] == "runtime").all(), during[["time_ns", "state_raw", "where"]]


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
    assert set(t.samples()["state"].dropna().astype(str)) <= set(ompt_py._records.STATES.values())


def test_bad_sample_rate_is_refused(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.imbalance, "0.01"], out, OMPTPY_SAMPLE_HZ="fast")
    assert "OMPTPY_SAMPLE_HZ='fast' is not valid" in r.stderr
    assert not out.exists() or not list(out.iterdir())


def test_frame_fields_decode():
    """The packing of csrc/include/omptpy.h ("Frames"), decoded by to_pandas without a
    runtime: every combination the sampler and task_create write, and version-1
    records."""
    from ompt_py._records import EVENT_CODES, EVENT_DTYPE, FRAME_COLUMNS
    from ompt_py.trace import _loaded

    sample, create, work = (EVENT_CODES[e] for e in ("sample", "task_create", "work"))
    exit_frame, enter_frame = 0x7FFD_0000_1F40, 0x7FFD_0000_1E80
    fp, cfa_app = 0b100, 0b011  # framepointer; cfa | application, packed in 3 bits
    rows = [  # event, kind (frame bits), u64b, u32b, parallel_id
        (sample, 0x01 | fp << 2, exit_frame, 0, 0),  # in the task's code
        (sample, 0x03 | fp << 2 | cfa_app << 5, exit_frame, exit_frame - enter_frame, 0),
        (sample, 0x02 | fp << 5, enter_frame, 0, 0),  # initial task in the runtime
        (sample, 0x03, exit_frame, 0x8000_0000, 0),  # too far apart: enter unknown
        (sample, 0, 2, 1, 0),  # record version 1: team size 2, thread 1, no frames
        (create, 0x03 | fp << 2 | fp << 5, exit_frame, 4, enter_frame),
        (work, 0x03, 40, 0, 7),  # other events: never frames
    ]
    ev = np.zeros(len(rows), EVENT_DTYPE)  # all at time 0: to_pandas keeps their order
    for i, (code, kind, u64b, u32b, parallel_id) in enumerate(rows):
        ev[i]["event"], ev[i]["kind"], ev[i]["u64b"] = code, kind, u64b
        ev[i]["u32b"], ev[i]["parallel_id"] = u32b, parallel_id
    trace = _loaded([ev], [(1, len(ev))], {"processes": [{"pid": 1, "config": {}}]})
    df = trace.to_pandas()
    got = {name: [None if pd.isna(v) else int(v) for v in df[name]] for name in FRAME_COLUMNS}
    assert got == {
        "exit_frame": [exit_frame, exit_frame, None, exit_frame, None, exit_frame, None],
        "enter_frame": [None, enter_frame, enter_frame, None, None, enter_frame, None],
        "exit_frame_flags": [0x20, 0x20, None, 0, None, 0x20, None],
        "enter_frame_flags": [None, 0x11, 0x20, 0, None, 0x20, None],
    }


def test_missed_periods_weigh_the_states():
    """A sample also stands for the periods its thread missed just before it (the
    high half of u32a, csrc/include/omptpy.h): state_breakdown weighs the states by
    them.  Decoded without a runtime; record version 2 had 0 there."""
    from ompt_py._records import EVENT_CODES, EVENT_DTYPE
    from ompt_py.trace import _loaded

    work, barrier = 0x001, 0x014  # work_parallel, wait_barrier_explicit
    rows = [(0, work), (0, work), (5, barrier), (0, work), (0xFFFF, 0x101)]
    ev = np.zeros(len(rows) + 1, EVENT_DTYPE)
    for i, (missed, state) in enumerate(rows):
        ev[i]["time_ns"], ev[i]["thread"] = i, 1
        ev[i]["event"], ev[i]["u32a"] = EVENT_CODES["sample"], state | missed << 16
    ev[-1]["event"], ev[-1]["u32a"], ev[-1]["time_ns"] = EVENT_CODES["parallel_begin"], 2, 9
    t = _loaded([ev], [(7, len(ev))], {"processes": []})
    df = t.to_pandas()
    assert df["missed"].tolist() == [0, 0, 5, 0, 0xFFFF, pd.NA]
    assert df["team_size"].tolist()[-1] == 2  # the whole u32a elsewhere
    s = t.samples()
    assert s["state_raw"].astype(str).tolist() == [
        "work_parallel", "work_parallel", "wait_barrier_explicit", "work_parallel", "overhead"]
    row = t.state_breakdown().loc[(7, 1)]
    assert (row["samples"], row["periods"]) == (5, 3 + 6 + 0x10000)
    assert row["wait_barrier"] == 6 / row["periods"]
    assert row["overhead"] == 0x10000 / row["periods"]
