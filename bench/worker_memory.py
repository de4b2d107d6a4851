#!/usr/bin/env python3
"""Which step sets a Dask worker's peak in ``open_dataset(DIR).summary(client=...)``
(issue 17): bench/dataset.py's run, each worker's peak taken per step, printed
as figures of one run.

A LocalCluster of ``--workers`` processes of one thread each (no memory limit,
as bench/dataset.py starts it); each worker imports ompt_py's analysis (its RSS
then is ``own``), then its steps are wrapped: the partition's read
(``ompt_py.dataset._read``), each analysis that ``partial_summary`` calls
(those it calls through the modules and names of ``ompt_py.analysis.dataset``;
the analyses they call in turn are inside their step), the memory given back
after each partition (``cache.give_back``: glibc's heap trimmed, Arrow's
allocator's free pages released) and the task histogram's second pass.
Around each step the worker's peak is reset (VmHWM through
/proc/self/clear_refs: Linux) and read after it, and so is the peak between
steps (the worker's own work: Dask's comms, the results).  Printed, over
``own``, MiB: per partition and step its peak and the RSS after it; per run
the worker's peak and the step that set it; per step its highest peak.  With
``--runs 2`` the summary runs again on the same workers: what the first run
costs once (code paged in, the libraries' caches and pools, Dask's profiler)
is then already resident.  With ``--read-only`` the workers only read the
partitions (``Dataset.map(len)``): the peak of a worker that analyses nothing.
With ``--no-profiler`` the workers run without Dask's statistical profiler
(bench/cluster.py).

    python bench/worker_memory.py DIR [--workers 1] [--runs 1] [--read-only]
                                  [--no-profiler] [--quiet]

(``bench/dataset.py --keep DIR`` writes a dataset.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path[:0] = [str(REPO_ROOT), str(BENCH_DIR)]  # this checkout's ompt_py

import ompt_py  # noqa: E402

MIB = 1 << 20
#: What partial_summary calls through ompt_py.analysis.dataset: modules, functions.
MODULES = ["metrics", "tables", "ranks", "summary", "offload", "cache"]
FUNCTIONS = ["construct_stats", "thread_totals", "tool_stalls", "thread_keys"]


def _install() -> None:
    """In a worker: wrap the steps, each logged as (pid, step, peak, rss, seconds)."""
    import builtins
    import functools
    import time

    from procmem import memory, reset_peak

    import ompt_py.analysis.dataset as ad
    import ompt_py.dataset as od
    from ompt_py.analysis import cache

    log: list[tuple] = []
    state = {"pid": None, "depth": 0}

    def logged(step: str, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            if state["depth"]:  # inside a step: its own
                return fn(*args, **kwargs)
            m = memory()
            log.append((state["pid"], "(between steps)", m["VmHWM"], m["VmRSS"], 0.0))
            reset_peak()
            state["depth"] += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                state["depth"] -= 1
                m = memory()
                log.append((state["pid"], step, m["VmHWM"], m["VmRSS"],
                            time.perf_counter() - start))
                reset_peak()
        run.logged = True  # type: ignore[attr-defined]
        return run

    class Module:
        def __init__(self, module: object, name: str) -> None:
            self._module, self._name = module, name

        def __getattr__(self, attr: str) -> object:
            value = getattr(self._module, attr)
            return (logged(f"{self._name}.{attr}", value) if callable(value) and not
                    isinstance(value, type) and not hasattr(value, "logged") else value)

    for name in MODULES:
        setattr(ad, name, Module(getattr(ad, name), name))
    for name in FUNCTIONS:
        setattr(ad, name, logged(name, getattr(ad, name)))
    ad.TaskStats.of = classmethod(logged("TaskStats.of", ad.TaskStats.of.__func__))
    read = logged("read", od._read)

    def read_partition(part, origin):
        state["pid"] = part.pid
        return read(part, origin)

    od._read = read_partition
    cache.give_back = logged("give_back", cache.give_back)
    builtins._worker_memory_log = log  # type: ignore[attr-defined]


def _take_log() -> list[tuple]:
    import builtins

    log = list(builtins._worker_memory_log)  # type: ignore[attr-defined]
    builtins._worker_memory_log.clear()  # type: ignore[attr-defined]
    return log


def _own() -> int:
    from procmem import memory

    import ompt_py.analysis.dataset  # noqa: F401  (the workers' libraries, loaded before)

    return memory()["VmRSS"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="a dataset directory (bench/dataset.py "
                        "--keep DIR)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1, help="summaries on the same workers")
    parser.add_argument("--read-only", action="store_true", help="only read the partitions "
                        "(Dataset.map(len)), not summarise them")
    parser.add_argument("--no-profiler", action="store_true", help="the workers without "
                        "Dask's statistical profiler")
    parser.add_argument("--quiet", action="store_true", help="without the per-step lines")
    args = parser.parse_args()
    from cluster import local_client

    from ompt_py.records import EVENT_DTYPE

    d = ompt_py.open_dataset(args.dataset)
    partition = max(p.rows for p in d.partitions) * EVENT_DTYPE.itemsize
    print(f"{len(d)} partitions; the largest {partition / MIB:.0f} MiB of events in memory")
    with local_client(args.workers, profiler=not args.no_profiler) as client:
        own = client.run(_own)
        client.run(_install)
        for run in range(1, args.runs + 1):
            if args.read_only:
                d.map(len, client=client)
            else:
                d.summary(client=client)
            for worker, log in client.run(_take_log).items():
                base = own[worker]
                print(f"run {run}, worker {worker}: own {base / MIB:.0f} MiB; MiB over it:")
                worst: dict[str, float] = {}
                for pid, step, peak, rss, took in log:
                    worst[step] = max(worst.get(step, -MIB), (peak - base) / MIB)
                    if not args.quiet and step != "(between steps)":
                        print(f"  {pid} {step:28s} peak {(peak - base) / MIB:+7.1f}  rss after "
                              f"{(rss - base) / MIB:+7.1f}  {took:5.2f} s")
                top = max(worst, key=worst.__getitem__)
                print(f"  peak {worst[top]:+.0f} MiB = {worst[top] * MIB / partition:.2f} "
                      f"partitions, in {top}; per step: " + ", ".join(
                          f"{s} {v:+.0f}" for s, v in sorted(worst.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
