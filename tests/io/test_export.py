"""Exports: Perfetto / Chrome trace JSON, CSV and Parquet (``Trace.to_perfetto``,
``to_csv``, ``save``; ``ompt-py export TRACE --format perfetto|csv|parquet -o OUT``).

Spec (README, "Exports" and "Several processes"): the Perfetto file is the JSON
Trace Event Format; one process per pid (process_name, with the job rank when
there is one), one track per thread ("thread N (type)"), complete slices
nested per track for the rows of the paired tables (parallel regions on the
encountering thread, implicit tasks, worksharing, sync regions and their
waits, explicit tasks, mutex waits and holds) with ts/dur in microseconds to
the nanosecond, one flow (s then f, bp "e") per executed task from its
creation to its first start, and a "threads waiting" counter per process.
CSV: the rows and columns of ``to_pandas()``.  An unknown format is an error
that lists the formats; an empty trace exports valid files.

The trace (stored: tests/data/export-mixed.parquet): ``ompt-py run`` over
tests/programs/mixed.c (nested tasks with taskwait, loops, critical sections and
a lock, a nested region) twice, the second process with a job rank, run to the
end so that everything pairs.  ``ompt-py run`` then ``ompt-py export`` live:
tests/live/test_end_to_end.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import cli, load_stored, no_traceback, ok, stored_path

import ompt_py
from ompt_py import _core
from ompt_py import io as export
from ompt_py.analysis import cache, tables
from ompt_py.io import csv as csv_export
from ompt_py.io import perfetto as perfetto_export
from ompt_py.io import streaming


def ns(us: float) -> int:
    """A Trace Event Format time (microseconds) back in nanoseconds."""
    return round(us * 1000)


@pytest.fixture(scope="module")
def trace_file():
    """``mixed 6`` and ``OMPI_COMM_WORLD_RANK=7 mixed 3`` under one ``ompt-py run``."""
    return stored_path("export-mixed")


@pytest.fixture(scope="module")
def trace(trace_file):
    return ompt_py.load(trace_file)


@pytest.fixture(scope="module")
def perfetto(trace, tmp_path_factory):
    path = tmp_path_factory.mktemp("perfetto") / "trace.json"
    trace.to_perfetto(path)
    with open(path) as f:
        return json.load(f)["traceEvents"]


def slices(events, cat):
    return [e for e in events if e["ph"] == "X" and e["cat"] == cat]


def by_key(rows, name):
    """Slices by (pid, args[name]): ids are unique within a process."""
    out = {}
    for r in rows:
        k = (r["pid"], r["args"][name])
        assert k not in out, f"two slices with (pid, {name}) = {k}"
        out[k] = r
    return out


# ---- Perfetto -----------------------------------------------------------------------------


def test_processes_and_threads_are_named(trace, perfetto):
    procs = {p["pid"]: p for p in trace.meta["processes"]}
    assert len(procs) == 2
    meta = [e for e in perfetto if e["ph"] == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert set(names) == set(procs)
    for pid, proc in procs.items():
        assert names[pid].endswith("mixed " + proc["argv"][1])
        if proc["rank"] is None:
            assert not names[pid].startswith("rank")
        else:
            assert proc["rank"] == 7 and names[pid].startswith("rank 7: ")
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    expected = {(pid, th["thread"]): f"thread {th['thread']} ({th['type']})"
                for pid, p in procs.items() for th in p["threads"]}
    assert threads == expected
    assert "thread 0 (initial)" in threads.values()
    # every slice is on a named track
    for e in perfetto:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in threads


@pytest.mark.pythons
def test_slices_are_the_paired_tables(trace, perfetto):
    df = trace.to_pandas()
    implicit = trace.implicit_tasks()
    mutex = trace.mutex()
    tasks = trace.tasks()
    counts = Counter(e["cat"] for e in perfetto if e["ph"] == "X")
    initial = (implicit["flags"] & 1).astype(bool)
    waits = ((df["event"] == "sync_region_wait") & (df["endpoint"] == "begin")).sum()
    assert counts == {
        "parallel": len(trace.parallel_regions()),
        "implicit_task": len(implicit),
        "work": len(trace.work()),
        "sync": len(trace.sync()),
        "sync_wait": waits,
        "task": len(tasks),  # tied tasks: each ran on one thread
        "mutex_wait": mutex["acquired_ns"].notna().sum(),
        "mutex": mutex["released_ns"].notna().sum(),
    }
    assert initial.sum() == 2  # one initial task per process
    for table in (trace.parallel_regions(), implicit, trace.work(), trace.sync()):
        assert table.attrs["unmatched_begins"] == table.attrs["unmatched_ends"] == 0
    # the program's constructs are all there
    assert counts["task"] == 3 * (6 + 3) and counts["parallel"] == 2 * 6  # nested: 1 + 2


def test_parallel_region_slices(trace, perfetto):
    got = by_key(slices(perfetto, "parallel"), "parallel_id")
    regions = trace.parallel_regions()
    assert len(got) == len(regions)
    for r in regions.itertuples():
        s = got[r.pid, r.parallel_id]
        assert s["name"] == "parallel region"
        assert (s["pid"], s["tid"]) == (r.pid, r.encountering_thread)
        assert (ns(s["ts"]), ns(s["dur"])) == (r.begin_ns, r.duration_ns)
        a = s["args"]
        assert a["level"] == r.level and a["team_size"] == r.team_size
        assert a["requested_team_size"] == r.requested_team_size
        assert a["parent_id"] == (None if pd.isna(r.parent_id) else r.parent_id)
        assert a["invoker"] == r.invoker
        assert int(a["codeptr"], 16) == r.codeptr
        assert a["location"] == r.location
    assert {s["args"]["level"] for s in got.values()} == {1, 2}  # the nested region


def test_implicit_work_sync_slices(trace, perfetto):
    got = by_key(slices(perfetto, "implicit_task"), "task_id")
    for r in trace.implicit_tasks().itertuples():
        s = got[r.pid, r.task_id]
        assert (s["pid"], s["tid"], ns(s["ts"]), ns(s["dur"])) == (
            r.pid, r.thread, r.begin_ns, r.duration_ns)
        assert s["name"] == ("initial task" if r.flags & 1 else "implicit task")
    work = sorted(slices(perfetto, "work"), key=lambda s: (s["pid"], s["tid"], s["ts"]))
    table = trace.work().sort_values(["pid", "thread", "begin_ns"])
    assert [(s["pid"], s["tid"], ns(s["ts"]), ns(s["dur"]), s["name"], s["args"]["kind_raw"],
             s["args"]["count"]) for s in work] == [
        (r.pid, r.thread, r.begin_ns, r.duration_ns, r.kind, r.kind_raw, r.count)
        for r in table.itertuples()]
    assert {"loop", "single_executor"} <= {s["name"] for s in work}
    sync = sorted(slices(perfetto, "sync"), key=lambda s: (s["pid"], s["tid"], s["ts"]))
    table = trace.sync().sort_values(["pid", "thread", "begin_ns"])
    assert [(s["pid"], s["tid"], ns(s["ts"]), ns(s["dur"]), s["name"], s["args"]["wait_ns"])
            for s in sync] == [(r.pid, r.thread, r.begin_ns, r.duration_ns, r.kind, r.wait_ns)
                               for r in table.itertuples()]
    assert "taskwait" in {s["name"] for s in sync}
    # a sync region's wait_ns is the time of the wait slices whose innermost sync
    # region it is (a taskwait in a task run inside a barrier has its own)
    waited = Counter()
    for w in slices(perfetto, "sync_wait"):
        holders = [i for i, s in enumerate(sync) if (s["pid"], s["tid"]) == (w["pid"], w["tid"])
                   and ns(s["ts"]) <= ns(w["ts"])
                   and ns(w["ts"]) + ns(w["dur"]) <= ns(s["ts"]) + ns(s["dur"])]
        innermost = max(holders, key=lambda i: ns(sync[i]["ts"]))
        assert w["name"] == sync[innermost]["name"] + " wait"
        waited[innermost] += ns(w["dur"])
    assert [waited[i] for i in range(len(sync))] == [s["args"]["wait_ns"] for s in sync]


def test_task_and_mutex_slices(trace, perfetto):
    got = by_key(slices(perfetto, "task"), "task_id")
    tasks = trace.tasks()
    for r in tasks.itertuples():
        s = got[r.pid, r.task_id]
        assert [s["tid"]] == r.threads
        assert (s["pid"], ns(s["ts"]), ns(s["ts"]) + ns(s["dur"])) == (
            r.pid, r.first_start_ns, r.end_ns)
        assert s["args"]["pieces"] == r.pieces
    mutex = trace.mutex()
    holds = sorted((s["pid"], s["tid"], ns(s["ts"]), ns(s["dur"]), s["name"])
                   for s in slices(perfetto, "mutex"))
    assert holds == sorted((r.pid, r.thread, int(r.acquired_ns), int(r.hold_ns), r.kind)
                           for r in mutex.itertuples())
    waits = sorted((s["pid"], s["tid"], ns(s["ts"]), ns(s["dur"]), s["name"])
                   for s in slices(perfetto, "mutex_wait"))
    assert waits == sorted((r.pid, r.thread, int(r.acquire_ns), int(r.wait_ns), f"{r.kind} wait")
                           for r in mutex.itertuples())
    assert {"critical", "lock"} == {s[4] for s in holds}


def nested(events) -> Counter:
    """Checks that on each track two slices are disjoint or one holds the other,
    and that of slices that start together the longer comes first in the file
    (what the viewers nest by); (cat, its parent's cat) -> how many."""
    tracks = defaultdict(list)
    for i, e in enumerate(events):
        if e["ph"] == "X":
            tracks[e["pid"], e["tid"]].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), i, e))
    parents = Counter()
    for rows in tracks.values():
        stack = []
        for begin, end, i, e in sorted(rows, key=lambda r: (r[0], -r[1], r[2])):
            while stack and stack[-1][1] <= begin:
                stack.pop()
            if stack:
                assert end <= stack[-1][1], f"{e} overlaps {stack[-1][3]}"
                if stack[-1][0] == begin:
                    assert stack[-1][2] < i, f"{e} comes before its parent {stack[-1][3]}"
                parents[e["cat"], stack[-1][3]["cat"]] += 1
            stack.append((begin, end, i, e))
    return parents


def test_slices_nest_on_every_track(perfetto):
    parents = nested(perfetto)
    # what holds what, as the program's structure says
    assert parents["parallel", "implicit_task"] >= 2  # in the initial task, and nested
    assert parents["implicit_task", "parallel"] > 0
    assert parents["sync_wait", "sync"] > 0
    assert parents["task", "task"] + parents["task", "sync_wait"] > 0  # children in taskwait
    assert parents["sync", "task"] > 0  # taskwait inside a parent task
    assert parents["mutex", "implicit_task"] > 0 and parents["mutex_wait", "implicit_task"] > 0
    assert not [k for k in parents if k[1] in ("sync_wait", "mutex_wait", "mutex")
                and k[0] != "task"]


def test_flows_from_creation_to_first_start(trace, perfetto):
    flows = defaultdict(list)
    for e in perfetto:
        if e["ph"] in "sf":
            assert (e["cat"], e["name"]) == ("task", "task")
            flows[e["id"]].append(e)
    executed = trace.tasks()
    executed = executed[executed["first_start_ns"].notna()]
    assert len(flows) == len(executed) > 0
    task_slices = {(s["pid"], s["tid"], ns(s["ts"])): s["args"]["task_id"]
                   for s in slices(perfetto, "task")}
    seen = set()
    for start, finish in flows.values():
        assert (start["ph"], finish["ph"], finish["bp"]) == ("s", "f", "e")
        assert start["pid"] == finish["pid"]
        task = task_slices[finish["pid"], finish["tid"], ns(finish["ts"])]
        row = executed[(executed["pid"] == start["pid"]) & (executed["task_id"] == task)]
        assert len(row) == 1
        assert (start["tid"], ns(start["ts"])) == (row["creator_thread"].iloc[0],
                                                  row["created_ns"].iloc[0])
        assert ns(finish["ts"]) == row["first_start_ns"].iloc[0]
        seen.add((start["pid"], task))
    assert len(seen) == len(flows)


def test_threads_waiting_counter(trace, perfetto):
    counters = [e for e in perfetto if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"threads waiting"}
    assert {e["pid"] for e in counters} == {p["pid"] for p in trace.meta["processes"]}
    waits = slices(perfetto, "sync_wait") + slices(perfetto, "mutex_wait")
    nested_waits = 0
    for pid in {e["pid"] for e in counters}:
        series = sorted((ns(e["ts"]), e["args"]) for e in counters if e["pid"] == pid)
        assert len({t for t, _ in series}) == len(series)  # one value per time
        assert series[-1][1] == {"sync": 0, "mutex": 0}
        nthreads = len(next(p for p in trace.meta["processes"] if p["pid"] == pid)["threads"])
        mine = [w for w in waits if w["pid"] == pid]
        for t, value in series:
            assert 0 <= value["sync"] <= nthreads and 0 <= value["mutex"] <= nthreads
            # the threads with a wait open just after t, each once however many of
            # its waits nest
            open_at = [("sync" if w["cat"] == "sync_wait" else "mutex", w["tid"]) for w in mine
                       if ns(w["ts"]) <= t < ns(w["ts"]) + ns(w["dur"])]
            threads = Counter(kind for kind, _ in set(open_at))
            assert value == {"sync": threads["sync"], "mutex": threads["mutex"]}, t
            nested_waits += len(open_at) > sum(threads.values())
        assert max(v["mutex"] for _, v in series) >= 1
    assert nested_waits > 0  # a taskwait's wait in a task run in a barrier's wait


def random_waits(rng: np.random.Generator) -> tuple[list[tuple], list[dict]]:
    """_core.waiting's series of random waits (two series, two processes, three
    threads a process), and per series each thread's spells (its waits that nest
    or touch, as [begin, end])."""
    series, spells = [], []
    for _ in range(2):
        begin = np.sort(rng.integers(-50, 500, 400))
        end = begin + rng.choice([0, 1, 5, 40], len(begin))
        pid = rng.choice(np.array([7, 300], np.int32), len(begin))
        thread = rng.integers(0, 3, len(begin)).astype(np.uint32)
        series.append((pid, thread, begin, end))
        mine: dict[tuple[int, int], list[list[int]]] = {}
        for p, t, b, e in zip(pid.tolist(), thread.tolist(), begin.tolist(), end.tolist()):
            spell = mine.setdefault((p, t), [])
            if spell and b <= spell[-1][1]:
                spell[-1][1] = max(spell[-1][1], e)
            else:
                spell.append([b, e])
        spells.append(mine)
    return series, spells


def counter_rows(series: list[tuple], *window: int | None) -> tuple[np.ndarray, ...]:
    """_core.waiting's rows: pid, time, and the counts (one row a series)."""
    pid, time, counts = _core.waiting(series, *window)
    return (np.frombuffer(pid, np.int32), np.frombuffer(time, np.int64),
            np.array([np.frombuffer(c, np.int32) for c in counts]))


@pytest.mark.parametrize("seed", range(3))
def test_the_waiting_kernel_counts_each_thread_once(seed):
    """_core.waiting, the counter's kernel, against the threads in a spell of waiting
    (its waits that nest or touch) just after each time a spell begins or ends, on
    random waits of two series, two processes and three threads a process."""
    series, spells = random_waits(np.random.default_rng(seed))
    pid, time, counts = counter_rows(series)
    rows = list(zip(pid.tolist(), time.tolist()))
    assert rows == sorted({(p, x) for mine in spells for (p, _), s in mine.items()
                           for spell in s for x in spell})
    for mine, got in zip(spells, counts):
        want = [sum(any(b <= t < e for b, e in s) for (q, _), s in mine.items() if q == p)
                for p, t in rows]
        assert got.tolist() == want
    assert counts.max() > 1
    empty = _core.waiting([(np.zeros(0, np.int32), np.zeros(0, np.uint32), np.zeros(0, np.int64),
                            np.zeros(0, np.int64))] * 2)
    assert [len(empty[0]), len(empty[1]), [len(c) for c in empty[2]]] == [0, 0, [0, 0]]
    pid, thread, begin, end = series[0]
    with pytest.raises(ValueError, match="order of their begins"):
        _core.waiting([(pid, thread, begin[::-1].copy(), end)])


@pytest.mark.parametrize("seed", range(3))
def test_the_waiting_kernel_keeps_a_window(seed):
    """With a window: the rows in it (ends included), and each process's last row
    before its start moved to the start, unless the process has a row there."""
    series, _ = random_waits(np.random.default_rng(seed))
    pid, time, counts = counter_rows(series)
    at_a_row = int(time[len(time) // 3])
    for start, end in [(100, 300), (-500, 20), (450, 2000), (at_a_row, at_a_row + 50),
                       (None, 200), (200, None)]:
        low = -(1 << 62) if start is None else start
        high = 1 << 62 if end is None else end
        keep = (time >= low) & (time <= high)
        before = time < low
        last = before.copy()  # a process's last row before the start
        last[:-1] &= ~before[1:] | (pid[1:] != pid[:-1])
        next_at_start = np.zeros_like(keep)
        next_at_start[:-1] = (time[1:] == low) & (pid[1:] == pid[:-1])
        at = np.flatnonzero(keep | (last & ~next_at_start))
        got = counter_rows(series, start, end)
        assert got[0].tolist() == pid[at].tolist()
        assert got[1].tolist() == np.maximum(time[at], low).tolist(), (start, end)
        assert got[2].tolist() == counts[:, at].tolist()


@pytest.mark.parametrize("seed", range(2))
def test_the_waiting_kernels_packets_are_the_changes_of_its_rows(seed):
    """_core.proto_waiting: per process and series a packet at its first row, then
    at each change of its value (those of the rows of _core.waiting, in a window
    or not), on the track of that process and series, given to write a part at a
    time; what write raises comes out."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                             reason="the perfetto package (pip install ompt-py[perfetto])")
    series, _ = random_waits(np.random.default_rng(seed))
    pids = sorted({int(p) for s in series for p in s[0]})
    uuids = np.arange(100, 100 + 2 * len(pids), dtype=np.uint64)

    def tracks(given):
        assert np.frombuffer(given, np.int64).tolist() == pids
        return uuids
    for window in [(None, None), (100, 300)]:
        out = io.BytesIO()
        _core.proto_waiting(series, tracks, 3, out.write, *window)
        packets = pb.Trace.FromString(out.getvalue()).packet
        got = [(p.track_event.track_uuid, p.timestamp, p.track_event.counter_value)
               for p in packets]
        assert {p.trusted_packet_sequence_id for p in packets} == {3}
        pid, time, counts = counter_rows(series, *window)
        want, last = [], {}
        for r in range(len(pid)):
            for k in range(2):
                track = int(uuids[2 * pids.index(int(pid[r])) + k])
                if last.get(track) != counts[k, r]:
                    # (a timestamp is a uint64: the random waits begin before 0 too)
                    want.append((track, int(time[r]) % (1 << 64), int(counts[k, r])))
                    last[track] = counts[k, r]
        assert got == want and len(want) > 20
    with pytest.raises(ValueError, match="2 processes x 2 series"):
        _core.proto_waiting(series, lambda given: uuids[:3], 3, out.write)

    def refused(view):
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        _core.proto_waiting(series, tracks, 3, refused)

    def no_tracks(given):
        raise KeyError("no tracks")
    with pytest.raises(KeyError, match="no tracks"):  # what tracks raises comes out too
        _core.proto_waiting(series, no_tracks, 3, out.write)


def test_perfetto_of_several_saved_processes_from_the_cli(trace_file, tmp_path):
    out = tmp_path / "t.json"
    r = ok(cli("export", trace_file, "--format", "perfetto", "-o", out))
    assert str(out) in r.stderr
    events = json.loads(out.read_text())["traceEvents"]
    assert len({e["pid"] for e in events}) == 2


# ---- CSV ----------------------------------------------------------------------------------


@pytest.mark.pythons
def test_csv_round_trip(trace, tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "BATCH_ROWS", 100)  # several batches, and a header once
    path = tmp_path / "t.csv"
    trace.to_csv(path)
    frame = trace.to_pandas()
    dtypes = {c: ("string" if isinstance(t, pd.CategoricalDtype) else t)
              for c, t in frame.dtypes.items()}
    back = pd.read_csv(path, dtype=dtypes, keep_default_na=False, na_values=[""])
    assert list(back.columns) == list(frame.columns)
    assert len(back) == len(frame) > 300
    expected = frame.astype({c: "string" for c, t in dtypes.items() if t == "string"})
    pd.testing.assert_frame_equal(back, expected, check_dtype=False)
    assert "rank" in back.columns and set(back["rank"].dropna()) == {7}


def test_csv_from_the_cli(trace_file, tmp_path):
    out = tmp_path / "t.csv"
    ok(cli("export", trace_file, "--format", "csv", "-o", out))
    assert len(pd.read_csv(out)) == len(ompt_py.load(trace_file))


# ---- how they are made ---------------------------------------------------------------------


def test_rows_of_text_from_a_template_and_columns():
    """The C formatter: numbers of any width and sign, nanoseconds as microseconds,
    addresses, names from a table, and null (JSON) or nothing (CSV) where missing."""
    template = ["[", streaming.number(np.array([-5, 7], np.int8)), ",",
                streaming.number(np.array([2**64 - 1, 3], np.uint64)), ",",
                streaming.micros(np.array([-1500, 1234567])), ",",
                streaming.hexadecimal(np.array([0, 255], np.uint64), np.array([True, False])), ",",
                streaming.named(np.array([1, -1]), ['"a"', '"b"']), "]\n"]
    assert streaming.render_rows(template) == (b'[-5,18446744073709551615,-1.500,null,"b"]\n'
                                      b'[7,3,1234.567,"0xff",null]\n')
    assert streaming.render_rows(template, null=b"").splitlines()[1] == b'[7,3,1234.567,"0xff",]'


def whole_frame_refused(*args: object, **kwargs: object) -> None:
    raise AssertionError("to_pandas() of the whole trace was made")


def test_exports_make_no_frame_of_the_trace(trace_file, tmp_path, monkeypatch):
    """Perfetto and CSV stream from the records: to_pandas() of the whole trace and
    the paired tables are not made (nor kept in the trace)."""
    t = ompt_py.load(trace_file)
    monkeypatch.setattr(ompt_py.Trace, "to_pandas", whole_frame_refused)
    t.to_perfetto(tmp_path / "t.json")
    t.to_csv(tmp_path / "t.csv")
    assert not cache.made(t, tables.region_intervals)


def test_a_trace_of_one_process_exports_without_a_pid_column(trace, tmp_path):
    """The events of one process: the exports make no pid column (nor key) and write
    what they write for the same events with one."""
    proc = trace.meta["processes"][1]
    mine = trace.pids == proc["pid"]
    meta = {**trace.meta, "processes": [proc]}
    one = ompt_py.Trace.from_records(trace.events[mine], meta, pids=proc["pid"])
    with_pids = ompt_py.Trace.from_records(trace.events[mine], meta, pids=trace.pids[mine])
    for fmt in ("perfetto", "csv"):
        export.export(one, tmp_path / f"one.{fmt}", fmt)
        export.export(with_pids, tmp_path / f"pids.{fmt}", fmt)
        assert (tmp_path / f"one.{fmt}").read_bytes() == (tmp_path / f"pids.{fmt}").read_bytes()
    assert one.single_pid == proc["pid"]


# ---- bad input, empty traces ---------------------------------------------------------------


def test_unknown_format(trace_file, tmp_path):
    r = cli("export", trace_file, "--format", "xml", "-o", tmp_path / "t.xml")
    assert r.returncode != 0
    no_traceback(r)
    for name in ("xml", "perfetto", "perfetto-proto", "otf2", "csv", "parquet"):
        assert name in r.stderr
    assert not (tmp_path / "t.xml").exists()
    with pytest.raises(ValueError, match="perfetto, perfetto-proto, otf2, csv, parquet"):
        export.export(ompt_py.Trace(), tmp_path / "t.xml", "xml")


def test_export_into_a_missing_directory(trace_file, tmp_path):
    out = tmp_path / "no-such-dir" / "t.json"
    r = cli("export", trace_file, "--format", "perfetto", "-o", out)
    assert r.returncode != 0
    no_traceback(r)
    assert str(out) in r.stderr


@pytest.mark.parametrize("fmt", ["perfetto", "csv"])
def test_failed_export_leaves_no_file(trace_file, tmp_path, monkeypatch, fmt):
    """An export that fails half-way leaves no file, and an older one as it was."""
    t = ompt_py.load(trace_file)
    out = tmp_path / "out"
    out.write_text("older")

    def fail(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(*((perfetto_export, "_metadata") if fmt == "perfetto"
                          else (csv_export, "_csv_text")), fail)
    with pytest.raises(RuntimeError, match="disk on fire"):
        export.export(t, out, fmt)
    assert out.read_text() == "older"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def _held(folder: Path) -> list[str]:
    """The files in ``folder`` this process holds open, once the threads that free
    older files are done."""
    for thread in threading.enumerate():
        if thread.name == "ompt-py free older file":
            thread.join(timeout=60)
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, gone
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [h for h in held if h.startswith(str(folder))]


def test_export_over_an_older_file_replaces_it_and_frees_it(trace_file, tmp_path):
    """An export over an older file: the new file in its place, and the older one
    (held open across the rename, so that its blocks are freed off the caller's
    path) closed by the thread that frees it, not leaked."""
    t = ompt_py.load(trace_file)
    out = tmp_path / "out.json"
    out.write_text("older")
    export.export(t, out, "perfetto")
    assert json.loads(out.read_text())["traceEvents"]
    assert _held(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_export_onto_a_directory_fails_and_leaves_it(trace_file, tmp_path):
    """A path that is a directory: the rename's error, the directory as it was,
    no partial file, nothing held open."""
    t = ompt_py.load(trace_file)
    out = tmp_path / "out.csv"
    out.mkdir()
    with pytest.raises(IsADirectoryError):
        export.export(t, out, "csv")
    assert out.is_dir() and not any(out.iterdir())
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]
    assert _held(tmp_path) == []


def test_empty_trace_exports_valid_files(tmp_path):
    empty = ompt_py.Trace()
    assert len(empty) == 0
    empty.to_perfetto(tmp_path / "e.json")
    assert json.loads((tmp_path / "e.json").read_text())["traceEvents"] == []
    empty.to_csv(tmp_path / "e.csv")
    header = (tmp_path / "e.csv").read_text().splitlines()
    assert header == [",".join(f'"{c}"' for c in empty.to_pandas().columns)]
    for name in ("e.parquet", "e-dataset"):
        empty.save(tmp_path / name)
        back = ompt_py.load(tmp_path / name) if name.endswith(".parquet") else empty
        assert len(back) == 0
    assert list((tmp_path / "e-dataset").iterdir()) == []


def test_process_without_events_exports(tmp_path):
    """A trace window in which OpenMP did nothing: one process, no events (stored:
    ``w.max_threads()``, then ``with ompt_py.trace() as t: pass``)."""
    t = load_stored("inprocess-empty")
    (proc,) = t.meta["processes"]
    assert len(t) == 0
    t.to_perfetto(tmp_path / "p.json")
    events = json.loads((tmp_path / "p.json").read_text())["traceEvents"]
    assert {e["ph"] for e in events} == {"M"}
    assert [e["args"]["name"] for e in events if e["name"] == "process_name"] == [
        perfetto_export._process_name(proc)]
    t.to_csv(tmp_path / "p.csv")
    assert len(pd.read_csv(tmp_path / "p.csv")) == 0
    t.save(tmp_path / "ds")
    assert [p.name for p in (tmp_path / "ds").iterdir()] == [f"pid={proc['pid']}"]
    back = ompt_py.load(tmp_path / "ds")
    assert len(back) == 0 and back.meta["processes"] == t.meta["processes"]


def test_user_regions_are_slices_on_their_threads(tmp_path):
    """Region markers of omptpy_region.h (tests/programs/handlers/regions_prog.c 3
    under the tool; the regions themselves: tests/analysis/test_user_regions.py)."""
    t = load_stored("regions-prog")
    regions = t.user_regions()
    t.to_perfetto(tmp_path / "trace.json")
    doc = json.loads((tmp_path / "trace.json").read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    slices = [e for e in events if e.get("cat") == "user_region"]
    assert sorted((e["name"], e["tid"]) for e in slices) == sorted(
        zip(regions["name"], regions["thread"].astype(int)))
