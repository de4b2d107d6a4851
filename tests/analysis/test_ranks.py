"""Across ranks (Trace.ranks, Trace.rank_imbalance; analysis/ranks.py) on hand-made
jobs (tests/mpi_records.py: each rank the OpenMP events of known-skewed-static,
whose figures the single-process analyses give, with MPI records) whose
arrivals are known: the late rank of each phase, the others' waits, calls
missing or of other names, communicators smaller than the job; region markers
without MPI calls; a trace of one process."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import load_stored
from mpi_records import ALLREDUCE, BCAST, PID, RANKS, barriers, job, mpi

import ompt_py
from ompt_py import _core
from ompt_py.analysis import metrics, ranks
from ompt_py.analysis.states import thread_totals
from ompt_py.records import EVENT_CODES, EVENT_DTYPE, SCOPE_BEGIN, SCOPE_END

# Arrivals at three barriers: rank 2 is last at the second by 5000 ns over rank 1.
ARRIVE = [[1000, 1010, 1020, 1030], [9000, 10000, 15000, 9500], [20000, 20100, 20050, 21000]]


def test_the_late_rank_of_each_barrier_and_the_others_waits():
    t = job(barriers(ARRIVE))
    phases = t.rank_imbalance()
    assert list(phases.columns) == ranks.PHASE_COLUMNS
    assert phases["late_rank"].tolist() == [3, 2, 3]
    assert phases["calls_match"].all() and (phases["call"] == "barrier").all()
    assert (phases["ranks"] == RANKS).all()
    for row, times in zip(phases.itertuples(), ARRIVE):
        last = max(times)
        assert row.last_arrival_ns == last and row.first_arrival_ns == min(times)
        assert row.lost_ns == sum(last - a for a in times)
        assert row.wait_max_ns == last - min(times)
        assert row.end_ns == last + 100
    assert phases["lost_ns"].tolist()[1] == 6000 + 5000 + 5500
    # phase 1 begins when the first rank leaves barrier 0; phase 0 at the first event
    first_event = int(t.events["time_ns"].min())
    assert phases["begin_ns"].tolist() == [first_event, 1130, 15100]
    assert t.rank_imbalance().attrs["notes"] == []
    by_rank = t.rank_imbalance(by="rank").set_index("rank")
    assert by_rank.loc[3, "late"] == 2 and by_rank.loc[2, "late"] == 1
    assert by_rank.loc[2, "caused_ns"] == phases["lost_ns"].iat[1]
    assert by_rank.loc[3, "caused_ns"] == phases["lost_ns"].iat[0] + phases["lost_ns"].iat[2]
    assert by_rank.loc[0, "late"] == 0 and by_rank.loc[0, "caused_ns"] == 0
    waits = [sum(max(times) - times[r] for times in ARRIVE) for r in range(RANKS)]
    assert by_rank.sort_index()["waited_ns"].tolist() == waits
    assert by_rank["late_share"].sum() == pytest.approx(1.0)
    arrivals = t.rank_imbalance(by="arrival")
    mine = arrivals[arrivals["rank"] == 0].sort_values("phase")
    assert mine["since_ns"].tolist() == [1000 - first_event, 9000 - 1130, 20000 - 15100]
    assert mine["wait_ns"].tolist() == [30, 6000, 1000]
    assert arrivals.groupby("phase")["late"].sum().tolist() == [1, 1, 1]


def test_a_call_that_returns_before_the_late_rank_arrives_waits_until_it_returns():
    # a bcast from rank 0: rank 3 arrives last; ranks 0 and 1 return before it does
    rows = [mpi(0, BCAST, 100, 200), mpi(1, BCAST, 120, 150), mpi(2, BCAST, 130, 900),
            mpi(3, BCAST, 800, 850)]
    phase = job(rows).rank_imbalance(by="arrival").set_index("rank")
    assert phase["wait_ns"].sort_index().tolist() == [100, 30, 670, 0]


def test_calls_on_smaller_communicators_and_point_to_point_close_no_phase():
    rows = barriers(ARRIVE[:1]) + [mpi(r, ALLREDUCE, 3000 + r, 3100, size=2) for r in range(2)]
    rows += [mpi(0, _core.MPI_SEND, 3200, 3300), mpi(1, _core.MPI_RECV, 3200, 3300)]
    phases = job(rows).rank_imbalance()
    assert len(phases) == 1 and phases["call"].tolist() == ["barrier"]


def test_a_rank_with_missing_calls_is_said_and_the_rest_compared():
    rows = [r for r in barriers(ARRIVE) if not (r[0] == 1 and r[2] == ARRIVE[2][1])]
    phases = job(rows).rank_imbalance()
    assert phases["ranks"].tolist() == [4, 4, 3]
    assert phases["late_rank"].tolist() == [3, 2, 3]
    assert phases["lost_ns"].iat[2] == (21000 - 20000) + (21000 - 20050)
    (note,) = phases.attrs["notes"]
    assert "1 phase(s) lack some ranks (rank 1 has 2 synchronising calls" in note


def test_calls_of_other_names_matched_by_order_are_said():
    rows = barriers(ARRIVE)
    rows = [(r, ALLREDUCE, b, e, s) if (r == 1 and b == ARRIVE[1][1]) else (r, c, b, e, s)
            for r, c, b, e, s in rows]
    phases = job(rows).rank_imbalance()
    assert phases["calls_match"].tolist() == [True, False, True]
    assert phases["call"].iat[1] == "barrier/allreduce"
    (note,) = phases.attrs["notes"]
    assert "differ in 1 phase(s), from phase 1" in note and "rank 1: allreduce" in note


def test_ranks_side_by_side_are_the_single_process_figures():
    t = job([*barriers(ARRIVE), mpi(0, _core.MPI_SEND, 30000, 30500)])
    table = t.ranks()
    assert list(table.columns) == ranks.RANK_COLUMNS
    assert table["rank"].tolist() == list(range(RANKS))
    assert table["pid"].tolist() == [PID + r for r in range(RANKS)]
    assert table["host"].tolist() == ["node0", "node0", "node1", "node1"]
    assert table["local_rank"].tolist() == [0, 1, 0, 1]
    one = load_stored("known-skewed-static")
    states = thread_totals(one).sum(numeric_only=True)
    lost = metrics.imbalance(one)
    for c in ("busy_ns", "barrier_wait_ns", "sync_wait_ns", "lock_wait_ns"):
        assert (table[c] == states[c]).all(), c
    assert (table["omp_lost_ns"] == lost["lost_ns"].sum()).all()
    assert (table["regions"] == len(lost)).all()
    assert table["imbalance"].to_numpy() == pytest.approx(lost["imbalance"].mean())
    assert (table["threads"] == len(np.unique(one.events["thread"]))).all()
    regions = one.parallel_regions()
    assert (table["parallel_ns"] == regions["duration_ns"].sum()).all()  # not nested
    assert (table["parallel_ns"] <= table["span_ns"]).all()
    # each rank's time in the barriers: from its arrival to the last arrival + 100
    spent = [sum(max(times) + 100 - times[r] for times in ARRIVE) for r in range(RANKS)]
    assert table["mpi_barrier_ns"].tolist() == spent
    assert table["mpi_point_to_point_ns"].tolist() == [500, 0, 0, 0]
    assert table["mpi_ns"].tolist() == [s + p for s, p in zip(spent, [500, 0, 0, 0])]
    assert (table["mpi_setup_ns"] == 0).all()
    assert all(pd.api.types.is_integer_dtype(table[c]) for c in table if c.endswith("_ns"))


def test_each_ranks_row_is_a_function_of_its_process_alone():
    """What a dataset computes per partition: rank_rows of each process's trace,
    concatenated, is ranks() of the whole; arrivals likewise for compare."""
    t = job(barriers(ARRIVE))
    parts = []
    for pid in np.unique(t.pids):
        keep = t.pids == pid
        meta = {**t.meta, "processes": [p for p in t.meta["processes"] if p["pid"] == pid]}
        parts.append(ompt_py.Trace.from_records(t.events[keep], meta, pids=int(pid)))
    rows = pd.concat([ranks.rank_rows(p) for p in parts], ignore_index=True)
    pd.testing.assert_frame_equal(rows, t.ranks())
    arrived = pd.concat([ranks.arrivals(p) for p in parts], ignore_index=True)
    for by in ("phase", "rank", "arrival"):
        pd.testing.assert_frame_equal(ranks.compare(arrived, by), t.rank_imbalance(by))
    # a partition without MPI calls gives its region markers: the MPI arrivals count
    regions = ranks.arrivals(markers([(0, 1, 0, 500), (1, 1, 0, 600)]))
    pd.testing.assert_frame_equal(ranks.compare(pd.concat([arrived, regions]), "phase"),
                                  t.rank_imbalance())


def test_without_mpi_calls_the_ranks_table_has_no_mpi_columns():
    table = job([], ranks_=2).ranks()
    assert not [c for c in table.columns if c.startswith("mpi")]
    assert len(table) == 2


def markers(rows: list[tuple]) -> ompt_py.Trace:
    """Region markers only: rows (rank, name id, begin, end) on thread 0."""
    ev = np.zeros(2 * len(rows), EVENT_DTYPE)
    ev["event"] = EVENT_CODES["region"]
    for i, (_, name, begin, end) in enumerate(rows):
        ev[2 * i]["endpoint"], ev[2 * i]["u64a"], ev[2 * i]["time_ns"] = SCOPE_BEGIN, name, begin
        ev[2 * i + 1]["endpoint"], ev[2 * i + 1]["u64a"], ev[2 * i + 1]["time_ns"] = (
            SCOPE_END, name, end)
    pids = np.repeat([PID + r[0] for r in rows], 2).astype(np.int32)
    procs = [{"pid": PID + r, "rank": r, "region_names": ["step", "io"]} for r in range(3)]
    return ompt_py.Trace.from_records(ev, {"processes": procs}, pids=pids)


def test_without_mpi_calls_region_markers_end_the_phases():
    # two "step" regions and an "io" per rank; rank 1's second step ends last by 700 ns
    rows = [(r, 1, 0, 1000 + 10 * r) for r in range(3)]
    rows += [(r, 2, 1100, 1200 + r) for r in range(3)]
    rows += [(0, 1, 1300, 2000), (1, 1, 1300, 2700), (2, 1, 1300, 1900)]
    phases = markers(rows).rank_imbalance()
    assert phases["call"].tolist() == ["step", "io", "step"]
    assert phases["late_rank"].tolist() == [2, 2, 1]
    assert phases["lost_ns"].tolist() == [30, 3, 700 + 800]
    assert phases["begin_ns"].tolist() == [0, 1100, 1300]
    assert "phases from region markers" in phases.attrs["notes"][0]


def test_one_process_gives_its_row_and_no_phases_with_a_reason():
    t = load_stored("known-skewed-static")
    table = t.ranks()
    assert len(table) == 1 and pd.isna(table["rank"].iat[0])
    assert table["pid"].iat[0] == t.meta["processes"][0]["pid"]
    with pytest.warns(ompt_py.TraceWarning, match="nothing to compare across ranks"):
        phases = t.rank_imbalance()
    assert phases.empty and list(phases.columns) == ranks.PHASE_COLUMNS
    with pytest.warns(ompt_py.TraceWarning):
        assert t.rank_imbalance(by="rank").empty


def test_ranks_without_phases_say_why():
    with pytest.warns(ompt_py.TraceWarning, match="no MPI barrier or collective"):
        assert job([], ranks_=2).rank_imbalance().empty


def test_a_bad_by_says_what_to_use():
    with pytest.raises(ValueError, match="'phase', 'rank' or 'arrival'"):
        job(barriers(ARRIVE)).rank_imbalance(by="call")


def late_job(late_by: int) -> ompt_py.Trace:
    """Six barriers 100 ms apart; rank 2 arrives ``late_by`` ns after the others in
    four of them, rank 3 10 ns after the others in the other two."""
    arrive = [[100_000_000 * k + 10 * r + (late_by if k % 3 != 1 and r == 2 else 0)
               for r in range(RANKS)] for k in range(6)]
    return job(barriers(arrive))


def test_the_summary_of_a_job_has_a_ranks_section_and_advice_on_the_late_rank():
    s = late_job(50_000_000).summary()
    assert s.ranks["rank"].tolist() == list(range(RANKS))
    assert s.ranks["late"].tolist() == [0, 0, 4, 2]
    # rank 2 at 20 + L, the others at 0, 10 and 30: they lose 3L + 20 in each of 4 phases
    assert s.ranks["caused_ns"].iat[2] == 4 * (3 * 50_000_000 + 20)
    assert s.phases["late_rank"].tolist()[:4] == [2] * 4 and s.phases.attrs["phases"] == 6
    assert "calls_match" not in s.phases  # every call matched
    text = s.document(100).text()
    assert "Ranks (late: phases it arrived last in" in text
    assert "across 4 ranks and 6 phases: rank 2 arrived last in 4 of them" in text
    late = s.advice[s.advice["rule"] == "late rank"]
    assert late["pid"].tolist() == [PID + 2]
    assert late["stake_ns"].tolist() == [s.ranks["caused_ns"].iat[2]]
    assert "rank 2 (pid 102) arrived last in 4 of the 6 phases" in late["finding"].iat[0]


def test_a_rank_late_in_half_the_phases_or_by_little_gets_no_advice():
    assert "late rank" not in set(late_job(5_000).summary().advice["rule"])  # too little
    arrive = [[100_000_000 * k + 10 * r + (50_000_000 if k % 2 and r == 2 else 0)
               for r in range(RANKS)] for k in range(6)]
    s = job(barriers(arrive)).summary()
    assert s.ranks["late"].iat[2] == 3  # half the phases, not most
    assert "late rank" not in set(s.advice["rule"])


def test_the_summary_of_one_process_has_no_ranks_section():
    s = load_stored("known-skewed-static").summary()
    assert s.ranks is None and s.phases is None
    assert "Ranks" not in s.document(100).text()
