"""Synthetic MPI job datasets (tests/analysis/test_dataset.py, bench/dataset.py):
a dataset of any number of ranks and events, written from generated records
without running anything.

Each rank's records are those of a stored trace (tests/data: known-tasks for the
even ranks, explicit tasks; contended-libomp19 for the odd ones, a contended
lock), repeated until the rank has the events asked for: each copy after the
previous one in time, with its ids (parallel, task, other task) made its own,
and each rank's durations stretched by a factor of its own (1 + rank / 16), so
that the ranks differ.  Every partition is one process of one job (``job_id``,
``rank``, MPI's world size), its origin a few milliseconds after rank 0's (the
ranks started one after the other), and is written by Trace.save as
``ompt-py run -o DIR/`` writes a job's dataset: DIR/pid=N/part-0.parquet.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

import ompt_py
from ompt_py.records import EVENT_CODES, ID_FIELDS, shift_times

DATA = Path(__file__).resolve().parent / "data"
BASES = ("known-tasks.parquet", "contended-libomp19.parquet")
#: The events whose u64a is a task id (other_task_id).
_TASK_ARGUMENT = [EVENT_CODES[e] for e in ("task_create", "task_schedule", "task_dependence")]
FIRST_PID = 4000


def _offset_ids(events: np.ndarray, by: int) -> None:
    """Gives every parallel and task id (0: none, kept) ``by`` more, in place."""
    for name in ("parallel_id", "task_id"):
        users = np.isin(events["event"], [EVENT_CODES[e] for e in ID_FIELDS[name]])
        rows = users & (events[name] != 0)
        events[name][rows] += np.uint64(by)
    rows = np.isin(events["event"], _TASK_ARGUMENT) & (events["u64a"] != 0)
    events["u64a"][rows] += np.uint64(by)


def rank_trace(rank: int, size: int, events: int, job: str = "synthetic-job",
               pid: int | None = None) -> ompt_py.Trace:
    """The trace of one rank of ``size``: at least ``events`` events (whole copies
    of its stored trace), of job ``job``."""
    base = ompt_py.load(DATA / BASES[rank % len(BASES)])
    one = base.events.copy()
    stretch = 1 + rank / 16
    one["time_ns"] = np.round(one["time_ns"] * stretch).astype(np.int64)
    second = np.isin(one["event"], [104, 105])  # SECOND_TIME_EVENTS: none in these traces
    assert not second.any()
    span = int(one["time_ns"].max()) + 1000
    ids = int(max(one["parallel_id"].max(), one["task_id"].max(), one["u64a"][
        np.isin(one["event"], _TASK_ARGUMENT)].max(initial=0))) + 1
    copies = max(1, -(-events // len(one)))
    out = np.empty(len(one) * copies, one.dtype)
    for i in range(copies):
        part = out[i * len(one): (i + 1) * len(one)]
        part[:] = one
        shift_times(part, i * span)
        _offset_ids(part, i * ids)
    # Each thread's records in time order, as a trace keeps them.
    out = out[np.lexsort((out["time_ns"], out["thread"]))]
    meta = copy.deepcopy(base.meta)
    proc = meta["processes"][0]
    pid = FIRST_PID + rank if pid is None else pid
    proc.update(pid=pid, rank=rank, local_rank=rank % 2, hostname="node0", job_id=job,
                mpi={"rank": rank, "size": size, "source": "pmpi"})
    for thread in proc["threads"]:
        thread["written"] *= copies
    proc["written"] *= copies
    meta.update(origin_mono_ns=meta["origin_mono_ns"] + rank * 3_000_000,
                written=proc["written"])
    return ompt_py.Trace.from_records(out, meta, pid)


def write_dataset(out: Path, ranks: int, events: int, job: str = "synthetic-job",
                  leave_out: tuple[int, ...] = ()) -> list[Path]:
    """A dataset of ``ranks`` ranks of ``events`` events or a few more each at
    ``out`` (made), but the ranks ``leave_out``; the partitions' files, in rank
    order."""
    files = []
    for rank in range(ranks):
        if rank in leave_out:
            continue
        rank_trace(rank, ranks, events, job).save(out)
        files.append(out / f"pid={FIRST_PID + rank}" / "part-0.parquet")
    return files
