"""Makes the stored traces of tests/data (README.md lists them).

    python tests/data/make_traces.py            # every trace but format-v1
    python tests/data/make_traces.py NAME ...   # these (a name, or a prefix: known-)
    python tests/data/make_traces.py --list

Run it with the venv's python (.venv/bin/python) on a quiet machine: several
traces are of programs of known timing (tests/programs/known.c), and the
analysis tests check them against the durations the programs measured
themselves, within 5 to 10 %.  It needs what the live tests need: clang-19 and
libomp 19 (`make setup`), gcc for the gcc-built programs, and for the
``-libomp14`` / ``-libomp16`` traces the old runtimes of `make old-runtimes`.

Each trace is made the way the test it replaces made it: a program of
tests/programs run under the C tool (OMP_TOOL_LIBRARIES, raw files in a
temporary directory, then ``ompt_py.load(dir).save(NAME.parquet)``), under
``ompt-py run -o NAME.parquet``, or a Python snippet that records in-process
with ``ompt_py.trace()`` and saves.  What the program printed (its own
measurements) is kept beside the trace in NAME.out.  The builds and the
environments are the test suite's own (tests/conftest.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent
TESTS = DATA.parent
sys.path.insert(0, str(TESTS))

import conftest as h  # noqa: E402  (the suite's builds, environments and snippets)

import ompt_py  # noqa: E402

CACHE = h.REPO / ".cache" / "libomp"
COMPAT = h.PROGRAMS / "compat" / "dispatch_deinit.c"
NO_RANK = h.NO_RANK  # no rank variable from this environment
PASSIVE = {"OMP_WAIT_POLICY": "passive"}  # as tests/live/test_fallback.py


# ---- runtimes and builds -------------------------------------------------------------------


@dataclass(frozen=True)
class Runtime:
    """libomp 19 as installed, or an older one of `make old-runtimes` first on
    LD_LIBRARY_PATH (as OMPTPY_TEST_LIBOMP does in the test suite)."""

    version: int

    @property
    def libdir(self) -> Path | None:
        return None if self.version == 19 else CACHE / str(self.version)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = h.clean_env(extra)
        if self.libdir is not None:
            if not (self.libdir / "libomp.so.5").exists():
                sys.exit(f"make_traces: {self.libdir}/libomp.so.5 is missing: run "
                         "`make old-runtimes`")
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [str(self.libdir), *filter(None, [env.get("LD_LIBRARY_PATH")])])
        return env

    @property
    def compat(self) -> list[str]:
        """clang-19 code ends dynamic loops with __kmpc_dispatch_deinit, which an
        older libomp lacks: link the empty one of tests/programs/compat."""
        return [] if self.version >= 19 else [str(COMPAT)]


LIBOMP19, LIBOMP16 = Runtime(19), Runtime(16)


class Builds:
    """The programs and extensions, built once per runtime into a temporary directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._done: dict[tuple, Path] = {}

    def _dir(self, *parts: str) -> Path:
        d = self.root.joinpath(*parts)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def program(self, name: str, rt: Runtime = LIBOMP19) -> str:
        key = ("program", name, rt)
        if key not in self._done:
            out = self._dir(f"libomp{rt.version}") / name
            self._done[key] = h.compile_program(h.PROGRAMS / f"{name}.c", out, flags=rt.compat)
        return str(self._done[key])

    def ext(self, rt: Runtime = LIBOMP19) -> Path:
        key = ("ext", rt)
        if key not in self._done:
            outdir = self._dir(f"libomp{rt.version}", "ext")
            h.build_extension(h.EXT_SOURCE, outdir, "ompt_work_ext", flags=rt.compat)
            self._done[key] = outdir
        return self._done[key]

    def scripting(self) -> tuple[Path, str]:
        """(directory of scripting_ext, regions_prog), built against ompt_py's headers."""
        if "scripting" not in self._done:
            include = ["-I", ompt_py.include_dir()]
            outdir = self._dir("scripting")
            h.build_extension(h.HANDLER_PROGRAMS / "scripting_ext.c", outdir, "scripting_ext",
                              flags=include)
            self._done["scripting"] = outdir
            self._done["regions_prog"] = h.compile_program(
                h.HANDLER_PROGRAMS / "regions_prog.c", outdir / "regions_prog", flags=include)
        return self._done["scripting"], str(self._done["regions_prog"])

    def gcc_program(self, source: Path) -> str:
        key = ("gcc", source)
        if key not in self._done:
            if h.GCC is None:
                sys.exit("make_traces: gcc is not installed")
            out = self._dir("gcc") / source.stem
            self._done[key] = h.compile_program(source, out, cc=h.GCC)
        return str(self._done[key])


# ---- ways of running -----------------------------------------------------------------------


def _checked(r: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if r.returncode != 0:
        sys.exit(f"make_traces: {what} exited with {r.returncode}\n{r.stdout}{r.stderr}")
    return r


def under_tool(cmd: list[str], work: Path, rt: Runtime = LIBOMP19,
               **env: str) -> tuple[ompt_py.Trace, str]:
    """The command under the C tool (file sink): the loaded trace and its stdout."""
    raw = Path(tempfile.mkdtemp(prefix="raw-", dir=work))
    full = rt.env({"OMP_TOOL_LIBRARIES": ompt_py.tool_path(), "OMPTPY_OUTPUT": str(raw), **env})
    r = _checked(subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=120),
                 " ".join(cmd))
    return ompt_py.load(raw), r.stdout


def ompt_py_run(args: list[str], rt: Runtime = LIBOMP19, **env: str) -> str:
    """``ompt-py run ARGS`` (python -m ompt_py); its stdout."""
    r = subprocess.run([h.PYTHON, "-m", "ompt_py", "run", *args], env=rt.env(env),
                       capture_output=True, text=True, timeout=180)
    return _checked(r, "ompt-py run " + " ".join(args)).stdout


def in_process(code: str, trace_path: Path, path: list[Path], rt: Runtime = LIBOMP19,
               **env: str) -> str:
    """A snippet recording with ompt_py.trace() in a fresh python; it gets TRACE_PATH
    and saves there.  Its stdout."""
    full = rt.env(env)
    full["PYTHONPATH"] = os.pathsep.join(map(str, path))
    code = f"TRACE_PATH = {str(trace_path)!r}\n" + textwrap.dedent(code)
    r = subprocess.run([h.PYTHON, "-c", code], env=full, capture_output=True, text=True,
                       timeout=120)
    _checked(r, "snippet")
    if not trace_path.exists():
        sys.exit(f"make_traces: the snippet saved no trace at {trace_path}")
    return r.stdout


# ---- where they go -------------------------------------------------------------------------


def parquet(name: str) -> Path:
    return DATA / f"{name}.parquet"


def keep(name: str, trace: ompt_py.Trace, stdout: str | None = None) -> None:
    """NAME.parquet (and what the program printed in NAME.out)."""
    trace.save(parquet(name))
    if stdout is not None:
        (DATA / f"{name}.out").write_text(stdout)


def fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    return path


# ---- the traces ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    name: str
    make: Callable[[Builds, Path], None]
    default: bool = True  # made when no name is given


SPECS: list[Spec] = []


def trace(name: str, default: bool = True):
    def register(make: Callable[[Builds, Path], None]):
        SPECS.append(Spec(name, make, default))
        return make

    return register


def tool_trace(name: str, program: str, *args: object, rt: Runtime = LIBOMP19,
               stdout: bool = False, **env: str) -> None:
    """NAME: tests/programs/PROGRAM.c ARGS under the C tool."""

    def make(b: Builds, work: Path) -> None:
        t, out = under_tool([b.program(program, rt), *map(str, args)], work, rt, **env)
        keep(name, t, out if stdout else None)

    SPECS.append(Spec(name, make))


# Paired tables (tests/analysis/test_tables.py), on libomp 19 and 16: the tests
# ran on both (any_libomp).
for _rt in (LIBOMP19, LIBOMP16):
    _v = f"libomp{_rt.version}"
    tool_trace(f"nested-{_v}", "nested", rt=_rt)
    tool_trace(f"contended-{_v}", "contended", 200, 50, rt=_rt, stdout=True)
    tool_trace(f"deps-{_v}", "deps", rt=_rt)
    tool_trace(f"barrier-{_v}", "barrier", 3, rt=_rt)
    tool_trace(f"teams-{_v}", "teams", rt=_rt)
    # sampling (tests/analysis/test_states.py)
    tool_trace(f"sampled-imbalance-{_v}", "imbalance", 0.2, rt=_rt, stdout=True,
               OMPTPY_SAMPLE_HZ="1000")
    tool_trace(f"sampled-task-frames-{_v}", "task_frames", 0.2, rt=_rt, stdout=True,
               OMPTPY_SAMPLE_HZ="1000")


def _in_process_trace(name: str, code: str, rt: Runtime) -> None:
    def make(b: Builds, work: Path) -> None:
        in_process(code, parquet(name), [b.ext(rt)], rt)

    SPECS.append(Spec(name, make))


for _rt in (LIBOMP19, LIBOMP16):
    _v = f"libomp{_rt.version}"
    # A window that ends right after a region: the worker's implicit-task end is not in it.
    _in_process_trace(f"window-{_v}", """
        import ompt_py
        import ompt_work_ext as w
        with ompt_py.trace() as t:
            w.parallel(2)
        t.save(TRACE_PATH)
        """, _rt)
    # tasks, loops, critical/lock and regions (tests/io/test_pandas.py)
    _in_process_trace(f"inprocess-mixed-{_v}", h.MIXED_SNIPPET + "t.save(TRACE_PATH)\n", _rt)


_in_process_trace("inprocess-empty", """
    import ompt_py
    import ompt_work_ext as w
    w.max_threads()  # the runtime starts, with the tool
    with ompt_py.trace() as t:
        pass
    t.save(TRACE_PATH)
    """, LIBOMP19)


# Programs of known timing (tests/analysis/test_metrics.py): UNIT_US, N, ... as there.
@trace("known-skewed-static")
def _skewed_static(b: Builds, work: Path) -> None:
    """Tried until the machine let the threads run as designed (w and 4w, together),
    as the test's fixture did: busy 40 ms and 160 ms within 5 %, starts within 1 ms."""
    w_ns = 1000 * 40 * 1000
    for attempt in range(30):
        t, out = under_tool([b.program("known"), "skewed", "1000", "40"], work,
                            OMP_SCHEDULE="static")
        values = {line.split()[0]: [float(x) for x in line.split()[1:]]
                  for line in out.splitlines()}
        (b0, b1), (s0, s1) = values["busy_ns"], values["start_ns"]
        if (abs(b0 - w_ns) < 0.05 * w_ns and abs(b1 - 4 * w_ns) < 0.05 * 4 * w_ns
                and abs(s1 - s0) < 0.025 * w_ns):
            break
        print(f"  attempt {attempt + 1}: not as designed ({out.strip()!r}), again")
    else:
        sys.exit("make_traces: known skewed never ran as designed: is the machine busy?")
    keep("known-skewed-static", t, out)


tool_trace("known-skewed-dynamic", "known", "skewed", 1000, 40, stdout=True,
           OMP_SCHEDULE="dynamic,1")
tool_trace("known-tasks", "known", "tasks", 20, 200, 10, 2000, stdout=True)
tool_trace("known-tasks-empty", "known", "tasks", 2000, 0, 0, 0)
tool_trace("known-tasks-few", "known", "tasks", 4, 10, 0, 0)
tool_trace("known-lock", "known", "lock", 40, 500, stdout=True)
tool_trace("known-lock-few", "known", "lock", 2, 10)
tool_trace("known-skewed-one-thread", "known", "skewed", 200, 5, stdout=True,
           OMP_THREAD_LIMIT="1")
# the plots (tests/presentation/test_plots.py)
tool_trace("plots-skewed", "known", "skewed", 500, 20, OMP_SCHEDULE="static")
tool_trace("plots-tasks", "known", "tasks", 12, 200, 6, 2000)
# raw files (tests/io/test_files.py): parallel 300 drained every millisecond, so that
# the records come in several blocks.  Kept raw: tests/data/parallel-300.omptraw.


@trace("parallel-300.omptraw")
def _raw_parallel(b: Builds, work: Path) -> None:
    raw = Path(tempfile.mkdtemp(prefix="raw-", dir=work))
    env = h.clean_env({"OMP_TOOL_LIBRARIES": ompt_py.tool_path(), "OMPTPY_OUTPUT": str(raw),
                       "OMPTPY_DRAIN_MS": "1"})
    _checked(subprocess.run([b.program("parallel"), "300"], env=env, capture_output=True,
                            text=True, timeout=60), "parallel 300")
    (name,) = os.listdir(raw)
    shutil.copyfile(raw / name, DATA / "parallel-300.omptraw")


# tests/io/test_mutation.py: a raw file of today's tool with every block type it writes
# (META, LEDGER, RECORDS, STATS), from a process that ended normally.
@trace("raw-ledger.omptraw")
def _raw_ledger(b: Builds, work: Path) -> None:
    raw = Path(tempfile.mkdtemp(prefix="raw-", dir=work))
    env = h.clean_env({"OMP_TOOL_LIBRARIES": ompt_py.tool_path(), "OMPTPY_OUTPUT": str(raw)})
    _checked(subprocess.run([b.program("parallel"), "3"], env=env, capture_output=True,
                            text=True, timeout=60), "parallel 3")
    (name,) = os.listdir(raw)
    shutil.copyfile(raw / name, DATA / "raw-ledger.omptraw")


# tests/analysis/test_offload.py: tests/programs/offload.c offloaded to libomptarget's
# host plugin (two devices), kept raw.
@trace("offload.omptraw")
def _raw_offload(b: Builds, work: Path) -> None:
    exe = h.compile_program(h.PROGRAMS / "offload.c", work / "offload", flags=h.OFFLOAD_FLAGS)
    raw = Path(tempfile.mkdtemp(prefix="raw-", dir=work))
    env = h.clean_env({"OMP_TOOL_LIBRARIES": ompt_py.tool_path(), "OMPTPY_OUTPUT": str(raw)})
    r = _checked(subprocess.run([str(exe)], env=env, capture_output=True, text=True,
                                timeout=120), "offload")
    (name,) = os.listdir(raw)
    shutil.copyfile(raw / name, DATA / "offload.omptraw")
    (DATA / "offload.out").write_text(r.stdout)


@trace("export-mixed")
def _export_mixed(b: Builds, work: Path) -> None:
    """Two processes of mixed, the second with a job rank (tests/io/test_export.py)."""
    mixed = b.program("mixed")
    ompt_py_run(["-o", str(parquet("export-mixed")), "--", "bash", "-c",
                 f"{mixed} 6 && OMPI_COMM_WORLD_RANK=7 {mixed} 3"], **NO_RANK)


# ompt-py report (tests/presentation/test_report.py)
@trace("report-loops")
def _report_loops(b: Builds, work: Path) -> None:
    ompt_py_run(["-o", str(parquet("report-loops")), "--", b.program("loops"), "64"])


@trace("report-critical")
def _report_critical(b: Builds, work: Path) -> None:
    ompt_py_run(["-o", str(parquet("report-critical")), "--", b.program("critical"), "20"])


@trace("report-incomplete")
def _report_incomplete(b: Builds, work: Path) -> None:
    """Ended by _exit: what the threads flushed before is there, the end is not."""
    ompt_py_run(["-o", str(parquet("report-incomplete")), "--buffer-size", "256K", "--",
                 b.program("many"), "20000", "_exit"])


# The report's width and advice on long C++ names (tests/presentation/test_layout.py,
# tests/analysis/test_advice.py): tests/programs/cxx_names.cpp (clang++-19, no -g)
# under the tool, the binary kept beside the trace in report-cxx.bin/ so that its
# functions can be named (conftest's load_with_binaries).
ADVICE_RULES = {"short regions", "static imbalance", "small tasks", "contended lock"}


@trace("report-cxx")
def _report_cxx(b: Builds, work: Path) -> None:
    """Tried until the machine let it run as designed: each rule of the advice fires,
    once (a busy machine preempts a lock's holder, or stretches the regions)."""
    clangxx = shutil.which("clang++-19")
    if clangxx is None:
        sys.exit("make_traces: clang++-19 is not installed")
    exe = h.compile_program(h.PROGRAMS / "cxx_names.cpp", work / "cxx_names", cc=clangxx)
    for attempt in range(30):
        t, out = under_tool([str(exe)], work)
        rules = t.advice()["rule"].tolist()
        if sorted(rules) == sorted(ADVICE_RULES):
            break
        print(f"  attempt {attempt + 1}: not as designed (advice: {rules}), again")
    else:
        sys.exit("make_traces: cxx_names never ran as designed: is the machine busy?")
    keep("report-cxx", t, out)
    binaries = fresh_dir(DATA / "report-cxx.bin")
    binaries.mkdir()
    shutil.copy2(exe, binaries / exe.name)


@trace("profile-cxx")
def _profile_cxx(b: Builds, work: Path) -> None:
    """cxx_names under ompt-py run --profile (tests/analysis/test_advice.py: the advice
    a profile can give), tried until both rules a profile allows fire."""
    clangxx = shutil.which("clang++-19")
    if clangxx is None:
        sys.exit("make_traces: clang++-19 is not installed")
    exe = h.compile_program(h.PROGRAMS / "cxx_names.cpp", work / "cxx_names", cc=clangxx)
    out = parquet("profile-cxx")
    for attempt in range(30):
        ompt_py_run(["--profile", "-o", str(out), "--", str(exe)])
        rules = ompt_py.load(out).advice()["rule"].tolist()
        if sorted(rules) == ["contended lock", "short regions"]:
            return
        print(f"  attempt {attempt + 1}: not as designed (advice: {rules}), again")
    sys.exit("make_traces: cxx_names never ran as designed: is the machine busy?")


# Profiles (ompt-py run --profile: tests/analysis/test_profile_metrics.py,
# tests/presentation/test_report.py)
@trace("profile-mixed")
def _profile_mixed(b: Builds, work: Path) -> None:
    ompt_py_run(["--profile", "-o", str(parquet("profile-mixed")), "--", b.program("mixed"),
                 "20"])


@trace("profile-known-tasks")
def _profile_known_tasks(b: Builds, work: Path) -> None:
    out = ompt_py_run(["--profile", "-o", str(parquet("profile-known-tasks")), "--",
                       b.program("known"), "tasks", "20", "500", "20", "2000"])
    (DATA / "profile-known-tasks.out").write_text(out)


# Several processes (tests/io/test_datasets.py): `parallel N` per process, ranks from
# the variables of each (conftest.RANKS).
@trace("ranks")
def _ranks(b: Builds, work: Path) -> None:
    """ompt-py run -o ranks/ over a shell running `parallel` 7 times: a dataset."""
    script = "; ".join(f"{env} {b.program('parallel')} {n}" for env, n, _ in h.RANKS)
    ompt_py_run(["-o", str(fresh_dir(DATA / "ranks")), "--", "bash", "-c", script], **NO_RANK)


@trace("saved")
def _saved(b: Builds, work: Path) -> None:
    """saved/a.parquet (parallel 2) and, run after it, saved/b.parquet (parallel 3, PMI_RANK=1)."""
    d = fresh_dir(DATA / "saved")
    d.mkdir()
    ompt_py_run(["-o", str(d / "a.parquet"), "--", b.program("parallel"), "2"], **NO_RANK)
    # the rank for the program only: ompt-py run with a rank writes a job's directory
    ompt_py_run(["-o", str(d / "b.parquet"), "--", "env", "PMI_RANK=1", b.program("parallel"),
                 "3"], **NO_RANK)


# User regions (tests/analysis/test_user_regions.py)
@trace("regions-inprocess")
def _regions_inprocess(b: Builds, work: Path) -> None:
    ext, _ = b.scripting()
    out = in_process(h.REGION_MARKERS_SNIPPET, parquet("regions-inprocess"), [b.ext(), ext])
    (DATA / "regions-inprocess.out").write_text(out)


# Python call stacks (tests/analysis/test_pystacks.py): the user program of known
# lines, run from the repository (its locations read tests/programs/...).
@trace("pystacks-inprocess")
def _pystacks_inprocess(b: Builds, work: Path) -> None:
    env = LIBOMP19.env({"PYTHONPATH": str(b.ext())})
    r = subprocess.run([h.PYTHON, str(h.PROGRAMS / "pystacks_app.py"),
                        str(parquet("pystacks-inprocess")), "on"],
                       cwd=h.REPO, env=env, capture_output=True, text=True, timeout=120)
    _checked(r, "pystacks_app.py")


@trace("regions-prog")
def _regions_prog(b: Builds, work: Path) -> None:
    _, prog = b.scripting()
    keep("regions-prog", under_tool([prog, "3"], work)[0])


# gcc-built code on libomp (the runtime fallback) and on older runtimes
@trace("gomp-prog")
def _gomp_prog(b: Builds, work: Path) -> None:
    """tests/programs/gomp/gomp_prog.c (gcc) 7 regions 90 iterations under ompt-py run."""
    prog = b.gcc_program(h.PROGRAMS / "gomp" / "gomp_prog.c")
    ompt_py_run(["-o", str(parquet("gomp-prog")), "--", prog, "7", "90"], **PASSIVE)


def _versions_trace(version: int) -> None:
    name = f"versions-dynamic-libomp{version}"

    def make(b: Builds, work: Path) -> None:
        """tests/programs/versions/dynamic.c (gcc) on libomp N in LD_PRELOAD."""
        lib = CACHE / str(version) / "libomp.so.5"
        if not lib.exists():
            sys.exit(f"make_traces: {lib} is missing: run `make old-runtimes`")
        prog = b.gcc_program(h.PROGRAMS / "versions" / "dynamic.c")
        keep(name, under_tool([prog], work, LD_PRELOAD=str(lib.resolve()))[0])

    SPECS.append(Spec(name, make))


for _version in (14, 16):
    _versions_trace(_version)


@trace("format-v1", default=False)
def _format_v1(b: Builds, work: Path) -> None:
    """Today's formats, for readers of tomorrow (tests/io/test_format_v1.py): the raw
    files of one run of two processes (parallel 2; critical 2 with a rank), the
    Parquet file and the dataset Trace.save makes of them.  Made once: only when
    named, and then tests/io/test_format_v1.py needs the new values."""
    base = fresh_dir(DATA / "format-v1")
    raw = base / "raw"
    raw.mkdir(parents=True)
    env = h.clean_env({"OMP_TOOL_LIBRARIES": ompt_py.tool_path(), "OMPTPY_OUTPUT": str(raw),
                       **NO_RANK})
    script = f"{b.program('parallel')} 2 && OMPI_COMM_WORLD_RANK=1 {b.program('critical')} 2"
    _checked(subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                            timeout=60), script)
    t = ompt_py.load(raw)
    t.save(base / "trace.parquet")
    t.save(base / "dataset")


# ---- main ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="traces to make (a name or a prefix); "
                        "default: all")
    parser.add_argument("--list", action="store_true", help="list the traces and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(s.name + ("" if s.default else "  (only when named)") for s in SPECS))
        return 0
    chosen = [s for s in SPECS if (s.default if not args.names else
              any(s.name == n or s.name.startswith(n) for n in args.names))]
    if not chosen:
        parser.error(f"no trace is called {' or '.join(args.names)} (see --list)")
    if os.environ.get("OMPTPY_TEST_LIBOMP"):
        parser.error("unset OMPTPY_TEST_LIBOMP: the runtime of each trace is chosen here")
    with tempfile.TemporaryDirectory(prefix="ompt-py-traces-") as tmp:
        builds = Builds(Path(tmp) / "build")
        for spec in chosen:
            print(f"{spec.name} ...", flush=True)
            work = Path(tmp) / "work"
            work.mkdir(exist_ok=True)
            spec.make(builds, work)
            shutil.rmtree(work)
    for path in sorted(DATA.iterdir()):
        if path.suffix in (".parquet", ".omptraw", ".out") or path.is_dir():
            size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) \
                if path.is_dir() else path.stat().st_size
            print(f"{size / 1024:8.1f} KiB  {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
