"""Speed and memory of the exports (issue 5), printed as figures of one run.

A trace of about 10^7 events (empty parallel regions of 2 threads, made as
bench/analysis.py makes its table trace) is written as Perfetto JSON, Perfetto
protobuf, an OTF2 archive, CSV, one Parquet file and a Parquet dataset.  Each
format runs in a fresh process that loads the trace (from the raw files) and
then exports it twice; the figures are those of the first export (the
second, "again", shows how much of the first was a one-off cost: the export
keeps nothing but the symbolized code addresses, which the trace caches).
Beside each export's wall time it prints its CPU time (user + system of the
exporting process, resource.getrusage: the batches made in threads count
once each), which the machine's load changes much less: compare versions by
CPU time, run one after the other, with the load average it prints.

Targets, each marked PASS or FAIL per format:

* rate: 10^6 events/s or more (events of the trace over the seconds of the
  export call, writing included); for the Perfetto protobuf 5 x 10^6, for
  OTF2 2 x 10^6 (issue 16);
* size (the Perfetto protobuf): at most a third of the JSON's bytes;
* memory: what the export adds to the process, at its peak, at most
  MEMORY_MAX (0.5) times the bytes of the trace's records (64 per event).
  "Added": the peak resident size during the export (VmHWM, reset just
  before it through /proc/self/clear_refs) less the resident size just before
  it (VmRSS: the loaded trace and the interpreter).  So the growth counts
  every array the export makes (for Perfetto: the records' event numbers, the
  paired rows and their ends, the lookups and the counter series; CSV: the
  time order of the records), the batches in flight, and memory freed but not
  given back to the system (the threads' malloc arenas); a second full copy of
  the trace would be 1.0x or more.  With --quick the batches in flight, a
  fixed 60 to 180 MiB (Parquet: row groups of 2^20 rows), are most of the
  growth: the memory lines have no verdict then.

The package is byte-compiled first (compileall, as pip does when it installs
the wheel): where the environment writes no bytecode (PYTHONDONTWRITEBYTECODE)
the first export would otherwise compile the modules it imports (perfetto.py,
metrics.py, ...: 0.07 s on the 2-core VM), on the main thread, while the
records are paired in others.

Each output is measured and deleted before the next export: writing a file
over an older one frees the older one's blocks in the rename (0.15 to 0.45 s
for the protobuf's 390 MiB on the 2-core VM's ext4, mounted with discard),
which the second export ("again") is not meant to measure.

    python bench/export.py [--quick] [--json FILE] [--formats F,F...]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
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
from procmem import memory, reset_peak

RATE_MIN = 1e6
#: The formats whose rate target is another one.
RATES_MIN = {"perfetto-proto": 5e6, "otf2": 2e6}
SIZE_MAX = 1 / 3  # the Perfetto protobuf's bytes over the JSON's
MEMORY_MAX = 0.5  # peak growth during an export, in trace records' bytes
OUTPUTS = {"perfetto": "trace.json", "perfetto-proto": "trace.pftrace", "otf2": "trace.otf2",
           "csv": "trace.csv", "parquet": "trace.parquet", "dataset": "trace-dataset"}
#: Empty parallel regions of 2 threads in the trace (about 14 events each): 10^7
#: events, and with --quick about 1.4 x 10^6.
REGIONS, QUICK_REGIONS = 715_000, 100_000


def regions_trace(raw: Path, regions: int) -> None:
    """Writes into the directory ``raw`` the raw files of ``benchwork regions``
    (built by build(build_steps()) first): the trace of ``regions`` empty parallel
    regions of 2 threads (bench/view.py's too)."""
    raw.mkdir(exist_ok=True)
    run_program([str(DRIVER), "regions", str(regions)], tool_env(str(raw)), "regions trace")


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink()


def _cpu_s() -> float:
    """User + system seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one(what: str, trace_dir: str, out: str) -> None:
    """In the child: load, export as `what` twice, print the figures as JSON."""
    import ompt_py
    from ompt_py.io import export

    t0 = time.perf_counter()
    trace = ompt_py.load(trace_dir)
    load_s = time.perf_counter() - t0
    runs = []
    for _ in range(2):
        before = memory()["VmRSS"] / 2**20
        reset_peak()
        t0, cpu0 = time.perf_counter(), _cpu_s()
        export(trace, out, "parquet" if what == "dataset" else what)
        seconds, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        runs.append({"seconds": seconds, "cpu_s": cpu, "rss_before_mib": before,
                     "peak_mib": memory()["VmHWM"] / 2**20, "bytes": _size(Path(out))})
        _remove(Path(out))
    print(json.dumps({"events": len(trace), "load_s": load_s, "first": runs[0],
                      "again": runs[1], "trace_mib": trace.events.nbytes / 2**20,
                      "bytes": runs[0]["bytes"]}))


def byte_compile() -> None:
    """Compiles the modules of the ompt_py the exports import, as an installed
    wheel has them (bytecode read even under PYTHONDONTWRITEBYTECODE)."""
    spec = importlib.util.find_spec("ompt_py")
    if spec is None or not spec.submodule_search_locations:
        raise BenchError("ompt_py is not importable: run `make setup` first")
    for folder in spec.submodule_search_locations:
        compileall.compile_dir(folder, quiet=1)


def exports(regions: int, judge_memory: bool, formats: list[str]) -> dict:
    figures = {}
    byte_compile()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp, "raw")
        regions_trace(raw, regions)
        load = os.getloadavg()
        for what in formats:
            out = Path(tmp, OUTPUTS[what])
            proc = run_program([sys.executable, __file__, "--one", what, str(raw), str(out)],
                               dict(os.environ), f"export {what}")
            figures[what] = json.loads(proc.stdout.splitlines()[-1])
    n = next(iter(figures.values()))["events"]
    trace_mib = next(iter(figures.values()))["trace_mib"]
    print(f"== exports of a trace of {n:,} events ({regions:,} regions of 2 threads; "
          f"{trace_mib:.0f} MiB of records); load average (1 min) {load[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")
    for what, f in figures.items():
        first, again = f["first"], f["again"]
        rate = f["events"] / first["seconds"]
        rate_min = RATES_MIN.get(what, RATE_MIN)
        growth = first["peak_mib"] - first["rss_before_mib"]
        print(f"   {what:14s} [{'PASS' if rate >= rate_min else 'FAIL'}] rate "
              f"{first['seconds']:6.2f} s (CPU {first['cpu_s']:6.2f} s), {rate / 1e6:5.2f} M "
              f"events/s (target >= {rate_min / 1e6:.0f} M/s; again: {again['seconds']:5.2f} s, "
              f"CPU {again['cpu_s']:5.2f} s); {f['bytes'] / 2**20:5.0f} MiB written")
        if what == "perfetto-proto" and "perfetto" in figures:
            ratio = f["bytes"] / figures["perfetto"]["bytes"]
            print(f"   {'':14s} [{'PASS' if ratio <= SIZE_MAX else 'FAIL'}] size "
                  f"{ratio:.3f} of the JSON's (target <= {SIZE_MAX:.3f})")
        verdict = "PASS" if growth <= MEMORY_MAX * trace_mib else "FAIL"
        verdict = verdict if judge_memory else "n/a"
        print(f"   {'':14s} [{verdict}] memory "
              f"{first['rss_before_mib']:5.0f} MiB before, peak {first['peak_mib']:5.0f} MiB: "
              f"+{growth:4.0f} MiB = {growth / trace_mib:4.2f}x the records (target <= "
              f"{MEMORY_MAX}x; again: +{again['peak_mib'] - again['rss_before_mib']:4.0f} MiB)")
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a trace of about 1.4 M events")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    p.add_argument("--formats", default=",".join(OUTPUTS),
                   help=f"the formats to export, comma-separated (default: {','.join(OUTPUTS)})")
    p.add_argument("--one", nargs=3, metavar=("FORMAT", "TRACE", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        one(*args.one)
        return 0
    formats = args.formats.split(",")
    unknown = sorted(set(formats) - set(OUTPUTS))
    if unknown:
        p.error(f"unknown format(s) {', '.join(unknown)}: give some of {', '.join(OUTPUTS)}")
    try:
        build(build_steps())
        figures = exports(QUICK_REGIONS if args.quick else REGIONS, judge_memory=not args.quick,
                          formats=formats)
    except (BenchError, subprocess.SubprocessError) as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
