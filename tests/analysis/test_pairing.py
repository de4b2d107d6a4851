"""Begin/end pairing (analysis._pair, the C pass _core.pair) and the lookups the
tables are joined by (analysis._find, the C pass _core.find), on hand-made rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ompt_py import _core
from ompt_py.analysis import pairing


def _partners(keys: list[list[int]], begins: list[bool]) -> list[int]:
    partner = np.empty(len(begins), np.intp)
    _core.pair([pairing.column(np.array(k, np.int64)) for k in keys],
               pairing.column(np.array(begins, bool)), 1, partner)
    return partner.tolist()


def test_an_end_closes_the_latest_open_begin_of_its_key():
    # key 0: begin, begin, end, end (nested); key 1: end first (no begin),
    # then a begin that is never closed.
    keys = [[0, 0, 1, 0, 1, 0]]
    begins = [True, True, False, False, True, False]
    assert _partners(keys, begins) == [5, 3, -1, 1, -1, 0]


def test_a_key_is_every_column_and_bytes_can_be_named_through_a_table():
    # (thread, kind): kind bytes 2 and 3 have one name (0), 7 and 8 none (-1:
    # the table's last entry, for every byte beyond it).
    threads = [0, 0, 1, 0, 0, 0]
    kinds = np.array([2, 3, 3, 7, 8, 2], np.uint8)
    names = np.array([9, 9, 0, 0, -1], np.int8)
    partner = np.empty(6, np.intp)
    _core.pair([pairing.column(np.array(threads, np.uint32)), pairing.column(kinds, table=names)],
               pairing.column(np.array([1, 0, 0, 1, 0, 0], bool)), 1, partner)
    assert partner.tolist() == [1, 0, -1, 4, 3, -1]
    # the bytes themselves: only the first and last rows share a key
    assert _partners([threads, [2, 3, 3, 7, 8, 2]], [True, False, False, True, False, False]) == [
        5, -1, -1, -1, -1, 0]


def test_columns_of_different_lengths_are_an_error():
    with pytest.raises(ValueError, match="different lengths"):
        _core.pair([pairing.column(np.arange(3)), pairing.column(np.arange(4))],
                   pairing.column(np.ones(3, bool)), 1, np.empty(3, np.intp))


def test_find_gives_the_first_row_or_with_times_the_latest_before():
    table = [pairing.column(np.array([4, 5, 4, 6], np.int64))]
    query = np.array([4, 6, 4, 0, 5], np.int64)
    found = np.empty(5, np.intp)
    _core.find(table, [pairing.column(query, missing_if_zero=True)], found)
    assert found.tolist() == [0, 3, 0, -1, 1]
    # each side in time order: the last row of the key at or before the query's time
    _core.find(table, [pairing.column(query)], found,
               pairing.column(np.array([1, 2, 3, 4], np.int64)),
               pairing.column(np.array([2, 3, 5, 5, 9], np.int64)))
    assert found.tolist() == [0, -1, 2, -1, 1]


def _rows(events: list[tuple[int, str, int, int | None]]) -> pd.DataFrame:
    time, endpoint, thread, kind = zip(*events)
    return pd.DataFrame({"time_ns": np.array(time, np.int64),
                         "endpoint": pd.Categorical(endpoint, ["begin", "end"]),
                         "thread": np.array(thread, np.uint32),
                         "kind": pd.array(kind, dtype="UInt64")})


@pytest.mark.pythons
def test_pairs_in_begin_order_with_the_unmatched_counted():
    rows = _rows([(1, "end", 0, 7),      # its begin came before the window
                  (5, "begin", 1, 8),    # thread 1, kind 8: outer, same nanosecond as
                  (5, "begin", 1, 9),    # ... this one of another kind (recorded after it)
                  (6, "begin", 0, None),  # a missing key value is a key of its own
                  (7, "end", 1, 9), (8, "end", 0, None), (9, "end", 1, 8),
                  (10, "begin", 0, 7)])  # never ends
    iv = pairing.pair_rows(rows, ["thread", "kind"])
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
    assert pairing.find(table, query).tolist() == [2, 0, -1, -1, 1]


def _acquisitions_by_hand(waits: list[np.ndarray], holds: list[np.ndarray]
                          ) -> list[tuple[int, int]]:
    """pairing.acquisitions as its docstring says it, one row at a time."""
    key = [tuple(int(k[i]) for k in waits) for i in range(len(waits[0]))]
    hold_key = [tuple(int(k[i]) for k in holds) for i in range(len(holds[0]))]
    rows, taken = [], set()
    for i, k in enumerate(key):  # the k-th wait of its keys with the k-th hold of them
        nth = key[:i].count(k)
        of = [j for j, hk in enumerate(hold_key) if hk == k]
        h = of[nth] if nth < len(of) else -1
        taken.add(h)
        rows.append((i, h))
    rows += [(-1, j) for j in range(len(hold_key)) if j not in taken]
    def order(row: tuple[int, int]) -> tuple[int, ...]:
        pid, thread, wait_id, time = key[row[0]] if row[0] >= 0 else hold_key[row[1]]
        return (time, pid, thread, wait_id)
    return sorted(rows, key=order)  # stable: waits first, each side in its order


@pytest.mark.parametrize("repeated", [False, True], ids=["keys-once", "keys-repeated"])
def test_acquisitions_join_waits_and_holds_of_the_same_keys(repeated):
    # Keys once on each side (the hash-table path) and repeated (one clock tick
    # for several acquisitions: the grouped path): the same rows either way.
    rng = np.random.default_rng(7)
    n = 300
    time = rng.choice(40, n) if repeated else rng.permutation(n)
    waits = [np.full(n, 5, np.int64), rng.choice(3, n), rng.choice(4, n).astype(np.uint64),
             time.astype(np.int64)]
    keep = rng.random(n) < 0.8  # some waits without their hold, some holds alone
    holds = [k[keep] for k in waits]
    holds = [np.concatenate([k, extra]) for k, extra in zip(holds, (
        np.full(20, 5, np.int64), rng.choice(3, 20), rng.choice(4, 20).astype(np.uint64),
        (rng.choice(40, 20) if repeated else n + np.arange(20)).astype(np.int64)))]
    w, h = pairing.acquisitions(waits, holds)
    assert list(zip(w.tolist(), h.tolist())) == _acquisitions_by_hand(waits, holds)
    assert ((h >= 0) & (w >= 0)).sum() > n // 2 and (w < 0).any() and (h < 0).any()


def test_first_seen_groups_number_as_groupby_does_across_chunks():
    # More rows than a chunk, few distinct values, a categorical, missing values:
    # groupby(sort=False).ngroup()'s numbers, and -1 where groupby leaves a row out.
    rng = np.random.default_rng(3)
    n = 2 * pairing.CHUNK + 123
    frame = pd.DataFrame({
        "pid": rng.choice([7, 3], n).astype(np.int32),
        "kind": pd.Categorical.from_codes(rng.choice([-1, 0, 2], n, p=[0.01, 0.5, 0.49]),
                                          ["lock", "critical", "ordered"]),
        "wait_id": pd.array(rng.choice(5, n), dtype="UInt64"),
        "where": rng.choice(["a.py:1", "b.py:2"], n).astype(object)})
    frame.loc[rng.choice(n, 50), "wait_id"] = pd.NA
    keys = list(frame.columns)
    got = pairing.first_seen_groups([frame[k] for k in keys])
    want = frame.groupby(keys, sort=False, observed=True).ngroup().fillna(-1).to_numpy()
    assert (got == want).all() and (got < 0).sum() > 50
    # dropna=False: a missing value a value of its own (not 0, nor another's), as
    # groupby(dropna=False) numbers it.
    frame.loc[rng.choice(n, 50), "wait_id"] = 0
    got = pairing.first_seen_groups([frame[k] for k in keys], dropna=False)
    want = frame.groupby(keys, sort=False, observed=True, dropna=False).ngroup().to_numpy()
    assert (got == want).all()
    # Each group's first row (groups first seen in every chunk).
    first = pairing.first_rows(got)
    assert len(first) == got.max() + 1 and (got[first] == np.arange(len(first))).all()
    assert all((got[:row] != g).all() for g, row in enumerate(first))
    assert first[-1] > pairing.CHUNK
    assert pairing.distinct(frame["pid"].to_numpy()).tolist() == [3, 7]
    assert pairing.distinct(frame["where"].to_numpy(), first_seen=True)[0] == frame["where"][0]


def test_group_quantiles_are_groupbys_bit_for_bit():
    # Groups of one, of many, of only NaN; ties; values where the interpolation
    # rounds: each quantile as groupby's (linear), NaN where a group has none.
    rng = np.random.default_rng(5)
    groups = np.concatenate([np.arange(6), rng.choice(5, 500)]).astype(np.int8)
    values = rng.choice([1.0, 3.0, 7.5, 1e9 + 0.5, 123456789.25], len(groups))
    values[rng.random(len(groups)) < 0.1] = np.nan
    values[groups == 5] = np.nan
    got = pairing.group_quantiles(values, groups, 6, (0.0, 0.5, 0.95, 0.37, 1.0))
    by = pd.Series(values).groupby(groups)
    for q, mine in zip((0.0, 0.5, 0.95, 0.37, 1.0), got):
        want = by.quantile(q).to_numpy()
        assert np.array_equal(mine, want, equal_nan=True), q
    assert np.isnan(got[1][5]) and not np.isnan(got[1][:5]).any()
