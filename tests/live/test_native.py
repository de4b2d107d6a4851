"""Native handlers (ompt_py.native_handler): C compiled with cffi, called by the
tool on the OpenMP thread right after it writes a record, without Python.

Each scenario runs in a fresh python with the extensions of
tests/programs/ext/ompt_work_ext.c and tests/programs/handlers/scripting_ext.c.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest
from conftest import CSRC_INCLUDE, run_scripting

import ompt_py

pytestmark = pytest.mark.needs_clang


#: The README's example: per source location (codeptr), the number of parallel
#: regions, their total duration and a histogram of durations (bin k: [2^k, 2^(k+1))
#: clock ticks), paired per encountering thread.  No locks: per-thread stacks,
#: atomic counters.
HISTOGRAM_STATE = """
#define SLOTS 64
#define THREADS 256
#define DEPTH 14
struct per_thread { uint64_t begin[DEPTH], depth, pad; };  /* 128 bytes: no false sharing */
struct hist {
    uint64_t codeptr[SLOTS], count[SLOTS], total[SLOTS], bins[SLOTS][64];
    struct per_thread thread[THREADS];
    uint64_t lost;
}
"""
HISTOGRAM_SOURCE = """
static void add(uint64_t *p, uint64_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

void handle(const omptpy_record *r, struct hist *h) {
    if (r->thread >= THREADS) { add(&h->lost, 1); return; }
    struct per_thread *me = &h->thread[r->thread];   /* only this thread writes it */
    if (r->event == OMPTPY_EVENT_PARALLEL_BEGIN) {
        if (me->depth < DEPTH) me->begin[me->depth] = r->time;
        me->depth++;
        return;
    }
    if (me->depth == 0 || --me->depth >= DEPTH) { add(&h->lost, 1); return; }
    uint64_t duration = r->time - me->begin[me->depth];
    uint32_t i = (uint32_t)(r->codeptr >> 4) % SLOTS;
    for (int n = 0; n < SLOTS; n++, i = (i + 1) % SLOTS) {
        uint64_t seen = __atomic_load_n(&h->codeptr[i], __ATOMIC_ACQUIRE);
        if (seen == r->codeptr) break;
        if (seen == 0 && (__atomic_compare_exchange_n(&h->codeptr[i], &seen, r->codeptr, 0,
                                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
                          || seen == r->codeptr)) break;
    }
    add(&h->count[i], 1);
    add(&h->total[i], duration);
    add(&h->bins[i][63 - __builtin_clzll(duration | 1)], 1);
}
"""


run = functools.partial(run_scripting, timeout=180)


def histogram_snippet(trace_path) -> str:
    return f"""
h = ompt_py.native_handler(["parallel_begin", "parallel_end"], {HISTOGRAM_SOURCE!r},
                           state={HISTOGRAM_STATE!r})
with ompt_py.trace() as t:
    w.parallel(30)
    s.c_regions(12)
    for _ in range(5):
        w.nested()
h.remove()
t.save({str(trace_path)!r})
st = h.state
slots = {{}}
for i in range(64):
    if st.codeptr[i]:
        slots[str(st.codeptr[i])] = {{"count": st.count[i], "total": st.total[i],
                                     "bins": {{k: st.bins[i][k] for k in range(64)
                                              if st.bins[i][k]}}}}
print(json.dumps({{"slots": slots, "lost": st.lost, "ns_per_tick": ompt_py.ns_per_tick()}}))
"""


def trace_histogram(regions: pd.DataFrame) -> dict[int, dict]:
    out = {}
    for codeptr, group in regions.groupby("codeptr"):
        durations = group["duration_ns"].to_numpy(np.int64)
        out[int(codeptr)] = {"count": len(durations), "durations": durations}
    return out


@pytest.mark.pythons
def test_histogram_equals_the_one_from_the_trace(omp_ext, scripting, tmp_path):
    # OMPTPY_CLOCK=monotonic: clock ticks are nanoseconds, so the handler's bins
    # are the trace's (within the trace's rounding to whole nanoseconds).
    path = tmp_path / "t.parquet"
    out, _ = run(histogram_snippet(path), omp_ext, scripting, env={"OMPTPY_CLOCK": "monotonic"})
    assert out["lost"] == 0
    regions = ompt_py.load(path).parallel_regions()
    assert regions.attrs["unmatched_begins"] == regions.attrs["unmatched_ends"] == 0
    expected = trace_histogram(regions)
    native = {int(k): v for k, v in out["slots"].items()}
    # three locations: ompt_work_ext's region, scripting_ext's, and nested()'s two levels
    assert len(expected) >= 3
    assert set(native) == set(expected)
    for codeptr, exp in expected.items():
        got = native[codeptr]
        assert got["count"] == exp["count"], codeptr
        assert abs(got["total"] - exp["durations"].sum()) <= 2 * exp["count"]
        bins = np.floor(np.log2(np.maximum(exp["durations"], 1))).astype(int)
        trace_bins = {int(k): int(n) for k, n in zip(*np.unique(bins, return_counts=True))}
        # a duration within 2 ns of a power of two may fall either side of it
        near_edge = sum(1 for d in exp["durations"]
                        if min(abs(d - 2 ** k) for k in range(1, 63)) <= 2)
        got_bins = {int(k): v for k, v in got["bins"].items()}
        diff = sum(abs(got_bins.get(k, 0) - trace_bins.get(k, 0))
                   for k in set(got_bins) | set(trace_bins))
        assert diff <= 2 * near_edge, (codeptr, got_bins, trace_bins)


def test_histogram_in_clock_ticks(omp_ext, scripting, tmp_path):
    # the default clock (the TSC where invariant): durations in ticks, converted
    # with ompt_py.ns_per_tick()
    path = tmp_path / "t.parquet"
    out, _ = run(histogram_snippet(path), omp_ext, scripting)
    expected = trace_histogram(ompt_py.load(path).parallel_regions())
    native = {int(k): v for k, v in out["slots"].items()}
    assert set(native) == set(expected)
    for codeptr, exp in expected.items():
        assert native[codeptr]["count"] == exp["count"]
        total_ns = native[codeptr]["total"] * out["ns_per_tick"]
        assert total_ns == pytest.approx(exp["durations"].sum(), rel=1e-3, abs=100 * exp["count"])


def test_state_is_read_live_without_python_on_the_hot_path(omp_ext, scripting):
    out, _ = run("""
n = ompt_py.native_handler("task_create", '''
void handle(const omptpy_record *r, struct counter *c) {
    (void)r;
    __atomic_fetch_add(&c->tasks, 1, __ATOMIC_RELAXED);
}''', state="struct counter { uint64_t tasks; }")
w.tasks(123)
right_after = n.state.tasks         # counted on the OpenMP threads, nothing to flush
seen = []
worker = threading.Thread(target=lambda: seen.append(s.steady(1.5, 1000)))
worker.start()
while worker.is_alive():            # the program runs (without the GIL) while we read
    seen.append(n.state.tasks)
    time.sleep(0.1)
worker.join()
regions = seen.pop()
final = n.state.tasks
n.remove()
w.tasks(10)
print(json.dumps({"right_after": right_after, "samples": seen, "regions": regions,
                  "final": final, "after_remove": n.state.tasks, "active": n.active,
                  "recording": ompt_py.status()["recording"]}))
""", omp_ext, scripting)
    assert out["right_after"] == 123
    samples = out["samples"]
    assert len(samples) >= 5
    assert len(set(samples)) >= 4 and samples == sorted(samples)  # it grew while running
    assert out["final"] == 123 + 4 * out["regions"]  # steady(): 4 tasks per region
    assert out["after_remove"] == out["final"] and out["active"] is False
    assert out["recording"] is False  # no trace was needed


def test_native_handlers_see_only_their_events_and_own_markers(omp_ext, scripting):
    out, _ = run("""
src = '''
void handle(const omptpy_record *r, struct seen *s) {
    __atomic_fetch_add(&s->by_event[r->event & 127], 1, __ATOMIC_RELAXED);
}'''
state = "struct seen { uint64_t by_event[128]; }"
regions = ompt_py.native_handler("region", src, state=state)
control = ompt_py.native_handler(["control_tool", "parallel_end"], src, state=state)
with ompt_py.region("a"):
    with ompt_py.region("b"):
        w.parallel(3)
s.c_regions(1)                     # c_outer, and c_inner/c_leaf on both threads
ompt_py.control(64, 1)
def nonzero(h):
    return {str(e): h.state.by_event[e] for e in range(128) if h.state.by_event[e]}
print(json.dumps({"regions": nonzero(regions), "control": nonzero(control)}))
""", omp_ext, scripting)
    assert out["regions"] == {"101": 2 * (2 + 1 + 2 * 2)}
    assert out["control"] == {"11": 1, "4": 3 + 1}


def test_errors(omp_ext, scripting):
    out, _ = run("""
errors = {}
def attempt(name, *args, **kwargs):
    try:
        ompt_py.native_handler(*args, **kwargs)
        errors[name] = None
    except Exception as e:
        errors[name] = f"{type(e).__name__}: {e}"

attempt("compile", "task_create",
        "void handle(const omptpy_record *r, void *s) {\\n  (void)s;\\n  this is not C;\\n}")
attempt("function", "task_create", "void other(const omptpy_record *r, void *s) {}")
attempt("event", "task_creat", "void handle(const omptpy_record *r, void *s) {}")
attempt("state", "task_create", "void handle(const omptpy_record *r, void *s) {}",
        state="uint64_t n;")
ok = "void handle(const omptpy_record *r, void *s) { (void)r; (void)s; }"
many = []
try:
    for _ in range(17):
        many.append(ompt_py.native_handler("task_create", ok))
except RuntimeError as e:
    errors["limit"] = str(e)
print(json.dumps({"errors": errors, "installed": len(many)}))
""", omp_ext, scripting)
    errors = out["errors"]
    assert errors["compile"].startswith("NativeHandlerError")
    assert "source:3" in errors["compile"] and "error" in errors["compile"]
    assert errors["function"].startswith("NativeHandlerError") and "handle" in errors["function"]
    assert errors["event"].startswith("ValueError") and "task_create" in errors["event"]
    assert errors["state"].startswith("ValueError") and "struct" in errors["state"]
    assert out["installed"] == 16 and "16" in errors["limit"]


def test_include_dir_ships_the_headers():
    from pathlib import Path

    include = Path(ompt_py.include_dir())
    shipped = sorted(CSRC_INCLUDE.glob("*.h"))
    assert [h.name for h in shipped] == ["omptpy.h", "omptpy_region.h"]
    for header in shipped:
        assert (include / header.name).read_text() == header.read_text()
    assert "ompt_py_region_begin" in (include / "omptpy_region.h").read_text()
