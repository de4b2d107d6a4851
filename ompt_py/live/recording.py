"""Recording this process's events into a trace: the windows of ``ompt_py.trace()``.

A window starts by dropping what the tool recorded outside any window and
switching recording on; it stops by switching it off, flushing every thread's
buffer and taking the records (zero copy: the trace memory itself), whose
times become nanoseconds from the trace's origin.  The trace's metadata counts
the records written and dropped per thread over all its windows.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np

from .. import _core
from ..errors import ConfigError
from ..meta import NOBUF_REASON, modules, process_entry, thread_rows, trace_meta, why_empty
from ..records import RAW_DTYPE, to_events
from . import attach, runhook

#: ompt-py's own package: its frames are not the user's code.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Recorder:
    """The windows of one in-process trace: the counters at the start of the
    current window, the threads seen so far, the trace's clock origin, the
    depth of the Python stacks it captures (0: none) and of their native frames."""

    def __init__(self, python_depth: int, native_depth: int) -> None:
        self.before: dict[int, tuple[int, int, int]] = {}
        self.threads: dict[int, dict] = {}
        self.origin: int | None = None
        self.start_realtime: int | None = None
        self.python_depth = python_depth
        self.native_depth = native_depth

    def start(self) -> None:
        """Open a window (AttachError when the runtime cannot be observed, ConfigError
        in profile mode, which records no events)."""
        attach.ensure_attachable()
        if attach.meta()["config"].get("profile"):
            raise ConfigError("this process runs in profile mode (OMPTPY_PROFILE=on), which "
                              "records no events: use ompt_py.trace(profile=True), or start "
                              "Python without OMPTPY_PROFILE to trace")
        runhook.start_python_stacks(_core, self.python_depth, self.native_depth, (PACKAGE_DIR,))
        _core.flush()
        _core.take()  # drop what was recorded outside any trace window
        stats = json.loads(_core.stats())
        self.before = {t["thread"]: (t["written"], t["dropped"], t.get("nobuf", 0))
                       for t in stats["threads"]}
        if self.origin is None:
            self.origin = stats["anchor"]["mono_ns"]
            self.start_realtime = stats["realtime_ns"]
        _core.set_recording(True)

    def stop(self) -> tuple[np.ndarray, int, dict]:
        """Close the window: its events (EVENT_DTYPE), this process's pid and the
        trace's metadata, all windows counted."""
        _core.set_recording(False)
        _core.flush()
        records = _core.take()
        stats = json.loads(_core.stats())
        meta = attach.meta()
        events = to_events(np.frombuffer(records, RAW_DTYPE), meta["start_anchor"],
                           stats["anchor"], meta["tick_ns_estimate"], self.origin)
        for row in thread_rows(stats, self.before):
            prev = self.threads.get(row["thread"])
            if prev:
                prev["written"] += row["written"]
                prev["dropped"] += row["dropped"]
                prev["lost"] += row["lost"]
            else:
                self.threads[row["thread"]] = row
        threads = sorted(self.threads.values(), key=lambda r: r["thread"])
        lost = sum(t["lost"] for t in threads)  # only threads that got no buffer lose records
        fb = attach.FALLBACK
        stacks = [json.loads(_core.stack_tables(0, 0))]
        proc = process_entry(meta, stats, threads, stacks, complete=True, truncated=False,
                             source="in-process", modules=modules(meta, stats), ending="stop",
                             lost_reasons={NOBUF_REASON: lost} if lost else {},
                             unaccounted_threads=0,
                             fallback={"policy": fb.policy, "libomp": fb.libomp, "how": fb.how,
                                       "early_gnu_modules": fb.early_gnu_modules})
        proc["start_realtime_ns"] = self.start_realtime
        whole = trace_meta([proc], self.origin)
        if not any(rt["initialized"] for rt in meta["runtimes"]):
            warnings.warn(why_empty(whole), stacklevel=3)
        return events, meta["pid"], whole

    def forked(self) -> None:
        """In a child made by fork(): the tool emptied its buffers; so do the windows."""
        self.before, self.threads = {}, {}
