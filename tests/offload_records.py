"""Synthetic traces of record version 6 (csrc/include/omptpy.h) with offload
events, built record by record: OffloadRecords, and ``program``, a small
offload program on device 1.  Shared by the offload tests of tests/analysis,
tests/io and tests/presentation."""

from __future__ import annotations

import struct

import numpy as np

import ompt_py
from ompt_py.meta import trace_meta
from ompt_py.records import EVENT_CODES, EVENT_DTYPE, SCOPE_BEGIN, SCOPE_END

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


def program(b: OffloadRecords) -> dict:
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


def program_with_device_records(b: OffloadRecords) -> dict:
    """``program`` with device 1's own records: two clock pairs (device time = 3e12 +
    host ns), the transfer to the device (170-350) and its kernel (1150-4800), and a
    kernel of no host operation that overlaps it (1200-5200)."""
    ids = program(b)
    base = int(3e12)
    b.clock(10, 20, 1, base + 15)
    b.clock(20_000, 20_010, 1, base + 20_005)
    b.device(20_100, 34, 1, base + 170, base + 350, host_op_id=ids["ops"][1], kind=TO,
             parallel_id=4096, u32a=0xFFFFFFFF, u32b=1)
    b.device(20_100, 35, 1, base + 1150, base + 4800, host_op_id=ids["kernel"])
    b.device(20_100, 35, 1, base + 1200, base + 5200)
    return ids
