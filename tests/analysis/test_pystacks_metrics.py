"""The analyses in Python terms: ``constructs(by="python")``, ``imbalance()`` and
``lock_contention()`` per Python location, on the stored trace of
tests/programs/pystacks_app.py (pystacks-inprocess: each line that starts
constructs is marked ``at: NAME``, its constructs are known from the test
extension's workloads), and on a trace without Python stacks (known-lock).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import app_location, load_stored

from ompt_py.analysis import metrics

NO_PYTHON = "(no Python stack)"


at = app_location  # the py_location of the app's line marked `at: NAME`


@pytest.fixture(scope="module")
def app():
    return load_stored("pystacks-inprocess")


@pytest.fixture(scope="module")
def plain():
    """A trace without Python stacks (the program is C: known.c lock)."""
    return load_stored("known-lock")


def counts(table: pd.DataFrame, construct: str) -> dict[str, int]:
    rows = table[table["construct"] == construct]
    return rows.groupby("py_location")["count"].sum().to_dict()


def test_constructs_by_python_location(app):
    by = app.constructs(by="python")
    assert list(by.columns[:7]) == ["pid", "py_location", "py_time_ns", "construct", "kind",
                                    "location", "function"]
    # w.parallel(2) from helper() and w.parallel(1) in the marker, both at regions():
    # one line; parallel_nogil(2) from the main thread and (3) from the worker thread
    assert counts(by, "parallel region") == {
        at("regions", "regions"): 3, at("nogil", "without_gil"): 5,
        at("critical", "locked"): 1, at("single", "main"): 3, at("tasks", "main"): 1,
        at("nested", "main"): 3,  # the outer region and the two nested in it
        at("lambda", "main.<locals>.<lambda>"): 1, at("generator", "generated"): 1,
        at("coroutine", "coroutine"): 1, "<generated>:2 in gone": 1}
    assert counts(by, "task") == {at("tasks", "main"): 4, at("serial-tasks", "main"): 3}
    assert counts(by, "user region") == {at("marker", "main"): 1}
    assert counts(by, "mutex wait") == {at("critical", "locked"): 2 * 2 * 20}
    assert counts(by, "work") == {at("single", "main"): 2 * 3, at("tasks", "main"): 2}
    # every instance once, as per construct
    assert by["count"].sum() == app.constructs()["count"].sum()
    # the native location beside the Python one: the critical section's code
    (critical,) = by[(by["construct"] == "mutex wait") & (by["kind"] == "critical")].itertuples()
    assert critical.py_location == at("critical", "locked")
    assert critical.location.startswith("ompt_work_ext")


def test_python_time_is_the_time_of_what_the_line_started(app):
    by = app.constructs(by="python")
    time = by.drop_duplicates("py_location").set_index("py_location")["py_time_ns"]
    regions = app.parallel_regions()
    own = regions[~regions["py_inherited"]]
    # regions of one line one after another: their durations add up
    for line in (at("regions", "regions"), at("single", "main"), at("nogil", "without_gil")):
        assert time[line] == own.loc[own["py_location"] == line, "duration_ns"].sum()
    # the nested regions run inside the outer one: the line's time is the outer's
    (outer,) = own.loc[(own["py_location"] == at("nested", "main")) & (own["level"] == 1),
                       "duration_ns"]
    assert time[at("nested", "main")] == outer
    (marker,) = app.user_regions()["duration_ns"]
    assert time[at("marker", "main")] == marker
    tasks = app.tasks()
    serial = tasks.loc[tasks["py_location"] == at("serial-tasks", "main"), "run_ns"].sum()
    assert 0 < time[at("serial-tasks", "main")] == serial
    # the initial task was started by no Python line: no time, listed last
    assert pd.isna(time[NO_PYTHON]) and by["py_location"].iloc[-1] == NO_PYTHON
    assert "initial" in set(by.loc[by["py_location"] == NO_PYTHON, "kind"])
    stated = by["py_time_ns"].dropna().to_numpy()
    assert (np.diff(stated) <= 0).all()


def test_imbalance_per_region_and_per_python_location(app):
    per_region = app.imbalance()
    regions = app.parallel_regions().set_index("parallel_id")
    for r in per_region.itertuples():
        assert r.py_location == regions.loc[r.parallel_id, "py_location"]
        assert r.py_inherited == regions.loc[r.parallel_id, "py_inherited"]
    assert per_region["py_inherited"].sum() == 1  # the region nested by a worker
    by = app.imbalance(by="python")
    assert by["regions"].sum() == len(per_region)
    row = by.set_index(["py_location", "location"]).loc[at("single", "main")]
    (single,) = row.itertuples()
    mine = per_region[per_region["py_location"] == at("single", "main")]
    assert single.regions == 3 and single.lost_ns == mine["lost_ns"].sum()
    assert single.imbalance == pytest.approx(mine["imbalance"].mean())
    assert single.imbalance_max == mine["imbalance"].max()
    # the nested regions have a location of their own: two rows for the line
    assert len(by[by["py_location"] == at("nested", "main")]) == 2
    assert (np.diff(by["lost_ns"].to_numpy()) <= 0).all()
    source = app.imbalance(by="source")
    assert "py_location" not in source and source["regions"].sum() == len(per_region)
    with pytest.raises(ValueError, match="per_thread"):
        app.imbalance(per_thread=True, by="python")


def test_lock_contention_names_the_python_line(app):
    locks = app.lock_contention()
    assert set(locks["kind"]) == {"critical", "lock"}
    assert (locks["py_location"] == at("critical", "locked")).all()
    by = app.lock_contention(by="python")
    assert list(by.columns[:4]) == ["pid", "py_location", "kind", "wait_id"]
    assert (by["py_location"] == at("critical", "locked")).all()
    assert by.set_index("kind")["acquisitions"].to_dict() == {"critical": 40, "lock": 40}
    assert by["location"].str.startswith("ompt_work_ext").all()
    source = app.lock_contention(by="source")
    assert len(source) == 2 and source["acquisitions"].sum() == 80


def test_python_stack_of_what_ran_when(app):
    regions = app.parallel_regions()
    worker = regions[regions["py_location"] == at("nogil", "without_gil")]
    inside = (worker["begin_ns"] + worker["duration_ns"] // 2).to_numpy()
    got = metrics.python_stacks_at(app, worker["pid"].to_numpy(),
                                   worker["encountering_thread"].to_numpy(), inside)
    assert got.tolist() == worker["py_stack"].tolist()
    # before the first region, and on a thread that never ran: nothing
    first = regions["begin_ns"].min()
    none = metrics.python_stacks_at(app, regions["pid"].to_numpy()[:2], np.array([0, 99]),
                                    np.array([first - 1, first + 1]))
    assert none.isna().all()


def test_a_trace_without_python_stacks(plain):
    by = plain.constructs(by="python")
    assert set(by["py_location"]) == {NO_PYTHON} and by["py_time_ns"].isna().all()
    assert by["count"].sum() == plain.constructs()["count"].sum()
    (lock,) = plain.lock_contention().itertuples()
    assert pd.isna(lock.py_location) and lock.location  # units.TEXT: NaN for no text
    assert set(plain.lock_contention(by="python")["py_location"]) == {NO_PYTHON}
    assert plain.imbalance()["py_location"].isna().all()
    (region,) = plain.imbalance(by="python").itertuples()
    assert region.py_location == NO_PYTHON and region.regions == 1
    with pytest.raises(ValueError, match="'construct', 'source' or 'python'"):
        plain.constructs(by="line")
