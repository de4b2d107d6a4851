#!/usr/bin/env python3
"""Where a dataset partition's summary takes its memory (issue 17): the
per-partition part of ``open_dataset(...).summary()``
(``analysis.dataset.partial_summary``) on one partition file, printed as
figures of one run.

First, in this process, the analyses partial_summary makes, one after the
other in its order (the tables they share are made by the first that needs
them; the construct instances forgotten, then only the tables of the tasks and
the locks kept, as there),
each with the memory traced (tracemalloc: numpy's and pandas' allocations)
above the loaded trace before it, at its highest during it and after it, and
its time.  Then, in a fresh process without tracing, partial_summary itself:
its peak RSS above the loaded trace's (VmHWM, reset after the load through
/proc/self/clear_refs: Linux), what it kept, and its time.  Target: the
peak at most one partition's events in memory (64 bytes each).

    python bench/partition_memory.py PARTITION.parquet [...]

(``bench/dataset.py --keep DIR`` writes a dataset whose partitions are
``DIR/pid=N/part-0.parquet``.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path[:0] = [str(REPO_ROOT), str(BENCH_DIR)]  # this checkout's ompt_py

from procmem import memory, reset_peak  # noqa: E402

import ompt_py  # noqa: E402
from ompt_py.analysis import (  # noqa: E402
    cache,
    dataset,
    metrics,
    offload,
    ranks,
    states,
    summary,
    tables,
)

MIB = 1 << 20


def steps(t: ompt_py.Trace) -> list[tuple[str, Callable[[], object]]]:
    """partial_summary's analyses in its order (job: a partition of several ranks';
    no Python stacks), the tables it makes first split out."""
    return [
        ("event counts", lambda: tables.present_events(t)),
        ("threads", lambda: states.threads(t)),
        ("pairing", lambda: tables.paired(t)),
        ("mutex table", lambda: tables.mutex(t)),
        ("task pieces", lambda: tables.task_pieces(t)),
        ("task creations", lambda: tables.created(t)),
        ("other intervals", lambda: (tables.sync_intervals(t), tables.work_intervals(t),
                                     tables.masked_intervals(t))),
        ("construct instances", lambda: metrics.construct_instances(t)),
        ("constructs by source", lambda: metrics.constructs(t, by="source")),
        ("construct_stats", lambda: dataset.construct_stats(t)),
        ("(instances forgotten)", lambda: cache.forget(t, metrics.construct_instances)),
        ("thread_totals", lambda: states.thread_totals(t)),
        ("tool_stalls", lambda: states.tool_stalls(t)),
        ("imbalance by source", lambda: metrics.imbalance(t, by="source")),
        ("has_offload", lambda: offload.has_offload(t)),
        ("region_threads", lambda: metrics.region_threads(t)),
        ("rank_rows", lambda: ranks.rank_rows(t)),
        ("arrivals", lambda: ranks.arrivals(t)),
        ("(tasks' tables kept)", lambda: cache.keep(t, *dataset.TASK_TABLES)),
        ("TaskStats", lambda: dataset.TaskStats.of(t)),
        ("task_sites", lambda: metrics.task_sites(t, by="source")),
        ("(locks' tables kept)", lambda: cache.keep(t, *dataset.LOCK_TABLES)),
        ("lock_contention", lambda: metrics.lock_contention(t)),
        ("window_note", lambda: summary.window_note(t)),
    ]


def traced(path: str) -> None:
    t = ompt_py.load(path)
    _ = t.events
    print(f"{path}: {len(t):,} events, {t.events.nbytes / MIB:.0f} MiB in memory")
    print(f"{'analysis':26s} {'before':>8s} {'peak':>8s} {'after':>8s} {'time':>7s}  (MiB over "
          "the loaded trace)")
    tracemalloc.start()
    top = 0
    for name, run in steps(t):
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        start = time.perf_counter()
        try:
            run()
        except ompt_py.MissingEventsError as e:  # partial_summary notes it and goes on
            name += f" ({type(e).__name__})"
        now, peak = tracemalloc.get_traced_memory()
        top = max(top, peak)
        print(f"{name:26s} {before / MIB:8.1f} {peak / MIB:8.1f} {now / MIB:8.1f} "
              f"{time.perf_counter() - start:6.2f}s")
    tracemalloc.stop()
    print(f"traced peak {top / MIB:.1f} MiB")


def whole(path: str) -> None:
    """partial_summary alone, its RSS (run in a fresh process)."""
    t = ompt_py.load(path)
    _ = t.events
    reset_peak()
    loaded = memory()["VmRSS"]
    start = time.perf_counter()
    dataset.partial_summary(t, 10, False, True)
    took = time.perf_counter() - start
    peak, now = memory()["VmHWM"], memory()["VmRSS"]
    print(f"partial_summary (untraced, fresh process): peak RSS +{(peak - loaded) / MIB:.0f} MiB "
          f"over the loaded trace, kept +{(now - loaded) / MIB:.0f} MiB, {took:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("partitions", nargs="+", help="Parquet files of one process each")
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    for path in args.partitions:
        if args.whole:
            whole(path)
            continue
        traced(path)
        subprocess.run([sys.executable, __file__, "--whole", path], check=True)
        print()


if __name__ == "__main__":
    main()
