"""The command line's errors: each is one line that says what to do, never a
traceback; exit status 2 for usage errors (argparse's convention: a bad option,
a path that cannot be used, a missing script or module, a file that is not a
trace) and 1 for failures (a write that fails on the way); nothing is left
half-written.  ``ompt-py run``'s own: tests/live/test_run.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import clean_env, cli, no_traceback, stored_path

TRACE = str(stored_path("barrier-libomp19"))


def one_line_error(r, command: str, status: int) -> str:
    no_traceback(r)
    assert r.returncode == status, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith((f"ompt-py {command}: ", "usage: ")) or "error:" in lines[-1], \
        r.stderr
    return r.stderr


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage.parquet").write_text("not a trace")
    return tmp_path


USAGE = [  # (arguments with {dir} for tmp_path, words the message must hold)
    ("run --keep-raw {dir}/a-file -- true", ["a-file", "not a directory"]),
    ("run -o {dir}/no-dir/x.parquet -- true", ["no-dir", "-o"]),
    ("run -o {dir}/full -- true", ["not empty"]),
    ("run -o {dir}/empty/x.parquet --", ["nothing to run"]),
    ("run -o {dir}/empty/x.parquet {dir}/missing.py", ["missing.py"]),
    ("run --kill-after 0 -- true", ["--kill-after"]),
    ("run --kill-after soon -- true", ["--kill-after"]),
    ("run --merge-memory 1M -- true", ["--merge-memory", "at least 64M"]),
    ("run --merge-memory lots -- true", ["--merge-memory", "'lots'"]),
    ("run -o /dev/null -- true", ["not a regular file"]),
    ("run --profile -o {dir}/empty -- true", ["a profile is one file", ".parquet"]),
    ("run --profile --python-stacks 4 -- true", ["--python-stacks", "--profile"]),
    ("run --profile --buffer-size 64M -- true", ["--buffer-size", "--profile"]),
    ("run --profile --reserve 1G -- true", ["--reserve", "--profile"]),
    ("report " + TRACE + " --plot {dir}/x.unknownext", [".unknownext", ".png"]),
    ("report " + TRACE + " --plot {dir}/no-dir/x.png", ["no-dir", "--plot"]),
    ("report " + TRACE + " --html {dir}/empty", ["is a directory", "--html"]),
    ("report " + TRACE + " --top 0", ["--top"]),
    ("report {dir}/missing.parquet", ["missing.parquet"]),
    ("report {dir}/garbage.parquet", ["garbage.parquet"]),
    ("export " + TRACE + " --format csv -o {dir}/no-dir/x.csv", ["no-dir", "-o"]),
    ("export " + TRACE + " --format perfetto -o {dir}/empty", ["is a directory"]),
    ("export {dir}/garbage.parquet --format csv -o {dir}/x.csv", ["garbage.parquet"]),
    ("doctor {dir}/missing.py", ["missing.py"]),
    ("doctor {dir}/a-file", ["-m MODULE"]),
    ("doctor -m no_such_module_for_ompt_py", ["no_such_module_for_ompt_py"]),
]


@pytest.mark.parametrize(("args", "words"), USAGE, ids=[a.split(" {")[0] for a, _ in USAGE])
def test_usage_errors(paths, args, words):
    before = sorted(p.name for p in paths.rglob("*"))
    r = cli(*args.format(dir=paths).split())
    err = one_line_error(r, args.split()[0], 2)
    for word in words:
        assert word in err
    assert sorted(p.name for p in paths.rglob("*")) == before  # nothing written


@pytest.mark.parametrize(("command", "output"), [
    ("export {trace} --format csv -o {out}", "x.csv"),
    ("export {trace} --format perfetto -o {out}", "x.json"),
    ("report {trace} --html {out}", "x.html"),
    ("report {trace} --plot {out}", "x.png"),
])
def test_write_failure(tmp_path, command, output):
    """A write that fails on the way (the file size limit stands for a full disk):
    exit 1, one line naming the file and the cause, no partial file left."""
    out = tmp_path / output
    args = command.format(trace=TRACE, out=out)
    # Python ignores SIGXFSZ: the write fails with EFBIG instead of killing it.
    r = subprocess.run(["bash", "-c", f'ulimit -f 1; exec "$0" -m ompt_py {args}',
                        sys.executable], env=clean_env(), capture_output=True, text=True,
                       timeout=120)
    err = one_line_error(r, args.split()[0], 1)
    assert str(out) in err and "File too large" in err
    assert not list(tmp_path.iterdir())
