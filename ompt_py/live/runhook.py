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

Python call stacks (OMPTPY_PYTHON_STACKS, on by default): the hook loads
ompt-py's extension module built for this Python, from beside the tool, on
its own (importing the package would slow every process down and change what
it imports) and installs its capture hook; without such a build the trace
says why.  The settings and the description of the interpreter that the
trace keeps are made here for ``ompt_py.trace()`` too.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import platform
import signal
import site
import sys
import sysconfig
import threading

TOOL_NAME = "libomptpy.so"
PYTHON_STACKS_VARIABLE = "OMPTPY_PYTHON_STACKS"
NATIVE_DEPTH_VARIABLE = "OMPTPY_NATIVE_DEPTH"
#: Frames kept per Python stack when capture is simply on.
PYTHON_STACKS_DEPTH = 32


def _tool_paths() -> list:
    return [p for p in os.environ.get("OMP_TOOL_LIBRARIES", "").split(":")
            if os.path.basename(p) == TOOL_NAME]


def finish() -> None:
    """Has the tool write everything and its final counters, if this process loaded it."""
    for path in _tool_paths():
        try:  # RTLD_NOLOAD: only a tool that libomp already loaded here
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        lib.omptpy_finish()
        return


def _count(value: object) -> int | None:
    """The whole number a setting spells: an int (not a bool), or a string of digits."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value if type(value) is int else None


def python_stacks_depth(value: object, max_depth: int) -> int:
    """The depth of the Python stacks a setting asks for, 0 for none: True or
    "on" (PYTHON_STACKS_DEPTH frames), False or "off", or a depth from 1 to
    ``max_depth``; None: the environment's OMPTPY_PYTHON_STACKS, else on.
    ValueError, listing what is allowed, for anything else."""
    where, allowed = "python_stacks", "True, False or a depth"
    if value is None:
        where, allowed = PYTHON_STACKS_VARIABLE, "on, off or a depth"
        value = os.environ.get(PYTHON_STACKS_VARIABLE) or "on"
    if isinstance(value, bool):
        return PYTHON_STACKS_DEPTH if value else 0
    word = value.strip().lower() if isinstance(value, str) else None
    if word in ("on", "off"):
        return PYTHON_STACKS_DEPTH if word == "on" else 0
    depth = _count(value)
    if depth is not None and 1 <= depth <= max_depth:
        return depth
    raise ValueError(f"{where} must be {allowed} from 1 to {max_depth} (the frames kept "
                     f"per stack); got {value!r}")


def native_depth(value: object, max_depth: int) -> int:
    """The native frames to keep above each construct's code with its Python stack:
    0 (none) to ``max_depth``; None: the environment's OMPTPY_NATIVE_DEPTH, else 0.
    ValueError, saying what is allowed, for anything else."""
    where = "native_depth"
    if value is None:
        where, value = NATIVE_DEPTH_VARIABLE, os.environ.get(NATIVE_DEPTH_VARIABLE) or "0"
    depth = _count(value)
    if depth is not None and 0 <= depth <= max_depth:
        return depth
    raise ValueError(f"{where} must be a number of frames from 0 (none) to {max_depth}; "
                     f"got {value!r}")


def capture_status(depth: int, why_not: object) -> str:
    """The capture's status: "on", "off" (depth 0) or "unsupported" (``why_not``: why
    this build cannot)."""
    return "off" if not depth else "unsupported" if why_not else "on"


def python_description(depth: int, why_not: object, native: int = 0,
                       extra_paths: tuple = ()) -> dict:
    """What a trace keeps about this interpreter with its Python stacks: the
    capture's status ("on", "off", or "unsupported" and why), depth, native
    depth, version, working directory and library folders (frames of files
    under them are not the user's code; ``extra_paths``: more of them, such as
    ompt-py's own)."""
    paths = sysconfig.get_paths()
    libs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    libs.update(getattr(site, "getsitepackages", list)())
    if site.ENABLE_USER_SITE:
        libs.add(site.getusersitepackages())
    libs.update(extra_paths)
    return {"status": capture_status(depth, why_not), "reason": why_not if depth else None,
            "depth": depth, "native_depth": native if depth and not why_not else 0,
            "python": platform.python_version(), "implementation": sys.implementation.name,
            "cwd": os.getcwd(), "library_paths": sorted(os.path.realpath(p) for p in libs)}


def start_python_stacks(core: object, depth: int, native: int = 0,
                        extra_paths: tuple = ()) -> dict:
    """Switches the capture of Python stacks to ``depth`` (0: off), with ``native``
    native frames, through the extension module ``core``; the description the
    trace keeps (the status says when this build cannot capture, and why)."""
    why_not = core.PYTHON_STACKS_UNSUPPORTED  # type: ignore[attr-defined]
    description = python_description(depth, why_not, native, extra_paths)
    core.python_stacks(0 if why_not else depth, json.dumps(description),  # type: ignore[attr-defined]
                       description["native_depth"])
    if not _stopping:
        # Capture ends before the interpreter shuts down: a daemon thread may still
        # start regions then, and its thread state must not be read any more.
        _stopping.append(core)
        atexit.register(core.python_stacks, 0, None, 0)  # type: ignore[attr-defined]
    return description


_stopping: list = []  # the module whose capture ends at exit, once registered


def _start_python_stacks() -> None:
    """Python stacks in a process of ``ompt-py run`` (see the module's docstring)."""
    tools = _tool_paths()
    if not tools:
        return
    here = os.path.dirname(os.path.abspath(tools[0]))
    path = os.path.join(here, "_core" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    if not os.path.exists(path):
        if python_stacks_depth(None, 1 << 30):
            why = f"ompt-py has no build for Python {platform.python_version()} ({path} is missing)"
            lib = ctypes.CDLL(tools[0])
            lib.omptpy_stacks_describe(json.dumps(
                python_description(PYTHON_STACKS_DEPTH, why, 0, (here,))).encode())
        return
    import importlib.util

    spec = importlib.util.spec_from_file_location("ompt_py._core", path)
    core = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(core)
    start_python_stacks(core, python_stacks_depth(None, core.PYTHON_STACKS_MAX_DEPTH),
                        native_depth(None, core.NATIVE_STACKS_MAX_DEPTH), (here,))


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
        _start_python_stacks()
        os._exit = _exit
        os.register_at_fork(after_in_child=_in_worker)
        if "--multiprocessing-fork" in getattr(sys, "orig_argv", sys.argv):
            _in_worker()
    _run_shadowed_sitecustomize()
