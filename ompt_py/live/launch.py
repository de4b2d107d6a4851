"""Runs the command of ``ompt-py run`` and waits for it: signals, terminal, no orphan.

What ``ompt-py run`` must do is end the command when it is told to, and still
write the trace its processes had flushed.  How it is done, and why:

* **The command runs in a process group of its own** (``setpgid`` in the child,
  before ``exec``): "the traced process group".  ``ompt-py run`` catches
  SIGINT, SIGTERM, SIGHUP and SIGQUIT and sends each to that group
  (``killpg``, then SIGCONT, in case it was stopped), so every process of the
  command gets it, once: ``bash -c "./a; ./b"`` and the program bash waits
  for, not just bash (which would leave ``./a`` running).  A signal sent to
  ``ompt-py run`` alone (``kill PID``) and one sent to its process group (``kill
  -- -PGID``, as ``timeout`` and batch systems do) both reach ``ompt-py run`` only,
  and are forwarded.  A batch system that signals every process of the job
  (Slurm's time limit) reaches the command directly and through ``ompt-py run``:
  a second SIGTERM ends a process as the first does, unless it handles SIGTERM.

* **The terminal.**  Ctrl-C, Ctrl-\\ and Ctrl-Z go to the terminal's
  foreground process group, which is ``ompt-py run``'s (the shell's job), not
  the command's: ``ompt-py run`` gets the signal and forwards it, so the
  command gets it once.  A process of a background group that reads the
  terminal is stopped (SIGTTIN); when the command is stopped so and ``ompt-py
  run`` is in the foreground, it gives the terminal to the command's group
  (``tcsetpgrp``) and continues it, as a shell does for a job brought to the
  foreground.  From then on the terminal's signals go to the command directly
  (and not to ``ompt-py run``: again once).  When the command is stopped by
  Ctrl-Z, ``ompt-py run`` takes the terminal back and stops itself, so that the
  shell sees the job stopped; ``fg`` continues it, and it gives the terminal
  back (if the command had it) and continues the command.  Without a terminal
  nothing of this happens.

* **A bounded wait.**  After forwarding, ``ompt-py run`` waits until no process
  is left in the command's group, for at most ``kill_after`` seconds from the
  first signal (``--kill-after``, 10 by default: Slurm sends SIGKILL 30 s after
  its SIGTERM), then sends SIGKILL to the group.  What each process had
  written to its raw file is then merged into the trace.

* **Dispositions.**  The handlers of ``ompt-py run`` are reset by ``exec``, so
  the command gets the dispositions ``ompt-py run`` was started with: the
  defaults, or SIGHUP ignored under ``nohup`` (an ignored signal is not
  caught, so not forwarded either).

* **Receiving signals.**  Python runs signal handlers only in its main thread,
  and the kernel may give a signal meant for the process to any thread that
  does not block it (numpy's BLAS threads), leaving the main thread asleep in
  ``waitpid``.  So the handlers do nothing, and the main thread sleeps in
  ``select`` on the pipe of ``signal.set_wakeup_fd``, into which the C-level
  handler writes each signal's number whichever thread took it (SIGCHLD too,
  for the command's end or stop).

* **No orphan.**  The child gets ``PR_SET_PDEATHSIG`` = SIGKILL before ``exec``:
  it dies with ``ompt-py run`` even when ``ompt-py run`` is killed by SIGKILL
  (the processes it started do not; a group signal reaches them).  On any
  other way out of ``run()`` (an exception), ``ompt-py run`` sends SIGKILL to the
  command's group if the command is still running.  ``ompt-py run`` is the
  command's child subreaper (``PR_SET_CHILD_SUBREAPER``): a process of the
  command whose parent ended becomes its child, and is reaped by it, so the
  group is seen to empty (a zombie left to an init that is slow to reap would
  still count as a member).  A process of the command that makes a group or a
  session of its own leaves the command's group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

#: Signals forwarded to the command's process group.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
#: Seconds ``ompt-py run`` waits after forwarding a signal before SIGKILL.
KILL_AFTER = 10.0
_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)  # the terminal's job control
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PR_SET_CHILD_SUBREAPER = 36
_TICK = 0.5  # longest sleep without news: the loop also polls


@dataclass
class Outcome:
    """How the command ended."""

    returncode: int  #: its exit status, or 128 + the signal that killed it (as a shell says)
    forwarded: int | None = None  #: the first signal forwarded to it, if any
    killed: bool = False  #: it did not end within kill_after of that signal: SIGKILL


def _die_with_parent(parent: int, prctl) -> None:
    """In the child before exec: a group of its own, and death with ompt-py run."""
    os.setpgid(0, 0)
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
              ctypes.c_ulong(0), ctypes.c_ulong(0))
        if os.getppid() != parent:  # it died before prctl: nothing will send the signal
            os.kill(os.getpid(), signal.SIGKILL)


def _controlling_terminal() -> int | None:
    try:
        return os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None


def _status_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class _Supervisor:
    def __init__(self, proc: subprocess.Popen, tty: int | None, kill_after: float) -> None:
        self.proc = proc
        self.pgid = proc.pid
        self.tty = tty
        self.kill_after = kill_after
        self.status: int | None = None
        self.forwarded: int | None = None
        self.deadline = float("inf")
        self.killed = False
        self.command_has_tty = False

    def _killpg(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def _group_left(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _foreground(self) -> int | None:
        try:
            return os.tcgetpgrp(self.tty) if self.tty is not None else None
        except OSError:
            return None

    def _give_terminal(self, pgrp: int) -> None:
        # From a background group tcsetpgrp raises SIGTTOU unless it is blocked.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
        try:
            os.tcsetpgrp(self.tty, pgrp)
        except OSError:
            pass
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTTOU})

    def take_terminal_back(self) -> None:
        if self.tty is not None and self._foreground() == self.pgid:
            self._give_terminal(os.getpgrp())

    def on_signal(self, sig: int) -> None:
        if sig == signal.SIGTSTP:  # Ctrl-Z while ompt-py run has the terminal
            self._killpg(sig)
        elif sig in FORWARDED:
            self._killpg(sig)
            self._killpg(signal.SIGCONT)  # a stopped process acts on it once continued
            if self.forwarded is None:
                self.forwarded = sig
                self.deadline = time.monotonic() + self.kill_after

    def _on_stop(self, stopsig: int) -> None:
        if self.tty is None or stopsig not in _STOPS:
            return  # stopped by someone else: whoever stopped it continues it
        mine = os.getpgrp()
        wants_terminal = stopsig != signal.SIGTSTP  # it read or set the terminal
        if wants_terminal and self._foreground() == mine:
            self._give_terminal(self.pgid)  # ours is the foreground job: ours to give
            self.command_has_tty = True
        else:  # Ctrl-Z, or the job is in the background: the shell must see it stopped
            self.take_terminal_back()
            os.kill(os.getpid(), signal.SIGSTOP)
            # Continued by fg (the terminal is ours again) or bg.
            if (self.command_has_tty or wants_terminal) and self._foreground() == mine:
                self._give_terminal(self.pgid)
                self.command_has_tty = True
        self._killpg(signal.SIGCONT)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid != self.proc.pid:
                continue  # a process of the command whose parent ended (we are its reaper)
            if os.WIFSTOPPED(status):
                self._on_stop(os.WSTOPSIG(status))
            else:
                self.status = status
                self.proc.returncode = _status_code(status)

    def done(self) -> bool:
        if self.status is None:
            return False
        # Asked to end: the whole group, unless it was killed already.
        return self.forwarded is None or self.killed or not self._group_left()

    def sleep_time(self) -> float:
        return max(0.0, min(_TICK, self.deadline - time.monotonic()))

    def check_deadline(self) -> None:
        if not self.killed and time.monotonic() >= self.deadline:
            self._killpg(signal.SIGKILL)
            if self.status is None:  # also when it left the group (setsid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGKILL)
            self.killed = True


def run(command: list[str], env: dict[str, str], kill_after: float = KILL_AFTER) -> Outcome:
    """Runs ``command`` as described in this module's docstring and returns how it
    ended; OSError when it cannot be started.  Call from the main thread."""
    caught = [s for s in FORWARDED if signal.getsignal(s) != signal.SIG_IGN]
    tty = _controlling_terminal()
    if tty is not None:
        caught.append(signal.SIGTSTP)
    prctl = None
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            prctl = ctypes.CDLL(None, use_errno=True).prctl
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    if prctl is not None:  # the command's orphans become ours: reaped, and seen to end
        prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
              ctypes.c_ulong(0))
    previous_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    previous = {s: signal.signal(s, lambda *_: None) for s in (*caught, signal.SIGCHLD)}
    sup = None
    try:
        parent = os.getpid()
        proc = subprocess.Popen(command, env=env,
                                preexec_fn=lambda: _die_with_parent(parent, prctl))
        sup = _Supervisor(proc, tty, kill_after)
        while True:
            sup.reap()
            if sup.done():
                break
            sup.check_deadline()
            ready, _, _ = select.select([wake_r], [], [], sup.sleep_time())
            if ready:
                with contextlib.suppress(BlockingIOError):
                    for sig in os.read(wake_r, 512):
                        sup.on_signal(sig)
        return Outcome(proc.returncode, sup.forwarded, sup.killed)
    finally:
        if sup is not None:
            if sup.status is None:  # leaving early: the command does not outlive us
                sup._killpg(signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(sup.proc.pid, 0)
            sup.take_terminal_back()
        signal.set_wakeup_fd(previous_wakeup)
        for s, handler in previous.items():
            signal.signal(s, handler)
        for fd in (wake_r, wake_w, *([tty] if tty is not None else [])):
            os.close(fd)
        if prctl is not None:
            prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0))
