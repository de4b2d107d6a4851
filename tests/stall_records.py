"""A hand-made tool stall (a tool_stall record, record version 8, csrc/include/omptpy.h;
docs/stalls.md) put into a stored trace: for the tests of the analysis
(tests/analysis/test_tool_stalls.py) and of the exports (tests/io/test_otf2.py)."""

from __future__ import annotations

import numpy as np

import ompt_py
from ompt_py import _core
from ompt_py.analysis import states
from ompt_py.records import EVENT_CODES, EVENT_DTYPE, SCOPE_BEGINEND

STALL_BYTES = 64 << 20
REGION = 3


def with_stall(base: ompt_py.Trace, thread: int, begin: int, end: int) -> ompt_py.Trace:
    """``base`` (one process) with a tool_stall record of ``thread`` from begin to end
    (ns): the rest of region REGION, STALL_BYTES, made resident by the thread."""
    stall = np.zeros(1, EVENT_DTYPE)
    stall["event"], stall["endpoint"] = EVENT_CODES["tool_stall"], SCOPE_BEGINEND
    stall["kind"], stall["thread"] = _core.STALL_POPULATE, thread
    stall["time_ns"], stall["u64b"] = begin, end
    stall["u64a"], stall["u32a"] = STALL_BYTES, REGION
    events = np.concatenate([base.events, stall])
    order = np.argsort(events["time_ns"], kind="stable")
    pids = np.full(len(events), base.meta["processes"][0]["pid"], np.int32)
    return ompt_py.Trace.from_records(events[order], base.meta, pids=pids)


def stalled(base: ompt_py.Trace) -> tuple[ompt_py.Trace, int, int, int]:
    """``base`` with a stall in the middle third of the longest busy segment of any
    thread: the trace, the thread, the stall's begin and end."""
    seg = states.thread_states(base)
    busy = np.flatnonzero(seg.state == states.THREAD_STATES.index("busy"))
    longest = busy[np.argmax(seg.end[busy] - seg.begin[busy])]
    third = int(seg.end[longest] - seg.begin[longest]) // 3
    begin = int(seg.begin[longest]) + third
    thread = int(seg.group[longest] & 0xFFFF_FFFF)
    return with_stall(base, thread, begin, begin + third), thread, begin, begin + third
