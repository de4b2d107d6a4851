#!/usr/bin/env python3
"""Benchmark of scripting callbacks: Python handlers, C filters, native handlers.

Runs bench_tasks(N) of bench/build/libbenchwork.so (N trivial tasks on 2
threads, 3 events each) in a fresh python per run, under these
configurations (all with ompt_py imported and the tool attached):

    idle       nothing records
    record     a trace window around the call (recording alone)
    filtered   a Python handler of every event whose C filter (a thread that
               does not exist) rejects them all: written, drained, dropped in C
    kinds      a Python handler of parallel_begin only: the task events are not
               even registered
    native     a trivial native handler (one per-thread counter) of every event
    native+rec the same native handler and a trace window
    python     a Python handler of every event counting them (block=True, so
               none is dropped): delivery rate, from the call until the last
               event was handled

then, for the targets' comparisons, idle, record, filtered and native+rec
again in cycles within one process (the same memory and threads for all),
and prints the figures of the targets: Python handlers receive at least
5 M events/s, filtered-out events cost no more than recording them, a
native handler adds at most 10 ns per event over its own work (native+rec
against record).  A report, not a test: exits 0 whatever the figures.

Usage: python bench/handlers.py [--quick] [--reps R] [--n N] [--json FILE]
See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overhead import (
    LIBWORK,
    NS,
    NUM_THREADS,
    BenchError,
    OmptPy,
    Target,
    base_env,
    build,
    discover_ompt_py,
    fmt,
    fmt_rate,
    interleaved,
    log,
    marked_json,
    print_setting,
    report_targets,
    run_python,
    tail,
    warm_guest_memory,
)

CONFIGS = ("idle", "record", "filtered", "kinds", "native", "native+rec", "python")
LABELS = {
    "idle": "nothing records",
    "record": "trace window",
    "filtered": "handler, C filter rejects all",
    "kinds": "handler of parallel_begin only",
    "native": "trivial native handler",
    "native+rec": "native handler + trace",
    "python": "Python handler, all events",
}
RECORD_BYTES = 64
PYTHON_RATE_MIN = 5e6  # events/s delivered to Python handlers
NATIVE_NS_MAX = 10.0  # ns per event a trivial native handler adds to recording
FILTERED_RATIO_MAX = 1.0  # filtered-out events against recorded ones

BENCH_SCRIPT = r"""
import ctypes, json, sys, time
import ompt_py

lib = ctypes.CDLL(sys.argv[1])
lib.bench_tasks.argtypes = lib.bench_regions.argtypes = [ctypes.c_long]
n, mode = int(sys.argv[2]), sys.argv[3]
out = {"mode": mode}
COUNTER = '''
void handle(const omptpy_record *r, struct counts *c) { c->n[r->thread & 255][0]++; }
'''
STATE = "struct counts { uint64_t n[256][16]; }"  # per thread: 128 bytes, its own lines
native = trace = None
received = [0]

def count(ev):
    received[0] += len(ev)

if mode == "filtered":
    ompt_py.on(None, count, threads=[4000])
elif mode == "kinds":
    ompt_py.on("parallel_begin", count)
elif mode == "python":
    ompt_py.on(None, count, block=True)
if mode in ("native", "native+rec"):
    native = ompt_py.native_handler(None, COUNTER, state=STATE)
if mode in ("record", "native+rec"):
    trace = ompt_py.trace()
    trace.start()
lib.bench_regions(1000)      # warm-up: threads, runtime and tool start-up
lib.bench_tasks(1000)
if mode in ("filtered", "kinds", "python"):
    ompt_py.drain_handlers(timeout=60)
before = received[0]
t0 = time.monotonic_ns()
lib.bench_tasks(n)
t1 = time.monotonic_ns()
if mode in ("filtered", "kinds", "python"):
    out["drained"] = ompt_py.drain_handlers(timeout=600)
t2 = time.monotonic_ns()
out["elapsed_s"], out["delivery_s"] = (t1 - t0) / 1e9, (t2 - t0) / 1e9
out["received"] = received[0] - before
if trace is not None:
    trace.stop()
    when = trace.events["time_ns"] + trace.meta["origin_mono_ns"]
    out["events"] = int(((when >= t0) & (when <= t1)).sum())  # those of the timed call
    out["dropped"] = trace.meta["dropped"]
out["stats"] = ompt_py.handler_stats()
print("OMPTPY_HBENCH " + json.dumps(out))
"""


# The comparisons of the targets, in one process: the same memory and threads
# for every setup (separate processes differed by more than a handler costs).
# Cycles of idle, record, filtered and native+rec around bench_tasks(n), each
# cycle in another order; the times of each setup.
SAME_PROCESS_SETUPS = ("idle", "record", "filtered", "native+rec")
SAME_PROCESS_SCRIPT = r"""
import ctypes, json, sys, time
import ompt_py

lib = ctypes.CDLL(sys.argv[1])
lib.bench_tasks.argtypes = lib.bench_regions.argtypes = [ctypes.c_long]
n, cycles = int(sys.argv[2]), int(sys.argv[3])
setups = sys.argv[4].split(",")
SOURCE = "void handle(const omptpy_record *r, struct counts *c) { c->n[r->thread & 255][0]++; }"
STATE = "struct counts { uint64_t n[256][16]; }"

def run(setup):
    native = handler = trace = None
    if setup == "native+rec":
        native = ompt_py.native_handler(None, SOURCE, state=STATE)
    if setup == "filtered":
        handler = ompt_py.on(None, lambda ev: None, threads=[4000])
    if setup in ("record", "native+rec"):
        trace = ompt_py.trace().start()   # populates OMPTPY_RESERVE before the clock starts
    lib.bench_tasks(1000)
    t0 = time.monotonic_ns()
    lib.bench_tasks(n)
    t1 = time.monotonic_ns()
    events = None
    if trace is not None:
        trace.stop()
        when = trace.events["time_ns"] + trace.meta["origin_mono_ns"]
        events = int(((when >= t0) & (when <= t1)).sum())
    if native is not None:
        native.remove()
    if handler is not None:
        ompt_py.drain_handlers()
        handler.remove()
    return (t1 - t0) / 1e9, events

lib.bench_regions(1000)
for setup in setups:                  # untimed: threads, memory, the handler's build
    run(setup)
out = {s: [] for s in setups}
out["events"] = []
for cycle in range(cycles):
    order = setups[cycle % len(setups):] + setups[:cycle % len(setups)]
    for setup in order if cycle % 2 == 0 else order[::-1]:
        seconds, events = run(setup)
        out[setup].append(seconds)
        if events is not None:
            out["events"].append(events)
print("OMPTPY_HSAME " + json.dumps(out))
"""


@dataclass
class SameProcess:
    """Times of the setups run in cycles within one process, and the events per call."""

    times: dict[str, list[float]]
    events: int | None

    def best(self, setup: str) -> float | None:
        return min(self.times[setup]) if self.times.get(setup) else None

    def median(self, setup: str) -> float | None:
        return statistics.median(self.times[setup]) if self.times.get(setup) else None

    def pick(self, setup: str, stat: str) -> float | None:
        return self.best(setup) if stat == "min" else self.median(setup)

    def native_ns(self, stat: str = "min") -> float | None:
        a, b = self.pick("native+rec", stat), self.pick("record", stat)
        return (a - b) / self.events * NS if None not in (a, b) and self.events else None

    def filtered_ratio(self, stat: str = "min") -> float | None:
        idle, rec, filt = (self.pick(s, stat) for s in ("idle", "record", "filtered"))
        if None in (idle, rec, filt) or rec <= idle:
            return None
        return (filt - idle) / (rec - idle)


def run_same_process(omptpy: OmptPy, n: int, cycles: int) -> SameProcess:
    env = base_env(omptpy.pythonpath)
    env["OMPTPY_RESERVE"] = str(RECORD_BYTES * (3 * n + (1 << 16)))
    args = [str(LIBWORK), str(n), str(cycles), ",".join(SAME_PROCESS_SETUPS)]
    try:
        proc = run_python(SAME_PROCESS_SCRIPT, args, env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"same process: {type(exc).__name__}: {exc}") from exc
    data = marked_json(proc.stdout, "OMPTPY_HSAME")
    if proc.returncode != 0 or data is None:
        raise BenchError(f"same process: exit code {proc.returncode}\n{tail(proc.stderr)}")
    events = min(data.pop("events")) if data.get("events") else None
    return SameProcess(data, events)


@dataclass
class Config:
    times: list[float] = field(default_factory=list)
    delivery: list[float] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def best(self) -> float | None:
        return min(self.times) if self.times else None

    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None


def run_once(omptpy: OmptPy, n: int, mode: str) -> dict[str, Any]:
    env = base_env(omptpy.pythonpath)
    # Trace memory made resident when the window starts, before the clock: the
    # comparisons are about handlers, not about fresh pages (bench/README.md).
    env["OMPTPY_RESERVE"] = str(RECORD_BYTES * (3 * n + (1 << 16)))
    try:
        proc = run_python(BENCH_SCRIPT, [str(LIBWORK), str(n), mode], env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"{mode}: {type(exc).__name__}: {exc}") from exc
    data = marked_json(proc.stdout, "OMPTPY_HBENCH")
    if proc.returncode != 0 or data is None:
        raise BenchError(f"{mode}: exit code {proc.returncode}\n{tail(proc.stderr)}")
    return data


def measure(omptpy: OmptPy, n: int, reps: int,
            configs: tuple[str, ...] = CONFIGS) -> tuple[dict[str, Config], int | None]:
    results = {c: Config() for c in CONFIGS}
    events = None
    log("compiling the native handler (cached) ...")
    run_once(omptpy, 0, "native")
    for rep in range(reps):
        for mode in interleaved(list(configs), rep):
            data = run_once(omptpy, n, mode)
            res = results[mode]
            res.times.append(data["elapsed_s"])
            res.delivery.append(data["delivery_s"])
            res.received.append(data["received"])
            if mode == "record" and events is None:
                events = data["events"]
            if data.get("dropped"):
                res.notes.append(f"trace dropped {data['dropped']} records")
            if mode == "python" and data["stats"]["dropped"]:
                res.notes.append(f"handlers' queue dropped {data['stats']['dropped']}")
        log(f"rep {rep + 1}/{reps}: " + " ".join(
            f"{m}={results[m].times[-1]:.3f}" for m in configs))
    return results, events


def per_event_ns(results: dict[str, Config], cfg: str, base: str, events: int | None,
                 stat: str = "min") -> float | None:
    pick = (lambda c: c.best()) if stat == "min" else (lambda c: c.median())
    a, b = pick(results[cfg]), pick(results[base])
    return (a - b) / events * NS if a is not None and b is not None and events else None


def python_rate(results: dict[str, Config]) -> float | None:
    py = results["python"]
    rates = [r / d for r, d in zip(py.received, py.delivery) if d > 0]
    return max(rates) if rates else None


def report(results: dict[str, Config], events: int | None, n: int, reps: int,
           same: SameProcess) -> list[Target]:
    print(f"\n== bench_tasks({n}), {NUM_THREADS} threads, min of {reps} runs; "
          f"{events if events is not None else 'n/a'} events per call (trace count)")
    print(f"   {'config':<40} {'min [s]':>9} {'median':>9} {'+ns/event':>10}   runs [s]")
    for cfg in CONFIGS:
        res = results[cfg]
        extra = per_event_ns(results, cfg, "idle", events) if cfg != "idle" else None
        runs = " ".join(f"{t:.3f}" for t in res.times)
        label = f"{cfg:<10} {LABELS[cfg]}"
        print(f"   {label:<40} {fmt(res.best(), '.4f'):>9} {fmt(res.median(), '.4f'):>9} "
              f"{'-' if cfg == 'idle' else fmt(extra, '.2f'):>10}   {runs}")
        for note in dict.fromkeys(res.notes):
            print(f"      note: {note}")
    print(f"\n== in one process, {len(same.times['idle'])} cycles ({same.events} events per call)")
    print(f"   {'setup':<12} {'min [s]':>9} {'median':>9} {'+ns/event':>10}   runs [s]")
    for setup in SAME_PROCESS_SETUPS:
        extra = (same.best(setup) - same.best("idle")) / same.events * NS if same.events else None
        print(f"   {setup:<12} {fmt(same.best(setup), '.4f'):>9} "
              f"{fmt(same.median(setup), '.4f'):>9} "
              f"{'-' if setup == 'idle' else fmt(extra, '.2f'):>10}   "
              + " ".join(f"{t:.3f}" for t in same.times[setup]))
    py = results["python"]
    if py.delivery:
        best = min(range(len(py.delivery)), key=lambda i: py.delivery[i])
        print(f"   python: {py.received[best]} events handled {py.delivery[best]:.3f} s after the "
              f"call started (the call itself: {py.times[best]:.3f} s), "
              f"{fmt_rate(python_rate(results))} at best")
    return [
        Target("Python handlers: events delivered per second (block=True, all events)",
               python_rate(results), PYTHON_RATE_MIN, ">=", "records/s"),
        Target("filtered in C against recording, one process: (filtered-idle)/(record-idle)",
               same.filtered_ratio(), FILTERED_RATIO_MAX, "<=", "x",
               same.filtered_ratio("median")),
        Target("trivial native handler over recording, one process: "
               "(native+rec - record)/events",
               same.native_ns(), NATIVE_NS_MAX, "<=", "ns/event", same.native_ns("median")),
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 repetitions instead of 5")
    parser.add_argument("--reps", type=int, help="repetitions per configuration")
    parser.add_argument("--n", type=int, default=10**6, help="tasks per call (default 10**6)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write figures here")
    parser.add_argument("--only", nargs="+", choices=CONFIGS, metavar="CONFIG",
                        help=f"run only these configurations ({', '.join(CONFIGS)})")
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 2 if args.quick else 5
    if args.reps < 1 or args.n < 1:
        parser.error("--reps and --n must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        build()
    except BenchError as exc:
        log(str(exc))
        return 1
    omptpy = discover_ompt_py()
    print_setting(f"ompt-py scripting-callback benchmark: bench_tasks({args.n}), min of "
                  f"{args.reps} runs, OMP_NUM_THREADS={NUM_THREADS}", omptpy)
    if not omptpy.available:
        return 1
    warm_guest_memory()
    try:
        results, events = measure(omptpy, args.n, args.reps, tuple(args.only or CONFIGS))
        log("the targets' comparisons, in one process ...")
        same = run_same_process(omptpy, args.n, 2 * args.reps)
    except BenchError as exc:
        log(str(exc))
        return 1
    tlist = report(results, events, args.n, args.reps, same)
    report_targets(tlist)
    if args.json:
        args.json.write_text(json.dumps({
            "n": args.n, "reps": args.reps, "events": events,
            "configs": {c: {"times_s": r.times, "delivery_s": r.delivery,
                            "received": r.received, "notes": r.notes}
                        for c, r in results.items()},
            "same_process": {"times_s": same.times, "events": same.events},
            "targets": [{"name": t.name, "value": t.value, "limit": t.limit, "op": t.op,
                         "unit": t.unit, "status": t.status} for t in tlist],
        }, indent=2) + "\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
