"""The tool's stalls (tool_stall records, record version 8; docs/stalls.md) in the
answers: on the stored known-skewed-static trace (a skewed static loop) with a
hand-made stall put inside the busy part of the loaded thread's implicit task.
The stall lengthens nothing it lies in: the thread states, the busy shares and
the imbalance leave its time out of the program's, the summary says how many
stalls and how long, and the exports show it as a slice of its thread.  The
stalls of real runs: tests/tool/test_stalls.py."""

from __future__ import annotations

import json

import pytest
from conftest import load_stored
from stall_records import REGION, STALL_BYTES, stalled

import ompt_py
from ompt_py.analysis import metrics, states


@pytest.fixture(scope="module")
def traces() -> tuple[ompt_py.Trace, ompt_py.Trace, int, int, int]:
    """The stored trace, the same with a stall (stall_records.stalled), the stalled
    thread and the stall's begin and end."""
    base = load_stored("known-skewed-static")
    return (base, *stalled(base))


def test_the_stall_is_a_row_of_tool_stalls(traces):
    base, t, thread, begin, end = traces
    assert base.tool_stalls().empty  # a trace of record version 7 or before: none
    (row,) = t.tool_stalls().itertuples()
    assert (row.thread, row.begin_ns, row.end_ns, row.duration_ns) == (
        thread, begin, end, end - begin)
    assert (row.reason, row.bytes, row.region) == ("populate", STALL_BYTES, REGION)


def test_thread_states_leave_the_stall_out_of_busy(traces):
    base, t, thread, begin, end = traces
    before = base.thread_states().set_index("thread")
    after = t.thread_states().set_index("thread")
    assert (before["tool_stall_ns"] == 0).all()
    assert after.loc[thread, "tool_stall_ns"] == end - begin
    assert after.loc[thread, "busy_ns"] == before.loc[thread, "busy_ns"] - (end - begin)
    others = after.index != thread
    assert (after.loc[others, "tool_stall_ns"] == 0).all()
    for c in states.STATE_COLUMNS:  # the other threads, and the idle time, unchanged
        assert (after.loc[others, c] == before.loc[others, c]).all(), c
    assert after.loc[thread, "idle_ns"] == before.loc[thread, "idle_ns"]
    # the busy share: of the time neither idle nor stalled
    row = after.loc[thread]
    working = sum(row[f"{s}_ns"] for s in states.THREAD_STATES if s != "tool_stall")
    assert row["busy_share"] == pytest.approx(row["busy_ns"] / working)


def test_imbalance_counts_no_stall_as_work(traces):
    base, t, thread, begin, end = traces
    keys = ["parallel_id", "thread"]
    before = metrics.region_threads(base).set_index(keys)
    after = metrics.region_threads(t).set_index(keys)
    inside = after.index[after["tool_stall_ns"] > 0]
    assert len(inside) == 1 and inside[0][1] == thread
    assert after.loc[inside, "busy_ns"].iloc[0] == \
        before.loc[inside, "busy_ns"].iloc[0] - (end - begin)
    # the construct keeps its length: a stall inside it lengthened it in the run
    assert (after["duration_ns"] == before["duration_ns"]).all()
    region = inside[0][0]
    b = base.imbalance().set_index("parallel_id").loc[region]
    a = t.imbalance().set_index("parallel_id").loc[region]
    assert a["threads"] * a["busy_mean_ns"] == pytest.approx(
        b["threads"] * b["busy_mean_ns"] - (end - begin), abs=2)
    assert a["duration_ns"] == b["duration_ns"]


def test_the_summary_says_how_many_stalls_and_how_long(traces):
    base, t, _, begin, end = traces
    assert not any("stalled" in line for line in base.summary().headline())
    s = t.summary()
    assert s.overview["stalls"] == 1
    (line,) = (line for line in s.headline() if "stalled" in line)
    assert line.startswith("ompt-py stalled the threads 1 time(s), ")
    assert ompt_py.units.format_ns(end - begin) in line
    assert "leave this out of the program's time" in line
    assert s.threads["tool_stall_ns"].sum() == end - begin


def test_perfetto_shows_the_stall_on_its_thread(traces, tmp_path):
    _, t, thread, begin, end = traces
    t.to_perfetto(tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    (stall,) = (e for e in doc["traceEvents"] if e.get("cat") == "ompt-py")
    assert stall["name"] == states.STALL_LABEL and stall["tid"] == thread
    assert stall["dur"] == pytest.approx((end - begin) / 1e3)
    assert stall["args"] == {"reason": "populate", "bytes": STALL_BYTES, "region": REGION}
