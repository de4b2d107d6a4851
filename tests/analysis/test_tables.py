"""The paired tables of a Trace: one row per instance, parents and nesting,
wait and hold times, task dependences; unmatched begins and ends counted."""

from __future__ import annotations

import pytest
from conftest import compile_program, run_with_tool

import ompt_py

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]


def traced(programs, tmp_path, name, *args):
    out = tmp_path / "raw"
    r = run_with_tool([programs[name], *map(str, args)], out)
    assert r.returncode == 0, r.stderr
    return ompt_py.load(out), r.stdout


def test_nested_regions_have_parents_and_levels(programs, tmp_path):
    t, _ = traced(programs, tmp_path, "nested")
    r = t.parallel_regions()
    assert r.attrs == {"unmatched_begins": 0, "unmatched_ends": 0}
    outer = r[r["level"] == 1]
    inner = r[r["level"] == 2]
    assert len(outer) == 1 and len(inner) == 2
    assert outer["parent_id"].isna().all()
    assert (inner["parent_id"] == outer["parallel_id"].iloc[0]).all()
    assert (r["requested_team_size"] == 2).all() and (r["team_size"] == 2).all()
    assert (r["invoker"] == "runtime").all()  # clang-built code
    assert (r["begin_ns"] <= r["end_ns"]).all()
    for row in inner.itertuples():  # an inner region lies within its parent
        assert outer["begin_ns"].iloc[0] <= row.begin_ns and row.end_ns <= outer["end_ns"].iloc[0]
    # each region has its implicit tasks, one per thread of the team
    it = t.implicit_tasks()
    per_region = it[it["team_size"] == 2].groupby("parallel_id").size()
    assert sorted(per_region.reindex(r["parallel_id"]).tolist()) == [2, 2, 2]


def test_contended_lock_waits_add_up_to_the_blocked_time(programs, tmp_path):
    t, out = traced(programs, tmp_path, "contended", 200, 50)
    measured = float(out.split()[1])
    m = t.mutex()
    locks = m[m["kind"] == "lock"]
    assert len(locks) == 400
    assert locks["wait_ns"].notna().all() and locks["hold_ns"].notna().all()
    assert (locks["wait_ns"] >= 0).all() and (locks["hold_ns"] >= 45_000).all()
    waited = float(locks["wait_ns"].sum())
    assert measured > 1e6, "the threads were expected to contend"
    assert abs(waited - measured) <= 0.10 * measured, (waited, measured)


def test_tasks_and_their_dependence_graph(programs, tmp_path):
    t, _ = traced(programs, tmp_path, "deps")
    tasks = t.tasks().sort_values("created_ns").reset_index(drop=True)
    assert len(tasks) == 4
    a, b, c, d = tasks["task_id"].tolist()
    assert [len(x) for x in tasks["dependences"]] == [1, 1, 3, 1]
    assert tasks["has_dependences"].eq(1).all()
    assert tasks["completed_ns"].notna().all() and tasks["run_ns"].gt(0).all()
    assert (tasks["first_start_ns"] >= tasks["created_ns"]).all()
    edges = set(zip(t.task_graph()["source_id"], t.task_graph()["sink_id"]))
    assert edges == {(a, c), (b, c), (c, d)}


def test_sync_waits_lie_within_their_barriers(programs, tmp_path):
    t, _ = traced(programs, tmp_path, "barrier", 3)
    s = t.sync()
    assert s.attrs["unmatched_begins"] == 0 and s.attrs["unmatched_ends"] == 0
    explicit = s[s["kind"] == "barrier_explicit"]
    assert len(explicit) == 2 * 3
    assert ((s["wait_ns"] >= 0) & (s["wait_ns"] <= s["duration_ns"])).all()


def test_unmatched_ends_of_an_in_process_window_are_counted(run_traced):
    # The window ends right after a region: the worker's implicit-task end comes
    # with the next region, outside the window.
    t = run_traced("""
import ompt_py
import ompt_work_ext as w
with ompt_py.trace() as t:
    w.parallel(2)
t.save(TRACE_PATH)
""")
    it = t.implicit_tasks()
    assert it.attrs["unmatched_begins"] >= 1
    assert len(t.parallel_regions()) == 2


SOURCE = """\
int main(void) {
  int x = 0;
#pragma omp parallel num_threads(2) reduction(+ : x)
  x += 1;
  return x == 2 ? 0 : 1;
}
"""


@pytest.mark.parametrize("debug", [True, False])
def test_source_attribution(tmp_path, debug):
    src = tmp_path / "where.c"
    src.write_text(SOURCE)
    exe = compile_program(src, tmp_path / "where", flags=["-g"] if debug else ["-s"])
    out = tmp_path / "raw"
    r = run_with_tool([exe], out)
    assert r.returncode == 0, r.stderr
    t = ompt_py.load(out)
    (region,) = t.parallel_regions().itertuples()
    src_rows = t.symbolize([region.codeptr])
    (row,) = src_rows.itertuples()
    assert row.module == str(exe)
    if debug:
        # the region is started by the call the compiler made for the pragma's line
        assert region.location == f"{src}:3", region.location
        assert region.function == "main"
        assert row.line == 3 and "no line" not in row.how
    else:
        # stripped: no symbols at all; the module and offset still say where
        assert region.location == f"where+{hex(row.offset)}", region.location
        assert row.how == "module + offset only"


def test_attribution_of_a_trace_whose_binary_is_gone(tmp_path):
    src = tmp_path / "gone.c"
    src.write_text(SOURCE)
    exe = compile_program(src, tmp_path / "gone", flags=["-g"])
    out = tmp_path / "raw"
    r = run_with_tool([exe], out)
    assert r.returncode == 0, r.stderr
    exe.unlink()
    t = ompt_py.load(out)
    (region,) = t.parallel_regions().itertuples()
    row = t.symbolize([region.codeptr]).iloc[0]
    assert row["how"] == f"module + offset only: {exe} is gone"
    assert region.location == f"gone+{hex(row['offset'])}"
    # everything else still works
    assert len(t.to_pandas()) == len(t.events) and t.written == len(t.events)


def test_place_info_at_implicit_task_begin(programs, tmp_path):
    out = tmp_path / "raw"
    r = run_with_tool([programs.parallel, "3"], out, OMPTPY_PLACE_INFO="on",
                      OMP_PLACES="cores", OMP_PROC_BIND="close")
    assert r.returncode == 0, r.stderr
    df = ompt_py.load(out).to_pandas()
    it = df[df["event"] == "implicit_task"]
    begins = it[it["endpoint"] == "begin"]
    in_regions = begins[begins["team_size"] == 2]
    assert len(in_regions) == 6
    # bound close to the cores: thread i of each team runs in place i
    assert (in_regions["place_num"] == in_regions["thread_num"]).all()
    assert (in_regions["proc_id"] >= 0).all()
    assert in_regions.groupby("thread_num")["proc_id"].nunique().eq(1).all()  # stays bound
    assert it.loc[it["endpoint"] == "end", ["proc_id", "place_num"]].isna().all().all()
    # without the switch there is nothing to show
    out2 = tmp_path / "raw2"
    run_with_tool([programs.parallel, "1"], out2)
    assert ompt_py.load(out2).to_pandas()["proc_id"].isna().all()


def test_teams_league_and_nesting(programs, tmp_path):
    t, _ = traced(programs, tmp_path, "teams")
    r = t.parallel_regions()
    assert r.attrs == {"unmatched_begins": 0, "unmatched_ends": 0}
    assert r["parallel_id"].is_unique
    (league,) = r[r["league"]].itertuples()
    assert league.level == 1 and league.requested_team_size == 2
    # each team is a region of the league; each opens its own parallel region inside
    teams = r[r["parent_id"] == league.parallel_id]
    assert len(teams) == 2 and (teams["level"] == 2).all()
    inner = r[r["parent_id"].isin(teams["parallel_id"])]
    assert len(inner) == 2 and (inner["level"] == 3).all()
    assert not r.loc[r["parallel_id"] != league.parallel_id, "league"].any()


def test_attribution_of_a_trace_whose_binary_changed(tmp_path):
    src = tmp_path / "changed.c"
    src.write_text(SOURCE)
    exe = compile_program(src, tmp_path / "changed", flags=["-g"])
    out = tmp_path / "raw"
    r = run_with_tool([exe], out)
    assert r.returncode == 0, r.stderr
    # rebuilt from other code: another build id, other addresses
    src.write_text("static int pad[64];\n" + SOURCE.replace("x += 1;", "x += 1 + pad[0];"))
    compile_program(src, exe, flags=["-g"])
    t = ompt_py.load(out)
    (region,) = t.parallel_regions().itertuples()
    row = t.symbolize([region.codeptr]).iloc[0]
    assert row["how"].startswith(f"module + offset only: {exe} changed since the trace")
    assert "build id" in row["how"] and row["function"] is None
