"""Buffer overflow policies (OMPTPY_OVERFLOW): flush (the default: a thread
whose buffer is full moves its own full chunks to the sink), drop (count and
lose the record), grow (allocate more chunks).

`many N` is one region of 2 threads with a dynamic,1 loop of N iterations.
Run to the end under the tool it makes exactly E = N + 32 records (N >= 1):
N dispatch events, plus 20 for the region (parallel_begin/end; per thread
implicit_task, implicit-barrier sync_region and sync_region_wait begin/end),
4 for the threads (thread_begin/end), 2 for the initial task's implicit task,
4 work loop_dynamic begin/end and 8 for the loop's implicit workshare barrier.
test_event_count_formula checks E without any pressure on the buffers.

The policies are those of the per-thread buffers that the file is written
from with write() (OMPTPY_ZERO_COPY=off): with OMPTPY_BUFFER_SIZE=256K a
thread owns at most 3 chunks of 1024 records, and the drainer (which polls
every millisecond while chunks arrive and backs off up to OMPTPY_DRAIN_MS=1000
when idle) moves them, so a burst of 10^5 records per thread can overflow.  The
default route writes in place into the file, whose regions the tool extends
(test_burst_in_place_loses_nothing).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import DISPATCH_WS_LOOP_CHUNK, per_thread, run_with_tool, select, summary

import ompt_py

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]

FIXED = 32
BURST = 200_000
PRESSURE = {"OMPTPY_BUFFER_SIZE": "256K", "OMPTPY_DRAIN_MS": "1000", "OMPTPY_ZERO_COPY": "off"}


def run_many(programs, tmp_path, n, *args, **env):
    out = tmp_path / "raw"
    r = run_with_tool([programs.many, str(n), *args], out, timeout=120, **env)
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    return t, proc


def check_accounting(t, proc):
    """Per thread: `written` is exactly the number of that thread's records in the trace."""
    per = Counter(t.events["thread"].tolist())
    for th in proc["threads"]:
        assert th["written"] == per.get(th["thread"], 0), th
    assert proc["written"] == len(t.events)
    assert t.meta["written"] == proc["written"] and t.meta["dropped"] == proc["dropped"]
    # whatever was kept is intact: known events, time order per thread,
    # each loop iteration at most once
    assert set(t.events["event"].tolist()) <= set(ompt_py.records.EVENTS)
    for _, rows in per_thread(t.events).items():
        assert np.all(np.diff(rows["time_ns"]) >= 0)
    d = select(t.events, "dispatch")
    assert set(d["kind"].tolist()) <= {DISPATCH_WS_LOOP_CHUNK}
    assert len(np.unique(d["u64a"])) == len(d)
    assert set(d["u64b"].tolist()) <= {1}


def test_event_count_formula(programs, tmp_path):
    n = 1000
    t, proc = run_many(programs, tmp_path, n)
    assert proc["dropped"] == 0
    assert proc["written"] == n + FIXED, summary(t.events)
    check_accounting(t, proc)
    assert sorted(select(t.events, "dispatch")["u64a"].tolist()) == list(range(n))


def test_drop_counts_every_lost_record(programs, tmp_path):
    """Two chunks per thread and no early wake-up (a writer wakes the drainer when
    fewer than a quarter of its chunks are free, which with two never happens):
    a writer that fills both chunks between two of the drainer's polls drops.
    While chunks arrive the drainer polls every millisecond, and whether a burst
    outruns that is the scheduler's choice (on an idle machine under ASan the
    drainer kept up with five bursts in a row): so the program first sleeps with
    the runtime started, while the idle drainer backs off (sleeps of 2, 4, ...,
    512 ms: it wakes 510 ms and 1022 ms after it starts), and bursts in the
    middle of the 512 ms sleep, at 750 ms (at 500 ms, the burst met the wake at
    510 ms now and then, and the drainer, polling every millisecond from then
    on, kept up: CI failed); its writers fill their chunks long before it
    wakes.  Every record is accounted for exactly, and some dropped."""
    pressure = {**PRESSURE, "OMPTPY_BUFFER_SIZE": "128K"}
    t, proc = run_many(programs, tmp_path, BURST, "pause=750", OMPTPY_OVERFLOW="drop",
                       **pressure)
    assert proc["config"]["overflow"] == "drop"
    assert proc["config"]["buffer_bytes"] == 128 << 10
    total = sum(th["written"] + th["dropped"] for th in proc["threads"])
    assert total == BURST + FIXED
    assert proc["written"] + proc["dropped"] == BURST + FIXED
    check_accounting(t, proc)
    assert proc["dropped"] > 0, "the burst after the pause overflowed no buffer"


def test_grow_loses_nothing(programs, tmp_path):
    t, proc = run_many(programs, tmp_path, BURST, OMPTPY_OVERFLOW="grow", **PRESSURE)
    assert proc["config"]["overflow"] == "grow"
    assert proc["dropped"] == 0
    assert all(th["dropped"] == 0 for th in proc["threads"])
    assert proc["written"] == BURST + FIXED
    check_accounting(t, proc)
    assert sorted(select(t.events, "dispatch")["u64a"].tolist()) == list(range(BURST))


@pytest.mark.parametrize("explicit", [True, False], ids=["flush", "default"])
def test_flush_loses_nothing(programs, tmp_path, explicit):
    env = {"OMPTPY_OVERFLOW": "flush"} if explicit else {}
    t, proc = run_many(programs, tmp_path, BURST, **env, **PRESSURE)
    assert proc["config"]["overflow"] == "flush"
    assert proc["dropped"] == 0
    assert all(th["dropped"] == 0 for th in proc["threads"])
    assert proc["written"] == BURST + FIXED
    check_accounting(t, proc)
    assert sorted(select(t.events, "dispatch")["u64a"].tolist()) == list(range(BURST))


def test_burst_in_place_loses_nothing(programs, tmp_path):
    """In place, with the smallest regions (64 MiB: 10^6 records) and a drainer that
    sleeps long: the burst of 2.5 x 10^6 records takes three regions, which the
    drainer or else the writers add; nothing is dropped and every iteration is
    there once (with a tool_stall record for each time a writer made room itself:
    tests/tool/test_stalls.py)."""
    n = 2_500_000
    t, proc = run_many(programs, tmp_path, n, OMPTPY_RESERVE="1M", OMPTPY_DRAIN_MS="1000")
    assert proc["config"]["zero_copy"]
    assert proc["dropped"] == 0 and proc["lost"] == 0
    assert proc["written"] == n + FIXED + len(t.tool_stalls())
    check_accounting(t, proc)
    assert sorted(select(t.events, "dispatch")["u64a"].tolist()) == list(range(n))
