"""The Perfetto / Chrome trace export (``Trace.to_perfetto``, ``ompt-py export
--format perfetto``): the JSON Trace Event Format that ui.perfetto.dev and
chrome://tracing open.

One process per pid (named after its command, and its job rank when it had
one), one track per thread ("thread 0 (initial)"), complete slices ("ph":
"X"; ts and dur in microseconds with three decimals, i.e. exact nanoseconds)
that nest on each track: user-code regions (``ompt_py.region``, named by
their names), the initial task, parallel regions (on the encountering
thread), implicit tasks, worksharing constructs (named by kind: "loop",
"single_executor", ...), barriers/taskwait/taskgroup (by kind) and the waits
inside them ("barrier_implicit wait", ...), explicit tasks (from their first
start to their last piece on each thread that ran them: a task's children and
waits nest inside it), lock/critical/ordered waits ("critical wait") and
holds ("critical"), MPI calls ("MPI barrier", "MPI allreduce"...: cat "mpi",
with bytes, peer and communicator size), and the tool's own stalls ("ompt-py:
stall", cat "ompt-py": states.tool_stalls, with reason, bytes and region, as
Score-P marks its buffer flushes).  Args carry ids, kinds, counts and,
where the table has it, the source location.  A flow arrow ("ph": "s" then "f"
with "bp": "e", one id per task) goes from each task's creation to its first
execution, and a counter ("ph": "C") per process gives the number of threads
waiting over time, in barriers/taskwait/taskgroup ("sync") and for locks
("mutex"), each thread once however its waits nest.

The sources of the slices, flows and counter (``tracks``) serve the
protobuf and OTF2 exports too (perfetto_proto.py, otf2.py): each makes
batches (``Slices``, ``Flows``, ``Counter``) of columns that the JSON renders
as text here; every source is filtered by the export's ``ExportFilter``
(``filtered``: slices clipped to its window).  The JSON's otherData come
last in the file: they say what the filter clipped.

With offload events, the threads' tracks also hold the target constructs (cat
"target", named by kind), their data operations ("target_data_op") and kernel
submissions ("target_submit"), and each process gets a track per device
(tid DEVICE_TID and on, "device N (type)", after the threads; a further one,
"device N (type) [2]", where its operations overlap) with its kernels and
transfers (cat "device": offload.device_track, on the host clock; from the
device records, or from the host-side operations in a process without them),
and a flow (cat "offload") from each host operation to its slice there.
Device operations that could not be placed (no clock fit) are counted in
otherData's "device_operations_not_drawn".

With Python stacks (``Trace.python_stacks``), the Python frames that started a
parallel region, a region marker or an explicit task created outside any
region are slices above it on the same track (cat "python", named "file:line
in function", outermost first; then the native callers recorded with the
stack, marked ``native``), merged across the constructs one after the other
that share them, as a flame chart; frames a construct took from the region
around it (a region nested by a worker) are marked ``inherited``
(_python_frames).

The slices are made from the records, not from the trace's tables: per kind
of slice, the rows of its events are taken in time order and paired in C as
the tables pair them (ompt_py.pairing.pairing), and what a slice needs
beyond its begin's record (its end, a region's parent and level, the time
waited in a barrier ...) is kept as a few integer arrays; the rest is read
from the records a batch at a time.  So the memory the export adds to the
trace is a few batches and those arrays (bench/export.py: about 0.45 times
the trace's records at 10^7 events).  The Python frames, first in the file
but made from the slices they hold, add a temporary file beside the output
(write), not a second pass over the records.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple, Union

import numpy as np
import pandas as pd

from .. import _core
from ..analysis import metrics, offload, pairing, pystacks, states, tables
from ..analysis.states import key_pid_thread, thread_key, to_int
from ..records import (
    KIND_CATEGORIES,
    KIND_RAW_CATEGORIES,
    PARALLEL_INVOKER_PROGRAM,
    PARALLEL_INVOKER_RUNTIME,
    PARALLEL_LEAGUE,
    TASK_INITIAL,
    kind_keys,
    python_stack_ids,
    time_order,
)
from .filters import ExportFilter
from .streaming import (
    SEP,
    ArrayWriter,
    Column,
    Progress,
    Writable,
    batches,
    hexadecimal,
    ident,
    in_order,
    json_names,
    micros,
    named,
    number,
    output,
    render_rows,
    texts,
)

if TYPE_CHECKING:
    from ..trace import Trace


class _Records:
    """The records a Perfetto file is made of (``trace.events``), the count of each
    event, and the pairings of their constructs (``paired``, made in one pass)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.ev = np.ascontiguousarray(trace.events)
        # One process: no pid column (nor key: it would be the same for all).
        self.pids = None if trace.single_pid is not None else trace.pids
        self._selected: dict[tuple[str, ...], np.ndarray] = {}

    @cached_property
    def counts(self) -> np.ndarray:
        """The records of each event number (made once asked: while they are paired)."""
        return tables.counts_by_number(self.trace)

    def has(self, codes: Iterable[int]) -> bool:
        """Whether any record is of these events."""
        return bool(self.counts[list(codes)].any())

    @cached_property
    def _grouped(self) -> dict[tuple[str, ...], np.ndarray]:
        """The rows of the events the file asks for by group (_GROUPED), found
        together (tables.rows_of_groups: those of rare events kept, the others in
        one pass)."""
        return dict(zip(_GROUPED, tables.rows_of_groups(self.trace, _GROUPED)))

    def pairs(self, names: list[str], lookups: dict[str, pairing.Lookup | pairing.Enclosing]
              ) -> tuple[dict[str, _Pairs], dict[str, np.ndarray]]:
        """The pairings ``names`` (pairing.PAIRINGS), as the tables pair them, and the
        ``lookups`` among them, in one pass over the records."""
        found = pairing.pair_events(self.ev, self.pids, None, names, True, lookups,
                                    end_times=True)
        return {name: _Pairs(f.begins, f.ends) for name, f in found.pairs.items()}, found.found

    def rows(self, *events: str) -> np.ndarray:
        """The rows of these events, in the records' order."""
        if events in _GROUPED:
            return self._grouped[events]
        return tables.rows_of(self.trace, *events)

    def select(self, *events: str) -> np.ndarray:
        """The rows of these events in time order (stable: at equal times, in the order
        of the records); made once."""
        if events not in self._selected:
            rows = self.rows(*events)
            self._selected[events] = rows[time_order(self.time(rows))]
        return self._selected[events]

    def time(self, rows: np.ndarray) -> np.ndarray:
        return self.ev["time_ns"][rows]

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The records at ``rows``, copied in C (_core.take_records: twice as fast as
        numpy takes them as rows of bytes, twenty times as it takes records of a
        structured type)."""
        out = np.empty(len(rows), self.ev.dtype)
        _core.take_records(self.ev, np.ascontiguousarray(rows, np.int64), out)
        return out

    def pid(self, rows: np.ndarray | slice) -> np.ndarray:
        return self.trace.pids_at(rows)

    def field(self, name: str, rows: np.ndarray, missing_if_zero: bool = False) -> tuple:
        """A record field at ``rows`` as a key column (pairing.column, read in place)."""
        return pairing.column(self.ev[name], missing_if_zero, rows=rows)

    def keys(self, rows: np.ndarray, *fields: str, missing_if_zero: bool = False
             ) -> list[tuple]:
        """Key columns of the records at ``rows``: their pid, then ``fields``."""
        pid = [] if self.pids is None else [pairing.column(self.pids, rows=rows)]
        return pid + [self.field(name, rows, missing_if_zero) for name in fields]

    def find(self, table: np.ndarray, query: np.ndarray, field: str,
             query_field: str | None = None) -> np.ndarray:
        """For each record of ``query`` (rows), the first of ``table`` with its pid and
        ``field`` (``query_field`` in the query's records), an id (0: none, which
        matches nothing); -1 where there is none (as pairing.find on to_pandas()
        columns).  Found in time order (find's first mode): the rows of both are
        mostly in time order, and the table's rows a query finds were added lately."""
        found = np.empty(len(query), np.intp)
        _core.find(self.keys(table, field, missing_if_zero=True),
                   self.keys(query, query_field or field, missing_if_zero=True), found,
                   self.field("time_ns", table), self.field("time_ns", query), True)
        return found


@dataclass
class _Pairs:
    """Begin and end records paired as analysis pairs them, in the order of the
    begins: the begin's record (``rows``: positions in trace.events), the end's time;
    ``kept``: the begins' thread and time, where _slices(keep=True) keeps them for
    the next to read them (the counter's waits: _waits), else None."""

    rows: np.ndarray
    end: np.ndarray
    kept: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, at: np.ndarray | slice) -> _Pairs:
        """The pairs ``at`` (positions: copies; a slice: views)."""
        return _Pairs(self.rows[at], self.end[at])


def _clamp(pairs: _Pairs, region: np.ndarray, regions: _Pairs) -> None:
    """Moves ends reported after the end of their parallel ``region`` (a pair of
    ``regions``, -1 for none) to it."""
    if len(regions):
        pairs.end = pairing.clamped_ends(pairs.end, region, regions.end)


def _optional(values: Any) -> Column:
    """Integers that may be missing (a column of a pandas table) as numbers or null."""
    series = pd.Series(values)
    return number(series.fillna(0).to_numpy(np.int64), series.isna().to_numpy())


#: The groups of events whose rows the file asks for (_Records.rows).
_GROUPED = (("task_schedule",), ("task_create",))
#: The pairings whose begins' code addresses the slices name (_Locations).
_LOCATED = ("parallel", "work")


class _Locations:
    """The source location of the code addresses of some records (Trace.symbolize),
    as JSON strings.  Those of _LOCATED are made on a thread while the regions are
    put in a tree (on one core): the symbolizer is a process of its own."""

    def __init__(self, rec: _Records, rows: np.ndarray) -> None:
        codeptrs = np.unique(rec.ev["codeptr"][rows])
        found = tables.symbolize(rec.trace, codeptrs[codeptrs != 0])
        self.keys = [pairing.column(found["pid"].to_numpy(np.int32)),
                     pairing.column(found["codeptr"].to_numpy(np.uint64))]
        self.table = texts("null" if pd.isna(loc) else json.dumps(str(loc))
                           for loc in found["location"])

    def column(self, pid: np.ndarray, codeptr: np.ndarray) -> Column:
        at = np.empty(len(codeptr), np.intp)
        _core.find(self.keys, [pairing.column(pid), pairing.column(codeptr)], at)
        return named(at, self.table)


class _Spans(NamedTuple):
    """Where the slices of a source lie: their begin's record (rows of
    trace.events; None for a table's rows), process, thread, begin and end."""

    rows: np.ndarray | None
    pid: np.ndarray
    thread: np.ndarray
    begin: np.ndarray
    end: np.ndarray


_Args = list[tuple[str, Column]]
#: The rows of a source a batch is made of: a range, or positions (a filter's).
Part = Union[slice, np.ndarray]


class Slices(NamedTuple):
    """A batch of complete slices, as both Perfetto writers take them: their
    category, process, thread (a device's track: its tid), begin and end (ns),
    name (one for all, or a column of JSON strings) and args (columns of JSON
    values: numbers, addresses, names, null where missing)."""

    cat: str
    pid: np.ndarray
    tid: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    name: str | Column
    args: _Args


class Flows(NamedTuple):
    """A batch of flows (arrows), each from a point (``start``: pid, tid, time) to
    the slice that begins at another (``finish``); ``ids`` unique in the file."""

    cat: str
    ids: np.ndarray
    start: tuple[np.ndarray, np.ndarray, np.ndarray]
    finish: tuple[np.ndarray, np.ndarray, np.ndarray]


class Counter(NamedTuple):
    """A batch of a counter's values per process and time: ``series`` (name,
    values), each holding until the next time of its process."""

    name: str
    pid: np.ndarray
    time: np.ndarray
    series: list[tuple[str, np.ndarray]]


Batch = Union[Slices, Flows, Counter]


#: The name and args of a batch of slices (Slices.name, Slices.args).
Label = tuple[Union[str, Column], _Args]


class Source(NamedTuple):
    """``count`` rows of a table, whose events ``make(part)`` makes a batch at a
    time; for slices, their ``cat``, ``spans()`` (``device``: on the devices'
    tracks) and ``label(part)``: the name and args of a batch, what make adds to
    the spans (made without the ends: a writer that took the spans and keeps
    the labels does not keep the ends twice); for flows their ``points()``."""

    count: int
    make: Callable[[Part], Batch]
    cat: str = ""
    spans: Callable[[], _Spans] | None = None
    label: Callable[[Part], Label] | None = None
    points: Callable[[], tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]] | None = None
    device: bool = False
    begins: np.ndarray | None = None  # filtered: the slices' begins before clipping

    @property
    def slices(self) -> bool:
        """Whether its batches are Slices (else Flows, or a Counter's), known without
        making one."""
        return self.spans is not None


def _complete(cat: str, pid: Any, tid: Any, begin: Any, end: Any, name: str | Column,
              args: _Args) -> Slices:
    """Complete slices; ``name``: one for all, or a column."""
    return Slices(cat, np.asarray(pid), np.asarray(tid), np.asarray(begin, np.int64),
                  np.asarray(end, np.int64), name, args)


def _json_text(batch: Batch) -> bytes:
    """A batch in the JSON Trace Event Format: complete slices ("ph": "X"; ts and
    dur in microseconds, to the nanosecond), flows ("ph": "s", then "f" with
    "bp": "e"), counters ("ph": "C")."""
    if isinstance(batch, Flows):
        ids, name = number(batch.ids), json.dumps(batch.cat)
        (spid, stid, sts), (fpid, ftid, fts) = batch.start, batch.finish
        start = render_rows([f'{SEP}{{"ph":"s","cat":{name},"name":{name},"id":', ids,
                             ',"pid":', number(spid), ',"tid":', number(stid),
                             ',"ts":', micros(sts), "}"])
        finish = render_rows([f'{SEP}{{"ph":"f","bp":"e","cat":{name},"name":{name},"id":',
                              ids, ',"pid":', number(fpid), ',"tid":', number(ftid),
                              ',"ts":', micros(fts), "}"])
        return start + finish
    if isinstance(batch, Counter):
        template: list[str | Column] = [
            f'{SEP}{{"ph":"C","name":{json.dumps(batch.name)},"pid":', number(batch.pid),
            ',"ts":', micros(batch.time), ',"args":{']
        for i, (key, values) in enumerate(batch.series):
            template += [f'{"," if i else ""}"{key}":', number(values)]
        return render_rows([*template, "}}"])
    template = [
        f'{SEP}{{"ph":"X","cat":"{batch.cat}","name":',
        json.dumps(batch.name) if isinstance(batch.name, str) else batch.name,
        ',"pid":', number(batch.pid), ',"tid":', number(batch.tid), ',"ts":',
        micros(batch.begin), ',"dur":', micros(batch.end - batch.begin), ',"args":{']
    for i, (key, column) in enumerate(batch.args):
        template += [f'{"," if i else ""}"{key}":', column]
    template.append("}}")
    return render_rows(template)


def _slices(rec: _Records, cat: str, pairs: _Pairs,
            make: Callable[[np.ndarray, Part], Label], keep: bool = False) -> Source:
    """Slices of paired records, from the process, thread and time of the begin's
    record: ``make(records of the begins, part)`` gives the name and args of a batch;
    ``keep``: the spans' threads and times kept in ``pairs`` (_Pairs.kept)."""
    rows, end = pairs.rows, pairs.end

    def batch(part: Part) -> Slices:
        at = rows[part]
        records = rec.take(at)
        return _complete(cat, rec.pid(at), records["thread"], records["time_ns"], end[part],
                         *make(records, part))

    def spans() -> _Spans:
        thread, time = rec.ev["thread"][rows], rec.time(rows)
        if keep:
            pairs.kept = thread, time
        return _Spans(rows, rec.pid(rows), thread, time, end)
    return Source(len(rows), batch, cat, spans, lambda part: make(rec.take(rows[part]), part))


def _user_slices(trace: Trace) -> Source:
    """ompt_py.region markers, paired by Trace.user_regions."""
    user = tables.user_regions(trace)

    def label(part: Part) -> Label:
        rows = user.iloc[part]
        codes, names = pd.factorize(rows["name"].fillna("(unnamed)"))
        return named(codes, json_names(names)), [
            ("id", number(rows["id"])), ("level", number(rows["level"])),
            ("codeptr", hexadecimal(rows["codeptr"]))]

    def batch(part: Part) -> Slices:
        rows = user.iloc[part]
        return _complete("user_region", rows["pid"], rows["thread"], rows["begin_ns"],
                         rows["end_ns"], *label(part))

    def spans() -> _Spans:
        return _Spans(None, *(user[c].to_numpy(np.int64)
                              for c in ("pid", "thread", "begin_ns", "end_ns")))
    return Source(len(user), batch, "user_region", spans, label)


def _codeptr(records: np.ndarray) -> Column:
    return hexadecimal(records["codeptr"], records["codeptr"] == 0)


#: The names of the kinds (to_pandas()'s ``kind``, alone and with " wait") and of
#: the raw kinds, as JSON strings: made once, every batch names its rows by them.
_KIND_NAMES = {suffix: texts(json_names(KIND_CATEGORIES.categories, suffix))
               for suffix in ("", " wait")}
_KIND_RAW_NAMES = texts(json_names(KIND_RAW_CATEGORIES.categories))
_BOOLEANS = texts(["false", "true"])
_REGION_NAMES = texts(json_names(["parallel region", "teams"]))
_INVOKERS = texts(json_names(["program", "runtime", "unknown"]))


def _kind(records: np.ndarray, suffix: str = "") -> Column:
    """to_pandas()'s ``kind`` of each record (and ``suffix``: "" or " wait")."""
    names = KIND_CATEGORIES.codes(kind_keys(records["event"], records["kind"]))
    return named(names, _KIND_NAMES[suffix])


def _kind_raw(records: np.ndarray) -> Column:
    names = KIND_RAW_CATEGORIES.codes(kind_keys(records["event"], records["kind"]))
    return named(names, _KIND_RAW_NAMES)


#: The pairings (analysis.pairing.PAIRINGS) the slices are made of.
_PAIRINGS = ["parallel", "implicit_task", "work", "sync_region", "sync_region_wait",
             "mutex_wait", "mutex_hold"]
#: What is looked up as they are paired: the region of each implicit task and sync
#: region and wait (its parallel_id), the implicit task that encountered each region
#: (the region's task_id), the first region of each region's parallel_id, and the
#: sync region each wait is in (pairing.WAITS_REGION).
_LOOKUPS = {
    "implicit region": pairing.Lookup("implicit_task", "parallel", "parallel_id", "parallel_id"),
    "sync region": pairing.Lookup("sync_region", "parallel", "parallel_id", "parallel_id"),
    "wait region": pairing.Lookup("sync_region_wait", "parallel", "parallel_id", "parallel_id"),
    "encountering task": pairing.Lookup("parallel", "implicit_task", "task_id", "task_id"),
    "same region": pairing.Lookup("parallel", "parallel", "parallel_id", "parallel_id"),
    "waits' region": pairing.WAITS_REGION,
}


def _region_tree(rec: _Records, regions: _Pairs, implicit: _Pairs, found: dict[str, np.ndarray]
                 ) -> tuple[_Pairs, Any, np.ndarray, np.ndarray]:
    """The ``implicit`` tasks (ends clamped to their region's) and, per region of
    ``regions``, its parent_id, level and team size (pairing.region_links);
    ``found``: _LOOKUPS' (those it uses taken out: freed once used)."""
    ev = rec.ev
    region_of = found.pop("implicit region")
    _clamp(implicit, region_of, regions)
    parent, level, team = pairing.region_links(
        found.pop("encountering task"), region_of, found.pop("same region"),
        ev["parallel_id"][regions.rows],
        pd.arrays.IntegerArray(ev["u32a"][implicit.rows], np.zeros(len(implicit), bool)))
    return implicit, parent, level, team


def _parallel(rec: _Records, regions: _Pairs,
              tree: tuple[_Pairs, Any, np.ndarray, np.ndarray],
              locations: _Locations) -> Iterator[Source]:
    """The slices of the initial tasks, the parallel ``regions`` (their code
    addresses' ``locations``) and the implicit tasks (``tree``: _region_tree of the
    regions)."""
    ev = rec.ev
    implicit, parent, level, team = tree
    is_initial = (ev["u32b"][implicit.rows] & TASK_INITIAL) != 0  # u32b: flags
    initial = np.flatnonzero(is_initial)
    # The initial tasks begin first, as a rule: the others are a view then, not a copy.
    others = (slice(len(initial), None) if np.array_equal(initial, np.arange(len(initial)))
              else np.flatnonzero(~is_initial))
    yield _slices(rec, "implicit_task", implicit.take(initial),
                  lambda r, part: ("initial task", [("task_id", ident(r["task_id"]))]))
    # The regions' figures that are not in their records, as columns once (not per batch).
    parent_id = number(parent.to_numpy(np.uint64, na_value=0), parent.isna())
    team_size = _optional(team)

    def region(r: np.ndarray, part: slice) -> tuple[Column, _Args]:
        flags = r["u32b"]
        invoker = np.where(flags & PARALLEL_INVOKER_PROGRAM, 0,
                           np.where(flags & PARALLEL_INVOKER_RUNTIME, 1, 2))
        return (named((flags & PARALLEL_LEAGUE) != 0, _REGION_NAMES),
                [("parallel_id", ident(r["parallel_id"])),
                 ("parent_id", number(parent_id.values[part], parent_id.missing[part])),
                 ("level", number(level[part])),
                 ("team_size", number(team_size.values[part], team_size.missing[part])),
                 ("requested_team_size", number(r["u32a"])),
                 ("invoker", named(invoker, _INVOKERS)),
                 ("codeptr", _codeptr(r)),
                 ("location", locations.column(rec.pid(regions.rows[part]), r["codeptr"]))])
    yield _slices(rec, "parallel", regions, region)
    yield _slices(rec, "implicit_task", implicit.take(others),
                  lambda r, part: ("implicit task", [
                      ("task_id", ident(r["task_id"])), ("parallel_id", ident(r["parallel_id"])),
                      ("thread_num", number(r["u64a"])), ("team_size", number(r["u32a"]))]))


def _work(rec: _Records, work: _Pairs, locations: _Locations) -> Source:
    return _slices(rec, "work", work, lambda r, part: (_kind(r), [
        ("kind_raw", _kind_raw(r)), ("count", number(r["u64a"])),
        ("parallel_id", ident(r["parallel_id"])), ("codeptr", _codeptr(r)),
        ("location", locations.column(rec.pid(work.rows[part]), r["codeptr"]))]))


def _sync(rec: _Records, regions: _Pairs, sync: _Pairs, waits: _Pairs,
          found: dict[str, np.ndarray]) -> tuple[_Pairs, Source, Source]:
    """The ``waits`` in barriers, taskwait and taskgroup (the counter counts them
    too), and the slices of those ``sync`` regions and of the waits (their ends
    clamped to their ``regions``': ``found``, _LOOKUPS', those it uses taken out).
    The time each region waited (pairing.waits_per_region, of the region each wait
    was found in) is made on a thread of its own while the slices are put in
    order: only their labels need it."""
    _clamp(waits, found.pop("wait region"), regions)
    _clamp(sync, found.pop("sync region"), regions)
    region = found.pop("waits' region")

    def waited_ns() -> np.ndarray:
        waited = rec.time(waits.rows)
        np.subtract(waits.end, waited, out=waited)
        return pairing.waits_per_region(len(sync), region, waited)
    aside = ThreadPoolExecutor(1, thread_name_prefix="ompt-py: export")
    waited = aside.submit(waited_ns)
    aside.shutdown(wait=False)
    return (waits,
            _slices(rec, "sync", sync, lambda r, part: (_kind(r), [
                ("kind_raw", _kind_raw(r)), ("wait_ns", number(waited.result()[part])),
                ("parallel_id", ident(r["parallel_id"])), ("task_id", ident(r["task_id"])),
                ("codeptr", _codeptr(r))])),
            _slices(rec, "sync_wait", waits, lambda r, part: (
                _kind(r, " wait"), [("parallel_id", ident(r["parallel_id"]))]), keep=True))


def _tasks(rec: _Records, first_flow: int = 1) -> tuple[Source, Source]:
    """Per thread that ran it, each explicit task from its first start to the end of
    its last piece there (what nests on a thread's stack), and the flows: from each
    task's creation to its first start (ids from ``first_flow``)."""
    ev = rec.ev
    rows = rec.select("task_schedule")
    created = rec.select("task_create")
    explicit = ev["task_id"][created]
    run, nxt = pairing.task_runs(
        pd.DataFrame({"pid": rec.pid(rows), "thread": ev["thread"][rows]}, copy=False),
        ev["task_id"][rows], ev["u64a"][rows], explicit[explicit != 0])
    run, end = rows[run], rec.time(rows[nxt])
    del rows, nxt, explicit
    # Per (pid, thread, task), numbered in the order of their first pieces (the order
    # of their starts): the first piece's record, the last end, the pieces.
    ids = pd.factorize(pairing.group_ids(pd.DataFrame(
        {"pid": rec.pid(run), "thread": ev["thread"][run], "task": ev["u64a"][run]},
        copy=False))[0])[0]
    first = np.unique(ids, return_index=True)[1]
    last = np.full(len(first), np.iinfo(np.int64).min)
    np.maximum.at(last, ids, end)
    pieces = np.bincount(ids)
    spans = _Pairs(run[first], last)
    del run, end, ids, first
    # A flow from each task_create to the first span of its task in its process.
    target = rec.find(spans.rows, created, "u64a", "task_id")
    creation, to = created[target >= 0], target[target >= 0]

    def ends(part: Part) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        rows, span = creation[part], spans.rows[to[part]]
        pid = rec.pid(rows)
        return ((pid, ev["thread"][rows], rec.time(rows)),
                (pid, ev["thread"][span], rec.time(span)))

    def flows(part: Part) -> Flows:
        """A flow per task (ids first_flow, first_flow + 1, ...): from its creation to
        its first start."""
        return Flows("task", np.arange(len(creation))[part] + first_flow, *ends(part))
    return (_slices(rec, "task", spans, lambda r, part: (
                "task", [("task_id", number(r["u64a"])), ("pieces", number(pieces[part]))])),
            Source(len(creation), flows, points=lambda: ends(slice(None))))


def _mutex(rec: _Records, waits: _Pairs, holds: _Pairs) -> tuple[_Pairs, Source, Source]:
    """Lock, critical and ordered acquisitions as Trace.mutex() has them: the
    ``waits`` (acquire -> acquired; the counter counts them too), and the slices
    of the waits and of the ``holds`` (acquired -> released)."""
    ev = rec.ev
    w, h = pairing.acquisitions(
        [rec.pid(waits.rows), ev["thread"][waits.rows], ev["u64a"][waits.rows], waits.end],
        [rec.pid(holds.rows), ev["thread"][holds.rows], ev["u64a"][holds.rows],
         rec.time(holds.rows)])
    waited = waits.take(w[w >= 0])
    # A hold has the kind and code address of its wait (null without one).
    held = holds.take(h[h >= 0])
    of_hold = w[h >= 0]
    has = of_hold >= 0
    wait_of = waits.rows[of_hold[has]]
    kind = np.full(len(held), -1, np.int64)
    kind[has] = KIND_CATEGORIES.codes(kind_keys(ev["event"][wait_of], ev["kind"][wait_of]))
    codeptr = np.zeros(len(held), np.uint64)
    codeptr[has] = ev["codeptr"][wait_of]
    del w, h, of_hold, has, wait_of
    return (waited,
            _slices(rec, "mutex_wait", waited, lambda r, part: (_kind(r, " wait"), [
                ("wait_id", hexadecimal(r["u64a"])), ("codeptr", _codeptr(r))])),
            _slices(rec, "mutex", held, lambda r, part: (
                named(kind[part], _KIND_NAMES[""]),
                [("wait_id", hexadecimal(r["u64a"])),
                 ("codeptr", hexadecimal(codeptr[part], codeptr[part] == 0))])))


#: The counter's series: their names, in the order of _waits' series.
WAIT_SERIES = ("sync", "mutex")


def _waits(rec: _Records, sync: _Pairs, mutex: _Pairs, flt: ExportFilter
           ) -> list[tuple[np.ndarray, ...]]:
    """The waits the counter counts, on the threads and processes ``flt`` keeps, as
    _core.waiting's series (WAIT_SERIES: in sync regions, for mutexes): pid,
    thread, begin and end, in the order of their begins (the mutex waits come in
    that of their ends, as mutex_table has them)."""
    series = []
    for p in (sync, mutex):
        thread, begin = p.kept or (rec.ev["thread"][p.rows], rec.time(p.rows))
        p.kept = None
        pid, end = rec.pid(p.rows), p.end
        keep = flt.tracks(pid, thread)
        if not keep.all():
            pid, thread, begin, end = pid[keep], thread[keep], begin[keep], end[keep]
        if len(begin) > 1 and (begin[1:] < begin[:-1]).any():
            order = np.argsort(begin, kind="stable")
            pid, thread, begin, end = pid[order], thread[order], begin[order], end[order]
        series.append((pid, thread, begin, np.asarray(end, np.int64)))
    return series


def _waiting(series: list[tuple[np.ndarray, ...]], flt: ExportFilter) -> Source:
    """A counter per process and time: how many threads wait in sync regions and
    for mutexes (``series``: _waits'), after each change.  A thread counts once
    while it waits, however many of its waits nest (a taskwait in a task run
    inside a barrier's wait); in ``flt``'s window, the last value before it moved
    to its start (_core.waiting: each thread's waits made spells, swept in C)."""
    pid, time, counts = _core.waiting(series, flt.start_ns, flt.end_ns)
    pid, time = np.frombuffer(pid, np.int32), np.frombuffer(time, np.int64)
    counts = [np.frombuffer(c, np.int32) for c in counts]

    def batch(part: Part) -> Counter:
        return Counter("threads waiting", pid[part], time[part],
                       [(name, c[part]) for name, c in zip(WAIT_SERIES, counts)])
    return Source(len(pid), batch)


# ---- offload: the host's target constructs, data operations and submissions; the devices --------

#: The tid of a device's first track in its process (offload.device_track's
#: sub-tracks take the next ones): far above the tool's thread numbers.
DEVICE_TID = 1 << 30


def _table_slices(table: pd.DataFrame, cat: str,
                  make: Callable[[pd.DataFrame], Label]) -> Source:
    """Slices of the rows of an offload table (pid, thread, begin_ns, end_ns; a
    row without an end is zero long): ``make(rows of a batch)`` gives the name
    and args of a batch."""
    end = table["end_ns"].fillna(table["begin_ns"]).to_numpy(np.int64)

    def batch(part: Part) -> Slices:
        rows = table.iloc[part]
        return _complete(cat, rows["pid"], rows["thread"], rows["begin_ns"], end[part],
                         *make(rows))

    def spans() -> _Spans:
        return _Spans(None, table["pid"].to_numpy(np.int64), table["thread"].to_numpy(np.int64),
                      table["begin_ns"].to_numpy(np.int64), end)
    return Source(len(table), batch, cat, spans, lambda part: make(table.iloc[part]))


def _names(values: pd.Series) -> Column:
    """Texts (a categorical or string column) as JSON strings, null where missing."""
    codes, names = pd.factorize(values.astype(object))
    return named(codes, json_names(names))


def _host_offload(trace: Trace) -> Iterator[Source]:
    """On the threads' tracks: the target constructs (named by kind), the data
    operations in them (by kind) and the kernel submissions."""
    yield _table_slices(offload.target_regions(trace), "target", lambda r: (_names(r["kind"]), [
        ("target_id", number(r["target_id"])), ("device", number(r["device"])),
        ("nowait", named(r["nowait"].to_numpy(bool), _BOOLEANS)),
        ("codeptr", hexadecimal(r["codeptr"], r["codeptr"] == 0)),
        ("location", _names(r["location"]))]))
    yield _table_slices(offload.data_ops(trace), "target_data_op", lambda r: (
        _names(r["kind"]), [
            ("host_op_id", number(r["host_op_id"])), ("bytes", number(r["bytes"])),
            ("src_device", number(r["src_device"])), ("dest_device", number(r["dest_device"])),
            ("target_id", number(r["target_id"]))]))
    yield _table_slices(offload.kernels(trace), "target_submit", lambda r: ("kernel submit", [
        ("host_op_id", number(r["host_op_id"])), ("device", _optional(r["device"])),
        ("requested_teams", number(r["requested_teams"])),
        ("granted_teams", _optional(r["granted_teams"])), ("target_id", number(r["target_id"]))]))


def _mpi(trace: Trace) -> Source:
    """The MPI calls (tables.mpi_calls), on the threads that made them: "MPI barrier"..."""
    return _table_slices(tables.mpi_calls(trace), "mpi", lambda r: (
        _names("MPI " + r["call"].astype(str)), [
            ("kind", _names(r["kind"])), ("bytes", _optional(r["bytes"])),
            ("peer", _optional(r["peer"])), ("comm_size", _optional(r["comm_size"]))]))


#: The category of the tool's stalls.
STALL_CAT = "ompt-py"


def _stalls(trace: Trace) -> Source:
    """The tool's stalls (states.tool_stalls), on the threads they stopped."""
    return _table_slices(states.tool_stalls(trace), STALL_CAT, lambda r: (
        states.STALL_LABEL, [
            ("reason", _names(r["reason"])), ("bytes", number(r["bytes"])),
            ("region", number(r["region"]))]))


class _DeviceTracks(NamedTuple):
    """offload.device_track, each row's tid, and per track its pid, tid and name."""

    table: pd.DataFrame
    tid: np.ndarray
    tracks: list[tuple[int, int, str]]


def _device_tracks(trace: Trace) -> _DeviceTracks:
    """A track per device of each process (``DEVICE_TID`` on: "device N (type)"),
    and one more per sub-track where its operations overlap ("device N (type) [2]")."""
    table = offload.device_track(trace)
    key = pd.MultiIndex.from_frame(table[["pid", "device", "sub_track"]])
    code, tracks = pd.factorize(key, sort=True)
    types = {(pid, d.get("device")): d.get("type")
             for pid, d in offload.device_entries(trace.meta)}
    named_tracks = []
    for i, (pid, device, sub) in enumerate(tracks):  # a few
        kind = types.get((pid, device))
        name = (f"device {device}" + (f" ({kind})" if kind else "")
                + (f" [{sub + 1}]" if sub else ""))
        named_tracks.append((int(pid), DEVICE_TID + i, name))
    return _DeviceTracks(table, DEVICE_TID + code.astype(np.int64), named_tracks)


def _device_metadata(devices: _DeviceTracks, flt: ExportFilter) -> list[dict]:
    """thread_name and thread_sort_index of the devices' tracks (after the threads)
    of the processes ``flt`` keeps."""
    return [m for pid, tid, name in devices.tracks if flt.process_kept(pid) for m in (
        {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}},
        {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
         "args": {"sort_index": tid}})]


def _device_slices(devices: _DeviceTracks) -> Source:
    """The kernels and transfers on the devices' tracks (cat "device")."""
    table = devices.table

    def label(part: Part) -> Label:
        rows = table.iloc[part]
        return _names(rows["name"]), [
            ("device", number(rows["device"])), ("source", _names(rows["source"])),
            ("bytes", _optional(rows["bytes"])), ("host_op_id", number(rows["host_op_id"]))]

    def batch(part: Part) -> Slices:
        rows = table.iloc[part]
        return _complete("device", rows["pid"], devices.tid[part], rows["begin_ns"],
                         rows["end_ns"], *label(part))

    def spans() -> _Spans:
        return _Spans(None, table["pid"].to_numpy(np.int64), devices.tid,
                      table["begin_ns"].to_numpy(np.int64), table["end_ns"].to_numpy(np.int64))
    return Source(len(table), batch, "device", spans, label, device=True)


def _device_flows(devices: _DeviceTracks, first_id: int) -> Source:
    """A flow (cat and name "offload", ids from ``first_id``) from each host
    operation to its kernel or transfer on a device's track."""
    table = devices.table
    linked = np.flatnonzero(table["host_ns"].notna().to_numpy())
    pid = table["pid"].to_numpy(np.int64)[linked]
    thread = table["host_thread"].to_numpy(np.int64, na_value=0)[linked]
    host_ns = table["host_ns"].to_numpy(np.int64, na_value=0)[linked]
    tid, begin = devices.tid[linked], table["begin_ns"].to_numpy(np.int64)[linked]

    def batch(part: Part) -> Flows:
        return Flows("offload", np.arange(len(linked))[part] + first_id,
                     (pid[part], thread[part], host_ns[part]), (pid[part], tid[part], begin[part]))

    def points() -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        return (pid, thread, host_ns), (pid, None, begin)  # a device's track: with its process
    return Source(len(linked), batch, points=points)


def _process_name(proc: dict) -> str:
    argv = proc.get("argv") or [proc.get("exe") or "?"]
    command = " ".join([os.path.basename(argv[0]), *argv[1:]])
    if len(command) > 80:
        command = command[:77] + "..."
    return command if proc.get("rank") is None else f"rank {proc['rank']}: {command}"


def _metadata(trace: Trace, flt: ExportFilter) -> list[dict]:
    """process_name/thread_name (and sort indexes) of every process and thread
    ``flt`` keeps."""
    procs = {p["pid"]: p for p in trace.meta.get("processes", [])}
    threads: dict[int, set[int]] = {pid: set() for pid in procs}
    for pid, thread in zip(*(a.tolist() for a in key_pid_thread(states.threads(trace)))):
        threads.setdefault(pid, set()).add(thread)
    out = []
    for i, pid in enumerate(sorted(threads)):
        if not flt.process_kept(pid):
            continue
        proc = procs.get(pid, {})
        types = {th["thread"]: th["type"] for th in proc.get("threads", [])}
        rank = proc.get("rank")
        out += [{"ph": "M", "pid": pid, "name": "process_name",
                 "args": {"name": _process_name(proc) if proc else f"pid {pid}"}},
                {"ph": "M", "pid": pid, "name": "process_sort_index",
                 "args": {"sort_index": i if rank is None else rank}}]
        for thread in sorted(threads[pid] | set(types)):
            if not flt.thread_kept(pid, thread):
                continue
            name = f"thread {thread}" + (f" ({types[thread]})" if thread in types else "")
            out += [{"ph": "M", "pid": pid, "tid": thread, "name": "thread_name",
                     "args": {"name": name}},
                    {"ph": "M", "pid": pid, "tid": thread, "name": "thread_sort_index",
                     "args": {"sort_index": thread}}]
    return out


class _Stacks:
    """The Python stacks of a trace as frame codes: ``codes[s, level]`` (outermost
    first, -1 past the stack's ``depth[s]``) per stack number s (``number`` maps
    (pid, py_stack) to it), and per frame code its location, file, line,
    function, whether it is the user's code and whether it is native
    (pystacks.python_stacks: the Python frames, then the native callers under
    them, without the interpreter's own)."""

    def __init__(self, frames: pd.DataFrame) -> None:
        frames = frames[~frames["interpreter"]]
        frames = frames.assign(level=frames.groupby(["pid", "stack"]).cumcount())
        code, self.frames = pd.factorize(pd.MultiIndex.from_frame(
            frames[["location", "file", "line", "function", "user", "native"]]))
        stack, stacks = pd.factorize(pd.MultiIndex.from_frame(frames[["pid", "stack"]]))
        self.number = pd.Series(np.arange(len(stacks)), index=stacks)
        self.depth = np.bincount(stack, minlength=len(stacks))
        self.codes = np.full((len(stacks), int(self.depth.max(initial=0)) + 1), -1, np.int64)
        self.codes[stack, frames["level"].to_numpy()] = code

    def of(self, pid: np.ndarray, stack: np.ndarray) -> np.ndarray:
        """The stack number of each (pid, py_stack); -1 where it has no frames."""
        wanted = pd.MultiIndex.from_arrays([np.asarray(pid, np.int64),
                                            np.asarray(stack, np.int64)])
        return self.number.reindex(wanted).fillna(-1).to_numpy(np.int64)

    def common(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """How many outermost frames the stacks ``a`` and ``b`` (numbers) share."""
        if not len(a):
            return np.zeros(0, np.int64)
        pairs, at = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
        x, y = self.codes[pairs[:, 0]], self.codes[pairs[:, 1]]
        shallower = np.minimum(self.depth[pairs[:, 0]], self.depth[pairs[:, 1]])
        differ = (x != y) | (np.arange(x.shape[1]) >= shallower[:, None])
        return np.argmax(differ, axis=1)[at.ravel()]  # the last column always differs


def _python_items(rec: _Records, stacks: _Stacks, regions: _Pairs, parent: Any) -> pd.DataFrame:
    """The constructs the Python frames go above, on the track of the thread that
    started them, with the Python stack they started from (own or inherited,
    as the tables give it): parallel regions, region markers, and the explicit
    tasks created outside any region, where they ran.  Columns: pid, thread,
    key (states.thread_key), begin, end, stack (a number of ``stacks``),
    inherited.  Tasks created inside a region are the region's work, as its
    implicit tasks are: no frames above them.  ``regions``: _regions, ``parent``:
    their parent_id (_region_tree)."""
    trace, ev = rec.trace, rec.ev
    own = python_stack_ids(ev[regions.rows]).astype(np.int64)
    tree = pystacks.with_python(trace, pd.DataFrame({
        "pid": rec.pid(regions.rows).astype(np.int64),
        "parallel_id": ev["parallel_id"][regions.rows].astype(np.int64),
        "parent_id": pd.array(parent, dtype="Int64"),
        "py_stack": pd.arrays.IntegerArray(own, own == 0)}),
        parent=("parent_id", "parallel_id"))
    user = tables.user_regions(trace)
    parts = [pd.DataFrame({"pid": tree["pid"], "thread": ev["thread"][regions.rows],
                           "begin": rec.time(regions.rows), "end": regions.end,
                           "py_stack": tree["py_stack"], "inherited": tree["py_inherited"]}),
             pd.DataFrame({"pid": user["pid"], "thread": user["thread"],
                           "begin": user["begin_ns"], "end": user["end_ns"],
                           "py_stack": user["py_stack"], "inherited": user["py_inherited"]})]
    del own, tree
    created = rec.select("task_create")
    task_stack = python_stack_ids(ev[created]).astype(np.int64)
    created, task_stack = created[task_stack > 0], task_stack[task_stack > 0]
    if len(created):  # a task's span on a thread: u64a of its first piece, the task
        ran = _tasks(rec)[0].spans()
        task = rec.find(created, ran.rows, "task_id", "u64a")
        on = task >= 0
        parts.append(pd.DataFrame({
            "pid": ran.pid[on], "thread": ran.thread[on], "begin": ran.begin[on],
            "end": ran.end[on], "py_stack": task_stack[task[on]], "inherited": False}))
        del ran, task, on
    items = pd.concat([p[p["py_stack"].notna()] for p in parts], ignore_index=True)
    items = items.assign(key=thread_key(items["pid"], items["thread"]),
                         stack=stacks.of(items["pid"], to_int(items["py_stack"])))
    return items[items["stack"] >= 0].reset_index(drop=True)


class _Holders:
    """Of the slices of the tracks (``watch``: the sources as they pass), those
    that hold the begin of an item (_python_items) of their track, beginning
    before it: the only ones the Python frames of items can lie in."""

    def __init__(self, items: pd.DataFrame) -> None:
        key, begin = items["key"].to_numpy(np.int64), items["begin"].to_numpy(np.int64)
        self.tracks = np.unique(key)
        self.begins = [np.sort(begin[key == k]) for k in self.tracks]
        self.found: list[tuple[np.ndarray, ...]] = [(np.empty(0, np.int64),) * 3]

    def watch(self, sources: Iterable[Source]) -> Iterator[Source]:
        for source in sources:
            if source.spans is not None:
                spans = source.spans()
                on = thread_key(spans.pid, spans.thread)
                for track, begins in zip(self.tracks, self.begins):
                    mine = np.flatnonzero(on == track)
                    b, e = spans.begin[mine], spans.end[mine]
                    holds = (np.searchsorted(begins, b, "right")
                             < np.searchsorted(begins, e, "left"))
                    self.found.append((on[mine[holds]], b[holds], e[holds]))
                del spans, on
            yield source

    def spans(self) -> tuple[np.ndarray, ...]:
        """key, begin and end of the slices found."""
        return tuple(np.concatenate(c) for c in zip(*self.found))


def _python_frames(stacks: _Stacks, items: pd.DataFrame, holders: _Holders) -> Source:
    """Slices of the Python frames (cat "python", named by location: "file:line in
    function"; below them, ``native``, the native callers recorded with the
    stack) above the constructs started from Python (``items``), on the same
    track: outermost frame first, as a flame chart nests them.  Of an item
    inside another item, only the frames below those the two share.  Items one
    after the other inside the same slice (siblings) share the slices of the
    outermost frames they have in common, as a sampling profiler merges them:
    so the frames of every Python line stay nested with every slice of the
    track (``holders``: the slices the items are in).  ``inherited`` (arg):
    the frames of a construct that took its stack from the region around it
    (a nested region a worker started, a marker in a region)."""
    key, begin, end = (items[c].to_numpy(np.int64) for c in ("key", "begin", "end"))
    stack, inherited = items["stack"].to_numpy(), items["inherited"].to_numpy(bool)
    span_key, span_begin, span_end = holders.spans()
    # The slice each item is in (-1: none), and the item it is in (-1: none).
    inside = pairing.innermost(span_key, span_begin, span_end, key, begin, from_begin=False)
    del span_key, span_begin, span_end
    outer = pairing.innermost(key, begin, end, key, begin, from_begin=False)
    shown = np.zeros(len(items), np.int64)  # the first level drawn: below the outer item's
    has = outer >= 0
    shown[has] = stacks.common(stack[has], stack[outer[has]])
    # Siblings: in the same slice, in time order; a run of siblings with the same
    # frames drawn is one (from its first begin to its last end).
    group = pd.factorize(pd.MultiIndex.from_arrays([key, inside]))[0]
    order = np.lexsort((-end, begin, group))
    group, begin, end, stack, inherited, shown = (
        a[order] for a in (group, begin, end, stack, inherited, shown))
    items = items.iloc[order].reset_index(drop=True)
    first = np.ones(len(group), bool)
    first[1:] = group[1:] != group[:-1]
    same = ~first
    same[1:] &= ((stack[1:] == stack[:-1]) & (shown[1:] == shown[:-1])
                 & (inherited[1:] == inherited[:-1]))
    run = np.flatnonzero(~same)
    end = np.maximum.reduceat(end, run)
    group, begin, stack, inherited, shown, first = (
        a[run] for a in (group, begin, stack, inherited, shown, first))
    items = items.iloc[run].reset_index(drop=True)
    # One row per run and level drawn; a level starts a slice where the run before
    # in the group does not have the same frames down to it.
    n = len(run)
    before = np.maximum(np.arange(n) - 1, 0)
    common = stacks.common(stack[before], stack)
    levels = np.maximum(stacks.depth[stack] - shown, 0)
    at = np.repeat(np.arange(n), levels)
    level = np.arange(len(at)) - np.repeat(np.cumsum(levels) - levels, levels) + shown[at]
    new = (first[at] | (inherited[at] != inherited[before[at]]) | (level >= common[at])
           | (level < shown[before[at]]))
    rows = np.lexsort((at, level, group[at]))
    at, level, new = at[rows], level[rows], new[rows]
    starts = np.flatnonzero(new)
    at_first = at[starts]
    slice_end = np.maximum.reduceat(end[at], starts) if len(starts) else end[:0]
    code = stacks.codes[stack[at_first], level[starts]]
    pid = items["pid"].to_numpy(np.int64)[at_first]
    thread = items["thread"].to_numpy(np.int64)[at_first]
    slice_begin, level, inherited = begin[at_first], level[starts], inherited[at_first]
    # Parents first: by begin, the longer first, the outer level first.
    order = np.lexsort((level, -(slice_end - slice_begin), slice_begin))
    code, pid, thread, slice_begin, slice_end, level, inherited = (
        a[order] for a in (code, pid, thread, slice_begin, slice_end, level, inherited))
    location, file, line, function, user, native = (
        stacks.frames.get_level_values(i) for i in range(6))
    location, file, function = (texts(json_names(names)) for names in (location, file, function))
    line, user, native = line.to_numpy(np.int64), user.to_numpy(bool), native.to_numpy(bool)

    def label(part: Part) -> Label:
        c = code[part]
        return named(c, location), [
            ("file", named(c, file)), ("line", number(line[c])), ("function", named(c, function)),
            ("user", named(user[c], _BOOLEANS)),
            ("native", named(native[c], _BOOLEANS)), ("level", number(level[part])),
            ("inherited", named(inherited[part], _BOOLEANS))]

    def batch(part: Part) -> Slices:
        return _complete("python", pid[part], thread[part], slice_begin[part], slice_end[part],
                         *label(part))

    def spans() -> _Spans:
        return _Spans(None, pid, thread, slice_begin, slice_end)
    return Source(len(code), batch, "python", spans, label)


class _Unpaired(NamedTuple):
    """The sources made of none of _PAIRINGS (made while the records are paired)."""

    user: Source
    tasks: Source
    flows: Source
    mpi: Source
    stalls: Source
    next_flow: int  # the first id after the tasks' flows (the offload flows' first)


def _unpaired(rec: _Records, first_flow: int) -> _Unpaired:
    """The sources of _Unpaired; the flows' ids from ``first_flow``."""
    trace = rec.trace
    tasks, flows = _tasks(rec, first_flow)
    return _Unpaired(_user_slices(trace), tasks, flows, _mpi(trace), _stalls(trace),
                     first_flow + flows.count)


def _track_sources(rec: _Records, paired: dict[str, _Pairs],
                   tree: tuple[_Pairs, Any, np.ndarray, np.ndarray],
                   devices: _DeviceTracks | None, waits: list[_Pairs],
                   syncs: tuple[_Pairs, Source, Source], unpaired: _Unpaired,
                   locations: dict[str, _Locations]) -> Iterator[Source]:
    """The file's events after the metadata and the Python frames, in file order
    (filtered by ``filtered``): the slices of every track, parents before children
    (the order that keeps slices starting at the same nanosecond nested the right
    way), the flows; last into ``waits``, the waits the counter counts (sync,
    mutex).  ``paired``: the pairings of _PAIRINGS but the implicit tasks and sync
    regions (each dropped once its slices are made), ``tree``: _region_tree of the
    regions, ``devices``: _device_tracks (None: the trace has no offload events),
    ``syncs``: _sync's result, ``unpaired``: the rest, ``locations``: per pairing
    of _LOCATED, its begins'."""
    trace = rec.trace
    regions = paired.pop("parallel")
    yield unpaired.user
    yield from _parallel(rec, regions, tree, locations["parallel"])
    del tree
    yield _work(rec, paired.pop("work"), locations["work"])
    sync_wait_pairs, sync, sync_waits = syncs
    del regions, syncs
    yield sync
    yield sync_waits
    yield unpaired.tasks
    if devices is not None:
        yield from _host_offload(trace)
        yield _device_slices(devices)
    mutex_waits, mutex_wait_slices, mutex_hold_slices = _mutex(rec, paired.pop("mutex_wait"),
                                                               paired.pop("mutex_hold"))
    yield mutex_wait_slices
    yield mutex_hold_slices
    yield unpaired.mpi
    yield unpaired.stalls
    yield unpaired.flows
    if devices is not None:
        yield _device_flows(devices, unpaired.next_flow)
    waits += [sync_wait_pairs, mutex_waits]


def filtered(source: Source, flt: ExportFilter) -> Source:
    """``source`` with what ``flt`` keeps: its slices on the tracks kept that
    overlap the window, clipped to it, or its flows whose both ends are kept (the
    counter is filtered as it is made: _waiting)."""
    if not flt.active or (source.spans is None and source.points is None):
        return source
    if source.points is not None:
        keep = flt.flows(*source.points())
        return source._replace(count=len(keep), make=lambda part: source.make(keep[part]),
                               points=None)
    spans, make, label = source.spans(), source.make, source.label
    keep, begin, end = flt.clip(spans.pid, None if source.device else spans.thread,
                                spans.begin, spans.end)

    def batch(part: Part) -> Batch:
        return make(keep[part])._replace(begin=begin[part], end=end[part])

    def kept() -> _Spans:
        return _Spans(None if spans.rows is None else spans.rows[keep], spans.pid[keep],
                      spans.thread[keep], begin, end)
    return source._replace(count=len(keep), make=batch, spans=kept,
                           label=lambda part: label(keep[part]), begins=spans.begin[keep])


def _subset(source: Source, at: np.ndarray) -> Source:
    """The slices ``at`` (positions) of a filtered ``source``."""
    def kept() -> _Spans:
        spans = source.spans()
        return _Spans(None if spans.rows is None else spans.rows[at], spans.pid[at],
                      spans.thread[at], spans.begin[at], spans.end[at])
    return source._replace(count=len(at), make=lambda part: source.make(at[part]), spans=kept,
                           label=lambda part: source.label(at[part]), begins=source.begins[at])


def _window_first(sources: Iterable[Source], start: int) -> list[Source]:
    """``sources`` (filtered), the slices clipped at the window's ``start`` first, in
    the order of their begins before clipping (then of the file): they all begin
    at ``start`` now, and a viewer nests the slices that begin together in file
    order, so parents must come first, whatever their source."""
    sources = list(sources)
    clipped = [(source.begins[at], np.full(len(at), i), at) for i, source in enumerate(sources)
               if source.begins is not None
               for at in [np.flatnonzero(source.begins < start)] if len(at)]
    if not clipped:
        return sources
    begins, which, at = (np.concatenate(c) for c in zip(*clipped))
    order = np.lexsort((at, which, begins))
    first = [_subset(sources[i], at[[k]]) for i, k in zip(which[order], order)]
    rest = [s if s.begins is None else _subset(s, np.flatnonzero(s.begins >= start))
            for s in sources]
    return first + rest


class Tracks(NamedTuple):
    """What the Perfetto writers make a trace's file of: the metadata (processes,
    threads, devices: _metadata, _device_metadata), the sources of the slices and
    flows, filtered, in file order, the source of the counter (``counter()``,
    filtered, the last in the file: made once the sources are consumed, so
    that it is never held with them) and the waits it counts (``waits()``:
    _waits', likewise), the source of the Python frames
    (``frames()``, None without Python stacks: made from the slices of the
    other sources, so only once they are all consumed, though the JSON file
    has the frames first), and the file's otherData (``other()``: once the
    sources are consumed, with what the filter clipped and left out)."""

    metadata: list[dict]
    sources: Iterator[Source]
    counter: Callable[[], Source]
    waits: Callable[[], list[tuple[np.ndarray, ...]]]
    frames: Callable[[], Source] | None
    other: Callable[[], dict]


def tracks(trace: Trace, flt: ExportFilter, first_flow: int = 1) -> Tracks:
    """The sources of both Perfetto writers (JSON: write; protobuf: perfetto_proto),
    each filtered by ``flt``; the flows' ids from ``first_flow`` (one per explicit
    task created, at most)."""
    other: dict[str, Any] = {"producer": "ompt-py",
                             "clock": "CLOCK_MONOTONIC, from origin_mono_ns",
                             "origin_mono_ns": trace.meta.get("origin_mono_ns")}
    rec = _Records(trace)
    # The records paired (in C, without the GIL) while what needs no pairing is made.
    with ThreadPoolExecutor(1) as pool:
        pairs = pool.submit(rec.pairs, _PAIRINGS, _LOOKUPS)
        frames = pystacks.python_stacks(trace) if metrics.has_python_stacks(trace) else []
        devices = _device_tracks(trace) if rec.has(offload.OFFLOAD_CODES) else None
        metadata = _metadata(trace, flt) + ([] if devices is None
                                             else _device_metadata(devices, flt))
        unpaired = _unpaired(rec, first_flow)
        paired, found = pairs.result()
        located = {name: pool.submit(_Locations, rec, paired[name].rows) for name in _LOCATED}
        regions = paired["parallel"]
        syncs = _sync(rec, regions, paired.pop("sync_region"), paired.pop("sync_region_wait"),
                      found)
        tree = _region_tree(rec, regions, paired.pop("implicit_task"), found)
        locations = {name: made.result() for name, made in located.items()}
    stacks = _Stacks(frames) if len(frames) else None
    items = _python_items(rec, stacks, regions, tree[1]) if stacks is not None else None
    if devices is not None and any(devices.table.attrs["unplaced"].values()):
        other["device_operations_not_drawn"] = devices.table.attrs["unplaced"]
    waits: list[_Pairs] = []
    raw = _track_sources(rec, paired, tree, devices, waits, syncs, unpaired, locations)
    del paired, found, regions, tree, unpaired, locations

    def made_other() -> dict:
        return {**other, "export_filter": flt.meta()} if flt.active else other

    def counted() -> list[tuple[np.ndarray, ...]]:
        if not waits:
            raise RuntimeError("the counter is made of the waits of the sources: consume "
                               "the sources first")
        return _waits(rec, *waits, flt)

    def counter() -> Source:
        return _waiting(counted(), flt)
    holders = None if items is None or items.empty else _Holders(items)
    sources: Iterable[Source] = (filtered(s, flt)
                                  for s in (raw if holders is None else holders.watch(raw)))
    if flt.start_ns is not None:
        sources = _window_first(sources, flt.start_ns)
    if holders is None:
        return Tracks(metadata, iter(sources), counter, counted, None, made_other)
    # the frames lie on the slices of the sources: made once those have passed
    return Tracks(metadata, iter(sources), counter, counted,
                  lambda: filtered(_python_frames(stacks, items, holders), flt), made_other)


def _write_sources(writer: Writable, sources: Iterable[Source], progress: Progress) -> None:
    """Formats the events of ``sources`` a batch at a time, in parallel, and writes
    them in order (the progress bar's total grows as the tables are made)."""
    def jobs() -> Iterator[Callable[[], tuple[int, bytes]]]:
        for source in sources:
            progress.grow(source.count)
            yield from (lambda s=source, p=part: (p.stop - p.start, _json_text(s.make(p)))
                        for part in batches(source.count))
    for rows, text in in_order(jobs()):
        writer.write(text)
        progress.update(rows)


#: The beginning of a JSON file: its events follow, each after SEP (but the
#: first: ArrayWriter), then its tail (``tail``).
HEAD = b'{"traceEvents":[\n'


def write(trace: Trace, path: str | os.PathLike, flt: ExportFilter | None = None) -> None:
    """Writes ``trace`` as a Perfetto / Chrome trace (JSON Trace Event Format), of
    what ``flt`` keeps (default: everything).

    With Python stacks, the Python frames come first in the file (before the
    slices they hold), though made from the slices of the tracks: those are
    written to a temporary file beside ``path`` first, then copied after the
    frames (each slice is made once: no second pass over the records).  The
    otherData come last: they hold what the filter clipped."""
    with output(path) as out, Progress(0, "perfetto") as progress:
        out.write(HEAD)
        other = write_events(trace, ArrayWriter(out), flt or ExportFilter(), 1,
                             os.path.dirname(os.path.abspath(path)), progress)
        out.write(tail([other]))


def write_events(trace: Trace, out: Writable, flt: ExportFilter, first_flow: int,
                 scratch: str, progress: Progress) -> dict:
    """Writes the events of ``trace`` (what ``flt`` keeps) to ``out``, each after
    SEP: its processes' and threads' metadata, then its slices, flows and counter
    (with Python stacks, the frames first: the rest goes to a temporary file in
    the directory ``scratch`` meanwhile); the flows' ids from ``first_flow`` (as
    many as the trace has records, at most: the parts of one file made apart
    take their ids from the records before theirs, ompt_py.io.dataset).  Returns
    its otherData (``tail`` merges those of several traces)."""
    made = tracks(trace, flt, first_flow)
    out.write("".join(SEP + json.dumps(m) for m in made.metadata).encode())
    if made.frames is None:
        _write_sources(out, made.sources, progress)
        _write_sources(out, [made.counter()], progress)
    else:
        with tempfile.TemporaryFile(dir=scratch) as rest:
            _write_sources(rest, made.sources, progress)
            _write_sources(rest, [made.counter()], progress)
            _write_sources(out, [made.frames()], progress)
            rest.seek(0)
            shutil.copyfileobj(rest, out, 1 << 24)
    return made.other()


def other_data(others: Iterable[dict]) -> dict:
    """The otherData of a file of several traces of one time axis (a dataset's
    partitions), from each trace's: the first's, with the device operations not
    drawn summed over them."""
    other: dict[str, Any] = {}
    for mine in others:
        undrawn = dict(other.get("device_operations_not_drawn", {}))
        for kind, n in mine.get("device_operations_not_drawn", {}).items():
            undrawn[kind] = undrawn.get(kind, 0) + n
        other = {**mine, **other}
        if undrawn:
            other["device_operations_not_drawn"] = undrawn
    return other


def tail(others: Iterable[dict]) -> bytes:
    """The end of a JSON file of the events of traces whose otherData are
    ``others`` (other_data)."""
    return f'\n],"otherData":{json.dumps(other_data(others))}}}\n'.encode()
