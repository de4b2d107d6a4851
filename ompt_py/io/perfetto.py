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
holds ("critical").  Args carry ids, kinds, counts and, where the table has
it, the source location.  A flow arrow ("ph": "s" then "f" with "bp": "e",
one id per task) goes from each task's creation to its first execution, and a
counter ("ph": "C") per process gives the number of threads waiting over
time, in barriers/taskwait/taskgroup ("sync") and for locks ("mutex").

The slices are made from the records, not from the trace's tables: per kind
of slice, the rows of its events are taken in time order and paired in C as
the tables pair them (ompt_py.pairing.pairing), and what a slice needs
beyond its begin's record (its end, a region's parent and level, the time
waited in a barrier ...) is kept as a few integer arrays; the rest is read
from the records a batch at a time.  So the memory the export adds to the
trace is a few batches and those arrays (bench/export.py: about 0.45 times
the trace's records at 10^7 events).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from .. import _core
from ..analysis import pairing, tables
from ..records import (
    EVENT_CODES,
    KIND_CATEGORIES,
    KIND_RAW_CATEGORIES,
    PARALLEL_INVOKER_PROGRAM,
    PARALLEL_INVOKER_RUNTIME,
    PARALLEL_LEAGUE,
    SCOPE_BEGIN,
    SCOPE_END,
    TASK_INITIAL,
    kind_keys,
)
from .streaming import (
    SEP,
    ArrayWriter,
    Column,
    Progress,
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
)

if TYPE_CHECKING:
    from ..trace import Trace

class _Records:
    """The records a Perfetto file is made of (``trace.events``), with the event
    number of each (one contiguous copy, to select by)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.ev = np.ascontiguousarray(trace.events)
        self.codes = np.ascontiguousarray(self.ev["event"])
        # One process: no pid column (nor key: it would be the same for all).
        self.pids = None if trace.single_pid is not None else trace.pids

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
            rows = rows[(endpoint == SCOPE_BEGIN) | (endpoint == SCOPE_END)]
            del endpoint
        time = self.time(rows)
        order = np.argsort(time, kind="stable")
        del time
        return rows[order]

    def time(self, rows: np.ndarray) -> np.ndarray:
        return self.ev["time_ns"][rows]

    def pid(self, rows: np.ndarray | slice) -> np.ndarray:
        return self.trace.pids_at(rows)

    def field(self, name: str, rows: np.ndarray, missing_if_zero: bool = False,
              event: str | None = None) -> tuple:
        """A record field at ``rows`` as a key column (pairing.column); "kind_raw":
        the kind byte of ``event``, as to_pandas() names it."""
        if name != "kind_raw":
            return pairing.column(self.ev[name][rows], missing_if_zero)
        names = KIND_RAW_CATEGORIES.codes(kind_keys(np.full(256, EVENT_CODES[event]),
                                                    np.arange(256)))
        return pairing.column(self.ev["kind"][rows], table=names)

    def keys(self, rows: np.ndarray, *fields: str, missing_if_zero: bool = False,
             event: str | None = None) -> list[tuple]:
        """Key columns of the records at ``rows``: their pid, then ``fields``."""
        pid = [] if self.pids is None else [pairing.column(self.pids[rows])]
        return pid + [self.field(name, rows, missing_if_zero, event) for name in fields]

    def find(self, table: np.ndarray, query: np.ndarray, field: str,
             query_field: str | None = None) -> np.ndarray:
        """For each record of ``query`` (rows), the first of ``table`` with its pid and
        ``field`` (``query_field`` in the query's records), an id (0: none, which
        matches nothing); -1 where there is none (as pairing.find on to_pandas()
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
    """``rows`` (in time order) paired per key, as the tables pair them."""
    found = pairing.pair(keys, is_begin)
    return _Pairs(rows[found.begins], rec.time(rows[found.ends]))


def _scoped(rec: _Records, event: str, *keys: str) -> _Pairs:
    rows = rec.select(event)
    return _pair(rec, rows, rec.keys(rows, *keys, event=event),
                 rec.ev["endpoint"][rows] == SCOPE_BEGIN)


def _clamp(rec: _Records, pairs: _Pairs, regions: _Pairs) -> np.ndarray:
    """Moves ends reported after the end of their parallel region to it; returns
    the region of each pair (a row of ``regions``, -1 for none)."""
    region = rec.find(regions.rows, pairs.rows, "parallel_id")
    if len(regions):
        pairs.end = pairing.clamped_ends(pairs.end, region, regions.end)
    return region


def _optional(values: Any) -> Column:
    """Integers that may be missing (a column of a pandas table) as numbers or null."""
    series = pd.Series(values)
    return number(series.fillna(0).to_numpy(np.int64), series.isna().to_numpy())


class _Locations:
    """The source location of the code addresses of some records (Trace.symbolize),
    as JSON strings."""

    def __init__(self, rec: _Records, rows: np.ndarray) -> None:
        codeptrs = np.unique(rec.ev["codeptr"][rows])
        found = tables.symbolize(rec.trace, codeptrs[codeptrs != 0])
        self.keys = [pairing.column(found["pid"].to_numpy(np.int32)),
                     pairing.column(found["codeptr"].to_numpy(np.uint64))]
        self.table = ["null" if pd.isna(loc) else json.dumps(str(loc))
                      for loc in found["location"]]

    def column(self, pid: np.ndarray, codeptr: np.ndarray) -> Column:
        at = np.empty(len(codeptr), np.intp)
        _core.find(self.keys, [pairing.column(pid), pairing.column(codeptr)], at)
        return named(at, self.table)


class _Source(NamedTuple):
    """``count`` rows of a table, whose events ``texts(part)`` writes a batch at a time."""

    count: int
    texts: Callable[[slice], bytes]


_Args = list[tuple[str, Column]]


def _complete(cat: str, pid: Any, tid: Any, begin: Any, end: Any, name: str | Column,
              args: _Args) -> bytes:
    """Complete slices ("ph": "X"); ``name``: one for all, or a column."""
    begin = np.asarray(begin, np.int64)
    template: list[str | Column] = [
        f'{SEP}{{"ph":"X","cat":"{cat}","name":',
        json.dumps(name) if isinstance(name, str) else name,
        ',"pid":', number(pid), ',"tid":', number(tid), ',"ts":', micros(begin),
        ',"dur":', micros(np.asarray(end, np.int64) - begin), ',"args":{']
    for i, (key, column) in enumerate(args):
        template += [f'{"," if i else ""}"{key}":', column]
    template.append("}}")
    return render_rows(template)


def _slices(rec: _Records, cat: str, pairs: _Pairs,
            make: Callable[[np.ndarray, slice], tuple[str | Column, _Args]]) -> _Source:
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
    user = tables.user_regions(trace)

    def texts(part: slice) -> bytes:
        rows = user.iloc[part]
        codes, names = pd.factorize(rows["name"].fillna("(unnamed)"))
        return _complete("user_region", rows["pid"], rows["thread"], rows["begin_ns"],
                         rows["end_ns"], named(codes, json_names(names)),
                         [("id", number(rows["id"])), ("level", number(rows["level"])),
                          ("codeptr", hexadecimal(rows["codeptr"]))])
    return _Source(len(user), texts)


def _codeptr(records: np.ndarray) -> Column:
    return hexadecimal(records["codeptr"], records["codeptr"] == 0)


def _kind(records: np.ndarray, suffix: str = "") -> Column:
    """to_pandas()'s ``kind`` of each record (and ``suffix``)."""
    names = KIND_CATEGORIES.codes(kind_keys(records["event"], records["kind"]))
    return named(names, json_names(KIND_CATEGORIES.categories, suffix))


def _kind_raw(records: np.ndarray) -> Column:
    names = KIND_RAW_CATEGORIES.codes(kind_keys(records["event"], records["kind"]))
    return named(names, json_names(KIND_RAW_CATEGORIES.categories))


def _regions(rec: _Records) -> _Pairs:
    rows = rec.select("parallel_begin", "parallel_end", scoped=False)
    return _pair(rec, rows, rec.keys(rows, "parallel_id"),
                 rec.ev["endpoint"][rows] == SCOPE_BEGIN)


def _parallel(rec: _Records, regions: _Pairs) -> Iterator[_Source]:
    """The slices of the initial tasks, the parallel ``regions`` and the implicit
    tasks (each of these tables needs the other)."""
    ev = rec.ev
    implicit = _scoped(rec, "implicit_task", "task_id")
    region_of = _clamp(rec, implicit, regions)
    parent, level, team = pairing.region_links(
        rec.find(implicit.rows, regions.rows, "task_id"), region_of,
        rec.find(regions.rows, regions.rows, "parallel_id"), ev["parallel_id"][regions.rows],
        pd.arrays.IntegerArray(ev["u32a"][implicit.rows], np.zeros(len(implicit), bool)))
    del region_of
    initial = (ev["u32b"][implicit.rows] & TASK_INITIAL).astype(bool)  # u32b: flags
    locations = _Locations(rec, regions.rows)
    yield _slices(rec, "implicit_task", implicit.take(np.flatnonzero(initial)),
                  lambda r, part: ("initial task", [("task_id", ident(r["task_id"]))]))

    def region(r: np.ndarray, part: slice) -> tuple[Column, _Args]:
        flags = r["u32b"]
        invoker = np.where(flags & PARALLEL_INVOKER_PROGRAM, 0,
                           np.where(flags & PARALLEL_INVOKER_RUNTIME, 1, 2))
        return (named((flags & PARALLEL_LEAGUE) != 0, json_names(["parallel region", "teams"])),
                [("parallel_id", ident(r["parallel_id"])),
                 ("parent_id", number(parent[part].to_numpy(np.uint64, na_value=0),
                                     parent[part].isna())),
                 ("level", number(level[part])), ("team_size", _optional(team[part])),
                 ("requested_team_size", number(r["u32a"])),
                 ("invoker", named(invoker, json_names(["program", "runtime", "unknown"]))),
                 ("codeptr", _codeptr(r)),
                 ("location", locations.column(rec.pid(regions.rows[part]), r["codeptr"]))])
    yield _slices(rec, "parallel", regions, region)
    yield _slices(rec, "implicit_task", implicit.take(np.flatnonzero(~initial)),
                  lambda r, part: ("implicit task", [
                      ("task_id", ident(r["task_id"])), ("parallel_id", ident(r["parallel_id"])),
                      ("thread_num", number(r["u64a"])), ("team_size", number(r["u32a"]))]))


def _work(rec: _Records) -> _Source:
    work = _scoped(rec, "work", "thread", "kind_raw")
    locations = _Locations(rec, work.rows)
    return _slices(rec, "work", work, lambda r, part: (_kind(r), [
        ("kind_raw", _kind_raw(r)), ("count", number(r["u64a"])),
        ("parallel_id", ident(r["parallel_id"])), ("codeptr", _codeptr(r)),
        ("location", locations.column(rec.pid(work.rows[part]), r["codeptr"]))]))


def _sync(rec: _Records, regions: _Pairs) -> tuple[_Pairs, _Source, _Source]:
    """The waits in barriers, taskwait and taskgroup (the counter counts them too),
    and the slices of those sync regions and of the waits."""
    waits = _scoped(rec, "sync_region_wait", "thread", "kind_raw")
    _clamp(rec, waits, regions)
    sync = _scoped(rec, "sync_region", "thread", "kind_raw")
    _clamp(rec, sync, regions)
    wait_ns = pairing.waits_per_region(
        len(sync), rec.keys(sync.rows, "thread", "kind_raw", event="sync_region"),
        rec.field("time_ns", sync.rows),
        rec.keys(waits.rows, "thread", "kind_raw", event="sync_region_wait"),
        rec.field("time_ns", waits.rows), waits.end - rec.time(waits.rows))
    return (waits,
            _slices(rec, "sync", sync, lambda r, part: (_kind(r), [
                ("kind_raw", _kind_raw(r)), ("wait_ns", number(wait_ns[part])),
                ("parallel_id", ident(r["parallel_id"])), ("task_id", ident(r["task_id"])),
                ("codeptr", _codeptr(r))])),
            _slices(rec, "sync_wait", waits, lambda r, part: (
                _kind(r, " wait"), [("parallel_id", ident(r["parallel_id"]))])))


def _tasks(rec: _Records) -> tuple[_Source, _Source]:
    """Per thread that ran it, each explicit task from its first start to the end of
    its last piece there (what nests on a thread's stack), and the flows: from each
    task's creation to its first start."""
    ev = rec.ev
    rows = rec.select("task_schedule", scoped=False)
    created = rec.select("task_create", scoped=False)
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

    def flows(part: slice) -> bytes:
        """A flow per task (ids 1, 2, ...): its start, then its finish."""
        rows, span = creation[part], spans.rows[to[part]]
        ids, pid = number(np.arange(part.start, part.stop) + 1), number(rec.pid(rows))
        start = render_rows([f'{SEP}{{"ph":"s","cat":"task","name":"task","id":', ids,
                             ',"pid":', pid, ',"tid":', number(ev["thread"][rows]),
                             ',"ts":', micros(rec.time(rows)), "}"])
        finish = render_rows([f'{SEP}{{"ph":"f","bp":"e","cat":"task","name":"task","id":', ids,
                              ',"pid":', pid, ',"tid":', number(ev["thread"][span]),
                              ',"ts":', micros(rec.time(span)), "}"])
        return start + finish
    return (_slices(rec, "task", spans, lambda r, part: (
                "task", [("task_id", number(r["u64a"])), ("pieces", number(pieces[part]))])),
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
                named(kind[part], json_names(KIND_CATEGORIES.categories)),
                [("wait_id", hexadecimal(r["u64a"])),
                 ("codeptr", hexadecimal(codeptr[part], codeptr[part] == 0))])))


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
        return render_rows([f'{SEP}{{"ph":"C","name":"threads waiting","pid":',
                            number(pid[part]), ',"ts":', micros(time[part]),
                            ',"args":{"sync":', number(in_sync[part]),
                            ',"mutex":', number(in_mutex[part]), "}}"])
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
    for part in batches(len(ev), 1 << 20):
        pids = trace.pids_at(part).astype(np.int64)
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


def _perfetto_jobs(trace: Trace, progress: Progress
                   ) -> Iterator[Callable[[], tuple[int, bytes]]]:
    """The formatting jobs of the file's events, in file order: each gives the rows
    it wrote and their text (the progress bar's total grows as the tables are made)."""
    for source in _perfetto_sources(trace):
        progress.grow(source.count)
        yield from (lambda s=source, p=part: (p.stop - p.start, s.texts(p))
                    for part in batches(source.count))


def write(trace: Trace, path: str | os.PathLike) -> None:
    """Writes ``trace`` as a Perfetto / Chrome trace (JSON Trace Event Format)."""
    other = {"producer": "ompt-py", "clock": "CLOCK_MONOTONIC, from origin_mono_ns",
             "origin_mono_ns": trace.meta.get("origin_mono_ns")}
    with output(path) as out, Progress(0, "perfetto") as progress:
        out.write(f'{{"otherData":{json.dumps(other)},"traceEvents":[\n'.encode())
        writer = ArrayWriter(out)
        writer.write("".join(SEP + json.dumps(m) for m in _metadata(trace)).encode())
        for rows, text in in_order(_perfetto_jobs(trace, progress)):
            writer.write(text)
            progress.update(rows)
        out.write(b"\n]}\n")

