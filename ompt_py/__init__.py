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

from importlib import metadata
from typing import TYPE_CHECKING

from .dataset import Dataset, open_dataset
from .errors import (
    AttachError,
    ConfigError,
    HandlerWarning,
    MissingEventsError,
    NativeHandlerError,
    OmptPyError,
    TraceFileError,
    TraceWarning,
)
from .live import mpi
from .live.attach import TOOL_PATH, DeviceInfo, RuntimeInfo, runtime_info, status
from .live.control import control
from .live.doctor import doctor
from .live.handlers import Handler, active_handlers, off, on
from .live.handlers import drain as drain_handlers
from .live.handlers import stats as handler_stats
from .live.markers import region, region_names
from .live.native import NativeHandler, include_dir, native_handler, ns_per_tick
from .live.runtime import mapped_runtimes
from .profile import Profile
from .trace import Trace, convert, load, trace

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

try:
    __version__ = metadata.version("ompt-py")  # pyproject.toml's, as pip installed it
except metadata.PackageNotFoundError:  # built in place (setup.py build_ext), not installed
    __version__ = "unknown"

__all__ = [
    "AttachError",
    "ConfigError",
    "Dataset",
    "DeviceInfo",
    "Handler",
    "HandlerWarning",
    "MissingEventsError",
    "NativeHandler",
    "NativeHandlerError",
    "OmptPyError",
    "Profile",
    "RuntimeInfo",
    "Trace",
    "TraceFileError",
    "TraceWarning",
    "__version__",
    "active_handlers",
    "control",
    "convert",
    "doctor",
    "drain_handlers",
    "handler_stats",
    "include_dir",
    "load",
    "mapped_runtimes",
    "mpi",
    "native_handler",
    "ns_per_tick",
    "off",
    "on",
    "open_dataset",
    "region",
    "region_names",
    "runtime_info",
    "status",
    "tool_path",
    "trace",
]


def tool_path() -> str:
    """Absolute path of the C tool (libomptpy.so), for OMP_TOOL_LIBRARIES."""
    return TOOL_PATH


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext ompt_py``: the ``%%ompt`` cell magic (ompt_py.magic; needs IPython)."""
    from .presentation.magic import load_ipython_extension as load

    load(ipython)
