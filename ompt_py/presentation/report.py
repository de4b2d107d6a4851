"""The report of `ompt-py report`: what ran, how long, who waited, what to do; as
text laid out for the terminal's width (ompt_py.layout: plain, or in colour on a
terminal) and as one HTML page.  Its answers and tables are Trace.summary()'s, in
one vocabulary (records.CONSTRUCTS, normalised kinds) and unit style (ompt_py.units)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pandas as pd

from ..analysis import summary, tables
from ..io.mpi import describe
from ..layout import Document, terminal_width
from ..meta import why_empty
from ..units import format_ns, shorten

if TYPE_CHECKING:
    from ..profile import Profile
    from ..trace import Trace


def _python_status(py: dict) -> str:
    """A process's Python stack capture (meta python_entry) in a few words."""
    if py.get("status") != "on":
        return f"{py.get('status')}: {py['reason']}" if py.get("reason") else str(py.get("status"))
    kept = sum(1 for s in py.get("stacks", []) if s)
    text = f"on, {kept:,} stacks of up to {py.get('depth', '?')} frames"
    refused = [f"{py[k]:,} {k.split('_')[0]}" for k in ("stacks_refused", "codes_refused")
               if py.get(k)]
    if refused:
        text += f"; not kept (the tool's tables were full): {', '.join(refused)}"
    return text


def _command(doc: Document, pid: int, argv: list[str], rank: int | None = None) -> None:
    """``pid N: command`` (``rank R (pid N): command`` for a rank of a job), the
    command shortened in the middle to the width."""
    head = f"pid {pid}: " if rank is None else f"rank {rank} (pid {pid}): "
    doc.lines.append([("  " + head, ""), (shorten(" ".join(argv), doc.width - 2 - len(head)),
                                          "name")])


def _processes(doc: Document, trace: Trace) -> None:
    meta = trace.meta
    # the ranks of a job in rank order, then the processes without a rank
    for p in sorted(meta["processes"], key=lambda p: (p.get("rank") is None, p.get("rank") or 0)):
        rt = ", ".join(sorted({r["version"] for r in p["runtimes"]})) or "no runtime attached"
        state = "complete" if p.get("complete") else "incomplete (no final flush: killed or _exit)"
        if p.get("truncated"):
            state += ", file truncated"
        lost = (f", lost {p['lost']:,} ({'; '.join(p.get('lost_reasons', {}))})"
                if p.get("lost") else "")
        _command(doc, p["pid"], p["argv"], p.get("rank"))
        doc.prose(f"runtime: {rt}; clock {p['clock']}; {state}; ending "
                  f"{p.get('ending', 'unknown')}", indent=4)
        doc.prose(f"records written {p['written']:,}, dropped {p['dropped']:,}{lost}",
                  indent=4, style="warning" if p["dropped"] or p.get("lost") else "")
        if p.get("clock_alignment"):
            doc.prose(f"host {p.get('hostname')}; clock: {describe(p['clock_alignment'])}",
                      indent=4)
        if p.get("python"):
            doc.prose(f"python stacks: {_python_status(p['python'])}", indent=4)
    if meta.get("dropped"):
        doc.prose(f"WARNING: {meta['dropped']:,} records were dropped because buffers were "
                  "full; raise OMPTPY_BUFFER_SIZE or use OMPTPY_OVERFLOW=flush|grow",
                  style="warning")


def _threads(trace: Trace, totals: pd.DataFrame) -> pd.DataFrame:
    """The summary's thread states with each thread's type and records written and
    dropped (the process's meta)."""
    written = {(p["pid"], t["thread"]): t for p in trace.meta["processes"] for t in p["threads"]}
    found = [written.get(k, {}) for k in zip(totals["pid"], totals["thread"])]
    out = totals.copy()
    out.insert(2, "type", [t.get("type", "?") for t in found])
    out["written"] = pd.array([t.get("written") for t in found], "Int64")
    out["dropped"] = pd.array([t.get("dropped") for t in found], "Int64")
    return out


def document(trace: Trace, top: int = 10, width: int | None = None) -> Document:
    """The report as a layout.Document of ``width`` columns (None: the terminal's):
    the processes, the summary's answers, advice and tables (Trace.summary(): one
    vocabulary), the events and each thread's records."""
    doc = Document(width or terminal_width())
    times = trace.events["time_ns"]
    span = int(times.max() - times.min()) if len(times) else 0
    doc.heading(f"ompt-py trace: {len(times):,} events over {format_ns(span)}, "
                f"{len(trace.meta['processes'])} process(es)")
    _processes(doc, trace)
    if len(times):
        answers = summary.summary(trace, top=top)
        if answers.threads is not None:
            answers = replace(answers, threads=_threads(trace, answers.threads))
        answers.write(doc, overview=False)
    else:
        doc.prose(why_empty(trace.meta), style="warning")
    doc.heading("Events")
    counts = tables.event_counts(trace)
    doc.table(pd.DataFrame({"event": counts.index.tolist(),
                            "count": [f"{c:,}" for c in counts.tolist()]}), names=["event"])
    return doc


def render(trace: Trace, top: int = 10, width: int | None = None) -> str:
    """The whole report as plain text, ``width`` columns (None: the terminal's)."""
    return document(trace, top, width).text()


def _profile_processes(doc: Document, prof: Profile) -> None:
    """The processes of a profile and what each lost."""
    for p in prof.meta["processes"]:
        overflow = sum(s["overflow"] for s in p["slots"])
        threads = sum(len(s["threads"]) for s in p["slots"])
        _command(doc, p["pid"], p.get("argv", []))
        doc.prose(f"{threads} thread(s); aggregates not made (tables full) {overflow:,}, "
                  f"threads without tables {p['unmapped']:,}", indent=4)
    for s in prof.meta.get("skipped", []):
        doc.prose(f"left out: {s['source']}: {s['reason']}", style="warning")


def profile_document(prof: Profile, top: int = 10, width: int | None = None) -> Document:
    """The report of a profile (layout.Document): its processes and the summary's
    answers, advice and tables (analysis.profile.summary: the trace's sections
    where a profile has the data)."""
    doc = Document(width or terminal_width())
    doc.heading(f"ompt-py profile: {len(prof.meta['processes'])} process(es)")
    _profile_processes(doc, prof)
    prof.summary(top=top).write(doc)
    return doc


def render_profile(prof: Profile, top: int = 10, width: int | None = None) -> str:
    """The report of a profile as plain text (see profile_document)."""
    return profile_document(prof, top, width).text()


def render_profile_html(prof: Profile, top: int = 10, title: str = "") -> str:
    """One HTML page of a profile: its processes and the summary tables."""
    import html

    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>ompt-py profile {html.escape(title)}</title><style>{_HTML_STYLE}</style>"
            f"</head><body><h1>ompt-py profile {html.escape(title)}</h1><h2>Processes</h2>"
            f"<pre>{html.escape(_profile_text(prof))}</pre><h2>Summary</h2>"
            f"{prof.summary(top=top)._repr_html_()}</body></html>\n")


def _profile_text(prof: Profile) -> str:
    doc = Document(terminal_width())
    _profile_processes(doc, prof)
    return doc.text()


_HTML_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { padding: 0.2em 0.8em; text-align: right; border-bottom: 1px solid #ddd; }
th { background: #f2f2f2; }
img { max-width: 100%; }
"""


def render_html(trace: Trace, top: int = 10, title: str = "") -> str:
    """One self-contained HTML page: the processes, the summary tables
    (ompt_py.analysis.summary.Summary) and the plots as embedded PNG images."""
    import html

    from . import plots

    def image(fig: plots.Figure) -> str:
        return f"<img src='{plots.png_data_uri(fig)}'>"

    answers = summary.summary(trace, top=top)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
             f"<title>ompt-py report {html.escape(title)}</title><style>{_HTML_STYLE}</style>"
             f"</head><body><h1>ompt-py report {html.escape(title)}</h1>",
             "<h2>Processes</h2>", summary.processes(trace).to_html(index=False, border=0),
             "<h2>Summary</h2>", answers._repr_html_()]
    if len(trace):
        parts += ["<h2>Timeline and thread states</h2>", image(plots.overview(trace))]
    if answers.regions is not None and len(answers.regions):
        parts += ["<h2>Load imbalance</h2>", image(plots.imbalance(trace, top=top))]
    if answers.tasks is not None:
        parts += ["<h2>Task durations</h2>", image(plots.task_durations(trace))]
    if answers.locks is not None and len(answers.locks):
        parts += ["<h2>Lock contention</h2>", image(plots.locks(trace, top=top))]
    parts.append("</body></html>\n")
    return "\n".join(parts)
