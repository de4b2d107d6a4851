"""``ompt-py run`` told to stop: signals to the program, to ``ompt-py run``, to its
process group, and from a terminal (README, *Trace any program*).

Spec: SIGINT, SIGTERM, SIGHUP (and SIGQUIT) that reach ``ompt-py run`` go to every
process of the command once; it waits ``--kill-after`` seconds for them, then
SIGKILLs what is left; it then writes what they had flushed to their raw files
and exits with the command's status (128 + N for signal N).  No process of the
command outlives it, also when it is killed by SIGKILL.  A raw file is deleted
only once all of them are in the output; otherwise their folder is named.

``spin`` (tests/programs/spin.c) runs parallel regions until a signal ends it;
``count`` makes it print how many signals it got, so that a signal delivered
twice shows.  Time bounds are generous: the machine may be busy.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import sys
import termios
import time
import warnings
from pathlib import Path

import pytest
from conftest import clean_env, no_traceback

import ompt_py
from ompt_py.io import rawfile
from ompt_py.live import launch

pytestmark = pytest.mark.needs_clang

#: Bytes of raw files the program must have flushed before it is signalled.
FLUSHED = 256 << 10
WAIT = 60  # seconds: for a step that takes milliseconds on an idle machine


def gone(pid: int) -> bool:
    """The process ended (a zombie has ended too: only its parent's wait is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return True


def all_gone(pids, timeout: float = WAIT) -> bool:
    end = time.monotonic() + timeout
    while not all(gone(p) for p in pids):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def raw_records(raw: Path) -> int:
    """Records in the raw files now (the last block may still be being written)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ompt_py.TraceWarning)
        return sum(rawfile.scan(f).nrecords for f in rawfile.list_dir(str(raw)))


def default_dispositions() -> None:
    """In ompt-py run's process, before exec: the forwarded signals as a shell leaves
    them, whatever the test runner inherited (nohup ignores SIGHUP, and an ignored
    signal is neither caught nor forwarded)."""
    for sig in launch.FORWARDED:
        signal.signal(sig, signal.SIG_DFL)


class Run:
    """``ompt-py run -o OUT --buffer-size 256K ... -- COMMAND`` in a session of its
    own (so that the test can signal its process group), with TMPDIR in tmp_path
    so that what it leaves there can be seen."""

    def __init__(self, tmp_path: Path, command: list[str], *options: str, **popen) -> None:
        self.out = tmp_path / "out.parquet"
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        env = clean_env(TMPDIR=str(self.tmp))
        # 256K buffers: threads flush their own chunks when the drainer gets no CPU.
        cmd = [sys.executable, "-m", "ompt_py", "run", "-o", str(self.out),
               "--buffer-size", "256K", *options, "--", *command]
        popen.setdefault("stdout", subprocess.PIPE)
        then = popen.pop("preexec_fn", None)

        def before_exec() -> None:
            default_dispositions()
            if then is not None:
                then()

        self.proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, preexec_fn=before_exec, **popen)
        self.started = time.monotonic()

    def ready(self, n: int = 1) -> list[int]:
        """The pids of the n processes that said "ready", once they flushed FLUSHED bytes."""
        pids = []
        for _ in range(n):
            line = self.proc.stdout.readline()
            assert line.startswith("ready "), line
            pids.append(int(line.split()[1]))
        return pids

    def raw_dir(self) -> Path:
        (raw,) = [p for p in self.tmp.iterdir() if p.name.startswith("ompt-py-")
                  and not p.name.startswith("ompt-py-site-")]
        return raw

    def wait_flushed(self) -> int:
        end = time.monotonic() + WAIT
        raw = self.raw_dir()
        while sum(f.stat().st_size for f in raw.iterdir()) < FLUSHED:
            assert time.monotonic() < end, "the program flushed too little"
            time.sleep(0.05)
        return raw_records(raw)

    def finish(self, timeout: float = WAIT) -> tuple[str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        no_traceback(subprocess.CompletedProcess([], self.proc.returncode, out, err))
        return out, err

    def check_trace(self, flushed: int, err: str) -> ompt_py.Trace:
        """The output holds at least what was flushed when the signal was sent; the raw
        files are deleted only when the output holds all of them, else named."""
        t = ompt_py.load(self.out)
        assert len(t.events) >= flushed
        left = [p for p in self.tmp.iterdir() if p.name.startswith("ompt-py-")]
        if left:  # kept (a file cut short by the kill): named, and the output holds it
            (raw,) = left
            assert f"kept in {raw}" in err, err
            assert f"ompt-py report {raw}" in err
            assert len(ompt_py.load(raw).events) == len(t.events)
        else:
            assert "kept in" not in err, err
        return t

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def run(tmp_path):
    runs = []

    def start(*args, **kw) -> Run:
        runs.append(Run(tmp_path, *args, **kw))
        return runs[-1]

    yield start
    for r in runs:  # a failed test leaves nothing running
        if r.proc.poll() is None:
            r.kill()


# ---- signals sent to the program itself ---------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_program_killed_by_signal(programs, run, sig):
    r = run([programs.spin])
    (pid,) = r.ready()
    flushed = r.wait_flushed()
    os.kill(pid, sig)
    _, err = r.finish()
    assert r.proc.returncode == 128 + sig, err
    assert "sent to the command" not in err  # ompt-py run got nothing to forward
    r.check_trace(flushed, err)


# ---- signals sent to ompt-py run, or to its process group -------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("to", ["run", "group"])
def test_signal_reaches_every_process_once(programs, run, sig, to):
    """The command's processes (spin and its forked child) each get the signal
    once, whether it was sent to ompt-py run alone or to its process group (as a
    terminal's Ctrl-C or a batch system's time limit would)."""
    r = run([programs.spin, "count", "fork"])
    pids = r.ready(2)
    flushed = r.wait_flushed()
    if to == "run":
        os.kill(r.proc.pid, sig)
    else:
        os.killpg(r.proc.pid, sig)
    out, err = r.finish()
    assert out.split("\n").count("signals 1") == 2, out
    assert r.proc.returncode == 128 + sig, err
    assert f"{signal.Signals(sig).name} sent to the command's processes; they ended" in err
    assert all_gone(pids, 0)
    t = r.check_trace(flushed, err)
    assert {p["pid"] for p in t.meta["processes"]} == set(pids)


def test_command_that_ignores_the_signal_is_killed(programs, run):
    r = run([programs.spin, "ignore", "fork"], "--kill-after", "2")
    pids = r.ready(2)
    flushed = r.wait_flushed()
    sent = time.monotonic()
    os.kill(r.proc.pid, signal.SIGTERM)
    _, err = r.finish()
    assert r.proc.returncode == 128 + signal.SIGKILL, err
    assert time.monotonic() - sent >= 2
    assert "did not end within 2 s: killed (SIGKILL)" in err
    assert all_gone(pids, 0)
    r.check_trace(flushed, err)


def test_command_dies_with_a_killed_run(programs, run):
    """SIGKILL to ompt-py run alone: the command is killed too (PR_SET_PDEATHSIG);
    the raw files stay where they are."""
    r = run([programs.spin])
    (pid,) = r.ready()
    r.wait_flushed()
    os.kill(r.proc.pid, signal.SIGKILL)
    r.proc.wait(WAIT)
    assert all_gone([pid]), f"{pid} outlived ompt-py run"
    assert raw_records(r.raw_dir()) > 0


def test_complete_run_leaves_no_raw_files(programs, run):
    """The counterpart of check_trace: a run merged in full deletes its raw files."""
    r = run([programs.parallel, "3"])
    _, err = r.finish()
    assert r.proc.returncode == 0, err
    assert len(ompt_py.load(r.out).events) > 0
    assert not [p for p in r.tmp.iterdir() if p.name.startswith("ompt-py-")]


# ---- a terminal -----------------------------------------------------------------


class Terminal:
    """A pseudo-terminal that is the controlling terminal of ompt-py run (the leader
    of its session, so its group is the terminal's foreground, as under a shell)."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.seen = b""

    def popen(self) -> dict:
        return {"stdin": self.slave, "stdout": self.slave,
                "preexec_fn": lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0)}

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def expect(self, text: str, timeout: float = WAIT) -> str:
        end = time.monotonic() + timeout
        while text.encode() not in self.seen:
            ready, _, _ = select.select([self.master], [], [], max(0.0, end - time.monotonic()))
            assert ready, f"no {text!r} on the terminal: {self.seen!r}"
            self.seen += os.read(self.master, 4096)
        return self.seen.decode()

    def close(self) -> None:
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def terminal():
    t = Terminal()
    yield t
    t.close()


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(") ", 1)[1][0]


def wait_stopped(pid: int, stopped: bool = True) -> None:
    end = time.monotonic() + WAIT
    while (state(pid) == "T") != stopped:
        assert time.monotonic() < end, f"{pid} is {state(pid)}"
        time.sleep(0.05)


def test_terminal_ctrl_c(programs, run, terminal):
    """Ctrl-C goes to the terminal's foreground group, ompt-py run's: forwarded once."""
    r = run([programs.spin, "count", "fork"], **terminal.popen())
    terminal.expect("ready")
    terminal.type(b"\x03")
    _, err = r.finish()
    assert terminal.expect("signals 1").count("signals 1") == 2
    assert r.proc.returncode == 128 + signal.SIGINT, err
    assert "SIGINT sent to the command's processes" in err


def test_terminal_given_to_a_command_that_reads_it(programs, run, terminal):
    """A command that reads the terminal gets it (a shell job brought to the
    foreground): it reads what is typed, and Ctrl-C then goes to it directly."""
    r = run(["bash", "-c", f"read x; echo got $x; exec {programs.spin} count"],
            **terminal.popen())
    terminal.type(b"hello\n")
    terminal.expect("got hello")
    terminal.expect("ready")
    terminal.type(b"\x03")
    _, err = r.finish()
    assert terminal.expect("signals 1").count("signals 1") == 1
    assert r.proc.returncode == 128 + signal.SIGINT, err
    assert "sent to the command" not in err  # ompt-py run had nothing to forward


def test_terminal_ctrl_z(programs, run, terminal):
    """Ctrl-Z stops the command and ompt-py run (the shell sees its job stopped);
    continuing ompt-py run continues the command."""
    r = run([programs.spin, "count"], **terminal.popen())
    terminal.expect("ready")
    pid = int(terminal.seen.split(b"ready ")[1].split()[0])
    terminal.type(b"\x1a")
    wait_stopped(pid)
    wait_stopped(r.proc.pid)
    os.killpg(r.proc.pid, signal.SIGCONT)  # what the shell's fg does
    wait_stopped(r.proc.pid, False)
    wait_stopped(pid, False)
    terminal.type(b"\x03")
    _, err = r.finish()
    assert "signals 1" in terminal.expect("signals 1")
    assert r.proc.returncode == 128 + signal.SIGINT, err
