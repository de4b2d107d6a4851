"""The analyses (ompt_py.metrics through Trace: summary, constructs, imbalance,
task_granularity, lock_contention, utilisation) against programs of known
timing (tests/programs/known.c), and on traces that lack events, are empty,
have one thread or are cut off in the middle of a region.

Expected values come from the design of each workload (the loop gives thread
1 four times thread 0's work: imbalance 4w / 2.5w = 1.6), checked within 10%;
where a busy machine can stretch the work itself, the program's own
measurement is the reference as well.

The traces are stored (tests/data/known-*.parquet, with what the program
printed in known-*.out): tests/data/make_traces.py made them with the arguments
below on a quiet machine.
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
from conftest import load_stored, printed, stored_output

import ompt_py
from ompt_py.analysis import metrics, tables
from ompt_py.records import EVENT_CODES

UNIT_US, N = 1000, 40  # skewed loop: thread 0 has N units (40 ms), thread 1 4N (160 ms)
W_NS = UNIT_US * N * 1000
SHORT_US, LONG_US = 200, 2000  # tasks of 200 us and 2 ms
HOLD_US, TAKES = 500, 40  # each of 2 threads holds the lock 40 times for 500 us


def known(name: str, *args: object) -> tuple[ompt_py.Trace, str]:
    """The stored trace known-NAME (of `known ARGS`) and what the program printed."""
    t = load_stored(f"known-{name}")
    (proc,) = t.meta["processes"]
    assert proc["argv"][1:] == [str(a) for a in args], "made with other arguments"
    try:
        out = stored_output(f"known-{name}")
    except FileNotFoundError:
        out = ""
    return t, out


def subset(t: ompt_py.Trace, keep: np.ndarray, meta: dict | None = None) -> ompt_py.Trace:
    """The trace with only the events where ``keep`` (one process)."""
    (pid,) = np.unique(t.pids)
    return ompt_py.Trace.from_records(t.events[keep], meta or t.meta, pids=int(pid))


def without(t: ompt_py.Trace, *events: str) -> ompt_py.Trace:
    codes = [EVENT_CODES[e] for e in events]
    return subset(t, ~np.isin(t.events["event"], codes))


def loop_region(t: ompt_py.Trace):
    """The skewed loop's region: the last one (the first is the warm-up)."""
    return t.imbalance().sort_values("begin_ns").iloc[-1]


class Skewed:
    """A run of ``known skewed``: the trace and what the threads measured themselves."""

    def __init__(self, name: str) -> None:
        self.trace, stdout = known(name, "skewed", UNIT_US, N)
        self.start = printed(stdout, "start_ns")  # CLOCK_MONOTONIC, as the trace's clock
        self.busy = printed(stdout, "busy_ns")

    def expected(self) -> dict[str, float]:
        """The figures of the loop's region from the threads' own busy times and
        starts: both implicit tasks end together at the barrier."""
        b0, b1 = self.busy
        delay = self.start[1] - self.start[0]
        end = max(b0, delay + b1)  # from thread 0's start
        t0, t1 = end, end - delay
        return {"imbalance": max(b0, b1) / ((b0 + b1) / 2),
                "barrier_wait_share": (t0 - b0 + t1 - b1) / (t0 + t1),
                "thread0_wait_share": (t0 - b0) / t0, "lost_ns": abs(b1 - b0)}

    def as_designed(self) -> bool:
        """Did the machine let the threads run as designed (w and 4w, together)?"""
        b0, b1 = self.busy
        return (abs(b0 - W_NS) < 0.05 * W_NS and abs(b1 - 4 * W_NS) < 0.05 * 4 * W_NS
                and abs(self.start[1] - self.start[0]) < 0.025 * W_NS)


@pytest.fixture(scope="module")
def skewed() -> dict[str, Skewed]:
    """The skewed loop under static (a run as designed: make_traces.py tried until the
    machine let it) and under dynamic,1 scheduling."""
    static = Skewed("skewed-static")
    assert static.as_designed(), "tests/data/known-skewed-static.parquet: remake it"
    return {"static": static, "dynamic": Skewed("skewed-dynamic")}


# ---- known behaviour -------------------------------------------------------------------------


@pytest.mark.pythons
def test_static_loop_shows_the_designed_imbalance(skewed):
    run = skewed["static"]
    t = run.trace
    region = loop_region(t)
    assert region["complete"] and region["threads"] == 2
    per = t.imbalance(per_thread=True)
    per = per[per["parallel_id"] == region["parallel_id"]].sort_values("thread_num")
    first, last = per.iloc[0], per.iloc[1]
    # The threads' own clocks: busy times, and the figures they imply.
    assert per["busy_ns"].to_numpy() == pytest.approx(run.busy, rel=0.05)
    expected = run.expected()
    assert region["imbalance"] == pytest.approx(expected["imbalance"], rel=0.10)
    assert region["barrier_wait_share"] == pytest.approx(expected["barrier_wait_share"], rel=0.10)
    assert first["barrier_wait_share"] == pytest.approx(expected["thread0_wait_share"], rel=0.10)
    assert region["lost_ns"] == pytest.approx(expected["lost_ns"], rel=0.10)
    assert last["busy_share"] > 0.95
    if run.as_designed():
        # Busy w and 4w: max over mean = 4w / 2.5w; thread 0 waits 3w of the 8w
        # the two implicit tasks last together, 3/4 of its own.
        assert region["imbalance"] == pytest.approx(1.6, rel=0.10)
        assert region["barrier_wait_share"] == pytest.approx(3 / 8, rel=0.10)
        assert first["barrier_wait_share"] == pytest.approx(3 / 4, rel=0.10)
        assert region["lost_ns"] == pytest.approx(3 * W_NS, rel=0.10)


def test_dynamic_schedule_lowers_the_imbalance(skewed):
    static = loop_region(skewed["static"].trace)
    dynamic = loop_region(skewed["dynamic"].trace)
    assert dynamic["imbalance"] < 1.1 < static["imbalance"] - 0.3
    assert dynamic["barrier_wait_share"] < static["barrier_wait_share"] / 3
    # 5w of work split about evenly, as the threads measured themselves
    run = skewed["dynamic"]
    per = run.trace.imbalance(per_thread=True)
    per = per[per["parallel_id"] == dynamic["parallel_id"]].sort_values("thread_num")
    assert per["busy_ns"].to_numpy() == pytest.approx(run.busy, rel=0.05)
    assert dynamic["imbalance"] == pytest.approx(run.expected()["imbalance"], rel=0.10)


def test_utilisation_over_time(skewed):
    run = skewed["static"]
    t = run.trace
    bin_ns = 5_000_000
    u = t.utilisation(bin_ns=bin_ns)
    states = ["busy_ns", "barrier_wait_ns", "sync_wait_ns", "lock_wait_ns", "idle_ns"]
    assert (u[states].sum(axis=1) == u["end_ns"] - u["begin_ns"]).all()
    assert (u[states] >= 0).all().all()
    totals = t.thread_states()
    by_thread = u.groupby("thread")[states].sum().reset_index()
    assert (by_thread[states].to_numpy() == totals[states].to_numpy()).all()
    # Over time, on the program's clock: thread 0 works b0 from its start, then
    # waits at the barrier until the region ends.
    origin = t.meta["origin_mono_ns"]
    work_end = run.start[0] - origin + run.busy[0]
    region_end = loop_region(t)["begin_ns"] + loop_region(t)["duration_ns"]
    zero = u[u["thread"] == 0]
    working = zero[(zero["begin_ns"] >= run.start[0] - origin + bin_ns)
                   & (zero["end_ns"] <= work_end - bin_ns)]
    waiting = zero[(zero["begin_ns"] >= work_end + bin_ns)
                   & (zero["end_ns"] <= region_end - bin_ns)]
    assert len(working) >= 4 and len(waiting) >= 10
    assert (working["busy_ns"] == bin_ns).all()
    assert (waiting["barrier_wait_ns"] == bin_ns).all()


def test_constructs_per_construct_and_per_source(skewed):
    t, measured = skewed["static"].trace, skewed["static"].busy
    c = t.constructs().set_index(["construct", "kind"])
    assert list(c.columns) == ["count", "total_ns", "mean_ns", "p50_ns", "p95_ns", "max_ns"]
    assert c.loc[("parallel region", "team"), "count"] == 2
    # one vocabulary for every libomp version; the runtime's own names with raw=True
    assert c.loc[("sync", "barrier_implicit"), "count"] == 4
    raw = t.constructs(raw=True).set_index(["construct", "kind"])
    assert raw.loc[("sync", "barrier_implicit_parallel"), "count"] == 4
    assert "loop_static" not in c.index.get_level_values("kind")
    assert raw.loc[("work", "loop_static"), "count"] == c.loc[("work", "loop"), "count"]
    loop = c.loc[("work", "loop")]
    # the loop is nowait: each thread's loop lasts its own work
    assert loop["count"] == 2
    assert loop["total_ns"] == pytest.approx(sum(measured), rel=0.05)
    assert loop["max_ns"] == pytest.approx(max(measured), rel=0.05)
    assert loop["p50_ns"] == pytest.approx(sum(measured) / 2, rel=0.05)
    s = t.constructs(by="source")
    rows = s[(s["construct"] == "work") & (s["kind"] == "loop")]
    (row,) = rows.itertuples()
    # one source location (known.c's skewed(): the function's name needs the binary,
    # tests/tool/test_attribution.py)
    assert row.count == 2
    assert row.total_ns == loop["total_ns"]
    # every instance is counted once whatever the grouping
    assert s["count"].sum() == c["count"].sum()


def test_task_duration_histogram():
    t, stdout = known("tasks", "tasks", 20, SHORT_US, 10, LONG_US)
    measured = np.array(printed(stdout, "task_ns"))
    hist = t.task_granularity()
    assert hist.attrs["tasks"] == hist.attrs["ran"] == 30
    edges = np.append(hist["lo_ns"].to_numpy(), hist["hi_ns"].iloc[-1])
    # log-spaced bins in whole nanoseconds, enough of them to show a distribution,
    # every decade the start of one
    steps = np.diff(np.log10(edges))
    assert steps == pytest.approx(np.full(len(steps), steps[0]), abs=1e-5)
    assert len(hist) >= metrics.TASK_BINS and hist["lo_ns"].dtype == np.int64
    assert 1_000_000 in edges
    # the bins of the durations the tasks measured themselves...
    assert hist["tasks"].tolist() == np.histogram(measured, edges)[0].tolist()
    # ...which are the designed ones: 200 us below 1 ms, 2 ms above
    assert hist.loc[hist["hi_ns"] <= 1e6, "tasks"].sum() >= 18
    assert hist.loc[hist["lo_ns"] >= 1e6, "tasks"].sum() >= 9
    assert hist["busy_ns"].sum() == pytest.approx(measured.sum(), rel=0.05)
    # Tasks run inside the barrier of `single`: their time is busy, not waiting.
    ran = metrics.task_runs(t)["run_ns"].sum()
    assert ran == pytest.approx(measured.sum(), rel=0.05)
    assert t.thread_states()["busy_ns"].sum() >= ran
    assert hist["task_share"].sum() == pytest.approx(1.0)
    custom = t.task_granularity(bins=[5e4, 5e5, 5e6, 5e7])
    assert custom["tasks"].tolist() == np.histogram(measured, [5e4, 5e5, 5e6, 5e7])[0].tolist()
    assert t.task_granularity(bins=4)["tasks"].sum() == 30
    with pytest.raises(ValueError, match="increasing edges"):
        t.task_granularity(bins=[5.0, 1.0])
    # Tasks of hundreds of microseconds cost next to nothing to create; empty
    # tasks cost about as much to create as to run.
    long_share = hist.attrs["creation_overhead_share"]
    small, _ = known("tasks-empty", "tasks", 2000, 0, 0, 0)
    tiny = small.task_granularity().attrs
    assert 0 < long_share < 0.01
    assert tiny["create_ns"] > 0 and tiny["creation_overhead_share"] > 20 * long_share


def test_lock_hold_and_wait_times():
    t, stdout = known("lock", "lock", TAKES, HOLD_US)
    (held,) = printed(stdout, "held_ns")
    lc = t.lock_contention()
    (lock,) = lc[lc["kind"] == "lock"].itertuples()
    assert lock.acquisitions == 2 * TAKES and lock.threads == 2
    # the program's own measurement of the total, and the designed hold (a busy
    # machine stretches some holds: the median stays)
    assert lock.hold_total_ns == pytest.approx(held, rel=0.10)
    assert lock.hold_p50_ns == pytest.approx(HOLD_US * 1000, rel=0.10)
    assert lock.hold_mean_ns == pytest.approx(held / (2 * TAKES), rel=0.10)
    assert lock.top_holder in (0, 1) and 0.5 <= lock.top_holder_share <= 1
    assert lock.wait_total_ns > 0 and lock.wait_max_ns >= lock.wait_p95_ns
    assert lock.location and lock.wait_id == t.mutex()["wait_id"].iloc[0]
    # the threads' time waiting for it is in their states
    totals = t.thread_states()
    assert totals["lock_wait_ns"].sum() == pytest.approx(lock.wait_total_ns, rel=0.01)


@pytest.mark.pythons
def test_summary_and_html(skewed):
    t = skewed["static"].trace
    s = t.summary()
    text = str(s)
    for title in ("Time per construct", "Time per source location", "Threads: time per state",
                  "Parallel regions per location", "Advice"):
        assert title in text
    worst = re.search(r"most thread time not working: 1 region of [\d.]+ ms on 2 threads at "
                      r"known\+0x\w+: .* the busiest thread works ([\d.]+)x the mean",
                      "\n".join(s.headline()))
    assert float(worst.group(1)) == pytest.approx(loop_region(t)["imbalance"], abs=0.01)
    html = s._repr_html_()
    assert html.count("<table") == 4 and ">loop<" in html and "loop_static" not in html
    assert s.tasks is None and s.locks is None and not s.notes
    page = t._repr_html_()
    assert "ompt_py.Trace" in page and "Top constructs" in page and str(t.pids[0]) in page


# ---- bad input ----------------------------------------------------------------------------


def test_missing_events_are_named(skewed):
    t = skewed["static"].trace
    lacking = without(t, "sync_region_wait")
    for analysis in (lacking.imbalance, lacking.utilisation):
        with pytest.raises(ompt_py.MissingEventsError, match="sync_region_wait") as e:
            analysis()
        assert e.value.missing == ("sync_region_wait",)
        assert isinstance(e.value, ompt_py.OmptPyError)
        assert "the records were lost" in str(e.value)
    assert len(lacking.constructs())  # needs nothing in particular
    s = lacking.summary()
    assert s.regions is None and s.threads is None
    assert any("sync_region_wait" in n for n in s.notes)
    # a runtime that refused the callback is named as the reason
    meta = copy.deepcopy(t.meta)
    for rt in meta["processes"][0]["runtimes"]:
        rt["callbacks"]["sync_region_wait"] = "never"
    refused = subset(t, t.events["event"] != EVENT_CODES["sync_region_wait"], meta)
    with pytest.raises(ompt_py.MissingEventsError, match=r"sync_region_wait \(never\)"):
        refused.imbalance()
    tasks, _ = known("tasks-few", "tasks", 4, 10, 0, 0)
    with pytest.raises(ompt_py.MissingEventsError, match="task_schedule"):
        without(tasks, "task_schedule").task_granularity()
    lock, _ = known("lock-few", "lock", 2, 10)
    with pytest.raises(ompt_py.MissingEventsError, match="mutex_released"):
        without(lock, "mutex_released").lock_contention()


def test_empty_trace(skewed):
    t = skewed["static"].trace
    empty = subset(t, np.zeros(len(t.events), bool))
    for result in (empty.constructs(), empty.constructs(by="source"), empty.imbalance(),
                   empty.imbalance(per_thread=True), empty.task_granularity(),
                   empty.lock_contention(), empty.utilisation()):
        assert result.empty
    s = empty.summary()
    assert "0 events" in str(s) and s.regions is None and s.tasks is None
    assert "0 events" in empty._repr_html_()
    for plot in (empty.plot_timeline, empty.plot_states, empty.plot_imbalance,
                 empty.plot_task_durations):
        assert plot().axes


def test_single_thread_trace():
    # Regions of one thread have no barrier: no sync_region events at all
    # (OMP_THREAD_LIMIT=1).
    t, stdout = known("skewed-one-thread", "skewed", 200, 5)
    assert "sync_region_wait" not in tables.present_events(t)
    region = loop_region(t)
    assert region["threads"] == 1 and region["imbalance"] == 1.0 and region["lost_ns"] == 0
    assert region["barrier_wait_share"] == 0
    assert region["busy_mean_ns"] == pytest.approx(printed(stdout, "busy_ns")[0], rel=0.05)
    totals = t.thread_states()
    assert totals["thread"].tolist() == [0]
    assert len(t.plot_timeline().axes[0].collections) == 1
    assert "1 thread(s)" in str(t.summary())


def test_trace_cut_off_in_the_middle_of_a_region(skewed):
    # Under dynamic scheduling each chunk is an event: the trace goes on to the cut.
    t = skewed["dynamic"].trace
    loop = loop_region(t)
    middle = loop["begin_ns"] + W_NS  # both threads are busy
    cut = subset(t, t.events["time_ns"] < middle)
    regions = cut.parallel_regions()
    assert len(regions) == 1 and regions.attrs["unmatched_begins"] == 1
    # the cut region is reported, measured up to the end of the trace
    im = cut.imbalance()
    assert len(im) == 2
    last = im.sort_values("begin_ns").iloc[-1]
    assert not last["complete"] and last["threads"] == 2
    assert last["busy_max_ns"] == pytest.approx(W_NS, rel=0.15)
    assert 1 <= last["imbalance"] < 1.3  # both threads work (the worker may start late)
    per = cut.imbalance(per_thread=True)
    per = per[per["parallel_id"] == last["parallel_id"]]
    assert not per["complete"].any() and (per["end_ns"] == cut.events["time_ns"].max()).all()
    u = cut.utilisation()
    states = ["busy_ns", "barrier_wait_ns", "sync_wait_ns", "lock_wait_ns", "idle_ns"]
    assert (u[states].sum(axis=1) == u["end_ns"] - u["begin_ns"]).all()
    # the note says what the window did, only where it changes an answer
    assert cut.summary().notes == ["the trace window cut parallel regions: 1 had not ended "
                                   "when the trace did (measured up to its end)"]
    assert not t.summary().notes
