"""The offload tables (ompt_py.analysis.offload) on synthetic version-6 traces
built record by record (OffloadRecords), and on tests/data/offload.omptraw (a
clang-19 host-offload program, tests/programs/offload.c, recorded with record
version 5: no ``more`` or device records)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ompt_py
from ompt_py.analysis import offload
from ompt_py.meta import trace_meta
from ompt_py.records import EVENT_CODES, EVENT_DTYPE, SCOPE_BEGIN, SCOPE_END

DATA = Path(__file__).resolve().parents[1] / "data"
E = EVENT_CODES
# ompt_target_t, ompt_target_data_op_t
TARGET, ENTER, EXIT, UPDATE, NOWAIT = 1, 2, 3, 4, 8
ALLOC, TO, FROM, DELETE = 1, 2, 3, 4


class OffloadRecords:
    """Records of the layout of record version 6 (csrc/include/omptpy.h), in each
    thread's order as a tool writes them, for Trace.from_records."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.next_id = 1000

    def rec(self, time: int, event: int, thread: int = 0, **fields: int) -> None:
        self.rows.append({"time_ns": time, "event": event, "thread": thread, **fields})

    def more(self, primary: dict, **fields: int) -> None:
        """kind: the primary's event, but a device record's more keeps the data
        operation's or target construct's kind there."""
        self.rec(primary["time_ns"], E["more"], primary["thread"],
                 **{"kind": primary["event"], **fields})

    def target(self, begin: int, end: int, kind: int = TARGET, device: int = 0, thread: int = 0,
               target_id: int | None = None, emi: bool = True) -> int:
        target_id = target_id if target_id is not None else self._id()
        event = E["target_emi" if emi else "target"]
        for time, endpoint in ((begin, SCOPE_BEGIN), (end, SCOPE_END)):
            self.rec(time, event, thread, endpoint=endpoint, kind=kind, task_id=1,
                     u64a=target_id, u64b=0, u32a=device & 0xFFFFFFFF, codeptr=0x401000)
        return target_id

    def data_op(self, begin: int, end: int | None, optype: int, nbytes: int, src: int, dest: int,
                target_id: int, thread: int = 0, addrs: tuple[int, int] = (0x1000, 0x2000),
                more: bool = True) -> int:
        """end None: a non-EMI operation (one record)."""
        op = self._id()
        points = [(begin, 0)] if end is None else [(begin, SCOPE_BEGIN), (end, SCOPE_END)]
        for time, endpoint in points:
            self.rec(time, E["target_data_op" if end is None else "target_data_op_emi"], thread,
                     endpoint=endpoint, kind=optype, task_id=op, u64a=nbytes, u64b=target_id,
                     u32a=src & 0xFFFFFFFF, u32b=dest & 0xFFFFFFFF, codeptr=0x401000)
            if more:
                self.more(self.rows[-1], u64a=addrs[0], u64b=addrs[1])
        return op

    def submit(self, begin: int, end: int | None, target_id: int, teams: int,
               thread: int = 0) -> int:
        op = self._id()
        points = [(begin, 0)] if end is None else [(begin, SCOPE_BEGIN), (end, SCOPE_END)]
        for time, endpoint in points:
            self.rec(time, E["target_submit" if end is None else "target_submit_emi"], thread,
                     endpoint=endpoint, task_id=op, u64b=target_id, u32a=teams)
        return op

    def device(self, consumed: int, rtype: int, device: int, dev_begin: int, dev_end: int,
               host_op_id: int = 0, target_id: int = 0, thread: int = 5, **more: int) -> None:
        self.rec(consumed, E["device"], thread, kind=rtype, u32a=device, u64a=dev_begin,
                 u64b=dev_end, task_id=host_op_id, parallel_id=target_id)
        self.more(self.rows[-1], task_id=77, **more)

    def clock(self, before: int, after: int, device: int, device_time: int,
              translated: float | None = None, thread: int = 5) -> None:
        bits = struct.unpack("<Q", struct.pack("<d", translated))[0] if translated else 0
        self.rec(before, E["device_clock"], thread, u64b=after, u64a=device_time, u32a=device,
                 codeptr=bits)

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def events(self) -> np.ndarray:
        out = np.zeros(len(self.rows), EVENT_DTYPE)
        for i, row in enumerate(self.rows):
            for name, value in row.items():
                out[name][i] = value
        return out

    def trace(self, version: int | None = None) -> ompt_py.Trace:
        """The trace (``version``: its process's record version; None: current)."""
        events = self.events()
        meta = None
        if version is not None:
            meta = trace_meta([{"pid": 7, "tool": {"record_version": version},
                                "written": len(events), "dropped": 0, "threads": []}], 0)
        return ompt_py.Trace.from_records(events, meta)


def _program(b: OffloadRecords) -> dict:
    """One thread: enter data (alloc + to), a target with a kernel, update from,
    exit data (from + delete), and a nowait target on a helper thread; device 1."""
    t = b.target(100, 400, ENTER, device=1)
    ops = [b.data_op(110, 150, ALLOC, 4096, -1, 1, t),
           b.data_op(160, 360, TO, 4096, -1, 1, t)]
    k_target = b.target(1000, 5000, TARGET, device=1)
    kernel = b.submit(1100, 4900, k_target, teams=8)
    u = b.target(6000, 7000, UPDATE, device=1)
    ops.append(b.data_op(6100, 6500, FROM, 1024, 1, -1, u))
    x = b.target(8000, 9000, EXIT, device=1)
    ops += [b.data_op(8100, 8800, FROM, 4096, 1, -1, x), b.data_op(8850, 8900, DELETE, 4096, 1,
                                                                   -1, x)]
    b.target(9500, 9900, TARGET | NOWAIT, device=1, thread=3)
    return {"kernel": kernel, "kernel_target": k_target, "ops": ops}


def test_target_regions_one_row_per_construct() -> None:
    b = OffloadRecords()
    _program(b)
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
    _program(b)
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
    ids = _program(b)
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
    ids = _program(b)

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
    _program(b)
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
    assert "devices" not in trace.meta


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
    assert trace.device_ops().empty and "devices" not in trace.meta
    totals = offload.offload_totals(trace).set_index("device")
    assert totals["bytes_to_device"].tolist() == [16008, 16008]
    assert totals["bytes_from_device"].tolist() == [24008, 24008]
    assert (totals["blocked_ns"] < totals["target_ns"]).all()  # the nowait targets
