"""Making the OpenMP runtime load the tool, and finding out whether it did.

LLVM libomp looks for a tool once, when it initialises (at the first OpenMP
construct or omp_* call, not when it is loaded).  Importing ompt_py loads
libomptpy.so and puts its path first in OMP_TOOL_LIBRARIES, so a runtime
that initialises later in this process loads the tool.  A runtime that
initialised earlier can never be attached to (see ../shared/FACTS.md).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import warnings
from dataclasses import dataclass

from .. import _core
from ..errors import AttachError, ConfigError
from . import runhook, runtime
from .runtime import mapped_runtimes


def _user_stacklevel() -> int:
    """The stacklevel that points a warning at the user's `import ompt_py`, past this
    package's modules and importlib's frames."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    level, frame = 1, sys._getframe(1).f_back
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:
            pass  # the warnings module does not count these frames either
        elif name.startswith(package):
            level += 1
        else:
            break
        frame = frame.f_back
    return level + 1


def _config_message(error: str) -> str:
    return (
        f"{error}. Fix or unset the variable, then start the process again (the tool reads "
        "its configuration once per process)."
    )


# Before anything can start libomp in this process (the runtime fallback below, the
# program's first OpenMP call), and in every fork's child, which registers under its own
# pid: an empty registration file left by a killed process of the same pid would crash
# it (runtime.remove_stale_registration; the preload hook does the same in C).
runtime.remove_stale_registration()
os.register_at_fork(after_in_child=runtime.remove_stale_registration)

# The tool reads OMPTPY_* now; with an invalid value it stays off in this process.
CONFIG_ERROR = _core.init()
if CONFIG_ERROR is not None:
    warnings.warn(f"ompt_py is off: {_config_message(CONFIG_ERROR)}",
                  stacklevel=_user_stacklevel())


def check_config() -> None:
    """Raise ConfigError when the OMPTPY_* variables read at import were invalid."""
    if CONFIG_ERROR is not None:
        raise ConfigError(_config_message(CONFIG_ERROR))


def check_environment() -> None:
    """Raise ConfigError when the OMPTPY_* variables of os.environ, as they are now, are invalid."""
    error = _core.check_config()
    if error is not None:
        raise ConfigError(_config_message(error))

TOOL_PATH: str = _core.tool_path()
#: The preload hook (csrc/hook) beside the tool: `ompt-py run` puts it on LD_PRELOAD so
#: that _exit, abort and exec flush the trace and record how each process ended.
HOOK_PATH: str = os.path.join(os.path.dirname(TOOL_PATH), "libomptpy_hook.so")


def _put_tool_first() -> None:
    parts = [p for p in os.environ.get("OMP_TOOL_LIBRARIES", "").split(":") if p]
    if TOOL_PATH not in parts:
        os.environ["OMP_TOOL_LIBRARIES"] = ":".join([TOOL_PATH, *parts])


_put_tool_first()

# The runtime fallback (OMPTPY_RUNTIME): LLVM libomp into the global scope
# before libgomp-linked modules are imported.
try:
    FALLBACK = runtime.apply()
except ConfigError as e:
    FALLBACK = runtime.Fallback("invalid", error=str(e))
    warnings.warn(f"ompt_py: {e}", stacklevel=_user_stacklevel())
#: What to do about OpenMP code that started, or was bound to its runtime, before
#: ompt_py was imported: the same advice whatever compiler built it.
IMPORT_FIRST = ("Import ompt_py before any module that uses OpenMP (first line of the "
                "program), or run the program under `ompt-py run` (which attaches the tool "
                "from the start).")


def early_modules_message(modules: list[str]) -> str:
    """Why modules that link GNU libgomp and were loaded before ompt_py are not
    traced, and what to do (the AttachError of trace(), status(), doctor)."""
    return ("module(s) imported before ompt_py link GNU libgomp, so their "
            "OpenMP code runs on libgomp, which has no tool interface, and cannot be traced "
            f"in this process: {', '.join(modules)}. {IMPORT_FIRST}")


if FALLBACK.early_gnu_modules:
    warnings.warn(early_modules_message([os.path.basename(m)
                                         for m in FALLBACK.early_gnu_modules]),
                  stacklevel=_user_stacklevel())


def meta() -> dict:
    """The tool's description of this process (runtimes, callbacks, configuration)."""
    return json.loads(_core.meta())


def attached_runtimes() -> list[dict]:
    return [rt for rt in meta()["runtimes"] if rt["initialized"]]


def fallback_runtime() -> RuntimeInfo | None:
    """The runtime the fallback put into this process, started now if it had not
    (so that it answers the tool's inquiries: its version...), as runtime_info
    gives it; None without one, or when the tool is not attached to it."""
    if FALLBACK.libomp is None:
        return None
    _probe(FALLBACK.libomp)
    real = os.path.realpath(FALLBACK.libomp)
    return next((r for r in runtime_info() if os.path.realpath(r.path) == real), None)


def _probe(path: str) -> None:
    """Initialise a mapped but possibly idle LLVM runtime so that it looks for the tool now.

    A runtime that has not initialised yet does so in this call and loads the
    tool from OMP_TOOL_LIBRARIES; one that has is unaffected.
    """
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        lib.omp_get_max_threads()
    except (OSError, AttributeError):
        pass


def ensure_attachable() -> None:
    """Raise AttachError when events of this process's OpenMP runtime cannot be recorded.

    Passes when the tool is attached, or when no OpenMP runtime has been loaded
    yet (the tool then attaches when one initialises).  Code that was tied to a
    runtime before ompt_py was imported is refused alike whatever built it: a
    clang-built module whose libomp initialised already, a gcc-built one bound
    to libgomp (its GOMP_* calls, resolved when it was loaded, never reach the
    libomp of the runtime fallback).
    """
    check_config()
    if FALLBACK.policy == "invalid":
        raise ConfigError(FALLBACK.error)
    m = meta()
    if not m["config"]["enabled"]:
        raise AttachError(
            "the ompt-py tool is switched off (OMPTPY_TOOL=off). Unset OMPTPY_TOOL or set "
            "it to 'on' before Python starts."
        )
    if m["config"]["sink"] == "file":
        raise AttachError(
            "this process is being recorded to files by `ompt-py run` (OMPTPY_OUTPUT="
            f"{m['config']['output']!r}); ompt_py.trace() is not available inside it. "
            "Run the program without `ompt-py run` to trace it in-process."
        )
    if FALLBACK.early_gnu_modules:
        raise AttachError(early_modules_message(FALLBACK.early_gnu_modules))
    runtimes = mapped_runtimes()
    llvm = [r for r in runtimes if r.family == "llvm"]
    if len(llvm) > 1 and not duplicates_allowed():
        raise AttachError(duplicate_runtimes_message(llvm))
    if attached_runtimes():
        return
    for r in llvm:
        _probe(r.path)
    if attached_runtimes():
        return
    if os.environ.get("OMP_TOOL", "").lower() == "disabled":
        raise AttachError(
            "OMP_TOOL=disabled tells the OpenMP runtime not to load any tool. Unset "
            "OMP_TOOL before the runtime initialises."
        )
    if llvm:
        names = ", ".join(r.path for r in llvm)
        raise AttachError(
            f"the OpenMP runtime ({names}) was initialised before ompt_py was imported, "
            f"and a runtime looks for tools only once, when it starts. {IMPORT_FIRST}"
        )
    gnu = [r for r in runtimes if r.family == "gnu"]
    if gnu:
        names = ", ".join(r.path for r in gnu)
        why = (f"the runtime fallback is off (OMPTPY_RUNTIME={FALLBACK.policy})"
               if FALLBACK.policy == "off" else
               f"no LLVM libomp could be loaded ({FALLBACK.error})")
        raise AttachError(
            f"this process uses GNU libgomp ({names}), which has no OMPT tool interface, and "
            f"{why}. Unset OMPTPY_RUNTIME (or set it to auto) before importing ompt_py, "
            "install LLVM libomp (Debian: libomp5-19), or build the OpenMP code with clang "
            "-fopenmp."
        )


@dataclass(frozen=True)
class DeviceInfo:
    """A device the runtime initialised (device_initialize) and what it offers for
    device tracing."""

    device: int  # the device number
    type: str  # device_initialize's type string
    entry_points: dict[str, bool]  # the 12 device tracing entry points: offered or not
    tracing: dict[str, str]  # record type -> ompt_set_trace_ompt's answer ("always"...)
    started: bool  # ompt_start_trace succeeded
    start_error: str | None  # why tracing did not start


@dataclass(frozen=True)
class RuntimeInfo:
    """What an attached OpenMP runtime's inquiry functions answer."""

    path: str
    version: str
    states: dict[int, str]  # ompt_enumerate_states: value -> name
    mutex_impls: dict[int, str]  # ompt_enumerate_mutex_impls
    num_procs: int
    num_devices: int
    places: list[list[int]]  # processor ids of each place (OMP_PLACES)
    devices: list[DeviceInfo]  # initialised so far (the runtime does so at its first offload)


def _device_info(d: dict) -> DeviceInfo:
    return DeviceInfo(device=d["device"], type=d["type"], entry_points=d["entry_points"],
                      tracing=d["tracing"], started=d["started"], start_error=d["start_error"])


def runtime_info() -> list[RuntimeInfo]:
    """One entry per OpenMP runtime the tool is attached to (none before one starts)."""
    return [
        RuntimeInfo(
            path=r["path"], version=r["version"],
            states={int(k): v for k, v in r["states"].items()},
            mutex_impls={int(k): v for k, v in r["mutex_impls"].items()},
            num_procs=r["num_procs"], num_devices=r["num_devices"], places=r["places"],
            devices=[_device_info(d) for d in r.get("devices", [])],
        )
        for r in json.loads(_core.runtime_info())
    ]


#: A device's counters that tell of something the runtime did wrong or the tool
#: could not keep (csrc/tool/device.c), as status() names them.
DEVICE_PROBLEMS = {
    "records_lost": "records lost (the runtime's, or buffer requests answered 0 bytes: "
                    "raise OMPTPY_DEVICE_MEMORY)",
    "records_after_stop": "records handed back after tracing stopped (counted, not kept)",
    "records_unknown_type": "records of a type ompt-py does not read (not kept)",
    "records_bad_time": "records that end before they begin (kept)",
    "zero_byte_buffers": "buffers handed back with 0 bytes",
}


def device_status(d: dict) -> dict:
    """A device's tracing, short (status()): on or off and why, the entry points
    the runtime did not offer, each record type's set_trace_ompt answer, its
    buffers and records so far, and the counters of problems that are not 0."""
    return {
        "device": d["device"],
        "type": d["type"],
        "tracing": "on" if d["started"] and not d.get("stopped") else
                   "stopped" if d["started"] else "off",
        "why_off": d["start_error"],
        "missing_entry_points": [n for n, offered in d["entry_points"].items() if not offered],
        "set_trace_ompt": d["tracing"],
        "buffers": d["buffers_completed"],
        "records": d["records"],
        "problems": {DEVICE_PROBLEMS[k]: d[k] for k in DEVICE_PROBLEMS if d.get(k)},
    }


def duplicates_allowed() -> bool:
    """KMP_DUPLICATE_LIB_OK lets several copies of libomp run in one process."""
    return os.environ.get("KMP_DUPLICATE_LIB_OK", "").upper() in ("TRUE", "1")


def problems() -> list[str]:
    """What stops this process from being traced, each with what to do, as far as
    it is known without starting a runtime (the configuration, the runtime
    fallback, modules imported too early, several copies of libomp)."""
    found = []
    if CONFIG_ERROR:
        found.append(f"configuration: {_config_message(CONFIG_ERROR)}")
    if FALLBACK.error:
        found.append(f"runtime fallback: {FALLBACK.error}")
    if FALLBACK.early_gnu_modules:
        found.append(early_modules_message(FALLBACK.early_gnu_modules))
    llvm = [r for r in mapped_runtimes() if r.family == "llvm"]
    if len(llvm) > 1 and not duplicates_allowed():
        found.append(duplicate_runtimes_message(llvm))
    return found


def duplicate_runtimes_message(llvm: list) -> str:
    names = ", ".join(r.path for r in llvm)
    return (
        f"this process has {len(llvm)} copies of the LLVM/Intel OpenMP runtime ({names}); the "
        "second one to start aborts the program ('OMP: Error #15 ... already initialized'). "
        "Load only one copy, or let each run on its own: set OMPTPY_RUNTIME=off (so that "
        "ompt-py puts no libomp into the global scope, where it would take over the other "
        "copy's calls) and KMP_DUPLICATE_LIB_OK=TRUE before the program starts; ompt-py then "
        "traces every copy."
    )


def python_stacks_status() -> dict:
    """Whether this interpreter's Python stacks can be captured, and the depth a
    trace started now would capture (OMPTPY_PYTHON_STACKS): status "on", "off"
    or "unsupported" with the reason."""
    why_not = _core.PYTHON_STACKS_UNSUPPORTED
    try:
        depth = runhook.python_stacks_depth(None, _core.PYTHON_STACKS_MAX_DEPTH)
    except ValueError as e:
        return {"status": "off", "depth": 0, "reason": str(e)}
    status = runhook.capture_status(depth, why_not)
    return {"status": status, "depth": depth if status == "on" else 0,
            "reason": why_not if status == "unsupported" else None}


def status() -> dict:
    """Whether the tool is attached, to which runtimes, with which callbacks and
    levels, whether Python stacks are captured (python_stacks_status), each
    device's tracing (device_status), and the problems that stop this process
    from being traced (``problems``)."""
    m = meta()
    return {
        "attached": any(rt["initialized"] for rt in m["runtimes"]),
        "tool_path": TOOL_PATH,
        "recording": _core.is_recording(),
        "runtimes": [
            {
                "path": os.path.realpath(rt["path"]) if rt["path"] else "",
                "version": rt["version"],
                "omp_version": rt["omp_version"],
                "initialized": rt["initialized"],
                "finalized": rt["finalized"],
                "callbacks": rt["callbacks"],
            }
            for rt in m["runtimes"]
        ],
        "mapped_runtimes": [{"path": r.path, "family": r.family} for r in mapped_runtimes()],
        "modules": runtime.module_links(),
        "fallback": {
            "policy": FALLBACK.policy,
            "libomp": FALLBACK.libomp,
            "how": FALLBACK.how,
            "early_gnu_modules": FALLBACK.early_gnu_modules,
            "error": FALLBACK.error,
        },
        "problems": problems(),
        "python_stacks": python_stacks_status(),
        "devices": [device_status(d) for d in m.get("devices", [])],
        "config": m["config"],
        "config_error": CONFIG_ERROR,
        "clock": m["clock"],
        "pid": m["pid"],
    }
