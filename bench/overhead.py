#!/usr/bin/env python3
"""Overhead benchmark of ompt-py on the LLVM OpenMP runtime.

Runs two OpenMP workloads on 2 threads, (W1) 10**6 empty parallel regions and
(W2) 10**6 trivial tasks, under nine configurations:

    a  no tool
    b  null tool: attached, registers no callback (bench/null_tool.c)
    n  noop tool: registers the callbacks ompt-py registers, does nothing
       (bench/min_recorder.c built with -DMINREC_NOOP)
    c  minimal hand-written recorder (bench/min_recorder.c)
    d  ompt-py attached, recording off (OMPTPY_RECORD=off)
    e  ompt-py recording to a file (OMPTPY_OUTPUT: in place, default reserve)
    h  ompt-py recording to a file, OMPTPY_RESERVE as f (the trace resident
       before the program's work, as the min recorder's buffer is)
    f  ompt-py recording in memory (ompt_py.trace() with OMPTPY_RESERVE)
    g  ompt-py profile mode (OMPTPY_PROFILE=on: per-thread aggregates, no records)

and prints the figures of the project's performance targets, each marked
PASS or FAIL.  For e and h it also prints the tool's stalls (tool_stall records:
a writer making the trace file's next region resident, docs/stalls.md) and the
cost with their recorded wall time discounted (e~, h~).  It is a report, not a
test: it exits 0 whatever the figures (1 only when it cannot run at all: build
failure or the no-tool run failing).

Usage: python bench/overhead.py [--quick] [--reps R] [--n N] [--json FILE]
       [--no-python-route | --python-route-only]
See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
BUILD_DIR = BENCH_DIR / "build"
LIBWORK = BUILD_DIR / "libbenchwork.so"
DRIVER = BUILD_DIR / "benchwork"
NULL_TOOL = BUILD_DIR / "null_tool.so"
NOOP_TOOL = BUILD_DIR / "noop_tool.so"
MIN_RECORDER = BUILD_DIR / "min_recorder.so"

CC = os.environ.get("BENCH_CC", "clang-19")
TOOL_CC = os.environ.get("BENCH_TOOL_CC", CC)
WARNINGS = ("-Wall", "-Wextra", "-Werror")

NUM_THREADS = 2
WORKLOADS = ("regions", "tasks")
WORKLOAD_UNIT = {"regions": "region", "tasks": "task"}
CONFIGS = ("a", "b", "n", "c", "d", "e", "h", "f", "g")
CONFIG_LABELS = {
    "a": "no tool",
    "b": "null tool",
    "n": "noop tool",
    "c": "min recorder",
    "d": "ompt-py paused",
    "e": "ompt-py to a file",
    "h": "ompt-py to a file, reserved",
    "f": "ompt-py in memory",
    "g": "ompt-py profile",
}
RECORDING_CONFIGS = ("e", "h", "f")
FILE_CONFIGS = ("e", "h")
# The file configurations' times with the tool's recorded stalls discounted
# (docs/stalls.md): each run's time less the wall time a thread was stalled in it.
DISCOUNTED = {cfg: f"{cfg}~" for cfg in FILE_CONFIGS}
CONFIG_LABELS.update({DISCOUNTED[cfg]: f"{CONFIG_LABELS[cfg]}, stalls discounted"
                      for cfg in FILE_CONFIGS})
# Bytes of OMPTPY_RESERVE for configs h and f: the min recorder's bound, in
# 64-byte records.
RESERVE_RECORDS = {"regions": 15, "tasks": 4}
OMPT_PY_CONFIGS = ("d", "e", "h", "g")
# Variables of ours or of the runtime's tool interface that must not leak from
# the caller's environment into a configuration that does not set them.
STRIPPED_ENV_PREFIXES = ("OMP_TOOL", "OMPTPY_", "MINREC_")
RUN_TIMEOUT_S = 900.0
TOOL_STARTED = "Tool was started and is using the OMPT interface"
MINREC_RE = re.compile(r"minrec events=(\d+) written=(\d+) dropped=(\d+)")
NS = 1e9
BUSY_WARNING = 0.2  # CPU busy fraction before the start above which a warning is printed

# Targets.
TASK_RECORD_NS_MAX = 15.0
RECORDER_RATIO_MAX = 1.25
PAUSED_NS_MAX = 2.0
PROFILE_NS_MAX = 3.0  # profile mode, per event over no tool, on the tasks workload
PANDAS_RATE_MIN = 10e6
NUMPY_RATE_MIN = 50e6
# to_pandas() runs this many times on the Python route's trace (each a new
# frame, the previous one freed first); the target uses the fastest.
PANDAS_CONVERSIONS = 3

TOOL_PATH_SCRIPT = "import ompt_py; print(ompt_py.tool_path())"

LOAD_SCRIPT = r"""
import json, sys
import ompt_py

out = {}
trace = ompt_py.load(sys.argv[1])
try:
    proc = trace.meta["processes"][0]
except Exception as exc:
    proc = {}
    out["meta_error"] = f"{type(exc).__name__}: {exc}"
for key in ("dropped", "written"):
    value = proc.get(key)
    out[key] = int(value) if value is not None else None
if sys.argv[2] == "count":
    out["events"] = len(trace.events)
# The tool's stalls (docs/stalls.md), and the wall time at least one thread was in
# one: the union of their intervals (a thread's stall holds its team up at the
# next barrier; another thread waiting for the same region has a stall of its own).
# The union's spans are on CLOCK_MONOTONIC (the trace's times are from its origin),
# for a program that times its own parts (bench/apps.py).
stalls = trace.tool_stalls()
out["stalls"] = len(stalls)
origin = trace.meta.get("origin_mono_ns") or 0
spans = []
for begin, end in sorted(zip(stalls["begin_ns"].tolist(), stalls["end_ns"].tolist())):
    begin, end = begin + origin, end + origin
    if spans and begin <= spans[-1][1]:
        spans[-1][1] = max(spans[-1][1], end)
    else:
        spans.append([begin, end])
out["stall_spans"] = spans
out["stall_s"] = sum(e - b for b, e in spans) / 1e9
print("OMPTPY_LOAD " + json.dumps(out))
"""

INPROC_SCRIPT = r"""
import ctypes, json, sys, time
import ompt_py

lib = ctypes.CDLL(sys.argv[1])
for name in ("bench_regions", "bench_tasks"):
    getattr(lib, name).argtypes = [ctypes.c_long]
work, n = getattr(lib, "bench_" + sys.argv[2]), int(sys.argv[3])
with ompt_py.trace():                   # warm-up, as in the driver
    lib.bench_regions(1000)
    lib.bench_tasks(1000)
t = ompt_py.trace().start()             # populates OMPTPY_RESERVE before the clock starts
t0 = time.perf_counter()
work(n)
t1 = time.perf_counter()
t.stop()
print("OMPTPY_INPROC " + json.dumps({"seconds": t1 - t0, "written": t.meta["written"],
                                      "dropped": t.meta["dropped"]}))
"""

PYROUTE_SCRIPT = r"""
import ctypes, json, sys, time

out = {}
t_import = time.perf_counter()
import ompt_py
out["import_s"] = time.perf_counter() - t_import
lib = ctypes.CDLL(sys.argv[1])
lib.bench_tasks.argtypes = [ctypes.c_long]
lib.bench_tasks.restype = None
n = int(sys.argv[2])
with ompt_py.trace() as t:
    t0 = time.perf_counter()
    lib.bench_tasks(n)
    t1 = time.perf_counter()
t2 = time.perf_counter()
out["elapsed_s"] = t1 - t0
out["stop_s"] = t2 - t1
try:
    proc = t.meta["processes"][0]
except Exception as exc:
    proc = {}
    out["meta_error"] = f"{type(exc).__name__}: {exc}"
for key in ("dropped", "written"):
    out[key] = proc.get(key)
try:
    out["pandas_s"] = []
    for _ in range(int(sys.argv[3])):
        t3 = time.perf_counter()
        df = t.to_pandas()
        out["pandas_s"].append(time.perf_counter() - t3)
        out["pandas_rows"] = len(df)
        del df
except Exception as exc:
    out["pandas_error"] = f"{type(exc).__name__}: {exc}"
try:
    out["events"] = len(t.events)
except Exception as exc:
    out["events_error"] = f"{type(exc).__name__}: {exc}"
print("OMPTPY_PYROUTE " + json.dumps(out))
"""


class BenchError(Exception):
    """A build step or a benchmark run failed."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------- build ---


@dataclass(frozen=True)
class BuildStep:
    output: Path
    inputs: tuple[Path, ...]
    command: tuple[str, ...]
    syntax_only: bool = False  # output is a stamp file written on success

    @property
    def cmd_file(self) -> Path:
        return self.output.with_name(self.output.name + ".cmd")

    def up_to_date(self) -> bool:
        if not self.output.exists() or not self.cmd_file.exists():
            return False
        if self.cmd_file.read_text() != " ".join(self.command):
            return False
        built = self.output.stat().st_mtime
        return all(p.stat().st_mtime <= built for p in self.inputs)

    def run(self) -> None:
        proc = subprocess.run(self.command, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BenchError(
                f"build of {self.output.name} failed:\n  {' '.join(self.command)}\n"
                f"{tail(proc.stderr, 30)}"
            )
        if self.syntax_only:
            self.output.write_text("ok\n")
        self.cmd_file.write_text(" ".join(self.command))


def compiler_output(cc: str, *args: str) -> str | None:
    try:
        proc = subprocess.run([cc, *args], capture_output=True, text=True)
    except OSError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def libomp_dir(cc: str) -> Path | None:
    """Directory of the libomp that `cc -fopenmp` links against."""
    found = compiler_output(cc, "-print-file-name=libomp.so")
    if not found or found == "libomp.so":
        return None
    return Path(found).resolve().parent


def clang_omp_tools_h(cc: str) -> Path | None:
    """clang's own omp-tools.h (usable from clang only)."""
    if "clang" not in Path(cc).name:
        return None
    resource_dir = compiler_output(cc, "-print-resource-dir")
    if not resource_dir:
        return None
    header = Path(resource_dir) / "include" / "omp-tools.h"
    return header if header.exists() else None


def build_steps() -> list[BuildStep]:
    src = BENCH_DIR
    rpath = libomp_dir(CC)
    rpath_flags = (f"-Wl,-rpath,{rpath}",) if rpath else ()
    work_flags = (CC, "-O2", "-fopenmp", *WARNINGS)
    tool_flags = (TOOL_CC, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", *WARNINGS)
    ompt_h = src / "bench_ompt.h"
    steps = [
        BuildStep(
            LIBWORK,
            (src / "work.c", src / "benchwork.h"),
            (
                *work_flags,
                "-fPIC",
                "-shared",
                str(src / "work.c"),
                "-o",
                str(LIBWORK),
                *rpath_flags,
            ),
        ),
        BuildStep(
            DRIVER,
            (src / "driver.c", src / "benchwork.h", LIBWORK),
            (
                *work_flags,
                str(src / "driver.c"),
                "-o",
                str(DRIVER),
                f"-L{BUILD_DIR}",
                "-lbenchwork",
                "-Wl,-rpath,$ORIGIN",
                *rpath_flags,
            ),
        ),
        BuildStep(
            NULL_TOOL,
            (src / "null_tool.c", ompt_h),
            (*tool_flags, str(src / "null_tool.c"), "-o", str(NULL_TOOL)),
        ),
        BuildStep(
            MIN_RECORDER,
            (src / "min_recorder.c", ompt_h),
            (*tool_flags, str(src / "min_recorder.c"), "-o", str(MIN_RECORDER)),
        ),
        BuildStep(
            NOOP_TOOL,
            (src / "min_recorder.c", ompt_h),
            (*tool_flags, "-DMINREC_NOOP", str(src / "min_recorder.c"), "-o", str(NOOP_TOOL)),
        ),
    ]
    if clang_omp_tools_h(CC) is not None:
        steps.append(
            BuildStep(
                BUILD_DIR / "ompt_decls_check.ok",
                (src / "ompt_decls_check.c", ompt_h),
                (CC, "-fsyntax-only", *WARNINGS, str(src / "ompt_decls_check.c")),
                syntax_only=True,
            )
        )
    return steps


def build(steps: list[BuildStep] | None = None) -> None:
    """Run the build steps that are out of date (default: this benchmark's)."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    for step in build_steps() if steps is None else steps:
        if step.up_to_date():
            continue
        log(f"building {step.output.relative_to(BENCH_DIR)}")
        step.run()


def cpu_busy_fraction(interval: float = 0.5) -> float | None:
    """Fraction of CPU time used by anything over `interval` seconds (Linux)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        idle = sum(values[3:5])  # idle, iowait
        return sum(values[:8]) - idle, sum(values[:8])

    try:
        busy0, total0 = sample()
        time.sleep(interval)
        busy1, total1 = sample()
    except (OSError, ValueError):
        return None
    return (busy1 - busy0) / (total1 - total0) if total1 > total0 else None


def linked_libomp() -> str:
    try:
        proc = subprocess.run(["ldd", str(DRIVER)], capture_output=True, text=True)
    except OSError:
        return "unknown"
    for line in proc.stdout.splitlines():
        if "libomp" in line and "=>" in line:
            return line.split("=>", 1)[1].split("(")[0].strip()
    return "unknown"


# ------------------------------------------------------------- ompt-py ---


@dataclass
class OmptPy:
    tool_path: str | None = None
    error: str | None = None
    pythonpath: str | None = None  # repo root, when importable only from there

    @property
    def available(self) -> bool:
        return self.tool_path is not None


def base_env(pythonpath: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED_ENV_PREFIXES)}
    env["OMP_NUM_THREADS"] = str(NUM_THREADS)
    if pythonpath:
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = pythonpath + (os.pathsep + old if old else "")
    return env


def run_python(
    script: str, args: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=tempfile.gettempdir(),  # keep the repo root off sys.path and clean
    )


def discover_ompt_py() -> OmptPy:
    """Find the tool through the installed package, else from the source tree."""
    errors = []
    for pythonpath in (None, str(REPO_ROOT)):
        try:
            proc = run_python(TOOL_PATH_SCRIPT, [], base_env(pythonpath))
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        lines = proc.stdout.strip().splitlines()
        if proc.returncode == 0 and lines:
            path = lines[-1].strip()
            if Path(path).is_file():
                return OmptPy(tool_path=path, pythonpath=pythonpath)
            errors.append(f"tool_path() returned {path!r}, which is not a file")
        else:
            last = tail(proc.stderr, 1) or f"exit code {proc.returncode}"
            errors.append(last)
    return OmptPy(error=errors[-1] if errors else "unknown error")


@dataclass
class LoadResult:
    dropped: int | None = None
    written: int | None = None
    events: int | None = None
    error: str | None = None
    stalls: int | None = None  # tool_stall records (docs/stalls.md)
    stall_s: float | None = None  # wall time at least one thread was stalled
    # that time's spans, [begin, end] ns on CLOCK_MONOTONIC, in order
    stall_spans: list[list[int]] | None = None


def load_trace(omptpy: OmptPy, outdir: Path, count_events: bool) -> LoadResult:
    files = list(outdir.iterdir()) if outdir.is_dir() else []
    if not files:
        return LoadResult(error=f"no trace file in {outdir}")
    try:
        proc = run_python(
            LOAD_SCRIPT,
            [str(outdir), "count" if count_events else "meta"],
            base_env(omptpy.pythonpath),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return LoadResult(error=f"{type(exc).__name__}: {exc}")
    data = marked_json(proc.stdout, "OMPTPY_LOAD")
    if proc.returncode != 0 or data is None:
        return LoadResult(error=tail(proc.stderr, 3) or f"exit code {proc.returncode}")
    return LoadResult(
        dropped=data.get("dropped"),
        written=data.get("written"),
        events=data.get("events"),
        error=data.get("meta_error"),
        stalls=data.get("stalls"),
        stall_s=data.get("stall_s"),
        stall_spans=data.get("stall_spans"),
    )


def marked_json(stdout: str, marker: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(marker + " "):
            data = json.loads(line[len(marker) + 1 :])
            return data if isinstance(data, dict) else None
    return None


# ---------------------------------------------------------------- runs ---


@dataclass
class RunResult:
    seconds: float
    stderr: str
    minrec_events: int | None = None
    minrec_dropped: int | None = None


def write_floor(nbytes: int, reps: int = 3) -> float:
    """Seconds the kernel takes to write `nbytes` into a new file of the scratch
    directory's file system in 64 KiB write() calls (what the file sink does
    with full chunks), min of `reps`, on one CPU: the least that recording to a
    file adds to recording in memory when the program's threads hold every CPU."""
    chunk = bytes(64 * 1024)
    best = float("inf")
    for _ in range(reps):
        with scratch_dir() as d:
            fd = os.open(d / "floor", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                t0 = time.perf_counter()
                for _ in range(-(-nbytes // len(chunk))):
                    os.write(fd, chunk)
                best = min(best, time.perf_counter() - t0)
            finally:
                os.close(fd)
    return best


@contextmanager
def scratch_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="omptpy-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def reserve_bytes(workload: str, n: int) -> str:
    """OMPTPY_RESERVE of configs h and f: the min recorder's bound, in ompt-py's records."""
    return str(64 * (RESERVE_RECORDS[workload] * n + (1 << 20)))


def config_env(
    cfg: str, workload: str, n: int, omptpy: OmptPy, outdir: Path | None,
    verbose_init: bool = False,
) -> dict[str, str]:
    env = base_env()
    if cfg == "b":
        env["OMP_TOOL_LIBRARIES"] = str(NULL_TOOL)
    elif cfg == "n":
        env["OMP_TOOL_LIBRARIES"] = str(NOOP_TOOL)
    elif cfg == "c":
        env["OMP_TOOL_LIBRARIES"] = str(MIN_RECORDER)
        # Per thread: at most 8 events per region (primary thread), 3 per task.
        env["MINREC_RECORDS"] = str(9 * n + (1 << 20))
    elif cfg in OMPT_PY_CONFIGS:
        assert omptpy.tool_path is not None and outdir is not None
        env["OMP_TOOL_LIBRARIES"] = omptpy.tool_path
        env["OMPTPY_OUTPUT"] = str(outdir)
        if cfg == "d":
            env["OMPTPY_RECORD"] = "off"
        if cfg == "h":
            env["OMPTPY_RESERVE"] = reserve_bytes(workload, n)
        if cfg == "g":
            env["OMPTPY_PROFILE"] = "on"
    if verbose_init:
        env["OMP_TOOL_VERBOSE_INIT"] = "stderr"
    return env


def run_program(cmd: list[str], env: dict[str, str], what: str) -> subprocess.CompletedProcess[str]:
    """Run a benchmark program; BenchError (named `what`) on a timeout or a failure."""
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{what}: timed out after {exc.timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise BenchError(f"{what}: exit code {proc.returncode}\n{tail(proc.stderr)}")
    return proc


def run_driver(workload: str, n: int, env: dict[str, str]) -> RunResult:
    proc = run_program([str(DRIVER), workload, str(n)], env, f"{workload} {n}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise BenchError(f"{workload} {n}: exit code {proc.returncode}\n{tail(proc.stderr)}")
    result = RunResult(seconds=float(lines[-1]), stderr=proc.stderr)
    match = MINREC_RE.search(proc.stderr)
    if match:
        result.minrec_events = int(match.group(1))
        result.minrec_dropped = int(match.group(3))
    return result


def interleaved(configs: list[str], rep: int) -> list[str]:
    """The order of repetition `rep`: each one starts from a different configuration,
    so that a drift of the machine's speed is spread over all of them."""
    shift = rep % len(configs)
    return configs[shift:] + configs[:shift]


@dataclass
class WorkloadResult:
    name: str
    n: int
    times: dict[str, list[float]] = field(default_factory=dict)
    minrec_base: int | None = None  # events of a run with N=0
    minrec_total: int | None = None
    minrec_dropped: int = 0
    omptpy_base: int | None = None
    omptpy_total: int | None = None
    omptpy_dropped: list[int | None] = field(default_factory=list)
    omptpy_written: list[int | None] = field(default_factory=list)
    inproc_written: list[int] = field(default_factory=list)  # config f, the timed window
    inproc_dropped: list[int] = field(default_factory=list)
    write_floor_s: float | None = None  # the trace's bytes written to a file, one CPU
    # per file configuration and run: the tool's stalls, and the wall time in them
    stalls: dict[str, list[int]] = field(default_factory=dict)
    stall_s: dict[str, list[float]] = field(default_factory=dict)

    def best(self, cfg: str) -> float | None:
        samples = self.times.get(cfg)
        return min(samples) if samples else None

    def median(self, cfg: str) -> float | None:
        samples = self.times.get(cfg)
        return statistics.median(samples) if samples else None

    @property
    def events(self) -> int | None:
        """Events caused by the workload, as counted by the min recorder."""
        if self.minrec_base is None or self.minrec_total is None:
            return None
        return self.minrec_total - self.minrec_base

    @property
    def omptpy_events(self) -> int | None:
        if self.omptpy_base is None or self.omptpy_total is None:
            return None
        return self.omptpy_total - self.omptpy_base


class Bench:
    def __init__(self, n: int, reps: int, omptpy: OmptPy) -> None:
        self.n = n
        self.reps = reps
        self.omptpy = omptpy
        self.disabled: dict[str, str] = {}
        if not omptpy.available:
            for cfg in OMPT_PY_CONFIGS:
                self.disabled[cfg] = "ompt_py not importable"
        self.results = {wl: WorkloadResult(wl, n) for wl in WORKLOADS}
        self.notes: list[str] = []

    def active_configs(self) -> list[str]:
        return [c for c in CONFIGS if c not in self.disabled]

    def disable(self, cfg: str, why: str) -> None:
        if cfg == "a":
            raise BenchError(f"config a (no tool) failed: {why}")
        self.disabled[cfg] = why
        log(f"config {cfg} ({CONFIG_LABELS[cfg]}) disabled: {why}")

    def run_inproc(self, wl: str, n: int) -> RunResult:
        """Config f: the workload in a Python process, inside an ompt_py.trace() window."""
        env = base_env(self.omptpy.pythonpath)
        env["OMPTPY_RESERVE"] = reserve_bytes(wl, n)
        try:
            proc = run_python(INPROC_SCRIPT, [str(LIBWORK), wl, str(n)], env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BenchError(f"{wl} {n} in memory: {type(exc).__name__}: {exc}") from exc
        data = marked_json(proc.stdout, "OMPTPY_INPROC")
        if proc.returncode != 0 or data is None:
            raise BenchError(f"{wl} {n} in memory: exit code {proc.returncode}\n"
                             + tail(proc.stderr))
        result = RunResult(seconds=float(data["seconds"]), stderr=proc.stderr)
        res = self.results[wl]
        if n == self.n:
            res.inproc_written.append(int(data["written"]))
            res.inproc_dropped.append(int(data["dropped"]))
        return result

    def run_config(
        self, wl: str, cfg: str, n: int, *, verbose_init: bool = False, count_events: bool = False
    ) -> tuple[RunResult, LoadResult | None]:
        if cfg == "f":
            return self.run_inproc(wl, n), None
        if cfg not in OMPT_PY_CONFIGS:
            return run_driver(wl, n, config_env(cfg, wl, n, self.omptpy, None, verbose_init)), None
        with scratch_dir() as outdir:
            env = config_env(cfg, wl, n, self.omptpy, outdir, verbose_init)
            run = run_driver(wl, n, env)
            load = (load_trace(self.omptpy, outdir, count_events and cfg == "e")
                    if cfg in FILE_CONFIGS else None)
        return run, load

    def preflight(self) -> None:
        """N=0 runs: check that each tool attaches; count the fixed events."""
        for wl in WORKLOADS:
            res = self.results[wl]
            for cfg in self.active_configs():
                if cfg == "a":
                    continue
                if cfg == "f":  # checks that the Python route works; attach is checked by e
                    try:
                        self.run_inproc(wl, 0)
                    except BenchError as exc:
                        self.disable(cfg, str(exc))
                    continue
                try:
                    run, load = self.run_config(wl, cfg, 0, verbose_init=True, count_events=True)
                except BenchError as exc:
                    self.disable(cfg, str(exc))
                    continue
                if TOOL_STARTED not in run.stderr:
                    self.disable(
                        cfg,
                        "the tool did not attach (OMP_TOOL_VERBOSE_INIT log on stderr)\n"
                        + tail(run.stderr),
                    )
                    continue
                if cfg == "c":
                    if run.minrec_events is None:
                        self.disable(cfg, "no 'minrec events=' line on stderr")
                        continue
                    res.minrec_base = run.minrec_events
                if cfg == "e" and load is not None:
                    if load.events is None:
                        self.notes.append(f"{wl}: ompt-py N=0 trace: {load.error}")
                    res.omptpy_base = load.events

    def measure(self) -> None:
        for rep in range(self.reps):
            for wl in WORKLOADS:
                order = interleaved(self.active_configs(), rep)
                timings = []
                for cfg in order:
                    if cfg in self.disabled:
                        continue
                    try:
                        self.one_run(wl, cfg, first=(rep == 0))
                    except BenchError as exc:
                        self.disable(cfg, str(exc))
                        continue
                    timings.append(f"{cfg}={self.results[wl].times[cfg][-1]:.3f}")
                log(f"rep {rep + 1}/{self.reps} {wl}: " + " ".join(timings))

    def one_run(self, wl: str, cfg: str, first: bool) -> None:
        res = self.results[wl]
        run, load = self.run_config(wl, cfg, self.n, count_events=first)
        res.times.setdefault(cfg, []).append(run.seconds)
        if cfg == "c":
            if run.minrec_events is None:
                raise BenchError("no 'minrec events=' line on stderr")
            if res.minrec_total not in (None, run.minrec_events):
                self.notes.append(
                    f"{wl}: the min recorder counted {res.minrec_total} events in one "
                    f"run and {run.minrec_events} in another"
                )
            res.minrec_total = run.minrec_events
            res.minrec_dropped += run.minrec_dropped or 0
        if cfg in FILE_CONFIGS and load is not None:
            res.omptpy_dropped.append(load.dropped)
            res.omptpy_written.append(load.written)
            if load.stall_s is not None and load.stalls is not None:
                res.stalls.setdefault(cfg, []).append(load.stalls)
                res.stall_s.setdefault(cfg, []).append(load.stall_s)
                res.times.setdefault(DISCOUNTED[cfg], []).append(run.seconds - load.stall_s)
            if load.error:
                self.notes.append(f"{wl}: ompt-py trace: {load.error}")
            if first and cfg == "e":
                res.omptpy_total = load.events


# ------------------------------------------------------- Python route ---


@dataclass
class PyRoute:
    n: int
    elapsed_s: float | None = None
    stop_s: float | None = None
    events: int | None = None
    dropped: int | None = None
    written: int | None = None
    pandas_s: list[float] = field(default_factory=list)  # each to_pandas() call, in order
    pandas_rows: int | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def records(self) -> int | None:
        return self.written if self.written is not None else self.events

    def pandas_rate(self, which: str = "best") -> float | None:
        """Rows per second of the fastest to_pandas() call ("best") or of the first."""
        if self.pandas_s and self.pandas_rows is not None:
            return self.pandas_rows / (min(self.pandas_s) if which == "best" else self.pandas_s[0])
        return None

    @property
    def stop_rate(self) -> float | None:
        if self.stop_s and self.records is not None:
            return self.records / self.stop_s
        return None


def run_pyroute(omptpy: OmptPy, n: int) -> PyRoute:
    out = PyRoute(n=n)
    try:
        proc = run_python(PYROUTE_SCRIPT, [str(LIBWORK), str(n), str(PANDAS_CONVERSIONS)],
                          base_env(omptpy.pythonpath))
    except (OSError, subprocess.TimeoutExpired) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    data = marked_json(proc.stdout, "OMPTPY_PYROUTE")
    if proc.returncode != 0 or data is None:
        out.error = tail(proc.stderr, 3) or f"exit code {proc.returncode}"
        return out

    def num(key: str) -> float | None:
        value = data.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    def whole(key: str) -> int | None:
        value = data.get(key)
        return int(value) if isinstance(value, (int, float)) else None

    out.elapsed_s, out.stop_s = num("elapsed_s"), num("stop_s")
    out.pandas_s = [float(v) for v in data.get("pandas_s") or [] if isinstance(v, (int, float))]
    out.events, out.dropped = whole("events"), whole("dropped")
    out.written, out.pandas_rows = whole("written"), whole("pandas_rows")
    out.notes = [
        f"{k}: {data[k]}" for k in ("meta_error", "pandas_error", "events_error") if k in data
    ]
    return out


# ------------------------------------------------------------- figures ---


@dataclass
class Target:
    name: str
    value: float | None
    limit: float
    op: str  # "<=" or ">="
    unit: str
    median_value: float | None = None  # same figure from median times, for noise

    @property
    def status(self) -> str:
        if self.value is None:
            return "n/a"
        ok = self.value <= self.limit if self.op == "<=" else self.value >= self.limit
        return "PASS" if ok else "FAIL"


def over(res: WorkloadResult, cfg: str, base: str = "a", stat: str = "min") -> float | None:
    """Seconds that config cfg adds over config base: the difference of the
    minimum times, or ("median") the median over the repetitions of the
    difference within each (a repetition runs every configuration close in
    time, so a slow phase of the machine cancels out of it)."""
    if stat == "min":
        t, t0 = res.best(cfg), res.best(base)
        return t - t0 if t is not None and t0 is not None else None
    diffs = [x - y for x, y in zip(res.times.get(cfg, []), res.times.get(base, []))]
    return statistics.median(diffs) if diffs else None


def per_event_ns(res: WorkloadResult, cfg: str, base: str = "a", stat: str = "min") -> float | None:
    extra, events = over(res, cfg, base, stat), res.events
    return extra / events * NS if extra is not None and events else None


def recorder_ratio(res: WorkloadResult, cfg: str = "e", stat: str = "min") -> float | None:
    e, c = over(res, cfg, stat=stat), over(res, "c", stat=stat)
    return e / c if e is not None and c is not None and c > 0 else None


def total_drops(bench: Bench, py: PyRoute | None) -> int | None:
    """Dropped records over every recording run; None if any count is unknown."""
    counts: list[int | None] = []
    for res in bench.results.values():
        counts.extend(res.omptpy_dropped)
        counts.extend(res.inproc_dropped)
    if py is not None:
        counts.append(py.dropped)
    if not counts or any(c is None for c in counts):
        return None
    return sum(c for c in counts if c is not None)


def targets(bench: Bench, py: PyRoute | None, workloads: bool = True) -> list[Target]:
    """Every target; ``workloads=False`` (--python-route-only): those of the Python route."""
    regions, tasks = bench.results["regions"], bench.results["tasks"]

    def cost(res: WorkloadResult, cfg: str, what: str, limit: float, base: str = "a") -> Target:
        return Target(
            f"{res.name}: {what} ({cfg}-{base})/events",
            per_event_ns(res, cfg, base),
            limit,
            "<=",
            "ns/event",
            per_event_ns(res, cfg, base, stat="median"),
        )

    def ratio(res: WorkloadResult, cfg: str) -> Target:
        return Target(
            f"{res.name}: {CONFIG_LABELS[cfg]} vs min recorder ({cfg}-a)/(c-a)",
            recorder_ratio(res, cfg),
            RECORDER_RATIO_MAX,
            "<=",
            "x",
            recorder_ratio(res, cfg, stat="median"),
        )

    drops = total_drops(bench, py)
    dropped = Target(
        "dropped records (all recording runs)",
        float(drops) if drops is not None else None,
        0,
        "<=",
        "records",
    )
    if not workloads:
        return [dropped, *route_targets(py)]
    return [
        *(cost(tasks, cfg, CONFIG_LABELS[cfg], TASK_RECORD_NS_MAX) for cfg in RECORDING_CONFIGS),
        *(ratio(res, cfg) for cfg in RECORDING_CONFIGS for res in (regions, tasks)),
        *(ratio(res, DISCOUNTED["e"]) for res in (regions, tasks)),
        # Paused: what ompt-py adds to a tool that is attached but registers
        # nothing (the runtime's own cost of having a tool is b-a, shown above).
        cost(regions, "d", "paused cost", PAUSED_NS_MAX, base="b"),
        cost(tasks, "d", "paused cost", PAUSED_NS_MAX, base="b"),
        # Profile mode: the events a trace would hold, aggregated instead.
        cost(tasks, "g", CONFIG_LABELS["g"], PROFILE_NS_MAX),
        dropped,
        *route_targets(py),
    ]


def route_targets(py: PyRoute | None) -> list[Target]:
    """The Python route's conversion targets: drained records to numpy, and to pandas."""
    return [
        Target(
            "numpy conversion: stop() hands drained records over (Python route, tasks)",
            py.stop_rate if py is not None else None,
            NUMPY_RATE_MIN,
            ">=",
            "records/s",
        ),
        Target(
            f"pandas conversion, fastest of {PANDAS_CONVERSIONS} to_pandas() (Python route, tasks)",
            py.pandas_rate() if py is not None else None,
            PANDAS_RATE_MIN,
            ">=",
            "records/s",
        ),
    ]


def fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e6:.1f}M/s"


def report_workload(bench: Bench, res: WorkloadResult) -> None:
    unit = WORKLOAD_UNIT[res.name]
    desc = (
        "empty parallel regions"
        if res.name == "regions"
        else "trivial tasks (each thread creates half)"
    )
    print(f"\n== {res.name}: {res.n} {desc}, {NUM_THREADS} threads, min of {bench.reps} runs")
    events, py_events = res.events, res.omptpy_events
    per = (lambda e: f" ({e / res.n:.2f}/{unit})") if res.n else (lambda e: "")
    line = "   events: "
    line += f"{events}{per(events)} min recorder" if events is not None else "n/a min recorder"
    line += ", " + (
        f"{py_events}{per(py_events)} ompt-py" if py_events is not None else "n/a ompt-py"
    )
    if events and py_events is not None and py_events != events:
        line += f" (differ by {100.0 * (py_events - events) / events:+.2f}%)"
    print(line)
    if res.omptpy_written or res.omptpy_dropped:
        pairs = zip(res.omptpy_written, res.omptpy_dropped)
        runs = ", ".join(f"{fmt(w, 'd')}/{fmt(d, 'd')}" for w, d in pairs)
        print(f"   ompt-py written/dropped per (e), (h) run: {runs}")
    if res.inproc_written:
        pairs = zip(res.inproc_written, res.inproc_dropped)
        runs = ", ".join(f"{w}/{d}" for w, d in pairs)
        print(f"   ompt-py written/dropped per (f) run (timed window only): {runs}")
    if res.minrec_dropped:
        print(
            f"   WARNING: the min recorder dropped {res.minrec_dropped} records "
            "(buffer too small): its figures are too low"
        )
    w = max(len(f"{c}  {CONFIG_LABELS[c]}") for c in CONFIGS)
    header = f"{'config':<{w}} {'min [s]':>9} {'median':>9} {'+ns/' + unit:>12}"
    print(f"   {header} {'+ns/event':>10}   runs [s]")
    for cfg in CONFIGS:
        label = f"{cfg}  {CONFIG_LABELS[cfg]}"
        if cfg in bench.disabled and not res.times.get(cfg):
            print(f"   {label:<{w}} {'-':>9}   ({bench.disabled[cfg].splitlines()[0]})")
            continue
        extra = over(res, cfg) if cfg != "a" else None
        per_op = extra / res.n * NS if extra is not None and res.n else None
        per_ev = per_event_ns(res, cfg) if cfg != "a" else None
        runs = " ".join(f"{t:.3f}" for t in res.times.get(cfg, []))
        if cfg in bench.disabled:
            runs += f" (then failed: {bench.disabled[cfg].splitlines()[0]})"
        print(
            f"   {label:<{w}} {fmt(res.best(cfg), '.4f'):>9} "
            f"{fmt(res.median(cfg), '.4f'):>9} "
            f"{'-' if cfg == 'a' else fmt(per_op, '.1f'):>12} "
            f"{'-' if cfg == 'a' else fmt(per_ev, '.2f'):>10}   {runs}"
        )
    ratios = "; ".join(
        f"({cfg}-a)/(c-a) = {fmt(recorder_ratio(res, cfg))} "
        f"(from medians: {fmt(recorder_ratio(res, cfg, stat='median'))})"
        for cfg in RECORDING_CONFIGS
    )
    print(
        f"   {ratios}; (d-b)/events = {fmt(per_event_ns(res, 'd', 'b'))} ns "
        f"(paused cost beyond an attached null tool); (g-n)/events = "
        f"{fmt(per_event_ns(res, 'g', 'n'))} ns, from medians "
        f"{fmt(per_event_ns(res, 'g', 'n', stat='median'))} (what profile mode adds to a "
        f"tool that registers the same callbacks and does nothing)"
    )
    for cfg in FILE_CONFIGS:
        if res.stalls.get(cfg):
            d = DISCOUNTED[cfg]
            print(
                f"   ({cfg}) the tool's stalls per run: "
                + ", ".join(f"{n} ({1e3 * t:.1f} ms)" for n, t in
                            zip(res.stalls[cfg], res.stall_s[cfg]))
                + f"; with that time discounted ({d}): min {fmt(res.best(d), '.4f')} s, "
                f"({d}-a)/events = {fmt(per_event_ns(res, d))} ns, ({d}-a)/(c-a) = "
                f"{fmt(recorder_ratio(res, d))} (from medians: "
                f"{fmt(recorder_ratio(res, d, stat='median'))})"
            )
    if res.write_floor_s is not None and res.omptpy_events:
        print(
            f"   file floor: writing the trace's {64 * res.omptpy_events / 1e6:.0f} MB to a file "
            f"here takes {res.write_floor_s:.4f} s of one CPU "
            f"({res.write_floor_s * NS / res.omptpy_events:.1f} ns/event): what writing it "
            f"with write() (OMPTPY_ZERO_COPY=off) adds while the program's threads hold every "
            f"CPU, and (e), in place, does not"
        )


def report_pyroute(py: PyRoute | None, omptpy: OmptPy) -> None:
    print(
        "\n== Python route: import ompt_py; CDLL(libbenchwork); "
        "with ompt_py.trace(): bench_tasks(N)"
    )
    if py is None:
        print(f"   skipped: ompt_py not importable: {omptpy.error}")
        return
    if py.error:
        print(f"   failed: {py.error}")
        return
    print(
        f"   bench_tasks({py.n}) in the with block: {fmt(py.elapsed_s, '.4f', ' s')} "
        "(includes runtime start-up: no warm-up)"
    )
    print(
        f"   events {fmt(py.events, 'd')}, written {fmt(py.written, 'd')}, "
        f"dropped {fmt(py.dropped, 'd')}"
    )
    print(
        f"   trace stop (leaving the with block): {fmt(py.stop_s, '.4f', ' s')}, "
        f"{fmt_rate(py.stop_rate)} (drained records to numpy)"
    )
    calls = ", ".join(f"{s:.4f}" for s in py.pandas_s) or "n/a"
    print(
        f"   to_pandas() x{len(py.pandas_s)}: {calls} s for {fmt(py.pandas_rows, 'd')} rows; "
        f"fastest {fmt_rate(py.pandas_rate())}, first {fmt_rate(py.pandas_rate('first'))}"
    )
    for note in py.notes:
        print(f"   note: {note}")


def report_targets(tlist: list[Target]) -> None:
    print("\n== targets")
    for t in tlist:
        if t.unit == "records/s":
            value = fmt_rate(t.value)
            limit = fmt_rate(t.limit)
        elif t.unit == "records":
            value = fmt(t.value, ".0f")
            limit = f"{t.limit:.0f}"
        else:
            value = fmt(t.value, ".2f", f" {t.unit}")
            limit = f"{t.limit:g} {t.unit}"
        line = f"   [{t.status:<4}] {t.name}: {value} (target {t.op} {limit})"
        if t.median_value is not None:
            line += f"; from medians: {t.median_value:.2f}"
        print(line)


def json_report(
    bench: Bench, py: PyRoute | None, tlist: list[Target], libomp: str
) -> dict[str, Any]:
    workloads: dict[str, Any] = {}
    for wl, res in bench.results.items():
        if not res.times:  # not measured (--python-route-only)
            continue
        workloads[wl] = {
            "n": res.n,
            "events_min_recorder": res.events,
            "events_ompt_py": res.omptpy_events,
            "min_recorder_dropped": res.minrec_dropped,
            "ompt_py_dropped": res.omptpy_dropped,
            "ompt_py_written": res.omptpy_written,
            "inproc_written": res.inproc_written,
            "inproc_dropped": res.inproc_dropped,
            "write_floor_s": res.write_floor_s,
            "recorder_ratio": {cfg: recorder_ratio(res, cfg)
                               for cfg in (*RECORDING_CONFIGS, *DISCOUNTED.values())},
            "stalls": res.stalls,
            "stall_s": res.stall_s,
            "configs": {
                cfg: {
                    "label": CONFIG_LABELS[cfg],
                    "times_s": res.times.get(cfg, []),
                    "min_s": res.best(cfg),
                    "median_s": res.median(cfg),
                    "over_a_ns_per_event": per_event_ns(res, cfg) if cfg != "a" else None,
                    "disabled": bench.disabled.get(cfg),
                }
                for cfg in (*CONFIGS, *DISCOUNTED.values())
            },
        }
    return {
        "n": bench.n,
        "reps": bench.reps,
        "threads": NUM_THREADS,
        "libomp": libomp,
        "ompt_py": asdict(bench.omptpy),
        "workloads": workloads,
        "python_route": None
        if py is None
        else {
            **asdict(py),
            "pandas_rate": py.pandas_rate(),
            "pandas_rate_first": py.pandas_rate("first"),
            "stop_rate": py.stop_rate,
        },
        "targets": [{**asdict(t), "status": t.status} for t in tlist],
        "notes": bench.notes,
    }


# ---------------------------------------------------------------- main ---


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 repetitions instead of 5")
    parser.add_argument("--reps", type=int, help="repetitions per configuration")
    parser.add_argument(
        "--n", type=int, default=10**6, help="regions / tasks per workload (default 10**6)"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write figures here")
    route = parser.add_mutually_exclusive_group()
    route.add_argument(
        "--no-python-route",
        action="store_true",
        help="skip the in-process ompt_py.trace() measurement",
    )
    route.add_argument(
        "--python-route-only",
        action="store_true",
        help="run only the in-process ompt_py.trace() measurement (numpy and pandas rates)",
    )
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 2 if args.quick else 5
    if args.reps < 1 or args.n < 1:
        parser.error("--reps and --n must be positive")
    return args


def warm_guest_memory(gib: float = 3.0) -> None:
    """Touch and free a few GiB once before measuring.

    On a virtual machine the first touch of a guest page since boot is several
    times slower than later ones (the host backs it then); without this the
    first configurations to allocate memory pay for it and the order of runs
    decides the figures.
    """
    size = int(gib * (1 << 30))
    buf = bytearray(size)  # zero-filled: every page is touched
    del buf


def print_setting(headline: str, omptpy: OmptPy) -> float | None:
    """A benchmark's first lines: what runs, which tool, how busy the machine is
    (returned: the busy fraction of the CPUs just before the start)."""
    print(headline)
    if omptpy.available:
        where = " (from the source tree)" if omptpy.pythonpath else ""
        print(f"ompt_py tool: {omptpy.tool_path}{where}")
    else:
        print(f"ompt_py not importable: {omptpy.error}")
    busy = cpu_busy_fraction()
    if busy is not None and busy > BUSY_WARNING:
        print(
            f"WARNING: the CPUs were {100 * busy:.0f}% busy just before the start: other "
            "processes are running and the figures will be noisy"
        )
    sys.stdout.flush()
    return busy


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        build()
    except BenchError as exc:
        log(str(exc))
        return 1
    libomp = linked_libomp()
    omptpy = discover_ompt_py()

    workloads = not args.python_route_only
    runs = f"min of {args.reps} runs" if workloads else "Python route only"
    print_setting(
        f"ompt-py overhead benchmark: N={args.n}, {runs}, "
        f"OMP_NUM_THREADS={NUM_THREADS}, libomp {libomp}",
        omptpy,
    )

    warm_guest_memory()
    bench = Bench(args.n, args.reps, omptpy)
    if workloads:
        try:
            bench.preflight()
            bench.measure()
        except BenchError as exc:
            log(str(exc))
            return 1
        for res in bench.results.values():
            if res.omptpy_events:
                res.write_floor_s = write_floor(64 * res.omptpy_events)

    py: PyRoute | None = None
    if omptpy.available and not args.no_python_route:
        log("Python route ...")
        py = run_pyroute(omptpy, args.n)

    if workloads:
        for res in bench.results.values():
            report_workload(bench, res)
    if not args.no_python_route:
        report_pyroute(py, omptpy)
    tlist = targets(bench, py, workloads)
    report_targets(tlist)
    for note in dict.fromkeys(bench.notes):
        print(f"   note: {note}")
    if args.json:
        args.json.write_text(json.dumps(json_report(bench, py, tlist, libomp), indent=2) + "\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
