"""The README's promises that code can check: it starts with ``make demo`` and
``make test``; its quickstart comes first and is at most 15 lines; the clang
builds it shows (setuptools for a C extension, and for a Cython ``prange``
loop) work as they stand, and the extensions they make are traced.  The
snippets are read from README.md itself, so the test fails when they change
and stop working."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import PROGRAMS, REPO, clean_env, n_of, run_python

import ompt_py

README = REPO / "README.md"
BUILD_SECTION = "## Build an OpenMP extension with clang"
#: A fenced block: its language and its text.
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def section(heading: str) -> str:
    """The text under ``heading`` up to the next heading of its level or above (a
    line of a fenced block is no heading)."""
    lines = README.read_text().splitlines(keepends=True)
    start = lines.index(heading + "\n")
    level = len(heading.split()[0])
    fenced, end = False, len(lines)
    for i in range(start + 1, len(lines)):
        fenced ^= lines[i].startswith("```")
        hashes = lines[i].split(" ", 1)[0]
        if not fenced and hashes and set(hashes) == {"#"} and len(hashes) <= level:
            end = i
            break
    return "".join(lines[start:end])


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def named(text: str, first_line: str) -> list[str]:
    """The fenced blocks of ``text`` whose first line is ``first_line``."""
    return [body for _, body in blocks(text) if body.splitlines()[0] == first_line]


def test_readme_starts_with_make_demo_and_make_test():
    first = blocks(README.read_text())[0][1]
    commands = [line.split("#")[0].strip() for line in first.splitlines()]
    assert commands[:2] == ["make demo", "make test"], first


def test_quickstart_first_and_short():
    text = README.read_text()
    headings = re.findall(r"^## .*$", FENCE.sub("", text), re.M)
    assert headings[0] == "## Quickstart", headings
    quick = section("## Quickstart").rstrip("\n").splitlines()
    assert len(quick) <= 15, quick
    languages = [lang for lang, _ in blocks("\n".join(quick))]
    assert languages == ["sh", "python"], languages


@pytest.fixture
def build_env() -> dict[str, str]:
    """The environment of the README's build command: this venv's python first on
    PATH, so that the command's ``python`` is the one ompt_py is installed in."""
    env = clean_env()
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def build(tmp_path: Path, env: dict[str, str], files: dict[str, str]) -> str:
    """Writes ``files`` into tmp_path and runs the README's build command there;
    the command."""
    (command,) = [body.strip() for lang, body in blocks(section(BUILD_SECTION))
                  if lang == "sh"]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    r = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"$ {command}\n{r.stdout}{r.stderr}"
    return command


def links(path: Path) -> str:
    return subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout


@pytest.mark.needs_clang
def test_c_extension_built_as_the_readme_says(tmp_path, build_env):
    (setup_py, _) = named(section(BUILD_SECTION), "# setup.py")
    command = build(tmp_path, build_env, {
        "setup.py": setup_py, "my_ext.c": (PROGRAMS / "readme" / "my_ext.c").read_text()})
    (module,) = tmp_path.glob("my_ext*.so")
    assert "libomp.so" in links(module) and "libgomp" not in links(module), links(module)

    # the quickstart's Python, as it stands, traces it
    (quick,) = [body for lang, body in blocks(section("## Quickstart")) if lang == "python"]
    trace_path = tmp_path / "t.parquet"
    r = run_python(quick + f"t.save({str(trace_path)!r})\n", path=[tmp_path])
    assert re.search(r"^\s+\d+ events over .+ 2 thread\(s\)", r.stdout, re.M), r.stdout
    assert n_of(ompt_py.load(trace_path).events, "parallel_begin") == 1

    # pip install . with the same two variables: the wheel's module links libomp too
    variables = dict(word.split("=", 1) for word in shlex.split(command)
                     if re.fullmatch(r"[A-Z]+=.*", word))
    assert set(variables) == {"CC", "LDSHARED"}, command
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", "dist", "."],
                       cwd=tmp_path,
                       env={**build_env, **variables}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("my_ext-*.whl")
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".so")]
        z.extract(name, tmp_path / "wheel")
    assert "libomp.so" in links(tmp_path / "wheel" / name), links(tmp_path / "wheel" / name)


@pytest.mark.needs_clang
def test_cython_prange_built_as_the_readme_says(tmp_path, build_env):
    pytest.importorskip("Cython", reason="Cython is not installed (pip install cython)")
    text = section(BUILD_SECTION)
    (pyx,) = named(text, "# prange_ext.pyx")
    (_, setup_py) = named(text, "# setup.py")
    build(tmp_path, build_env, {"prange_ext.pyx": pyx, "setup.py": setup_py})
    (module,) = tmp_path.glob("prange_ext*.so")
    assert "libomp.so" in links(module) and "libgomp" not in links(module), links(module)
    trace_path = tmp_path / "t.parquet"
    r = run_python(f"""
import ompt_py
import numpy as np
import prange_ext
with ompt_py.trace() as t:
    print(prange_ext.total(np.arange(1000.0)))
t.save({str(trace_path)!r})
""", path=[tmp_path])
    assert r.stdout.strip() == str(sum(range(1000)) * 1.0)
    events = ompt_py.load(trace_path).to_pandas()["event"].value_counts()
    assert events.get("parallel_begin") == 1, events
    assert events.get("flush", 0) == 0, events  # no error check in the loop (boundscheck=False)
