#!/usr/bin/env python3
"""A job's dataset summarised on Dask (issue 17, must-have 4: ``ompt_py.open_dataset
(DIR).summary(client=...)``): wall time on 1 and 2 workers and each worker's peak
memory against the size of a partition, printed as figures of one run.

A synthetic job of ``--ranks`` ranks of ``--events`` events each is written once
into a temporary directory (tests/synthetic_dataset.py: the stored known-tasks
and contended traces repeated, per rank; ``--keep DIR`` writes it there and
keeps it, and reuses it when it is already there).  Then, for each number of
workers (``--workers``), a LocalCluster of that many worker processes of one
thread each (no memory limit) is started, each worker imports ompt_py's
analysis (its own memory then: ``own``, its RSS), and ``d.summary(client=c)``
is timed.  Each worker's peak (VmHWM, through ``client.run``)
less ``own`` is what the analysis took; it is printed against a partition's
size in memory (its events: 64 bytes each, as a Trace holds them; the
largest partition) and on disk (its Parquet file).  Target: at most two
partitions.  Each number of workers runs with Dask's statistical profiler on
(Dask's default) and off (``--profiler``; bench/cluster.py): what a worker
takes with it off is the analysis' own, the difference the profiler's.

    python bench/dataset.py [--ranks 64] [--events 1000000] [--workers 1,2]
                            [--profiler on,off] [--keep DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests"), str(BENCH_DIR)]  # this checkout's

from cluster import local_client  # noqa: E402
from synthetic_dataset import write_dataset  # noqa: E402

import ompt_py  # noqa: E402
from ompt_py.records import EVENT_DTYPE  # noqa: E402


def _memory() -> dict[str, int]:
    """This process's RSS now and at its peak (bytes): run on each worker."""
    import psutil

    # VmHWM: the worker's own peak (getrusage's ru_maxrss starts from its parent's).
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {"rss": psutil.Process().memory_info().rss,
            "peak": int(fields["VmHWM"].split()[0]) << 10}


def _prepare() -> None:
    import ompt_py.analysis.dataset  # noqa: F401  (the workers' libraries, loaded before)


def run(path: Path, workers: int, profiler: bool) -> dict:
    """d.summary on a fresh LocalCluster of ``workers`` processes, Dask's profiler
    on or off in them."""
    with local_client(workers, profiler) as client:
        client.run(_prepare)
        own = {w: m["rss"] for w, m in client.run(_memory).items()}
        d = ompt_py.open_dataset(path)
        start = time.perf_counter()
        s = d.summary(client=client)
        wall = time.perf_counter() - start
        peaks = {w: m["peak"] for w, m in client.run(_memory).items()}
    return {"workers": workers, "profiler": profiler, "wall_s": wall,
            "events": s.overview["events"], "own_bytes": own, "peak_bytes": peaks,
            "added_bytes": {w: peaks[w] - own[w] for w in peaks}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--events", type=int, default=1_000_000, help="per rank")
    parser.add_argument("--workers", default="1,2", help="numbers of workers, comma-separated")
    parser.add_argument("--profiler", default="on,off", help="Dask's statistical profiler "
                        "in the workers: on, off or both (comma-separated), for each number "
                        "of workers")
    parser.add_argument("--keep", type=Path, help="write the dataset here and keep it "
                        "(reused when it is there)")
    parser.add_argument("--json", type=Path, help="write the figures there too")
    args = parser.parse_args()
    profilers = [{"on": True, "off": False}.get(p) for p in args.profiler.split(",")]
    if None in profilers:
        parser.error(f"--profiler {args.profiler}: say on, off or on,off")
    path = args.keep or Path(tempfile.mkdtemp(prefix="ompt-py-bench-dataset-")) / "run1"
    try:
        if not path.exists():
            start = time.perf_counter()
            write_dataset(path, args.ranks, args.events)
            print(f"wrote {args.ranks} ranks x {args.events:,} events in "
                  f"{time.perf_counter() - start:.0f} s: {path}")
        d = ompt_py.open_dataset(path)
        rows = max(p.rows for p in d.partitions)
        in_memory = rows * EVENT_DTYPE.itemsize
        on_disk = max(os.path.getsize(f) for f in d.files)
        total = sum(p.rows for p in d.partitions)
        print(f"{len(d)} partitions, {total:,} events; the largest partition: {rows:,} "
              f"events, {in_memory / 2**20:.0f} MiB in memory, {on_disk / 2**20:.1f} MiB "
              "on disk")
        results = []
        for n in (int(w) for w in args.workers.split(",")):
            for profiler in profilers:
                r = run(path, n, profiler)
                results.append(r)
                added = max(r["added_bytes"].values())
                print(f"{n} worker(s), profiler {'on' if profiler else 'off'}: "
                      f"{r['wall_s']:.1f} s, {r['events'] / r['wall_s'] / 1e6:.2f} M events/s; "
                      f"per worker: own {max(r['own_bytes'].values()) / 2**20:.0f} MiB, "
                      f"peak {max(r['peak_bytes'].values()) / 2**20:.0f} MiB, added "
                      f"{added / 2**20:.0f} MiB = {added / in_memory:.2f} partitions in "
                      f"memory ({added / on_disk:.1f} on disk; target: at most 2 in memory)")
        for profiler in profilers:
            runs = [r for r in results if r["profiler"] == profiler]
            if len(runs) > 1:
                print(f"speed-up {runs[0]['wall_s'] / runs[-1]['wall_s']:.2f} "
                      f"({runs[0]['workers']} -> {runs[-1]['workers']} workers, profiler "
                      f"{'on' if profiler else 'off'})")
        if args.json:
            args.json.write_text(json.dumps({"partition_events": rows, "partition_bytes":
                                             in_memory, "partition_file_bytes": on_disk,
                                             "runs": results}, indent=1))
    finally:
        if args.keep is None:
            shutil.rmtree(path.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
