"""Profile mode's aggregates (OMPTPY_PROFILE=on, ``ompt-py run --profile``): read
from raw files, and written to and read from a profile file.

The tool writes, per thread slot, PROFILE blocks of fixed-size rows
(csrc/tool/omptpy_file.h; the numpy dtypes are ``records.PROFILE_*``) into the
process's raw file at each ending (finalize, exit, the hook's), each holding
everything so far: the last block of a slot is the one read.  In process,
``_core.profile()`` returns the same blocks.  ``load_profile`` makes a
``ProfileParts``: four DataFrames (times in nanoseconds) and the meta (from
which ``ompt_py.profile.Profile`` is made, as a Trace from ``Parts``).  A block
that cannot be read is a TraceFileError; rows lost to full tables a TraceWarning.

A profile file (``Profile.save``, ``ompt-py run --profile``) is one Parquet file:
the four tables' rows one after the other, a ``table`` column naming each row's
table and the union of their columns (schema.PROFILE_COLUMNS; a column not of
a row's table is null there; ``hist`` a list of PROFILE_BUCKETS counts, of
variable size, see _ARROW), the metadata as JSON under the key-value key
``ompt_py`` (schema.PROFILE_META; its ``profile`` key, the format's version,
tells a profile from a trace).  One file rather than a directory of four:
``-o prof.parquet`` names one file, as a trace's does, the metadata is said once,
and DuckDB or polars read a table with a filter on ``table``.  A profile is small
(a few hundred bytes per aggregate), so it is written and read whole.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .. import _core, schema
from ..errors import TraceFileError, TraceWarning
from ..meta import modules
from ..records import (
    CONSTRUCTS,
    EVENT_CODES,
    IMPLICIT_KINDS,
    KIND_NAMES,
    PARALLEL_KINDS,
    PROFILE_BUCKETS,
    PROFILE_HEAD_DTYPE,
    PROFILE_ROW_DTYPE,
    PROFILE_TABLES,
    PROFILE_VERSION,
    tick_scale,
)
from ..units import text
from . import open_regular, rawfile, warn_skipped
from .parquet import PARQUET_KEY, open_file
from .streaming import output

if TYPE_CHECKING:
    import pyarrow.parquet as pq

#: A parallel region's and an implicit task's kinds in a profile row (the tool's
#: flags: a teams league, an initial task).
_OWN_KINDS = {"parallel_begin": dict(enumerate(PARALLEL_KINDS)),
              "implicit_task": dict(enumerate(IMPLICIT_KINDS)), "masked": {0: "masked"}}
_EVENT_NAMES = {code: name for name, code in EVENT_CODES.items()}


@dataclass(eq=False)  # hashable by identity: the analyses cache per profile
class ProfileParts:
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
    aggregates not made, and the ``threads`` its rows name; exe, argv and
    ``modules``: where its code was, for source locations).
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
    return read_payloads(_payloads(data, source), source)


def _payloads(data: bytes, source: str) -> list[bytes]:
    """The payloads of a sequence of PROFILE blocks (header and payload each)."""
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
    return payloads


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
            df = base.assign(construct=text([CONSTRUCTS.get(e, e) for e in events]),
                             kind=text(_kind_names(r["event"], r["kind"])), count=count,
                             total_ns=_ns(r["total"], scale), min_ns=_ns(r["min"], scale),
                             max_ns=_ns(r["max"], scale), hist=hist)
        elif name == "regions_threads":
            df = base.assign(implicit_tasks=count, duration_ns=_ns(r["total"], scale),
                             barrier_wait_ns=_ns(r["a"], scale), sync_wait_ns=_ns(r["b"], scale),
                             lock_wait_ns=_ns(r["c"], scale))
            df["busy_ns"] = (df["duration_ns"] - df["barrier_wait_ns"] - df["sync_wait_ns"]
                             - df["lock_wait_ns"])
        elif name == "locks":
            df = base.assign(kind=text(_kind_names(r["event"], r["kind"])), wait_id=r["wait_id"],
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


def _process(meta: dict, stats: list[dict], payloads: list[bytes], source: str
             ) -> tuple[dict[str, pd.DataFrame], dict]:
    """One process's tables and its ``meta["processes"]`` entry, from its META
    document, its STATS documents (oldest first) and its PROFILE payloads."""
    rows, slots = read_payloads(payloads, source)
    unmapped = stats[-1].get("profile_unmapped", 0) if stats else 0
    entry = {"pid": meta["pid"], "source": source, "slots": slots, "unmapped": unmapped,
             "exe": meta["exe"], "argv": meta["argv"], "modules": modules(meta, *stats)}
    scale = tick_scale(meta["start_anchor"], stats[-1]["anchor"] if stats else None,
                       meta["tick_ns_estimate"])
    return tables(rows, meta["pid"], scale), entry


def _combine(source: str, found: list[tuple[dict[str, pd.DataFrame], dict]],
             skipped: list[dict]) -> ProfileParts:
    """The processes' tables together; a TraceWarning for each loss."""
    warn_skipped(skipped, stacklevel=3)
    processes = [entry for _, entry in found]
    unmapped = sum(proc["unmapped"] for proc in processes)
    if unmapped:
        warnings.warn(f"{source}: {unmapped:,} threads had no memory for their profile tables: "
                      "their events are in no figure", TraceWarning, stacklevel=3)
    lost = sum(s["overflow"] for proc in processes for s in proc["slots"])
    if lost:
        warnings.warn(f"{source}: {lost:,} aggregates were not made because a thread's table "
                      "was full or its nesting too deep: their figures are missing; raise "
                      "OMPTPY_PROFILE_ENTRIES", TraceWarning, stacklevel=3)
    frames = {name: pd.concat([f[name] for f, _ in found] or [tables(
        np.empty(0, PROFILE_ROW_DTYPE), 0, 1.0)[name]], ignore_index=True)
        for name in PROFILE_TABLES.values()}
    return ProfileParts(**frames, meta={"processes": processes, "skipped": skipped})


def load_profile(path: str | os.PathLike) -> ProfileParts:
    """The profile of a raw file or of a directory of them (``OMPTPY_OUTPUT`` of a run
    with ``OMPTPY_PROFILE=on``): TraceFileError when none holds a profile; a
    TraceWarning for each file that cannot be read or holds none (listed in
    ``meta["skipped"]``, as a trace's), and when aggregates were lost to full tables
    (raise OMPTPY_PROFILE_ENTRIES)."""
    source = os.fspath(path)
    if not os.path.exists(source):
        raise TraceFileError(f"no profile at {source}: the file or directory does not exist")
    paths = rawfile.list_dir(source) if os.path.isdir(source) else [source]
    found, skipped = [], []
    for path in paths:
        try:
            p = rawfile.scan(path)
        except TraceFileError as e:
            skipped.append({"source": path, "reason": str(e)})
            continue
        payloads = p.blocks.get("PROFILE", [])
        if not payloads:
            skipped.append({"source": path, "reason": f"process {p.meta['pid']} wrote no "
                            "profile (it ended before the tool wrote its tables: killed?, "
                            "or it ran without OMPTPY_PROFILE=on)"})
            continue
        found.append(_process(p.meta, p.stats, payloads, p.path))
    if not found:
        raise TraceFileError(f"{source} holds no profile: run the program with "
                             "OMPTPY_PROFILE=on (ompt-py run --profile)"
                             + "".join(f"; {s['source']}: {s['reason']}" for s in skipped))
    return _combine(source, found, skipped)


def from_memory(meta: dict, stats: dict, blocks: bytes) -> ProfileParts:
    """This process's profile so far: its META and latest STATS documents and the
    PROFILE blocks of ``_core.profile()`` (an empty profile when no thread made an
    aggregate yet)."""
    payloads = _payloads(blocks, "memory")
    found = [_process(meta, [stats], payloads, "memory")] if payloads else []
    return _combine("memory", found, [])


# ---- profile files ----------------------------------------------------------------------

#: The Arrow types of schema.PROFILE_COLUMNS' kinds.  A histogram (PROFILE_BUCKETS
#: counts) is a list of variable size, not a fixed-size one: the column is null in
#: the rows of the tables without one, and pyarrow before 26 cannot read a
#: fixed-size list with nulls from Parquet (apache/arrow#35692: "Expected all lists
#: to be of size=64"); the reader checks the sizes.
_ARROW = {"int64": pa.int64(), "uint64": pa.uint64(), "str": pa.string(),
          "hist": pa.list_(pa.int64())}


def _arrow_column(values: pd.Series, kind: str) -> pa.Array:
    if kind == "hist":
        flat = np.stack(values.to_list()).astype(np.int64).ravel() if len(values) else \
            np.empty(0, np.int64)
        offsets = np.arange(0, len(flat) + 1, PROFILE_BUCKETS, dtype=np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))
    return pa.array(values.to_numpy(object if kind == "str" else None), _ARROW[kind])


def write(parts: ProfileParts, path: str | os.PathLike) -> None:
    """``Profile.save``: the profile as one Parquet file at ``path`` (it appears there
    only once written whole)."""
    import pyarrow.parquet as pq

    pieces = []
    for name, own in schema.PROFILE_COLUMNS.items():
        frame = getattr(parts, name)
        columns = {"table": pa.array([name] * len(frame), pa.string())}
        for column, kind in {**schema.PROFILE_KEYS, **own}.items():
            columns[column] = _arrow_column(frame[column], kind)
        pieces.append(pa.table(columns))
    table = pa.concat_tables(pieces, promote_options="default")  # others' columns: null
    meta = {"profile": schema.PROFILE_FORMAT, **parts.meta}
    table = table.replace_schema_metadata({PARQUET_KEY: json.dumps(meta).encode()})
    with output(path) as out:
        pq.write_table(table, out, compression="zstd")


def _file_meta(path: str) -> tuple[dict | None, pq.ParquetFile]:
    """A Parquet file's ompt_py metadata (None: it has none) and the open file."""
    parquet_file = open_file(path)
    raw = (parquet_file.metadata.metadata or {}).get(PARQUET_KEY)
    doc, bad = schema.parse(raw, schema.Obj({})) if raw is not None else (None, None)
    return (None if bad else doc), parquet_file


def read(path: str | os.PathLike) -> ProfileParts:
    """A profile file (``write``); TraceFileError when it is not one, or its metadata
    or columns are not of schema.PROFILE_META's and PROFILE_COLUMNS' shape."""
    path = os.fspath(path)
    doc, parquet_file = _file_meta(path)
    if not isinstance(doc, dict) or "profile" not in doc:
        raise TraceFileError(f"{path} is not an ompt-py profile (no profile metadata): "
                             "Profile.save and ompt-py run --profile write one")
    bad = schema.problem(doc, schema.PROFILE_META, "meta")
    if not bad and doc["profile"] != schema.PROFILE_FORMAT:
        raise TraceFileError(f"{path} has profile format {doc['profile']}; this ompt_py reads "
                             f"format {schema.PROFILE_FORMAT}: read it with the ompt-py that "
                             "wrote it (or a newer one)")
    if bad:
        raise TraceFileError(f"{path}: its ompt_py metadata is corrupt ({bad}); the file was "
                             "damaged or not written by Profile.save")
    try:
        table = _read_table(path, parquet_file)
    except (pa.ArrowException, OSError) as e:
        raise TraceFileError(f"{path} cannot be read as a profile ({type(e).__name__}: {e}); "
                             "it may be truncated") from e
    if "table" not in table.column_names:
        raise TraceFileError(f"{path} lacks the column table; it is not an ompt-py profile")
    which = table.column("table")
    frames = {}
    for name, own in schema.PROFILE_COLUMNS.items():
        rows = table.filter(pc.equal(which, name))
        frame = {}
        for column, kind in {**schema.PROFILE_KEYS, **own}.items():
            if column not in rows.column_names:
                raise TraceFileError(f"{path} lacks the column {column} of its {name}; it is "
                                     "not an ompt-py profile (Profile.save writes it)")
            values = rows.column(column)
            if values.null_count:
                raise TraceFileError(f"{path}: its {name} have null {column} values; the "
                                     "file is corrupt")
            try:
                values = values.cast(_ARROW[kind])
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise TraceFileError(f"{path}: its column {column} is of type {values.type}, "
                                     f"not {_ARROW[kind]}; it is not an ompt-py profile") from e
            if kind == "hist":
                frame[column] = _histograms(values, f"{path}: its {name}")
                continue
            array = values.to_numpy(zero_copy_only=False)
            frame[column] = text(array) if kind == "str" else array
        frames[name] = pd.DataFrame(frame)
    meta = {k: v for k, v in doc.items() if k != "profile"}
    return ProfileParts(**frames, meta=meta)


def _read_table(path: str, parquet_file: pq.ParquetFile) -> pa.Table:
    """A profile file's table.  The files written before the histograms were lists
    of variable size (_ARROW) hold them as fixed-size lists, null in the rows of the
    tables without one, which pyarrow before 26 cannot read: those are read as their
    Parquet schema says, lists of variable size, without the Arrow schema stored
    beside it (a copy of their metadata without it, the same row groups), on every
    pyarrow alike.  A file whose Parquet schema is not the one pyarrow writes for
    these columns (another writer's) is read as it is."""
    import pyarrow.parquet as pq

    stored = parquet_file.schema_arrow
    if not any(pa.types.is_fixed_size_list(f.type) for f in stored):
        return parquet_file.read()
    plain = pa.schema([f.with_type(pa.list_(f.type.value_field))
                       if pa.types.is_fixed_size_list(f.type) else f for f in stored])
    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, plain, store_schema=False).close()
    metadata = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    try:
        metadata.append_row_groups(parquet_file.metadata)
    except RuntimeError:  # "AppendRowGroups requires equal schemas"
        return parquet_file.read()
    return pq.ParquetFile(path, metadata=metadata).read()


def _histograms(values: pa.ChunkedArray, what: str) -> list[np.ndarray]:
    """A histogram column's values (lists of int64, no null list), one array of
    PROFILE_BUCKETS counts per row; TraceFileError when a list is of another size
    or holds a null."""
    sizes = pc.list_value_length(values).to_numpy()
    if (sizes != PROFILE_BUCKETS).any():
        raise TraceFileError(f"{what} have histograms of {sorted(set(sizes.tolist()))} "
                             f"counts, not {PROFILE_BUCKETS}; the file is corrupt")
    counts = pc.list_flatten(values)
    if counts.null_count:
        raise TraceFileError(f"{what} have histograms with null counts; the file is corrupt")
    return list(counts.to_numpy().reshape(-1, PROFILE_BUCKETS))


def holds_profile(path: str) -> bool:
    """Whether ``path`` is a profile rather than a trace: a profile file (its
    metadata says so), or raw files written in profile mode (the first one's META
    says so).  False when it cannot tell: the trace's reader then says why."""
    try:
        if os.path.isdir(path) or path.endswith(rawfile.SUFFIX):
            files = rawfile.list_dir(path) if os.path.isdir(path) else [path]
            return bool(files) and _raw_profile(files[0])
        return "profile" in (_file_meta(path)[0] or {})
    except (TraceFileError, OSError):
        return False


def _raw_profile(path: str) -> bool:
    """Whether a raw file's META block says profile mode was on."""
    with open_regular(path) as f:
        header = f.read(schema.HEADER.size)
        if len(header) != schema.HEADER.size:
            return False
        magic, kind, length = schema.HEADER.unpack(header)
        if magic != schema.MAGIC or kind != _core.BLOCK_META or length > 1 << 24:
            return False
        doc, bad = schema.parse(f.read(length), schema.META_DOC, "META")
    return not bad and bool(doc["config"].get("profile"))
