"""Where the threads' time went, per Python stack and native location: the
weighted stacks of a flame graph (``Trace.plot_flame``, the view's flame panel,
the speedscope export).

Each implicit task of a parallel region (a thread's time in the region) is
split into its thread states (metrics.region_threads: busy, barrier wait,
taskwait/taskgroup wait, lock wait; without the events of the thread states,
one "in region" piece), and each piece is a sample of the stack

    Python frames that started the region (outermost first; Trace.python_stacks)
    > its native callers (native_depth)
    > "parallel region at <location>" (the region's code address, symbolized)
    > the state,

weighted by its nanoseconds.  Explicit tasks that carry a Python stack of
their own (created outside any region, so their time is not in a region's) are
samples of their pieces: Python frames > native callers > "explicit task at
<location>" > "task".  Target constructs and the time of threads outside
regions are not in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import MissingEventsError
from . import metrics, pystacks, tables
from .cache import per_trace
from .pairing import find
from .states import STALL_LABEL, THREAD_STATES, region_tasks, to_int

if TYPE_CHECKING:
    from ..trace import Trace

#: The names of the state frames (the leaves), by THREAD_STATES.
STATE_NAMES = {"busy": "busy", "barrier_wait": "barrier wait",
               "sync_wait": "taskwait/taskgroup wait", "lock_wait": "lock wait",
               "tool_stall": STALL_LABEL}
IN_REGION, TASK = "in region", "task"


@dataclass
class Flame:
    """``frames`` (name, kind: python, native, construct or state), ``stacks`` (each
    a tuple of rows of ``frames``, outermost first) and ``samples`` (pid, thread,
    begin_ns, stack: a position in ``stacks``, weight_ns > 0), in no order."""

    frames: pd.DataFrame
    stacks: list[tuple[int, ...]]
    samples: pd.DataFrame

    def weights(self) -> np.ndarray:
        """The nanoseconds of each stack, over every thread."""
        return np.bincount(self.samples["stack"].to_numpy(np.int64),
                           weights=self.samples["weight_ns"].to_numpy(np.float64),
                           minlength=len(self.stacks))


class _Frames:
    def __init__(self) -> None:
        self.index: dict[tuple[str, str], int] = {}

    def id(self, kind: str, name: str) -> int:
        return self.index.setdefault((kind, name), len(self.index))

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([(name, kind) for kind, name in self.index],
                            columns=["name", "kind"])


def _python_frames(trace: Trace, frames: _Frames) -> dict[tuple[int, int], tuple[int, ...]]:
    """The frames of each (pid, py_stack): Python ones outermost first, then the
    native callers (without the interpreter's own)."""
    rows = pystacks.python_stacks(trace)
    rows = rows[~rows["interpreter"]]
    out: dict[tuple[int, int], list[int]] = {}
    for pid, stack, native, location in zip(rows["pid"].tolist(), rows["stack"].tolist(),
                                            rows["native"].tolist(), rows["location"].tolist()):
        out.setdefault((pid, stack), []).append(frames.id("native" if native else "python",
                                                          location))
    return {k: tuple(v) for k, v in out.items()}


def _construct(what: str, location: object) -> str:
    return f"{what} at {location}" if isinstance(location, str) and location else what


def _pieces(trace: Trace) -> tuple[pd.DataFrame, list[str]]:
    """The implicit tasks of regions with their time per state (columns of the
    states, or one column of the time in the region)."""
    try:
        rt = metrics.region_threads(trace)
        return rt, [f"{s}_ns" for s in THREAD_STATES]
    except MissingEventsError:
        it = region_tasks(trace)
        it = it.assign(in_region_ns=to_int(it["end_ns"]) - to_int(it["begin_ns"]))
        return it, ["in_region_ns"]


@per_trace
def flame(trace: Trace) -> Flame:
    """The weighted stacks of the trace (see the module's docstring)."""
    frames = _Frames()
    python = _python_frames(trace, frames)
    implicit, columns = _pieces(trace)
    # The frames above the state, per site of the regions (metrics.region_sites);
    # the last: implicit tasks of no known region.
    site, sites = metrics.region_sites(trace)
    heads = [(*python.get((pid, stack), ()),
              frames.id("construct", _construct("parallel region", where)))
             for pid, stack, where in zip(sites["pid"].tolist(), sites["py_stack"].tolist(),
                                          sites["location"].tolist())]
    heads.append((frames.id("construct", "parallel region"),))
    row = metrics.region_rows(trace)
    head = np.append(site, len(heads) - 1)[row]  # row -1: the last
    stacks: dict[tuple[int, ...], int] = {}
    pid, thread = to_int(implicit["pid"]), to_int(implicit["thread"])
    begin = to_int(implicit["begin_ns"])
    out = []
    for column in columns:
        leaf = frames.id("state", STATE_NAMES.get(column[:-3], IN_REGION))
        ids = np.array([stacks.setdefault((*h, leaf), len(stacks)) for h in heads], np.int64)
        weight = to_int(implicit[column])
        some = weight > 0
        out.append(pd.DataFrame({"pid": pid[some], "thread": thread[some],
                                 "begin_ns": begin[some], "stack": ids[head[some]],
                                 "weight_ns": weight[some]}))
    out.append(_own_tasks(trace, frames, python, stacks))
    return Flame(frames.table(), sorted(stacks, key=stacks.get),
                 pd.concat(out, ignore_index=True))


def _own_tasks(trace: Trace, frames: _Frames, python: dict[tuple[int, int], tuple[int, ...]],
               stacks: dict[tuple[int, ...], int]) -> pd.DataFrame:
    """The samples of the pieces of explicit tasks with a Python stack of their own."""
    empty = pd.DataFrame({c: pd.Series(dtype=np.int64)
                          for c in ("pid", "thread", "begin_ns", "stack", "weight_ns")})
    pieces = tables.task_pieces(trace)
    if pieces.empty:
        return empty
    tasks = tables.tasks(trace)
    own = tasks[~tasks["py_inherited"] & tasks["py_stack"].notna()]
    if own.empty:
        return empty
    own = tables.with_source(trace, own[["pid", "task_id", "codeptr", "py_stack"]])
    leaf = frames.id("state", TASK)
    ids = np.array([stacks.setdefault((*python.get((int(p), int(s)), ()), frames.id(
        "construct", _construct("explicit task", w)), leaf), len(stacks))
        for p, s, w in zip(own["pid"].tolist(), own["py_stack"].tolist(),
                           own["location"].tolist())], np.int64)
    at = find(own[["pid", "task_id"]], pieces[["pid", "task_id"]])
    mine = pieces[at >= 0]
    return pd.DataFrame({"pid": to_int(mine["pid"]), "thread": to_int(mine["thread"]),
                         "begin_ns": to_int(mine["begin_ns"]), "stack": ids[at[at >= 0]],
                         "weight_ns": to_int(mine["duration_ns"])})


@dataclass
class Icicle:
    """The nodes of an icicle (a flame graph drawn from the top): ``name``, ``kind``
    (of the frame), ``depth`` (0: outermost), ``x0``/``x1`` (the node's part of the
    whole, 0 to 1), ``weight_ns`` and ``path`` (the frames' names from the top,
    joined by " > "), parents before children, children by weight (heaviest
    first)."""

    nodes: pd.DataFrame
    total_ns: float


def icicle(trace: Trace, min_share: float = 0.0) -> Icicle:
    """The flame's stacks merged into a tree; nodes under ``min_share`` of the
    whole are left out (their time stays in their parent's)."""
    f = flame(trace)
    weights = f.weights()
    names, kinds = f.frames["name"].tolist(), f.frames["kind"].tolist()
    tree: dict[tuple[int, ...], float] = {}
    for stack, w in zip(f.stacks, weights.tolist()):
        for depth in range(1, len(stack) + 1):
            tree[stack[:depth]] = tree.get(stack[:depth], 0.0) + w
    total = float(weights.sum())
    rows: list[tuple] = []

    def place(prefix: tuple[int, ...], x0: float) -> None:
        for child in sorted(children.get(prefix, []), key=lambda k: -tree[k]):
            width = tree[child] / total
            if width < min_share or tree[child] <= 0:
                continue
            rows.append((names[child[-1]], kinds[child[-1]], len(child) - 1, x0, x0 + width,
                         tree[child], " > ".join(names[i] for i in child)))
            place(child, x0)
            x0 += width

    children: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for key in tree:
        children.setdefault(key[:-1], []).append(key)
    if total > 0:
        place((), 0.0)
    nodes = pd.DataFrame(rows, columns=["name", "kind", "depth", "x0", "x1", "weight_ns",
                                        "path"])
    return Icicle(nodes, total)
