"""The tool's side of device tracing (csrc/tool/device.c) where the emulated
runtime's own tests (test_device_trace.py) do not look: the pool's bound and
buffer requests answered with 0 bytes, the settings and their errors, a device
whose lookup offers nothing, OMPTPY_DEVICE_TRACE=off, and the runtime's helper
thread among the trace's threads."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import tool_env
from test_device_trace import device_rows, emu, expected_records, run_emu  # noqa: F401

import ompt_py
from ompt_py.live import attach

pytestmark = pytest.mark.needs_clang

#: The device entry points the tool asks for (the keys of a device's "entry_points").
ENTRY_POINTS = ["ompt_set_trace_ompt", "ompt_start_trace", "ompt_pause_trace", "ompt_flush_trace",
                "ompt_stop_trace", "ompt_advance_buffer_cursor", "ompt_get_record_type",
                "ompt_get_record_ompt", "ompt_get_device_time", "ompt_translate_time",
                "ompt_set_trace_native", "ompt_get_record_native"]
RECORD_TYPES = ["target", "target_data_op", "target_submit", "target_emi", "target_data_op_emi",
                "target_submit_emi"]


def the_device(run) -> dict:
    """The one device of the emulator's one process (meta["processes"][0]["devices"])."""
    (proc,) = run.trace.meta["processes"]
    (device,) = proc["devices"]
    return device


def test_pool_bound_answers_0_bytes_and_counts_the_lost_records(emu, tmp_path):  # noqa: F811
    """Two 4 KiB buffers at most, held by the runtime until it stops: every later
    request is answered with 0 bytes and its record is counted lost; the rest is
    in the trace, and both buffers are released at the end."""
    run = run_emu(emu, tmp_path, "--hold", "--regions", "20", OMPTPY_DEVICE_BUFFER="4K",
                  OMPTPY_DEVICE_MEMORY="8K")
    d = the_device(run)
    truth = run.truth["devices"][0]
    assert len(run.truth["buffers"]) == 2
    assert truth["records_lost"] > 0
    assert d["records_lost"] == truth["records_lost"]
    assert d["buffers_requested"] == 2 + truth["records_lost"]
    assert d["buffer_bytes"] == 8192 and d["buffers_freed"] == 2
    assert d["records"] == len(expected_records(run)) == len(device_rows(run.trace)) > 0


def test_every_buffer_comes_from_the_pool_and_goes_back(emu, tmp_path):  # noqa: F811
    """Buffers handed back owned (here by the thread that filled them, at once) are
    reused: two buffers for every delivery."""
    run = run_emu(emu, tmp_path, "--complete", "caller", "--regions", "60", "--ops", "6",
                  OMPTPY_DEVICE_BUFFER="4K")
    d = the_device(run)
    assert d["records_lost"] == 0 and d["buffers_freed"] == d["buffers_requested"]
    addresses = {b["address"] for b in run.truth["buffers"]}
    # the runtime asks for the next buffer before it hands the full one back: two
    assert len(addresses) == 2 and len(run.truth["buffers"]) > 10
    assert d["records"] == len(device_rows(run.trace))


@pytest.mark.parametrize(("name", "value", "says"), [
    ("OMPTPY_DEVICE_TRACE", "maybe", "on or off"),
    ("OMPTPY_DEVICE_BUFFER", "lots", "a size in bytes from 4K to 1G"),
    ("OMPTPY_DEVICE_BUFFER", "1K", "a size in bytes from 4K to 1G"),
    ("OMPTPY_DEVICE_BUFFER", "2G", "a size in bytes from 4K to 1G"),
    ("OMPTPY_DEVICE_MEMORY", "-1", "at least OMPTPY_DEVICE_BUFFER"),
    ("OMPTPY_DEVICE_MEMORY", "512K", "less than one device buffer"),
    ("OMPTPY_DEVICE_MEMORY", "1000G", "more than this machine can give"),
])
def test_bad_settings_name_the_allowed_values(monkeypatch, name, value, says):
    monkeypatch.setenv(name, value)
    with pytest.raises(ompt_py.ConfigError, match=f"{name}='{value}'.*{says}"):
        attach.check_environment()


def test_a_bad_setting_turns_the_tool_off_and_says_so(emu, tmp_path):  # noqa: F811
    truth = tmp_path / "truth.json"
    r = subprocess.run([str(emu), "--truth", str(truth)],
                       env=tool_env(tmp_path, OMPTPY_DEVICE_BUFFER="12"), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "OMPTPY_DEVICE_BUFFER='12' is not valid; use a size in bytes from 4K to 1G" in r.stderr
    assert json.loads(truth.read_text())["tool"] is False


def test_device_trace_off(emu, tmp_path):  # noqa: F811
    run = run_emu(emu, tmp_path, OMPTPY_DEVICE_TRACE="off")
    d = the_device(run)
    assert d["started"] is False and "OMPTPY_DEVICE_TRACE is off" in d["start_error"]
    assert set(d["tracing"].values()) == {"not asked"}
    assert d["buffers_requested"] == 0 and not device_rows(run.trace)
    assert run.truth["records"] == []


def test_a_lookup_that_offers_nothing(emu, tmp_path):  # noqa: F811
    run = run_emu(emu, tmp_path, "--null", ",".join(ENTRY_POINTS))
    d = the_device(run)
    assert d["entry_points"] == dict.fromkeys(ENTRY_POINTS, False)
    assert d["tracing"] == dict.fromkeys(RECORD_TYPES, "no entry point")
    assert d["started"] is False and "ompt_start_trace" in d["start_error"]
    assert not device_rows(run.trace)
    assert not (run.trace.events["event"] == 104).any()  # no device clock either


def test_status_explains_device_tracing(emu, tmp_path):  # noqa: F811
    """What status() shows of a device, from the meta the emulator's process wrote."""
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    run = run_emu(emu, tmp_path / "off", "--null", "ompt_start_trace")
    (proc,) = run.trace.meta["processes"]
    (short,) = [attach.device_status(d) for d in proc["devices"]]
    assert short["tracing"] == "off" and "ompt_start_trace" in short["why_off"]
    assert "ompt_start_trace" in short["missing_entry_points"]
    run = run_emu(emu, tmp_path / "on", "--unknown", "2")
    (short,) = [attach.device_status(the_device(run))]
    assert short["tracing"] == "stopped" and short["why_off"] is None and short["records"] > 0
    assert list(short["problems"].values()) == [2]


@pytest.mark.parametrize("complete", ["helper", "caller"])
def test_the_consuming_thread_is_in_the_trace(emu, tmp_path, complete):  # noqa: F811
    """buffer_complete from the runtime's helper thread (no thread_begin): a thread of
    type "other" that holds every device record; from the OpenMP thread: no such
    thread."""
    run = run_emu(emu, tmp_path, "--complete", complete)
    (proc,) = run.trace.meta["processes"]
    others = [th for th in proc["threads"] if th["type"] == "other"]
    rows = device_rows(run.trace)
    assert rows
    if complete == "helper":
        (helper,) = others
        assert {int(d["thread"]) for d, _ in rows} == {helper["thread"]}
        assert helper["written"] >= 2 * len(rows) and helper["dropped"] == 0
    else:
        assert others == []
