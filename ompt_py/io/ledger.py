"""The ledger of a raw file: what each thread of a process image wrote into its
buffers, so that the records that never reached the file are counted, per
thread and with their reason, however the process ended.

The tool keeps the ledger in the file itself (LEDGER blocks, see
csrc/tool/omptpy_file.h and ledger.c), in memory shared with the file, so it
is there after a SIGKILL, a crash, ``_exit``, ``exec`` or a full disk.  A
thread wrote ``handed`` records in the chunks it filled, plus the count of
the chunk it was filling (a descriptor of its slot, in a SLOT block).  Of
those, the ones in the file were kept, the ones outside the sink's window
were discarded on purpose (written only for handlers), and the rest are
lost: to a failed write (``sink_lost``, the file's errno), or to how the
image ended (still in the buffers when it was killed, called ``_exit``,
``exec`` or ``abort``).  Records a thread could not even buffer (``nobuf``: no
memory for its buffer) are lost too; records dropped because buffers were
full stay ``dropped``.

In an in-place file (the head's ``in_place``: REGION blocks, read by
``rawfile``) threads wrote their records into the file itself, so nothing is
lost to buffering: every record written is in the file (but those beyond its
end, when it was cut short after the run, which are counted lost), and only
``dropped`` (no room) and ``nobuf`` count.  Its WINDOWS block holds the sink's
windows (``Ledger.windows``): the reader drops the records stamped in none
(``Ledger.keeps``), which were written for handlers only (discarded, not
lost); without the block every record is kept.

An exec made through ompt-py's preload hook gives the new image a file of
its own whose META names the previous one (``exec_from``) and whose thread
indices go on from the previous image's: the files of one pid are the
successive images of one process (``images``); files of one pid that are not
so linked are two different processes, an error.
"""

from __future__ import annotations

import errno as errno_names
import os
import struct
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .. import _core
from ..errors import TraceFileError, TraceWarning
from ..meta import NOBUF_REASON
from ..records import THREAD_TYPES

if TYPE_CHECKING:
    from .rawfile import RawProcess

PREFIX = struct.Struct("<IIQI12x")  # kind, data_offset, data_bytes, slot
HEAD = np.dtype([("version", "<u4"), ("thread_cap", "<u4"), ("thread_base", "<u4"),
                 ("chunk_records", "<u4"), ("max_chunks", "<u4"), ("ending", "<u4"),
                 ("sink_errno", "<i4"), ("unaccounted", "<u4"), ("in_place", "<u4"),
                 ("reserved32", "<u4"), ("reserved", "<u8", 3)])
THREAD = np.dtype([("used", "<u4"), ("slot", "<u4"), ("tid", "<i4"), ("flags", "<u4"),
                   ("cur", "<u4"), ("type", "<i4"), ("handed", "<u8"), ("dropped", "<u8"),
                   ("discarded", "<u8"), ("sink_lost", "<u8"), ("nobuf", "<u8")])
WINDOWS_HEAD = struct.Struct("<II8x")  # count, cap; then cap windows
WINDOW_SIZE = 16  # a window: u64 from, until (clock ticks)
if (PREFIX.size, HEAD.itemsize, THREAD.itemsize, WINDOWS_HEAD.size) != (
        _core.LEDGER_PREFIX_SIZE, _core.LEDGER_HEAD_SIZE, _core.LEDGER_THREAD_SIZE,
        _core.LEDGER_WINDOWS_HEAD_SIZE):
    raise ImportError("ompt_py._core was built for another raw file ledger; reinstall the "
                      "package so both parts come from one build")

#: How a process image ended (``meta["processes"][i]["ending"]``), by the tool's code.
ENDINGS = {_core.END_NONE: "killed", _core.END_FINALIZE: "finalize", _core.END_EXIT: "exit",
           _core.END__EXIT: "_exit", _core.END_EXEC: "exec", _core.END_ABORT: "abort",
           _core.END_FINISH: "finish"}
#: Why records still in the buffers were lost, by ending.
_BUFFERED = {"killed": "killed or crashed (no ending was recorded): records still in buffers",
             "_exit": "_exit: records written after the last flush",
             "exec": "exec: records written after the last flush",
             "abort": "abort: records still in buffers"}
#: Why records of an in-place file are not in it: beyond its end.
CUT_REASON = "the file was cut short after the run (copied or truncated): records beyond its end"


@dataclass
class ThreadCount:
    """One thread's entry: records written into its buffer (``buffered``; exact
    unless ``partial``: its last chunk was not in the ledger), dropped (buffers
    full), discarded (outside the sink's window), not stored by the sink, and
    not buffered for want of memory."""

    tid: int
    type: int
    buffered: int
    dropped: int
    discarded: int
    sink_lost: int
    nobuf: int
    partial: bool


@dataclass
class Ledger:
    """A file's ledger: the image's ending, the file's errno (0: no write failed),
    the threads beyond its capacity, each thread's counts by index, the records per
    chunk, whether the file is in place and, for one with a WINDOWS block, the
    sink's windows ((count, 2) uint64: from, until in clock ticks; until 2**64-1:
    still open) and ``edges``, the sorted edges of their union."""

    ending: str
    sink_errno: int
    unaccounted: int
    threads: dict[int, ThreadCount] = field(default_factory=dict)
    chunk_records: int = 0
    in_place: bool = False
    windows: np.ndarray | None = None
    edges: np.ndarray | None = None

    def keeps(self, times: np.ndarray) -> np.ndarray | None:
        """Which of these records' raw ``times`` the trace keeps: those in one of the
        sink's windows [from, until) of an in-place file; None: every one (a file
        not in place, or without windows)."""
        if not self.in_place or self.edges is None:
            return None
        # In the union of the windows: after an odd number of its sorted edges.
        return np.searchsorted(self.edges, times, side="right") % 2 == 1


def _windows(data: memoryview, path: str) -> np.ndarray:
    """The windows of a WINDOWS block's data; TraceFileError when it is corrupt."""
    if len(data) < WINDOWS_HEAD.size:
        raise TraceFileError(f"{path} is corrupt (a ledger windows block of {len(data)} bytes)")
    count, cap = WINDOWS_HEAD.unpack_from(data)
    if count > cap or WINDOWS_HEAD.size + cap * WINDOW_SIZE > len(data):
        raise TraceFileError(f"{path} is corrupt (its ledger's windows: {count} used of {cap}, "
                             f"in {len(data)} bytes)")
    return np.frombuffer(data, "<u8", 2 * count, WINDOWS_HEAD.size).reshape(count, 2).copy()


def _edges(windows: np.ndarray) -> np.ndarray:
    """The sorted edges (from, until, from, ...) of the union of ``windows`` (a
    handful: the sink's table), the empty ones left out."""
    edges: list[int] = []
    for start, until in sorted(windows.tolist()):
        if start >= until:
            continue
        if edges and start <= edges[-1]:
            edges[-1] = max(edges[-1], until)
        else:
            edges += [start, until]
    return np.array(edges, np.uint64)


def _data(payload: bytes, path: str) -> tuple[int, int, memoryview]:
    if len(payload) < PREFIX.size:
        raise TraceFileError(f"{path} is corrupt (a ledger block of {len(payload)} bytes)")
    kind, offset, size, slot = PREFIX.unpack_from(payload)
    if offset < PREFIX.size or offset + size > len(payload):
        raise TraceFileError(f"{path} is corrupt (a ledger block's data lies outside it)")
    return kind, slot, memoryview(payload)[offset:offset + size]


def parse(payloads: list[bytes], path: str) -> Ledger | None:
    """The ledger of a file's LEDGER blocks (None without a process block)."""
    head, slots, windows = None, {}, None
    for payload in payloads:
        kind, slot, data = _data(payload, path)
        if kind == _core.LEDGER_PROCESS and head is None:
            head = data
        elif kind == _core.LEDGER_SLOT:
            slots[slot] = data
        elif kind == _core.LEDGER_WINDOWS and windows is None:
            windows = _windows(data, path)
    if head is None or len(head) < HEAD.itemsize:
        return None
    h = np.frombuffer(head, HEAD, 1)[0]
    cap = min(int(h["thread_cap"]), (len(head) - HEAD.itemsize) // THREAD.itemsize)
    entries = np.frombuffer(head, THREAD, cap, HEAD.itemsize)
    ledger = Ledger(ENDINGS.get(int(h["ending"]), f"code {int(h['ending'])}"),
                    int(h["sink_errno"]), int(h["unaccounted"]),
                    chunk_records=int(h["chunk_records"]), in_place=int(h["in_place"]) == 1,
                    windows=windows, edges=None if windows is None else _edges(windows))
    for e in entries[entries["used"] > 0]:
        flags, cur, count = int(e["flags"]), int(e["cur"]), 0
        partial = bool(flags & _core.LEDGER_UNKNOWN)
        if cur != _core.LEDGER_NONE:
            desc = slots.get(int(e["slot"]) - 1)
            at = cur * _core.LEDGER_DESC_SIZE
            if desc is None or at + 4 > len(desc):
                partial = True
            else:
                count = int.from_bytes(desc[at:at + 4], "little")
        ledger.threads[int(e["used"]) - 1] = ThreadCount(
            int(e["tid"]), int(e["type"]), int(e["handed"]) + count, int(e["dropped"]),
            int(e["discarded"]), int(e["sink_lost"]), int(e["nobuf"]), partial)
    return ledger


def errno_text(code: int) -> str:
    """Why the file sink failed, in words: disk full, file size limit, or the error."""
    name = errno_names.errorcode.get(code, str(code))
    what = "disk full" if code in (errno_names.ENOSPC, errno_names.EDQUOT) else \
        "file size limit" if code == errno_names.EFBIG else "write failed"
    return f"{what} ({name}: {os.strerror(code)})"


def account(proc: RawProcess, rows: list[dict]) -> dict:
    """Counts what ``proc``'s threads lost, from its ledger and the records its file
    holds (``proc.kept``: counted as they were read); updates the thread ``rows``
    (one per thread of its STATS; threads only the ledger knows are added):
    ``written`` becomes what the file holds,
    ``dropped`` the ledger's count, ``lost`` the records lost.  Returns the
    process's keys: ``lost``, ``ending``, ``lost_reasons`` ({reason: records})
    and ``unaccounted_threads`` (threads beyond the ledger's capacity, and those
    whose last chunk it could not see: a chunk grown outside the thread's
    buffer, or a buffer made after the disk was full); without a ledger (an older file, or one whose
    ledger could not be written), ``ending`` "unknown" and nothing lost.  In an
    in-place file every record written is in it: a thread lost only its ``nobuf``
    records, those no region of the file had room for (``sink_lost``: the disk
    was full, ``sink_errno`` says why) and those beyond the end of a file cut short
    (``proc.cut_off``); the records outside the windows (``proc.discarded``) are
    neither written nor lost."""
    kept = proc.kept
    by_index = {r["thread"]: r for r in rows}
    ledger = proc.ledger
    if ledger is None:
        for r in rows:
            r.setdefault("lost", 0)
        return {"lost": 0, "ending": "unknown", "lost_reasons": {}, "unaccounted_threads": 0}
    reasons: dict[str, int] = {}
    total, partial = 0, 0
    for index, c in sorted(ledger.threads.items()):
        # A killed process's last chunk (else a flush took it); none in place.
        partial += c.partial and ledger.ending == "killed" and not ledger.in_place
        row = by_index.get(index)
        if row is None:
            row = by_index[index] = {"thread": index, "type": THREAD_TYPES.get(c.type, str(c.type)),
                                     "runtime": 0, "tid": c.tid, "written": 0, "dropped": 0,
                                     "samples_skipped": 0}
            rows.append(row)
        stored = kept.get(index, 0)
        if ledger.in_place:
            missing = by_sink = c.sink_lost
        else:
            missing = max(c.buffered - stored - c.discarded, 0)
            by_sink = min(c.sink_lost, missing)
        cut = proc.cut_off.get(index, 0)
        for reason, n in ((errno_text(ledger.sink_errno or errno_names.EIO), by_sink),
                          (_BUFFERED.get(ledger.ending, ledger.ending), missing - by_sink),
                          (NOBUF_REASON, c.nobuf), (CUT_REASON, cut)):
            if n:
                reasons[reason] = reasons.get(reason, 0) + n
        row["written"], row["dropped"] = stored, c.dropped
        row["lost"] = missing + c.nobuf + cut
        total += row["lost"]
    for r in rows:
        r.setdefault("lost", 0)
    rows.sort(key=lambda r: r["thread"])
    return {"lost": total, "ending": ledger.ending, "lost_reasons": reasons,
            "unaccounted_threads": ledger.unaccounted + partial}


def warn(entry: dict) -> None:
    """The TraceWarning of a process that lost records (or whose threads could not
    all be accounted for): which process, how many, why."""
    where = f"pid {entry['pid']} ({entry.get('source', '?')})"
    if entry["lost"]:
        why = "; ".join(f"{n:,} {reason}" for reason, n in entry["lost_reasons"].items())
        warnings.warn(f"{where} lost {entry['lost']:,} records that are in no part of the "
                      f"trace: {why}", TraceWarning, stacklevel=5)
    if entry["unaccounted_threads"]:
        warnings.warn(f"{where}: the losses of {entry['unaccounted_threads']} threads are not "
                      "fully counted (beyond the ledger's capacity, or the chunk they were "
                      "filling was not in it: up to 1,024 records each)", TraceWarning,
                      stacklevel=5)


def images(procs: list[RawProcess]) -> list[list[RawProcess]]:
    """The processes of these files: the files of one pid chained by their
    ``exec_from`` links (the successive images of one process, in order); files
    of one pid that are not so linked are an error naming them."""
    by_pid: dict[int, list[RawProcess]] = {}
    for p in procs:
        by_pid.setdefault(p.meta["pid"], []).append(p)
    out = []
    for pid, files in by_pid.items():
        if len(files) == 1:
            out.append(files)
            continue
        names = {os.path.basename(p.path): p for p in files}
        successors: dict[str, RawProcess] = {}
        first = []
        for p in files:
            source = os.path.basename(p.meta.get("exec_from") or "")
            if source in names and source not in successors:
                successors[source] = p
            else:
                first.append(p)
        if len(first) != 1:
            listed = ", ".join(sorted(p.path for p in first))
            raise TraceFileError(
                f"the raw files {listed} are of one pid ({pid}) but not one process (no exec "
                "links them: the pid was reused, or the files come from different runs); load "
                "them one by one (ompt_py.load(file)) or keep one run per directory")
        chain = first
        while os.path.basename(chain[-1].path) in successors:
            chain.append(successors.pop(os.path.basename(chain[-1].path)))
        if successors:  # a cycle of links: not files of one run
            raise TraceFileError(f"the raw files of pid {pid} link to each other in a cycle: "
                                 + ", ".join(sorted(p.path for p in files)))
        out.append(chain)
    return out


def merge_images(entries: list[dict]) -> dict:
    """One process entry of the entries of its successive images (an exec chain):
    the first image's description, every image's threads and counts, the last
    image's ending, and (with more than one image) ``images`` ({source, exe, argv,
    ending, lost} each)."""
    if len(entries) == 1:
        return entries[0]
    first = dict(entries[0])
    first["images"] = [{k: e.get(k) for k in ("source", "exe", "argv", "ending", "lost")}
                       for e in entries]
    for key in ("written", "dropped", "sink_lost", "lost", "unaccounted_threads"):
        first[key] = sum(e.get(key, 0) for e in entries)
    first["threads"] = sorted((t for e in entries for t in e["threads"]),
                              key=lambda t: t["thread"])
    reasons: dict[str, int] = {}
    for e in entries:
        for reason, n in e["lost_reasons"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    first["lost_reasons"] = reasons
    last = entries[-1]
    for key in ("exe", "argv", "ending", "stop_realtime_ns", "complete", "truncated"):
        first[key] = last.get(key)
    first["runtimes"] = [rt for e in entries for rt in e["runtimes"]]
    seen = {(m["path"], m["start"], m["end"]) for m in first.get("modules", [])}
    first["modules"] = list(first.get("modules", [])) + [
        m for e in entries[1:] for m in e.get("modules", [])
        if (m["path"], m["start"], m["end"]) not in seen]
    own = [e for e in entries if e.get("python") or e.get("region_names")]
    if len(own) > 1:
        # Every record is kept (not a partial load): only the earlier tables are not.
        warnings.warn(f"pid {first['pid']}: several exec images recorded Python stacks or "
                      "region names; only the last image's are kept", UserWarning, stacklevel=5)
    if own:
        first["region_names"] = own[-1].get("region_names", [])
        first.pop("python", None)
        if own[-1].get("python"):
            first["python"] = own[-1]["python"]
    return first
