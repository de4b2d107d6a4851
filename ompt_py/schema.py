"""The written schema of ompt-py's trace files, in one place, and its validator.

Every reader checks what it reads against this module before it trusts a
length, a type or a key (ompt_py.io.rawfile, ompt_py.io.parquet), so that a
trace that loads is safe to use: the analyses, exports and the report read the
metadata's keys without checking them again.

Raw files (``.omptraw``, one per process, written by the C tool:
csrc/tool/omptpy_file.h) are a sequence of blocks, each a 16-byte ``HEADER``
(``MAGIC``, type, payload length) and its payload; ``BLOCKS`` gives each type
its name and what its payload is: 64-byte records (RECORDS), a span of the
file that threads wrote records into in place (REGION: a prefix, chunk
descriptors and the chunks, read by io/rawfile.py), a JSON document of the
shape given (META first, STATS, STACKS) or binary data that its own module
reads (LEDGER: io/ledger.py).  A new block type is one entry there (and
its document's shape).  Versions: META's ``format`` (RAW_FORMAT) and
``record_version`` (RECORD_VERSIONS, all of them 64-byte records).

Parquet files (``Trace.save``) hold the record fields as columns
(``PARQUET_COLUMNS``) and the trace metadata (``TRACE_META``: the process
entries, their thread rows, modules and Python stacks) as JSON under the
key-value metadata key ``ompt_py``, versioned by ``FORMAT``.

The shapes are a small declarative table (``Obj``, ``List``, ``Int``...) read by
one validator (``problem``) rather than JSON Schema and the jsonschema package:
they need integer ranges that numpy and C take (uint64 addresses, int32 pids)
and a Python stack's mixed list, which JSON Schema spells only verbosely; the
messages name the key as Python reads it (``processes[0].threads[2].written``);
and jsonschema would add four packages (a compiled one among them) to every
install of a profiler for a few hundred lines of data.  Objects may hold keys
not listed here (a newer writer's), which are kept and not read.

Base layer: imports only the C extension and the record layout.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _core
from .records import EVENT_DTYPE

# ---- versions -------------------------------------------------------------------------

#: The layout of the trace metadata (``meta["format"]``), kept in Parquet files.
FORMAT = 1
#: The layout of a profile's Parquet file (``Profile.save``: its metadata's ``profile``).
PROFILE_FORMAT = 1
#: The layout of a raw file's META document (its ``format``: csrc/tool/meta.c).
RAW_FORMAT = 1
#: The record versions this ompt_py reads: all of them 64-byte records of the
#: same fields (a new version gave a field a new meaning, never a new place).
RECORD_VERSIONS = range(1, 9)

# ---- the validator ------------------------------------------------------------------------

U32, I32, I64, U64 = 2**32 - 1, 2**31 - 1, 2**63 - 1, 2**64 - 1


def _kind(value: object) -> str:
    """A JSON value's type, as a message names it."""
    for t, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                    (str, "a string"), (list, "a list"), (dict, "an object")):
        if isinstance(value, t):
            return name
    return "null" if value is None else type(value).__name__


class Spec:
    """The shape of a JSON value; ``check`` says what is wrong with one (None: nothing)."""

    def check(self, value: Any, path: str) -> str | None:
        raise NotImplementedError


@dataclass(frozen=True)
class Int(Spec):
    """An integer (not a boolean) from ``lo`` to ``hi``."""

    lo: int = 0
    hi: int = U64

    def check(self, value: Any, path: str) -> str | None:
        if type(value) is not int:
            return f"{path} is {_kind(value)}, not an integer"
        if not self.lo <= value <= self.hi:
            return f"{path} is {value}, outside [{self.lo}, {self.hi}]"
        return None


@dataclass(frozen=True)
class Num(Spec):
    """A finite number (integer or not) greater than ``above``, at most ``hi``."""

    above: float = -math.inf
    hi: float = math.inf

    def check(self, value: Any, path: str) -> str | None:
        if type(value) not in (int, float):
            return f"{path} is {_kind(value)}, not a number"
        if not (math.isfinite(value) and self.above < value <= self.hi):
            return f"{path} is {value}, outside ({self.above}, {self.hi}]"
        return None


@dataclass(frozen=True)
class Str(Spec):
    """A string without NUL characters (paths and names reach the OS and C)."""

    def check(self, value: Any, path: str) -> str | None:
        if type(value) is not str:
            return f"{path} is {_kind(value)}, not a string"
        if "\0" in value:
            return f"{path} holds a NUL character"
        return None


@dataclass(frozen=True)
class Bool(Spec):
    def check(self, value: Any, path: str) -> str | None:
        return None if type(value) is bool else f"{path} is {_kind(value)}, not a boolean"


@dataclass(frozen=True)
class Maybe(Spec):
    """null or ``inner``."""

    inner: Spec

    def check(self, value: Any, path: str) -> str | None:
        return None if value is None else self.inner.check(value, path)


@dataclass(frozen=True)
class List(Spec):
    """A list of ``item``s."""

    item: Spec

    def check(self, value: Any, path: str) -> str | None:
        if type(value) is not list:
            return f"{path} is {_kind(value)}, not a list"
        for i, v in enumerate(value):
            bad = self.item.check(v, f"{path}[{i}]")
            if bad:
                return bad
        return None


@dataclass(frozen=True)
class Dict(Spec):
    """An object of any keys whose values are ``value``s."""

    value: Spec

    def check(self, value: Any, path: str) -> str | None:
        if type(value) is not dict:
            return f"{path} is {_kind(value)}, not an object"
        for k, v in value.items():
            bad = self.value.check(v, f"{path}.{k}")
            if bad:
                return bad
        return None


@dataclass(frozen=True)
class Row(Spec):
    """A list of exactly these items, in order."""

    items: tuple[Spec, ...]

    def check(self, value: Any, path: str) -> str | None:
        if type(value) is not list or len(value) != len(self.items):
            return f"{path} is {_kind(value)}, not a list of {len(self.items)} items"
        for i, (spec, v) in enumerate(zip(self.items, value)):
            bad = spec.check(v, f"{path}[{i}]")
            if bad:
                return bad
        return None


@dataclass(frozen=True)
class Obj(Spec):
    """An object with the ``required`` keys and maybe the ``optional`` ones (other
    keys are allowed and not checked)."""

    required: Mapping[str, Spec]
    optional: Mapping[str, Spec] = None  # type: ignore[assignment]

    def check(self, value: Any, path: str) -> str | None:
        if type(value) is not dict:
            return f"{path} is {_kind(value)}, not an object"
        for key, spec in self.required.items():
            if key not in value:
                return f"{path}.{key} is missing"
            bad = spec.check(value[key], f"{path}.{key}")
            if bad:
                return bad
        for key, spec in (self.optional or {}).items():
            if key in value:
                bad = spec.check(value[key], f"{path}.{key}")
                if bad:
                    return bad
        return None


class PythonStack(Spec):
    """A Python stack as the tool writes it: [truncated, code, line, code, line...,
    and maybe the list of native return addresses], frames outermost first; or
    null or [] for an id whose stack was not kept."""

    def check(self, value: Any, path: str) -> str | None:
        if value is None or value == []:
            return None
        if type(value) is not list:
            return f"{path} is {_kind(value)}, not a list"
        frames = value[:-1] if type(value[-1]) is list else value
        if len(frames) % 2 != 1:
            return f"{path} does not hold [truncated, code, line, ...] (it has {len(frames)})"
        natives = value[len(frames):]
        # Fast path (stacks are many): every item an integer in range, without a call
        # per item; the slow path below names the first bad one.
        if all(type(x) is int for x in frames) and all(
                type(x) is int for n in natives for x in n) and (
                0 <= frames[0] <= U32 and min(frames[1::2], default=0) >= 0
                and max(frames[1::2], default=0) <= U32
                and min(frames[2::2], default=0) >= -I32 - 1
                and max(frames[2::2], default=0) <= I32
                and all(min(n, default=0) >= 0 and max(n, default=0) <= U64 for n in natives)):
            return None
        bad = _TRUNCATED.check(frames[0], f"{path}[0]")
        for i in range(1, len(frames), 2):
            bad = (bad or _ID.check(frames[i], f"{path}[{i}]")
                   or _LINE.check(frames[i + 1], f"{path}[{i + 1}]"))
        if natives:
            bad = bad or List(_ADDRESS).check(natives[0], f"{path}[{len(frames)}]")
        return bad


def problem(value: Any, spec: Spec, what: str = "") -> str | None:
    """What is wrong with ``value`` for ``spec`` (a key path from ``what``), or None."""
    return spec.check(value, what or "the document")


def parse(payload: bytes, spec: Spec, what: str = "") -> tuple[Any, str | None]:
    """A JSON document (UTF-8 bytes) and what is wrong with it (None: nothing)."""
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError, JSONDecodeError, digits
        return None, f"not JSON ({type(e).__name__}: {str(e)[:120]})"
    return doc, problem(doc, spec, what)


# ---- shapes shared by the files ------------------------------------------------------------

_ID = Int(0, U32)
_LINE = Int(-I32 - 1, I32)
_TRUNCATED = Int(0, U32)
_ADDRESS = Int(0, U64)
_COUNT = Int(0, U64)
#: The most entries a STACKS document's tables may start after (the tool's tables
#: hold at most 2**16 codes and 2**18 stacks): a reader pads a gap with nulls.
MAX_TABLE_START = 1 << 20

ANCHOR = Obj({"ticks": Int(0, U64), "mono_ns": Int(0, I64)})
MODULE = Obj({"path": Str(), "base": _ADDRESS, "start": _ADDRESS, "end": _ADDRESS},
             {"build_id": Str()})
CONFIG = Obj({}, {"enabled": Bool(), "buffer_bytes": _COUNT, "overflow": Str(),
                  "drain_ms": Num(), "populate_ahead": Bool(), "sample_hz": Num(),
                  "place_info": Bool(), "sink": Str(),
                  "output": Str(), "error": Str(), "handler_queue_bytes": _COUNT,
                  "zero_copy": Bool(), "device_trace": Bool(), "device_buffer_bytes": _COUNT,
                  "device_memory_bytes": _COUNT, "profile": Bool(), "profile_entries": _COUNT})
RUNTIME = Obj({"version": Str()},
              {"omp_version": Int(-I64 - 1, I64), "path": Str(), "initialized": Bool(),
               "finalized": Bool(), "callbacks": Dict(Str())})
CODE = Row((Str(), Str(), _LINE))  # [file, name, first line]
#: What the interpreter that ran the Python stacks says of them (live/runhook.py).
INTERPRETER = {"status": Str(), "reason": Maybe(Str()), "depth": Int(), "native_depth": Int(),
               "python": Str(), "implementation": Str(), "cwd": Maybe(Str()),
               "library_paths": List(Str())}

# ---- raw files ---------------------------------------------------------------------------

MAGIC = _core.FILE_MAGIC
HEADER = struct.Struct("<IIQ")  # magic, type, payload length (csrc/tool/omptpy_file.h)
if HEADER.size != _core.BLOCK_HEADER_SIZE:
    raise ImportError("ompt_py._core was built for another raw file format; reinstall the "
                      "package so both parts come from one build")

#: One device the runtime initialised and its tracing (csrc/tool/device.c): the
#: entry points its lookup offered, each record type's set_trace_ompt answer, and
#: the counters of its buffers and records.  The loaded trace's entries may add a
#: clock fit ("clock").
DEVICE = Obj(
    {"device": Int(-I32 - 1, I32), "type": Str(), "entry_points": Dict(Bool()),
     "tracing": Dict(Str()), "started": Bool(), "start_error": Maybe(Str()),
     **{k: _COUNT for k in ("buffers_requested", "buffers_completed", "buffers_freed",
                            "buffer_bytes", "records", "records_lost", "records_after_stop",
                            "records_unknown_type", "records_bad_time", "zero_byte_buffers")}},
    {"runtime": Int(-I32 - 1, I32), "stopped": Bool(), "clock": Obj({}), "pid": Int(0, I32)})

#: What MPI said of the process (csrc/tool/mpi.c): its rank, MPI_COMM_WORLD's size, who
#: measured ("pmpi", "mpi4py"), and the clock measurements of each phase against the
#: reference rank: [reference's clock at send, this process's, reference's at return].
MPI_DOC = Obj({"rank": Int(0, I32), "size": Int(0, I32), "source": Str(),
               "sync": List(Obj({"phase": Str(), "reference": Int(0, I32),
                                 "pairs": List(Row((Int(0, I64), Int(0, I64), Int(0, I64))))}))})
#: A process's clock as fitted to the reference rank's (io/clocks.py, CLOCK_FIT there).
CLOCK_FIT = Obj({"reference": Int(0, I32), "offset_ns": Num(), "drift": Num(),
                 "at_ns": Int(-I64 - 1, I64)},
                {"span_ns": Int(-I64 - 1, I64), "residual_ns": Maybe(Num()), "error_ns": Num(),
                 "round_trip_ns": List(Num()),
                 "pairs": _COUNT, "phases": List(Str()), "poor": Bool()})

#: A raw file's META document: the process and the tool, written once, first.
META_DOC = Obj(
    {"format": Int(), "record_version": Int(), "record_size": Int(),
     "pid": Int(0, I32), "ppid": Int(0, I32), "hostname": Str(), "exe": Str(),
     "argv": List(Str()), "ld_preload": Str(), "clock": Str(),
     "tick_ns_estimate": Num(0, 1e9), "start_anchor": ANCHOR, "start_realtime_ns": Int(0, U64),
     "config": CONFIG, "start_tool_calls": _COUNT, "declined": _COUNT,
     "runtimes": List(RUNTIME)},
    {"rank": Int(-1, I32), "local_rank": Int(-1, I32), "job_id": Str(),
     "modules": List(MODULE), "region_names": List(Str()),
     "chunk_records": _COUNT, "region_unnamed": _COUNT, "error_messages_unkept": _COUNT,
     "exec_from": Str(),
     "sample_signal": Int(-I32 - 1, I32), "sample_error": Str(), "devices": List(DEVICE)})
#: A STATS document: counters per thread and a clock anchor, now (the last one at exit:
#: ``final``).
STATS_DOC = Obj(
    {"final": Bool(), "anchor": ANCHOR, "realtime_ns": Int(0, U64), "sink_lost": _COUNT,
     "buffer_bytes": _COUNT,
     "threads": List(Obj({"thread": _ID, "type": Int(-I32 - 1, I32), "tid": Int(-I32 - 1, I32),
                          "written": _COUNT, "dropped": _COUNT},
                         {"runtime": Int(-I32 - 1, I32), "samples_skipped": _COUNT,
                          "nobuf": _COUNT, "live": Bool()}))},
    {"recording": Bool(), "start_tool_calls": _COUNT, "declined": _COUNT,
     "runtimes": List(RUNTIME),
     # Before the runtimes were described whole in STATS: their states only.
     "runtime_states": List(Obj({}, {"initialized": Bool(), "finalized": Bool()})),
     "modules": List(MODULE), "region_names": List(Str()), "region_unnamed": _COUNT,
     "error_messages_unkept": _COUNT, "devices": List(DEVICE), "mpi": MPI_DOC,
     "profile_unmapped": _COUNT,  # profile mode: threads whose tables could not be mapped
     # the in-place route's stalls: how many, how long (as the tool_stall records)
     "region_stalls": _COUNT, "region_stall_ns": _COUNT})
#: A STACKS document: the Python stacks' codes and stacks from ids ``*_from`` on.
STACKS_DOC = Obj(
    {"interpreter": Maybe(Obj({}, INTERPRETER)),
     "codes_from": Int(0, MAX_TABLE_START), "codes": List(Maybe(CODE)),
     "stacks_from": Int(0, MAX_TABLE_START), "stacks": List(PythonStack()),
     "codes_refused": _COUNT, "stacks_refused": _COUNT},
    {"native_depth": Int(), "native_missed": _COUNT})


@dataclass(frozen=True)
class Block:
    """A block type of raw files: its name, what its payload is ("records": 64-byte
    records; "region": records written in place, in chunks, never read whole;
    "json": a document of the shape ``doc``; "binary": read and checked by its own
    module) and that shape."""

    name: str
    payload: str
    doc: Spec | None = None


#: The block types of raw files, by type number (csrc/tool/omptpy_file.h).
BLOCKS: dict[int, Block] = {
    _core.BLOCK_META: Block("META", "json", META_DOC),
    _core.BLOCK_RECORDS: Block("RECORDS", "records"),
    _core.BLOCK_STATS: Block("STATS", "json", STATS_DOC),
    _core.BLOCK_STACKS: Block("STACKS", "json", STACKS_DOC),
    _core.BLOCK_LEDGER: Block("LEDGER", "binary"),  # io/ledger.py: its prefix and layout
    _core.BLOCK_PROFILE: Block("PROFILE", "binary"),  # io/profile.py (profile mode)
    _core.BLOCK_REGION: Block("REGION", "region"),  # io/rawfile.py (the in-place file route)
}

# ---- Parquet files -------------------------------------------------------------------------

#: The columns a Parquet trace is read from: the record fields as stored (``time_ns``
#: in nanoseconds from the trace's origin) and each row's ``pid`` (not in a dataset's
#: partition, which holds one process).  Its writer adds ``event_name``,
#: ``kind_name`` (dictionary-encoded strings) and ``rank`` (int32, when a process
#: had one) for other readers.
PARQUET_COLUMNS: dict[str, np.dtype] = {
    **{name: EVENT_DTYPE[name] for name in EVENT_DTYPE.names}, "pid": np.dtype(np.int32)}

THREAD_ROW = Obj({"thread": _ID, "type": Str(), "runtime": Int(-I32 - 1, I32),
                  "tid": Int(-I32 - 1, I32), "written": _COUNT, "dropped": _COUNT,
                  "samples_skipped": _COUNT},
                 {"lost": _COUNT})
#: ``processes[i]["python"]``: the Python stacks of a process (meta.python_entry).
PYTHON_ENTRY = Obj({"codes": List(Maybe(CODE)), "stacks": List(PythonStack())},
                   {**INTERPRETER, "codes_refused": _COUNT, "stacks_refused": _COUNT,
                    "native_missed": _COUNT})
#: ``meta["processes"][i]`` (meta.process_entry).
PROCESS_ENTRY = Obj(
    {"pid": Int(0, I32), "ppid": Int(0, I32), "hostname": Str(), "exe": Str(),
     "argv": List(Str()), "ld_preload": Str(), "clock": Str(), "config": CONFIG,
     "runtimes": List(RUNTIME),
     "tool": Obj({"start_tool_calls": _COUNT, "declined": _COUNT,
                  "record_version": Int(RECORD_VERSIONS[0], RECORD_VERSIONS[-1])}),
     "rank": Maybe(Int(0, I32)), "start_realtime_ns": Maybe(Int(0, U64)),
     "stop_realtime_ns": Maybe(Int(0, U64)), "threads": List(THREAD_ROW), "written": _COUNT,
     "dropped": _COUNT, "sink_lost": _COUNT, "buffer_bytes": Maybe(_COUNT),
     "region_names": List(Str()), "complete": Bool(), "truncated": Bool(), "source": Str(),
     "modules": List(MODULE)},
    {"python": PYTHON_ENTRY, "fallback": Obj({}), "region_unnamed": _COUNT,
     # MPI (docs/mpi.md): the node-local rank, the job, what MPI said, the clock's fit
     "local_rank": Maybe(Int(0, I32)), "job_id": Maybe(Str()),
     "mpi": Obj({"rank": Int(0, I32), "size": Int(0, I32)}, {"source": Str()}),
     "clock_alignment": CLOCK_FIT,
     "error_messages_unkept": _COUNT, "devices": List(DEVICE),
     "region_stalls": _COUNT, "region_stall_ns": _COUNT,  # the tool's stalls (docs/stalls.md)
     # what the process lost, and why (io/ledger.py; meta.with_losses for older files)
     "lost": _COUNT, "ending": Str(), "lost_reasons": Dict(_COUNT),
     "unaccounted_threads": _COUNT,
     "images": List(Obj({}, {"source": Str(), "exe": Maybe(Str()), "argv": Maybe(List(Str())),
                             "ending": Maybe(Str()), "lost": Maybe(_COUNT)}))})
#: ``meta["skipped"]``: what a partial load left out.
SKIPPED = List(Obj({"source": Str(), "reason": Str()}))
#: ``Trace.meta`` as a Parquet file keeps it (meta.trace_meta).
TRACE_META = Obj({"format": Int(), "origin_mono_ns": Maybe(Int(0, I64)),
                  "processes": List(PROCESS_ENTRY), "written": _COUNT, "dropped": _COUNT},
                 {"skipped": SKIPPED, "lost": _COUNT,
                  # an export's filter (io/filters.py ExportFilter.meta)
                  "export_filter": Obj({}),
                  # every process's devices, each with its "pid", and those with clock
                  # pairs but no entry of the tool's (offload.attach_clocks)
                  "devices": List(Obj({"device": Int(-I32 - 1, I32)},
                                      {"pid": Int(0, I32), "clock": Obj({})}))})

# ---- profile files ---------------------------------------------------------------------------

#: A profile's columns (``Profile.save``; io/profile.py), per table: the key columns
#: of every table, then the table's own.  Types: "int64", "uint64", "str" and
#: "hist" (the log2 histogram: PROFILE_BUCKETS counts, a list of variable size in the
#: file; earlier files' fixed-size lists read too: io/profile.py _read_table).
PROFILE_KEYS = {"pid": "int64", "thread": "int64", "codeptr": "uint64"}
PROFILE_COLUMNS: dict[str, dict[str, str]] = {
    "constructs": {"construct": "str", "kind": "str", "count": "int64", "total_ns": "int64",
                   "min_ns": "int64", "max_ns": "int64", "hist": "hist"},
    "regions_threads": {"implicit_tasks": "int64", "duration_ns": "int64",
                        "barrier_wait_ns": "int64", "sync_wait_ns": "int64",
                        "lock_wait_ns": "int64", "busy_ns": "int64"},
    "locks": {"kind": "str", "wait_id": "uint64", "acquisitions": "int64",
              "wait_total_ns": "int64", "wait_min_ns": "int64", "wait_max_ns": "int64",
              "hold_total_ns": "int64", "hold_max_ns": "int64", "hist": "hist"},
    "tasks": {"created": "int64", "ran": "int64", "run_total_ns": "int64",
              "run_min_ns": "int64", "run_max_ns": "int64", "hist": "hist"},
}
#: ``Profile.meta`` as a profile file keeps it: per process its slots (their
#: overflow: aggregates not made) and threads without tables (``unmapped``).
PROFILE_META = Obj(
    {"profile": Int(), "processes": List(Obj(
        {"pid": Int(0, I32), "source": Str(), "unmapped": _COUNT,
         "slots": List(Obj({"slot": _ID, "overflow": _COUNT, "threads": List(_ID)}))},
        {"exe": Str(), "argv": List(Str()), "modules": List(MODULE)}))},
    {"skipped": SKIPPED})
