"""Trace.mpi_calls() on hand-made mpi records (csrc/include/omptpy.h, record
version 7): names, kinds, unknown bytes and peers, ranks."""

from __future__ import annotations

import numpy as np
import pandas as pd

import ompt_py
from ompt_py import _core
from ompt_py.records import EVENT_CODES, EVENT_DTYPE, MPI_BYTES_UNKNOWN, SCOPE_BEGINEND


def _calls(rows: list[tuple], ranks: dict[int, int | None]) -> ompt_py.Trace:
    """rows: (pid, thread, call, begin, end, bytes, peer, size)."""
    ev = np.zeros(len(rows), EVENT_DTYPE)
    for i, (_, thread, call, begin, end, nbytes, peer, size) in enumerate(rows):
        ev[i]["event"], ev[i]["endpoint"], ev[i]["kind"] = EVENT_CODES["mpi"], SCOPE_BEGINEND, call
        ev[i]["time_ns"], ev[i]["u64b"], ev[i]["u64a"] = begin, end, nbytes
        ev[i]["thread"], ev[i]["u32a"], ev[i]["u32b"] = thread, peer & 0xFFFF_FFFF, size
    procs = [{"pid": pid, "rank": rank, "config": {}} for pid, rank in ranks.items()]
    return ompt_py.Trace.from_records(ev, {"processes": procs},
                                      pids=np.array([r[0] for r in rows]))


def test_each_call_is_a_row_with_its_kind_and_what_is_known():
    t = _calls([(7, 0, _core.MPI_INIT, 10, 90, MPI_BYTES_UNKNOWN, -1, 2),
                (7, 0, _core.MPI_SEND, 100, 130, 64, 1, 2),
                (7, 1, _core.MPI_ALLREDUCE, 140, 200, 8, -1, 2),
                (8, 0, _core.MPI_RECV, 95, 135, 64, 0, 2),
                (8, 0, _core.MPI_WAIT, 150, 151, MPI_BYTES_UNKNOWN, -1, 0)], {7: 0, 8: None})
    calls = t.mpi_calls()
    assert list(calls.columns) == ["pid", "rank", "thread", "call", "kind", "begin_ns", "end_ns",
                                   "duration_ns", "bytes", "peer", "comm_size", "codeptr"]
    rows = [[None if pd.isna(v) else v for v in row] for row in calls[
        ["pid", "rank", "call", "kind", "duration_ns", "bytes", "peer", "comm_size"]
    ].itertuples(index=False)]
    assert rows == [
        [7, 0, "init", "setup", 80, None, None, 2],
        [7, 0, "send", "point_to_point", 30, 64, 1, 2],
        [7, 0, "allreduce", "collective", 60, 8, None, 2],
        [8, None, "recv", "point_to_point", 40, 64, 0, 2],
        [8, None, "wait", "wait", 1, None, None, None]]


def test_a_trace_without_mpi_calls_has_an_empty_table():
    t = _calls([], {1: None})
    assert len(t.mpi_calls()) == 0 and "call" in t.mpi_calls().columns
