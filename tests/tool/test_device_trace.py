"""OMPT device tracing end to end, against the emulated offload runtime
(tests/programs/emu_offload.c: ROCm's and Intel's behaviours behind switches,
and a ground truth of every record it made) and, where the process's device
lookup offers ompt_start_trace, against the real runtime.

The tool's side follows the record layout of issue #14 (record version 6):
a ``device`` record (103) followed by its ``more`` record (102) per OMPT
device record, ``device_clock`` records (104) and ``meta["devices"]``.
Tests of the device path skip, saying why, while the tool has no device
tracing (``meta["devices"]`` absent).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import CLANG, LIBOMP, PROGRAMS, clean_env, tool_env

import ompt_py
from ompt_py.records import EVENTS

pytestmark = pytest.mark.needs_clang

EMU_SOURCE = PROGRAMS / "emu_offload.c"
EV_TARGET, EV_DATA_OP, EV_SUBMIT = 8, 9, 10
EV_TARGET_EMI, EV_DATA_OP_EMI, EV_SUBMIT_EMI = 33, 34, 35
EV_MORE, EV_DEVICE, EV_DEVICE_CLOCK = 102, 103, 104
#: The emulated device clock's default offset and drift (emu_offload.c's defaults).
DEFAULT_OFFSET_NS, DEFAULT_DRIFT = 5e12, 1e-4


@pytest.fixture(scope="module")
def emu(tmp_path_factory) -> Path:
    """The emulated offload runtime: C11, no libomp."""
    out = tmp_path_factory.mktemp("emu") / "emu_offload"
    r = subprocess.run([CLANG, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread",
                        str(EMU_SOURCE), "-ldl", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


class Run:
    """One run of the emulator: its ground truth and, with the tool, the trace."""

    def __init__(self, truth: dict, trace: ompt_py.Trace | None, proc: subprocess.CompletedProcess):
        self.truth = truth
        self.trace = trace
        self.proc = proc

    @property
    def devices_meta(self) -> list[dict] | None:
        """meta["devices"] of the traced process (None: the tool has no device tracing)."""
        if self.trace is None:
            return None
        (proc,) = self.trace.meta["processes"]
        return proc.get("devices", self.trace.meta.get("devices"))

    def records(self, **match) -> list[dict]:
        """Ground-truth records with these field values."""
        return [r for r in self.truth["records"] if all(r.get(k) == v for k, v in match.items())]


def run_emu(emu: Path, tmp_path: Path, *switches: str, tool: bool = True,
            timeout: float = 120, **env: str) -> Run:
    truth_path = tmp_path / "truth.json"
    out = tmp_path / "trace"
    out.mkdir(exist_ok=True)
    environ = tool_env(out, **env) if tool else clean_env(env)
    r = subprocess.run([str(emu), *switches, "--truth", str(truth_path)], env=environ,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"emu_offload {' '.join(switches)}: {r.returncode}\n{r.stderr}"
    truth = json.loads(truth_path.read_text())
    trace = ompt_py.load(out) if tool else None
    return Run(truth, trace, r)


def needs_device_tracing(run: Run) -> list[dict]:
    devices = run.devices_meta
    assert devices, f"no device in the trace's metadata: {run.trace.meta['processes']}"
    return devices


# ---- the tool's device rows, read back --------------------------------------------


def device_rows(trace: ompt_py.Trace) -> list[tuple[np.void, np.void]]:
    """(device, more) record pairs, each `more` right after its primary in its thread's order."""
    ev = trace.events
    pairs = []
    for thread in np.unique(ev["thread"]):
        rows = ev[ev["thread"] == thread]
        kinds = rows["event"]
        for i in np.flatnonzero(kinds == EV_DEVICE):
            assert i + 1 < len(rows) and kinds[i + 1] == EV_MORE, \
                f"a device record of thread {thread} is not followed by its `more` record"
            more = rows[i + 1]
            assert more["time_ns"] == rows[i]["time_ns"] and more["thread"] == rows[i]["thread"]
            pairs.append((rows[i], more))
    return pairs


def u32(v: int) -> int:
    return int(v) & 0xFFFFFFFF


def truth_key(r: dict) -> tuple:
    """A ground-truth record as the fields the layout puts in a device + more pair."""
    t = r["type"] - 25 if r["type"] in (EV_TARGET_EMI, EV_DATA_OP_EMI, EV_SUBMIT_EMI) else r["type"]
    common = (r["device"], r["type"], r["time"], r["target_id"], r["thread_id"])
    if t == EV_TARGET:
        return (*common, r["endpoint"], 0, r["task_id"], r["codeptr"], r["kind"],
                u32(r["device_num"]), r["record_target_id"])
    if t == EV_DATA_OP:
        return (*common, 0, r["end_time"], r["host_op_id"], r["codeptr"], r["optype"],
                r["src_addr"], r["dest_addr"], r["bytes"], u32(r["src_device_num"]),
                u32(r["dest_device_num"]))
    assert t == EV_SUBMIT, r
    return (*common, 0, r["end_time"], r["host_op_id"], 0, r["requested_num_teams"],
            r["granted_num_teams"])


def row_key(dev: np.void, more: np.void) -> tuple:
    """The same fields read from the tool's device + more pair."""
    kind = int(dev["kind"])
    t = kind - 25 if kind in (EV_TARGET_EMI, EV_DATA_OP_EMI, EV_SUBMIT_EMI) else kind
    common = (int(dev["u32a"]), kind, int(dev["u64a"]), int(dev["parallel_id"]),
              int(more["task_id"]))
    if t == EV_TARGET:
        return (*common, int(dev["endpoint"]), int(dev["u64b"]), int(dev["task_id"]),
                int(dev["codeptr"]), int(more["kind"]), int(more["u32a"]), int(more["u64a"]))
    if t == EV_DATA_OP:
        return (*common, int(dev["endpoint"]), int(dev["u64b"]), int(dev["task_id"]),
                int(dev["codeptr"]), int(more["kind"]), int(more["u64a"]), int(more["u64b"]),
                int(more["parallel_id"]), int(more["u32a"]), int(more["u32b"]))
    return (*common, int(dev["endpoint"]), int(dev["u64b"]), int(dev["task_id"]),
            int(dev["codeptr"]), int(more["u32a"]), int(more["u32b"]))


def expected_records(run: Run) -> list[dict]:
    """What the trace must hold: records the runtime delivered before stop, of known types."""
    return [r for r in run.truth["records"]
            if r["lost"] is None and not r["after_stop"] and r["type"] != 999]


def check_delivered_once(run: Run) -> None:
    """Every delivered record is in the trace once, with every field; nothing else is."""
    for r in run.truth["records"]:
        if r["lost"] is None:
            assert r["delivered"] == 1, f"the emulator delivered a record {r['delivered']} times"
    want = Counter(truth_key(r) for r in expected_records(run))
    got = Counter(row_key(d, m) for d, m in device_rows(run.trace))
    assert sum(want.values()) > 0
    assert got == want, (f"missing {sum((want - got).values())}, extra "
                         f"{sum((got - want).values())}: {list((want - got).items())[:3]} / "
                         f"{list((got - want).items())[:3]}")


def check_buffers_freed(run: Run, devices: list[dict]) -> None:
    given = Counter(b["device"] for b in run.truth["buffers"])
    for d in devices:
        n = d["device"]
        assert d["buffers_requested"] >= given[n]
        assert d["buffers_freed"] == d["buffers_requested"] - d["zero_byte_buffers"], d
        truth_dev = run.truth["devices"][n]
        assert d["records_lost"] >= truth_dev["records_lost"]


# ---- host side: what the tool on main already records ----------------------------------


def test_emulator_drives_the_host_side(emu, tmp_path):
    """Host target callbacks and device_initialize reach the tool, with one id per region."""
    devices, regions, ops, kernels = 2, 3, 4, 2
    run = run_emu(emu, tmp_path, "--devices", str(devices), "--regions", str(regions),
                  "--ops", str(ops), "--kernels", str(kernels))
    assert run.truth["tool"] is True
    (proc,) = run.trace.meta["processes"]
    assert proc["exe"].endswith("emu_offload")
    levels = proc["runtimes"][0]["callbacks"]
    for name in ("target_emi", "target_data_op_emi", "target_submit_emi", "device_initialize",
                 "device_finalize"):
        assert levels[name] == "always", (name, levels[name])
    ev = run.trace.events
    count = Counter(ev["event"].tolist())
    assert count[12] == count[13] == devices  # device_initialize, device_finalize
    assert count[EV_TARGET_EMI] == 2 * devices * regions
    assert count[EV_DATA_OP_EMI] == 2 * devices * regions * ops
    assert count[EV_SUBMIT_EMI] == 2 * devices * regions * kernels
    targets = ev[ev["event"] == EV_TARGET_EMI]
    assert len(set(targets["u64a"].tolist())) == devices * regions  # one target id per region
    ops_rows = ev[ev["event"] == EV_DATA_OP_EMI]
    assert set(ops_rows["u64b"].tolist()) == set(targets["u64a"].tolist())
    assert sorted(set(ev[ev["event"] == 12]["u32a"].tolist())) == list(range(devices))


def test_emulator_without_a_tool_runs(emu, tmp_path):
    run = run_emu(emu, tmp_path, "--devices", "2", tool=False)
    assert run.truth["tool"] is False
    assert run.truth["records"] == [] and run.truth["buffers"] == []


def test_emulator_delivers_each_record_once(emu, tmp_path):
    """The emulator's own consumer (--baseline): every record in exactly one run, every full
    buffer handed back owned, runs covering the buffers' records (ROCm's stride)."""
    run = run_emu(emu, tmp_path, "--bench", "30000", "--baseline", "--stride", "128",
                  "--runs", "3", tool=False)
    assert len(run.truth["records"]) == 30000
    assert all(r["delivered"] == 1 for r in run.truth["records"])
    for b in run.truth["buffers"]:
        covered = sorted(k for first, count, _ in b["deliveries"]
                         for k in range(first, first + count))
        assert covered == list(range(b["records"]))
        assert b["handed_back"] == b["full"]
        owned = [d for d in b["deliveries"] if d[2]]
        assert owned == ([[0, 0, 1]] if b["full"] else [])


def test_emulator_help_and_bad_switch(emu):
    r = subprocess.run([str(emu), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--stride" in r.stdout
    r = subprocess.run([str(emu), "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown switch" in r.stderr
    r = subprocess.run([str(emu), "--stride", "64"], capture_output=True, text=True)
    assert r.returncode == 2 and "--stride" in r.stderr


# ---- the device path (the tool's device tracing) -----------------------------------

SCENARIOS = {
    "rocm": [],  # helper thread, stride 104, types 8/9/10, an extra owned call per full buffer
    "rocm-stride-runs": ["--stride", "136", "--runs", "3", "--target-time-zero"],
    "caller-thread": ["--complete", "caller", "--regions", "40"],
    "owned-on-last-run-emi-types": ["--owned", "last", "--emi-types", "--regions", "40"],
    "three-devices": ["--devices", "3", "--regions", "6", "--kernels", "3"],
}


@pytest.mark.parametrize("switches", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_every_record_once_every_buffer_freed(emu, tmp_path, switches):
    run = run_emu(emu, tmp_path, *switches)
    devices = needs_device_tracing(run)
    check_delivered_once(run)
    check_buffers_freed(run, devices)
    for d in devices:
        assert d["started"] is True and d["start_error"] is None
        assert d["records"] == len(run.records(device=d["device"], lost=None, after_stop=False))
        assert d["records_after_stop"] == d["records_unknown_type"] == 0


def test_links_between_host_rows_and_device_records(emu, tmp_path):
    """A data op's / kernel's host_op_id is the id the tool gave the host operation, a
    record's target_id the host target region's id."""
    run = run_emu(emu, tmp_path, "--regions", "5", "--ops", "4", "--kernels", "2")
    needs_device_tracing(run)
    ev = run.trace.events
    begins = ev[ev["endpoint"] == 1]
    host_ops = {(int(r["task_id"]), int(r["u64b"])) for r in begins
                if r["event"] in (EV_DATA_OP_EMI, EV_SUBMIT_EMI)}
    targets = {int(r["u64a"]) for r in begins[begins["event"] == EV_TARGET_EMI]}
    linked = 0
    for dev, _ in device_rows(run.trace):
        kind = int(dev["kind"])
        assert int(dev["parallel_id"]) in targets
        if kind in (EV_DATA_OP, EV_SUBMIT):
            assert (int(dev["task_id"]), int(dev["parallel_id"])) in host_ops
            linked += 1
    assert linked == 5 * (4 + 2)


def test_tables_link_device_ops_to_host_rows_through_parquet(emu, tmp_path):
    """Trace.device_ops() has a row per delivered record, each data op and kernel linked
    to its host row of data_ops() / kernels() (same host_op_id), its device times on
    the host clock inside the host operation; meta["devices"] is the processes'
    entries, and a Parquet round trip keeps it and the tables."""
    run = run_emu(emu, tmp_path, "--regions", "6", "--ops", "3", "--kernels", "2",
                  "--op-ns", "100000")
    needs_device_tracing(run)
    t = run.trace
    (entry,) = t.meta["devices"]
    assert entry is t.meta["processes"][0]["devices"][0] and entry["clock"]["pairs"] >= 2
    ops = t.device_ops()
    assert len(ops) == len(expected_records(run))
    host = pd.concat([t.data_ops()[["host_op_id", "begin_ns", "end_ns"]],
                      t.kernels()[["host_op_id", "begin_ns", "end_ns"]]]).set_index("host_op_id")
    linked = ops[ops["type"] != "target"].merge(host, left_on="host_op_id", right_index=True,
                                                suffixes=("", "_host"))
    assert len(linked) == 6 * (3 + 2) and linked["begin_ns_host"].notna().all()
    # The emulated device runs the operation inside its host callbacks' begin and end.
    slack = 50_000  # the clock fit's stated error
    assert (linked["begin_ns"] >= linked["begin_ns_host"] - slack).all()
    assert (linked["end_ns"] <= linked["end_ns_host"] + slack).all()
    t.save(tmp_path / "t.parquet")
    again = ompt_py.load(tmp_path / "t.parquet")
    assert again.meta["devices"] == t.meta["devices"]
    assert again.meta["devices"][0] is again.meta["processes"][0]["devices"][0]
    pd.testing.assert_frame_equal(again.device_ops(), ops)


def test_non_emi_host_callbacks(emu, tmp_path):
    """With the EMI callbacks answered never, the non-EMI ones are registered and the
    records carry the runtime's ids."""
    run = run_emu(emu, tmp_path, "--non-emi", "--regions", "3")
    needs_device_tracing(run)
    (proc,) = run.trace.meta["processes"]
    levels = proc["runtimes"][0]["callbacks"]
    assert levels["target_emi"] == "never" and levels["target"] == "always"
    ev = run.trace.events
    count = Counter(ev["event"].tolist())
    assert count[EV_TARGET] == 6 and count[EV_DATA_OP] == 9 and count[EV_SUBMIT] == 3
    host_ids = {int(r["task_id"]) for r in ev[(ev["event"] == EV_DATA_OP)
                                                | (ev["event"] == EV_SUBMIT)]}
    for dev, _ in device_rows(run.trace):
        if int(dev["kind"]) in (EV_DATA_OP, EV_SUBMIT):
            assert int(dev["task_id"]) in host_ids
    check_delivered_once(run)


def test_nothing_recorded_after_stop(emu, tmp_path):
    run = run_emu(emu, tmp_path, "--after-stop", "5")
    devices = needs_device_tracing(run)
    late = run.records(after_stop=True)
    assert len(late) == 5 and all(r["delivered"] == 1 for r in late)
    check_delivered_once(run)  # the late records are not among the rows
    assert devices[0]["records_after_stop"] == 5


FIT_MARGIN_NS = 1_000_000


def test_device_clock_pairs_and_fit(emu, tmp_path):
    """device_clock pairs read the emulated clock (offset 5e12 ns, drift 1e-4): each pair's
    device time is the clock at a moment after its host time; the fit, where the trace has
    one, maps each kernel's device time into its host submit window within FIT_MARGIN_NS.
    A fit of two pairs on a busy machine was off by 55-102 us (the emulator's device read
    may come up to 100 us after the host's); a wrong fit (the 5e12 ns offset missed or its
    sign wrong, the device ticks taken for host ones) is off by seconds."""
    run = run_emu(emu, tmp_path, "--regions", "30", "--op-ns", "200000")
    devices = needs_device_tracing(run)
    ev = run.trace.events
    origin = run.trace.meta["origin_mono_ns"]
    pairs = ev[ev["event"] == EV_DEVICE_CLOCK]
    assert len(pairs) >= 2
    errors = []
    for p in pairs:
        host = int(p["time_ns"]) + origin
        expected = DEFAULT_OFFSET_NS + host * (1 + DEFAULT_DRIFT)
        errors.append(int(p["u64a"]) - expected)
    assert min(errors) > -5000, errors  # never before its host read (ticks-to-ns error aside)
    assert statistics.median(errors) < 100_000, errors
    clock = devices[0].get("clock")
    if clock is None:
        return  # the fit is the Python side's (stream offpy)
    assert clock["pairs"] + clock["pairs_dropped"] == len(pairs)  # outliers left out, counted
    # Against the trace's own host clock (the emulator reads the device clock between the
    # tool's submit begin and end records), so the tool's tick-to-ns anchors cancel out.
    host = run.trace.kernels().set_index("host_op_id")
    submits = run.records(lost=None, after_stop=False, type=EV_SUBMIT)
    assert submits
    for r in submits:
        host_ns = clock["slope"] * r["time"] + clock["offset_ns"]
        row = host.loc[r["host_op_id"]]
        assert row["begin_ns"] - FIT_MARGIN_NS < host_ns < row["end_ns"] + FIT_MARGIN_NS, (
            host_ns, row, clock)


SET_TRACE = {  # --set-trace SPEC: whether records come
    "rocm": ("rocm", True),
    "never": ("never", False),
    "error": ("error", False),
    "data-ops-never": ("0=never,9=never,34=never,8=always,10=always,33=always,35=always", True),
    "sometimes": ("0=never,8=sometimes,9=sometimes,10=sometimes", True),
}


@pytest.mark.parametrize("spec, records", SET_TRACE.values(), ids=SET_TRACE.keys())
def test_set_trace_answers(emu, tmp_path, spec, records):
    """Each set_trace_ompt answer is kept per record type; types answered never give no
    records, "sometimes" some (the emulator makes every other one)."""
    run = run_emu(emu, tmp_path, "--set-trace", spec, "--regions", "6")
    devices = needs_device_tracing(run)
    asked = run.truth["devices"][0]["set_trace"]
    assert asked, "the tool asked set_trace_ompt nothing"
    for etype, answer in asked.items():
        if etype != "0":  # 0: all types at once
            assert devices[0]["tracing"][EVENTS[int(etype)]] == answer, (etype, devices[0])
    assert (len(expected_records(run)) > 0) == records
    if records:
        check_delivered_once(run)


@pytest.mark.parametrize("null", ["ompt_start_trace", "ompt_advance_buffer_cursor",
                                  "ompt_get_record_ompt", "ompt_set_trace_ompt",
                                  "ompt_get_device_time"])
def test_entry_point_answered_null(emu, tmp_path, null):
    run = run_emu(emu, tmp_path, "--null", f"{null},ompt_pause_trace")
    devices = needs_device_tracing(run)
    offered = {k.removeprefix("ompt_"): v for k, v in devices[0]["entry_points"].items()}
    assert offered[null.removeprefix("ompt_")] is False and offered["flush_trace"] is True
    if null == "ompt_get_device_time":  # tracing works; no clock pairs
        check_delivered_once(run)
        assert not (run.trace.events["event"] == EV_DEVICE_CLOCK).any()
    else:  # nothing can be traced: not started, and said why
        assert devices[0]["started"] is False and devices[0]["start_error"]
        assert not device_rows(run.trace)


def test_start_trace_returning_0(emu, tmp_path):
    run = run_emu(emu, tmp_path, "--start-fail")
    devices = needs_device_tracing(run)
    assert devices[0]["started"] is False and devices[0]["start_error"]
    assert run.truth["records"] == [] and not device_rows(run.trace)


def test_unknown_types_and_bad_times_are_counted(emu, tmp_path):
    run = run_emu(emu, tmp_path, "--devices", "2", "--kernels", "2", "--unknown", "3",
                  "--bad-time", "2")  # bad times go to region 0's kernels: two of them
    devices = needs_device_tracing(run)
    for d in devices:
        assert d["records_unknown_type"] == 3
        assert d["records_bad_time"] == 2
    check_delivered_once(run)  # bad-time records kept, unknown ones not rows


@pytest.mark.parametrize("how", ["--control-flush-at", "--flush-all-at"])
def test_flush_delivers_held_buffers(emu, tmp_path, how):
    """A runtime that holds its buffers (--hold) delivers them at a flush: omp_control_tool
    (flush) through the tool's control_tool callback, or omptpy_flush_all."""
    run = run_emu(emu, tmp_path, "--hold", how, "2", "--regions", "4", "--op-ns", "100000")
    needs_device_tracing(run)
    check_delivered_once(run)
    origin = run.trace.meta["origin_mono_ns"]
    ev = run.trace.events
    region_begins = sorted(int(r["time_ns"]) for r in ev[(ev["event"] == EV_TARGET_EMI)
                                                           & (ev["endpoint"] == 1)])
    consumed = sorted(int(d["time_ns"]) for d, _ in device_rows(run.trace))
    early = [t for t in consumed if t < region_begins[2]]
    assert len(early) == len([r for r in expected_records(run)
                              if r["host_end_ns"] - origin < region_begins[2]])


# ---- a real runtime -------------------------------------------------------------------


def test_real_runtime_device_tracing(tmp_path):
    """Where the OpenMP runtime's device lookup offers ompt_start_trace (ROCm/AOMP on AMD
    GPUs, Intel oneAPI on Level Zero GPUs), an offload program under the tool gives device
    records: each delivered once, linked to its host operation, every buffer freed.

    Built with $OMPTPY_OFFLOAD_CC (clang-19) for $OMPTPY_OFFLOAD_TARGETS (the host,
    x86_64-pc-linux-gnu); on a GPU machine, e.g. OMPTPY_OFFLOAD_CC=/opt/rocm/llvm/bin/clang
    OMPTPY_OFFLOAD_TARGETS=amdgcn-amd-amdhsa (and --offload-arch in OMPTPY_OFFLOAD_FLAGS).
    """
    cc = os.environ.get("OMPTPY_OFFLOAD_CC", CLANG)
    targets = os.environ.get("OMPTPY_OFFLOAD_TARGETS", "x86_64-pc-linux-gnu")
    out = tmp_path / "target"
    flags = os.environ.get("OMPTPY_OFFLOAD_FLAGS", f"-Wl,-rpath,{LIBOMP.parent}").split()
    r = subprocess.run([cc, "-O2", "-fopenmp", f"-fopenmp-targets={targets}", *flags,
                        str(PROGRAMS / "offload" / "target.c"), "-o", str(out)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"{cc} cannot build for {targets}:\n{r.stderr[-2000:]}")
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    r = subprocess.run([str(out)], env=tool_env(trace_dir), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "sum=4950" in r.stdout, r.stderr
    trace = ompt_py.load(trace_dir)
    devices = Run({}, trace, r).devices_meta
    if not devices:
        # Seen with ASan preloaded (make test-sanitize): libomptarget initialises before
        # libomp has its tool and gives it no device events; test_target.py checks them.
        pytest.skip("no device was initialized under the tool (libomptarget did not connect "
                    "to it)")
    offering = [d for d in devices if d["entry_points"].get("ompt_start_trace",
                                                            d["entry_points"].get("start_trace"))]
    if not offering:
        pytest.skip(f"no device of this runtime offers ompt_start_trace (devices: "
                    f"{[d['type'] for d in devices]}): upstream LLVM 17-21 does not; ROCm/AOMP "
                    f"and Intel oneAPI do")
    traced = [d for d in offering if d["started"]]
    assert traced, offering
    rows = device_rows(trace)
    assert rows and sum(d["records"] for d in traced) == len(rows)
    for d in traced:
        assert d["buffers_freed"] == d["buffers_requested"] - d["zero_byte_buffers"]
    ev = trace.events
    host_ops = set(ev[(ev["event"] == EV_DATA_OP_EMI) | (ev["event"] == EV_SUBMIT_EMI)
                      | (ev["event"] == EV_DATA_OP) | (ev["event"] == EV_SUBMIT)]
                   ["task_id"].tolist())
    linked = [dev for dev, _ in rows if int(dev["kind"]) in (EV_DATA_OP, EV_SUBMIT,
                                                               EV_DATA_OP_EMI, EV_SUBMIT_EMI)]
    assert linked and all(int(dev["task_id"]) in host_ops for dev in linked)
