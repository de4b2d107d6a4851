"""The in-place file route's stalls (docs/stalls.md): with the smallest regions
(OMPTPY_RESERVE=1M: 64 MiB regions, 10^6 records each) a burst of records on 2
threads that hold both CPUs fills regions faster than the idle-priority drainer
makes the next one resident, and a writer makes it resident itself, in one
interval written into the trace as a tool_stall record of its thread (with any
other writer that finds it so: they share the region's pieces).

`many N` (tests/programs: one region of 2 threads, a dynamic,1 loop of N
iterations) makes N + 32 records of the program's (tests/tool/test_overflow.py).
Whether a writer stalls, rather than the drainer making the next region
resident in time, is the scheduler's choice (on an idle machine the drainer
keeps up): so the stalls are tested with the drainer kept from making regions
resident (OMPTPY_TEST_POPULATE_AHEAD=off, a test setting), where every next
region is a writer's stall, and a run at the defaults must account for every
record and whatever stalls it had."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_with_tool, select

import ompt_py
from ompt_py import _core
from ompt_py.live import attach

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]

FIXED = 32  # test_overflow.py: the records of `many N` besides its N dispatch events
BURST = 2_500_000  # 160 MB of records: three regions of 64 MiB
REGION_BYTES = 64 << 20


def stall_run(programs, out, **env):
    r = run_with_tool([programs.many, str(BURST)], out, timeout=180, OMPTPY_RESERVE="1M", **env)
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    return t, proc


def check_stalls(t, proc) -> int:
    """Every stall is a tool_stall record inside its thread's records, counted in the
    process's stats; nothing is dropped or lost.  Returns the number of stalls."""
    assert proc["config"]["zero_copy"]
    assert proc["dropped"] == 0 and proc["lost"] == 0
    stalls = t.tool_stalls()
    ev = t.events
    # the program's records are all there, the stall records beside them
    assert proc["written"] == len(ev) == BURST + FIXED + len(stalls)
    assert sorted(select(ev, "dispatch")["u64a"].tolist()) == list(range(BURST))
    assert proc.get("region_stalls", 0) == len(stalls)
    assert proc.get("region_stall_ns", 0) >= 0
    if stalls.empty:
        return 0
    # per thread: a stall lies between the thread's records before and after it
    # (its record is first in the chunk the thread leased once the stall was over)
    rows = np.flatnonzero(ev["event"] == _core.EVENT_TOOL_STALL)
    for row in rows:
        mine = np.flatnonzero(ev["thread"] == ev["thread"][row])
        at = np.searchsorted(mine, row)
        end = ev["u64b"][row].view(np.int64)
        assert ev["time_ns"][row] <= end
        if at > 0:
            assert ev["time_ns"][mine[at - 1]] <= ev["time_ns"][row]
        assert at + 1 < len(mine), "a stall is followed by the record it made room for"
        assert end <= ev["time_ns"][mine[at + 1]]
    span = (int(ev["time_ns"].min()), int(ev["time_ns"].max()))
    assert (stalls["begin_ns"] >= span[0]).all() and (stalls["end_ns"] <= span[1]).all()
    assert set(stalls["thread"]) <= {th["thread"] for th in proc["threads"]}
    assert set(stalls["reason"].astype(str)) <= {"region", "populate", "wait"}
    made = stalls[stalls["reason"] != "wait"]
    assert ((made["bytes"] > 0) & (made["bytes"] <= REGION_BYTES)).all()
    assert (stalls.loc[stalls["reason"] == "wait", "bytes"] == 0).all()
    # the writers stalled on a region share its pieces: together they made at most
    # the whole region resident, and one of them made it; the first is the reserve's
    assert (made.groupby("region")["bytes"].sum() <= REGION_BYTES).all()
    assert (stalls["reason"] == "region").groupby(stalls["region"]).sum().le(1).all()
    assert (stalls["region"] >= 2).all()
    # the thread states count the stalls, and never as the program's work
    states = t.thread_states().set_index("thread")
    per = stalls.groupby("thread")["duration_ns"].sum()
    for thread, ns in per.items():
        assert states.loc[thread, "tool_stall_ns"] == ns
    return len(stalls)


def test_stalls_are_recorded_and_counted(programs, tmp_path):
    """Every region after the reserve's is made resident by a writer: at least the
    second and third of the burst's three."""
    t, proc = stall_run(programs, tmp_path / "raw", OMPTPY_TEST_POPULATE_AHEAD="off")
    assert proc["config"].get("populate_ahead") is False
    assert check_stalls(t, proc) >= 2
    made = t.tool_stalls().query("reason != 'wait'")
    assert set(made["region"]) >= {2, 3}
    # the writers made every byte of them resident, each piece once
    assert (made.groupby("region")["bytes"].sum() == REGION_BYTES).all()


def test_stalls_at_the_defaults_are_counted(programs, tmp_path):
    """At the defaults the drainer makes regions resident while it gets a CPU: a
    writer stalls or not, every record and stall is accounted for either way."""
    check_stalls(*stall_run(programs, tmp_path / "raw"))


def test_a_bad_test_setting_says_what_it_takes(monkeypatch):
    monkeypatch.setenv("OMPTPY_TEST_POPULATE_AHEAD", "sometimes")
    with pytest.raises(ompt_py.ConfigError,
                       match=r"OMPTPY_TEST_POPULATE_AHEAD='sometimes'.*on or off"):
        attach.check_environment()


def test_no_stall_with_overflow_drop(programs, tmp_path):
    """OMPTPY_OVERFLOW=drop: a writer never stalls; it moves on to a next region the
    drainer made, or drops and counts."""
    out = tmp_path / "raw"
    r = run_with_tool([programs.many, str(BURST)], out, timeout=180, OMPTPY_RESERVE="1M",
                      OMPTPY_OVERFLOW="drop")
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    assert t.tool_stalls().empty and "region_stalls" not in proc
    assert proc["written"] + proc["dropped"] == BURST + FIXED
