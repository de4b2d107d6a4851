"""Reading the files the tool writes with OMPTPY_OUTPUT (one per process).

A file is a sequence of blocks (ompt_py.schema: HEADER, BLOCKS): META (JSON,
first), LEDGER (what each thread wrote into its buffers, kept up to date
however the process ends: see ``ledger``), RECORDS (64-byte records of one
thread, in order), STATS (JSON counters with a clock anchor; the tool writes
one as it goes and a final one at exit) and STACKS (JSON, the Python stacks).
Every header and document is checked against the schema before it is trusted;
what cannot be read is left out and said (a TraceWarning, ``meta["skipped"]``),
the rest is kept.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .. import _core, schema
from .. import meta as trace_meta
from ..errors import TraceFileError
from ..records import RAW_DTYPE, RECORD_SIZE, to_events
from . import Parts, open_regular, regular_files, warn_skipped
from . import ledger as raw_ledger

SUFFIX = ".omptraw"
_META, _STATS, _STACKS, _LEDGER = (schema.BLOCKS[k].name for k in (
    _core.BLOCK_META, _core.BLOCK_STATS, _core.BLOCK_STACKS, _core.BLOCK_LEDGER))


@dataclass
class RawProcess:
    """What one file holds: its META document, its records (raw ticks), the
    payloads of its other blocks by block name (``blocks["STATS"]``: documents;
    binary ones as bytes), its ledger, whether its tail was left out
    (``truncated``) and what was (``skipped``: reasons)."""

    path: str
    meta: dict
    records: np.ndarray
    blocks: dict[str, list] = field(default_factory=dict)
    truncated: bool = False
    skipped: list[str] = field(default_factory=list)
    ledger: raw_ledger.Ledger | None = None

    @property
    def stats(self) -> list[dict]:
        return self.blocks.get(_STATS, [])

    @property
    def stacks(self) -> list[dict]:
        return self.blocks.get(_STACKS, [])


#: What to do about a raw file that cannot be read at all.
_AGAIN = ("nothing in it can be read (a process killed or a disk full before the tool "
          "wrote its description leaves such a file): trace the program again")


def _check_meta(path: str, meta: dict) -> None:
    """TraceFileError when the file's META says it is of a layout this ompt_py cannot read."""
    if meta["format"] != schema.RAW_FORMAT:
        raise TraceFileError(f"{path} has META format {meta['format']}; this ompt_py reads "
                             f"format {schema.RAW_FORMAT}: read it with the ompt-py that "
                             "wrote it (or a newer one)")
    if meta["record_size"] != RECORD_SIZE or meta["record_version"] not in \
            schema.RECORD_VERSIONS:
        raise TraceFileError(
            f"{path} was written with {meta['record_size']}-byte records of version "
            f"{meta['record_version']}; this ompt_py reads {RECORD_SIZE}-byte records of "
            f"versions {schema.RECORD_VERSIONS[0]} to {schema.RECORD_VERSIONS[-1]}: read it "
            "with the ompt-py that wrote it (or a newer one)")


def read(path: str) -> RawProcess:
    """Parse one .omptraw file; TraceFileError when it is not one, or its META
    block is missing or bad.

    Records are read straight into one array (one copy, from the kernel),
    sized by the file.  A file cut short in its last block (the process was
    killed while the tool wrote, or the disk filled up) keeps its complete
    records and documents and is marked ``truncated``, as is one whose block
    headers stop making sense (the rest cannot be found); a bad document or
    ledger, or a block of a type this ompt_py does not know, is left out.
    Each of these is in ``skipped``.
    """
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        records = np.empty(size // RECORD_SIZE, dtype=RAW_DTYPE)
        out = memoryview(records.view(np.uint8))
        off = nrec = 0
        meta: dict | None = None
        blocks: dict[str, list] = {}
        skipped: list[str] = []
        cut = None  # where the file ends in the middle of a block
        truncated = False  # its tail left out: cut, or its block headers stop making sense
        header = bytearray(schema.HEADER.size)
        while off < size:
            if f.readinto(header) != schema.HEADER.size:
                cut = f"it ends inside a block header at byte {off}"
                break
            magic, kind, length = schema.HEADER.unpack(header)
            block = schema.BLOCKS.get(kind)
            body = off + schema.HEADER.size
            whole = body + length <= size
            if magic != schema.MAGIC or (block is None and not whole) or (
                    block is not None and block.payload == "records" and whole
                    and length % RECORD_SIZE):
                if off == 0:
                    raise TraceFileError(f"{path} is not an ompt-py trace file (no block header "
                                         "at its start): give ompt_py.load a file written "
                                         "with OMPTPY_OUTPUT or ompt-py run")
                skipped.append(f"bytes {off} to {size} (the block header at byte {off} is "
                               f"corrupt: magic {magic:#x}, type {kind}, length {length})")
                truncated = True
                break
            if meta is None and (block is None or block.name != _META):
                raise TraceFileError(f"{path} does not start with a META block; {_AGAIN}")
            if block is None:
                skipped.append(f"the block of unknown type {kind} at byte {off} ({length} "
                               "bytes; written by a newer ompt-py?)")
                f.seek(length, os.SEEK_CUR)
            elif block.payload == "records":
                # A cut-short last block keeps its complete records.
                take = length if whole else (size - body) // RECORD_SIZE * RECORD_SIZE
                start = nrec * RECORD_SIZE
                got = f.readinto(out[start: start + take]) or 0
                nrec += got // RECORD_SIZE
            elif whole and block.payload == "binary":
                blocks.setdefault(block.name, []).append(f.read(length))
            elif whole:
                doc, bad = schema.parse(f.read(length), block.doc, block.name)
                if meta is None:
                    if bad:
                        raise TraceFileError(f"{path}: its META block is corrupt ({bad}); "
                                             + _AGAIN)
                    _check_meta(path, doc)
                    meta = doc
                elif bad or block.name == _META:
                    skipped.append(f"the {block.name} block at byte {off} ("
                                   f"{bad or 'a second META block'})")
                else:
                    blocks.setdefault(block.name, []).append(doc)
            if not whole:
                cut = f"the {block.name if block else kind} block at byte {off} is cut short"
                break
            off = body + length
    if meta is None:
        raise TraceFileError(f"{path} has no META block; {_AGAIN}")
    try:
        ledger = raw_ledger.parse(blocks.pop(_LEDGER, []), path)
    except TraceFileError as e:
        ledger = None
        skipped.append(f"its ledger ({e}): the records it lost cannot be counted")
    if cut:
        why = (f"writing it failed: {raw_ledger.errno_text(ledger.sink_errno)}"
               if ledger and ledger.sink_errno else "the process was killed while writing")
        skipped.append(f"{cut} ({why}); the complete part is kept")
        truncated = True
    return RawProcess(path, meta, records[:nrec], blocks, truncated, skipped, ledger)


def list_dir(directory: str) -> list[str]:
    """The entries of a directory named like trace files (written with
    OMPTPY_OUTPUT), sorted; see io.regular_files for which are files."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX))
    except OSError as e:
        raise TraceFileError(f"cannot list {directory}: {e.strerror}") from e
    return [os.path.join(directory, n) for n in names]


def load(paths: list[str], source: str) -> Parts:
    """The trace of the raw files ``paths`` (one per process; ``source`` names them
    in errors), on one time axis whose origin is the earliest process start.

    Every readable file is kept: one that cannot be read, or read only in
    part, is said in a TraceWarning and in ``meta["skipped"]``; TraceFileError
    when none can be read (the reason of each).
    """
    files, skipped = regular_files(paths)
    if not files and not skipped:
        raise TraceFileError(
            f"{source} holds no trace files (*{SUFFIX}): no process in the run "
            "started an OpenMP runtime with OMPT support (LLVM libomp)."
        )
    procs, failed = [], []
    for p in files:
        try:
            procs.append(read(p))
        except TraceFileError as e:
            if len(paths) == 1:
                raise
            failed.append({"source": p, "reason": str(e)})
    skipped += failed
    if not procs:
        raise TraceFileError(f"{source} holds no readable trace file: "
                             + "; ".join(s["reason"] for s in skipped))
    skipped += [{"source": p.path, "reason": reason} for p in procs for reason in p.skipped]
    warn_skipped(skipped, stacklevel=3)
    procs = [p for p in procs if not _empty(p)] or procs
    origin = min(p.meta["start_anchor"]["mono_ns"] for p in procs)
    segments, pids, entries = [], [], []
    for chain in raw_ledger.images(procs):
        images = []
        for p in chain:
            last = p.stats[-1] if p.stats else None
            events = to_events(p.records, p.meta["start_anchor"],
                               last["anchor"] if last else None, p.meta["tick_ns_estimate"],
                               origin)
            segments.append(events)
            pids.append((p.meta["pid"], len(events)))
            threads = trace_meta.thread_rows(last) if last else []
            losses = raw_ledger.account(p, threads)
            images.append(trace_meta.process_entry(
                p.meta, last, threads, p.stacks,
                complete=any(s["final"] for s in p.stats),
                modules=trace_meta.modules(p.meta, *p.stats),
                truncated=p.truncated,
                source=p.path,
                **losses,
            ))
            if p.ledger is None and not threads:  # killed before any counters: count the file
                images[-1]["written"] = len(events)
        entries.append(raw_ledger.merge_images(images))
        raw_ledger.warn(entries[-1])
    return Parts(segments, trace_meta.trace_meta(entries, origin, skipped), pids)


def _empty(p: RawProcess) -> bool:
    """A file of a process that traced nothing (a forked child that ran no OpenMP
    code, an image that exec'd before recording): no record, nothing lost."""
    return (len(p.records) == 0 and p.ledger is not None and not p.ledger.unaccounted
            and not any(c.buffered or c.dropped or c.nobuf for c in p.ledger.threads.values()))
