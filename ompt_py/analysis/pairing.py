"""Begin/end pairing, and the relations between paired tables: one
implementation (C, ``_core.pair``, ``_core.pair_events`` and ``_core.find``)
for the tables (``tables``), the slice exports (``ompt_py.io.perfetto``, on
record fields) and the regions of user code.

Scoped OMPT events nest per thread.  Pairing keeps that order: within one
key (process, thread, event, kind ...) an end closes the latest open begin.
An end with no begin before it (its begin came before the trace window) and
a begin with no end (its end comes after the window) are kept and counted
as unmatched, never paired wrongly or dropped silently.  The constructs of
the tables are paired from the records, every kind in one pass over them in
time order (``pair_events``, ``PAIRINGS``: the events and key of each).

libomp reports a worker's implicit-barrier end and implicit-task end only
when the worker is released for the next parallel region; those intervals
are clamped to the end of their parallel region (``clamped_ends``), which is
when the worker really became idle.

Functions here work on arrays (key columns, rows, times), so that a table
made from a pandas frame and a slice made from raw records pair alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .. import _core
from ..records import EVENT_CODES, KIND_RAW_CATEGORIES, kind_keys, time_order


@dataclass
class Intervals:
    """Paired intervals of one kind of construct, and what could not be paired."""

    table: pd.DataFrame  # one row per matched begin/end: begin_ns, end_ns, duration_ns, ...
    unmatched_begins: int
    unmatched_ends: int
    open: pd.DataFrame | None = None  # the unmatched begins (columns of table, no end)

    def counted(self) -> pd.DataFrame:
        """The table with the unmatched counts in its attrs (as the Trace's tables give it)."""
        table = self.table.reset_index(drop=True)
        table.attrs["unmatched_begins"] = self.unmatched_begins
        table.attrs["unmatched_ends"] = self.unmatched_ends
        return table


def group_ids(keys: pd.DataFrame) -> tuple[np.ndarray, int]:
    """A number in [0, count) per distinct row of ``keys`` (missing values are a
    value of their own), and count."""
    ids = np.zeros(len(keys), np.int64)
    count = 1
    for name in keys:
        codes, uniques = pd.factorize(keys[name], use_na_sentinel=False)
        if count * len(uniques) >= 1 << 62:  # renumber before the product overflows
            ids, seen = pd.factorize(ids)
            count = len(seen)
        ids = ids * len(uniques) + codes
        count *= len(uniques)
    if count > len(ids):  # numbers as many as the rows at most (the pairing's stacks)
        ids, seen = pd.factorize(ids)
        count = len(seen)
    return ids, count


#: How many rows distinct() and numbered() take at a time: pandas' hash tables are
#: sized for the rows given, so a few distinct values among many rows cost little.
CHUNK = 1 << 16


def distinct(values: np.ndarray, first_seen: bool = False) -> np.ndarray:
    """The distinct values of ``values`` (one dimension, any stride), sorted, or with
    ``first_seen`` in the order they first appear."""
    parts = [pd.unique(values[i:i + CHUNK]) for i in range(0, len(values), CHUNK)]
    if not parts:
        return np.asarray(values[:0])
    both = np.concatenate(parts)
    return np.asarray(pd.unique(both)) if first_seen else np.unique(both)


def numbered(values: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Each of ``values``' position in ``among`` (distinct values, every one of
    ``values`` among them), int32."""
    index = pd.Index(among)
    out = np.empty(len(values), np.int32)
    for i in range(0, len(values), CHUNK):
        out[i:i + CHUNK] = index.get_indexer(values[i:i + CHUNK])
    return out


def first_seen_groups(columns: list[pd.Series], dropna: bool = True) -> np.ndarray:
    """Per row (int32), the number of its combination of ``columns``' values in the
    order the combinations first appear (groupby(sort=False).ngroup()), -1 where a value
    is missing (groupby leaves those rows out), or with ``dropna=False`` a missing
    value a value of its own (groupby(dropna=False)): each column numbered a chunk
    at a time (distinct, numbered), not hashed whole as groupby does (its tables
    are sized for the rows)."""
    n = len(columns[0]) if columns else 0
    ids, count = np.zeros(n, np.int32), 1  # (int64 once the numbers need it)
    missing = np.zeros(n, bool)

    def values_of(c: pd.Series) -> list[np.ndarray]:
        if isinstance(c.dtype, pd.CategoricalDtype):
            codes = np.asarray(c.array.codes)
            if dropna:
                missing[:] |= codes < 0
            return [codes]  # (-1: missing, a code of its own)
        lacks = np.asarray(c.isna())
        if not c.hasnans:
            return [c.to_numpy()]
        if dropna:
            missing[:] |= lacks
            return [c.to_numpy(na_value=0)]
        return [c.to_numpy(na_value=0), lacks.view(np.uint8)]  # missing apart from 0

    for c in columns:
        for values in values_of(c):
            seen = distinct(values, first_seen=True)
            if count * len(seen) >= 1 << 62:  # renumber before the product overflows
                among = distinct(ids, first_seen=True)
                ids, count = numbered(ids, among).astype(np.int64), len(among)
            if count * len(seen) >= 1 << 31 and ids.dtype == np.int32:
                ids = ids.astype(np.int64)
            ids *= len(seen)  # (in place: a column of the rows' size at a time)
            ids += numbered(values, seen)
            count *= len(seen)
    kept = ids[~missing] if missing.any() else ids
    out = numbered(ids, distinct(kept, first_seen=True))  # (int32: half the rows' int64)
    del ids, kept
    out[missing] = -1
    return out


def kept_groups(frame: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows of ``frame`` that have every key (those groupby keeps), and their
    first_seen_groups numbers (0 to k - 1)."""
    groups = first_seen_groups([frame[k] for k in keys])
    if (groups < 0).any():
        kept = groups >= 0
        return frame[kept], groups[kept]
    return frame, groups


def first_rows(groups: np.ndarray) -> np.ndarray:
    """Each group's first row, of rows numbered by group as first_seen_groups numbers
    them (0 to k - 1, none missing)."""
    first = np.empty(int(groups.max()) + 1 if len(groups) else 0, np.intp)
    for end in range(len(groups), 0, -CHUNK):  # the last chunk first: the earliest row wins
        begin = max(end - CHUNK, 0)
        first[groups[begin:end][::-1]] = np.arange(end - 1, begin - 1, -1)
    return first


def grouper(groups: np.ndarray) -> pd.Categorical:
    """The group numbers of first_seen_groups (none missing) as a key groupby reads
    as they are (a categorical's codes: nothing hashed), its groups in that order."""
    return pd.Categorical.from_codes(groups, categories=np.arange(int(groups.max()) + 1
                                                                   if len(groups) else 0))


def key_groups(frame: pd.DataFrame, keys: list[str]) -> tuple[pd.Categorical, pd.MultiIndex]:
    """``frame``'s rows grouped by ``keys`` as groupby(keys, sort=False, dropna=False)
    groups them, by one number per group (first_seen_groups: groupby's hash tables of
    each key are sized for the rows): the numbers as a key groupby reads (grouper: a
    categorical's codes of the fewest bytes, the numbers not held twice), and the
    groups' keys (their first rows), in the same order."""
    group = first_seen_groups([frame[k] for k in keys], dropna=False)
    index = pd.MultiIndex.from_frame(frame[keys].iloc[first_rows(group)])
    return grouper(group), index


def group_quantiles(values: np.ndarray, groups: np.ndarray, count: int,
                    qs: tuple[float, ...]) -> list[np.ndarray]:
    """Per group 0 .. count - 1 (``groups``: a number per row, none missing), the
    quantiles ``qs`` of its ``values`` (float64; NaN left out, and NaN for a group
    of none) as groupby's quantile gives them (linear between the two nearest),
    from one sort of the rows by group then value, not a sort per group and
    quantile."""
    ordered = values[np.lexsort((values, groups))]
    start = np.zeros(count, np.int64)
    np.cumsum(np.bincount(groups, minlength=count)[:-1], out=start[1:])
    valid = np.bincount(groups[~np.isnan(values)], minlength=count)
    last = start + np.maximum(valid - 1, 0)  # each group's highest value
    out = []
    for q in qs:
        at = q * (valid - 1).astype(np.float64)  # where q falls, as groupby's
        below = ordered[np.minimum(start + at.astype(np.int64), last)]
        frac = at % 1
        above = ordered[np.minimum(start + at.astype(np.int64) + 1, last)]
        out.append(np.where(valid == 0, np.nan,
                            np.where(frac == 0.0, below, below + (above - below) * frac)))
    return out


def column(values: np.ndarray, missing_if_zero: bool = False, table: Any = None,
           rows: np.ndarray | None = None) -> tuple:
    """A key column of _core.pair, pair_events and find: the integers ``values``, an
    array of one dimension of any stride (a field of the records is read in place;
    bytes: read through ``table``, bytes too, when given), or, with ``rows``
    (int64), ``values[rows]`` without making it; ``missing_if_zero``: rows where it
    is 0 have no key (find)."""
    values = np.asarray(values)
    if rows is None:
        return values, missing_if_zero, table
    return values, missing_if_zero, table, np.asarray(rows, np.int64)


@dataclass
class Pairs:
    """What ``pair`` found, as rows of its input: each matched begin (in the order
    of the begins) and its end; the begins never closed; how many ends closed
    nothing; and, when asked for, each row's enclosing begin (-1: none)."""

    begins: np.ndarray
    ends: np.ndarray
    open: np.ndarray
    unmatched_ends: int
    enclosing: np.ndarray | None = None


def pair(keys: list[tuple], is_begin: np.ndarray, tags: tuple | None = None,
         enclosing: bool = False) -> Pairs:
    """Begin/end rows in time order, paired in one pass in C: within a key (columns
    made by ``column``) an end closes the latest open begin.  ``tags`` (a column):
    an end closes the latest open begin of its key with its tag (a tag of 0 on an
    end matches any), and the begins opened after that one are dropped as never
    closed.  ``enclosing``: also give, for each begin, the begin that was the
    latest open one of its key when it opened."""
    is_begin = np.ascontiguousarray(is_begin, bool)
    partner = np.empty(len(is_begin), np.intp)
    outer = np.empty(len(is_begin), np.intp) if enclosing else None
    _core.pair(keys, column(is_begin), 1, partner, tags, outer)
    matched = partner >= 0
    begins = np.flatnonzero(is_begin & matched)
    return Pairs(begins, partner[begins], np.flatnonzero(is_begin & ~matched),
                 int(np.count_nonzero(~is_begin & ~matched)), outer)


class EventPairing(NamedTuple):
    """How the records of a kind of construct pair: what each event does
    (``roles``: "scoped", its begins open and its ends close; "endpoint", its
    begins open and every other endpoint closes; "open" or "close", whatever the
    endpoint), and the record fields of the key after the process (``kind_raw``:
    the kind byte as to_pandas() names it for the event)."""

    roles: dict[str, str]
    key: tuple[str, ...]


#: The pairings of the tables (tables.py) and of the slice exports (io/perfetto.py).
PAIRINGS: dict[str, EventPairing] = {
    "parallel": EventPairing({"parallel_begin": "endpoint", "parallel_end": "endpoint"},
                             ("parallel_id",)),
    "implicit_task": EventPairing({"implicit_task": "scoped"}, ("task_id",)),
    "work": EventPairing({"work": "scoped"}, ("thread", "kind_raw")),
    "sync_region": EventPairing({"sync_region": "scoped"}, ("thread", "kind_raw")),
    "sync_region_wait": EventPairing({"sync_region_wait": "scoped"}, ("thread", "kind_raw")),
    "masked": EventPairing({"masked": "scoped"}, ("thread",)),
    "mutex_wait": EventPairing({"mutex_acquire": "open", "mutex_acquired": "close"},
                               ("thread", "u64a")),  # u64a: the wait id
    "mutex_hold": EventPairing({"mutex_acquired": "open", "mutex_released": "close"},
                               ("thread", "u64a")),
}

# What a row does, by endpoint (0: any but 1 to 3; SCOPE_BEGIN 1, SCOPE_END 2,
# SCOPE_BEGINEND 3), for each role of an event.
_ROLES = {"scoped": (_core.PAIR_NONE, _core.PAIR_OPEN, _core.PAIR_CLOSE, _core.PAIR_NONE),
          "endpoint": (_core.PAIR_CLOSE, _core.PAIR_OPEN, _core.PAIR_CLOSE, _core.PAIR_CLOSE),
          "open": (_core.PAIR_OPEN,) * 4, "close": (_core.PAIR_CLOSE,) * 4}


def _key_column(events: np.ndarray, field: str, pairing: EventPairing) -> tuple:
    if field != "kind_raw":
        return column(events[field])
    (event,) = pairing.roles  # a kind names one event's enumeration
    names = KIND_RAW_CATEGORIES.codes(kind_keys(np.full(256, EVENT_CODES[event]),
                                                np.arange(256)))
    return column(events["kind"], table=names)


class Lookup(NamedTuple):
    """For each pair of pairing ``of``, the first pair of pairing ``into`` (in the
    order of their begins) whose begin record has the process and, in ``field``
    (the key of ``into``), the value that the pair's begin record has in
    ``query_field`` (a value of 0 matches nothing): a find() on the records of
    the begins, made in the pass (among the pairs of ``into`` open as the pair
    begins; the others are found after it)."""

    of: str
    into: str
    field: str
    query_field: str


class Enclosing(NamedTuple):
    """For each pair of pairing ``of``, the pair of pairing ``into`` (of the same
    key) open with the key of the pair's begin record as the pair begins, the
    latest begun of those open: found in the pass, where a record is read after
    those before it in time (a sync region's waits find their region); none, or
    one never closed: -1."""

    of: str
    into: str


#: The sync region each wait (sync_region_wait) is in: the one open on its thread
#: with its kind as it begins (waits_per_region).
WAITS_REGION = Enclosing("sync_region_wait", "sync_region")


class Paired(NamedTuple):
    """What pair_events found: per pairing its pairs, per lookup the pair found for
    each pair (a position among the pairs of its ``into``, -1 for none)."""

    pairs: dict[str, Pairs]
    found: dict[str, np.ndarray]


def pair_events(events: np.ndarray, pids: np.ndarray | None, order: np.ndarray | None,
                names: list[str], as_rows: bool = False,
                lookups: dict[str, Lookup | Enclosing] | None = None, end_times: bool = False,
                split_ns: int | None = None) -> Paired:
    """The pairings ``names`` (of PAIRINGS) of the records ``events`` (their
    processes ``pids``; None: all of one), in one pass over them in time order
    (``order``: records.time_order of their times; None, with ``as_rows``: the
    pass merges that order as it reads the records, with no array of it, where
    their times come in a few chains of runs): per pairing, its begins and ends
    as positions in ``order`` (the rows of to_pandas()), or with ``as_rows`` as
    rows of ``events``, as ``pair`` pairs (with ``end_times``, the ends as their
    records' times, read in the pass); and the ``lookups`` (among the pairings
    ``names``: Lookup, Enclosing), looked up in the pass as each pair begins.  A
    merged pass of 2^20 records or more is split in two halves at the median
    time of a sample of them, each read in a thread of its own when two CPUs are
    there, and joined (the same pairs and lookups as one pass); ``split_ns``
    splits it there whatever the records' number (the tests)."""
    lookups = lookups or {}
    for lk in lookups.values():
        if isinstance(lk, Enclosing):
            if PAIRINGS[lk.into].key != PAIRINGS[lk.of].key:
                raise ValueError(f"{lk.of} is not of the key of {lk.into}: no pair encloses it")
        elif PAIRINGS[lk.into].key != (lk.field,):
            raise ValueError(f"a lookup in {lk.into} is by its key, not {lk.field}")
    pid = [] if pids is None else [column(pids)]
    specs = []
    for name in names:
        pairing = PAIRINGS[name]
        roles = np.zeros((max(EVENT_CODES.values()) + 1, 4), np.uint8)
        for event, role in pairing.roles.items():
            roles[EVENT_CODES[event]] = _ROLES[role]
        specs.append((roles.tobytes(),
                      pid + [_key_column(events, field, pairing) for field in pairing.key]))
    looks = [(names.index(lk.of), names.index(lk.into),
              [*pid, *(_key_column(events, f, PAIRINGS[lk.of]) for f in PAIRINGS[lk.of].key)],
              True) if isinstance(lk, Enclosing) else
             (names.index(lk.of), names.index(lk.into),
              [*pid, column(events[lk.query_field], True)]) for lk in lookups.values()]
    args = (column(events["event"]), column(events["endpoint"]), specs, as_rows, looks,
            events["time_ns"], end_times)
    if order is not None:
        found = _core.pair_events(np.asarray(order, np.int64), *args)
    elif (found := _core.pair_events(None, *args, split_ns)) is None:
        order = time_order(events["time_ns"])  # not in a few chains of runs: sorted
        found = _core.pair_events(order, *args)
    pairs = {}
    for name, (begins, ends, unmatched) in zip(names, found[0]):
        begins, ends = np.frombuffer(begins, np.int64), np.frombuffer(ends, np.int64)
        pairs[name] = Pairs(begins[:len(ends)], ends, begins[len(ends):], unmatched)
    out = {}
    # The begins whose pair was not open as they began, or whose key began twice:
    # found after the pass, those of the lookups into the same pairing by the same
    # fields at once (one reading of the table's keys).
    again: dict[tuple[str, str, str], list[tuple[np.ndarray, ...]]] = {}
    for (name, lk), at in zip(lookups.items(), found[1]):
        out[name] = at = np.frombuffer(at, np.int64)  # writable: a bytearray
        asked = np.flatnonzero(at == _LOOK_AGAIN)
        if len(asked):  # the lookup's results, which it asks again, their begins
            again.setdefault((lk.into, lk.field, lk.query_field), []).append(
                (at, asked, pairs[lk.of].begins[asked]))
    for (into, field, query_field), asks in again.items():
        table, query = pairs[into].begins, np.concatenate([q for _, _, q in asks])
        if not as_rows:
            table, query = np.asarray(order)[table], np.asarray(order)[query]
        first = _first(events, pids, table, query, field, query_field)
        for at, asked, _ in asks:
            at[asked], first = first[:len(asked)], first[len(asked):]
    return Paired(pairs, out)


#: What _core.pair_events finds for a begin whose pair it could not tell.
_LOOK_AGAIN = -2


def _first(events: np.ndarray, pids: np.ndarray | None, table: np.ndarray, query: np.ndarray,
           field: str, query_field: str) -> np.ndarray:
    """For each record of ``query`` (rows, a few), the first of ``table`` (rows)
    with its process and ``field`` (0: none); -1 for none."""
    # Only the rows of the table with a value asked for: few (pandas' isin hashes the
    # few values asked for, where np.isin sorts the table's).
    at = np.flatnonzero(pd.Series(events[field][table], copy=False)
                        .isin(events[query_field][query]).to_numpy())
    table = table[at]
    found = np.empty(len(query), np.intp)
    _core.find(([] if pids is None else [column(pids, rows=table)])
               + [column(events[field], True, rows=table)],
               ([] if pids is None else [column(pids, rows=query)])
               + [column(events[query_field], True, rows=query)], found)
    return np.where(found >= 0, at[np.maximum(found, 0)] if len(at) else -1, -1)


def pair_rows(rows: pd.DataFrame, keys: list[str]) -> Intervals:
    """Pairs begin/end rows of a frame (time-ordered, an ``endpoint`` column) that
    nest within each key; the begin's columns stand for the pair, in the order of
    the begins; the other columns are gathered once, at the rows of the pairs."""
    is_begin = (rows["endpoint"] == "begin").to_numpy()
    found = pair([column(group_ids(rows[keys])[0])], is_begin)
    times = rows["time_ns"].to_numpy()
    return intervals(lambda at, columns: _begin_rows(rows, columns, at),
                     lambda at: times[at], found,
                     [c for c in rows.columns if c not in ("time_ns", "endpoint")])


#: The columns of the rows at some positions, as a frame (positions, columns).
Rows = Callable[[np.ndarray, list[str]], pd.DataFrame]


def intervals(rows: Rows, times: Callable[[np.ndarray], np.ndarray], found: Pairs,
              columns: list[str]) -> Intervals:
    """The pairs ``found`` (positions of rows; ``times``: their times) as a table:
    begin_ns, the begin's ``columns`` (``rows``), end_ns and duration_ns; the
    begins left open as ``open``."""

    def begins(at: np.ndarray) -> pd.DataFrame:
        table = rows(at, columns)
        table.insert(0, "begin_ns", times(at))
        return table

    table = begins(found.begins)
    table["end_ns"] = times(found.ends)
    table["duration_ns"] = table["end_ns"] - table["begin_ns"]
    return Intervals(table, unmatched_begins=len(found.open),
                     unmatched_ends=found.unmatched_ends, open=begins(found.open))


def _begin_rows(frame: pd.DataFrame, columns: list[str], at: np.ndarray) -> pd.DataFrame:
    """The ``columns`` of the rows of ``frame`` at positions ``at``."""
    return pd.DataFrame({c: frame[c].array.take(at) for c in columns},
                        index=pd.RangeIndex(len(at)))


def find(table: pd.DataFrame, query: pd.DataFrame) -> np.ndarray:
    """For each row of ``query``, the position of the first row of ``table`` with
    the same values (columns in the same order); -1 where there is none or where
    a value is missing."""
    sides: tuple[list[tuple], list[tuple]] = ([], [])
    missing = np.zeros(len(table), bool), np.zeros(len(query), bool)
    for (_, a), (_, b) in zip(table.items(), query.items()):
        values = _key_values(a, b)
        for lacks, side in zip(missing, (a, b)):
            lacks |= np.asarray(side.isna())
        both = np.concatenate(values)
        if len(both) and both.min() == both.max() and not a.hasnans and not b.hasnans:
            continue  # one value everywhere (the pid of a trace of one process): no key
        for keys, v in zip(sides, values):
            keys.append(column(v))
    if not sides[0] or missing[0].any() or missing[1].any():  # missing: none of its row
        for keys, lacks in zip(sides, missing):
            keys.append(column((~lacks).astype(np.uint8), missing_if_zero=True))
    if len(sides[0]) == 1:
        return _first_equal(sides[0][0][0], sides[1][0][0])
    return _found(*sides)


def _found(table: list[tuple], query: list[tuple]) -> np.ndarray:
    """_core.find: per row of ``query`` (columns without rows of their own), the
    first row of ``table`` with its keys; -1 for none."""
    out = np.empty(len(query[0][0]), np.intp)
    _core.find(table, query, out)
    return out


def _first_equal(table: np.ndarray, query: np.ndarray) -> np.ndarray:
    """find() of a key of one column without missing values, by a binary search in
    the table's values in order (no sort where they are in order already, as ids
    mostly are): the hash table's random accesses cost more."""
    if not len(table):
        return np.full(len(query), -1, np.intp)
    order = None if (table[1:] >= table[:-1]).all() else np.argsort(table, kind="stable")
    ordered = table if order is None else table[order]
    at = np.minimum(np.searchsorted(ordered, query), len(table) - 1)
    return np.where(ordered[at] == query, at if order is None else order[at], -1).astype(
        np.intp, copy=False)


def _key_values(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Two columns of a key as 8-byte integers that are equal where the values are
    (integers as they are; other values numbered together); missing values read 0."""
    if all(pd.api.types.is_integer_dtype(s.dtype) for s in (a, b)):
        return tuple(s.to_numpy(np.uint64 if s.dtype.kind == "u" else np.int64, na_value=0
                                ).view(np.int64) for s in (a, b))  # type: ignore[return-value]
    codes = pd.factorize(pd.concat([a, b], ignore_index=True).astype(object))[0]
    return codes[:len(a)], codes[len(a):]


def clamped_ends(end: np.ndarray, region: np.ndarray, region_end: np.ndarray) -> np.ndarray:
    """``end`` of intervals, each moved back to the end of its parallel region
    (``region``: its row in ``region_end``, which is not empty; -1 for none)
    where it was reported after that."""
    late = region_end[np.maximum(region, 0)]
    return np.where((region >= 0) & (end > late), late, end)


def clamp_to_region(iv: Intervals, regions: pd.DataFrame) -> None:
    """Ends reported after their parallel region ended are moved to the region's end."""
    t = iv.table
    if t.empty or regions.empty or "parallel_id" not in t:
        return
    end = t["end_ns"].to_numpy()
    keys = ["pid", "parallel_id"]
    clamped = clamped_ends(end, find(regions[keys], t[keys]), regions["end_ns"].to_numpy(np.int64))
    if (clamped != end).any():
        t["end_ns"] = clamped
        t["duration_ns"] = t["end_ns"] - t["begin_ns"]


def task_runs(threads: pd.DataFrame, prior: np.ndarray, switched_to: np.ndarray,
              explicit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of task_schedule events in time order (``threads``: their pid and thread;
    ``prior``, ``switched_to``: the tasks they switch from and to, 0 for none),
    those after which an explicit task (one of ``explicit``) ran until the next
    task_schedule of the thread, which switches away from it: their rows, and
    the rows of those next ones."""
    # (first_seen_groups: pandas' factorize sizes its hash tables for the rows)
    group = first_seen_groups([threads[c] for c in threads], dropna=False)
    order = np.argsort(group, kind="stable")  # each thread's switches, in time order
    # Each switch's next of its thread (-1: its thread's last), from views of order.
    following = np.empty(len(group), np.intp)
    following[order[:-1]] = order[1:]
    following[order[np.cumsum(np.bincount(group)) - 1]] = -1
    del group, order
    run = np.flatnonzero(following >= 0)
    nxt = following[run]
    del following
    task = switched_to[run]
    # (pandas' isin hashes the explicit tasks: np.isin sorts both, 5 times the memory)
    ran = (prior[nxt] == task) & (task != 0) & pd.Series(task, copy=False).isin(explicit).to_numpy()
    return run[ran], nxt[ran]


def waits_per_region(regions: int, region: np.ndarray, wait_ns: np.ndarray) -> np.ndarray:
    """For each of ``regions`` sync regions the total ``wait_ns`` of the waits
    inside it: ``region``, the region of each wait (pair_events' WAITS_REGION; -1:
    none)."""
    totals = np.zeros(regions, np.int64)
    inside = region >= 0
    if inside.all():  # every wait in a region, as most often: no copy of either
        np.add.at(totals, region, wait_ns)
    else:
        np.add.at(totals, region[inside], wait_ns[inside])
    return totals


def innermost(key: np.ndarray, begin: np.ndarray, end: np.ndarray, at_key: np.ndarray,
              at: np.ndarray, from_begin: bool = True) -> np.ndarray:
    """For each time ``at`` of a key (``at_key``), the innermost of the intervals
    [``begin``, ``end``) of that key holding it, as a row of them (-1: none);
    the intervals of a key nest.  ``from_begin`` False: an interval does not
    hold the times it begins at (the parent of an interval that is itself one
    of them, queried at its begin)."""
    n, m = len(begin), len(at)
    # In time order; at one time: ends, then begins (outer first) and the times
    # asked (each a begin and end of its own, adjacent) in the order from_begin says.
    time = np.concatenate([end, begin, at, at]).astype(np.int64)
    begins, asked = (1, 2) if from_begin else (2, 1)
    stage = np.concatenate([np.zeros(n, np.int8), np.full(n, begins, np.int8),
                            np.full(2 * m, asked, np.int8)])
    rank = np.concatenate([np.zeros(n, np.int64), -np.asarray(end, np.int64),
                           np.arange(m), np.arange(m)])
    half = np.concatenate([np.zeros(2 * n, np.int8), np.zeros(m, np.int8), np.ones(m, np.int8)])
    order = np.lexsort((half, rank, stage, time))
    keys = np.concatenate([key, key, at_key, at_key]).astype(np.int64)[order]
    is_begin = (order >= n) & (order < 2 * n + m)
    found = pair([column(keys)], is_begin, enclosing=True)
    position = np.empty(len(order), np.intp)
    position[order] = np.arange(len(order))
    outer = found.enclosing[position[2 * n:2 * n + m]]
    holder = np.where(outer >= 0, order[np.maximum(outer, 0)] - n, -1)
    return np.where((holder >= 0) & (holder < n), holder, -1)


def nesting_levels(up: np.ndarray) -> np.ndarray:
    """How many rows are above each row, ``up`` giving each row's parent row (-1:
    none): all chains walked at once, as many steps as the deepest nesting."""
    level = np.zeros(len(up), dtype=np.int64)
    cur = up.copy()
    for _ in range(len(up)):
        alive = cur >= 0
        if not alive.any():
            break
        level[alive] += 1
        cur[alive] = up[cur[alive]]
    return level


def region_links(task: np.ndarray, region_of: np.ndarray, same: np.ndarray,
                 parallel_id: np.ndarray, team_size: pd.api.extensions.ExtensionArray
                 ) -> tuple[pd.api.extensions.ExtensionArray, np.ndarray, np.ndarray]:
    """The parent_id, level and team_size of region_tree, from lookups (-1: none):
    per region, the row of the implicit task that encountered it (``task``) and
    the first region with its pid and parallel_id (``same``); per implicit task,
    the first region with its pid and parallel_id (``region_of``) and its
    ``team_size``.  ``parallel_id``: the regions' ids."""
    up = np.full(len(task), -1, np.intp)  # the parent region's row
    inside = task >= 0
    up[inside] = region_of[task[inside]]
    parent = pd.array(np.where(up >= 0, parallel_id[np.maximum(up, 0)], 0), dtype="UInt64")
    parent[up < 0] = pd.NA
    level = nesting_levels(up) + 1
    # The team: the largest team_size of the implicit tasks with the region's keys.
    sizes = team_size.to_numpy(np.int64, na_value=-1)
    largest = np.full(len(task), -1, np.int64)
    counted = (region_of >= 0) & (sizes >= 0)
    np.maximum.at(largest, region_of[counted], sizes[counted])
    team = np.full(len(task), -1, np.int64)
    team[same >= 0] = largest[same[same >= 0]]
    sized = pd.array(np.maximum(team, 0), dtype=team_size.dtype)
    sized[team < 0] = pd.NA
    return parent, level, pd.Series(sized).to_numpy()


def acquisitions(waits: list[np.ndarray], holds: list[np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The rows of mutex_table: an outer join of the waits (acquire -> acquired)
    and holds (acquired -> released) with the same keys (arrays of pid, thread,
    wait id and acquired time), as positions in each (-1: none), ordered by the
    acquired time, then pid, thread and wait id.  Waits and holds of the same
    keys (acquisitions at one clock tick) pair one to one, in their order: the
    table has at most a row per wait and hold, however many share a time."""
    n, m = len(waits[0]), len(holds[0])
    wait_keys, hold_keys = [column(k) for k in waits], [column(k) for k in holds]
    if (_found(hold_keys, hold_keys) == np.arange(m)).all() and (
            _found(wait_keys, wait_keys) == np.arange(n)).all():
        # Keys once on each side (as the clock's ticks make them): a wait's hold is
        # the one of its keys, found in a hash table (the groups below sort them).
        h = _found(hold_keys, wait_keys)
        taken = np.zeros(m, bool)
        taken[h[h >= 0]] = True
        alone = np.flatnonzero(~taken)
    else:
        h, alone = _acquisitions_grouped(waits, holds)
    w = np.concatenate([np.arange(n), np.full(len(alone), -1, np.intp)])
    h = np.concatenate([h, alone])
    # Each row's keys, from its wait or, for a hold alone, from the hold.
    keys = [np.concatenate([a, b[alone]]) for a, b in zip(waits, holds)]
    order = np.lexsort([keys[2], keys[1], keys[0], keys[3]])
    return w[order], h[order]


def _acquisitions_grouped(waits: list[np.ndarray], holds: list[np.ndarray]
                          ) -> tuple[np.ndarray, np.ndarray]:
    """acquisitions where keys repeat: each wait's hold (-1: none) and the holds
    without a wait, by the rank of each in its group of keys."""
    n = len(waits[0])
    keys = [np.concatenate(pair) for pair in zip(waits, holds)]
    group, count = group_ids(pd.DataFrame(dict(enumerate(keys)), copy=False))
    of_wait, of_hold = group[:n], group[n:]
    nth_wait, nth_hold = _rank_in_group(of_wait, count), _rank_in_group(of_hold, count)
    holds_of = np.bincount(of_hold, minlength=count)
    waits_of = np.bincount(of_wait, minlength=count)
    # The k-th hold of a group, by group and rank: holds in group order, then rank.
    by_group = np.argsort(of_hold, kind="stable")
    first = np.cumsum(holds_of) - holds_of
    paired = nth_wait < holds_of[of_wait]
    h = np.full(n, -1, np.intp)
    h[paired] = by_group[first[of_wait[paired]] + nth_wait[paired]]
    return h, np.flatnonzero(nth_hold >= waits_of[of_hold])  # holds beyond their group's waits


def _rank_in_group(group: np.ndarray, count: int) -> np.ndarray:
    """Each row's rank among the rows of its group (0 for the first), in row order."""
    order = np.argsort(group, kind="stable")
    sizes = np.bincount(group, minlength=count)
    rank = np.empty(len(group), np.intp)
    rank[order] = np.arange(len(group)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return rank
