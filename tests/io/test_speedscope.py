"""The speedscope export (ompt_py.io.speedscope, `ompt-py export --format
speedscope`), on stored traces, against the file format of speedscope.app."""

from __future__ import annotations

import json

import pytest
from conftest import cli, load_stored, ok, stored_path

from ompt_py.analysis import metrics
from ompt_py.analysis.states import THREAD_STATES
from ompt_py.io import export

jsonschema = pytest.importorskip("jsonschema")

# What https://www.speedscope.app/file-format-schema.json requires, transcribed from
# speedscope's src/lib/file-format-spec.ts (the schema is generated from it): a
# file's $schema, shared frames (each with a name) and profiles; a sampled
# profile's type, name, unit, startValue, endValue, samples (stacks of frame
# indices) and weights.
_UNITS = ["none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes"]
SCHEMA = {
    "type": "object",
    "required": ["$schema", "shared", "profiles"],
    "properties": {
        "$schema": {"const": "https://www.speedscope.app/file-format-schema.json"},
        "version": {"type": "string"},
        "name": {"type": "string"},
        "activeProfileIndex": {"type": "number"},
        "exporter": {"type": "string"},
        "shared": {
            "type": "object", "required": ["frames"],
            "properties": {"frames": {"type": "array", "items": {
                "type": "object", "required": ["name"],
                "properties": {"name": {"type": "string"}, "file": {"type": "string"},
                               "line": {"type": "number"}, "col": {"type": "number"}}}}}},
        "profiles": {"type": "array", "items": {
            "type": "object",
            "required": ["type", "name", "unit", "startValue", "endValue", "samples",
                         "weights"],
            "properties": {
                "type": {"const": "sampled"}, "name": {"type": "string"},
                "unit": {"enum": _UNITS}, "startValue": {"type": "number"},
                "endValue": {"type": "number"},
                "samples": {"type": "array",
                            "items": {"type": "array", "items": {"type": "number"}}},
                "weights": {"type": "array", "items": {"type": "number"}}}}},
    },
}


def written(name: str, tmp_path) -> dict:
    path = tmp_path / f"{name}.speedscope.json"
    export(load_stored(name), path, "speedscope")
    return json.loads(path.read_text())


@pytest.mark.parametrize("name", ["plots-tasks", "pystacks-inprocess", "offload.omptraw",
                                  "inprocess-empty"])
def test_files_follow_the_schema(name, tmp_path):
    doc = written(name, tmp_path)
    jsonschema.validate(doc, SCHEMA)
    frames = len(doc["shared"]["frames"])
    for p in doc["profiles"]:
        assert len(p["samples"]) == len(p["weights"]) > 0
        assert all(0 <= f < frames for stack in p["samples"] for f in stack)
        assert p["endValue"] - p["startValue"] == sum(p["weights"])


def test_each_thread_has_its_time_in_regions(tmp_path):
    """plots-tasks (no explicit task with a Python stack of its own): a profile per
    thread, whose weights add up to the time of its implicit tasks in each state."""
    trace = load_stored("plots-tasks")
    doc = written("plots-tasks", tmp_path)
    rt = metrics.region_threads(trace)
    states = rt[[f"{s}_ns" for s in THREAD_STATES]].sum(axis=1)
    expected = {f"thread {t}": int(v) for t, v in states.groupby(rt["thread"]).sum().items()}
    assert {p["name"]: sum(p["weights"]) for p in doc["profiles"]} == expected
    names = [f["name"] for f in doc["shared"]["frames"]]
    location = trace.parallel_regions()["location"].iloc[0]
    assert f"parallel region at {location}" in names
    assert {"busy", "barrier wait"} <= set(names)
    for p in doc["profiles"]:  # each stack: the region, then its state
        assert {len(s) for s in p["samples"]} == {2}


def test_python_frames_come_first(tmp_path):
    """Each stack begins with the outermost frame of a Python stack (the main
    thread's script, or a Python thread's bootstrap)."""
    doc = written("pystacks-inprocess", tmp_path)
    names = [f["name"] for f in doc["shared"]["frames"]]
    stacks = [s for p in doc["profiles"] for s in p["samples"]]
    frames = load_stored("pystacks-inprocess").python_stacks()
    first = set(frames.loc[frames["level"] == 0, "location"])
    outer = {names[s[0]] for s in stacks}
    assert "tests/programs/pystacks_app.py:85 in <module>" in outer and outer <= first
    assert all(names[s[-2]].startswith(("parallel region", "explicit task")) for s in stacks)


def test_cli(tmp_path):
    out = tmp_path / "t.json"
    r = ok(cli("export", stored_path("plots-tasks"), "--format", "speedscope", "-o", out))
    assert "(speedscope)" in r.stderr
    jsonschema.validate(json.loads(out.read_text()), SCHEMA)
    assert "speedscope" in ok(cli("export", "--help")).stdout


def test_filters_threads_and_refuses_a_window(tmp_path):
    from ompt_py.errors import ConfigError

    trace = load_stored("plots-tasks")
    path = tmp_path / "t.json"
    export(trace, path, "speedscope", threads=[1])
    assert [p["name"] for p in json.loads(path.read_text())["profiles"]] == ["thread 1"]
    with pytest.raises(ConfigError, match="no time window"):
        export(trace, path, "speedscope", start="1ms")
    r = cli("export", stored_path("plots-tasks"), "--format", "speedscope", "-o", path,
            "--end", "5ms")
    assert r.returncode == 2 and "no time window" in r.stderr
