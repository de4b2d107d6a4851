"""MPI jobs: each rank's clock put on the reference rank's, and a job's parts checked.

Clocks.  The ranks of a job on several machines read several clocks
(CLOCK_MONOTONIC of each), which differ by an offset (seconds: each machine's
boot) and drift apart (parts per million).  After MPI_Init and before
MPI_Finalize each rank measures its clock against rank 0's (Score-P's
scheme, csrc/mpi/mpi.c: ping-pong, 32 round trips): rank 0 reads its clock
(t1), sends; the rank reads its clock (w) and answers; rank 0 reads its
clock again (t2).  The rank's offset at w is ``w - (t1 + t2) / 2``, wrong by
at most half the round trip ``t2 - t1`` (the answer was read between t1 and
t2), so the round trips kept are the shortest: of each phase, those within
ROUND_TRIP_SLACK of its shortest.  ``fit`` puts a line through the offsets
kept (both phases: offset and drift; one phase, a rank killed before
MPI_Finalize: offset only), and the readers put every time of the rank on
rank 0's clock with it: ``aligned = raw - (offset_ns + drift * (raw -
at_ns))``, a linear map that they apply to the clock anchors (so ticks
convert straight to aligned times, ``aligned_anchor``).  The fit goes into
the process's metadata (``clock_alignment``, schema.CLOCK_FIT), with which
``raw_ns`` gives the raw times back.

Checks.  ``check_job`` looks at the processes of one trace: parts of two jobs
mixed (their ``job_id``), ranks of the job missing (MPI's world size says how
many there are), clock fits that are poor (their residual is larger than the
round trips allow).  It says each with a TraceWarning; what belongs to another
job is left out.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import TypeVar

import numpy as np

from ..errors import TraceWarning

N = TypeVar("N", int, np.ndarray)

#: Round trips kept per phase: within this factor of the phase's shortest.
ROUND_TRIP_SLACK = 1.5
#: A fit is poor when its residual is above this many times its error bound (half
#: the longest round trip kept), and at least POOR_FLOOR_NS: the offsets measured
#: do not lie on a line (a clock stepped, or the measurements were disturbed).
POOR_FACTOR = 2.0
POOR_FLOOR_NS = 1000.0


def fit(mpi: dict) -> dict | None:
    """The fit of a process's clock to its reference rank's, from the ``mpi``
    document of its STATS (schema.MPI_DOC), as schema.CLOCK_FIT: ``offset_ns``
    (this clock minus the reference's at ``at_ns``, this clock), ``drift`` (the
    offset's change per nanosecond), ``span_ns`` (this clock's time from the first
    phase's measurements to the last's: 0 with one phase), ``residual_ns`` (RMS distance of the
    offsets kept from the line; None with one offset), ``error_ns`` (the bound
    on each offset kept: half its round trip), ``round_trip_ns`` (the shortest
    of each phase), ``pairs`` (kept), ``phases`` and ``poor``.  The reference
    itself gets offset 0 and drift 0; None when nothing was measured."""
    sync = [s for s in mpi.get("sync", []) if s["pairs"] or s["reference"] == mpi["rank"]]
    if not sync:
        return None
    reference = sync[0]["reference"]
    if all(not s["pairs"] for s in sync):  # the reference rank
        return {"reference": reference, "offset_ns": 0.0, "drift": 0.0, "at_ns": 0, "span_ns": 0,
                "residual_ns": 0.0, "error_ns": 0.0, "round_trip_ns": [], "pairs": 0,
                "phases": [s["phase"] for s in sync], "poor": False}
    local, offsets, rtts, shortest, phases = [], [], [], [], []
    for s in sync:
        pairs = np.array(s["pairs"], dtype=np.float64).reshape(-1, 3)
        if not len(pairs):
            continue
        rtt = pairs[:, 2] - pairs[:, 0]
        keep = rtt <= rtt.min() * ROUND_TRIP_SLACK
        local.append(pairs[keep, 1])
        offsets.append(pairs[keep, 1] - (pairs[keep, 0] + pairs[keep, 2]) / 2)
        rtts.append(rtt[keep])
        shortest.append(float(rtt.min()))
        phases.append(s["phase"])
    w, o = np.concatenate(local), np.concatenate(offsets)
    at = int(np.round(local[0].mean()))
    if len(local) > 1 and np.ptp(w) > 0:
        drift, offset = np.polyfit(w - at, o, 1)
    else:
        drift, offset = 0.0, float(o.mean())
    error = float(np.concatenate(rtts).max()) / 2
    residual = (float(np.sqrt(np.mean((o - (offset + drift * (w - at))) ** 2)))
                if len(o) > 1 else None)
    return {"reference": reference, "offset_ns": float(offset), "drift": float(drift),
            "at_ns": at, "span_ns": int(np.round(local[-1].mean())) - at,
            "residual_ns": residual, "error_ns": error, "round_trip_ns": shortest,
            "pairs": len(o), "phases": phases,
            "poor": residual is not None and residual > max(POOR_FACTOR * error, POOR_FLOOR_NS)}


def aligned_ns(clock: dict, raw: N) -> N:
    """Times of a process's clock (ns) on its reference's, by its fit ``clock``."""
    shift = clock["offset_ns"] + clock["drift"] * (np.asarray(raw, np.float64) - clock["at_ns"])
    out = np.round(np.asarray(raw, np.float64) - shift).astype(np.int64)
    return out if isinstance(raw, np.ndarray) else int(out)


def raw_ns(clock: dict, aligned: N) -> N:
    """The inverse of aligned_ns (to the nanosecond): a process's own clock's times
    from the aligned ones (``Trace.time_ns_raw`` adds back the trace's origin)."""
    a = np.asarray(aligned, np.float64)
    out = np.round((a + clock["offset_ns"] - clock["drift"] * clock["at_ns"])
                   / (1 - clock["drift"])).astype(np.int64)
    return out if isinstance(aligned, np.ndarray) else int(out)


def aligned_anchor(clock: dict | None, anchor: dict) -> dict:
    """A clock anchor ({"ticks", "mono_ns"}) with its time on the reference's clock
    (as it is without a fit)."""
    if clock is None:
        return anchor
    return {"ticks": anchor["ticks"], "mono_ns": aligned_ns(clock, anchor["mono_ns"])}


def describe(clock: dict) -> str:
    """One line on a fit, for messages."""
    if not clock["pairs"]:
        return f"the reference clock (rank {clock['reference']})"
    residual = ("" if clock["residual_ns"] is None
                else f", residual {clock['residual_ns'] / 1e3:.2f} us")
    return (f"offset {clock['offset_ns'] / 1e9:+.6f} s, drift {clock['drift'] * 1e6:+.2f} ppm "
            f"against rank {clock['reference']} (round trip "
            + "/".join(f"{r / 1e3:.1f}" for r in clock["round_trip_ns"])
            + f" us, error at most {clock['error_ns'] / 1e3:.2f} us{residual}, "
            f"{clock['pairs']} measurements, {'+'.join(clock['phases'])})")


def check_job(processes: list[dict], source: str) -> tuple[set[int], list[dict]]:
    """The pids of ``processes`` (trace metadata entries) to leave out, and what to
    say in ``meta["skipped"]``: processes of jobs other than the one most of them
    belong to (said once per job); and, each with a TraceWarning, ranks of the job
    missing and clock fits that are poor."""
    jobs = Counter(p.get("job_id") for p in processes if p.get("job_id"))
    skipped: list[dict] = []
    left_out: set[int] = set()
    if len(jobs) > 1:
        job = jobs.most_common(1)[0][0]
        for other in sorted(j for j in jobs if j != job):
            pids = sorted(p["pid"] for p in processes if p.get("job_id") == other)
            left_out.update(pids)
            skipped.append({"source": source, "reason": (
                f"processes {', '.join(map(str, pids))} belong to MPI job {other}, the other "
                f"{jobs[job]} to job {job}: the parts of two jobs are mixed; they are left "
                "out (load each job's directory apart)")})
    kept = [p for p in processes if p["pid"] not in left_out]
    sizes = {p["mpi"]["size"] for p in kept if p.get("mpi")}
    if len(sizes) == 1:
        size = sizes.pop()
        missing = sorted(set(range(size)) - {p.get("rank") for p in kept})
        if missing:
            skipped.append({"source": source, "reason": (
                f"ranks {', '.join(map(str, missing))} of the job's {size} have no part here "
                "(their files are missing, or the processes ended before the tool wrote "
                "anything): the other ranks are analysed")})
    for p in kept:
        clock = p.get("clock_alignment")
        if clock and clock.get("poor"):
            warnings.warn(f"rank {p.get('rank')} (pid {p['pid']}): its clock fits poorly, "
                          f"{describe(clock)}: its times are uncertain by about the residual",
                          TraceWarning, stacklevel=3)
    return left_out, skipped
