#!/usr/bin/env python3
"""Device-trace consumption benchmark: buffer_complete deliveries into the trace.

The emulated offload runtime (tests/programs/emu_offload.c) writes N kernel
records into the buffers the tool gives it (untimed: `--bench N` holds them),
then hands every buffer back through buffer_complete on one thread, and times
that part alone.  Side by side, in the same run: the same N records delivered
to the emulator's own consumer (`--baseline`: no tool; it walks each buffer
with advance_buffer_cursor / get_record_ompt and sums three fields), the floor
of what walking the buffers costs.  Target: >= 20 M device records/s into the
trace (issue #14).

Usage: python bench/device_trace.py [--records N] [--reps R] [--stride BYTES] [--json FILE]
It is a report: exit 0 whatever the figures (1 when it cannot build or run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from overhead import (
    BUILD_DIR,
    BenchError,
    BuildStep,
    base_env,
    build,
    discover_ompt_py,
    log,
    scratch_dir,
    tail,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
EMU_SOURCE = REPO_ROOT / "tests" / "programs" / "emu_offload.c"
EMU = BUILD_DIR / "emu_offload"
TARGET_RECORDS_PER_S = 20e6


def emu_step() -> BuildStep:
    cc = os.environ.get("BENCH_CC", "clang-19")
    return BuildStep(EMU, (EMU_SOURCE,), (cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                                          "-pthread", str(EMU_SOURCE), "-ldl", "-o", str(EMU)))


def run_emu(records: int, stride: int, env: dict[str, str], baseline: bool) -> dict[str, Any]:
    """The emulator's timing line; {"error": why} when the tool did not start tracing."""
    cmd = [str(EMU), "--bench", str(records), "--stride", str(stride)]
    if baseline:
        cmd.append("--baseline")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and "needs tracing started" in proc.stderr:
        return {"error": "the tool did not start tracing on the emulated device"}
    if proc.returncode != 0 or not lines:
        raise BenchError(f"{' '.join(cmd)}: exit {proc.returncode}\n{tail(proc.stderr, 20)}")
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000, help="records per run (2*10^6)")
    ap.add_argument("--reps", type=int, default=3, help="runs per configuration; best kept")
    ap.add_argument("--stride", type=int, default=104, help="record stride (ROCm: larger)")
    ap.add_argument("--json", type=Path, help="also write the figures there")
    args = ap.parse_args()
    try:
        build([emu_step()])
    except BenchError as exc:
        log(str(exc))
        return 1
    omptpy = discover_ompt_py()
    figures: dict[str, Any] = {"records": args.records, "stride": args.stride}
    try:
        base = [run_emu(args.records, args.stride, base_env(), True) for _ in range(args.reps)]
        figures["baseline_records_per_s"] = max(r["records_per_s"] for r in base)
        if omptpy.available:
            tool = []
            for _ in range(args.reps):
                with scratch_dir() as out:
                    env = base_env() | {"OMP_TOOL_LIBRARIES": omptpy.tool_path,
                                        "OMPTPY_OUTPUT": str(out)}
                    tool.append(run_emu(args.records, args.stride, env, False))
            if "error" in tool[0]:
                figures["tool_error"] = tool[0]["error"]
            else:
                figures["tool_records_per_s"] = max(r["records_per_s"] for r in tool)
        else:
            figures["tool_error"] = omptpy.error
    except BenchError as exc:
        log(str(exc))
        return 1
    rate = figures.get("tool_records_per_s")
    print(f"device records delivered by buffer_complete ({args.records:,} records, stride "
          f"{args.stride} B, one thread, best of {args.reps}):")
    base_rate = figures["baseline_records_per_s"]
    print(f"  emulator's own consumer (no tool)  {base_rate / 1e6:8.1f} M/s")
    if rate is None:
        print(f"  into the ompt-py trace             n/a ({figures.get('tool_error')})")
    else:
        verdict = "PASS" if rate >= TARGET_RECORDS_PER_S else "FAIL"
        print(f"  into the ompt-py trace             {rate / 1e6:8.1f} M/s   target >= "
              f"{TARGET_RECORDS_PER_S / 1e6:.0f} M/s: {verdict}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
