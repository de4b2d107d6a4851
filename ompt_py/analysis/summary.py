"""The summary of a trace: the main answers together (``Trace.summary()``), the
overview that a Trace shows in Jupyter, and tables made readable: the one
vocabulary (records.CONSTRUCTS, normalised kinds) and unit style (ompt_py.units)
of the summary's text, HTML and Jupyter forms and of ``ompt-py report``."""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import MissingEventsError
from ..layout import Document, terminal_width
from ..meta import why_empty
from ..records import CONSTRUCTS
from ..units import (
    MISSING,
    format_bytes,
    format_ns,
    format_rate,
    format_share,
    shorten,
)
from . import advice, metrics, offload, ranks, tables
from .advice import where
from .columns import TABLES, conform
from .names import short
from .states import STATE_COLUMNS, thread_totals, tool_stalls
from .states import threads as thread_keys

if TYPE_CHECKING:
    from ..trace import Trace


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy for display, in the one unit style (ompt_py.units): *_ns columns as
    durations (their name without ``_ns``), shares as percentages, imbalance as
    ``1.60x``, byte counts and rates readable, function names shortened
    (names.short), or their readable ``name`` in their place when the frame has
    one."""
    out = frame.copy()
    if "function" in out and "name" in out:
        name = out.pop("name")
        out["function"] = name.where(name.notna(), out["function"])
    for c in out.columns:
        name = str(c)
        if name == "function":
            out[c] = [short(v) if isinstance(v, str) else v for v in out[c]]
        elif name.endswith("_ns"):
            out[c] = [format_ns(v) for v in out[c]]
            out = out.rename(columns={c: name[:-3]})
        elif name.endswith("share"):
            out[c] = [format_share(v) for v in out[c]]
        elif name == "imbalance" or name == "imbalance_max":
            out[c] = [(MISSING if pd.isna(v) else f"{v:.2f}x") for v in out[c]]
        elif name.startswith("bytes_"):
            out[c] = [format_bytes(v) for v in out[c]]
        elif name == "bandwidth":
            out[c] = [format_rate(v) for v in out[c]]
    return out


#: How the terminal forms lay out the display tables (layout.Document.table), by
#: column (readable's names): the rank at which a column is left out when the
#: width is short (the highest first; absent: never), the name columns (shortened
#: in the middle) and the other left-aligned ones; HEADERS: a column's header
#: where it is not its name with spaces for underscores.
DROP = {**dict.fromkeys(("pid", "function", "wait_id", "late_pid"), 9),
        **dict.fromkeys(("top_holder", "top_holder_share", "begin", "complete",
                         "imbalance_max", "type", "host", "calls_match"), 8),
        **dict.fromkeys(("p50", "p95", "wait_p95", "task_share", "time_share",
                         "device_kernel", "device_transfer"), 7),
        **dict.fromkeys(("sync_wait", "lock_wait", "schedule", "written", "transfers",
                         "kernels"), 6),
        **dict.fromkeys(("hold_mean", "wait_share", "idle", "parallel_share", "wait_max",
                         "ranks"), 5),
        **dict.fromkeys(("max", "barrier_wait", "hold_total", "kernel", "transfer",
                         "bandwidth", "duration", "span", "mpi"), 4),
        **dict.fromkeys(("threads", "lost", "acquisitions", "py_time", "bytes_from_device",
                         "omp_lost", "waited"), 3),
        **dict.fromkeys(("target_regions", "bytes_to_device"), 2),
        **dict.fromkeys(("imbalance", "fork_join_share", "mean"), 2),
        **dict.fromkeys(("barrier_wait_share", "busy_share", "count", "blocked", "caused"), 1)}
NAMES = ("py_location", "location", "function", "command", "construct", "kind", "label",
         "event")
LEFT = ("schedule", "type", "host", "call")
HEADERS = {"py_location": "python", "fork_join_share": "fork/join",
           "barrier_wait_share": "at barriers", "wait_share": "waiting",
           "parallel_share": "in parallel", "omp_lost": "OpenMP lost"}


def write_table(doc: Document, table: pd.DataFrame, group: str | None = None) -> None:
    """``table`` (an answer: times in ns) into ``doc`` in the terminal forms' layout:
    readable, columns empty throughout and a pid column of one process left out;
    the source location is left out (rank 3) only beside a Python location."""
    shown = readable(table)
    shown = shown[[c for c in shown.columns if c == group or shown[c].notna().any()]]
    if "pid" in shown and shown["pid"].nunique() <= 1:
        shown = shown.drop(columns="pid")
    drop = {**DROP, "location": 3} if "py_location" in shown else \
        {k: v for k, v in DROP.items() if k != "location"}
    header = {c: HEADERS.get(c, c.replace("_", " ")) for c in shown.columns if c != group}
    doc.table(shown.rename(columns=header), {header[k]: v for k, v in drop.items()
                                             if k in header},
              names=[header[c] for c in NAMES if c in header],
              left=[header[c] for c in LEFT if c in header], group=group)


@dataclass
class Summary:
    """The main answers about a trace, as tables (pandas DataFrames, times in
    integer nanoseconds) and as text in the vocabulary of ``ompt-py report``.

    ``overview``: what the trace holds; ``python``: time per Python location
    (metrics.constructs by="python": the top locations, with the constructs
    under each); ``constructs`` and ``sources``: time per construct and per
    source location; ``threads``: each thread's time per state; ``regions``:
    parallel regions per Python and source location (metrics.imbalance by
    location: regions, team, total and mean duration, imbalance, time lost,
    fork/join share, loop schedule), the most thread time not working first;
    ``tasks``: task durations (histogram, creation overhead in attrs);
    ``locks``: lock and critical section contention; ``offload``: per device,
    time in target constructs, host time blocked, bytes moved each way,
    transfer bandwidth, kernels (offload.offload_totals); ``ranks`` and
    ``phases``, for a job of several ranks (ranks.py): per rank its OpenMP and
    MPI time with how often it arrived last at the phases' synchronisations
    and what the others lost waiting for it, and the phases with the most time
    lost; ``advice``: what to do, computed from the figures (advice.advice).
    Regions, locks and advice have the Python location (py_location) beside the
    source location, and the answers name it first.  A table is None where the
    trace has nothing of the kind (``python``: no Python stacks; ``ranks``: one
    rank); ``notes`` says what could not be computed and why.  ``str()`` is the
    text laid out for the terminal's width (layout.terminal_width),
    ``document(width)`` the same for any width.
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
    advice: pd.DataFrame | None = None
    ranks: pd.DataFrame | None = None
    phases: pd.DataFrame | None = None

    def _tables(self) -> list[tuple[str, pd.DataFrame]]:
        out = [("Time per construct", self.constructs), ("Time per source location",
                                                          self.sources)]
        if self.threads is not None:
            threads = self.threads
            if "tool_stall_ns" in threads and not threads["tool_stall_ns"].any():
                threads = threads.drop(columns="tool_stall_ns")  # no stall: no column of zeros
            out.append(("Threads: time per state", threads))
        if self.ranks is not None:
            out.append((RANKS_HEADING, self.ranks))
        if self.phases is not None:
            out.append((PHASES_HEADING, self.phases))
        if self.regions is not None:
            out.append(("Parallel regions per location (most thread time not working first)",
                        self.regions))
        if self.tasks is not None:
            out.append(("Explicit tasks: duration histogram", self.tasks))
        if self.locks is not None:
            out.append(("Locks and critical sections: contention", self.locks))
        if self.offload is not None:
            out.append((OFFLOAD_HEADING, self.offload))
        return out

    def sections(self) -> list[tuple[str, pd.DataFrame]]:
        """(title, display table: readable) per section, in order; a py_location
        column that is empty throughout (no Python stacks) is left out."""
        out = []
        if self.python is not None:
            out.append((PYTHON_HEADING, _grouped(self.python, ["py_location", "py_time_ns"])))
        out += self._tables()
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
                ("parallel region(s)", mine.loc[mine["construct"] == CONSTRUCTS[
                    "parallel_begin"], "count"].sum()),
                ("region marker(s)", mine.loc[mine["construct"] == CONSTRUCTS["region"],
                                              "count"].sum()),
                ("explicit task(s)", mine.loc[mine["construct"] == CONSTRUCTS[
                    "task_schedule"], "count"].sum()))
                if n]
            lines.append(f"most time in OpenMP from one Python line: {top} "
                         f"({format_ns(mine['py_time_ns'].iloc[0])} in {', '.join(what)})")
        if self.threads is not None and len(self.threads):
            t = self.threads[[c for c in STATE_COLUMNS if c in self.threads]].sum()
            stalled = t.get("tool_stall_ns", 0)
            if stalled > 0:
                lines.append(stall_answer(o["stalls"], stalled, t.sum()))
            inside = t.sum() - t.get("idle_ns", 0) - stalled
            if inside > 0:
                lines.append(f"threads were busy {format_share(t['busy_ns'] / inside)} of the "
                             f"time they spent in parallel regions and tasks; waiting at "
                             f"barriers {format_share(t['barrier_wait_ns'] / inside)}, in "
                             f"taskwait/taskgroup {format_share(t['sync_wait_ns'] / inside)}, "
                             f"for locks {format_share(t['lock_wait_ns'] / inside)}")
        if self.ranks is not None and self.phases is not None:
            lines.append(late_answer(self.ranks, self.phases))
        if self.regions is not None and len(self.regions):
            lines.append("most thread time not working: " + region_answer(self.regions.iloc[0]))
        if self.tasks is not None:
            a = self.tasks.attrs
            created = (f"; creating one costs about {format_ns(a['create_ns'])} "
                       f"({format_share(a['creation_overhead_share'])} of task time)"
                       if not math.isnan(a["create_ns"]) else "")
            lines.append(f"{a['tasks']:,} explicit tasks, median duration "
                         f"{format_ns(a['median_busy_ns'])}{created}")
        if self.offload is not None and len(self.offload):
            lines.append(offload_line(self.offload))
        if self.locks is not None and len(self.locks):
            k = self.locks.iloc[0]
            lines.append(f"most waited-for {k['kind']}: "
                         f"{where(k.get('py_location'), k['location'])}: "
                         f"{format_ns(k['wait_total_ns'])} waited over "
                         f"{k['acquisitions']:,} acquisitions")
        return lines

    def write(self, doc: Document, overview: bool = True) -> None:
        """The answers, the advice and the tables into ``doc`` (the text of str() and
        of ``ompt-py report``); the notes as its footnotes.  ``overview``: the first
        headline line too."""
        lines = self.headline()
        marks = "".join(doc.footnote(n) for n in self.notes)
        if overview:
            doc.prose(lines[0] + (f" {marks}" if marks else ""), indent=2)
        lines = lines[1:]
        if lines or (marks and not overview):
            doc.heading("Answers" + (f" {marks}" if marks and not overview else ""))
            for line in lines:
                doc.prose(line, marker="- ")
        if self.advice is not None:
            doc.heading("Advice (what to do, from the figures; docs/reports.md)")
            for i, a in enumerate(self.advice.itertuples(), 1):
                doc.prose(a.finding, marker=f"{i}. ")
                doc.prose(a.advice, indent=len(f"  {i}. "), marker="-> ", style="name")
            if self.advice.empty:
                doc.prose("none: no rule found time at stake", style="note")
            cannot = self.advice.attrs.get("cannot", {})
            for rule, why in cannot.items():
                doc.prose(f"{rule}: not from a profile ({why})", style="note")
        if self.python is not None:
            doc.heading(PYTHON_HEADING)
            write_table(doc, self.python.assign(py_location=[
                f"{p} ({format_ns(t)})" for p, t in
                zip(self.python["py_location"], self.python["py_time_ns"])]).drop(
                columns=["py_time_ns"]), group="py_location")
        for title, table in self._tables():
            doc.heading(title)
            write_table(doc, _without_empty_python(table))

    def document(self, width: int) -> Document:
        """The text form at ``width`` columns (layout.Document)."""
        doc = Document(width)
        doc.heading("ompt-py summary")
        self.write(doc)
        return doc

    def __str__(self) -> str:
        return self.document(terminal_width()).text()

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self.headline())
        notes = "".join(f"<li><i>{html.escape(n)}</i></li>" for n in self.notes)
        body = [f"<div class='ompt-py-summary'><h3>ompt-py summary</h3><ul>{items}{notes}</ul>"]
        if self.advice is not None and len(self.advice):
            body.append("<h4>Advice</h4><ol>" + "".join(
                f"<li>{html.escape(a.finding)}<br><b>{html.escape(a.advice)}</b></li>"
                for a in self.advice.itertuples()) + "</ol>")
        for title, table in self.sections():
            body.append(f"<h4>{html.escape(title)}</h4>")
            body.append(table.to_html(index=False, border=0) if len(table) else "<p>(none)</p>")
        body.append("</div>")
        return "\n".join(body)


PYTHON_HEADING = "Time per Python location (and the constructs it started)"
RANKS_HEADING = ("Ranks (late: phases it arrived last in; caused: what the other ranks lost "
                 "waiting for it; waited: what it lost waiting for them)")
PHASES_HEADING = "Ranks: the phases with the most time lost waiting for the late rank"
#: The columns of the summary's ranks table (ranks.ranks with the lateness of
#: ranks.rank_imbalance by="rank").
RANK_COLUMNS = list(TABLES["summary.ranks"].columns)
PHASE_COLUMNS = list(TABLES["summary.phases"].columns)


def late_answer(table: pd.DataFrame, phases: pd.DataFrame) -> str:
    """The ranks' answer: the rank the others lost most waiting for, in words."""
    r = table.sort_values("caused_ns", ascending=False, kind="stable").iloc[0]
    who = f"pid {r['pid']}" if pd.isna(r["rank"]) else f"rank {r['rank']}"
    return (f"across {len(table)} ranks and {phases.attrs['phases']:,} phases: {who} arrived "
            f"last in {int(r['late']):,} of them; the other ranks lost "
            f"{format_ns(r['caused_ns'])} waiting for it ({format_ns(table['waited_ns'].sum())} "
            "waiting at the phases' ends in all)")


def job_tables(trace: Trace, top: int, notes: list[str],
               attempt: Callable[[Callable[[], pd.DataFrame | None]], pd.DataFrame | None]
               ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, pd.DataFrame | None]:
    """For a trace of several ranks: the summary's ranks table, its worst phases
    (``top``, most time lost first; ``attrs["phases"]``: how many there are) and
    the ranks' lateness (for the advice; None without phases); Nones otherwise.
    The phases' notes go into ``notes``."""
    if not ranks.several(trace.meta):
        return None, None, None
    return job_answers(ranks.arrivals(trace), len(ranks.processes(trace)),
                       attempt(lambda: ranks.ranks(trace)), top, notes)


def job_answers(arrived: pd.DataFrame, count: int, per_rank: pd.DataFrame | None, top: int,
                notes: list[str]
                ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, pd.DataFrame | None]:
    """job_tables from a job's arrivals (ranks.arrivals), its number of processes
    and its ranks' table (ranks.ranks; None: it could not be made): of a trace, or
    of a dataset's partitions concatenated."""
    late = ranks.compare(arrived, "rank", count)
    phases = ranks.compare(arrived, "phase", count)
    notes += phases.attrs["notes"]
    if per_rank is not None:
        per_rank = per_rank.merge(late[["pid", "late", "caused_ns", "waited_ns"]], on="pid",
                                  how="left")
        per_rank = conform(per_rank[[c for c in RANK_COLUMNS if c in per_rank]],
                           "summary.ranks")
    if phases.empty:
        return per_rank, None, None
    worst = phases.sort_values("lost_ns", ascending=False, kind="stable").head(top)
    worst = worst[[c for c in PHASE_COLUMNS if c != "calls_match" or not phases[c].all()]]
    worst = worst.reset_index(drop=True)
    worst.attrs["phases"] = len(phases)
    return per_rank, worst, late


#: What the answers leave the tool's stalls out of, and what they are in
#: (docs/stalls.md).
STALLS_EXCLUDED = ("the thread states, busy shares, imbalance and time lost leave this out "
                   "of the program's time; construct durations that contain a stall include it")


def stall_answer(count: int, stalled_ns: int, thread_ns: int) -> str:
    """The tool's stalls in words: how many, their time, its share of the threads'
    time (``thread_ns``: every thread's trace span added up), what the figures leave
    out."""
    return (f"ompt-py stalled the threads {count:,} time(s), {format_ns(stalled_ns)} in all "
            f"({format_share(stalled_ns / thread_ns if thread_ns else math.nan)} of the "
            f"threads' time), making room for the trace in its file: {STALLS_EXCLUDED}")


def region_answer(r: pd.Series) -> str:
    """A row of the regions per location, in words: how many regions of what length
    on how many threads, where, the share waiting at barriers, fork/join, imbalance."""
    n = int(r["regions"])
    mean = r["duration_ns"] / n if n else math.nan
    text = (f"{n:,} region{'s' if n != 1 else ''} of {format_ns(mean)} on {int(r['threads'])} "
            f"threads at {where(r.get('py_location'), r['location'])}: the threads wait "
            f"{format_share(r['barrier_wait_share'])} of their time at the barriers")
    if pd.notna(r.get("fork_join_share")):
        text += f"; fork/join costs {format_share(r['fork_join_share'])} of each region"
    if pd.notna(r["imbalance"]):
        text += (f"; the busiest thread works {r['imbalance']:.2f}x the mean "
                 f"({format_ns(r['lost_ns'])} lost)")
    return text


#: The heading of the summary's and the report's offload table.
OFFLOAD_HEADING = ("Offload per device (host time; device_kernel and device_transfer: the "
                   f"device's own, from its trace records; blocked: {offload.BLOCKED_DEFINITION})")


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


def regions_per_location(table: pd.DataFrame) -> pd.DataFrame:
    """The summary's regions: imbalance() per location with each location's mean
    region (mean_ns), the most thread time not working (lost to the imbalance,
    and the team's fork/join) first."""
    not_working = table["lost_ns"].fillna(0) + table["threads"] * table["fork_join_ns"].fillna(0)
    out = table.assign(mean_ns=table["duration_ns"] / table["regions"].where(
        table["regions"] > 0)).iloc[np.argsort(-not_working.to_numpy(np.float64),
                                               kind="stable")]
    columns = [c for c in TABLES["summary.regions"].columns if c in out]
    return conform(out[columns].reset_index(drop=True), "summary.regions")


def overview(trace: Trace) -> dict:
    """Counts of the trace: events, processes, threads, span, written, dropped, lost,
    the tool's stalls, and, when it has no events, why (``why_empty``; else None)."""
    t = trace.events["time_ns"]
    threads = len(thread_keys(trace))
    return {"events": len(t), "processes": len(trace.meta.get("processes", [])),
            "threads": threads, "span_ns": int(t.max() - t.min()) if len(t) else 0,
            "written": trace.written, "dropped": trace.dropped, "lost": trace.lost,
            "stalls": len(tool_stalls(trace)),
            "why_empty": None if len(t) else why_empty(trace.meta)}


def window_note(trace: Trace) -> str | None:
    """What the trace window did to the parallel regions, in plain words; None
    when it cut none (the other constructs it cut are closed at their region's
    end, or left out, and change no answer)."""
    iv = tables.region_intervals(trace)
    cut = [f"{n:,} had not ended when the trace did (measured up to its end)"
           for n in [iv.unmatched_begins] if n]
    cut += [f"{n:,} began before it (left out)" for n in [iv.unmatched_ends] if n]
    return f"the trace window cut parallel regions: {'; '.join(cut)}" if cut else None


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
    python_stacks = metrics.has_python_stacks(trace)
    threads = attempt(lambda: thread_totals(trace))
    by_location = attempt(lambda: metrics.imbalance(
        trace, by="python" if python_stacks else "source")
        if "parallel_begin" in present else None)
    regions = regions_per_location(by_location).head(top) if by_location is not None else None
    tasks = attempt(lambda: metrics.task_granularity(trace) if "task_create" in present else None)
    tasks = None if tasks is None else task_table(tasks)
    all_locks = attempt(lambda: metrics.lock_contention(trace)
                        if present & {"mutex_acquire", "mutex_acquired"} else None)
    locks = lock_table(all_locks, top)
    python = None
    if python_stacks:
        by_line = metrics.constructs(trace, by="python")
        python = python_table(by_line[by_line["construct"] != CONSTRUCTS["implicit_task"]], top)
    totals = offload.offload_totals(trace) if offload.has_offload(trace) else None
    notes += offload_notes(totals)
    sources = metrics.constructs(trace, by="source")
    sources = sources[sources["construct"] != CONSTRUCTS["implicit_task"]].head(top)
    notes += [n for n in [window_note(trace)] if n]
    per_rank, phases, late = job_tables(trace, top, notes, attempt)
    what_to_do = attempt(lambda: advice.advice(trace, by_location, all_locks, late)) \
        if threads is not None else None
    return Summary(overview(trace), metrics.constructs(trace), sources.drop(columns="pid"),
                   threads=threads, regions=regions, tasks=tasks, locks=locks, python=python,
                   offload=totals, notes=notes, advice=what_to_do, ranks=per_rank,
                   phases=phases)


def task_table(tasks: pd.DataFrame) -> pd.DataFrame:
    """The summary's tasks: metrics.task_granularity's bins that hold tasks, without
    their bounds (its attrs kept)."""
    attrs = tasks.attrs
    out = tasks[tasks["tasks"] > 0].drop(columns=["lo_ns", "hi_ns"])
    out.attrs = attrs
    return out


def lock_table(all_locks: pd.DataFrame | None, top: int) -> pd.DataFrame | None:
    """The summary's locks: the first ``top`` of metrics.lock_contention, its columns."""
    if all_locks is None:
        return None
    return all_locks.head(top)[list(TABLES["summary.locks"].columns)]


def python_table(by_line: pd.DataFrame, top: int) -> pd.DataFrame:
    """The summary's Python lines: of metrics.constructs by="python" (implicit tasks
    left out, most Python time first), the constructs under its first ``top`` lines."""
    lines = by_line["py_location"].drop_duplicates().head(top)
    return conform(by_line[by_line["py_location"].isin(lines)][
        list(TABLES["summary.python"].columns)].reset_index(drop=True), "summary.python")


def offload_notes(totals: pd.DataFrame | None) -> list[str]:
    """What offload.offload_totals could not pair, as a note (none: nothing)."""
    lost = {k: v for k, v in (totals.attrs.items() if totals is not None else ()) if v}
    return ["offload records not paired (counted, left out of the tables where they have no "
            "partner): " + ", ".join(f"{k} {v}" for k, v in lost.items())] if lost else []


def processes(trace: Trace) -> pd.DataFrame:
    """One row per process: pid, command, threads, written, dropped, runtime."""
    rows = []
    for p in trace.meta.get("processes", []):
        runtime = ", ".join(sorted({r["version"] for r in p.get("runtimes", [])})) or "-"
        rows.append({"pid": p["pid"], "command": shorten(" ".join(p.get("argv", [])), 80),
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
