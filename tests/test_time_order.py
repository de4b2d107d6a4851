"""records.time_order: the records' positions by time, stable, as numpy's stable
argsort orders them, whether _core.time_order merges their runs (the threads'
buffers, each in time order) or numpy sorts them (times in no few runs)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import as_written, load_stored

from ompt_py import _core
from ompt_py.records import EVENT_DTYPE, time_order


def reference(times: np.ndarray) -> np.ndarray:
    return np.argsort(np.ascontiguousarray(times), kind="stable")


def interleaved(rng: np.random.Generator, n: int, threads: int, ties: int) -> np.ndarray:
    """Times as threads write them (conftest.as_written; times from 0 to ``ties``:
    many equal)."""
    times = rng.integers(0, ties, n)
    return times[as_written(rng.integers(0, threads, n), times, rng)]


@pytest.mark.parametrize("threads", [1, 2, 3, 7, 40])
def test_runs_of_threads_are_merged_in_c_as_numpy_sorts_them(threads):
    rng = np.random.default_rng(threads)
    for _ in range(40):
        times = interleaved(rng, int(rng.integers(0, 400)), threads, int(rng.integers(1, 60)))
        out = np.empty(len(times), np.int64)
        assert _core.time_order(times, out), "a few chains of runs: merged"
        np.testing.assert_array_equal(out, reference(times))
        np.testing.assert_array_equal(time_order(times), reference(times))


def test_a_field_of_the_records_is_read_in_place():
    records = np.zeros(1000, EVENT_DTYPE)
    records["time_ns"] = interleaved(np.random.default_rng(5), 1000, 2, 30)
    out = np.empty(1000, np.int64)
    assert _core.time_order(records["time_ns"], out)
    np.testing.assert_array_equal(out, reference(records["time_ns"]))


def test_times_in_no_few_runs_are_sorted_by_numpy():
    times = np.random.default_rng(3).integers(0, 50, 5000)
    out = np.full(len(times), -7, np.int64)
    assert not _core.time_order(times, out)
    assert (out == -7).all(), "left untouched"
    np.testing.assert_array_equal(time_order(times), reference(times))
    descending = np.arange(200, 0, -1)  # 200 runs of one, no chain longer than one
    np.testing.assert_array_equal(time_order(descending), reference(descending))
    # two threads' times, one record of each in turn: two chains, of runs too short
    # to be worth a list of them
    alternate = np.stack([np.arange(5000), np.arange(5000) - 3], axis=1).ravel()
    assert not _core.time_order(alternate, np.empty(len(alternate), np.int64))
    np.testing.assert_array_equal(time_order(alternate), reference(alternate))


def test_empty_and_one():
    for times in (np.zeros(0, np.int64), np.array([5], np.int64)):
        np.testing.assert_array_equal(time_order(times), reference(times))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="int64 of one dimension"):
        _core.time_order(np.zeros(3, np.int32), np.empty(3, np.int64))
    with pytest.raises(ValueError, match="time_order: out"):
        _core.time_order(np.zeros(3, np.int64), np.empty(4, np.int64))


@pytest.mark.parametrize("name", ["inprocess-mixed-libomp19", "known-tasks",
                                  "parallel-300.omptraw"])
def test_stored_traces(name):
    times = load_stored(name).events["time_ns"]
    np.testing.assert_array_equal(time_order(times), reference(times))
