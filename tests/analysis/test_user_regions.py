"""Regions of user code (Trace.user_regions, and the analyses that count them):
markers of ompt_py.region and omptpy_region.h paired into nested regions, on
stored traces (tests/data/regions-*; recording them: tests/live/test_control.py)
and on hand-made records."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import EV, load_stored, stored_output

import ompt_py
from ompt_py.records import EVENT_DTYPE

REGION = EV["region"]


def test_region_markers_nest():
    """Markers from Python (nested, a decorator, another thread) and from C
    (scripting_ext.c_regions on both threads of a region): conftest's
    REGION_MARKERS_SNIPPET, with what its handler got (regions-inprocess.out)."""
    out = json.loads(stored_output("regions-inprocess").strip().splitlines()[-1])
    t = load_stored("regions-inprocess")
    regions = t.user_regions()
    assert regions.attrs["unmatched_begins"] == regions.attrs["unmatched_ends"] == 0
    names = t.meta["processes"][0]["region_names"]
    assert set(names) == {"outer", "inner", "deco", "c_outer", "c_inner", "c_leaf", "py_thread"}
    assert names == out["names"]
    assert out["handled"] == out["trace_markers"] == 2 * len(regions)
    by = {n: g for n, g in regions.groupby("name")}
    assert len(by["outer"]) == 1 and by["outer"]["level"].tolist() == [0]
    assert by["inner"]["parent"].tolist() == ["outer"] and by["inner"]["level"].tolist() == [1]
    deco = by["deco"].sort_values("begin_ns")
    assert deco["level"].tolist() == [1, 0]
    assert deco["parent"].iloc[0] == "outer" and deco["parent"].isna().tolist() == [False, True]
    assert len(by["c_outer"]) == 2 and set(by["c_outer"]["level"]) == {0}
    main = int(by["outer"]["thread"].iloc[0])
    inner = by["c_inner"]
    assert len(inner) == 4  # 2 calls x 2 threads
    on_main = inner[inner["thread"] == main]
    assert on_main["parent"].tolist() == ["c_outer"] * 2 and set(on_main["level"]) == {1}
    on_worker = inner[inner["thread"] != main]
    assert len(on_worker) == 2 and set(on_worker["level"]) == {0}
    assert on_worker["parent"].isna().all()
    leaf = by["c_leaf"]
    assert leaf["parent"].tolist() == ["c_inner"] * 4
    assert (leaf["level"] == np.where(leaf["thread"] == main, 2, 1)).all()
    # children lie inside their parents, on the same thread
    ids = regions.set_index("id")
    for _, row in regions[regions["parent_id"].notna()].iterrows():
        parent = ids.loc[int(row["parent_id"])]
        assert parent["thread"] == row["thread"]
        assert parent["begin_ns"] <= row["begin_ns"] <= row["end_ns"] <= parent["end_ns"]
    assert (regions["duration_ns"] == regions["end_ns"] - regions["begin_ns"]).all()
    assert (regions["duration_ns"] >= 0).all()
    assert len(by["py_thread"]) == 1 and int(by["py_thread"]["thread"].iloc[0]) != main
    # a region around OpenMP work lasts at least as long as its parallel region
    pr = t.parallel_regions()
    first = pr.sort_values("begin_ns").iloc[0]
    assert by["inner"]["begin_ns"].iloc[0] <= first["begin_ns"]
    assert first["end_ns"] <= by["inner"]["end_ns"].iloc[0]


def test_region_header_in_a_program_without_python():
    """omptpy_region.h in a C program under the tool (tests/programs/handlers/
    regions_prog.c 3; the markers it records: tests/live/test_control.py)."""
    t = load_stored("regions-prog")
    regions = t.user_regions()
    assert regions.attrs["unmatched_begins"] == regions.attrs["unmatched_ends"] == 0
    by = {n: g for n, g in regions.groupby("name")}
    assert len(by["main"]) == 1 and len(by["work"]) == 6
    main_thread = int(by["main"]["thread"].iloc[0])
    work = by["work"]
    assert (work["level"] == np.where(work["thread"] == main_thread, 1, 0)).all()
    assert work.loc[work["thread"] == main_thread, "parent"].tolist() == ["main"] * 3
    # the analyses count them per name, with the paired table's durations
    rows = t.constructs().query("construct == 'user region'").set_index("kind")
    for name, group in by.items():
        assert rows.loc[name, "count"] == len(group)
        assert rows.loc[name, "total_ns"] == pytest.approx(group["duration_ns"].sum())


def test_user_regions_pairing_rules():
    """Pairing without a program: ends close the innermost open region of their
    name (id 0: the innermost one); the rest is counted, not paired wrongly."""
    # thread 0: a(1) b(2) end(b) end(a) ; end(a) without begin ; c(3) d(4) end(c): d unmatched
    # thread 1: a(1) end(NULL)
    rows = [(0, 1, 1, 10), (0, 1, 2, 20), (0, 2, 2, 30), (0, 2, 1, 40), (0, 2, 1, 50),
            (0, 1, 3, 60), (0, 1, 4, 70), (0, 2, 3, 80), (1, 1, 1, 15), (1, 2, 0, 25)]
    ev = np.zeros(len(rows), EVENT_DTYPE)
    ev["event"] = REGION
    ev["thread"], ev["endpoint"], ev["u64a"], ev["time_ns"] = zip(*rows)
    meta = {"processes": [{"pid": 9, "region_names": ["a", "b", "c", "d"]}]}
    t = ompt_py.Trace.from_records(ev[::-1].copy(), meta, pids=9).user_regions()
    assert t.attrs == {"unmatched_begins": 1, "unmatched_ends": 1}
    got = [(r.thread, r.name, r.level, None if pd.isna(r.parent) else r.parent, r.begin_ns,
            r.duration_ns) for r in t.itertuples()]
    assert got == [(0, "a", 0, None, 10, 30), (1, "a", 0, None, 15, 10),
                   (0, "b", 1, "a", 20, 10), (0, "c", 0, None, 60, 20)]
