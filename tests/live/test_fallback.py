"""The runtime fallback: code built with gcc -fopenmp (libgomp's ABI) runs on
LLVM libomp, and is traced, when ompt_py is imported first (OMPTPY_RUNTIME,
default auto) or the program runs under ``ompt-py run``.

The gcc-built workloads are tests/programs/gomp/ (a C extension module, a
Cython prange module and an executable); each computes checksums that do not
depend on which thread ran which iteration, so a traced run (libomp) must
give exactly what an untraced run with OMPTPY_RUNTIME=off (libgomp) gives.
What gcc-built code shows on libomp (../shared/FACTS.md, "GCC and libgomp"):
static loops give no work/dispatch events, explicit barriers are
barrier_implementation, parallel_begin says invoker_program.

Every traced scenario runs in a fresh subprocess, as in test_inprocess.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    BEGIN,
    DISPATCH_WS_LOOP_CHUNK,
    END,
    GCC,
    GOMP,
    LIBOMP,
    PYTHON,
    REPO,
    SYNC_BARRIER_IMPLICIT_PARALLEL,
    WORK_LOOP_DYNAMIC,
    build_extension,
    check_links_libgomp,
    clean_env,
    cli,
    compile_program,
    fallback_libomp,
    n_of,
    needs_fallback_libomp,
    ok,
    region_events,
    run_python,
    select,
    summary,
    unmatched_scopes,
)

import ompt_py
from ompt_py.live import runtime as _runtime
from ompt_py.presentation.cli import NOTHING_TO_TRACE

pytestmark = pytest.mark.needs_gcc

EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")

SYNC_BARRIER_IMPLEMENTATION = 4  # ompt_sync_region_barrier_implementation
INVOKER_PROGRAM, INVOKER_RUNTIME = 0x1, 0x2

# The system's libomp (a first copy loaded by hand in the duplicate-runtime tests).
SYSTEM_LIBOMP = _runtime.system_libomp() or "/usr/lib/llvm-19/lib/libomp.so.5"
# The libomp that `import ompt_py` (policy auto) loads when no LLVM runtime is mapped yet.
FALLBACK_LIBOMP = fallback_libomp()

# libgomp spins before it sleeps; on a loaded 2-core machine a libgomp run of
# many regions can then take seconds per region.  The wait policy changes no
# OMPT event and no result.
PASSIVE = {"OMP_WAIT_POLICY": "passive"}


# ---- builds ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gomp_mod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding ``gomp_work`` and ``gomp_work_late``: tests/programs/gomp/
    gomp_work_ext.c built by gcc -fopenmp under two module names."""
    needs_fallback_libomp()
    outdir = tmp_path_factory.mktemp("gomp_mod")
    for name in ("gomp_work", "gomp_work_late"):
        path = build_extension(GOMP / "gomp_work_ext.c", outdir, name, cc=GCC)
    check_links_libgomp(path)
    return outdir


@pytest.fixture(scope="module")
def gomp_prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/gomp/gomp_prog.c built by gcc -O2 -fopenmp."""
    needs_fallback_libomp()
    out = tmp_path_factory.mktemp("gomp_prog") / "gomp_prog"
    compile_program(GOMP / "gomp_prog.c", out, cc=GCC)
    check_links_libgomp(out)
    return out


# ---- helpers -----------------------------------------------------------------------------


def run_json(code: str, path=(), env=None, timeout: float = 120, cwd=None) -> dict:
    """Runs ``code`` in a fresh python; returns the JSON object it prints last."""
    r = run_python(code, env, path=list(path), timeout=timeout, cwd=cwd)
    lines = r.stdout.strip().splitlines()
    assert lines, f"no output\n--- stderr\n{r.stderr}"
    return json.loads(lines[-1])


def traced_run(code: str, trace_path: Path, path=(), env=None, cwd=None):
    """(printed JSON, loaded trace) of ``code``, which gets ``TRACE_PATH`` and must save there."""
    out = run_json(f"TRACE_PATH = {str(trace_path)!r}\n" + textwrap.dedent(code), path, env,
                   cwd=cwd)
    if not trace_path.exists():
        pytest.fail(f"the snippet saved no trace at {trace_path}")
    return out, ompt_py.load(trace_path)


def regions_in_order(ev: np.ndarray) -> list[int]:
    begins = select(ev, "parallel_begin")
    return begins["parallel_id"][np.argsort(begins["time_ns"], kind="stable")].tolist()


def assert_empty_regions(ev: np.ndarray, n: int) -> None:
    """n regions of 2 threads with nothing but their implicit barrier: 14 events each."""
    assert n_of(ev, "parallel_begin") == n and n_of(ev, "parallel_end") == n
    assert n_of(ev, "implicit_task", BEGIN) == 2 * n
    assert n_of(ev, "implicit_task", END) == 2 * n
    for what in ("sync_region", "sync_region_wait"):
        for ep in (BEGIN, END):
            assert n_of(ev, what, ep, SYNC_BARRIER_IMPLICIT_PARALLEL) == 2 * n, summary(ev)
    assert len(ev) == 14 * n, summary(ev)


def assert_dynamic_chunks(ev: np.ndarray, n: int) -> None:
    """A schedule(dynamic, 1) loop of n iterations: one dispatch per iteration."""
    d = select(ev, "dispatch")
    assert len(d) == n, summary(ev)
    assert set(d["kind"].tolist()) == {DISPATCH_WS_LOOP_CHUNK}
    assert set(d["u64b"].tolist()) == {1}  # chunk_iterations
    assert sorted(d["u64a"].tolist()) == list(range(n))  # each iteration once
    assert n_of(ev, "work", BEGIN, WORK_LOOP_DYNAMIC) == 2
    assert n_of(ev, "work", END, WORK_LOOP_DYNAMIC) == 2


# ---- 1. a gcc-built C extension, in-process ---------------------------------------------------

N_REGIONS, N_DYNAMIC, N_STATIC, N_BARRIERS = 5, 64, 1000, 4

GOMP_CALLS = f"""
out["parallel"] = g.parallel({N_REGIONS})
out["dynamic"] = g.dynamic({N_DYNAMIC})
out["static"] = g.static({N_STATIC})
out["barrier"] = g.barrier({N_BARRIERS})
"""


def test_gcc_extension_traced_in_process(gomp_mod, tmp_path):
    code = "import json\nimport ompt_py\nimport gomp_work as g\nout = {}\n"
    code += "with ompt_py.trace() as t:\n" + textwrap.indent(GOMP_CALLS, "    ")
    code += "    g.parallel(1)  # trailer: releases the worker of the last measured region\n"
    code += textwrap.dedent("""
        t.save(TRACE_PATH)
        st = ompt_py.status()
        out["runtime"] = g.runtime()
        out["fallback"] = st["fallback"]
        out["runtimes"] = [r["path"] for r in st["runtimes"] if r["initialized"]]
        print(json.dumps(out))
        """)
    traced, t = traced_run(code, tmp_path / "t.parquet", [gomp_mod], PASSIVE)
    untraced = run_json("import json\nimport ompt_py\nimport gomp_work as g\nout = {}\n"
                        + GOMP_CALLS + textwrap.dedent("""
        out["runtime"] = g.runtime()
        out["mapped"] = [r.family for r in ompt_py.mapped_runtimes()]
        print(json.dumps(out))
        """), [gomp_mod], {"OMPTPY_RUNTIME": "off", **PASSIVE})

    # the fallback put libomp first: the module's GOMP_parallel is libomp's
    assert traced["fallback"]["policy"] == "auto"
    assert traced["fallback"]["libomp"] == FALLBACK_LIBOMP
    assert traced["fallback"]["early_gnu_modules"] == []
    assert os.path.realpath(traced["runtime"]) == os.path.realpath(FALLBACK_LIBOMP)
    assert [os.path.realpath(p) for p in traced["runtimes"]] == [os.path.realpath(FALLBACK_LIBOMP)]
    # with OMPTPY_RUNTIME=off it ran on libgomp
    assert "libgomp" in os.path.basename(untraced["runtime"]), untraced
    assert untraced["mapped"] == ["gnu"]
    # same results on both runtimes
    for key in ("parallel", "dynamic", "static", "barrier"):
        assert traced[key] == untraced[key], key
    assert traced["parallel"] == 5 * N_REGIONS  # every region had 2 threads
    assert traced["barrier"] == 2 * N_BARRIERS

    ev = t.events
    ids = regions_in_order(ev)
    assert len(ids) == N_REGIONS + 3 + 1, summary(ev)
    begins = select(ev, "parallel_begin")
    assert set(begins["u32a"].tolist()) == {2}  # requested team size
    # gcc-built code calls GOMP_parallel itself: invoker_program (clang's: invoker_runtime)
    assert set((begins["u32b"] & (INVOKER_PROGRAM | INVOKER_RUNTIME)).tolist()) == {
        INVOKER_PROGRAM}

    empty = region_events(ev, ids[:N_REGIONS])
    assert_empty_regions(empty, N_REGIONS)
    assert unmatched_scopes(empty) == []

    dynamic = region_events(ev, [ids[N_REGIONS]])
    assert_dynamic_chunks(dynamic, N_DYNAMIC)
    assert n_of(dynamic, "implicit_task", BEGIN) == 2
    assert n_of(dynamic, "sync_region", BEGIN, SYNC_BARRIER_IMPLICIT_PARALLEL) == 2
    assert unmatched_scopes(dynamic) == []

    # schedule(static): gcc computes the chunks itself, the runtime sees only the region
    static = region_events(ev, [ids[N_REGIONS + 1]])
    assert_empty_regions(static, 1)

    barrier = region_events(ev, [ids[N_REGIONS + 2]])
    for what in ("sync_region", "sync_region_wait"):
        for ep in (BEGIN, END):
            assert n_of(barrier, what, ep, SYNC_BARRIER_IMPLEMENTATION) == 2 * N_BARRIERS
            assert n_of(barrier, what, ep, SYNC_BARRIER_IMPLICIT_PARALLEL) == 2
    assert n_of(barrier, "implicit_task", BEGIN) == 2
    assert len(barrier) == 14 + 8 * N_BARRIERS, summary(barrier)
    assert unmatched_scopes(barrier) == []
    assert t.meta["processes"][0]["dropped"] == 0


# ---- 2. a Cython prange extension built by gcc ---------------------------------------------------

PRANGE_FILL, PRANGE_SUM, PRANGE_CALLS = 300, 200, 3

PRANGE_CODE = f"""
out["fill"] = []
for k in range({PRANGE_CALLS}):
    a = np.zeros({PRANGE_FILL} + k)
    p.fill(a)
    out["fill"].append(a.tobytes().hex())
out["mixsum"] = p.mixsum({PRANGE_SUM})
"""


def test_cython_prange_traced_in_process(prange_mod, tmp_path):
    head = "import json\nimport ompt_py\nimport numpy as np\nimport prange_work as p\nout = {}\n"
    code = head + "with ompt_py.trace() as t:\n" + textwrap.indent(PRANGE_CODE, "    ")
    code += "    p.mixsum(1)  # trailer\nt.save(TRACE_PATH)\n"
    code += "out['fallback'] = ompt_py.status()['fallback']\nprint(json.dumps(out))\n"
    traced, t = traced_run(code, tmp_path / "t.parquet", [prange_mod], PASSIVE)
    untraced = run_json(head + PRANGE_CODE + "print(json.dumps(out))\n", [prange_mod],
                        {"OMPTPY_RUNTIME": "off", **PASSIVE})

    assert traced["fallback"]["libomp"] == FALLBACK_LIBOMP
    assert traced["fill"] == untraced["fill"]
    assert traced["mixsum"] == untraced["mixsum"]
    expected = np.arange(PRANGE_FILL, dtype=np.float64)
    first = np.frombuffer(bytes.fromhex(traced["fill"][0]), np.float64)
    assert np.all(np.abs(first - expected) <= 1.0)  # out[i] = sin(..) + i: every i written

    ev = t.events
    ids = regions_in_order(ev)
    assert len(ids) == PRANGE_CALLS + 1 + 1, summary(ev)  # fill x3, mixsum, trailer
    assert n_of(ev, "parallel_end") == len(ids)
    sizes = [PRANGE_FILL + k for k in range(PRANGE_CALLS)] + [PRANGE_SUM]
    for pid, n in zip(ids, sizes):
        region = region_events(ev, [pid])
        assert n_of(region, "parallel_begin") == 1
        assert n_of(region, "implicit_task", BEGIN) == 2
        assert n_of(region, "implicit_task", END) == 2
        assert n_of(region, "sync_region", BEGIN, SYNC_BARRIER_IMPLICIT_PARALLEL) == 2
        assert_dynamic_chunks(region, n)
        assert unmatched_scopes(region) == []


# ---- 3. scikit-learn from PyPI (its wheel vendors libgomp) ---------------------------------------

SKLEARN_CODE = """
import json, os, sys
import ompt_py
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs, make_classification
from sklearn.ensemble import HistGradientBoostingClassifier

X, _ = make_blobs(n_samples=4000, centers=8, n_features=6, cluster_std=3.0, random_state=0)
Xc, yc = make_classification(n_samples=3000, n_features=12, n_informative=6, random_state=0)
traced = os.environ.get("OMPTPY_RUNTIME") != "off"
t = ompt_py.trace() if traced else None
if t is not None:
    t.start()
km = KMeans(n_clusters=8, n_init=1, random_state=0).fit(X)
hgb = HistGradientBoostingClassifier(max_iter=20, random_state=0).fit(Xc, yc)
if t is not None:
    t.stop()
np.savez(RESULT_PATH, centers=km.cluster_centers_, labels=km.labels_,
         proba=hgb.predict_proba(Xc[:500]), n_iter=km.n_iter_)
st = ompt_py.status()
out = {"status": st}
if t is not None:
    ev = t.events
    b = ev[ev["event"] == 3]
    e = ev[ev["event"] == 4]
    out["begins"] = len(b)
    out["ends"] = len(e)
    out["same_ids"] = sorted(b["parallel_id"].tolist()) == sorted(e["parallel_id"].tolist())
    out["dropped"] = t.meta["processes"][0]["dropped"]
print(json.dumps(out))
"""


def test_scikit_learn_on_libomp(tmp_path):
    needs_fallback_libomp()
    r = run_python("import sklearn", check=False)
    if r.returncode != 0:
        pytest.skip("scikit-learn cannot be imported (pip install scikit-learn): "
                    + r.stderr.strip().splitlines()[-1])
    env = {"OMP_NUM_THREADS": "2", **PASSIVE}
    results = {}
    for policy in ("auto", "off"):
        path = tmp_path / f"{policy}.npz"
        code = f"RESULT_PATH = {str(path)!r}\n" + SKLEARN_CODE
        results[policy] = (run_json(code, env={**env, "OMPTPY_RUNTIME": policy}, timeout=180),
                           np.load(path))
    out, fitted = results["auto"]
    _, plain = results["off"]
    st = out["status"]

    # sklearn's vendored libgomp is mapped, but its regions ran on libomp, traced
    gnu = [m["path"] for m in st["mapped_runtimes"] if m["family"] == "gnu"]
    assert any(re.search(r"scikit_learn\.libs/libgomp-[0-9a-f]+\.so\.1", p) for p in gnu), gnu
    assert st["fallback"]["how"] == "loaded" and st["fallback"]["libomp"] == FALLBACK_LIBOMP
    assert st["fallback"]["early_gnu_modules"] == []
    assert [r["path"] for r in st["runtimes"] if r["initialized"]] == [
        os.path.realpath(FALLBACK_LIBOMP)]
    assert out["begins"] > 0, out
    assert out["ends"] == out["begins"] and out["same_ids"]
    assert out["dropped"] == 0
    # the untraced run used libgomp only
    assert {m["family"] for m in results["off"][0]["status"]["mapped_runtimes"]} == {"gnu"}

    # identical fits: same thread count and static partition on both runtimes, and a sum
    # of two threads' partial results is the same in either order
    assert int(fitted["n_iter"]) == int(plain["n_iter"]) > 2
    for key in ("centers", "labels", "proba"):
        assert np.array_equal(fitted[key], plain[key]), key


# ---- 4. a gcc-built executable under ompt-py run -------------------------------------------


def _results(stdout: str) -> tuple[dict[str, str], str]:
    lines = dict(line.split(" ", 1) for line in stdout.strip().splitlines())
    return {k: v for k, v in lines.items() if k != "runtime"}, lines["runtime"]


def test_gcc_program_under_ompt_py_run(gomp_prog, tmp_path):
    regions, iterations = 7, 90
    out = tmp_path / "out.parquet"
    traced = ok(cli("run", "-o", out, "--", gomp_prog, regions, iterations, env=PASSIVE))
    off_out = tmp_path / "off.parquet"
    off = cli("run", "--runtime", "off", "-o", off_out, "--", gomp_prog, regions, iterations,
              env=PASSIVE)
    plain = subprocess.run([str(gomp_prog), str(regions), str(iterations)], env=clean_env(PASSIVE),
                           capture_output=True, text=True, timeout=60, check=True)

    results, runtime = _results(traced.stdout)
    off_results, off_runtime = _results(off.stdout)
    plain_results, plain_runtime = _results(plain.stdout)
    assert results == off_results == plain_results
    assert results["parallel"] == str(5 * regions) and results["barrier"] == "6"
    assert os.path.realpath(runtime) == os.path.realpath(FALLBACK_LIBOMP)
    assert "libgomp" in os.path.basename(off_runtime) and off_runtime == plain_runtime

    # --runtime off: the program ran on libgomp, nothing to trace, and the CLI says so
    assert not off_out.exists()
    assert off.returncode == NOTHING_TO_TRACE, off.stderr
    assert "nothing to trace" in off.stderr and "--runtime off" in off.stderr, off.stderr

    t = ompt_py.load(out)
    ev = t.events
    (proc,) = t.meta["processes"]
    assert FALLBACK_LIBOMP in proc["ld_preload"]
    # the program ran to its end under the tool: every end is reported
    assert unmatched_scopes(ev) == []
    assert n_of(ev, "parallel_begin") == regions + 3 == n_of(ev, "parallel_end")
    assert n_of(ev, "implicit_task", BEGIN) == 2 * (regions + 3) + 1  # + the initial task
    assert n_of(ev, "sync_region", BEGIN, SYNC_BARRIER_IMPLICIT_PARALLEL) == 2 * (regions + 3)
    assert n_of(ev, "sync_region", BEGIN, SYNC_BARRIER_IMPLEMENTATION) == 2 * 3
    assert_dynamic_chunks(ev, iterations)
    assert n_of(ev, "thread_begin") == 2 and n_of(ev, "thread_end") == 2
    assert proc["dropped"] == 0
    # (the analysis tables and the report of such a trace: tests/analysis/test_tables.py,
    # tests/presentation/test_report.py, on a stored run of this program)


# ---- 5. diagnostics ---------------------------------------------------------------------------


EARLY_CODE = """
import json, warnings
import gomp_work as early            # links libgomp, loaded before ompt_py
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import ompt_py
import gomp_work_late as late        # loaded after: runs on libomp
out = {"warnings": [[w.category.__name__, str(w.message), w.filename, w.lineno]
                    for w in caught]}
try:
    with ompt_py.trace() as t:
        late.parallel(2)
except ompt_py.AttachError as e:
    out["error"] = str(e)
out["early"] = early.parallel(3)     # the program goes on, untraced
out["late"] = late.parallel(2)
st = ompt_py.status()
out["fallback"] = st["fallback"]
out["problems"] = st["problems"]
out["early_runtime"] = early.runtime()
out["late_runtime"] = late.runtime()
out["report"] = str(ompt_py.doctor())
print(json.dumps(out))
"""


def test_module_imported_before_ompt_py(gomp_mod):
    """A gcc-built module imported before ompt_py is bound to libgomp: trace() refuses
    with the advice of a runtime started before the import (test_inprocess.py's
    test_module_used_before_import_same_error), rather than tracing nothing."""
    from ompt_py.live.attach import IMPORT_FIRST

    out = run_json(EARLY_CODE, [gomp_mod], PASSIVE)
    early = str(gomp_mod / ("gomp_work" + EXT_SUFFIX))
    # one warning at the import, naming the module
    (w,) = [w for w in out["warnings"] if "libgomp" in w[1]]
    assert w[0] == "UserWarning"
    assert os.path.basename(early) in w[1] and IMPORT_FIRST in w[1]
    assert out["fallback"]["early_gnu_modules"] == [early]
    assert "gomp_work_late" not in json.dumps(out["fallback"])
    # trace() refuses, naming the module and what to do; status() and doctor say it too
    error = out.get("error")
    assert error is not None, out
    assert early in error and "libgomp" in error and IMPORT_FIRST in error
    assert out["problems"] == [error]
    assert "problems:" in out["report"] and error in out["report"]
    # the early module runs on libgomp, the late one on libomp
    assert "libgomp" in os.path.basename(out["early_runtime"])
    assert os.path.realpath(out["late_runtime"]) == os.path.realpath(FALLBACK_LIBOMP)
    assert out["early"] == 15 and out["late"] == 10


def test_early_module_warning_points_at_the_import(gomp_mod, tmp_path):
    """The warning is attributed to the program's ``import ompt_py`` line (the
    code passes a stacklevel for that), not to a file inside the package."""
    script = tmp_path / "early.py"
    script.write_text(textwrap.dedent("""\
        import json, warnings
        import gomp_work
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import ompt_py
        print(json.dumps([[w.filename, w.lineno] for w in caught if "libgomp" in str(w.message)]))
        """))
    r = subprocess.run([PYTHON, str(script)], env=clean_env(PYTHONPATH=str(gomp_mod)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (where,) = json.loads(r.stdout)
    assert where == [str(script), 5], where


@pytest.fixture
def libomp_copy(tmp_path) -> Path:
    """A second copy of LLVM libomp (same soname, another file), as a vendored copy is."""
    if LIBOMP is None:
        pytest.skip("LLVM libomp is not installed")
    copy = tmp_path / "libomp-copy.so"
    shutil.copyfile(LIBOMP, copy)
    return copy


DUPLICATE_CODE = """
import ctypes, json, os, sys
import ompt_py
import gomp_work as g
copy = ctypes.CDLL(COPY, mode=MODE)
out = {"mapped": [r.path for r in ompt_py.mapped_runtimes() if r.family == "llvm"]}
t = ompt_py.trace()
try:
    t.start()
except ompt_py.AttachError as e:
    out["error"] = str(e)
    out["after"] = g.parallel(1)         # the process goes on (on the fallback libomp)
    print(json.dumps(out))
    sys.exit(0)
seen = []
body = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: seen.append(copy.omp_get_thread_num()))
out["bundled"] = g.parallel(1)           # a region on the fallback libomp
copy.GOMP_parallel(body, None, 2, 0)     # a region of 2 threads on the copy
t.stop()
out["copy_threads"] = sorted(seen)
out["runtimes"] = [r["path"] for r in ompt_py.status()["runtimes"] if r["initialized"]]
t.save(TRACE_PATH)
print(json.dumps(out))
"""


def _duplicate_code(copy: Path, mode: int, trace_path: Path) -> str:
    return (f"COPY = {str(copy)!r}\nMODE = {mode}\nTRACE_PATH = {str(trace_path)!r}\n"
            + DUPLICATE_CODE)


def test_two_libomp_copies_attach_error(gomp_mod, libomp_copy, tmp_path):
    out = run_json(_duplicate_code(libomp_copy, os.RTLD_LOCAL, tmp_path / "t.parquet"),
                   [gomp_mod])
    assert len(out["mapped"]) == 2 and str(libomp_copy) in out["mapped"]
    msg = out.get("error")
    assert msg is not None, out
    assert "Error #15" in msg and "KMP_DUPLICATE_LIB_OK" in msg
    assert str(libomp_copy) in msg
    assert out["after"] == 5


def test_two_libomp_copies_allowed_both_traced(gomp_mod, libomp_copy, tmp_path):
    """With KMP_DUPLICATE_LIB_OK=TRUE both copies run and each is traced.  The
    copy is loaded with RTLD_DEEPBIND, so that its calls to its own exported
    functions stay inside it rather than going to the fallback's global libomp
    (for copies loaded otherwise the advice is OMPTPY_RUNTIME=off, see below)."""
    mode = os.RTLD_LOCAL | os.RTLD_NOW | os.RTLD_DEEPBIND
    trace_path = tmp_path / "t.parquet"
    env = clean_env(KMP_DUPLICATE_LIB_OK="TRUE", PYTHONPATH=str(gomp_mod), **PASSIVE)
    try:
        r = subprocess.run([PYTHON, "-c", _duplicate_code(libomp_copy, mode, trace_path)],
                           env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the process hung (killed after 30 s)\n--- stderr\n{e.stderr}")
    assert r.returncode == 0, f"exit {r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "error" not in out, out["error"]
    assert out["bundled"] == 5 and out["copy_threads"] == [0, 1]
    assert sorted(out["runtimes"]) == sorted([os.path.realpath(FALLBACK_LIBOMP),
                                              str(libomp_copy)])
    ev = ompt_py.load(trace_path).events
    assert n_of(ev, "parallel_begin") == 2 and n_of(ev, "parallel_end") == 2
    assert n_of(ev, "implicit_task", BEGIN) == 4
    assert n_of(ev, "thread_begin", BEGIN, 2) == 2  # a worker of each runtime (ompt_thread_worker)
    # each worker is attributed to its own runtime instance
    workers = ev[(ev["event"] == 1) & (ev["kind"] == 2)]
    assert sorted(workers["u32a"].tolist()) == [0, 1]
    threads = ompt_py.load(trace_path).meta["processes"][0]["threads"]
    assert {th["runtime"] for th in threads if th["type"] == "worker"} == {0, 1}


TWO_LOCAL_COPIES = """
import ctypes, json
import ompt_py
first = ctypes.CDLL(FIRST, mode=ctypes.RTLD_LOCAL)
copy = ctypes.CDLL(COPY, mode=ctypes.RTLD_LOCAL)
seen = {"first": [], "copy": []}
Body = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
bodies = {name: Body(lambda _, name=name, lib=lib: seen[name].append(lib.omp_get_thread_num()))
          for name, lib in (("first", first), ("copy", copy))}
with ompt_py.trace() as t:
    first.GOMP_parallel(bodies["first"], None, 2, 0)
    copy.GOMP_parallel(bodies["copy"], None, 2, 0)
t.save(TRACE_PATH)
print(json.dumps({"threads": {k: sorted(v) for k, v in seen.items()},
                  "runtimes": [r["path"] for r in ompt_py.status()["runtimes"]
                               if r["initialized"]]}))
"""


def test_two_local_copies_without_fallback_both_traced(libomp_copy, tmp_path):
    """The advice of the AttachError for copies loaded the usual way (RTLD_LOCAL,
    as a wheel's vendored runtime): OMPTPY_RUNTIME=off and KMP_DUPLICATE_LIB_OK=TRUE."""
    trace_path = tmp_path / "t.parquet"
    code = (f"FIRST = {os.path.realpath(SYSTEM_LIBOMP)!r}\nCOPY = {str(libomp_copy)!r}\n"
            f"TRACE_PATH = {str(trace_path)!r}\n" + TWO_LOCAL_COPIES)
    env = clean_env(KMP_DUPLICATE_LIB_OK="TRUE", OMPTPY_RUNTIME="off", **PASSIVE)
    r = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"exit {r.returncode}\n--- stderr\n{r.stderr}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["threads"] == {"first": [0, 1], "copy": [0, 1]}
    assert len(out["runtimes"]) == 2
    ev = ompt_py.load(trace_path).events
    assert n_of(ev, "parallel_begin") == 2 and n_of(ev, "parallel_end") == 2


def test_doctor_without_target():
    r = ok(cli("doctor"))
    report = r.stdout
    if FALLBACK_LIBOMP == _runtime.BUNDLED:
        assert f"bundled libomp: {_runtime.BUNDLED}" in report, report
    assert f"loaded {FALLBACK_LIBOMP}" in report, report
    assert "no problems found" in report, report
    assert "Traceback" not in r.stderr


def test_doctor_names_the_module_linking_libgomp(gomp_mod, tmp_path):
    script = tmp_path / "uses_gomp.py"
    script.write_text("import gomp_work\nprint('result', gomp_work.parallel(2))\n")
    r = ok(cli("doctor", script, env={"PYTHONPATH": str(gomp_mod), **PASSIVE}))
    assert r.stdout == "result 10\n"  # the script ran, on libomp (the report comes after)
    module = str(gomp_mod / ("gomp_work" + EXT_SUFFIX))
    assert re.search(rf"^\s*{re.escape(module)} -> libgomp\.so\.1$", r.stderr, re.M), r.stderr
    assert re.search(r"^\s*gnu\s+\S*libgomp\.so\.1", r.stderr, re.M), r.stderr
    assert f"tool attached to: {FALLBACK_LIBOMP}" in r.stderr
    assert "no problems found" in r.stderr


def test_doctor_of_a_gcc_built_program(gomp_prog):
    """doctor -- PROGRAM reads the libraries the program links, without running it:
    libgomp, which ompt-py run runs on the fallback's libomp; with the fallback off,
    a problem that says what to do."""
    r = ok(cli("doctor", "--", gomp_prog))
    assert re.search(rf"^program: {re.escape(str(gomp_prog))}$", r.stdout, re.M), r.stdout
    assert re.search(rf"^\s*libgomp\.so\.1 => \S+ \(GNU libgomp: ompt-py run runs it on "
                     rf"{re.escape(FALLBACK_LIBOMP)}, traced\)$", r.stdout, re.M), r.stdout
    assert "no problems found" in r.stdout
    r = ok(cli("doctor", "--", gomp_prog, env={"OMPTPY_RUNTIME": "off"}))
    assert "problems with it:" in r.stdout and "leave it on (auto)" in r.stdout, r.stdout


def test_doctor_reports_two_libomp_copies(libomp_copy, tmp_path):
    script = tmp_path / "two.py"
    script.write_text(f"import ctypes\nctypes.CDLL({str(libomp_copy)!r})\n")
    r = ok(cli("doctor", script))
    assert "problems:" in r.stderr, r.stderr
    assert str(libomp_copy) in r.stderr and "KMP_DUPLICATE_LIB_OK" in r.stderr


# ---- 6. the wheel carries the runtime ------------------------------------------------------


def _source_tree(dest: Path) -> Path:
    """A copy of the working tree's files (tracked and new, not ignored): the build
    writes build/ and *.egg-info beside the sources, not into the repository."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.slow
def test_wheel_carries_the_runtime(gomp_mod, tmp_path):
    """pip wheel puts libomp and its license into the package; in a fresh venv
    with only that wheel, a gcc-built module runs on that libomp, traced.  About
    15 s (a wheel build and a venv with numpy, pandas, pyarrow)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    src = _source_tree(tmp_path / "src")
    dist = tmp_path / "dist"
    # build isolation: pyproject asks for setuptools>=77, newer than a venv's default
    r = subprocess.run([PYTHON, "-m", "pip", "wheel", str(src), "-w", str(dist), "--no-deps",
                        "-q"], env=clean_env(), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"pip wheel failed\n{r.stdout}{r.stderr}"
    (wheel,) = dist.glob("ompt_py-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert {"ompt_py/runtime/libomp.so.5", "ompt_py/runtime/LICENSE.libomp.txt",
                "ompt_py/libomptpy.so"} <= names, sorted(names)
        license_text = z.read("ompt_py/runtime/LICENSE.libomp.txt").decode()
        assert "LLVM" in license_text and "Apache" in license_text
        lib = z.read("ompt_py/runtime/libomp.so.5")
    assert lib[:4] == b"\x7fELF" and b"ompt_start_tool" in lib and b"GOMP_parallel" in lib

    # a fresh venv with only that wheel (its dependencies from the package index)
    venv = tmp_path / "venv"
    subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True, timeout=120)
    vpy = venv / "bin" / "python"
    r = subprocess.run([str(vpy), "-m", "pip", "install", "-q", str(wheel)], env=clean_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"pip install failed\n{r.stdout}{r.stderr}"
    code = textwrap.dedent("""
        import json
        import ompt_py
        import gomp_work as g
        with ompt_py.trace() as t:
            n = g.parallel(3)
        st = ompt_py.status()
        print(json.dumps({"file": ompt_py.__file__, "fallback": st["fallback"], "n": n,
                          "runtime": g.runtime(), "regions": int((t.events["event"] == 3).sum()),
                          "attached": [r["path"] for r in st["runtimes"] if r["initialized"]]}))
        """)
    # bundled: the wheel's own libomp, even where the system has one (auto prefers that)
    r = subprocess.run([str(vpy), "-c", code],
                       env=clean_env(PYTHONPATH=str(gomp_mod), OMPTPY_RUNTIME="bundled"),
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}{r.stderr}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    site = str(venv / "lib")
    assert out["file"].startswith(site), out
    libomp = out["fallback"]["libomp"]
    assert libomp.startswith(site) and libomp.endswith("ompt_py/runtime/libomp.so.5"), out
    assert out["fallback"]["how"] == "loaded"
    assert out["runtime"] == libomp and out["attached"] == [libomp]
    assert out["n"] == 15 and out["regions"] == 3
