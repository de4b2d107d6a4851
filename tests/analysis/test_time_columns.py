"""Every public table gives its times as integer nanoseconds (``*_ns`` columns of
pandas' Int64 or int64, <NA> where there is no value), never floats: on stored
traces of every kind (regions, tasks, locks, offload, samples, markers, a window
that cut regions, no tasks) and on profiles."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import load_stored

TRACES = ["inprocess-mixed-libomp19", "inprocess-mixed-libomp16", "sampled-imbalance-libomp19",
          "offload.omptraw", "regions-inprocess", "pystacks-inprocess", "window-libomp19",
          "known-skewed-static", "report-cxx"]
TABLES = {
    "parallel_regions": {}, "implicit_tasks": {}, "tasks": {}, "work": {}, "sync": {},
    "mutex": {}, "task_graph": {}, "user_regions": {}, "samples": {},
    "state_breakdown": {}, "target_regions": {}, "data_ops": {}, "kernels": {},
    "device_ops": {}, "constructs": {}, "constructs/source": {"by": "source"},
    "constructs/python": {"by": "python"}, "constructs/raw": {"raw": True},
    "imbalance": {}, "imbalance/per_thread": {"per_thread": True},
    "imbalance/source": {"by": "source"}, "imbalance/python": {"by": "python"},
    "task_granularity": {}, "lock_contention": {}, "lock_contention/python": {"by": "python"},
    "utilisation": {}, "thread_states": {}, "advice": {}, "mpi_calls": {},
}
PROFILE_TABLES = {"constructs": {}, "constructs/source": {"by": "source"},
                  "imbalance": {}, "imbalance/per_thread": {"per_thread": True},
                  "task_granularity": {}, "lock_contention": {}, "advice": {}}


def check(table: pd.DataFrame, what: str) -> None:
    times = [c for c in table.columns if str(c).endswith("_ns")]
    wrong = {c: str(table[c].dtype) for c in times if str(table[c].dtype) not in ("int64",
                                                                                  "Int64")}
    assert not wrong, f"{what}: {wrong}"
    assert "e+" not in table[times].to_string(), what  # no scientific notation


@pytest.mark.parametrize("name", TRACES)
def test_the_tables_of_a_trace(name):
    from ompt_py.errors import MissingEventsError

    t = load_stored(name)
    checked = 0
    for what, kwargs in TABLES.items():
        try:
            table = getattr(t, what.split("/")[0])(**kwargs)
        except MissingEventsError:
            continue  # the trace lacks the events of this answer (it says so)
        check(table, f"{name}: {what}")
        checked += 1
    assert checked >= len(TABLES) - 6


@pytest.mark.parametrize("name", ["profile-mixed", "profile-known-tasks", "profile-cxx"])
def test_the_tables_of_a_profile(name):
    prof = load_stored(name)
    for what, kwargs in PROFILE_TABLES.items():
        check(getattr(prof, what.split("/")[0])(**kwargs), f"{name}: {what}")
