"""Source attribution (Trace.symbolize, the function and location columns of the
tables): the code addresses the tool records, resolved from the program's binary,
which must be there: with and without debug information, gone, or rebuilt since.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import compile_program, run_with_tool

import ompt_py

pytestmark = pytest.mark.needs_clang


SOURCE = """\
int main(void) {
  int x = 0;
#pragma omp parallel num_threads(2) reduction(+ : x)
  x += 1;
  return x == 2 ? 0 : 1;
}
"""


def traced_source(tmp_path, name: str, flags) -> tuple[Path, Path, Path]:
    """SOURCE as NAME.c, built with FLAGS and run under the tool: (source, program,
    raw directory)."""
    src = tmp_path / f"{name}.c"
    src.write_text(SOURCE)
    exe = compile_program(src, tmp_path / name, flags=flags)
    out = tmp_path / "raw"
    r = run_with_tool([exe], out)
    assert r.returncode == 0, r.stderr
    return src, exe, out


@pytest.mark.any_libomp
@pytest.mark.parametrize("debug", [True, False])
def test_source_attribution(tmp_path, debug):
    src, exe, out = traced_source(tmp_path, "where", ["-g"] if debug else ["-s"])
    t = ompt_py.load(out)
    (region,) = t.parallel_regions().itertuples()
    src_rows = t.symbolize([region.codeptr])
    (row,) = src_rows.itertuples()
    assert row.module == str(exe)
    if debug:
        # the region is started by the call the compiler made for the pragma's line
        assert region.location == f"{src}:3", region.location
        assert region.function == "main"
        assert row.line == 3 and "no line" not in row.how
    else:
        # stripped: no symbols at all; the module and offset still say where
        assert region.location == f"where+{hex(row.offset)}", region.location
        assert row.how == "module + offset only"


@pytest.mark.any_libomp
def test_attribution_of_a_trace_whose_binary_is_gone(tmp_path):
    _, exe, out = traced_source(tmp_path, "gone", ["-g"])
    exe.unlink()
    t = ompt_py.load(out)
    (region,) = t.parallel_regions().itertuples()
    row = t.symbolize([region.codeptr]).iloc[0]
    assert row["how"] == f"module + offset only: {exe} is gone"
    assert region.location == f"gone+{hex(row['offset'])}"
    # everything else still works
    assert len(t.to_pandas()) == len(t.events) and t.written == len(t.events)


@pytest.mark.any_libomp
def test_attribution_of_a_trace_whose_binary_changed(tmp_path):
    src, exe, out = traced_source(tmp_path, "changed", ["-g"])
    # rebuilt from other code: another build id, other addresses
    src.write_text("static int pad[64];\n" + SOURCE.replace("x += 1;", "x += 1 + pad[0];"))
    compile_program(src, exe, flags=["-g"])
    t = ompt_py.load(out)
    (region,) = t.parallel_regions().itertuples()
    row = t.symbolize([region.codeptr]).iloc[0]
    assert row["how"].startswith(f"module + offset only: {exe} changed since the trace")
    assert "build id" in row["how"] and pd.isna(row["function"])


def test_constructs_per_source_name_the_function(programs, tmp_path):
    """Trace.constructs(by="source") names the program's function: known.c's skewed()
    (the other figures of the table: tests/analysis/test_metrics.py)."""
    out = tmp_path / "raw"
    r = run_with_tool([programs.known, "skewed", "200", "5"], out, OMP_SCHEDULE="static")
    assert r.returncode == 0, r.stderr
    s = ompt_py.load(out).constructs(by="source")
    rows = s[(s["construct"] == "work") & (s["kind"] == "loop")]
    (row,) = rows.itertuples()
    assert "skewed" in row.function and row.count == 2  # known.c's skewed()
