"""Native handlers: C functions the tool calls on the OpenMP thread itself.

``ompt_py.native_handler(events, source, state=...)`` compiles ``source``
with cffi against the package's record header (``include_dir()/omptpy.h``)
into a small extension module (cached by content), and installs its
function ``handle(const omptpy_record *r, STATE *state)``: the tool calls it
right after it wrote each record of ``events``, on the thread of the event,
without the GIL and without Python anywhere on that path.  The state is C
memory the tool allocates (zeroed, never freed) that Python reads through
cffi while the program runs (``handler.state.field``).  The handler runs on
every OpenMP thread at once: it must be thread-safe (per-thread slots
indexed by ``r->thread``, or ``__atomic`` builtins) and quick, and must not
block or call into the OpenMP runtime or Python.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from .. import _core
from ..errors import NativeHandlerError
from ..records import EVENTS, RAW_FIELDS, tick_scale
from . import attach
from .handlers import EventsArg, check_usable, event_codes, event_mask

_C_TYPES = {"<u8": "uint64_t", "<i8": "int64_t", "<u4": "uint32_t", "<u2": "uint16_t",
            "u1": "uint8_t"}
_TOKEN = re.compile(r"#[^\n]*|/\*.*?\*/|//[^\n]*|\{|\}|;|\w+", re.S)
_modules: dict[str, ModuleType] = {}


def include_dir() -> str:
    """The directory of ompt-py's public C headers: ``omptpy.h`` (the record, for native
    handlers) and ``omptpy_region.h`` (region markers for C/C++ extensions)."""
    return str(Path(__file__).resolve().parents[1] / "include")


def record_cdef() -> str:
    """The record struct as cffi declares it (from the layout the extension checked)."""
    fields = "".join(f"  {_C_TYPES[fmt]} {name};\n" for name, fmt in RAW_FIELDS)
    return f"typedef struct omptpy_record {{\n{fields}}} omptpy_record;\n"


def event_defines() -> str:
    """``#define OMPTPY_EVENT_<NAME> <number>`` for every event name."""
    return "".join(f"#ifndef OMPTPY_EVENT_{name.upper()}\n#define OMPTPY_EVENT_{name.upper()} "
                   f"{code}\n#endif\n" for code, name in sorted(EVENTS.items()))


def state_type(state: str) -> str:
    """The type of the state: the last struct that ``state`` declares (those before it
    can be its parts), ``struct name``, or a typedef's name."""
    found, depth, words, closed_typedef = None, 0, [], False
    for token in _TOKEN.findall(state):
        if token.startswith(("#", "/")):
            continue
        if token == "{":
            if depth == 0:
                if len(words) >= 2 and words[-2] in ("struct", "union"):
                    found = f"{words[-2]} {words[-1]}"
                closed_typedef = "typedef" in words
                if not closed_typedef:
                    words = []
            depth += 1
        elif token == "}":
            depth -= 1
        elif token == ";":
            if depth == 0 and closed_typedef and words:
                found = words[-1]
            if depth == 0:
                words, closed_typedef = [], False
        elif depth == 0:
            words.append(token)
    if depth == 0 and closed_typedef and words:  # the last declaration without its ";"
        found = words[-1]
    if found is None:
        raise ValueError(
            "state must declare a struct, e.g. 'struct hist { uint64_t count[64]; }' or "
            f"'typedef struct {{ ... }} hist_t', not {state!r}")
    return found


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for path in (base / "ompt_py" / "native",
                 Path(tempfile.gettempdir()) / f"ompt_py-native-{os.getuid()}"):
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(path, os.W_OK):
            return path
    raise NativeHandlerError("no writable directory to build native handlers in; pass build_dir")


def _compiler_errors(c_file: Path) -> str:
    """The compiler's own messages for the generated source (cffi does not keep them)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    cmd = [*cc, "-fsyntax-only", "-I", include_dir(), "-I", sysconfig.get_paths()["include"],
           str(c_file)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({' '.join(cmd)}: {e})"
    return (r.stdout + r.stderr).strip()


def _build(source: str, cdef: str, extra_compile_args: tuple[str, ...],
           build_dir: str | os.PathLike | None) -> ModuleType:
    """The cffi module for source + cdef, compiled once per content (cached on disk)."""
    import cffi

    header = (Path(include_dir()) / "omptpy.h").read_bytes()
    key = hashlib.sha256("\0".join([source, cdef, " ".join(extra_compile_args), cffi.__version__,
                                    sys.version]).encode() + header).hexdigest()[:20]
    name = f"_omptpy_native_{key}"
    if name in _modules:
        return _modules[name]
    where = Path(build_dir) if build_dir is not None else _cache_dir()
    where.mkdir(parents=True, exist_ok=True)
    built = where / (name + sysconfig.get_config_var("EXT_SUFFIX"))
    if not built.exists():
        ffi = cffi.FFI()
        try:
            ffi.cdef(cdef)
        except cffi.CDefError as e:
            raise NativeHandlerError(f"cffi cannot parse the state or function declaration: "
                                     f"{e}\n{cdef}") from None
        ffi.set_source(name, source, include_dirs=[include_dir()],
                       extra_compile_args=["-O2", *extra_compile_args])
        tmp = Path(tempfile.mkdtemp(prefix="build-", dir=where))
        try:
            try:
                out = ffi.compile(tmpdir=str(tmp), verbose=False)
            except Exception as e:  # cffi raises VerificationError / distutils errors
                raise NativeHandlerError(
                    f"the native handler does not compile ({type(e).__name__}: {e}):\n"
                    + _compiler_errors(tmp / f"{name}.c")) from None
            os.replace(out, built)  # atomic: concurrent builds of one source agree
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    spec = importlib.util.spec_from_file_location(name, built)
    assert spec is not None and spec.loader is not None
    try:
        module = importlib.util.module_from_spec(spec)  # dlopen
        spec.loader.exec_module(module)
    except ImportError as e:  # a function declared or used but defined nowhere
        built.unlink(missing_ok=True)
        raise NativeHandlerError(f"the native handler does not load ({e}); does the "
                                 "source define every function it declares?") from None
    _modules[name] = module
    return module


def ns_per_tick() -> float:
    """Nanoseconds per clock tick, for the raw times native handlers see (``r->time``):
    1.0 with OMPTPY_CLOCK=monotonic, else measured from the tool's start to now, as
    traces convert their times."""
    meta = attach.meta()
    if meta["clock"] != "tsc":
        return 1.0
    first, last = meta["start_anchor"], json.loads(_core.stats())["anchor"]
    return tick_scale(first, last, meta["tick_ns_estimate"])


class NativeHandler:
    """An installed native handler: ``state`` (cffi pointer to the state struct, read it
    while the program runs), ``ffi``/``lib`` (its cffi module), ``remove()``."""

    def __init__(self, module: ModuleType, function: str, state_ctype: str | None,
                 codes: tuple[int, ...]) -> None:
        self.ffi: Any = module.ffi
        self.lib: Any = module.lib
        self.function = function
        self.events = tuple(EVENTS[c] for c in codes)
        try:
            fn = self.ffi.addressof(self.lib, function)
        except (AttributeError, self.ffi.error) as e:
            raise NativeHandlerError(f"the source defines no function {function!r} "
                                     f"({e})") from None
        size = self.ffi.sizeof(state_ctype) if state_ctype else 0
        address = _core.native_alloc(size)
        self.state: Any = self.ffi.cast(f"{state_ctype} *", address) if state_ctype else None
        self._id: int | None = _core.native_add(int(self.ffi.cast("uintptr_t", fn)), address,
                                                *event_mask(codes))

    @property
    def active(self) -> bool:
        return self._id is not None

    def remove(self) -> None:
        """Stop calling the handler; its state stays readable."""
        if self._id is not None:
            _core.native_remove(self._id)
            self._id = None

    def __repr__(self) -> str:
        what = "all events" if len(self.events) == len(EVENTS) else ", ".join(self.events)
        return (f"<ompt_py.NativeHandler {self.function} ({what}), "
                f"{'active' if self.active else 'removed'}>")


def native_handler(events: EventsArg, source: str, state: str | None = None, *,
                   function: str = "handle", extra_compile_args: tuple[str, ...] = (),
                   build_dir: str | os.PathLike | None = None) -> NativeHandler:
    """Compile a C handler with cffi and install it in the tool's hot path.

    ``source`` defines ``void handle(const omptpy_record *r, STATE *state)``
    (name: ``function``), STATE being the type ``state`` declares (its last
    struct, e.g. ``"struct hist { uint64_t n[64]; }"``; without ``state`` the
    second argument is ``void *`` and NULL).  ``stdint.h`` and ``omptpy.h``
    are included, ``state`` precedes ``source``, and ``OMPTPY_EVENT_<NAME>``
    is each event's number (``r->event``).  The tool calls it on the OpenMP
    thread right after writing each record of ``events`` (None: all), with
    raw clock ticks in ``r->time`` (``ns_per_tick()``).  While it is
    installed its events are recorded even without a trace window or Python
    handlers.  ``extra_compile_args`` go to the compiler; ``build_dir``
    replaces the cache directory.  At most ``_core.NATIVE_MAX`` (16) are installed at once.
    Compilation errors raise NativeHandlerError with the compiler's messages.
    """
    check_usable()
    codes = event_codes(events)
    if not re.fullmatch(r"[A-Za-z_]\w*", function):
        raise ValueError(f"function must be a C identifier, not {function!r}")
    ctype = state_type(state) if state is not None else None
    decl = state.strip().rstrip(";") + ";\n" if state is not None else ""
    arg = f"{ctype} *" if ctype else "void *"
    cdef = record_cdef() + decl + f"void {function}(const omptpy_record *, {arg});\n"
    # #line: the compiler's messages give the lines of `state` and `source`.
    c_source = ("#include <stdint.h>\n#include \"omptpy.h\"\n" + event_defines()
                + '#line 1 "state"\n' + decl + '#line 1 "source"\n' + source)
    module = _build(c_source, cdef, tuple(extra_compile_args), build_dir)
    return NativeHandler(module, function, ctype, codes)
