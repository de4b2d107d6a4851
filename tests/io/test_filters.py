"""The filters of every export (docs/exports.md, "Filters"): ``start``/``end`` (a
window in the trace's times, with units), ``threads``, ``pid``, as keyword
arguments of ``export()`` and the ``Trace.to_*`` methods and as ``ompt-py
export --start --end --threads --pid``.  The slice formats clip a slice that
crosses the window to it and count it in their metadata, never drop it; the
event formats keep the events in the window.  Bad values are one-line usage
errors (exit 2) that say what is allowed.

Trace: export-mixed (two processes of 4 threads; tasks, locks, nested
regions); the JSON export unfiltered is the reference."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest
from conftest import cli, load_stored, no_traceback, ok, stored_path
from test_export import nested, ns

import ompt_py
from ompt_py.errors import ConfigError
from ompt_py.io import export
from ompt_py.io.filters import ExportFilter
from ompt_py.units import parse_ns

START, END = 20_000_000, 52_000_000  # ns: the end of a process, the start of the other


@pytest.fixture(scope="module")
def trace():
    return load_stored("export-mixed")


def perfetto(trace, tmp_path, name="t.json", **filters) -> dict:
    export(trace, tmp_path / name, "perfetto", **filters)
    with open(tmp_path / name) as f:
        return json.load(f)


def slices(doc) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def test_times_with_units():
    assert [parse_ns(t) for t in ("1.5s", "200ms", "30us", "100ns", "2500", " 7 ms ", ".5s")] == [
        1_500_000_000, 200_000_000, 30_000, 100, 2500, 7_000_000, 500_000_000]
    assert parse_ns("1.000000001s") == 1_000_000_001  # exact, not through a float
    for bad in ("", "x", "-1s", "1.5", "1e3", "3h", "1.5ns"):
        assert parse_ns(bad) is None, bad


def test_a_window_clips_the_slices_that_cross_it(trace, tmp_path):
    whole = slices(perfetto(trace, tmp_path))
    doc = perfetto(trace, tmp_path, "w.json", start="20ms", end=END)
    got = slices(doc)
    for e in got:
        assert ns(e["ts"]) >= START and ns(e["ts"]) + ns(e["dur"]) <= END, e
    # every slice overlapping the window is there, clipped; none other
    def key(e, begin, end):
        return (e["pid"], e["tid"], e["cat"], e["name"], begin, end)
    expected = Counter()
    crossing = 0
    for e in whole:
        begin, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
        if end >= START and begin <= END:
            expected[key(e, max(begin, START), min(end, END))] += 1
            crossing += begin < START or end > END
    assert Counter(key(e, ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in got) == expected
    meta = doc["otherData"]["export_filter"]
    assert meta == {"start_ns": START, "end_ns": END, "threads": None, "pids": None,
                    "clipped_slices": crossing, "flows_outside": meta["flows_outside"]}
    assert crossing > 0
    nested(doc["traceEvents"])  # slices clipped at the start still nest, parents first


def test_threads_and_pid(trace, tmp_path):
    pid = trace.meta["processes"][1]["pid"]
    doc = perfetto(trace, tmp_path, threads=[0, 2], pid=pid)
    assert {(e["pid"], e["tid"]) for e in slices(doc)} == {(pid, 0), (pid, 2)}
    names = {(e["pid"], e.get("tid")) for e in doc["traceEvents"] if e["ph"] == "M"}
    assert names == {(pid, None), (pid, 0), (pid, 2)}
    whole = slices(perfetto(trace, tmp_path, "all.json"))
    assert len(slices(doc)) == sum(e["pid"] == pid and e["tid"] in (0, 2) for e in whole)
    assert doc["otherData"]["export_filter"]["clipped_slices"] == 0


def test_flows_with_both_ends_kept_the_others_counted(trace, tmp_path):
    whole = perfetto(trace, tmp_path)
    flows = {}
    for e in whole["traceEvents"]:
        if e["ph"] in "sf":
            flows.setdefault(e["id"], {})[e["ph"]] = e

    def inside(e):
        return e["tid"] == 1 and START <= ns(e["ts"]) <= END
    kept = sum(inside(f["s"]) and inside(f["f"]) for f in flows.values())
    doc = perfetto(trace, tmp_path, "f.json", start=START, end=END, threads=[1])
    got = [e for e in doc["traceEvents"] if e["ph"] in "sf"]
    assert len(got) == 2 * kept
    assert doc["otherData"]["export_filter"]["flows_outside"] == len(flows) - kept


def test_the_counter_starts_at_the_window_with_its_value_then(trace, tmp_path):
    whole = [e for e in perfetto(trace, tmp_path)["traceEvents"] if e["ph"] == "C"]
    doc = perfetto(trace, tmp_path, "c.json", start=START, end=END)
    got = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    for pid in {e["pid"] for e in whole}:
        before = [e for e in whole if e["pid"] == pid and ns(e["ts"]) < START]
        inside = [(ns(e["ts"]), e["args"]) for e in whole
                  if e["pid"] == pid and START <= ns(e["ts"]) <= END]
        mine = [(ns(e["ts"]), e["args"]) for e in got if e["pid"] == pid]
        first = [(START, before[-1]["args"])] if before and inside[0][0] != START else []
        assert mine == first + inside
        assert max(v["sync"] for _, v in mine) <= 4  # threads, each once


def test_event_formats_keep_the_events_in_the_window(trace, tmp_path):
    pid = trace.meta["processes"][1]["pid"]
    filters = {"start": START, "end": END, "threads": "1-2", "pid": pid}
    frame = trace.to_pandas()
    wanted = frame[(frame["pid"] == pid) & frame["thread"].isin([1, 2])
                   & (frame["time_ns"] >= START) & (frame["time_ns"] <= END)]
    assert 0 < len(wanted) < len(frame)
    trace.to_csv(tmp_path / "t.csv", **filters)
    back = pd.read_csv(tmp_path / "t.csv")
    assert back["time_ns"].tolist() == wanted["time_ns"].tolist()
    assert set(back["thread"]) == {1, 2}
    export(trace, tmp_path / "t.parquet", "parquet", **filters)
    saved = ompt_py.load(tmp_path / "t.parquet")
    assert len(saved) == len(wanted)
    assert [p["pid"] for p in saved.meta["processes"]] == [pid]
    assert saved.meta["export_filter"]["threads"] == [1, 2]
    export(trace, tmp_path / "ds", "parquet", **filters)  # a dataset: its partition says so
    assert ompt_py.load(tmp_path / "ds").meta["export_filter"]["pids"] == [pid]


def test_no_filter_changes_nothing(trace, tmp_path):
    flt = ExportFilter.of(trace)
    assert not flt.active and flt.events(trace) is trace
    assert "export_filter" not in perfetto(trace, tmp_path)["otherData"]


@pytest.mark.parametrize("args, message", [
    (["--start", "1.5x"], "--start '1.5x' is not a time: give nanoseconds"),
    (["--end=-3ms"], "--end '-3ms' is not a time"),
    (["--start", "2s", "--end", "1s"], "start (2 s) must be before end (1 s)"),
    (["--start", "900s"], "after the trace's last event"),
    (["--threads", "0,a"], "--threads '0,a' is not a list of numbers"),
    (["--threads", "0,99"], "thread 99 is not in the trace; its threads: 0, 1, 2, 3"),
    (["--pid", "1"], "pid 1 is not in the trace; its processes:"),
])
def test_bad_values_are_usage_errors(args, message, tmp_path):
    out = tmp_path / "t.json"
    r = cli("export", stored_path("export-mixed"), "-o", out, *args)
    assert r.returncode == 2, r.stderr
    no_traceback(r)
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("ompt-py export: ")
    assert not out.exists()


def test_bad_values_from_python(trace, tmp_path):
    with pytest.raises(ConfigError, match="not a list of numbers"):
        trace.to_perfetto(tmp_path / "t.json", threads=[0, -1])
    with pytest.raises(ConfigError, match="is not a time"):
        export(trace, tmp_path / "t.csv", start=1.5)


def test_filters_from_the_cli(tmp_path):
    out = tmp_path / "t.json"
    ok(cli("export", stored_path("export-mixed"), "-o", out, "--start", "20ms", "--end",
           "52000us", "--threads", "0-1"))
    doc = json.loads(out.read_text())
    assert doc["otherData"]["export_filter"]["start_ns"] == START
    assert doc["otherData"]["export_filter"]["end_ns"] == END
    assert {e["tid"] for e in slices(doc)} == {0, 1}
