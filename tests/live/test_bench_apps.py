"""bench/apps.py --quick: it builds its kernels, runs them under every configuration,
and prints one table of the expected shape (timings are not judged: they are the
benchmark's business, on a machine of its own).

The kernels' checksums do not depend on the schedule, so a configuration whose
checksum differs from the run without a tool (a tool that changed a result) fails.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from conftest import PYTHON, REPO, clean_env

BENCH = REPO / "bench" / "apps.py"
CONFIGS = ["none", "noop", "minrec", "file", "reserved", "memory", "profile", "file~",
           "reserved~"]
#: A cell: median (s, or ns per construct for epcc_*), spread, slowdown over no tool.
CELL = re.compile(r"^-?\d+(\.\d+)?(s|ns) (\d+%|n/a) (-?\d+\.\d\dx|n/a)$")


@pytest.mark.needs_clang
@pytest.mark.slow
def test_quick_table(tmp_path):
    out = tmp_path / "apps.json"
    r = subprocess.run([PYTHON, str(BENCH), "--quick", "--json", str(out)], capture_output=True,
                       text=True, env=clean_env(), timeout=900, cwd=tmp_path)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"

    listed = subprocess.run([str(REPO / "bench" / "build" / "apps"), "--list"],
                            capture_output=True, text=True, check=True).stdout
    kernels = [line.split()[0] for line in listed.splitlines()]
    assert {"fib", "nqueens", "sparselu", "sort", "health", "dynamic"} <= set(kernels)
    assert {f"epcc_{c}" for c in ("parallel", "for", "barrier", "single", "critical", "lock",
                                  "reduction", "tasks", "taskwait")} <= set(kernels)

    rows = [[c.strip() for c in line.split("|")] for line in r.stdout.splitlines()
            if line.count("|") == len(CONFIGS) + 2]
    assert rows[0] == ["kernel", "size", "events", *CONFIGS]
    assert [row[0] for row in rows[1:]] == kernels
    for row in rows[1:]:
        assert row[1].isdigit() and row[2].isdigit(), row
        for cfg, cell in zip(CONFIGS, row[3:]):
            assert CELL.match(cell), (cfg, row)
        assert row[3].endswith(" 1.00x"), row  # no tool against itself

    figures = json.loads(out.read_text())
    assert list(figures["kernels"]) == kernels
    assert figures["configs"] == CONFIGS
    assert not figures["disabled"], figures["disabled"]
    assert not [n for n in figures["notes"] if "checksum" in n], figures["notes"]
    for name, k in figures["kernels"].items():
        for cfg in CONFIGS:
            if cfg not in figures["disabled"]:
                assert len(k["configs"][cfg]["values"]) == figures["reps"], (name, cfg)
        for cfg in ("file", "reserved", "memory"):
            assert k["configs"][cfg]["dropped"] == [0] * figures["reps"], (name, cfg)
        # the same runs with the stalls inside each kernel's run taken off: never
        # more, and an EPCC kernel's fastest batch as it was
        for cfg in ("file", "reserved"):
            raw, less = k["configs"][cfg]["values"], k["configs"][cfg + "~"]["values"]
            if name.startswith("epcc_"):
                assert less == raw, (name, cfg)
            else:
                assert all(0 < v <= r for v, r in zip(less, raw)) and len(less) == len(raw), \
                    (name, cfg, raw, less)


@pytest.mark.needs_clang
@pytest.mark.slow
def test_versus_runs_another_build_beside_ompt_pys_own(tmp_path):
    """--configs keeps the chosen configurations (and none); --versus adds the file and
    profile ones again with the tool library given, here a copy of the package's."""
    import ompt_py

    other = tmp_path / "other" / "libomptpy.so"
    other.parent.mkdir()
    shutil.copy(ompt_py.tool_path(), other)
    out = tmp_path / "apps.json"
    r = subprocess.run([PYTHON, str(BENCH), "--quick", "--reps", "1", "--kernels", "fib",
                        "--configs", "file", "profile", "--versus", str(other),
                        "--json", str(out)],
                       capture_output=True, text=True, env=clean_env(), timeout=600, cwd=tmp_path)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    want = ["none", "file", "profile", "file*", "profile*", "file~", "file*~"]
    figures = json.loads(out.read_text())
    assert figures["configs"] == want
    assert figures["versus"] == str(other)
    assert not figures["disabled"], figures["disabled"]
    fib = figures["kernels"]["fib"]["configs"]
    for cfg in want:
        assert len(fib[cfg]["values"]) == 1, cfg
    assert fib["file*"]["dropped"] == [0]
    assert f"--versus tool: {other}" in r.stdout

    bad = subprocess.run([PYTHON, str(BENCH), "--versus", str(tmp_path / "missing.so")],
                         capture_output=True, text=True, env=clean_env(), timeout=60)
    assert bad.returncode == 2 and "give the path of a built libomptpy.so" in bad.stderr
