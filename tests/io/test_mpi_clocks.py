"""The fit of a rank's clock to the reference rank's (ompt_py/io/mpi.py) on
measurements made here with known offsets, drifts and delays, and the checks of
a job's parts: no MPI needed (tests/live/test_mpi.py runs the real thing)."""

from __future__ import annotations

import numpy as np
import pytest

import ompt_py
from ompt_py.io import mpi

T0 = 1_000_000_000_000  # the reference's clock at the first measurement (ns)


def measured(offset: float, drift: float, at: float, delays: np.ndarray) -> list[list[int]]:
    """Round trips from the reference at its time ``at``: out and back delays (ns,
    rows of two); the rank's clock reads t + offset + drift * t at true time t."""
    pairs, t = [], at
    for out, back in delays:
        w = t + out
        pairs.append([int(t), int(w + offset + drift * w), int(w + back)])
        t = w + back + 1000
    return pairs


def doc(rank: int, phases: list[list[list[int]]], size: int = 4) -> dict:
    return {"rank": rank, "size": size, "source": "pmpi",
            "sync": [{"phase": name, "reference": 0, "pairs": pairs}
                     for name, pairs in zip(("init", "finalize"), phases)]}


def test_the_fit_recovers_offset_and_drift_within_the_round_trips():
    rng = np.random.default_rng(7)
    offset, drift = 2.5e9, 150e-6
    delays = rng.uniform(2_000, 30_000, (32, 2))
    init = measured(offset, drift, T0, delays)
    final = measured(offset, drift, T0 + 2e9, rng.uniform(2_000, 30_000, (32, 2)))
    clock = mpi.fit(doc(1, [init, final]))
    assert clock["phases"] == ["init", "finalize"] and not clock["poor"]
    true_t = (clock["at_ns"] - offset) / (1 + drift)
    assert abs(clock["offset_ns"] - (offset + drift * true_t)) <= clock["error_ns"]
    assert abs(clock["drift"] - drift / (1 + drift)) <= 2 * clock["error_ns"] / clock["span_ns"]
    # the shortest round trip of each phase, and only round trips near it kept
    assert clock["round_trip_ns"][0] == pytest.approx(min(d.sum() for d in delays), abs=1)
    assert 2 <= clock["pairs"] < 64
    # aligned times are the reference's: the rank's reading of true time t gives ~t
    t = T0 + 1e9
    w = int(t + offset + drift * t)
    assert abs(mpi.aligned_ns(clock, w) - t) <= 2 * clock["error_ns"]
    raw = np.array([w, w + 10**9], np.int64)
    assert np.abs(mpi.raw_ns(clock, mpi.aligned_ns(clock, raw)) - raw).max() <= 1


def test_the_reference_and_a_rank_without_its_end():
    assert mpi.fit(doc(0, [[], []]))["pairs"] == 0
    assert mpi.fit({"rank": 2, "size": 4, "source": "pmpi", "sync": []}) is None
    one = mpi.fit(doc(1, [measured(-3e9, 0, T0, np.full((8, 2), 5_000.0))]))
    assert one["phases"] == ["init"] and one["drift"] == 0 and one["span_ns"] == 0
    assert one["offset_ns"] == pytest.approx(-3e9, abs=one["error_ns"])


def test_a_poor_fit_is_said_with_its_residual():
    # round trips of 4 us whose offsets scatter by 200 us: no line fits them
    pairs = measured(1e9, 0, T0, np.full((16, 2), 2_000.0))
    for k, p in enumerate(pairs):
        p[1] += (k % 2) * 200_000
    clock = mpi.fit(doc(1, [pairs]))
    assert clock["poor"] and clock["residual_ns"] > 50_000
    procs = [{"pid": 10 + r, "rank": r, "job_id": "j", "mpi": {"rank": r, "size": 2},
              "clock_alignment": clock if r else mpi.fit(doc(0, [[]], 2))} for r in (0, 1)]
    with pytest.warns(ompt_py.TraceWarning, match=r"rank 1 \(pid 11\): its clock fits poorly, "
                                                  r"offset \+1\.0\d+ s.*residual"):
        left_out, said = mpi.check_job(procs, "run1")
    assert left_out == set() and said == []


def test_a_job_missing_ranks_and_parts_of_another_job():
    procs = [{"pid": 100 + r, "rank": r, "job_id": "a", "mpi": {"rank": r, "size": 4}}
             for r in (0, 1, 3)]
    procs.append({"pid": 200, "rank": 0, "job_id": "b", "mpi": {"rank": 0, "size": 2}})
    left_out, said = mpi.check_job(procs, "run1")
    assert left_out == {200}
    assert [s["reason"] for s in said] == [
        "processes 200 belong to MPI job b, the other 3 to job a: the parts of two jobs are "
        "mixed; they are left out (load each job's directory apart)",
        "ranks 2 of the job's 4 have no part here (their files are missing, or the processes "
        "ended before the tool wrote anything): the other ranks are analysed"]
    # processes of no job (not MPI) are not checked
    assert mpi.check_job([{"pid": 1, "rank": None}], "x") == (set(), [])
