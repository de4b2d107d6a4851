#!/usr/bin/env python3
"""Benchmark of the capture of Python call stacks (ompt_py.trace(python_stacks=...)).

Prints, in one fresh python (the same memory and threads for every figure):

1. The cost of one capture (``_core.time_captures``: the capture hook the tool
   calls inside the OMPT callback, timed in C around n calls) at stack depths
   8 and 32: warm (the same call site again: the walk, a hash and a lookup)
   and cold (the first time at a call site: K call sites, each a new code
   object, resolved and added to the tables).
2. N empty parallel regions started from a Python loop (ctypes calls of
   bench_regions(1) of bench/build/libbenchwork.so, 2 threads), recorded in
   trace windows with Python stacks off, on, and on with 4 native frames
   (native_depth, unwinding), alternated in cycles: the ratio on/off, and
   what the native frames add per region.

Targets (the issue's): warm capture at depth 8 at most 150 ns; the regions at
most 1.3x with capture against without.  The cost when capture is off is the
per-event figures of bench/overhead.py (nothing changes on the hot path but
one load and a branch).  A report, not a test: exits 0 whatever the figures.

Usage: python bench/pystacks.py [--quick] [--regions N] [--cycles C] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from overhead import (
    LIBWORK,
    BenchError,
    Target,
    base_env,
    build,
    discover_ompt_py,
    fmt,
    log,
    marked_json,
    print_setting,
    report_targets,
    run_python,
    tail,
)

WARM_NS_MAX = 150.0  # depth 8, same call site
REGIONS_RATIO_MAX = 1.3
DEPTHS = (8, 32)

SCRIPT = r"""
import ctypes, json, sys, time
import ompt_py
from ompt_py import _core
from ompt_py.live import runhook

lib = ctypes.CDLL(sys.argv[1])
lib.bench_regions.argtypes = [ctypes.c_long]
n_regions, cycles, warm_n, cold_k = map(int, sys.argv[2:6])
out = {"warm": {}, "cold": {}}

def at_depth(depth, fn):
    # fn runs `depth` frames deep (this function's frames and the caller's)
    def down(k):
        return down(k - 1) if k > 1 else fn()
    return down(depth - len(__import__("inspect").stack()) + 1)

for depth in (8, 32):
    runhook.start_python_stacks(_core, depth)
    best = []
    for _ in range(5):
        ns, stack = at_depth(depth, lambda: _core.time_captures(warm_n))
        best.append(ns / warm_n)
    frames = [f for f in json.loads(_core.stack_tables(0, stack - 1))["stacks"][0][1::2]]
    out["warm"][depth] = {"ns": best, "frames": len(frames)}
    # cold: K call sites, each a code object of its own, each captured once
    sites = []
    for k in range(cold_k):
        scope = {"t": _core.time_captures}
        exec(compile(f"def site_{depth}_{k}():\n    return t(1)\n", f"<site {k}>", "exec"), scope)
        sites.append(scope[f"site_{depth}_{k}"])
    total = sum(at_depth(depth - 1, site)[0] for site in sites)
    out["cold"][depth] = {"ns": total / cold_k}

lib.bench_regions(1000)  # threads, runtime and tool start-up

def window(setup):
    stacks, native = {"off": (False, 0), "on": (True, 0), "native": (True, 4)}[setup]
    t = ompt_py.trace(python_stacks=stacks, native_depth=native).start()
    f = lib.bench_regions
    t0 = time.perf_counter_ns()
    for _ in range(n_regions):
        f(1)
    t1 = time.perf_counter_ns()
    t.stop()
    begins = int((t.events["event"] == 3).sum())
    return (t1 - t0) / 1e9, begins

setups = ["off", "on", "native"]
for setup in setups:  # untimed: memory, tables, the unwinder
    window(setup)
out.update({setup: [] for setup in setups})
out["begins"] = []
for cycle in range(cycles):
    order = setups[cycle % 3:] + setups[:cycle % 3]
    for setup in order if cycle % 2 == 0 else order[::-1]:
        seconds, begins = window(setup)
        out[setup].append(seconds)
        out["begins"].append(begins)
print("OMPTPY_PYSTACKS " + json.dumps(out))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer cycles and regions")
    ap.add_argument("--regions", type=int, default=100_000, help="regions per window")
    ap.add_argument("--cycles", type=int, default=5, help="off/on pairs of windows")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    if args.quick:
        args.regions, args.cycles = min(args.regions, 20_000), min(args.cycles, 2)
    try:
        build()
    except BenchError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    omptpy = discover_ompt_py()
    if not omptpy.available:
        print(f"ompt_py not importable: {omptpy.error}", file=sys.stderr)
        return 1
    print_setting("Python stacks: the cost of a capture, and of regions started from Python",
                  omptpy)
    log(f"{args.cycles} cycles of {args.regions:,} regions, stacks off and on")
    proc = run_python(SCRIPT, [str(LIBWORK), str(args.regions), str(args.cycles), "200000",
                               "2000"], base_env(omptpy.pythonpath))
    out = marked_json(proc.stdout, "OMPTPY_PYSTACKS")
    if proc.returncode != 0 or out is None:
        print(f"the benchmark failed:\n{tail(proc.stderr)}", file=sys.stderr)
        return 1

    print("\nOne capture (the hook inside the callback), ns:")
    print(f"  {'depth':>5}  {'frames':>6}  {'warm min':>9}  {'warm median':>11}  {'cold':>9}")
    for depth in DEPTHS:
        warm = out["warm"][str(depth)]
        print(f"  {depth:>5}  {warm['frames']:>6}  {fmt(min(warm['ns']), '.1f'):>9}  "
              f"{fmt(statistics.median(warm['ns']), '.1f'):>11}  "
              f"{fmt(out['cold'][str(depth)]['ns'], '.0f'):>9}")
    off, on = out["off"], out["on"]
    labels = {"off": "stacks off", "on": "stacks on", "native": "on, native_depth 4"}
    print(f"\n{args.regions:,} empty regions from a Python loop ({args.cycles} cycles), "
          f"ns per region:")
    for k, label in labels.items():
        per_region = [s / args.regions * 1e9 for s in out[k]]
        print(f"  {label:>18}: min {fmt(min(per_region), '.0f')}, median "
              f"{fmt(statistics.median(per_region), '.0f')}")
    ratio_min = min(on) / min(off)
    ratio_median = statistics.median(on) / statistics.median(off)
    native_ns = (min(out["native"]) - min(on)) / args.regions * 1e9
    print(f"  on/off: {ratio_min:.3f} (min), {ratio_median:.3f} (median); native frames add "
          f"{native_ns:.0f} ns per region (min); parallel_begin per window: "
          f"{sorted(set(out['begins']))}")
    warm8 = min(out["warm"]["8"]["ns"])
    report_targets([
        Target("warm capture, depth 8", warm8, WARM_NS_MAX, "<=", "ns"),
        Target("regions from Python, stacks on / off", ratio_min, REGIONS_RATIO_MAX, "<=", "x",
               median_value=ratio_median),
    ])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
