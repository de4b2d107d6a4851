"""The speedscope export (``ompt-py export --format speedscope``): the file format
of https://www.speedscope.app (file-format-schema.json), which speedscope opens
offline too.

One "sampled" profile per thread ("pid P thread T"), in nanoseconds, for the
threads and processes the export's filter keeps: its samples are the flame's
(ompt_py.analysis.flame: each implicit task's time per thread state, each piece
of an explicit task with a Python stack of its own), in the order the thread
ran them, each the stack of Python frames, native callers, the construct at its
location and the thread state, weighted by its nanoseconds.  The frames are
shared by every profile.  A sample is a time per state, not an interval: a
time window (--start/--end) does not apply, and is refused (ConfigError)
rather than cut approximately.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import numpy as np

from ..analysis import flame
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..trace import Trace
    from .filters import ExportFilter

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
#: The version of the format written (speedscope's file-format-spec.ts).
VERSION = "0.6.0"


def write(trace: Trace, path: str | os.PathLike, flt: ExportFilter) -> None:
    """Writes the speedscope file of ``trace`` to ``path``: the threads and processes
    ``flt`` keeps; ConfigError for a time window."""
    if flt.windowed:
        raise ConfigError("the speedscope export has no time window: its samples are the "
                          "threads' time per region and state, not intervals to cut; leave "
                          "out start and end (--start/--end), or view a window with "
                          "ompt-py view --start/--end")
    f = flame.flame(trace)
    samples = f.samples[flt.tracks(f.samples["pid"].to_numpy(np.int64),
                                   f.samples["thread"].to_numpy(np.int64))]
    samples = samples.sort_values(["pid", "thread", "begin_ns"], kind="stable")
    stacks = np.array([json.dumps(list(s)) for s in f.stacks] or [""], dtype=object)
    pid, thread = samples["pid"].to_numpy(np.int64), samples["thread"].to_numpy(np.int64)
    stack = samples["stack"].to_numpy(np.int64)
    weight = samples["weight_ns"].to_numpy(np.int64)
    begin = samples["begin_ns"].to_numpy(np.int64)
    cut = np.flatnonzero((pid[1:] != pid[:-1]) | (thread[1:] != thread[:-1])) + 1
    several = len(np.unique(pid)) > 1
    head = {"$schema": SCHEMA, "version": VERSION, "exporter": "ompt-py",
            "name": trace.meta.get("processes", [{}])[0].get("exe") or "ompt-py trace",
            "activeProfileIndex": 0,
            "shared": {"frames": [{"name": name} for name in f.frames["name"].tolist()]}}
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(head)[:-1] + ', "profiles": [')
        for k, (a, b) in enumerate(zip(np.append(0, cut).tolist(),
                                       np.append(cut, len(pid)).tolist())):
            if a == b:
                continue
            name = (f"pid {pid[a]} " if several else "") + f"thread {thread[a]}"
            start = int(begin[a])
            profile = {"type": "sampled", "name": name, "unit": "nanoseconds",
                       "startValue": start, "endValue": start + int(weight[a:b].sum())}
            out.write(("" if k == 0 else ", ") + json.dumps(profile)[:-1])
            out.write(', "samples": [' + ",".join(stacks[stack[a:b]]) + "]")
            out.write(', "weights": [' + ",".join(map(str, weight[a:b].tolist())) + "]}")
        out.write("]}\n")
