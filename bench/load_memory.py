#!/usr/bin/env python3
"""Memory and time of ``ompt_py.load`` of Parquet trace files, one after the other
in one process as a dataset's worker reads its partitions (issue 17), printed as
the figures of a few runs.

Each run is a fresh process that imports ompt_py (from ``--checkout``, default
this one: give several to compare them) and pyarrow.parquet, then loads the
files in turn, each trace dropped before the next.  For each load: its peak
(VmHWM, reset through /proc/self/clear_refs just before it), what is resident
once it is loaded (VmRSS, the trace held) and once the trace is dropped, each
over the RSS before the first load; the records (64 bytes an event, 4 more a
row for the pids of several processes); its wall and CPU seconds.  Target:
the peak the records and at most about 16 MiB, and nothing kept once the
trace is dropped, both beyond the one-time cost of the first load (the
libraries' code and caches: what stays once its trace is dropped).
The runs alternate between the checkouts, so that the machine's load weighs
on each alike; printed per checkout and file: the medians of the memory
figures, the least and the median of the times.

Without FILE, a dataset of ``--ranks`` partitions of 10^6 events is written
(tests/synthetic_dataset.py, as bench/dataset.py writes it; ``--keep DIR``
keeps it, and reuses it when it is there) and its partitions are loaded.

    python bench/load_memory.py [FILE ...] [--ranks 3] [--keep DIR]
                                [--checkout DIR ...] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

# Run in a fresh process: the libraries first, then each load measured.
CHILD = """
import gc, json, sys, time
sys.path.insert(0, sys.argv[1])
import pyarrow.parquet
import ompt_py
from procmem import memory, reset_peak

before = memory()["VmRSS"]
for path in sys.argv[2:]:
    reset_peak()
    wall, cpu = time.perf_counter(), time.process_time()
    t = ompt_py.load(path)
    records = t.events.nbytes + (t.pids.nbytes if t.single_pid is None else 0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    loaded = memory()
    del t
    gc.collect()
    print(json.dumps({"path": path, "records": records, "wall_s": wall, "cpu_s": cpu,
                      "peak": loaded["VmHWM"] - before, "kept": loaded["VmRSS"] - before,
                      "dropped": memory()["VmRSS"] - before}))
"""


def mib(n: float) -> str:
    return f"{n / 2**20:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="Parquet trace files (default: "
                        "the partitions of a synthetic dataset)")
    parser.add_argument("--ranks", type=int, default=3, help="partitions of the synthetic "
                        "dataset")
    parser.add_argument("--keep", type=Path, help="write the synthetic dataset here and keep "
                        "it (reused when it is there)")
    parser.add_argument("--checkout", type=Path, action="append", help="an ompt-py checkout "
                        "to import (repeat to compare; default: this one)")
    parser.add_argument("--runs", type=int, default=3, help="runs per checkout")
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkout or [REPO_ROOT]]
    made = None
    files = args.files
    if not files:
        made = args.keep or Path(tempfile.mkdtemp(prefix="ompt-py-bench-load-")) / "run1"
        if not made.exists():
            sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests")]
            from synthetic_dataset import write_dataset

            start = time.perf_counter()
            write_dataset(made, args.ranks, 1_000_000)
            print(f"wrote {args.ranks} partitions of 10^6 events in "
                  f"{time.perf_counter() - start:.0f} s: {made}")
        files = sorted(made.glob("pid=*/part-0.parquet"))
    try:
        results: dict[Path, list[list[dict]]] = {c: [] for c in checkouts}
        # the child imports procmem from here
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH")) if p)}
        for _ in range(args.runs):
            for c in checkouts:
                out = subprocess.run([sys.executable, "-c", CHILD, str(c), *map(str, files)],
                                     env=env,
                                     capture_output=True, text=True, check=True).stdout
                results[c].append([json.loads(line) for line in out.splitlines()])
    finally:
        if made is not None and args.keep is None:
            shutil.rmtree(made.parent, ignore_errors=True)
    print(f"{len(files)} file(s) loaded in turn per run, {args.runs} run(s) per checkout; MiB "
          "over the RSS before the first load (medians); seconds: least / median")
    for c, runs in results.items():
        print(c)
        for i, path in enumerate(files):
            loads = [run[i] for run in runs]
            med = {k: statistics.median(load[k] for load in loads)
                   for k in ("records", "peak", "kept", "dropped")}
            wall, cpu = ([load[k] for load in loads] for k in ("wall_s", "cpu_s"))
            print(f"  {path}: records {mib(med['records'])}, peak {mib(med['peak'])} "
                  f"(records + {mib(med['peak'] - med['records'])}), loaded {mib(med['kept'])} "
                  f"(records + {mib(med['kept'] - med['records'])}), dropped "
                  f"{mib(med['dropped'])}; wall {min(wall):.2f} / {statistics.median(wall):.2f}"
                  f" s, CPU {min(cpu):.2f} / {statistics.median(cpu):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
