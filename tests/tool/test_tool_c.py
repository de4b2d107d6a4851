"""The C tool alone: programs run with OMP_TOOL_LIBRARIES=libomptpy.so and
OMPTPY_OUTPUT=dir (no Python in the traced process), files read back with
ompt_py.load.

At runtime shutdown libomp reports every pending end (worker barrier and
implicit-task ends included), so counts here are exact for whole programs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from conftest import (
    BEGIN,
    CLANG,
    DEFAULT_OVERFLOW,
    DISPATCH_SECTION,
    DISPATCH_WS_LOOP_CHUNK,
    END,
    EV,
    LIBOMP_VERSION,
    MUTEX_CRITICAL,
    MUTEX_LOCK,
    OVERFLOW_POLICIES,
    PROGRAMS,
    REGION_BARRIER,
    RUNTIME_LIBOMP,
    SYNC_BARRIER_EXPLICIT,
    TASK_COMPLETE,
    TASK_EXPLICIT,
    TASK_IMPLICIT,
    TASK_INITIAL,
    TASK_SWITCH,
    WORK_LOOP,
    WORK_LOOP_DYNAMIC,
    WORK_LOOP_STATIC,
    WORK_SECTIONS,
    WORK_SINGLE_EXECUTOR,
    WORK_SINGLE_OTHER,
    WORKSHARE_BARRIER,
    clean_env,
    n_of,
    parallel_records,
    per_thread,
    printed,
    run_with_tool,
    select,
    summary,
    tool_env,
    unmatched_scopes,
)

import ompt_py
from ompt_py.records import PARALLEL_LEAGUE

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]


@pytest.fixture(scope="module")
def traced(programs, tmp_path_factory):
    """traced(name, *args) -> (Trace, CompletedProcess), each run once per module."""
    cache: dict[tuple, tuple] = {}

    def run(name: str, *args: object):
        key = (name, *map(str, args))
        if key not in cache:
            out = tmp_path_factory.mktemp(f"raw-{name}")
            r = run_with_tool([programs[name], *map(str, args)], out)
            assert r.returncode == 0, r.stderr
            files = os.listdir(out)
            assert len(files) == 1, files
            cache[key] = (ompt_py.load(out), r)
        return cache[key]

    return run


def only_process(t):
    (proc,) = t.meta["processes"]
    return proc


# ---- parallel regions --------------------------------------------------------


@pytest.mark.pythons
def test_parallel_regions_exact(traced):
    n = 7
    t, _ = traced("parallel", n)
    ev = t.events
    assert n_of(ev, "parallel_begin", BEGIN) == n
    assert n_of(ev, "parallel_end", END) == n
    # the initial task's implicit task, then 2 per region
    assert n_of(ev, "implicit_task", BEGIN) == 2 * n + 1
    assert n_of(ev, "implicit_task", END) == 2 * n + 1
    for what in ("sync_region", "sync_region_wait"):
        for ep in (BEGIN, END):
            assert n_of(ev, what, ep, REGION_BARRIER) == 2 * n, summary(ev)
    assert n_of(ev, "thread_begin", BEGIN) == 2
    assert n_of(ev, "thread_end", END) == 2
    assert len(ev) == parallel_records(n), summary(ev)
    proc = only_process(t)
    assert proc["written"] == parallel_records(n)
    assert proc["dropped"] == 0
    assert t.meta["written"] == parallel_records(n) and t.meta["dropped"] == 0
    assert proc["complete"] is True and proc["truncated"] is False


def test_parallel_begin_arguments(traced):
    n = 7
    t, _ = traced("parallel", n)
    ev = t.events
    begins = select(ev, "parallel_begin")
    assert set(begins["u32a"].tolist()) == {2}  # requested team size
    assert len(set(begins["parallel_id"].tolist())) == n  # a new id per region
    assert len(set(begins["codeptr"].tolist())) == 1  # one source location
    assert 0 not in begins["codeptr"]
    # the encountering task of every region is the initial task
    initial = select(ev, "implicit_task", BEGIN)
    initial = initial[(initial["u32b"] & TASK_INITIAL) != 0]
    assert len(initial) == 1
    assert set(begins["task_id"].tolist()) == {int(initial["task_id"][0])}
    # implicit tasks of regions: team size 2, thread numbers 0 and 1, flags implicit
    it = select(ev, "implicit_task", BEGIN)
    it = it[(it["u32b"] & TASK_IMPLICIT) != 0]
    assert len(it) == 2 * n
    assert set(it["u32a"].tolist()) == {2}
    assert Counter(it["u64a"].tolist()) == {0: n, 1: n}
    ends = select(ev, "parallel_end")
    assert sorted(ends["parallel_id"].tolist()) == sorted(begins["parallel_id"].tolist())


def test_parallel_per_thread(traced):
    n = 7
    t, _ = traced("parallel", n)
    threads = per_thread(t.events)
    assert len(threads) == 2
    types = {th["thread"]: th["type"] for th in only_process(t)["threads"]}
    for (_, thread), rows in threads.items():
        begins = rows[(rows["event"] == EV["implicit_task"]) & (rows["endpoint"] == BEGIN)]
        if types[thread] == "initial":
            assert len(begins) == n + 1
            assert n_of(rows, "parallel_begin") == n
            assert int(rows["event"][0]) == EV["thread_begin"]
        else:
            assert types[thread] == "worker"
            assert len(begins) == n
            assert n_of(rows, "parallel_begin") == 0
            assert set(begins["u64a"].tolist()) == {1}


def test_meta_describes_process_and_runtime(traced, programs):
    t, _ = traced("parallel", 7)
    proc = only_process(t)
    assert proc["argv"] == [programs.parallel, "7"]
    assert os.path.realpath(proc["exe"]) == os.path.realpath(programs.parallel)
    (rt,) = proc["runtimes"]
    assert "libomp" in os.path.basename(rt["path"])
    # the runtime under test (libomp 19, or the one of OMPTPY_TEST_LIBOMP); every
    # version reports the same version string (FACTS.md): only the path tells
    assert os.path.samefile(rt["path"], RUNTIME_LIBOMP), (rt["path"], RUNTIME_LIBOMP)
    assert rt["version"] == "LLVM OMP version: 5.0.20140926"
    for cb in ("parallel_begin", "parallel_end", "implicit_task", "task_create", "work",
               "sync_region"):
        assert rt["callbacks"][cb] == "always", rt["callbacks"]
    # libomp 14 has no dispatch events (FACTS.md)
    assert rt["callbacks"]["dispatch"] == ("never" if LIBOMP_VERSION < 16 else "always")
    assert proc["config"]["sink"] == "file"
    assert proc["config"]["overflow"] == DEFAULT_OVERFLOW
    assert sorted(th["type"] for th in proc["threads"]) == ["initial", "worker"]
    assert sum(th["written"] for th in proc["threads"]) == proc["written"]
    tids = {th["tid"] for th in proc["threads"]}
    assert proc["pid"] in tids and len(tids) == 2
    # thread_begin carries the OS thread id the metadata gives for that thread
    by_index = {th["thread"]: th["tid"] for th in proc["threads"]}
    begins = select(t.events, "thread_begin")
    assert len(begins) == 2
    for r in begins:
        assert int(r["u64a"]) == by_index[int(r["thread"])]


# ---- invariants over every program ---------------------------------------------

ALL = [
    ("parallel", 5),
    ("tasks", 20),
    ("loops", 50),
    ("sections", 3),
    ("single", 3),
    ("barrier", 4),
    ("critical", 30),
    ("masked", 3),
    ("nested",),
]


@pytest.mark.parametrize("prog", ALL, ids=[p[0] for p in ALL])
def test_every_begin_has_its_end(traced, prog):
    t, _ = traced(*prog)
    assert unmatched_scopes(t.events, t.pids) == []


@pytest.mark.parametrize("prog", ALL, ids=[p[0] for p in ALL])
def test_implicit_tasks_belong_to_regions_of_the_trace(traced, prog):
    t, _ = traced(*prog)
    ev = t.events
    regions = set(select(ev, "parallel_begin")["parallel_id"].tolist())
    assert 0 not in regions
    it = select(ev, "implicit_task", BEGIN)
    inner = it[(it["u32b"] & TASK_INITIAL) == 0]
    assert len(inner) > 0
    assert set(inner["parallel_id"].tolist()) <= regions
    # every region has its team: as many implicit tasks as its team size
    per_region = Counter(inner["parallel_id"].tolist())
    assert set(per_region) == regions
    assert set(per_region.values()) == {2}


@pytest.mark.parametrize("prog", ALL, ids=[p[0] for p in ALL])
def test_timestamps_non_decreasing_per_thread(traced, prog):
    t, _ = traced(*prog)
    for key, rows in per_thread(t.events, t.pids).items():
        times = rows["time_ns"]
        assert np.all(np.diff(times) >= 0), f"thread {key} goes back in time"
    assert t.events["time_ns"].min() >= 0


@pytest.mark.parametrize("prog", ALL, ids=[p[0] for p in ALL])
def test_written_counts_match_records(traced, prog):
    t, _ = traced(*prog)
    proc = only_process(t)
    assert proc["dropped"] == 0
    assert proc["written"] == len(t.events)
    per = Counter(t.events["thread"].tolist())
    assert {th["thread"]: th["written"] for th in proc["threads"] if th["written"]} == dict(per)


# ---- tasks ---------------------------------------------------------------------------


@pytest.mark.pythons
def test_tasks_create_and_schedule(traced):
    n = 20
    t, _ = traced("tasks", n)
    ev = t.events
    created = select(ev, "task_create")
    assert len(created) == n
    assert set((created["u32b"] & 0xF).tolist()) == {TASK_EXPLICIT}
    assert set(created["u32a"].tolist()) == {0}  # no dependences
    ids = created["task_id"].tolist()
    assert len(set(ids)) == n and 0 not in ids
    # created by the implicit task of the single executor
    executor = select(ev, "work", BEGIN, WORK_SINGLE_EXECUTOR)
    assert len(executor) == 1
    assert set(created["u64a"].tolist()) == {int(executor["task_id"][0])}
    assert len(set(created["codeptr"].tolist())) == 1
    # each task is switched to once and completes once
    switch = select(ev, "task_schedule", kind=TASK_SWITCH)
    complete = select(ev, "task_schedule", kind=TASK_COMPLETE)
    assert sorted(switch["u64a"].tolist()) == sorted(ids)
    assert sorted(complete["task_id"].tolist()) == sorted(ids)
    assert n_of(ev, "task_schedule") == 2 * n, summary(ev)
    # switch comes from, and complete returns to, an implicit task of the region
    implicit = set(select(ev, "implicit_task", BEGIN)["task_id"].tolist())
    assert set(switch["task_id"].tolist()) <= implicit
    assert set(complete["u64a"].tolist()) <= implicit


def test_task_create_records_the_encountering_task_frame(traced):
    """task_create carries the encountering task's ompt_frame_t: both frames of the
    implicit task creating the tasks in a loop, the same for every creation."""
    n = 20
    t, _ = traced("tasks", n)
    df = t.to_pandas()
    created = df[df["event"] == "task_create"]
    assert len(created) == n
    assert (created["exit_frame"] > 0).all() and (created["enter_frame"] > 0).all()
    # one invocation of the single's code, calling into the runtime from one place
    assert created["exit_frame"].nunique() == 1 and created["enter_frame"].nunique() == 1
    exit_frame, enter_frame = created["exit_frame"].iloc[0], created["enter_frame"].iloc[0]
    assert 0 < exit_frame - enter_frame < 1 << 16  # the same stack, a few frames deeper
    # libomp 14, 16 and 19: frame pointers of runtime frames (ompt_frame_runtime |
    # ompt_frame_framepointer)
    assert set(created["exit_frame_flags"]) == set(created["enter_frame_flags"]) == {0x20}
    # the raw record keeps the enter frame where other events have a parallel id
    ev = select(t.events, "task_create")
    assert set(ev["u64b"].tolist()) == {exit_frame}
    assert set(ev["parallel_id"].tolist()) == {enter_frame}
    assert created["parallel_id"].isna().all()
    # frames exist for task_create, parallel_begin and samples only
    others = df[~df["event"].isin(["task_create", "parallel_begin"])]
    assert others[["exit_frame", "enter_frame", "exit_frame_flags",
                   "enter_frame_flags"]].isna().all().all()


def test_parallel_begin_frames_error_message_and_control_arg(traced):
    """The three arguments held against what the program sees without OMPT (the
    values LLVM's reference tool, openmp/runtime/test/ompt/callback.h, prints as
    parent_task_frame.exit/.reenter, arg and message/length)."""
    t, r = traced("args")
    df = t.to_pandas()
    main_frame, = printed(r.stdout, "main_frame")
    begins = df[(df["event"] == "parallel_begin") & (df["thread"] == 0)]
    # the outer region, the nested one, the league of teams, then each team's region
    outer, inner, teams = (begins.iloc[i] for i in range(3))
    assert [outer["team_size"], inner["team_size"], teams["team_size"]] == [2, 2, 2]
    assert teams["flags"] & PARALLEL_LEAGUE and not outer["flags"] & PARALLEL_LEAGUE
    # the initial task: no exit frame (NULL, not <NA>), its enter frame just below
    # main's frame (the runtime's: libomp 16 and 19 give no flags for it)
    for initial in (outer, teams):
        assert initial["exit_frame"] == 0 and pd.isna(initial["exit_frame_flags"])
        assert 0 <= main_frame - initial["enter_frame"] < 4096
    assert outer["enter_frame"] == teams["enter_frame"]
    # the outer region's implicit task on thread 0 (LLVM's parallel/nested.c): its exit
    # frame is the frame of the runtime function that called the region's code, its
    # enter frame the frame of that code, which called into the runtime
    assert inner["task_id"] != outer["task_id"]
    assert inner["exit_frame"] == printed(r.stdout, "outer_exit")[0]
    assert inner["enter_frame"] == printed(r.stdout, "outer_frame")[0]
    assert inner["exit_frame_flags"] == inner["enter_frame_flags"] == 0x20  # runtime frame pointers
    # omp_control_tool's arg: the pointer as passed, and NULL as 0
    control = df[df["event"] == "control_tool"]
    assert control["command"].tolist() == [64, 65] and control["modifier"].tolist() == [7, 0]
    assert control["arg"].tolist() == [printed(r.stdout, "control")[0], 0]
    # the error directives' messages: the text (its first 512 bytes) and the length
    errors = df[df["event"] == "error"]
    assert errors["kind"].astype(str).tolist() == ["warning", "warning"]
    assert errors["message_length"].tolist() == printed(r.stdout, "error") == [600, 5]
    long_text = "abcdefghij" * 60
    assert errors["message"].tolist() == [long_text[:512], "short"]
    assert "error_messages_unkept" not in only_process(t)  # the table refused nothing


def test_error_messages_past_the_table_of_strings_are_counted(traced):
    """Messages share the table of region names (16384 strings): once region markers
    filled it, an error's message is <NA> and counted, its length still kept."""
    t, _ = traced("args", "full")
    df = t.to_pandas()
    errors = df[df["event"] == "error"]
    assert errors["message"].isna().all() and errors["message_length"].tolist() == [600, 5]
    proc = only_process(t)
    assert len(proc["region_names"]) == 16384 and proc["error_messages_unkept"] == 2
    assert "region_unnamed" not in proc


# ---- worksharing -----------------------------------------------------------------------


def _loops_of(rows):
    """Per thread: (work kind, dispatch events inside) of each loop construct, in order."""
    loops, inside = [], False
    for r in rows:
        if r["event"] == EV["work"]:
            inside = r["endpoint"] == BEGIN
            if inside:
                loops.append((int(r["kind"]), []))
        elif inside and r["event"] == EV["dispatch"]:
            loops[-1][1].append(r)
    return loops


def test_loops_work_and_dispatch(traced):
    n = 50
    t, _ = traced("loops", n)
    ev = t.events
    # libomp 19 names the schedule; 14 and 16 say `loop` for both loops
    kinds = (WORK_LOOP_STATIC, WORK_LOOP_DYNAMIC) if LIBOMP_VERSION >= 19 else (WORK_LOOP,)
    begins = select(ev, "work", BEGIN)
    assert sorted(begins["kind"].tolist()) == sorted(kinds * (4 // len(kinds))), summary(ev)
    assert set(begins["u64a"].tolist()) == {n}  # iteration count of the loop
    assert sorted(select(ev, "work", END)["kind"].tolist()) == sorted(begins["kind"].tolist())
    if LIBOMP_VERSION < 16:  # no dispatch events on libomp 14 (FACTS.md)
        assert n_of(ev, "dispatch") == 0
        return
    assert n_of(ev, "dispatch") == n + 2, summary(ev)
    static, dynamic = [], []
    for _, rows in per_thread(ev).items():
        # each thread runs the static loop, then the dynamic one
        (first_kind, first), (second_kind, second) = _loops_of(rows)
        assert (first_kind, second_kind) == (kinds[0], kinds[-1])
        static += first
        dynamic += second
    # schedule(static): one chunk per thread, together all iterations
    assert len(static) == 2
    assert all(r["kind"] == DISPATCH_WS_LOOP_CHUNK for r in static)
    assert sorted(int(r["u64a"]) for r in static) == [0, (n + 1) // 2]
    assert sum(int(r["u64b"]) for r in static) == n
    # dynamic,1: one dispatch per iteration, each iteration once
    assert len(dynamic) == n
    assert all(r["kind"] == DISPATCH_WS_LOOP_CHUNK and r["u64b"] == 1 for r in dynamic)
    assert sorted(int(r["u64a"]) for r in dynamic) == list(range(n))
    # each loop ends in its implicit workshare barrier on both threads, the region
    # in its implicit parallel barrier (one kind for both before libomp 19)
    barriers = select(ev, "sync_region", BEGIN)["kind"].tolist()
    if WORKSHARE_BARRIER != REGION_BARRIER:
        assert barriers.count(WORKSHARE_BARRIER) == 4 and barriers.count(REGION_BARRIER) == 2
    else:
        assert barriers.count(WORKSHARE_BARRIER) == 4 + 2


def test_sections(traced):
    n = 3
    t, _ = traced("sections", n)
    ev = t.events
    begins = select(ev, "work", BEGIN, WORK_SECTIONS)
    assert len(begins) == 2 * n
    assert set(begins["u64a"].tolist()) == {3}  # three sections
    assert n_of(ev, "work", END, WORK_SECTIONS) == 2 * n
    # libomp 19 reports one section dispatch per thread and construct (each
    # thread of the 2 gets at least one of the 3 sections), instance = the
    # construct's code address
    d = select(ev, "dispatch")
    assert len(d) == 2 * n, summary(ev)
    assert set(d["kind"].tolist()) == {DISPATCH_SECTION}
    assert set(d["u64a"].tolist()) == set(begins["codeptr"].tolist())


def test_single(traced):
    n = 3
    t, _ = traced("single", n)
    ev = t.events
    for kind in (WORK_SINGLE_EXECUTOR, WORK_SINGLE_OTHER):
        assert n_of(ev, "work", BEGIN, kind) == n
        assert n_of(ev, "work", END, kind) == n
    # one executor and one other per region
    regions = select(ev, "parallel_begin")["parallel_id"].tolist()
    ex = select(ev, "work", BEGIN, WORK_SINGLE_EXECUTOR)["parallel_id"].tolist()
    other = select(ev, "work", BEGIN, WORK_SINGLE_OTHER)["parallel_id"].tolist()
    assert sorted(ex) == sorted(regions) == sorted(other)


def test_explicit_barrier(traced):
    n = 4
    t, _ = traced("barrier", n)
    ev = t.events
    for what in ("sync_region", "sync_region_wait"):
        for ep in (BEGIN, END):
            assert n_of(ev, what, ep, SYNC_BARRIER_EXPLICIT) == 2 * n, summary(ev)
    for _, rows in per_thread(ev).items():
        assert n_of(rows, "sync_region", BEGIN, SYNC_BARRIER_EXPLICIT) == n


def test_critical_and_lock(traced):
    n = 30
    t, r = traced("critical", n)
    assert r.returncode == 0  # the program checks its own result
    ev = t.events
    for what in ("mutex_acquire", "mutex_acquired", "mutex_released"):
        assert n_of(ev, what, kind=MUTEX_CRITICAL) == 2 * n, summary(ev)
        assert n_of(ev, what, kind=MUTEX_LOCK) == 2 * n, summary(ev)
    init = select(ev, "lock_init")
    destroy = select(ev, "lock_destroy")
    assert len(init) == 1 and len(destroy) == 1
    lock_ids = set(select(ev, "mutex_acquire", kind=MUTEX_LOCK)["u64a"].tolist())
    assert lock_ids == {int(init["u64a"][0])} == {int(destroy["u64a"][0])}
    crit_ids = set(select(ev, "mutex_acquired", kind=MUTEX_CRITICAL)["u64a"].tolist())
    assert len(crit_ids) == 1 and crit_ids != lock_ids
    # per thread: acquire, acquired, released, in that order, n times per mutex
    seq_events = [EV["mutex_acquire"], EV["mutex_acquired"], EV["mutex_released"]]
    for _, rows in per_thread(ev).items():
        for kind in (MUTEX_CRITICAL, MUTEX_LOCK):
            mine = rows[np.isin(rows["event"], seq_events) & (rows["kind"] == kind)]
            assert mine["event"].tolist() == seq_events * n


def test_masked(traced):
    n = 3
    t, _ = traced("masked", n)
    ev = t.events
    begins = select(ev, "masked", BEGIN)
    assert len(begins) == n and n_of(ev, "masked", END) == n
    # executed by thread 0 of each team: the initial thread
    initial_thread = int(select(ev, "parallel_begin")["thread"][0])
    assert set(begins["thread"].tolist()) == {initial_thread}
    assert sorted(begins["parallel_id"].tolist()) == sorted(
        select(ev, "parallel_begin")["parallel_id"].tolist())


def test_nested_parent_ids(traced):
    t, _ = traced("nested")
    ev = t.events
    begins = select(ev, "parallel_begin")
    assert len(begins) == 3
    it = select(ev, "implicit_task", BEGIN)
    initial = it[(it["u32b"] & TASK_INITIAL) != 0]
    (initial_task,) = initial["task_id"].tolist()
    outer = begins[begins["task_id"] == initial_task]
    assert len(outer) == 1
    outer_id = int(outer["parallel_id"][0])
    outer_tasks = set(it[it["parallel_id"] == outer_id]["task_id"].tolist())
    assert len(outer_tasks) == 2
    inner = begins[begins["parallel_id"] != outer_id]
    # each inner region is encountered by a different implicit task of the outer one
    assert sorted(inner["task_id"].tolist()) == sorted(outer_tasks)
    for pid in inner["parallel_id"].tolist():
        team = it[it["parallel_id"] == pid]
        assert sorted(team["u64a"].tolist()) == [0, 1]
    # 6 implicit tasks in 3 regions; libomp may reuse an inner worker for the
    # second inner team, so 3 or 4 threads run them
    assert len(it) - len(initial) == 6
    assert len(per_thread(ev)) in (3, 4)


# ---- processes ---------------------------------------------------------------------------


def test_child_processes_each_get_a_file(programs, tmp_path):
    out = tmp_path / "raw"
    cmd = f"{programs.parallel} 2; {programs.parallel} 3"
    r = run_with_tool(["bash", "-c", cmd], out)
    assert r.returncode == 0, r.stderr
    files = sorted(os.listdir(out))
    assert len(files) == 2, files
    file_pids = {int(re.match(r"ompt-(\d+)-\d+\.omptraw$", f).group(1)) for f in files}
    t = ompt_py.load(out)
    assert {p["pid"] for p in t.meta["processes"]} == file_pids
    assert set(np.unique(t.pids).tolist()) == file_pids
    by_argv = {p["argv"][-1]: p for p in t.meta["processes"]}
    assert set(by_argv) == {"2", "3"}
    for n in (2, 3):
        p = by_argv[str(n)]
        mine = t.events[t.pids == p["pid"]]
        assert len(mine) == parallel_records(n) == p["written"]
        assert p["dropped"] == 0
        assert n_of(mine, "parallel_begin") == n
    assert t.meta["written"] == parallel_records(2) + parallel_records(3)
    assert t.meta["dropped"] == 0
    # one time line for both processes: the second ran after the first
    first, second = by_argv["2"]["pid"], by_argv["3"]["pid"]
    assert t.events["time_ns"][t.pids == first].max() < t.events["time_ns"][t.pids == second].min()


def test_fork_child_has_only_its_own_records(programs, tmp_path):
    before_after, child_regions = 2, 3
    out = tmp_path / "raw"
    r = run_with_tool([programs.forker, str(before_after), str(child_regions)], out)
    assert r.returncode == 0, r.stderr
    child_pid = int(r.stdout.split()[0])
    t = ompt_py.load(out)
    procs = {p["pid"]: p for p in t.meta["processes"]}
    assert len(procs) == 2 and child_pid in procs
    (parent_pid,) = set(procs) - {child_pid}
    assert procs[child_pid]["ppid"] == parent_pid
    child = t.events[t.pids == child_pid]
    parent = t.events[t.pids == parent_pid]
    # the child starts with empty buffers: nothing of the parent's first regions
    assert n_of(child, "parallel_begin") == child_regions, summary(child)
    if LIBOMP_VERSION >= 19:
        assert len(child) == parallel_records(child_regions), summary(child)
    else:
        # Before libomp 19 the initial thread's thread_begin and its initial
        # task's implicit_task begin come from ompt_post_init, which runs once
        # per process: the child's runtime does not announce them again (only
        # their ends come, at exit).
        assert len(child) == parallel_records(child_regions) - 2, summary(child)
        initial = [th["thread"] for th in procs[child_pid]["threads"] if th["type"] == "initial"]
        begins = select(child, "thread_begin")
        assert set(begins["thread"].tolist()).isdisjoint(initial), summary(child)
        assert n_of(child, "implicit_task", END) == n_of(child, "implicit_task", BEGIN) + 1
    assert procs[child_pid]["written"] == len(child) and procs[child_pid]["dropped"] == 0
    # the parent loses nothing to the fork
    assert n_of(parent, "parallel_begin") == 2 * before_after
    assert len(parent) == parallel_records(2 * before_after), summary(parent)
    assert procs[parent_pid]["written"] == len(parent) and procs[parent_pid]["dropped"] == 0
    # one time line: the parent's first regions, then the child's events, then
    # (after waitpid) the parent's last regions
    starts = np.sort(select(parent, "parallel_begin")["time_ns"])
    assert starts[before_after - 1] < child["time_ns"].min()
    assert child["time_ns"].max() < starts[before_after]
    # ids are unique within each process (a trace keys them by pid)
    child_ids = select(child, "parallel_begin")["parallel_id"].tolist()
    assert len(set(child_ids)) == child_regions
    assert sorted(child_ids) == sorted(select(child, "parallel_end")["parallel_id"].tolist())


def test_fork_child_has_one_entry_per_os_thread(programs, tmp_path):
    """`thread` is the tool's index of an OS thread, unique for the process: the
    child's thread list must not name the same OS thread twice."""
    out = tmp_path / "raw"
    r = run_with_tool([programs.forker, "1", "1"], out)
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    for proc in t.meta["processes"]:
        tids = [th["tid"] for th in proc["threads"]]
        assert len(tids) == len(set(tids)), (proc["pid"], proc["threads"])


# ---- configuration ---------------------------------------------------------------------


def test_tool_off_writes_nothing(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.parallel, "3"], out, OMPTPY_TOOL="off")
    assert r.returncode == 0, r.stderr
    assert os.listdir(out) == []
    assert r.stderr == ""


def test_without_tool_library_nothing_is_written(programs, tmp_path):
    out = tmp_path / "raw"
    out.mkdir()
    r = subprocess.run([programs.parallel, "3"], env=clean_env(OMPTPY_OUTPUT=str(out)),
                       capture_output=True, text=True)
    assert r.returncode == 0
    assert os.listdir(out) == []


def test_record_off_records_nothing(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.parallel, "3"], out, OMPTPY_RECORD="off")
    assert r.returncode == 0, r.stderr
    if os.listdir(out):
        t = ompt_py.load(out)
        assert len(t.events) == 0
        assert t.meta["written"] == 0


@pytest.mark.parametrize("clock", ["monotonic", "tsc", "auto"])
def test_clock_choice(programs, tmp_path, clock):
    out = tmp_path / "raw"
    start = time.monotonic_ns()
    r = run_with_tool([programs.parallel, "3"], out, OMPTPY_CLOCK=clock)
    stop = time.monotonic_ns()
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    proc = only_process(t)
    if clock != "auto":
        assert proc["clock"] == clock
    assert len(t.events) == parallel_records(3)
    for _, rows in per_thread(t.events).items():
        assert np.all(np.diff(rows["time_ns"]) >= 0)
    # CLOCK_MONOTONIC nanoseconds: every event lies within the run, as seen from here
    assert t.meta["origin_mono_ns"] + int(t.events["time_ns"].min()) >= start
    assert t.meta["origin_mono_ns"] + int(t.events["time_ns"].max()) <= stop


@pytest.mark.parametrize(
    ("var", "value", "allowed"),
    [
        ("OMPTPY_OVERFLOW", "bogus", list(OVERFLOW_POLICIES)),
        ("OMPTPY_BUFFER_SIZE", "abc", ["8M"]),
        ("OMPTPY_CLOCK", "sundial", ["auto", "tsc", "monotonic"]),
        ("OMPTPY_TOOL", "maybe", ["on", "off"]),
        ("OMPTPY_DRAIN_MS", "0", ["1", "1000"]),
        # only real-time signals: 11 would swallow real segfaults, 15 and 2 the
        # program's own; 32 is no signal a program can use (glibc's threads)
        ("OMPTPY_SAMPLE_SIGNAL", "11", ["real-time", "34", "64"]),
        ("OMPTPY_SAMPLE_SIGNAL", "15", ["real-time"]),
        ("OMPTPY_SAMPLE_SIGNAL", "2", ["real-time"]),
        ("OMPTPY_SAMPLE_SIGNAL", "32", ["real-time"]),
        ("OMPTPY_BUFFER_SIZE", "1024G", ["available", "MiB"]),
        ("OMPTPY_ZERO_COPY", "maybe", ["on", "off"]),
    ],
)
def test_bad_setting_no_trace_and_message(programs, tmp_path, var, value, allowed):
    out = tmp_path / "raw"
    r = run_with_tool([programs.parallel, "3"], out, **{var: value})
    assert r.returncode == 0  # the program itself still runs
    assert os.listdir(out) == []
    assert var in r.stderr and value in r.stderr
    for word in allowed:
        assert word in r.stderr, r.stderr


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable:"))


def test_reserve_beyond_memory_is_refused(programs, tmp_path):
    """Twice the memory available: refused, not an OOM kill."""
    out = tmp_path / "raw"
    size = f"{2 * mem_available() >> 30 or 1}G"
    r = run_with_tool([programs.parallel, "1"], out, OMPTPY_RESERVE=size)
    assert r.returncode == 0 and os.listdir(out) == []
    assert "OMPTPY_RESERVE" in r.stderr and "available" in r.stderr, r.stderr


def test_sample_signal_realtime_accepted(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.imbalance, "0.05"], out, OMPTPY_SAMPLE_HZ="1000",
                      OMPTPY_SAMPLE_SIGNAL="40")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    proc = only_process(ompt_py.load(out))
    assert proc["config"]["sample_signal"] == 40 and proc["config"]["sample_error"] == ""
    assert n_of(ompt_py.load(out).events, "sample") > 0


def test_thread_without_memory_for_its_buffer_counts_its_records(programs, tmp_path):
    """Written with write() from per-thread buffers (OMPTPY_ZERO_COPY=off), room
    (RLIMIT_AS) for one 256 MiB buffer, not two: the second thread gets none,
    and its records are counted as lost with the reason (not an OOM kill, not a
    silent empty trace)."""
    import resource

    if os.environ.get("OMPTPY_TEST_PRELOAD"):
        pytest.skip("a sanitizer's runtime is preloaded (make test-sanitize): an address-space "
                    "limit leaves no room for its shadow memory")
    out = tmp_path / "raw"
    out.mkdir()
    limit = 400 << 20
    r = subprocess.run([programs.parallel, "3"],
                       env=tool_env(out, OMPTPY_BUFFER_SIZE="256M", OMPTPY_ZERO_COPY="off"),
                       capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert r.returncode == 0, r.stderr
    assert "no memory for a thread's 256 MiB buffer" in r.stderr, r.stderr
    with pytest.warns(ompt_py.TraceWarning, match="no memory for the thread's buffer"):
        t = ompt_py.load(out)
    proc = only_process(t)
    assert len(t.events) > 0 and proc["lost"] > 0
    assert len(t.events) + proc["lost"] == parallel_records(3)
    assert list(proc["lost_reasons"]) == ["no memory for the thread's buffer"]


def test_too_small_buffer_is_refused_and_suggested_minimum_works(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.parallel, "1"], out, OMPTPY_BUFFER_SIZE="64K")
    assert os.listdir(out) == []
    m = re.search(r"at least (\d+[KMG]?)", r.stderr)
    assert m, r.stderr
    minimum = m.group(1)
    # the value the message asks for must itself be accepted
    out2 = tmp_path / "raw2"
    r2 = run_with_tool([programs.parallel, "1"], out2, OMPTPY_BUFFER_SIZE=minimum)
    assert r2.stderr == "", f"the suggested minimum {minimum} is refused: {r2.stderr}"
    assert len(os.listdir(out2)) == 1


@pytest.mark.parametrize("size", ["256K", "1M", "8M", "262144"])
def test_valid_buffer_sizes(programs, tmp_path, size):
    out = tmp_path / "raw"
    r = run_with_tool([programs.parallel, "2"], out, OMPTPY_BUFFER_SIZE=size)
    assert r.returncode == 0 and r.stderr == ""
    t = ompt_py.load(out)
    units = {"K": 1 << 10, "M": 1 << 20}
    expect = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    assert only_process(t)["config"]["buffer_bytes"] == expect
    assert len(t.events) == parallel_records(2)


def test_output_dir_missing_is_reported(programs, tmp_path):
    missing = tmp_path / "does-not-exist"
    r = subprocess.run([programs.parallel, "2"], env=tool_env(missing), capture_output=True,
                       text=True)
    assert r.returncode == 0
    assert "ompt-py" in r.stderr and str(missing) in r.stderr


def test_place_info_at_implicit_task_begin(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.parallel, "3"], out, OMPTPY_PLACE_INFO="on",
                      OMP_PLACES="cores", OMP_PROC_BIND="close")
    assert r.returncode == 0, r.stderr
    df = ompt_py.load(out).to_pandas()
    it = df[df["event"] == "implicit_task"]
    begins = it[it["endpoint"] == "begin"]
    in_regions = begins[begins["team_size"] == 2]
    assert len(in_regions) == 6
    # bound close to the cores: thread i of each team runs in place i
    assert (in_regions["place_num"] == in_regions["thread_num"]).all()
    assert (in_regions["proc_id"] >= 0).all()
    assert in_regions.groupby("thread_num")["proc_id"].nunique().eq(1).all()  # stays bound
    assert it.loc[it["endpoint"] == "end", ["proc_id", "place_num"]].isna().all().all()
    # without the switch there is nothing to show
    out2 = tmp_path / "raw2"
    run_with_tool([programs.parallel, "1"], out2)
    assert ompt_py.load(out2).to_pandas()["proc_id"].isna().all()


def test_place_info_in_a_forked_child(programs, tmp_path):
    """libomp begins the child's initial task inside its post-fork handler, holding
    its own lock: a callback that asks the runtime for the place there waited for
    that lock forever, and the parent for the child (this test hung)."""
    out = tmp_path / "raw"
    out.mkdir()
    env = tool_env(out, OMPTPY_PLACE_INFO="on", OMP_PLACES="cores", OMP_PROC_BIND="close")
    # its own session: a hung child is killed with its parent
    p = subprocess.Popen([programs.forker, "2", "3"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail("forker with OMPTPY_PLACE_INFO=on did not end in 30 s (the child hung in "
                    "libomp's post-fork handler)")
    assert p.returncode == 0, stderr
    t = ompt_py.load(out)
    assert len(t.meta["processes"]) == 2
    df = t.to_pandas()
    begins = df[(df["event"] == "implicit_task") & (df["endpoint"] == "begin")]
    assert (begins["proc_id"] >= 0).all()
    initial = begins[(begins["flags"].astype(int) & TASK_INITIAL) != 0]
    # not asked there (libomp 19 begins the child's initial task again, 14 and 16 do not)
    assert len(initial) >= 1 and (initial["place_num"] == -1).all()


# ---- other tools, abnormal ends ---------------------------------------------------------


@pytest.fixture(scope="module")
def other_tool(tmp_path_factory):
    out = tmp_path_factory.mktemp("other") / "other_tool.so"
    r = subprocess.run([CLANG, "-O2", "-shared", "-fPIC", "-Wall", "-Werror",
                        str(PROGRAMS / "ext" / "other_tool.c"), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("ours", ["on", "off"])
def test_tool_off_lets_the_next_tool_load(programs, tmp_path, other_tool, ours):
    out = tmp_path / "raw"
    out.mkdir()
    env = tool_env(out, OMPTPY_TOOL=ours)
    env["OMP_TOOL_LIBRARIES"] += ":" + str(other_tool)
    r = subprocess.run([programs.parallel, "2"], env=env, capture_output=True, text=True)
    assert r.returncode == 0
    if ours == "off":
        assert "other-tool: initialize" in r.stderr
        assert os.listdir(out) == []
    else:  # the first tool that accepts wins
        assert "other-tool" not in r.stderr
        assert len(ompt_py.load(out).events) == parallel_records(2)


def test_process_ended_by_exit_is_incomplete(programs, tmp_path):
    n = 200_000
    out = tmp_path / "raw"
    # a small buffer: under the default flush policy the threads write their
    # full chunks to the file themselves while the program runs
    r = run_with_tool([programs.many, str(n), "_exit"], out, OMPTPY_BUFFER_SIZE="256K")
    assert r.returncode == 0, r.stderr
    assert len(os.listdir(out)) == 1
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    assert proc["complete"] is False
    assert proc["truncated"] is False
    # what the drainer wrote is there and intact; what was buffered at _exit is not
    assert 0 < len(t.events) < n + 32
    assert proc["written"] <= len(t.events)
    d = select(t.events, "dispatch")
    assert len(np.unique(d["u64a"])) == len(d)
    for _, rows in per_thread(t.events).items():
        assert np.all(np.diff(rows["time_ns"]) >= 0)


def test_threads_that_end_give_their_buffer_to_the_next(programs, tmp_path):
    """20 root threads started one after another: each is counted on its own,
    and their buffers are reused rather than one mapped per thread."""
    out = tmp_path / "raw"
    r = run_with_tool([programs.roots, "20"], out)
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    initial = [th for th in proc["threads"] if th["type"] == "initial"]
    assert len(initial) == 20
    assert all(th["written"] > 0 and th["dropped"] == 0 for th in initial)
    assert len({th["thread"] for th in proc["threads"]}) == len(proc["threads"])
    assert n_of(t.events, "thread_begin") == n_of(t.events, "thread_end") == len(proc["threads"])
    # the runtime's state is the one at the end (finalize ran), not at the file's start
    assert proc["runtimes"][0]["initialized"] and proc["runtimes"][0]["finalized"]
    arena = proc["config"]["buffer_bytes"]
    # one slot for the root of the moment, one for the runtime's worker
    assert proc["buffer_bytes"] <= 2 * arena * 1.01, proc["buffer_bytes"] / arena


def test_omp_control_tool_pauses_and_restarts_recording(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.control], out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0", "0"]  # omp_control_tool_success, each time
    t = ompt_py.load(out)
    ev = t.events
    assert n_of(ev, "parallel_begin") == 2  # the region between pause and start is missing
    commands = select(ev, "control_tool")["u64a"].tolist()
    assert commands == [2, 1, 3]  # pause, start and flush all show where they happened
