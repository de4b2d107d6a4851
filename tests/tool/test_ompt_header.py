"""csrc/tool/omptpy_ompt.h (the project's own OMPT declarations) against the
omp-tools.h that clang-19 installs.

Two small C programs print ``name=value`` for every enumeration constant,
``sizeof``/``offsetof`` of every type and struct member that omptpy_ompt.h
declares: one built by gcc against omptpy_ompt.h, one by clang-19 against
omp-tools.h.  The outputs must be equal.  A third file, compiled by clang
only, checks that every function-pointer type and the ompt_start_tool
prototype of omptpy_ompt.h is compatible with omp-tools.h's.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import CLANG, CSRC_INCLUDE, CSRC_TOOL, GCC, OMP_TOOLS_H

HEADER = CSRC_TOOL / "omptpy_ompt.h"

pytestmark = [
    pytest.mark.skipif(not OMP_TOOLS_H.exists(), reason=f"{OMP_TOOLS_H} is not installed"),
    pytest.mark.skipif(CLANG is None, reason="clang-19 is not installed"),
    pytest.mark.skipif(GCC is None, reason="gcc is not installed"),
]


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse_header() -> dict:
    text = _strip_comments(HEADER.read_text())
    enums: dict[str, list[str]] = {}
    for body, name in re.findall(r"typedef\s+enum\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        enums[name] = re.findall(r"\b(ompt_\w+)\s*=", body)
    # A union inside a struct (ompt_record_ompt_t's `record`): its members become
    # the struct's, named through it ("record.target"), so offsetof checks them.
    text = re.sub(r"\bunion\s*\{([^{}]*)\}\s*(\w+)\s*;",
                  lambda m: " ".join(f"{d.strip()[:-len(n)]}{m.group(2)}.{n};"
                                     for d in m.group(1).split(";") if d.strip()
                                     for n in [re.findall(r"(\w+)\s*$", d.strip())[0]]),
                  text)
    records: dict[str, list[str]] = {}
    for body, name in re.findall(
        r"typedef\s+(?:struct|union)\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S
    ):
        members = []
        for decl in body.split(";"):
            decl = decl.strip()
            if decl:
                members.append(re.findall(r"([\w.]+)\s*(?:\[[^\]]*\])?$", decl)[0])
        records[name] = members
    scalars = re.findall(r"typedef\s+\w+\s+(ompt_\w+_t)\s*;", text)
    fnptrs = [
        (m.group(0), m.group(1))
        for m in re.finditer(r"typedef[^;{}]*?\(\s*\*\s*(ompt_\w+)\s*\)\s*\([^;]*?\)\s*;", text)
    ]
    start_tool = re.search(
        r"\n\s*(ompt_start_tool_result_t\s*\*\s*ompt_start_tool\s*\([^;]*\))\s*;", text)
    return {
        "enums": enums,
        "records": records,
        "scalars": scalars,
        "fnptrs": fnptrs,
        "start_tool": start_tool.group(1) if start_tool else None,
    }


@pytest.fixture(scope="module")
def decls() -> dict:
    d = parse_header()
    # guard against a parser that silently finds nothing
    assert len(d["enums"]) >= 10, d["enums"].keys()
    assert sum(map(len, d["enums"].values())) >= 100
    assert {"ompt_data_t", "ompt_frame_t", "ompt_start_tool_result_t",
            "ompt_dispatch_chunk_t", "ompt_dependence_t"} <= set(d["records"])
    assert len(d["fnptrs"]) >= 40
    assert d["start_tool"] is not None
    return d


def printer_source(d: dict, include: str) -> str:
    lines = [
        include,
        "#include <stddef.h>",
        "#include <stdio.h>",
        "#define P(name, value) printf(\"%s=%lld\\n\", name, (long long)(value))",
        "int main(void) {",
    ]
    for enum, constants in d["enums"].items():
        lines.append(f'  P("sizeof({enum})", sizeof({enum}));')
        for c in constants:
            # constants as the 32-bit pattern a callback receives in an int
            lines.append(f'  P("{c}", (unsigned int)({c}));')
    for rec, members in d["records"].items():
        lines.append(f'  P("sizeof({rec})", sizeof({rec}));')
        lines.append(f'  P("alignof({rec})", _Alignof({rec}));')
        for m in members:
            lines.append(f'  P("offsetof({rec}, {m})", offsetof({rec}, {m}));')
            lines.append(f'  P("sizeof({rec}.{m})", sizeof((({rec} *)0)->{m}));')
    for s in d["scalars"]:
        lines.append(f'  P("sizeof({s})", sizeof({s}));')
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def build_and_run(cc: str, source: str, tmp_path, name: str, flags=()) -> dict[str, int]:
    src = tmp_path / f"{name}.c"
    exe = tmp_path / name
    src.write_text(source)
    r = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", *flags, str(src), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"{cc} failed on {name}.c:\n{r.stderr}"
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return dict((k, int(v)) for k, v in (line.split("=") for line in out.splitlines()))


def test_values_and_layouts_match_omp_tools_h(decls, tmp_path):
    ours = build_and_run(GCC, printer_source(decls, '#include "omptpy_ompt.h"'), tmp_path,
                         "ours", ["-I", str(CSRC_TOOL)])
    theirs = build_and_run(CLANG, printer_source(decls, "#include <omp-tools.h>"), tmp_path,
                           "theirs")
    assert ours.keys() == theirs.keys()
    diff = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
    assert diff == {}, "omptpy_ompt.h (ours) != omp-tools.h (theirs): " + ", ".join(
        f"{k}: {a} != {b}" for k, (a, b) in diff.items())


def test_callback_numbers_match_records_module(decls):
    """ompt_py.records.EVENTS names the callbacks with the header's numbers."""
    from ompt_py import records as _records

    text = _strip_comments(HEADER.read_text())
    values = {name: int(v) for name, v in re.findall(r"(ompt_callback_\w+)\s*=\s*(\d+)", text)}
    callbacks = {v: k.removeprefix("ompt_callback_") for k, v in values.items()}
    # the records module adds ompt-py's own events past OMPT's numbers (csrc/include/omptpy.h)
    assert callbacks == {k: v for k, v in _records.EVENTS.items() if k < 100}
    own = re.findall(r"#define OMPTPY_EVENT_(\w+) (\d+)", (CSRC_INCLUDE / "omptpy.h").read_text())
    assert own and min(int(v) for _, v in own) > max(callbacks)
    assert {k: v for k, v in _records.EVENTS.items() if k >= 100} == {
        int(v): name.lower() for name, v in own}
    for table, prefix in [
        (_records.WORK_TYPES, "ompt_work_"),
        (_records.SYNC_KINDS, "ompt_sync_region_"),
        (_records.MUTEX_KINDS, "ompt_mutex_"),
        (_records.DISPATCH_KINDS, "ompt_dispatch_"),
        (_records.THREAD_TYPES, "ompt_thread_"),
    ]:
        found = {int(v): k.removeprefix(prefix)
                 for k, v in re.findall(rf"({prefix}\w+)\s*=\s*(\d+)", text)}
        assert table == found, prefix


def test_function_types_compatible_with_omp_tools_h(decls, tmp_path):
    lines = ["#include <omp-tools.h>", ""]
    for decl, name in decls["fnptrs"]:
        mine = "omptpy_check_" + name
        lines.append(re.sub(rf"\(\s*\*\s*{name}\s*\)", f"(*{mine})", decl, count=1))
        lines.append(f'_Static_assert(__builtin_types_compatible_p({mine}, {name}), '
                     f'"{name} differs from omp-tools.h");')
    st = re.sub(r"\bompt_start_tool\s*\(", "(omptpy_check_start_tool)(", decls["start_tool"])
    lines.append(f"typedef {st};")
    lines.append("_Static_assert(__builtin_types_compatible_p(omptpy_check_start_tool, "
                 '__typeof__(ompt_start_tool)), "ompt_start_tool differs from omp-tools.h");')
    src = tmp_path / "fn_check.c"
    src.write_text("\n".join(lines) + "\n")
    r = subprocess.run([CLANG, "-std=c11", "-fsyntax-only", "-Wall", "-Werror", str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
