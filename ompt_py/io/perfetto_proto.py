"""The Perfetto protobuf export (``ompt-py export --format perfetto-proto``, or an
output ending in ``.pftrace`` or ``.perfetto-trace``; ``Trace.to_perfetto`` of
such a path): Perfetto's own trace format (a ``Trace`` of ``TracePacket``s),
which ui.perfetto.dev and trace_processor read as they read the JSON export,
in a third of its size or less.

It carries what the JSON export carries, from the same sources
(``perfetto.tracks``: the same slices, names, args, flows, counter and
filter), the JSON writer being the reference:

* a track per process (``TrackDescriptor.process``: pid and the JSON's
  process name), per thread (``.thread``: pid, tid = the thread number, the
  JSON's thread name), per device (a track of its process, named as the
  JSON's device track), and per process two counter tracks, "threads waiting
  sync" and "threads waiting mutex" (the names Perfetto gives the JSON
  counter's two series), plus one track, "ompt-py", whose instant event at
  the trace's first time holds the JSON's otherData as debug annotations
  (producer, clock, origin, the export filter and what it clipped);
* per slice a ``TrackEvent`` of type SLICE_BEGIN (its name, category and args:
  debug annotations, numbers as int or uint values, addresses as pointer
  values, texts as interned strings, booleans as booleans, null args left
  out) and one of type SLICE_END, on its track, in the order a track's stack
  takes them (``_core.proto_nest``: the slices in file order, which nests
  slices that begin together the way the JSON viewer nests them); a slice
  that ends after the one it begins in (never in a trace the tables pair) is
  cut at that end and counted;
* flows: the id of a task's flow in ``flow_ids`` of the begin of the
  innermost slice holding the task's creation on its thread, and in
  ``terminating_flow_ids`` of the innermost slice holding its first start on
  the thread that ran it (the task's own slice): from creation to first start,
  as the JSON's "s" and "f" events (likewise the offload flows to the
  devices' tracks);
* counters: a ``TrackEvent`` of type COUNTER per change of a series, before
  the slices (made as they are put in order: _write_slices).

The names, categories, annotation names and texts are interned (sequence
SEQUENCE's ``InternedData``, added as new ones appear; in a dataset's file,
each partition's sequence its own: part_ids).  Timestamps are the
trace's times in nanoseconds (as the JSON's microseconds, to the
nanosecond).  The packets are written in C (csrc/ext/proto.c) a batch at a
time; the slices are first put in order across their sources (SliceOrder:
their begins, ends, tracks and the sequence of begins and ends, 26 bytes a
slice), then the fields of each batch's begins are made from the sources as
the JSON's text is.  On bench/export.py's trace of 10^7 events the export
adds 0.42 times the trace's records at its peak (0.5 at most: issue 16).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

import numpy as np

from .. import _core
from .filters import ExportFilter
from .perfetto import WAIT_SERIES, Label, Part, Source, Tracks, other_data, tracks
from .streaming import HEX, NUMBER, TEXT, Column, Progress, batches, in_order, output

if TYPE_CHECKING:
    from ..trace import Trace

#: The trusted packet sequence of every packet of a trace's file that uses
#: interned data (a dataset's file: each partition's its own, part_ids).
SEQUENCE = 1
#: Begins and ends made into packets at a time (a few MB of records, payloads
#: and packets each; with 2^18, the batches in flight added 0.2x the records to
#: the peak memory of bench/export.py's protobuf export, for no less CPU time).
PACKETS_AT_ONCE = 1 << 16

# Field numbers of Perfetto's protos (protos/perfetto/trace/...).
_PACKET, _SEQUENCE_FLAGS, _SEQUENCE_ID, _TIMESTAMP = 1, 13, 10, 8
_TRACK_EVENT, _INTERNED_DATA, _TRACK_DESCRIPTOR = 11, 12, 60
_CLEARED = 1  # TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS_STATE = 2  # TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_INSTANT = 3  # TrackEvent.TYPE_INSTANT
_NAME_IID, _CATEGORY_IIDS, _TYPE, _TRACK_UUID, _ANNOTATIONS = 10, 3, 9, 11, 4
_ANNOTATION_NAME_IID, _BOOL, _INT, _STRING, _STRING_IID = 1, 2, 4, 6, 17


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _len(field: int, data: bytes | str) -> bytes:
    data = data.encode() if isinstance(data, str) else data
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _packet(*fields: bytes) -> bytes:
    return _len(_PACKET, b"".join(fields))


class _Interned:
    """Interned strings of one kind (an InternedData field: 1 categories, 2 event
    names, 3 annotation names, 29 annotation string values): iids from 1, and
    those not yet written.  One thread at a time: the batches intern in their
    turn (_Turns)."""

    def __init__(self, field: int) -> None:
        self.field = field
        self.iids: dict[str, int] = {}
        self.new: list[str] = []

    def __call__(self, text: str) -> int:
        iid = self.iids.get(text)
        if iid is None:
            iid = self.iids[text] = len(self.iids) + 1
            self.new.append(text)
        return iid

    def written(self) -> bytes:
        new, self.new = self.new, []
        return b"".join(_len(self.field, _int(1, self.iids[t]) + _len(2, t)) for t in new)


class _Strings:
    """The interned strings of a packet sequence (``sequence``: its id)."""

    def __init__(self, sequence: int = SEQUENCE) -> None:
        self.sequence = sequence
        self.categories, self.names = _Interned(1), _Interned(2)
        self.keys, self.values = _Interned(3), _Interned(29)
        self.first = True
        # The fields of the JSON texts encoded so far (each interned at its first use).
        self.name_fields: dict[bytes, bytes] = {}
        self.value_fields: dict[bytes, bytes] = {}

    def packet(self) -> bytes:
        """The InternedData of the strings not written yet (none: b"")."""
        data = b"".join(i.written() for i in (self.categories, self.names, self.keys,
                                               self.values))
        if not data and not self.first:
            return b""
        flags = _CLEARED | _NEEDS_STATE if self.first else _NEEDS_STATE
        self.first = False
        return _packet(_int(_SEQUENCE_ID, self.sequence), _int(_SEQUENCE_FLAGS, flags),
                       _len(_INTERNED_DATA, data))

    def name(self, text: bytes) -> bytes:
        """A JSON string (a table entry of the JSON export's names) as a TrackEvent's
        name_iid field; b"" for null."""
        field = self.name_fields.get(text)
        if field is None:
            field = self.name_fields[text] = (
                b"" if text == b"null" else _int(_NAME_IID, self.names(json.loads(text))))
        return field

    def value(self, text: bytes) -> bytes:
        """A JSON value (a table entry of the JSON export's columns) as a debug
        annotation's value field; b"" for null."""
        field = self.value_fields.get(text)
        if field is None:
            field = self.value_fields[text] = self._value(json.loads(text))
        return field

    def _value(self, value: Any) -> bytes:
        if value is None:
            return b""
        if isinstance(value, bool):
            return _int(_BOOL, value)
        if isinstance(value, int):
            return _int(_INT, value)
        return _int(_STRING_IID, self.values(str(value)))


def _table(column: Column, encode: Callable[[bytes], bytes]) -> tuple[bytes, ...]:
    """A TEXT column's table encoded, the entries its rows use (others: b"", so that
    only the strings used are interned)."""
    table, codes = column.table, column.values
    if codes.dtype == bool:
        codes = codes.view(np.uint8)
    inside = codes < len(table)
    if codes.dtype.kind == "i":
        inside &= codes >= 0
    used = np.bincount(codes[inside].astype(np.intp, copy=False), minlength=len(table))
    out = [b""] * len(table)
    for code in np.flatnonzero(used).tolist():
        out[code] = encode(table[code])
    return tuple(out)


def _columns(cat: str, n: int, label: Label, strings: _Strings) -> list[tuple]:
    """proto_payloads' columns of a batch of ``n`` slices of category ``cat``: name,
    category, args (``label``: Source.label's)."""
    name_of, args = label
    if isinstance(name_of, str):
        name = (_core.PROTO_FIELD, _NAME_IID, np.full(n, strings.names(name_of)), None, None)
    else:
        table = _table(name_of, strings.name)
        name = (_core.PROTO_TABLE, 0, name_of.values, None, table)
    columns = [name, (_core.PROTO_FIELD, _CATEGORY_IIDS,
                      np.full(n, strings.categories(cat)), None, None)]
    for key, column in args:
        iid = strings.keys(key)
        if column.kind == TEXT:
            table = _table(column, strings.value)
            columns.append((_core.PROTO_TABLE, iid, column.values, column.missing, table))
        else:
            assert column.kind in (NUMBER, HEX), column.kind
            kind = _core.PROTO_NUMBER if column.kind == NUMBER else _core.PROTO_POINTER
            columns.append((kind, iid, column.values, column.missing, None))
    return columns


class _Turns:
    """The batches' turns, in their order (0, 1, ...): what batch k does in its
    ``turn(k)`` (interning its strings) is done once the batches before it are
    ``done``, in the batches' order whatever the threads' timing: the strings'
    iids, and so the file, are a function of the trace."""

    def __init__(self) -> None:
        self.next = 0
        self.changed = threading.Condition()

    @contextmanager
    def turn(self, k: int) -> Iterator[None]:
        """Batch k's turn: once the batches before it are done, to its end."""
        with self.changed:
            self.changed.wait_for(lambda: self.next >= k)
        try:
            yield
        finally:
            self.done(k)

    def done(self, k: int) -> None:
        """Batch k's turn over (also when it failed: so that no later one waits)."""
        with self.changed:
            self.next = max(self.next, k + 1)
            self.changed.notify_all()


class _TrackUuids:
    """A uuid per track: processes, their threads and devices, counters; from
    ``base`` + 1 on."""

    def __init__(self, base: int = 0) -> None:
        self.base = base
        self.uuids: dict[tuple, int] = {}

    def __call__(self, *key: Any) -> int:
        return self.uuids.setdefault(key, self.base + len(self.uuids) + 1)


def part_ids(index: int) -> tuple[_Strings, _TrackUuids]:
    """The interned strings and track uuids of the ``index``-th (from 0) of the
    parts of one file made apart (a dataset's partitions, ompt_py.io.dataset),
    which must not collide: its own packet sequence (index + 1: the first part's
    is a trace's, SEQUENCE) and its own range of uuids (from index * 2^32 + 1).
    The last (``index``: the number of parts) is the file's end (``ending``)."""
    return _Strings(index + 1), _TrackUuids(index << 32)


def _descriptors(made: Tracks, uuids: _TrackUuids) -> tuple[bytes, dict[tuple[int, int], int]]:
    """The TrackDescriptor packets of the processes, threads and devices of the
    JSON's metadata, and the track index (0, 1, ...) of each (pid, tid)."""
    packets, index = [], {}
    names = {(m["pid"], m.get("tid")): m["args"]["name"] for m in made.metadata
             if m["name"] in ("process_name", "thread_name")}
    ranks = {(m["pid"], m.get("tid")): m["args"]["sort_index"] for m in made.metadata
             if m["name"] in ("process_sort_index", "thread_sort_index")}
    for (pid, tid), name in names.items():
        if tid is None:
            body = _int(1, uuids("process", pid)) + _len(3, _int(1, pid) + _len(6, name))
            body += _int(11, 3)  # child_ordering: EXPLICIT (by sibling_order_rank)
        elif tid < 1 << 30:  # a thread (perfetto.DEVICE_TID: the devices' tracks)
            body = (_int(1, uuids("thread", pid, tid))
                    + _len(4, _int(1, pid) + _int(2, tid) + _len(5, name)))
        else:
            body = _int(1, uuids("device", pid, tid)) + _int(5, uuids("process", pid))
            body += _len(2, name)
        if (pid, tid) in ranks:
            body += _int(12, ranks[pid, tid])  # sibling_order_rank
        packets.append(_packet(_len(_TRACK_DESCRIPTOR, body)))
        if tid is not None:
            index[pid, tid] = len(index)
    return b"".join(packets), index


def _counter_descriptor(uuids: _TrackUuids, pid: int, series: str) -> bytes:
    body = (_int(1, uuids("counter", pid, series)) + _int(5, uuids("process", pid))
            + _len(2, f"threads waiting {series}") + _len(8, b""))
    return _packet(_len(_TRACK_DESCRIPTOR, body))


def _metadata_packet(other: dict, time: int, uuids: _TrackUuids, strings: _Strings) -> bytes:
    """The "ompt-py" track and its instant, the otherData as debug annotations
    (JSON text for what is not a number or a text)."""
    track = _packet(_len(_TRACK_DESCRIPTOR, _int(1, uuids("ompt-py")) + _len(2, "ompt-py")))
    annotations = b""
    for key, value in other.items():
        if value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            field = _int(_INT, value)
        else:
            field = _len(_STRING, value if isinstance(value, str) else json.dumps(value))
        annotations += _len(_ANNOTATIONS, _int(_ANNOTATION_NAME_IID, strings.keys(key)) + field)
    event = (_int(_TYPE, _INSTANT) + _int(_TRACK_UUID, uuids("ompt-py"))
             + _int(_NAME_IID, strings.names("ompt-py export")) + annotations)
    return track + strings.packet() + _packet(
        _int(_TIMESTAMP, time), _int(_SEQUENCE_ID, strings.sequence),
        _int(_SEQUENCE_FLAGS, _NEEDS_STATE), _len(_TRACK_EVENT, event))


#: Thread numbers below this are looked up by track_index in a table: a
#: process's threads are numbered from 0 (OMPT's, the tool's), its devices'
#: tracks from 2^30.
_TABLE_TIDS = 1 << 16


def track_index(index: dict[tuple[int, int], int], pid: np.ndarray, tid: np.ndarray
                 ) -> np.ndarray:
    """The track of each (pid, tid), by ``index`` (-1: none), as int32: of one
    process whose tracks are threads numbered below _TABLE_TIDS, read in a table by
    thread number (a gather); else looked up BATCH_ROWS at a time (a few
    temporaries of 8 bytes a slice, of a batch)."""
    pid, tid = np.asarray(pid), np.asarray(tid)
    out = np.full(len(pid), -1, np.int32)
    if not len(pid) or not index:
        return out
    one = int(pid[0])
    mine = {t: v for (p, t), v in index.items() if p == one}
    if mine and min(mine) >= 0 and max(mine) < _TABLE_TIDS and (pid == one).all():
        table = np.full(max(mine) + 2, -1, np.int32)  # the last: the threads above
        table[list(mine)] = list(mine.values())
        return table[np.minimum(tid, len(table) - 1)]
    known = np.array([p << 32 | t for p, t in index], np.int64)
    value = np.array(list(index.values()), np.int32)
    by = np.argsort(known)
    known, value = known[by], value[by]
    for part in batches(len(out)):
        key = pid[part].astype(np.int64) << 32 | tid[part].astype(np.int64)
        at = np.minimum(np.searchsorted(known, key), len(known) - 1)
        out[part] = np.where(known[at] == key, value[at], -1)
    return out


class SliceOrder:
    """Every slice of the sources, source by source (a slice's position), each
    source's in the order of its begins (stable; ``perm``: of a source whose
    slices do not come so, the order taken, else None): their begins, ends (cut
    by proto_nest) and tracks (by ``index``: (pid, tid) -> track); and the
    sequence of their begins and ends (``nest``: the sources' slices merged in
    the order of their begins, at one time in file order, onto each track's
    stack).  The OTF2 export orders its events by it too.  26 bytes a slice:
    begin, end, a track of 2 bytes (fewer than 2^15 tracks) and 2 items of
    sequence of 4 (fewer than 2^31 slices).

    It empties ``sources`` as it takes their spans, keeping of each its category
    and Source.label (``labels``): so each source's arrays (its ends, the
    spans it makes) are freed once they are in the order, not held to the end.
    Before and after, the memory freed in the heap (by the making of the sources,
    then of the order) is given back to the system (_core.trim_heap): glibc
    keeps it otherwise (40 to 90 MiB in bench/export.py's exports)."""

    def __init__(self, sources: list, index: dict[tuple[int, int], int]) -> None:
        self.starts = np.cumsum([0] + [s.count for s in sources])
        n = int(self.starts[-1])
        self.begin, self.end = np.empty(n, np.int64), np.empty(n, np.int64)
        self.track = np.empty(n, np.int16 if len(index) < 1 << 15 else np.int32)
        self.labels: list[tuple[str, Callable[[Part], Label]]] = []
        _core.trim_heap()
        # Two sources at a time, each in a thread (the gathers and copies release the
        # GIL), into their own parts of the order; each source's arrays go once its
        # part is made.
        with ThreadPoolExecutor(2) as pool:
            placed = []
            for start, stop in zip(self.starts[:-1], self.starts[1:]):
                source = sources.pop(0)
                self.labels.append((source.cat, source.label))
                placed.append(pool.submit(self._place, start, stop, source, index))
                del source
            self.perm: list[np.ndarray | None] = [p.result() for p in placed]
        _core.trim_heap()

    def _place(self, start: int, stop: int, source: Source,
               index: dict[tuple[int, int], int]) -> np.ndarray | None:
        """A source's spans put at [start, stop) of the order, in the order of their
        begins; returns that order (None: theirs)."""
        spans = source.spans()
        begin = np.asarray(spans.begin, np.int64)
        perm = (np.argsort(begin, kind="stable")
                if len(begin) > 1 and (begin[1:] < begin[:-1]).any() else None)
        track = track_index(index, spans.pid, spans.thread)
        if (track < 0).any():
            raise ValueError(f"{source.cat} slices on a track the metadata does not name")
        self.begin[start:stop] = self.arranged(perm, begin)
        self.end[start:stop] = self.arranged(perm, spans.end)
        self.track[start:stop] = self.arranged(perm, track)
        return perm

    @staticmethod
    def arranged(perm: np.ndarray | None, values: np.ndarray) -> np.ndarray:
        """A source's ``values`` (one per slice, in its order) in the order taken."""
        return values if perm is None else np.asarray(values)[perm]

    def nest(self, ntracks: int, query_track: np.ndarray, query_time: np.ndarray
             ) -> tuple[int, np.ndarray]:
        """proto_nest over the slices; per query, the slice (a position) holding it,
        or -1; returns how many ends were cut."""
        n = len(self.begin)
        self.seq = np.empty(2 * n, np.uint32 if 2 * n < 1 << 32 else np.int64)
        held = np.empty(len(query_time), np.int64)
        cut = _core.proto_nest(self.track, self.begin, self.end, self.starts.astype(np.int64),
                               ntracks, np.ascontiguousarray(query_track, np.int32),
                               np.ascontiguousarray(query_time, np.int64), held, self.seq)
        return cut, held

    def payloads(self, seq: np.ndarray, strings: _Strings, turn: AbstractContextManager
                 ) -> tuple[bytes, bytes, np.ndarray, np.ndarray]:
        """The payloads of the slices whose begins ``seq`` (a part of the sequence)
        names, made source by source (by ``labels``): their labels, then in
        ``turn`` their columns, whose strings are interned then; returns the
        InternedData packet of the strings new to them (b"": none), the payloads'
        bytes, their offsets, and the slot of each begin's (_core.proto_slots).
        nest takes each source's slices in its order, so the slices of a source in
        a part of its sequence are a range: its labels are made of that range (no
        gather of positions) and its payloads lie one after the other."""
        count, first = np.empty(len(self.labels), np.int64), np.empty(len(self.labels), np.int64)
        slots = np.empty(len(seq), np.int64)
        begins = _core.proto_slots(seq, self.starts, count, first, slots)
        labelled = []
        for i in np.flatnonzero(count).tolist():
            low = int(first[i] - self.starts[i])
            part = slice(low, low + int(count[i]))
            cat, label = self.labels[i]
            labelled.append((cat, int(count[i]),
                             label(part if self.perm[i] is None else self.perm[i][part])))
        with turn:
            columns = [_columns(cat, n, label, strings) for cat, n, label in labelled]
            interned = strings.packet()
        offsets = np.empty(begins + 1, np.int64)
        payload = _core.proto_payloads(columns, offsets)
        return interned, payload, offsets, slots[:begins]


def runs(values: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(value, first, stop) of each run of equal values."""
    edges = np.flatnonzero(np.diff(values)) + 1
    for first, stop in zip(np.r_[0, edges].tolist(), np.r_[edges, len(values)].tolist()):
        if stop > first:
            yield int(values[first]), first, stop


def _flows(sources: list, index: dict[tuple[int, int], int]) -> tuple[np.ndarray, ...]:
    """Every flow's id, and the track and time of its start and of its finish."""
    batches = [s.make(slice(None)) for s in sources]
    ids = np.concatenate([b.ids for b in batches] or [np.zeros(0, np.int64)])
    ends = []
    for side in (0, 1):
        points = [b.start if side == 0 else b.finish for b in batches]
        pid = np.concatenate([np.asarray(p[0], np.int64) for p in points] or [[]])
        tid = np.concatenate([np.asarray(p[1], np.int64) for p in points] or [[]])
        time = np.concatenate([np.asarray(p[2], np.int64) for p in points] or [[]])
        ends.append((track_index(index, pid, tid), time))
    return ids.astype(np.int64), *ends[0], *ends[1]


def _write_counters(out: BinaryIO, series: list[tuple[np.ndarray, ...]], flt: ExportFilter,
                    uuids: _TrackUuids, sequence: int) -> None:
    """The counter's tracks (per series and process of its waits, ``series``:
    perfetto._waits') and a packet per change of a series in ``flt``'s window (the
    first value of each process's series, then each new one), written as they are
    made (_core.proto_waiting, which finds the processes)."""
    def tracks_of(pids: bytes) -> np.ndarray:
        """The tracks of the processes ``pids`` (int64, sorted), their descriptors
        written: uuids by process, then series."""
        of = np.frombuffer(pids, np.int64).tolist()
        out.write(b"".join(_counter_descriptor(uuids, p, name)
                           for name in WAIT_SERIES for p in of))
        return np.array([uuids("counter", p, name) for p in of for name in WAIT_SERIES],
                        np.uint64)
    _core.proto_waiting(series, tracks_of, sequence, out.write, flt.start_ns, flt.end_ns)


def _write_slices(out: BinaryIO, slices: list[Source], flow_sources: list[Source],
                  index: dict[tuple[int, int], int], uuids: _TrackUuids, strings: _Strings,
                  progress: Progress, counter: Callable[[], None]
                  ) -> tuple[int, int, int | None]:
    """The begins and ends of ``slices`` (a list it empties once it has their
    spans, keeping their labels), with the flows of ``flow_sources`` bound to the
    slices holding their ends, in the order of their begins (SliceOrder), made a
    batch at a time in parallel and written in order; before them the counter
    (``counter()`` writes it), on a thread of its own while the begins and ends
    are put in order on each track (proto_nest: one core).  Returns how many
    slices were cut, how many flows were bound to no slice, and the first begin
    (None: no slice)."""
    flow_ids, from_track, from_time, to_track, to_time = _flows(flow_sources, index)
    order = SliceOrder(slices, index)
    # The flows' ends: the slices holding them (proto_nest's queries, in time order).
    on = (from_track >= 0) & (to_track >= 0)
    ids, n_on = flow_ids[on], int(on.sum())
    query_time = np.concatenate([from_time[on], to_time[on]])
    asked = np.argsort(query_time, kind="stable")
    with ThreadPoolExecutor(1, thread_name_prefix="ompt-py: counter") as aside:
        counted = aside.submit(counter)
        cut, held = order.nest(len(index), np.concatenate([from_track[on], to_track[on]])[asked],
                               query_time[asked])
    counted.result()
    holder = np.empty(len(held), np.int64)
    holder[asked] = held
    flows: list[np.ndarray] = []
    for side in (holder[:n_on], holder[n_on:]):  # starts, then finishes
        bound = np.flatnonzero(side >= 0)
        by = bound[np.argsort(side[bound], kind="stable")]
        flows += [np.ascontiguousarray(side[by]), np.ascontiguousarray(ids[by])]
    unbound = len(flow_ids) - n_on + int((holder < 0).sum())
    track_uuids = np.array([uuids("thread" if t < 1 << 30 else "device", p, t)
                            for p, t in index], np.uint64)

    turns = _Turns()

    def batch(k: int, part: slice) -> tuple[int, bytes, bytes]:
        try:
            seq = order.seq[part]
            interned, payload, offsets, slots = order.payloads(seq, strings, turns.turn(k))
        finally:
            turns.done(k)  # also when it failed before its turn: no later one waits
        return len(seq), interned, _core.proto_packets(
            seq, order.begin, order.end, order.track, track_uuids, payload, offsets, slots,
            *flows, strings.sequence)
    progress.grow(len(order.seq))
    for count, interned, packets in in_order(
            lambda k=k, p=part: batch(k, p)
            for k, part in enumerate(batches(len(order.seq), PACKETS_AT_ONCE))):
        # the strings new to the batch, before it (apart: no copy of its packets)
        out.write(interned)
        out.write(packets)
        progress.update(count)
    return cut, unbound, int(order.begin.min()) if len(order.begin) else None


class Written(NamedTuple):
    """What the file's end (``ending``) needs of a trace's packets (write_events):
    its otherData, how many slices were cut and flows bound to no slice, its
    first slice's begin (None: no slice)."""

    other: dict
    cut: int
    unbound: int
    first: int | None


def write(trace: Trace, path: str | os.PathLike, flt: ExportFilter | None = None) -> None:
    """Writes ``trace`` as a Perfetto protobuf trace, of what ``flt`` keeps
    (default: everything)."""
    strings, uuids = _Strings(), _TrackUuids()
    with output(path) as out:
        written = write_events(trace, out, flt or ExportFilter(), 1, strings, uuids)
        out.write(ending([written], strings, uuids))


def write_events(trace: Trace, out: BinaryIO, flt: ExportFilter, first_flow: int,
                 strings: _Strings, uuids: _TrackUuids) -> Written:
    """Writes the packets of ``trace`` (what ``flt`` keeps) to ``out``, on the
    packet sequence of ``strings`` with the track uuids of ``uuids``: its tracks,
    the counter (made once the slices are in order: _write_slices), the slices
    and flows (ids from ``first_flow``, as the JSON's: perfetto.write_events).
    The file's end (``ending``) comes after."""
    made = tracks(trace, flt, first_flow)
    descriptors, index = _descriptors(made, uuids)
    sources = list(made.sources)
    if made.frames is not None:
        sources.insert(0, made.frames())  # as in the JSON: the outermost slices first
    slices = [s for s in sources if s.slices]
    flow_sources = [s for s in sources if not s.slices]
    del sources
    with Progress(0, "perfetto-proto") as progress:
        out.write(strings.packet() + descriptors)
        cut, unbound, first = _write_slices(
            out, slices, flow_sources, index, uuids, strings, progress,
            lambda: _write_counters(out, made.waits(), flt, uuids, strings.sequence))
    return Written(made.other(), cut, unbound, first)


def ending(written: list[Written], strings: _Strings, uuids: _TrackUuids) -> bytes:
    """The end of a file of the packets of one or more traces (``written``: what
    write_events returned for each): the "ompt-py" track and its instant at the
    first slice's begin, with the otherData merged (perfetto.other_data), the
    slices cut and flows unbound summed."""
    other = other_data(w.other for w in written)
    cut, unbound = sum(w.cut for w in written), sum(w.unbound for w in written)
    if cut or unbound:
        other = {**other, "slices_cut": cut, "flows_unbound": unbound}
    first = min((w.first for w in written if w.first is not None), default=0)
    return _metadata_packet(other, first, uuids, strings)
