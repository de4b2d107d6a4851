"""Begin/end pairing (analysis._pair, the C pass _core.pair) and the lookups the
tables are joined by (analysis._find), on hand-made rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ompt_py import _core, analysis


def _partners(groups: list[int], begins: list[bool]) -> list[int]:
    partner = np.empty(len(groups), np.intp)
    _core.pair(np.array(groups, np.int64), np.array(begins, bool), max(groups) + 1, partner)
    return partner.tolist()


def test_an_end_closes_the_latest_open_begin_of_its_group():
    # group 0: begin, begin, end, end (nested); group 1: end first (no begin),
    # then a begin that is never closed.
    groups = [0, 0, 1, 0, 1, 0]
    begins = [True, True, False, False, True, False]
    assert _partners(groups, begins) == [5, 3, -1, 1, -1, 0]


def test_a_group_number_out_of_range_is_an_error():
    partner = np.empty(2, np.intp)
    with pytest.raises(ValueError, match="out of range"):
        _core.pair(np.array([0, 2], np.int64), np.array([True, False]), 2, partner)


def _rows(events: list[tuple[int, str, int, int | None]]) -> pd.DataFrame:
    time, endpoint, thread, kind = zip(*events)
    return pd.DataFrame({"time_ns": np.array(time, np.int64),
                         "endpoint": pd.Categorical(endpoint, ["begin", "end"]),
                         "thread": np.array(thread, np.uint32),
                         "kind": pd.array(kind, dtype="UInt64")})


def test_pairs_in_begin_order_with_the_unmatched_counted():
    rows = _rows([(1, "end", 0, 7),      # its begin came before the window
                  (5, "begin", 1, 8),    # thread 1, kind 8: outer, same nanosecond as
                  (5, "begin", 1, 9),    # ... this one of another kind (recorded after it)
                  (6, "begin", 0, None),  # a missing key value is a key of its own
                  (7, "end", 1, 9), (8, "end", 0, None), (9, "end", 1, 8),
                  (10, "begin", 0, 7)])  # never ends
    iv = analysis._pair(rows, ["thread", "kind"])
    assert iv.table[["begin_ns", "end_ns", "duration_ns"]].to_numpy().tolist() == [
        [5, 9, 4], [5, 7, 2], [6, 8, 2]]
    assert iv.table["kind"].tolist() == [8, 9, pd.NA]
    assert list(iv.table.columns) == ["begin_ns", "thread", "kind", "end_ns", "duration_ns"]
    assert (iv.unmatched_begins, iv.unmatched_ends) == (1, 1)
    assert iv.open[["begin_ns", "thread"]].to_numpy().tolist() == [[10, 0]]


def test_find_matches_rows_by_every_column_and_never_a_missing_value():
    table = pd.DataFrame({"pid": [1, 1, 2, 1], "id": pd.array([10, 11, 10, 10], dtype="UInt64")})
    query = pd.DataFrame({"p": [2, 1, 1, 3, 1],
                          "q": pd.array([10, 10, None, 10, 11], dtype="UInt64")})
    assert analysis._find(table, query).tolist() == [2, 0, -1, -1, 1]
