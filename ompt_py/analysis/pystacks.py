"""Python call stacks: which Python code started each construct.

With each parallel, teams and target region, region marker, and explicit
task created outside any region, that a Python thread starts, the tool
records the id of its Python call stack (the events' ``py_stack``); each
process's metadata holds its stacks (``meta.python_entry``).  Here: the
frames of the stacks (``Trace.python_stacks()``), the location that names a
stack, and the columns the tables add.

A stack's location is its innermost frame of the user's code: a frame whose
file is not under the interpreter's library folders (the standard library,
site-packages) nor ompt-py's own package; when every frame is library code,
the innermost frame.  It reads ``file:line in function``, the file relative
to the working directory of the process (or, for library code, to its
library folder) when it is under it.

Constructs started by a thread that runs no Python (nested regions opened by
OpenMP workers, tasks created inside a region) inherit the stack of the
region around them, marked ``py_inherited``.  With ``native_depth``, a stack
also holds the native frames that called the construct's code
(``native_callers``): what tells apart the regions of one generic native
function called from one Python line.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..units import TEXT, text_columns
from . import symbols
from .cache import per_trace
from .columns import TABLES, conform

if TYPE_CHECKING:
    from ..trace import Trace

#: The columns with_python() adds.
COLUMNS = ["py_stack", "py_location", "py_inherited", "native_callers"]
#: Its text columns (units.TEXT), NaN for a row without a stack.
TEXT_COLUMNS = ["py_location", "native_callers"]
_FRAME_COLUMNS = list(TABLES["python_stacks"].columns)


def _library(path: str, libraries: list[str]) -> str | None:
    """The library folder ``path`` is under, or None (the user's code)."""
    if path.startswith("<frozen"):
        return ""
    return next((lib for lib in libraries if path.startswith(lib + os.sep)), None)


def short_file(path: str, cwd: str | None, library: str | None) -> str:
    """A frame's file as a location shows it: relative to the working directory or
    to its library folder when under it, else as recorded."""
    for base in (cwd, library):
        if base and path.startswith(base + os.sep):
            return path[len(base) + 1:]
    return path


def _interpreter(module: str | None, exe: str | None) -> bool:
    """Whether a native frame's module is the Python interpreter's own (its frames
    under the Python ones only say that Python called the code)."""
    return bool(module) and (module == exe or os.path.basename(module).startswith("libpython"))


def _native_rows(proc: dict, natives: dict[int, list[int]], first_level: dict[int, int],
                 truncated: dict[int, bool]) -> list[tuple]:
    """The rows of the native frames of a process's stacks, symbolized: their
    location is the function's readable name (symbols.resolve), or where it is."""
    addrs = np.unique(np.array([a for v in natives.values() for a in v], dtype=np.uint64))
    found = symbols.resolve(symbols.Modules(proc.get("modules", [])), addrs).set_index("codeptr")
    rows = []
    for stack, frames in natives.items():
        for k, addr in enumerate(frames):
            src = found.loc[addr] if addr in found.index else pd.Series(dtype=object)

            def known(column: str, src: pd.Series = src) -> Any:
                value = src.get(column)
                return value if isinstance(value, str) and value else None

            module, function = known("module"), known("function")
            file = known("file") or module
            line = int(src["line"]) if pd.notna(src.get("line")) else 0
            location = known("name") or function or known("location") or hex(addr)
            rows.append((proc["pid"], stack, first_level[stack] + k, file or "<unknown>", line,
                         function or hex(addr), 0, False, truncated[stack], location, True,
                         _interpreter(module, proc.get("exe"))))
    return rows


@per_trace
def python_stacks(trace: Trace) -> pd.DataFrame:
    """One row per frame of every Python stack of the trace, outermost first:
    pid, stack (the id in the events' and tables' ``py_stack``), level (0:
    outermost), file, line (0: unknown), function (qualified name from
    Python 3.11 on), first_line of the function, user (not library code),
    truncated (the stack was deeper than the frames kept), location, native:
    the frames under the Python ones, from the native caller nearest Python
    down to the one that called the construct's code (with ``native_depth``),
    symbolized like code addresses (Trace.symbolize()), and interpreter: a
    native frame of the Python interpreter itself."""
    rows: list[tuple] = []
    for proc in trace.meta.get("processes", []):
        py = proc.get("python")
        if not py:
            continue
        cwd = py.get("cwd")
        libraries = sorted(py.get("library_paths", []), key=len, reverse=True)
        codes = py.get("codes", [])
        natives: dict[int, list[int]] = {}
        after: dict[int, int] = {}
        cut: dict[int, bool] = {}
        for stack, entry in enumerate(py.get("stacks", []), start=1):
            if not entry:
                continue
            if isinstance(entry[-1], list):
                natives[stack], entry = entry[-1], entry[:-1]
            truncated = bool(entry[0])
            for level, (code, line) in enumerate(zip(entry[1::2], entry[2::2])):
                known = 1 <= code <= len(codes) and codes[code - 1]
                file, function, first = codes[code - 1] if known else ("<unknown>", "<unknown>", 0)
                path = os.path.normpath(os.path.join(cwd, file)) if (
                    cwd and not file.startswith("<") and not os.path.isabs(file)) else file
                library = _library(path, libraries)
                where = short_file(path, cwd, library)
                rows.append((proc["pid"], stack, level, path, line, function, first,
                             library is None, truncated,
                             f"{where}:{line} in {function}" if line else f"{where} in {function}",
                             False, False))
            after[stack], cut[stack] = len(entry) // 2, truncated
        if natives:
            rows += _native_rows(proc, natives, after, cut)
    frames = pd.DataFrame(rows, columns=_FRAME_COLUMNS)
    return conform(frames.sort_values(["pid", "stack", "level"], kind="stable")
                   .reset_index(drop=True), "python_stacks")


@per_trace
def locations(trace: Trace) -> pd.DataFrame:
    """One row per stack: pid, py_stack, py_location (its innermost frame of user
    code, else its innermost Python frame), py_file, py_line, py_function,
    py_frames (every Python frame's location, outermost first, joined by
    " > ") and native_callers (the native frames' names likewise, without the
    interpreter's own, or NaN); the text columns of units.TEXT."""
    text = ["py_location", "py_file", "py_function", "py_frames", "native_callers"]
    frames = python_stacks(trace)
    if frames.empty:
        return pd.DataFrame({c: pd.Series(dtype=TEXT if c in text else np.int64) for c in
                             ("pid", "py_stack", "py_location", "py_file", "py_line",
                              "py_function", "py_frames", "native_callers")})
    native = frames[frames["native"]]
    frames = frames[~frames["native"]]
    # The named frame: the innermost user frame (highest level), else the innermost.
    rank = frames["level"] + np.where(frames["user"], 1 << 20, 0)
    named = frames.loc[rank.groupby([frames["pid"], frames["stack"]]).idxmax()]
    joined = frames.groupby(["pid", "stack"])["location"].agg(" > ".join)
    out = named[["pid", "stack", "location", "file", "line", "function"]].rename(columns={
        "stack": "py_stack", "location": "py_location", "file": "py_file", "line": "py_line",
        "function": "py_function"})
    keys = list(zip(out["pid"], out["py_stack"]))
    out["py_frames"] = joined.loc[keys].to_numpy()
    native = native[~native["interpreter"]]
    callers = native.groupby(["pid", "stack"])["location"].agg(" > ".join)
    out["native_callers"] = callers.reindex(keys).to_numpy() if len(callers) else None
    return text_columns(out.reset_index(drop=True), text)


def with_python(trace: Trace, table: pd.DataFrame, parent: tuple[str, str] | None = None,
                around: pd.Series | None = None) -> pd.DataFrame:
    """``table`` (with pid and py_stack columns: the ids its events recorded)
    with COLUMNS (py_stack, py_location, py_inherited, native_callers): rows
    without a stack of their own take ``around`` (the stack of what encloses
    them, aligned with the rows), else the stack of their parent row, found by
    ``parent`` = (the column naming the parent, the column it names), through
    any number of levels.  py_location and native_callers are of units.TEXT (NaN:
    no stack)."""
    own = table["py_stack"].astype("Int64")
    stack = own.copy()
    if around is not None:
        stack = stack.fillna(pd.Series(around.to_numpy(), index=stack.index, dtype="Int64"))
    if parent is not None and stack.notna().any():  # else no stack to inherit
        up, key = parent
        index = pd.MultiIndex.from_arrays([table["pid"], table[key]])
        while True:  # one level of nesting per pass; each fills at least one row
            lookup = pd.Series(stack.to_numpy(), index=index)
            lookup = lookup[~lookup.index.duplicated()]
            wanted = stack.isna() & table[up].notna()
            if not wanted.any():
                break
            got = lookup.reindex(pd.MultiIndex.from_arrays(
                [table.loc[wanted, "pid"], table.loc[wanted, up]])).to_numpy()
            if pd.isna(got).all():
                break
            stack.loc[wanted] = got
    out = table.drop(columns=[c for c in COLUMNS if c in table])
    out["py_stack"] = stack
    out["py_inherited"] = stack.notna() & own.isna()
    names = locations(trace)[["pid", "py_stack", "py_location", "native_callers"]]
    if names.empty:
        for column in TEXT_COLUMNS:
            out[column] = pd.Series(index=out.index, dtype=TEXT)
        return out
    merged = out[["pid", "py_stack"]].merge(names, on=["pid", "py_stack"], how="left")
    for column in TEXT_COLUMNS:
        out[column] = merged[column].array
    return out
