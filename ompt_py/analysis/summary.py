"""The summary of a trace: the main answers together (``Trace.summary()``), the
overview that a Trace shows in Jupyter, and tables made readable."""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from ..errors import MissingEventsError
from ..meta import why_empty
from ..units import format_ns
from . import metrics, offload, tables
from .names import short
from .states import STATE_COLUMNS, thread_totals
from .states import threads as thread_keys

if TYPE_CHECKING:
    from ..trace import Trace


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy for display: *_ns columns as durations, shares as percentages,
    function names shortened (names.short), or their readable ``name`` in their
    place when the frame has one."""
    out = frame.copy()
    if "function" in out and "name" in out:
        name = out.pop("name")
        out["function"] = name.where(name.notna(), out["function"])
    for c in out.columns:
        name = str(c)
        if name == "function":
            out[c] = [short(v) if isinstance(v, str) else v for v in out[c]]
        elif name.endswith("_ns"):
            out[c] = [format_ns(v) for v in out[c].astype("float64")]
            out = out.rename(columns={c: name[:-3]})
        elif name.endswith("share"):
            out[c] = [("-" if pd.isna(v) else f"{100 * v:.1f} %") for v in out[c]]
        elif name == "imbalance":
            out[c] = [("-" if pd.isna(v) else f"{v:.2f}x") for v in out[c]]
    return out


@dataclass
class Summary:
    """The main answers about a trace, as tables (pandas DataFrames, times in ns).

    ``overview``: what the trace holds; ``python``: time per Python location
    (metrics.constructs by="python": the top locations, with the constructs
    under each); ``constructs`` and ``sources``: time per construct and per
    source location; ``threads``: each thread's time per state; ``regions``:
    the most imbalanced parallel regions (by time lost); ``tasks``: task
    durations (histogram, creation overhead in attrs); ``locks``: lock and
    critical section contention; ``offload``: per device, time in target
    constructs, host time blocked, bytes moved each way, transfer bandwidth,
    kernels (offload.offload_totals).  Regions and locks have the Python location
    (py_location) beside the source location, and the answers name it first.
    A table is None where the trace has nothing of the kind (``python``: no
    Python stacks); ``notes`` says what could not be computed and why.
    """

    overview: dict
    constructs: pd.DataFrame
    sources: pd.DataFrame
    threads: pd.DataFrame | None
    regions: pd.DataFrame | None
    tasks: pd.DataFrame | None
    locks: pd.DataFrame | None
    python: pd.DataFrame | None = None
    offload: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    def sections(self) -> list[tuple[str, pd.DataFrame]]:
        """(title, display table) per section, in order; a py_location column that
        is empty throughout (no Python stacks) is left out."""
        out = []
        if self.python is not None:
            out.append(("Time per Python location (and the constructs it started)",
                        _grouped(self.python, ["py_location", "py_time_ns"])))
        out += [("Time per construct", self.constructs), ("Time per source location",
                                                          self.sources)]
        if self.threads is not None:
            out.append(("Threads: time per state", self.threads))
        if self.regions is not None:
            out.append(("Parallel regions: load imbalance (most time lost first)",
                        self.regions))
        if self.tasks is not None:
            out.append(("Explicit tasks: duration histogram", self.tasks))
        if self.locks is not None:
            out.append(("Locks and critical sections: contention", self.locks))
        if self.offload is not None:
            out.append((OFFLOAD_HEADING, offload_display(self.offload)))
        return [(title, readable(_without_empty_python(t))) for title, t in out]

    def headline(self) -> list[str]:
        """The overview and the short answers, one line each."""
        o = self.overview
        if "aggregates" in o:  # a profile's (analysis.profile.overview)
            lines = [f"a profile: {o['aggregates']:,} aggregates, {o['processes']} "
                     f"process(es), {o['threads']} thread(s); aggregates not made (tables "
                     f"full) {o['overflow']:,}, threads without tables {o['unmapped']:,}, "
                     f"files without a profile {o['skipped']:,}"]
        else:
            lines = [f"{o['events']:,} events over {format_ns(o['span_ns'])}, "
                     f"{o['processes']} process(es), {o['threads']} thread(s); records "
                     f"written {o['written']:,}, dropped {o['dropped']:,}, lost {o['lost']:,}"]
            if o["why_empty"]:
                lines.append(o["why_empty"])
        started = (self.python[self.python["py_location"] != metrics.NO_PYTHON]
                   if self.python is not None else None)
        if started is not None and len(started):
            top = started["py_location"].iloc[0]
            mine = started[started["py_location"] == top]
            what = [f"{n:,} {name}" for name, n in (
                ("parallel region(s)", mine.loc[mine["construct"] == "parallel region",
                                                "count"].sum()),
                ("region marker(s)", mine.loc[mine["construct"] == "user region",
                                              "count"].sum()),
                ("explicit task(s)", mine.loc[mine["construct"] == "task", "count"].sum()))
                if n]
            lines.append(f"most time in OpenMP from one Python line: {top} "
                         f"({format_ns(mine['py_time_ns'].iloc[0])} in {', '.join(what)})")
        if self.threads is not None and len(self.threads):
            t = self.threads[[c for c in STATE_COLUMNS if c in self.threads]].sum()
            inside = t.sum() - t.get("idle_ns", 0)
            if inside > 0:
                lines.append(f"threads were busy {100 * t['busy_ns'] / inside:.1f} % of the "
                             f"time they spent in parallel regions and tasks; waiting at "
                             f"barriers {100 * t['barrier_wait_ns'] / inside:.1f} %, in "
                             f"taskwait/taskgroup {100 * t['sync_wait_ns'] / inside:.1f} %, "
                             f"for locks {100 * t['lock_wait_ns'] / inside:.1f} %")
        if self.regions is not None and len(self.regions):
            r = self.regions.iloc[0]
            if isinstance(r.get("py_location"), str):
                lines.append(f"most time lost to imbalance: region launched from "
                             f"{_named(r['py_location'], r['location'])}: "
                             f"{r['imbalance']:.2f}x, {format_ns(r['lost_ns'])} lost")
            else:
                lines.append(f"most time lost to imbalance: region at {_where(r['location'])} "
                             f"({r['imbalance']:.2f}x, {format_ns(r['lost_ns'])} lost)")
        if self.tasks is not None:
            a = self.tasks.attrs
            created = (f"; creating one costs about {format_ns(a['create_ns'])} "
                       f"({_percent(a['creation_overhead_share'])} of task time)"
                       if not math.isnan(a["create_ns"]) else "")
            lines.append(f"{a['tasks']:,} explicit tasks, median duration "
                         f"{format_ns(a['median_busy_ns'])}{created}")
        if self.offload is not None and len(self.offload):
            lines.append(offload_line(self.offload))
        if self.locks is not None and len(self.locks):
            k = self.locks.iloc[0]
            waited = (f"{format_ns(k['wait_total_ns'])} waited over "
                      f"{k['acquisitions']:,} acquisitions")
            if isinstance(k.get("py_location"), str):
                lines.append(f"most waited-for {k['kind']}: "
                             f"{_named(k['py_location'], k['location'])}: {waited}")
            else:
                lines.append(f"most waited-for {k['kind']}: {_where(k['location'])} ({waited})")
        return lines

    def __str__(self) -> str:
        parts = ["ompt-py summary", *("  " + line for line in self.headline())]
        parts += ["  note: " + n for n in self.notes]
        for title, table in self.sections():
            body = table.to_string(index=False) if len(table) else "(none)"
            parts += ["", title, *("  " + line for line in body.splitlines())]
        return "\n".join(parts) + "\n"

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self.headline())
        notes = "".join(f"<li><i>{html.escape(n)}</i></li>" for n in self.notes)
        body = [f"<div class='ompt-py-summary'><h3>ompt-py summary</h3><ul>{items}{notes}</ul>"]
        for title, table in self.sections():
            body.append(f"<h4>{html.escape(title)}</h4>")
            body.append(table.to_html(index=False, border=0) if len(table) else "<p>(none)</p>")
        body.append("</div>")
        return "\n".join(body)


def format_bytes(n: float) -> str:
    """A byte count in readable units: ``4 KiB``, ``1.5 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.3g} {unit}"
    return f"{n:,.0f} B"


def format_rate(bytes_per_s: float) -> str:
    return "-" if pd.isna(bytes_per_s) else f"{format_bytes(bytes_per_s)}/s"


#: The heading of the summary's and the report's offload table.
OFFLOAD_HEADING = ("Offload per device (host time; device_kernel and device_transfer: the "
                   f"device's own, from its trace records; blocked: {offload.BLOCKED_DEFINITION})")


def offload_display(totals: pd.DataFrame) -> pd.DataFrame:
    """offload_totals with its byte counts and bandwidth readable."""
    out = totals.copy()
    for c in ("bytes_to_device", "bytes_from_device"):
        out[c] = [format_bytes(v) for v in out[c]]
    out["bandwidth"] = [format_rate(v) for v in out["bandwidth"]]
    return out


def offload_line(totals: pd.DataFrame) -> str:
    """The headline of the offload section: every device together."""
    t = totals.sum(numeric_only=True)
    moved = t["bytes_to_device"] + t["bytes_from_device"]
    rate = moved / t["transfer_ns"] * 1e9 if t["transfer_ns"] else float("nan")
    return (f"offload: {int(t['target_regions']):,} target constructs on {len(totals)} "
            f"device(s), {format_ns(t['target_ns'])} in them, host blocked "
            f"{format_ns(t['blocked_ns'])}; {format_bytes(t['bytes_to_device'])} to and "
            f"{format_bytes(t['bytes_from_device'])} from the device(s) at "
            f"{format_rate(rate)}; {int(t['kernels']):,} kernels, {format_ns(t['kernel_ns'])}"
            + (f" ({format_ns(t['device_kernel_ns'])} on the device)"
               if totals["device_kernel_ns"].notna().any() else ""))


def _where(location: object) -> str:
    return location if isinstance(location, str) else "(no source location)"


def _named(python: str, location: object) -> str:
    """A region or lock named by its Python location, the source location beside it."""
    return f"{python} ({_where(location)})"


def _without_empty_python(table: pd.DataFrame) -> pd.DataFrame:
    if "py_location" in table and table["py_location"].isna().all():
        return table.drop(columns="py_location")
    return table


def _grouped(table: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """For display: the rows grouped by ``columns`` (one after the other), their
    values shown on each group's first row only, the first left-aligned."""
    out = table.astype({c: object for c in columns})
    repeated = (table[columns[0]] == table[columns[0]].shift()).to_numpy()
    for c in columns:
        shown = readable(table[[c]]).iloc[:, 0] if c.endswith("_ns") else table[c].astype(str)
        if c == columns[0]:
            shown = shown.str.ljust(int(shown.str.len().max()) if len(shown) else 0)
        out[c] = shown.where(~repeated, "").to_numpy()
    return out.rename(columns={c: c[:-3] for c in columns if c.endswith("_ns")})


def _percent(share: float) -> str:
    return "-" if share is None or math.isnan(share) else f"{100 * share:.1f} %"


def overview(trace: Trace) -> dict:
    """Counts of the trace: events, processes, threads, span, written, dropped, lost,
    and, when it has no events, why (``why_empty``; else None)."""
    t = trace.events["time_ns"]
    threads = len(thread_keys(trace))
    return {"events": len(t), "processes": len(trace.meta.get("processes", [])),
            "threads": threads, "span_ns": int(t.max() - t.min()) if len(t) else 0,
            "written": trace.written, "dropped": trace.dropped, "lost": trace.lost,
            "why_empty": None if len(t) else why_empty(trace.meta)}


def summary(trace: Trace, top: int = 10) -> Summary:
    """The main analyses together (see Summary); ``top`` rows per ranked table."""
    notes = []

    def attempt(build: Callable[[], pd.DataFrame | None]) -> pd.DataFrame | None:
        try:
            return build()
        except MissingEventsError as e:
            notes.append(str(e))
            return None

    present = tables.present_events(trace)
    threads = attempt(lambda: thread_totals(trace))
    regions = attempt(lambda: metrics.imbalance(trace).sort_values("lost_ns", ascending=False)
                      .head(top)[["py_location", "location", "begin_ns", "duration_ns",
                                  "complete", "threads", "imbalance", "lost_ns",
                                  "barrier_wait_share", "wait_share"]]
                      if "parallel_begin" in present else None)
    tasks = attempt(lambda: metrics.task_granularity(trace) if "task_create" in present else None)
    if tasks is not None:
        attrs = tasks.attrs
        tasks = tasks[tasks["tasks"] > 0].drop(columns=["lo_ns", "hi_ns"])
        tasks.attrs = attrs
    locks = attempt(lambda: metrics.lock_contention(trace).head(top)[
        ["kind", "py_location", "location", "acquisitions", "threads", "wait_total_ns",
         "wait_p95_ns", "hold_total_ns", "hold_mean_ns", "top_holder", "top_holder_share"]]
        if present & {"mutex_acquire", "mutex_acquired"} else None)
    python = None
    if metrics.has_python_stacks(trace):
        by_line = metrics.constructs(trace, by="python")
        by_line = by_line[by_line["construct"] != "implicit task"]
        lines = by_line["py_location"].drop_duplicates().head(top)
        python = by_line[by_line["py_location"].isin(lines)][
            ["py_location", "py_time_ns", "construct", "kind", "location", "count", "total_ns",
             "mean_ns", "max_ns"]].reset_index(drop=True)
    totals = offload.offload_totals(trace) if offload.has_offload(trace) else None
    if totals is not None:
        lost = {k: v for k, v in totals.attrs.items() if v}
        if lost:
            notes.append("offload records not paired (counted, left out of the tables where "
                         "they have no partner): " + ", ".join(f"{k} {v}" for k, v in lost.items()))
    sources = metrics.constructs(trace, by="source")
    sources = sources[sources["construct"] != "implicit task"].head(top)
    for name, iv in (("parallel", tables.region_intervals(trace)),
                     ("implicit_task", tables.implicit_intervals(trace)),
                     ("sync_region_wait", tables.wait_intervals(trace))):
        if iv.unmatched_begins or iv.unmatched_ends:
            notes.append(f"{name}: {iv.unmatched_begins} begins and {iv.unmatched_ends} ends "
                         "whose other half lies outside the trace window: not in the construct "
                         "times; begun intervals count up to the end of the trace in the "
                         "thread states and imbalance")
    return Summary(overview(trace), metrics.constructs(trace), sources.drop(columns="pid"),
                   threads=threads, regions=regions, tasks=tasks, locks=locks, python=python,
                   offload=totals, notes=notes)




def processes(trace: Trace) -> pd.DataFrame:
    """One row per process: pid, command, threads, written, dropped, runtime."""
    rows = []
    for p in trace.meta.get("processes", []):
        runtime = ", ".join(sorted({r["version"] for r in p.get("runtimes", [])})) or "-"
        rows.append({"pid": p["pid"], "command": " ".join(p.get("argv", []))[:80],
                     "threads": len(p.get("threads", [])), "written": p.get("written", 0),
                     "dropped": p.get("dropped", 0), "runtime": runtime})
    return pd.DataFrame(rows, columns=["pid", "command", "threads", "written", "dropped",
                                       "runtime"])


def html_overview(trace: Trace, top: int = 5, max_events: int = 2_000_000) -> str:
    """HTML for Trace._repr_html_: processes, counts, span and the top constructs
    (computed only up to ``max_events`` events, to keep display quick)."""
    if trace.recording:
        return "<b>ompt_py.Trace</b>: recording (stop() it to see the events)"
    o = overview(trace)
    parts = [f"<b>ompt_py.Trace</b>: {o['events']:,} events over {format_ns(o['span_ns'])}, "
             f"{o['processes']} process(es), {o['threads']} thread(s), records written "
             f"{o['written']:,}, dropped {o['dropped']:,}",
             processes(trace).to_html(index=False, border=0)]
    if 0 < o["events"] <= max_events:
        top_constructs = readable(metrics.constructs(trace).head(top))
        parts.append("<p>Top constructs by total time (t.summary() for more):</p>"
                     + top_constructs.to_html(index=False, border=0))
    elif o["events"]:
        parts.append("<p>t.summary(), t.constructs(), t.plot_timeline(): the answers.</p>")
    return "\n".join(parts)
