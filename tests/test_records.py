"""records.of_events: which records are of some events, the records' field read
in place, as np.isin tells it."""

from __future__ import annotations

import numpy as np
import pytest

from ompt_py.records import EVENT_DTYPE, of_events


@pytest.mark.parametrize("events", [[], [3], [3, 7, 40], [1000]])
def test_of_events_is_isin(events):
    rng = np.random.default_rng(len(events))
    records = np.zeros(10_000, EVENT_DTYPE)
    records["event"] = rng.integers(0, 45, len(records))
    for codes in (records["event"], np.ascontiguousarray(records["event"])):
        got = of_events(codes, events)
        assert got.dtype == bool
        np.testing.assert_array_equal(got, np.isin(codes, events))
