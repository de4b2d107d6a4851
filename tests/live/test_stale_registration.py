"""libomp's stale registration files (docs/limits.md).

libomp registers each process in /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>
(or in /tmp where libomp 19 cannot use /dev/shm): it creates the file, sizes
it, maps it and writes its string.  A process killed between the creation and
the sizing leaves an empty file, and the next process of that pid dies of
SIGBUS at its first OpenMP call (libomp 14, 16 and 19 alike).  The preload hook
of ``ompt-py run`` (csrc/hook/hook.c, when it loads) and ``import ompt_py``
(live/runtime.py) remove such an empty file of their own process; a non-empty
one is left to libomp.

Each child here is started held: a shell writes its pid and waits on a FIFO,
the test makes the file for that pid, then lets it go on: exec the OpenMP
program (the same pid), or import ompt_py and the OpenMP extension.  The
control runs the same child without the fix and must die of SIGBUS.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import clean_env, n_of

import ompt_py
from ompt_py.live.runtime import KMP_REGISTRATION_DIRS, KMP_REGISTRATION_NAME

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]

SHM, TMP = KMP_REGISTRATION_DIRS

# $1 the pid file, $2 the FIFO, then the command to exec.
HELD = 'echo $$ > "$1.part" && mv "$1.part" "$1" && read go < "$2" && shift 2 && exec "$@"'

FIX_IN_PYTHON = """
import sys
if sys.argv[1] == "fix":
    import ompt_py  # noqa: F401
import ompt_work_ext
ompt_work_ext.parallel(2)
print("ran")
"""


def registration(folder: str, pid: int) -> Path:
    return Path(folder) / KMP_REGISTRATION_NAME.format(pid=pid, uid=os.getuid())


def run_held(tmp_path: Path, command: list[str], files: dict[str, bytes], *,
             prefix: list[str] = (), env: dict[str, str] | None = None,
             timeout: float = 60) -> tuple[subprocess.CompletedProcess, dict[str, bytes | None]]:
    """Runs ``prefix sh -c HELD ... command`` and, once the shell's pid is known, writes
    ``files`` (folder -> content) as that pid's registration files.  The process's result
    and what each file holds afterwards (None: removed); the files are removed after."""
    tmp_path.mkdir(exist_ok=True)
    pid_file, fifo = tmp_path / "pid", tmp_path / "go"
    os.mkfifo(fifo)
    proc = subprocess.Popen([*prefix, "sh", "-c", HELD, "sh", pid_file, fifo, *command],
                            env=clean_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    made: list[Path] = []
    try:
        deadline = time.monotonic() + timeout
        while not pid_file.exists():
            assert proc.poll() is None, f"the held child ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the held child never wrote its pid"
            time.sleep(0.01)
        pid = int(pid_file.read_text())
        for folder, content in files.items():
            path = registration(folder, pid)
            path.write_bytes(content)
            made.append(path)
        while True:  # the shell opens the FIFO for reading right after writing its pid
            try:
                go = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:
                assert proc.poll() is None, f"the held child ended early: {proc.communicate()}"
                assert time.monotonic() < deadline, "the held child never read the FIFO"
                time.sleep(0.01)
        os.write(go, b"go\n")
        os.close(go)
        out, err = proc.communicate(timeout=timeout)
        left = {str(p.parent): p.read_bytes() if p.exists() else None for p in made}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for path in made:
            path.unlink(missing_ok=True)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), left


def expect_sigbus(r: subprocess.CompletedProcess) -> None:
    """The control: without the fix the child dies of SIGBUS (skip if this libomp copes)."""
    if r.returncode != -signal.SIGBUS:
        pytest.skip(f"this libomp does not die of SIGBUS on an empty registration file "
                    f"(exit {r.returncode}): nothing to fix here\n{r.stderr}")


def test_the_preload_hook_removes_an_empty_registration(programs, tmp_path):
    control, _ = run_held(tmp_path / "control", [programs.parallel, "3"], {SHM: b""})
    expect_sigbus(control)

    out = tmp_path / "out.parquet"
    r, left = run_held(tmp_path / "hook", [programs.parallel, "3"], {SHM: b"", TMP: b"x"},
                       prefix=[sys.executable, "-m", "ompt_py", "run", "-o", str(out), "--"])
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}{r.stderr}"
    assert n_of(ompt_py.load(out).events, "parallel_begin") == 3
    assert left == {SHM: None, TMP: b"x"}  # the empty one removed, the other one left alone


def test_the_preload_hook_looks_in_tmp_too(programs, tmp_path):
    """libomp 19 uses /tmp where /dev/shm cannot be used (it can here: the file is only
    seen removed)."""
    r, left = run_held(tmp_path, [programs.parallel, "1"], {TMP: b""},
                       prefix=[sys.executable, "-m", "ompt_py", "run",
                               "-o", str(tmp_path / "out.parquet"), "--"])
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}{r.stderr}"
    assert left == {TMP: None}


def test_import_ompt_py_removes_an_empty_registration(omp_ext, tmp_path):
    python = [sys.executable, "-c", FIX_IN_PYTHON]
    env = {"PYTHONPATH": str(omp_ext)}
    control, _ = run_held(tmp_path / "control", [*python, "nofix"], {SHM: b""}, env=env)
    expect_sigbus(control)

    r, left = run_held(tmp_path / "fix", [*python, "fix"], {SHM: b"", TMP: b""}, env=env)
    assert r.returncode == 0 and r.stdout == "ran\n", f"exit {r.returncode}\n{r.stdout}{r.stderr}"
    assert left == {SHM: None, TMP: None}
