"""Python call stacks in the tables (stored trace pystacks-inprocess: the program
tests/programs/pystacks_app.py of marked lines, recorded in-process on Python
3.11 from the repository, so its frames have qualified names and its locations
read ``tests/programs/pystacks_app.py:LINE in FUNCTION``)."""

from __future__ import annotations

import pytest
from conftest import PYSTACKS_APP, app_location, app_region_counts, load_stored, marked_lines

import ompt_py

pytestmark = pytest.mark.pythons


where = app_location
AT = marked_lines(PYSTACKS_APP)


@pytest.fixture(scope="module")
def trace() -> ompt_py.Trace:
    return load_stored("pystacks-inprocess")


def test_the_meta_describes_the_capture(trace):
    py = trace.meta["processes"][0]["python"]
    assert (py["status"], py["reason"], py["depth"]) == ("on", None, 32)
    assert py["python"].startswith("3.11.") and py["implementation"] == "cpython"
    assert any(p.endswith("site-packages") for p in py["library_paths"])
    assert any(p.endswith("/ompt_py") for p in py["library_paths"])  # its own frames
    assert (py["codes_refused"], py["stacks_refused"]) == (0, 0)
    assert all(len(c) == 3 for c in py["codes"])


def test_stacks_are_frames_outermost_first(trace):
    frames = trace.python_stacks()
    assert list(frames.columns) == ["pid", "stack", "level", "file", "line", "function",
                                    "first_line", "user", "truncated", "location", "native",
                                    "interpreter"]
    assert not frames["native"].any()  # captured without native_depth
    for _, one in frames.groupby("stack"):
        assert one["level"].tolist() == list(range(len(one)))
    helper = frames.loc[frames["location"] == where("helper", "helper"), "stack"].iloc[0]
    one = frames[frames["stack"] == helper]
    assert one["location"].tolist()[1:] == [where("main-helper", "main"),
                                            where("helper", "helper"),
                                            where("regions", "regions")]
    assert one["function"].iloc[0] == "<module>"
    assert one["user"].all() and not one["truncated"].any()
    assert one["first_line"].iloc[-1] == AT["regions"] - 1  # def regions(n) is the line above
    # library frames: the thread's bootstrap, ompt_py's own region marker
    thread = frames[frames["file"].str.endswith("threading.py")]
    assert len(thread) > 0 and not thread["user"].any()
    assert thread["location"].str.match(r"threading\.py:\d+ in Thread\.").all()
    assert not frames.loc[frames["file"].str.contains("/ompt_py/live/"), "user"].any()


def test_every_region_names_its_line(trace):
    regions = trace.parallel_regions()
    top = regions[regions["level"] == 1]
    assert top["py_location"].value_counts().to_dict() == app_region_counts(where)
    assert not top["py_inherited"].any()
    inner = regions[regions["level"] == 2]
    assert len(inner) == 2 and set(inner["py_location"]) == {where("nested", "main")}
    assert sorted(inner["py_inherited"]) == [False, True]
    # the native location is still there, beside
    assert top["location"].notna().all()


def test_locations_name_the_innermost_user_frame(trace):
    loc = ompt_py.analysis.pystacks.locations(trace)
    marker = loc[loc["py_location"] == where("marker", "main")].iloc[0]
    # the innermost frame is ompt_py's own, which the location does not name
    assert marker["py_frames"].split(" > ")[-1].startswith("ompt_py/live/markers.py:")
    assert marker["py_function"] == "main" and marker["py_line"] == AT["marker"]
    thread = loc[loc["py_frames"].str.startswith("threading.py")]
    assert set(thread["py_location"]) == {where("nogil", "without_gil")}


def test_tasks_and_markers(trace):
    tasks = trace.tasks()
    assert tasks.groupby("py_location")["py_inherited"].agg(["size", "all"]).to_dict(
        "index") == {where("tasks", "main"): {"size": 4, "all": True},
                     where("serial-tasks", "main"): {"size": 3, "all": False}}
    marks = trace.user_regions()
    assert marks[["name", "py_location", "py_inherited"]].values.tolist() == [
        ["phase", where("marker", "main"), False]]


def test_events_carry_stack_ids(trace):
    ev = trace.to_pandas()
    carries = ev[ev["py_stack"].notna()]
    assert set(carries["event"].astype(str)) == {"parallel_begin", "task_create", "region"}
    assert (carries.loc[carries["event"] == "region", "endpoint"] == "begin").all()
    known = set(trace.python_stacks()["stack"])
    assert set(carries["py_stack"].astype(int)) <= known
    # has_dependences is still read from bit 0 under the stack id
    assert set(ev.loc[ev["event"] == "task_create", "has_dependences"].astype(int)) == {0}


def test_a_trace_without_python_has_empty_columns():
    t = load_stored("nested-libomp19")
    assert "python" not in t.meta["processes"][0]
    regions = t.parallel_regions()
    assert regions["py_stack"].isna().all() and regions["py_location"].isna().all()
    assert not regions["py_inherited"].any()
    assert t.to_pandas()["py_stack"].isna().all()
    assert t.python_stacks().empty


def test_saved_and_loaded_again(trace, tmp_path):
    trace.save(tmp_path / "again.parquet")
    again = ompt_py.load(tmp_path / "again.parquet")
    assert again.meta["processes"][0]["python"] == trace.meta["processes"][0]["python"]
    cols = ["py_stack", "py_location", "py_inherited"]
    assert again.parallel_regions()[cols].equals(trace.parallel_regions()[cols])


def test_native_frames_outside_any_module_read_as_addresses():
    t = load_stored("pystacks-inprocess")
    t.meta["processes"][0]["python"]["stacks"][0] = [
        *t.meta["processes"][0]["python"]["stacks"][0], [0x10, 0x20]]
    frames = t.python_stacks()
    native = frames[frames["native"]]
    assert native[["stack", "level", "location", "function", "line"]].values.tolist() == [
        [1, native["level"].iloc[0], "0x10", "0x10", 0],
        [1, native["level"].iloc[0] + 1, "0x20", "0x20", 0]]
    assert native["level"].iloc[0] == (~frames["native"] & (frames["stack"] == 1)).sum()
    callers = ompt_py.analysis.pystacks.locations(t).set_index("py_stack")["native_callers"]
    assert callers[1] == "0x10 > 0x20" and callers.drop(1).isna().all()
