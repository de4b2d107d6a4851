#!/usr/bin/env python3
"""The file route's designs side by side (issue 15): what writing a trace to a
file costs the program's threads, against recording in memory.

Runs `overhead.py`'s two workloads (10**6 empty regions, 10**6 tasks, 2 threads)
under these configurations, interleaved, R repetitions each:

    a   no tool
    c   min recorder in memory (overhead.py's reference)
    cw  min recorder, write(): a 1024-record buffer written whenever it fills
    cr  min recorder, reserve-and-flush: the whole run's buffer, resident, written at exit
    cm  min recorder, the file mapped MAP_SHARED, resident, written in place
    ct  min recorder, a consumer thread writing chunks while the program runs
    e   ompt-py recording to a file (OMPTPY_OUTPUT), default settings: in place
    eR  the same with OMPTPY_RESERVE sized like the min recorder's buffer
    e0  ompt-py recording to a file with OMPTPY_ZERO_COPY=off (the write() route)

and prints, per configuration, the minimum and median time, the cost per event
over no tool, the ratio to the in-memory min recorder (the 1.25 target of
overhead.py), dropped records, and the time spent writing at exit (which the
timed call does not include: it happens at finalize).  For ompt-py's in-place
configurations (e, eR) it prints the tool's stalls per run (tool_stall records,
docs/stalls.md) and the same figures with their recorded wall time discounted
(rows e~, eR~).  See bench/README.md.

Usage: python bench/file_route.py [--quick] [--reps R] [--n N] [--only CFG ...]
       [--workload regions|tasks]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead

CONFIGS = {
    "a": "no tool",
    "c": "min recorder, memory",
    "cw": "min recorder, write()",
    "cr": "min recorder, reserve-and-flush",
    "cm": "min recorder, file mapped in place",
    "ct": "min recorder, consumer thread",
    "e": "ompt-py to a file, in place, defaults",
    "eR": "ompt-py to a file, in place, OMPTPY_RESERVE of the whole trace",
    "e0": "ompt-py to a file, write() (OMPTPY_ZERO_COPY=off)",
}
OMPT_PY = ("e", "eR", "e0")
IN_PLACE = ("e", "eR")  # may stall (docs/stalls.md)
MINREC_SINKS = {"c": "mem", "cw": "write", "cr": "reserve", "cm": "map", "ct": "consumer"}
FLUSH_RE = re.compile(r"minrec flush_ms=([\d.]+) flushes=(\d+)")


@dataclass
class Figures:
    times: list[float] = field(default_factory=list)
    dropped: int = 0
    flush_ms: list[float] = field(default_factory=list)
    failed: int = 0  # runs that failed (reported as they happen)
    stalls: list[int] = field(default_factory=list)  # the tool's stalls per run
    stall_s: list[float] = field(default_factory=list)  # and the wall time in them


def config_env(wl: str, cfg: str, n: int, outdir: Path, omptpy: overhead.OmptPy
               ) -> dict[str, str]:
    """The driver's environment of one configuration (outdir: a fresh scratch directory)."""
    env = overhead.base_env()
    if cfg in MINREC_SINKS:
        env["OMP_TOOL_LIBRARIES"] = str(overhead.MIN_RECORDER)
        env["MINREC_RECORDS"] = str(9 * n + (1 << 20))
        env["MINREC_SINK"] = MINREC_SINKS[cfg]
        env["MINREC_DIR"] = str(outdir)
    elif cfg in OMPT_PY:
        assert omptpy.tool_path is not None
        env["OMP_TOOL_LIBRARIES"] = omptpy.tool_path
        env["OMPTPY_OUTPUT"] = str(outdir)
        if cfg == "eR":
            env["OMPTPY_RESERVE"] = str(64 * (overhead.RESERVE_RECORDS[wl] * n + (1 << 20)))
        if cfg == "e0":
            env["OMPTPY_ZERO_COPY"] = "off"
    return env


def one_run(wl: str, cfg: str, n: int, omptpy: overhead.OmptPy, fig: Figures) -> None:
    with overhead.scratch_dir() as outdir:
        run = overhead.run_driver(wl, n, config_env(wl, cfg, n, outdir, omptpy))
        if cfg in OMPT_PY:
            load = overhead.load_trace(omptpy, outdir, False)
            fig.dropped += load.dropped or 0
            if cfg in IN_PLACE and load.stalls is not None and load.stall_s is not None:
                fig.stalls.append(load.stalls)
                fig.stall_s.append(load.stall_s)
    fig.times.append(run.seconds)
    fig.dropped += run.minrec_dropped or 0
    m = FLUSH_RE.search(run.stderr)
    if m:
        fig.flush_ms.append(float(m.group(1)))


def events_of(wl: str, n: int, omptpy: overhead.OmptPy) -> int:
    """The workload's events (the min recorder's count at n less that at 0)."""
    counts = []
    for k in (0, n):
        with overhead.scratch_dir() as outdir:
            run = overhead.run_driver(wl, k, config_env(wl, "c", k, outdir, omptpy))
        if run.minrec_events is None:
            raise overhead.BenchError("no 'minrec events=' line on stderr")
        counts.append(run.minrec_events)
    return counts[1] - counts[0]


def report(wl: str, n: int, events: int, figs: dict[str, Figures]) -> None:
    a = min(figs["a"].times)
    c = min(figs["c"].times) if "c" in figs else None
    print(f"\n{wl}: {n} {overhead.WORKLOAD_UNIT[wl]}s, {events} events")
    print("| cfg | configuration | min s | median s | ns/event over a | / (c-a) | dropped "
          "| exit flush ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for cfg, fig in figs.items():
        if not fig.times:
            print(f"| {cfg} | {CONFIGS[cfg]} | failed {fig.failed}x | | | | | |")
            continue
        failed = f" ({fig.failed} failed)" if fig.failed else ""
        report_row(a, c, events, cfg, CONFIGS[cfg] + failed, fig.times, fig)
        if fig.stalls:
            report_row(a, c, events, f"{cfg}~", f"{CONFIGS[cfg]}, the stalls discounted",
                       [t - s for t, s in zip(fig.times, fig.stall_s)], fig)
    for cfg, fig in figs.items():
        if fig.stalls:
            print(f"{cfg}: the tool's stalls per run (the wall time a thread was in one): "
                  + ", ".join(f"{k} ({1e3 * t:.1f} ms)" for k, t in zip(fig.stalls, fig.stall_s)))


def report_row(a: float, c: float | None, events: int, cfg: str, label: str, times: list[float],
               fig: Figures) -> None:
    """A row of the table: ``times``, the runs of ``cfg`` (``fig``: its figures)."""
    lo = min(times)
    per = (lo - a) / events * overhead.NS
    ratio = (lo - a) / (c - a) if c is not None and c > a and cfg != "a" else None
    flush = statistics.median(fig.flush_ms) if fig.flush_ms else None
    print(f"| {cfg} | {label} | {lo:.3f} | {statistics.median(times):.3f} "
          f"| {per:.1f} | {overhead.fmt(ratio)} | {fig.dropped} "
          f"| {overhead.fmt(flush, '.0f')} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 repetitions")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=10**6, help="regions / tasks per workload")
    ap.add_argument("--only", nargs="+", choices=sorted(CONFIGS), help="these configurations")
    ap.add_argument("--workload", choices=overhead.WORKLOADS, help="only this workload")
    args = ap.parse_args(argv)
    reps = 2 if args.quick else args.reps
    overhead.build()
    omptpy = overhead.discover_ompt_py()
    configs = [c for c in CONFIGS if not args.only or c in args.only or c == "a"]
    if not omptpy.available:
        configs = [c for c in configs if c not in OMPT_PY]
    for wl in [args.workload] if args.workload else overhead.WORKLOADS:
        events = events_of(wl, args.n, omptpy)
        figs = {cfg: Figures() for cfg in configs}
        for rep in range(reps):
            for cfg in overhead.interleaved(configs, rep):
                try:
                    one_run(wl, cfg, args.n, omptpy, figs[cfg])
                except overhead.BenchError as exc:  # reported, the others go on
                    overhead.log(f"{wl} {cfg} ({CONFIGS[cfg]}) failed: {exc}")
                    figs[cfg].failed += 1
            overhead.log(f"rep {rep + 1}/{reps} {wl}: "
                         + " ".join(f"{c}={figs[c].times[-1]:.3f}" for c in configs
                                    if figs[c].times))
        report(wl, args.n, events, figs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
