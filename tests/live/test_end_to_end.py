"""The whole chain, live: a program run under ``ompt-py run``, then ``ompt-py
report`` (text, --plot, --html) and ``ompt-py export`` (perfetto, csv, parquet)
of the file it wrote.  What each output holds is tested in detail on stored
traces: tests/presentation/ and tests/io/."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from conftest import cli, ok

import ompt_py

pytestmark = pytest.mark.needs_clang

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUFFIX = {"perfetto": ".json", "csv": ".csv", "parquet": ".parquet"}


@pytest.fixture(scope="module")
def recorded(programs, tmp_path_factory):
    """tests/programs/mixed.c 2 (tasks, loops, critical and lock, a nested region)."""
    out = tmp_path_factory.mktemp("chain") / "mixed.parquet"
    ok(cli("run", "-o", out, "--", programs.mixed, "2"))
    return out


@pytest.mark.pythons
def test_report_of_a_run(recorded):
    text = ok(cli("report", recorded)).stdout
    t = ompt_py.load(recorded)
    assert f"{t.meta['written']:,}" in text
    for word in ("parallel", "loop", "critical", "lock", "busy", "wait", "dropped"):
        assert re.search(word, text, re.I), word


def test_report_plot_and_html_of_a_run(recorded, tmp_path):
    png, page = tmp_path / "out.png", tmp_path / "out.html"
    r = ok(cli("report", recorded, "--plot", png, "--html", page))
    assert "\nTime per construct\n" in r.stdout
    assert png.read_bytes().startswith(PNG_MAGIC)
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "Time per construct" in html


@pytest.mark.parametrize("fmt", ["perfetto", "csv", "parquet"])
def test_export_of_a_run(recorded, tmp_path, fmt):
    t = ompt_py.load(recorded)
    out = tmp_path / ("t" + SUFFIX[fmt])
    r = ok(cli("export", recorded, "--format", fmt, "-o", out))
    assert str(out) in r.stderr
    if fmt == "perfetto":
        events = json.loads(out.read_text())["traceEvents"]
        assert {e["pid"] for e in events} == {t.meta["processes"][0]["pid"]}
        assert {"parallel", "implicit_task", "task", "mutex"} <= {e.get("cat") for e in events}
    elif fmt == "csv":
        assert len(pd.read_csv(out)) == len(t) > 0
    else:
        back = ompt_py.load(out)
        assert np.array_equal(back.events, t.events) and back.meta == t.meta
