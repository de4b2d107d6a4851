"""`ompt-py doctor` and `ompt_py.doctor()`: can this process be traced, and if
not, why, and what to do."""

from __future__ import annotations

import os
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


def _text(f: dict) -> str:
    fb = f["fallback"]
    lines = [
        f"ompt-py tool: {f['tool_path']}",
        f"bundled libomp: {f['bundled_libomp'] or 'none'}; system libomp: "
        f"{f['system_libomp'] or 'none'}",
        f"runtime fallback: policy {fb['policy']}"
        + (f", {fb['how']} {fb['libomp']}" if fb["libomp"] else ", no LLVM libomp in use"),
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
