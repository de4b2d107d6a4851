"""Python handlers of OpenMP events (ompt_py.on / off): batches on ompt_py's own
dispatcher thread, C filters, the delay bound, dropped events, errors in
handlers, and how handlers and trace windows coexist.

Every scenario runs in a fresh python (tests/conftest.py): the extension
modules are tests/programs/ext/ompt_work_ext.c (its functions keep the GIL
while OpenMP threads run) and tests/programs/handlers/scripting_ext.c.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import EV, run_scripting

import ompt_py
from ompt_py.records import EVENT_DTYPE

pytestmark = pytest.mark.needs_clang


run = run_scripting  # (the JSON the snippet printed last, the CompletedProcess)


@pytest.mark.pythons
def test_task_create_handler_receives_exactly_n_events(omp_ext, scripting, tmp_path):
    n = 1000
    batches = tmp_path / "batches.npy"
    out, _ = run(f"""
got, frames = [], []

@ompt_py.on("task_create")
def h(ev):
    got.append(ev)

f = ompt_py.on("task_create", frames.append, frame=True)
w.tasks({n})
assert ompt_py.drain_handlers(), ompt_py.handler_stats()
ev = np.concatenate(got)
np.save({str(batches)!r}, ev)
df = frames[0] if len(frames) == 1 else __import__("pandas").concat(frames)
print(json.dumps({{"received": h.received, "calls": h.calls, "errors": h.errors,
                  "readonly": not got[0].flags.writeable,
                  "is_handler": isinstance(h, ompt_py.Handler),
                  "frame_rows": len(df), "frame_events": sorted(set(df["event"].astype(str))),
                  "frame_received": f.received, "stats": ompt_py.handler_stats()}}))
""", omp_ext, scripting)
    ev = np.load(batches)
    assert ev.dtype == EVENT_DTYPE  # the dtype of Trace.events
    assert len(ev) == n and out["received"] == n
    assert set(ev["event"].tolist()) == {EV["task_create"]}
    assert len(set(ev["task_id"].tolist())) == n  # n distinct tasks, none twice
    assert out["calls"] >= 1 and out["errors"] == 0 and out["readonly"] and out["is_handler"]
    assert out["frame_rows"] == n and out["frame_events"] == ["task_create"]
    assert out["frame_received"] == n
    assert out["stats"]["dropped"] == 0 and out["stats"]["backlog"] == 0
    # only what the handlers want is queued: task_create, not the other events of the region
    assert out["stats"]["queued"] == n


def test_per_thread_order_matches_the_trace(omp_ext, scripting, tmp_path):
    path = tmp_path / "handler.npy"
    trace_path = tmp_path / "t.parquet"
    out, _ = run(f"""
got = []
ompt_py.on(None, got.append)
w.parallel(2)
with ompt_py.trace() as t:
    w.tasks(300)
    w.loops(100)
    w.critical(50)
    w.parallel(1)
assert ompt_py.drain_handlers()
t.save({str(trace_path)!r})
np.save({str(path)!r}, np.concatenate(got))
print(json.dumps({{"batches": len(got), "origin": t.meta["origin_mono_ns"]}}))
""", omp_ext, scripting)
    handled = np.load(path)
    trace = ompt_py.load(trace_path)
    fields = [f for f in EVENT_DTYPE.names if f != "time_ns"]
    threads = sorted(set(trace.events["thread"].tolist()))
    assert len(threads) == 2
    for th in threads:
        mine = handled[handled["thread"] == th]
        # in order per thread, across batches too
        assert np.all(np.diff(mine["time_ns"]) >= 0)
        window = trace.events[trace.events["thread"] == th]
        # the trace window is one contiguous run of the handler's records of the thread
        h_rows = mine[fields].tolist()
        t_rows = window[fields].tolist()
        starts = [k for k in range(len(h_rows) - len(t_rows) + 1)
                  if h_rows[k] == t_rows[0] and h_rows[k:k + len(t_rows)] == t_rows]
        assert len(starts) == 1, (th, len(h_rows), len(t_rows))
        k = starts[0]
        # the same events at the same times (the trace counts from its origin)
        delta = mine["time_ns"][k:k + len(t_rows)] - (window["time_ns"] + out["origin"])
        assert np.abs(delta).max() < 10_000, delta
    # the handler saw the regions before the window too
    assert len(handled) > len(trace.events)


def test_frames_of_error_events_carry_their_message(omp_ext, scripting):
    """A handler's frame names an error's message from the live table of strings."""
    out, _ = run("""
frames = []
ompt_py.on("error", frames.append, frame=True)
s.error_directive()
assert ompt_py.drain_handlers()
df = frames[0]
print(json.dumps({"message": df["message"].tolist(), "length": df["message_length"].tolist(),
                  "kind": df["kind"].astype(str).tolist()}))
""", omp_ext, scripting)
    assert out == {"message": ["from scripting_ext"], "length": [18], "kind": ["warning"]}


def test_delay_bound_on_a_long_running_program(omp_ext, scripting):
    """Batches reach the handlers while the program runs, each within the delay of
    its oldest event, plus what the scheduler and the GIL cost any Python thread
    meanwhile: a thread beside the dispatcher measures how late its 10 ms sleeps
    end (a few ms on a quiet machine, tens with CPU-bound processes beside)."""
    out, _ = run("""
import threading
seen = []

@ompt_py.on()
def h(ev):
    now = time.monotonic_ns()
    seen.append((now, now - int(ev["time_ns"].min()), len(ev)))

quick = []
ompt_py.on("task_create", lambda ev: quick.append(time.monotonic_ns() - int(ev["time_ns"].min())),
           delay=0.02)
late, done = [], threading.Event()

def ticker():
    while not done.is_set():
        due = time.monotonic_ns() + 10_000_000
        time.sleep(0.01)
        late.append(time.monotonic_ns() - due)

beside = threading.Thread(target=ticker)
beside.start()
t0 = time.monotonic_ns()
regions = s.steady(3.0, 2000)       # 3 s of events, the GIL released
t1 = time.monotonic_ns()
done.set()
beside.join()
assert ompt_py.drain_handlers()
during = [x for x in seen if x[0] <= t1]
print(json.dumps({"regions": regions, "t0": t0, "t1": t1, "during": during, "late": late,
                  "quick": quick, "events": sum(x[2] for x in seen)}))
""", omp_ext, scripting)
    during = out["during"]
    late = np.array(out["late"]) / 1e6
    # a region every 2 ms when the program has the CPUs (1,000 or more in 3 s), each
    # with 4 tasks: enough for many batches even when other processes slow it down
    assert out["regions"] >= 20 and len(late) >= 20
    # delivered while the program ran, in many batches, the first one soon after it began
    assert len(during) >= 10
    first_ms = (during[0][0] - out["t0"]) / 1e6
    assert first_ms <= 500 + late.max(), (first_ms, np.sort(late)[-5:])
    delays = np.array([d for _, d, _ in during]) / 1e6
    # delay=0.05 (default): the oldest event of each batch waited at most 50 ms, more
    # only by as much as the scheduler kept Python threads waiting
    assert np.percentile(delays, 95) <= 50 + np.percentile(late, 95), (
        np.sort(delays)[-10:], np.sort(late)[-10:])
    # a stall of the tool would take seconds
    assert delays.max() <= 1000 + late.max(), (np.sort(delays)[-10:], np.sort(late)[-10:])
    quick = np.array(out["quick"]) / 1e6  # the handler with delay=0.02 sets the pace
    assert np.percentile(quick, 95) <= 20 + np.percentile(late, 95), (
        np.sort(quick)[-10:], np.sort(late)[-10:])


def test_gil_held_in_a_parallel_region_with_handlers_registered(omp_ext, scripting):
    # busy_with_gil keeps the GIL while both OpenMP threads make 100,000 dispatch
    # events (a count: as many on a busy machine): the dispatcher cannot run
    # handlers meanwhile; the queue (1 MiB: 16,384 records) fills and drops, the
    # OpenMP threads never wait, and the program finishes.
    out, r = run("""
import warnings
warnings.simplefilter("always")
got = []
h = ompt_py.on("dispatch", lambda ev: got.append(len(ev)))
iterations = s.busy_with_gil(100_000)
assert ompt_py.drain_handlers(timeout=60)
st = ompt_py.handler_stats()
print(json.dumps({"iterations": iterations, "received": h.received, "stats": st}))
""", omp_ext, scripting, env={"OMPTPY_HANDLER_QUEUE": "1M"}, timeout=300)
    st = out["stats"]
    assert out["iterations"] == 100_000
    # every dispatch event was either delivered or counted as dropped
    assert out["received"] + st["dropped"] == out["iterations"]
    assert st["queued"] == out["received"]
    assert st["dropped"] > 0
    assert "HandlerWarning" in r.stderr and "were dropped" in r.stderr
    assert "OMPTPY_HANDLER_QUEUE" in r.stderr


def test_block_waits_instead_of_dropping(omp_ext, scripting):
    n = 20_000
    out, _ = run(f"""
def slow(ev):
    time.sleep(0.002)
h = ompt_py.on("task_create", slow, block=True)
s.tasks_nogil({n})     # releases the GIL: OpenMP threads may wait for the handler
assert ompt_py.drain_handlers(timeout=60)
print(json.dumps({{"received": h.received, "calls": h.calls, "stats": ompt_py.handler_stats()}}))
""", omp_ext, scripting, env={"OMPTPY_HANDLER_QUEUE": "64K"})
    assert out["received"] == n
    assert out["stats"]["dropped"] == 0
    assert out["calls"] >= n // out["stats"]["capacity"]


def test_slow_handler_drops_are_counted_and_reported(omp_ext, scripting):
    n = 20_000
    out, r = run(f"""
done = threading.Event()
def slow(ev):
    done.wait()  # until every event is in the queue: it must overflow, however fast
h = ompt_py.on("task_create", slow)
s.tasks_nogil({n})
# The records may still be in the threads' buffers (on a busy machine nothing has
# drained them yet): push them into the queue while slow() holds the dispatcher.
# Were this left to drain_handlers, after done.set(), a free dispatcher could keep up.
ompt_py._core.flush()
done.set()
assert ompt_py.drain_handlers(timeout=60)
print(json.dumps({{"received": h.received, "stats": ompt_py.handler_stats()}}))
""", omp_ext, scripting, env={"OMPTPY_HANDLER_QUEUE": "64K"})
    st = out["stats"]
    assert st["capacity"] == 1024  # 64 KiB of 64-byte records
    assert st["dropped"] > 0
    assert out["received"] + st["dropped"] == n
    assert f"({st['dropped']} in all)" in r.stderr or "were dropped" in r.stderr


@pytest.mark.pythons
def test_handler_that_raises_is_reported_once_and_counted(omp_ext, scripting):
    out, r = run("""
good = []

@ompt_py.on("task_create")
def bad(ev):
    raise ValueError("handler bug 4711")

@ompt_py.on("task_create")
def fine(ev):
    good.append(len(ev))

for _ in range(5):
    w.tasks(10)
    assert ompt_py.drain_handlers()
print(json.dumps({"errors": bad.errors, "calls": bad.calls, "received": bad.received,
                  "good": sum(good), "fine_errors": fine.errors}))
""", omp_ext, scripting)
    assert out["errors"] == out["calls"] >= 5
    assert out["received"] == 50 and out["good"] == 50 and out["fine_errors"] == 0
    # the exception's line (Python 3.13 also shows the source line of -c code: the raise)
    assert r.stderr.count("ValueError: handler bug 4711") == 1, r.stderr
    assert r.stderr.count("raised an exception") == 1
    assert "Traceback (most recent call last)" in r.stderr
    assert re.search(r", in bad\n( .*\n)?ValueError: handler bug 4711", r.stderr), r.stderr


def test_c_filters_threads_and_code_range(omp_ext, scripting):
    out, _ = run("""
mine = ompt_py.on("parallel_begin", lambda ev: None, codeptr="scripting_ext")
one = ompt_py.on("implicit_task", lambda ev: None, threads=[0])
w.parallel(3)               # regions in ompt_work_ext: outside the code range
s.c_regions(2)              # 2 regions in scripting_ext
assert ompt_py.drain_handlers()
first = ompt_py.handler_stats()
got = []
every = ompt_py.on("implicit_task", got.append)
one_before = one.received
w.parallel(5)
assert ompt_py.drain_handlers()
ev = np.concatenate(got)
print(json.dumps({"mine": mine.received, "one_first": one_before, "first": first,
                  "one": one.received - one_before, "thread0": int((ev["thread"] == 0).sum()),
                  "threads": sorted(set(ev["thread"].tolist()))}))
""", omp_ext, scripting)
    assert out["mine"] == 2
    # filtered in C: only what the two handlers want was queued
    first = out["first"]
    assert first["queued"] == out["mine"] + out["one_first"]
    # thread 0: begin and end of each region's implicit task, and the begin of the
    # initial task (the runtime started after the handlers were registered)
    assert out["one_first"] == 2 * 5 + 1
    assert first["filtered"] > 0 and first["dropped"] == 0
    # thread 0's share of the implicit-task events, and nothing of thread 1
    assert out["one"] == out["thread0"] == 2 * 5
    assert out["threads"] == [0, 1]


def test_handlers_added_and_removed_at_any_time(omp_ext, scripting):
    out, _ = run("""
counts = {}
def counter(name):
    def h(ev):
        counts[name] = counts.get(name, 0) + len(ev)
    return h

a = ompt_py.on("parallel_begin", counter("a"))
w.parallel(2)
assert ompt_py.drain_handlers()
b = ompt_py.on("parallel_begin", counter("b"))   # gets nothing from before
w.parallel(3)
assert ompt_py.drain_handlers()
a.remove()
w.parallel(4)
assert ompt_py.drain_handlers()
fn = counter("c")
ompt_py.on("parallel_begin", fn)
w.parallel(5)
assert ompt_py.drain_handlers()
removed = [ompt_py.off(fn), ompt_py.off(fn), ompt_py.off(b)]
w.parallel(6)
assert ompt_py.drain_handlers()
once = []

def first_batch_only(ev):            # removes itself, from the dispatcher thread
    once.append(len(ev))
    ompt_py.off(first_batch_only)

ompt_py.on("parallel_begin", first_batch_only)
for _ in range(3):
    w.parallel(1)
    assert ompt_py.drain_handlers()
print(json.dumps({"counts": counts, "removed": removed, "active": len(ompt_py.active_handlers()),
                  "once": once, "stats": ompt_py.handler_stats()}))
""", omp_ext, scripting)
    assert out["counts"] == {"a": 5, "b": 12, "c": 5}
    assert out["removed"] == [True, False, True]
    assert out["once"] == [1]
    assert out["active"] == 0 and out["stats"]["active"] is False


def test_trace_windows_and_handlers_coexist(omp_ext, scripting, tmp_path):
    path = tmp_path / "t.parquet"
    out, _ = run(f"""
h = ompt_py.on("parallel_begin")(lambda ev: None)
w.parallel(2)                     # handlers only: nothing for the trace
with ompt_py.trace() as t:
    w.parallel(3)
w.parallel(4)
with ompt_py.trace() as u:        # a later window: only its own events
    w.parallel(1)
assert ompt_py.drain_handlers()
t.save({str(path)!r})
print(json.dumps({{"handled": h.received, "t": int((t.events["event"] == 3).sum()),
                  "u": int((u.events["event"] == 3).sum()), "t_written": t.meta["written"],
                  "t_len": len(t.events), "u_implicit": int((u.events["event"] == 7).sum()),
                  "recording": ompt_py.status()["recording"]}}))
""", omp_ext, scripting)
    assert out["handled"] == 10
    assert out["t"] == 3 and out["u"] == 1
    assert out["t_written"] == out["t_len"]  # written counts the trace's records only
    assert out["u_implicit"] >= 2  # a window records every event, whatever handlers want
    assert out["recording"] is False
    t = ompt_py.load(path)
    assert {"implicit_task", "sync_region"} <= set(t.to_pandas()["event"].astype(str))


def test_bad_arguments_are_refused_with_the_allowed_values(omp_ext, scripting):
    out, _ = run("""
errors = {}
for name, call in [
    ("event", lambda: ompt_py.on("task_craete")),
    ("event_list", lambda: ompt_py.on(["parallel_begin", "nope"], print)),
    ("threads", lambda: ompt_py.on("task_create", print, threads=[])),
    ("module", lambda: ompt_py.on("task_create", print, codeptr="no_such_module.so")),
    ("range", lambda: ompt_py.on("task_create", print, codeptr=(10, 5))),
    ("delay", lambda: ompt_py.on("task_create", print, delay=0)),
    ("fn", lambda: ompt_py.on("task_create", 42)),
]:
    try:
        call()
        errors[name] = None
    except (ValueError, TypeError) as e:
        errors[name] = f"{type(e).__name__}: {e}"
print(json.dumps({"errors": errors, "active": len(ompt_py.active_handlers())}))
""", omp_ext, scripting)
    errors = out["errors"]
    assert all(errors.values()), errors
    assert "task_craete" in errors["event"]
    for allowed in ("task_create", "parallel_begin", "region", "dispatch"):
        assert allowed in errors["event"]
    assert "nope" in errors["event_list"]
    assert "no_such_module.so" in errors["module"]
    assert errors["fn"].startswith("TypeError")
    assert out["active"] == 0


def test_bad_handler_queue_setting(omp_ext, scripting):
    out, _ = run("""
out = {}
try:
    ompt_py.on("task_create", print)
except ompt_py.ConfigError as e:
    out["error"] = str(e)
w.parallel(1)                       # the program still runs, untraced
print(json.dumps(out))
""", omp_ext, scripting, env={"OMPTPY_HANDLER_QUEUE": "12"})
    assert "OMPTPY_HANDLER_QUEUE='12'" in out["error"] and "64K" in out["error"]


def test_handlers_refused_when_the_tool_is_off(omp_ext, scripting):
    out, _ = run("""
errors = []
for call in (lambda: ompt_py.on("task_create", print),
             lambda: ompt_py.native_handler("task_create", "void handle() {}")):
    try:
        call()
    except ompt_py.AttachError as e:
        errors.append(str(e))
w.parallel(1)
print(json.dumps(errors))
""", omp_ext, scripting, env={"OMPTPY_TOOL": "off"})
    assert len(out) == 2 and all("OMPTPY_TOOL" in e for e in out)
