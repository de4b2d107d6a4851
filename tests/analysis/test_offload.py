"""The offload tables (ompt_py.analysis.offload) on synthetic version-6 traces
built record by record (OffloadRecords), and on tests/data/offload.omptraw (a
clang-19 host-offload program, tests/programs/offload.c, recorded with record
version 5: no ``more`` or device records)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from offload_records import ALLOC, FROM, TARGET, TO, OffloadRecords, program

import ompt_py
from ompt_py.analysis import offload
from ompt_py.meta import trace_meta
from ompt_py.records import EVENT_CODES, EVENT_DTYPE

DATA = Path(__file__).resolve().parents[1] / "data"
E = EVENT_CODES
def test_target_regions_one_row_per_construct() -> None:
    b = OffloadRecords()
    program(b)
    t = b.trace().target_regions()
    assert t["kind"].astype(str).tolist() == ["target_enter_data", "target", "target_update",
                                              "target_exit_data", "target"]
    assert t["nowait"].tolist() == [False, False, False, False, True]
    assert t["duration_ns"].tolist() == [300, 4000, 1000, 1000, 400]
    assert (t["device"] == 1).all() and (t["task_id"] == 1).all()
    assert {"py_stack", "py_location", "location", "codeptr"} <= set(t.columns)
    assert t.attrs["unmatched_begins"] == 0 and t.attrs["unmatched_ends"] == 0


def test_data_ops_bytes_addresses_bandwidth_and_region() -> None:
    b = OffloadRecords()
    program(b)
    trace = b.trace()
    d = trace.data_ops()
    assert d["kind"].astype(str).tolist() == ["alloc", "transfer_to_device",
                                              "transfer_from_device", "transfer_from_device",
                                              "delete"]
    assert d["bytes"].tolist() == [4096, 4096, 1024, 4096, 4096]
    assert d["src_device"].tolist() == [-1, -1, 1, 1, 1]
    assert d["src_addr"].tolist() == [0x1000] * 5 and d["dest_addr"].tolist() == [0x2000] * 5
    assert d["bandwidth"].iloc[1] == pytest.approx(4096 / 200e-9)
    assert np.isnan(d["bandwidth"].iloc[0])  # an alloc moves nothing
    regions = trace.target_regions()
    kinds = regions["kind"].astype(str).to_numpy()[d["target_region"].to_numpy(np.int64)]
    assert kinds.tolist() == ["target_enter_data", "target_enter_data", "target_update",
                              "target_exit_data", "target_exit_data"]
    assert d.attrs["more_orphans"] == 0 and d.attrs["more_missing"] == 0


def test_kernels_with_granted_teams_from_the_device_record() -> None:
    b = OffloadRecords()
    ids = program(b)
    b.clock(10, 20, 1, 5_000)
    b.clock(20_000, 20_010, 1, 25_000)
    b.device(20_100, 35, 1, 6_000, 9_000, host_op_id=ids["kernel"],
             target_id=ids["kernel_target"], u32a=8, u32b=4)
    k = b.trace().kernels()
    assert len(k) == 1
    row = k.iloc[0]
    assert (row["requested_teams"], row["granted_teams"], row["device"]) == (8, 4, 1)
    assert row["duration_ns"] == 3800 and row["target_id"] == ids["kernel_target"]


def test_device_ops_clock_fit_offset_drift_and_outlier() -> None:
    """Device clock = 3e12 + 1.0002 * host; an outlier pair (host reads 1 ms apart,
    its midpoint 400 us off) is left out; translate_time answers in seconds."""
    b = OffloadRecords()
    ids = program(b)

    def dev(host: float) -> int:
        return int(3e12 + 1.0002 * host)
    for host in range(10_000, 2_000_000, 100_000):
        b.clock(host - 50, host + 50, 1, dev(host), translated=1.7e9 + host * 1e-9)
    b.clock(1_000_000, 2_000_000, 1, dev(1_100_000))  # midpoint 1.5 ms: 400 us late
    b.device(2_100_000, 34, 1, dev(160), dev(360), host_op_id=ids["ops"][1], kind=TO,
             u64a=0x1000, u64b=0x2000, parallel_id=4096, u32a=0xFFFFFFFF, u32b=1)
    b.device(2_100_000, 35, 1, dev(1100), dev(4900), host_op_id=ids["kernel"], u32a=8, u32b=8)
    b.device(2_100_000, 33, 1, dev(1000), 0, target_id=ids["kernel_target"], kind=TARGET,
             u32a=1, u64a=ids["kernel_target"])
    b.device(2_100_000, 34, 1, dev(8000), dev(7000), host_op_id=ids["ops"][3], kind=FROM)
    trace = b.trace()
    clock = trace.meta["devices"][0]["clock"]
    assert trace.meta["devices"][0]["device"] == 1
    assert clock["pairs"] == 20 and clock["residual_ns"] < 2
    assert clock["slope"] == pytest.approx(1 / 1.0002, rel=1e-9)
    ops = trace.device_ops()
    assert ops["type"].astype(str).tolist() == ["data_op", "kernel", "target", "data_op"]
    assert abs(ops["begin_ns"].iloc[0] - 160) <= 2 and abs(ops["end_ns"].iloc[1] - 4900) <= 2
    assert pd.isna(ops["end_ns"].iloc[2]) and pd.isna(ops["device_end"].iloc[2])
    assert ops["bad_time"].tolist() == [False, False, False, True]
    assert ops["translated_begin_s"].iloc[1] == pytest.approx(1.7e9 + 1100e-9, abs=1e-6)
    d, k, t = trace.data_ops(), trace.kernels(), trace.target_regions()
    assert d["host_op_id"].iloc[ops["data_op"].iloc[0]] == ids["ops"][1]
    assert k["host_op_id"].iloc[ops["kernel"].iloc[1]] == ids["kernel"]
    assert t["target_id"].iloc[ops["target_region"].iloc[2]] == ids["kernel_target"]
    first = ops.iloc[0]
    assert (first["op"], first["bytes"], first["src_device"], first["dest_device"]) == (
        "transfer_to_device", 4096, -1, 1)
    assert first["record_thread"] == 77
    assert ops["op"].iloc[2] == "target"
    assert ops.attrs["clock"][(0, 1)]["pairs"] == 20


def test_one_clock_pair_offsets_none_leaves_device_times_raw() -> None:
    b = OffloadRecords()
    b.clock(1000, 1010, 0, 50_000)
    b.device(2000, 35, 0, 51_000, 52_000)
    b.device(2000, 35, 2, 51_000, 52_000)  # device 2: no pair
    trace = b.trace()
    clocks = {d["device"]: d["clock"] for d in trace.meta["devices"]}
    assert clocks[0]["slope"] == 1.0 and clocks[0]["pairs"] == 1
    assert 0 not in {d for d in clocks if d != 0}
    ops = trace.device_ops()
    assert ops["begin_ns"].iloc[0] == 2005 and ops["end_ns"].iloc[0] == 3005
    assert pd.isna(ops["begin_ns"].iloc[1]) and ops["device_begin"].iloc[1] == 51_000
    assert ops.attrs["clock"][(0, 2)] == offload.NO_CLOCK


def test_meta_device_entries_get_their_clock() -> None:
    b = OffloadRecords()
    b.clock(1000, 1010, 0, 50_000)
    events = b.events()
    meta = trace_meta([{"pid": 7, "written": 1, "dropped": 0, "threads": []}], 0)
    meta["devices"] = [{"device": 0, "type": "emulated"}, {"device": 1, "type": "emulated"}]
    trace = ompt_py.Trace.from_records(events, meta)
    assert trace.meta["devices"][0]["clock"]["pairs"] == 1
    assert trace.meta["devices"][1]["clock"] == offload.NO_CLOCK
    assert len(trace.meta["devices"]) == 2


def test_more_pairing_counts_orphans_and_missing() -> None:
    """A ``more`` follows its primary in its thread's order even when another
    thread's records come between them in the array; one without its primary
    and a primary without its ``more`` are counted."""
    b = OffloadRecords()
    t = b.target(0, 1000)
    b.data_op(10, 20, TO, 8, -1, 0, t, addrs=(0xA, 0xB))
    b.rows.insert(len(b.rows) - 1, {"time_ns": 20, "event": E["work"], "thread": 9})
    b.data_op(30, 40, TO, 8, -1, 0, t, more=False)  # two records without their more
    b.target(50, 60)
    b.rec(60, E["more"], 0, kind=E["target_data_op_emi"])  # after a target end: an orphan
    b.rec(70, E["more"], 4, kind=E["target_data_op_emi"])  # first of its thread: an orphan
    d = b.trace().data_ops()
    assert d["src_addr"].iloc[0] == 0xA and d["dest_addr"].iloc[0] == 0xB
    assert pd.isna(d["src_addr"].iloc[1])
    assert d.attrs["more_missing"] == 2 and d.attrs["more_orphans"] == 2
    assert offload.more_links(b.trace()).missing == {"target_data_op_emi": 2}


def test_version_5_traces_have_no_more_and_count_nothing_missing() -> None:
    b = OffloadRecords()
    t = b.target(0, 1000)
    b.data_op(10, 20, TO, 8, -1, 0, t, more=False)
    d = b.trace(version=5).data_ops()
    assert len(d) == 1 and pd.isna(d["src_addr"].iloc[0])
    assert d.attrs["more_missing"] == 0
    assert b.trace(version=6).data_ops().attrs["more_missing"] == 2


def test_non_emi_events_are_instants() -> None:
    b = OffloadRecords()
    t = b.target(0, 1000, emi=False, target_id=55)
    b.data_op(10, None, TO, 64, -1, 0, 55)
    b.submit(30, None, 55, teams=2)
    trace = b.trace()
    assert trace.target_regions()["duration_ns"].tolist() == [1000]
    d, k = trace.data_ops(), trace.kernels()
    assert d["bytes"].tolist() == [64] and pd.isna(d["end_ns"].iloc[0])
    assert d["target_region"].tolist() == [0] and t == 55
    assert k["requested_teams"].tolist() == [2] and pd.isna(k["duration_ns"].iloc[0])


def test_unpaired_target_ends_are_counted() -> None:
    b = OffloadRecords()
    b.target(0, 10)
    b.rows.append({**b.rows[-1], "time_ns": 20})  # a second end
    b.rows.append({**b.rows[0], "time_ns": 30, "u64a": 999})  # a begin without end
    t = b.trace().target_regions()
    assert len(t) == 1
    assert (t.attrs["unmatched_begins"], t.attrs["unmatched_ends"]) == (1, 1)


def test_offload_totals_per_device() -> None:
    b = OffloadRecords()
    program(b)
    totals = offload.offload_totals(b.trace())
    row = totals.set_index("device").loc[1]
    assert row["target_regions"] == 5 and row["target_ns"] == 300 + 4000 + 1000 + 1000 + 400
    assert row["blocked_ns"] == 300 + 4000 + 1000 + 1000  # the nowait target blocks nothing
    assert row["bytes_to_device"] == 4096 and row["bytes_from_device"] == 1024 + 4096
    assert row["transfers"] == 3 and row["transfer_ns"] == 200 + 400 + 700
    assert row["bandwidth"] == pytest.approx((4096 + 1024 + 4096) / 1300e-9)
    assert row["kernels"] == 1 and row["kernel_ns"] == 3800


def test_empty_trace_has_empty_tables() -> None:
    trace = ompt_py.Trace.from_records(np.zeros(0, EVENT_DTYPE))
    for table in (trace.target_regions(), trace.data_ops(), trace.kernels(),
                  trace.device_ops()):
        assert table.empty
    assert not offload.has_offload(trace)
    assert trace.meta["devices"] == []


# ---- the stored trace: tests/programs/offload.c on two host-plugin devices -------------------

def _stored() -> ompt_py.Trace:
    from conftest import load_stored

    return load_stored("offload.omptraw")


def test_stored_trace_constructs_per_device() -> None:
    """Per device: enter data twice (enter data, target data's begin), exit data
    twice, one update, a teams target, a target inside target data, and two
    nowait targets (run in target tasks: libomp 19 keeps the nowait bit off)."""
    t = _stored().target_regions()
    for device in (0, 1):
        mine = t[t["device"] == device]
        counts = mine["kind"].astype(str).value_counts().to_dict()
        assert counts == {"target_enter_data": 2, "target_exit_data": 2, "target_update": 1,
                          "target": 4}
        assert mine["nowait"].sum() == 2
        assert (mine["duration_ns"] > 0).all()
    assert t["location"].notna().all()


def test_stored_trace_bytes_follow_the_map_clauses() -> None:
    trace = _stored()
    d = trace.data_ops()
    kind = d["kind"].astype(str)
    for device in (0, 1):
        to = d[(kind == "transfer_to_device") & (d["dest_device"] == device)]
        back = d[(kind == "transfer_from_device") & (d["src_device"] == device)]
        assert sorted(to["bytes"]) == [4, 4, 8000, 8000]  # x, y; a, c
        assert sorted(back["bytes"]) == [4, 4, 8000, 8000, 8000]  # x, y; b twice, c
    assert d["target_region"].notna().all()
    assert d["src_addr"].isna().all()  # record version 5: no more records
    assert d.attrs["more_missing"] == 0 and d.attrs["more_orphans"] == 0
    k = trace.kernels()
    assert len(k) == 8 and k["granted_teams"].isna().all()
    assert sorted(k["requested_teams"].tolist()) == [1] * 6 + [2] * 2  # num_teams(2)
    assert trace.device_ops().empty and trace.meta["devices"] == []
    totals = offload.offload_totals(trace).set_index("device")
    assert totals["bytes_to_device"].tolist() == [16008, 16008]
    assert totals["bytes_from_device"].tolist() == [24008, 24008]
    assert (totals["blocked_ns"] < totals["target_ns"]).all()  # the nowait targets


# ---- the device tracks (what the timeline and the Perfetto export draw) --------------------


def traced_program() -> tuple[ompt_py.Trace, dict]:
    """program() with device records on device 1 (clock: 3e12 + host ns): its
    transfer to the device and its kernel, a kernel of no host operation that
    overlaps that one, an alloc (not a transfer: not on the tracks), and a
    kernel of device 2, which has no clock pairs."""
    b = OffloadRecords()
    ids = program(b)
    b.clock(10, 20, 1, int(3e12) + 15)
    b.clock(20_000, 20_010, 1, int(3e12) + 20_005)
    b.device(20_100, 34, 1, int(3e12) + 160, int(3e12) + 360, host_op_id=ids["ops"][1],
             kind=TO, parallel_id=4096, u32a=0xFFFFFFFF, u32b=1)
    b.device(20_100, 35, 1, int(3e12) + 1100, int(3e12) + 4900, host_op_id=ids["kernel"])
    b.device(20_100, 35, 1, int(3e12) + 1200, int(3e12) + 5200)
    b.device(20_100, 34, 1, int(3e12) + 110, int(3e12) + 150, host_op_id=ids["ops"][0],
             kind=ALLOC)
    b.device(20_100, 35, 2, 500, 600)
    return b.trace(), ids


def test_device_track_from_device_records_with_their_host_operations() -> None:
    trace, ids = traced_program()
    t = offload.device_track(trace)
    assert t["name"].astype(str).tolist() == ["transfer_to_device", "kernel", "kernel"]
    assert (t["device"] == 1).all() and (t["source"] == "device").all()
    assert t["begin_ns"].tolist() == [160, 1100, 1200]
    assert t["end_ns"].tolist() == [360, 4900, 5200]
    assert t["bytes"].iloc[0] == 4096 and t["bytes"].iloc[1:].isna().all()
    assert t["sub_track"].tolist() == [0, 0, 1]  # the third overlaps the second
    assert t["host_op_id"].tolist()[:2] == [ids["ops"][1], ids["kernel"]]
    assert t["host_ns"].tolist()[:2] == [160, 1100]  # the host data op's and submission's begin
    assert t["host_thread"].tolist()[:2] == [0, 0] and pd.isna(t["host_thread"].iloc[2])
    assert t.attrs["unplaced"] == {"no clock fit": 1, "no device": 0}


def test_device_track_from_host_operations_without_device_records() -> None:
    b = OffloadRecords()
    ids = program(b)
    b.submit(9600, None, 999, teams=1)  # a non-EMI instant of no known target region
    t = offload.device_track(b.trace())
    assert t["name"].astype(str).tolist() == ["transfer_to_device", "kernel",
                                              "transfer_from_device", "transfer_from_device"]
    assert (t["source"] == "host").all() and (t["device"] == 1).all()
    assert t["begin_ns"].tolist() == [160, 1100, 6100, 8100]
    assert t["end_ns"].tolist() == [360, 4900, 6500, 8800]
    assert (t["host_ns"] == t["begin_ns"]).all() and (t["host_thread"] == 0).all()
    assert t["host_op_id"].tolist() == [ids["ops"][1], ids["kernel"], ids["ops"][2],
                                        ids["ops"][3]]
    assert t.attrs["unplaced"] == {"no clock fit": 0, "no device": 1}


def test_sub_tracks_never_overlap_and_stay_few() -> None:
    rng = np.random.default_rng(3)
    begin = np.sort(rng.integers(0, 20_000, 2000))
    end = begin + rng.integers(0, 40, 2000)
    track = offload.sub_tracks(begin, end)
    assert (track >= 0).all()
    for k in range(track.max() + 1):
        mine = track == k
        assert (begin[mine][1:] >= end[mine][:-1]).all()
    assert track.max() + 1 <= 12
    stairs = np.arange(1000)
    assert offload.sub_tracks(stairs, stairs + 2).tolist() == [0, 1] * 500
    assert offload.sub_tracks(stairs, stairs + 1).tolist() == [0] * 1000
    assert len(offload.sub_tracks(stairs[:0], stairs[:0])) == 0


def test_stored_trace_device_track_from_the_host_operations() -> None:
    trace = _stored()
    t = offload.device_track(trace)
    d, k = trace.data_ops(), trace.kernels()
    moves = d["kind"].astype(str).str.startswith("transfer").sum()
    assert len(t) == moves + len(k) == 26
    assert (t["source"] == "host").all() and set(t["device"]) == {0, 1}
    assert (t["sub_track"] == 0).all()  # the program waits for each operation
    assert (t.groupby("device")["name"].value_counts().loc[:, "kernel"] == 4).all()


def test_meta_devices_is_a_view_of_the_processes_devices() -> None:
    """meta["devices"] lists every process's devices with their pid: the same dicts
    as meta["processes"][i]["devices"] (tests/tool/test_device_trace.py checks it
    through a Parquet round trip)."""
    b = OffloadRecords()
    b.clock(1000, 1010, 0, 50_000)
    meta = trace_meta([{"pid": 7, "written": 1, "dropped": 0, "threads": [],
                        "devices": [{"device": 0, "type": "emulated"}]}], 0)
    trace = ompt_py.Trace.from_records(b.events(), meta)
    (entry,) = trace.meta["devices"]
    assert entry is trace.meta["processes"][0]["devices"][0]
    assert entry["pid"] == 7 and entry["clock"]["pairs"] == 1


def test_totals_take_the_device_time_from_device_records() -> None:
    """With device records (and a clock fit), the totals add the device's own time in
    kernels and transfers; a device without them has <NA> there."""
    b = OffloadRecords()
    for k in range(4):
        b.clock(1000 + 10_000 * k, 1010 + 10_000 * k, 1, 500_000 + 10_000 * k)
    t = b.target(0, 100_000, device=1)
    b.data_op(10, 20, TO, 4096, -1, 1, t)
    b.device(50_000, 34, 1, 500_100, 500_400, kind=TO, parallel_id=4096)
    b.device(50_000, 35, 1, 501_000, 503_500, u32a=8, u32b=8)
    b.target(200_000, 210_000, device=2)
    totals = b.trace().summary().offload.set_index("device")
    assert totals.loc[1, "device_kernel_ns"] == 2500
    assert totals.loc[1, "device_transfer_ns"] == 300
    assert pd.isna(totals.loc[2, "device_kernel_ns"])
    assert "on the device" in str(b.trace().summary())
