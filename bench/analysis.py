"""Costs of issue 4's features, printed as figures of one run.

1. Sampling: a compute-bound parallel loop (2 threads, about 1 s), traced,
   with OMPTPY_SAMPLE_HZ=0 and =1000; target: 1 kHz costs at most 1 %.
2. Tables: a trace of about 10^7 events (empty parallel regions of 2
   threads); target: to_pandas plus every paired table in at most 10 s.
3. Answers, on the same trace after the tables: summary() (thread states,
   constructs per kind and source, imbalance, tasks, locks), then each analysis
   again and the timeline plot; target: summary() in at most 10 s more.

    python bench/analysis.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import (
    BUILD_DIR,
    CC,
    DRIVER,
    BenchError,
    BuildStep,
    build,
    build_steps,
    run_program,
    warm_guest_memory,
)

LOOP_SRC = Path(__file__).resolve().parent / "compute_loop.c"
LOOP = BUILD_DIR / "compute_loop"
SAMPLING_MAX = 0.01
TABLES_MAX_S = 10.0
ANSWERS_MAX_S = 10.0


def tool_env(outdir: str, **more: str) -> dict[str, str]:
    import ompt_py

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPTPY_", "OMP_TOOL"))}
    env.update(OMP_NUM_THREADS="2", OMP_TOOL_LIBRARIES=ompt_py.tool_path(), OMPTPY_OUTPUT=outdir)
    env.update(more)
    return env


def sampling(reps: int) -> dict:
    times: dict[str, list[float]] = {"0": [], "1000": []}
    samples = 0
    for rep in range(reps):
        for hz in (("0", "1000") if rep % 2 == 0 else ("1000", "0")):
            with tempfile.TemporaryDirectory() as out:
                proc = run_program([str(LOOP)], tool_env(out, OMPTPY_SAMPLE_HZ=hz),
                                   f"compute loop at {hz} Hz")
                times[hz].append(float(proc.stdout.split()[-1]))
                if hz == "1000" and rep == 0:
                    import ompt_py

                    samples = len(ompt_py.load(out).samples())
    base, sampled = min(times["0"]), min(times["1000"])
    cost = sampled / base - 1
    med = statistics.median(times["1000"]) / statistics.median(times["0"]) - 1
    print(f"== sampling: compute-bound loop, 2 threads, min of {reps} runs")
    print(f"   0 Hz {base:.4f} s, 1000 Hz {sampled:.4f} s ({samples} samples in one run)")
    print(f"   [{'PASS' if cost <= SAMPLING_MAX else 'FAIL'}] cost of 1 kHz sampling: "
          f"{100 * cost:+.2f} % (target <= {100 * SAMPLING_MAX:.0f} %); from medians "
          f"{100 * med:+.2f} %")
    return {"base_s": base, "sampled_s": sampled, "cost": cost, "cost_median": med,
            "samples": samples}


def tables(regions: int) -> dict:
    import ompt_py

    with tempfile.TemporaryDirectory() as out:
        run_program([str(DRIVER), "regions", str(regions)], tool_env(out), "regions trace")
        t = ompt_py.load(out)
        n = len(t)
        timings = {}
        start = time.perf_counter()
        for name in ("to_pandas", "parallel_regions", "implicit_tasks", "work", "sync", "mutex",
                     "tasks", "task_graph"):
            t0 = time.perf_counter()
            getattr(t, "_events_frame" if name == "to_pandas" else name)()
            timings[name] = time.perf_counter() - t0
        total = time.perf_counter() - start
        answers = {}
        for name, run in (("summary", t.summary), ("constructs", t.constructs),
                          ("constructs_by_source", lambda: t.constructs(by="source")),
                          ("imbalance", t.imbalance), ("utilisation", t.utilisation),
                          ("task_granularity", t.task_granularity),
                          ("lock_contention", t.lock_contention),
                          ("plot_timeline", lambda: t.plot_timeline().savefig(
                              os.path.join(out, "timeline.png"), dpi=80))):
            t0 = time.perf_counter()
            run()
            answers[name] = time.perf_counter() - t0
    print(f"\n== tables: a trace of {n:,} events ({regions:,} regions of 2 threads)")
    print("   " + ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()))
    verdict = "PASS" if total <= TABLES_MAX_S * n / 1e7 else "FAIL"
    print(f"   [{verdict}] all tables: {total:.2f} s for {n / 1e6:.1f} M events "
          f"(target <= {TABLES_MAX_S:.0f} s per 10^7 events)")
    print("\n== answers on the same trace (after the tables; each analysis again: cached parts)")
    print("   " + ", ".join(f"{k} {v:.2f} s" for k, v in answers.items()))
    verdict = "PASS" if answers["summary"] <= ANSWERS_MAX_S * n / 1e7 else "FAIL"
    print(f"   [{verdict}] summary(): {answers['summary']:.2f} s for {n / 1e6:.1f} M events "
          f"(target <= {ANSWERS_MAX_S:.0f} s per 10^7 events)")
    return {"events": n, "seconds": timings, "total_s": total, "answers_seconds": answers}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer runs and a smaller trace")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    args = p.parse_args(argv)
    loop = (CC, "-O2", "-fopenmp", str(LOOP_SRC), "-o", str(LOOP), "-lm")
    steps = [*build_steps(), BuildStep(LOOP, (LOOP_SRC,), loop)]
    try:
        build(steps)
        warm_guest_memory()
        figures = {"sampling": sampling(2 if args.quick else 5),
                   "tables": tables(100_000 if args.quick else 715_000)}
    except BenchError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
