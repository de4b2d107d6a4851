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
import re
import warnings
from dataclasses import dataclass

from . import _core
from ._records import check_layout
from .errors import AttachError, ConfigError

check_layout(_core.record_layout())

def _config_message(error: str) -> str:
    return (
        f"{error}. Fix or unset the variable, then start the process again (the tool reads "
        "its configuration once per process)."
    )


# The tool reads OMPTPY_* now; with an invalid value it stays off in this process.
_config_error = _core.init()
if _config_error is not None:
    warnings.warn(f"ompt_py is off: {_config_message(_config_error)}", stacklevel=3)


def check_config() -> None:
    """Raise ConfigError when the OMPTPY_* variables read at import were invalid."""
    if _config_error is not None:
        raise ConfigError(_config_message(_config_error))


def check_environment() -> None:
    """Raise ConfigError when the OMPTPY_* variables of os.environ, as they are now, are invalid."""
    error = _core.check_config()
    if error is not None:
        raise ConfigError(_config_message(error))

TOOL_PATH: str = _core.tool_path()


def _put_tool_first() -> None:
    parts = [p for p in os.environ.get("OMP_TOOL_LIBRARIES", "").split(":") if p]
    if TOOL_PATH not in parts:
        os.environ["OMP_TOOL_LIBRARIES"] = ":".join([TOOL_PATH, *parts])


_put_tool_first()

# Shared objects that are OpenMP runtimes, by file name.
_LLVM_RUNTIME = re.compile(r"^lib(omp|iomp5)(-[\w.]+)?\.so(\.\d+)*$")
_GNU_RUNTIME = re.compile(r"^libgomp(-[0-9a-f]+)?\.so(\.\d+)*$")


@dataclass(frozen=True)
class MappedRuntime:
    """An OpenMP runtime library mapped into this process."""

    path: str
    family: str  # "llvm" (libomp/libiomp5, has OMPT) or "gnu" (libgomp, no OMPT)


def mapped_runtimes() -> list[MappedRuntime]:
    """The OpenMP runtimes mapped into this process, from /proc/self/maps."""
    seen: dict[str, MappedRuntime] = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                path = parts[5].strip()
                name = os.path.basename(path)
                if path in seen:
                    continue
                if _LLVM_RUNTIME.match(name):
                    seen[path] = MappedRuntime(path, "llvm")
                elif _GNU_RUNTIME.match(name):
                    seen[path] = MappedRuntime(path, "gnu")
    except OSError:
        return []
    return list(seen.values())


def meta() -> dict:
    """The tool's description of this process (runtimes, callbacks, configuration)."""
    return json.loads(_core.meta())


def attached_runtimes() -> list[dict]:
    return [rt for rt in meta()["runtimes"] if rt["initialized"]]


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
    yet (the tool then attaches when one initialises).
    """
    check_config()
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
    if attached_runtimes():
        return
    runtimes = mapped_runtimes()
    llvm = [r for r in runtimes if r.family == "llvm"]
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
            "and a runtime looks for tools only once, when it starts. Import ompt_py "
            "before any module that uses OpenMP (first line of the program), or run the "
            "program under `ompt-py run` (which attaches the tool from the start)."
        )
    gnu = [r for r in runtimes if r.family == "gnu"]
    if gnu:
        names = ", ".join(r.path for r in gnu)
        raise AttachError(
            f"this process uses GNU libgomp ({names}), which has no OMPT tool interface, so "
            "its parallel regions cannot be recorded. Build the OpenMP code with clang "
            "-fopenmp (LLVM libomp), or run it on LLVM libomp by loading libomp first "
            "(e.g. LD_PRELOAD=libomp.so.5)."
        )


def status() -> dict:
    """Whether the tool is attached, to which runtimes, with which callbacks and levels."""
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
        "config": m["config"],
        "config_error": _config_error,
        "clock": m["clock"],
        "pid": m["pid"],
    }
