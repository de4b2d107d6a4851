"""The terminal forms (ompt_py/layout.py): ``ompt-py report`` and ``str(summary)``
fit the width (the terminal's, COLUMNS, --width), long names shortened in the
middle and the least important columns left out first; colour only on a
terminal and never with NO_COLOR.  On stored traces, among them report-cxx (long
C++ names: tests/programs/cxx_names.cpp, named from its kept binary) and
pystacks-inprocess (Python lines beside native locations)."""

from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from conftest import cli, load_stored, load_with_binaries, ok, stored_path

from ompt_py.layout import Column, Document, fit
from ompt_py.presentation import report
from ompt_py.units import shorten

WIDTHS = [40, 80, 120, 200]
TRACES = ["report-cxx", "pystacks-inprocess", "offload.omptraw", "known-lock",
          "export-mixed", "report-incomplete", "gomp-prog"]
PROFILES = ["profile-mixed", "profile-cxx"]
ANSI = re.compile(r"\x1b\[")


def trace(name: str):
    return load_with_binaries(name) if name == "report-cxx" else load_stored(name)


def too_long(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.fixture(scope="module")
def cxx():
    return load_with_binaries("report-cxx")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", TRACES)
def test_the_report_and_the_summary_fit_the_width(name, width):
    t = trace(name)
    text = report.render(t, width=width)
    assert not too_long(text, width)
    assert "Events" in text and "Time per construct" in text
    assert not too_long(t.summary().document(width).text(), width)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", PROFILES)
def test_the_report_of_a_profile_fits_the_width(name, width):
    text = report.render_profile(load_stored(name), width=width)
    assert not too_long(text, width) and "Time per construct" in text


def test_long_names_are_shortened_in_the_middle(cxx):
    where = cxx.advice().set_index("rule").loc["contended lock", "location"]
    assert len(where) > 150 and where.startswith("ompt_py_examples::")
    narrow = report.render(cxx, width=80)
    rows = narrow.split("\nTime per source location\n", 1)[1].split("\n\n", 1)[0]
    (short,) = [re.search(r"ompt_py_ex\S*….*?\(cxx_names\)", line)[0]
                for line in rows.splitlines() if line.split()[:2] == ["mutex", "wait"]]
    assert "…" in short and where.startswith(short.split("…")[0])
    assert where.endswith(short.split("…")[1])
    # with room, the whole name
    assert where in report.render(cxx, width=400)


def test_least_important_columns_go_first(cxx):
    constructs = report.render(cxx, width=200).split("\nTime per construct\n")[1]
    constructs = constructs.split("\n\n")[0]
    assert constructs.splitlines()[0].split() == ["construct", "kind", "count", "total", "mean",
                                                  "p50", "p95", "max"]
    narrow = report.render(cxx, width=60).split("\nTime per construct\n")[1].split("\n\n")[0]
    header = narrow.splitlines()[0].split()
    assert header[:4] == ["construct", "kind", "count", "total"]
    assert "p50" not in header and "p95" not in header  # before mean and max


def test_shorten():
    assert shorten("abcdefghij", 10) == "abcdefghij"
    assert shorten("abcdefghij", 7) == "abc…hij"
    assert len(shorten("abcdefghij", 4)) == 4 and shorten("abcdefghij", 1) == "…"


def test_fit_leaves_out_by_rank_then_shortens_names():
    columns = [Column("name", ["x" * 50], name=True), Column("a", ["1" * 10], drop=1),
               Column("b", ["2" * 10], drop=5), Column("c", ["3" * 10])]
    kept, widths = fit(columns, 86)
    assert [c.header for c in kept] == ["name", "a", "b", "c"] and widths[0] == 50
    kept, widths = fit(columns, 76)  # rank 5 first, the name whole
    assert [c.header for c in kept] == ["name", "a", "c"] and widths[0] == 50
    kept, widths = fit(columns, 50)  # then the name shortened (to 24 at least)
    assert [c.header for c in kept] == ["name", "a", "c"] and 24 <= widths[0] < 50
    assert sum(widths) + 2 * (len(kept) - 1) <= 50


def test_the_terminal_width_comes_from_columns():
    path = stored_path("known-lock")
    for width in (45, 150):
        r = ok(cli("report", path, env={"COLUMNS": str(width)}))
        assert not too_long(r.stdout, width)
        assert max(len(line) for line in r.stdout.splitlines()) > width - 15
        assert not ANSI.search(r.stdout)  # not a terminal: no colour
    r = ok(cli("report", path, "--width", "50", env={"COLUMNS": "150"}))
    assert not too_long(r.stdout, 50)


def test_colour_on_a_terminal_never_with_no_color(monkeypatch):
    doc = Document(60)
    doc.heading("Answers")
    doc.prose("something", style="name")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = io.StringIO()
    doc.print(out, colour=True)
    assert ANSI.search(out.getvalue()) and "36m" in out.getvalue()  # cyan names
    plain = io.StringIO()
    doc.print(plain)  # a StringIO is not a terminal
    assert plain.getvalue() == doc.text()
    monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    doc.print(out, colour=True)
    assert "36m" not in out.getvalue()


def test_footnotes_are_numbered_at_the_end():
    doc = Document(40)
    marker = doc.footnote("a note of some length, in plain words, wrapped to the width")
    doc.prose(f"an answer {marker}")
    text = doc.text()
    assert "an answer [1]" in text
    notes = text.split("\nNotes\n")[1]
    assert notes.startswith("  [1] a note") and not too_long(text, 40)


def test_paths_under_the_working_directory_are_shown_from_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    here, elsewhere = f"{tmp_path}/src/kernel.c:34", "/usr/include/omp.h:12"
    doc = Document(80)
    doc.prose(f"most waited-for critical: {here}: 8 ms")
    doc.table(pd.DataFrame({"location": [here, elsewhere], "count": ["1", "2"]}),
              names=["location"])
    text = doc.text()
    assert "src/kernel.c:34" in text and str(tmp_path) not in text
    assert elsewhere in text
    assert "most waited-for critical: src/kernel.c:34: 8 ms" in text
