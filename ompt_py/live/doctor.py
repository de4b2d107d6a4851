"""`ompt-py doctor` and `ompt_py.doctor()`: can this process be traced, and if
not, why, and what to do; `ompt-py doctor -- PROGRAM`: which OpenMP runtime a
program links, and whether `ompt-py run` can trace it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from . import attach, runtime


def findings() -> dict:
    """What the report is made of: runtimes, which module links which, problems."""
    runtimes = runtime.mapped_runtimes()
    problems = attach.problems()
    llvm = [r for r in runtimes if r.family == "llvm"]
    if len(llvm) > 1 and attach.duplicates_allowed() and attach.FALLBACK.how == "loaded":
        problems.append(
            "several LLVM/Intel OpenMP runtimes with KMP_DUPLICATE_LIB_OK, and the fallback "
            "put one into the global scope, where it takes over the calls of copies not "
            "loaded with RTLD_DEEPBIND: run with OMPTPY_RUNTIME=off"
        )
    st = attach.status()
    return {
        "tool_path": st["tool_path"],
        "attached": st["attached"],
        "attached_runtimes": [r["path"] for r in st["runtimes"] if r["initialized"]],
        "fallback": st["fallback"],
        "bundled_libomp": runtime.BUNDLED if os.path.exists(runtime.BUNDLED) else None,
        "system_libomp": runtime.system_libomp(),
        "mapped_runtimes": [{"path": r.path, "family": r.family} for r in runtimes],
        "modules": st["modules"],
        "problems": problems,
    }


def report() -> str:
    """The findings as text (what ``ompt-py doctor`` prints)."""
    return _text(findings())


def _installation(f: dict) -> list[str]:
    """The report's lines on this installation: the tool, the runtimes it can use."""
    fb = f["fallback"]
    return [
        f"ompt-py tool: {f['tool_path']}",
        f"bundled libomp: {f['bundled_libomp'] or 'none'}; system libomp: "
        f"{f['system_libomp'] or 'none'}",
        f"runtime fallback: policy {fb['policy']}"
        + (f", {fb['how']} {fb['libomp']}" if fb["libomp"] else ", no LLVM libomp in use"),
    ]


def _text(f: dict) -> str:
    lines = [
        *_installation(f),
        "tool attached to: " + (", ".join(f["attached_runtimes"]) or
                                "no runtime yet (it attaches when one starts)"),
        "OpenMP runtimes mapped:",
        *(f"  {r['family']:4s} {r['path']}" for r in f["mapped_runtimes"]),
        *([] if f["mapped_runtimes"] else ["  none"]),
        "modules linking an OpenMP runtime:",
        *(f"  {m['module']} -> {', '.join(m['links'])}" for m in f["modules"]),
        *([] if f["modules"] else ["  none"]),
    ]
    if f["problems"]:
        lines += ["problems:", *(f"  - {p}" for p in f["problems"])]
    else:
        lines.append("no problems found")
    return "\n".join(lines) + "\n"


@dataclass
class Diagnosis:
    """What ``ompt_py.doctor()`` found (``findings``: the facts, ``problems``: what
    stops tracing, each with what to do); shows as the report."""

    findings: dict

    @property
    def problems(self) -> list[str]:
        return self.findings["problems"]

    def __str__(self) -> str:
        return _text(self.findings)

    __repr__ = __str__


def doctor() -> Diagnosis:
    """Can this process be traced, and if not, why and what to do: the OpenMP
    runtimes mapped, which module links which, the runtime fallback, and the
    problems found.  Shows as text (``print(ompt_py.doctor())``)."""
    return Diagnosis(findings())


#: A line of ldd's list: ``NAME => PATH (ADDRESS)``, ``NAME => not found`` or ``PATH (ADDRESS)``.
_LDD_LINE = re.compile(r"^\s*(\S+)(?:\s+=>\s+(.*?))?(?:\s+\(0x[0-9a-f]+\))?\s*$")


def program_findings(path: str) -> dict:
    """What ``ompt-py doctor -- PROGRAM`` reports, without running it: the OpenMP
    runtimes the executable ``path`` links (directly or through its libraries: the
    dynamic loader's list, as ldd prints it), the libomp ``ompt-py run`` would run
    libgomp-built code on (OMPTPY_RUNTIME), and the problems, each with what to do."""
    libomp = runtime.launcher_libomp(os.environ.get("OMPTPY_RUNTIME"))
    found = {"program": path, "runtimes": [], "fallback_libomp": libomp, "problems": []}
    problems = found["problems"]
    with open(path, "rb") as f:
        head = f.read(128)
    if head.startswith(b"#!"):
        interpreter = head[2:].split(b"\n")[0].decode(errors="replace").strip()
        problems.append(f"{path} is a script ({interpreter}): doctor reads the libraries of "
                        "an executable; give it the program the script runs (ompt-py run "
                        "traces every program a script starts)")
        return found
    ldd = shutil.which("ldd")
    listed = (subprocess.run([ldd, path], capture_output=True, text=True, timeout=60)
              if ldd else None)
    if listed is None or listed.returncode != 0:
        why = (listed.stdout + listed.stderr).strip() if listed else "ldd is not installed"
        problems.append(f"cannot list the libraries {path} links ({why}); a static "
                        "executable carries its OpenMP runtime inside, which ompt-py can "
                        "trace only if it is LLVM libomp")
        return found
    for line in listed.stdout.splitlines():
        m = _LDD_LINE.match(line)
        if m and (family := runtime.runtime_family(m.group(1))):
            found["runtimes"].append({"name": m.group(1), "path": m.group(2) or m.group(1),
                                      "family": family})
    for r in found["runtimes"]:
        if r["path"] == "not found":
            problems.append(f"{r['name']} is not found: the program cannot start; install it "
                            "or add its folder to LD_LIBRARY_PATH")
        elif r["family"] == "gnu" and libomp is None:
            problems.append(f"{r['name']} is GNU libgomp, which has no tool interface, and the "
                            "runtime fallback is off (OMPTPY_RUNTIME=off, or ompt-py run "
                            "--runtime off): leave it on (auto), or build with clang -fopenmp")
    if not found["runtimes"]:
        problems.append(f"{path} links no OpenMP runtime: ompt-py has nothing to trace in it, "
                        "unless it loads one itself (dlopen) or starts programs that do "
                        "(ompt-py run traces those)")
    return found


def program_report(path: str) -> str:
    """``program_findings`` as text, after the lines on this installation."""
    f = program_findings(path)
    lines = [*_installation(findings()), f"program: {f['program']}", "OpenMP runtimes it links:"]
    for r in f["runtimes"]:
        traced = ("not found" if r["path"] == "not found" else
                  "LLVM libomp: ompt-py run traces it" if r["family"] == "llvm" else
                  f"GNU libgomp: ompt-py run runs it on {f['fallback_libomp']}, traced"
                  if f["fallback_libomp"] else "GNU libgomp: not traced, the fallback is off")
        lines.append(f"  {r['name']} => {r['path']} ({traced})")
    if not f["runtimes"]:
        lines.append("  none")
    if f["problems"]:
        lines += ["problems with it:", *(f"  - {p}" for p in f["problems"])]
    else:
        lines.append(f"no problems found: ompt-py run -- {f['program']} traces it")
    return "\n".join(lines) + "\n"
