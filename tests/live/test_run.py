"""The command line's ``ompt-py run`` (also ``python -m ompt_py run``) and ``ompt-py
doctor -- PROGRAM``; ``ompt-py report``: tests/presentation/test_report.py, ``--help``:
tests/presentation/test_cli_help.py.

Spec: ``ompt-py run [-o OUT.parquet] [--buffer-size SIZE] [--overflow
flush|drop|grow] [--keep-raw DIR] [--kill-after S] (SCRIPT.py ARGS | -m MODULE ARGS | --
COMMAND ARGS)`` runs the command with the tool attached (child processes
included, each keyed by pid), writes OUT (default ompt-trace.parquet) and
exits with the command's exit code when it is not 0; else NOTHING_TO_TRACE (3)
when no process of it started an OpenMP runtime (said, with the ``ompt-py
doctor`` command that tells why; nothing written); else 1 when the trace
holds less than was traced (records lost or dropped, raw files not read in
full: the raw files are then kept and named), else 0.  Signals:
test_run_signals.py.  ``ompt-py report TRACE`` prints a
summary: counts and time per construct, per parallel region, per-thread busy
vs waiting, written and dropped records.

The traced programs run to the end under the tool, so shutdown reports every
pending end and counts are exact.
"""

from __future__ import annotations

import os
import re
import textwrap
import warnings

import numpy as np
import pytest
from conftest import (
    CONSOLE_SCRIPT,
    OVERFLOW_POLICIES,
    cli,
    n_of,
    no_traceback,
    ok,
    parallel_records,
    unmatched_scopes,
)

import ompt_py
from ompt_py.presentation.cli import NOTHING_TO_TRACE

pytestmark = pytest.mark.needs_clang

# ---- run ----------------------------------------------------------------------------


def test_run_command(programs, tmp_path):
    out = tmp_path / "out.parquet"
    ok(cli("run", "-o", out, "--", programs.parallel, "5"))
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    assert proc["argv"] == [programs.parallel, "5"]
    assert n_of(t.events, "parallel_begin") == 5
    assert len(t.events) == parallel_records(5)
    assert proc["written"] == parallel_records(5) and proc["dropped"] == 0
    assert unmatched_scopes(t.events, t.pids) == []


@pytest.mark.pythons
def test_run_console_script(programs, tmp_path):
    assert CONSOLE_SCRIPT.exists(), f"{CONSOLE_SCRIPT} is not installed"
    out = tmp_path / "out.parquet"
    ok(cli("run", "-o", out, "--", programs.parallel, "2", script=True))
    assert n_of(ompt_py.load(out).events, "parallel_begin") == 2


def test_run_default_output_name(programs, tmp_path):
    ok(cli("run", "--", programs.parallel, "2", cwd=tmp_path))
    t = ompt_py.load(tmp_path / "ompt-trace.parquet")
    assert n_of(t.events, "parallel_begin") == 2


def test_run_program_output_passes_through(programs, tmp_path):
    r = ok(cli("run", "-o", tmp_path / "o.parquet", "--", "bash", "-c",
               f"echo hello-out; echo hello-err >&2; {programs.parallel} 1"))
    assert "hello-out" in r.stdout
    assert "hello-err" in r.stderr


@pytest.mark.pythons
def test_run_python_script(tmp_path, omp_ext):
    script = tmp_path / "work.py"
    script.write_text(textwrap.dedent("""
        import sys
        import ompt_work_ext as w
        print("argv", sys.argv[1:])
        w.parallel(3)
        w.tasks(7)
    """))
    out = tmp_path / "out.parquet"
    r = ok(cli("run", "-o", out, script, "a", "--b", path=[omp_ext]))
    assert "argv ['a', '--b']" in r.stdout
    t = ompt_py.load(out)
    assert n_of(t.events, "parallel_begin") == 4
    assert n_of(t.events, "task_create") == 7
    assert unmatched_scopes(t.events, t.pids) == []


def test_run_module(tmp_path, omp_ext):
    pkg = tmp_path / "mods"
    pkg.mkdir()
    (pkg / "omp_mod.py").write_text(textwrap.dedent("""
        import sys
        import ompt_work_ext as w
        print("argv", sys.argv[1:])
        w.parallel(int(sys.argv[1]))
    """))
    out = tmp_path / "out.parquet"
    r = ok(cli("run", "-o", out, "-m", "omp_mod", "4", path=[omp_ext, pkg]))
    assert "argv ['4']" in r.stdout
    t = ompt_py.load(out)
    assert n_of(t.events, "parallel_begin") == 4


def test_run_child_processes_keyed_by_pid(programs, tmp_path):
    out = tmp_path / "out.parquet"
    ok(cli("run", "-o", out, "--", "bash", "-c",
           f"{programs.parallel} 2; {programs.parallel} 3"))
    t = ompt_py.load(out)
    procs = t.meta["processes"]
    assert len(procs) == 2  # bash runs no OpenMP: no trace of its own
    assert len(set(np.unique(t.pids).tolist())) == 2
    by_n = {}
    for p in procs:
        mine = t.events[t.pids == p["pid"]]
        by_n[n_of(mine, "parallel_begin")] = (p, mine)
    assert set(by_n) == {2, 3}
    for n, (p, mine) in by_n.items():
        assert len(mine) == parallel_records(n) == p["written"]
        assert p["dropped"] == 0
    assert t.meta["written"] == parallel_records(2) + parallel_records(3)


def test_run_fork_child(programs, tmp_path):
    out = tmp_path / "out.parquet"
    ok(cli("run", "-o", out, "--", programs.forker, "1", "2"))
    t = ompt_py.load(out)
    assert len(t.meta["processes"]) == 2
    counts = sorted(n_of(t.events[t.pids == p["pid"]], "parallel_begin")
                    for p in t.meta["processes"])
    assert counts == [2, 2]  # child: 2; parent: 1 before + 1 after the fork


@pytest.mark.parametrize("code", [0, 3, 42])
def test_run_exit_code_of_command(programs, tmp_path, code):
    out = tmp_path / "out.parquet"
    r = cli("run", "-o", out, "--", "bash", "-c", f"{programs.parallel} 1; exit {code}")
    assert r.returncode == code, r.stderr
    # the trace is written whatever the exit code
    assert n_of(ompt_py.load(out).events, "parallel_begin") == 1


def test_run_command_killed_by_signal(programs, tmp_path):
    out = tmp_path / "out.parquet"
    r = cli("run", "-o", out, "--", "bash", "-c", f"{programs.parallel} 1; kill -TERM $$")
    # like a shell (128 + signal number), or by the same signal
    assert r.returncode in (128 + 15, -15), r.returncode
    assert n_of(ompt_py.load(out).events, "parallel_begin") == 1


def test_run_exit_code_of_script(tmp_path, omp_ext):
    script = tmp_path / "fail.py"
    script.write_text("import sys, ompt_work_ext as w\nw.parallel(1)\nsys.exit(5)\n")
    out = tmp_path / "out.parquet"
    r = cli("run", "-o", out, script, path=[omp_ext])
    assert r.returncode == 5, r.stderr
    assert n_of(ompt_py.load(out).events, "parallel_begin") == 1


def test_run_missing_command(tmp_path):
    r = cli("run", "-o", tmp_path / "o.parquet", "--", str(tmp_path / "no-such-program"))
    assert r.returncode == 2
    no_traceback(r)


def test_run_command_that_cannot_be_executed(tmp_path):
    """An executable file the kernel cannot run (no #! line): a usage error."""
    script = tmp_path / "noshebang"
    script.write_text("echo hello\n")
    script.chmod(0o755)
    r = cli("run", "-o", tmp_path / "o.parquet", "--", script)
    assert r.returncode == 2, r.stderr
    no_traceback(r)
    assert f"cannot run {script}" in r.stderr
    assert not list(tmp_path.glob("o.parquet*"))


def test_run_empty_raw_part(programs, tmp_path):
    """A process whose raw file stays empty (its writes fail: here the file size
    limit, as a full disk would) among complete ones: nothing is deleted, the
    folder of raw files is named with the command to read it, the exit status
    says that the trace holds less than was traced, and the output holds what the
    raw files can give (all of it, or none when a load cannot leave a file out)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out.parquet"
    full_disk = f"(ulimit -f 0; trap '' XFSZ; exec {programs.parallel} 3)"
    r = cli("run", "-o", out, "--", "bash", "-c",
            f"{programs.parallel} 2; {full_disk}; {programs.parallel} 1", env={"TMPDIR": tmp})
    no_traceback(r)
    assert r.returncode == 1, r.stderr
    (raw,) = tmp.glob("ompt-py-*")
    sizes = sorted(f.stat().st_size for f in raw.iterdir())
    assert len(sizes) == 3 and sizes[0] == 0 and sizes[1] > 0, sizes
    assert f"kept in {raw}" in r.stderr and f"ompt-py report {raw}" in r.stderr
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            merged = ompt_py.load(raw)
    except ompt_py.TraceFileError:  # the loader cannot leave the empty file out
        assert not out.exists()
        assert "no trace written" in r.stderr
        return
    assert any(issubclass(w.category, ompt_py.TraceWarning) for w in warned)
    t = ompt_py.load(out)
    assert n_of(t.events, "parallel_begin") == 3 == n_of(merged.events, "parallel_begin")
    assert "less than was traced" in r.stderr


def test_run_output_cannot_be_written(programs, tmp_path):
    """The output's folder is gone when the trace is written (here the command
    removes it): exit 1, the raw files kept and named, with how to read them."""
    outdir = tmp_path / "out"
    outdir.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = cli("run", "-o", outdir / "t.parquet", "--", "bash", "-c",
            f"{programs.parallel} 2; rmdir {outdir}", env={"TMPDIR": tmp})
    no_traceback(r)
    assert r.returncode == 1, r.stderr
    (raw,) = tmp.glob("ompt-py-*")
    assert f"cannot write {outdir / 't.parquet'}" in r.stderr
    assert f"kept in {raw}" in r.stderr and f"ompt-py report {raw}" in r.stderr
    assert n_of(ompt_py.load(raw).events, "parallel_begin") == 2


def test_run_dropped_records_exit_status(programs, tmp_path):
    """Records dropped (--overflow drop; see tests/tool/test_overflow.py for the
    pressure): the trace is written, the raw files deleted (they hold all that was
    kept), and the exit status is 1 with a message saying how many and what to do."""
    out = tmp_path / "out.parquet"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = cli("run", "-o", out, "--buffer-size", "128K", "--overflow", "drop", "--",
            programs.many, "200000", env={"OMPTPY_DRAIN_MS": "1000", "TMPDIR": tmp,
                                          "OMPTPY_ZERO_COPY": "off"})
    no_traceback(r)
    dropped = ompt_py.load(out).dropped
    assert dropped > 0, "the burst was expected to overflow a 128K buffer"
    assert r.returncode == 1, r.stderr
    assert f"{dropped:,} records dropped" in r.stderr and "--buffer-size" in r.stderr
    assert not list(tmp.iterdir())


def test_run_dropped_records_command_status_wins(programs, tmp_path):
    out = tmp_path / "out.parquet"
    r = cli("run", "-o", out, "--buffer-size", "128K", "--overflow", "drop", "--", "bash",
            "-c", f"{programs.many} 200000; exit 7",
            env={"OMPTPY_DRAIN_MS": "1000", "OMPTPY_ZERO_COPY": "off"})
    assert ompt_py.load(out).dropped > 0
    assert r.returncode == 7, r.stderr


def test_run_buffer_options(programs, tmp_path):
    out = tmp_path / "out.parquet"
    ok(cli("run", "-o", out, "--buffer-size", "256K", "--overflow", "grow", "--",
           programs.many, "200000"))
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    assert proc["config"]["buffer_bytes"] == 256 << 10
    assert proc["config"]["overflow"] == "grow"
    assert proc["dropped"] == 0
    assert proc["written"] == len(t.events) == 200_000 + 32  # see test_overflow.py


def test_run_reserve(programs, tmp_path):
    """--reserve: the file's regions are that large (here the least, 64 MiB), and a
    run that needs several of them loses nothing."""
    out = tmp_path / "out.parquet"
    ok(cli("run", "-o", out, "--reserve", "2M", "--", programs.many, "1500000"))
    t = ompt_py.load(out)
    (proc,) = t.meta["processes"]
    assert proc["config"]["zero_copy"]
    assert proc["dropped"] == 0 and proc["lost"] == 0
    # see test_overflow.py; a writer that made a region resident itself left a
    # tool_stall record (tests/tool/test_stalls.py)
    assert proc["written"] == len(t.events) == 1_500_000 + 32 + len(t.tool_stalls())
    assert proc.get("region_stalls", 0) == len(t.tool_stalls())


@pytest.mark.parametrize(("opt", "value"), [("--overflow", "bogus"),
                                            ("--buffer-size", "lots"), ("--reserve", "lots"),
                                            ("--reserve", "100000G")])
def test_run_bad_option_values(programs, tmp_path, opt, value):
    out = tmp_path / "out.parquet"
    r = cli("run", "-o", out, opt, value, "--", programs.parallel, "1")
    assert r.returncode != 0
    no_traceback(r)
    assert value in r.stderr
    if opt == "--overflow":
        for word in OVERFLOW_POLICIES:
            assert word in r.stderr
    assert not out.exists()


def test_run_keep_raw(programs, tmp_path):
    out = tmp_path / "out.parquet"
    raw = tmp_path / "raw"
    ok(cli("run", "-o", out, "--keep-raw", raw, "--", "bash", "-c",
           f"{programs.parallel} 2; {programs.parallel} 1"))
    names = sorted(os.listdir(raw))
    assert len(names) == 2 and all(re.fullmatch(r"ompt-\d+-\d+\.omptraw", n) for n in names)
    from_raw = ompt_py.load(raw)
    from_parquet = ompt_py.load(out)
    assert len(from_raw.events) == len(from_parquet.events) == parallel_records(
        2) + parallel_records(1)
    assert sorted(from_raw.pids.tolist()) == sorted(from_parquet.pids.tolist())


def test_run_keep_raw_reused_directory(programs, tmp_path):
    """A second run into the same --keep-raw directory must not merge the first
    run's processes into its output (refusing the directory is fine too)."""
    raw = tmp_path / "raw"
    ok(cli("run", "-o", tmp_path / "first.parquet", "--keep-raw", raw, "--",
           programs.parallel, "2"))
    second = tmp_path / "second.parquet"
    r = cli("run", "-o", second, "--keep-raw", raw, "--", programs.parallel, "3")
    no_traceback(r)
    if r.returncode != 0:  # refused: says why, ran nothing
        assert str(raw) in r.stderr
        assert not second.exists()
        return
    t = ompt_py.load(second)
    assert len(t.meta["processes"]) == 1, [p["argv"] for p in t.meta["processes"]]
    assert n_of(t.events, "parallel_begin") == 3


def test_run_output_in_missing_directory(programs, tmp_path):
    out = tmp_path / "no-such-dir" / "out.parquet"
    r = cli("run", "-o", out, "--", programs.parallel, "2")
    no_traceback(r)
    if not out.exists():
        assert r.returncode != 0
        assert str(out) in r.stderr or str(out.parent) in r.stderr
    else:
        assert n_of(ompt_py.load(out).events, "parallel_begin") == 2


NOTHING_RAN = "ran without starting an OpenMP runtime: nothing to trace"


@pytest.mark.parametrize("profile", [False, True], ids=["trace", "profile"])
@pytest.mark.parametrize(("target", "name", "doctor"), [
    (["--", "echo", "ran"], "echo", "ompt-py doctor -- echo"),
    (["{script}", "an arg"], "{script}", "ompt-py doctor {script} 'an arg'"),
    (["-m", "plain_module", "x"], "python -m plain_module", "ompt-py doctor -m plain_module x"),
], ids=["program", "script", "module"])
def test_run_without_openmp_says_so(tmp_path, target, name, doctor, profile):
    """A command that starts no OpenMP runtime (a program, a Python script or
    module importing no OpenMP code): said plainly, with the doctor command that
    tells why, nothing written, exit status NOTHING_TO_TRACE (run --help)."""
    script = tmp_path / "plain.py"
    script.write_text("import sys\nprint('ran', sys.argv[1:])\n")
    (tmp_path / "plain_module.py").write_text("print('ran')\n")
    out = tmp_path / "out.parquet"
    r = cli("run", *(["--profile"] if profile else []), "-o", out,
            *(t.format(script=script) for t in target), path=[tmp_path])
    no_traceback(r)
    assert r.returncode == NOTHING_TO_TRACE, r.stderr
    assert "ran" in r.stdout  # the command did run
    assert f"{name.format(script=script)} {NOTHING_RAN}" in r.stderr, r.stderr
    assert doctor.format(script=script) in r.stderr, r.stderr
    assert not out.exists()
    assert f"  {NOTHING_TO_TRACE}  the command started no OpenMP runtime" in ok(
        cli("run", "--help")).stdout


def test_run_without_openmp_keeps_a_failed_command_status(tmp_path):
    """README: the exit status is the command's when it failed, also when nothing
    was traced."""
    r = cli("run", "-o", tmp_path / "out.parquet", "--", "sh", "-c", "exit 7")
    no_traceback(r)
    assert r.returncode == 7, r.stderr
    assert f"sh {NOTHING_RAN}" in r.stderr


def test_doctor_of_programs(programs):
    """doctor -- PROGRAM, without running it: the OpenMP runtime a clang-built
    program links; a program that links none is a problem, said with what it means."""
    r = ok(cli("doctor", "--", programs.parallel))
    assert re.search(r"^\s*libomp\.so\.5 => \S+ \(LLVM libomp: ompt-py run traces it\)$",
                     r.stdout, re.M), r.stdout
    assert f"no problems found: ompt-py run -- {programs.parallel} traces it" in r.stdout
    r = ok(cli("doctor", "--", "true"))
    assert re.search(r"^OpenMP runtimes it links:\n  none$", r.stdout, re.M), r.stdout
    assert "links no OpenMP runtime" in r.stdout


def test_trace_inside_run_is_an_attach_error(tmp_path, omp_ext):
    script = tmp_path / "inner.py"
    script.write_text(textwrap.dedent("""
        import ompt_py
        import ompt_work_ext as w
        try:
            with ompt_py.trace():
                w.parallel(1)
        except ompt_py.AttachError as e:
            print("AttachError:", e)
        w.parallel(2)
    """))
    out = tmp_path / "out.parquet"
    r = ok(cli("run", "-o", out, script, path=[omp_ext]))
    assert "AttachError:" in r.stdout and "ompt-py run" in r.stdout
    # the run's own trace has everything
    assert n_of(ompt_py.load(out).events, "parallel_begin") == 2
