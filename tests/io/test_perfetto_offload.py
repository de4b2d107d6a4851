"""The device tracks of the Perfetto export (README, "Target offload"): on the
threads' tracks the target constructs, data operations and kernel submissions;
a track per device of each process ("device N (type)", one more per sub-track
where its operations overlap) with the kernels and transfers of
offload.device_track; a flow (cat "offload") from each host operation to its
kernel or transfer on the device's track.

Traces: tests/data/offload.omptraw (clang-19 host offload on two devices: no
device records, so the tracks hold the host-side operations) and a synthetic
version-6 trace with device records (tests/offload_records.py)."""

from __future__ import annotations

import json
from collections import Counter

from conftest import load_stored
from offload_records import OffloadRecords, program_with_device_records
from test_export import nested, ns, slices

from ompt_py.analysis import offload
from ompt_py.io.perfetto import DEVICE_TID


def exported(trace, path) -> dict:
    trace.to_perfetto(path)
    with open(path) as f:
        return json.load(f)


def track_names(events) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == "thread_name"}


def flows(events, cat: str) -> dict[int, dict[str, dict]]:
    out: dict[int, dict[str, dict]] = {}
    for e in events:
        if e["ph"] in "sf" and e["cat"] == cat:
            assert e["id"] not in out or e["ph"] not in out[e["id"]]
            out.setdefault(e["id"], {})[e["ph"]] = e
    return out


def test_stored_trace_device_tracks_slices_and_flows(tmp_path):
    trace = load_stored("offload.omptraw")
    events = exported(trace, tmp_path / "t.json")["traceEvents"]
    names = track_names(events)
    pid = trace.single_pid
    assert names[pid, DEVICE_TID] == "device 0" and names[pid, DEVICE_TID + 1] == "device 1"
    table = offload.device_track(trace)
    device = slices(events, "device")
    got = sorted((e["tid"] - DEVICE_TID, ns(e["ts"]), ns(e["dur"]), e["name"], e["args"]["bytes"])
                 for e in device)
    nbytes = table["bytes"].astype(object).where(table["bytes"].notna(), None)
    want = sorted(zip(table["device"], table["begin_ns"], table["end_ns"] - table["begin_ns"],
                      table["name"].astype(str), nbytes))
    assert got == want and len(got) == 26
    assert Counter(e["name"] for e in device)["kernel"] == 8
    # On the threads: every construct, data operation and submission.
    counts = Counter(e["cat"] for e in events if e["ph"] == "X")
    assert counts["target"] == 18 and counts["target_data_op"] == 38
    assert counts["target_submit"] == 8
    # A flow from each host operation (a data op or submission slice beginning
    # there) to its slice on the device's track; ids apart from the tasks'.
    host_ops = {(e["tid"], ns(e["ts"])) for e in events
                if e["ph"] == "X" and e["cat"] in ("target_data_op", "target_submit")}
    device_at = {(e["tid"], ns(e["ts"])) for e in device}
    offload_flows = flows(events, "offload")
    assert len(offload_flows) == 26
    for pair in offload_flows.values():
        start, finish = pair["s"], pair["f"]
        assert (start["tid"], ns(start["ts"])) in host_ops
        assert finish["bp"] == "e" and (finish["tid"], ns(finish["ts"])) in device_at
    assert not set(offload_flows) & set(flows(events, "task"))
    parents = nested(events)  # every track, the devices' too, nests
    assert parents["target_data_op", "target"] == 38
    assert parents["target_submit", "target"] == 8


def test_device_records_on_their_tracks_with_sub_tracks(tmp_path):
    """Device records of device 1 (clock: 3e12 + host ns), two kernels that overlap
    (a second track), one kernel of device 2 without clock pairs (not drawn,
    counted in otherData)."""
    b = OffloadRecords()
    program_with_device_records(b)
    b.device(20_100, 35, 2, 500, 600)
    trace = b.trace()
    trace.meta["devices"][0]["type"] = "emulated"
    written = exported(trace, tmp_path / "t.json")
    events = written["traceEvents"]
    assert written["otherData"]["device_operations_not_drawn"] == {"no clock fit": 1,
                                                                  "no device": 0}
    names = track_names(events)
    assert names[0, DEVICE_TID] == "device 1 (emulated)"
    assert names[0, DEVICE_TID + 1] == "device 1 (emulated) [2]"
    got = sorted((e["tid"], ns(e["ts"]), ns(e["dur"]), e["name"], e["args"]["source"])
                 for e in slices(events, "device"))
    assert got == [(DEVICE_TID, 170, 180, "transfer_to_device", "device"),
                   (DEVICE_TID, 1150, 3650, "kernel", "device"),
                   (DEVICE_TID + 1, 1200, 4000, "kernel", "device")]
    pairs = sorted((ns(f["s"]["ts"]), f["s"]["tid"], ns(f["f"]["ts"]), f["f"]["tid"])
                   for f in flows(events, "offload").values())
    assert pairs == [(160, 0, 170, DEVICE_TID), (1100, 0, 1150, DEVICE_TID)]
    nested(events)


def test_no_offload_no_device_tracks(tmp_path):
    events = exported(load_stored("export-mixed"), tmp_path / "t.json")["traceEvents"]
    assert not [e for e in events if e.get("tid", 0) >= DEVICE_TID]
    assert not [e for e in events if e.get("cat") in ("device", "offload", "target")]
