"""Today's file formats, read by tomorrow's ompt_py: trace format 1 (the Parquet
file of ``Trace.save("x.parquet")`` and the dataset of ``Trace.save("dir")``)
and raw files of record version 3 (``OMPTPY_OUTPUT``), stored once in
tests/data/format-v1/ (tests/data/make_traces.py format-v1): one run of two
processes, ``parallel 2`` and then ``critical 2`` with OMPI_COMM_WORLD_RANK=1,
under the tool.

The expected values were taken from the files when they were made; they must
not change when the code does.  A change of format that cannot read these
files any more needs a reader for them (and a new tests/data/format-vN).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import stored_path

import ompt_py

FORMS = ["raw", "trace.parquet", "dataset"]

CRITICAL, PARALLEL = 30151, 30152  # the pids of the two processes
ORIGIN_MONO_NS = 1659353183998
COLUMNS = [
    "time_ns", "pid", "rank", "thread", "event", "endpoint", "parallel_id", "task_id", "codeptr",
    "kind", "kind_raw", "team_size", "thread_num", "proc_id", "place_num", "flags",
    "has_dependences", "other_task_id", "variable", "dependence_index", "dependence_count",
    "count", "instance", "chunk_iterations", "wait_id", "hint", "impl", "os_tid", "state",
    "missed", "runtime", "command", "modifier", "arg", "message_length", "device_num",
    "target_id", "target_region_id", "bytes", "peer", "comm_size", "src_device", "dest_device",
    "requested_num_teams", "message", "exit_frame", "enter_frame", "exit_frame_flags",
    "enter_frame_flags", "py_stack",
]
# per process: argv[1:], rank, written, dropped, (thread, type, written) of each thread
PROCESSES = {
    CRITICAL: (["2"], 1, 46, 0, [(0, "initial", 26), (1, "worker", 20)]),
    PARALLEL: (["2"], None, 34, 0, [(0, "initial", 20), (1, "worker", 14)]),
}
EVENTS = {
    CRITICAL: {"implicit_task": 6, "lock_destroy": 1, "lock_init": 1, "mutex_acquire": 8,
               "mutex_acquired": 8, "mutex_released": 8, "parallel_begin": 1,
               "parallel_end": 1, "sync_region": 4, "sync_region_wait": 4, "thread_begin": 2,
               "thread_end": 2},
    PARALLEL: {"implicit_task": 10, "parallel_begin": 2, "parallel_end": 2, "sync_region": 8,
               "sync_region_wait": 8, "thread_begin": 2, "thread_end": 2},
}
KINDS = {"barrier_implicit": 24, "lock": 14, "critical": 12, "initial": 4, "worker": 4}
# the sum of each field of the records, over all of them: the values, not only the shape
FIELD_SUMS = {
    "time_ns": 1209394281, "codeptr": 3973647723211040, "parallel_id": 30786325577824,
    "task_id": 70368744177782, "u64a": 2457734800337124, "u64b": 0, "thread": 34,
    "event": 1222, "endpoint": 81, "kind": 302, "u32a": 26, "u32b": 12884901946,
}


@pytest.fixture(scope="module", params=FORMS)
def trace(request) -> ompt_py.Trace:
    return ompt_py.load(stored_path(f"format-v1/{request.param}"))


def in_order(t: ompt_py.Trace) -> tuple[np.ndarray, np.ndarray]:
    """Events and pids in one order whatever the form: by process, then as stored."""
    order = np.argsort(t.pids, kind="stable")
    return t.events[order], t.pids[order]


def without_source(meta: dict) -> dict:
    """The metadata but the file each process was read from."""
    procs = sorted(meta["processes"], key=lambda p: p["pid"])
    return {**meta, "processes": [{k: v for k, v in p.items() if k != "source"} for p in procs]}


def test_the_stored_files_are_there():
    base = stored_path("format-v1")
    assert sorted(p.name for p in (base / "raw").iterdir()) == [
        f"ompt-{CRITICAL}-0.omptraw", f"ompt-{PARALLEL}-0.omptraw"]
    assert sorted(p.name for p in (base / "dataset").iterdir()) == [
        f"pid={CRITICAL}", f"pid={PARALLEL}"]
    for pid in (CRITICAL, PARALLEL):
        assert [p.name for p in (base / "dataset" / f"pid={pid}").iterdir()] == [
            "part-0.parquet"]


def test_meta(trace):
    meta = trace.meta
    assert meta["format"] == 1
    assert meta["origin_mono_ns"] == ORIGIN_MONO_NS
    assert meta["written"] == 80 and meta["dropped"] == 0
    procs = {p["pid"]: p for p in meta["processes"]}
    assert set(procs) == set(PROCESSES)
    for pid, (args, rank, written, dropped, threads) in PROCESSES.items():
        p = procs[pid]
        assert p["argv"][1:] == args and p["rank"] == rank
        assert (p["written"], p["dropped"]) == (written, dropped)
        assert p["complete"] is True and p["truncated"] is False
        assert p["tool"]["record_version"] == 3
        assert p["config"]["sink"] == "file"
        assert [(th["thread"], th["type"], th["written"]) for th in p["threads"]] == threads
        assert p["runtimes"][0]["callbacks"]["parallel_begin"] == "always"


def test_events_and_pids(trace):
    ev, pids = in_order(trace)
    assert len(trace) == len(ev) == 80
    assert {pid: int((pids == pid).sum()) for pid in PROCESSES} == {CRITICAL: 46, PARALLEL: 34}
    assert {f: sum(int(x) for x in ev[f].tolist()) for f in ev.dtype.names} == FIELD_SUMS
    for pid in PROCESSES:
        assert np.all(np.diff(ev["time_ns"][(pids == pid) & (ev["thread"] == 0)]) >= 0)


def test_to_pandas(trace):
    df = trace.to_pandas()
    assert list(df.columns) == COLUMNS
    assert len(df) == 80
    for pid, counts in EVENTS.items():
        mine = df[df["pid"] == pid]
        assert mine["event"].astype(str).value_counts().to_dict() == counts
    assert df["kind"].dropna().astype(str).value_counts().to_dict() == KINDS
    assert df["rank"].dtype == "Int32"
    assert df.loc[df["pid"] == CRITICAL, "rank"].eq(1).all()
    assert df.loc[df["pid"] == PARALLEL, "rank"].isna().all()
    assert df["team_size"].value_counts().to_dict() == {2: 12, 0: 5, 1: 2}
    assert df["thread_num"].value_counts().to_dict() == {1: 10, 0: 6}
    assert df["wait_id"].notna().sum() == 26
    # the events with a code address; 14 of them the runtime passed as NULL
    assert df["codeptr"].notna().sum() == 56 and df["codeptr"].eq(0).sum() == 14
    # record version 3 kept no frame at parallel_begin and no error message
    begins = df[df["event"] == "parallel_begin"]
    assert len(begins) == 3 and begins[["exit_frame", "enter_frame"]].isna().all().all()
    assert df["message"].isna().all()


@pytest.mark.pythons
def test_the_three_forms_hold_the_same_trace():
    raw, *others = (ompt_py.load(stored_path(f"format-v1/{form}")) for form in FORMS)
    ev, pids = in_order(raw)
    for t in others:
        other_ev, other_pids = in_order(t)
        assert np.array_equal(other_ev, ev) and np.array_equal(other_pids, pids)
        assert without_source(t.meta) == without_source(raw.meta)


@pytest.mark.parametrize("to", ["again.parquet", "again"])
def test_round_trip(trace, tmp_path, to):
    """load, save, load again: the same trace."""
    trace.save(tmp_path / to)
    again = ompt_py.load(tmp_path / to)
    ev, pids = in_order(trace)
    again_ev, again_pids = in_order(again)
    assert np.array_equal(again_ev, ev) and np.array_equal(again_pids, pids)
    assert without_source(again.meta) == without_source(trace.meta)
    key = ["pid", "thread", "time_ns"]
    pd.testing.assert_frame_equal(
        again.to_pandas().sort_values(key, kind="stable").reset_index(drop=True),
        trace.to_pandas().sort_values(key, kind="stable").reset_index(drop=True))
