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
    "command", "modifier", "message_length", "device_num", "target_id", "target_region_id",
    "bytes", "src_device", "dest_device", "requested_num_teams", "exit_frame", "enter_frame",
    "exit_frame_flags", "enter_frame_flags", "py_stack",
]




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
    for c in ("event", "endpoint", "kind", "kind_raw"):
        assert isinstance(df[c].dtype, pd.CategoricalDtype), c
    for c in COLUMNS[5:8] + COLUMNS[10:]:
        assert isinstance(df[c].dtype, pd.api.extensions.ExtensionDtype), c
        assert df[c].dtype.kind in "iu", c


def test_to_pandas_frame_is_read_only(mixed):
    """Argument columns share values and masks: a write into one would show in
    the others, so the frame refuses writes; a copy takes them."""
    df = mixed.to_pandas()
    sharing = [c for c in COLUMNS[10:] if df[c].notna().any()]
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
    # ids: 0 in the record is <NA> in the frame; task_create has no parallel id (its
    # record keeps the encountering task's enter frame there)
    no_region = (ev["parallel_id"] == 0) | (ev["event"] == EV["task_create"])
    assert df["parallel_id"].isna().sum() == int(no_region.sum())
    assert (ev[ev["event"] == EV["task_create"]]["parallel_id"] != 0).all()
    assert df.loc[df["event"] == "task_create", "parallel_id"].isna().all()
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


def test_frame_fields_decode():
    """The packing of csrc/include/omptpy.h ("Frames"), decoded by to_pandas without a
    runtime: every combination the sampler and task_create write, and version-1
    records."""
    sample, create, work = (EVENT_CODES[e] for e in ("sample", "task_create", "work"))
    exit_frame, enter_frame = 0x7FFD_0000_1F40, 0x7FFD_0000_1E80
    fp, cfa_app = 0b100, 0b011  # framepointer; cfa | application, packed in 3 bits
    rows = [  # event, kind (frame bits), u64b, u32b, parallel_id
        (sample, 0x01 | fp << 2, exit_frame, 0, 0),  # in the task's code
        (sample, 0x03 | fp << 2 | cfa_app << 5, exit_frame, exit_frame - enter_frame, 0),
        (sample, 0x02 | fp << 5, enter_frame, 0, 0),  # initial task in the runtime
        (sample, 0x03, exit_frame, 0x8000_0000, 0),  # too far apart: enter unknown
        (sample, 0, 2, 1, 0),  # record version 1: team size 2, thread 1, no frames
        (create, 0x03 | fp << 2 | fp << 5, exit_frame, 4, enter_frame),
        (work, 0x03, 40, 0, 7),  # other events: never frames
    ]
    ev = np.zeros(len(rows), EVENT_DTYPE)  # all at time 0: to_pandas keeps their order
    for i, (code, kind, u64b, u32b, parallel_id) in enumerate(rows):
        ev[i]["event"], ev[i]["kind"], ev[i]["u64b"] = code, kind, u64b
        ev[i]["u32b"], ev[i]["parallel_id"] = u32b, parallel_id
    trace = ompt_py.Trace.from_records(ev, {"processes": [{"pid": 1, "config": {}}]}, pids=1)
    df = trace.to_pandas()
    got = {name: [None if pd.isna(v) else int(v) for v in df[name]] for name in FRAME_COLUMNS}
    assert got == {
        "exit_frame": [exit_frame, exit_frame, None, exit_frame, None, exit_frame, None],
        "enter_frame": [None, enter_frame, enter_frame, None, None, enter_frame, None],
        "exit_frame_flags": [0x20, 0x20, None, 0, None, 0x20, None],
        "enter_frame_flags": [None, 0x11, 0x20, 0, None, 0x20, None],
    }
