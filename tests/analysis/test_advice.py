"""The advice (ompt_py/analysis/advice.py, Trace.advice(), Profile.advice()): each
rule fires on a stored trace of a program built to trigger it, with the figures
of the per-location answers it reads, and not on well-behaved programs; a
profile gives the rules its aggregates allow and says which it cannot.

Programs (tests/data/README.md): known.c (skewed under static and dynamic
schedules, tasks, a lock), parallel.c (300 empty regions), contended.c, and
cxx_names.cpp (one function per rule, long C++ names: report-cxx, and its
profile profile-cxx).
"""

from __future__ import annotations

import pytest
from conftest import load_stored, load_with_binaries, printed, stored_output, stored_path

import ompt_py
from ompt_py.analysis import advice, metrics
from ompt_py.units import format_ns

ALL_RULES = {advice.SHORT_REGIONS, advice.STATIC_IMBALANCE, advice.SMALL_TASKS,
             advice.CONTENDED_LOCK}


def rules(t) -> list[str]:
    return t.advice()["rule"].tolist()


def busy(t) -> float:
    return float(metrics.region_threads(t)["busy_ns"].sum())


def test_short_regions_with_their_fork_join_cost():
    """parallel 300: 300 empty regions of 2 threads."""
    t = ompt_py.load(stored_path("parallel-300.omptraw"))
    (row,) = t.advice().itertuples()
    assert row.rule == advice.SHORT_REGIONS
    (place,) = t.imbalance(by="source").itertuples()
    assert place.regions == 300 and place.fork_join_share >= advice.FORK_JOIN_SHARE
    assert row.stake_ns == place.threads * place.fork_join_ns >= advice.STAKE_SHARE * busy(t)
    assert row.finding.startswith(f"300 regions of {format_ns(place.duration_ns / 300)} on 2 "
                                  f"threads at {place.location}: ")
    assert "fork/join costs" in row.finding and "fewer threads" in row.advice


def test_fork_join_is_what_no_thread_spent_working():
    t = ompt_py.load(stored_path("parallel-300.omptraw"))
    r = t.imbalance()
    per = metrics.region_threads(t)
    active = (per["busy_ns"] + per["sync_wait_ns"] + per["lock_wait_ns"]).groupby(
        per["parallel_id"]).max()
    expected = (r["duration_ns"] - active.reindex(r["parallel_id"]).to_numpy()).clip(lower=0)
    assert (r["fork_join_ns"] == expected).all()
    assert t.imbalance(by="source")["fork_join_ns"].sum() == r["fork_join_ns"].sum()


def test_static_schedule_on_uneven_work():
    """known skewed under schedule(static): thread 1 has 4 times thread 0's work."""
    t = load_stored("known-skewed-static")
    (row,) = t.advice().itertuples()
    assert row.rule == advice.STATIC_IMBALANCE
    loop = t.imbalance().sort_values("duration_ns").iloc[-1]
    assert loop["schedule"] == "static"
    assert row.stake_ns == loop["lost_ns"]
    assert f"works {loop['imbalance']:.2f}x the mean" in row.finding
    assert "schedule(dynamic)" in row.advice


def test_no_advice_when_the_threshold_is_not_reached(monkeypatch):
    t = load_stored("known-skewed-static")
    loop = t.imbalance().sort_values("duration_ns").iloc[-1]
    monkeypatch.setattr(advice, "IMBALANCE", loop["imbalance"] + 0.01)
    assert rules(t) == []
    monkeypatch.setattr(advice, "IMBALANCE", 1.2)
    monkeypatch.setattr(advice, "STAKE_SHARE", loop["lost_ns"] / busy(t) + 0.01)
    assert rules(t) == []


def test_tasks_below_their_creation_cost():
    """known tasks 2000 0 0 0: 2000 empty tasks."""
    t = load_stored("known-tasks-empty")
    (row,) = t.advice().itertuples()
    assert row.rule == advice.SMALL_TASKS
    (site,) = metrics.task_sites(t).itertuples()
    assert site.tasks == 2000 and site.median_busy_ns < advice.TASK_COST_FACTOR * site.create_ns
    assert row.stake_ns == site.tasks * site.create_ns
    assert (f"median own work {format_ns(site.median_busy_ns)}, creating one costs about "
            f"{format_ns(site.create_ns)}") in row.finding
    assert "cut-off" in row.advice


def test_task_sites_add_up():
    t = load_stored("known-tasks")
    (site,) = metrics.task_sites(t).itertuples()
    assert site.tasks == 30 == site.ran
    assert site.busy_ns == metrics.task_runs(t)["busy_ns"].sum()
    assert site.median_busy_ns == pytest.approx(
        sorted(printed(stored_output("known-tasks"), "task_ns"))[14], rel=0.05)


@pytest.mark.parametrize("name", ["known-lock", "contended-libomp19"])
def test_a_contended_lock(name):
    """known lock 40 500, contended 200 50: two threads take one lock."""
    t = load_stored(name)
    (row,) = t.advice().itertuples()
    assert row.rule == advice.CONTENDED_LOCK
    (lock,) = t.lock_contention().itertuples()
    assert lock.wait_total_ns >= advice.LOCK_WAIT_SHARE * lock.hold_total_ns
    assert row.stake_ns == lock.wait_total_ns
    assert f"waited {format_ns(lock.wait_total_ns)} for it" in row.finding
    assert "lock finer" in row.advice


@pytest.mark.parametrize("name", ["known-skewed-dynamic", "known-tasks",
                                  "known-skewed-one-thread", "known-lock-few"])
def test_well_behaved_programs_get_no_advice(name):
    """Balanced dynamic loop, tasks of 200 us and 2 ms, one thread, a lock taken
    twice: nothing to do."""
    assert rules(load_stored(name)) == []
    assert "none: no rule found time at stake" in " ".join(
        str(load_stored(name).summary()).split())


def test_every_rule_on_the_program_built_for_them():
    """cxx_names: one function per rule, each its own source location."""
    t = load_with_binaries("report-cxx")
    found = t.advice()
    assert sorted(found["rule"]) == sorted(ALL_RULES)
    assert found["location"].is_unique
    assert (found["stake_ns"].diff().dropna() <= 0).all()  # most at stake first
    where = dict(zip(found["rule"], found["location"]))
    assert "TensorIteratorOverStridedMemoryWithBroadcasting<" in where[advice.SHORT_REGIONS]
    assert "RowReductionKernelWithStaticSchedule<" in where[advice.STATIC_IMBALANCE]
    assert "AutogradGraphTaskSchedulerForTinyNodes<" in where[advice.SMALL_TASKS]
    assert "ParameterServerWithOneGlobalLock<" in where[advice.CONTENDED_LOCK]
    summary = t.summary()
    assert summary.advice["finding"].tolist() == found["finding"].tolist()


@pytest.mark.pythons
def test_a_profile_gives_the_rules_its_aggregates_allow():
    prof = load_stored("profile-cxx")  # cxx_names under ompt-py run --profile
    found = prof.advice()
    assert sorted(found["rule"]) == [advice.CONTENDED_LOCK, advice.SHORT_REGIONS]
    assert found.attrs["cannot"] == advice.CANNOT_FROM_PROFILE
    (short,) = found[found["rule"] == advice.SHORT_REGIONS].itertuples()
    place = prof.imbalance().set_index("location").loc[short.location]
    assert place["regions"] == 200
    assert short.stake_ns == place["threads"] * place["fork_join_ns"]
    text = " ".join(str(prof.summary()).split())
    for rule, why in advice.CANNOT_FROM_PROFILE.items():
        assert f"{rule}: not from a profile ({why})" in text
    assert not len(load_stored("profile-mixed").advice())
