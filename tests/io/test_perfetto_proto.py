"""The Perfetto protobuf export (``ompt-py export --format perfetto-proto``, a
``.pftrace`` path; docs/exports.md) against the JSON export, the reference:
the same stored traces converted both ways, the protobuf parsed with
Perfetto's own protos (the ``perfetto`` package, a test dependency) and read
back as Perfetto reads it (a stack of slices per track, interned strings
looked up), must give per thread the same slices (names, categories,
timestamps to the nanosecond, args, nesting), the same flows, the same
counter series and names of processes, threads and devices.

Traces: export-mixed (two processes, tasks and flows, locks, nested regions),
pystacks-inprocess (Python frames), offload.omptraw (devices and their
flows), regions-prog (user regions), known-tasks (many flows), a hand-made MPI
job (its ranks as processes: tests/mpi_records.py); then filtered exports of
export-mixed (a time window, threads, a process)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pytest
from conftest import cli, load_stored, no_traceback, ok, stored_path
from mpi_records import PID, RANKS, barriers, job, mpi
from test_export import ns

from ompt_py import _core
from ompt_py.io import export, perfetto_proto
from ompt_py.io.filters import ExportFilter
from ompt_py.io.perfetto import tracks

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                         reason="the perfetto package (pip install -e '.[test]')")

DEVICE_TID = 1 << 30


class ProtoTrace:
    """A protobuf trace read back as Perfetto reads it: per track (pid, tid, or
    ("device", pid, name), ("counter", pid, name)) its slices in the order they
    begin (dicts: ts, dur, name, cat, args, depth, parent), its counter values,
    the flows (id -> start slice, finish slice) and the names; the packet
    sequences of its events (``sequences``: a trace's one, a dataset's one per
    partition and one more), each with interned strings of its own."""

    def __init__(self, path) -> None:
        trace = pb.Trace()
        with open(path, "rb") as f:
            trace.ParseFromString(f.read())
        names: dict[tuple[int, str], dict[int, str]] = defaultdict(dict)
        tracks: dict[int, tuple] = {}
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.slices: dict[tuple, list[dict]] = defaultdict(list)
        self.counters: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        self.instants: list[dict] = []
        stacks: dict[tuple, list[dict]] = defaultdict(list)
        flow_from: dict[int, dict] = {}
        self.flows: dict[int, tuple[dict, dict]] = {}
        self.sequence_flags = []
        self.sequences: set[int] = set()
        for packet in trace.packet:
            seq = packet.trusted_packet_sequence_id
            if packet.HasField("interned_data"):
                data = packet.interned_data
                for kind, entries in (("cat", data.event_categories), ("name", data.event_names),
                                      ("key", data.debug_annotation_names)):
                    for e in entries:
                        assert e.iid not in names[seq, kind], "an iid interned twice"
                        names[seq, kind][e.iid] = e.name
                for e in data.debug_annotation_string_values:
                    names[seq, "value"][e.iid] = e.str.decode()
            if packet.HasField("track_descriptor"):
                d = packet.track_descriptor
                assert d.uuid not in tracks, "a track uuid described twice"
                if d.HasField("process"):
                    tracks[d.uuid] = ("process", d.process.pid)
                    self.process_names[d.process.pid] = d.process.process_name
                elif d.HasField("thread"):
                    tracks[d.uuid] = (d.thread.pid, d.thread.tid)
                    self.thread_names[d.thread.pid, d.thread.tid] = d.thread.thread_name
                else:
                    parent = tracks.get(d.parent_uuid, (None, None))[1]
                    kind = "counter" if d.HasField("counter") else "device"
                    tracks[d.uuid] = (kind, parent, d.name) if parent is not None else (d.name,)
            if not packet.HasField("track_event"):
                continue
            self.sequences.add(seq)
            e = packet.track_event
            track = tracks[e.track_uuid]
            if e.type == pb.TrackEvent.TYPE_COUNTER:
                self.counters[track].append((packet.timestamp, e.counter_value))
                continue
            if e.type == pb.TrackEvent.TYPE_SLICE_END:
                s = stacks[track].pop()
                s["dur"] = packet.timestamp - s["ts"]
                continue
            args = {}
            for a in e.debug_annotations:
                key = names[seq, "key"][a.name_iid]
                field = a.WhichOneof("value")
                value = getattr(a, field)
                if field == "string_value_iid":
                    value = names[seq, "value"][value]
                elif field == "pointer_value":
                    value = hex(value)
                args[key] = value
            s = {"ts": packet.timestamp, "name": names[seq, "name"][e.name_iid], "args": args,
                 "cat": names[seq, "cat"][e.category_iids[0]] if e.category_iids else None}
            if e.type == pb.TrackEvent.TYPE_INSTANT:
                self.instants.append(s)
                continue
            assert e.type == pb.TrackEvent.TYPE_SLICE_BEGIN
            s["depth"] = len(stacks[track])
            s["parent"] = stacks[track][-1] if stacks[track] else None
            stacks[track].append(s)
            self.slices[track].append(s)
            for flow in e.flow_ids:
                assert flow not in flow_from
                flow_from[flow] = s
            for flow in e.terminating_flow_ids:
                self.flows[flow] = (flow_from.pop(flow), s)
        assert not any(stacks.values()), "slices begun and never ended"
        assert not flow_from, "flows without a finish"


def json_tracks(events: list[dict]) -> tuple[dict, dict]:
    """The JSON's slices per track (keys as ProtoTrace's), in the order Perfetto's
    JSON importer takes them (time, then file order), with their depth and
    parent as its stack of complete slices gives them; and the device names."""
    devices = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] >= DEVICE_TID}
    tracks: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            key = (e["pid"], e["tid"])
            key = ("device", e["pid"], devices[key]) if key in devices else key
            args = {k: v for k, v in e["args"].items() if v is not None}
            tracks[key].append({"ts": ns(e["ts"]), "dur": ns(e["dur"]), "name": e["name"],
                                "cat": e["cat"], "args": args})
    for rows in tracks.values():
        rows.sort(key=lambda s: s["ts"])  # stable: file order at one time
        stack: list[dict] = []
        for s in rows:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= s["ts"]:
                stack.pop()
            s["depth"], s["parent"] = len(stack), stack[-1] if stack else None
            stack.append(s)
    return tracks, devices


def same_slices(proto: ProtoTrace, events: list[dict]) -> int:
    """Asserts the protobuf's slices are the JSON's, track by track: the same
    begins, ends, names, categories, args, depths and parents; returns how many."""
    tracks, _ = json_tracks(events)
    assert set(proto.slices) == set(tracks)
    for key, rows in tracks.items():
        mine = proto.slices[key]
        assert len(mine) == len(rows), key

        def plain(s):
            parent = s["parent"]
            return (s["ts"], s["dur"], s["name"], s["cat"], s["depth"], s["args"],
                    None if parent is None else (parent["ts"], parent["name"]))
        assert [plain(s) for s in mine] == [plain(s) for s in rows], key
    return sum(len(rows) for rows in tracks.values())


def same_flows(proto: ProtoTrace, events: list[dict]) -> int:
    """Each JSON flow ("s" then "f") is a protobuf flow from a slice holding its
    start to the slice on its finish's track that begins at its finish."""
    _, devices = json_tracks(events)
    ends = defaultdict(dict)
    for e in events:
        if e["ph"] in "sf":
            ends[e["id"]][e["ph"]] = e
    assert set(proto.flows) == set(ends)
    for flow, (source, target) in proto.flows.items():
        s, f = ends[flow]["s"], ends[flow]["f"]
        assert source in proto.slices[s["pid"], s["tid"]]
        assert source["ts"] <= ns(s["ts"]) <= source["ts"] + source["dur"]
        key = (f["pid"], f["tid"])
        assert target in proto.slices[("device", f["pid"], devices[key]) if key in devices
                                      else key]
        assert target["ts"] == ns(f["ts"])
    return len(ends)


def same_counters(proto: ProtoTrace, events: list[dict]) -> None:
    """The JSON counter's series, each as its changes, per process."""
    series = defaultdict(list)
    for e in sorted((e for e in events if e["ph"] == "C"), key=lambda e: e["ts"]):
        for name, value in e["args"].items():
            key = ("counter", e["pid"], f"{e['name']} {name}")
            if not series[key] or series[key][-1][1] != value:
                series[key].append((ns(e["ts"]), value))
    assert dict(proto.counters) == dict(series)


def both(trace, tmp_path, **filters) -> tuple[ProtoTrace, dict]:
    export(trace, tmp_path / "t.json", "perfetto", **filters)
    export(trace, tmp_path / "t.pftrace", "perfetto-proto", **filters)
    with open(tmp_path / "t.json") as f:
        doc = json.load(f)
    proto = ProtoTrace(tmp_path / "t.pftrace")
    assert proto.sequences == {perfetto_proto.SEQUENCE}
    return proto, doc


@pytest.mark.parametrize("name", ["export-mixed", "pystacks-inprocess", "offload.omptraw",
                                  "regions-prog", "known-tasks"])
def test_protobuf_carries_what_the_json_carries(name, tmp_path):
    trace = load_stored(name)
    proto, doc = both(trace, tmp_path)
    events = doc["traceEvents"]
    assert same_slices(proto, events) > 0
    same_flows(proto, events)
    same_counters(proto, events)
    meta = [e for e in events if e["ph"] == "M"]
    assert proto.process_names == {e["pid"]: e["args"]["name"] for e in meta
                                   if e["name"] == "process_name"}
    assert proto.thread_names == {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
                                  if e["name"] == "thread_name" and e["tid"] < DEVICE_TID}
    (instant,) = proto.instants
    assert instant["name"] == "ompt-py export"
    assert instant["args"]["producer"] == doc["otherData"]["producer"] == "ompt-py"
    assert instant["args"]["origin_mono_ns"] == doc["otherData"]["origin_mono_ns"]


def test_what_the_comparison_covers(tmp_path):
    """The stored traces exercise every part: nesting several deep, every category,
    task and offload flows, both counter series, devices, Python frames."""
    seen = Counter()
    for name in ("export-mixed", "pystacks-inprocess", "offload.omptraw"):
        proto, _ = both(load_stored(name), tmp_path)
        for key, rows in proto.slices.items():
            seen.update(s["cat"] for s in rows)
            seen["deep"] += any(s["depth"] >= 3 for s in rows)
            seen["device track"] += key[0] == "device"
        seen["flows"] += len(proto.flows)
        seen.update(key[2] for key in proto.counters)
    assert {"parallel", "implicit_task", "work", "sync", "sync_wait", "task", "mutex_wait",
            "mutex", "python", "target", "device"} <= set(seen)
    assert seen["deep"] and seen["device track"] and seen["flows"]
    assert seen["threads waiting sync"] and seen["threads waiting mutex"]


@pytest.mark.parametrize("filters", [
    {"start": "20ms", "end": "52ms"},
    {"threads": [1]},
    {"start": 20_000_000, "threads": "0", "pid": None},
])
def test_filtered_protobuf_is_the_filtered_json(filters, tmp_path):
    trace = load_stored("export-mixed")
    pid = trace.meta["processes"][0]["pid"]
    filters = {**filters, "pid": pid} if "pid" in filters else filters
    proto, doc = both(trace, tmp_path, **filters)
    events = doc["traceEvents"]
    assert same_slices(proto, events) > 0
    same_flows(proto, events)
    same_counters(proto, events)
    (instant,) = proto.instants
    assert json.loads(instant["args"]["export_filter"]) == doc["otherData"]["export_filter"]


def test_from_the_cli_by_suffix(tmp_path):
    out = tmp_path / "t.pftrace"
    r = ok(cli("export", stored_path("export-mixed"), "-o", out))
    assert "(perfetto-proto)" in r.stderr
    proto = ProtoTrace(out)
    assert len(proto.process_names) == 2
    r = cli("export", stored_path("export-mixed"), "-o", tmp_path / "t.bin")
    assert r.returncode == 2
    no_traceback(r)
    assert "give --format" in r.stderr and "perfetto-proto" in r.stderr


def test_empty_trace(tmp_path):
    import ompt_py

    ompt_py.Trace().to_perfetto(tmp_path / "e.pftrace")
    proto = ProtoTrace(tmp_path / "e.pftrace")
    assert not proto.slices and len(proto.instants) == 1


@pytest.mark.parametrize("name,filters", [
    ("export-mixed", {}), ("pystacks-inprocess", {}), ("offload.omptraw", {}),
    ("regions-prog", {}), ("export-mixed", {"start": "20ms", "end": "52ms", "threads": [1]}),
])
def test_slice_labels_are_what_the_batches_carry(name, filters):
    """Source.label (what the protobuf and OTF2 writers take, without the spans)
    gives, for any rows, the name and args Source.make gives them."""
    trace = load_stored(name)
    sources = list(tracks(trace, ExportFilter.of(trace, **filters)).sources)
    labelled = [s for s in sources if s.label is not None]
    assert {s.cat for s in labelled} >= {"parallel", "task", "sync"}
    for source in labelled:
        rows = np.arange(source.count)[::-2]  # every other row, backwards
        made = source.make(rows)
        name_of, args = source.label(rows)
        same_column(name_of, made.name)
        assert [key for key, _ in args] == [key for key, _ in made.args], source.cat
        for (_, got), (_, want) in zip(args, made.args):
            same_column(got, want)


def same_column(got, want) -> None:
    if isinstance(want, str):
        assert got == want
        return
    assert got.kind == want.kind and got.table == want.table
    np.testing.assert_array_equal(got.values, want.values)
    np.testing.assert_array_equal(got.missing, want.missing)


def test_packets_made_in_many_batches(monkeypatch, tmp_path):
    """Packets made a few at a time (each batch interning its new strings) read
    back as when made at once."""
    monkeypatch.setattr(perfetto_proto, "PACKETS_AT_ONCE", 64)
    trace = load_stored("export-mixed")
    proto, doc = both(trace, tmp_path)
    events = doc["traceEvents"]
    assert same_slices(proto, events) > 64
    same_flows(proto, events)
    same_counters(proto, events)


def test_the_same_file_whatever_the_threads_timing(monkeypatch, tmp_path):
    """Batches made at once by several threads intern their strings in their own
    order: the same trace gives the same bytes, export after export (and the
    same bytes as batches made one after the other)."""
    monkeypatch.setattr(perfetto_proto, "PACKETS_AT_ONCE", 64)
    trace = load_stored("export-mixed")
    made = []
    for i in range(4):
        export(trace, tmp_path / f"{i}.pftrace", "perfetto-proto")
        made.append((tmp_path / f"{i}.pftrace").read_bytes())
    monkeypatch.setattr(perfetto_proto, "in_order", lambda jobs: (job() for job in jobs))
    export(trace, tmp_path / "in-turn.pftrace", "perfetto-proto")
    assert all(m == made[0] for m in made)
    assert (tmp_path / "in-turn.pftrace").read_bytes() == made[0]


def test_the_ranks_of_a_job_are_processes_on_one_time_axis(tmp_path):
    """A hand-made job (tests/mpi_records.py): a process per rank named "rank N:
    command", with the JSON export's slices (MPI calls among them) at its times
    (rank 0's clock)."""
    calls = [*barriers([[1000, 1010, 1020, 1030]]), mpi(1, _core.MPI_ALLREDUCE, 2000, 2100)]
    proto, doc = both(job(calls), tmp_path)
    events = doc["traceEvents"]
    assert same_slices(proto, events) > 0
    assert {pid: name.split(":")[0] for pid, name in proto.process_names.items()} == {
        PID + r: f"rank {r}" for r in range(RANKS)}
    mpi_slices = [s for rows in proto.slices.values() for s in rows if s["cat"] == "mpi"]
    assert sorted((s["name"], s["ts"]) for s in mpi_slices) == sorted(
        [("MPI barrier", t) for t in (1000, 1010, 1020, 1030)] + [("MPI allreduce", 2000)])


def test_the_packets_kernel_refuses_what_names_nothing():
    """_core.proto_packets checks what it is given (without the GIL): a sequence
    naming a slice that is not there, payload offsets outside the payload or slots
    beyond the begins, a track without a uuid."""
    begin, end, track = (np.array([10, 30], np.int64), np.array([20, 40], np.int64),
                         np.array([0, 1], np.int16))
    none = np.zeros(0, np.int64)

    def packets(seq, offsets=(0, 1, 2), slots=(0, 1), uuids=(7, 8)):
        return _core.proto_packets(np.array(seq, np.uint32), begin, end, track,
                                   np.array(uuids, np.uint64), b"\x00\x00",
                                   np.array(offsets, np.int64), np.array(slots, np.int64),
                                   none, none, none, none, 1)
    assert packets([0, 1, 2, 3])  # both slices, begin then end
    with pytest.raises(ValueError, match="seq names a slice that is not there"):
        packets([0, 4])
    with pytest.raises(ValueError, match="offsets outside the payload"):
        packets([0, 2], offsets=(0, 1, 3))
    with pytest.raises(ValueError, match="offsets outside the payload"):
        packets([0, 2], slots=(0, 2))
    with pytest.raises(ValueError, match="a track without a uuid"):
        packets([0, 2], uuids=(7,))


@pytest.mark.parametrize("sources", [1, 3, 12, 100])
def test_the_slots_kernel_lays_out_the_payloads_source_by_source(sources):
    """_core.proto_slots: of a part of the sequence (begins 2 i and ends 2 i + 1
    in no order, each source's begins a range of its slices, some sources with
    none), per source its begins and first, and each begin's slot, as numpy finds
    them: the begins of the sources before it, then its place among its own."""
    rng = np.random.default_rng(sources)
    starts = np.cumsum(np.r_[0, rng.integers(0, 50, sources)]).astype(np.int64)
    slices = np.concatenate([np.arange(lo + rng.integers(0, hi - lo + 1), hi)
                             for lo, hi in zip(starts[:-1], starts[1:]) if rng.random() < 0.8]
                            or [np.zeros(0, np.int64)]).astype(np.int64)
    seq = np.concatenate([2 * slices, 2 * rng.choice(starts[-1] or 1, 40) + 1])
    seq = rng.permutation(seq).astype(np.uint32)
    count, first = np.full(sources, -5, np.int64), np.full(sources, -5, np.int64)
    slots = np.full(len(seq) + 3, -5, np.int64)
    begins = _core.proto_slots(seq, starts, count, first, slots)
    at = seq[seq % 2 == 0].astype(np.int64) // 2
    which = np.searchsorted(starts, at, "right") - 1
    want_count = np.bincount(which, minlength=sources)
    want_first = np.array([at[which == j].min() if want_count[j] else 0
                           for j in range(sources)], np.int64)
    assert begins == len(at) and count.tolist() == want_count.tolist()
    assert first.tolist() == want_first.tolist()
    base = np.cumsum(np.r_[0, want_count])[:-1]
    assert slots[:begins].tolist() == (base[which] + at - want_first[which]).tolist()


def test_the_slots_kernel_refuses_what_is_not_laid_out_so():
    """A begin of no source (below the first, at or past the end), a source's
    begins with a gap, slots shorter than the sequence, counts of other sources."""
    starts = np.array([0, 3, 5], np.int64)

    def slots(seq, starts=starts, count=2, out=None):
        seq = np.array(seq, np.uint32)
        return _core.proto_slots(seq, starts, np.empty(count, np.int64),
                                 np.empty(count, np.int64),
                                 np.empty(len(seq), np.int64) if out is None else out)
    assert slots([2, 0, 1, 6, 9]) == 3
    for seq in ([10], [2 * 7]):
        with pytest.raises(ValueError, match="seq names a slice that is not there"):
            slots(seq)
    with pytest.raises(ValueError, match="seq names a slice that is not there"):
        slots([0], starts=np.array([1, 3], np.int64), count=1)  # below the first
    with pytest.raises(ValueError, match="not a range of slices"):
        slots([0, 4])  # slices 0 and 2 of the first source, not 1
    with pytest.raises(ValueError, match="shorter than seq"):
        slots([0, 2], out=np.empty(1, np.int64))
    with pytest.raises(ValueError, match="proto_slots count"):
        slots([0], count=3)
    with pytest.raises(ValueError, match="proto_slots: starts"):
        slots([], starts=np.zeros(0, np.int64), count=0)
    assert slots([], starts=np.zeros(1, np.int64), count=0) == 0


def test_the_payloads_kernel_writes_its_parts_one_after_the_other():
    """_core.proto_payloads writes the rows of each part (a list of columns of as
    many rows) after those of the part before, with where each row starts; it
    refuses a part that is not a list, and columns of a part of other lengths."""
    def name_iid(*values):  # TrackEvent.name_iid, a varint field (tag 0x10)
        return (_core.PROTO_FIELD, 2, np.array(values, np.uint64), None, None)
    offsets = np.empty(4, np.int64)
    assert _core.proto_payloads([[name_iid(1, 2)], [name_iid(300)]], offsets) == (
        b"\x10\x01\x10\x02\x10\xac\x02")
    assert offsets.tolist() == [0, 2, 4, 7]
    with pytest.raises(TypeError, match="a part is a list of columns"):
        _core.proto_payloads([(name_iid(1),)], np.empty(2, np.int64))
    with pytest.raises(ValueError):
        _core.proto_payloads([[name_iid(1), name_iid(1, 2)]], np.empty(3, np.int64))


@pytest.mark.parametrize("index, pids, tids", [
    ({(5, 0): 0, (5, 1): 1, (5, 7): 2}, [5], [0, 1, 7, 3, 9, 70_000, 2**32 - 1]),  # a table
    ({(5, 0): 0, (6, 1): 1}, [5, 6], [0, 1, 2]),  # two processes
    ({(5, 0): 0, (5, DEVICE_TID): 1}, [5], [0, DEVICE_TID, 5]),  # a device's track
    ({(5, 0): 3}, [6], [0]), ({}, [5], [0])])
def test_track_index_is_the_index_s(index, pids, tids):
    """track_index gives each (pid, tid) its track in the index, -1 for none, by its
    table of thread numbers or by its search."""
    rng = np.random.default_rng(len(index))
    pid = rng.choice(np.array(pids, np.int32), 1000)
    tid = rng.choice(np.array(tids, np.uint32), 1000)
    want = [index.get((int(p), int(t)), -1) for p, t in zip(pid, tid)]
    got = perfetto_proto.track_index(index, pid, tid)
    assert got.dtype == np.int32 and got.tolist() == want
