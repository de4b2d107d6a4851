"""The zero-copy memory sink (docs/internals.md, "Buffers, memory and lost records"): take()
quiesces threads that may be inside callbacks, so windows started and stopped
while OpenMP threads keep writing must each hold exactly what was counted."""

from __future__ import annotations

import json

import pytest
from conftest import run_python

pytestmark = pytest.mark.needs_clang

# The windows open and close while the OpenMP threads of tests/programs/lib/stream.c
# (conftest's stream_lib) write: its run() is called through ctypes, which releases
# the GIL.
WINDOWS = r"""
import ctypes, json, threading, time
import numpy as np
import ompt_py
from ompt_py import _core

PARALLEL_BEGIN, PARALLEL_END, DISPATCH = 3, 4, 32
lib = ctypes.CDLL(LIB)
lib.run.restype = ctypes.c_long
lib.run.argtypes = [ctypes.c_long]
N = 200
# A handler of every event keeps every callback registered between windows:
# unregistering one (ompt_set_callback(e, NULL) when the last consumer goes)
# while OpenMP threads run races in libomp 19 (a thread that saw the event
# enabled calls the NULL pointer: seen in __kmpc_dispatch_next_8).  It also
# makes the handlers' tap read the chunks while take() retires them.
seen = [0]
handler = ompt_py.on(None, lambda ev: seen.__setitem__(0, seen[0] + len(ev)))
producer = threading.Thread(target=lib.run, args=(N,), daemon=True)
producer.start()
time.sleep(0.05)
out = []
try:
    for k in range(WINDOWS_N):
        t = ompt_py.trace().start()
        # 0 to 8 ms; every tenth 100 ms, which holds whole regions even when the
        # machine is so busy that a region outlasts the short windows
        time.sleep(0.002 * (k % 5) if k % 10 else 0.1)
        t.stop()
        ev = t.events
        (proc,) = t.meta["processes"]
        threads, counts = np.unique(ev["thread"], return_counts=True)
        per = dict(zip(threads.tolist(), counts.tolist()))
        pid = ev["parallel_id"]
        whole = set(pid[ev["event"] == PARALLEL_BEGIN].tolist()) & set(
            pid[ev["event"] == PARALLEL_END].tolist())
        disp = pid[ev["event"] == DISPATCH]
        in_whole = disp[np.isin(disp, list(whole))]
        ids, iters = np.unique(in_whole, return_counts=True)
        keys = np.stack([ev["thread"].astype(np.int64), ev["time_ns"], ev["event"].astype(np.int64),
                         ev["endpoint"].astype(np.int64)], axis=1)
        dups = len(keys) - len(np.unique(keys, axis=0)) if len(keys) else 0
        stats = json.loads(_core.stats())
        out.append({
            "n": len(ev),
            "written": proc["written"],
            "dropped": proc["dropped"],
            "per_thread_ok": all(th["written"] == per.get(th["thread"], 0)
                                 for th in proc["threads"]),
            "whole": len(whole),
            "whole_ok": bool((iters == N).all()) and len(ids) == len(whole),
            "bad_iters": sorted(set(iters.tolist()) - {N}), "nids": len(ids),
            "dups": int(dups),
            "buffer_bytes": stats["buffer_bytes"],
            "live": sum(th["live"] for th in stats["threads"]),
            "zero_copy": proc["config"]["zero_copy"],
        })
finally:
    lib.stop()
    producer.join(30)
assert ompt_py.drain_handlers(timeout=60)
assert seen[0] > 0
print(json.dumps(out))
"""


@pytest.mark.parametrize("env", [{}, {"OMPTPY_SAMPLE_HZ": "2000"}, {"OMPTPY_ZERO_COPY": "0"}],
                         ids=["plain", "sampling", "copying"])
def test_windows_while_threads_write(stream_lib, env):
    """Windows opened and closed from one Python thread while OpenMP threads
    started from another keep writing: every window's records are exactly
    the ones counted (per thread), none dropped or duplicated, every region
    whole inside a window has all its loop iterations, and a thread holds one
    chunk (64 KiB) of memory of its own."""
    n = 40
    code = f"LIB = {str(stream_lib)!r}\nWINDOWS_N = {n}\n" + WINDOWS
    r = run_python(code, env, timeout=120)
    windows = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(windows) == n
    zero_copy = "OMPTPY_ZERO_COPY" not in env
    for w in windows:
        assert w["zero_copy"] == zero_copy, w
        assert w["written"] == w["n"], w
        assert w["dropped"] == 0, w
        assert w["per_thread_ok"], w
        assert w["whole_ok"], json.dumps(w)
        assert w["dups"] == 0, w
        if zero_copy:
            assert w["buffer_bytes"] <= 65536 * max(w["live"], 1) + 2 * 65536, w
    assert sum(w["whole"] for w in windows) > 0
    assert sum(w["n"] for w in windows) > 1000


@pytest.mark.parametrize(("value", "zero_copy"), [("off", False), ("false", False), ("no", False),
                                                  ("0", False), ("on", True), ("1", True)])
def test_zero_copy_setting_spellings(value, zero_copy):
    """OMPTPY_ZERO_COPY takes the usual spellings of off and on."""
    r = run_python("import ompt_py; print(ompt_py.status()['config']['zero_copy'])",
                   {"OMPTPY_ZERO_COPY": value})
    assert r.stdout.split()[-1] == str(zero_copy)
