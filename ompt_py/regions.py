"""Regions of user code: ``ompt_py.region`` in Python, ``omptpy_region.h`` in C.

A marker is a ``region`` event (number 101) with endpoint begin or end and
the id of its name in ``u64a``; the tool interns the names and lists them in
the trace metadata (``meta["processes"][i]["region_names"]``, id 1 first).
This module gives the markers their Python side: the context manager and
decorator, and the pairing of markers into ``Trace.user_regions()``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pandas as pd

from . import _core
from ._records import EVENT_CODES

REGION = EVENT_CODES["region"]
BEGIN, END = 1, 2

COLUMNS = ["pid", "thread", "id", "name", "level", "parent_id", "parent", "begin_ns", "end_ns",
           "duration_ns", "codeptr"]


class region(contextlib.ContextDecorator):  # lower case: used like a function
    """Marks a region of user code on the calling thread::

        with ompt_py.region("assemble"):
            ...

        @ompt_py.region("solve")
        def solve(): ...

    Regions nest; each appears in ``Trace.user_regions()`` with its name,
    nesting level and parent, and reaches handlers as a ``region`` event.
    Recorded while a trace window is open or handlers are registered (about
    a microsecond per marker from Python; nothing otherwise).
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a region needs a non-empty name (str), not {name!r}")
        if "\0" in name:
            raise ValueError("a region name cannot contain NUL characters")
        self.name = name

    def __enter__(self) -> region:
        _core.region_mark(BEGIN, self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        _core.region_mark(END, self.name)

    def __repr__(self) -> str:
        return f"ompt_py.region({self.name!r})"


def region_names() -> list[str]:
    """The region names interned so far in this process; a marker's ``u64a`` is
    the index into this list plus one (0: an end without a name)."""
    return _core.region_names()


def user_regions(events: np.ndarray, pids: np.ndarray, meta: dict[str, Any]) -> pd.DataFrame:
    """Pairs the region markers of a trace, per process and thread.

    An end closes the innermost open region of its name (the innermost one
    when it has no name); regions opened above it without an end of their
    own, and ends that close nothing (their begin was outside the trace
    window), are counted in ``attrs["unmatched_begins"]`` and
    ``["unmatched_ends"]``; such a region is not in the table, though its
    children name it as their parent.
    """
    names_of = {p["pid"]: p.get("region_names", []) for p in meta.get("processes", [])}
    mine = events["event"] == REGION
    ev, ev_pids = events[mine], pids[mine]
    rows: list[tuple] = []
    unmatched_begins = unmatched_ends = 0
    order = np.lexsort((ev["time_ns"], ev["thread"], ev_pids))
    pid_l, thread_l = ev_pids[order].tolist(), ev["thread"][order].tolist()
    time_l, id_l = ev["time_ns"][order].tolist(), ev["u64a"][order].tolist()
    begin_l, code_l = (ev["endpoint"][order] == BEGIN).tolist(), ev["codeptr"][order].tolist()
    stacks: dict[tuple[int, int], list[int]] = {}  # open rows per (pid, thread)
    for pid, thread, time_ns, name_id, begin, codeptr in zip(
            pid_l, thread_l, time_l, id_l, begin_l, code_l):
        names = names_of.get(pid, [])
        name = names[name_id - 1] if 0 < name_id <= len(names) else None
        stack = stacks.setdefault((pid, thread), [])
        if begin:
            parent = rows[stack[-1]] if stack else None
            rows.append([pid, thread, len(rows), name, len(stack),
                         parent[2] if parent else None, parent[3] if parent else None,
                         time_ns, None, None, codeptr])
            stack.append(len(rows) - 1)
            continue
        at = next((k for k in range(len(stack) - 1, -1, -1)
                   if name_id == 0 or rows[stack[k]][3] == name), None)
        if at is None:
            unmatched_ends += 1
            continue
        unmatched_begins += len(stack) - 1 - at
        row = rows[stack[at]]
        row[8] = time_ns
        row[9] = time_ns - row[7]
        del stack[at:]
    unmatched_begins += sum(len(s) for s in stacks.values())
    done = [r for r in rows if r[8] is not None]
    table = pd.DataFrame(done, columns=COLUMNS)
    for column in ("pid", "thread", "id", "level", "begin_ns", "end_ns", "duration_ns"):
        table[column] = table[column].astype(np.int64)
    table["codeptr"] = table["codeptr"].astype(np.uint64)
    table["parent_id"] = table["parent_id"].astype("Int64")
    table = table.sort_values(["pid", "begin_ns", "thread", "level"], kind="stable")
    table = table.reset_index(drop=True)
    table.attrs["unmatched_begins"] = unmatched_begins
    table.attrs["unmatched_ends"] = unmatched_ends
    return table
