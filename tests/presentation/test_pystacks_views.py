"""What ``ompt-py report``, ``Trace.summary()`` and the plots say in Python terms:
on the stored trace of tests/programs/pystacks_app.py (pystacks-inprocess;
its lines marked ``at: NAME``) they name the Python line first, the source
location beside it; on traces without Python stacks (known-*) nothing of it
shows.
"""

from __future__ import annotations

import re

import pytest
from conftest import app_location, cli, load_stored, ok, stored_path

from ompt_py.presentation import report
from ompt_py.units import format_ns

at = app_location  # the py_location of the app's line marked `at: NAME`


@pytest.fixture(scope="module")
def app():
    return load_stored("pystacks-inprocess")


@pytest.fixture(scope="module")
def plain():
    return load_stored("known-lock")


def section(text: str, title: str) -> list[str]:
    """The lines of the report's section that starts with ``title``."""
    body = text.split("\n" + title, 1)[1].split("\n\n", 1)[0]
    return body.splitlines()[1:]


def answers(text: str) -> list[str]:
    """The report's answers, one per item (their wrapped lines joined)."""
    items = " ".join(line.strip() for line in section(text, "Answers")).split("- ")
    return [i.strip() for i in items if i.strip()]


def test_report_answers_name_the_python_line_first(app):
    text = ok(cli("report", "--width", "200", stored_path("pystacks-inprocess"))).stdout
    said = answers(text)
    top = app.summary().regions.iloc[0]
    assert (f"most thread time not working: {top['regions']} region of "
            f"{format_ns(top['mean_ns'])} on 2 threads at {top['py_location']} "
            f"({top['location']}): the threads wait") in said[2], said
    (lock,) = [a for a in said if "most waited-for critical" in a]
    assert lock.startswith(f"most waited-for critical: {at('critical', 'locked')} "
                           "(ompt_work_ext"), lock
    first = app.constructs(by="python")["py_location"].iloc[0]
    assert said[0].startswith(f"most time in OpenMP from one Python line: {first} (")
    (proc,) = app.meta["processes"]
    assert (f"python stacks: on, {len(proc['python']['stacks'])} stacks of up to "
            f"{proc['python']['depth']} frames") in text


def test_report_python_lines_and_the_constructs_under_them(app):
    text = report.render(app, top=20, width=200)
    lines = section(text, "Time per Python location")
    heads = [line.strip() for line in lines if line.startswith("  ") and
             not line.startswith("    ")]
    # each line once, with its time, the constructs it started beneath it
    time = app.constructs(by="python").drop_duplicates("py_location").set_index(
        "py_location")["py_time_ns"]
    assert f"{at('regions', 'regions')} ({format_ns(time[at('regions', 'regions')])})" in heads
    assert len(heads) == len(set(heads)) == min(20, len(time))
    nested = lines.index(f"  {at('nested', 'main')} "
                         f"({format_ns(time[at('nested', 'main')])})")
    under = []
    for line in lines[nested + 1:]:
        if not line.startswith("    "):
            break
        under.append(line.split())
    # the line's own region and the two nested in it, by source location, beneath it
    regions = [u for u in under if u[:2] == ["parallel", "region"]]
    assert {u[3] for u in regions} == {"ompt_work_ext.cpython-311-x86_64-linux-gnu.so+0x2850",
                                       "__kmp_invoke_microtask"}
    # the regions per location name each Python line, its source location beside it
    per_location = section(text, "Parallel regions per location")
    assert any(line.split()[:3] == [*at("nested", "main").split()[:2], "main"]
               for line in per_location)


def test_report_without_python_stacks(plain):
    text = report.render(plain, width=120)
    assert "Python" not in text and "python" not in text
    assert "\nParallel regions per location (most thread time not working first)\n" in text
    assert any(re.match(r"most waited-for lock: known\+0x\w+: ", a) for a in answers(text))


def test_summary_in_python_terms(app):
    s = app.summary()
    text = str(s)
    assert "Time per Python location" in text
    lines = set(s.python["py_location"])
    assert {at("regions", "regions"), at("critical", "locked"), at("nested", "main")} <= lines
    assert "implicit task" not in set(s.python["construct"])
    shown = dict(s.sections())["Time per Python location (and the constructs it started)"]
    # each location once, on its first row
    names = [n.strip() for n in shown["py_location"] if n.strip()]
    assert len(names) == len(set(names)) == len(lines)
    locks = s.locks.set_index("kind")
    assert locks.loc["critical", "py_location"] == at("critical", "locked")
    assert list(s.regions.columns[:2]) == ["py_location", "location"]
    assert s._repr_html_().count("<table") == len(s.sections())  # the Python one too


def test_summary_without_python_stacks(plain):
    s = plain.summary()
    assert s.python is None
    for _, table in s.sections():
        assert "py_location" not in table
    assert "Python" not in str(s)


def test_timeline_names_regions_by_python_line(app, plain):
    def labels(fig):
        return [t.get_text().strip() for t in fig.axes[0].texts]
    regions = app.parallel_regions()
    nested = regions[(regions["py_location"] == at("nested", "main")) & (regions["level"] == 1)]
    (begin,) = nested["begin_ns"]
    (end,) = nested["end_ns"]
    # the nested() region, a third of the window: its line is written on it; on a
    # fifth of it, the line's short form; no label when it is narrower
    width = end - begin
    assert at("nested", "main") in labels(app.plot_timeline(start_ns=begin - width,
                                                            end_ns=end + width))
    short = at("nested", "main").rsplit("/", 1)[1]
    assert short in labels(app.plot_timeline(start_ns=begin - 2 * width, end_ns=end + 2 * width))
    assert not any("main" in label for label in labels(
        app.plot_timeline(start_ns=begin - 50 * width, end_ns=end + 49 * width)))
    # the whole trace: what is written, Python lines (every region has one), or
    # their short form shortened to the region, with the count of a run of regions
    for label in labels(app.plot_timeline()):
        line, _, count = label.partition(" (")
        assert (line in set(regions["py_location"])
                or any(p.rsplit("/", 1)[1].startswith(line.split("…")[0])
                       for p in regions["py_location"])), label
        assert not count or re.fullmatch(r"\d+ regions\)", count), label
    # without Python stacks: the source location, as parallel_regions() gives it
    written = labels(plain.plot_timeline())
    assert written and set(written) <= set(plain.parallel_regions()["location"])


def test_imbalance_plot_names_the_python_line(app):
    fig = app.plot_imbalance()
    notes = [t.get_text() for t in fig.axes[0].texts]
    worst = app.imbalance().sort_values("lost_ns").iloc[-1]
    named = f"{worst['py_location']} ({worst['location']})"
    head, _, tail = notes[0].split(": ")[0].partition("…")  # shortened to the figure
    assert named.startswith(head) and named.endswith(tail) and len(head) > 20
