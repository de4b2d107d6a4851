"""The start-up hook that ``ompt-py run`` gives every Python process of its command.

``ompt-py run`` copies this file as ``sitecustomize.py`` into a temporary
directory put first on PYTHONPATH, so every Python process the command starts
(multiprocessing workers included) runs it at start-up; imported as
``ompt_py.live.runhook`` it does nothing.  Standard library only: the command may
run any Python 3.

The tool (libomptpy.so, loaded by libomp) writes what it still holds, and the
final counters, when the process exits through ``exit()``.  Two common ends of
Python processes skip that, and would leave no trace of short-lived workers:

* ``os._exit``, with which multiprocessing's forked children end;
* SIGTERM, which ``Pool.terminate()`` (the end of a ``with Pool()`` block) and
  ``Process.terminate()`` send to the workers.

So ``os._exit`` is wrapped, and children (those Python forks, as
multiprocessing's fork and forkserver methods do, and those started with
``--multiprocessing-fork``, as its spawn method does) that have no SIGTERM
handler of their own get a thread that takes SIGTERM, and an exit handler:
all let the tool finish its file (``omptpy_finish``) first, also while the
main thread is blocked or inside a long OpenMP computation.  The hook then
runs the ``sitecustomize`` module it shadows, if there is one.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import threading

TOOL_NAME = "libomptpy.so"


def finish() -> None:
    """Has the tool write everything and its final counters, if this process loaded it."""
    for path in os.environ.get("OMP_TOOL_LIBRARIES", "").split(":"):
        if os.path.basename(path) != TOOL_NAME:
            continue
        try:  # RTLD_NOLOAD: only a tool that libomp already loaded here
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        lib.omptpy_finish()
        return


def _exit(status: int) -> None:
    finish()
    _real_exit(status)


def _finish_on_sigterm() -> None:
    """Waits for SIGTERM (blocked in every other thread), finishes the file, and
    ends the process as SIGTERM would have."""
    signal.sigwait({signal.SIGTERM})
    finish()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.kill(os.getpid(), signal.SIGTERM)  # the default action, delivered to this thread


def _in_worker() -> None:
    """A multiprocessing child: SIGTERM (if it has no handler) and a normal exit
    finish the file first.  SIGTERM is taken by a thread of ours: a Python
    handler runs only in the main thread, which may be blocked in a lock
    (an idle pool worker) while the kernel hands the signal to one of the
    runtime's threads; that process would never end.  So SIGTERM is blocked
    here, before the runtime starts its threads (they inherit the mask)."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=_finish_on_sigterm, name="ompt-py SIGTERM", daemon=True).start()
    atexit.register(finish)


def _run_shadowed_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_real_exit = os._exit

if __name__ == "sitecustomize":
    if os.environ.get("OMPTPY_OUTPUT"):
        os._exit = _exit
        os.register_at_fork(after_in_child=_in_worker)
        if "--multiprocessing-fork" in getattr(sys, "orig_argv", sys.argv):
            _in_worker()
    _run_shadowed_sitecustomize()
