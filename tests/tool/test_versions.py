"""The tool and the Python side on older LLVM libomp versions (14 and 16) next to 19.

``make old-runtimes`` unpacks Debian's libomp5-14 and libomp5-16 into
.cache/libomp/N (they conflict with the installed libomp5-19, so they are
never installed); a version that is not there is skipped.  The programs of
tests/programs/versions/ are built with gcc -fopenmp: gcc's GOMP_ ABI is
served by every libomp, so one binary runs on each version with that
libomp.so.5 in LD_PRELOAD (clang-19 binaries need libomp 19).  Each program
runs traced (OMP_TOOL_LIBRARIES, file sink) once per version.

What differs between versions (../shared/FACTS.md, "What libomp reports"),
and is asserted here as observed:

* libomp 14 answers ``ompt_set_never`` for the dispatch callback and fires
  no dispatch events; 16 and 19 one per chunk.
* The runtime's own names (``kind_raw``): 19 says ``loop_dynamic`` and
  ``barrier_implicit_parallel``, 14 and 16 ``loop`` and ``barrier_implicit``.
  ``kind`` is the same on every version.

What gcc-built code shows (FACTS, "GCC and libgomp"): static loops give no
work events, sections a dynamic loop, explicit barriers and the end of a
loop ``barrier_implementation``.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from conftest import (
    GCC,
    LLVM_LIB,
    PROGRAMS,
    REPO,
    compile_program,
    run_with_tool,
    unmatched_scopes,
)

import ompt_py

pytestmark = pytest.mark.needs_gcc

SOURCES = PROGRAMS / "versions"
CACHE = REPO / ".cache" / "libomp"
OLD = (14, 16)
VERSIONS = (*OLD, 19)


def libomp_of(version: int) -> Path:
    return LLVM_LIB / "libomp.so.5" if version == 19 else CACHE / str(version) / "libomp.so.5"


def require(version: int) -> Path:
    lib = libomp_of(version)
    if not lib.exists():
        if version == 19:
            pytest.skip(f"LLVM libomp 19 is not installed ({lib})")
        pytest.skip(f"libomp {version} is not unpacked in {lib.parent}: run `make old-runtimes`")
    return lib


# ---- what each program makes every version report ------------------------------------


@dataclass(frozen=True)
class Expect:
    output: str  # the program's checksum (runtime independent)
    regions: int  # parallel regions
    threads: tuple[int, ...]  # OpenMP threads (thread_begin): the possible counts
    sync: dict[str, int]  # sync_region begins by normalised kind, on all threads
    loops: tuple[int, ...] = ()  # iteration counts of the work begins (kind 'loop')
    chunks: tuple[tuple[int, int], ...] = ()  # (start, iterations) per dispatch on 16 and 19
    other: dict[tuple[str, str], int] = field(default_factory=dict)  # (event, kind): count

    @property
    def implicit_tasks(self) -> int:  # 2 threads per region, plus the initial task
        return 2 * self.regions + 1


def _section_chunks(regions: int) -> tuple[tuple[int, int], ...]:
    return tuple((s, 1) for _ in range(regions) for s in (1, 2, 3))


EXPECT = {
    "regions": Expect("25", regions=5, threads=(2,), sync={"barrier_implicit": 10}),
    "dynamic": Expect(
        "60", regions=1, threads=(2,),
        sync={"barrier_implicit": 2, "barrier_implementation": 4},
        loops=(20, 20, 40, 40),
        chunks=tuple((i, 1) for i in range(20)) + tuple((i, 5) for i in range(0, 40, 5))),
    "static": Expect("4950", regions=1, threads=(2,), sync={"barrier_implicit": 2}),
    "sections": Expect("12", regions=2, threads=(2,), sync={"barrier_implicit": 4},
                       loops=(3, 3, 3, 3), chunks=_section_chunks(2)),
    "barriers": Expect("6", regions=1, threads=(2,),
                       sync={"barrier_implicit": 2, "barrier_implementation": 6}),
    "tasks": Expect("28", regions=1, threads=(2,), sync={"barrier_implicit": 2, "taskwait": 1},
                    other={("task_create", ""): 8, ("task_schedule", "switch"): 8,
                           ("task_schedule", "complete"): 8}),
    "critical": Expect("8", regions=1, threads=(2,), sync={"barrier_implicit": 2},
                       other={("mutex_acquire", "critical"): 8,
                              ("mutex_acquired", "critical"): 8,
                              ("mutex_released", "critical"): 8}),
    # 3 OS threads when the worker of the first inner team, back in the pool,
    # also serves the second inner team (seen on every version, about 1 run in 4).
    "nested": Expect("4", regions=3, threads=(3, 4), sync={"barrier_implicit": 6}),
}

# The runtime's own name for a normalised kind, where it is not the same name.
RAW_NAME = {
    14: {},
    16: {},
    19: {"loop": "loop_dynamic", "barrier_implicit": "barrier_implicit_parallel"},
}
# Host callbacks the runtime does not support (ompt_set_never); all others: always.
NEVER = {14: {"dispatch"}, 16: set(), 19: set()}

WORK_AND_SYNC = ("work", "sync_region", "sync_region_wait")


# ---- building and running -------------------------------------------------------------


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    outdir = tmp_path_factory.mktemp("versions")
    with ThreadPoolExecutor(max_workers=4) as pool:
        built = list(pool.map(
            lambda name: compile_program(SOURCES / f"{name}.c", outdir / name, cc=GCC),
            EXPECT))
    return dict(zip(EXPECT, built))


@dataclass
class Run:
    version: int
    lib: Path
    outdir: Path
    proc: subprocess.CompletedProcess
    trace: ompt_py.Trace
    df: pd.DataFrame


@pytest.fixture(scope="module")
def traced(binaries, tmp_path_factory: pytest.TempPathFactory):
    """traced(program, version) -> Run: the program run once per version, with the tool."""
    cache: dict[tuple[str, int], Run] = {}

    def get(program: str, version: int) -> Run:
        if (program, version) not in cache:
            lib = require(version).resolve()
            outdir = tmp_path_factory.mktemp(f"{program}-{version}")
            r = run_with_tool([str(binaries[program])], outdir, LD_PRELOAD=str(lib))
            assert r.returncode == 0, f"{program} on libomp {version}: exit {r.returncode}\n" \
                                      f"{r.stdout}{r.stderr}"
            trace = ompt_py.load(outdir)
            cache[program, version] = Run(version, lib, outdir, r, trace, trace.to_pandas())
        return cache[program, version]

    return get


def names(column: pd.Series) -> list[str]:
    """The values of a (categorical) column as strings, '' for <NA>."""
    return ["" if pd.isna(v) else str(v) for v in column]


def shape(df: pd.DataFrame, events=WORK_AND_SYNC, column: str = "kind") -> Counter:
    """Multiset of (event, endpoint, kind name) of the given events."""
    sub = df[df["event"].isin(events)]
    return Counter(zip(names(sub["event"]), names(sub["endpoint"]), names(sub[column])))


def n(df: pd.DataFrame, event: str, endpoint: str | None = None, kind: str | None = None) -> int:
    m = df["event"] == event
    if endpoint is not None:
        m &= df["endpoint"] == endpoint
    if kind is not None:
        m &= df["kind"] == kind
    return int(m.sum())


# ---- tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"libomp{v}")
def test_tool_attaches_to_the_preloaded_runtime(traced, version):
    run = traced("dynamic", version)
    (proc,) = run.trace.meta["processes"]
    assert proc["tool"]["start_tool_calls"] == 1 and proc["tool"]["declined"] == 0
    assert proc["ld_preload"] == str(run.lib)
    (rt,) = proc["runtimes"]  # gcc's libgomp stays unused: no OMPT there anyway
    assert rt["initialized"]
    # Finalize ran (its final counters are in the file).  Not rt["finalized"]:
    # that is the state when the file was opened, usually but not always after
    # finalize for a program this short.
    assert proc["complete"]
    assert os.path.samefile(rt["path"], run.lib), rt["path"]
    # Every version reports the same strings (FACTS): only the path tells them apart.
    assert rt["version"] == "LLVM OMP version: 5.0.20140926"
    assert rt["omp_version"] == 201611

    levels = rt["callbacks"]
    core = {"thread_begin", "parallel_begin", "implicit_task", "task_create", "work",
            "sync_region", "sync_region_wait", "mutex_acquire", "dispatch"}
    assert core <= set(levels), sorted(levels)
    host = {name: level for name, level in levels.items()
            if not name.startswith(("target", "device"))}
    want = {name: "never" if name in NEVER[version] else "always" for name in host}
    assert host == want
    assert levels["dispatch"] == ("never" if version == 14 else "always")


@pytest.mark.parametrize("program", EXPECT)
@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"libomp{v}")
def test_exact_counts(traced, version, program):
    run, want = traced(program, version), EXPECT[program]
    df = run.df
    assert run.proc.stdout.strip() == want.output, run.proc.stdout
    assert run.trace.dropped == 0

    assert n(df, "parallel_begin") == n(df, "parallel_end") == want.regions
    assert n(df, "implicit_task", "begin") == n(df, "implicit_task", "end") == want.implicit_tasks
    assert n(df, "thread_begin") == n(df, "thread_end")
    assert n(df, "thread_begin") in want.threads
    assert len(run.trace.meta["processes"][0]["threads"]) == n(df, "thread_begin")
    begins = df[(df["event"] == "parallel_begin")]
    assert begins["team_size"].tolist() == [2] * want.regions  # requested team size

    for event in ("sync_region", "sync_region_wait"):
        for endpoint in ("begin", "end"):
            got = Counter(names(df.loc[(df["event"] == event) & (df["endpoint"] == endpoint),
                                       "kind"]))
            assert got == Counter(want.sync), (event, endpoint)

    work = df[df["event"] == "work"]
    assert Counter(names(work["kind"])) == Counter({"loop": 2 * len(want.loops)}
                                                         if want.loops else {})
    assert sorted(work.loc[work["endpoint"] == "begin", "count"].tolist()) == list(want.loops)

    dispatch = df[df["event"] == "dispatch"]
    if version == 14:
        assert dispatch.empty
    else:
        assert len(dispatch) == len(want.chunks)  # one per chunk
        assert set(names(dispatch["kind"])) <= {"ws_loop_chunk"}
        assert Counter(zip(dispatch["instance"].tolist(),
                           dispatch["chunk_iterations"].tolist())) == Counter(want.chunks)
        # The chunks cover every iteration of the loops (each thread's work
        # begin gives the loop's count) exactly once.
        loop_iterations = work.loc[work["endpoint"] == "begin", "count"].sum() // 2
        assert dispatch["chunk_iterations"].sum() == loop_iterations

    other = df[~df["event"].isin(["thread_begin", "thread_end", "parallel_begin",
                                  "parallel_end", "implicit_task", "dispatch", *WORK_AND_SYNC])]
    assert Counter(zip(names(other["event"]), names(other["kind"]))) == Counter(want.other)

    assert unmatched_scopes(run.trace.events, run.trace.pids) == []


@pytest.mark.parametrize("program", EXPECT)
@pytest.mark.parametrize("old", OLD, ids=lambda v: f"libomp{v}")
def test_one_vocabulary_across_versions(traced, old, program):
    then, now = traced(program, old), traced(program, 19)
    # `kind`: the same multiset per event and endpoint on both versions.
    assert shape(then.df) == shape(now.df)
    # `kind_raw`: each version's own name.
    for run in (then, now):
        sub = run.df[run.df["event"].isin(WORK_AND_SYNC)]
        for kind, raw in zip(names(sub["kind"]), names(sub["kind_raw"])):
            assert raw == RAW_NAME[run.version].get(kind, kind), (run.version, kind, raw)
    raw_then = shape(then.df, column="kind_raw")
    raw_now = shape(now.df, column="kind_raw")
    assert raw_then != raw_now  # every program has implicit barriers
    assert ("sync_region", "begin", "barrier_implicit") in raw_then
    assert ("sync_region", "begin", "barrier_implicit_parallel") in raw_now
    if EXPECT[program].loops:
        assert ("work", "begin", "loop") in raw_then
        assert ("work", "begin", "loop_dynamic") in raw_now
    # Apart from dispatch (none on 14) and the threads (see "nested"), the
    # whole trace has the same shape.
    every = [str(e) for e in now.df["event"].unique()
             if e not in ("dispatch", "thread_begin", "thread_end")]
    assert shape(then.df, every) == shape(now.df, every)
