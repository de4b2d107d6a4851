"""Exporting a Trace: Perfetto / Chrome trace JSON, CSV and Parquet.

Every exporter streams: rows are formatted and written in batches of
``BATCH_ROWS`` (Parquet: row groups of ``ROW_GROUP_ROWS``) by a thread per
processor, a few batches ahead of the writer.  The text of a batch is written
in C (``_core.format_rows``: a template whose holes take a column each of
numbers, times, addresses or names, one ``json.dumps`` per distinct name,
never one per row).  The Perfetto slices are made from the records, not from
the trace's tables: per kind of slice, the rows of its events are taken in
time order and paired in C as analysis.py pairs them (``_core.pair``), and
what a slice needs beyond its begin's record (its end, a region's parent and
level, the time waited in a barrier ...) is kept as a few integer arrays; the
rest is read from the records a batch at a time.  CSV makes ``to_pandas()``
of one batch at a time.  So the memory an export adds to the trace is a few
batches and, for Perfetto, those arrays (bench/export.py: about 0.45 times
the trace's records at 10^7 events).  On a terminal (stderr) a progress bar
shows how far it is.

``perfetto``: the JSON Trace Event Format that ui.perfetto.dev and
chrome://tracing open.  One process per pid (named after its command, and its
job rank when it had one), one track per thread ("thread 0 (initial)"),
complete slices ("ph": "X"; ts and dur in microseconds with three decimals,
i.e. exact nanoseconds) that nest on each track: user-code regions
(``ompt_py.region``, named by their names), the initial task, parallel
regions (on the encountering thread), implicit tasks, worksharing constructs
(named by kind: "loop", "single_executor", ...), barriers/taskwait/taskgroup
(by kind) and the waits inside them ("barrier_implicit wait", ...), explicit
tasks (from their first start to their last piece on each thread that ran
them: a task's children and waits nest inside it), lock/critical/ordered
waits ("critical wait") and holds ("critical").
Args carry ids, kinds, counts and, where the table has it, the source
location.  A flow arrow ("ph": "s" then "f" with "bp": "e", one id per task)
goes from each task's creation to its first execution, and a counter
("ph": "C") per process gives the number of threads waiting over time, in
barriers/taskwait/taskgroup ("sync") and for locks ("mutex").

``csv``: one row per event, the columns and order of ``Trace.to_pandas()``.

``parquet``: ``Trace.save`` (one file for a path ending in ``.parquet``,
else a dataset partitioned by process): the record fields as stored, plus the
``event_name`` and ``kind_name`` of each row and its process's ``rank`` (when
a process had one), for queries in DuckDB, polars or Dask.
"""

from __future__ import annotations

import json
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from . import _core, analysis
from ._records import EVENT_CODES, RAW_FIELDS
from .trace import (
    _EVENT_NAMES,
    _KIND_NAMES,
    _KIND_RAW_NAMES,
    FORMAT,
    PARQUET_KEY,
    _kind_keys,
    _loaded,
    _totals,
)

if TYPE_CHECKING:
    from .trace import Trace

FORMATS = ("perfetto", "csv", "parquet")
BATCH_ROWS = 1 << 15  # rows of text formatted at a time
ROW_GROUP_ROWS = 1 << 20  # rows per Parquet row group
MAX_THREADS = 4  # formatting batches at once
_SEP = ",\n"


def export(trace: Trace, path: str | os.PathLike, format: str) -> None:
    """Writes ``trace`` to ``path`` in ``format``, one of FORMATS."""
    writers = {"perfetto": to_perfetto, "csv": to_csv, "parquet": write_parquet}
    if format not in writers:
        raise ValueError(f"unknown export format {format!r}; use one of: {', '.join(FORMATS)}")
    writers[format](trace, path)


class _Progress:
    """A tqdm bar on stderr when stderr is a terminal; nothing otherwise."""

    def __init__(self, total: int, what: str) -> None:
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=what, unit=" rows", unit_scale=True,
                            file=sys.stderr, leave=False)

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def grow(self, n: int) -> None:
        """``n`` more rows to go (a total known as the work is made)."""
        if self.bar is not None:
            self.bar.total += n
            self.bar.refresh()

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


def _batches(n: int, size: int | None = None) -> Iterator[slice]:
    size = size or BATCH_ROWS
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _in_order(jobs: Iterable[Callable[[], Any]]) -> Iterator[Any]:
    """The results of ``jobs``, in order, computed by a thread per processor (at
    most MAX_THREADS; the formatting releases the GIL) with at most one job
    ahead per thread, so that only a few batches are in memory at once."""
    workers = min(len(os.sched_getaffinity(0)), MAX_THREADS)
    with ThreadPoolExecutor(workers) as pool:
        pending: deque = deque()
        for job in jobs:
            pending.append(pool.submit(job))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


@contextmanager
def _output(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A file that appears at ``path`` only once written whole: an export that
    fails half-way leaves nothing (and an older file at ``path`` as it was)."""
    partial = f"{os.fspath(path)}.partial"
    try:
        with open(partial, "wb") as out:
            yield out
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


# ---- rows of text, formatted in C --------------------------------------------------------

_NUMBER, _MICROS, _HEX, _TEXT = range(4)  # the kinds of _core.format_rows


class _Column(NamedTuple):
    """A column of ``_rows``: an integer array, and how to write it."""

    kind: int
    values: np.ndarray
    missing: np.ndarray | None = None  # True: the value is null
    table: tuple[bytes, ...] | None = None  # _TEXT: the text of each code


def _flags(missing: Any) -> np.ndarray | None:
    return None if missing is None else np.ascontiguousarray(missing, bool)


def _number(values: Any, missing: Any = None) -> _Column:
    return _Column(_NUMBER, np.ascontiguousarray(values), _flags(missing))


def _id(values: Any) -> _Column:
    """An id as to_pandas() has it (parallel_id, task_id): null where 0."""
    values = np.ascontiguousarray(values)
    return _Column(_NUMBER, values, values == 0)


def _micros(ns: Any) -> _Column:
    """Nanoseconds as exact microseconds with three decimals: 1234567 -> 1234.567."""
    return _Column(_MICROS, np.ascontiguousarray(ns, np.int64))


def _hex(values: Any, missing: Any = None) -> _Column:
    """A code address or wait id as a JSON string, "0x1f"."""
    return _Column(_HEX, np.ascontiguousarray(values), _flags(missing))


def _text(codes: Any, table: Iterable[str]) -> _Column:
    """``table[code]``, written as it is; null for a code outside the table (-1)."""
    return _Column(_TEXT, np.ascontiguousarray(codes), None, tuple(text.encode() for text in table))


def _rows(template: Sequence[str | _Column], null: bytes = b"null") -> bytes:
    """A row of text per row of the template's columns: the template's strings as
    they are, the columns' values between them (``null`` where missing)."""
    parts, columns, text = [], [], ""
    for piece in template:
        if isinstance(piece, str):
            text += piece
            continue
        parts.append(text.encode())
        text = ""
        columns.append((piece.kind, piece.values, piece.missing, null, piece.table))
    parts.append(text.encode())
    return _core.format_rows(tuple(parts), columns)


def _json_names(names: Iterable[Any], suffix: str = "") -> list[str]:
    return [json.dumps(f"{name}{suffix}") for name in names]


class _ArrayWriter:
    """Writes JSON values, each prefixed with ``_SEP``, as the elements of one array."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.first = True

    def write(self, text: bytes) -> None:
        if not text:
            return
        if self.first:
            text = memoryview(text)[len(_SEP):]
            self.first = False
        self.out.write(text)


# ---- Perfetto: the slices, from the records ------------------------------------------------

_BEGIN, _END = 1, 2  # endpoints


class _Records:
    """The records a Perfetto file is made of (``trace.events``), with the event
    number of each (one contiguous copy, to select by)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.ev = np.ascontiguousarray(trace.events)
        self.codes = np.ascontiguousarray(self.ev["event"])
        # One process: no pid column (nor key: it would be the same for all).
        self.pids = None if trace._single_pid() is not None else trace.pids

    def select(self, *events: str, scoped: bool = True) -> np.ndarray:
        """The rows of these events (``scoped``: only their begins and ends) in time
        order (stable: at equal times, in the order of the records)."""
        wanted = self.codes == EVENT_CODES[events[0]]
        for event in events[1:]:
            wanted |= self.codes == EVENT_CODES[event]
        rows = np.flatnonzero(wanted)
        del wanted
        if scoped:
            endpoint = self.ev["endpoint"][rows]
            rows = rows[(endpoint == _BEGIN) | (endpoint == _END)]
            del endpoint
        time = self.time(rows)
        order = np.argsort(time, kind="stable")
        del time
        return rows[order]

    def time(self, rows: np.ndarray) -> np.ndarray:
        return self.ev["time_ns"][rows]

    def pid(self, rows: np.ndarray | slice) -> np.ndarray:
        return self.trace._pids_at(rows)

    def field(self, name: str, rows: np.ndarray, missing_if_zero: bool = False,
              event: str | None = None) -> tuple:
        """A record field at ``rows`` as a key column (analysis.column); "kind_raw":
        the kind byte of ``event``, as to_pandas() names it."""
        if name != "kind_raw":
            return analysis.column(self.ev[name][rows], missing_if_zero)
        names = _KIND_RAW_NAMES.codes(_kind_keys(np.full(256, EVENT_CODES[event]), np.arange(256)))
        return analysis.column(self.ev["kind"][rows], table=names)

    def keys(self, rows: np.ndarray, *fields: str, missing_if_zero: bool = False,
             event: str | None = None) -> list[tuple]:
        """Key columns of the records at ``rows``: their pid, then ``fields``."""
        pid = [] if self.pids is None else [analysis.column(self.pids[rows])]
        return pid + [self.field(name, rows, missing_if_zero, event) for name in fields]

    def find(self, table: np.ndarray, query: np.ndarray, field: str,
             query_field: str | None = None) -> np.ndarray:
        """For each record of ``query`` (rows), the first of ``table`` with its pid and
        ``field`` (``query_field`` in the query's records), an id (0: none, which
        matches nothing); -1 where there is none (as analysis._find on to_pandas()
        columns)."""
        found = np.empty(len(query), np.intp)
        _core.find(self.keys(table, field, missing_if_zero=True),
                   self.keys(query, query_field or field, missing_if_zero=True), found)
        return found


@dataclass
class _Pairs:
    """Begin and end records paired as analysis pairs them, in the order of the
    begins: the begin's record (``rows``: positions in trace.events), the end's time."""

    rows: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, at: np.ndarray) -> _Pairs:
        return _Pairs(self.rows[at], self.end[at])


def _pair(rec: _Records, rows: np.ndarray, keys: list[tuple], is_begin: np.ndarray) -> _Pairs:
    """``rows`` (in time order) paired per key, as analysis._pair pairs them."""
    partner = np.empty(len(rows), np.intp)
    _core.pair(keys, analysis.column(is_begin), 1, partner)
    begins = np.flatnonzero(is_begin & (partner >= 0))
    return _Pairs(rows[begins], rec.time(rows[partner[begins]]))


def _scoped(rec: _Records, event: str, *keys: str) -> _Pairs:
    rows = rec.select(event)
    return _pair(rec, rows, rec.keys(rows, *keys, event=event), rec.ev["endpoint"][rows] == _BEGIN)


def _clamp(rec: _Records, pairs: _Pairs, regions: _Pairs) -> np.ndarray:
    """Moves ends reported after the end of their parallel region to it; returns
    the region of each pair (a row of ``regions``, -1 for none)."""
    region = rec.find(regions.rows, pairs.rows, "parallel_id")
    if len(regions):
        pairs.end = analysis.clamped_ends(pairs.end, region, regions.end)
    return region


def _optional(values: Any) -> _Column:
    """Integers that may be missing (a column of a pandas table) as numbers or null."""
    series = pd.Series(values)
    return _number(series.fillna(0).to_numpy(np.int64), series.isna().to_numpy())


class _Locations:
    """The source location of the code addresses of some records (Trace.symbolize),
    as JSON strings."""

    def __init__(self, rec: _Records, rows: np.ndarray) -> None:
        codeptrs = np.unique(rec.ev["codeptr"][rows])
        found = rec.trace.symbolize(codeptrs[codeptrs != 0])
        self.keys = [analysis.column(found["pid"].to_numpy(np.int32)),
                     analysis.column(found["codeptr"].to_numpy(np.uint64))]
        self.table = ["null" if pd.isna(loc) else json.dumps(str(loc))
                      for loc in found["location"]]

    def column(self, pid: np.ndarray, codeptr: np.ndarray) -> _Column:
        at = np.empty(len(codeptr), np.intp)
        _core.find(self.keys, [analysis.column(pid), analysis.column(codeptr)], at)
        return _text(at, self.table)


class _Source(NamedTuple):
    """``count`` rows of a table, whose events ``texts(part)`` writes a batch at a time."""

    count: int
    texts: Callable[[slice], bytes]


_Args = list[tuple[str, _Column]]


def _complete(cat: str, pid: Any, tid: Any, begin: Any, end: Any, name: str | _Column,
              args: _Args) -> bytes:
    """Complete slices ("ph": "X"); ``name``: one for all, or a column."""
    begin = np.asarray(begin, np.int64)
    template: list[str | _Column] = [
        f'{_SEP}{{"ph":"X","cat":"{cat}","name":',
        json.dumps(name) if isinstance(name, str) else name,
        ',"pid":', _number(pid), ',"tid":', _number(tid), ',"ts":', _micros(begin),
        ',"dur":', _micros(np.asarray(end, np.int64) - begin), ',"args":{']
    for i, (key, column) in enumerate(args):
        template += [f'{"," if i else ""}"{key}":', column]
    template.append("}}")
    return _rows(template)


def _slices(rec: _Records, cat: str, pairs: _Pairs,
            make: Callable[[np.ndarray, slice], tuple[str | _Column, _Args]]) -> _Source:
    """Slices of paired records, from the process, thread and time of the begin's
    record: ``make(records of the begins, part)`` gives the name and args of a batch."""
    def texts(part: slice) -> bytes:
        rows = pairs.rows[part]
        records = rec.ev[rows]
        return _complete(cat, rec.pid(rows), records["thread"], records["time_ns"],
                         pairs.end[part], *make(records, part))
    return _Source(len(pairs), texts)


def _user_slices(trace: Trace) -> _Source:
    """ompt_py.region markers, paired by Trace.user_regions."""
    user = trace.user_regions()

    def texts(part: slice) -> bytes:
        rows = user.iloc[part]
        codes, names = pd.factorize(rows["name"].fillna("(unnamed)"))
        return _complete("user_region", rows["pid"], rows["thread"], rows["begin_ns"],
                         rows["end_ns"], _text(codes, _json_names(names)),
                         [("id", _number(rows["id"])), ("level", _number(rows["level"])),
                          ("codeptr", _hex(rows["codeptr"]))])
    return _Source(len(user), texts)


def _codeptr(records: np.ndarray) -> _Column:
    return _hex(records["codeptr"], records["codeptr"] == 0)


def _kind(records: np.ndarray, suffix: str = "") -> _Column:
    """to_pandas()'s ``kind`` of each record (and ``suffix``)."""
    names = _KIND_NAMES.codes(_kind_keys(records["event"], records["kind"]))
    return _text(names, _json_names(_KIND_NAMES.categories, suffix))


def _kind_raw(records: np.ndarray) -> _Column:
    names = _KIND_RAW_NAMES.codes(_kind_keys(records["event"], records["kind"]))
    return _text(names, _json_names(_KIND_RAW_NAMES.categories))


def _regions(rec: _Records) -> _Pairs:
    rows = rec.select("parallel_begin", "parallel_end", scoped=False)
    return _pair(rec, rows, rec.keys(rows, "parallel_id"), rec.ev["endpoint"][rows] == _BEGIN)


def _parallel(rec: _Records, regions: _Pairs) -> Iterator[_Source]:
    """The slices of the initial tasks, the parallel ``regions`` and the implicit
    tasks (each of these tables needs the other)."""
    ev = rec.ev
    implicit = _scoped(rec, "implicit_task", "task_id")
    region_of = _clamp(rec, implicit, regions)
    parent, level, team = analysis.region_links(
        rec.find(implicit.rows, regions.rows, "task_id"), region_of,
        rec.find(regions.rows, regions.rows, "parallel_id"), ev["parallel_id"][regions.rows],
        pd.arrays.IntegerArray(ev["u32a"][implicit.rows], np.zeros(len(implicit), bool)))
    del region_of
    initial = (ev["u32b"][implicit.rows] & 1).astype(bool)  # flags: the initial task
    locations = _Locations(rec, regions.rows)
    yield _slices(rec, "implicit_task", implicit.take(np.flatnonzero(initial)),
                  lambda r, part: ("initial task", [("task_id", _id(r["task_id"]))]))

    def region(r: np.ndarray, part: slice) -> tuple[_Column, _Args]:
        flags = r["u32b"]
        invoker = np.where(flags & 1, 0, np.where(flags & 2, 1, 2))
        return (_text((flags & 0x40000000) != 0, _json_names(["parallel region", "teams"])),
                [("parallel_id", _id(r["parallel_id"])),
                 ("parent_id", _number(parent[part].to_numpy(np.uint64, na_value=0),
                                     parent[part].isna())),
                 ("level", _number(level[part])), ("team_size", _optional(team[part])),
                 ("requested_team_size", _number(r["u32a"])),
                 ("invoker", _text(invoker, _json_names(["program", "runtime", "unknown"]))),
                 ("codeptr", _codeptr(r)),
                 ("location", locations.column(rec.pid(regions.rows[part]), r["codeptr"]))])
    yield _slices(rec, "parallel", regions, region)
    yield _slices(rec, "implicit_task", implicit.take(np.flatnonzero(~initial)),
                  lambda r, part: ("implicit task", [
                      ("task_id", _id(r["task_id"])), ("parallel_id", _id(r["parallel_id"])),
                      ("thread_num", _number(r["u64a"])), ("team_size", _number(r["u32a"]))]))


def _work(rec: _Records) -> _Source:
    work = _scoped(rec, "work", "thread", "kind_raw")
    locations = _Locations(rec, work.rows)
    return _slices(rec, "work", work, lambda r, part: (_kind(r), [
        ("kind_raw", _kind_raw(r)), ("count", _number(r["u64a"])),
        ("parallel_id", _id(r["parallel_id"])), ("codeptr", _codeptr(r)),
        ("location", locations.column(rec.pid(work.rows[part]), r["codeptr"]))]))


def _sync(rec: _Records, regions: _Pairs) -> tuple[_Pairs, _Source, _Source]:
    """The waits in barriers, taskwait and taskgroup (the counter counts them too),
    and the slices of those sync regions and of the waits."""
    waits = _scoped(rec, "sync_region_wait", "thread", "kind_raw")
    _clamp(rec, waits, regions)
    sync = _scoped(rec, "sync_region", "thread", "kind_raw")
    _clamp(rec, sync, regions)
    wait_ns = analysis.waits_per_region(
        len(sync), rec.keys(sync.rows, "thread", "kind_raw", event="sync_region"),
        rec.field("time_ns", sync.rows),
        rec.keys(waits.rows, "thread", "kind_raw", event="sync_region_wait"),
        rec.field("time_ns", waits.rows), waits.end - rec.time(waits.rows))
    return (waits,
            _slices(rec, "sync", sync, lambda r, part: (_kind(r), [
                ("kind_raw", _kind_raw(r)), ("wait_ns", _number(wait_ns[part])),
                ("parallel_id", _id(r["parallel_id"])), ("task_id", _id(r["task_id"])),
                ("codeptr", _codeptr(r))])),
            _slices(rec, "sync_wait", waits, lambda r, part: (
                _kind(r, " wait"), [("parallel_id", _id(r["parallel_id"]))])))


def _tasks(rec: _Records) -> tuple[_Source, _Source]:
    """Per thread that ran it, each explicit task from its first start to the end of
    its last piece there (what nests on a thread's stack), and the flows: from each
    task's creation to its first start."""
    ev = rec.ev
    rows = rec.select("task_schedule", scoped=False)
    created = rec.select("task_create", scoped=False)
    explicit = ev["task_id"][created]
    run, nxt = analysis.task_runs(
        pd.DataFrame({"pid": rec.pid(rows), "thread": ev["thread"][rows]}, copy=False),
        ev["task_id"][rows], ev["u64a"][rows], explicit[explicit != 0])
    run, end = rows[run], rec.time(rows[nxt])
    del rows, nxt, explicit
    # Per (pid, thread, task), numbered in the order of their first pieces (the order
    # of their starts): the first piece's record, the last end, the pieces.
    ids = pd.factorize(analysis._group_ids(pd.DataFrame(
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

    def flows(part: slice) -> bytes:
        """A flow per task (ids 1, 2, ...): its start, then its finish."""
        rows, span = creation[part], spans.rows[to[part]]
        ids, pid = _number(np.arange(part.start, part.stop) + 1), _number(rec.pid(rows))
        return (_rows([f'{_SEP}{{"ph":"s","cat":"task","name":"task","id":', ids, ',"pid":', pid,
                       ',"tid":', _number(ev["thread"][rows]), ',"ts":', _micros(rec.time(rows)),
                       "}"])
                + _rows([f'{_SEP}{{"ph":"f","bp":"e","cat":"task","name":"task","id":', ids,
                         ',"pid":', pid, ',"tid":', _number(ev["thread"][span]),
                         ',"ts":', _micros(rec.time(span)), "}"]))
    return (_slices(rec, "task", spans, lambda r, part: (
                "task", [("task_id", _number(r["u64a"])), ("pieces", _number(pieces[part]))])),
            _Source(len(creation), flows))


def _mutex(rec: _Records) -> tuple[_Pairs, _Source, _Source]:
    """Lock, critical and ordered acquisitions as Trace.mutex() has them: the waits
    (acquire -> acquired; the counter counts them too), and the slices of the
    waits and of the holds (acquired -> released)."""
    ev = rec.ev

    def paired(opening: str, closing: str) -> _Pairs:
        rows = rec.select(opening, closing, scoped=False)
        return _pair(rec, rows, rec.keys(rows, "thread", "u64a"),  # u64a: the wait id
                     ev["event"][rows] == EVENT_CODES[opening])
    waits = paired("mutex_acquire", "mutex_acquired")
    holds = paired("mutex_acquired", "mutex_released")
    w, h = analysis.acquisitions(
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
    kind[has] = _KIND_NAMES.codes(_kind_keys(ev["event"][wait_of], ev["kind"][wait_of]))
    codeptr = np.zeros(len(held), np.uint64)
    codeptr[has] = ev["codeptr"][wait_of]
    del w, h, of_hold, has, wait_of
    return (waited,
            _slices(rec, "mutex_wait", waited, lambda r, part: (_kind(r, " wait"), [
                ("wait_id", _hex(r["u64a"])), ("codeptr", _codeptr(r))])),
            _slices(rec, "mutex", held, lambda r, part: (
                _text(kind[part], _json_names(_KIND_NAMES.categories)),
                [("wait_id", _hex(r["u64a"])),
                 ("codeptr", _hex(codeptr[part], codeptr[part] == 0))])))


def _waiting(rec: _Records, sync: _Pairs, mutex: _Pairs) -> _Source:
    """A counter per process and time: how many threads wait in sync regions and
    for mutexes, after each change."""
    # Every wait's begin and end, by process and time (stable): the begins and
    # ends of the sync waits, then those of the mutex waits.
    time = np.concatenate([rec.time(sync.rows), sync.end, rec.time(mutex.rows), mutex.end])
    order = np.argsort(time, kind="stable")
    time = time[order]
    pid = np.concatenate([rec.pid(sync.rows)] * 2 + [rec.pid(mutex.rows)] * 2)[order]
    if len(pid) and (pid != pid[0]).any():
        by_process = np.argsort(pid, kind="stable")
        order, time, pid = order[by_process], time[by_process], pid[by_process]
        del by_process
    # Every wait adds 1 and removes 1 within its process, so a running sum over the
    # rows sorted by process starts each process at 0.
    counts = []
    for start, n in ((0, len(sync)), (2 * len(sync), len(mutex))):
        begins = (order >= start) & (order < start + n)
        ends = (order >= start + n) & (order < start + 2 * n)
        counts.append(np.cumsum(begins.view(np.int8) - ends.view(np.int8), dtype=np.int32))
    del order, begins, ends
    last = np.ones(len(pid), bool)  # the counts after the last change at each time
    last[:-1] = (pid[1:] != pid[:-1]) | (time[1:] != time[:-1])
    pid, time, in_sync, in_mutex = pid[last], time[last], counts[0][last], counts[1][last]
    del counts, last

    def texts(part: slice) -> bytes:
        return _rows([f'{_SEP}{{"ph":"C","name":"threads waiting","pid":', _number(pid[part]),
                      ',"ts":', _micros(time[part]), ',"args":{"sync":', _number(in_sync[part]),
                      ',"mutex":', _number(in_mutex[part]), "}}"])
    return _Source(len(pid), texts)


def _process_name(proc: dict) -> str:
    argv = proc.get("argv") or [proc.get("exe") or "?"]
    command = " ".join([os.path.basename(argv[0]), *argv[1:]])
    if len(command) > 80:
        command = command[:77] + "..."
    return command if proc.get("rank") is None else f"rank {proc['rank']}: {command}"


def _metadata(trace: Trace) -> list[dict]:
    """process_name/thread_name (and sort indexes) of every process and thread."""
    procs = {p["pid"]: p for p in trace.meta.get("processes", [])}
    ev = trace.events
    threads: dict[int, set[int]] = {pid: set() for pid in procs}
    for part in _batches(len(ev), 1 << 20):
        pids = trace._pids_at(part).astype(np.int64)
        for key in pd.unique(pids << 32 | ev["thread"][part]).tolist():
            threads.setdefault(key >> 32, set()).add(key & 0xFFFFFFFF)
    out = []
    for i, pid in enumerate(sorted(threads)):
        proc = procs.get(pid, {})
        types = {th["thread"]: th["type"] for th in proc.get("threads", [])}
        rank = proc.get("rank")
        out += [{"ph": "M", "pid": pid, "name": "process_name",
                 "args": {"name": _process_name(proc) if proc else f"pid {pid}"}},
                {"ph": "M", "pid": pid, "name": "process_sort_index",
                 "args": {"sort_index": i if rank is None else rank}}]
        for thread in sorted(threads[pid] | set(types)):
            name = f"thread {thread}" + (f" ({types[thread]})" if thread in types else "")
            out += [{"ph": "M", "pid": pid, "tid": thread, "name": "thread_name",
                     "args": {"name": name}},
                    {"ph": "M", "pid": pid, "tid": thread, "name": "thread_sort_index",
                     "args": {"sort_index": thread}}]
    return out


def _perfetto_sources(trace: Trace) -> Iterator[_Source]:
    """The file's events after the metadata, in file order: the slices of every
    track, parents before children (the order that keeps slices starting at the
    same nanosecond nested the right way), the flows, the counter."""
    rec = _Records(trace)
    yield _user_slices(trace)
    regions = _regions(rec)
    yield from _parallel(rec, regions)
    yield _work(rec)
    waits, sync, sync_waits = _sync(rec, regions)
    del regions
    yield sync
    yield sync_waits
    spans, flows = _tasks(rec)
    yield spans
    mutex_waits, mutex_wait_slices, mutex_hold_slices = _mutex(rec)
    yield mutex_wait_slices
    yield mutex_hold_slices
    yield flows
    yield _waiting(rec, waits, mutex_waits)


def _perfetto_jobs(trace: Trace, progress: _Progress
                   ) -> Iterator[Callable[[], tuple[int, bytes]]]:
    """The formatting jobs of the file's events, in file order: each gives the rows
    it wrote and their text (the progress bar's total grows as the tables are made)."""
    for source in _perfetto_sources(trace):
        progress.grow(source.count)
        yield from (lambda s=source, p=part: (p.stop - p.start, s.texts(p))
                    for part in _batches(source.count))


def to_perfetto(trace: Trace, path: str | os.PathLike) -> None:
    """Writes ``trace`` as a Perfetto / Chrome trace (JSON Trace Event Format)."""
    other = {"producer": "ompt-py", "clock": "CLOCK_MONOTONIC, from origin_mono_ns",
             "origin_mono_ns": trace.meta.get("origin_mono_ns")}
    with _output(path) as out, _Progress(0, "perfetto") as progress:
        out.write(f'{{"otherData":{json.dumps(other)},"traceEvents":[\n'.encode())
        writer = _ArrayWriter(out)
        writer.write("".join(_SEP + json.dumps(m) for m in _metadata(trace)).encode())
        for rows, text in _in_order(_perfetto_jobs(trace, progress)):
            writer.write(text)
            progress.update(rows)
        out.write(b"\n]}\n")


# ---- CSV ----------------------------------------------------------------------------------


def _csv_column(values: pd.Series) -> _Column | None:
    """A column of to_pandas() as CSV fields: names quoted, numbers, missing values
    empty (None: every value is missing)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        names = ['"' + str(name).replace('"', '""') + '"' for name in values.cat.categories]
        return _text(values.cat.codes.to_numpy(), names)
    if not isinstance(values.dtype, pd.api.extensions.ExtensionDtype):
        return _number(values.to_numpy())
    missing = values.isna().to_numpy()
    if missing.all():
        return None
    return _number(values.to_numpy(values.dtype.numpy_dtype, na_value=0), missing)


def _csv_text(trace: Trace, rows: np.ndarray, header: bool) -> bytes:
    """The CSV text of some rows of ``trace.events`` (in time order), as they are
    in ``trace.to_pandas()``."""
    piece = _loaded([trace.events[rows]], [], trace.meta)
    piece._pids = trace._pids_at(rows)
    frame = piece.to_pandas()
    head = (",".join(f'"{name}"' for name in frame.columns) + "\n").encode() if header else b""
    if not len(frame):
        return head
    template: list[str | _Column] = []
    for i, name in enumerate(frame.columns):
        column = _csv_column(frame[name])
        template += ["," if i else "", "" if column is None else column]
    return head + _rows([*template, "\n"], null=b"")


def to_csv(trace: Trace, path: str | os.PathLike) -> None:
    """Writes one CSV row per event, the columns and row order of ``to_pandas()``,
    without building the whole frame: the rows go in time order, a batch at a time."""
    order = np.argsort(trace.events["time_ns"], kind="stable")
    trace._pids_at(order[:0])  # the pid column, if it needs one, made before the threads read it
    jobs = (lambda p=part: _csv_text(trace, order[p], header=p.start == 0)
            for part in _batches(max(len(order), 1)))
    with _output(path) as out, _Progress(len(order), "csv") as progress:
        for part, text in zip(_batches(max(len(order), 1)), _in_order(jobs)):
            out.write(text)
            progress.update(part.stop - part.start)


# ---- Parquet ------------------------------------------------------------------------------


def _arrow_rows(trace: Trace, rows: slice, with_pid: bool) -> pa.Table:
    """The Parquet columns of some rows of ``trace.events``."""
    ev = trace.events[rows]
    pids = trace.pids[rows]
    columns: dict[str, Any] = {"time_ns": ev["time_ns"]}
    if with_pid:
        columns["pid"] = pids
    for name, _ in RAW_FIELDS[1:]:
        columns[name] = np.ascontiguousarray(ev[name])
    codes = columns["event"]
    columns["event_name"] = pa.array(_EVENT_NAMES.categorical(codes))
    columns["kind_name"] = pa.array(_KIND_NAMES.categorical(_kind_keys(codes, columns["kind"])))
    ranks = trace._ranks(pids)
    if ranks is not None:
        columns["rank"] = pa.array(ranks)
    return pa.table(columns)


def _pid_runs(pids: np.ndarray) -> dict[int, list[slice]]:
    """Each process's runs of consecutive rows, in row order."""
    edges = np.flatnonzero(pids[1:] != pids[:-1]) + 1
    starts, stops = np.r_[0, edges], np.r_[edges, len(pids)]
    runs: dict[int, list[slice]] = {}
    for start, stop in zip(starts.tolist(), stops.tolist()):
        if stop > start:
            runs.setdefault(int(pids[start]), []).append(slice(start, stop))
    return runs


def _write_file(path: str, trace: Trace, runs: list[slice], meta: dict, with_pid: bool,
                progress: _Progress) -> None:
    import pyarrow.parquet as pq

    writer = None
    try:
        for run in runs or [slice(0, 0)]:
            for part in _batches(max(run.stop - run.start, 1), ROW_GROUP_ROWS):
                table = _arrow_rows(trace, slice(run.start + part.start, run.start + part.stop),
                                    with_pid)
                if writer is None:
                    schema = table.schema.with_metadata({PARQUET_KEY: json.dumps(meta).encode()})
                    writer = pq.ParquetWriter(path, schema, compression="zstd")
                writer.write_table(table)
                progress.update(table.num_rows)
    finally:
        if writer is not None:
            writer.close()


def write_parquet(trace: Trace, path: str | os.PathLike) -> None:
    """``Trace.save``: one file (a path ending in .parquet) or a dataset partitioned
    by process, ``path/pid=<pid>/part-0.parquet``."""
    path = os.fspath(path)
    with _Progress(len(trace), "parquet") as progress:
        if path.endswith(".parquet"):
            _write_file(path, trace, [slice(0, len(trace))], trace.meta, True, progress)
            return
        os.makedirs(path, exist_ok=True)
        runs = _pid_runs(trace.pids)
        for proc in trace.meta.get("processes", []):
            part_dir = os.path.join(path, f"pid={proc['pid']}")
            os.makedirs(part_dir, exist_ok=True)
            meta = _totals({"format": FORMAT, "origin_mono_ns": trace.meta.get("origin_mono_ns"),
                            "processes": [proc]})
            _write_file(os.path.join(part_dir, "part-0.parquet"), trace,
                        runs.get(proc["pid"], []), meta, False, progress)
