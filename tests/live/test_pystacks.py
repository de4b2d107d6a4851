"""Python call stacks on the records (ompt_py.trace(python_stacks=...), ompt-py run):
each construct a Python thread starts names the Python line that started it.

The programs are Python code of known lines: tests/programs/pystacks_app.py
(each line that starts constructs is marked ``# at: NAME``, conftest's
``marked_lines``) with the clang-built test extension, and snippets written to
files here for the gcc-built extension (the runtime fallback), a Cython
``prange ... nogil`` module and scikit-learn.  Every traced run is a fresh
process; the scripts run from the repository so that locations read
``tests/programs/pystacks_app.py:LINE in FUNCTION``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import (
    CLANG,
    PYSTACKS_APP,
    PYTHON,
    REPO,
    app_location,
    app_region_counts,
    clean_env,
    cli,
    marked_lines,
    needs_fallback_libomp,
    run_with_tool,
)

import ompt_py
from ompt_py.records import python_stack_ids

APP = PYSTACKS_APP
APP_NAME = "tests/programs/pystacks_app.py"
QUALIFIED = sys.version_info >= (3, 11)  # code objects have qualified names from 3.11 on

# The frame layouts differ by version: these run on every supported Python.
pytestmark = pytest.mark.pythons


def name(qualified: str) -> str:
    """A function's name as this Python's code objects give it."""
    return qualified if QUALIFIED else qualified.rsplit(".", 1)[-1]


def where(line: str, function: str) -> str:
    return app_location(line, name(function))


def run_script(script: Path, path: list[Path], *args: str, env: dict | None = None,
               python_args: tuple = (), cwd: Path = REPO) -> subprocess.CompletedProcess:
    full = clean_env(env)
    full["PYTHONPATH"] = ":".join(map(str, path))
    r = subprocess.run([PYTHON, *python_args, str(script), *args], env=full, cwd=cwd,
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        pytest.fail(f"{script.name} exited with {r.returncode}\n{r.stdout}{r.stderr}")
    return r


def app_trace(tmp_path: Path, omp_ext: Path, setting: str = "on", **kw: object
              ) -> ompt_py.Trace:
    out = tmp_path / f"app-{setting}.parquet"
    run_script(APP, [omp_ext], str(out), setting, **kw)
    return ompt_py.load(out)


def frames_of(t: ompt_py.Trace, stack: int) -> list[str]:
    frames = t.python_stacks()
    return frames.loc[frames["stack"] == stack, "location"].tolist()


def test_each_construct_names_its_python_line(tmp_path, omp_ext):
    t = app_trace(tmp_path, omp_ext)
    py = t.meta["processes"][0]["python"]
    assert (py["status"], py["depth"], py["reason"]) == ("on", 32, None)
    assert py["stacks_refused"] == py["codes_refused"] == 0
    regions = t.parallel_regions()
    top = regions[regions["level"] == 1]
    assert not top["py_inherited"].any()
    assert top["py_location"].notna().all()
    assert top["py_location"].value_counts().to_dict() == app_region_counts(where)

    # whole stacks, outermost first: from the main thread, and from the second thread
    helper = top.loc[top["py_location"] == where("regions", "regions"), "py_stack"].iloc[0]
    assert frames_of(t, helper)[1:] == [where("main-helper", "main"), where("helper", "helper"),
                                        where("regions", "regions")]
    assert frames_of(t, helper)[0].startswith(f"{APP_NAME}:") and "<module>" in frames_of(
        t, helper)[0]
    nogil = top.loc[top["py_location"] == where("nogil", "without_gil")]
    by_thread = {th: set(g["py_stack"]) for th, g in nogil.groupby("encountering_thread")}
    assert len(by_thread) == 2 and all(len(s) == 1 for s in by_thread.values())
    stacks = [frames_of(t, next(iter(s))) for s in by_thread.values()]
    main_stack = next(s for s in stacks if where("main-nogil", "main") in s)
    thread_stack = next(s for s in stacks if s is not main_stack)
    assert main_stack[-2:] == [where("main-nogil", "main"), where("nogil", "without_gil")]
    assert thread_stack[-1] == where("nogil", "without_gil")
    assert any("threading.py" in f and "_bootstrap" in f for f in thread_stack)
    assert not any(APP_NAME in f and "in main" in f for f in thread_stack)

    # nested: the inner region of the primary thread has its own stack, the
    # worker's inherits it
    outer = top.loc[top["py_location"] == where("nested", "main")].iloc[0]
    inner = regions[regions["parent_id"] == outer["parallel_id"]]
    assert len(inner) == 2
    assert (inner["py_stack"] == outer["py_stack"]).all()
    assert sorted(inner["py_inherited"]) == [False, True]

    # tasks: those of a region inherit its stack, those created outside any region own one
    tasks = t.tasks()
    assert tasks["py_location"].value_counts().to_dict() == {
        where("tasks", "main"): 4, where("serial-tasks", "main"): 3}
    assert tasks.groupby("py_location")["py_inherited"].all().to_dict() == {
        where("tasks", "main"): True, where("serial-tasks", "main"): False}

    # the region marker names the line of the `with`, not ompt_py's own code
    marks = t.user_regions()
    assert marks[["name", "py_location"]].values.tolist() == [["phase", where("marker", "main")]]
    assert "ompt_py/live/markers.py" in " ".join(frames_of(t, marks["py_stack"].iloc[0]))

    # only the events that carry a stack have one
    ev = t.to_pandas()
    carries = ev["py_stack"].notna()
    assert set(ev.loc[carries, "event"].astype(str)) == {"parallel_begin", "task_create",
                                                         "region"}
    assert carries.sum() == (python_stack_ids(t.events) > 0).sum()


def test_the_same_under_dev_mode(tmp_path, omp_ext):
    """-X dev (debug hooks on the allocators, more checks): the same locations."""
    normal = app_trace(tmp_path, omp_ext).parallel_regions()["py_location"]
    (tmp_path / "dev").mkdir()
    dev = app_trace(tmp_path / "dev", omp_ext, python_args=("-X", "dev"))
    assert sorted(dev.parallel_regions()["py_location"].dropna()) == sorted(normal.dropna())


def test_off_records_no_stacks(tmp_path, omp_ext):
    t = app_trace(tmp_path, omp_ext, "off")
    assert t.meta["processes"][0]["python"]["status"] == "off"
    assert t.meta["processes"][0]["python"]["stacks"] == []
    assert not python_stack_ids(t.events).any()
    regions = t.parallel_regions()
    assert len(regions) == 20 and regions["py_stack"].isna().all()
    assert regions["py_location"].isna().all() and not regions["py_inherited"].any()
    assert t.python_stacks().empty


def test_depth_keeps_the_innermost_frames(tmp_path, omp_ext):
    t = app_trace(tmp_path, omp_ext, "2")
    frames = t.python_stacks()
    deepest = frames.groupby("stack")["level"].max()
    assert deepest.max() == 1  # at most 2 frames
    helper = frames[frames["location"] == where("regions", "regions")]["stack"].iloc[0]
    assert frames_of(t, helper) == [where("helper", "helper"), where("regions", "regions")]
    assert frames.loc[frames["stack"] == helper, "truncated"].all()
    assert t.meta["processes"][0]["python"]["depth"] == 2


def _script(tmp_path: Path, body: str) -> tuple[Path, dict[str, int]]:
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(body))
    return script, marked_lines(script)


def _location(script: Path, lines: dict[str, int], line: str, function: str) -> str:
    return f"{script}:{lines[line]} in {name(function)}"


@pytest.mark.needs_gcc
def test_gcc_built_extension_through_the_fallback(tmp_path, gomp_ext):
    needs_fallback_libomp()
    script, lines = _script(tmp_path, """
        import sys
        import ompt_py
        import ompt_work_gomp as w

        def compute():
            w.parallel(3)  # at: call

        with ompt_py.trace() as t:
            compute()
        t.save(sys.argv[1])
        """)
    run_script(script, [gomp_ext], str(tmp_path / "t.parquet"), env={"OMP_WAIT_POLICY": "passive"})
    t = ompt_py.load(tmp_path / "t.parquet")
    assert t.parallel_regions()["py_location"].tolist() == [
        _location(script, lines, "call", "compute")] * 3


@pytest.mark.needs_gcc
def test_cython_prange_without_the_gil(tmp_path, prange_mod):
    script, lines = _script(tmp_path, """
        import sys
        import numpy as np
        import ompt_py
        import prange_work as p

        class Model:
            def step(self, a):
                p.fill(a)  # at: fill
                return p.mixsum(50)  # at: mixsum

        with ompt_py.trace() as t:
            Model().step(np.zeros(64))
        t.save(sys.argv[1])
        """)
    run_script(script, [prange_mod], str(tmp_path / "t.parquet"),
               env={"OMP_WAIT_POLICY": "passive"})
    t = ompt_py.load(tmp_path / "t.parquet")
    assert t.parallel_regions()["py_location"].tolist() == [
        _location(script, lines, "fill", "Model.step"),
        _location(script, lines, "mixsum", "Model.step")]


def test_scikit_learn_regions_name_the_line_that_called_fit(tmp_path):
    needs_fallback_libomp()
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    script, lines = _script(tmp_path, """
        import sys
        import ompt_py
        from sklearn.cluster import KMeans
        from sklearn.datasets import make_blobs

        X, _ = make_blobs(n_samples=2000, centers=4, n_features=4, random_state=0)

        def cluster():
            return KMeans(n_clusters=4, n_init=1, random_state=0).fit(X)  # at: fit

        with ompt_py.trace() as t:
            cluster()
        t.save(sys.argv[1])
        """)
    run_script(script, [], str(tmp_path / "t.parquet"),
               env={"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "passive"})
    t = ompt_py.load(tmp_path / "t.parquet")
    regions = t.parallel_regions()
    top = regions[regions["level"] == 1]
    assert len(top) > 0
    assert set(top["py_location"]) == {_location(script, lines, "fit", "cluster")}
    # the library frames are kept in the stack, under the user's line
    frames = t.python_stacks()
    stack = frames[frames["stack"] == top["py_stack"].iloc[0]]
    assert stack["user"].tolist()[:2] == [True, True] and not stack["user"].iloc[-1]
    assert any("sklearn/" in f for f in stack["file"])


def test_ompt_py_run_a_script(tmp_path, omp_ext):
    """The same stacks as in-process (both run from tmp_path: `python -m` puts the
    working directory first on sys.path, and the repository's ompt_py may be
    another Python's build)."""
    out = tmp_path / "run.parquet"
    env = clean_env({"PYTHONPATH": str(omp_ext)})
    r = subprocess.run([PYTHON, "-m", "ompt_py", "run", "-q", "-o", str(out), str(APP),
                        "--untraced"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    assert t.meta["processes"][0]["python"]["status"] == "on"
    inprocess = app_trace(tmp_path, omp_ext, cwd=tmp_path)
    located = ["py_stack", "py_location", "py_inherited"]
    assert t.parallel_regions()[located].equals(inprocess.parallel_regions()[located])
    assert t.tasks()[located].equals(inprocess.tasks()[located])


def test_bad_settings_say_what_is_allowed(tmp_path):
    for bad in ("yes", 0, -1, 257, 2.5):
        with pytest.raises(ValueError, match="True, False or a depth from 1 to 256"):
            ompt_py.trace(python_stacks=bad)
    r = subprocess.run([PYTHON, "-c", "import ompt_py; ompt_py.trace()"],
                       env=clean_env({"OMPTPY_PYTHON_STACKS": "sometimes"}), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert "OMPTPY_PYTHON_STACKS must be on, off or a depth from 1 to 256" in r.stderr
    r = cli("run", "--python-stacks", "deep", "-o", str(tmp_path / "x.parquet"), "--", "true")
    assert r.returncode != 0
    assert "--python-stacks must be on, off or a depth from 1 to 256" in r.stderr


def test_a_program_without_python_says_nothing_of_python(tmp_path, programs):
    r = run_with_tool([str(programs["parallel"]), "2"], tmp_path / "raw")
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(tmp_path / "raw")
    assert "python" not in t.meta["processes"][0]
    assert t.parallel_regions()["py_location"].isna().all()
    assert t.python_stacks().empty


def test_a_python_without_a_build_says_why(tmp_path):
    """ompt-py run on a Python that ompt-py was not built for (3.8): no stacks, and why."""
    python38 = next((str(p) for p in Path("~/.pyenv/versions").expanduser().glob(
        "3.8*/bin/python3.8")), None)
    if python38 is None or CLANG is None:
        pytest.skip("needs python3.8 (pyenv) and clang-19")
    lib = tmp_path / "libregions.so"
    src = tmp_path / "regions.c"
    src.write_text("void regions(int n) { for (int i = 0; i < n; i++) {\n"
                   "#pragma omp parallel num_threads(2)\n"
                   "  __asm__ volatile(\"\" ::: \"memory\"); } }\n")
    subprocess.run([CLANG, "-O2", "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(lib)],
                   check=True)
    script = tmp_path / "old.py"
    script.write_text(f"import ctypes\nctypes.CDLL({str(lib)!r}).regions(2)\n")
    out = tmp_path / "t.parquet"
    r = cli("run", "-q", "-o", str(out), "--", python38, str(script))
    assert r.returncode == 0, r.stderr
    py = ompt_py.load(out).meta["processes"][0]["python"]
    assert py["status"] == "unsupported"
    assert py["reason"].startswith("ompt-py has no build for Python 3.8")
    assert py["stacks"] == []


def test_status_says_whether_stacks_are_captured():
    r = subprocess.run([PYTHON, "-c", "import json, ompt_py; "
                        "print(json.dumps(ompt_py.status()['python_stacks']))"],
                       env=clean_env({"OMPTPY_PYTHON_STACKS": "8"}), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == '{"status": "on", "depth": 8, "reason": null}'


def test_native_frames_tell_apart_the_callers_of_a_generic_loop(tmp_path, omp_ext):
    """Two kernels run their loop through one for_each (as PyTorch's operators do):
    the regions' code address is the same; native_depth names the kernel."""
    script, lines = _script(tmp_path, """
        import sys
        import ompt_py
        import ompt_work_ext as w

        def step():
            w.op("add", 8)  # at: add
            w.op("mul", 8)  # at: mul

        with ompt_py.trace(native_depth=int(sys.argv[2])) as t:
            step()
        t.save(sys.argv[1])
        """)
    for depth in (2, 0):
        run_script(script, [omp_ext], str(tmp_path / f"t{depth}.parquet"), str(depth))
    regions = ompt_py.load(tmp_path / "t2.parquet").parallel_regions()
    assert regions["function"].tolist() == ["for_each", "for_each"]
    assert regions["py_location"].tolist() == [_location(script, lines, "add", "step"),
                                               _location(script, lines, "mul", "step")]
    assert regions["native_callers"].tolist() == ["py_op > add_kernel", "py_op > mul_kernel"]
    t = ompt_py.load(tmp_path / "t2.parquet")
    assert t.meta["processes"][0]["python"]["native_depth"] == 2
    assert t.meta["processes"][0]["python"]["native_missed"] == 0
    frames = t.python_stacks()
    assert frames.groupby("stack")["native"].sum().tolist() == [2, 2]
    off = ompt_py.load(tmp_path / "t0.parquet").parallel_regions()
    assert off["native_callers"].isna().all()
    assert not ompt_py.load(tmp_path / "t0.parquet").python_stacks()["native"].any()


def test_bad_native_depths_say_what_is_allowed():
    for bad in (-1, 17, "deep", 1.5):
        with pytest.raises(ValueError, match="native_depth must be a number of frames from 0"):
            ompt_py.trace(native_depth=bad)


def test_exit_while_a_daemon_thread_starts_regions(tmp_path, omp_ext):
    """The interpreter shuts down while a daemon thread, without the GIL, keeps
    starting regions: capture ends at exit, before thread states go away."""
    script, _ = _script(tmp_path, """
        import threading, time
        import ompt_py
        import ompt_work_ext as w

        def spin():
            while True:
                w.parallel_nogil(20)

        ompt_py.trace().start()
        threading.Thread(target=spin, daemon=True).start()
        time.sleep(0.1)
        """)
    for _ in range(3):
        r = run_script(script, [omp_ext])
        assert r.returncode == 0 and "Fatal" not in r.stderr, r.stderr
