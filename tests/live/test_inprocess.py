"""ompt_py in the traced process: ``with ompt_py.trace()`` around calls into an
OpenMP extension module built for the test (tests/programs/ext/ompt_work_ext.c).

Each scenario runs in a fresh python (the runtime accepts a tool once per
process, when it initialises).  libomp reports a worker's implicit-barrier
and implicit-task end only when the worker joins the next region, so the
snippets end their window with one empty region (``w.parallel(1)``, the
"trailer") and the tests count the events of the measured regions only.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import numpy as np
import pytest
from conftest import (
    BEGIN,
    DISPATCH_WS_LOOP_CHUNK,
    END,
    EV,
    LIBOMP_VERSION,
    MIXED_SNIPPET,
    MUTEX_CRITICAL,
    MUTEX_LOCK,
    OVERFLOW_POLICIES,
    REGION_BARRIER,
    RUNTIME_LIBOMP,
    TASK_COMPLETE,
    TASK_EXPLICIT,
    TASK_SWITCH,
    WORK_LOOP,
    WORK_LOOP_DYNAMIC,
    WORK_LOOP_STATIC,
    clean_env,
    n_of,
    per_thread,
    region_events,
    run_python,
    select,
    summary,
    unmatched_scopes,
)

import ompt_py

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]

PROLOGUE = "import ompt_py\nimport ompt_work_ext as w\n"


def trace_of(run_traced, body: str, env=None):
    """Runs ``body`` (python using ``w``) inside one trace window followed by the trailer."""
    code = PROLOGUE + "with ompt_py.trace() as t:\n"
    code += "".join(f"    {line}\n" for line in body.strip().splitlines())
    code += "    w.parallel(1)\nt.save(TRACE_PATH)\n"
    return run_traced(code, env)


def measured(t):
    """(events of every region but the last, the last region's parallel id)."""
    ev = t.events
    begins = select(ev, "parallel_begin")
    order = np.argsort(begins["time_ns"], kind="stable")
    ids = begins["parallel_id"][order].tolist()
    return region_events(ev, ids[:-1]), ids[-1]


# ---- counts ----------------------------------------------------------------------


@pytest.mark.pythons
def test_parallel_regions(run_traced):
    n = 6
    t = trace_of(run_traced, f"w.parallel({n})")
    ev, _ = measured(t)
    assert n_of(ev, "parallel_begin") == n
    assert n_of(ev, "parallel_end") == n
    assert n_of(ev, "implicit_task", BEGIN) == 2 * n
    assert n_of(ev, "implicit_task", END) == 2 * n, summary(ev)
    for what in ("sync_region", "sync_region_wait"):
        for ep in (BEGIN, END):
            assert n_of(ev, what, ep, REGION_BARRIER) == 2 * n, summary(ev)
    assert len(ev) == 14 * n, summary(ev)
    assert unmatched_scopes(ev) == []
    # the whole window: the worker's thread_begin, the measured regions, the
    # trailer's 8 events on the encountering thread and 3 on the worker
    # (implicit_task, sync_region, sync_region_wait begin)
    assert len(t.events) == 14 * n + 1 + 8 + 3, summary(t.events)
    proc = t.meta["processes"][0]
    assert proc["written"] == len(t.events) and proc["dropped"] == 0
    assert proc["complete"] is True
    assert set(np.unique(t.pids).tolist()) == {proc["pid"]}


@pytest.mark.pythons
def test_tasks(run_traced):
    n = 25
    t = trace_of(run_traced, f"w.tasks({n})")
    ev = t.events
    created = select(ev, "task_create")
    assert len(created) == n
    assert set((created["u32b"] & 0xF).tolist()) == {TASK_EXPLICIT}
    ids = sorted(created["task_id"].tolist())
    assert sorted(select(ev, "task_schedule", kind=TASK_SWITCH)["u64a"].tolist()) == ids
    assert sorted(select(ev, "task_schedule", kind=TASK_COMPLETE)["task_id"].tolist()) == ids
    assert n_of(ev, "task_schedule") == 2 * n


def test_loops(run_traced):
    n = 40
    t = trace_of(run_traced, f"w.loops({n})")
    ev, _ = measured(t)
    # libomp 19 names the schedule; 14 and 16 say `loop` for both loops
    kinds = (WORK_LOOP_STATIC, WORK_LOOP_DYNAMIC) if LIBOMP_VERSION >= 19 else (WORK_LOOP,)
    for kind in kinds:
        assert n_of(ev, "work", BEGIN, kind) == 4 // len(kinds)
        assert n_of(ev, "work", END, kind) == 4 // len(kinds)
        assert set(select(ev, "work", BEGIN, kind)["u64a"].tolist()) == {n}
    assert n_of(ev, "work") == 8
    d = select(ev, "dispatch")
    assert len(d) == n + 2  # n dynamic,1 chunks, one static chunk per thread
    assert set(d["kind"].tolist()) == {DISPATCH_WS_LOOP_CHUNK}
    # dynamic,1: one chunk of one iteration per iteration; static: 2 chunks of n/2
    ones = d[d["u64b"] == 1]
    assert sorted(ones["u64a"].tolist()) == list(range(n))
    assert sorted(d[d["u64b"] != 1]["u64b"].tolist()) == [n // 2, n // 2]
    assert unmatched_scopes(ev) == []


def test_critical_and_lock(run_traced):
    n = 40
    t = trace_of(run_traced, f"assert w.critical({n}) == {4 * n}")
    ev = t.events
    for what in ("mutex_acquire", "mutex_acquired", "mutex_released"):
        assert n_of(ev, what, kind=MUTEX_CRITICAL) == 2 * n
        assert n_of(ev, what, kind=MUTEX_LOCK) == 2 * n
    assert n_of(ev, "lock_init") == 1 and n_of(ev, "lock_destroy") == 1


def test_nested(run_traced):
    t = trace_of(run_traced, "w.nested()")
    ev, _ = measured(t)
    begins = select(ev, "parallel_begin")
    assert len(begins) == 3
    it = select(ev, "implicit_task", BEGIN)
    assert len(it) == 6
    # the outer region is encountered by the initial task, the inner ones by
    # the outer region's implicit tasks
    outer = begins[~np.isin(begins["task_id"], it["task_id"])]
    assert len(outer) == 1
    outer_id = int(outer["parallel_id"][0])
    outer_tasks = sorted(it[it["parallel_id"] == outer_id]["task_id"].tolist())
    inner = begins[begins["parallel_id"] != outer_id]
    assert sorted(inner["task_id"].tolist()) == outer_tasks


@pytest.mark.pythons
def test_regions_from_two_python_threads(run_traced):
    k = 4
    t = run_traced(PROLOGUE + f"""
import threading
with ompt_py.trace() as t:
    threads = [threading.Thread(target=w.parallel, args=({k},)) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    w.parallel(1)
t.save(TRACE_PATH)
""")
    ev = t.events
    assert n_of(ev, "parallel_begin") == 2 * k + 1
    assert n_of(ev, "parallel_end") == 2 * k + 1
    (proc,) = t.meta["processes"]
    types = {th["thread"]: th["type"] for th in proc["threads"]}
    encountering = Counter(select(ev, "parallel_begin")["thread"].tolist())
    # each Python thread is an initial thread of its own and begins its k regions
    by_thread = sorted(n for th, n in encountering.items() if n == k)
    assert len(by_thread) == 2, encountering
    assert all(types[th] == "initial" for th in encountering)
    # (the trailer on the main thread releases only its own team's worker: the
    # workers of the two threads' last regions report their ends later)


# ---- windows ---------------------------------------------------------------------------


@pytest.mark.pythons
def test_start_stop_start_accumulates_windows(run_traced, tmp_path):
    first = tmp_path / "first.npy"
    t = run_traced(f"""
        import numpy as np
        import ompt_py
        import ompt_work_ext as w
        t = ompt_py.trace()
        assert not t.recording
        t.start()
        assert t.recording and ompt_py.status()["recording"]
        w.parallel(2)
        t.stop()
        assert not t.recording and not ompt_py.status()["recording"]
        np.save({str(first)!r}, t.events)
        first_written = t.meta["written"]
        assert first_written == len(t.events)
        w.parallel(4)            # outside any window: not recorded
        t.start()
        w.parallel(3)
        t.stop()
        t.save(TRACE_PATH)
        print(first_written)
    """)
    ev = t.events
    assert n_of(ev, "parallel_begin") == 5
    assert n_of(ev, "parallel_end") == 5
    before = np.load(first)
    assert n_of(before, "parallel_begin") == 2
    # the first window's events are kept as they were, the second follows
    assert np.array_equal(ev[: len(before)], before)
    assert ev["time_ns"][len(before):].min() > before["time_ns"].max()
    assert t.meta["written"] == len(ev)
    assert t.meta["dropped"] == 0
    (proc,) = t.meta["processes"]
    assert sum(th["written"] for th in proc["threads"]) == len(ev)


def test_reserve_populates_memory_before_each_window(run_traced):
    """OMPTPY_RESERVE: start() makes that much trace memory resident before the
    program records (each window takes its own storage), and changes nothing else.
    Measured on the tool's regions of trace memory (the mappings of at least 1 GiB
    of address space, csrc/tool/sink.c), not as the process's RSS, which other
    memory released meanwhile (the region of records taken between windows, the
    drainer's pages populated ahead) lowers by as much as the reserve."""
    t = run_traced(PROLOGUE + """
def resident_regions():
    sizes, found = {}, None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                found = head[0] if hi - lo >= 1 << 30 else None
            elif found and head[0] == "Rss:":
                sizes[found] = int(head[1]) << 10
    return sorted(sizes.values(), reverse=True)
full = []
t = ompt_py.trace()
for n in (2, 3):
    t.start()
    # the window's region, and the regions of the windows before it (the trace keeps them)
    full.append(sum(r >= 128 << 20 for r in resident_regions()))
    w.parallel(n)
    t.stop()
assert full == [1, 2], (full, resident_regions())
t.save(TRACE_PATH)
""", {"OMPTPY_RESERVE": "128M"})
    assert n_of(t.events, "parallel_begin") == 5
    assert n_of(t.events, "parallel_end") == 5
    assert t.meta["written"] == len(t.events) and t.meta["dropped"] == 0


def test_windows_toggled_while_openmp_threads_run(stream_lib):
    """Closing a window while OpenMP threads are inside callbacks (dynamic loops
    run from another Python thread): the callbacks stay registered (libomp
    cannot take one back safely), the process survives, every window is whole."""
    lib = stream_lib
    r = run_python(f"""
import ctypes, json, threading, time
import ompt_py
lib = ctypes.CDLL({str(lib)!r})
lib.run.restype, lib.run.argtypes = ctypes.c_long, [ctypes.c_long]
producer = threading.Thread(target=lib.run, args=(200,))
producer.start()
time.sleep(0.05)
rows = []
for k in range(60):
    with ompt_py.trace() as t:
        time.sleep(0.001 * (k % 4))
    rows.append([len(t.events), t.meta["written"], t.meta["dropped"]])
lib.stop()
producer.join()
print(json.dumps(rows))
""")
    rows = json.loads(r.stdout)
    assert len(rows) == 60
    assert all(n == written and dropped == 0 for n, written, dropped in rows), rows
    assert sum(n for n, _, _ in rows) > 0


def test_window_excludes_outside_work(run_traced):
    t = run_traced(PROLOGUE + """
w.parallel(3)
with ompt_py.trace() as t:
    w.parallel(2)
w.parallel(5)
t.save(TRACE_PATH)
""")
    assert n_of(t.events, "parallel_begin") == 2
    assert n_of(t.events, "parallel_end") == 2


def test_trace_path_saves_at_stop(run_traced):
    t = run_traced(PROLOGUE + """
with ompt_py.trace(TRACE_PATH) as t:
    w.parallel(4)
""")
    assert n_of(t.events, "parallel_begin") == 4


@pytest.mark.pythons
def test_trace_path_saves_at_interpreter_exit(run_traced):
    # still recording when the interpreter exits: saved by the atexit handler
    t = run_traced(PROLOGUE + """
t = ompt_py.trace(TRACE_PATH)
t.start()
w.parallel(3)
""")
    assert n_of(t.events, "parallel_begin") == 3


def test_addresses_and_times(run_traced, tmp_path):
    info = tmp_path / "info.json"
    t = run_traced(PROLOGUE + f"""
import json, time
before = time.monotonic_ns()
with ompt_py.trace() as t:
    w.parallel(2)
    w.loops(10)
    w.parallel(1)
after = time.monotonic_ns()
ranges = []
for line in open("/proc/self/maps"):
    parts = line.split()
    if len(parts) >= 6 and parts[5] == w.__file__:
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        ranges.append((lo, hi, parts[1]))
t.save(TRACE_PATH)
json.dump({{"before": before, "after": after, "ranges": ranges}}, open({str(info)!r}, "w"))
""")
    info = json.loads(info.read_text())
    ev = t.events
    # codeptr: return addresses in the extension's executable mapping
    text = [(lo, hi) for lo, hi, perms in info["ranges"] if "x" in perms]
    assert text
    with_code = ev[np.isin(ev["event"], [EV["parallel_begin"], EV["parallel_end"], EV["work"]])]
    assert len(with_code) == 2 * 4 + 8
    for cp in with_code["codeptr"].tolist():
        assert any(lo <= cp < hi for lo, hi in text), hex(cp)
    # time: CLOCK_MONOTONIC nanoseconds, all inside the window seen by Python
    origin = t.meta["origin_mono_ns"]
    assert info["before"] <= origin + int(ev["time_ns"].min())
    assert origin + int(ev["time_ns"].max()) <= info["after"]
    for _, rows in per_thread(ev).items():
        assert np.all(np.diff(rows["time_ns"]) >= 0)


def test_existing_omp_tool_libraries_is_kept(tmp_path):
    other = str(tmp_path / "other_tool.so")
    r = run_python("import os, ompt_py; print(os.environ['OMP_TOOL_LIBRARIES'])",
                   {"OMP_TOOL_LIBRARIES": other})
    assert r.stdout.strip() == ompt_py.tool_path() + ":" + other


def test_second_recording_trace_is_refused(omp_ext):
    r = run_python(PROLOGUE + """
a, b = ompt_py.trace(), ompt_py.trace()
with a:
    try:
        b.start()
    except ompt_py.OmptPyError as e:
        print("refused:", e)
    else:
        print("accepted")
""", path=[omp_ext])
    assert r.stdout.startswith("refused:"), r.stdout


# ---- saved traces ----------------------------------------------------------------------


@pytest.mark.pythons
def test_saved_trace_is_the_recorded_one(omp_ext):
    """A trace of tasks, loops, critical/lock and regions, recorded in-process and
    saved: the loaded file is what was recorded, and it records no more (its
    columns and names: tests/io/test_pandas.py, on stored traces of this snippet)."""
    r = run_python(MIXED_SNIPPET + """
import json, os, tempfile
import numpy as np, pandas as pd
path = os.path.join(tempfile.mkdtemp(), "mixed.parquet")
t.save(path)
u = ompt_py.load(path)
assert u.events.dtype == t.events.dtype
assert np.array_equal(u.events, t.events)
assert np.array_equal(u.pids, t.pids)
assert json.loads(json.dumps(u.meta)) == json.loads(json.dumps(t.meta))
pd.testing.assert_frame_equal(u.to_pandas(), t.to_pandas())
try:
    u.start()
except ompt_py.OmptPyError:
    print("loaded trace refuses to record")
""", path=[omp_ext])
    assert "loaded trace refuses to record" in r.stdout


# ---- status and attach errors -------------------------------------------------------------


@pytest.mark.pythons
def test_status(omp_ext):
    r = run_python("""
import json, os, ompt_py
out = {"before": ompt_py.status()}
import ompt_work_ext as w
out["imported"] = ompt_py.status()
with ompt_py.trace() as t:
    out["during"] = ompt_py.status()
    w.parallel(1)
out["after"] = ompt_py.status()
out["tool_path"] = ompt_py.tool_path()
out["env"] = os.environ.get("OMP_TOOL_LIBRARIES")
print(json.dumps(out))
""", path=[omp_ext])
    s = json.loads(r.stdout)
    tool = s["tool_path"]
    assert tool.endswith("libomptpy.so") and tool.startswith("/")
    assert s["env"].split(":")[0] == tool
    before, imported, during, after = s["before"], s["imported"], s["during"], s["after"]
    assert before["attached"] is False and before["recording"] is False
    assert before["tool_path"] == tool
    # the runtime fallback (default auto) loaded the bundled libomp at import
    assert before["fallback"]["policy"] == "auto" and before["fallback"]["how"] == "loaded"
    assert before["mapped_runtimes"] == [{"path": before["fallback"]["libomp"], "family": "llvm"}]
    assert before["runtimes"] == []
    assert before["config"]["sink"] == "memory"
    assert before["config_error"] is None
    # the clang-built extension's libomp.so.5 is that same copy (one runtime)
    assert imported["mapped_runtimes"] == before["mapped_runtimes"]
    assert imported["attached"] is False  # mapped but not initialised yet
    assert during["attached"] is True and during["recording"] is True
    (rt,) = during["runtimes"]
    assert rt["initialized"] is True
    assert rt["callbacks"]["parallel_begin"] == "always"
    assert rt["callbacks"]["dispatch"] == "always"
    import os

    mapped = {os.path.realpath(m["path"]) for m in during["mapped_runtimes"]}
    assert os.path.realpath(rt["path"]) in mapped
    # the runtime under test (libomp 19, or the one of OMPTPY_TEST_LIBOMP)
    assert os.path.samefile(rt["path"], RUNTIME_LIBOMP), (rt["path"], RUNTIME_LIBOMP)
    assert after["attached"] is True and after["recording"] is False


def _exception_of(snippet: str, omp_ext, env=None) -> tuple[str, str]:
    r = run_python(snippet + """
except Exception as e:
    import sys
    print(type(e).__module__ + "." + type(e).__name__)
    print(str(e))
else:
    print("no exception")
""", env, path=[omp_ext])
    kind, _, msg = r.stdout.partition("\n")
    return kind, msg


def test_attach_error_when_runtime_initialised_before_import(omp_ext):
    kind, msg = _exception_of("""
import ompt_work_ext as w
w.max_threads()             # initialises libomp without a tool
import ompt_py
try:
    with ompt_py.trace():
        w.parallel(1)""", omp_ext)
    assert kind == "ompt_py.errors.AttachError", msg
    assert re.search(r"import(ing)? ompt_py", msg, re.I), msg
    assert re.search(r"before|first", msg, re.I), msg


@pytest.mark.parametrize("compiler", ["clang", "gcc"])
def test_module_used_before_import_same_error(compiler, request):
    """One module (tests/programs/ext/ompt_work_ext.c) built by clang (libomp) or by
    gcc (libgomp), imported and used before ompt_py: the same AttachError and the
    same advice at trace(), whatever compiler built it."""
    from ompt_py.live.attach import IMPORT_FIRST

    if compiler == "gcc":
        path, name = request.getfixturevalue("gomp_ext"), "ompt_work_gomp"
    else:
        path, name = request.getfixturevalue("omp_ext"), "ompt_work_ext"
    kind, msg = _exception_of(f"""
import {name} as w
w.max_threads()             # starts the runtime the module is bound to
import ompt_py
try:
    with ompt_py.trace():
        w.parallel(1)""", path)
    assert kind == "ompt_py.errors.AttachError", msg
    assert IMPORT_FIRST in msg, msg


def test_gcc_module_imported_before_ompt_py_unused(gomp_ext):
    """Unlike a clang-built one (below), a gcc-built module imported before ompt_py
    is refused even if it never ran: its GOMP_* calls were bound to libgomp when
    it was loaded."""
    kind, msg = _exception_of("""
import ompt_work_gomp as g
import ompt_py
try:
    with ompt_py.trace():
        g.parallel(1)""", gomp_ext)
    assert kind == "ompt_py.errors.AttachError", msg
    assert "ompt_work_gomp" in msg and "libgomp" in msg


def test_import_ext_before_ompt_py_is_fine_if_unused(run_traced):
    t = run_traced("""
import ompt_work_ext as w   # loaded, not initialised
import ompt_py
with ompt_py.trace() as t:
    w.parallel(3)
t.save(TRACE_PATH)
""")
    assert n_of(t.events, "parallel_begin") == 3


def test_attach_error_for_libgomp_without_fallback(gomp_ext):
    kind, msg = _exception_of("""
import ompt_py
import ompt_work_gomp as g
g.parallel(1)
try:
    ompt_py.trace().start()""", gomp_ext, env=clean_env(OMPTPY_RUNTIME="off"))
    assert kind == "ompt_py.errors.AttachError", msg
    assert "libgomp" in msg and "OMPTPY_RUNTIME=off" in msg


def test_attach_error_when_tool_off(omp_ext):
    kind, msg = _exception_of("""
import ompt_py
import ompt_work_ext as w
try:
    with ompt_py.trace():
        w.parallel(1)""", omp_ext, env={"OMPTPY_TOOL": "off"})
    assert kind == "ompt_py.errors.AttachError", msg
    assert "OMPTPY_TOOL" in msg


@pytest.mark.parametrize(
    ("var", "value", "words"),
    [
        ("OMPTPY_OVERFLOW", "bogus", list(OVERFLOW_POLICIES)),
        ("OMPTPY_BUFFER_SIZE", "abc", []),
        ("OMPTPY_BUFFER_SIZE", "64K", []),
        ("OMPTPY_CLOCK", "sundial", ["auto", "tsc", "monotonic"]),
        ("OMPTPY_RECORD", "sometimes", ["on", "off"]),
        ("OMPTPY_RESERVE", "lots", ["512M", "2G"]),
    ],
)
def test_bad_configuration(omp_ext, var, value, words):
    """README: a bad value turns the tool off in the process, with a warning at
    import and ConfigError from trace(); the OpenMP code itself still runs."""
    r = run_python("""
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import ompt_py
import ompt_work_ext as w
out = {"warnings": [str(x.message) for x in caught],
       "categories": [x.category.__name__ for x in caught]}
try:
    with ompt_py.trace():
        w.parallel(1)
except Exception as e:
    out["error"] = type(e).__module__ + "." + type(e).__name__
    out["message"] = str(e)
w.parallel(2)                      # runs, untraced
out["status_error"] = ompt_py.status()["config_error"]
print(json.dumps(out))
""", {var: value}, path=[omp_ext])
    out = json.loads(r.stdout)
    assert len(out["warnings"]) == 1, out
    assert var in out["warnings"][0] and value in out["warnings"][0]
    assert out.get("error") == "ompt_py.errors.ConfigError", out
    msg = out["message"]
    assert var in msg and value in msg
    for word in words:
        assert word in msg
    assert out["status_error"] and var in out["status_error"]


def test_config_error_is_value_error():
    assert issubclass(ompt_py.ConfigError, ValueError)
    assert issubclass(ompt_py.AttachError, RuntimeError)
    assert issubclass(ompt_py.TraceFileError, OSError)
    for e in (ompt_py.ConfigError, ompt_py.AttachError, ompt_py.TraceFileError):
        assert issubclass(e, ompt_py.OmptPyError)


# ---- fork ----------------------------------------------------------------------------------


def test_fork_child_traces_only_its_own_events(run_traced, tmp_path):
    child_path = tmp_path / "child.parquet"
    parent = run_traced(PROLOGUE + f"""
import os
t = ompt_py.trace()
t.start()
w.parallel(2)
pid = os.fork()
if pid == 0:
    w.parallel(3)
    t.stop()
    t.save({str(child_path)!r})
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
w.parallel(4)
t.stop()
t.save(TRACE_PATH)
print(pid)
""")
    child = ompt_py.load(child_path)
    (cproc,) = child.meta["processes"]
    (pproc,) = parent.meta["processes"]
    assert cproc["pid"] != pproc["pid"]
    assert set(np.unique(child.pids).tolist()) == {cproc["pid"]}
    assert set(np.unique(parent.pids).tolist()) == {pproc["pid"]}
    assert n_of(child.events, "parallel_begin") == 3, summary(child.events)
    assert n_of(child.events, "parallel_end") == 3
    assert n_of(parent.events, "parallel_begin") == 6, summary(parent.events)
    assert cproc["written"] == len(child.events)
    assert pproc["written"] == len(parent.events)
    # Ids are unique within a process (traces key them by pid); the child's
    # regions pair up among themselves.
    child_begins = select(child.events, "parallel_begin")["parallel_id"].tolist()
    assert len(set(child_begins)) == 3
    child_ends = select(child.events, "parallel_end")["parallel_id"].tolist()
    assert sorted(child_begins) == sorted(child_ends)


# ---- overflow in-process ---------------------------------------------------------------------

# w.dispatch(N) then the trailer, in one window: the worker's thread_begin (1),
# the loop's region whole (14 + 4 work + 8 workshare barrier + N dispatch), the
# trailer's 8 + 3 events (see test_parallel_regions).
def window_records(n: int) -> int:
    return n + 1 + 14 + 12 + 11


@pytest.mark.parametrize("zero_copy", ["1", "0"])
@pytest.mark.parametrize("policy", OVERFLOW_POLICIES)
def test_overflow_in_process(run_traced, policy, zero_copy):
    """docs/internals.md: in memory, records are written in place into the trace (zero
    copy) and the overflow policies do not apply; OMPTPY_ZERO_COPY=0 (the
    copying memory sink) applies them as the file sink does.  For drop, a
    blocking handler holds the drainer back (ompt_work_ext keeps the GIL while
    OpenMP runs, so the handler cannot take its first batch before the burst
    is over, and the records the drainer could not hand over stay in the
    buffers): the buffers overflow whatever CPU the drainer would get.  The
    workers are started before, as README says of block=True: a thread that
    began meanwhile would wait for the drainer, and the team for it."""
    n = 200_000
    env = {"OMPTPY_BUFFER_SIZE": "256K", "OMPTPY_DRAIN_MS": "1000", "OMPTPY_OVERFLOW": policy,
           "OMPTPY_ZERO_COPY": zero_copy, "OMPTPY_HANDLER_QUEUE": "64K"}
    expected = window_records(n)
    if policy == "drop":
        t = run_traced(PROLOGUE + f"""
w.parallel(1)
h = ompt_py.on("dispatch", lambda batch: None, block=True)
with ompt_py.trace() as t:
    w.dispatch({n})
    w.parallel(1)
h.remove()
t.save(TRACE_PATH)
""", env)
        # The worker's thread_begin came before the window; the warm-up region's
        # late ends of the worker (implicit task, barrier, barrier wait) come in it.
        expected += -1 + 3
    else:
        t = trace_of(run_traced, f"w.dispatch({n})", env)
    (proc,) = t.meta["processes"]
    assert proc["config"]["overflow"] == policy
    assert proc["config"]["zero_copy"] == (zero_copy == "1")
    if zero_copy == "1":
        policy = "none"
    per = Counter(t.events["thread"].tolist())
    for th in proc["threads"]:
        assert th["written"] == per.get(th["thread"], 0), th
    assert proc["written"] == len(t.events)
    assert proc["written"] + proc["dropped"] == expected, summary(t.events)
    if policy != "drop":
        assert proc["dropped"] == 0
        assert sorted(select(t.events, "dispatch")["u64a"].tolist()) == list(range(n))
    else:
        assert proc["dropped"] > 0
    for _, rows in per_thread(t.events).items():
        assert np.all(np.diff(rows["time_ns"]) >= 0)
    assert n_of(t.events, "parallel_begin") + n_of(t.events, "parallel_end") <= 4
    assert EV["dispatch"] in set(t.events["event"].tolist())


@pytest.mark.pythons
def test_runtime_info(omp_ext):
    r = run_python("""
import json, ompt_py
import ompt_work_ext as w
before = ompt_py.runtime_info()
w.parallel(1)
(info,) = ompt_py.runtime_info()
print(json.dumps({"before": len(before), "path": info.path, "version": info.version,
                  "states": info.states, "impls": info.mutex_impls, "procs": info.num_procs,
                  "places": info.places, "devices": info.num_devices}))
""", clean_env(OMP_PLACES="cores"), path=[omp_ext])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["before"] == 0  # nothing attached before the runtime started
    assert out["path"].endswith("libomp.so.5") and "LLVM OMP" in out["version"]
    states = {int(k): v for k, v in out["states"].items()}
    assert states[0x000] == "ompt_state_work_serial"
    assert states[0x011] == "ompt_state_wait_barrier_implicit_parallel"
    assert states[0x101] == "ompt_state_overhead"
    assert "kmp_mutex_impl_queuing" in out["impls"].values()
    assert out["procs"] == os.cpu_count()
    # OMP_PLACES=cores: one place per core, each with its processor ids
    assert len(out["places"]) >= 1
    assert sorted(p for place in out["places"] for p in place) == list(range(os.cpu_count()))
    assert out["devices"] >= 0
