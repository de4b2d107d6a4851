#!/usr/bin/env python3
"""Peak memory and throughput of the merge of raw files into Parquet (issue 15,
must-have 2: ``ompt-py run``'s merge, ``ompt_py.convert``), printed as figures
of one run.

A raw trace of about ``--gb`` GB is made without running anything (the stored
tests/data/parallel-300.omptraw, its records repeated: tests/conftest.py
``grown_raw_file``), then converted to one Parquet file by ``ompt_py.convert``
in a fresh process per memory bound (``--memory``).  For each: the peak memory
the conversion added to the process (VmHWM, reset just before it through
/proc/self/clear_refs, less VmRSS just before it: the interpreter, numpy,
pandas and pyarrow loaded), its ratio to the bound (target: at most 1.0), the
events and raw bytes converted per second, and the output's size.

The disk is checked first (the raw trace and its output, about 4% of it in the
runs so far, need 1.1 times ``--gb``; it refuses when less than that and 2 GB
more are free) and everything it writes is deleted at the end.

    python bench/merge_memory.py [--gb 3] [--memory 32M,256M] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests")]  # this checkout's ompt_py

from conftest import grown_raw_file  # noqa: E402

from ompt_py.units import parse_size  # noqa: E402

SOURCE = REPO_ROOT / "tests" / "data" / "parallel-300.omptraw"

# Run in a fresh process: the libraries first, then the conversion alone is measured.
CHILD = """
import json, sys, time
import numpy, pandas, pyarrow.parquet
import ompt_py
from procmem import memory, reset_peak

raw, out, bound = sys.argv[1:4]
before = memory()["VmRSS"]
reset_peak()
start = time.perf_counter()
events, meta = ompt_py.convert(raw, out, bound)
seconds = time.perf_counter() - start
print(json.dumps({"events": events, "seconds": seconds, "before": before,
                  "peak": memory()["VmHWM"]}))
"""


def _convert(raw: Path, out: Path, bound: str) -> dict | str:
    """The figures of one conversion, or why it failed (its last line of stderr)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), str(BENCH_DIR),
                                                    env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", CHILD, str(raw), str(out), bound], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        return (done.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=3.0, help="raw trace size in GB (default 3)")
    ap.add_argument("--memory", default="32M,256M",
                    help="memory bounds to convert with, comma-separated (default 32M,256M)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ompt-py-merge-bench-"))
    try:
        free = shutil.disk_usage(work).free
        if free < (1.1 * args.gb + 2) * 1e9:
            print(f"only {free / 1e9:.1f} GB free in {work}: lower --gb", file=sys.stderr)
            return 1
        unit = SOURCE.stat().st_size
        raw = work / "raw"
        raw.mkdir()
        start = time.perf_counter()
        events = grown_raw_file(SOURCE, raw / "ompt-1-0.omptraw",
                                max(1, int(args.gb * 1e9 / unit)))
        raw_bytes = (raw / "ompt-1-0.omptraw").stat().st_size
        print(f"raw trace: {events:,} events, {raw_bytes / 1e9:.2f} GB "
              f"(made in {time.perf_counter() - start:.0f} s)")
        print(f"{'bound':>8} {'peak added':>11} {'/bound':>7} {'Mevents/s':>10} {'MB/s':>7} "
              f"{'seconds':>8} {'output':>9}")
        figures = []
        for bound in args.memory.split(","):
            out = work / "trace.parquet"
            got = _convert(raw, out, bound)
            if isinstance(got, str):
                print(f"{bound:>8} {got}")
                figures.append({"bound": bound, "failed": got})
                continue
            added = got["peak"] - got["before"]
            row = {"bound": bound, "bound_bytes": parse_size(bound), "added_bytes": added,
                   "events": got["events"], "seconds": got["seconds"],
                   "raw_bytes": raw_bytes, "output_bytes": out.stat().st_size}
            figures.append(row)
            print(f"{bound:>8} {added / 2**20:>8.0f} MiB {added / row['bound_bytes']:>7.2f} "
                  f"{got['events'] / got['seconds'] / 1e6:>10.2f} "
                  f"{raw_bytes / got['seconds'] / 1e6:>7.0f} {got['seconds']:>8.1f} "
                  f"{row['output_bytes'] / 1e6:>6.0f} MB")
            out.unlink()
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
