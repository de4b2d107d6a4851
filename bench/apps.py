#!/usr/bin/env python3
"""Application-level benchmark of OpenMP tool overhead.

Runs task- and loop-parallel kernels of the kinds the literature measures
tool overhead with (BOTS-like: fib, nqueens, sparselu, sort, health, a
dynamic-schedule loop; bench/apps/kernels.c) and EPCC-style per-construct
overheads (parallel, for, barrier, single, critical, lock, reduction, tasks;
bench/apps/epcc.c), on 2 threads, under seven configurations:

    none      no tool
    noop      a tool that registers ompt-py's callbacks and does nothing
    minrec    the hand-written minimal recorder (bench/min_recorder.c), its
              buffer for the whole run resident from each thread's start
    file      ompt-py tracing to a file (OMPTPY_OUTPUT, as `ompt-py run` does)
    reserved  the same with OMPTPY_RESERVE as large as the whole run's trace
    memory    ompt-py tracing in memory (ompt_py.trace() with OMPTPY_RESERVE)
    profile   `ompt-py run --profile`

and two columns of the file runs with each kernel's time less the tool's
recorded stalls inside it (file~, reserved~: docs/stalls.md; the tracing
target is on these).  `--configs` runs only some of them; `--versus TOOL.so`
adds file*, reserved* and profile*: the same with another build of the tool
library (another commit's libomptpy.so), to measure a change side by side.

Repetitions are interleaved (each runs every configuration, starting from a
different one); one table gives, per kernel and configuration, the median,
the spread and the slowdown over no tool.  It is a report, not a test: it
exits 0 whatever the figures (1 only when it cannot measure at all).

Usage: python bench/apps.py [--quick] [--reps R] [--size KERNEL=N ...]
       [--kernels K ...] [--configs C ...] [--versus TOOL.so] [--json FILE]
See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis import busy_seconds
from overhead import (
    BUILD_DIR,
    CC,
    MIN_RECORDER,
    MINREC_RE,
    NOOP_TOOL,
    NUM_THREADS,
    TOOL_STARTED,
    WARNINGS,
    BenchError,
    BuildStep,
    OmptPy,
    base_env,
    build,
    build_steps,
    discover_ompt_py,
    fmt,
    interleaved,
    libomp_dir,
    load_trace,
    log,
    print_setting,
    run_program,
    run_python,
    scratch_dir,
    tail,
    warm_guest_memory,
)

BENCH_DIR = Path(__file__).resolve().parent
SRC = BENCH_DIR / "apps"
LIBAPPS = BUILD_DIR / "libapps.so"
DRIVER = BUILD_DIR / "apps"

# The measured configurations; then the file ones with the tool's recorded stalls
# (docs/stalls.md) inside each kernel's run taken off its time (`file~`,
# `reserved~`: columns of the same runs, not runs of their own).
RUN_CONFIGS = ("none", "noop", "minrec", "file", "reserved", "memory", "profile")
DISCOUNT = "~"
# --versus: these configurations again with another build of the tool library,
# named with VERSUS after them (file*, file*~).
VERSUS = "*"
VERSUS_OF = ("file", "reserved", "profile")
CONFIG_LABELS = {
    "none": "no tool",
    "noop": "noop tool",
    "minrec": "min recorder",
    "file": "ompt-py file",
    "reserved": "ompt-py file, reserved",
    "memory": "ompt-py memory",
    "profile": "ompt-py profile",
}
OMPT_PY_CONFIGS = ("file", "reserved", "memory", "profile")
FILE_CONFIGS = ("file", "reserved")
TRACING_RUNS = (*FILE_CONFIGS, *(c + VERSUS for c in FILE_CONFIGS), "memory")
# Issue 15's tracing target is on these: the program's time, a file
# configuration's with what its recorded stalls took discounted.
TRACING_CONFIGS = ("file~", "reserved~", "memory")
EPCC_PREFIX = "epcc_"
# Issue 15's targets on the application kernels (not the epcc_* rows): profiling
# slows each down by at most this; tracing by no more than the min recorder does.
PROFILE_SLOWDOWN_MAX = 1.05
# ompt-py writes a few more records than the min recorder counts events
# (overhead.py: 15 against 14 per region, 4 against 3 per task): the reserve of
# one in-memory window, in 64-byte records, is this times the kernel's events.
RESERVE_FACTOR = 1.5
SLACK_RECORDS = 1 << 20


def measured_of(cfg: str) -> str:
    """The configuration whose runs a column shows: file for file~."""
    return cfg.removesuffix(DISCOUNT)


def own_of(cfg: str) -> str:
    """The configuration of ompt-py's own tool that a --versus one repeats."""
    return cfg.removesuffix(VERSUS)


def label(cfg: str) -> str:
    measured = measured_of(cfg)
    text = CONFIG_LABELS[own_of(measured)]
    if measured.endswith(VERSUS):
        text += " (--versus tool)"
    return text + (", stalls discounted" if cfg.endswith(DISCOUNT) else "")


def columns(run_configs: list[str]) -> list[str]:
    """The table's columns: the configurations run, then the file ones' discounted."""
    return [*run_configs, *(c + DISCOUNT for c in run_configs if own_of(c) in FILE_CONFIGS)]


# One line per kernel run, from the driver and from MEMORY_SCRIPT (which adds
# the window's written and dropped records).
LINE_PREFIX = "APP "

MEMORY_SCRIPT = r"""
import ctypes, sys
import ompt_py

class Result(ctypes.Structure):
    _fields_ = [(n, ctypes.c_double) for n in ("seconds", "checksum", "reference", "ops")]

lib = ctypes.CDLL(sys.argv[1])
lib.apps_run.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.POINTER(Result)]
lib.apps_run.restype = ctypes.c_int
with ompt_py.trace():                   # warm-up, as in the driver
    lib.apps_warmup()
for arg in sys.argv[2:]:
    name, size = arg.split("=")
    r = Result()
    t = ompt_py.trace().start()         # populates OMPTPY_RESERVE before the kernel
    if lib.apps_run(name.encode(), int(size), ctypes.byref(r)) != 0:
        sys.exit(f"unknown kernel {name}")
    t.stop()
    print(f"APP {name} {size} {r.seconds:.9f} {r.checksum:.17g} {r.reference:.9f} "
          f"{r.ops:.0f} written={t.meta['written']} dropped={t.meta['dropped']}", flush=True)
    del t
"""


# ---------------------------------------------------------------- build ---


def app_steps() -> list[BuildStep]:
    """libapps.so and the driver, beside overhead.py's min recorder and noop tool."""
    rpath = libomp_dir(CC)
    rpath_flags = (f"-Wl,-rpath,{rpath}",) if rpath else ()
    flags = (CC, "-O2", "-fopenmp", *WARNINGS)
    header = SRC / "apps.h"
    lib_sources = [SRC / "kernels.c", SRC / "epcc.c", SRC / "registry.c"]
    tools = [s for s in build_steps() if s.output in (MIN_RECORDER, NOOP_TOOL)]
    return [
        *tools,
        BuildStep(
            LIBAPPS,
            (*lib_sources, header),
            (*flags, "-fPIC", "-shared", *map(str, lib_sources), "-o", str(LIBAPPS),
             *rpath_flags),
        ),
        BuildStep(
            DRIVER,
            (SRC / "main.c", header, LIBAPPS),
            (*flags, str(SRC / "main.c"), "-o", str(DRIVER), f"-L{BUILD_DIR}", "-lapps",
             "-Wl,-rpath,$ORIGIN", *rpath_flags),
        ),
    ]


@dataclass(frozen=True)
class Kernel:
    name: str
    size: int
    quick_size: int
    what: str

    @property
    def epcc(self) -> bool:
        return self.name.startswith(EPCC_PREFIX)


def list_kernels() -> list[Kernel]:
    """The driver's kernels (`apps --list`), in its order."""
    proc = run_program([str(DRIVER), "--list"], base_env(), "apps --list")
    out = []
    for line in proc.stdout.splitlines():
        name, size, quick, what = line.split(" ", 3)
        out.append(Kernel(name, int(size), int(quick), what))
    return out


# ----------------------------------------------------------------- runs ---


@dataclass
class KernelRun:
    seconds: float
    checksum: float
    reference: float
    ops: float
    written: int | None = None
    dropped: int | None = None
    window: tuple[int, int] | None = None  # CLOCK_MONOTONIC ns around the kernel's run
    stalled: float = 0.0  # seconds of the tool's stalls inside the window

    @property
    def value(self) -> float:
        """What the table shows: seconds, or an EPCC kernel's ns per construct."""
        return (self.seconds - self.reference) / self.ops * 1e9 if self.ops else self.seconds

    @property
    def discounted(self) -> float:
        """value less the stalls, for an application kernel; an EPCC kernel's value
        is its fastest batch's already, which a stall does not change."""
        return self.value if self.ops else self.seconds - self.stalled

    def stall_seconds(self, spans: list[list[int]]) -> float:
        """The part of the stall spans (sorted, disjoint) inside the window."""
        if self.window is None:
            return 0.0
        begin, end = self.window
        return sum(max(0, min(e, end) - max(b, begin)) for b, e in spans) / 1e9


def parse_lines(stdout: str) -> dict[str, KernelRun]:
    """The APP lines of a driver or MEMORY_SCRIPT run, by kernel name: six fields,
    then `key=value` ones (window=BEGIN:END, written=N, dropped=N)."""
    out = {}
    for line in stdout.splitlines():
        if not line.startswith(LINE_PREFIX):
            continue
        f = line.split()
        run = KernelRun(float(f[3]), float(f[4]), float(f[5]), float(f[6]))
        extra = dict(kv.split("=", 1) for kv in f[7:])
        if "window" in extra:
            begin, end = extra["window"].split(":")
            run.window = (int(begin), int(end))
        if "written" in extra:
            run.written, run.dropped = int(extra["written"]), int(extra["dropped"])
        out[f[1]] = run
    return out


@dataclass
class Result:
    kernel: Kernel
    size: int
    events: int | None = None  # counted by the min recorder, the warm-up's subtracted
    runs: dict[str, list[KernelRun]] = field(default_factory=dict)

    def runs_of(self, cfg: str) -> list[KernelRun]:
        """The runs of cfg, or of the configuration a discounted column is of."""
        return self.runs.get(measured_of(cfg), [])

    def values(self, cfg: str) -> list[float]:
        if cfg.endswith(DISCOUNT):
            return [r.discounted for r in self.runs_of(cfg)]
        return [r.value for r in self.runs_of(cfg)]

    def median(self, cfg: str) -> float | None:
        v = self.values(cfg)
        return statistics.median(v) if v else None

    def spread(self, cfg: str) -> float | None:
        """(max - min) / median of the repetitions."""
        v, m = self.values(cfg), self.median(cfg)
        return (max(v) - min(v)) / abs(m) if v and m else None

    def slowdown(self, cfg: str) -> float | None:
        m, m0 = self.median(cfg), self.median("none")
        return m / m0 if m is not None and m0 else None


class Bench:
    def __init__(self, kernels: list[Kernel], sizes: dict[str, int], reps: int,
                 omptpy: OmptPy, configs: list[str] | None = None,
                 versus: Path | None = None) -> None:
        self.reps = reps
        self.omptpy = omptpy
        self.versus = versus
        chosen = [c for c in RUN_CONFIGS if c == "none" or configs is None or c in configs]
        if versus is not None:
            chosen += [c + VERSUS for c in chosen if c in VERSUS_OF]
        self.configs = chosen  # the configurations run
        self.columns = columns(chosen)
        self.results = {k.name: Result(k, sizes[k.name]) for k in kernels}
        self.disabled: dict[str, str] = {}
        self.notes: list[str] = []
        self.base_events: int | None = None
        # CPUs other processes used during each measured run, by configuration.
        self.others: dict[str, list[float]] = {}
        if not omptpy.available:
            for cfg in OMPT_PY_CONFIGS:
                self.disabled[cfg] = "ompt_py not importable"

    def active(self) -> list[str]:
        return [c for c in self.configs if c not in self.disabled]

    def disable(self, cfg: str, why: str) -> None:
        if cfg == "none":
            raise BenchError(f"the run without a tool failed: {why}")
        self.disabled[cfg] = why
        log(f"config {cfg} ({label(cfg)}) disabled: {why.splitlines()[0]}")

    def args(self, order: list[str] | None = None) -> list[str]:
        names = order if order is not None else list(self.results)
        return [f"{n}={self.results[n].size}" for n in names]

    def env(self, cfg: str, verbose: bool = False, minrec_records: int | None = None
            ) -> dict[str, str]:
        if cfg.endswith(VERSUS):
            env = self.env(own_of(cfg), verbose, minrec_records)
            env["OMP_TOOL_LIBRARIES"] = str(self.versus)
            if cfg == "profile" + VERSUS:  # the driver run as `ompt-py run --profile` runs it
                env["OMPTPY_PROFILE"] = "on"
            return env
        env = base_env(self.omptpy.pythonpath if cfg in ("memory", "profile") else None)
        if cfg == "noop":
            env["OMP_TOOL_LIBRARIES"] = str(NOOP_TOOL)
        elif cfg == "minrec":
            env["OMP_TOOL_LIBRARIES"] = str(MIN_RECORDER)
            env["MINREC_RECORDS"] = str(minrec_records or self.minrec_records())
        elif cfg in FILE_CONFIGS:
            assert self.omptpy.tool_path is not None
            env["OMP_TOOL_LIBRARIES"] = self.omptpy.tool_path
            if cfg == "reserved":  # the whole run resident at start, as minrec's buffer is
                total = sum(r.events or 0 for r in self.results.values())
                env["OMPTPY_RESERVE"] = str(64 * int(RESERVE_FACTOR * total + SLACK_RECORDS))
        elif cfg == "memory":
            most = max((r.events or 0 for r in self.results.values()), default=0)
            env["OMPTPY_RESERVE"] = str(64 * int(RESERVE_FACTOR * most + SLACK_RECORDS))
        if verbose:
            env["OMP_TOOL_VERBOSE_INIT"] = "stderr"
        return env

    def minrec_records(self) -> int:
        """Per-thread capacity for one run of every kernel: all events on one thread."""
        total = sum(r.events or 0 for r in self.results.values())
        return total + (self.base_events or 0) + SLACK_RECORDS

    @contextmanager
    def metered(self, cfg: str) -> Iterator[None]:
        """Adds to others[cfg] the CPUs that other processes used meanwhile
        (/proc/stat less this process's children; nothing when unknown)."""
        own0, busy0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_seconds(), \
            time.perf_counter()
        yield
        own1, busy1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), busy_seconds(), \
            time.perf_counter() - t0
        if busy0 is not None and busy1 is not None and wall > 0:
            child = own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime
            self.others.setdefault(cfg, []).append(max(0.0, busy1 - busy0 - child) / wall)

    def run(self, cfg: str, args: list[str], verbose: bool = False,
            minrec_records: int | None = None) -> tuple[dict[str, KernelRun], str]:
        """One process of configuration cfg running the kernels `args`."""
        env = self.env(cfg, verbose, minrec_records)
        what = f"{cfg}: {' '.join(args) or 'warm-up only'}"
        if cfg == "memory":
            try:
                with self.metered(cfg):
                    proc = run_python(MEMORY_SCRIPT, [str(LIBAPPS), *args], env)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise BenchError(f"{what}: {type(exc).__name__}: {exc}") from exc
            if proc.returncode != 0:
                raise BenchError(f"{what}: exit code {proc.returncode}\n{tail(proc.stderr)}")
            return parse_lines(proc.stdout), proc.stderr
        if cfg == "profile":
            with scratch_dir() as d:
                cmd = [sys.executable, "-m", "ompt_py", "run", "--profile", "-q", "-o",
                       str(d / "profile.parquet"), "--", str(DRIVER), *args]
                with self.metered(cfg):
                    proc = run_program(cmd, env, what)
            return parse_lines(proc.stdout), proc.stderr
        if cfg == "profile" + VERSUS:
            with scratch_dir() as d:
                env["OMPTPY_OUTPUT"] = str(d)
                with self.metered(cfg):
                    proc = run_program([str(DRIVER), *args], env, what)
            return parse_lines(proc.stdout), proc.stderr
        if own_of(cfg) not in FILE_CONFIGS:
            with self.metered(cfg):
                proc = run_program([str(DRIVER), *args], env, what)
            return parse_lines(proc.stdout), proc.stderr
        with scratch_dir() as d:
            env["OMPTPY_OUTPUT"] = str(d)
            with self.metered(cfg):
                proc = run_program([str(DRIVER), *args], env, what)
            runs = parse_lines(proc.stdout)
            if args:
                load = load_trace(self.omptpy, d, count_events=False)
                if load.error:
                    self.notes.append(f"{cfg}: {load.error}")
                for r in runs.values():  # the process's totals, on every kernel's row
                    r.written, r.dropped = load.written, load.dropped
                    r.stalled = r.stall_seconds(load.stall_spans or [])
        return runs, proc.stderr

    def preflight(self) -> None:
        """Check that each tool attaches; count each kernel's events with the min
        recorder (a one-record buffer: it counts what it cannot keep)."""
        for cfg in self.active():
            if cfg == "none":
                continue
            try:
                _, stderr = self.run(cfg, [], verbose=cfg != "memory", minrec_records=1)
            except BenchError as exc:
                self.disable(cfg, str(exc))
                continue
            if cfg != "memory" and TOOL_STARTED not in stderr:
                self.disable(cfg, "the tool did not attach (OMP_TOOL_VERBOSE_INIT log)\n"
                             + tail(stderr))
        if "minrec" in self.disabled:
            return
        try:
            _, stderr = self.run("minrec", [], minrec_records=1)  # the warm-up's events
            self.base_events = minrec_events(stderr)
            for name, res in self.results.items():
                log(f"counting the events of {name} ...")
                _, stderr = self.run("minrec", self.args([name]), minrec_records=1)
                total = minrec_events(stderr)
                if total is not None and self.base_events is not None:
                    res.events = total - self.base_events
        except BenchError as exc:
            self.notes.append(f"events not counted (the min recorder failed): "
                              f"{str(exc).splitlines()[0]}")

    def measure(self) -> None:
        names = list(self.results)
        self.others.clear()  # the preflight's runs are not measured
        for rep in range(self.reps):
            kernels = interleaved(names, rep)  # the kernels' order rotates too
            for cfg in interleaved(self.active(), rep):
                if cfg in self.disabled:
                    continue
                try:
                    runs, _ = self.run(cfg, self.args(kernels))
                except BenchError as exc:
                    self.disable(cfg, str(exc))
                    continue
                for name in names:
                    if name not in runs:
                        self.notes.append(f"{cfg}: no line for {name}")
                        continue
                    self.results[name].runs.setdefault(cfg, []).append(runs[name])
            log(f"rep {rep + 1}/{self.reps} done")
        self.check_checksums()

    def check_checksums(self) -> None:
        for name, res in self.results.items():
            ref = res.runs.get("none")
            if not ref:
                continue
            want = ref[0].checksum
            for cfg, runs in res.runs.items():
                bad = [r.checksum for r in runs if r.checksum != want]
                if bad:
                    self.notes.append(f"{name}: checksum {bad[0]!r} under {cfg}, "
                                      f"{want!r} without a tool")


def minrec_events(stderr: str) -> int | None:
    match = MINREC_RE.search(stderr)
    return int(match.group(1)) if match else None


# -------------------------------------------------------------- report ---


def cell(res: Result, cfg: str) -> str:
    """`median spread slowdown`, or n/a."""
    m = res.median(cfg)
    if m is None:
        return "n/a"
    value = f"{m:.0f}ns" if res.kernel.epcc else f"{m:.3f}s"
    return f"{value} {fmt(res.spread(cfg), '.0%')} {fmt(res.slowdown(cfg), '.2f', 'x')}"


def table(bench: Bench) -> list[str]:
    """The table: a header and one row per kernel, columns separated by ' | '."""
    width = 20
    head = " | ".join([f"{'kernel':<14}", f"{'size':>8}", f"{'events':>9}",
                       *(f"{c:<{width}}" for c in bench.columns)])
    lines = [head, "-" * len(head)]
    for res in bench.results.values():
        lines.append(" | ".join([
            f"{res.kernel.name:<14}", f"{res.size:>8}", f"{fmt(res.events, 'd'):>9}",
            *(f"{cell(res, c):<{width}}" for c in bench.columns),
        ]))
    return lines


def report(bench: Bench) -> None:
    print(f"\n== kernels on {NUM_THREADS} threads, {bench.reps} interleaved repetitions")
    print("   each cell: median, spread ((max - min) / median), slowdown over no tool "
          "(median / median);")
    print("   epcc_* rows: overhead per construct ((kernel - reference) / constructs), "
          "as EPCC's micro-benchmarks")
    print("   columns: " + ", ".join(f"{c} = {label(c)}" for c in bench.columns))
    if bench.versus is not None:
        print(f"   --versus tool: {bench.versus}")
    for line in table(bench):
        print("   " + line)
    for cfg in bench.configs:
        if cfg in bench.disabled:
            print(f"   {cfg}: n/a ({bench.disabled[cfg].splitlines()[0]})")
    for cfg in TRACING_RUNS:
        pairs = [(r.written, r.dropped) for res in bench.results.values()
                 for r in res.runs.get(cfg, [])]
        if not pairs:
            continue
        dropped = [d for _, d in pairs]
        total = "unknown" if any(d is None for d in dropped) else str(sum(d or 0 for d in dropped))
        print(f"   {cfg}: dropped records over all runs: {total}")
    if bench.others:
        use = ", ".join(f"{cfg} {statistics.median(v):.2f}/{max(v):.2f}"
                        for cfg, v in bench.others.items())
        print(f"   CPUs other processes used during the runs (median/max of the runs): {use}")
    for note in dict.fromkeys(bench.notes):
        print(f"   note: {note}")
    print("\n== targets (issue 15), from the medians")
    for status, name, detail in targets(bench):
        print(f"   [{status:<4}] {name}: {detail}")


def targets(bench: Bench) -> list[tuple[str, str, str]]:
    """(status, target, detail) of issue 15's targets, from the medians."""
    apps = [r for r in bench.results.values() if not r.kernel.epcc]
    out = []
    checks = [(cfg, "slowdown no worse than the min recorder's", lambda r: r.slowdown("minrec"),
               "min recorder") for cfg in TRACING_CONFIGS]
    checks.append(("profile", f"slowdown <= {PROFILE_SLOWDOWN_MAX}",
                   lambda r: PROFILE_SLOWDOWN_MAX, "target"))
    for cfg, what, limit, against in checks:
        name = f"{label(cfg)}: {what} on every application kernel"
        pairs = [(r, r.slowdown(cfg), limit(r)) for r in apps]
        if not apps or any(s is None or lim is None for _, s, lim in pairs):
            why = bench.disabled.get(measured_of(cfg), "not measured").splitlines()[0]
            out.append(("n/a", name, why))
            continue
        worse = [f"{r.kernel.name} {s:.2f}x ({against} {lim:.2f}x)" for r, s, lim in pairs
                 if s is not None and lim is not None and s > lim]
        out.append(("FAIL" if worse else "PASS", name, "; ".join(worse) or "all kernels"))
    return out


def json_report(bench: Bench) -> dict[str, Any]:
    return {
        "reps": bench.reps,
        "threads": NUM_THREADS,
        "configs": bench.columns,
        "versus": None if bench.versus is None else str(bench.versus),
        "disabled": bench.disabled,
        "other_cpus": bench.others,
        "kernels": {
            name: {
                "what": res.kernel.what,
                "size": res.size,
                "events": res.events,
                "unit": "ns per construct" if res.kernel.epcc else "s",
                "configs": {
                    cfg: {
                        "values": res.values(cfg),
                        "median": res.median(cfg),
                        "spread": res.spread(cfg),
                        "slowdown": res.slowdown(cfg),
                        "dropped": [r.dropped for r in res.runs_of(cfg)],
                    }
                    for cfg in bench.columns
                },
            }
            for name, res in bench.results.items()
        },
        "notes": list(dict.fromkeys(bench.notes)),
        "targets": [dict(zip(("status", "target", "detail"), t)) for t in targets(bench)],
    }


# ---------------------------------------------------------------- main ---


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (a few ms per kernel), 2 repetitions")
    parser.add_argument("--reps", type=int, help="repetitions (default 5, 2 with --quick)")
    parser.add_argument("--size", action="append", default=[], metavar="KERNEL=N",
                        help="size of one kernel (repeatable); `bench/build/apps --list` "
                             "lists the kernels and their default sizes")
    parser.add_argument("--kernels", nargs="+", metavar="K", help="only these kernels")
    parser.add_argument("--configs", nargs="+", metavar="C", choices=RUN_CONFIGS[1:],
                        help="only these configurations (and none, always): "
                             + ", ".join(RUN_CONFIGS[1:]))
    parser.add_argument("--versus", type=Path, metavar="TOOL.so",
                        help="another build of the tool library (libomptpy.so of another "
                             "commit): its file, reserved and profile runs (file*, reserved*, "
                             "profile*) interleaved with those of ompt-py's own")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write figures here")
    args = parser.parse_args(argv)
    if args.versus is not None and not args.versus.is_file():
        parser.error(f"--versus {args.versus}: no such file; give the path of a built "
                     "libomptpy.so")
    if args.reps is None:
        args.reps = 2 if args.quick else 5
    if args.reps < 1:
        parser.error("--reps must be positive")
    return args


def choose(kernels: list[Kernel], args: argparse.Namespace) -> tuple[list[Kernel], dict[str, int]]:
    """The kernels to run and their sizes; BenchError on a bad --kernels or --size."""
    known = {k.name: k for k in kernels}
    names = args.kernels or list(known)
    sizes = {k.name: k.quick_size if args.quick else k.size for k in kernels}
    for spec in args.size:
        name, _, value = spec.partition("=")
        if name not in known or not value.isdigit():
            raise BenchError(f"--size {spec}: give KERNEL=N with N a whole number, KERNEL one "
                             f"of {', '.join(known)}")
        sizes[name] = int(value)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BenchError(f"--kernels: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in names], sizes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        build(app_steps())
        kernels, sizes = choose(list_kernels(), args)
    except BenchError as exc:
        log(str(exc))
        return 1
    omptpy = discover_ompt_py()
    print_setting(f"ompt-py application benchmark: {len(kernels)} kernels, {args.reps} "
                  f"interleaved repetitions, OMP_NUM_THREADS={NUM_THREADS}", omptpy)
    if not args.quick:
        warm_guest_memory()
    bench = Bench(kernels, sizes, args.reps, omptpy, args.configs,
                  args.versus.resolve() if args.versus else None)
    try:
        bench.preflight()
        bench.measure()
    except BenchError as exc:
        log(str(exc))
        return 1
    report(bench)
    if args.json:
        args.json.write_text(json.dumps(json_report(bench), indent=2) + "\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
