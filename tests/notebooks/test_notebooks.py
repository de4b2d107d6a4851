"""The Jupyter side: the example notebooks run top to bottom, and the %%ompt magic in
real kernels (nbclient), attached and not attached (runtime started too early).

Kernels start with the venv's python (jupyter_client runs the ``python3`` kernel
with this interpreter) in a clean environment: no OMP_*/OMPTPY_* settings.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import CLANG, LIBOMP, REPO, clean_env

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
KERNEL = "python3"
CELL_TIMEOUT = 120

# Parallel regions of 2 threads with a dynamic loop of 63 chunks; returns a checksum.
REGIONS_C = r"""
double regions(int n) {
  double s = 0.0;
  for (int r = 0; r < n; r++) {
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : s) num_threads(2)
    for (int i = 0; i < 1000; i++) s += i * 0.5;
  }
  return s;
}
"""
CHUNKS = -(-1000 // 16)  # dispatch events per region

# A kernel that crashes takes what it printed with it (ipykernel forwards its stderr
# to the frontend): its start-up file sends faulthandler's stacks to a file instead.
FAULT_LOG = "NOTEBOOK_TEST_FAULT_LOG"
FAULTHANDLER = f"""\
import faulthandler
import os

if os.environ.get("{FAULT_LOG}"):
    faulthandler.enable(open(os.environ["{FAULT_LOG}"], "a"), all_threads=True)
"""


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A clean environment for kernels; installs the python3 kernelspec into a
    temporary JUPYTER_PATH (here and in the kernels) when it cannot be found, and an
    IPython start-up file that enables faulthandler into the file FAULT_LOG names."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    env = clean_env()
    ipython_dir = tmp_path_factory.mktemp("ipython")
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-faulthandler.py").write_text(FAULTHANDLER)
    env["IPYTHONDIR"] = str(ipython_dir)
    with pytest.MonkeyPatch.context() as mp:
        try:
            KernelSpecManager().get_kernel_spec(KERNEL)
        except NoSuchKernel:
            import ipykernel.kernelspec

            prefix = tmp_path_factory.mktemp("jupyter")
            ipykernel.kernelspec.install(prefix=str(prefix), kernel_name=KERNEL)
            env["JUPYTER_PATH"] = str(prefix / "share" / "jupyter")
            mp.setenv("JUPYTER_PATH", env["JUPYTER_PATH"])
        yield env


@pytest.fixture(scope="module")
def regions_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libregions.so: regions(n) runs n parallel regions of 2 threads (clang-19)."""
    d = tmp_path_factory.mktemp("regions")
    (d / "regions.c").write_text(REGIONS_C)
    out = d / "libregions.so"
    subprocess.run([CLANG, "-O2", "-g", "-fopenmp", "-shared", "-fPIC", "regions.c", "-o",
                    out.name], cwd=d, check=True)
    return out


def execute(nb, env: dict[str, str], cwd: Path) -> None:
    """Runs every cell of ``nb`` in a fresh kernel; fails the test with the first
    unexpected error (cells tagged ``raises-exception`` may fail)."""
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT,
                                     resources={"metadata": {"path": str(cwd)}})
    faults = cwd / "kernel-faults.txt"
    try:
        client.execute(env={**env, FAULT_LOG: str(faults)})
    except nbclient.exceptions.CellExecutionError as e:
        pytest.fail("a cell raised:\n" + plain(str(e)))
    except nbclient.exceptions.DeadKernelError:
        said = faults.read_text() if faults.exists() else ""
        pytest.fail("the kernel died: " + (f"its threads at the fault (faulthandler):\n{said}"
                                           if said.strip() else
                                           "killed (no fault: faulthandler wrote nothing)"))


def plain(s: str) -> str:
    """``s`` without terminal colours (Python 3.13 colours its tracebacks)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", s)


def notebook(*cells: str | tuple[str, list[str]]):
    """A notebook of code cells; a (source, tags) pair gives the cell tags."""
    nb = nbformat.v4.new_notebook()
    for cell in cells:
        source, tags = cell if isinstance(cell, tuple) else (cell, [])
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"tags": tags}))
    return nb


def text(cell) -> str:
    """Everything a cell printed (stdout and stderr) and its error, as one string."""
    parts = []
    for o in cell.outputs:
        if o.output_type == "stream":
            parts.append(o.text)
        elif o.output_type == "error":
            parts.append(f"{o.ename}: {o.evalue}")
    return plain("".join(parts))


def mime(cell, kind: str) -> list[str]:
    """The ``kind`` data (e.g. text/html) of the cell's display and result outputs."""
    return [o.data[kind] for o in cell.outputs
            if o.output_type in ("display_data", "execute_result") and kind in o.data]


def printed_json(cell) -> dict:
    return json.loads(text(cell).strip().splitlines()[-1])


# What a cell reports about a trace variable: regions, their team sizes, event counts.
REPORT = """\
import json, os
_df = {var}.to_pandas()
print(json.dumps({{
    "regions": len({var}.parallel_regions()),
    "team_sizes": sorted(set({var}.parallel_regions()["team_size"].tolist())),
    "parallel_begin": int((_df["event"] == "parallel_begin").sum()),
    "dispatch": int((_df["event"] == "dispatch").sum()),
    "same_pid": {var}.meta["processes"][0]["pid"] == os.getpid(),
}}))
"""


@pytest.mark.needs_clang
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_env: dict[str, str], tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    stored = [i for i, c in enumerate(nb.cells)
              if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not stored, f"{path.name} is stored with outputs in cells {stored}: clear them"
    assert "%load_ext ompt_py" in nb.cells[[c.cell_type for c in nb.cells].index("code")].source
    execute(nb, kernel_env, tmp_path)


def test_notebooks_exist() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01-quickstart.ipynb", "02-scheduling.ipynb", "03-tasks-and-locks.ipynb"]


@pytest.mark.needs_clang
def test_magic_traces_the_cell(kernel_env: dict[str, str], regions_lib: Path,
                               tmp_path: Path) -> None:
    nb = notebook(
        "%load_ext ompt_py",
        f"import ctypes\nlib = ctypes.CDLL({str(regions_lib)!r})\n"
        "lib.regions.restype = ctypes.c_double",
        "%%ompt -o tr\nlib.regions(5)",
        REPORT.format(var="tr"),
        "%%ompt --no-plot\nlib.regions(2)",
        REPORT.format(var="_ompt"),
        ("%%ompt -o failed\nlib.regions(3)\nraise ValueError('cell failed')",
         ["raises-exception"]),
        REPORT.format(var="failed"),
        "%%ompt -q -o quiet\nlib.regions(1);",
        REPORT.format(var="quiet"),
        "%%ompt -o empty\nx = 1",
        ("%%ompt --setup SETUP\nlib.regions(1)", ["raises-exception"]),
        ("%%ompt -o 2x\nlib.regions(1)", ["raises-exception"]),
        "%%ompt -q -o nostacks --python-stacks off\nlib.regions(1)",
        "print(nostacks.to_pandas()['py_stack'].notna().any(), nostacks.summary().python,\n"
        "      nostacks.meta['processes'][0]['python']['status'])",
        ("%%ompt --python-stacks sometimes\nlib.regions(1)", ["raises-exception"]),
    )
    execute(nb, kernel_env, tmp_path)
    cells = nb.cells
    assert cells[2].outputs[-1].output_type == "execute_result"  # the cell's value
    assert float(cells[2].outputs[-1].data["text/plain"]) == 5 * 249750.0
    html = "".join(mime(cells[2], "text/html"))
    assert "ompt-py summary" in html and "Time per construct" in html, text(cells[2])
    # the cell's line that started the regions, first
    assert "Time per Python location" in html
    assert ("most time in OpenMP from one Python line: &lt;%%ompt cell&gt;:1 in &lt;module&gt;"
            in html)
    assert html.count("<iframe srcdoc=") == 1, "the interactive view"
    assert "Bokeh" in html and not mime(cells[2], "image/png")
    assert printed_json(cells[3]) == {"regions": 5, "team_sizes": [2], "parallel_begin": 5,
                                      "dispatch": 5 * CHUNKS, "same_pid": True}
    assert "ompt-py summary" in "".join(mime(cells[4], "text/html"))
    assert not mime(cells[4], "image/png"), "--no-plot shows no timeline"
    assert "<iframe" not in "".join(mime(cells[4], "text/html"))
    assert printed_json(cells[5])["regions"] == 2
    assert "ValueError: cell failed" in text(cells[6])
    assert "the trace up to the error is in failed" in text(cells[6])
    assert printed_json(cells[7])["regions"] == 3
    assert not cells[8].outputs, "-q shows nothing, and ';' hides the value"
    assert printed_json(cells[9])["regions"] == 1
    assert "no OpenMP events were recorded" in text(cells[10])
    assert "--setup applies to --subprocess only" in text(cells[11])
    assert "-o 2x: give a Python variable name" in text(cells[12])
    assert text(cells[14]).strip() == "False None off"
    assert "--python-stacks sometimes: use on, off or the number of frames" in text(cells[15])


@pytest.mark.needs_clang
def test_magic_when_the_runtime_started_first(kernel_env: dict[str, str], regions_lib: Path,
                                              tmp_path: Path) -> None:
    """libomp initialised before %load_ext: the cell says why and what to do, does not
    run, and --subprocess brings back a trace of a fresh process."""
    nb = notebook(
        f"import ctypes\nctypes.CDLL({str(LIBOMP)!r}).omp_get_max_threads()",
        "%load_ext ompt_py",
        f"lib = ctypes.CDLL({str(regions_lib)!r})",
        ("%%ompt\nran = True\nlib.regions(3)", ["raises-exception"]),
        "print('ran' in globals())",
        f"SETUP = {f'import ctypes; lib = ctypes.CDLL({str(regions_lib)!r})'!r}",
        "%%ompt --subprocess --setup SETUP -o sub\nlib.regions(4)\nprint('in the subprocess')",
        REPORT.format(var="sub"),
        ("%%ompt --subprocess\nlib.regions(1)", ["raises-exception"]),
        ("%%ompt --subprocess --setup NOT_DEFINED\nlib.regions(1)", ["raises-exception"]),
        "%%ompt -q --subprocess --setup SETUP -o deep3 --python-stacks 3\nlib.regions(1)",
        "print(deep3.meta['processes'][0]['python']['depth'],\n"
        "      deep3.parallel_regions()['py_location'].tolist())",
    )
    execute(nb, kernel_env, tmp_path)
    cells = nb.cells
    message = text(cells[3])
    for part in ("cannot trace this kernel", "was initialised before ompt_py was imported",
                 "first cell", "restart the kernel", "%%ompt --subprocess", "--setup"):
        assert part in message, message
    assert text(cells[4]).strip() == "False", "the cell did not run untraced"
    assert "in the subprocess" in text(cells[6])
    assert "ompt-py summary" in "".join(mime(cells[6], "text/html"))
    assert "<iframe srcdoc=" in "".join(mime(cells[6], "text/html"))
    assert printed_json(cells[7]) == {"regions": 4, "team_sizes": [2], "parallel_begin": 4,
                                      "dispatch": 4 * CHUNKS, "same_pid": False}
    assert "NameError: name 'lib' is not defined" in text(cells[8])
    assert "the subprocess failed" in text(cells[8])
    # the setting reaches the subprocess; its cell is a file of its own
    depth, where = text(cells[11]).split(" ", 1)
    assert depth == "3" and re.fullmatch(r"\['.*cell\.py:1 in <module>'\]\s*", where), where
    assert "--setup NOT_DEFINED" in text(cells[9]) and "no such variable" in text(cells[9])
