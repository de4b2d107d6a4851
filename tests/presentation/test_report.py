"""``ompt-py report TRACE`` (also ``python -m ompt_py report``): a summary of a
trace file, raw directory or dataset (``--help`` of the command line:
test_cli_help.py).

Spec: ``ompt-py report TRACE`` prints counts and time per construct, per
parallel region, per-thread busy vs waiting, written and dropped records,
incomplete processes.  On stored traces (tests/data; an `ompt-py run` followed by its report:
tests/live/test_end_to_end.py).
"""

from __future__ import annotations

import re

import pytest
from conftest import cli, load_stored, no_traceback, ok, stored_path

# ---- report ---------------------------------------------------------------------------------


@pytest.mark.pythons
def test_report():
    recorded = stored_path("report-loops")  # ompt-py run -- loops 64
    r = ok(cli("report", recorded))
    text = r.stdout
    t = load_stored("report-loops")
    assert re.search(r"parallel", text, re.I)
    assert re.search(r"written", text, re.I) and re.search(r"dropped", text, re.I)
    n = t.meta["written"]
    assert str(n) in text or f"{n:,}" in text
    assert re.search(r"busy", text, re.I) and re.search(r"wait", text, re.I)
    # constructs of the program appear by name
    assert re.search(r"loop", text, re.I)
    assert re.search(r"thread", text, re.I)


def test_a_trace_without_events_says_why():
    """A trace window in which OpenMP did nothing (stored: ``w.max_threads()``, then
    an empty ``with ompt_py.trace()``): the summary and the report say why it is
    empty, from its metadata; a process that never attached a runtime, with the
    runtime fallback off, names libgomp as the likely reason."""
    t = load_stored("inprocess-empty")
    (runtime,) = t.meta["processes"][0]["runtimes"]
    why = (f"no events: the tool was attached to {runtime['path']}, but no OpenMP construct "
           "ran while the trace recorded")
    def words(text: str) -> str:  # the layout wraps lines at the width
        return " ".join(text.split())

    assert why in words(str(t.summary()))
    assert why in words(ok(cli("report", stored_path("inprocess-empty"))).stdout)
    runtime["initialized"] = False
    t.meta["processes"][0]["fallback"]["policy"] = "off"
    text = words(str(t.summary()))
    assert "no OpenMP runtime started with the tool attached" in text, text
    assert "GNU libgomp" in text and "OMPTPY_RUNTIME=off" in text, text
    assert "no events" not in str(load_stored("report-loops").summary())


@pytest.mark.pythons
def test_report_with_locks():
    out = stored_path("report-critical")  # ompt-py run -- critical 20
    r = ok(cli("report", out))
    t = load_stored("report-critical")
    assert re.search(r"critical", r.stdout) and re.search(r"lock", r.stdout)
    assert re.search(r"busy", r.stdout, re.I) and re.search(r"wait", r.stdout, re.I)
    # the mutex events are counted: 2 threads x 20 critical + 20 lock acquisitions
    assert re.search(r"mutex_acquire\s+80\b", r.stdout), r.stdout
    # the short answers of Trace.summary() head the report
    answers = r.stdout.split("\nAnswers\n", 1)[1].split("\n\n", 1)[0]
    assert "most waited-for" in answers and "critical" in answers, answers
    # one vocabulary: the constructs and kinds of Trace.constructs()
    constructs = r.stdout.split("\nTime per construct\n", 1)[1].split("\n\n", 1)[0]
    for row in t.constructs().itertuples():
        assert re.search(rf"\n\s*{row.construct}\s+{row.kind}\s+{row.count:,}\s", constructs)
    assert "wait for lock" not in r.stdout and "explicit task (running)" not in r.stdout
    for th in t.meta["processes"][0]["threads"]:
        assert f"{th['written']:,}" in r.stdout


def test_report_of_raw_directory():
    # the raw files of a run: parallel 2, then critical 2
    r = ok(cli("report", stored_path("format-v1/raw")))
    assert re.search(r"parallel", r.stdout, re.I)


@pytest.mark.pythons
def test_report_of_a_profile(tmp_path):
    """A profile's report: its processes and the summary's sections (no plot: a
    profile has no timeline, which --plot says)."""
    prof = stored_path("profile-mixed")
    html = tmp_path / "r.html"
    r = ok(cli("report", prof, "--html", html, "--top", "3"))
    for words in ("ompt-py profile: 1 process(es)", "aggregates not made (tables full) 0",
                  "Time per construct", "Parallel regions per location",
                  "Explicit tasks: duration histogram", "Locks and critical sections",
                  "Threads: time per state",
                  "static imbalance: not from a profile (a profile does not tie a loop",
                  "small tasks: not from a profile (a profile does not time task creation)"):
        assert words in " ".join(r.stdout.split()), r.stdout
    assert "<h4>Time per construct</h4>" in html.read_text()
    r = cli("report", prof, "--plot", tmp_path / "x.png")
    no_traceback(r)
    assert r.returncode == 2 and "no timeline" in r.stderr


def test_report_of_incomplete_process():
    # ompt-py run --buffer-size 256K -- many 20000 _exit
    out = stored_path("report-incomplete")
    assert load_stored("report-incomplete").meta["processes"][0]["complete"] is False
    r = ok(cli("report", out))
    assert re.search(r"incomplete", r.stdout, re.I)


@pytest.mark.parametrize("old", [14, 16], ids=lambda v: f"libomp{v}")
def test_report_on_an_old_runtime(old):
    """tests/programs/versions/dynamic.c (gcc) on libomp 14 and 16 (the runs
    themselves: tests/tool/test_versions.py)."""
    name = f"versions-dynamic-libomp{old}"
    r = ok(cli("report", stored_path(name), timeout=60))
    assert "Traceback" not in r.stderr
    assert re.search(r"\n  work +loop ", r.stdout)
    assert re.search(r"\n  sync +barrier_implicit ", r.stdout)
    (proc,) = load_stored(name).meta["processes"]
    assert proc["argv"][0] in r.stdout  # the process's executable


def test_report_of_gcc_built_code_on_libomp():
    """gcc-built code run on libomp by the runtime fallback: its explicit barriers
    are barrier_implementation, its regions invoked by the program (the run:
    tests/live/test_fallback.py)."""
    report = ok(cli("report", "--width", "120", stored_path("gomp-prog"))).stdout
    assert re.search(r"\n  sync +barrier_implementation ", report), report
    assert load_stored("gomp-prog").parallel_regions()["invoker"].eq("program").all()


@pytest.mark.parametrize("what", ["missing", "garbage"])
def test_report_bad_input(tmp_path, what):
    p = tmp_path / "x.parquet"
    if what == "garbage":
        p.write_text("not a trace")
    r = cli("report", p)
    assert r.returncode != 0
    no_traceback(r)
    assert str(p) in r.stderr


# ---- help ------------------------------------------------------------------------------------


def test_no_arguments_is_a_usage_error():
    r = cli()
    assert r.returncode != 0
    no_traceback(r)
    assert "usage" in (r.stdout + r.stderr).lower()


def test_report_offload_section_only_with_offload_events():
    """The Offload section: per device, the bytes each way of tests/programs/offload.c's
    map clauses (16008 to and 24008 from each device), the blocked-time definition;
    absent from a trace without target events."""
    from ompt_py.presentation import report

    text = report.render(load_stored("offload.omptraw"))
    section = text[text.index("Offload per device"):]
    # Wrapped at the terminal's width (which differs under pytest-xdist): compared unwrapped.
    assert "blocked: host time inside target constructs without nowait" in " ".join(section.split())
    assert section.count("15.6 KiB") == 2 and section.count("23.4 KiB") == 2
    assert re.search(r"offload: 18 target constructs on 2 device\(s\)", text)
    summary = load_stored("offload.omptraw").summary()
    assert summary.offload is not None and len(summary.offload) == 2
    assert "Offload per device" in summary._repr_html_()
    assert "Offload" not in report.render(load_stored("report-loops"))
    assert load_stored("report-loops").summary().offload is None
