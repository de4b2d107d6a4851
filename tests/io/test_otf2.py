"""The OTF2 export (``ompt-py export --format otf2 -o DIR``, ``Trace.to_otf2``;
docs/exports.md), read back by Debian's ``otf2-print`` (otf2-tools, in the
Makefile's DEBIAN_PACKAGES): the archive validates, has a location group per
process and a location per thread named as the JSON export names them, and
per location the JSON export's slices as Enter/Leave pairs of regions of
their names (the same counts per region name, the same times), each
location's events in time order and nested as a stack; the counter as Metric
events; the filter in the archive's properties.

Traces: export-mixed (two processes, tasks, locks), offload.omptraw (device
locations), pystacks-inprocess (Python frames), a hand-made MPI job (ranks
and MPI calls: tests/mpi_records.py).  The writer (ompt_py._otf2.Archive) is
also driven directly: its checks, and a million slices written out as they
come."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter, defaultdict

import numpy as np
import pytest
from conftest import cli, load_stored, no_traceback, ok, stored_path
from mpi_records import RANKS, barriers, job, mpi
from stall_records import stalled
from test_export import ns

from ompt_py import _core, _otf2
from ompt_py.analysis.states import STALL_LABEL
from ompt_py.errors import ConfigError
from ompt_py.io import export
from ompt_py.io import otf2 as otf2_io
from ompt_py.io.filters import ExportFilter

OTF2_PRINT = shutil.which("otf2-print")
pytestmark = pytest.mark.skipif(OTF2_PRINT is None, reason="otf2-print (Debian: otf2-tools; "
                                "make setup installs it)")
DEVICE_TID = 1 << 30

_NAME = r'"((?:[^"\\]|\\.)*)"'
_DEF = re.compile(rf"^(LOCATION_GROUP|LOCATION|REGION) +(\d+) +Name: {_NAME}(.*)$")
_GROUP = re.compile(rf"Group: {_NAME}")
_EVENT = re.compile(rf"^(ENTER|LEAVE|METRIC) +(\d+) +(\d+) +"
                    rf"(?:Region: {_NAME} <\d+>|Metric: (.*))$")


def otf2_print(*args) -> str:
    r = subprocess.run([OTF2_PRINT, *map(str, args)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


class Archive:
    """What otf2-print shows of an archive: locations (id -> (group, name, type)),
    per location its events (kind, time, region or metric values), properties."""

    def __init__(self, path) -> None:
        anchor = path / "traces.otf2"
        self.locations: dict[int, tuple[str, str, str]] = {}
        for line in otf2_print("-G", anchor).splitlines():
            m = _DEF.match(line)
            if m and m[1] == "LOCATION":
                kind = re.search(r"Type: (\w+)", m[4])[1]
                self.locations[int(m[2])] = (_GROUP.search(m[4])[1], m[3], kind)
        self.events: dict[int, list[tuple]] = defaultdict(list)
        for line in otf2_print(anchor).splitlines():
            m = _EVENT.match(line)
            if m:
                self.events[int(m[2])].append((m[1], int(m[3]), m[4] or m[5]))
        info = otf2_print("-I", anchor).splitlines()
        names = [line.split(None, 2)[2] for line in info if line.startswith("Property name")]
        values = [line.split(None, 2)[2] if len(line.split(None, 2)) > 2 else ""
                  for line in info if line.startswith("Property value")]
        self.properties = dict(zip(names, values))


def json_tracks(events) -> dict[tuple[str, str], list[dict]]:
    """The JSON export's slices per (location group, location): (process name, thread
    name), or for a device ("devices of" the process name, its name)."""
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            group = procs[e["pid"]]
            group = f"devices of {group}" if e["tid"] >= DEVICE_TID else group
            tracks[group, names[e["pid"], e["tid"]]].append(e)
    return tracks


def exported(trace, tmp_path, **filters) -> tuple[Archive, dict]:
    export(trace, tmp_path / "t.json", "perfetto", **filters)
    export(trace, tmp_path / "t.otf2", "otf2", **filters)
    with open(tmp_path / "t.json") as f:
        return Archive(tmp_path / "t.otf2"), json.load(f)


def check(archive: Archive, doc: dict) -> Counter:
    """The archive against the JSON export; returns the Enter events per region."""
    events = doc["traceEvents"]
    tracks = json_tracks(events)
    by_name = {(g, n): loc for loc, (g, n, kind) in archive.locations.items() if kind != "METRIC"}
    assert len(by_name) == len([1 for _, _, kind in archive.locations.values()
                                if kind != "METRIC"]), "two locations of one name in a group"
    assert set(tracks) <= set(by_name)
    regions = Counter()
    for key, loc in by_name.items():
        mine = archive.events.get(loc, [])
        times = [t for _, t, _ in mine]
        assert times == sorted(times), f"{key}: events out of time order"
        stack = []
        for kind, _, region in mine:
            if kind == "ENTER":
                stack.append(region)
            else:
                assert kind == "LEAVE" and stack.pop() == region, key
        assert not stack, key
        entered = Counter((region, t) for kind, t, region in mine if kind == "ENTER")
        left = Counter(region for kind, _, region in mine if kind == "LEAVE")
        rows = tracks.get(key, [])
        assert entered == Counter((e["name"], ns(e["ts"])) for e in rows), key
        assert left == Counter(e["name"] for e in rows), key
        regions.update(region for region, _ in entered.elements())
    # the counter: a Metric event per JSON counter event, on the process's METRIC location
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    counters = Counter(procs[e["pid"]] for e in events if e["ph"] == "C")
    metrics = Counter()
    for loc, (group, _, kind) in archive.locations.items():
        if kind == "METRIC":
            metrics[group] += sum(1 for k, _, _ in archive.events.get(loc, []) if k == "METRIC")
    assert metrics == counters
    return regions


@pytest.mark.parametrize("name", ["export-mixed", "offload.omptraw", "pystacks-inprocess"])
def test_archive_holds_the_slices_of_the_json(name, tmp_path):
    archive, doc = exported(load_stored(name), tmp_path)
    regions = check(archive, doc)
    assert sum(regions.values()) > 0
    assert archive.properties["OMPT_PY::PRODUCER"] == "ompt-py"
    groups = {g for g, _, _ in archive.locations.values()}
    assert groups >= {e["args"]["name"] for e in doc["traceEvents"]
                      if e["ph"] == "M" and e["name"] == "process_name"}


def test_what_the_archives_hold(tmp_path):
    """Every construct kind as a region, device and metric locations."""
    seen, kinds = Counter(), Counter()
    for name in ("export-mixed", "offload.omptraw"):
        archive, doc = exported(load_stored(name), tmp_path)
        seen.update(check(archive, doc))
        kinds.update(kind for _, _, kind in archive.locations.values())
    assert {"parallel region", "implicit task", "initial task", "task", "loop", "taskwait",
            "barrier_implicit wait", "critical", "lock", "critical wait"} <= set(seen)
    assert kinds["CPU_THREAD"] and kinds["ACCELERATOR_STREAM"] and kinds["METRIC"]


def test_a_stall_is_a_region_of_the_measurement_system(tmp_path):
    """The tool's stall (docs/stalls.md) on its thread, as Score-P marks its flushes."""
    trace, *_ = stalled(load_stored("known-skewed-static"))
    archive, doc = exported(trace, tmp_path)
    assert check(archive, doc)[STALL_LABEL] == 1
    defs = otf2_print("-G", tmp_path / "t.otf2" / "traces.otf2")
    (region,) = (line for line in defs.splitlines()
                 if line.startswith("REGION") and f'"{STALL_LABEL}"' in line)
    assert "Role: ARTIFICIAL" in region and "Paradigm: MEASUREMENT_SYSTEM" in region


def test_filtered_archive(tmp_path):
    trace = load_stored("export-mixed")
    archive, doc = exported(trace, tmp_path, start="20ms", end="52ms", threads=[0, 1])
    check(archive, doc)
    meta = json.loads(archive.properties["OMPT_PY::EXPORT_FILTER"])
    assert meta == doc["otherData"]["export_filter"]
    assert meta["clipped_slices"] > 0 and meta["threads"] == [0, 1]
    for loc, events in archive.events.items():
        assert all(20_000_000 <= t <= 52_000_000 for _, t, _ in events), loc


def test_from_the_cli_into_an_archive_or_not(tmp_path):
    trace = stored_path("export-mixed")
    out = tmp_path / "run.otf2"
    r = ok(cli("export", trace, "-o", out))
    assert "(otf2)" in r.stderr and (out / "traces.otf2").is_file()
    ok(cli("export", trace, "--format", "otf2", "-o", out))  # an archive is replaced
    other = tmp_path / "docs"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    r = cli("export", trace, "--format", "otf2", "-o", other)
    assert r.returncode == 2
    no_traceback(r)
    assert "traces.otf2" in r.stderr and (other / "notes.txt").read_text() == "mine"


def test_archives_joined_keep_each_location_s_events(tmp_path):
    """otf2.join (a dataset's archive, Dataset.to_otf2: tests/io/test_dataset_exports.py):
    the parts' definitions unified, each location's events read through its mapping
    tables; the device group of the second part under its own process's group (the
    group ids of a part after those of the parts before it)."""
    parts, alone = [], {}
    for name in ("export-mixed", "offload.omptraw"):
        trace = load_stored(name)
        directory = str(tmp_path / f"{name}.part")
        parts.append((directory, otf2_io.write_archive(trace, directory, ExportFilter())))
        trace.to_otf2(tmp_path / f"{name}.otf2")
        archive = Archive(tmp_path / f"{name}.otf2")
        alone.update({where: archive.events.get(loc, [])
                      for loc, where in archive.locations.items()})
    otf2_io.join(parts, tmp_path / "j.otf2")
    joined = Archive(tmp_path / "j.otf2")
    assert {where: joined.events.get(loc, []) for loc, where in joined.locations.items()} == alone
    assert len(joined.locations) == len(alone)
    assert any(kind == "ACCELERATOR_STREAM" for _, _, kind in joined.locations.values())
    creators = dict(re.findall(rf'^LOCATION_GROUP +\d+ +Name: {_NAME}.*Creator: (?:{_NAME}|UNDEF)',
                               otf2_print("-G", tmp_path / "j.otf2" / "traces.otf2"), re.M))
    (devices,) = [group for group in creators if group.startswith("devices of ")]
    assert creators[devices] == devices.removeprefix("devices of ")
    assert not (tmp_path / "j.otf2.partial").exists()


def test_without_the_extension_the_export_says_how_to_get_it(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "ompt_py._otf2", None)
    with pytest.raises(ConfigError, match="libotf2-trace-dev"):
        load_stored("export-mixed").to_otf2(tmp_path / "t.otf2")
    assert not (tmp_path / "t.otf2").exists()


def test_the_ranks_of_a_job_are_processes_on_one_time_axis_with_mpi_regions(tmp_path):
    """A hand-made job (tests/mpi_records.py): a location group per rank named
    "rank N: command" under the system tree node of its host, the slices of the
    JSON export at its times (rank 0's clock), and the MPI calls as regions of
    the MPI paradigm with their roles."""
    calls = [*barriers([[1000, 1010, 1020, 1030]]), mpi(0, _core.MPI_BCAST, 2000, 2100),
             mpi(1, _core.MPI_ALLREDUCE, 2000, 2100), mpi(2, _core.MPI_SEND, 2000, 2100),
             mpi(3, _core.MPI_INIT, 0, 500)]
    archive, doc = exported(job(calls), tmp_path)
    regions = check(archive, doc)
    groups = sorted({g for g, _, _ in archive.locations.values()})
    assert [g.split(":")[0] for g in groups] == [f"rank {r}" for r in range(RANKS)]
    assert regions["MPI barrier"] == RANKS
    roles, parents = {}, {}
    for line in otf2_print("-G", tmp_path / "t.otf2" / "traces.otf2").splitlines():
        m = _DEF.match(line)
        if m and m[1] == "REGION" and m[3].startswith("MPI "):
            roles[m[3]] = re.search(r"Role: (\w+), Paradigm: (\w+)", m[4]).groups()
        elif m and m[1] == "LOCATION_GROUP":
            parents[m[3].split(":")[0]] = re.search(rf"Parent: {_NAME}", m[4])[1]
        elif line.startswith("SYSTEM_TREE_NODE"):
            node = re.search(rf"Name: {_NAME}.*Parent: (UNDEFINED|{_NAME})", line)
            parents[node[1]] = node[3]
    # each rank under the system tree node of its host ("class::name"), the hosts under
    # the machine
    assert parents == {"rank 0": "node::node0", "rank 1": "node::node0",
                       "rank 2": "node::node1", "rank 3": "node::node1",
                       "node0": "machine::machine", "node1": "machine::machine",
                       "machine": None}
    assert roles == {"MPI barrier": ("BARRIER", "MPI"), "MPI bcast": ("COLL_ONE2ALL", "MPI"),
                     "MPI allreduce": ("COLL_ALL2ALL", "MPI"),
                     "MPI send": ("POINT2POINT", "MPI"), "MPI init": ("CODE", "MPI")}


#: Definitions of one process of two threads, and of region 0, for Archive.close.
_STRINGS = ["machine", "node", "process", "thread 0", "thread 1", "region"]
_DEFS = dict(regions=[(5, 4, 3)], nodes=[(0, 1, -1)], groups=[(2, 1, -1, 0)],
             locations=[(3, 1, 0), (4, 1, 0)])


def _close(archive, length: int, **defs) -> None:
    d = {**_DEFS, **defs}
    archive.close(_STRINGS, d["regions"], d["nodes"], d["groups"], d["locations"], [], 0,
                  length, [])


def test_the_writer_writes_events_out_as_they_come_without_flush_records(tmp_path):
    """libotf2 holds at most 16 chunks of 1 MiB of events (csrc/otf2/README.md) and
    writes a buffer out when it may have no more, adding no BUFFER_FLUSH record
    (those flushes are not the program's): 10^6 slices on two threads, some 24 MB
    of events, are all there, each location's in time order."""
    n = 1_000_000
    begin = np.arange(n, dtype=np.int64) * 10
    with _otf2.Archive(str(tmp_path / "a.otf2")) as archive:
        archive.slices(np.arange(2 * n, dtype=np.uint32), begin, begin + 5,
                       (np.arange(n) % 2).astype(np.int16), np.zeros(n, np.int32))
        _close(archive, int(begin[-1]) + 5)
    anchor = tmp_path / "a.otf2" / "traces.otf2"
    assert re.findall(r"# Events: (\d+)", otf2_print("-G", anchor)) == [str(n), str(n)]
    # per kind of record, how many, and how many went back in time on their location
    r = subprocess.run(f"{OTF2_PRINT} {anchor} | awk '/^[A-Z_]+ +[0-9]+ +[0-9]+ / "
                       "{n[$1]++; if ($3 < last[$2]) back++; last[$2] = $3} "
                       "END {for (k in n) print k, n[k]; print \"BACK\", back + 0}'",
                       shell=True, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    kinds = dict(line.split() for line in r.stdout.splitlines())
    assert kinds == {"ENTER": str(n), "LEAVE": str(n), "BACK": "0"}


def test_the_writer_refuses_events_of_nothing_defined(tmp_path):
    """Archive's checks: a sequence naming no slice; at close, an event's location or
    region not among the definitions (the archive is then closed as it is)."""
    one = (np.array([10], np.int64), np.array([20], np.int64), np.array([2], np.int16))
    with _otf2.Archive(str(tmp_path / "a.otf2")) as archive:
        with pytest.raises(ValueError, match="seq names a slice that is not there"):
            archive.slices(np.array([0, 3], np.uint32), *one, np.zeros(1, np.int32))
        with pytest.raises(ValueError, match="4 or 8 bytes"):
            archive.slices(np.array([0, 1], np.uint8), *one, np.zeros(1, np.int32))
        archive.slices(np.array([0, 1], np.uint32), *one, np.zeros(1, np.int32))  # location 2
        with pytest.raises(ValueError, match="location or region is not defined"):
            _close(archive, 20)
        with pytest.raises(ValueError, match="closed"):
            archive.metrics(0, np.zeros(1, np.int64), [np.zeros(1, np.int64)])
    with _otf2.Archive(str(tmp_path / "b.otf2")) as archive:
        archive.metrics(0, np.zeros(2, np.int64), [np.zeros(2, np.int64)] * 2)
        with pytest.raises(ValueError, match="not as many as before"):
            archive.metrics(0, np.ones(1, np.int64), [np.zeros(1, np.int64)])
        with pytest.raises(ValueError, match="not the metric members of the events"):
            _close(archive, 20)
