"""Trace.to_pandas: columns, dtypes, names, nulls and the decoding of packed
fields, on stored in-process traces of libomp 19 and 16 (tests/data/
inprocess-mixed-*: conftest's MIXED_SNIPPET, tasks, loops, critical/lock and
regions; recording them: tests/live/test_inprocess.py) and on hand-made records;
a Parquet round trip in the pytest process."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import (
    EV,
    STORED_RUNTIMES,
    WORK_LOOP,
    WORK_LOOP_DYNAMIC,
    load_stored,
    n_of,
)

import ompt_py
from ompt_py import records as rec
from ompt_py.records import EVENT_CODES, EVENT_DTYPE, FRAME_COLUMNS

COLUMNS = [
    "time_ns", "pid", "thread", "event", "endpoint", "parallel_id", "task_id", "codeptr", "kind",
    "kind_raw", "team_size", "thread_num", "proc_id", "place_num", "flags", "has_dependences",
    "other_task_id", "variable", "dependence_index", "dependence_count", "count", "instance",
    "chunk_iterations", "wait_id", "hint", "impl", "os_tid", "state", "missed", "runtime",
    "command", "modifier", "arg", "message_length", "device_num", "target_id",
    "target_region_id", "bytes", "peer", "comm_size", "src_device", "dest_device",
    "requested_num_teams", "message",
    "exit_frame", "enter_frame", "exit_frame_flags", "enter_frame_flags", "py_stack",
]
INTEGERS = [c for c in COLUMNS[5:8] + COLUMNS[10:] if c != "message"]


@pytest.fixture(scope="module", params=STORED_RUNTIMES, ids=lambda v: f"libomp{v}")
def runtime(request) -> int:
    """The libomp version of the stored trace."""
    return request.param


@pytest.fixture(scope="module")
def mixed(runtime) -> ompt_py.Trace:
    """The stored in-process trace of MIXED_SNIPPET on that runtime."""
    return load_stored(f"inprocess-mixed-libomp{runtime}")


@pytest.mark.pythons
def test_to_pandas_columns_and_dtypes(mixed):
    df = mixed.to_pandas()
    assert list(df.columns) == COLUMNS
    assert len(df) == len(mixed.events)
    assert df["time_ns"].dtype == np.int64
    assert df["time_ns"].is_monotonic_increasing
    assert df["pid"].dtype.kind == "i"
    assert df["thread"].dtype.kind in "iu"
    for c in ("event", "endpoint", "kind", "kind_raw", "message"):
        assert isinstance(df[c].dtype, pd.CategoricalDtype), c
    for c in INTEGERS:
        assert isinstance(df[c].dtype, pd.api.extensions.ExtensionDtype), c
        assert df[c].dtype.kind in "iu", c


def test_to_pandas_frame_is_read_only(mixed):
    """Argument columns share values and masks: a write into one would show in
    the others, so the frame refuses writes; a copy takes them."""
    df = mixed.to_pandas()
    sharing = [c for c in INTEGERS[3:] if df[c].notna().any()]
    before = {c: df[c].copy() for c in sharing}
    for column, value in ((sharing[0], 5), (sharing[0], pd.NA), ("parallel_id", 1),
                          ("event", "flush")):
        with pytest.raises(ValueError, match="read-only"):
            df.loc[df.index[0], column] = value
    for c in sharing:
        pd.testing.assert_series_equal(df[c], before[c])
    pd.testing.assert_frame_equal(df, mixed.to_pandas())
    edited = df.copy()
    edited.loc[edited.index[0], sharing[0]] = 5
    assert edited[sharing[0]].iloc[0] == 5
    df.loc[df.index[0], "time_ns"] = -1  # plain numpy columns share nothing: pandas copies
    assert df["time_ns"].iloc[0] == -1 and mixed.to_pandas()["time_ns"].iloc[0] >= 0
    df["time_s"] = df["time_ns"] / 1e9  # new columns are fine


def test_to_pandas_of_some_events_and_columns(mixed):
    """events= and columns= give the rows and columns of the whole frame, made alone."""
    whole = mixed.to_pandas()
    some = ["task_create", "mutex_acquired", "sample"]
    rows = whole["event"].isin(some).to_numpy()
    assert rows.any()
    picked = ["codeptr", "time_ns", "event", "wait_id", "other_task_id", "exit_frame",
              "py_stack", "message"]
    part = mixed.to_pandas(events=some, columns=picked)
    assert list(part.columns) == picked
    pd.testing.assert_frame_equal(part, whole.loc[rows, picked].reset_index(drop=True))
    pd.testing.assert_frame_equal(mixed.to_pandas(columns="thread"), whole[["thread"]])
    pd.testing.assert_frame_equal(mixed.to_pandas(events="task_create"),
                                  whole[whole["event"] == "task_create"].reset_index(drop=True))
    assert list(mixed.to_pandas(events=[], columns=["pid", "kind"]).columns) == ["pid", "kind"]
    with pytest.raises(ValueError, match=r"\['tsk_create'\] are not event names"):
        mixed.to_pandas(events=["tsk_create"])
    with pytest.raises(ValueError, match=r"\['rank'\] are not columns.*'time_ns'"):
        mixed.to_pandas(columns=["time_ns", "rank"])  # a trace of no job has no rank


def test_to_pandas_names_and_nulls(mixed, runtime):
    df = mixed.to_pandas()
    ev = mixed.events
    names = set(df["event"].astype(str))
    assert {"parallel_begin", "parallel_end", "implicit_task", "task_create", "task_schedule",
            "work", "dispatch", "sync_region", "sync_region_wait", "mutex_acquire",
            "mutex_acquired", "mutex_released", "lock_init", "lock_destroy"} <= names
    assert set(df["endpoint"].dropna().astype(str)) == {"begin", "end"}
    # events without endpoint have NaN there
    assert df.loc[df["event"] == "task_create", "endpoint"].isna().all()
    assert df.loc[df["event"] == "parallel_begin", "endpoint"].eq("begin").all()
    kinds = set(df["kind_raw"].dropna().astype(str))
    # the runtime's own names: libomp 14 and 16 have no schedule in the work type
    # and one implicit barrier kind
    own = ({"loop_dynamic", "loop_static", "barrier_implicit_parallel"} if runtime >= 19
           else {"loop", "barrier_implicit"})
    assert own | {"critical", "lock", "complete", "switch", "ws_loop_chunk",
                  "single_executor"} <= kinds
    if runtime < 19:
        assert not {"loop_dynamic", "loop_static", "barrier_implicit_parallel"} & kinds
    # one vocabulary across runtime versions in `kind`; the runtime's own in `kind_raw`
    normalised = set(df["kind"].dropna().astype(str))
    assert {"loop", "barrier_implicit", "critical", "single_executor"} <= normalised
    assert not {"loop_dynamic", "loop_static", "barrier_implicit_parallel"} & normalised
    loops = df[df["event"] == "work"]
    assert (loops["kind"] == "loop").sum() == loops["kind_raw"].astype(str).str.startswith(
        "loop").sum()
    # the named counts agree with the raw records
    assert (df["event"] == "task_create").sum() == n_of(ev, "task_create") == 5
    loop_kind = WORK_LOOP_DYNAMIC if runtime >= 19 else WORK_LOOP
    dyn = df[(df["event"] == "work") & (df["kind_raw"] == rec.WORK_TYPES[loop_kind])]
    assert len(dyn) == n_of(ev, "work", kind=loop_kind) > 0
    # argument columns are set exactly for the events that have them
    has_team = df["team_size"].notna()
    assert set(df.loc[has_team, "event"].astype(str)) == {"parallel_begin", "implicit_task"}
    assert df.loc[df["event"] == "parallel_begin", "team_size"].eq(2).all()
    assert set(df.loc[df["thread_num"].notna(), "event"].astype(str)) == {"implicit_task"}
    assert set(df.loc[df["count"].notna(), "event"].astype(str)) == {"work"}
    assert set(df.loc[df["chunk_iterations"].notna(), "event"].astype(str)) == {"dispatch"}
    assert set(df.loc[df["wait_id"].notna(), "event"].astype(str)) == {
        "mutex_acquire", "mutex_acquired", "mutex_released", "lock_init", "lock_destroy"}
    assert set(df.loc[df["other_task_id"].notna(), "event"].astype(str)) <= {
        "task_create", "task_schedule"}
    loops = df[(df["event"] == "work") & (df["endpoint"] == "begin")
               & df["kind_raw"].isin(["loop_static", "loop_dynamic", "loop"])]
    assert loops["count"].eq(8).all() and len(loops) == 4
    # ids: <NA> for the events without the field (task_create has no parallel id: its
    # record keeps the encountering task's enter frame there), 0 where the runtime
    # passed NULL (libomp 16 and 19: an implicit task's end has no parallel data)
    lacks = ~np.isin(ev["event"], [EVENT_CODES[e] for e in rec.ID_FIELDS["parallel_id"]])
    assert df["parallel_id"].isna().sum() == int(lacks.sum())
    assert (ev[ev["event"] == EV["task_create"]]["parallel_id"] != 0).all()
    assert df.loc[df["event"] == "task_create", "parallel_id"].isna().all()
    ends = df[(df["event"] == "implicit_task") & (df["endpoint"] == "end")]
    assert ends["parallel_id"].notna().all() and (ends["parallel_id"] == 0).any()
    assert df.loc[df["event"] == "task_schedule", "codeptr"].isna().all()
    assert df["pid"].nunique() == 1


@pytest.mark.pythons
def test_parquet_round_trip_in_pytest_process(mixed, tmp_path):
    path = tmp_path / "again.parquet"
    mixed.save(path)
    again = ompt_py.load(path)
    assert np.array_equal(again.events, mixed.events)
    assert np.array_equal(again.pids, mixed.pids)
    assert again.meta == mixed.meta
    pd.testing.assert_frame_equal(again.to_pandas(), mixed.to_pandas())


def _records(rows: list[dict], versions: dict[int, int] | None = None) -> ompt_py.Trace:
    """A trace of hand-made records, all at time 0 (to_pandas keeps their order):
    each row's fields by name (``event`` by name, ``pid`` its process, 1 by
    default); ``versions``: the record version of processes other than the current."""
    ev = np.zeros(len(rows), EVENT_DTYPE)
    for i, row in enumerate(rows):
        for name, value in row.items():
            if name != "pid":
                ev[i][name] = EVENT_CODES[value] if name == "event" else value
    pids = np.array([row.get("pid", 1) for row in rows])
    procs = [{"pid": int(pid), "config": {}, "region_names": ["deco", "stop here"],
              "tool": {"record_version": (versions or {}).get(int(pid), rec.RECORD_VERSION)}}
             for pid in sorted(set(pids.tolist()))]
    return ompt_py.Trace.from_records(ev, {"processes": procs}, pids=pids)


def _values(df: pd.DataFrame, *names: str) -> dict[str, list]:
    return {name: [None if pd.isna(v) else v for v in df[name]] for name in names}


def test_frame_fields_decode():
    """The packing of csrc/include/omptpy.h ("Frames"), decoded by to_pandas without a
    runtime: every combination the sampler, task_create and parallel_begin write; an
    address the runtime did not give is 0 (and has no flags), an event without
    frames <NA>, and so are the records of versions that did not keep them."""
    exit_frame, enter_frame = 0x7FFD_0000_1F40, 0x7FFD_0000_1E80
    below = exit_frame - enter_frame
    fp, cfa_app = 0b100, 0b011  # framepointer; cfa | application, packed in 3 bits
    trace = _records([
        dict(event="sample", kind=0x01 | fp << 2, u64b=exit_frame),  # in the task's code
        dict(event="sample", kind=0x03 | fp << 2 | cfa_app << 5, u64b=exit_frame, u32b=below),
        dict(event="sample", kind=0x02 | fp << 5, u64b=enter_frame),  # initial task, runtime
        dict(event="sample", kind=0x03, u64b=exit_frame, u32b=0x8000_0000),  # enter unknown
        dict(event="sample", u64b=2, u32b=1, pid=2),  # version 1: team size 2, thread 1
        dict(event="task_create", kind=0x03 | fp << 2 | fp << 5, u64b=exit_frame, u32b=4,
             parallel_id=enter_frame),
        dict(event="work", kind=0x03, u64b=40, parallel_id=7),  # other events: never frames
        # parallel_begin: the distance in u64a's high half, the stack id (5) in its low half
        dict(event="parallel_begin", kind=0x03 | fp << 2 | fp << 5, u64b=exit_frame,
             u64a=below << 32 | 5),
        dict(event="parallel_begin", kind=0x02 | fp << 5, u64b=enter_frame),  # initial task
        dict(event="parallel_begin", u64a=5, pid=3),  # version 4: no frame
    ], versions={2: 1, 3: 4})
    df = trace.to_pandas()
    assert _values(df, *FRAME_COLUMNS) == {
        "exit_frame": [exit_frame, exit_frame, 0, exit_frame, None, exit_frame, None,
                       exit_frame, 0, None],
        "enter_frame": [0, enter_frame, enter_frame, None, None, enter_frame, None,
                        enter_frame, enter_frame, None],
        "exit_frame_flags": [0x20, 0x20, None, 0, None, 0x20, None, 0x20, None, None],
        "enter_frame_flags": [None, 0x11, 0x20, 0, None, 0x20, None, 0x20, 0x20, None],
    }
    assert df["py_stack"].isna().all()  # no Python in these processes' metadata


def test_null_passed_and_field_absent_differ():
    """An id, a next task or an address the runtime passed as NULL is 0 (a next task
    -1, as LLVM's callback.h prints it); a field the event does not have is <NA>."""
    df = _records([
        dict(event="implicit_task", endpoint=rec.SCOPE_END, task_id=9),  # no parallel data
        dict(event="task_schedule", kind=1, task_id=9),  # complete, no next task
        dict(event="task_schedule", kind=7, task_id=9, u64a=12),  # switch to task 12
        dict(event="task_create", task_id=12, u64a=0),  # no encountering task
        dict(event="sync_region", kind=2, endpoint=rec.SCOPE_BEGIN, task_id=9),  # no codeptr
        dict(event="mutex_acquire", kind=1, u64a=0x1000),
    ]).to_pandas()
    assert _values(df, "parallel_id", "task_id", "codeptr", "other_task_id") == {
        "parallel_id": [0, None, None, None, 0, None],
        "task_id": [9, 9, 9, 12, 9, None],
        "codeptr": [None, None, None, 0, 0, 0],
        "other_task_id": [None, -1, 12, 0, None, None],
    }
    assert df["other_task_id"].dtype == "Int64"


def test_error_message_and_control_tool_arg():
    """The error callback's message (its text from the process's table of strings, the
    length as the runtime passed it) and the control_tool arg pointer (u32a and u32b);
    <NA> in the records of versions that did not keep them."""
    arg = 0x7FFD_1234_5678
    df = _records([
        dict(event="error", kind=1, u64a=9, u64b=2),  # "stop here"
        dict(event="error", kind=2, u64a=700, u64b=0),  # not kept: the table was full
        dict(event="error", kind=1, u64a=9, pid=2),  # version 4: no message kept
        dict(event="control_tool", u64a=64, u64b=3, u32a=arg & 0xFFFF_FFFF, u32b=arg >> 32),
        dict(event="control_tool", u64a=1, pid=2),  # NULL arg
        dict(event="control_tool", u64a=1, pid=3),  # version 1: no arg kept
        dict(event="work", u64b=2),
    ], versions={2: 4, 3: 1}).to_pandas()
    assert _values(df, "message", "message_length", "arg", "command") == {
        "message": ["stop here", None, None, None, None, None, None],
        "message_length": [9, 700, 9, None, None, None, None],
        "arg": [None, None, None, arg, 0, None, None],
        "command": [None, None, None, 64, 1, 1, None],
    }
    assert list(df["kind"][:2]) == ["warning", "fatal"]
