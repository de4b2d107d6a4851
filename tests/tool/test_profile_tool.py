"""Profile mode (OMPTPY_PROFILE=on): the tool's aggregates against a trace.

Each known-behaviour program runs once traced and once profiled, both without
address randomisation (setarch -R) so that code addresses match.  Counts per
construct kind and code address, lock acquisitions and task counts must be
equal.  Durations differ between two runs on a busy 2-core machine (waits and
thread start-up by tens of percent), so the durations of the programs of known
timing (known.c: busy-waits of set lengths) are compared with what the
profiled run measured itself, as tests/analysis compares a trace's: within 5%
plus 2 ms.
"""

from __future__ import annotations

import platform
import shutil

import numpy as np
import pandas as pd
import pytest
from conftest import run_with_tool

import ompt_py
from ompt_py import _core, schema
from ompt_py.analysis import metrics, tables
from ompt_py.errors import TraceFileError, TraceWarning
from ompt_py.io import load_profile, profile, rawfile

pytestmark = [pytest.mark.needs_clang]

NO_ASLR = ["setarch", platform.machine(), "-R"]
#: (program, arguments, whether its durations are known: compared within TOLERANCE)
CASES = [("mixed", ["20"], False), ("critical", ["50"], False), ("tasks", ["200"], False),
         ("nested", [], False), ("sections", [], False), ("single", [], False),
         ("masked", [], False), ("barrier", [], False),
         ("known", ["skewed", "2000", "20"], True),
         ("known", ["tasks", "20", "500", "20", "2000"], True),
         ("known", ["lock", "50", "200"], True),
         ("taskchain", ["100", "50"], False)]
TOLERANCE, MARGIN_NS = 0.05, 2_000_000
#: The constructs both sides have per code address (tasks: compared from the task table).
KEYS = ["construct", "kind", "codeptr"]


def _run(programs, tmp_path, name, args, **env):
    if shutil.which("setarch") is None:
        pytest.skip("setarch is needed to run both ways without address randomisation")
    out = tmp_path / ("profile" if env else "trace")
    cmd = [*NO_ASLR, programs[name], *args]
    r = run_with_tool(cmd, out, timeout=120, **env)
    assert r.returncode == 0, r.stderr
    return out, r.stdout


def _measured(stdout: str, key: str) -> float:
    """The sum of the figures the program printed after ``key``."""
    line = next(x for x in stdout.splitlines() if x.startswith(key + " "))
    return sum(float(v) for v in line.split()[1:])


def _near(got: float, want: float) -> bool:
    return abs(got - want) <= TOLERANCE * abs(want) + MARGIN_NS


@pytest.mark.parametrize(("name", "args", "timed"), CASES,
                         ids=[f"{n}-{'-'.join(a[:1])}" for n, a, _ in CASES])
def test_profile_matches_trace(programs, tmp_path, name, args, timed):
    trace = ompt_py.load(_run(programs, tmp_path, name, args)[0])
    out, stdout = _run(programs, tmp_path, name, args, OMPTPY_PROFILE="on")
    prof = load_profile(out)
    assert all(s["overflow"] == 0 for p in prof.meta["processes"] for s in p["slots"])

    inst = metrics.construct_instances(trace)
    inst = inst[~inst["construct"].isin(["task", "user region"]) & (inst["kind"] != "initial")]
    # the tool's aggregates keep the runtime's kinds: the trace's kind_raw
    traced = inst.assign(kind=inst["kind_raw"].astype(str),
                         construct=inst["construct"].astype(str)
                         ).groupby(KEYS)["duration_ns"].agg(traced="count", traced_ns="sum")
    c = prof.constructs[prof.constructs["kind"] != "initial"]
    profiled = c.groupby(KEYS)[["count", "total_ns"]].sum()
    both = traced.join(profiled, how="outer").fillna(0).reset_index()
    # libomp may pass its own code address for one acquisition of a lock (seen
    # once under AddressSanitizer): mutex constructs are compared per kind.
    mutex = both["construct"].str.startswith("mutex")
    both.loc[mutex, "codeptr"] = 0
    both = both.groupby(KEYS).sum()
    bad = both[both["traced"] != both["count"]]
    assert bad.empty, f"construct counts differ:\n{bad}"

    locks = tables.mutex(trace)
    if len(locks) or len(prof.locks):  # per kind (wait ids are heap or stack addresses)
        got = prof.locks.groupby("kind").agg(n=("acquisitions", "sum"),
                                             locks=("wait_id", "nunique"))
        acquired = locks.dropna(subset=["acquired_ns"])
        want = acquired.groupby(acquired["kind"].astype(str)).agg(
            n=("wait_id", "size"), locks=("wait_id", "nunique"))
        assert got.to_dict() == want.to_dict()

    created = tables.created(trace).groupby("codeptr").size()
    got = prof.tasks.groupby("codeptr")["created"].sum()
    assert {int(k): n for k, n in got[got > 0].items()} == \
        {int(k): n for k, n in created.items()}
    if len(created):
        runs = tables.task_pieces(trace).merge(tables.created(trace)[["task_id", "codeptr"]],
                                               on="task_id")
        assert prof.tasks["ran"].sum() == runs["task_id"].nunique()
    regions = metrics.region_threads(trace).merge(
        tables.region_intervals(trace).table[["parallel_id", "codeptr"]], on="parallel_id")
    assert set(prof.regions_threads["codeptr"]) == set(regions["codeptr"].astype(np.uint64))
    assert prof.regions_threads["implicit_tasks"].sum() == len(regions)

    if timed:
        mode = args[0]
        if mode == "skewed":  # the loop's region: its threads' busy time (imbalance())
            busy = prof.regions_threads.groupby("codeptr")["busy_ns"].sum().max()
            assert _near(busy, _measured(stdout, "busy_ns")), prof.regions_threads
        elif mode == "tasks":
            got = prof.tasks["run_total_ns"].sum()
            assert _near(got, _measured(stdout, "task_ns")), prof.tasks
        else:
            got = prof.locks["hold_total_ns"].sum()
            assert _near(got, _measured(stdout, "held_ns")), prof.locks


def test_overflow_counted_and_reported(programs, tmp_path):
    out, _ = _run(programs, tmp_path, "mixed", ["20"], OMPTPY_PROFILE="on",
                  OMPTPY_PROFILE_ENTRIES="16")
    with pytest.warns(TraceWarning, match="OMPTPY_PROFILE_ENTRIES"):
        prof = load_profile(out)
    slots = [s for p in prof.meta["processes"] for s in p["slots"]]
    assert sum(s["overflow"] for s in slots) > 0
    rows = pd.concat([prof.constructs, prof.regions_threads, prof.locks, prof.tasks])
    assert (rows.groupby("thread").size() <= 16).all()


@pytest.mark.parametrize("value", ["3", "lots", "99999999"])
def test_bad_profile_entries_gives_a_clear_message(programs, tmp_path, value):
    r = run_with_tool([programs.parallel], tmp_path / "raw", OMPTPY_PROFILE="on",
                      OMPTPY_PROFILE_ENTRIES=value)
    assert r.returncode == 0
    assert f"OMPTPY_PROFILE_ENTRIES='{value}' is not valid" in r.stderr
    assert "from 16 to 1048576" in r.stderr


def test_bad_profile_switch_gives_a_clear_message(programs, tmp_path):
    r = run_with_tool([programs.parallel], tmp_path / "raw", OMPTPY_PROFILE="maybe")
    assert "OMPTPY_PROFILE='maybe' is not valid; use on or off" in r.stderr


def test_profile_mode_writes_no_records(programs, tmp_path):
    """Only aggregates: no record; the blocks read as _core.profile() returns them
    (headers and payloads) give the file's rows; a corrupt one is a TraceFileError."""
    out, _ = _run(programs, tmp_path, "mixed", ["5"], OMPTPY_PROFILE="on")
    (path,) = rawfile.list_dir(str(out))
    raw = rawfile.scan(path)
    assert raw.nrecords == 0
    payloads = raw.blocks["PROFILE"]
    data = b"".join(schema.HEADER.pack(schema.MAGIC, _core.BLOCK_PROFILE, len(p)) + p
                    for p in payloads)
    rows, slots = profile.parse_blocks(data, "memory")
    want, want_slots = profile.read_payloads(payloads, path)
    assert slots == want_slots and (rows == want).all() and len(rows)
    with pytest.raises(TraceFileError, match="corrupt"):
        profile.read_payloads([payloads[0][:-1]], path)
    with pytest.raises(TraceFileError, match="header is corrupt"):
        profile.parse_blocks(b"x" * 16 + data, "memory")


@pytest.mark.parametrize(("size", "want"), [(None, 256 << 10), ("1M", 1 << 20)])
def test_profile_mode_buffer_is_small_unless_set(programs, tmp_path, size, want):
    """Profile mode keeps records only for handlers and samples: each thread maps
    four chunks, not the tracing default of 8 MiB, unless OMPTPY_BUFFER_SIZE says."""
    env = {"OMPTPY_BUFFER_SIZE": size} if size else {}
    out, _ = _run(programs, tmp_path, "mixed", ["5"], OMPTPY_PROFILE="on", **env)
    (path,) = rawfile.list_dir(str(out))
    assert rawfile.scan(path).meta["config"]["buffer_bytes"] == want
