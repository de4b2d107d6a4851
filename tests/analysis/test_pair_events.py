"""The pairings of the tables made from the records in one pass (pairing.pair_events,
the C pass _core.pair_events) against pair() on each pairing's rows, and the key
columns read in place (a field of the records, through rows) and find's first
mode, on random records."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import as_written

from ompt_py import _core
from ompt_py.analysis import pairing
from ompt_py.records import (
    EVENT_CODES,
    EVENT_DTYPE,
    KIND_RAW_CATEGORIES,
    SCOPE_BEGIN,
    SCOPE_BEGINEND,
    SCOPE_END,
    kind_keys,
    time_order,
)


def _records(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Records of the paired events with few distinct keys (so that they nest,
    interleave and miss their partners), random times with ties, and pids."""
    rng = np.random.default_rng(seed)
    events = [e for p in pairing.PAIRINGS.values() for e in p.roles]
    ev = np.zeros(n, EVENT_DTYPE)
    ev["event"] = rng.choice([EVENT_CODES[e] for e in events], n)
    ev["endpoint"] = rng.choice([SCOPE_BEGIN, SCOPE_END, SCOPE_BEGINEND, 0, 7], n,
                                p=[0.45, 0.45, 0.04, 0.03, 0.03])
    ev["time_ns"] = rng.integers(0, n // 3, n)
    ev["thread"] = rng.integers(0, 3, n)
    ev["kind"] = rng.choice([1, 2, 3, 9, 200], n)
    for field in ("parallel_id", "task_id", "u64a"):
        ev[field] = rng.integers(0, 4, n)
    return ev, rng.choice(np.array([100, 200], np.int32), n)


def _by_pair(ev: np.ndarray, pids: np.ndarray, name: str) -> pairing.Pairs:
    """The pairing as pair() pairs the rows of its events, selected and ordered by time."""
    spec = pairing.PAIRINGS[name]
    order = time_order(ev["time_ns"])
    rows = order[np.isin(ev["event"][order], [EVENT_CODES[e] for e in spec.roles])]
    endpoint, event = ev["endpoint"][rows], ev["event"][rows]
    role = np.zeros(len(rows), np.int8)  # 1 opens, 2 closes, 0 neither
    for e, how in spec.roles.items():
        mine = event == EVENT_CODES[e]
        role[mine & (endpoint == SCOPE_BEGIN)] = 2 if how == "close" else 1
        rest = mine & (endpoint != SCOPE_BEGIN)
        if how == "scoped":
            role[rest & (endpoint == SCOPE_END)] = 2
        else:
            role[rest] = 1 if how == "open" else 2
    rows = rows[role > 0]
    keys = [pairing.column(pids[rows])]
    for field in spec.key:
        values = ev["kind" if field == "kind_raw" else field][rows]
        if field == "kind_raw":
            (e,) = spec.roles
            values = KIND_RAW_CATEGORIES.codes(kind_keys(np.full(len(rows), EVENT_CODES[e]),
                                                         values))
        keys.append(pairing.column(values))
    found = pairing.pair(keys, role[role > 0] == 1)
    position = np.empty(len(ev), np.int64)
    position[order] = np.arange(len(ev))  # a record's row in time order
    return pairing.Pairs(position[rows[found.begins]], position[rows[found.ends]],
                         position[rows[found.open]], found.unmatched_ends)


@pytest.mark.parametrize("seed", range(4))
def test_every_pairing_in_one_pass_is_pair_on_its_rows(seed):
    ev, pids = _records(4000, seed)
    found = pairing.pair_events(ev, pids, time_order(ev["time_ns"]), list(pairing.PAIRINGS)).pairs
    assert list(found) == list(pairing.PAIRINGS)
    paired = 0
    for name, got in found.items():
        want = _by_pair(ev, pids, name)
        assert got.begins.tolist() == want.begins.tolist(), name
        assert got.ends.tolist() == want.ends.tolist(), name
        assert got.open.tolist() == want.open.tolist(), name
        assert got.unmatched_ends == want.unmatched_ends, name
        paired += len(got.begins)
        assert len(got.open) and got.unmatched_ends, name  # both kinds of loss exercised
    assert paired > 500
    order = time_order(ev["time_ns"])
    rows = pairing.pair_events(ev, pids, order, list(pairing.PAIRINGS), as_rows=True).pairs
    for name, got in found.items():  # as rows of the records
        assert rows[name].begins.tolist() == order[got.begins].tolist()
        assert rows[name].ends.tolist() == order[got.ends].tolist()
        assert rows[name].open.tolist() == order[got.open].tolist()
    # times in no few runs: not merged in the pass, ordered by time_order
    assert not _core.time_order(ev["time_ns"], np.empty(len(ev), np.int64))
    _same_pairs(pairing.pair_events(ev, pids, None, list(pairing.PAIRINGS), as_rows=True).pairs,
                rows)


def _same_pairs(got: dict[str, pairing.Pairs], want: dict[str, pairing.Pairs]) -> None:
    assert list(got) == list(want)
    for name in want:
        for field in ("begins", "ends", "open", "unmatched_ends"):
            assert np.array_equal(getattr(got[name], field), getattr(want[name], field)), name


@pytest.mark.parametrize("seed", range(3))
def test_the_pass_merges_the_time_order_of_the_threads_runs(seed):
    ev, pids = _records(4000, seed)
    at = as_written(ev["thread"], ev["time_ns"], np.random.default_rng(seed), least=16)
    ev, pids = ev[at], pids[at]
    assert _core.time_order(ev["time_ns"], np.empty(len(ev), np.int64)), "merged in the pass"
    names = list(pairing.PAIRINGS)
    _same_pairs(pairing.pair_events(ev, pids, None, names, as_rows=True).pairs,
                pairing.pair_events(ev, pids, time_order(ev["time_ns"]), names, as_rows=True).pairs)
    timed = pairing.pair_events(ev, pids, None, names, as_rows=True, end_times=True).pairs
    for name, got in pairing.pair_events(ev, pids, None, names, as_rows=True).pairs.items():
        assert timed[name].ends.tolist() == ev["time_ns"][got.ends].tolist(), name
        assert timed[name].begins.tolist() == got.begins.tolist(), name
    one = ev["thread"] == 0  # one thread: a chain read in order
    _same_pairs(pairing.pair_events(ev[one], None, None, names, as_rows=True).pairs,
                pairing.pair_events(ev[one], None, np.arange(one.sum()), names, as_rows=True).pairs)


def test_no_order_needs_rows_and_times():
    ev, _ = _records(50, 1)
    with pytest.raises(ValueError, match="without an order"):
        pairing.pair_events(ev, None, None, ["work"])
    args = (pairing.column(ev["event"]), pairing.column(ev["endpoint"]), [], True, [])
    with pytest.raises(ValueError, match="without an order"):
        _core.pair_events(None, *args)
    with pytest.raises(ValueError, match="one a record"):
        _core.pair_events(None, *args, ev["time_ns"][:-1])
    with pytest.raises(ValueError, match="end_times without times"):
        _core.pair_events(time_order(ev["time_ns"]), *args, None, True)


def test_one_process_needs_no_pid_column():
    ev, _ = _records(2000, 7)
    order = time_order(ev["time_ns"])
    alone = pairing.pair_events(ev, None, order, ["work", "mutex_hold"]).pairs
    same = pairing.pair_events(ev, np.full(len(ev), 5, np.int32), order,
                               ["work", "mutex_hold"]).pairs
    for name in alone:
        assert alone[name].begins.tolist() == same[name].begins.tolist()
        assert alone[name].ends.tolist() == same[name].ends.tolist()


def test_a_column_reads_a_field_of_the_records_in_place_and_through_rows():
    ev, _ = _records(500, 3)
    rows = np.random.default_rng(0).permutation(len(ev))
    partner, gathered = np.empty(len(ev), np.intp), np.empty(len(ev), np.intp)
    is_begin = ev["endpoint"][rows] == SCOPE_BEGIN
    _core.pair([pairing.column(ev["thread"], rows=rows), pairing.column(ev["task_id"], rows=rows)],
               pairing.column(is_begin), 1, partner)
    _core.pair([pairing.column(np.ascontiguousarray(ev["thread"][rows])),
                pairing.column(np.ascontiguousarray(ev["task_id"][rows]))],
               pairing.column(is_begin), 1, gathered)
    assert partner.tolist() == gathered.tolist()
    with pytest.raises(ValueError, match="outside"):
        _core.pair([pairing.column(ev["thread"], rows=np.array([0, len(ev)]))],
                   pairing.column(np.ones(2, bool)), 1, np.empty(2, np.intp))
    with pytest.raises(ValueError, match="int64"):
        _core.pair([(ev["thread"], False, None, np.zeros(2, np.int32))],
                   pairing.column(np.ones(2, bool)), 1, np.empty(2, np.intp))


@pytest.mark.parametrize("seed", range(3))
def test_find_in_time_order_finds_what_find_finds(seed):
    rng = np.random.default_rng(seed)
    table, query = rng.integers(0, 50, 300), rng.integers(0, 60, 400)
    table_time = np.sort(rng.integers(0, 1000, 300))
    query_time = np.sort(rng.integers(0, 1000, 400))
    plain, first = np.empty(400, np.intp), np.empty(400, np.intp)
    _core.find([pairing.column(table, True)], [pairing.column(query, True)], plain)
    _core.find([pairing.column(table, True)], [pairing.column(query, True)], first,
               pairing.column(table_time), pairing.column(query_time), True)
    assert first.tolist() == plain.tolist()
    assert (plain >= 0).any() and (plain < 0).any()


def _regions(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Parallel regions of 2 threads in the initial task (999, open around them),
    each with an implicit task per thread, as a runtime reports them, times
    interleaved; some ids used twice or 0, some regions encountered by a task
    that ended (an implicit task of the region before), some ends missing."""
    rng = np.random.default_rng(seed)
    rows = [(-1, 0, "implicit_task", SCOPE_BEGIN, 0, 999)]
    task = 1000
    for r in range(count):
        t = 10 * r
        region = r + 1 if rng.random() > 0.05 else int(rng.integers(0, r + 1))  # 0 or reused
        encountering = 999 if rng.random() > 0.1 else task
        rows.append((t, 0, "parallel_begin", SCOPE_BEGIN, region, encountering))
        for thread in (0, 1):
            task += 1
            rows.append((t + 1 + thread, thread, "implicit_task", SCOPE_BEGIN, region, task))
            if rng.random() > 0.03:
                rows.append((t + 5 + thread, thread, "implicit_task", SCOPE_END, 0, task))
        if rng.random() > 0.03:
            rows.append((t + 8, 0, "parallel_end", SCOPE_END, region, encountering))
    rows.append((10 * count, 0, "implicit_task", SCOPE_END, 0, 999))
    ev = np.zeros(len(rows), EVENT_DTYPE)
    for i, (t, thread, event, endpoint, region, task_id) in enumerate(rows):
        ev[i] = 0
        ev[i]["time_ns"], ev[i]["thread"], ev[i]["event"] = t, thread, EVENT_CODES[event]
        ev[i]["endpoint"], ev[i]["parallel_id"], ev[i]["task_id"] = endpoint, region, task_id
    # the records of each thread together, as the tool writes them
    ev = ev[np.argsort(ev["thread"], kind="stable")]
    return ev, rng.choice(np.array([7, 8], np.int32), len(ev), p=[0.9, 0.1])


@pytest.mark.parametrize("seed", range(3))
def test_lookups_find_the_first_closed_pair_of_the_key(seed):
    ev, pids = _regions(600, seed)
    lookups = {"region": pairing.Lookup("implicit_task", "parallel", "parallel_id", "parallel_id"),
               "same": pairing.Lookup("parallel", "parallel", "parallel_id", "parallel_id"),
               "task": pairing.Lookup("parallel", "implicit_task", "task_id", "task_id")}
    for p, order in [(pids, time_order(ev["time_ns"])), (None, time_order(ev["time_ns"])),
                     (pids, None)]:  # None: merged in the pass
        found = pairing.pair_events(ev, p, order, ["parallel", "implicit_task"], True, lookups)
        for name, lk in lookups.items():
            table, query = found.pairs[lk.into].begins, found.pairs[lk.of].begins
            want = np.empty(len(query), np.intp)
            _core.find([pairing.column(ev[lk.field][table], True)]
                       + ([] if p is None else [pairing.column(p[table])]),
                       [pairing.column(ev[lk.query_field][query], True)]
                       + ([] if p is None else [pairing.column(p[query])]), want)
            assert found.found[name].tolist() == want.tolist(), name
            assert (want >= 0).sum() > 300, name
        # none found (an id 0, a region never closed), and the first of an id used twice
        assert (found.found["region"] < 0).any()
        same = found.found["same"]
        assert (same != np.arange(len(same))).any()


def test_a_lookup_is_by_the_key_of_its_pairing():
    ev, _ = _regions(10, 0)
    with pytest.raises(ValueError, match="by its key"):
        pairing.pair_events(ev, None, time_order(ev["time_ns"]), ["parallel", "implicit_task"],
                            True, {"x": pairing.Lookup("parallel", "implicit_task", "parallel_id",
                                                       "task_id")})


def _split_times(times: np.ndarray) -> list[int]:
    """Times to split a pass at: before and at the first record, at quantiles, at
    and after the last."""
    low, high = int(times.min()), int(times.max())
    return [low - 1, low, *np.quantile(times, [0.1, 0.3, 0.5, 0.7, 0.9]).astype(int).tolist(),
            high, high + 1]


def _same_found(got: pairing.Paired, want: pairing.Paired) -> None:
    _same_pairs(got.pairs, want.pairs)
    assert list(got.found) == list(want.found)
    for name in want.found:
        assert got.found[name].tolist() == want.found[name].tolist(), name


@pytest.mark.parametrize("seed", range(3))
def test_a_pass_split_in_two_halves_pairs_as_one_pass(seed):
    """Split at any time (before every record, inside, after every one), the two
    halves joined give the pairs, ends, their times and losses of one pass."""
    ev, pids = _records(4000, seed)
    at = as_written(ev["thread"], ev["time_ns"], np.random.default_rng(seed), least=16)
    ev, pids = ev[at], pids[at]
    names = list(pairing.PAIRINGS)
    whole = pairing.pair_events(ev, pids, None, names, as_rows=True, end_times=True)
    for split in _split_times(ev["time_ns"]):
        _same_found(pairing.pair_events(ev, pids, None, names, as_rows=True, end_times=True,
                                        split_ns=split), whole)


@pytest.mark.parametrize("seed", range(3))
def test_lookups_of_a_split_pass_find_what_one_pass_finds(seed):
    """Regions open across the split (the initial task all along), ids used twice
    on both sides of it or only on one, ends missing: the lookups of the second
    half find the first begin of their key, in the first half when it began there."""
    ev, pids = _regions(600, seed)
    lookups = {"region": pairing.Lookup("implicit_task", "parallel", "parallel_id", "parallel_id"),
               "same": pairing.Lookup("parallel", "parallel", "parallel_id", "parallel_id"),
               "task": pairing.Lookup("parallel", "implicit_task", "task_id", "task_id")}
    names = ["parallel", "implicit_task"]
    for p in (pids, None):
        whole = pairing.pair_events(ev, p, None, names, True, lookups, end_times=True)
        for split in _split_times(ev["time_ns"]):
            _same_found(pairing.pair_events(ev, p, None, names, True, lookups, end_times=True,
                                            split_ns=split), whole)


def _enclosing(ev: np.ndarray, pids: np.ndarray | None, of: str, into: str,
               pairs: dict[str, pairing.Pairs]) -> list[int]:
    """Enclosing(of, into) as one reads it: the records in time order, the begins of
    ``into`` open per key (pid, thread, kind) on a stack that each end pops; for each
    closed pair of ``of`` (``pairs``, as rows), the closed pair of ``into`` on top
    of its key's stack as it began."""
    def key(row: int) -> tuple:
        event = int(ev["event"][row])
        kind = KIND_RAW_CATEGORIES.codes(kind_keys(np.array([event]), ev["kind"][row:row + 1]))
        return (None if pids is None else int(pids[row]), int(ev["thread"][row]), int(kind[0]))

    stacks: dict[tuple, list[int]] = {}
    on_top = {}
    for row in time_order(ev["time_ns"]).tolist():
        event, endpoint = int(ev["event"][row]), int(ev["endpoint"][row])
        if event == EVENT_CODES[into] and endpoint in (SCOPE_BEGIN, SCOPE_END):
            stack = stacks.setdefault(key(row), [])
            if endpoint == SCOPE_BEGIN:
                stack.append(row)
            elif stack:
                stack.pop()
        if event == EVENT_CODES[of] and endpoint == SCOPE_BEGIN:
            stack = stacks.get(key(row))
            on_top[row] = stack[-1] if stack else -1
    closed = {row: i for i, row in enumerate(pairs[into].begins.tolist())}
    return [closed.get(on_top[row], -1) for row in pairs[of].begins.tolist()]


@pytest.mark.parametrize("seed", range(3))
def test_enclosing_finds_the_pair_open_with_the_key_in_any_pass(seed):
    """Each sync region wait's region: the latest begun of those open on its thread
    with its kind as it begins (none: -1, also where that one never ends), through
    an order, merged, and split anywhere (regions open across the split, ends of
    the second half closing the first half's begins before or after the wait)."""
    ev, pids = _records(3000, seed)
    rng = np.random.default_rng(seed)
    ev["event"] = rng.choice([EVENT_CODES["sync_region"], EVENT_CODES["sync_region_wait"]],
                             len(ev))
    ev["kind"] = rng.choice([1, 3], len(ev))
    at = as_written(ev["thread"], ev["time_ns"], np.random.default_rng(seed), least=16)
    ev, pids = ev[at], pids[at]
    names = ["sync_region", "sync_region_wait"]
    lookups = {"region": pairing.WAITS_REGION}
    for p in (pids, None):
        whole = pairing.pair_events(ev, p, time_order(ev["time_ns"]), names, True, lookups)
        want = _enclosing(ev, p, "sync_region_wait", "sync_region", whole.pairs)
        assert whole.found["region"].tolist() == want
        assert sum(w >= 0 for w in want) > 300 and -1 in want
        for split in [None, *_split_times(ev["time_ns"])]:
            _same_found(pairing.pair_events(ev, p, None, names, True, lookups, split_ns=split),
                        whole)


def test_enclosing_is_of_pairings_of_one_key():
    ev, _ = _records(10, 0)
    with pytest.raises(ValueError, match="not of the key of sync_region"):
        pairing.pair_events(ev, None, time_order(ev["time_ns"]), ["parallel", "sync_region"],
                            True, {"x": pairing.Enclosing("parallel", "sync_region")})


def test_the_runs_the_count_notes_meet_at_its_halves():
    """The count of a split pass (two threads, each half of the rows) notes where
    the runs of times start, for the merge: a run that starts at the row where the
    second count starts is one (else the merge would read two runs as one, out of
    time order), and a pass of runs too many to note is sorted as before."""
    ev, pids = _records(4000, 7)
    halves = [np.argsort(ev["time_ns"][:2000], kind="stable"),
              2000 + np.argsort(ev["time_ns"][2000:], kind="stable")]
    at = np.concatenate(halves)  # two runs, the second starting at row 2000
    names = list(pairing.PAIRINGS)
    for ev_, pids_ in ((ev[at], pids[at]), (ev, pids)):  # two runs, then runs of 1 to 3
        ordered = pairing.pair_events(ev_, pids_, time_order(ev_["time_ns"]), names,
                                      as_rows=True, end_times=True)
        for split in _split_times(ev_["time_ns"]):
            _same_pairs(pairing.pair_events(ev_, pids_, None, names, as_rows=True,
                                            end_times=True, split_ns=split).pairs,
                        ordered.pairs)


def test_a_split_is_of_the_merged_order():
    ev, _ = _records(50, 1)
    args = (pairing.column(ev["event"]), pairing.column(ev["endpoint"]), [], True, [],
            ev["time_ns"], False)
    with pytest.raises(ValueError, match="merged order"):
        _core.pair_events(time_order(ev["time_ns"]), *args, 10)


def test_many_records_are_paired_in_two_halves_as_in_one_pass():
    """2^20 records and more: the merged pass splits itself (at the median of a
    sample of their times; in two threads on two CPUs), and pairs as the pass
    through an order, which is never split."""
    ev, pids = _records(1_100_000, 5)
    # as the tool writes them: each thread's in time order, in buffers of 1024,
    # the threads' buffers one after the other
    by_thread = np.lexsort((ev["time_ns"], ev["thread"]))
    rank = np.empty(len(ev), np.int64)
    for t in np.unique(ev["thread"]):
        mine = by_thread[ev["thread"][by_thread] == t]
        rank[mine] = np.arange(len(mine)) // 1024 * 8 + t
    at = by_thread[np.argsort(rank[by_thread], kind="stable")]
    ev, pids = ev[at], pids[at]
    names = list(pairing.PAIRINGS)
    merged = pairing.pair_events(ev, pids, None, names, as_rows=True, end_times=True)
    ordered = pairing.pair_events(ev, pids, time_order(ev["time_ns"]), names, as_rows=True,
                                  end_times=True)
    _same_pairs(merged.pairs, ordered.pairs)
    assert sum(len(p.begins) for p in merged.pairs.values()) > 100_000
