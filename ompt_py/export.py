"""Exporting a Trace: Perfetto / Chrome trace JSON, CSV and Parquet.

Every exporter streams: rows are formatted and written in batches of
``BATCH_ROWS`` (Parquet: row groups of ``ROW_GROUP_ROWS``), the text built a
whole column at a time with pyarrow's compute kernels (one ``json.dumps`` per
distinct string, never one per row) by a thread per processor, a few batches
ahead of the writer.  So the memory an export adds to the trace is a few
batches (and, for Perfetto, the paired tables it is made from, which the
trace keeps).  On a terminal (stderr) a progress bar shows how far it is.

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
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import analysis
from ._records import RAW_FIELDS
from .trace import _EVENT_NAMES, _KIND_NAMES, FORMAT, PARQUET_KEY, _kind_keys, _loaded, _totals

if TYPE_CHECKING:
    from .trace import Trace

FORMATS = ("perfetto", "csv", "parquet")
BATCH_ROWS = 1 << 16  # rows of text formatted at a time
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
    most MAX_THREADS; the formatting kernels release the GIL) with at most one
    job ahead per thread, so that only a few batches are in memory at once."""
    workers = min(len(os.sched_getaffinity(0)), MAX_THREADS)
    with ThreadPoolExecutor(workers) as pool:
        pending: deque = deque()
        for job in jobs:
            pending.append(pool.submit(job))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


# ---- JSON text, a column at a time -------------------------------------------------------


def _number(values: Any) -> pa.Array:
    """Integers or booleans as JSON numbers/literals; missing values as null."""
    arr = pa.array(values, from_pandas=True)
    if pa.types.is_floating(arr.type):  # whole numbers that a merge made floats
        arr = pc.cast(arr, pa.int64())
    return pc.fill_null(pc.cast(arr, pa.string()), "null")


def _micros(ns: Any) -> pa.Array:
    """Nanoseconds as exact microseconds with three decimals: 1234567 -> 1234.567."""
    ns = np.asarray(ns, dtype=np.int64)
    mag = np.abs(ns)
    text = pc.binary_join_element_wise(
        _number(mag // 1000), ".", pc.utf8_lpad(_number(mag % 1000), 3, "0"), "")
    negative = ns < 0
    if negative.any():
        text = pc.if_else(pa.array(negative), pc.binary_join_element_wise("-", text, ""), text)
    return text


def _literals(values: Any, render: Callable[[Any], str]) -> pa.Array:
    """``render`` applied once per distinct value; missing values as null."""
    codes, uniques = pd.factorize(pd.Series(values))
    table = pa.array([*(render(u) for u in uniques), "null"])
    return table.take(pa.array(np.where(codes < 0, len(uniques), codes)))


def _string(values: Any) -> pa.Array:
    return _literals(values, lambda v: json.dumps(str(v)))


def _hex(values: Any) -> pa.Array:
    return _literals(values, lambda v: f'"{int(v):#x}"')


def _join(parts: Sequence[str | pa.Array]) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


class _ArrayWriter:
    """Writes JSON values, each already prefixed with ``_SEP``, as the elements of
    one array: the text of a batch goes out as the string column's data buffer."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.first = True

    def write(self, texts: pa.Array) -> None:
        if len(texts) == 0:
            return
        assert texts.null_count == 0, "a JSON value with a missing part"
        width = np.int64 if pa.types.is_large_string(texts.type) else np.int32
        offsets = np.frombuffer(texts.buffers()[1], dtype=width, count=len(texts) + 1,
                                offset=np.dtype(width).itemsize * texts.offset)
        data = memoryview(texts.buffers()[2])[offsets[0]:offsets[-1]]
        if self.first:
            data = data[len(_SEP):]
            self.first = False
        self.out.write(data)


# ---- Perfetto ---------------------------------------------------------------------------


@dataclass
class _Slices:
    """Complete slices from the rows of one paired table."""

    cat: str
    rows: pd.DataFrame
    begin: str
    end: str
    thread: str = "thread"
    name: str | None = None  # a constant name, else the `kind` column's value and `suffix`
    suffix: str = ""
    args: list[tuple[str, str, Callable[[Any], pa.Array]]] = field(default_factory=list)

    def texts(self, part: slice) -> pa.Array:
        rows = self.rows.iloc[part]
        begin = rows[self.begin].to_numpy(np.int64)
        end = rows[self.end].to_numpy(np.int64)
        name = json.dumps(self.name) if self.name else _literals(
            rows["kind"], lambda kind: json.dumps(f"{kind}{self.suffix}"))
        parts: list[str | pa.Array] = [
            f'{_SEP}{{"ph":"X","cat":"{self.cat}","name":', name,
            ',"pid":', _number(rows["pid"].to_numpy()),
            ',"tid":', _number(rows[self.thread].to_numpy()),
            ',"ts":', _micros(begin), ',"dur":', _micros(end - begin), ',"args":{']
        for i, (key, column, render) in enumerate(self.args):
            parts += [f'{"," if i else ""}"{key}":', render(rows[column])]
        parts.append("}}")
        return _join(parts)


def _complete(rows: pd.DataFrame, begin: str, end: str) -> pd.DataFrame:
    """Rows with both times (outer merges leave some without), as integers."""
    rows = rows[rows[begin].notna() & rows[end].notna()]
    return rows.astype({begin: np.int64, end: np.int64})


class _Tables:
    """The paired tables a Perfetto file is made of, made in file order by one
    background thread (those the trace caches are made once per trace): while it
    makes the next table (pandas, mostly holding the GIL), the slices of the
    previous ones are formatted (pyarrow kernels, without the GIL) and written."""

    ORDER = ("user", "implicit", "regions", "work", "sync", "waits", "tasks", "mutex")

    def __init__(self, trace: Trace, pool: ThreadPoolExecutor) -> None:
        make: dict[str, Callable[[], Any]] = {
            "user": trace.user_regions, "implicit": trace.implicit_tasks,
            "regions": trace.parallel_regions, "work": trace.work, "sync": trace.sync,
            "waits": lambda: trace._paired("waits").table, "tasks": lambda: _task_spans(trace),
            "mutex": trace.mutex}
        self._made = {name: pool.submit(make[name]) for name in self.ORDER}

    def __getattr__(self, name: str) -> Any:
        """A table (``spans``, ``flows``: explicit tasks per thread and their flows,
        see _task_spans), once made."""
        if name in ("spans", "flows"):
            return self._made["tasks"].result()[name == "flows"]
        if name not in self.ORDER:
            raise AttributeError(name)
        return self._made[name].result()


def _slice_sources(tables: _Tables) -> Iterator[_Slices]:
    """The slices of every track, parents before children (the order that keeps
    slices starting at the same nanosecond nested the right way); each source
    once its table is made."""
    ids = [("parallel_id", "parallel_id", _number)]
    implicit_args = [("task_id", "task_id", _number), *ids,
                     ("thread_num", "thread_num", _number), ("team_size", "team_size", _number)]
    source = [("codeptr", "codeptr", _hex), ("location", "location", _string)]
    mutex_args = [("wait_id", "wait_id", _hex), ("codeptr", "codeptr", _hex)]
    user = tables.user
    yield _Slices("user_region", user.assign(kind=user["name"].fillna("(unnamed)")),
                  "begin_ns", "end_ns", args=[("id", "id", _number), ("level", "level", _number),
                                              ("codeptr", "codeptr", _hex)])
    implicit = tables.implicit
    initial = (implicit["flags"].fillna(0).astype(np.int64) & 1).astype(bool).to_numpy()
    yield _Slices("implicit_task", implicit[initial], "begin_ns", "end_ns", name="initial task",
                  args=[("task_id", "task_id", _number)])
    regions = tables.regions
    yield _Slices("parallel", regions.assign(kind=pd.Categorical.from_codes(
                      regions["league"].to_numpy(np.int8), ["parallel region", "teams"])),
                  "begin_ns", "end_ns", thread="encountering_thread",
                  args=[*ids, ("parent_id", "parent_id", _number), ("level", "level", _number),
                        ("team_size", "team_size", _number),
                        ("requested_team_size", "requested_team_size", _number),
                        ("invoker", "invoker", _string), *source])
    yield _Slices("implicit_task", implicit[~initial], "begin_ns", "end_ns",
                  name="implicit task", args=implicit_args)
    yield _Slices("work", tables.work, "begin_ns", "end_ns",
                  args=[("kind_raw", "kind_raw", _string), ("count", "count", _number), *ids,
                        *source])
    yield _Slices("sync", tables.sync, "begin_ns", "end_ns",
                  args=[("kind_raw", "kind_raw", _string), ("wait_ns", "wait_ns", _number), *ids,
                        ("task_id", "task_id", _number), ("codeptr", "codeptr", _hex)])
    yield _Slices("sync_wait", tables.waits, "begin_ns", "end_ns", suffix=" wait", args=ids)
    yield _Slices("task", tables.spans, "begin_ns", "end_ns", name="task",
                  args=[("task_id", "task_id", _number), ("pieces", "pieces", _number)])
    mutex = tables.mutex
    yield _Slices("mutex_wait", _complete(mutex, "acquire_ns", "acquired_ns"),
                  "acquire_ns", "acquired_ns", suffix=" wait", args=mutex_args)
    yield _Slices("mutex", _complete(mutex, "acquired_ns", "released_ns"),
                  "acquired_ns", "released_ns", args=mutex_args)


def _task_spans(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per thread that ran it, each explicit task from its first start to the end of
    its last piece there (what nests on a thread's stack), and the flows: from each
    task's creation (pid, creator thread, created_ns) to its first start (thread,
    begin_ns)."""
    frame = trace._events_frame()
    runs = analysis.task_executions(frame)
    keys = ["pid", "thread", "task_id"]
    spans = runs.groupby(keys, sort=False).agg(
        begin_ns=("begin_ns", "min"), end_ns=("end_ns", "max"),
        pieces=("begin_ns", "size")).reset_index()
    first = spans.sort_values("begin_ns", kind="stable").drop_duplicates(["pid", "task_id"])
    created = frame.loc[frame["event"] == "task_create", ["pid", "thread", "time_ns", "task_id"]]
    flows = created.rename(columns={"thread": "creator_thread", "time_ns": "created_ns"}).merge(
        first[["pid", "task_id", "thread", "begin_ns"]], on=["pid", "task_id"])
    return spans.sort_values("begin_ns", kind="stable"), flows


def _flow_texts(flows: pd.DataFrame, part: slice) -> pa.Array:
    """A flow per task (ids 1, 2, ...): its start, then its finish."""
    rows = flows.iloc[part]
    ids = _number(np.arange(part.start, part.stop) + 1)
    pid = _number(rows["pid"].to_numpy())
    start = _join([f'{_SEP}{{"ph":"s","cat":"task","name":"task","id":', ids, ',"pid":', pid,
                   ',"tid":', _number(rows["creator_thread"].to_numpy()),
                   ',"ts":', _micros(rows["created_ns"]), "}"])
    finish = _join([f'{_SEP}{{"ph":"f","bp":"e","cat":"task","name":"task","id":', ids,
                    ',"pid":', pid, ',"tid":', _number(rows["thread"].to_numpy()),
                    ',"ts":', _micros(rows["begin_ns"]), "}"])
    return pa.concat_arrays([start, finish])


def _waiting(waits: pd.DataFrame, mutex: pd.DataFrame) -> pd.DataFrame:
    """Per process and time, how many threads wait in sync regions and for mutexes."""
    mutex = _complete(mutex, "acquire_ns", "acquired_ns")
    pid, ts, steps = [], [], []
    for column, (rows, begin, end) in enumerate(((waits, "begin_ns", "end_ns"),
                                                 (mutex, "acquire_ns", "acquired_ns"))):
        for when, step in ((begin, 1), (end, -1)):
            pid.append(rows["pid"].to_numpy(np.int64))
            ts.append(rows[when].to_numpy(np.int64))
            one = np.zeros((len(rows), 2), np.int64)
            one[:, column] = step
            steps.append(one)
    pids, times = np.concatenate(pid), np.concatenate(ts)
    # By process, then time (stable): a radix sort of the few process numbers
    # after the time sort is much faster than a lexsort of both.
    order = np.argsort(times, kind="stable")
    process = pd.factorize(pids[order], sort=True)[0].astype(np.int32)
    order = order[np.argsort(process, kind="stable")]
    pids, times = pids[order], times[order]
    # Every wait adds 1 and removes 1 within its process, so a running sum over the
    # rows sorted by process starts each process at 0.
    counts = np.concatenate(steps)[order].cumsum(axis=0)
    last = np.ones(len(pids), bool)  # the count after the last change at each time
    last[:-1] = (pids[1:] != pids[:-1]) | (times[1:] != times[:-1])
    return pd.DataFrame({"pid": pids[last], "ts": times[last], "sync": counts[last, 0],
                         "mutex": counts[last, 1]})


def _counter_texts(counts: pd.DataFrame, part: slice) -> pa.Array:
    rows = counts.iloc[part]
    return _join([f'{_SEP}{{"ph":"C","name":"threads waiting","pid":',
                  _number(rows["pid"].to_numpy()), ',"ts":', _micros(rows["ts"]),
                  ',"args":{"sync":', _number(rows["sync"].to_numpy()),
                  ',"mutex":', _number(rows["mutex"].to_numpy()), "}}"])


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
    seen = pd.unique(trace.pids.astype(np.int64) << 32 | ev["thread"].astype(np.int64))
    threads: dict[int, set[int]] = {pid: set() for pid in procs}
    for key in seen.tolist():
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


def _perfetto_jobs(tables: _Tables, progress: _Progress) -> Iterator[Callable[[], pa.Array]]:
    """The formatting jobs of the file's events, in file order (the progress bar's
    total grows as the tables are made)."""
    for source in _slice_sources(tables):
        progress.grow(len(source.rows))
        yield from (lambda s=source, p=part: s.texts(p) for part in _batches(len(source.rows)))
    flows = tables.flows
    progress.grow(2 * len(flows))
    yield from (lambda p=part: _flow_texts(flows, p) for part in _batches(len(flows)))
    counts = _waiting(tables.waits, tables.mutex)
    progress.grow(len(counts))
    yield from (lambda p=part: _counter_texts(counts, p) for part in _batches(len(counts)))


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


def to_perfetto(trace: Trace, path: str | os.PathLike) -> None:
    """Writes ``trace`` as a Perfetto / Chrome trace (JSON Trace Event Format)."""
    other = {"producer": "ompt-py", "clock": "CLOCK_MONOTONIC, from origin_mono_ns",
             "origin_mono_ns": trace.meta.get("origin_mono_ns")}
    with ExitStack() as stack:
        maker = stack.enter_context(ThreadPoolExecutor(1))
        out = stack.enter_context(_output(path))
        progress = stack.enter_context(_Progress(0, "perfetto"))
        tables = _Tables(trace, maker)
        stack.callback(maker.shutdown, cancel_futures=True)  # on an error: no more tables
        out.write(f'{{"otherData":{json.dumps(other)},"traceEvents":[\n'.encode())
        writer = _ArrayWriter(out)
        writer.write(pa.array([_SEP + json.dumps(m) for m in _metadata(trace)], pa.string()))
        for texts in _in_order(_perfetto_jobs(tables, progress)):
            writer.write(texts)
            progress.update(len(texts))
        out.write(b"\n]}\n")


# ---- CSV ----------------------------------------------------------------------------------


def _csv_text(trace: Trace, rows: np.ndarray, header: bool) -> pa.Buffer:
    """The CSV text of some rows of ``trace.events`` (in time order), as they are
    in ``trace.to_pandas()``."""
    import pyarrow.csv as pa_csv

    piece = _loaded([trace.events[rows]], [], trace.meta)
    piece._pids = trace.pids[rows]
    table = pa.Table.from_pandas(piece.to_pandas(), preserve_index=False)
    # Columns without a value in these rows (most event arguments) as null columns:
    # the same empty fields, written without formatting any number.
    table = pa.table([pa.nulls(len(c)) if c.null_count == len(c) else c for c in table.columns],
                     names=table.column_names)
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(table, sink, pa_csv.WriteOptions(include_header=header))
    return sink.getvalue()


def to_csv(trace: Trace, path: str | os.PathLike) -> None:
    """Writes one CSV row per event, the columns and row order of ``to_pandas()``,
    without building the whole frame: the rows go in time order, a batch at a time."""
    order = np.argsort(trace.events["time_ns"], kind="stable")
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
