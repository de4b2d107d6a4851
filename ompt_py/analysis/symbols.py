"""Source attribution: code addresses (codeptr_ra) -> module + offset ->
function and file:line.

The tool records where each loaded object's code is (with the process
description and every counter block, so objects opened with dlopen later
are known too).  Addresses are symbolized lazily and cached, from the
binaries on disk: with llvm-symbolizer when installed (DWARF lines,
inlining), else addr2line (binutils), else only module + offset, which the
``how`` column says.  A saved trace can be symbolized as long as its
binaries still exist.  Function names are also made readable (names.py):
Cython's back to Python names, C++ names shortened, for the ``name`` column.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..elf import build_id, symbol_names
from ..units import text_columns
from . import names


def _llvm_tool(name: str) -> str | None:
    """The path of an LLVM tool: ``name`` or, else, the newest ``name-N`` installed."""
    candidates = [name, *(f"{name}-{v}" for v in range(25, 13, -1))]
    return next((p for p in map(shutil.which, candidates) if p), None)


class Modules:
    """The code ranges of one process's loaded objects."""

    def __init__(self, modules: list[dict]) -> None:
        unique = {(m["path"], m["start"], m["end"]): m for m in modules}
        ordered = sorted(unique.values(), key=lambda m: m["start"])
        self.paths = [m["path"] for m in ordered]
        self.build_ids = [m.get("build_id", "") for m in ordered]
        self.bases = np.array([m["base"] for m in ordered], dtype=np.uint64)
        self.starts = np.array([m["start"] for m in ordered], dtype=np.uint64)
        self.ends = np.array([m["end"] for m in ordered], dtype=np.uint64)

    def locate(self, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index of the module holding each address (-1 if none) and the address
        within that module's file (what symbolizers take)."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        i = np.searchsorted(self.starts, addrs, side="right") - 1
        ok = (i >= 0) & (addrs < self.ends[np.clip(i, 0, None)]) if len(self.starts) else \
            np.zeros(len(addrs), bool)
        i = np.where(ok, i, -1)
        offsets = np.where(ok, addrs - self.bases[np.clip(i, 0, None)], 0) if len(self.bases) \
            else np.zeros(len(addrs), np.uint64)
        return i, offsets.astype(np.uint64)


def _with_llvm(tool: str, queries: list[tuple[str, int]]) -> dict[tuple[str, int], tuple]:
    lines = "".join(f'"{path}" {hex(off)}\n' for path, off in queries)
    out = subprocess.run([tool, "--output-style=JSON", "--demangle"],
                         input=lines, capture_output=True, text=True, timeout=300).stdout
    result = {}
    for q, line in zip(queries, out.splitlines()):
        try:
            frames = json.loads(line).get("Symbol") or []
        except ValueError:
            continue
        if frames and frames[0].get("FunctionName"):
            f = frames[0]
            result[q] = (f["FunctionName"], f.get("FileName") or None, f.get("Line") or None)
    return result


def _with_addr2line(tool: str, queries: list[tuple[str, int]]) -> dict[tuple[str, int], tuple]:
    by_module: dict[str, list[int]] = {}
    for path, off in queries:
        by_module.setdefault(path, []).append(off)
    result = {}
    for path, offs in by_module.items():
        out = subprocess.run([tool, "-f", "-C", "-e", path, *map(hex, offs)],
                             capture_output=True, text=True, timeout=300).stdout.splitlines()
        for off, function, where in zip(offs, out[0::2], out[1::2]):
            file, _, line = where.rpartition(":")
            if function != "??":
                result[(path, off)] = (function, file if file and file != "??" else None,
                                       int(line) if line.isdigit() and line != "0" else None)
    return result


def symbolize(queries: list[tuple[str, int]]) -> tuple[dict[tuple[str, int], tuple], str]:
    """(path, file address) -> (function, file, line), and which tool answered."""
    # Regular files only: a trace names its modules, and a FIFO or a device there
    # would block the symbolizer.
    present = [q for q in queries if os.path.isfile(q[0])]
    if not present:
        return {}, "none"
    tool = _llvm_tool("llvm-symbolizer")
    if tool:
        return _with_llvm(tool, present), "llvm-symbolizer"
    tool = shutil.which("addr2line")
    if tool:
        return _with_addr2line(tool, present), "addr2line"
    return {}, "none"


def demangle(functions: Iterable[str]) -> dict[str, str]:
    """Raw C++ symbols (``_Z...``, from a symbolizer that did not demangle) -> C++
    names, by llvm-cxxfilt or c++filt in one run; {} without either."""
    raw = sorted({f for f in functions if f.startswith("_Z") and f.isprintable()})
    tool = _llvm_tool("llvm-cxxfilt") or shutil.which("c++filt")
    if not raw or tool is None:
        return {}
    try:
        out = subprocess.run([tool], input="\n".join(raw) + "\n", capture_output=True,
                             text=True, timeout=300).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(zip(raw, out)) if len(out) == len(raw) else {}


@functools.lru_cache(maxsize=64)
def _cython_names(path: str, build: str | None) -> names.CythonNames:
    """The reader of the Cython names of one binary (by path and build id)."""
    return names.CythonNames(symbol_names(path))


def resolve(modules: Modules, codeptrs: np.ndarray) -> pd.DataFrame:
    """One row per code address: module, offset, function, name, file, line,
    location, how.

    ``function`` is the symbolizer's name (C++ demangled).  ``name`` is the one
    to show (names.readable): the Python-level dotted name of a function Cython
    compiled (``sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense``), a C++
    name shortened (``at::TensorIteratorBase::for_each(…)``), else the function.
    ``location`` is file:line, or without line information the name and the
    module's file name, or the module's file name + offset.  The text columns
    are of units.TEXT (NaN where there is no name, file or module), whatever
    the addresses.

    A codeptr is a return address: the call that made the event is the
    instruction before it, so the symbolizer is asked about address - 1.
    """
    codeptrs = np.unique(np.asarray(codeptrs, dtype=np.uint64))
    codeptrs = codeptrs[codeptrs != 0]
    index, offsets = modules.locate(codeptrs)
    # A binary rebuilt since the trace would give wrong answers: its build id tells.
    changed = {i for i in set(index.tolist()) if i >= 0 and modules.build_ids[i]
               and os.path.isfile(modules.paths[i])
               and build_id(modules.paths[i]) != modules.build_ids[i]}
    queries = [(modules.paths[i], int(off) - 1) for i, off in zip(index, offsets)
               if i >= 0 and i not in changed]
    found, tool = symbolize(sorted(set(queries)))
    cxx = demangle(f for f, _, _ in found.values())
    rows = []
    for addr, i, off in zip(codeptrs.tolist(), index.tolist(), offsets.tolist()):
        module = modules.paths[i] if i >= 0 else None
        function, file, line = found.get((module, off - 1), (None, None, None))
        function = cxx.get(function, function)
        name = function and names.readable(
            function, _cython_names(module, modules.build_ids[i]) if "__pyx_" in function else None)
        if file and line:
            location, how = f"{file}:{line}", tool
        elif function:
            location, how = f"{name} ({os.path.basename(module)})", f"{tool}, no line info"
        elif module:
            location = f"{os.path.basename(module)}+{hex(off)}"
            if not os.path.exists(module):
                how = f"module + offset only: {module} is gone"
            elif i in changed:
                how = (f"module + offset only: {module} changed since the trace (build id "
                       f"{modules.build_ids[i]} then, {build_id(module)} now)")
            else:
                how = "module + offset only"
        else:
            location, how = hex(addr), "address outside any known module"
        rows.append({"codeptr": addr, "module": module, "offset": off if module else None,
                     "function": function, "name": name, "file": file, "line": line,
                     "location": location, "how": how})
    out = text_columns(pd.DataFrame(rows, columns=[
        "codeptr", "module", "offset", "function", "name", "file", "line", "location", "how"]),
        ["module", "function", "name", "file", "location", "how"])
    out["codeptr"] = out["codeptr"].astype(np.uint64)
    out["offset"] = out["offset"].astype("UInt64")
    out["line"] = out["line"].astype("Int64")
    return out
