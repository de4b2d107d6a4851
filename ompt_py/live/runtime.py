"""The runtime fallback: running libgomp-built code on LLVM libomp.

GCC's libgomp has no OMPT.  LLVM libomp implements libgomp's ABI (GOMP_*),
so a module built with gcc -fopenmp runs on libomp, and is traced, when
libomp is in the process's global symbol scope before the module is loaded:
its GOMP_* and omp_* references then bind to libomp (also when the module
links a wheel's vendored copy, libgomp-<hash>.so.1).  libgomp itself stays
mapped, unused.  Importing ompt_py applies the policy in OMPTPY_RUNTIME:

- ``auto`` (default): an LLVM runtime already in the process is promoted to
  the global scope; otherwise the system's libomp is loaded (the copy that
  clang-built code and libomptarget load too), or the one bundled with
  ompt-py where the system has none.  Why by default: most OpenMP code
  that Python users run (scikit-learn, PyTorch, gcc-built extensions) is
  built with gcc, and the fallback must be in place before those modules
  are imported, which is when ompt_py is imported.
- ``bundled``: the libomp in the package (an error if it has none).
- ``system``: the system's libomp (an error if there is none).
- ``off``: nothing; libgomp-built code runs on libgomp, untraced.

Also here: libomp's stale registration file of this process, removed at
import (``remove_stale_registration``).
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import stat
from dataclasses import dataclass, field

from ..elf import needed
from ..errors import ConfigError

POLICIES = ("auto", "bundled", "system", "off")
BUNDLED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime",
                       "libomp.so.5")

#: libomp's registration file of a process (libomp 14, 16 and 19: kmp_runtime.cpp,
#: __kmp_register_library_startup; pid and uid as ``%d`` of getpid() and (int)getuid()),
#: in /dev/shm (shm_open), or in /tmp where libomp 19 cannot use /dev/shm.  The Python
#: mirror of csrc/hook/hook.c's KMP_REGISTRATION_PREFIX and kmp_registration_dirs.
KMP_REGISTRATION_NAME = "__KMP_REGISTERED_LIB_{pid}_{uid}"
KMP_REGISTRATION_DIRS = ("/dev/shm", "/tmp")

_LLVM = re.compile(r"^lib(omp|iomp5)(-[\w.]+)?\.so(\.\d+)*$")
_GNU = re.compile(r"^libgomp(-[0-9a-f]+)?\.so(\.\d+)*$")


@dataclass(frozen=True)
class MappedRuntime:
    """An OpenMP runtime library mapped into this process."""

    path: str
    family: str  # "llvm" (libomp/libiomp5, has OMPT) or "gnu" (libgomp, no OMPT)


def mapped_objects() -> list[str]:
    """Paths of the shared objects mapped into this process, in mapping order."""
    seen: dict[str, None] = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    seen.setdefault(parts[5].strip())
    except OSError:
        return []
    return list(seen)


def runtime_family(path: str) -> str | None:
    name = os.path.basename(path)
    if _LLVM.match(name):
        return "llvm"
    if _GNU.match(name):
        return "gnu"
    return None


def mapped_runtimes() -> list[MappedRuntime]:
    """The OpenMP runtimes mapped into this process."""
    return [MappedRuntime(p, f) for p in mapped_objects() if (f := runtime_family(p))]


def system_libomp() -> str | None:
    """The system's LLVM libomp: LD_LIBRARY_PATH, then the newest /usr/lib/llvm-N."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    for d in dirs:
        for name in ("libomp.so.5", "libomp.so"):
            if os.path.isfile(os.path.join(d, name)):
                return os.path.join(d, name)
    llvm = sorted(glob.glob("/usr/lib/llvm-*/lib/libomp.so.5"),
                  key=lambda p: int(re.search(r"llvm-(\d+)", p).group(1)))
    for path in [*reversed(llvm), "/usr/lib/x86_64-linux-gnu/libomp.so.5",
                 "/usr/local/lib/libomp.so.5", "/usr/local/lib/libomp.so"]:
        if os.path.isfile(path):
            return path
    return None


@dataclass
class Fallback:
    """What the policy did when ompt_py was imported."""

    policy: str
    libomp: str | None = None  # the LLVM runtime made global, if any
    how: str = ""  # "loaded", "promoted" or "" (nothing done)
    early_gnu_modules: list[str] = field(default_factory=list)  # loaded before: not traced
    error: str | None = None


def module_links(objects: list[str] | None = None) -> list[dict]:
    """Mapped objects (not runtimes themselves) that link an OpenMP runtime (DT_NEEDED)."""
    out = []
    for path in objects if objects is not None else mapped_objects():
        if runtime_family(path):
            continue
        links = [n for n in needed(path) if runtime_family(n)]
        if links:
            out.append({"module": path, "links": links})
    return out


def gnu_linked_modules(objects: list[str] | None = None) -> list[str]:
    """Mapped objects that link GNU libgomp."""
    return [m["module"] for m in module_links(objects)
            if any(runtime_family(n) == "gnu" for n in m["links"])]


def remove_stale_registration() -> list[str]:
    """Removes libomp's EMPTY registration files of this process's pid; the paths removed.

    libomp creates the file (O_CREAT | O_EXCL), sizes it, maps it and writes its
    string; a process killed between the open and the sizing leaves it empty, and
    when its pid comes round again the new process's libomp reads it past its end
    and dies of SIGBUS at its first OpenMP call.  Run where this process's libomp
    has not registered yet (at import, in a fork's child), such a file is stale.
    A non-empty one is a registration that libomp checks itself: left alone.
    """
    uid = os.getuid()
    name = KMP_REGISTRATION_NAME.format(pid=os.getpid(),
                                        uid=uid - 2**32 if uid >= 2**31 else uid)  # (int)
    removed = []
    for folder in KMP_REGISTRATION_DIRS:
        path = os.path.join(folder, name)
        try:
            if stat.S_ISREG((st := os.lstat(path)).st_mode) and st.st_size == 0:
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass  # none (the usual case), or not ours to remove: libomp's business
    return removed


def _policy(policy: str | None) -> str:
    policy = (policy or "auto").strip().lower()
    if policy not in POLICIES:
        raise ConfigError(f"OMPTPY_RUNTIME='{policy}' is not valid; use one of "
                          f"{', '.join(POLICIES)}")
    return policy


def choose_libomp(policy: str) -> str | None:
    """The libomp a policy runs libgomp-built code on (None: none, or none found).

    ``auto`` prefers the system's libomp: a program or library that loads it
    by path (libomptarget does) then gets the same copy instead of a second
    runtime; the bundled one serves where the system has none.
    """
    bundled = BUNDLED if os.path.exists(BUNDLED) else None
    if policy == "off":
        return None
    if policy == "bundled":
        if bundled is None:
            raise ConfigError(
                "OMPTPY_RUNTIME=bundled, but this ompt-py was built without a bundled libomp "
                "(OMPTPY_BUNDLE_RUNTIME=0 or no libomp on the build machine); use "
                "OMPTPY_RUNTIME=system or reinstall ompt-py with libomp available")
        return bundled
    system = system_libomp()
    if policy == "system" and system is None:
        raise ConfigError(
            "OMPTPY_RUNTIME=system, but no LLVM libomp was found (LD_LIBRARY_PATH, "
            "/usr/lib/llvm-*/lib); install libomp5 or use OMPTPY_RUNTIME=bundled")
    return system or bundled


def launcher_libomp(policy: str | None) -> str | None:
    """The libomp `ompt-py run` preloads under a policy (None: none)."""
    return choose_libomp(_policy(policy))


def _load_global(path: str, noload: bool = False) -> None:
    mode = os.RTLD_GLOBAL | os.RTLD_NOW | (os.RTLD_NOLOAD if noload else 0)
    ctypes.CDLL(path, mode=mode)


def apply(policy: str | None = None) -> Fallback:
    """Apply the runtime policy (OMPTPY_RUNTIME when policy is None)."""
    policy = _policy(policy or os.environ.get("OMPTPY_RUNTIME"))
    result = Fallback(policy)
    if policy == "off":
        return result
    objects = mapped_objects()
    llvm = [p for p in objects if runtime_family(p) == "llvm"]
    try:
        if llvm and policy == "auto":
            result.libomp, result.how = llvm[0], "promoted"
            _load_global(llvm[0], noload=True)
        else:
            path = choose_libomp(policy)
            if path is None:
                result.error = "no LLVM libomp to run libgomp-built code on"
                return result
            _load_global(path)
            result.libomp, result.how = path, "loaded"
    except OSError as e:
        result.error = f"loading {result.libomp or 'libomp'} failed: {e}"
        return result
    # Only a process that already maps libgomp can hold modules linked to it.
    if any(runtime_family(p) == "gnu" for p in objects):
        result.early_gnu_modules = gnu_linked_modules(objects)
    return result
