"""MPI: ``ompt-py run --mpi`` (the interposition library, csrc/mpi) and
``ompt_py.mpi`` for mpi4py programs (docs/mpi.md).

Under ``ompt-py run --mpi`` every rank's MPI calls are recorded in C (mpi4py's
too: it calls the MPI library the preload interposes) and the clocks are
measured at MPI_Init and MPI_Finalize: nothing to do here.  Without the
preload (``mpirun -n 4 ompt-py run -o run1/ script.py``), a mpi4py program
calls ``ompt_py.mpi.start()`` once MPI is initialised (``from mpi4py import
MPI`` initialises it): the clock is measured against rank 0 then and again at
exit (before mpi4py finalises MPI), by the same C code as under the preload
(``libomptpy_mpi.so``, loaded with ctypes: it must be built against the MPI
mpi4py runs on), and ``ompt_py.mpi.traced(comm)`` gives a communicator whose
barriers, collectives and point-to-point calls are recorded as ``mpi`` events.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
from typing import Any

from .. import _core
from ..errors import ConfigError
from .attach import TOOL_PATH

#: ompt-py's MPI interposition library, beside the tool (built where mpicc was found).
LIBRARY: str = os.path.join(os.path.dirname(TOOL_PATH), "libomptpy_mpi.so")

#: mpi4py's methods that ``traced`` records: name -> (call, the argument that names
#: the peer or root (its position, name and default: -1 for MPI.ANY_SOURCE),
#: whether its first argument is a buffer).
_METHODS: dict[str, tuple[int, tuple[int, str, int] | None, bool]] = {}
for _names, _call, _peer in (
        (("Barrier", "barrier"), _core.MPI_BARRIER, None),
        (("Bcast", "bcast"), _core.MPI_BCAST, (1, "root", 0)),
        (("Reduce", "reduce"), _core.MPI_REDUCE, None),
        (("Allreduce", "allreduce"), _core.MPI_ALLREDUCE, None),
        (("Gather", "gather"), _core.MPI_GATHER, None),
        (("Allgather", "allgather"), _core.MPI_ALLGATHER, None),
        (("Scatter", "scatter"), _core.MPI_SCATTER, None),
        (("Alltoall", "alltoall"), _core.MPI_ALLTOALL, None),
        (("Send", "send"), _core.MPI_SEND, (1, "dest", -1)),
        (("Recv", "recv"), _core.MPI_RECV, (1, "source", -1)),
        (("Isend", "isend"), _core.MPI_ISEND, (1, "dest", -1)),
        (("Irecv", "irecv"), _core.MPI_IRECV, (1, "source", -1)),
        (("Sendrecv", "sendrecv"), _core.MPI_SENDRECV, (1, "dest", -1))):
    for _name in _names:
        _METHODS[_name] = (_call, _peer, _name[0].isupper())
_ROOTED = {"Reduce": 3, "reduce": 2, "Gather": 2, "gather": 1, "Scatter": 2, "scatter": 1}
_UNKNOWN = 2**64 - 1  # records.MPI_BYTES_UNKNOWN


def library() -> str:
    """The path of libomptpy_mpi.so; ConfigError when this ompt-py has none."""
    if not os.path.exists(LIBRARY):
        raise ConfigError("this ompt-py was built without its MPI library (no MPI C compiler, "
                          "mpicc, when it was installed): install an MPI (Debian: "
                          "libopenmpi-dev) and reinstall ompt-py")
    return LIBRARY


def interposed() -> bool:
    """Whether the interposition library is preloaded here (``ompt-py run --mpi``)."""
    return LIBRARY in os.environ.get("LD_PRELOAD", "").split(":")


@functools.cache
def _measurer() -> ctypes.CDLL:
    """libomptpy_mpi.so loaded for its clock measurement, after checking that it
    calls the MPI library mpi4py runs on."""
    from mpi4py import MPI

    lib = ctypes.CDLL(library())
    text, size = ctypes.create_string_buffer(MPI.MAX_LIBRARY_VERSION_STRING), ctypes.c_int()
    lib.omptpy_mpi_library_version(text, ctypes.byref(size))
    ours, theirs = text.value.decode(errors="replace"), MPI.Get_library_version()
    if ours.rstrip("\0 \n") != theirs.rstrip("\0 \n"):
        raise ConfigError(f"ompt-py's MPI library was built for {ours.splitlines()[0]!r} but "
                          f"mpi4py runs on {theirs.splitlines()[0]!r}: install ompt-py where "
                          "mpicc is that MPI's, or run with ompt-py run --mpi")
    lib.omptpy_mpi_sync.argtypes = [ctypes.c_int]
    return lib


def start() -> None:
    """Measures this rank's clock against rank 0's now and at exit (every rank of
    MPI_COMM_WORLD must call it: the measurement is collective), so that the trace
    puts the ranks on one time axis.  Call it once MPI is initialised (``from mpi4py
    import MPI`` does it), before mpi4py finalises it.  Under ``ompt-py run
    --mpi`` the interposition library measured already: nothing is done."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ConfigError("ompt_py.mpi needs mpi4py (pip install mpi4py)") from e
    if not MPI.Is_initialized() or MPI.Is_finalized():
        raise ConfigError("ompt_py.mpi.start(): MPI is not running; call it after `from "
                          "mpi4py import MPI` (which initialises MPI) and before MPI.Finalize()")
    if interposed() or _core.mpi_measured(0):
        return
    lib = _measurer()
    lib.omptpy_mpi_sync(0)
    # Python's atexit runs before mpi4py finalises MPI (at interpreter shutdown).
    atexit.register(lambda: MPI.Is_finalized() or lib.omptpy_mpi_sync(1))


def _bytes(args: tuple, buffer: bool) -> int:
    """The bytes of a buffer method's first argument (a buffer, or [buffer, ...])."""
    if not buffer or not args:
        return _UNKNOWN
    buf = args[0][0] if isinstance(args[0], (list, tuple)) else args[0]
    try:
        return memoryview(buf).nbytes
    except TypeError:
        return _UNKNOWN


class traced:  # lower case: used like a function
    """``comm`` with its barriers, collectives and point-to-point calls recorded as
    ``mpi`` events (``Trace.mpi_calls()``): ``comm = ompt_py.mpi.traced(MPI.COMM_WORLD)``.
    Other attributes are ``comm``'s own.  Under ``ompt-py run --mpi`` the
    interposition library records these calls already: then this records nothing
    more (``traced(comm)`` calls ``comm``'s methods as they are)."""

    def __init__(self, comm: Any) -> None:
        self._comm = comm
        self._size = comm.Get_size()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._comm, name)
        if name not in _METHODS or interposed():
            return method
        call, peer_arg, buffer = _METHODS[name]
        root_at = _ROOTED.get(name)
        if root_at is not None:
            peer_arg = (root_at, "root", 0)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            begin = _core.clock_ticks()
            result = method(*args, **kwargs)
            peer = -1
            if peer_arg is not None:
                at, key, default = peer_arg
                peer = kwargs.get(key, args[at] if len(args) > at else default)
            _core.mpi_call(call, begin, _bytes(args, buffer), int(peer), self._size)
            return result

        return recorded

    def __repr__(self) -> str:
        return f"ompt_py.mpi.traced({self._comm!r})"
