"""Reading profile mode's aggregates (OMPTPY_PROFILE=on, ``ompt-py run --profile``).

The tool writes, per thread slot, PROFILE blocks of fixed-size rows
(csrc/tool/omptpy_file.h; the numpy dtypes are ``records.PROFILE_*``) into the
process's raw file at each ending (finalize, exit, the hook's), each holding
everything so far: the last block of a slot is the one read.  In process,
``_core.profile()`` returns the same blocks.  ``load_profile`` makes a
``Profile``: four DataFrames (times in nanoseconds) and the meta.  A block that
cannot be read is a TraceFileError; rows lost to full tables a TraceWarning.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import _core, schema
from ..errors import TraceFileError, TraceWarning
from ..records import (
    CONSTRUCTS,
    EVENT_CODES,
    IMPLICIT_KINDS,
    KIND_NAMES,
    PARALLEL_KINDS,
    PROFILE_HEAD_DTYPE,
    PROFILE_ROW_DTYPE,
    PROFILE_TABLES,
    PROFILE_VERSION,
    tick_scale,
)
from . import rawfile

#: A parallel region's and an implicit task's kinds in a profile row (the tool's
#: flags: a teams league, an initial task).
_OWN_KINDS = {"parallel_begin": dict(enumerate(PARALLEL_KINDS)),
              "implicit_task": dict(enumerate(IMPLICIT_KINDS)), "masked": {0: "masked"}}
_EVENT_NAMES = {code: name for name, code in EVENT_CODES.items()}


@dataclass
class Profile:
    """A profile's tables, one row per aggregate (pid, thread, codeptr: a source
    location; times in nanoseconds, ``hist``: durations per log2 bucket, bucket b
    counting [2^(b-1), 2^b) ns):

    * ``constructs``: construct, kind, count, total_ns, min_ns, max_ns, hist;
    * ``regions_threads``: a parallel region's codeptr on a thread: implicit
      tasks, duration_ns, barrier_wait_ns, sync_wait_ns, lock_wait_ns, busy_ns;
    * ``locks``: kind, wait_id, codeptr of the acquisition: acquisitions,
      wait_total_ns, wait_min_ns, wait_max_ns, hold_total_ns, hold_max_ns, hist (waits);
    * ``tasks``: creation codeptr, thread: created, ran (tasks that finished
      running on the thread), run_total_ns, run_min_ns, run_max_ns, hist;

    ``meta``: ``processes`` (pid, source, ``unmapped``: threads that had no
    memory for their tables, slots: per thread slot its ``overflow``, the
    aggregates not made, and the ``threads`` its rows name).
    """

    constructs: pd.DataFrame
    regions_threads: pd.DataFrame
    locks: pd.DataFrame
    tasks: pd.DataFrame
    meta: dict = field(default_factory=dict)


def parse_blocks(data: bytes, source: str) -> tuple[np.ndarray, list[dict]]:
    """Rows (PROFILE_ROW_DTYPE) and slots ({slot, overflow}) of a sequence of PROFILE
    blocks as ``_core.profile()`` returns them (header and payload each); the last
    block of each slot wins."""
    payloads, off = [], 0
    while off < len(data):
        if off + schema.HEADER.size > len(data):
            raise TraceFileError(f"{source}: its profile ends inside a block header")
        magic, kind, length = schema.HEADER.unpack_from(data, off)
        if magic != schema.MAGIC or kind != _core.BLOCK_PROFILE:
            raise TraceFileError(f"{source}: a profile block header is corrupt (magic "
                                 f"{magic:#x}, type {kind})")
        off += schema.HEADER.size
        payloads.append(data[off:off + length])
        off += length
    return read_payloads(payloads, source)


def read_payloads(payloads: list[bytes], source: str) -> tuple[np.ndarray, list[dict]]:
    """Rows and slots of PROFILE payloads (in the order written: a slot's later block
    replaces its earlier ones); TraceFileError when one is corrupt."""
    last: dict[int, tuple[np.ndarray, int]] = {}
    for payload in payloads:
        if len(payload) < PROFILE_HEAD_DTYPE.itemsize:
            raise TraceFileError(f"{source}: a PROFILE block of {len(payload)} bytes is "
                                 "shorter than its header: trace the program again")
        head = np.frombuffer(payload, PROFILE_HEAD_DTYPE, 1)[0]
        want = PROFILE_HEAD_DTYPE.itemsize + int(head["nrows"]) * PROFILE_ROW_DTYPE.itemsize
        if int(head["version"]) != PROFILE_VERSION or \
                int(head["row_size"]) != PROFILE_ROW_DTYPE.itemsize:
            raise TraceFileError(f"{source}: a PROFILE block of version {int(head['version'])} "
                                 f"with {int(head['row_size'])}-byte rows; this ompt_py reads "
                                 f"version {PROFILE_VERSION} ({PROFILE_ROW_DTYPE.itemsize} "
                                 "bytes): read it with the ompt-py that wrote it")
        if len(payload) != want:
            raise TraceFileError(f"{source}: a PROFILE block is {len(payload)} bytes, its "
                                 f"header says {want}: the file is corrupt")
        rows = np.frombuffer(payload, PROFILE_ROW_DTYPE, offset=PROFILE_HEAD_DTYPE.itemsize)
        if len(rows) and not np.isin(rows["table"], list(PROFILE_TABLES)).all():
            raise TraceFileError(f"{source}: a PROFILE block has rows of unknown tables: "
                                 "the file is corrupt")
        last[int(head["slot"])] = (rows, int(head["overflow"]))
    slots = [{"slot": s, "overflow": o, "threads": sorted(set(r["thread"].tolist()))}
             for s, (r, o) in sorted(last.items())]
    rows = np.concatenate([r for r, _ in last.values()]) if last else \
        np.empty(0, PROFILE_ROW_DTYPE)
    return rows, slots


def _kind_names(events: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    names = np.empty(len(events), dtype=object)
    for i, (e, k) in enumerate(zip(events.tolist(), kinds.tolist())):
        event = _EVENT_NAMES.get(e, str(e))
        names[i] = {**KIND_NAMES.get(event, {}), **_OWN_KINDS.get(event, {})}.get(k, str(k))
    return names


def _ns(ticks: np.ndarray, scale: float) -> np.ndarray:
    return np.rint(ticks.astype(np.float64) * scale).astype(np.int64)


def tables(rows: np.ndarray, pid: int, scale: float) -> dict[str, pd.DataFrame]:
    """The four tables of one process's rows, times converted with ``scale`` (ns per tick)."""
    out = {}
    for table, name in PROFILE_TABLES.items():
        r = rows[rows["table"] == table]
        base = pd.DataFrame({"pid": np.full(len(r), pid, np.int64),
                             "thread": r["thread"].astype(np.int64), "codeptr": r["codeptr"]})
        hist = list(r["hist"].astype(np.int64))
        count = r["count"].astype(np.int64)
        if name == "constructs":
            events = [_EVENT_NAMES.get(e, str(e)) for e in r["event"].tolist()]
            df = base.assign(construct=[CONSTRUCTS.get(e, e) for e in events],
                             kind=_kind_names(r["event"], r["kind"]), count=count,
                             total_ns=_ns(r["total"], scale), min_ns=_ns(r["min"], scale),
                             max_ns=_ns(r["max"], scale), hist=hist)
        elif name == "regions_threads":
            df = base.assign(implicit_tasks=count, duration_ns=_ns(r["total"], scale),
                             barrier_wait_ns=_ns(r["a"], scale), sync_wait_ns=_ns(r["b"], scale),
                             lock_wait_ns=_ns(r["c"], scale))
            df["busy_ns"] = (df["duration_ns"] - df["barrier_wait_ns"] - df["sync_wait_ns"]
                             - df["lock_wait_ns"])
        elif name == "locks":
            df = base.assign(kind=_kind_names(r["event"], r["kind"]), wait_id=r["wait_id"],
                             acquisitions=count, wait_total_ns=_ns(r["total"], scale),
                             wait_min_ns=_ns(r["min"], scale), wait_max_ns=_ns(r["max"], scale),
                             hold_total_ns=_ns(r["a"], scale), hold_max_ns=_ns(r["b"], scale),
                             hist=hist)
        else:
            ran = r["a"].astype(np.int64)
            df = base.assign(created=count, ran=ran, run_total_ns=_ns(r["total"], scale),
                             run_min_ns=np.where(ran > 0, _ns(r["min"], scale), 0),
                             run_max_ns=_ns(r["max"], scale), hist=hist)
        out[name] = df
    return out


def load_profile(path: str | os.PathLike) -> Profile:
    """The profile of a raw file or of a directory of them (``OMPTPY_OUTPUT`` of a run
    with ``OMPTPY_PROFILE=on``): TraceFileError when a file cannot be read or holds no
    profile; a TraceWarning when aggregates were lost to full tables (raise
    OMPTPY_PROFILE_ENTRIES)."""
    source = os.fspath(path)
    if not os.path.exists(source):
        raise TraceFileError(f"no profile at {source}: the file or directory does not exist")
    paths = rawfile.list_dir(source) if os.path.isdir(source) else [source]
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in PROFILE_TABLES.values()}
    processes = []
    for p in map(rawfile.scan, paths):
        payloads = p.blocks.get("PROFILE", [])
        if not payloads:
            continue
        rows, slots = read_payloads(payloads, p.path)
        for name, df in tables(rows, p.meta["pid"], tick_scale(
            p.meta["start_anchor"], p.stats[-1]["anchor"] if p.stats else None,
            p.meta["tick_ns_estimate"])).items():
            parts[name].append(df)
        unmapped = p.stats[-1].get("profile_unmapped", 0) if p.stats else 0
        processes.append({"pid": p.meta["pid"], "source": p.path, "slots": slots,
                          "unmapped": unmapped})
    if not processes:
        raise TraceFileError(f"{source} holds no profile: run the program with "
                             "OMPTPY_PROFILE=on (ompt-py run --profile)")
    unmapped = sum(proc["unmapped"] for proc in processes)
    if unmapped:
        warnings.warn(f"{source}: {unmapped:,} threads had no memory for their profile tables: "
                      "their events are in no figure", TraceWarning, stacklevel=2)
    lost = sum(s["overflow"] for proc in processes for s in proc["slots"])
    if lost:
        warnings.warn(f"{source}: {lost:,} aggregates were not made because a thread's table "
                      "was full or its nesting too deep: their figures are missing; raise "
                      "OMPTPY_PROFILE_ENTRIES", TraceWarning, stacklevel=2)
    frames = {name: pd.concat(dfs, ignore_index=True) for name, dfs in parts.items()}
    return Profile(**frames, meta={"processes": processes})
