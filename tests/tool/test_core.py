"""The extension's own interface (csrc/ext): ompt_py/_core.pyi against the
module, the module's constants against the C headers, the one conversion of
clock ticks to nanoseconds (tick_scale, ticks_to_ns), and what each folder of
csrc/ may include (csrc/*/README.md)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import CSRC_INCLUDE, CSRC_TOOL

import ompt_py
from ompt_py import _core

STUB = Path(ompt_py.__file__).parent / "_core.pyi"


def _stub_names() -> tuple[dict[str, ast.FunctionDef], dict[str, str], set[str]]:
    """(functions, constants with their annotation, classes) the stub declares,
    stub-only helpers (_Name) aside."""
    body = ast.parse(STUB.read_text()).body
    functions = {n.name: n for n in body if isinstance(n, ast.FunctionDef)}
    constants = {n.target.id: ast.unparse(n.annotation) for n in body
                 if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                 and not n.target.id.startswith("_")}
    classes = {n.name for n in body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")}
    return functions, constants, classes


@pytest.mark.pythons
def test_stub_declares_every_name_of_the_module():
    functions, constants, classes = _stub_names()
    assert {*functions, *constants, *classes} == {n for n in dir(_core) if not n.startswith("_")}
    types = {"Final[int]": (int,), "Final[str | None]": (str, type(None))}
    assert all(type(getattr(_core, name)) in types[kind] for name, kind in constants.items())
    assert all(isinstance(getattr(_core, name), type) for name in classes)


@pytest.mark.pythons
def test_stub_parameters_are_the_modules():
    """Every function takes positional arguments only; the stub names them as the
    signature at the head of the function's docstring does (module.c's DOC)."""
    functions, _, _ = _stub_names()
    for name, node in functions.items():
        runtime = inspect.signature(getattr(_core, name)).parameters.values()
        assert all(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in runtime), name
        assert not node.args.args and not node.args.kwonlyargs and not node.args.vararg, name
        assert [p.name for p in runtime] == [a.arg for a in node.args.posonlyargs], name
        assert sum(p.default is not inspect.Parameter.empty for p in runtime) == len(
            node.args.defaults), name


def _header_values(text: str) -> dict[str, int]:
    """NAME -> value of the `NAME = value` enumerators and `#define NAME value` macros."""
    pairs = re.findall(r"\b(\w+)\s*=\s*(?:\(int\))?(0x[0-9a-fA-F]+|\d+)\b", text)
    pairs += re.findall(r"#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)u?\b", text)
    return {name: int(value, 0) for name, value in pairs}


#: The module's constants and the C names they come from.
FROM_HEADERS = {
    "SCOPE_BEGIN": "ompt_scope_begin",
    "SCOPE_END": "ompt_scope_end",
    "SCOPE_BEGINEND": "ompt_scope_beginend",
    "TASK_INITIAL": "ompt_task_initial",
    "TASK_IMPLICIT": "ompt_task_implicit",
    "TASK_EXPLICIT": "ompt_task_explicit",
    "PARALLEL_INVOKER_PROGRAM": "ompt_parallel_invoker_program",
    "PARALLEL_INVOKER_RUNTIME": "ompt_parallel_invoker_runtime",
    "PARALLEL_LEAGUE": "ompt_parallel_league",
    "EVENT_SAMPLE": "OMPTPY_EVENT_SAMPLE",
    "EVENT_REGION": "OMPTPY_EVENT_REGION",
    "FILE_MAGIC": "OMPTPY_FILE_MAGIC",
    "BLOCK_META": "OMPTPY_BLOCK_META",
    "BLOCK_RECORDS": "OMPTPY_BLOCK_RECORDS",
    "BLOCK_STATS": "OMPTPY_BLOCK_STATS",
    "TAP_MAX_FILTERS": "OMPTPY_TAP_MAX_FILTERS",
    "TAP_MAX_THREADS": "OMPTPY_TAP_MAX_THREADS",
    "NATIVE_MAX": "OMPTPY_NATIVE_MAX",
}


@pytest.mark.pythons
def test_constants_are_the_headers():
    c = {}
    for header in (CSRC_TOOL / "omptpy_ompt.h", CSRC_TOOL / "omptpy_file.h",
                   CSRC_TOOL / "omptpy_api.h", CSRC_INCLUDE / "omptpy.h"):
        c.update(_header_values(header.read_text()))
    assert {name: getattr(_core, name) for name in FROM_HEADERS} == {
        name: c[c_name] for name, c_name in FROM_HEADERS.items()}
    assert _core.FILE_MAGIC.to_bytes(4, "little") == b"OPPT"
    assert _core.BLOCK_HEADER_SIZE == 16  # uint32 magic, uint32 type, uint64 length
    assert _core.RECORD_SIZE == _core.record_layout()["size"] == 64


def test_tick_scale_takes_the_anchors_slope_when_they_are_far_enough_apart():
    est = 0.37
    assert _core.tick_scale(1000, 5000, None, None, est) == est
    assert _core.tick_scale(1000, 5000, 1000, 5000, est) == est
    assert _core.tick_scale(1000, 5000, 1000 + 10**6, 5000 + 333_333, est) == est
    assert _core.tick_scale(1000, 5000, 1001 + 10**6, 5000 + 333_334, est) == 333_334 / (10**6 + 1)
    assert _core.tick_scale(2 * 10**6, 5000, 1000, 1000, est) == est  # last before first
    big = 2**63 + 10**9  # ticks are uint64
    assert _core.tick_scale(big, 10**12, big + 3 * 10**9, 10**12 + 10**9, est) == 1 / 3
    with pytest.raises(TypeError):
        _core.tick_scale(1000, 5000, None, 5000, est)


def test_ticks_to_ns_rounds_halves_away_from_zero():
    records = np.zeros(5, dtype=[("time", "<u8"), ("rest", "V56")])
    records["time"] = [997, 999, 1000, 1001, 1003]
    _core.ticks_to_ns(records, 1000, 10_000, 0.5, 1_000)
    # -1.5 -> -2, -0.5 -> -1, 0, 0.5 -> 1, 1.5 -> 2 nanoseconds from the anchor
    assert records["time"].view(np.int64).tolist() == [8998, 8999, 9000, 9001, 9002]


def _includes(path: Path) -> list[str]:
    """The #include lines of a file: "name" for quoted ones, <name> for the others."""
    return re.findall(r'^\s*#\s*include\s+([<"][^>"]+[>"])', path.read_text(), re.M)


#: The tool's headers the extension may include (by their folder), none of them the
#: tool's internal header.
TOOL_HEADERS_FOR_EXT = ("omptpy_api.h", "omptpy_ompt.h", "omptpy_frames.h", "omptpy_file.h")


def test_each_folder_includes_only_what_its_readme_allows():
    csrc = CSRC_TOOL.parent
    for path in sorted(csrc.glob("*/*.[ch]")):  # the extensions: _core and _otf2
        assert "<Python.h>" not in _includes(path) or path.parent.name in ("ext", "otf2"), path
    for path in sorted((csrc / "otf2").glob("*.[ch]")):  # libotf2's headers, no project one
        assert all(i.startswith("<") for i in _includes(path)), path
    for path in sorted(CSRC_INCLUDE.glob("*.h")):  # shipped: system headers only
        assert all(i.startswith("<") for i in _includes(path)), path
    allowed = {'"ext.h"', '"omptpy.h"', *(f'"tool/{h}"' for h in TOOL_HEADERS_FOR_EXT)}
    for path in sorted((csrc / "ext").glob("*.[ch]")):
        quoted = [i for i in _includes(path) if i.startswith('"')]
        assert set(quoted) <= allowed, path
        assert path.suffix == ".h" or _includes(path)[0] == '"ext.h"', path  # ext.h first
    for name in TOOL_HEADERS_FOR_EXT:
        assert '"omptpy_internal.h"' not in _includes(CSRC_TOOL / name), name
    for path in sorted((csrc / "hook").glob("*.[ch]")):  # the preload hook: the file format only
        assert {i for i in _includes(path) if i.startswith('"')} <= {'"../tool/omptpy_file.h"'}
