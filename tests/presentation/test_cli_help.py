"""The command line's conventions: ``ompt-py --version``; the top-level ``--help`` a
short list of the commands; each command's ``--help`` about that command only:
its usage, what it does in 2 to 4 lines, its options, examples of it."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata

import pytest
from conftest import clean_env, cli, ok, stored_path

import ompt_py
from ompt_py.presentation.cli import DESCRIPTION, EPILOG

COMMANDS = ("run", "report", "export", "view", "doctor")


def test_version():
    lines = ok(cli("--version")).stdout.splitlines()
    assert lines[0] == f"ompt-py {metadata.version('ompt-py')}" == f"ompt-py {ompt_py.__version__}"
    # the tool's and the OpenMP runtime's on the second line
    assert len(lines) == 2, lines
    assert re.fullmatch(rf"tool: {re.escape(ompt_py.tool_path())} \(record version \d+\); "
                        r"OpenMP runtime: /\S+libomp\S* \(.+\)", lines[1]), lines[1]


ENTRY = """\
import atexit, sys, threading, time
from ompt_py.presentation import cli

done, command = threading.Event(), cli.main

def main():
    try:
        return command()
    finally:
        done.set()

def late():  # still running when the command is done
    done.wait()
    time.sleep(0.3)
    print("the thread's last line")

cli.main = main

threading.Thread(target=late).start()
atexit.register(print, "the exit handler's line")
sys.stdout.write("x" * 200_000 + "\\n")  # more than a pipe holds: still in the buffer
sys.argv = ["ompt-py", *sys.argv[1:]]
cli.entry()
"""


@pytest.mark.parametrize("args, code", [(["report", stored_path("barrier-libomp19.parquet")], 0),
                                        (["report", "/nonexistent"], 2)])
def test_entry_ends_as_a_normal_exit_would(tmp_path, args, code):
    """The console script's end (cli.entry, which skips the interpreter's teardown):
    the command's exit status; a thread still running finished, the exit handlers
    run and the buffered output written, in that order."""
    r = subprocess.run([sys.executable, "-c", ENTRY, *map(str, args)], capture_output=True,
                       text=True, env=clean_env(None), timeout=120)
    assert r.returncode == code, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "x" * 200_000
    assert lines[-2:] == ["the thread's last line", "the exit handler's line"], lines[-3:]
    if code == 0:
        assert lines[1].startswith("ompt-py trace: 44 events"), lines[1]
    else:
        assert "no trace at /nonexistent" in r.stderr


def test_top_level_help_lists_the_commands():
    out = ok(cli("--help")).stdout
    assert len(out.splitlines()) <= 30, out
    for command in COMMANDS:  # each with its one-line summary
        assert re.search(rf"^\s+{command}\s+\w+", out, re.M), out
    assert "--version" in out
    # the rule a Python user must know first, and where the rest is
    assert re.search(r"import ompt_py first", out), out
    assert "ompt-py COMMAND --help" in out
    assert "--keep-raw" not in out and "examples:" not in out  # the commands' own help


@pytest.mark.parametrize("command", COMMANDS)
def test_command_help_is_about_the_command(command):
    out = ok(cli(command, "--help")).stdout
    assert out.startswith(f"usage: ompt-py {command} "), out
    # what it does: the paragraph between the usage and the first heading, 2 to 4 lines
    head = out.split("\n\n")[1].splitlines()
    assert 2 <= len(head) <= 4 and not head[0].endswith(":"), head
    # its examples, of this command only
    examples = out.split("examples:\n", 1)[1].split("\n\n")[0].splitlines()
    assert examples and all(f"{e} ".startswith(f"  ompt-py {command} ") for e in examples), examples
    # nothing of the top-level text, nor of the other commands
    for line in (DESCRIPTION + EPILOG).splitlines():
        assert not line.strip() or line not in out, line
    for other in set(COMMANDS) - {command}:
        assert f"ompt-py {other}" not in out, other


def test_run_help_names_its_options_and_exit_status():
    out = ok(cli("run", "--help")).stdout
    for opt in ("-o", "--buffer-size", "--overflow", "--keep-raw", "-m", "--profile"):
        assert re.search(rf"^\s+{opt}\b", out, re.M), opt
    statuses = out.split("exit status:\n", 1)[1].splitlines()
    assert [s.split()[0] for s in statuses[1:] if s.startswith("  ") and s[2:3].isdigit()] == [
        "3", "1", "2", "0"], statuses
