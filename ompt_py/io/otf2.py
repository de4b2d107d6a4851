"""The OTF2 export (``ompt-py export --format otf2 -o DIR``, an output ending in
``.otf2``; ``Trace.to_otf2``): an OTF2 archive, the Open Trace Format of
Score-P, which Vampir, Score-P's tools and ``otf2-print`` read: the directory
DIR holding ``traces.otf2`` (the anchor file), ``traces.def`` and
``traces/``.

It is made of the Perfetto export's slices (``perfetto.tracks``, filtered
as every export is):

* a location group (OTF2_LOCATION_GROUP_TYPE_PROCESS) per process, named as
  Perfetto names it (its command, "rank N: " first when it had a rank: the
  ranks of an MPI job on one time axis, rank 0's clock), under the system
  tree node of its host (class "node", its hostname), under one node
  "machine"; in it a location (CPU_THREAD) per thread ("thread N
  (type)"), and a location (METRIC) "threads waiting" for the counter; a group
  of type ACCELERATOR per process with offload ("devices of" the process's
  name), its location (ACCELERATOR_STREAM) per device track ("device N
  (type)");
* a region per slice name (OTF2_PARADIGM_OPENMP for the constructs, USER for
  user regions and Python frames, MPI for MPI calls, MEASUREMENT_SYSTEM with
  role ARTIFICIAL for the tool's stalls, "ompt-py: stall", as Score-P marks
  its buffer flushes), its role from the
  construct: PARALLEL for parallel regions, TASK for implicit, initial and
  explicit tasks, LOOP, SECTIONS or SINGLE for worksharing, BARRIER, IMPLICIT_BARRIER or
  TASK_WAIT for sync regions and their waits ("barrier_implicit wait"...),
  CRITICAL, ORDERED or ATOMIC for mutexes, DATA_TRANSFER for data operations,
  FUNCTION for Python frames and user regions, BARRIER, COLL_ONE2ALL (bcast,
  scatter), COLL_ALL2ONE (reduce, gather), COLL_ALL2ALL (allreduce,
  allgather, alltoall) or POINT2POINT (sends, receives, waits) for MPI
  calls, CODE for the rest (locks, taskgroups, kernels, MPI_Init ...);
* per slice an Enter and a Leave event on its location, each location's
  in time order, nested as a stack (the order ``_core.proto_nest`` makes for
  the Perfetto protobuf export);
* a Metric event (members "sync" and "mutex", the threads waiting) at each
  change of the counter.

Timestamps are the trace's nanoseconds from its origin (ClockProperties:
resolution 10^9/s, offset 0).  Args, flows and per-slice source locations
have no place in OTF2's region model and are left out.  The archive's
properties (``OMPT_PY::...``) hold the JSON export's otherData, with the
export filter and what it clipped.  The events are written by the optional
``_otf2`` extension (csrc/otf2/, linked against libotf2): the slices' Enter
and Leave events first, then, their order freed, the counter made and
written a batch at a time, then the definitions; libotf2 holds a few MiB of
events and writes them out as they come.  The archive is made beside DIR and
moved there once whole.

A dataset's archive (``Dataset.to_otf2``, io.dataset.export) is joined from
archives of its partitions (``write_archive``, each with its own ids, written
where the partition is read): ``join`` unifies their definitions, writes
them with a mapping table per location (the part's strings and regions to the
archive's; the extension's ``definitions``) and moves the parts' event files
in, as Score-P makes its archives.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from ..records import MPI_CALL_KINDS
from .filters import ExportFilter
from .perfetto import STALL_CAT, Label, Part, Source, other_data, tracks
from .perfetto_proto import SliceOrder, runs
from .streaming import Progress, batches, in_order

if TYPE_CHECKING:
    from ..trace import Trace

#: The anchor file of an archive.
ANCHOR = "traces.otf2"
DEVICE_TID = 1 << 30  # perfetto.DEVICE_TID: the devices' tracks

# OTF2's enums (otf2/OTF2_Definitions.h, OTF2_GeneralDefinitions.h)
_OPENMP, _USER, _MPI, _MEASUREMENT = 3, 1, 4, 6
_GROUP_PROCESS, _GROUP_ACCELERATOR = 1, 2
_CPU_THREAD, _ACCELERATOR_STREAM, _METRIC = 1, 2, 3
(_FUNCTION, _LOOP, _CODE, _PARALLEL, _SECTIONS, _SINGLE, _CRITICAL, _ATOMIC, _BARRIER,
 _IMPLICIT_BARRIER, _ORDERED, _TASK, _TASK_WAIT, _DATA_TRANSFER) = (
    1, 3, 4, 5, 6, 9, 12, 14, 15, 16, 18, 20, 22, 30)
_COLL_ONE2ALL, _COLL_ALL2ONE, _COLL_ALL2ALL, _POINT2POINT = 23, 24, 25, 28
_ARTIFICIAL = 31
_MAPPING_STRING, _MAPPING_REGION = 0, 3  # OTF2_MappingType
#: The role of each MPI call's region ("MPI barrier"...: records.MPI_CALLS); setup
#: calls (MPI_Init, MPI_Finalize, ompt-py's clock measurement) have none: CODE.
_MPI_ROLES = {
    "barrier": _BARRIER, "bcast": _COLL_ONE2ALL, "scatter": _COLL_ONE2ALL,
    "reduce": _COLL_ALL2ONE, "gather": _COLL_ALL2ONE, "allreduce": _COLL_ALL2ALL,
    "allgather": _COLL_ALL2ALL, "alltoall": _COLL_ALL2ALL,
    **{call: _POINT2POINT for call, kind in MPI_CALL_KINDS.items()
       if kind in ("point_to_point", "wait")}}


def _role(cat: str, name: str) -> int:
    """The OTF2 region role of a slice of category ``cat`` named ``name``."""
    if cat in ("python", "user_region"):
        return _FUNCTION
    if cat == STALL_CAT:  # as Score-P's buffer flushes: the measurement system's
        return _ARTIFICIAL
    if cat == "mpi":
        return _MPI_ROLES.get(name.removeprefix("MPI "), _CODE)
    if cat == "parallel":
        return _PARALLEL
    if cat in ("implicit_task", "task"):
        return _TASK
    if cat == "target_data_op":
        return _DATA_TRANSFER
    by_name = (("barrier_implicit", _IMPLICIT_BARRIER), ("barrier", _BARRIER),
               ("taskwait", _TASK_WAIT), ("taskloop", _LOOP), ("loop", _LOOP),
               ("distribute", _LOOP), ("sections", _SECTIONS), ("single", _SINGLE),
               ("critical", _CRITICAL), ("ordered", _ORDERED), ("atomic", _ATOMIC))
    return next((role for stem, role in by_name if name.startswith(stem)), _CODE)


def _writer() -> ModuleType:
    """The _otf2 extension; ConfigError, saying how to get it, without it."""
    try:
        return importlib.import_module("._otf2", __package__.rpartition(".")[0])
    except ImportError as e:
        raise ConfigError(
            "the OTF2 export needs ompt-py built with libotf2, which this installation was "
            "not: install libotf2 and its headers (Debian: apt-get install libotf2-trace-dev; "
            "or Score-P's OTF2, with otf2-config on PATH), then reinstall ompt-py (make setup, "
            "or pip install --force-reinstall --no-deps ompt-py)") from e


class _Names:
    """The archive's strings (a StringRef each) and regions (per name and role)."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.refs: dict[str, int] = {}
        self.regions: list[tuple[int, int, int]] = []
        self.region_ids: dict[tuple[str, int, int], int] = {}

    def ref(self, text: str) -> int:
        if text not in self.refs:
            self.refs[text] = len(self.strings)
            self.strings.append(text)
        return self.refs[text]

    def region(self, cat: str, name: str) -> int:
        paradigm = {"python": _USER, "user_region": _USER, "mpi": _MPI,
                    STALL_CAT: _MEASUREMENT}.get(cat, _OPENMP)
        return self.defined(name, _role(cat, name), paradigm)

    def defined(self, name: str, role: int, paradigm: int) -> int:
        """The region of ``name``, ``role`` and ``paradigm`` (defined if new)."""
        key = (name, role, paradigm)
        if key not in self.region_ids:
            self.region_ids[key] = len(self.regions)
            self.regions.append((self.ref(name), role, paradigm))
        return self.region_ids[key]


@dataclass(frozen=True)
class Definitions:
    """The definitions of an archive written (write_archive), as ``Archive.close``
    takes them, with each location's number of events, the clock's length and the
    otherData its properties hold: what a dataset's part gives back for ``join``."""

    strings: list[str]
    regions: list[tuple[int, int, int]]
    nodes: list[tuple[int, int, int]]
    groups: list[tuple[int, int, int, int]]
    locations: list[tuple[int, int, int]]
    counts: list[int]
    members: list[tuple[int, int]]
    length: int
    other: dict


def _regions(cat: str, label: Callable[[Part], Label], count: int, names: _Names
             ) -> np.ndarray:
    """The region of each of the ``count`` slices of a source of category ``cat``
    (its labels made a batch at a time)."""
    out = np.empty(count, np.int32)
    parts = list(batches(count))
    for part, (name, _) in zip(parts, in_order(lambda p=p: label(p) for p in parts)):
        if isinstance(name, str):
            out[part] = names.region(cat, name)
        else:  # a column of JSON names: the regions of the names it uses
            codes = name.values.astype(np.int64)
            table = np.full(len(name.table) + 1, -1, np.int32)  # the last: a code of -1
            for code in np.unique(codes).tolist():
                if 0 <= code < len(name.table) and name.table[code] != b"null":
                    table[code] = names.region(cat, json.loads(name.table[code]))
            out[part] = table[codes]
    if (out < 0).any():
        raise ValueError(f"{cat} slices without a name")
    return out


def _write_slices(archive: Any, slices: list[Source], index: dict[tuple[int, int], int],
                  names: _Names) -> int | None:
    """The Enter and Leave events of ``slices`` (a list SliceOrder empties), each
    location's in the order of a stack; returns the last end (None: no slice).
    The order's arrays are freed on return, before the counter is made."""
    with Progress(sum(s.count for s in slices), "otf2") as progress:
        order = SliceOrder(slices, index)
        region = np.empty(int(order.starts[-1]), np.int32)
        for (cat, label), perm, start, stop in zip(order.labels, order.perm, order.starts[:-1],
                                                  order.starts[1:]):
            region[start:stop] = order.arranged(perm, _regions(cat, label, stop - start, names))
        order.labels.clear()  # what they read (the begins' rows...) is not needed any more
        order.nest(len(index), np.zeros(0, np.int32), np.zeros(0, np.int64))
        archive.slices(order.seq, order.begin, order.end, order.track, region)
        progress.update(len(region))
    return int(order.end.max()) if len(order.end) else None


def _write_counter(archive: Any, counter: Source, names: _Names,
                   locations: list[tuple[int, int, int]], group_of: dict[int, int]
                   ) -> tuple[list[tuple[int, int]], int | None]:
    """The counter's Metric events, a batch at a time, on a location (appended to
    ``locations``) per process, in the order of the processes (the counter's
    rows come by process, then time); returns the metric's members and the last
    time (None: no row)."""
    members = [(names.ref(name), names.ref("threads"))
               for name, _ in counter.make(slice(0, 0)).series]
    location_of: dict[int, int] = {}
    last = None
    for part in batches(counter.count):
        batch = counter.make(part)
        for pid, first, stop in runs(batch.pid):
            if pid not in location_of:
                location_of[pid] = len(locations)
                locations.append((names.ref("threads waiting"), _METRIC, group_of[pid]))
            rows = slice(first, stop)
            archive.metrics(location_of[pid], np.ascontiguousarray(batch.time[rows], np.int64),
                            [np.ascontiguousarray(v[rows], np.int64) for _, v in batch.series])
        if len(batch.time):
            latest = int(batch.time.max())
            last = latest if last is None else max(last, latest)
    return members, last


def _properties(other: dict) -> list[tuple[str, str]]:
    """The archive's properties (OMPT_PY::KEY) of the JSON export's otherData."""
    return [(f"OMPT_PY::{key.upper()}", value if isinstance(value, str) else json.dumps(value))
            for key, value in other.items() if value is not None]


def target(path: str) -> str:
    """``path``, checked: a new name, an empty directory or an OTF2 archive (which
    the new one replaces); ConfigError otherwise."""
    if os.path.isdir(path) and os.listdir(path) and not os.path.exists(
            os.path.join(path, ANCHOR)):
        raise ConfigError(f"cannot write an OTF2 archive into {path}: it is a directory that "
                          f"holds files but no {ANCHOR}; give a new or empty directory")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"cannot write an OTF2 archive to {path}: it is a file; an archive "
                          "is a directory, give a new name")
    return path


def write(trace: Trace, path: str | os.PathLike, flt: ExportFilter | None = None) -> None:
    """Writes ``trace`` as an OTF2 archive in the directory ``path`` (made; an
    archive there is replaced), of what ``flt`` keeps (default: everything)."""
    path = target(os.fspath(path))
    partial = f"{path}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        write_archive(trace, partial, flt or ExportFilter())
        _replace(partial, path)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _replace(partial: str, path: str) -> None:
    """The archive made in ``partial`` moved to ``path`` (an archive there replaced)."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.replace(partial, path)


def write_archive(trace: Trace, directory: str, flt: ExportFilter) -> Definitions:
    """Writes ``trace`` (what ``flt`` keeps of it) as an OTF2 archive in ``directory``
    (a new name); returns its definitions."""
    otf2 = _writer()
    made = tracks(trace, flt)
    sources = list(made.sources)
    if made.frames is not None:
        sources.insert(0, made.frames())
    slices = [s for s in sources if s.slices]
    del sources
    names = _Names()
    # The system tree: the machine, and under it a node per host of the processes.
    host = {p["pid"]: p.get("hostname") for p in trace.meta.get("processes", [])}
    nodes = [(names.ref("machine"), names.ref("machine"), -1)]
    node_of: dict[str, int] = {}
    for name in sorted({h for h in host.values() if h}):
        node_of[name] = len(nodes)
        nodes.append((names.ref(name), names.ref("node"), 0))
    # Groups and locations, from the metadata's processes and tracks.
    groups: list[tuple[int, int, int, int]] = []
    locations: list[tuple[int, int, int]] = []
    group_of: dict[int, int] = {}
    devices_of: dict[int, int] = {}
    index: dict[tuple[int, int], int] = {}
    for m in made.metadata:
        pid = m["pid"]
        if m["name"] == "process_name":
            group_of[pid] = len(groups)
            groups.append((names.ref(m["args"]["name"]), _GROUP_PROCESS, -1,
                           node_of.get(host.get(pid) or "", 0)))
        elif m["name"] == "thread_name":
            tid = m["tid"]
            if tid >= DEVICE_TID and pid not in devices_of:
                devices_of[pid] = len(groups)
                process = names.strings[groups[group_of[pid]][0]]
                groups.append((names.ref(f"devices of {process}"), _GROUP_ACCELERATOR,
                               group_of[pid], groups[group_of[pid]][3]))
            group = devices_of[pid] if tid >= DEVICE_TID else group_of[pid]
            index[pid, tid] = len(locations)
            locations.append((names.ref(m["args"]["name"]),
                              _ACCELERATOR_STREAM if tid >= DEVICE_TID else _CPU_THREAD, group))
    with otf2.Archive(directory) as archive:
        last_end = _write_slices(archive, slices, index, names)
        members, last_time = _write_counter(archive, made.counter(), names, locations, group_of)
        other = made.other()
        length = max((t for t in (last_end, last_time) if t is not None), default=0)
        counts = archive.close(names.strings, names.regions, nodes, groups, locations, members,
                               0, length, _properties(other))
    return Definitions(names.strings, names.regions, nodes, groups, locations, counts, members,
                       length, other)


def event_files(directory: str, defs: Definitions) -> list[str]:
    """The event file of each location of the archive in ``directory``."""
    return [os.path.join(directory, "traces", f"{i}.evt") for i in range(len(defs.locations))]


def join(parts: list[tuple[str, Definitions]], path: str | os.PathLike) -> None:
    """One archive at ``path`` (an archive there replaced) of the archives ``parts``
    (each its directory and definitions: write_archive's, a dataset's partitions in
    order), made here as Score-P makes its archives: the parts' definitions
    unified (strings, regions and system tree nodes once; the groups and locations
    of each part after those of the parts before it), written with a mapping
    table per location (each part's own string and region ids to the archive's,
    which readers apply to its events), and the parts' event files moved in,
    renamed to their locations' ids in the archive."""
    otf2 = _writer()
    path = target(os.fspath(path))
    names = _Names()
    nodes: list[tuple[int, int, int]] = []
    node_ids: dict[tuple[int, int, int], int] = {}
    groups: list[tuple[int, int, int, int]] = []
    locations: list[tuple[int, int, int, int]] = []
    mappings: list[list[tuple[int, np.ndarray]]] = []
    members = [(names.ref(name), names.ref(unit)) for name, unit in _member_names(parts)]
    moves: list[tuple[str, int]] = []
    for directory, defs in parts:
        string = np.array([names.ref(text) for text in defs.strings], np.uint64)
        region = np.array([names.defined(defs.strings[name], role, paradigm)
                           for name, role, paradigm in defs.regions], np.uint64)
        node = []
        for name, kind, parent in defs.nodes:  # parents before their children
            key = (int(string[name]), int(string[kind]), node[parent] if parent >= 0 else -1)
            if key not in node_ids:
                node_ids[key] = len(nodes)
                nodes.append(key)
            node.append(node_ids[key])
        first = len(groups)
        groups.extend((int(string[name]), kind, creator + first if creator >= 0 else -1,
                       node[at]) for name, kind, creator, at in defs.groups)
        for (name, kind, group), count, evt in zip(defs.locations, defs.counts,
                                                   event_files(directory, defs)):
            moves.append((evt, len(locations)))
            locations.append((int(string[name]), kind, group + first, count))
            mappings.append([(_MAPPING_STRING, string), (_MAPPING_REGION, region)])
    partial = f"{path}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        otf2.definitions(partial, names.strings, names.regions, nodes, groups, locations,
                         members, 0, max((d.length for _, d in parts), default=0),
                         _properties(other_data(d.other for _, d in parts)), mappings)
        os.makedirs(os.path.join(partial, "traces"), exist_ok=True)
        for evt, location in moves:
            os.replace(evt, os.path.join(partial, "traces", f"{location}.evt"))
        _replace(partial, path)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _member_names(parts: list[tuple[str, Definitions]]) -> list[tuple[str, str]]:
    """The counter's metric members (name, unit) of the ``parts``: the same in each
    (one metric class, 0, in every part: no mapping table needed)."""
    named = {tuple((d.strings[name], d.strings[unit]) for name, unit in d.members)
             for _, d in parts}
    if len(named) > 1:
        raise ValueError(f"the parts' counters have different members ({sorted(named)}): "
                         "parts of one version of ompt-py can be joined")
    return list(named.pop()) if named else []
