"""The report of `ompt-py report`: what ran, how long, who waited; as text for the
terminal and as one HTML page."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import pandas as pd

from ..analysis import metrics, offload, summary, tables
from ..analysis.states import THREAD_STATES, thread_totals
from ..errors import MissingEventsError
from ..meta import why_empty
from ..units import format_ns

if TYPE_CHECKING:
    from ..profile import Profile
    from ..trace import Trace


def _stats(durations: pd.Series) -> dict:
    return {"count": len(durations), "total": format_ns(durations.sum()),
            "mean": format_ns(durations.mean()), "p50": format_ns(durations.median()),
            "max": format_ns(durations.max())}


def _table(rows: list[dict] | pd.DataFrame, group: str | None = None,
           left: str | None = None) -> str:
    """The rows as an indented text table.  ``group``: a column whose value heads
    the rows that have it, on a line of its own (the groups in the order of their
    first rows), instead of being a column; ``left``: a column aligned left."""
    frame = pd.DataFrame(rows)
    if frame.empty:
        return "  (none)\n"
    if left is not None:
        text = frame[left].astype(str)
        width = max(int(text.str.len().max()), len(left))
        frame[left] = text.str.ljust(width)
        frame = frame.rename(columns={left: left.ljust(width)})
    if group is None:
        return "".join("  " + line + "\n" for line in frame.to_string(index=False).splitlines())
    first = frame.groupby(group, sort=False).ngroup()
    frame = frame.iloc[first.argsort(kind="stable")].reset_index(drop=True)
    header, *lines = frame.drop(columns=group).to_string(index=False).splitlines()
    out = ["    " + header + "\n"]
    for i, line in enumerate(lines):
        if i == 0 or frame[group].iat[i] != frame[group].iat[i - 1]:
            out.append(f"  {frame[group].iat[i]}\n")
        out.append("    " + line + "\n")
    return "".join(out)


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


def _python_lines(trace: Trace, top: int) -> str:
    """Per Python location (metrics.constructs by="python"): the time of what it
    started, and how many parallel regions, explicit tasks and region markers."""
    by = metrics.constructs(trace, by="python")
    rows = []
    for where, g in by.groupby("py_location", sort=False):
        counted = g.groupby("construct", observed=True)["count"].sum()
        rows.append({"python": where, "time": format_ns(g["py_time_ns"].iloc[0]),
                     **{name: int(counted.get(construct, 0)) for name, construct in (
                         ("regions", "parallel region"), ("tasks", "task"),
                         ("markers", "user region"))}})
    return _table(rows[:top], left="python")


def render(trace: Trace, top: int = 10) -> str:
    """The whole report as text."""
    out = io.StringIO()
    meta = trace.meta
    df = tables.frame(trace)  # the frame and pairings summary() below uses too
    span = (df["time_ns"].max() - df["time_ns"].min()) if len(df) else 0
    out.write(f"ompt-py trace: {len(df):,} events over {format_ns(span)}, "
              f"{len(meta['processes'])} process(es)\n")
    for p in meta["processes"]:
        rt = ", ".join(sorted({r["version"] for r in p["runtimes"]})) or "no runtime attached"
        state = "complete" if p.get("complete") else "incomplete (no final flush: killed or _exit)"
        if p.get("truncated"):
            state += ", file truncated"
        lost = (f", lost {p['lost']:,} ({'; '.join(p.get('lost_reasons', {}))})"
                if p.get("lost") else "")
        out.write(f"  pid {p['pid']}: {' '.join(p['argv'])[:100]}\n"
                  f"    runtime: {rt}; clock {p['clock']}; {state}; "
                  f"ending {p.get('ending', 'unknown')}\n"
                  f"    records written {p['written']:,}, dropped {p['dropped']:,}{lost}\n")
        if p.get("python"):
            out.write(f"    python stacks: {_python_status(p['python'])}\n")
    if meta.get("dropped"):
        out.write(f"  WARNING: {meta['dropped']:,} records were dropped because buffers were full; "
                  "raise OMPTPY_BUFFER_SIZE or use OMPTPY_OVERFLOW=flush|grow\n")

    if len(df):
        # The short answers of Trace.summary() (what the HTML report details).
        out.write("\nAnswers\n")
        for line in summary.summary(trace, top=top).headline()[1:]:
            out.write(f"  {line}\n")
    else:
        out.write(f"  {why_empty(meta)}\n")
    python = metrics.has_python_stacks(trace)
    if python and len(df):
        out.write(f"\nPython lines (top {top} by the time of the constructs they started)\n")
        out.write(_python_lines(trace, top))

    out.write("\nEvents\n")
    counts = df["event"].value_counts()
    out.write(_table([{"event": e, "count": int(c)} for e, c in counts.items() if c]))

    regions = tables.region_intervals(trace)
    implicit = tables.implicit_intervals(trace)
    waits = tables.wait_intervals(trace)
    work = tables.work_intervals(trace)
    masked = tables.masked_intervals(trace)
    pieces = tables.task_pieces(trace)
    mutex = tables.mutex_waits(trace)

    out.write("\nConstructs (time between begin and end)\n")
    rows = [{"construct": "parallel region", **_stats(regions.table["duration_ns"])},
            {"construct": "implicit task", **_stats(implicit.table["duration_ns"])}]
    for kind, g in work.table.groupby("kind_raw", observed=True):
        rows.append({"construct": f"work: {kind}", **_stats(g["duration_ns"])})
    for kind, g in waits.table.groupby("kind_raw", observed=True):
        rows.append({"construct": f"wait: {kind}", **_stats(g["duration_ns"])})
    for kind, g in mutex.groupby("kind", observed=True) if not mutex.empty else []:
        rows.append({"construct": f"wait for {kind}", **_stats(g["duration_ns"])})
    if not masked.table.empty:
        rows.append({"construct": "masked", **_stats(masked.table["duration_ns"])})
    if not pieces.empty:
        rows.append({"construct": "explicit task (running)", **_stats(pieces["duration_ns"])})
    out.write(_table(rows))

    unmatched = [(name, iv.unmatched_begins, iv.unmatched_ends)
                 for name, iv in (("parallel", regions), ("implicit_task", implicit),
                                  ("work", work), ("sync_region_wait", waits),
                                  ("masked", masked))
                 if iv.unmatched_begins or iv.unmatched_ends]
    if unmatched:
        out.write("  unmatched (begin or end outside the trace window; libomp reports a "
                  "worker's last implicit-barrier end at the next region): "
                  + "; ".join(f"{n}: {b} begins, {e} ends" for n, b, e in unmatched) + "\n")

    r = tables.parallel_regions(trace)
    keys = ["pid", "location"]
    if python:
        out.write(f"\nParallel regions by Python and source location (top {top} by total "
                  "time)\n")
        keys.insert(1, "py_location")
        r = r.assign(py_location=r["py_location"].fillna(metrics.NO_PYTHON))
    else:
        out.write(f"\nParallel regions by source location (top {top} by total time)\n")
    if r.empty:
        out.write("  (none)\n")
    else:
        by_site = r.groupby(keys, dropna=False).agg(
            count=("duration_ns", "size"), total=("duration_ns", "sum"),
            mean=("duration_ns", "mean"), team=("requested_team_size", "max"),
            invoker=("invoker", "first"),
        ).sort_values("total", ascending=False).head(top).reset_index()
        out.write(_table([{
            "pid": int(x.pid),
            **({"python": x.py_location} if python else {}),
            "location": x.location if isinstance(x.location, str) else "-",
            "regions": int(x.count), "total": format_ns(x.total), "mean": format_ns(x.mean),
            "team size": int(x.team) if pd.notna(x.team) else "-",
            "invoker": x.invoker,
        } for x in by_site.itertuples()], group="python" if python else None))

    if offload.has_offload(trace):
        out.write(f"\n{summary.OFFLOAD_HEADING}\n")
        out.write(_table(summary.offload_display(offload.offload_totals(trace)).assign(
            target_ns=lambda f: f["target_ns"].map(format_ns),
            blocked_ns=lambda f: f["blocked_ns"].map(format_ns),
            transfer_ns=lambda f: f["transfer_ns"].map(format_ns),
            kernel_ns=lambda f: f["kernel_ns"].map(format_ns),
            device_kernel_ns=lambda f: f["device_kernel_ns"].map(format_ns),
            device_transfer_ns=lambda f: f["device_transfer_ns"].map(format_ns)).rename(
            columns=lambda c: c.removesuffix("_ns"))))

    out.write("\nThreads (busy and waiting: the thread states of Trace.summary())\n")
    out.write(_threads(trace))
    return out.getvalue()


def _threads(trace: Trace) -> str:
    """Per thread: its time busy and waiting (the thread states), and its records."""
    written = {(p["pid"], t["thread"]): t for p in trace.meta["processes"] for t in p["threads"]}
    try:
        totals = thread_totals(trace)
    except MissingEventsError as e:
        return f"  (no thread states: {e})\n"
    rows = []
    for x in totals.itertuples():
        th = written.get((x.pid, x.thread), {})
        waiting = sum(getattr(x, f"{s}_ns") for s in THREAD_STATES[1:])
        working = x.busy_ns + waiting
        rows.append({
            "pid": int(x.pid), "thread": int(x.thread), "type": th.get("type", "?"),
            "busy": format_ns(x.busy_ns), "waiting": format_ns(waiting),
            "waiting %": f"{100 * waiting / working:.1f}" if working else "-",
            "idle": format_ns(x.idle_ns),
            "written": th.get("written", "-"), "dropped": th.get("dropped", "-"),
        })
    return _table(rows)


def _profile_processes(prof: Profile) -> str:
    """The processes of a profile and what each lost."""
    out = []
    for p in prof.meta["processes"]:
        overflow = sum(s["overflow"] for s in p["slots"])
        threads = sum(len(s["threads"]) for s in p["slots"])
        out.append(f"  pid {p['pid']}: {' '.join(p.get('argv', []))[:100]}\n"
                   f"    {threads} thread(s); aggregates not made (tables full) {overflow:,}, "
                   f"threads without tables {p['unmapped']:,}\n")
    for s in prof.meta.get("skipped", []):
        out.append(f"  left out: {s['source']}: {s['reason']}\n")
    return "".join(out)


def render_profile(prof: Profile, top: int = 10) -> str:
    """The report of a profile as text: its processes and the summary's answers and
    tables (analysis.profile.summary: the trace's sections where a profile has the
    data)."""
    answers = prof.summary(top=top)
    return (f"ompt-py profile: {len(prof.meta['processes'])} process(es)\n"
            + _profile_processes(prof) + "\n" + str(answers))


def render_profile_html(prof: Profile, top: int = 10, title: str = "") -> str:
    """One HTML page of a profile: its processes and the summary tables."""
    import html

    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>ompt-py profile {html.escape(title)}</title><style>{_HTML_STYLE}</style>"
            f"</head><body><h1>ompt-py profile {html.escape(title)}</h1><h2>Processes</h2>"
            f"<pre>{html.escape(_profile_processes(prof))}</pre><h2>Summary</h2>"
            f"{prof.summary(top=top)._repr_html_()}</body></html>\n")


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
    parts.append("</body></html>\n")
    return "\n".join(parts)
