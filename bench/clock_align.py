#!/usr/bin/env python3
"""The error of the alignment of MPI ranks' clocks (docs/mpi.md, issue 17), on this
machine, printed as figures of ``--reps`` runs.

Every rank runs on this machine's one clock, so the truth is known: a test-only
setting of the tool (OMPTPY_TEST_CLOCK_SKEW) gives each rank's clock a known
offset (seconds) and drift (parts per million), and the fit the trace makes
(ompt_py/io/mpi.py) is compared with it.  Each run is ``mpirun -n 4
--oversubscribe ompt-py run --mpi -o DIR -- hybrid MS`` (tests/programs/mpi/
hybrid.c: 4 ranks of 2 OpenMP threads on 2 cores, parallel regions, barriers,
allreduce, bcast, a ring of send/recv, for MS milliseconds between MPI_Init and
MPI_Finalize).  For each rank but rank 0 (the reference) it prints:

* the alignment error: the largest distance between the fitted offset and the
  injected one over the run between the two measurements (a line's error is
  largest at an end: the error at the init and at the finalize measurement),
  in microseconds; target: below 10 us;
* the error bound the trace reports (``error_ns``: half the longest round trip
  it kept), the shortest round trip of each phase, the drift's error (ppm);
* the barriers whose last arrival is not before everyone's exit on the aligned
  times (causality violations: should be 0).

It is a report, not a test: the target is marked PASS or FAIL, the exit code is
0 whatever the figures (1 only when a run fails).

    python bench/clock_align.py [--reps 5] [--ms 1000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path[:0] = [str(REPO_ROOT)]  # this checkout's ompt_py

import ompt_py  # noqa: E402

SOURCE = REPO_ROOT / "tests" / "programs" / "mpi" / "hybrid.c"
RANKS = 4
#: rank -> (offset ns, drift ppm) injected
SKEW = [(0, 0), (2_500_000_000, 150), (-1_700_000_000, -80), (900_000_000, 40)]
TARGET_US = 10.0
ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMP_NUM_THREADS": "2", "KMP_BLOCKTIME": "0", "OMPI_CC": "clang-19",
       "OMPTPY_TEST_CLOCK_SKEW": ",".join(f"{o}:{p}" for o, p in SKEW)}


def build() -> Path:
    out = BENCH_DIR / "build" / "hybrid"
    if not out.exists() or out.stat().st_mtime < SOURCE.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mpicc", "-O2", "-fopenmp", str(SOURCE), "-o", str(out)], check=True,
                       env={**os.environ, "OMPI_CC": "clang-19"})
    return out


def _error_at(clock: dict, offset: float, drift: float, w: float) -> float:
    """The fitted minus the injected offset of a rank's clock at its reading w (ns):
    injected, the clock reads w = t + offset + drift * t at rank 0's time t."""
    true_t = (w - offset) / (1 + drift)
    fitted = clock["offset_ns"] + clock["drift"] * (w - clock["at_ns"])
    return fitted - (offset + drift * true_t)


def one_run(program: Path, ms: int) -> list[dict]:
    """The figures of each rank but the reference, from one run."""
    script = Path(sys.executable).parent / "ompt-py"
    with tempfile.TemporaryDirectory(prefix="clock-align-") as tmp:
        env = {**os.environ, **ENV}
        r = subprocess.run(["mpirun", "-n", str(RANKS), "--oversubscribe", str(script), "run",
                            "-q", "--mpi", "-o", "run1/", "--", str(program), str(ms)],
                           cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
        if r.returncode:
            sys.exit(f"the run failed ({r.returncode}):\n{r.stderr}")
        t = ompt_py.load(Path(tmp) / "run1")
    calls = t.mpi_calls()
    b = calls[calls["call"] == "barrier"].copy()
    b["n"] = b.groupby("rank").cumcount()
    per = b.groupby("n").agg(last=("begin_ns", "max"), exit=("end_ns", "min"))
    violations = int((per["last"] >= per["exit"]).sum())
    rows = []
    for proc in sorted(t.meta["processes"], key=lambda p: p["rank"]):
        clock, (offset, ppm) = proc["clock_alignment"], SKEW[proc["rank"]]
        if not proc["rank"]:
            continue
        drift = ppm * 1e-6
        ends = [_error_at(clock, offset, drift, clock["at_ns"]),
                _error_at(clock, offset, drift, clock["at_ns"] + clock["span_ns"])]
        rows.append({"rank": proc["rank"], "error_us": max(map(abs, ends)) / 1e3,
                     "init_error_us": ends[0] / 1e3, "finalize_error_us": ends[1] / 1e3,
                     "bound_us": clock["error_ns"] / 1e3,
                     "round_trip_us": [r / 1e3 for r in clock["round_trip_ns"]],
                     "drift_error_ppm": (clock["drift"] - drift / (1 + drift)) * 1e6,
                     "span_s": clock["span_ns"] / 1e9, "pairs": clock["pairs"],
                     "residual_us": (clock["residual_ns"] or 0) / 1e3,
                     "barriers": len(per), "violations": violations})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--ms", type=int, default=1000,
                        help="milliseconds between MPI_Init and MPI_Finalize")
    parser.add_argument("--json", help="also write every figure as JSON")
    args = parser.parse_args()
    program = build()
    print(f"{RANKS} ranks x 2 threads on {os.cpu_count()} cores, {args.ms} ms runs, injected "
          "(offset, drift): " + ", ".join(f"rank {r} {o / 1e9:+.1f} s {p:+d} ppm"
                                          for r, (o, p) in enumerate(SKEW) if r))
    print(f"{'run':>3} {'rank':>4} {'error us':>9} {'init':>7} {'final':>7} {'bound us':>9} "
          f"{'rtt us (init/final)':>20} {'drift err ppm':>13} {'residual us':>11} "
          f"{'violations':>10}")
    figures = []
    for rep in range(args.reps):
        for row in one_run(program, args.ms):
            figures.append({"run": rep, **row})
            rtt = "/".join(f"{x:.1f}" for x in row["round_trip_us"])
            print(f"{rep:>3} {row['rank']:>4} {row['error_us']:>9.2f} "
                  f"{row['init_error_us']:>+7.2f} {row['finalize_error_us']:>+7.2f} "
                  f"{row['bound_us']:>9.2f} {rtt:>20} {row['drift_error_ppm']:>+13.2f} "
                  f"{row['residual_us']:>11.2f} {row['violations']:>4}/{row['barriers']}")
    errors = [f["error_us"] for f in figures]
    within = sum(f["error_us"] <= f["bound_us"] for f in figures)
    worst = max(errors)
    print(f"alignment error: median {statistics.median(errors):.2f} us, max {worst:.2f} us "
          f"(target below {TARGET_US:g} us: {'PASS' if worst < TARGET_US else 'FAIL'}); "
          f"within the reported bound: {within}/{len(figures)}; barrier causality violations: "
          f"{sum(f['violations'] for f in figures if f['rank'] == 1)}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
