"""States of threads from samples (OMPTPY_SAMPLE_HZ: Trace.samples,
state_breakdown): on stored traces of libomp 19 and 16 (tests/data/sampled-*,
programs of tests/programs sampled at 1 kHz under the tool; the sampling itself:
tests/live/test_sampling.py), and on hand-made records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import STORED_RUNTIMES, load_stored, stored_output

import ompt_py
from ompt_py.records import EVENT_CODES, EVENT_DTYPE

RUNTIMES = [pytest.param(v, id=f"libomp{v}") for v in STORED_RUNTIMES]


@pytest.mark.pythons
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_waiting_thread_is_sampled_at_the_barrier(runtime):
    # imbalance 0.2, OMPTPY_SAMPLE_HZ=1000
    name = f"sampled-imbalance-libomp{runtime}"
    waited, inside = (float(x) for x in stored_output(name).split()[1::2])
    expected = waited / inside  # about 2/3: the worker waits 0.2 s of its 0.3 s
    t = load_stored(name)
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
    own = "wait_barrier_explicit" if runtime >= 19 else "wait_barrier"
    assert raw[own] == row["wait_barrier"]
    # the computing thread was never seen waiting at it
    initial = shares.drop(index=worker, level="thread").iloc[0]
    assert initial.get("wait_barrier", 0) <= 0.05
    # samples carry the region they were taken in and where the thread was
    s = t.samples()
    waiting = s[(s["thread"] == worker) & (s["state"] == "wait_barrier")]
    assert set(waiting["state_raw"].astype(str)) == {own}
    # at the barrier the worker's implicit task has called into the runtime: its
    # enter frame is set, below its exit frame on the same stack (a sample's frame
    # addresses are 0 where the runtime gave none)
    entered = waiting[(waiting["enter_frame"] != 0) & (waiting["exit_frame"] != 0)]
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
    assert s["parallel_id"].notna().all()  # 0 outside every region
    in_region = s[s["parallel_id"] != 0]
    assert region in set(in_region["parallel_id"].tolist()) <= {region, *outer}
    assert set(in_region.loc[in_region["thread"] == worker, "parallel_id"].tolist()) == {region}
    assert (s["codeptr"].notna()).all()
    assert t.meta["processes"][0]["config"]["sample_hz"] == 1000


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_task_frames_place_samples_in_nested_tasks(runtime):
    """The frames of task_create and of samples (OMPT's ompt_frame_t): which task
    invocation a sample belongs to, how tasks nest on a thread's stack, and
    whether the thread ran the task's code or the runtime.  (The frames of the
    task_create events themselves: tests/live/test_sampling.py.)"""
    name = f"sampled-task-frames-libomp{runtime}"  # task_frames 0.2, OMPTPY_SAMPLE_HZ=1000
    t = load_stored(name)
    df = t.to_pandas()
    _, inner = df[df["event"] == "task_create"].itertuples()

    s = t.samples()
    creator = s[s["task_id"] == inner.other_task_id]
    task = s[s["task_id"] == inner.task_id]
    assert len(creator) >= 10 and len(task) >= 20, (len(creator), len(task))
    # Samples of one task invocation share its exit frame: the creator's are the
    # task_create's (none once its code has returned, in the region's last barrier).
    assert set(creator["exit_frame"].tolist()) - {0} == {inner.exit_frame}
    assert (creator["exit_frame"] != 0).sum() >= 10
    (runner,) = set(task["thread"].tolist())
    assert int(stored_output(name)) in (0, 1)  # the runner's thread number
    implicit = df[(df["event"] == "implicit_task") & (df["endpoint"] == "begin")
                  & (df["thread"] == runner) & (df["team_size"] == 2)]
    (runner_task,) = implicit["task_id"].tolist()
    runner_frames = set(s.loc[s["task_id"] == runner_task, "exit_frame"].tolist()) - {0}
    assert len(runner_frames) == 1
    # The task ran inside its thread's implicit task (at the taskwait or the
    # single's barrier): its frames lie below that task's exit frame.  (A sample
    # may catch the runtime starting or ending the task, before or after its
    # code: hence 95 %.)
    frames = task.loc[task["exit_frame"] != 0, "exit_frame"]
    assert len(frames) >= 0.95 * len(task) and frames.nunique() == 1
    assert (frames < min(runner_frames)).all()
    running = (task["where"] == "user") & (task["state"] == "work_parallel")
    assert running.mean() >= 0.95 and (task["enter_frame"] == 0).mean() >= 0.95
    # Meanwhile the other thread was in the runtime: waiting for the task at the
    # taskwait, or at the single's barrier (10 ms after the task started: the
    # thread may still have been on its way there).
    margin = 10_000_000
    during = s[(s["thread"] != runner) & (s["time_ns"] > task["time_ns"].min() + margin)
               & (s["time_ns"] < task["time_ns"].max())]
    assert len(during) >= 10
    assert (during["where"] == "runtime").all(), during[["time_ns", "state_raw", "where"]]


def test_missed_periods_weigh_the_states():
    """A sample also stands for the periods its thread missed just before it (the
    high half of u32a, csrc/include/omptpy.h): state_breakdown weighs the states by
    them.  Decoded without a runtime; record version 2 had 0 there."""
    work, barrier = 0x001, 0x014  # work_parallel, wait_barrier_explicit
    rows = [(0, work), (0, work), (5, barrier), (0, work), (0xFFFF, 0x101)]
    ev = np.zeros(len(rows) + 1, EVENT_DTYPE)
    for i, (missed, state) in enumerate(rows):
        ev[i]["time_ns"], ev[i]["thread"] = i, 1
        ev[i]["event"], ev[i]["u32a"] = EVENT_CODES["sample"], state | missed << 16
    ev[-1]["event"], ev[-1]["u32a"], ev[-1]["time_ns"] = EVENT_CODES["parallel_begin"], 2, 9
    t = ompt_py.Trace.from_records(ev, {"processes": []}, pids=7)
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
