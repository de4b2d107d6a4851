"""The Python frames in the Perfetto export: slices (cat "python", named
"file:line in function") above the constructs a Python line started, on the
track of the thread that started them, outermost frame first; regions one
after the other from the same frames share them; frames a nested region took
from the region around it are marked inherited.

On the stored trace of tests/programs/pystacks_app.py (pystacks-inprocess: its
lines marked ``at: NAME``), and on one without Python stacks (export-mixed).
"""

from __future__ import annotations

import copy
import json
import os
from collections import defaultdict

import numpy as np
import pytest
from conftest import app_location, load_stored
from test_export import nested, ns, whole_frame_refused

import ompt_py
from ompt_py.records import EVENT_CODES


def exported(trace, path):
    trace.to_perfetto(path)
    with open(path) as f:
        return json.load(f)["traceEvents"]


at = app_location  # the py_location of the app's line marked `at: NAME`


@pytest.fixture(scope="module")
def app():
    return load_stored("pystacks-inprocess")


@pytest.fixture(scope="module")
def events(app, tmp_path_factory):
    return exported(app, tmp_path_factory.mktemp("perfetto") / "app.json")


def ancestors(events) -> dict[int, list[dict]]:
    """Per slice (its position in events), the slices that hold it on its track,
    outermost first."""
    tracks = defaultdict(list)
    for i, e in enumerate(events):
        if e["ph"] == "X":
            tracks[e["pid"], e["tid"]].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), i))
    out = {}
    for rows in tracks.values():
        stack = []
        for begin, end, i in sorted(rows, key=lambda r: (r[0], -r[1], r[2])):
            while stack and stack[-1][1] <= begin:
                stack.pop()
            out[i] = [events[j] for _, _, j in stack]
            stack.append((begin, end, i))
    return out


def frames(app, stack: int) -> list[tuple[int, str]]:
    """(level, location) of the frames of a Python stack, outermost first."""
    f = app.python_stacks()
    f = f[f["stack"] == stack]
    return list(zip(f["level"], f["location"]))


def python_above(above: list[dict]) -> list[tuple[int, str]]:
    return [(e["args"]["level"], e["name"]) for e in above if e["cat"] == "python"]


def test_frames_nest_with_every_slice(events):
    parents = nested(events)
    assert parents["parallel", "python"] > 0 and parents["python", "python"] > 0
    assert parents["user_region", "python"] == 1 and parents["python", "user_region"] > 0
    assert parents["task", "python"] > 0  # the tasks created outside any region
    # above Python frames: Python frames, the marker, a thread's initial task, or
    # (the inherited frames of a region nested by a worker) the worker's implicit task
    above = ancestors(events)
    holders = {above[i][-1]["name"] for i, e in enumerate(events)
               if e["ph"] == "X" and e["cat"] == "python" and above[i]
               and above[i][-1]["cat"] != "python"}
    assert holders == {"phase", "initial task", "implicit task"}
    for i, e in enumerate(events):
        if e["ph"] == "X" and e["cat"] == "python" and above[i][-1:]:
            assert e["args"]["inherited"] is (above[i][-1]["name"] == "implicit task"
                                              or above[i][-1]["args"].get("inherited") is True)


def test_frames_above_the_regions_they_started(app, events):
    above = ancestors(events)
    regions = app.parallel_regions().set_index("parallel_id")
    slices = {e["args"]["parallel_id"]: i for i, e in enumerate(events)
              if e["ph"] == "X" and e["cat"] == "parallel"}
    checked = 0
    for parallel_id, r in regions.iterrows():
        chain = above[slices[parallel_id]]
        if r["level"] > 1 and not r["py_inherited"]:
            # nested on the thread of the outer one, from its stack: its frames are above it
            assert chain[-1]["cat"] == "implicit_task"
            continue
        expected = frames(app, r["py_stack"])
        # every frame of its stack above it at its level, the innermost right above it
        assert set(expected) <= set(python_above(chain)), (r["py_location"], chain)
        assert chain[-1]["cat"] == "python" and chain[-1]["name"] == expected[-1][1]
        assert all(e["args"]["inherited"] is bool(r["py_inherited"])
                   for e in chain if e["cat"] == "python")
        checked += 1
    assert checked == len(regions) - 1
    # the region a worker nested in nested(): the frames of the outer one, inherited
    (worker,) = regions.index[regions["py_inherited"]]
    chain = above[slices[worker]]
    assert python_above(chain) == frames(app, regions.loc[worker, "py_stack"])
    assert python_above(chain)[-1][1] == at("nested", "main")


def test_regions_one_after_the_other_share_their_frames(app, events):
    python = [e for e in events if e["ph"] == "X" and e["cat"] == "python"]
    regions = app.parallel_regions()

    def spans(location: str, thread: int) -> list[tuple[int, int]]:
        return sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in python
                      if e["name"] == location and e["tid"] == thread)

    # regions(2) from helper(): one slice over both regions; regions(1) in the marker
    helper = regions[regions["py_location"] == at("regions", "regions")].sort_values("begin_ns")
    first, second, in_marker = helper.itertuples()
    assert spans(at("regions", "regions"), 0) == [(first.begin_ns, second.end_ns),
                                                  (in_marker.begin_ns, in_marker.end_ns)]
    # parallel_nogil(2) from the main thread, (3) from the thread "worker"
    for thread, n in ((0, 2), (4, 3)):
        mine = regions[(regions["py_location"] == at("nogil", "without_gil"))
                       & (regions["encountering_thread"] == thread)]
        assert len(mine) == n
        assert spans(at("nogil", "without_gil"), thread) == [
            (mine["begin_ns"].min(), mine["end_ns"].max())]
    # the module's frame: one slice over everything the main thread started
    (module,) = [e for e in python if e["tid"] == 0 and e["args"]["level"] == 0]
    main = regions[regions["encountering_thread"] == 0]
    assert (ns(module["ts"]), ns(module["ts"]) + ns(module["dur"])) == (
        main["begin_ns"].min(), main["end_ns"].max())
    assert module["args"]["user"] is True and module["args"]["function"] == "<module>"


def test_marker_and_tasks_have_their_frames(app, events):
    above = ancestors(events)
    (marker,) = [i for i, e in enumerate(events) if e["ph"] == "X" and e["cat"] == "user_region"]
    chain = python_above(above[marker])
    assert (1, at("marker", "main")) in chain
    # the region in the marker: below it, only the frames it does not share with it
    (inside,) = [i for i, e in enumerate(events) if e["ph"] == "X" and e["cat"] == "parallel"
                 and events[marker] in above[i]]
    below = above[inside][above[inside].index(events[marker]) + 1:]
    assert python_above(below) == [(1, at("in-marker", "main")), (2, at("regions", "regions"))]
    serial = app.tasks()
    serial = set(serial.loc[serial["py_location"] == at("serial-tasks", "main"), "task_id"])
    tasks = [i for i, e in enumerate(events) if e["ph"] == "X" and e["cat"] == "task"
             and e["args"]["task_id"] in serial]
    assert len(tasks) == 3
    for i in tasks:
        assert above[i][-1]["name"] == at("serial-tasks", "main")
    # tasks created inside a region: the region's work, no frames of their own
    for i, e in enumerate(events):
        if e["ph"] == "X" and e["cat"] == "task" and e["args"]["task_id"] not in serial:
            assert above[i][-1]["cat"] != "python"


def test_frames_of_a_program_run_three_times(app, tmp_path):
    """The app's events three times over, one after the other (ids of their own):
    the frames still nest, those of each run's lines apart, the module's frame
    one slice over all."""
    ev = app.events
    span = int(ev["time_ns"].max()) + 1000
    step = int(max(ev["parallel_id"].max(), ev["task_id"].max())) + 1
    tasks = np.isin(ev["event"], [EVENT_CODES["task_create"], EVENT_CODES["task_schedule"]])
    parts = []
    for k in range(3):
        part = ev.copy()
        part["time_ns"] += k * span
        for field, rows in (("parallel_id", True), ("task_id", True), ("u64a", tasks)):
            part[field][(part[field] != 0) & rows] += np.uint64(k * step)  # u64a: a task
        parts.append(part)
    again = ompt_py.Trace.from_records(np.concatenate(parts), app.meta, pids=int(app.pids[0]))
    events = exported(again, tmp_path / "three.json")
    nested(events)
    python = [e for e in events if e["ph"] == "X" and e["cat"] == "python" and e["tid"] == 0]
    once = [e for e in python if e["ts"] < span / 1000]
    assert len(python) == 3 * len(once) - 2  # the module's frame, once for all
    (module,) = [e for e in python if e["args"]["level"] == 0]
    assert ns(module["dur"]) > 2 * span
    assert (sum(e["name"] == at("critical", "locked") for e in python)
            == 3 * sum(e["name"] == at("critical", "locked") for e in once))


def test_native_callers_under_the_python_frames(app, tmp_path):
    """A stack with native callers (native_depth): below its Python frames, the
    native ones (``native``), without the interpreter's own."""
    meta = copy.deepcopy(app.meta)
    (proc,) = meta["processes"]
    interpreter = next(m["start"] + 0x100 for m in proc["modules"]
                       if os.path.basename(m["path"]).startswith("libpython"))
    regions = app.parallel_regions()
    # a native caller: code of the runtime that symbolizes (the nested regions' code)
    caller = int(regions.loc[regions["function"].notna(), "codeptr"].iloc[0])
    stack = int(regions.loc[regions["py_location"] == at("regions", "regions"), "py_stack"].iloc[0])
    proc["python"]["stacks"][stack - 1].append([interpreter, caller])
    events = exported(ompt_py.Trace.from_records(app.events, meta, pids=int(app.pids[0])),
                      tmp_path / "native.json")
    nested(events)
    above = ancestors(events)
    (first, *_) = sorted((e["ts"], i) for i, e in enumerate(events) if e["ph"] == "X"
                         and e["cat"] == "parallel" and e["tid"] == 0)
    chain = [e for e in above[first[1]] if e["cat"] == "python"]
    python = frames(app, stack)
    assert [(e["args"]["level"], e["name"]) for e in chain[:-1]] == python
    assert chain[-1]["args"]["native"] is True and chain[-1]["args"]["level"] == len(python)
    assert chain[-1]["name"] == app.symbolize([caller])["name"].iloc[0]
    assert not any(e["args"]["native"] for e in chain[:-1])


def test_no_frames_where_no_construct_has_a_stack(app, tmp_path):
    """Python stacks, but none of the constructs that carry one: the locks only."""
    mutex = np.isin(app.events["event"], [EVENT_CODES[e] for e in (
        "mutex_acquire", "mutex_acquired", "mutex_released")])
    locks = ompt_py.Trace.from_records(app.events[mutex], app.meta, pids=int(app.pids[0]))
    events = exported(locks, tmp_path / "locks.json")
    assert not [e for e in events if e.get("cat") == "python"]
    assert len([e for e in events if e.get("cat") == "mutex"]) == 80


def test_no_frames_without_python_stacks(tmp_path):
    plain = exported(load_stored("export-mixed"), tmp_path / "mixed.json")
    assert not [e for e in plain if e.get("cat") == "python"]


def test_frames_are_made_from_the_records(tmp_path, monkeypatch):
    """As the other slices: to_pandas() of the whole trace is not made."""
    app = load_stored("pystacks-inprocess")
    monkeypatch.setattr(ompt_py.Trace, "to_pandas", whole_frame_refused)
    assert [e for e in exported(app, tmp_path / "again.json") if e.get("cat") == "python"]
