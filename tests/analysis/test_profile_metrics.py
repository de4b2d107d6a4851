"""The answers of a profile (analysis/profile.py, the Profile facade): the trace's
columns where aggregates can give them, figures that add up to the tool's
aggregates, quantiles estimated within their histogram bucket.  On the stored
profiles of tests/data (ompt-py run --profile) and synthetic histograms; the
comparison with a trace of the same program: tests/live/test_profile_answers.py."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load_stored, printed, stored_output

from ompt_py.analysis import profile as answers
from ompt_py.records import PROFILE_BUCKETS

pytestmark = pytest.mark.pythons  # on every supported Python (make test-pythons)

#: What a profile cannot give, per answer (the functions' docstrings say why).
LEFT_OUT = {"constructs": set(), "imbalance": {"imbalance_max", "schedule"},
            "lock_contention": {"hold_p50_ns", "py_location"},
            "task_granularity": {"busy_ns", "time_share"}}


@pytest.fixture(scope="module")
def mixed():
    return load_stored("profile-mixed")


def _hist(counts: dict[int, int]) -> np.ndarray:
    h = np.zeros(PROFILE_BUCKETS)
    for b, n in counts.items():
        h[b] = n
    return h


def test_a_quantile_lies_in_the_bucket_of_its_rank_and_within_min_and_max():
    # 10 durations in [512, 1024) ns, 10 in [2^20, 2^21): the median's rank is in the first.
    h = _hist({10: 10, 21: 10})
    (p50,) = answers.quantile(h, 0.5, np.array([600.0]), np.array([2e6]))
    assert 512 <= p50 < 1024
    (p95,) = answers.quantile(h, 0.95, np.array([600.0]), np.array([1.5e6]))
    assert 2**20 <= p95 <= 1.5e6  # kept at most the max
    (low,) = answers.quantile(_hist({10: 1}), 0.5, np.array([900.0]), np.array([900.0]))
    assert low == 900  # one duration: its own value
    assert np.isnan(answers.quantile(_hist({}), 0.5, np.array([0.0]), np.array([0.0]))[0])


@pytest.mark.parametrize("name", sorted(LEFT_OUT))
def test_the_columns_are_the_traces_but_what_a_profile_cannot_give(mixed, name):
    trace = load_stored("export-mixed")
    kwargs = {"imbalance": {"by": "source"}}.get(name, {})
    want = [c for c in getattr(trace, name)(**kwargs).columns if c not in LEFT_OUT[name]]
    assert list(getattr(mixed, name)(**kwargs).columns) == want
    if name in ("constructs", "lock_contention"):
        got = getattr(mixed, name)(by="source").columns
        assert list(got) == [c for c in getattr(trace, name)(by="source").columns
                             if c not in LEFT_OUT[name]]


def test_constructs_add_up_to_the_aggregates(mixed):
    parts = mixed.parts
    c = mixed.constructs(raw=True)  # the tool's aggregates have the runtime's names
    raw = parts.constructs.groupby(["construct", "kind"])["count"].sum()
    for row in c[c["construct"] != "task"].itertuples():
        assert row.count == raw[(row.construct, row.kind)]
    # normalised: the trace's vocabulary
    assert set(mixed.constructs()["kind"]) == {"barrier_implicit" if k.startswith(
        "barrier_implicit") else "loop" if k.startswith("loop_") else k for k in c["kind"]}
    task = c[c["construct"] == "task"].iloc[0]
    assert task["count"] == parts.tasks["ran"].sum() > 0
    assert task["total_ns"] == parts.tasks["run_total_ns"].sum()
    by_source = mixed.constructs(by="source")
    assert by_source["count"].sum() == c["count"].sum()
    assert by_source["total_ns"].sum() == pytest.approx(c["total_ns"].sum())
    assert (c["mean_ns"] <= c["max_ns"]).all()
    assert ((c["p50_ns"] <= c["p95_ns"]) & (c["p95_ns"] <= c["max_ns"])).all()
    assert by_source["location"].notna().any()


def test_imbalance_per_location_and_per_thread(mixed):
    rt = mixed.parts.regions_threads
    per = mixed.imbalance()
    assert per["threads"].max() == 2  # mixed: teams of 2 (implicit tasks per region)
    assert (per["imbalance"].dropna() >= 1).all() and (per["lost_ns"] >= 0).all()
    threads = mixed.imbalance(per_thread=True)
    assert threads["implicit_tasks"].sum() == rt["implicit_tasks"].sum()
    assert threads["busy_ns"].sum() == rt["busy_ns"].sum()
    regions = mixed.parts.constructs.query("construct == 'parallel region'")["count"].sum()
    assert per["regions"].sum() == regions


def test_lock_contention_adds_up(mixed):
    locks = mixed.lock_contention()
    raw = mixed.parts.locks
    assert locks["acquisitions"].sum() == raw["acquisitions"].sum() > 0
    assert set(locks["kind"]) == set(raw["kind"])
    assert locks["wait_total_ns"].sum() == raw["wait_total_ns"].sum()
    assert ((locks["top_holder_share"] > 0) & (locks["top_holder_share"] <= 1)).all()
    assert (locks["wait_p95_ns"] <= locks["wait_max_ns"]).all()
    assert mixed.lock_contention(by="source")["acquisitions"].sum() == locks["acquisitions"].sum()


def test_task_granularity_counts_what_the_program_ran():
    prof = load_stored("profile-known-tasks")
    truth = printed(stored_output("profile-known-tasks"), "task_ns")  # 20 of 500 us, 20 of 2 ms
    g = prof.task_granularity()
    assert g.attrs["tasks"] == g.attrs["ran"] == len(truth) == g["tasks"].sum()
    assert g.loc[g["hi_ns"] <= 1e6, "tasks"].sum() == 20
    assert g.attrs["run_total_ns"] == pytest.approx(sum(truth), rel=0.05, abs=2e6)
    assert 250e3 <= g.attrs["median_busy_ns"] <= 4.2e6
    assert np.isnan(g.attrs["create_ns"])


def test_what_a_profile_cannot_answer_is_a_clear_error(mixed):
    with pytest.raises(ValueError, match="no Python stacks"):
        mixed.constructs(by="python")
    with pytest.raises(ValueError, match="no region instances"):
        mixed.imbalance(by="region")
    with pytest.raises(ValueError, match="no Python stacks"):
        mixed.lock_contention(by="python")


def test_the_summary_has_the_traces_sections(mixed):
    s = mixed.summary(top=5)
    titles = [t for t, _ in s.sections()]
    assert titles[:2] == ["Time per construct", "Time per source location"]
    assert {"Threads: time per state", "Explicit tasks: duration histogram",
            "Locks and critical sections: contention"} <= set(titles)
    assert any("region" in t for t in titles)
    text = str(s)
    assert "a profile:" in text and "explicit tasks" in text and "most waited-for" in text
    assert "<h4>" in mixed._repr_html_()


def test_an_empty_profile_answers_with_empty_tables():
    """A process that ran no OpenMP yet (ompt_py.trace(profile=True) around nothing)."""
    from ompt_py import Profile
    from ompt_py.io import profile
    from ompt_py.records import PROFILE_ROW_DTYPE

    parts = profile.ProfileParts(**profile.tables(np.zeros(0, PROFILE_ROW_DTYPE), 1, 1.0),
                                 meta={"processes": []})
    p = Profile(parts)
    for name in ("constructs", "imbalance", "lock_contention", "task_granularity"):
        assert getattr(p, name)().empty, name
    assert p.constructs(by="source").empty
    assert "0 aggregates" in str(p.summary())
