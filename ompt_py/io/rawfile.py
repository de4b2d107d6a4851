"""Reading the files the tool writes with OMPTPY_OUTPUT (one per process).

A file is a sequence of blocks (ompt_py.schema: HEADER, BLOCKS): META (JSON,
first), LEDGER (what each thread wrote into its buffers, kept up to date
however the process ends: see ``ledger``), RECORDS (64-byte records of one
thread, in order), REGION (the in-place route: a span of the file whose 64 KiB
chunks threads leased and wrote records into; its prefix and chunk
descriptors say which chunk is whose and how full, csrc/tool/omptpy_file.h),
STATS (JSON counters with a clock anchor; the tool writes one as it goes and a
final one at exit) and STACKS (JSON, the Python stacks).  Every header and
document is checked against the schema before it is trusted; what cannot be
read is left out and said (a TraceWarning, ``meta["skipped"]``), the rest is
kept.

Records are found by extents (byte offset and record count): a RECORDS block's
records, a REGION block's leased chunks' (in chunk order, that is lease
order).  Each extent holds one thread's records, in time order, and the
extents of one thread are in its time order, but the extents of several
threads interleave (the tool drains or leases chunks as threads fill them):
every consumer (to_events, the loader, the streamed merge, the analyses, which
sort by time or go by each record's ``thread``) takes records in any
interleaving of threads.  An in-place file's records outside the sink's
windows (written for handlers only) are dropped as they are read and counted
per thread (``RawProcess.discarded``).
"""

from __future__ import annotations

import array
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .. import _core, schema
from .. import meta as trace_meta
from ..errors import TraceFileError
from ..records import RAW_DTYPE, RECORD_SIZE, to_events
from . import Parts, open_regular, regular_files, warn_skipped
from . import ledger as raw_ledger
from . import mpi as job

SUFFIX = ".omptraw"
_META, _STATS, _STACKS, _LEDGER = (schema.BLOCKS[k].name for k in (
    _core.BLOCK_META, _core.BLOCK_STATS, _core.BLOCK_STACKS, _core.BLOCK_LEDGER))
#: A REGION block's prefix: version, chunk_records, nchunks, desc_size, desc_offset,
#: data_offset (from the payload's start), reserved.
REGION_PREFIX = struct.Struct("<IIIIQQ32x")
REGION_VERSION = 1
#: A chunk descriptor of a REGION block: its records written, its thread index + 1
#: (0: never leased).
DESCRIPTOR = np.dtype({"names": ["n", "thread"], "formats": ["<u4", "<u4"],
                       "offsets": [0, _core.DESC_THREAD_OFFSET],
                       "itemsize": _core.LEDGER_DESC_SIZE})
if REGION_PREFIX.size != _core.REGION_PREFIX_SIZE:
    raise ImportError("ompt_py._core was built for another raw file format; reinstall the "
                      "package so both parts come from one build")


@dataclass
class RawProcess:
    """What one file holds: its META document, where its records are (``offsets``,
    ``counts``: byte offset and record count of each extent, a RECORDS block's
    complete records or a REGION block's chunk, in file order; read by
    ``records``), the payloads of its other blocks by block name
    (``blocks["STATS"]``: documents; binary ones as bytes), its ledger, whether its
    tail was left out (``truncated``) and what was (``skipped``: reasons).
    ``kept`` and ``discarded``: the records of each thread index read so far and
    dropped as read (outside the sink's windows of an in-place file); ``cut_off``:
    those of REGION chunks beyond the end of a file cut short (for the ledger's
    accounting); ``clock``: its process's clock fitted to its MPI job's reference
    rank (io/mpi.py; None: its times are its own clock's)."""

    path: str
    meta: dict
    offsets: array.array = field(default_factory=lambda: array.array("q"))
    counts: array.array = field(default_factory=lambda: array.array("q"))
    blocks: dict[str, list] = field(default_factory=dict)
    truncated: bool = False
    skipped: list[str] = field(default_factory=list)
    ledger: raw_ledger.Ledger | None = None
    kept: dict[int, int] = field(default_factory=dict)
    discarded: dict[int, int] = field(default_factory=dict)
    cut_off: dict[int, int] = field(default_factory=dict)
    clock: dict | None = None

    @property
    def nrecords(self) -> int:
        """The records the file holds (those outside an in-place file's windows
        included)."""
        return sum(self.counts)

    @property
    def stats(self) -> list[dict]:
        return self.blocks.get(_STATS, [])

    @property
    def stacks(self) -> list[dict]:
        return self.blocks.get(_STACKS, [])

    def records(self, rows: int | None = None) -> Iterator[np.ndarray]:
        """The file's records (RAW_DTYPE), in file order: one array of them all
        (``rows`` None, also when there is none), or arrays of at most ``rows``
        (none when there is no record), each a fresh array read straight from the
        file (one copy, from the kernel).  Counts each thread's records in ``kept``
        as they are read; an in-place file's records outside the sink's windows
        are left out and counted in ``discarded``."""
        total = self.nrecords
        size = total if rows is None else rows
        with open_regular(self.path) as f:
            fd, done, block, within = f.fileno(), 0, 0, 0
            while done < total or (rows is None and done == 0):
                chunk = np.empty(min(size, total - done), RAW_DTYPE)
                out = memoryview(chunk.view(np.uint8))
                filled = 0
                while filled < len(chunk):
                    take = min(self.counts[block] - within, len(chunk) - filled)
                    want = take * RECORD_SIZE
                    got = _pread(fd, out[filled * RECORD_SIZE:][:want],
                                 self.offsets[block] + within * RECORD_SIZE)
                    if got != want:
                        raise TraceFileError(f"{self.path} changed while it was read (it is "
                                             "shorter than when it was opened): read it again "
                                             "once nothing writes it")
                    filled += take
                    within += take
                    if within == self.counts[block]:
                        block, within = block + 1, 0
                done += len(chunk)
                keep = self.ledger.keeps(chunk["time"]) if self.ledger else None
                if keep is not None and not keep.all():
                    _count_threads(chunk["thread"][~keep], self.discarded)
                    chunk = chunk[keep]
                _count_threads(chunk["thread"], self.kept)
                if len(chunk) or rows is None:
                    yield chunk
                if not total:
                    return


def _pread(fd: int, out: memoryview, offset: int) -> int:
    """Reads into ``out`` from ``offset``, whole unless the file ends; the bytes read."""
    got = 0
    while got < len(out):
        n = os.preadv(fd, [out[got:]], offset + got)
        if n == 0:
            break
        got += n
    return got


def _count_threads(threads: np.ndarray, kept: dict[int, int]) -> None:
    """Adds the records of each thread index in ``threads`` to ``kept``."""
    if not len(threads):
        return
    if int(threads.max()) < 1 << 16:
        counts = np.bincount(threads)
        indices = np.flatnonzero(counts)
        counts = counts[indices]
    else:  # a corrupt record's index (up to 2**32) must not size an array
        indices, counts = np.unique(threads, return_counts=True)
    for index, n in zip(indices.tolist(), counts.tolist()):
        kept[index] = kept.get(index, 0) + n


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


@dataclass
class _Region:
    """A REGION block met while scanning: its header's and payload's offsets, its
    length (from its header) and whether the file holds it whole."""

    off: int
    body: int
    length: int
    whole: bool


def scan(path: str) -> RawProcess:
    """Parse one .omptraw file, all but its records (read by RawProcess.records);
    TraceFileError when it is not one, or its META block is missing or bad.

    A file cut short in its last block (the process was
    killed while the tool wrote, or the disk filled up) keeps its complete
    records and documents and is marked ``truncated``, as is one whose block
    headers stop making sense (the rest cannot be found); a bad document or
    ledger, a REGION block whose prefix is corrupt, a chunk whose descriptor is,
    or a block of a type this ompt_py does not know, is left out.
    Each of these is in ``skipped``.
    """
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        pieces: list[tuple[int, int] | _Region] = []  # (offset, records) or a REGION block
        off = 0
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
                if take:
                    pieces.append((body, take // RECORD_SIZE))
                f.seek(take, os.SEEK_CUR)
            elif block.payload == "region":
                # Never read whole (it can be gigabytes): its chunks once the ledger is known.
                pieces.append(_Region(off, body, length, whole))
                if whole:
                    f.seek(length, os.SEEK_CUR)
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
        # The chunk size the tool wrote with: its ledger's, else its META's.
        chunk_records = ledger.chunk_records if ledger else meta.get("chunk_records")
        offsets, counts = array.array("q"), array.array("q")
        cut_off: dict[int, int] = {}
        for piece in pieces:
            if isinstance(piece, _Region):
                starts, n = _region_chunks(path, f.fileno(), piece, size, chunk_records,
                                           skipped, cut_off)
                offsets.extend(starts.tolist())
                counts.extend(n.tolist())
            else:
                offsets.append(piece[0])
                counts.append(piece[1])
    if cut:
        if pieces and isinstance(pieces[-1], _Region) and not pieces[-1].whole:
            why = ("a REGION block is allocated whole when it is made: the file was cut short "
                   "after the run, copied or truncated")
        elif ledger and ledger.sink_errno:
            why = f"writing it failed: {raw_ledger.errno_text(ledger.sink_errno)}"
        else:
            why = "the process was killed while writing"
        skipped.append(f"{cut} ({why}); the complete part is kept")
        truncated = True
    return RawProcess(path, meta, offsets, counts, blocks, truncated, skipped, ledger,
                      cut_off=cut_off)


def _region_problem(prefix: tuple[int, ...], length: int, chunk_records: int | None
                    ) -> str | None:
    """What is wrong with a REGION block's prefix (None: nothing), given the
    block's length and the file's chunk size (None: unknown)."""
    version, records, nchunks, desc_size, desc_offset, data_offset = prefix
    if version != REGION_VERSION:
        return f"version {version}; this ompt_py reads version {REGION_VERSION}"
    if desc_size != _core.LEDGER_DESC_SIZE:
        return f"descriptors of {desc_size} bytes, not {_core.LEDGER_DESC_SIZE}"
    if records == 0 or (chunk_records is not None and records != chunk_records):
        return f"chunks of {records} records, the file's are of {chunk_records}"
    if desc_offset < REGION_PREFIX.size or desc_offset + nchunks * desc_size > data_offset:
        return (f"{nchunks} descriptors at byte {desc_offset} do not lie between its prefix "
                f"and its data at byte {data_offset}")
    if data_offset + nchunks * records * RECORD_SIZE > length:
        return f"{nchunks} chunks from byte {data_offset} do not fit in its {length} bytes"
    return None


def _region_chunks(path: str, fd: int, region: _Region, size: int, chunk_records: int | None,
                   skipped: list[str], cut_off: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The extents (byte offsets, record counts) of a REGION block's leased chunks
    that hold records, in chunk order, read from its prefix and descriptors (the
    chunks' data is not read); ``chunk_records``: the file's chunk size (None:
    unknown).  A corrupt prefix leaves the block out, a corrupt descriptor its
    chunk, each said in ``skipped``; of a block cut short, the records inside the
    file are kept and those beyond counted per thread in ``cut_off``."""
    where = f"the REGION block at byte {region.off}"
    none = np.empty(0, np.int64), np.empty(0, np.int64)
    if region.body + REGION_PREFIX.size > size:  # cut short: said as such
        return none
    changed = TraceFileError(f"{path} changed while it was read (it is shorter than when it "
                             "was opened): read it again once nothing writes it")
    prefix = bytearray(REGION_PREFIX.size)
    if _pread(fd, memoryview(prefix), region.body) != len(prefix):
        raise changed
    fields = REGION_PREFIX.unpack(prefix)
    problem = _region_problem(fields, region.length, chunk_records)
    if problem:
        skipped.append(f"{where} (its prefix is corrupt: {problem}): its records are left out")
        return none
    _, records, nchunks, desc_size, desc_offset, data_offset = fields
    # The descriptors the file holds (all of them unless it was cut short).
    at = region.body + desc_offset
    desc = np.zeros(min(nchunks, max(size - at, 0) // desc_size), DESCRIPTOR)
    if _pread(fd, memoryview(desc.view(np.uint8)), at) != desc.nbytes:
        raise changed
    if len(desc) < nchunks:
        skipped.append(f"{where}: the descriptors of {nchunks - len(desc):,} chunks lie beyond "
                       "the file's end: their records cannot be counted")
    n, thread = desc["n"].astype(np.int64), desc["thread"].astype(np.int64)
    bad = (n > records) | ((thread == 0) & (n > 0))
    if bad.any():
        skipped.append(f"{where}: {int(bad.sum()):,} chunk descriptors are corrupt (more "
                       f"records than a chunk's {records}, or records in a chunk never "
                       "leased): their chunks are left out")
    chunks = np.flatnonzero((thread > 0) & ~bad & (n > 0))
    n, thread = n[chunks], thread[chunks] - 1
    # The records inside the file, computed only for chunks that start in it (a cut
    # block's length, and so its offsets, may be beyond what int64 holds).
    base, chunk_bytes = region.body + data_offset, records * RECORD_SIZE
    starts, inside = np.zeros(len(chunks), np.int64), np.zeros(len(chunks), np.int64)
    near = chunks < max(0, -(-(size - base) // chunk_bytes))
    if near.any():
        starts[near] = base + chunks[near] * chunk_bytes
        inside[near] = np.minimum((size - starts[near]) // RECORD_SIZE, n[near])
    beyond = n - inside
    for index, records_beyond in zip(thread[beyond > 0].tolist(), beyond[beyond > 0].tolist()):
        cut_off[index] = cut_off.get(index, 0) + records_beyond
    keep = inside > 0
    return starts[keep], inside[keep]


def list_dir(directory: str) -> list[str]:
    """The entries of a directory named like trace files (written with
    OMPTPY_OUTPUT), sorted; see io.regular_files for which are files."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX))
    except OSError as e:
        raise TraceFileError(f"cannot list {directory}: {e.strerror}") from e
    return [os.path.join(directory, n) for n in names]


@dataclass
class Run:
    """The raw files of one run, scanned (their records not yet read): its processes
    (each the files of its successive images: ledger.images), the trace's origin
    (the earliest process start, on the MPI reference rank's clock where the
    processes' clocks were fitted to it) and what was left out (``meta["skipped"]``)."""

    processes: list[list[RawProcess]]
    origin: int
    skipped: list[dict]

    def events(self, image: RawProcess, rows: int | None = None) -> Iterator[np.ndarray]:
        """The events (EVENT_DTYPE) of one image's file, in file order, on the
        trace's time axis: as RawProcess.records gives its records (``rows``).  Each
        record is converted on its own, so a `more` record and its primary need not
        be in one chunk: they stay adjacent in the rows, where the analyses pair them.
        Times of a process whose clock was fitted (``image.clock``) are on the
        reference rank's clock: the anchors are moved by the fit."""
        last = image.stats[-1] if image.stats else None
        first = job.aligned_anchor(image.clock, image.meta["start_anchor"])
        estimate = image.meta["tick_ns_estimate"] * (1 - (image.clock or {}).get("drift", 0.0))
        for records in image.records(rows):
            yield to_events(records, first,
                            job.aligned_anchor(image.clock, last["anchor"]) if last else None,
                            estimate, self.origin)

    def entry(self, process: list[RawProcess]) -> dict:
        """The ``meta["processes"]`` entry of one process, once the events of its
        images have all been read (the ledger's accounting counts them); warns
        (TraceWarning) of the records it lost."""
        images = []
        for p in process:
            last = p.stats[-1] if p.stats else None
            threads = trace_meta.thread_rows(last) if last else []
            losses = raw_ledger.account(p, threads)
            images.append(trace_meta.process_entry(
                p.meta, last, threads, p.stacks,
                complete=any(s["final"] for s in p.stats),
                modules=trace_meta.modules(p.meta, *p.stats),
                truncated=p.truncated,
                source=p.path,
                **({"clock_alignment": p.clock} if p.clock else {}),
                **losses,
            ))
            if p.ledger is None and not threads:  # killed before any counters: count the file
                images[-1]["written"] = p.nrecords
        entry = raw_ledger.merge_images(images)
        raw_ledger.warn(entry)
        return entry

    def entry_head(self, process: list[RawProcess]) -> dict:
        """What io/mpi.py check_job reads of a process, known before any record is
        read: its pid, rank, job, what MPI said and its clock's fit."""
        last = next((s for p in reversed(process) for s in reversed(p.stats)), None)
        entry = trace_meta.process_entry(process[0].meta, last, [], [])
        return {**{k: entry.get(k) for k in ("pid", "rank", "job_id", "mpi")},
                "clock_alignment": process[0].clock}

    def ranks(self) -> dict:
        """The pid and job rank of each process, as ``meta.ranks`` reads them from a
        trace's metadata, known before any record is read."""
        return {"processes": [{"pid": process[0].meta["pid"],
                               "rank": trace_meta.rank(process[0].meta)}
                              for process in self.processes]}


def scan_run(paths: list[str], source: str) -> Run:
    """The raw files ``paths`` (one per process; ``source`` names them in errors),
    scanned: a Run.

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
            procs.append(scan(p))
        except TraceFileError as e:
            if len(paths) == 1:
                raise
            failed.append({"source": p, "reason": str(e)})
    skipped += failed
    if not procs:
        raise TraceFileError(f"{source} holds no readable trace file: "
                             + "; ".join(s["reason"] for s in skipped))
    skipped += [{"source": p.path, "reason": reason} for p in procs for reason in p.skipped]
    warn_skipped(skipped, stacklevel=4)
    procs = [p for p in procs if not _empty(p)] or procs
    processes = raw_ledger.images(procs)
    for process in processes:
        said = [s["mpi"] for p in process for s in p.stats if "mpi" in s]
        clock = job.fit(said[-1]) if said else None
        for p in process:
            p.clock = clock
    origin = min(job.aligned_anchor(p.clock, p.meta["start_anchor"])["mono_ns"] for p in procs)
    return Run(processes, origin, skipped)


def load(paths: list[str], source: str) -> Parts:
    """The trace of the raw files ``paths`` (scan_run), in memory: each image's
    records in one array; of an MPI job's, those of other jobs left out and missing
    ranks said (io/mpi.py check_job)."""
    run = scan_run(paths, source)
    left_out, said = job.check_job([run.entry_head(process) for process in run.processes],
                                   source)
    warn_skipped(said, stacklevel=3)
    run.skipped += said
    segments, pids, entries = [], [], []
    for process in run.processes:
        if process[0].meta["pid"] in left_out:
            continue
        for image in process:
            for events in run.events(image):
                segments.append(events)
                pids.append((image.meta["pid"], len(events)))
        entries.append(run.entry(process))
    return Parts(segments, trace_meta.trace_meta(entries, run.origin, run.skipped), pids)


def _empty(p: RawProcess) -> bool:
    """A file of a process that traced nothing (a forked child that ran no OpenMP
    code, an image that exec'd before recording): no record, nothing lost."""
    return (p.nrecords == 0 and p.ledger is not None and not p.ledger.unaccounted
            and not any(c.buffered or c.dropped or c.nobuf for c in p.ledger.threads.values()))
