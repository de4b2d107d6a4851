"""records.of_events: which records are of some events, the records' field read
in place, as np.isin tells it; records.census and event_groups (C, one pass
each): the counts numpy's bincount gives, the thread keys numpy's unique of the
keys, the rows of_events finds (census: of the rare events); take_records
(numpy's take)."""

from __future__ import annotations

import numpy as np
import pytest

from ompt_py import _core
from ompt_py.records import (
    EVENT_DTYPE,
    EVENT_NUMBERS,
    RAW_DTYPE,
    census,
    event_groups,
    of_events,
)


@pytest.mark.parametrize("events", [[], [3], [3, 7, 40], [1000]])
def test_of_events_is_isin(events):
    rng = np.random.default_rng(len(events))
    records = np.zeros(10_000, EVENT_DTYPE)
    records["event"] = rng.integers(0, 45, len(records))
    for codes in (records["event"], np.ascontiguousarray(records["event"])):
        got = of_events(codes, events)
        assert got.dtype == bool
        np.testing.assert_array_equal(got, np.isin(codes, events))


def _records(n: int, seed: int) -> np.ndarray:
    """Records of events 0 to 44, and a few of numbers no event has (yet)."""
    rng = np.random.default_rng(seed)
    records = np.zeros(n, RAW_DTYPE)
    records["event"] = rng.integers(0, 45, n)
    records["event"][rng.integers(0, n, n // 100)] = 65535
    return records


@pytest.mark.parametrize("n", [0, 1, 100_003])
def test_event_counts_and_groups_are_numpy_s(n):
    records = _records(n, n)
    counts = census(records).counts
    assert counts.dtype == np.int64 and len(counts) == EVENT_NUMBERS
    np.testing.assert_array_equal(counts, np.bincount(records["event"], minlength=EVENT_NUMBERS))
    groups = [[3, 7, 40], [65535], [1000], [0]]
    for given in (counts, None):
        found = event_groups(records, groups, given)
        assert [rows.dtype for rows in found] == [np.int64] * len(groups)
        for codes, rows in zip(groups, found):
            np.testing.assert_array_equal(rows, np.flatnonzero(of_events(records["event"], codes)))


def test_event_groups_of_a_strided_view_are_its_own():
    """A view of every other record (not contiguous): its own rows, not the base's."""
    records = _records(10_000, 1)
    view = records[::2]
    rows, = event_groups(view, [[5]])
    np.testing.assert_array_equal(rows, np.flatnonzero(view["event"] == 5))


def test_event_groups_refusals():
    records = _records(1000, 2)
    with pytest.raises(ValueError, match="two groups"):
        event_groups(records, [[1, 2], [2]])
    table = np.zeros(EVENT_NUMBERS, np.uint8)
    table[3] = 1
    short = np.empty(int((records["event"] == 3).sum()) - 1, np.int64)
    with pytest.raises(ValueError, match="do not fill its output exactly"):
        _core.event_rows(records, table, [short])
    table[4] = 2  # a group without an output
    with pytest.raises(ValueError, match="out of range"):
        _core.event_rows(records, table, [np.empty(int((records["event"] == 3).sum()), np.int64)])
    with pytest.raises(ValueError, match="1 to 255 groups"):
        _core.event_rows(records, table, [])


@pytest.mark.parametrize("n", [0, 1, 100_003])
def test_census_keeps_the_rows_of_the_rare_events(n):
    """The rows of each event number of 1 to rare_max records, those of_events finds;
    none of the others (events 0 to 44 about 2,200 records each, 65535 about 1,000
    and a few of 3 records, with rare_max 1,500: some of both)."""
    records = _records(n, n)
    records["event"][records["event"] == 9] = 8
    records["event"][np.arange(0, n, max(n // 3, 1))[:3]] = 9
    counts = np.empty(EVENT_NUMBERS, np.int64)
    for rare_max in (0, 1, 1500, 1 << 20):
        _, rare = _core.census(records, None, 0, counts, rare_max)
        want = np.flatnonzero((counts >= 1) & (counts <= rare_max))
        assert [number for number, _ in rare] == want.tolist()
        for number, rows in rare:
            np.testing.assert_array_equal(np.frombuffer(rows, np.int64),
                                          np.flatnonzero(records["event"] == number))
    np.testing.assert_array_equal(counts, np.bincount(records["event"], minlength=EVENT_NUMBERS))
    found = census(records)
    assert sorted(found.rare) == np.flatnonzero((counts >= 1) & (counts <= 4096)).tolist()


def test_census_refusals():
    records = _records(1000, 2)
    counts = np.zeros(EVENT_NUMBERS, np.int64)
    with pytest.raises(ValueError, match="65536"):
        _core.census(records, None, 0, np.zeros(10, np.int64), 10)
    with pytest.raises(ValueError, match="64-byte records"):
        _core.census(np.zeros(10, np.uint8), None, 0, counts, 10)
    with pytest.raises(ValueError, match="0 or more"):
        _core.census(records, None, 0, counts, -1)
    with pytest.raises(ValueError, match="int32 per record"):
        _core.census(records, np.zeros(len(records) + 1, np.int32), 0, counts, 10)
    with pytest.raises(ValueError, match="int32 per record"):
        _core.census(records, np.zeros(len(records), np.int64), 0, counts, 10)


@pytest.mark.parametrize("n", [0, 1, 100_003])
def test_census_thread_keys_are_numpys_unique(n):
    """In runs of a thread (skipped over) and scattered, of one process or several,
    with key 0 (pid 0, thread 0) and thread numbers up to 2^32 - 1; enough of them to
    grow the C hash set several times."""
    rng = np.random.default_rng(n)
    records = _records(n, n)
    records["thread"] = np.repeat(rng.integers(0, 5000, n // 50 + 1), 50)[:n]
    records["thread"][rng.integers(0, n, n // 10) if n else []] = rng.integers(0, 1 << 32, n // 10)
    pids = rng.choice(np.array([0, 7, -1, 1 << 30], np.int32), n)
    for given, pid, want in ((None, 42, (42 << 32) | records["thread"].astype(np.int64)),
                             (pids, 0, (pids.astype(np.int64) << 32)
                              | records["thread"].astype(np.int64))):
        np.testing.assert_array_equal(census(records, given, pid).threads, np.unique(want))


def test_take_records_is_numpy_s_take():
    """_core.take_records copies the records at some rows (in any order, repeated)
    as numpy takes them; it refuses a row outside the records and an output of
    another length."""
    records = _records(10_000, 3)
    records["thread"] = np.arange(len(records))
    rows = np.random.default_rng(4).integers(0, len(records), 5000)
    out = np.empty(len(rows), records.dtype)
    _core.take_records(records, rows, out)
    assert out.tobytes() == records[rows].tobytes()
    _core.take_records(records, rows[:0], out[:0])
    with pytest.raises(IndexError, match="outside the records"):
        _core.take_records(records, np.array([0, len(records)]), out[:2])
    with pytest.raises(IndexError, match="outside the records"):
        _core.take_records(records, np.array([-1]), out[:1])
    with pytest.raises(ValueError, match="a record per row"):
        _core.take_records(records, rows[:3], out[:2])
