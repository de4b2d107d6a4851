"""The thread states' interval kernels (states.sweep and states.cumulative, in C:
csrc/ext/states.c) against the definition, nanosecond by nanosecond, on random
intervals of small integer times: a layer is open over [t, t + 1) when more of
its intervals began at or before t than ended; the piece's state is the table's
for the set of open layers; segments are the runs of one state.  Both of the
kernel's sorts are exercised: tables in time order (a few runs, merged) and in
random order (the radix sort)."""

from __future__ import annotations

import numpy as np
import pytest

from ompt_py import _core
from ompt_py.analysis import states


def _by_the_definition(group, begin, end, layer, table):
    """Segments (group, begin, end, state) from the open layers at each time unit."""
    out = []
    for g in np.unique(group):
        mine = group == g
        b, e, lay = begin[mine], end[mine], layer[mine]
        for t in range(int(min(b.min(), e.min())), int(max(b.max(), e.max()))):
            sets = sum(1 << k for k in range(len(table).bit_length() - 1)
                       if (b[lay == k] <= t).sum() > (e[lay == k] <= t).sum())
            state = table[sets]
            if state < 0:
                continue
            if out and out[-1][0] == g and out[-1][2] == t and out[-1][3] == state:
                out[-1][2] = t + 1
            else:
                out.append([g, t, t + 1, state])
    return np.array(out, np.int64).reshape(-1, 4)


def _random(rng, n, groups, layers, ordered):
    group = rng.integers(0, groups, n) * 7 + 3
    begin = rng.integers(0, 200, n)
    end = begin + rng.integers(0, 25, n)
    layer = rng.integers(0, layers, n)
    if ordered:  # each layer's intervals in time order, as the tables come
        order = np.lexsort((begin, layer))
        group, begin, end, layer = group[order], begin[order], end[order], layer[order]
    return group, begin, end, layer


@pytest.mark.parametrize("ordered", [True, False], ids=["merged", "radix"])
@pytest.mark.parametrize("seed", range(4))
def test_sweep_and_cumulative_as_defined(seed, ordered):
    rng = np.random.default_rng(seed)
    layers = int(rng.integers(1, 5))
    table = rng.integers(-1, 3, 1 << layers)
    group, begin, end, layer = _random(rng, int(rng.integers(100, 600)), int(rng.integers(1, 4)),
                                       layers, ordered)

    def classify(opened):
        sets = sum(opened(k).astype(np.int64) << k for k in range(layers))
        return table[sets]

    seg = states.sweep([(group[layer == k], begin[layer == k], end[layer == k])
                        for k in range(layers)], classify)
    want = _by_the_definition(group, begin, end, layer, table)
    got = np.column_stack([seg.group, seg.begin, seg.end, seg.state]).astype(np.int64)
    np.testing.assert_array_equal(got, want)

    # Time per state before each query time, queries in any order, one group unknown.
    queries = rng.integers(0, 4, 300) * 7 + 3
    times = rng.integers(-5, 240, 300)
    def before(g, t):
        mine = want[want[:, 0] == g]
        inside = np.clip(t - mine[:, 1], 0, mine[:, 2] - mine[:, 1])
        return np.array([inside[mine[:, 3] == s].sum() for s in range(3)])

    cum = states.cumulative(seg, 3, queries, times)
    for i in range(len(queries)):
        np.testing.assert_array_equal(cum[i], before(queries[i], times[i]))
    # Time per state within spans, some ending before they begin (states.overlap: 5 states).
    ends = times + rng.integers(-20, 60, len(times))
    within = states.overlap(seg, queries, times, ends)
    for i in range(len(queries)):
        np.testing.assert_array_equal(
            within[i], np.append(before(queries[i], ends[i]) - before(queries[i], times[i]),
                                 [0, 0]))


def test_sweep_keeps_times_far_from_zero_and_refuses_a_span_beyond_a_trace():
    base = 1 << 62
    seg = states.sweep([(np.zeros(2, np.int64), np.array([base, base + 10]),
                         np.array([base + 20, base + 30]))],
                       lambda opened: np.where(opened(0), 1, -1))
    assert (seg.begin.tolist(), seg.end.tolist(), seg.state.tolist()) == ([base], [base + 30], [1])
    with pytest.raises(ValueError, match="span more than"):
        states.sweep([(np.zeros(2, np.int64), np.array([0, base]), np.array([1, base + 1]))],
                     lambda opened: np.where(opened(0), 1, -1))


def test_sweep_refuses_what_is_not_its_layers():
    one = np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="not in keys"):
        _core.sweep([(one + 5, one, one + 1)], one, np.array([-1, 0], np.int8))
    with pytest.raises(ValueError, match="sorted and distinct"):
        _core.sweep([(one, one, one + 1)], np.array([1, 0]), np.array([-1, 0], np.int8))
    with pytest.raises(ValueError, match="2\\*\\*1 states"):
        _core.sweep([(one, one, one + 1)], one, np.array([-1, 0, 0, 0], np.int8))
    with pytest.raises(ValueError, match="as many as"):
        _core.sweep([(one, np.zeros(2, np.int64), one)], one, np.array([-1, 0], np.int8))
    with pytest.raises(TypeError, match="a layer is"):
        _core.sweep([(one, one)], one, np.array([-1, 0], np.int8))


def test_cumulative_refuses_segments_not_where_first_says():
    seg = states.sweep([(np.array([3, 3, 5]), np.array([0, 4, 1]), np.array([2, 6, 3]))],
                       lambda opened: np.where(opened(0), 0, -1))
    assert seg.first.tolist() == [0, 2, 3] and seg.group.tolist() == [3, 3, 5]
    out = np.zeros((1, 1), np.int64)
    for first in ([1, 2, 3], [0, 3, 2], [0, 2, 2], [0, 2, 4]):
        with pytest.raises(ValueError, match="not where group"):
            _core.cumulative(np.array(first, np.int64), seg.begin, seg.end, seg.state,
                             np.zeros(1, np.int32), np.zeros(1, np.int64), out, False)
    with pytest.raises(ValueError, match="first of 1"):
        _core.cumulative(np.zeros(0, np.int64), seg.begin[:0], seg.end[:0], seg.state[:0],
                         np.zeros(1, np.int32), np.zeros(1, np.int64), out, False)
