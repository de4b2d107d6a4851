"""Binding of the ompt-py C tool (libomptpy.so): csrc/ext/.

Every function takes its arguments by position only.  Arrays are anything with
the buffer protocol (numpy arrays); the kernels (columns, pair, find,
format_rows, ticks_to_ns) run without the GIL and write their outputs in place.
"""

import sys
from collections.abc import Callable, Sequence
from typing import Final, TypedDict, final

from typing_extensions import Buffer, TypeAlias

# ---- constants, from the C headers -----------------------------------------------

# OMPT values the analysis tests (csrc/tool/omptpy_ompt.h)
SCOPE_BEGIN: Final[int]
SCOPE_END: Final[int]
SCOPE_BEGINEND: Final[int]
TASK_INITIAL: Final[int]
TASK_TARGET: Final[int]
TASK_IMPLICIT: Final[int]
TASK_EXPLICIT: Final[int]
PARALLEL_INVOKER_PROGRAM: Final[int]
PARALLEL_INVOKER_RUNTIME: Final[int]
PARALLEL_LEAGUE: Final[int]
# ompt-py's own events and the record (csrc/include/omptpy.h)
EVENT_SAMPLE: Final[int]
EVENT_REGION: Final[int]
EVENT_MPI: Final[int]
EVENT_TOOL_STALL: Final[int]
# why a tool_stall record's thread stalled (its kind)
STALL_REGION: Final[int]
STALL_POPULATE: Final[int]
STALL_WAIT: Final[int]
# the MPI calls of an mpi record's kind, and the clock measurements kept per phase
MPI_INIT: Final[int]
MPI_FINALIZE: Final[int]
MPI_BARRIER: Final[int]
MPI_BCAST: Final[int]
MPI_REDUCE: Final[int]
MPI_ALLREDUCE: Final[int]
MPI_GATHER: Final[int]
MPI_ALLGATHER: Final[int]
MPI_SCATTER: Final[int]
MPI_ALLTOALL: Final[int]
MPI_SEND: Final[int]
MPI_RECV: Final[int]
MPI_ISEND: Final[int]
MPI_IRECV: Final[int]
MPI_WAIT: Final[int]
MPI_WAITALL: Final[int]
MPI_SENDRECV: Final[int]
MPI_CLOCK_SYNC: Final[int]
MPI_MAX_PAIRS: Final[int]
RECORD_SIZE: Final[int]
# the raw file (csrc/tool/omptpy_file.h): blocks of a header (magic, type, length)
FILE_MAGIC: Final[int]
BLOCK_META: Final[int]
BLOCK_RECORDS: Final[int]
BLOCK_STATS: Final[int]
BLOCK_STACKS: Final[int]
BLOCK_LEDGER: Final[int]
BLOCK_PROFILE: Final[int]
BLOCK_REGION: Final[int]
REGION_PREFIX_SIZE: Final[int]
DESC_THREAD_OFFSET: Final[int]
PROFILE_VERSION: Final[int]
PROFILE_HEAD_SIZE: Final[int]
PROFILE_ROW_SIZE: Final[int]
PROFILE_BUCKETS: Final[int]
PROFILE_CONSTRUCT: Final[int]
PROFILE_REGION: Final[int]
PROFILE_LOCK: Final[int]
PROFILE_TASK: Final[int]
BLOCK_HEADER_SIZE: Final[int]
LEDGER_PROCESS: Final[int]
LEDGER_SLOT: Final[int]
LEDGER_WINDOWS: Final[int]
LEDGER_WINDOWS_HEAD_SIZE: Final[int]
LEDGER_NONE: Final[int]
LEDGER_DESC_SIZE: Final[int]
LEDGER_PREFIX_SIZE: Final[int]
LEDGER_HEAD_SIZE: Final[int]
LEDGER_THREAD_SIZE: Final[int]
LEDGER_FINAL: Final[int]
LEDGER_UNKNOWN: Final[int]
LEDGER_NOBUF: Final[int]
END_NONE: Final[int]
END_FINALIZE: Final[int]
END_EXIT: Final[int]
END__EXIT: Final[int]
END_EXEC: Final[int]
END_ABORT: Final[int]
END_FINISH: Final[int]
# bounds of the handlers' filters and of native handlers (csrc/tool/omptpy_api.h)
TAP_MAX_FILTERS: Final[int]
TAP_MAX_THREADS: Final[int]
NATIVE_MAX: Final[int]
# Python call stacks (csrc/ext/pystack.c): the deepest capture, and why this build
# cannot capture (None: it can)
PYTHON_STACKS_MAX_DEPTH: Final[int]
NATIVE_STACKS_MAX_DEPTH: Final[int]
PYTHON_STACKS_UNSUPPORTED: Final[str | None]
# the key of a lookup of columns()
KEY_EVENT: Final[int]
KEY_ENDPOINT: Final[int]
KEY_EVENT_KIND: Final[int]
KEY_EVENT_ENDPOINT: Final[int]
# what a row does in a pairing of pair_events()
PAIR_NONE: Final[int]
PAIR_OPEN: Final[int]
PAIR_CLOSE: Final[int]
# the kind of a column of format_rows()
FORMAT_NUMBER: Final[int]
FORMAT_MICROS: Final[int]
FORMAT_HEX: Final[int]
FORMAT_TEXT: Final[int]
# the kind of a column of proto_payloads()
PROTO_FIELD: Final[int]
PROTO_NUMBER: Final[int]
PROTO_POINTER: Final[int]
PROTO_TABLE: Final[int]

# ---- types ------------------------------------------------------------------------

@final
class Records:
    """Records taken from the tool's memory sink (a writable buffer of 64-byte records)."""

    def __len__(self) -> int: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...

# The dictionaries and tuples some functions take or return (stub-only names).

class _RecordLayout(TypedDict):
    version: int
    size: int
    fields: list[tuple[str, int, int]]  # (name, offset, size)

class _TapStats(TypedDict):
    queued: int
    dropped: int
    filtered: int
    position: int
    backlog: int
    capacity: int
    active: bool

# A key column of pair(), pair_events() and find(): (integers of one dimension, any
# stride, missing_if_zero, table of bytes or None[, rows (int64) the column reads]).
_KeyColumn: TypeAlias = (tuple[Buffer, bool, Buffer | None]
                         | tuple[Buffer, bool, Buffer | None, Buffer | None])

# ---- the tool -----------------------------------------------------------------------

def init() -> str | None:
    """Read the configuration; returns None, or the error message when it is invalid."""

def check_config() -> str | None:
    """Check the OMPTPY_* variables of os.environ now; None, or the error message."""

def set_recording(on: object, /) -> None:
    """Start (True) or pause (False) recording."""

def is_recording() -> bool:
    """Whether events are being recorded."""

def flush() -> None:
    """Move every buffered record into the sink."""

def take() -> Records:
    """Take the records gathered in the memory sink so far."""

def meta() -> str:
    """The process and runtime description, as JSON."""

def profile() -> bytes:
    """Profile mode's PROFILE blocks so far, as a raw file holds them (io.profile.parse_blocks)."""

def stats() -> str:
    """Per-thread written/dropped counters and a clock anchor, as JSON."""

def runtime_info() -> str:
    """What each attached runtime's inquiry functions answer, as JSON."""

def tool_path() -> str:
    """Absolute path of libomptpy.so."""

def record_layout() -> _RecordLayout:
    """Version, size and field offsets of a record."""

# ---- kernels over records ---------------------------------------------------------

def columns(
    records: Buffer,
    order: Buffer | None,
    fields: list[tuple[Buffer, int, int]],
    lookups: list[tuple[Buffer, Buffer, int]],
    frames: tuple[Buffer, Buffer, Buffer, Buffer, Buffer, Buffer, Buffer, Buffer] | None,
    /,
) -> None:
    """The columns of Trace.to_pandas() in one pass over the records: fields as
    (out, offset, size), lookups as (out, table, KEY_*), frames as (exit, enter,
    exit flags, enter flags, no frame, no enter frame, no exit flags, no enter flags)."""

def pair(
    keys: list[_KeyColumn],
    begins: _KeyColumn,
    begin_value: int,
    partner: Buffer,
    tags: _KeyColumn | None = None,
    enclosing: Buffer | None = None,
    /,
) -> None:
    """Begin/end pairing per key in time order; partner[i]: the row paired with row i, or
    -1; with tags, an end closes the latest open begin of its tag (0: any); enclosing[i]:
    the latest open begin of the key when begin i opened, or -1."""

def pair_events(
    order: Buffer | None,
    events: _KeyColumn,
    endpoints: _KeyColumn,
    pairings: list[tuple[Buffer, list[_KeyColumn]]],
    as_rows: bool = False,
    lookups: list[tuple[int, int, list[_KeyColumn]] | tuple[int, int, list[_KeyColumn], bool]]
    | None = None,
    times: Buffer | None = None,
    end_times: bool = False,
    split: int | None = None,
    /,
) -> tuple[list[tuple[bytes, bytes, int]], list[bytearray]] | None:
    """Several pairings of the records in one pass over them in ``order`` (int64; None,
    with as_rows: the time order of ``times``, the records' int64 times, merged as the
    pass goes, or None back when they are not in a few chains of runs; end_times: the
    ends given as their records' times), each
    as pair() pairs: columns of the records (events, endpoints, keys), a pairing
    (roles, keys), roles[4 * event + endpoint] a PAIR_* (endpoint 1 to 3, else 0); a
    lookup (pairing, in, keys[, enclosing]): per begin of the pairing, the pair of
    ``in`` whose begin has the key its record has in keys (among those open as it
    begins; enclosing: the latest begun of those open then, keys those of the
    pairing's key).
    Returns (per pairing (begins, ends, ends that closed nothing), per lookup found),
    int64 bytes: the begins' positions in order (as_rows: their rows), those closed
    first, then those never closed; the ends' of those closed; found (a bytearray,
    which the caller may complete in place), per closed begin the index of the
    closed pair found, -1 for none, -2 where it could not tell.  A merged pass (order
    None) is split at time ``split`` (None: at the median of a sample of the times,
    when there are 2^20 records or more and two CPUs) into two halves, the second
    read in a thread of its own, joined as one pass would have paired them."""

def find(
    table_keys: list[_KeyColumn],
    query_keys: list[_KeyColumn],
    out: Buffer,
    table_times: _KeyColumn | None = None,
    query_times: _KeyColumn | None = None,
    first: bool = False,
    /,
) -> None:
    """Per query row, the first table row with its keys (with times: the last at or
    before the query's time; with times and first, the first, found in time order),
    or -1."""

def sweep(
    layers: Sequence[tuple[Buffer, Buffer, Buffer]],
    keys: Buffer,
    table: Buffer,
    /,
) -> tuple[bytearray, bytearray, bytearray, bytearray]:
    """The segments of the layers' intervals (each layer (group, begin, end)) per group
    of keys, each piece in the state table[set of open layers], as bytearrays
    (first, begin, end, state): group g's segments are [first[g], first[g + 1])."""

def cumulative(
    first: Buffer,
    begin: Buffer,
    end: Buffer,
    state: Buffer,
    query_group: Buffer,
    query_time: Buffer,
    out: Buffer,
    spans: bool,
    /,
) -> None:
    """Each query's group's time in each state of the segments before its time, into
    out (queries x states); with spans, the time between each of the first half of
    the queries and the same one of the second half (queries / 2 x states)."""

def waiting(
    series: list[tuple[Buffer, Buffer, Buffer, Buffer]], start: int | None = None,
    end: int | None = None, /,
) -> tuple[bytearray, bytearray, list[bytearray]]:
    """How many threads wait per process after each change: series, a list of (pid,
    thread, begin, end), a series' waits in the order of their begins; a thread's waits
    that nest or touch count once (one ending before it begins: no length).  Returns
    (pid, time, [count per series]): int32, int64 and int32 bytearrays, a row per
    process and time at which a spell begins or ends, by process then time, in the
    window [start, end] (a process's last row before start moved to start, unless it
    has one there)."""

def proto_waiting(
    series: list[tuple[Buffer, Buffer, Buffer, Buffer]],
    tracks: Callable[[bytes], Buffer], sequence: int,
    write: Callable[[memoryview], object], start: int | None = None,
    end: int | None = None, /,
) -> None:
    """waiting()'s rows as the counter's TracePackets, given to ``write`` (which must
    not keep the view) a part at a time: per process (by pid) and series, its first
    value, then each change, on the track uuids[rank * len(series) + series]
    (uint64), uuids = tracks(the processes' pids, int64 bytes, sorted)."""

def lod_sum(
    begin: Buffer,
    end: Buffer,
    group: Buffer,
    site: Buffer,
    shift: int,
    node_bits: int,
    below: tuple[Buffer, Buffer, Buffer, Buffer, Buffer] | None,
    delta: int,
    gbits: int,
    /,
) -> tuple[bytes, bytes, bytes, bytes, bytes]:
    """One level of the view's aggregates (lod.py), node by node (2**node_bits ns): each
    bar (int64 begin and end, in the order of their nodes, held whole) cut at the bins
    of 2**shift ns it touches, the rows of the level below (a result of lod_sum, its
    bins >> delta, or None) added, and the rows of each key (bin << gbits | group)
    summed: (key, covered, bars, largest, site of the first largest) as int64 bytes, by
    key."""

def format_rows(
    parts: tuple[bytes, ...],
    columns: list[tuple[int, Buffer, Buffer | None, bytes, tuple[bytes, ...] | None]],
    /,
) -> bytes:
    """Rows of text, each parts[0] value parts[1] ... parts[-1]; a column is (FORMAT_*,
    values, missing, null, table)."""

def proto_payloads(
    parts: list[list[tuple[int, int, Buffer, Buffer | None, tuple[bytes, ...] | None]]],
    offsets: Buffer,
    /,
) -> bytes:
    """The TrackEvent fields of each row (a slice's begin), one after the other, the rows
    of each part (a list of columns) after the part before; offsets (int64, rows + 1)
    written.  A column is (PROTO_*, key, values, missing, table)."""

def proto_nest(
    track: Buffer, begin: Buffer, end: Buffer, runs: Buffer, ntracks: int, query_track: Buffer,
    query_time: Buffer, query_slice: Buffer, seq: Buffer, /,
) -> int:
    """The begins (2i) and ends (2i + 1) of slices in the order of their begins (runs,
    int64 bounds, of slices in that order, merged: at one time the earlier run first),
    as each track's stack has them, into seq (4 or 8-byte items); ends that overlap
    their parent's cut (returned: how many); per query, the innermost slice of its track
    holding its time, or -1."""

def proto_slots(seq: Buffer, starts: Buffer, count: Buffer, first: Buffer, slots: Buffer, /
                ) -> int:
    """Of the begins seq names (2 i: slice i), per source (starts: int64, each one's first
    slice, and an end) how many (count, written) and the first slice (first, written;
    0 for none), and into slots each begin's slot as proto_payloads lays out payloads
    made source by source; returns how many begins.  ValueError where a begin is of no
    source or a source's begins are not a range of slices."""

def proto_packets(
    seq: Buffer, begin: Buffer, end: Buffer, track: Buffer, uuids: Buffer, payload: bytes,
    offsets: Buffer, slots: Buffer, flows_from: Buffer, from_ids: Buffer, flows_to: Buffer,
    to_ids: Buffer,
    sequence: int, /,
) -> bytes:
    """The TracePackets of the begins and ends seq lists (proto_nest), as a Trace's bytes."""

def census(
    records: Buffer, pids: Buffer | None, pid: int, counts: Buffer, rare_max: int, /
) -> tuple[bytes, list[tuple[int, bytes]]]:
    """In one pass: counts[e] (int64, 65536 entries, written) the records of event number
    e; returns (the distinct pid << 32 | thread of the records, sorted, as int64 bytes;
    per event number of 1 to rare_max records, in increasing order, (number, its rows
    as int64 bytes)).  pids: each record's process (int32), or None: pid for all."""

def event_rows(records: Buffer, group: Buffer, outs: list[Buffer], /) -> None:
    """The rows of each group of events, in the records' order, in one pass: group
    (uint8, 65536 entries) is each event number's group, 1 to len(outs), 0 for none;
    outs[g - 1] (int64) gets group g's rows and must hold exactly as many."""

def take_records(records: Buffer, rows: Buffer, out: Buffer, /) -> None:
    """The records at rows (int64, each within the records) copied into out (as many
    records), in order, those ahead fetched into the cache."""

def tick_scale(
    first_ticks: int, first_ns: int, last_ticks: int | None, last_ns: int | None,
    estimate: float, /,
) -> float:
    """Nanoseconds per tick: the slope between the anchors when they are far enough
    apart (last_ticks and last_ns None: no second anchor), else estimate."""

def ticks_to_ns(
    records: Buffer, first_ticks: int, first_ns: int, scale: float, origin_ns: int, /
) -> None:
    """Times in place: CLOCK_MONOTONIC nanoseconds minus origin_ns on the line through
    the anchor of slope scale (tick_scale)."""

def time_order(times: Buffer, out: Buffer, /) -> bool:
    """The positions of times (int64, one dimension, any stride) in time order, stable,
    into out (int64): True; False (out untouched) when the times are not in a few
    chains of runs in time order (records.time_order sorts them then)."""

# ---- scripting callbacks ------------------------------------------------------------

def tap_configure(
    filters: list[tuple[int, int, int, int, tuple[int, ...]]], delay_s: float, block: bool, /
) -> None:
    """Start the handlers' queue or change its filters: (events_lo, events_hi,
    codeptr_lo, codeptr_hi, threads) each."""

def tap_stop() -> None:
    """Stop the handlers' queue."""

def tap_wait(timeout_s: float, max_records: int, /) -> tuple[bytearray, int] | None:
    """(records, position), or None when stopped."""

def tap_stats() -> _TapStats:
    """Counters of the handlers' queue."""

def native_add(function: int, state: int, events_lo: int, events_hi: int, /) -> int:
    """Install a native handler; returns its slot id."""

def native_remove(id: int, /) -> bool:
    """Whether it was installed."""

def native_alloc(size: int, /) -> int:
    """Address of zeroed memory that is never freed."""

def control_tool(command: int, modifier: int, /) -> int:
    """What omp_control_tool returns."""

def region_mark(endpoint: int, name: str | None, /) -> None:
    """A region begin (SCOPE_BEGIN) or end (SCOPE_END) on this thread."""

def clock_ticks() -> int:
    """The tool's clock now, in ticks (a record's time)."""

def clock_ns() -> int:
    """The tool's clock now, in nanoseconds on the clock anchors' scale."""

def job() -> tuple[int, int, str]:
    """(rank, local rank, job id) from the launcher's variables (-1, -1, '': none)."""

def mpi_call(call: int, begin_ticks: int, bytes: int, peer: int, comm_size: int, /) -> None:
    """An mpi record on this thread: a call (MPI_*) from begin_ticks to now."""

def mpi_world(rank: int, size: int, source: str, /) -> None:
    """This process's rank and the size of MPI_COMM_WORLD, and who says so."""

def mpi_clock_pairs(phase: int, reference: int, triples: Buffer, /) -> None:
    """One phase's clock measurements against the reference rank (uint64 triples)."""

def mpi_measured(phase: int, /) -> bool:
    """Whether that phase's measurements are kept."""

def region_names() -> list[str]:
    """The interned region names, id 1 first."""

def python_stacks(depth: int, description: str | None, native_depth: int, /) -> None:
    """Capture Python stacks of at most depth frames (0: off), with native_depth native
    frames above each construct; description: JSON kept with the tables (None:
    unchanged)."""

def stack_tables(codes_from: int, stacks_from: int, /) -> str:
    """The captured codes and stacks from these ids on, as JSON."""

def trim_heap() -> bool:
    """Give the memory freed in glibc's heaps back to the system (malloc_trim); whether
    any was (False without glibc)."""

def time_captures(n: int, /) -> tuple[int, int]:
    """Capture this thread's Python stack n times (bench/pystacks.py): (nanoseconds,
    the last stack id)."""
