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


def test_report_answers_name_the_python_line_first(app):
    text = ok(cli("report", stored_path("pystacks-inprocess"))).stdout
    answers = section(text, "Answers")
    worst = app.imbalance().sort_values("lost_ns").iloc[-1]
    assert (f"  most time lost to imbalance: region launched from {worst['py_location']} "
            f"({worst['location']}): {worst['imbalance']:.2f}x") in answers[2]
    (lock,) = [a for a in answers if "most waited-for critical" in a]
    assert lock.startswith(f"  most waited-for critical: {at('critical', 'locked')} "
                           "(ompt_work_ext"), lock
    first = app.constructs(by="python")["py_location"].iloc[0]
    assert answers[0].startswith(f"  most time in OpenMP from one Python line: {first} (")
    (proc,) = app.meta["processes"]
    assert (f"python stacks: on, {len(proc['python']['stacks'])} stacks of up to "
            f"{proc['python']['depth']} frames") in text


def test_report_python_lines_and_regions_under_them(app):
    text = report.render(app, top=20)
    rows = {re.split(r"\s{2,}", line.strip())[0]: line.split()[-3:]
            for line in section(text, "Python lines")[1:]}
    # regions, tasks, markers started from each line
    assert rows[at("regions", "regions")] == ["3", "0", "0"]
    assert rows[at("tasks", "main")] == ["1", "4", "0"]
    assert rows[at("serial-tasks", "main")] == ["0", "3", "0"]
    assert rows[at("marker", "main")] == ["0", "0", "1"]
    assert rows["<generated>:2 in gone"] == ["1", "0", "0"]
    assert rows["(no Python stack)"] == ["0", "0", "0"]  # the initial task, the taskwait
    grouped = section(text, "Parallel regions by Python and source location")
    nested = grouped.index("  " + at("nested", "main"))
    # the line's own region and the two nested in it, by source location, beneath it
    under = grouped[nested + 1:nested + 3]
    assert all(line.startswith("    ") for line in under)
    assert {line.split()[1] for line in under} == {"ompt_work_ext.cpython-311-x86_64-linux-gnu"
                                                   ".so+0x2850", "__kmp_invoke_microtask"}
    assert not grouped[nested + 3].startswith("    ")


def test_report_without_python_stacks_is_as_before(plain):
    text = report.render(plain)
    assert "Python" not in text and "python" not in text
    assert "\nParallel regions by source location (top 10 by total time)\n" in text
    answers = section(text, "Answers")
    assert any(re.match(r"  most waited-for lock: known\+0x\w+ \(", a) for a in answers)


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
    # the whole trace: what is written, Python lines (every region has one)
    assert set(labels(app.plot_timeline())) <= set(regions["py_location"])
    # without Python stacks: the source location, as parallel_regions() gives it
    written = labels(plain.plot_timeline())
    assert written and set(written) <= set(plain.parallel_regions()["location"])


def test_imbalance_plot_names_the_python_line(app):
    fig = app.plot_imbalance()
    notes = [t.get_text() for t in fig.axes[0].texts]
    worst = app.imbalance().sort_values("lost_ns").iloc[-1]
    assert notes[0].startswith(f"{worst['py_location']} ({worst['location']}): ")
