"""ompt-py: see what the OpenMP runtime does, from Python.

Import this module before anything initialises the OpenMP runtime (first
line of the program): the runtime looks for tools only once, when it starts.

    import ompt_py
    import my_ext                      # built with clang -fopenmp (LLVM libomp)
    with ompt_py.trace() as t:
        my_ext.work()
    df = t.to_pandas()
"""

from __future__ import annotations

from . import doctor
from ._attach import TOOL_PATH, RuntimeInfo, runtime_info, status
from ._runtime import mapped_runtimes
from .errors import AttachError, ConfigError, OmptPyError, TraceFileError
from .trace import Trace, load, trace

__version__ = "0.1.0"

__all__ = [
    "AttachError",
    "ConfigError",
    "OmptPyError",
    "RuntimeInfo",
    "Trace",
    "TraceFileError",
    "__version__",
    "doctor",
    "load",
    "mapped_runtimes",
    "runtime_info",
    "status",
    "tool_path",
    "trace",
]


def tool_path() -> str:
    """Absolute path of the C tool (libomptpy.so), for OMP_TOOL_LIBRARIES."""
    return TOOL_PATH
