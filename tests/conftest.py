"""Shared fixtures and helpers of the ompt-py test suite.

Rules the helpers enforce:

* The pytest process never initialises an OpenMP runtime: every traced
  scenario runs in a fresh subprocess (libomp accepts a tool once per
  process, when it initialises).  The pytest process may import ompt_py to
  load files; importing it puts the tool into this process's
  OMP_TOOL_LIBRARIES, so every subprocess gets an environment cleaned of
  OMP_* / OMPTPY_* / KMP_* variables (``clean_env``) plus what the test asks.
* Test programs (tests/programs/*.c) are built once per session with
  ``clang-19 -O2 -fopenmp``; the extension module for in-process tests
  (tests/programs/ext/ompt_work_ext.c) with ``clang-19 -fopenmp -shared
  -fPIC`` (and, for the libgomp test, ``gcc -fopenmp``).
* libomp reports a worker's implicit-barrier end and implicit-task end only
  when the worker is released for the next region (or at shutdown).  Helpers
  here pair ends with begins by task id and per-thread nesting.
* The folders: tool/ (the C tool under OpenMP programs) and live/ (recording
  from Python) run programs; notebooks/ runs kernels.  analysis/, io/ and
  presentation/ run nothing: they read the traces stored in tests/data
  (``load_stored``; tests/data/README.md, made by tests/data/make_traces.py)
  or make synthetic ones (``ompt_py.Trace.from_records``), so they need no
  compiler and no OpenMP runtime.  Collection refuses a test there that asks
  for a build (``STORED_ONLY``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PROGRAMS = TESTS / "programs"
EXT_SOURCE = PROGRAMS / "ext" / "ompt_work_ext.c"
HANDLER_PROGRAMS = PROGRAMS / "handlers"  # scripting callbacks: handlers, native, control
CSRC_TOOL = REPO / "csrc" / "tool"  # the tool's sources and private headers
CSRC_INCLUDE = REPO / "csrc" / "include"  # the public headers shipped in the package

CLANG = shutil.which("clang-19")
GCC = shutil.which("gcc")
LLVM_LIB = Path("/usr/lib/llvm-19/lib")
LIBOMP_CANDIDATES = [
    LLVM_LIB / "libomp.so.5",
    LLVM_LIB / "libomp.so",
    Path("/usr/lib/x86_64-linux-gnu/libomp.so.5"),
]
LIBOMP = next((p for p in LIBOMP_CANDIDATES if p.exists()), None)
OMP_TOOLS_H = LLVM_LIB / "clang" / "19" / "include" / "omp-tools.h"
PYTHON = sys.executable

# ---- the runtime under test (OMPTPY_TEST_LIBOMP) -------------------------------
# OMPTPY_TEST_LIBOMP=DIR (e.g. .cache/libomp/16, see `make old-runtimes`) runs
# every traced subprocess on DIR/libomp.so.5 instead of libomp 19: clean_env
# puts DIR first on LD_LIBRARY_PATH, which the clang-19-built programs and
# extension follow (DT_NEEDED libomp.so.5, no rpath) and so does ompt_py's
# runtime fallback in a Python child (OMPTPY_RUNTIME=auto loads the libomp of
# LD_LIBRARY_PATH).  clang-19 ends dynamically scheduled loops with a call to
# __kmpc_dispatch_deinit, which libomp < 19 lacks and libomp 19 defines as an
# empty function: for an older runtime, programs and extensions are built with
# tests/programs/compat/dispatch_deinit.c (the same empty function).  Only test
# modules marked `any_libomp` run then (`pytest -m any_libomp`); the others skip.


def _libomp_version(lib: Path) -> int | None:
    """The LLVM major version of a libomp.so.5: from a libomp-N.so.5 beside it
    (Debian's packages ship one) or an llvm-N directory in its path."""
    for sibling in sorted(lib.parent.glob("libomp-*.so.5")):
        if (m := re.fullmatch(r"libomp-(\d+)\.so\.5", sibling.name)) and sibling.is_file():
            return int(m.group(1))
    m = re.search(r"/llvm-(\d+)/", str(lib.resolve()))
    return int(m.group(1)) if m else None


def _runtime_under_test() -> tuple[Path | None, int]:
    value = os.environ.get("OMPTPY_TEST_LIBOMP")
    if not value:
        return None, 19
    lib = Path(value).resolve() / "libomp.so.5"
    if not lib.is_file():
        raise pytest.UsageError(f"OMPTPY_TEST_LIBOMP={value}: there is no {lib}")
    version = _libomp_version(lib)
    if version is None:
        raise pytest.UsageError(f"OMPTPY_TEST_LIBOMP={value}: cannot tell the LLVM version of "
                                f"{lib} (no libomp-N.so.5 beside it, no llvm-N in its path)")
    return lib, version


#: The libomp every traced subprocess runs on (None: libomp 19, as installed), and its
#: LLVM major version.
TEST_LIBOMP, LIBOMP_VERSION = _runtime_under_test()
RUNTIME_LIBOMP = TEST_LIBOMP or LIBOMP
COMPAT_SOURCES = [PROGRAMS / "compat" / "dispatch_deinit.c"] if LIBOMP_VERSION < 19 else []
#: compile_program's flags for target offload to libomptarget's host plugin (clang-19;
#: libomptarget 19 beside libomp 19, found through the rpath).
OFFLOAD_FLAGS = ["-fopenmp-targets=x86_64-pc-linux-gnu",
                 f"-Wl,-rpath,{LIBOMP.parent if LIBOMP else ''}"]

# OMPTPY_OVERFLOW values (README, Configuration) and the default.
OVERFLOW_POLICIES = ("flush", "drop", "grow")
DEFAULT_OVERFLOW = "flush"

# OMPT callback numbers (ompt_callbacks_t) and other enum values used by tests.
EV = {
    "thread_begin": 1,
    "thread_end": 2,
    "parallel_begin": 3,
    "parallel_end": 4,
    "task_create": 5,
    "task_schedule": 6,
    "implicit_task": 7,
    "sync_region_wait": 16,
    "mutex_released": 17,
    "work": 20,
    "masked": 21,
    "sync_region": 23,
    "lock_init": 24,
    "lock_destroy": 25,
    "mutex_acquire": 26,
    "mutex_acquired": 27,
    "dispatch": 32,
    "control_tool": 11,
    "sample": 100,
    "region": 101,
}
BEGIN, END = 1, 2
TASK_INITIAL, TASK_IMPLICIT, TASK_EXPLICIT = 0x1, 0x2, 0x4
SYNC_BARRIER_EXPLICIT = 3
SYNC_BARRIER_IMPLICIT_WORKSHARE = 8
SYNC_BARRIER_IMPLICIT_PARALLEL = 9
WORK_SECTIONS, WORK_SINGLE_EXECUTOR, WORK_SINGLE_OTHER = 2, 3, 4
WORK_LOOP_STATIC, WORK_LOOP_DYNAMIC = 10, 11
DISPATCH_SECTION, DISPATCH_WS_LOOP_CHUNK = 2, 3
MUTEX_LOCK, MUTEX_CRITICAL = 1, 5
TASK_COMPLETE, TASK_SWITCH = 1, 7
# libomp 14 and 16 report every loop as `loop` and both implicit barriers as
# `barrier_implicit` (FACTS.md): the runtime under test's own kinds for them.
SYNC_BARRIER_IMPLICIT, WORK_LOOP = 2, 1
if LIBOMP_VERSION >= 19:
    REGION_BARRIER = SYNC_BARRIER_IMPLICIT_PARALLEL
    WORKSHARE_BARRIER = SYNC_BARRIER_IMPLICIT_WORKSHARE
else:
    REGION_BARRIER = WORKSHARE_BARRIER = SYNC_BARRIER_IMPLICIT

# Records of a process whose OpenMP work is n regions of 2 threads (empty
# bodies), run under OMP_TOOL_LIBRARIES to the end: per region 8 on the
# encountering thread (parallel_begin/end, implicit_task, sync_region and
# sync_region_wait begin/end) and 6 on the worker (the same without the
# parallel events); per process thread_begin/end of the 2 threads and the
# initial task's implicit_task begin/end.
PER_REGION = 14
PER_PROCESS = 6


def parallel_records(n: int) -> int:
    return PER_REGION * n + PER_PROCESS


def as_written(thread: np.ndarray, times: np.ndarray, rng: np.random.Generator,
               least: int = 1) -> np.ndarray:
    """The positions of records (their ``thread`` and ``times``) as the tool writes
    them: each thread's in time order, in chunks of ``least`` to 40, the threads'
    chunks one after the other at random."""
    streams = [list(np.flatnonzero(thread == t)[np.argsort(times[thread == t], kind="stable")])
               for t in np.unique(thread)]
    out: list[int] = []
    while any(streams):
        s = int(rng.choice([i for i, left in enumerate(streams) if left]))
        take = int(rng.integers(least, 41))
        out += streams[s][:take]
        del streams[s][:take]
    return np.array(out, np.int64)


# ---- toolchain -------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_clang: needs clang-19 and LLVM libomp 19 (skipped otherwise)"
    )
    config.addinivalue_line("markers", "needs_gcc: needs gcc with -fopenmp (skipped otherwise)")
    config.addinivalue_line(
        "markers", "slow: takes tens of seconds (builds a wheel, makes a venv); "
        "deselect with -m 'not slow'"
    )
    config.addinivalue_line(
        "markers", "any_libomp: runs on the libomp of OMPTPY_TEST_LIBOMP too (other tests "
        "skip when it is set)"
    )
    config.addinivalue_line(
        "markers", "pythons: the smoke subset `make test-pythons` runs on every other supported "
        "Python version"
    )
    if os.environ.get("OMPTPY_TEST_INSTALLED") == "1":
        _refuse_the_source_tree()


def _refuse_the_source_tree() -> None:
    """OMPTPY_TEST_INSTALLED=1 (`make test-pythons`): ompt_py must be imported from its
    install, never from the source tree, which holds .venv's in-place build (another
    Python version's _core) or none."""
    spec = importlib.util.find_spec("ompt_py")
    if spec is None or spec.origin is None:
        raise pytest.UsageError(f"{sys.executable} cannot import ompt_py: install it")
    if Path(spec.origin).resolve().parent == REPO / "ompt_py":
        raise pytest.UsageError(
            f"OMPTPY_TEST_INSTALLED=1, but ompt_py comes from the source tree ({spec.origin}): "
            f"run pytest outside {REPO} (python -m and python -c put the working directory "
            "first on sys.path), as `make test-pythons` does")


# The folders whose tests read stored traces only, and what they may not use.
STORED_ONLY = ("analysis", "io", "presentation")
_BUILD_FIXTURES = {"programs", "omp_ext", "scripting", "gomp_ext", "stream_lib",
                   "run_traced"}
_BUILD_MARKERS = ("needs_clang", "needs_gcc", "any_libomp")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = []
    for item in items:
        if item.path.parent.parent == TESTS and item.path.parent.name in STORED_ONLY:
            builds = sorted(_BUILD_FIXTURES & set(getattr(item, "fixturenames", ())))
            marks = [m for m in _BUILD_MARKERS if item.get_closest_marker(m)]
            if builds or marks:
                wrong.append(f"{item.nodeid}: {', '.join(builds + marks)}")
    if wrong:
        raise pytest.UsageError(
            f"tests in tests/{{{','.join(STORED_ONLY)}}} run on stored traces (tests/data) and "
            "need no toolchain; these ask for one:\n  " + "\n  ".join(wrong))


def _toolchain_missing() -> str | None:
    if CLANG is None:
        return "clang-19 is not installed"
    if LIBOMP is None:
        return "LLVM libomp (libomp.so.5) is not installed"
    return None


def pytest_report_header(config: pytest.Config) -> str | None:
    if TEST_LIBOMP is None:
        return None
    return f"runtime under test: libomp {LIBOMP_VERSION} ({TEST_LIBOMP}), OMPTPY_TEST_LIBOMP"


# libomp registers each process in a file named by its pid (kmp_runtime.cpp,
# __kmp_register_library_startup: shm_open, ftruncate, mmap).  A process killed
# between the open and the ftruncate leaves an empty file; when the pid comes round
# again (pid_max is 32768 here, and the suite starts thousands of processes, killing
# many at start-up on purpose), libomp reads that file past its end and the new
# process dies of SIGBUS at its first OpenMP call.  The product removes such a file
# of its own pid (the preload hook of `ompt-py run`, `import ompt_py`:
# tests/live/test_stale_registration.py), but most processes of the suite are started
# without either; so empty files of dead pids go before every test.


def remove_stale_libomp_registrations() -> int:
    """Removes libomp's empty registration files of pids no longer alive; their number.

    The name and folders are ompt_py's (live/runtime.py), imported here and not at the
    top: conftest is loaded before ``_refuse_the_source_tree`` checks where ompt_py
    comes from."""
    from ompt_py.live.runtime import KMP_REGISTRATION_DIRS, KMP_REGISTRATION_NAME

    pattern = re.compile(KMP_REGISTRATION_NAME.format(pid=r"(\d+)", uid=r"-?\d+"))
    removed = 0
    for folder in KMP_REGISTRATION_DIRS:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            found = pattern.fullmatch(name)
            if not found or os.path.exists(f"/proc/{found[1]}"):
                continue
            path = os.path.join(folder, name)
            try:
                if os.stat(path).st_size == 0:
                    os.unlink(path)
                    removed += 1
            except OSError:
                pass
    return removed


def pytest_runtest_setup(item: pytest.Item) -> None:
    remove_stale_libomp_registrations()
    if TEST_LIBOMP is not None and not item.get_closest_marker("any_libomp"):
        pytest.skip(f"runs on libomp 19 only, not on the OMPTPY_TEST_LIBOMP runtime "
                    f"(libomp {LIBOMP_VERSION})")
    if item.get_closest_marker("needs_clang") and (why := _toolchain_missing()):
        pytest.skip(why)
    if item.get_closest_marker("needs_gcc") and GCC is None:
        pytest.skip("gcc is not installed")


def _run_checked(cmd: list[str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"building {what} failed:\n$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")


def compile_program(source: Path, out: Path, cc: str | None = None, flags=()) -> Path:
    """An executable from one C file: ``clang-19 -O2 -fopenmp`` by default."""
    compat = COMPAT_SOURCES if cc in (None, CLANG) else []
    cmd = [cc or CLANG, "-O2", "-fopenmp", "-Wall", "-Wextra", "-Werror", *flags,
           str(source), *map(str, compat), "-o", str(out)]
    _run_checked(cmd, str(source))
    return out


def build_offload(tmp_path_factory, source: Path, *flags: str) -> Path:
    """SOURCE built by clang-19 for libomptarget's host plugin (OFFLOAD_FLAGS, and
    ``flags``); skips where it cannot be."""
    if CLANG is None or LIBOMP_VERSION < 19:
        # The offloading program links libomptarget 19, which loads libomp 19 by
        # path: with an older libomp first the process holds two (OMP: Error #15).
        pytest.skip(f"clang-19 offloading needs clang-19 and libomptarget 19 with its libomp "
                    f"19, not libomp {LIBOMP_VERSION}")
    out = tmp_path_factory.mktemp("offload") / source.stem
    try:
        return compile_program(source, out, flags=[*OFFLOAD_FLAGS, *flags])
    except RuntimeError as e:
        pytest.skip(f"clang-19 cannot build for the host offload target: {e}")


def build_extension(source: Path, outdir: Path, name: str, cc: str | None = None,
                    flags=()) -> Path:
    """A CPython extension module ``name`` from C source, built with ``cc -fopenmp
    -shared -fPIC`` (clang-19 by default) into outdir; returns the file."""
    out = outdir / (name + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [
        cc or CLANG, "-O2", "-fopenmp", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
        "-I", sysconfig.get_paths()["include"], f"-DEXT_NAME={name}", *flags,
        str(source), *map(str, COMPAT_SOURCES if cc in (None, CLANG) else []), "-o", str(out),
    ]
    _run_checked(cmd, f"extension {name}")
    return out


class Programs:
    """Built test programs: ``programs.parallel`` or ``programs["parallel"]`` is a path."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self._paths = paths

    def __getitem__(self, name: str) -> str:
        return str(self._paths[name])

    def __getattr__(self, name: str) -> str:
        try:
            return str(self._paths[name])
        except KeyError:
            raise AttributeError(name) from None


@pytest.fixture(scope="session")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    """tests/programs/*.c, built with clang-19 -O2 -fopenmp (skips without clang-19)."""
    if why := _toolchain_missing():
        pytest.skip(why)
    outdir = tmp_path_factory.mktemp("programs")
    sources = sorted(PROGRAMS.glob("*.c"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = list(pool.map(lambda s: compile_program(s, outdir / s.stem), sources))
    return Programs({p.name: p for p in built})


@pytest.fixture(scope="session")
def omp_ext(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the extension module ``ompt_work_ext`` (clang-19, LLVM libomp)."""
    if why := _toolchain_missing():
        pytest.skip(why)
    outdir = tmp_path_factory.mktemp("ext")
    build_extension(EXT_SOURCE, outdir, "ompt_work_ext")
    return outdir


@pytest.fixture(scope="session")
def stream_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libstream.so for ctypes: tests/programs/lib/stream.c (run(n) runs regions of a
    dynamic,1 loop until stop()), built with clang-19 -fopenmp -shared -fPIC."""
    if why := _toolchain_missing():
        pytest.skip(why)
    out = tmp_path_factory.mktemp("stream") / "libstream.so"
    _run_checked([CLANG, "-O2", "-fopenmp", "-shared", "-fPIC", "-Wall", "-Werror",
                  str(PROGRAMS / "lib" / "stream.c"), *map(str, COMPAT_SOURCES), "-o", str(out)],
                 "libstream.so")
    return out


@pytest.fixture(scope="session")
def scripting(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    """The scripting-callback tests' code (tests/programs/handlers/), built with clang-19
    -fopenmp -I <ompt_py.include_dir()>: ``scripting.ext`` is the directory of the
    extension module ``scripting_ext``, ``scripting.regions_prog`` a program."""
    if why := _toolchain_missing():
        pytest.skip(why)
    import ompt_py

    include = ["-I", ompt_py.include_dir()]
    outdir = tmp_path_factory.mktemp("scripting")
    build_extension(HANDLER_PROGRAMS / "scripting_ext.c", outdir, "scripting_ext", flags=include)
    prog = compile_program(HANDLER_PROGRAMS / "regions_prog.c", outdir / "regions_prog",
                           flags=include)
    return Programs({"ext": outdir, "regions_prog": prog})


GOMP = PROGRAMS / "gomp"  # gcc-built workloads (libgomp's ABI) for the runtime fallback


def fallback_libomp() -> str | None:
    """The libomp that ``import ompt_py`` (policy auto) loads when no LLVM runtime is
    mapped yet: the system's, else the bundled one, else None."""
    from ompt_py.live import runtime

    return runtime.system_libomp() or (
        runtime.BUNDLED if os.path.exists(runtime.BUNDLED) else None)


def needs_fallback_libomp() -> None:
    if fallback_libomp() is None:
        pytest.skip("no LLVM libomp to fall back on (neither bundled nor installed)")


def check_links_libgomp(path: Path) -> None:
    ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
    if "libgomp" not in ldd:
        pytest.skip(f"gcc -fopenmp did not link libgomp:\n{ldd}")


@pytest.fixture(scope="session")
def prange_mod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding ``prange_work``: tests/programs/gomp/prange_work.pyx, cythonized
    and built by gcc -fopenmp (prange ... nogil)."""
    if GCC is None:
        pytest.skip("gcc is not installed")
    needs_fallback_libomp()
    pytest.importorskip("Cython", reason="Cython is not installed (pip install cython)")
    outdir = tmp_path_factory.mktemp("prange_mod")
    c_file = outdir / "prange_work.c"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for cmd in (
        [PYTHON, "-m", "cython", "-3", str(GOMP / "prange_work.pyx"), "-o", str(c_file)],
        [GCC, "-O2", "-fopenmp", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"],
         str(c_file), "-o", str(outdir / ("prange_work" + suffix)), "-lm"],
    ):
        _run_checked(cmd, "prange_work")
    check_links_libgomp(outdir / ("prange_work" + suffix))
    return outdir


@functools.cache
def marked_lines(path: Path) -> dict[str, int]:
    """NAME -> the number of the line of ``path`` that ends with ``# at: NAME``."""
    lines = path.read_text().splitlines()
    return {m.group(1): i for i, text in enumerate(lines, start=1)
            if (m := re.search(r"# at: ([\w-]+)$", text.rstrip()))}


#: The Python program of known lines of the Python-stack tests (stored trace
#: pystacks-inprocess).
PYSTACKS_APP = PROGRAMS / "pystacks_app.py"


def app_location(name: str, function: str) -> str:
    """The py_location of PYSTACKS_APP's line marked ``at: NAME``, as a trace of it
    run from the repository names it; ``function`` as the trace's Python gives it
    (qualified names from 3.11 on)."""
    return f"{PYSTACKS_APP.relative_to(REPO)}:{marked_lines(PYSTACKS_APP)[name]} in {function}"


def app_region_counts(where) -> dict[str, int]:
    """py_location -> the parallel regions PYSTACKS_APP starts there from Python
    (outermost ones), ``where(name, qualified function)`` making the locations."""
    return {
        where("regions", "regions"): 3,  # helper() twice, inside the marker once
        where("nogil", "without_gil"): 5,  # main thread 2, the second thread 3, no GIL
        where("critical", "locked"): 1,
        where("single", "main"): 3,
        where("tasks", "main"): 1,
        where("nested", "main"): 1,
        where("lambda", "main.<locals>.<lambda>"): 1,
        where("generator", "generated"): 1,
        where("coroutine", "coroutine"): 1,
        "<generated>:2 in gone": 1,  # exec'd code, deleted after the call
    }


@pytest.fixture(scope="session")
def gomp_ext(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding ``ompt_work_gomp``: the same module built by gcc -fopenmp (libgomp)."""
    if GCC is None:
        pytest.skip("gcc is not installed")
    outdir = tmp_path_factory.mktemp("gomp_ext")
    path = build_extension(EXT_SOURCE, outdir, "ompt_work_gomp", cc=GCC)
    ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
    if "libgomp" not in ldd:
        pytest.skip(f"gcc -fopenmp did not link libgomp:\n{ldd}")
    return outdir


# ---- subprocesses ----------------------------------------------------------


def clean_env(extra: dict[str, str] | None = None, **more: str) -> dict[str, str]:
    """This process's environment without OpenMP/ompt-py settings, plus ``extra``."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("OMP_", "OMPTPY_", "KMP_", "GOMP_"))
        and k not in ("LD_PRELOAD", "PYTHONPATH")
    }
    if TEST_LIBOMP is not None:  # the runtime under test first (see OMPTPY_TEST_LIBOMP)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(TEST_LIBOMP.parent), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    env.update(extra or {})
    env.update(more)
    return env


# ---- the tool under test (OMPTPY_TEST_TOOL) --------------------------------------
# OMPTPY_TEST_TOOL=PATH attaches that libomptpy.so instead of the package's to the
# programs tool_env runs, and OMPTPY_TEST_PRELOAD=LIB preloads LIB into them: `make
# test-sanitize` runs tests/test_tool_c.py so, with the tool built with AddressSanitizer
# and UBSan and their runtime preloaded (a program not built with ASan needs it first).


def tool_env(outdir: Path | str, **more: str) -> dict[str, str]:
    """Environment that attaches the C tool to any libomp program and writes raw files to outdir."""
    import ompt_py

    env = {"OMP_TOOL_LIBRARIES": os.environ.get("OMPTPY_TEST_TOOL") or ompt_py.tool_path(),
           "OMPTPY_OUTPUT": str(outdir)}
    if preload := os.environ.get("OMPTPY_TEST_PRELOAD"):
        env["LD_PRELOAD"] = preload
    return clean_env(env, **more)


def run_python(code: str, env: dict[str, str] | None = None, *, path: list | None = None,
               timeout: float = 120, check: bool = True, cwd=None) -> subprocess.CompletedProcess:
    """Runs ``code`` (dedented) with the venv's python in a fresh process.

    ``env`` is added to a cleaned environment; ``path`` entries go on PYTHONPATH.
    With check, a non-zero exit fails the test with the child's output.
    """
    full = clean_env(env)
    if path:
        full["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    r = subprocess.run([PYTHON, "-c", textwrap.dedent(code)], env=full, capture_output=True,
                       text=True, timeout=timeout, cwd=cwd)
    if check and r.returncode != 0:
        pytest.fail(f"python subprocess exited with {r.returncode}\n--- stdout\n{r.stdout}"
                    f"--- stderr\n{r.stderr}")
    return r


#: The start of the scripting tests' snippets (handlers, native handlers, control):
#: ompt_py and the extensions ompt_work_ext (``w``) and scripting_ext (``s``).
SCRIPTING_PROLOGUE = """
import json, sys, threading, time
import numpy as np
import ompt_py
import ompt_work_ext as w
import scripting_ext as s
"""


def run_scripting(code: str, omp_ext: Path, scripting: Programs,
                  env: dict[str, str] | None = None, timeout: float = 120):
    """Runs SCRIPTING_PROLOGUE + ``code`` in a fresh python with both extensions
    importable: (the JSON the snippet printed last, the CompletedProcess)."""
    r = run_python(SCRIPTING_PROLOGUE + code, env, path=[omp_ext, scripting.ext],
                   timeout=timeout)
    return json.loads(r.stdout.strip().splitlines()[-1]), r


@pytest.fixture
def run_traced(tmp_path: Path, omp_ext: Path):
    """run_traced(code, env=None) -> loaded Trace.

    ``code`` runs in a fresh python with ``ompt_work_ext`` importable and
    ``TRACE_PATH`` defined; it must save its trace there (``t.save(TRACE_PATH)``).
    """
    counter = iter(range(1_000_000))

    def run(code: str, env: dict[str, str] | None = None, timeout: float = 120):
        import ompt_py

        path = tmp_path / f"trace-{next(counter)}.parquet"
        prologue = f"TRACE_PATH = {str(path)!r}\n"
        r = run_python(prologue + textwrap.dedent(code), env, path=[omp_ext], timeout=timeout)
        if not path.exists():
            pytest.fail(f"the snippet saved no trace at {path}\n{r.stdout}{r.stderr}")
        return ompt_py.load(path)

    return run


def run_with_tool(cmd: list[str], outdir: Path, timeout: float = 60, **env: str):
    """Runs a command with the C tool attached through OMP_TOOL_LIBRARIES (file sink)."""
    outdir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(cmd, env=tool_env(outdir, **env), capture_output=True, text=True,
                          timeout=timeout)


# ---- stored traces (tests/data) -------------------------------------------------

DATA = TESTS / "data"


def stored_path(name: str) -> Path:
    """tests/data/NAME, or NAME.parquet there (README.md lists them)."""
    for path in (DATA / name, DATA / f"{name}.parquet"):
        if path.exists():
            return path
    pytest.fail(f"there is no stored trace {name} in {DATA}: make it with "
                f"`python tests/data/make_traces.py {name}`")


def load_stored(name: str):
    """The stored trace NAME, through the public reader (ompt_py.load)."""
    import ompt_py

    return ompt_py.load(stored_path(name))


def many_regions(copies: int):
    """The 300 regions of the stored raw file of `parallel 300`, one after another
    ``copies`` times: each copy later than the last, with ids of its own."""
    import numpy as np

    import ompt_py

    t = ompt_py.load(stored_path("parallel-300.omptraw"))
    ev = t.events
    span = int(ev["time_ns"].max()) + 1000
    step = int(max(ev["parallel_id"].max(), ev["task_id"].max())) + 1
    parts = []
    for k in range(copies):
        part = ev.copy()
        part["time_ns"] += k * span
        for field in ("parallel_id", "task_id"):
            part[field][part[field] != 0] += np.uint64(k * step)
        parts.append(part)
    return ompt_py.Trace.from_records(np.concatenate(parts), t.meta)


def load_with_binaries(name: str):
    """The stored trace NAME with the binaries kept beside it (NAME.bin/) in place of
    those that made it, which are gone: its code addresses are named as on the
    machine that made it."""
    import copy

    import ompt_py

    t = load_stored(name)
    meta = copy.deepcopy(t.meta)
    kept = DATA / f"{name}.bin"
    for proc in meta["processes"]:
        for module in proc.get("modules", []):
            here = kept / Path(module["path"]).name
            if here.is_file():
                module["path"] = str(here)
    return ompt_py.Trace.from_records(t.events, meta)


def stored_output(name: str) -> str:
    """What the program (or snippet) of the stored trace NAME printed: NAME.out."""
    return (DATA / f"{name}.out").read_text()


def printed(stdout: str, key: str) -> list[float]:
    """The numbers of the line ``KEY n1 n2 ...`` a program printed."""
    line = next(line for line in stdout.splitlines() if line.startswith(key + " "))
    return [float(x) for x in line.split()[1:]]


#: The runtimes (libomp major versions) of the traces stored twice: tests that ran
#: on both under `make test` (any_libomp) read both.
STORED_RUNTIMES = (19, 16)


# ---- snippets (the live tests run them; tests/data/make_traces.py stores their traces) --

#: Tasks, loops, critical/lock and regions recorded in-process; ``t`` is the trace.
MIXED_SNIPPET = """\
import ompt_py
import ompt_work_ext as w
with ompt_py.trace() as t:
    w.tasks(5)
    w.loops(8)
    w.critical(3)
    w.parallel(1)
"""

#: Region markers nested from Python (decorator, threads) and C (scripting_ext),
#: seen by a handler too; saves the trace to TRACE_PATH and prints what the
#: handler got, the interned names and the markers in the trace (JSON).
REGION_MARKERS_SNIPPET = """\
import json, threading
import numpy as np
import ompt_py
import ompt_work_ext as w
import scripting_ext as s
handled = []
ompt_py.on("region", handled.append)

@ompt_py.region("deco")
def work():
    w.parallel(1)

with ompt_py.trace() as t:
    with ompt_py.region("outer"):
        with ompt_py.region("inner"):
            w.parallel(1)
        work()
    work()
    s.c_regions(2)
    worker = threading.Thread(target=lambda: ompt_py.region("py_thread").__enter__().__exit__())
    worker.start()
    worker.join()
assert ompt_py.drain_handlers()
t.save(TRACE_PATH)
ev = np.concatenate(handled)
print(json.dumps({"handled": len(ev), "names": ompt_py.region_names(),
                  "trace_markers": int((t.events["event"] == 101).sum())}))
"""


# ---- job ranks -------------------------------------------------------------------

RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
NO_RANK = dict.fromkeys(RANK_VARIABLES, "")

#: Processes of `parallel N` told apart by their N, each with rank variables and the
#: rank they make: ``ompt-py run`` of them all in one shell (tests/data/ranks/).
RANKS = [  # (variables, N, expected rank)
    ("OMPI_COMM_WORLD_RANK=0", 1, 0),
    ("PMI_RANK=1", 2, 1),
    ("PMIX_RANK=2", 3, 2),
    ("SLURM_PROCID=3", 4, 3),
    ("", 5, None),
    ("SLURM_PROCID=x", 6, None),  # not a number: no rank
    ("OMPI_COMM_WORLD_RANK=4 SLURM_PROCID=9", 7, 4),  # Open MPI's first
]


def by_regions(trace):
    """{number of parallel regions: pid}: which process is which."""
    return {n_of(trace.events[trace.pids == p["pid"]], "parallel_begin"): p["pid"]
            for p in trace.meta["processes"]}


# ---- the command line ---------------------------------------------------------

CONSOLE_SCRIPT = Path(sys.executable).parent / "ompt-py"


def cli(*args, cwd=None, env=None, path=(), timeout=120, script=False):
    """Runs ``python -m ompt_py ARGS`` (or the ompt-py console script) in a clean environment."""
    full = clean_env(env)
    if path:
        full["PYTHONPATH"] = os.pathsep.join(map(str, path))
    cmd = [str(CONSOLE_SCRIPT)] if script else [sys.executable, "-m", "ompt_py"]
    return subprocess.run([*cmd, *map(str, args)], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout)


def ok(r):
    assert r.returncode == 0, f"exit {r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}"
    return r


def no_traceback(r):
    assert "Traceback (most recent call last)" not in r.stderr, r.stderr


# ---- trace analysis ----------------------------------------------------------


def counts(ev: np.ndarray) -> Counter:
    """Counter of (event number, endpoint, kind) over structured events."""
    keys = zip(ev["event"].tolist(), ev["endpoint"].tolist(), ev["kind"].tolist())
    return Counter(keys)


def select(ev: np.ndarray, event: str, endpoint: int | None = None,
           kind: int | None = None) -> np.ndarray:
    m = ev["event"] == EV[event]
    if endpoint is not None:
        m &= ev["endpoint"] == endpoint
    if kind is not None:
        m &= ev["kind"] == kind
    return ev[m]


def n_of(ev: np.ndarray, event: str, endpoint: int | None = None, kind: int | None = None) -> int:
    return len(select(ev, event, endpoint, kind))


def per_thread(ev: np.ndarray, pids: np.ndarray | None = None):
    """(pid, thread) -> that thread's events, in the trace's per-thread order."""
    pids = np.zeros(len(ev), np.int64) if pids is None else pids
    out = {}
    for key in sorted(set(zip(pids.tolist(), ev["thread"].tolist()))):
        out[key] = ev[(pids == key[0]) & (ev["thread"] == key[1])]
    return out


_PAIR = {EV["parallel_begin"]: EV["parallel_end"], EV["thread_begin"]: EV["thread_end"]}


def unmatched_scopes(ev: np.ndarray, pids: np.ndarray | None = None) -> list[str]:
    """Problems with begin/end nesting, per thread (empty when every begin has its end).

    Per thread, scoped events must nest: an end closes the innermost open
    begin of the same event (parallel_end closes parallel_begin, thread_end
    thread_begin), kind (but parallel events: the begin's kind holds its frame),
    and task (parallel id for parallel events).  The ids
    are compared only where both are non-zero: libomp passes no parallel data
    at a worker's implicit-task and implicit-barrier end.
    """
    problems = []
    for (pid, thread), rows in per_thread(ev, pids).items():
        stack = []
        for r in rows:
            e, ep = int(r["event"]), int(r["endpoint"])
            if ep == BEGIN:
                stack.append(r)
            elif ep == END:
                if not stack:
                    problems.append(f"pid {pid} thread {thread}: end of event {e} with no begin")
                    continue
                b = stack.pop()
                be = int(b["event"])
                want = _PAIR.get(be, be)
                same = want == e
                if e != EV["parallel_end"]:  # parallel_begin's kind: the frame's bits
                    same &= b["kind"] == r["kind"]
                if e == EV["parallel_end"]:
                    same &= b["parallel_id"] == r["parallel_id"]
                elif b["task_id"] and r["task_id"]:
                    same &= b["task_id"] == r["task_id"]
                if not same:
                    problems.append(
                        f"pid {pid} thread {thread}: end (event {e}, kind {r['kind']}, task "
                        f"{r['task_id']:#x}) closes begin (event {be}, kind {b['kind']}, task "
                        f"{b['task_id']:#x})")
        for b in stack:
            problems.append(f"pid {pid} thread {thread}: begin of event {int(b['event'])} "
                            f"kind {int(b['kind'])} never ended")
    return problems


def region_events(ev: np.ndarray, parallel_ids) -> np.ndarray:
    """Events of the given parallel regions, including the ends that carry no
    parallel id (matched through the task ids of the regions' implicit tasks)."""
    pids = np.fromiter(parallel_ids, np.uint64)
    begins = ev[(ev["event"] == EV["implicit_task"]) & (ev["endpoint"] == BEGIN)
                & np.isin(ev["parallel_id"], pids)]
    tasks = begins["task_id"]
    mine = np.isin(ev["parallel_id"], pids) | (
        (ev["parallel_id"] == 0) & np.isin(ev["task_id"], tasks)
        & np.isin(ev["event"], [EV["implicit_task"], EV["sync_region"], EV["sync_region_wait"]]))
    return ev[mine]


def summary(ev: np.ndarray) -> str:
    """Readable event counts, for assertion messages."""
    import ompt_py.records as rec

    lines = []
    for (e, ep, k), n in sorted(counts(ev).items()):
        name = rec.EVENTS.get(e, str(e))
        kinds = rec.KIND_NAMES.get(name)
        kname = kinds.get(k, k) if kinds else k
        lines.append(f"  {name} ep={ep} kind={kname}: {n}")
    return "\n".join(lines)


def grown_raw_file(source: Path, out: Path, copies: int, block_records: int = 1024) -> int:
    """A raw file made from the stored raw file ``source``: its META block, its
    records ``copies`` times over in RECORDS blocks of ``block_records`` (as the
    tool writes them), then its other blocks; a large trace without running
    anything (tests/io, bench/merge_memory.py).  Returns its records."""
    import struct

    header = struct.Struct("<IIQ")
    data = source.read_bytes()
    first, records, rest, off = b"", [], [], 0
    while off < len(data):
        magic, kind, length = header.unpack_from(data, off)
        block = data[off: off + header.size + length]
        if not first:
            first = block
        elif kind == 2:  # RECORDS
            records.append(block[header.size:])
        else:
            rest.append(block)
        off += header.size + length
    payload = b"".join(records)
    size = block_records * 64
    unit = b"".join(header.pack(magic, 2, len(payload[i: i + size])) + payload[i: i + size]
                    for i in range(0, len(payload), size))
    with open(out, "wb") as f:
        f.write(first)
        for _ in range(copies):
            f.write(unit)
        f.write(b"".join(rest))
    return len(payload) // 64 * copies


# ---- a local Dask cluster (tests/analysis/test_dataset.py, tests/io/test_dataset_exports.py) --

#: The Dask workers' memory limit (dask_client): their own memory (interpreter and
#: libraries: 170 MB fresh, 230 MB after the other tests' work, measured) and room
#: for two partitions of test_dataset.py's 64-rank dataset, but not for its events
#: (280 MB).
DASK_MEMORY_LIMIT = 384 << 20


@pytest.fixture(scope="module")
def dask_client():
    """A client of a local Dask cluster of two worker processes of one thread each,
    for the tests of a module (skipped without dask.distributed)."""
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("dask.distributed")
    # Not paused near the limit (80 %: a worker paused with nothing to free waits
    # forever, and so would the test); beyond 95 % the nanny restarts it, which the
    # test sees.
    with dask.config.set({"distributed.worker.memory.pause": False}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     memory_limit=DASK_MEMORY_LIMIT,
                                     # no dashboard, its HTTP server on a free port
                                     # (None still takes 8787, which another Dask
                                     # on the machine may hold)
                                     dashboard_address=":0",
                                     scheduler_kwargs={"dashboard": False}) as cluster, \
            distributed.Client(cluster) as c:
        yield c
