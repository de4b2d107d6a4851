"""Device and target events that fire on the host (EMI callbacks), with the
target region offloaded to libomptarget's host plugin (no GPU needed); each
data operation's addresses in the `more` record that follows it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import PROGRAMS, build_offload, cli, ok, run_python

import ompt_py
from ompt_py.records import EVENT_CODES

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]


@pytest.fixture(scope="module")
def offload_program(tmp_path_factory) -> Path:
    return build_offload(tmp_path_factory, PROGRAMS / "offload" / "target.c")


def test_target_region_on_the_host_device(offload_program, tmp_path):
    out = tmp_path / "t.parquet"
    r = ok(cli("run", "-q", "-o", out, "--", offload_program, timeout=120))
    assert "sum=4950" in r.stdout
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    levels = proc["runtimes"][0]["callbacks"]
    for name in ("target_emi", "target_data_op_emi", "target_submit_emi", "device_initialize",
                 "device_load"):
        assert levels[name] == "always", (name, levels[name])
    df = t.to_pandas()
    ev = df["event"].astype(str)
    assert (ev == "device_initialize").sum() >= 1
    assert (ev == "device_initialize").sum() == (ev == "device_finalize").sum()
    assert (ev == "device_load").sum() >= 1

    target = df[ev == "target_emi"]
    assert target["endpoint"].astype(str).tolist() == ["begin", "end"]
    assert target["kind"].astype(str).tolist() == ["target", "target"]
    (region_id,) = set(target["target_id"].tolist())

    submit = df[ev == "target_submit_emi"]
    assert submit["endpoint"].astype(str).tolist() == ["begin", "end"]
    assert set(submit["target_region_id"].tolist()) == {region_id}

    ops = df[ev == "target_data_op_emi"]
    assert set(ops["target_region_id"].tolist()) == {region_id}
    # every operation: a begin and an end with one id of its own
    per_op = ops.groupby("task_id")["endpoint"].apply(lambda s: sorted(s.astype(str)))
    assert all(v == ["begin", "end"] for v in per_op)
    begins = ops[ops["endpoint"] == "begin"]
    to_device = begins[begins["kind"] == "transfer_to_device"]["bytes"].tolist()
    from_device = begins[begins["kind"] == "transfer_from_device"]["bytes"].tolist()
    assert sorted(to_device) == [4, 400]  # sum (tofrom) and the array (to)
    assert from_device == [4]  # sum back
    # the region ran between its begin and end
    assert target["time_ns"].iloc[0] <= ops["time_ns"].min()
    assert ops["time_ns"].max() <= target["time_ns"].iloc[1]


def test_data_op_addresses_follow_in_a_more_record(offload_program, tmp_path):
    out = tmp_path / "t.parquet"
    r = ok(cli("run", "-q", "-o", out, "--", offload_program, timeout=120))
    a, sum_at = (int(v, 16) for v in re.search(r"a=(0x[0-9a-f]+) sum_at=(0x[0-9a-f]+)",
                                                r.stdout).groups())
    ev = ompt_py.load(out).events
    op, more = EVENT_CODES["target_data_op_emi"], EVENT_CODES["more"]
    pairs = []
    for thread in np.unique(ev["thread"]):
        mine = ev[ev["thread"] == thread]  # the thread's own order
        # a `more` only ever right after its primary, with its time and its event number
        for i in np.flatnonzero(mine["event"] == more):
            assert i > 0 and mine["event"][i - 1] == op
            assert mine["time_ns"][i] == mine["time_ns"][i - 1] and mine["kind"][i] == op
        for i in np.flatnonzero(mine["event"] == op):
            assert i + 1 < len(mine) and mine["event"][i + 1] == more
            pairs.append((mine[i], mine[i + 1]))
    assert pairs
    begins = [(p, m) for p, m in pairs if p["endpoint"] == 1]
    to_device = {int(p["u64a"]): m for p, m in begins if p["kind"] == 2}  # by bytes
    from_device = [m for p, m in begins if p["kind"] == 3]
    # the array and sum go from their host addresses to the device's
    assert int(to_device[400]["u64a"]) == a and int(to_device[4]["u64a"]) == sum_at
    assert all(int(m["u64b"]) not in (0, a, sum_at) for m in to_device.values())
    # sum comes back from the device address it went to
    (back,) = from_device
    assert int(back["u64b"]) == sum_at and int(back["u64a"]) == int(to_device[4]["u64b"])


@pytest.mark.parametrize("zero_copy", ["on", "off"])
def test_pairs_across_chunks_in_process(tmp_path_factory, zero_copy):
    """32,500 records of one thread, pairs at odd and even places: in the memory sink a
    chunk with one record free is left (zero copy) or handed over (copying), and
    every pair stays whole and in order, nothing lost."""
    lib = build_offload(tmp_path_factory, PROGRAMS / "offload" / "pairs_lib.c", "-shared", "-fPIC")
    r = run_python(f"""
        import ctypes, json
        import numpy as np
        import ompt_py
        from ompt_py.records import EVENT_CODES
        with ompt_py.trace() as t:
            ctypes.CDLL({str(lib)!r}).run_regions(1000)
        ev, op, more = t.events, EVENT_CODES["target_data_op_emi"], EVENT_CODES["more"]
        codes = ev[ev["thread"] == np.bincount(ev["thread"]).argmax()]["event"]
        after_op = codes[np.flatnonzero(codes[:-1] == op) + 1]
        before_more = codes[np.flatnonzero(codes[1:] == more)]
        print(json.dumps({{"written": t.meta["written"], "dropped": t.meta["dropped"],
                          "events": len(ev), "ops": int((codes == op).sum()),
                          "mores": int((codes == more).sum()),
                          "after_op": sorted(set(after_op.tolist())),
                          "before_more": sorted(set(before_more.tolist())),
                          "zero_copy": ompt_py.status()["config"]["zero_copy"]}}))
        """, {"OMPTPY_ZERO_COPY": zero_copy}, timeout=300)
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["zero_copy"] == (zero_copy == "on")
    assert got["dropped"] == 0 and got["written"] == got["events"] > 30 * 1024
    assert got["ops"] == got["mores"] == 14 * 1000  # 7 operations a region, begin and end
    assert got["after_op"] == [EVENT_CODES["more"]]
    assert got["before_more"] == [EVENT_CODES["target_data_op_emi"]]


def test_runtime_info_and_status_list_the_host_devices(tmp_path_factory):
    """libomptarget 19's host devices: initialised at the first offload, with their type
    string; its device lookup offers no tracing entry point, so tracing is off and
    status() says why."""
    lib = build_offload(tmp_path_factory, PROGRAMS / "offload" / "pairs_lib.c", "-shared", "-fPIC")
    r = run_python(f"""
        import ctypes, dataclasses, json
        import ompt_py
        with ompt_py.trace():
            ctypes.CDLL({str(lib)!r}).run_regions(1)
        (rt,) = ompt_py.runtime_info()
        print(json.dumps({{"info": [dataclasses.asdict(d) for d in rt.devices],
                          "status": ompt_py.status()["devices"]}}))
        """, timeout=120)
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["info"] and len(got["info"]) == len(got["status"])
    for info, short in zip(got["info"], got["status"]):
        assert info["type"] == short["type"] == "generic-64bit"
        assert set(info["entry_points"].values()) == {False}
        assert set(info["tracing"].values()) == {"no entry point"}
        assert info["started"] is False and "ompt_start_trace" in info["start_error"]
        assert short["tracing"] == "off" and short["why_off"] == info["start_error"]
        assert len(short["missing_entry_points"]) == 12
