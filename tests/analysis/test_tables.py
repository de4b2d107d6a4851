"""The paired tables of a Trace: one row per instance, parents and nesting,
wait and hold times, task dependences; unmatched begins and ends counted.

On stored traces (tests/data) of libomp 19 and 16: the programs of
tests/programs under the tool, and an in-process window.  Source attribution
and place info need the program itself: tests/tool/test_attribution.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import STORED_RUNTIMES, load_stored, stored_output

import ompt_py
from ompt_py.records import EVENT_CODES, EVENT_DTYPE, MUTEX_KINDS

on_both = pytest.mark.parametrize(
    "runtime", [pytest.param(v, id=f"libomp{v}") for v in STORED_RUNTIMES])


def stored(name, runtime):
    return load_stored(f"{name}-libomp{runtime}")


@pytest.mark.pythons
@on_both
def test_nested_regions_have_parents_and_levels(runtime):
    t = stored("nested", runtime)
    r = t.parallel_regions()
    assert r.attrs == {"unmatched_begins": 0, "unmatched_ends": 0}
    outer = r[r["level"] == 1]
    inner = r[r["level"] == 2]
    assert len(outer) == 1 and len(inner) == 2
    assert outer["parent_id"].isna().all()
    assert (inner["parent_id"] == outer["parallel_id"].iloc[0]).all()
    assert (r["requested_team_size"] == 2).all() and (r["team_size"] == 2).all()
    assert (r["invoker"] == "runtime").all()  # clang-built code
    assert (r["begin_ns"] <= r["end_ns"]).all()
    for row in inner.itertuples():  # an inner region lies within its parent
        assert outer["begin_ns"].iloc[0] <= row.begin_ns and row.end_ns <= outer["end_ns"].iloc[0]
    # each region has its implicit tasks, one per thread of the team
    it = t.implicit_tasks()
    per_region = it[it["team_size"] == 2].groupby("parallel_id").size()
    assert sorted(per_region.reindex(r["parallel_id"]).tolist()) == [2, 2, 2]


@on_both
def test_contended_lock_waits_add_up_to_the_blocked_time(runtime):
    t = stored("contended", runtime)  # contended 200 50
    measured = float(stored_output(f"contended-libomp{runtime}").split()[1])
    m = t.mutex()
    locks = m[m["kind"] == "lock"]
    assert len(locks) == 400
    assert locks["wait_ns"].notna().all() and locks["hold_ns"].notna().all()
    assert (locks["wait_ns"] >= 0).all() and (locks["hold_ns"] >= 45_000).all()
    waited = float(locks["wait_ns"].sum())
    assert measured > 1e6, "the threads were expected to contend"
    assert abs(waited - measured) <= 0.10 * measured, (waited, measured)


def test_a_table_forgotten_is_made_again_alike():
    """A pairing's pairs leave the cache once its table is made (tables._scoped);
    the table forgotten (cache.forget, as a partition's summary does) is paired
    anew, alone, into the same rows."""
    from ompt_py.analysis import cache, tables

    t = stored("contended", STORED_RUNTIMES[0])
    first = tables.mutex(t)
    assert tables.mutex(t) is first and len(first)  # kept
    assert "mutex_wait" not in tables.paired(t).pairs and "parallel" in tables.paired(t).pairs
    cache.forget(t, tables.mutex)
    assert not cache.made(t, tables.mutex)
    again = tables.mutex(t)
    assert again is not first
    pd.testing.assert_frame_equal(again, first)
    # the waits' regions (a lookup of the pass) leave it too, and are found anew
    syncs = tables.sync_intervals(t).table
    assert "waits' region" not in tables.paired(t).found and syncs["wait_ns"].sum() > 0
    cache.forget(t, tables.sync_intervals)
    pd.testing.assert_frame_equal(tables.sync_intervals(t).table, syncs)


def test_keep_drops_every_table_but_those_named():
    """cache.keep (as a partition's summary does before its tasks and its locks)
    leaves the tables named, and the others are made again alike when asked for."""
    from ompt_py.analysis import cache, tables

    t = stored("contended", STORED_RUNTIMES[0])
    mutex, order, regions = tables.mutex(t), tables.order(t), tables.region_intervals(t)
    cache.keep(t, tables.mutex, tables.order)
    assert cache.made(t, tables.mutex) and cache.made(t, tables.order)
    assert not cache.made(t, tables.region_intervals)
    assert tables.mutex(t) is mutex and tables.order(t) is order
    again = tables.region_intervals(t)
    assert again is not regions
    pd.testing.assert_frame_equal(again.table, regions.table)


def test_forget_and_keep_see_through_wrappers():
    """A @per_trace function wrapped again (functools.wraps, as bench/worker_memory.py
    wraps the analyses to measure them) names the same values: forget and keep
    drop them (they found them through one wrapper only, and forgot nothing)."""
    import functools

    from ompt_py.analysis import cache, tables

    def wrapped(fn):
        @functools.wraps(fn)
        def run(*args):
            return fn(*args)
        return run

    t = stored("contended", STORED_RUNTIMES[0])
    mutex = wrapped(tables.mutex)
    assert mutex(t) is tables.mutex(t)
    cache.forget(t, mutex)
    assert not cache.made(t, tables.mutex)
    tables.mutex(t), tables.order(t)
    cache.keep(t, wrapped(tables.order))
    assert not cache.made(t, mutex) and cache.made(t, tables.order)

def test_a_value_asked_for_by_several_threads_is_made_once():
    """Threads that ask for the same @per_trace value at once: the first makes it,
    the others wait for it and get the same object; other values are made beside."""
    import threading
    import time

    from ompt_py.analysis import cache

    t = stored("contended", STORED_RUNTIMES[0])
    calls, started = [], threading.Barrier(4)

    @cache.per_trace
    def slow(trace, n):
        calls.append(n)
        time.sleep(0.2)  # the other threads ask meanwhile
        return object()

    got = {}

    def ask(name, n):
        started.wait()
        got[name] = slow(t, n)

    threads = [threading.Thread(target=ask, args=(name, n))
               for name, n in (("a", 1), ("b", 1), ("c", 1), ("d", 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(calls) == [1, 2]
    assert got["a"] is got["b"] is got["c"] is slow(t, 1) and got["d"] is slow(t, 2)


def test_values_made_ahead():
    """cache.ahead: its makers run on a thread of their own while the body runs and
    are kept; that thread is gone at the end; a maker's error is raised by the body
    when it asks for that value, not by ahead.  A body that ends first stops them."""
    import threading
    import time

    from ompt_py.analysis import cache, tables

    t = stored("contended", STORED_RUNTIMES[0])
    made_on = []

    @cache.per_trace
    def failing(trace):
        made_on.append(threading.current_thread().name)
        raise ValueError("no such value")

    @cache.per_trace
    def last(trace):
        return threading.current_thread().name

    cache.forget(t, tables.mutex)
    with cache.ahead(t, tables.mutex, failing, last):
        while not cache.made(t, last):
            time.sleep(0.01)
    assert not [th for th in threading.enumerate() if th.name == "ompt-py: analyses ahead"]
    assert cache.made(t, tables.mutex) and last(t) == "ompt-py: analyses ahead"
    assert made_on == ["ompt-py: analyses ahead"]
    with pytest.raises(ValueError, match="no such value"):
        failing(t)
    assert made_on[1:] == [threading.main_thread().name]
    cache.forget(t, tables.mutex)
    with cache.ahead(t, lambda trace: time.sleep(0.3), tables.mutex):
        pass
    assert not cache.made(t, tables.mutex)


def test_acquisitions_at_one_clock_tick_pair_one_to_one():
    """Many acquisitions of one lock on one thread at the same time (a coarse clock,
    a synthetic trace): each wait pairs with one hold, in their order, so mutex()
    has a row per acquisition; pairing every wait with every hold of the same
    time gave n * n rows (61,620 tied events exhausted the memory of summary())."""
    n = 3000
    codes = [EVENT_CODES[e] for e in ("mutex_acquire", "mutex_acquired", "mutex_released")]
    ev = np.zeros(3 * n + 1, EVENT_DTYPE)
    ev["event"][:-1] = np.tile(codes, n)
    ev["event"][-1] = codes[2]  # a release without its acquisition: held before the window
    ev["kind"] = next(k for k, name in MUTEX_KINDS.items() if name == "lock")
    ev["u64a"], ev["time_ns"] = 0x1000, 7
    ev["codeptr"][0::3][:n] = np.arange(n)  # tells the acquisitions apart
    t = ompt_py.Trace.from_records(ev, {"processes": [{"pid": 1, "config": {}}]}, pids=1)
    m = t.mutex()
    assert len(m) == n
    assert (m["wait_ns"] == 0).all() and (m["hold_ns"] == 0).all()
    assert m["codeptr"].tolist() == list(range(n))  # each wait once, in order
    contention = t.lock_contention()
    assert contention["acquisitions"].tolist() == [n]


@pytest.mark.pythons
@on_both
def test_tasks_and_their_dependence_graph(runtime):
    t = stored("deps", runtime)
    tasks = t.tasks().sort_values("created_ns").reset_index(drop=True)
    assert len(tasks) == 4
    a, b, c, d = tasks["task_id"].tolist()
    assert [len(x) for x in tasks["dependences"]] == [1, 1, 3, 1]
    assert tasks["has_dependences"].eq(1).all()
    assert tasks["completed_ns"].notna().all() and tasks["run_ns"].gt(0).all()
    assert (tasks["first_start_ns"] >= tasks["created_ns"]).all()
    edges = set(zip(t.task_graph()["source_id"], t.task_graph()["sink_id"]))
    assert edges == {(a, c), (b, c), (c, d)}


@on_both
def test_sync_waits_lie_within_their_barriers(runtime):
    t = stored("barrier", runtime)  # barrier 3
    s = t.sync()
    assert s.attrs["unmatched_begins"] == 0 and s.attrs["unmatched_ends"] == 0
    explicit = s[s["kind"] == "barrier_explicit"]
    assert len(explicit) == 2 * 3
    assert ((s["wait_ns"] >= 0) & (s["wait_ns"] <= s["duration_ns"])).all()


@on_both
def test_unmatched_ends_of_an_in_process_window_are_counted(runtime):
    # The window ends right after a region: the worker's implicit-task end comes
    # with the next region, outside the window (`with ompt_py.trace(): w.parallel(2)`).
    t = stored("window", runtime)
    it = t.implicit_tasks()
    assert it.attrs["unmatched_begins"] >= 1
    assert len(t.parallel_regions()) == 2


@on_both
def test_teams_league_and_nesting(runtime):
    t = stored("teams", runtime)
    r = t.parallel_regions()
    assert r.attrs == {"unmatched_begins": 0, "unmatched_ends": 0}
    assert r["parallel_id"].is_unique
    (league,) = r[r["league"]].itertuples()
    assert league.level == 1 and league.requested_team_size == 2
    # each team is a region of the league; each opens its own parallel region inside
    teams = r[r["parent_id"] == league.parallel_id]
    assert len(teams) == 2 and (teams["level"] == 2).all()
    inner = r[r["parent_id"].isin(teams["parallel_id"])]
    assert len(inner) == 2 and (inner["level"] == 3).all()
    assert not r.loc[r["parallel_id"] != league.parallel_id, "league"].any()


def test_regions_of_gcc_built_code_on_libomp():
    """The tables take what gcc-built code shows on libomp (the runtime fallback):
    tests/programs/gomp/gomp_prog.c 7 90 under ompt-py run (the run itself:
    tests/live/test_fallback.py)."""
    regions = 7
    t = load_stored("gomp-prog")
    assert t.meta["processes"][0]["argv"][1:] == [str(regions), "90"]
    regions_table = t.parallel_regions()
    assert len(regions_table) == regions + 3
    assert set(regions_table["invoker"]) == {"program"}


@pytest.mark.parametrize("name", ["contended-libomp19", "export-mixed"])
def test_rows_of_and_threads_are_those_of_the_records(name, monkeypatch):
    """tables.rows_of finds each event's rows (and several events' together) whether
    census_of kept them (the rare events') or a pass finds them (none kept:
    RARE_ROWS 0); states.threads is numpy's unique of the records' keys
    (export-mixed: two processes)."""
    from ompt_py import records
    from ompt_py.analysis import states, tables
    for rare_rows in (records.RARE_ROWS, 0):
        monkeypatch.setattr(records, "RARE_ROWS", rare_rows)
        t = load_stored(name)  # a new trace: its census made with rare_rows
        ev = t.events
        present = [e for e, code in EVENT_CODES.items() if (ev["event"] == code).any()]
        assert len(present) >= 5
        kept = tables.census_of(t).rare
        assert bool(kept) == bool(rare_rows), "no rare event, or rows kept of none"
        keys = np.unique(t.pids.astype(np.int64) << 32 | ev["thread"].astype(np.int64))
        np.testing.assert_array_equal(states.threads(t), keys)
        for events in [[e] for e in present] + [present[:3], ["task_create", present[0]]]:
            want = np.flatnonzero(np.isin(ev["event"], [EVENT_CODES[e] for e in events]))
            np.testing.assert_array_equal(tables.rows_of(t, *events), want)
