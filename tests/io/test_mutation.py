"""Loaders under mutated input: thousands of damaged copies of the stored traces,
made deterministically (fixed seed), each of which must load as a Trace (with a
TraceWarning when a part was left out, listed in ``meta["skipped"]``) on which
``to_pandas()`` and ``summary()`` work, or raise TraceFileError; anything else
(another exception, a crash, a hang) fails, listing the cases.

The mutations (``raw_cases``, ``parquet_cases``, ``directory_cases``):

* raw files (tests/data/parallel-300.omptraw, raw-ledger.omptraw of today's
  tool with its LEDGER blocks, one of format-v1/raw/ with a STACKS block
  made from a stored trace's Python stacks, and an in-place file made of
  raw-ledger's records by tests/inplace_raw.py, with a REGION block and a
  WINDOWS ledger block): cut at every block boundary and inside every block,
  block headers with a bad magic, type or length, bytes flipped, and each key
  of each JSON block (META, STATS, STACKS) removed or given a value of another
  type, the documents replaced whole; each field of the REGION prefix, of a
  chunk descriptor and of the WINDOWS head given bad values, and the ledger's
  in_place flag;
* Parquet files (format-v1/trace.parquet and one partition of its dataset,
  saved/b.parquet, pystacks-inprocess.parquet): each key of the ``ompt_py``
  metadata removed or retyped, the metadata missing or not JSON, each column
  removed, renamed or retyped, or given nulls, the file cut or bytes flipped;
* directories of parts (format-v1/raw/, the ranks/ dataset): a part replaced by
  junk, an empty part, a FIFO, a directory or a socket named like a part.

Many cases load as the same trace: ``to_pandas()`` runs once on each distinct
trace (its events and metadata; a metadata mutation's told apart by the shape
of its metadata: the types of its values), and ``summary()``, which costs
about 0.3 s, on SUMMARIES of them, evenly spread over the cases;
OMPTPY_MUTATION_SUMMARY=all runs it on every distinct trace (a few minutes).
The fuzzer (``make fuzz``, tests/fuzz/) explores beyond these cases.
"""

from __future__ import annotations

import faulthandler
import hashlib
import json
import os
import random
import socket
import struct
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import inplace_raw
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from conftest import stored_path
from inplace_raw import blocks

import ompt_py
from ompt_py.errors import TraceFileError, TraceWarning

SEED = 13
HEADER = struct.Struct("<IIQ")
MAGIC = 0x5450504F
META, RECORDS, STATS, STACKS, LEDGER, REGION = 1, 2, 3, 4, 5, 7
#: The values a key is given in turn: other JSON types, and integers out of range.
REPLACEMENTS = (None, "x", 1.5, 2**64, [], {})
#: Whole documents that are not what a reader expects.
BAD_DOCUMENTS = (b"", b"{", b"[]", b"null", b'"x"', b"1", b"\xff\xfe{}", b"[" * 100_000,
                 b'{"a": 1e999}', b"9" * 5000)
FLIPS_PER_FILE = 120
#: A case that takes longer hangs: the run stops, with the traceback of where.
HANG_SECONDS = 120
SUMMARIES = 8  # summary() of this many distinct traces per test (0.3 s each)


@dataclass
class Case:
    """One mutated input: ``files`` to make (a path relative to the case's folder:
    bytes, ``"fifo"``, ``"socket"`` or ``"dir"``), loaded from ``target`` (relative;
    "." the folder itself).  ``meta``: a mutation of the metadata's keys."""

    name: str
    files: dict[str, bytes | str]
    target: str
    meta: bool = False


# ---- raw files -------------------------------------------------------------------------


def key_paths(doc: object, prefix: tuple = (), depth: int = 5) -> Iterator[tuple]:
    """The path of every key of a JSON document (lists: their first item only; maps
    of many names to strings, such as a runtime's callbacks: their first key)."""
    if depth == 0:
        return
    items = (list(doc.items()) if isinstance(doc, dict)
             else [(0, doc[0])] if isinstance(doc, list) and doc else [])
    if len(items) > 8 and all(isinstance(v, str) for _, v in items):
        items = items[:1]
    for key, value in items:
        yield (*prefix, key)
        yield from key_paths(value, (*prefix, key), depth - 1)


def doc_mutations(doc: object, under: tuple = ()) -> Iterator[tuple[str, bytes]]:
    """(name, JSON) for each key of ``doc`` (under the path ``under``) removed and
    given each replacement (``doc`` is changed and restored in turn)."""
    for path in key_paths(doc):
        if path[:len(under)] != under:
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        old = parent[path[-1]]
        label = "/".join(map(str, path))
        for what in ("removed", *REPLACEMENTS):
            if what == "removed":
                if isinstance(parent, list):
                    parent.pop(path[-1])
                else:
                    del parent[path[-1]]
                yield f"{label} removed", json.dumps(doc).encode()
                if isinstance(parent, list):
                    parent.insert(path[-1], old)
                else:
                    parent[path[-1]] = old
            else:
                parent[path[-1]] = what
                yield f"{label} {what!r}", json.dumps(doc).encode()
        parent[path[-1]] = old


def with_block(data: bytes, index: int, payload: bytes, kind: int | None = None) -> bytes:
    """``data`` with the payload (and type) of its block ``index`` replaced."""
    off, old_kind, length = blocks(data)[index]
    header = HEADER.pack(MAGIC, old_kind if kind is None else kind, len(payload))
    return data[:off] + header + payload + data[off + HEADER.size + length:]


def stacks_block() -> bytes:
    """A STACKS block holding the Python stacks of a stored in-process trace."""
    meta = json.loads(pq.read_schema(stored_path("pystacks-inprocess.parquet"))
                      .metadata[b"ompt_py"])
    py = meta["processes"][0]["python"]
    refused = ("codes_refused", "stacks_refused", "native_missed")
    doc = {"interpreter": {k: v for k, v in py.items() if k not in ("codes", "stacks", *refused)},
           "codes_from": 0, "codes": py["codes"], "stacks_from": 0, "stacks": py["stacks"],
           "codes_refused": 0, "stacks_refused": 0, "native_depth": 0, "native_missed": 0}
    body = json.dumps(doc).encode()
    return HEADER.pack(MAGIC, STACKS, len(body)) + body


def raw_seeds() -> dict[str, tuple[bytes, bool, bool]]:
    """The raw files mutated, whether their documents are, and whether their bytes are:
    the large one for its several records blocks, a small one of record version 3 with
    a STACKS block (its documents' keys are those of the others), one of today's tool
    for its LEDGER blocks, an in-place one for its REGION and WINDOWS blocks."""
    critical = sorted(stored_path("format-v1/raw").glob("*.omptraw"))[0].read_bytes()
    return {"parallel-300": (stored_path("parallel-300.omptraw").read_bytes(), False, False),
            "critical+stacks": (critical + stacks_block(), True, True),
            "raw-ledger": (stored_path("raw-ledger.omptraw").read_bytes(), False, True),
            "in-place": (inplace_raw.sample(), False, True)}


#: Bad values of the fields of a REGION block's prefix (offset, format), of a chunk
#: descriptor's (n, thread + 1) and of the WINDOWS head's (count, cap).
REGION_FIELDS = {"version": (0, "<I", (0, 2, 2**32 - 1)),
                 "chunk_records": (4, "<I", (0, 1, 1023, 2**32 - 1)),
                 "nchunks": (8, "<I", (0, 1, 2**20, 2**32 - 1)),
                 "desc_size": (12, "<I", (0, 32, 65)),
                 "desc_offset": (16, "<Q", (0, 63, 2**31, 2**63, 2**64 - 1)),
                 "data_offset": (24, "<Q", (0, 4096, 2**40, 2**64 - 1))}
DESCRIPTOR_FIELDS = {"n": (0, (1, 17, 2**31, 2**32 - 1)), "thread": (36, (0, 3, 2**32 - 1))}
WINDOWS_FIELDS = {"count": (0, (0, 7, 9, 2**32 - 1)), "cap": (4, (0, 1, 2**28, 2**32 - 1))}


def in_place_mutants(name: str, data: bytes) -> Iterator[tuple[str, bytes, bool]]:
    """The fields of an in-place file's REGION prefix, descriptors, WINDOWS head and
    ledger head given bad values."""
    def put(at: int, fmt: str, value: int) -> bytes:
        out = bytearray(data)
        struct.pack_into(fmt, out, at, value)
        return bytes(out)

    ledgers = [off + 16 for off, kind, _ in blocks(data) if kind == LEDGER]
    body = next(off for off, kind, _ in blocks(data) if kind == REGION) + 16
    desc_offset = struct.unpack_from("<Q", data, body + 16)[0]
    for field, (at, fmt, values) in REGION_FIELDS.items():
        for value in values:
            yield f"{name} REGION {field} {value}", put(body + at, fmt, value), False
    for chunk in (0, 1, 11):  # leased ones, one never leased
        for field, (at, values) in DESCRIPTOR_FIELDS.items():
            for value in values:
                yield (f"{name} chunk {chunk} {field} {value}",
                       put(body + desc_offset + 64 * chunk + at, "<I", value), False)
    windows = ledgers[1] + struct.unpack_from("<I", data, ledgers[1] + 4)[0]
    for field, (at, values) in WINDOWS_FIELDS.items():
        for value in values:
            yield f"{name} WINDOWS {field} {value}", put(windows + at, "<I", value), False
    head = ledgers[0] + struct.unpack_from("<I", data, ledgers[0] + 4)[0]
    for value in (0, 2, 2**32 - 1):
        yield f"{name} in_place {value}", put(head + 32, "<I", value), False


def flips(name: str, data: bytes, rng: random.Random) -> Iterator[tuple[str, bytes, bool]]:
    for _ in range(FLIPS_PER_FILE):
        pos = rng.randrange(len(data))
        flipped = bytearray(data)
        flipped[pos] ^= rng.randrange(1, 256)
        yield f"{name} byte {pos} flipped to {flipped[pos]:#x}", bytes(flipped), False


def raw_mutants(name: str, data: bytes, documents: bool, flipped: bool, rng: random.Random
                ) -> Iterator[tuple[str, bytes, bool]]:
    """(name, bytes, whether it is a metadata mutation) of the mutations of one raw file."""
    bl = blocks(data)
    kinds = {META: "META", RECORDS: "RECORDS", STATS: "STATS", STACKS: "STACKS", LEDGER: "LEDGER",
             REGION: "REGION"}
    for i, (off, kind, length) in enumerate(bl):
        where = f"{name} block {i} ({kinds[kind]})"
        for cut in sorted({off, off + 1, off + 8, off + 15, off + 16, off + 16 + length // 2,
                           off + 16 + length - 1}):
            if cut < len(data):
                yield f"{where} cut at {cut}", data[:cut], False
        yield f"{where} bad magic", data[:off] + b"XXXX" + data[off + 4:], False
        for t in sorted({0, 6, 99, 2**32 - 1, *kinds} - {kind}):
            yield f"{where} type {t}", data[:off + 4] + struct.pack("<I", t) + data[off + 8:], False
        for n in sorted({0, 1, 63, length - 1, length + 1, length + 64, len(data), 2**63,
                         2**64 - 1} - {length}):
            yield (f"{where} length {n}", data[:off + 8] + struct.pack("<Q", n) + data[off + 16:],
                   False)
        if kind in (RECORDS, LEDGER, REGION) or not documents:
            continue
        doc = json.loads(data[off + 16:off + 16 + length])
        for label, new in doc_mutations(doc):
            yield f"{where} {label}", with_block(data, i, new), True
        for bad in BAD_DOCUMENTS:
            yield f"{where} document {bad[:12]!r}", with_block(data, i, bad), True
    if REGION in (kind for _, kind, _ in bl):
        yield from in_place_mutants(name, data)
    if flipped:
        yield from flips(name, data, rng)


def raw_cases() -> list[Case]:
    rng = random.Random(SEED)
    return [Case(n, {"ompt-4242-0.omptraw": d}, "ompt-4242-0.omptraw", meta)
            for name, (data, documents, flipped) in raw_seeds().items()
            for n, d, meta in raw_mutants(name, data, documents, flipped, rng)]


# ---- Parquet files -------------------------------------------------------------------------


def parquet_bytes(table: pa.Table, meta: bytes | None) -> bytes:
    sink = pa.BufferOutputStream()
    schema_meta = {b"ompt_py": meta} if meta is not None else None
    pq.write_table(table.replace_schema_metadata(schema_meta), sink)
    return sink.getvalue().to_pybytes()


def retyped(column: pa.ChunkedArray) -> Iterator[tuple[str, pa.Array]]:
    """A column as another type: (name, array)."""
    values = column.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    n = len(values)
    ints = pa.types.is_integer(values.type)
    yield "as float64", values.cast(pa.float64()) if ints else pa.array(np.linspace(0, 1, n))
    yield "as string", values.cast(pa.string())
    yield "as int8", (values.cast(pa.int8(), safe=False) if ints
                      else pa.array(np.zeros(n, np.int8)))
    yield "as huge uint64", pa.array(np.full(n, 2**64 - 1, np.uint64))
    yield "as list", pa.array([[v] for v in values.to_pylist()])
    yield "as binary", pa.array([b"\xff"] * n, pa.binary())
    yield "as nulls", pa.nulls(n, values.type)
    yield "with a null", pa.array([None, *values.to_pylist()[1:]], values.type) if n else values
    yield "as struct", pa.array([{"a": 1}] * n)


def parquet_seeds() -> dict[str, tuple[Path, tuple | None]]:
    """The Parquet files mutated, and under which path of their metadata its keys
    are (None: none; the whole file of two processes, the Python stacks of another,
    the columns of a file with and of one without a pid column)."""
    return {"trace.parquet": (stored_path("format-v1/trace.parquet"), ()),
            "partition": (stored_path("format-v1/dataset") / "pid=30151" / "part-0.parquet",
                          None),
            "pystacks": (stored_path("pystacks-inprocess.parquet"), ("processes", 0, "python"))}


def parquet_mutants(name: str, path: Path, under: tuple | None, rng: random.Random
                    ) -> Iterator[tuple[str, bytes, bool]]:
    table = pq.read_table(path)
    raw_meta = table.schema.metadata[b"ompt_py"]
    if under is not None:
        for label, new in doc_mutations(json.loads(raw_meta), under):
            yield f"{name} meta {label}", parquet_bytes(table, new), True
        yield f"{name} no metadata", parquet_bytes(table, None), True
        for bad in BAD_DOCUMENTS:
            yield f"{name} metadata {bad[:12]!r}", parquet_bytes(table, bad), True
    if name == "pystacks":
        return
    for column in table.column_names:
        i = table.column_names.index(column)
        yield f"{name} column {column} removed", parquet_bytes(table.remove_column(i), raw_meta), \
            False
        yield (f"{name} column {column} renamed",
               parquet_bytes(table.rename_columns([c if c != column else column + "_x"
                                                   for c in table.column_names]), raw_meta), False)
        for label, values in retyped(table.column(column)):
            yield (f"{name} column {column} {label}",
                   parquet_bytes(table.set_column(i, column, values), raw_meta), False)
    data = path.read_bytes()
    for cut in (0, 4, 12, len(data) // 4, len(data) // 2, len(data) - 12, len(data) - 8,
                len(data) - 1):
        yield f"{name} cut at {cut}", data[:cut], False
    yield from flips(name, data, rng)


def parquet_cases() -> list[Case]:
    rng = random.Random(SEED)
    return [Case(n, {"t.parquet": d}, "t.parquet", meta)
            for name, (path, under) in parquet_seeds().items()
            for n, d, meta in parquet_mutants(name, path, under, rng)]


# ---- directories of parts -----------------------------------------------------------------


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def directory_cases() -> list[Case]:
    raw = tree(stored_path("format-v1/raw"))
    ranks = tree(stored_path("ranks"))
    first_raw, first_part = sorted(raw)[0], sorted(ranks)[0]
    junk = b"this is not a trace\n" * 40
    extras: dict[str, bytes | str] = {
        "empty": b"", "junk": junk, "half": None, "fifo": "fifo", "socket": "socket",
        "dir": "dir"}
    cases = []
    for label, files, name in (("raw", raw, "ompt-99-0.omptraw"),
                               ("ranks", ranks, "pid=99/part-0.parquet"),
                               ("ranks top", ranks, "extra.parquet")):
        whole = files[first_raw if label == "raw" else first_part]
        for what, content in extras.items():
            added = whole[:len(whole) // 2] if what == "half" else content
            cases.append(Case(f"{label} + {what} part", {**files, name: added}, "."))
    for label, files, first in (("raw", raw, first_raw), ("ranks", ranks, first_part)):
        for what, content in (("empty", b""), ("junk", junk),
                              ("half", files[first][:len(files[first]) // 2])):
            cases.append(Case(f"{label}: a part {what}", {**files, first: content}, "."))
        cases.append(Case(f"{label}: every part junk", dict.fromkeys(files, junk), "."))
    duplicate = {**ranks, "pid=1/part-0.parquet": ranks[first_part]}
    cases.append(Case("ranks: one process twice", duplicate, "."))
    cases.append(Case("raw and ranks", {**raw, **ranks}, "."))
    cases.append(Case("a FIFO", {"ompt-1-0.omptraw": "fifo"}, "ompt-1-0.omptraw"))
    cases.append(Case("a FIFO .parquet", {"t.parquet": "fifo"}, "t.parquet"))
    cases.append(Case("only a directory named like a part", {"x.omptraw": "dir"}, "."))
    return cases


# ---- running them -------------------------------------------------------------------------


def make(root: Path, case: Case) -> Path:
    for rel, content in case.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == "fifo":
            os.mkfifo(path)
        elif content == "dir":
            path.mkdir()
        elif content == "socket":
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.bind(os.path.relpath(path))
                except OSError:  # a path too long for a socket: a FIFO instead
                    os.mkfifo(path)
        else:
            path.write_bytes(content)
    return root / case.target


def shape(value: object) -> object:
    """A JSON value with each scalar replaced by its type's name (an integer's: the
    smallest of int32, int64, uint64 it fits, or "big")."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if type(value) is int:
        return next((name for name, lo, hi in (("int32", -2**31, 2**31), ("int64", -2**63, 2**63),
                                                ("uint64", 0, 2**64)) if lo <= value < hi), "big")
    return type(value).__name__


def fingerprint(t: ompt_py.Trace, case: Case) -> str:
    """What a case's trace is as to_pandas() and summary() read it: its events, their
    processes and its metadata (a metadata mutation's: the metadata's shape), but what
    was skipped."""
    meta = {k: v for k, v in t.meta.items() if k != "skipped"}
    h = hashlib.sha1(t.events.tobytes())
    h.update(t.pids.tobytes())
    h.update(json.dumps(shape(meta) if case.meta else meta, sort_keys=True, default=str).encode())
    return h.hexdigest()


def loaded(case: Case, root: Path) -> tuple[ompt_py.Trace | None, str | None]:
    """The trace of one case (None: TraceFileError), and what went wrong (None: nothing)."""
    target = make(root, case)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            t = ompt_py.load(target)
        except TraceFileError as e:
            return None, None if str(e) else "TraceFileError without a message"
        except Exception as e:
            return None, f"load: {type(e).__name__}: {e}"
    skipped = t.meta.get("skipped")
    if not isinstance(skipped, list) or any(
            not isinstance(s, dict) or not isinstance(s.get("source"), str)
            or not isinstance(s.get("reason"), str) for s in skipped):
        return t, f"meta['skipped'] is {skipped!r}"
    if skipped and not any(issubclass(w.category, TraceWarning) for w in caught):
        return t, "parts were skipped without a TraceWarning"
    return t, None


def used(t: ompt_py.Trace, summary: bool) -> str | None:
    """What went wrong in to_pandas() (and summary()) of a trace (None: nothing)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, use in (("to_pandas", t.to_pandas), ("summary", lambda: str(t.summary()))):
            if name == "summary" and not summary:
                break
            try:
                use()
            except Exception as e:
                return f"{name}: {type(e).__name__}: {e}"
    return None


def check(cases: list[Case], tmp_path: Path) -> Counter:
    """Loads every case, then calls to_pandas() on each distinct trace (fingerprint)
    and summary() on every one with OMPTPY_MUTATION_SUMMARY=all, else on SUMMARIES of
    them, evenly spread; fails listing the cases that went wrong.  The counts."""
    failures, counts = [], Counter()
    distinct: dict[str, tuple[Case, ompt_py.Trace]] = {}
    cwd = os.getcwd()
    try:
        for i, case in enumerate(cases):
            faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
            root = tmp_path / str(i)
            root.mkdir()
            os.chdir(root)  # sockets bind by a short relative path
            t, problem = loaded(case, root)
            if problem:
                failures.append(f"{case.name}: {problem}")
            elif t is not None:
                distinct.setdefault(fingerprint(t, case), (case, t))
            counts["failed" if problem else "trace" if t is not None else "TraceFileError"] += 1
        every = os.environ.get("OMPTPY_MUTATION_SUMMARY") == "all"
        step = 1 if every else max(1, -(-len(distinct) // SUMMARIES))
        for k, (case, t) in enumerate(distinct.values()):
            faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
            problem = used(t, summary=k % step == 0)
            if problem:
                failures.append(f"{case.name}: {problem}")
    finally:
        faulthandler.cancel_dump_traceback_later()
        os.chdir(cwd)
    counts["distinct traces"] = len(distinct)
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n" + "\n".join(failures[:200])
    return counts


def test_raw_files(tmp_path):
    cases = raw_cases()
    assert len(cases) > 1000
    print(check(cases, tmp_path))


def test_parquet_files(tmp_path):
    cases = parquet_cases()
    assert len(cases) > 1000
    print(check(cases, tmp_path))


def test_directories(tmp_path):
    print(check(directory_cases(), tmp_path))
