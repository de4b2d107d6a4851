"""Tool control and user-code regions: omp_control_tool from C (an extension,
tests/programs/handlers/scripting_ext.c) and ompt_py.control from Python, and
region markers (ompt_py.region; omptpy_region.h from C, with and without
Python) in traces and in handlers.
"""

from __future__ import annotations

import subprocess

import pytest
from conftest import (
    EV,
    REGION_MARKERS_SNIPPET,
    clean_env,
    n_of,
    run_scripting,
    run_with_tool,
    select,
)

import ompt_py

pytestmark = pytest.mark.needs_clang


START, PAUSE, FLUSH = 1, 2, 3
REGION = 101


run = run_scripting  # (the JSON the snippet printed last, the CompletedProcess)


def test_omp_control_tool_from_a_c_extension(omp_ext, scripting, tmp_path):
    path = tmp_path / "t.parquet"
    out, _ = run(f"""
controls, begins = [], []
ompt_py.on("control_tool", controls.append)
ompt_py.on("parallel_begin", lambda ev: begins.append(len(ev)))
with ompt_py.trace() as t:
    w.parallel(1)
    results = s.pause_resume()     # region, pause, region, start, region, flush: in C
    tool = s.control(64, 7, True)  # a tool-specific command with an argument
    reserved = s.control(5, 0)     # reserved by OpenMP: ignored
    w.parallel(1)
assert ompt_py.drain_handlers()
t.save({str(path)!r})
c = np.concatenate(controls)
arg = c["u32a"].astype(np.uint64) | c["u32b"].astype(np.uint64) << np.uint64(32)
handled = [[int(a), int(b), int(g)] for a, b, g in zip(c["u64a"], c["u64b"], arg)]
print(json.dumps({{"results": results, "tool": tool, "reserved": reserved, "handled": handled,
                  "begins": sum(begins), "arg": s.control_arg()}}))
""", omp_ext, scripting)
    assert out["results"] == [0, 0, 0]  # omp_control_tool_success
    assert out["tool"] == 0 and out["reserved"] == 1  # success; omp_control_tool_ignored
    t = ompt_py.load(path)
    # 1 + 3 - 1 + 1 regions: the one between pause and start is not in the trace
    assert n_of(t.events, "parallel_begin") == 4
    c = select(t.events, "control_tool")
    assert c["u64a"].tolist() == [PAUSE, START, FLUSH, 64, 5]
    assert c["u64b"].tolist() == [0, 0, 0, 7, 0]
    assert all(cp != 0 for cp in c["codeptr"].tolist())  # return addresses in the extension
    # handlers are not paused: they got every region and every command
    assert out["begins"] == 5
    assert out["handled"] == [[PAUSE, 0, 0], [START, 0, 0], [FLUSH, 0, 0], [64, 7, out["arg"]],
                              [5, 0, 0]]


def test_control_from_python(omp_ext, scripting, tmp_path):
    path = tmp_path / "t.parquet"
    out, _ = run(f"""
errors = {{}}
for name, args in [("name", ("resume",)), ("reserved", (5,)), ("negative", (-1,)),
                   ("modifier", ("flush", -1)), ("type", (1.5,))]:
    try:
        ompt_py.control(*args)
        errors[name] = None
    except (ValueError, TypeError) as e:
        errors[name] = f"{{type(e).__name__}}: {{e}}"
before = ompt_py.control("pause")       # no trace, no runtime started yet: still fine
with ompt_py.trace() as t:
    w.parallel(1)
    paused = ompt_py.control("pause")
    w.parallel(2)
    started = ompt_py.control("start")
    w.parallel(3)
    flushed = ompt_py.control("flush")
    mine = ompt_py.control(99, 12)
t.save({str(path)!r})
print(json.dumps({{"errors": errors, "results": [before, paused, started, flushed, mine]}}))
""", omp_ext, scripting)
    assert out["results"] == [0, 0, 0, 0, 0]
    errors = out["errors"]
    assert "resume" in errors["name"] and "start" in errors["name"] and "pause" in errors["name"]
    assert "reserved" in errors["reserved"] and "64" in errors["reserved"]
    assert errors["negative"].startswith("ValueError")
    assert errors["modifier"].startswith("ValueError")
    assert errors["type"].startswith("TypeError")
    t = ompt_py.load(path)
    assert n_of(t.events, "parallel_begin") == 4
    c = select(t.events, "control_tool")
    assert c["u64a"].tolist() == [PAUSE, START, FLUSH, 99]
    assert c["u64b"].tolist() == [0, 0, 0, 12]
    assert c["codeptr"].tolist() == [0, 0, 0, 0]  # from Python


@pytest.mark.pythons
def test_region_markers_nest(omp_ext, scripting, tmp_path):
    """Markers from Python and C reach the trace and a handler (how they pair and
    nest: tests/analysis/test_user_regions.py, on a stored trace of this snippet)."""
    path = tmp_path / "t.parquet"
    out, _ = run(f"TRACE_PATH = {str(path)!r}\n" + REGION_MARKERS_SNIPPET, omp_ext, scripting)
    t = ompt_py.load(path)
    names = t.meta["processes"][0]["region_names"]
    assert set(names) == {"outer", "inner", "deco", "c_outer", "c_inner", "c_leaf", "py_thread"}
    assert names == out["names"]
    assert out["handled"] == out["trace_markers"] == n_of(t.events, "region")


def test_regions_cost_nothing_when_nothing_records(omp_ext, scripting):
    out, _ = run("""
with ompt_py.region("unrecorded"):
    w.parallel(1)
s.c_regions(1)
stats = json.loads(ompt_py._core.stats())
print(json.dumps({"names": ompt_py.region_names(), "threads": len(stats["threads"])}))
""", omp_ext, scripting)
    assert out["names"] == []  # not even interned
    # only the runtime's threads have buffers: the markers attached nothing
    assert out["threads"] == 2


def test_python_thread_that_marked_regions_gives_its_buffer_back(omp_ext, scripting):
    out, _ = run("""
ompt_py.on("region", lambda ev: None)
def mark():
    with ompt_py.region("t"):
        pass
for _ in range(5):
    th = threading.Thread(target=mark)
    th.start()
    th.join()
w.parallel(1)          # threads that ended are retired when the next one attaches
time.sleep(0.1)
ompt_py._core.flush()
stats = json.loads(ompt_py._core.stats())
print(json.dumps({"threads": stats["threads"], "buffer_bytes": stats["buffer_bytes"]}))
""", omp_ext, scripting)
    marked = [th for th in out["threads"] if th["type"] == 4]  # ompt_thread_unknown
    assert len(marked) == 5
    assert not any(th["live"] for th in marked)


def test_region_header_in_a_program_without_python(scripting, tmp_path):
    """The markers of omptpy_region.h (how they pair and nest, what the analyses and
    the Perfetto export make of them: tests/analysis/test_user_regions.py and
    tests/io/test_export.py, on a stored trace of this program)."""
    plain = subprocess.run([scripting.regions_prog, "3"], env=clean_env(), capture_output=True,
                           text=True, timeout=60)
    assert plain.returncode == 0 and plain.stdout.strip() == "done 3"  # no tool: no-ops
    out = tmp_path / "raw"
    r = run_with_tool([scripting.regions_prog, "3"], out)
    assert r.returncode == 0 and r.stdout.strip() == "done 3", r.stderr
    t = ompt_py.load(out)
    assert t.meta["processes"][0]["region_names"] == ["main", "work"]
    marks = t.events[t.events["event"] == REGION]
    assert len(marks) == 14 and set(marks["codeptr"].tolist()) != {0}
    assert EV["parallel_begin"] in set(t.events["event"].tolist())
