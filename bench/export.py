"""Speed and memory of the exports (issue 5), printed as figures of one run.

A trace of about 10^7 events (empty parallel regions of 2 threads, made as
bench/analysis.py makes its table trace) is written as Perfetto JSON, CSV, one
Parquet file and a Parquet dataset; target: 10^6 events/s or more for each.
Each format runs in a fresh process that loads the trace and then exports it,
so the peak memory (ru_maxrss) printed is that format's own: after the load
(the trace itself) and at the end (what the export added shows as growth);
a child's ru_maxrss starts from its parent's, this script's (about 0.2 GiB).
The export runs twice: the Perfetto export makes the paired tables (frame,
pairing) the first time and finds most of them cached by the trace the
second time, which is the figure for a trace that was already analysed.
Each output is deleted once measured.

    python bench/export.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analysis import tool_env
from overhead import DRIVER, BenchError, build, build_steps, run_program

RATE_MIN = 1e6
OUTPUTS = {"perfetto": "trace.json", "csv": "trace.csv", "parquet": "trace.parquet",
           "dataset": "trace-dataset"}


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def one(what: str, trace_dir: str, out: str) -> None:
    """In the child: load, export as `what`, print the figures as JSON."""
    import ompt_py
    from ompt_py.export import export

    t0 = time.perf_counter()
    trace = ompt_py.load(trace_dir)
    load_s = time.perf_counter() - t0
    loaded_mib = _peak_mib()
    seconds = []
    for _ in range(2):
        t0 = time.perf_counter()
        export(trace, out, "parquet" if what == "dataset" else what)
        seconds.append(time.perf_counter() - t0)
    print(json.dumps({"events": len(trace), "load_s": load_s, "seconds": seconds[0],
                      "seconds_again": seconds[1],
                      "loaded_mib": loaded_mib, "peak_mib": _peak_mib(),
                      "trace_mib": trace.events.nbytes / 2**20,
                      "bytes": _size(Path(out))}))


def exports(regions: int) -> dict:
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp, "raw")
        raw.mkdir()
        run_program([str(DRIVER), "regions", str(regions)], tool_env(str(raw)), "regions trace")
        for what, name in OUTPUTS.items():
            out = Path(tmp, name)
            proc = run_program([sys.executable, __file__, "--one", what, str(raw), str(out)],
                               dict(os.environ), f"export {what}")
            figures[what] = json.loads(proc.stdout.splitlines()[-1])
            shutil.rmtree(out) if out.is_dir() else out.unlink()
    n = figures["perfetto"]["events"]
    print(f"== exports of a trace of {n:,} events ({regions:,} regions of 2 threads; "
          f"{figures['perfetto']['trace_mib']:.0f} MiB of records)")
    for what, f in figures.items():
        rate, again = f["events"] / f["seconds"], f["events"] / f["seconds_again"]
        verdict = "PASS" if rate >= RATE_MIN else "FAIL"
        print(f"   [{verdict}] {what:9s} {f['seconds']:6.2f} s, {rate / 1e6:5.2f} M events/s "
              f"(target >= {RATE_MIN / 1e6:.0f} M/s; again: {f['seconds_again']:5.2f} s, "
              f"{again / 1e6:5.2f} M/s); {f['bytes'] / 2**20:5.0f} MiB written; peak memory "
              f"{f['loaded_mib']:5.0f} MiB after the load, {f['peak_mib']:5.0f} MiB at the end")
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a trace of about 1.4 M events")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    p.add_argument("--one", nargs=3, metavar=("FORMAT", "TRACE", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        one(*args.one)
        return 0
    try:
        build(build_steps())
        figures = exports(100_000 if args.quick else 715_000)
    except (BenchError, subprocess.SubprocessError) as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
