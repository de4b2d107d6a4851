#!/usr/bin/env python3
"""Runtime-fallback benchmark: gcc-built OpenMP code on LLVM's libomp.

GCC's libgomp has no OMPT; libomp implements libgomp's ABI (GOMP_*), so a
program built with `gcc -fopenmp` can run on libomp, and be traced there.
This measures what that costs.  It builds bench/fallback_work.c with gcc
(linked to libgomp.so.1) and runs it, on 2 threads, in three configurations:

    A  libgomp (as built)
    B  libomp, untraced: LD_PRELOAD=<libomp.so.5>
    C  libomp traced by ompt-py: as B, plus OMP_TOOL_LIBRARIES=<ompt-py tool>
       and OMPTPY_OUTPUT=<fresh directory>

The program times four parts itself (parallel regions with a small static
loop, a dynamic loop, tasks from a single, reductions) and prints a checksum
of its results, which must be the same in every run.  It is a report: it
exits 0 whatever the figures (1 only when the build or configuration A fails).

Usage: python bench/fallback.py [--quick] [--reps R] [--libomp PATH] [--json FILE]
See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from overhead import (
    BUILD_DIR,
    NS,
    NUM_THREADS,
    TOOL_STARTED,
    WARNINGS,
    BenchError,
    BuildStep,
    OmptPy,
    base_env,
    build,
    discover_ompt_py,
    fmt,
    interleaved,
    libomp_dir,
    log,
    marked_json,
    print_setting,
    run_program,
    run_python,
    scratch_dir,
    tail,
    warm_guest_memory,
)

BENCH_DIR = Path(__file__).resolve().parent
WORK_SRC = BENCH_DIR / "fallback_work.c"
WORK = BUILD_DIR / "fallback_work"
GCC = os.environ.get("BENCH_GCC", "gcc")
DEFAULT_LIBOMP = Path("/usr/lib/llvm-19/lib/libomp.so.5")

CONFIGS = ("A", "B", "C")
CONFIG_LABELS = {
    "A": "libgomp",
    "B": "libomp (LD_PRELOAD)",
    "C": "libomp + ompt-py",
}
PARTS = ("regions", "dynamic", "tasks", "reduce")
PART_DESC = {
    "regions": "parallel regions, each with a 256-iteration static loop",
    "dynamic": "iterations of one schedule(dynamic,16) loop",
    "tasks": "tasks created in a single",
    "reduce": "parallel loops with 3 reductions over 1000 elements",
}
PART_UNIT = {"regions": "region", "dynamic": "iteration", "tasks": "task", "reduce": "loop"}
TOP_KINDS = 8  # event kinds listed per part

LOAD_SCRIPT = r"""
import json, sys
import numpy as np
import ompt_py

spans = json.loads(sys.argv[2])
out = {}
trace = ompt_py.load(sys.argv[1])
meta = trace.meta
for key in ("dropped", "written"):
    value = meta.get(key)
    out[key] = int(value) if value is not None else None
out["events"] = len(trace.events)
df = trace.to_pandas()
when = df["time_ns"].to_numpy(np.int64) + int(meta["origin_mono_ns"])
name = df["event"].astype(str)
kind = df["kind"].astype("string")
name = name.where(kind.isna(), name + "/" + kind.fillna(""))
parts = {}
for part, (start, end) in spans.items():
    inside = (when >= start) & (when < end)
    counts = name[inside].value_counts()
    parts[part] = {
        "events": int(inside.sum()),
        "kinds": {str(k): int(v) for k, v in counts.items()},
    }
out["parts"] = parts
print("OMPTPY_LOAD " + json.dumps(out))
"""


# ---------------------------------------------------------------- build ---


def build_step() -> BuildStep:
    return BuildStep(
        WORK,
        (WORK_SRC,),
        (GCC, "-O2", "-fopenmp", *WARNINGS, str(WORK_SRC), "-o", str(WORK)),
    )


def default_libomp() -> Path:
    """The libomp to preload: LLVM 19's, else the one clang-19 links against."""
    if DEFAULT_LIBOMP.exists():
        return DEFAULT_LIBOMP
    found = libomp_dir("clang-19")
    return found / "libomp.so.5" if found else DEFAULT_LIBOMP


# ---------------------------------------------------------------- runs ---


@dataclass
class Output:
    """What one run of fallback_work printed."""

    runtime: str = "unknown"  # file defining GOMP_parallel
    mapped: list[str] = field(default_factory=list)
    threads: int | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)
    checksum: str | None = None
    stderr: str = ""


def parse_output(stdout: str, stderr: str) -> Output:
    out = Output(stderr=stderr)
    for line in stdout.splitlines():
        words = line.split()
        if not words:
            continue
        key, rest = words[0], words[1:]
        if key == "runtime" and rest:
            out.runtime = " ".join(rest)
        elif key == "mapped":
            out.mapped = rest
        elif key == "threads" and rest:
            out.threads = int(rest[0])
        elif key == "span" and len(rest) == 4:
            out.counts[rest[0]] = int(rest[1])
            out.spans[rest[0]] = (int(rest[2]), int(rest[3]))
        elif key == "check" and len(rest) == 2:
            out.checks[rest[0]] = rest[1]
        elif key == "checksum" and rest:
            out.checksum = rest[0]
        elif key in PARTS and len(rest) == 1:
            out.seconds[key] = float(rest[0])
    return out


def config_env(
    cfg: str, libomp: Path, omptpy: OmptPy, outdir: Path | None, verbose_init: bool = False
) -> dict[str, str]:
    env = base_env()
    env.pop("LD_PRELOAD", None)
    if cfg in ("B", "C"):
        env["LD_PRELOAD"] = str(libomp)
    if cfg == "C":
        assert omptpy.tool_path is not None and outdir is not None
        env["OMP_TOOL_LIBRARIES"] = omptpy.tool_path
        env["OMPTPY_OUTPUT"] = str(outdir)
    if verbose_init:
        env["OMP_TOOL_VERBOSE_INIT"] = "stderr"
    return env


@dataclass
class TraceCount:
    events: int | None = None
    written: int | None = None
    dropped: int | None = None
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None


def load_trace(omptpy: OmptPy, outdir: Path, spans: dict[str, tuple[int, int]]) -> TraceCount:
    """Events, written and dropped records of a C run, and the events of each part."""
    if not (outdir.is_dir() and any(outdir.iterdir())):
        return TraceCount(error=f"no trace file in {outdir}: the tool did not record")
    args = [str(outdir), json.dumps(spans)]
    try:
        proc = run_python(LOAD_SCRIPT, args, base_env(omptpy.pythonpath))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return TraceCount(error=f"{type(exc).__name__}: {exc}")
    data = marked_json(proc.stdout, "OMPTPY_LOAD")
    if proc.returncode != 0 or data is None:
        return TraceCount(error=tail(proc.stderr, 3) or f"exit code {proc.returncode}")
    return TraceCount(
        events=data.get("events"),
        written=data.get("written"),
        dropped=data.get("dropped"),
        parts=data.get("parts", {}),
    )


def same_file(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class Bench:
    def __init__(self, reps: int, libomp: Path, omptpy: OmptPy) -> None:
        self.reps = reps
        self.libomp = libomp
        self.omptpy = omptpy
        self.disabled: dict[str, str] = {}
        if not omptpy.available:
            self.disabled["C"] = f"ompt_py not importable: {omptpy.error}"
        self.runtimes: dict[str, Output] = {}  # preflight output per config
        self.times: dict[str, dict[str, list[float]]] = {c: {p: [] for p in PARTS} for c in CONFIGS}
        self.counts: dict[str, int] = {}
        self.checks: list[tuple[str, int, dict[str, str], str | None]] = []
        self.traces: list[TraceCount] = []
        self.notes: list[str] = []

    def active_configs(self) -> list[str]:
        return [c for c in CONFIGS if c not in self.disabled]

    def disable(self, cfg: str, why: str) -> None:
        if cfg == "A":
            raise BenchError(f"configuration A ({CONFIG_LABELS['A']}) failed: {why}")
        self.disabled[cfg] = why
        log(f"configuration {cfg} ({CONFIG_LABELS[cfg]}) disabled: {why}")

    def run(
        self, cfg: str, full: bool, *, verbose_init: bool = False
    ) -> tuple[Output, TraceCount | None]:
        args = [str(WORK)] if full else [str(WORK), "0"]
        what = f"{WORK.name} ({cfg})"
        if cfg != "C":
            env = config_env(cfg, self.libomp, self.omptpy, None, verbose_init)
            proc = run_program(args, env, what)
            return parse_output(proc.stdout, proc.stderr), None
        with scratch_dir() as outdir:
            env = config_env(cfg, self.libomp, self.omptpy, outdir, verbose_init)
            proc = run_program(args, env, what)
            out = parse_output(proc.stdout, proc.stderr)
            trace = load_trace(self.omptpy, outdir, out.spans) if full else None
        return out, trace

    def runtime_problem(self, cfg: str, out: Output) -> str | None:
        if cfg == "A":
            if not Path(out.runtime).name.startswith("libgomp"):
                return f"GOMP_parallel resolves to {out.runtime}, not to libgomp"
            return None
        if not same_file(out.runtime, self.libomp):
            return f"GOMP_parallel resolves to {out.runtime}, not to {self.libomp}"
        started = TOOL_STARTED in out.stderr
        log_tail = "(OMP_TOOL_VERBOSE_INIT log on stderr)\n" + tail(out.stderr)
        if cfg == "B" and started:
            return "a tool attached " + log_tail
        if cfg == "C" and not started:
            return "the tool did not attach " + log_tail
        return None

    def preflight(self) -> None:
        """Warm-up-only runs: which runtime serves GOMP_*, whether a tool attached."""
        for cfg in self.active_configs():
            try:
                out, _ = self.run(cfg, full=False, verbose_init=True)
            except BenchError as exc:
                self.disable(cfg, str(exc))
                continue
            self.runtimes[cfg] = out
            problem = self.runtime_problem(cfg, out)
            if problem:
                self.disable(cfg, problem)
            elif out.threads != NUM_THREADS:
                self.notes.append(f"{cfg}: the program ran on {out.threads} threads")

    def measure(self) -> None:
        for rep in range(self.reps):
            timings = []
            for cfg in interleaved(self.active_configs(), rep):
                try:
                    out = self.one_run(cfg, rep)
                except BenchError as exc:
                    self.disable(cfg, str(exc))
                    continue
                timings.append(f"{cfg}=" + "/".join(f"{out.seconds[p]:.3f}" for p in PARTS))
            log(f"rep {rep + 1}/{self.reps} ({'/'.join(PARTS)} s): " + " ".join(timings))

    def one_run(self, cfg: str, rep: int) -> Output:
        out, trace = self.run(cfg, full=True)
        missing = [p for p in PARTS if p not in out.seconds]
        if missing or out.checksum is None:
            raise BenchError(
                f"{WORK.name} ({cfg}): no time or checksum for {missing or 'checksum'}\n"
                + tail(out.stderr)
            )
        for part in PARTS:
            self.times[cfg][part].append(out.seconds[part])
        self.counts = out.counts
        self.checks.append((cfg, rep, out.checks, out.checksum))
        ref = self.checks[0]
        if out.checksum != ref[3]:
            log(
                f"CHECKSUM MISMATCH: {cfg} rep {rep + 1} printed {out.checksum}, "
                f"{ref[0]} rep {ref[1] + 1} printed {ref[3]}"
            )
        if trace is not None:
            self.traces.append(trace)
            if trace.error:
                self.notes.append(f"C rep {rep + 1}: trace: {trace.error}")
            if trace.dropped:
                log(f"WARNING: C rep {rep + 1}: ompt-py dropped {trace.dropped} records")
        return out

    # ------------------------------------------------------------ figures

    def best(self, cfg: str, part: str, stat: str = "min") -> float | None:
        samples = self.times[cfg][part]
        if not samples:
            return None
        return min(samples) if stat == "min" else statistics.median(samples)

    def total(self, cfg: str, stat: str = "min") -> float | None:
        values = [self.best(cfg, p, stat) for p in PARTS]
        return None if any(v is None for v in values) else sum(v for v in values if v)

    def time(self, cfg: str, part: str, stat: str = "min") -> float | None:
        return self.total(cfg, stat) if part == "total" else self.best(cfg, part, stat)

    def ratio(self, num: str, den: str, part: str, stat: str = "min") -> float | None:
        a, b = self.time(num, part, stat), self.time(den, part, stat)
        return a / b if a is not None and b else None

    def mismatches(self) -> list[str]:
        """Runs whose checksums differ from the first run's."""
        if not self.checks:
            return []
        ref_cfg, ref_rep, ref_checks, ref_sum = self.checks[0]
        found = []
        for cfg, rep, checks, checksum in self.checks[1:]:
            parts = [p for p in PARTS if checks.get(p) != ref_checks.get(p)]
            if parts or checksum != ref_sum:
                found.append(
                    f"{cfg} rep {rep + 1}: checksum {checksum} against {ref_sum} "
                    f"({ref_cfg} rep {ref_rep + 1}); parts differing: {', '.join(parts) or '-'}"
                )
        return found

    def part_events(self, part: str) -> int | None:
        """Events of a part in the first traced run."""
        first = next((t for t in self.traces if t.parts), None)
        return first.parts.get(part, {}).get("events") if first else None


# -------------------------------------------------------------- report ---


def time_cell(bench: Bench, cfg: str, part: str) -> str:
    t, m = bench.time(cfg, part), bench.time(cfg, part, "median")
    return f"{fmt(t, '.4f')} ({fmt(m, '.4f')})"


def ratio_cell(bench: Bench, num: str, den: str, part: str) -> str:
    r, m = bench.ratio(num, den, part), bench.ratio(num, den, part, "median")
    return f"{fmt(r)} ({fmt(m)})"


def report_runtimes(bench: Bench) -> None:
    print("\n== runtimes (warm-up-only run of each configuration)")
    for cfg in CONFIGS:
        label = f"{cfg}  {CONFIG_LABELS[cfg]}"
        out = bench.runtimes.get(cfg)
        if out is None:
            print(f"   {label:<24} - ({bench.disabled.get(cfg, 'not run').splitlines()[0]})")
            continue
        line = f"   {label:<24} GOMP_parallel in {out.runtime}; mapped: {' '.join(out.mapped)}"
        if cfg in bench.disabled:
            line += f" [disabled: {bench.disabled[cfg].splitlines()[0]}]"
        print(line)


def report_times(bench: Bench) -> None:
    print(
        f"\n== times [s], min of {bench.reps} runs (median), {NUM_THREADS} threads; "
        "B/A = fallback cost untraced, C/B = tracing cost"
    )
    head = f"   {'part':<8}" + "".join(f" {c + ' ' + CONFIG_LABELS[c]:>20}" for c in CONFIGS)
    print(head + f" {'B/A':>13} {'C/B':>13} {'C/A':>13}")
    for part in (*PARTS, "total"):
        cells = "".join(f" {time_cell(bench, c, part):>20}" for c in CONFIGS)
        ratios = "".join(
            f" {ratio_cell(bench, n, d, part):>13}" for n, d in (("B", "A"), ("C", "B"), ("C", "A"))
        )
        print(f"   {part:<8}{cells}{ratios}")


def report_parts(bench: Bench) -> None:
    print("\n== per part: cost per unit (from minimum times) and ompt-py events (first C run)")
    for part in PARTS:
        n, unit = bench.counts.get(part), PART_UNIT[part]
        print(f"   {part}: {fmt(n, 'd')} {PART_DESC[part]}")
        if not n:
            continue

        def per_unit(num: str, den: str, p: str = part, count: int = n) -> float | None:
            a, b = bench.time(num, p), bench.time(den, p)
            return (a - b) / count * NS if a is not None and b is not None else None

        a = bench.time("A", part)
        line = f"      A {fmt(a / n * NS if a is not None else None, '.1f')} ns/{unit}"
        line += f"; B-A {fmt(per_unit('B', 'A'), '+.1f')} ns/{unit}"
        line += f"; C-B {fmt(per_unit('C', 'B'), '+.1f')} ns/{unit}"
        events = bench.part_events(part)
        if events is not None:
            line += f"; events {events} ({events / n:.3g}/{unit})"
            extra = per_unit("C", "B")
            if events and extra is not None:
                line += f", C-B {extra * n / events:.1f} ns/event"
        print(line)
        first = next((t for t in bench.traces if t.parts), None)
        if first is not None:
            kinds = first.parts.get(part, {}).get("kinds", {})
            shown = list(kinds.items())[:TOP_KINDS]
            more = len(kinds) - len(shown)
            text = ", ".join(f"{k} {v}" for k, v in shown) or "no events"
            print(f"      {text}" + (f", ... ({more} more kinds)" if more > 0 else ""))


def report_trace(bench: Bench) -> None:
    print("\n== ompt-py traces (C runs)")
    if not bench.traces:
        print(f"   none ({bench.disabled.get('C', 'no C run')})")
        return
    first = next((t for t in bench.traces if t.parts), None)
    in_parts = sum(p.get("events", 0) for p in first.parts.values()) if first else None
    print(
        f"   events per run: {', '.join(fmt(t.events, 'd') for t in bench.traces)}; "
        f"in the timed parts (first loaded run): {fmt(in_parts, 'd')}, the rest is the "
        "warm-up and the late ends of workers"
    )
    dropped = [t.dropped for t in bench.traces]
    written = [t.written for t in bench.traces]
    print(
        "   written/dropped per run: "
        + ", ".join(f"{fmt(w, 'd')}/{fmt(d, 'd')}" for w, d in zip(written, dropped))
    )
    if any(d for d in dropped):
        print(f"   WARNING: {sum(d for d in dropped if d)} records dropped")


def report_checks(bench: Bench) -> None:
    print("\n== results")
    bad = bench.mismatches()
    if not bench.checks:
        print("   no run finished")
    elif bad:
        print(f"   !!! CHECKSUM MISMATCH in {len(bad)} of {len(bench.checks)} runs !!!")
        for line in bad:
            print(f"   MISMATCH {line}")
    else:
        ref = bench.checks[0]
        print(
            f"   checksum {ref[3]} identical in all {len(bench.checks)} runs "
            f"({', '.join(f'{c} x{sum(1 for x in bench.checks if x[0] == c)}' for c in CONFIGS)})"
        )


def json_report(bench: Bench, busy: float | None) -> dict[str, Any]:
    return {
        "reps": bench.reps,
        "threads": NUM_THREADS,
        "libomp": str(bench.libomp),
        "ompt_py_tool": bench.omptpy.tool_path,
        "cpu_busy_before": busy,
        "counts": bench.counts,
        "runtimes": {
            c: {"GOMP_parallel": o.runtime, "mapped": o.mapped} for c, o in bench.runtimes.items()
        },
        "disabled": bench.disabled,
        "configs": {
            cfg: {
                "label": CONFIG_LABELS[cfg],
                "parts": {
                    part: {
                        "times_s": bench.times[cfg][part],
                        "min_s": bench.best(cfg, part),
                        "median_s": bench.best(cfg, part, "median"),
                    }
                    for part in PARTS
                },
                "total_min_s": bench.total(cfg),
            }
            for cfg in CONFIGS
        },
        "ratios": {
            part: {
                f"{n}/{d}": {
                    "min": bench.ratio(n, d, part),
                    "median": bench.ratio(n, d, part, "median"),
                }
                for n, d in (("B", "A"), ("C", "B"), ("C", "A"))
            }
            for part in (*PARTS, "total")
        },
        "traces": [asdict(t) for t in bench.traces],
        "checksums": [
            {"config": c, "rep": r + 1, "checksum": s, "parts": checks}
            for c, r, checks, s in bench.checks
        ],
        "mismatches": bench.mismatches(),
        "notes": bench.notes,
    }


# ---------------------------------------------------------------- main ---


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 repetitions instead of 5")
    parser.add_argument("--reps", type=int, help="repetitions per configuration")
    parser.add_argument(
        "--libomp",
        type=Path,
        default=default_libomp(),
        help=f"libomp to preload in B and C (default {DEFAULT_LIBOMP})",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write figures here")
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 2 if args.quick else 5
    if args.reps < 1:
        parser.error("--reps must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        build([build_step()])
    except BenchError as exc:
        log(str(exc))
        return 1
    omptpy = discover_ompt_py()
    busy = print_setting(
        f"runtime-fallback benchmark: {WORK.name} built by {GCC}, min of {args.reps} runs, "
        f"OMP_NUM_THREADS={NUM_THREADS}, libomp {args.libomp}",
        omptpy,
    )

    warm_guest_memory(1.0)
    bench = Bench(args.reps, args.libomp, omptpy)
    try:
        bench.preflight()
        bench.measure()
    except BenchError as exc:
        log(str(exc))
        return 1

    report_runtimes(bench)
    report_times(bench)
    report_parts(bench)
    report_trace(bench)
    report_checks(bench)
    for note in dict.fromkeys(bench.notes):
        print(f"   note: {note}")
    if args.json:
        args.json.write_text(json.dumps(json_report(bench, busy), indent=2) + "\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
