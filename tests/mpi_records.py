"""Hand-made MPI jobs (record version 7, csrc/include/omptpy.h): each rank the
OpenMP events of one stored trace (known-skewed-static: a skewed static loop)
under a pid, rank, host and local rank of its own, with mpi records of known
times.  Shared by the tests of tests/analysis (ranks), tests/io (the exports'
ranks) and tests/presentation."""

from __future__ import annotations

import numpy as np
from conftest import load_stored

import ompt_py
from ompt_py import _core
from ompt_py.records import EVENT_CODES, EVENT_DTYPE, MPI_BYTES_UNKNOWN, SCOPE_BEGINEND

RANKS = 4
PID = 100  # rank r's pid: PID + r
BARRIER, ALLREDUCE, BCAST = _core.MPI_BARRIER, _core.MPI_ALLREDUCE, _core.MPI_BCAST


def mpi(rank: int, call: int, begin: int, end: int, size: int = RANKS) -> tuple:
    """A row of ``records``: rank's call (_core.MPI_*) from begin to end, on a
    communicator of ``size``."""
    return (rank, call, begin, end, size)


def records(rows: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """mpi records of rows (rank, call, begin, end, comm_size), and their pids."""
    ev = np.zeros(len(rows), EVENT_DTYPE)
    for i, (_, call, begin, end, size) in enumerate(rows):
        ev[i]["event"], ev[i]["endpoint"], ev[i]["kind"] = EVENT_CODES["mpi"], SCOPE_BEGINEND, call
        ev[i]["time_ns"], ev[i]["u64b"], ev[i]["u64a"] = begin, end, MPI_BYTES_UNKNOWN
        ev[i]["u32a"], ev[i]["u32b"] = 0xFFFF_FFFF, size
    return ev, np.array([PID + r[0] for r in rows], np.int32)


def job(rows: list[tuple], ranks_: int = RANKS) -> ompt_py.Trace:
    """A job of ``ranks_`` ranks (pids PID + rank, two ranks a host): each the
    OpenMP events of known-skewed-static, and the mpi records of ``rows``."""
    base = load_stored("known-skewed-static")
    (proc,) = base.meta["processes"]
    parts, pids, procs = [], [], []
    for r in range(ranks_):
        parts.append(base.events.copy())
        pids.append(np.full(len(base.events), PID + r, np.int32))
        procs.append({**proc, "pid": PID + r, "rank": r, "local_rank": r % 2,
                      "hostname": f"node{r // 2}", "job_id": "j1",
                      "mpi": {"rank": r, "size": ranks_, "source": "pmpi"}})
    ev, who = records(rows)
    parts.append(ev)
    pids.append(who)
    meta = {**base.meta, "processes": procs}
    return ompt_py.Trace.from_records(np.concatenate(parts), meta, pids=np.concatenate(pids))


def barriers(arrive: list[list[int]], stay: int = 100) -> list[tuple]:
    """One barrier per row of ``arrive`` (each rank's arrival), every rank leaving
    ``stay`` ns after the last arrives."""
    rows = []
    for times in arrive:
        leave = max(times) + stay
        rows += [mpi(r, BARRIER, t, leave) for r, t in enumerate(times)]
    return rows
