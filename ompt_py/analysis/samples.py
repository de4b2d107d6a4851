"""State samples (``OMPTPY_SAMPLE_HZ``): what the runtime said each thread was
doing when its timer fired, named, and the share of time per state."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..records import STATE_CATEGORIES, STATE_RAW_CATEGORIES, WORK_STATES
from . import tables
from .columns import conform

if TYPE_CHECKING:
    from ..trace import Trace


def samples(trace: Trace) -> pd.DataFrame:
    """State samples: time, thread, state (one vocabulary for every libomp version:
    libomp 19's kinds of barrier wait become `wait_barrier` and
    `wait_barrier_implicit`, as libomp 14 and 16 say), state_raw (the runtime's
    own name), missed (the timer periods just before the sample in which the
    thread had no CPU: the kernel merged their expirations into this sample's
    signal, and the thread, running none of its code, was in this state all
    along), wait id, parallel region and task of the moment, the interrupted
    code address (codeptr), the innermost task's frames (exit_frame,
    enter_frame: stack addresses, see Trace.to_pandas) and ``where`` the thread
    was: ``runtime`` when the task had called into the runtime (its enter frame
    is set: a barrier, taskwait, task creation, the start of a parallel
    region...) or the state is not a work state (waits, idle, overhead: libomp
    sets no enter frame for lock and critical waits, nor in the barrier after
    an implicit task's end), else ``user`` (the task's own code).  Samples of
    one task invocation share its exit frame; a task run inside another task's
    runtime call on the same thread (at a taskwait or barrier, or undeferred)
    has its exit frame below that task's."""
    s = tables.event_rows(trace, ["sample"],
                          ["time_ns", "pid", "thread", "state", "missed", "wait_id",
                           "parallel_id", "task_id", "codeptr", "exit_frame", "enter_frame"])
    codes = s["state"].to_numpy(np.int64, na_value=np.iinfo(np.int64).max)  # <NA>: none
    s["state"] = STATE_CATEGORIES.categorical(codes)
    s.insert(4, "state_raw", STATE_RAW_CATEGORIES.categorical(codes))
    runtime = (s["enter_frame"].to_numpy(np.uint64, na_value=0) != 0) | ~np.isin(codes,
                                                                              WORK_STATES)
    s["where"] = pd.Categorical.from_codes(runtime.astype(np.int8),
                                           categories=["user", "runtime"])
    return conform(s, "samples")


def state_breakdown(trace: Trace, by: str = "thread", raw: bool = False) -> pd.DataFrame:
    """Share of each thread's time in each state (work, barrier waits,
    lock/critical/ordered waits, taskwait/taskgroup, idle, overhead), per thread
    (``by="thread"``) or per parallel region (``by="region"``: samples taken
    inside it, all threads).  Each sample stands for its timer period and the
    periods the thread missed just before it (samples()["missed"]: it had no
    CPU, and was in the sampled state then too), so a thread that other
    processes keep off its CPU more in one state than in another is still
    measured right.  A ``samples`` column gives the number of samples,
    ``periods`` the periods they stand for.  States are named in one
    vocabulary for every libomp version (samples()["state"]); ``raw=True``:
    the runtime's own names (libomp 19 tells explicit, worksharing and
    region-end barrier waits apart)."""
    keys = {"thread": ["pid", "thread"], "region": ["pid", "parallel_id"]}.get(by)
    if keys is None:
        raise ValueError(f"by={by!r}: use 'thread' or 'region'")
    s = samples(trace)
    if by == "region":
        s = s[s["parallel_id"].to_numpy(np.uint64, na_value=0) != 0]  # 0: in no region
    state = "state_raw" if raw else "state"
    s = s.assign(periods=s["missed"].to_numpy(np.int64, na_value=0) + 1)
    per_state = s.groupby([*keys, state], observed=True)["periods"].agg(["size", "sum"])
    periods = per_state["sum"].unstack(state, fill_value=0)
    periods.columns.name = "state"
    total = periods.sum(axis=1)
    shares = periods.div(total, axis=0)
    shares.insert(0, "samples", per_state["size"].groupby(level=list(range(len(keys)))).sum())
    shares.insert(1, "periods", total)
    return conform(shares, "state_breakdown")
