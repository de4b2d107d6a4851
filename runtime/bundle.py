"""How an OMPT-enabled LLVM libomp gets into the package (used by setup.py).

The build puts ``libomp.so.5`` and its license text into
``ompt_py/runtime/``.  Where the library comes from, in this order:

- ``OMPTPY_BUNDLE_RUNTIME=0``: nowhere; the package then uses the system's
  libomp at run time, when there is one.
- ``OMPTPY_LIBOMP=/path/to/libomp.so``: that file.
- ``OMPTPY_LLVM_SOURCE=/path/to/llvm-project`` (or its ``openmp`` folder):
  built from those sources with CMake (OMPT on), into the build directory.
- otherwise the LLVM libomp installed on the build machine (the newest
  ``/usr/lib/llvm-N/lib/libomp.so.5``, Debian's ``libomp5-N``); if there is
  none, the package is built without a bundled runtime and says so.

A library that does not export ``ompt_start_tool`` (built without OMPT) is
refused.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

SONAME = "libomp.so.5"
LICENSE_NAME = "LICENSE.libomp.txt"


class BundleError(RuntimeError):
    """The requested runtime cannot be bundled; the message says what to do."""


def _version_key(path: str) -> int:
    m = re.search(r"llvm-(\d+)", path)
    return int(m.group(1)) if m else 0


def installed_libomp() -> str | None:
    """The newest LLVM libomp of the build machine, or None."""
    candidates = glob.glob("/usr/lib/llvm-*/lib/libomp.so.5")
    candidates += [p for p in ("/usr/lib/x86_64-linux-gnu/libomp.so.5",
                               "/usr/local/lib/libomp.so") if os.path.exists(p)]
    candidates = [p for p in candidates if os.path.exists(p)]
    return max(candidates, key=_version_key) if candidates else None


def _has_ompt(path: str) -> bool:
    try:
        out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return True  # cannot check without binutils; the tests will
    return re.search(r"\bompt_start_tool\b", out) is not None


def build_from_source(source: str, build_dir: str) -> str:
    """Build libomp with OMPT from an llvm-project (or openmp) source tree."""
    openmp = source if os.path.exists(os.path.join(source, "runtime")) else \
        os.path.join(source, "openmp")
    if not os.path.exists(os.path.join(openmp, "runtime", "src", "kmp.h")):
        raise BundleError(f"OMPTPY_LLVM_SOURCE={source} holds no LLVM OpenMP sources "
                          "(expected openmp/runtime/src/kmp.h)")
    build = os.path.join(build_dir, "libomp-build")
    os.makedirs(build, exist_ok=True)
    try:
        subprocess.run(["cmake", "-S", openmp, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                        "-DLIBOMP_OMPT_SUPPORT=ON", "-DOPENMP_ENABLE_LIBOMPTARGET=OFF",
                        "-DLIBOMP_ENABLE_SHARED=ON"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "omp", "--parallel"], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise BundleError(f"building libomp from {openmp} failed: {e}") from e
    built = glob.glob(os.path.join(build, "runtime", "src", "libomp.so*"))
    if not built:
        raise BundleError(f"the libomp build in {build} produced no libomp.so")
    return sorted(built, key=len)[0]


def _license_text(library: str) -> str:
    real = os.path.realpath(library)
    m = re.search(r"llvm-(\d+)", real)
    docs = [f"/usr/share/doc/libomp5-{m.group(1)}/copyright"] if m else []
    docs += glob.glob("/usr/share/doc/libomp5*/copyright")
    for doc in docs:
        if os.path.exists(doc):
            with open(doc) as f:
                return f"LLVM OpenMP runtime, from {real}\n\n" + f.read()
    return (f"LLVM OpenMP runtime, from {real}\n\nPart of the LLVM Project, under the Apache "
            "License v2.0 with LLVM Exceptions. See https://llvm.org/LICENSE.txt\n")


def bundle(dest_dir: str, build_dir: str, log=print) -> str | None:
    """Copy (or build) libomp into dest_dir with its license; returns its path or None."""
    if os.environ.get("OMPTPY_BUNDLE_RUNTIME", "1").lower() in ("0", "off", "no", "false"):
        log("ompt-py: OMPTPY_BUNDLE_RUNTIME=0: no bundled OpenMP runtime")
        return None
    if os.environ.get("OMPTPY_LIBOMP"):
        source = os.environ["OMPTPY_LIBOMP"]
        if not os.path.isfile(source):
            raise BundleError(f"OMPTPY_LIBOMP={source} is not a file; point it at libomp.so")
    elif os.environ.get("OMPTPY_LLVM_SOURCE"):
        source = build_from_source(os.environ["OMPTPY_LLVM_SOURCE"], build_dir)
    else:
        source = installed_libomp()
        if source is None:
            log("ompt-py: no LLVM libomp on this machine (Debian: libomp5-19); building "
                "without a bundled OpenMP runtime")
            return None
    if not _has_ompt(source):
        raise BundleError(f"{source} does not export ompt_start_tool: it was built without "
                          "OMPT; use an LLVM libomp built with LIBOMP_OMPT_SUPPORT=ON")
    os.makedirs(dest_dir, exist_ok=True)
    dest = os.path.join(dest_dir, SONAME)
    shutil.copyfile(source, dest)
    os.chmod(dest, 0o755)
    with open(os.path.join(dest_dir, LICENSE_NAME), "w") as f:
        f.write(_license_text(source))
    log(f"ompt-py: bundled OpenMP runtime {os.path.realpath(source)} -> {dest}")
    return dest
