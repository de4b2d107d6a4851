"""Plots of a trace with matplotlib: a per-thread timeline (its parallel regions
named by Python line or source location), each thread's time per state, the task
duration histogram (log-spaced bins), the imbalance of parallel regions, lock
contention, and all of them in one figure for ``ompt-py report --plot``.

Each function draws into ``ax`` when one is given, else into a new Figure made
without pyplot (no global state: safe in scripts, servers and on Agg), and
returns the Figure.  matplotlib is imported when a plot is made.
"""

from __future__ import annotations

import base64
import io
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..analysis import flame as flame_stacks
from ..analysis import metrics, tables
from ..analysis.advice import where
from ..analysis.cache import per_trace
from ..analysis.states import (
    STATE_COLUMNS,
    THREAD_STATES,
    key_pid_thread,
    thread_key,
    thread_totals,
    to_int,
)
from ..analysis.states import threads as thread_keys
from ..units import format_ns, shorten
from .timeline import BAR_COLUMNS, KIND, KINDS, STATE_COLOURS, bands, bars, device_bars

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..trace import Trace

#: Colours of the flame's frames by kind (a state: its thread state's colour).
FLAME_COLOURS = {"python": "#f2c57c", "native": "#c9a0dc", "construct": "#a9c4de",
                 "state": "#bbbbbb"}
_STATE_OF_NAME = {name: state for state, name in flame_stacks.STATE_NAMES.items()}
_LABEL_POINTS, _MAX_LABELS = 7, 300  # the region names on the timeline
_LEAST_LABEL = 12  # characters: a region narrower than this many gets no label
_RUN_PIXELS = 3  # regions of one line closer than this on the timeline: one run, one label
_SMALL_POINTS = 8  # the names written in the imbalance and lock plots
_AXES_SHARE = 0.6  # of the figure's width: what its axes have at least beside the legend
# The connectors from host operations to the devices' lanes, drawn when at most
# this many are in view.
_MAX_CONNECTORS = 500


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    display_in_ipython()
    return Figure(figsize=(width, height), layout="constrained")


def display_in_ipython() -> None:
    """In IPython (Jupyter), show the Figures these functions return as images.

    IPython shows a Figure as an image only once matplotlib's inline backend was
    activated (by pyplot drawing, or %matplotlib inline); before that, as text.
    This registers what %matplotlib inline registers, unless some format is set.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    from IPython.core.pylabtools import select_figure_formats
    from matplotlib.figure import Figure

    if not any(Figure in f.type_printers for f in shell.display_formatter.formatters.values()):
        select_figure_formats(shell, {"png"})


def _axes(ax: Axes | None, width: float, height: float) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = _new_figure(width, height)
    return fig, fig.add_subplot()


def _lane_labels(keys: np.ndarray) -> list[str]:
    pid, thread = key_pid_thread(keys)
    several = len(np.unique(pid)) > 1
    return [f"pid {p} thread {t}" if several else f"thread {t}"
            for p, t in zip(pid.tolist(), thread.tolist())]


def _select_threads(trace: Trace, threads: Any) -> np.ndarray:
    keys = thread_keys(trace)
    if threads is None:
        return keys
    pid, thread = key_pid_thread(keys)
    wanted = np.zeros(len(keys), dtype=bool)
    for t in threads:
        if isinstance(t, tuple):
            wanted |= (pid == t[0]) & (thread == t[1])
        else:
            wanted |= thread == int(t)
    if not wanted.any():
        raise ValueError(f"threads={threads!r}: none of them is in the trace (threads: "
                         f"{sorted(set(thread.tolist()))}); give thread numbers or "
                         "(pid, thread) pairs")
    return keys[wanted]


def _device_lanes(trace: Trace, lanes: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The device bars (timeline.device_bars) of the processes of ``lanes`` (thread
    keys), and the key of each device's lane, sorted: they come after the threads."""
    dev = device_bars(trace)
    if not len(lanes) or dev.empty:
        return dev, np.empty(0, np.int64)
    dev = dev[np.isin(dev["pid"].to_numpy(), key_pid_thread(lanes)[0])]
    return dev, np.unique(dev["key"].to_numpy())


def _device_labels(keys: np.ndarray, several: bool) -> list[str]:
    pid, device = key_pid_thread(keys)
    device = device.astype(np.int32)  # back to a signed device number
    return [f"pid {p} device {d}" if several else f"device {d}"
            for p, d in zip(pid.tolist(), device.tolist())]


def _connectors(ax: Axes, dev: pd.DataFrame, lanes: np.ndarray, device_lane: np.ndarray) -> None:
    """Thin lines from each host operation (its begin, on its thread's lane) to its
    kernel or transfer on the device's lane, when at most _MAX_CONNECTORS are in
    view (else none: zoom in to see them)."""
    from matplotlib.collections import LineCollection

    host = thread_key(dev["pid"], dev["host_thread"].to_numpy(np.int64, na_value=0))
    at = np.minimum(np.searchsorted(lanes, host), len(lanes) - 1)
    linked = dev["host_ns"].notna().to_numpy() & (lanes[at] == host)
    if not 0 < linked.sum() <= _MAX_CONNECTORS:
        return
    x0 = dev["host_ns"].to_numpy(np.int64, na_value=0)[linked] / 1e6
    x1 = dev["begin_ns"].to_numpy(np.int64)[linked] / 1e6
    bottom, top = bands(dev["kind"].to_numpy(), dev["sub"].to_numpy(), dev["tracks"].to_numpy())
    y1 = device_lane[linked] + (bottom + top)[linked] / 2
    ax.add_collection(LineCollection(np.stack([np.column_stack([x0, at[linked]]),
                                               np.column_stack([x1, y1])], axis=1),
                                     colors="#555555", linewidths=0.5, alpha=0.6))


@per_trace
def region_labels(trace: Trace) -> pd.DataFrame:
    """The names the timeline writes on parallel regions, one per region that is
    the outermost on the lane of the thread that started it: key, begin_ns,
    end_ns, label (the region's Python location when it has one, else its
    source location) and short (the same in fewer words: _short_name)."""
    r = tables.parallel_regions(trace)
    parent = r[["pid", "parent_id"]].merge(
        r[["pid", "parallel_id", "encountering_thread"]].rename(
            columns={"parallel_id": "parent_id", "encountering_thread": "parent_thread"}),
        on=["pid", "parent_id"], how="left")["parent_thread"]
    outermost = (parent.isna() | (parent.to_numpy() != r["encountering_thread"].to_numpy()))
    r = r[outermost.to_numpy()]
    label = r["py_location"].where(r["py_location"].notna(), r["location"])
    r, label = r[label.notna()], label[label.notna()].astype(str)
    return pd.DataFrame({"key": thread_key(r["pid"], r["encountering_thread"]),
                         "begin_ns": to_int(r["begin_ns"]), "end_ns": to_int(r["end_ns"]),
                         "label": label.to_numpy(object),
                         "short": [_short_name(x) for x in label]})


def _short_name(label: str) -> str:
    """A region's label in fewer words: a file's base name (``app.py:42 in f``), or a
    C++ name from its last class on (``Tensor<…>::for_each(…) (libx.so)``)."""
    if "/" in label:
        return label.rsplit("/", 1)[-1]
    depth, scopes = 0, []
    for i, c in enumerate(label):
        depth = depth + 1 if c in "<([" else max(depth - 1, 0) if c in ">)]" else depth
        if depth == 0 and label.startswith("::", i):
            scopes.append(i)
    return label[scopes[-2] + 2:] if len(scopes) >= 2 else label


def _region_runs(labels: pd.DataFrame, gap_ns: float) -> pd.DataFrame:
    """``labels`` (region_labels) with the regions of one lane and label that follow
    each other within ``gap_ns`` as one run: key, begin_ns, end_ns, label and short
    with `` (N regions)`` for a run of N."""
    labels = labels.sort_values(["key", "begin_ns"], kind="stable").reset_index(drop=True)
    key, label = labels["key"].to_numpy(), labels["label"].to_numpy(object)
    begin, end = labels["begin_ns"].to_numpy(), labels["end_ns"].to_numpy()
    new = np.ones(len(labels), bool)
    new[1:] = (key[1:] != key[:-1]) | (label[1:] != label[:-1]) | (begin[1:] - end[:-1] > gap_ns)
    run = np.cumsum(new) - 1
    out = labels[new].reset_index(drop=True)
    out["end_ns"] = pd.Series(end).groupby(run).max().to_numpy()
    times = [f" ({k:,} regions)" if k > 1 else "" for k in np.bincount(run)]
    for c in ("label", "short"):
        out[c] = [text + n for text, n in zip(out[c], times)]
    return out


def _label_regions(ax: Axes, trace: Trace, lanes: np.ndarray, lo: int, hi: int) -> None:
    """Writes on each parallel region of the timeline its Python line (or source
    location), where the region is wide enough for it, else its short form (the
    file's base name) shortened in the middle to the region's width, down to
    _LEAST_LABEL characters;
    regions of one line that follow each other closer than _RUN_PIXELS are one
    run, written once with their count (`` (N regions)``)."""
    labels = region_labels(trace)
    labels = labels[labels["key"].isin(lanes) & (labels["end_ns"] > lo)
                    & (labels["begin_ns"] < hi)]
    if labels.empty:
        return
    labels = _region_runs(labels, _RUN_PIXELS * (hi - lo) / max(ax.bbox.width, 100.0))
    begin = labels["begin_ns"].clip(lower=lo).to_numpy()
    pixels = (labels["end_ns"].clip(upper=hi).to_numpy() - begin) * max(
        ax.bbox.width, 100.0) / (hi - lo)
    char = _LABEL_POINTS * 0.6 * ax.figure.dpi / 72  # a character's width in pixels
    room = (pixels // char).astype(np.int64) - 1  # characters that fit
    text = [label if len(label) <= n else shorten(short, n) if n >= _LEAST_LABEL else None
            for label, short, n in zip(labels["label"], labels["short"], room)]
    lane = np.searchsorted(lanes, labels["key"].to_numpy())
    for i in [i for i, t in enumerate(text) if t][:_MAX_LABELS]:
        ax.text(begin[i] / 1e6, lane[i], f" {text[i]}", fontsize=_LABEL_POINTS, va="center",
                ha="left", clip_on=True,
                bbox={"facecolor": "white", "alpha": 0.6, "linewidth": 0, "pad": 0.5})


def _merge_small(iv: pd.DataFrame, resolution: float) -> pd.DataFrame:
    """Bars of one lane, kind and sub-track closer than ``resolution`` become one, and
    each is at least that wide: what a screen or a PNG can show anyway."""
    if iv.empty:
        return iv
    iv = iv.sort_values(["key", "kind", "sub", "begin_ns"], kind="stable").reset_index(drop=True)
    group = iv.groupby(["key", "kind", "sub"], sort=False).ngroup().to_numpy()
    reach = iv.groupby(group)["end_ns"].cummax().to_numpy()
    new = np.ones(len(iv), dtype=bool)
    new[1:] = (group[1:] != group[:-1]) | (iv["begin_ns"].to_numpy()[1:] > reach[:-1] + resolution)
    block = np.cumsum(new) - 1
    out = iv[new].reset_index(drop=True)
    out["end_ns"] = pd.Series(reach).groupby(block).max().to_numpy()
    out["end_ns"] = np.maximum(out["end_ns"], out["begin_ns"] + resolution)
    return out


def _in_window(iv: pd.DataFrame, lo: int, hi: int, resolution: float) -> pd.DataFrame:
    """The bars of ``iv`` in [lo, hi], cut to it, those closer than ``resolution`` merged."""
    iv = iv[(iv["end_ns"] >= lo) & (iv["begin_ns"] <= hi)]
    return _merge_small(iv.assign(begin_ns=iv["begin_ns"].clip(lower=lo),
                                  end_ns=iv["end_ns"].clip(upper=hi)), resolution)


def timeline(trace: Trace, start_ns: int | None = None, end_ns: int | None = None,
             threads: Any = None, ax: Axes | None = None) -> Figure:
    """One lane per thread: the bars of ompt_py.presentation.timeline (parallel
    regions in grey, work-sharing constructs by kind, waits at barriers, in
    taskwait/taskgroup and for locks, explicit tasks on top: a task run inside a
    barrier shows over the wait, critical sections held as a thin strip, target
    constructs and their operations).  Each parallel region wide enough for it is
    labelled, on the lane of the thread that started it, with the Python line
    that started it (region_labels) or else its source location.  With
    offload, a lane per device after the threads: its kernels and transfers
    (offload.device_track, on the host clock; split in bands where they
    overlap), with a thin connector from each host operation to its device
    operation when at most 500 are in view.
    ``start_ns``/``end_ns``: the window (nanoseconds from the trace start);
    ``threads``: thread numbers or (pid, thread) pairs (the devices of their
    processes are shown).  Bars closer than a pixel are drawn as one, so
    10^6 bars stay quick."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    lanes = _select_threads(trace, threads) if len(trace) else np.empty(0, np.int64)
    dev, devices = _device_lanes(trace, lanes)
    n_lanes = len(lanes) + len(devices)
    fig, ax = _axes(ax, 12, 1.2 + 0.45 * max(n_lanes, 1))
    t = trace.events["time_ns"]
    lo = int(t.min()) if start_ns is None and len(t) else int(start_ns or 0)
    hi = int(t.max()) if end_ns is None and len(t) else int(end_ns or lo + 1)
    if hi <= lo:
        raise ValueError(f"the window [{start_ns}, {end_ns}] is empty: end_ns must be after "
                         "start_ns")
    resolution = (hi - lo) / max(ax.bbox.width, 100.0)
    iv = bars(trace).table if len(lanes) else pd.DataFrame(columns=BAR_COLUMNS)
    iv = _in_window(iv[iv["key"].isin(lanes)], lo, hi, resolution)
    iv = iv.assign(lane=np.searchsorted(lanes, iv["key"].to_numpy()))
    dev = dev[(dev["end_ns"] >= lo) & (dev["begin_ns"] <= hi)]
    device_lane = len(lanes) + np.searchsorted(devices, dev["key"].to_numpy())
    drawn = _in_window(dev, lo, hi, resolution)
    if len(drawn):
        iv = pd.concat([iv, drawn.assign(
            lane=len(lanes) + np.searchsorted(devices, drawn["key"].to_numpy()))],
            ignore_index=True)
    ax.set_xlim(lo / 1e6, hi / 1e6)
    ax.set_ylim(-0.6, n_lanes - 0.4)
    several = len(np.unique(key_pid_thread(lanes)[0])) > 1
    ax.set_yticks(range(n_lanes), _lane_labels(lanes) + _device_labels(devices, several))
    ax.invert_yaxis()
    ax.set_xlabel("time since the trace start (ms)")
    ax.set_title("Timeline")
    if not len(iv):
        ax.text(0.5, 0.5, "no parallel regions, tasks or waits here", transform=ax.transAxes,
                ha="center", va="center")
        return fig
    kind = iv["kind"].to_numpy(np.int64)
    iv = iv.iloc[np.argsort(np.array([k.layer for k in KINDS])[kind], kind="stable")]
    kind = iv["kind"].to_numpy(np.int64)  # later rows are drawn on top
    lane = iv["lane"].to_numpy()
    bottom, top = bands(kind, iv["sub"].to_numpy(), iv["tracks"].to_numpy())
    x0, x1 = iv["begin_ns"].to_numpy() / 1e6, iv["end_ns"].to_numpy() / 1e6
    y0, y1 = lane + bottom, lane + top
    verts = np.stack([np.column_stack(p) for p in ((x0, y0), (x0, y1), (x1, y1), (x1, y0))],
                     axis=1)
    colours = np.array([k.colour for k in KINDS], dtype=object)
    ax.add_collection(PolyCollection(verts, facecolors=colours[kind], linewidths=0,
                                     antialiased=False))
    _connectors(ax, dev, lanes, device_lane)
    _label_regions(ax, trace, lanes, lo, hi)
    shown = [KINDS[k] for k in pd.unique(kind)]
    ax.legend(handles=[Patch(color=k.colour, label=k.label) for k in shown],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)
    return fig


def states(trace: Trace, ax: Axes | None = None) -> Figure:
    """Stacked bars: each thread's time busy, waiting (barrier, taskwait/taskgroup,
    lock) and idle over the whole trace (see ompt_py.analysis.thread_totals)."""
    totals = thread_totals(trace)
    fig, ax = _axes(ax, 10, 1.2 + 0.4 * max(len(totals), 1))
    keys = thread_key(totals["pid"], totals["thread"])
    y = np.arange(len(totals))
    left = np.zeros(len(totals))
    for column in STATE_COLUMNS:
        state = column[:-3]
        ms = totals[column].to_numpy(np.float64) / 1e6
        ax.barh(y, ms, left=left, color=STATE_COLOURS[state], label=state.replace("_", " "))
        left += ms
    ax.set_yticks(y, _lane_labels(keys))
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title("Time per thread and state")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)
    return fig


def task_durations(trace: Trace, ax: Axes | None = None) -> Figure:
    """Histogram of explicit task durations on log bins (metrics.task_granularity),
    with the estimated creation overhead in the title."""
    hist = metrics.task_granularity(trace)
    fig, ax = _axes(ax, 8, 4)
    ax.bar(hist["lo_ns"] / 1e3, hist["tasks"], width=(hist["hi_ns"] - hist["lo_ns"]) / 1e3,
           align="edge", color=KINDS[KIND["explicit task"]].colour, edgecolor="white")
    ax.set_xscale("log")
    ax.set_xlabel("task duration (us, own work: without waiting in its taskwait)")
    ax.set_ylabel("tasks")
    a = hist.attrs
    share = a["creation_overhead_share"]
    ax.set_title(f"{a['ran']:,} explicit tasks, median {format_ns(a['median_busy_ns'])}; "
                 f"creation overhead {'-' if np.isnan(share) else f'{100 * share:.1f} %'}")
    return fig


def imbalance(trace: Trace, ax: Axes | None = None, top: int = 10) -> Figure:
    """For the ``top`` parallel regions that lost the most time to imbalance: each
    thread's busy time and its waits (barrier, taskwait/taskgroup, lock), with the
    region's Python line (when it has one) and source location, its imbalance
    (max over mean busy time) and time lost."""
    regions = metrics.imbalance(trace).dropna(subset=["lost_ns"])
    regions = regions.sort_values("lost_ns", ascending=False).head(top).reset_index(drop=True)
    per = metrics.imbalance(trace, per_thread=True)
    rows = regions[["pid", "parallel_id"]].reset_index(names="rank").merge(
        per, on=["pid", "parallel_id"]).sort_values(["rank", "thread"])
    fig, ax = _axes(ax, 10, 1.5 + 0.3 * max(len(rows), 1))
    if rows.empty:
        ax.text(0.5, 0.5, "no parallel regions", transform=ax.transAxes, ha="center",
                va="center")
        return fig
    y = rows["rank"].to_numpy() * 0.5 + np.arange(len(rows))  # a gap between regions
    left = np.zeros(len(rows))
    for state in THREAD_STATES:
        ms = rows[f"{state}_ns"].to_numpy(np.float64) / 1e6
        ax.barh(y, ms, left=left, color=STATE_COLOURS[state], label=state.replace("_", " "))
        left += ms
    ax.set_yticks(y, [f"thread {t}" for t in rows["thread"]], fontsize="small")
    # The axes' width is known after the layout: most of the figure's, the legend
    # beside it.
    room = int(_AXES_SHARE * fig.get_figwidth() * 72 / (_SMALL_POINTS * 0.6))
    for r in regions.itertuples():
        at = y[rows["rank"].to_numpy() == r.Index]
        where = r.location if isinstance(r.location, str) else f"region {r.parallel_id}"
        if isinstance(r.py_location, str):
            where = f"{r.py_location} ({where})"
        figures = f": {r.imbalance:.2f}x, {format_ns(r.lost_ns)} lost"
        ax.annotate(shorten(where, room - len(figures)) + figures,
                    xy=(0, at.min() - 0.45), fontsize=_SMALL_POINTS, va="bottom",
                    annotation_clip=False)
    ax.invert_yaxis()
    ax.set_xlabel("time in the region's implicit task (ms)")
    ax.set_title("Load imbalance: regions that lost the most time")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)
    return fig


def flame_colours(names: pd.Series, kinds: pd.Series) -> list[str]:
    """The colour of each frame of a flame (FLAME_COLOURS; a state: STATE_COLOURS)."""
    return [STATE_COLOURS.get(_STATE_OF_NAME.get(n, ""), FLAME_COLOURS[k]) if k == "state"
            else FLAME_COLOURS[k] for n, k in zip(names, kinds)]


def flame(trace: Trace, path_or_ax: Any = None, min_share: float = 1e-3) -> Figure:
    """The threads' time in parallel regions per Python stack, native location,
    region and thread state (ompt_py.analysis.flame) as an icicle: the outermost
    frame on top, each frame as wide as its share of the time (frames under
    ``min_share`` left out), labelled where it is wide enough.  ``path_or_ax``: a
    file to write (format from its extension: .png, .svg, .pdf), an Axes to draw
    into, or None."""
    from matplotlib.axes import Axes
    from matplotlib.collections import PolyCollection

    ax = path_or_ax if isinstance(path_or_ax, Axes) else None
    ic = flame_stacks.icicle(trace, min_share=min_share)
    nodes = ic.nodes
    depth = int(nodes["depth"].max()) + 1 if len(nodes) else 1
    fig, ax = _axes(ax, 12, 1.2 + 0.35 * depth)
    ax.set_xlim(0, 1)
    ax.set_ylim(depth - 0.5, -0.5)
    ax.set_yticks([])
    ax.set_xlabel(f"share of the threads' time in parallel regions ({format_ns(ic.total_ns)})")
    ax.set_title("Flame: time per Python stack, native location, region and thread state")
    if nodes.empty:
        ax.text(0.5, 0.5, "no parallel regions", transform=ax.transAxes, ha="center",
                va="center")
    else:
        x0, x1 = nodes["x0"].to_numpy(), nodes["x1"].to_numpy()
        y0, y1 = nodes["depth"].to_numpy() - 0.45, nodes["depth"].to_numpy() + 0.45
        verts = np.stack([np.column_stack(p) for p in ((x0, y0), (x0, y1), (x1, y1),
                                                         (x1, y0))], axis=1)
        ax.add_collection(PolyCollection(verts, facecolors=flame_colours(
            nodes["name"], nodes["kind"]), edgecolors="white", linewidths=0.5))
        char = 0.6 * _LABEL_POINTS / 72 / (ax.figure.get_figwidth() * 0.8)  # of the width
        for name, left, width, y in zip(nodes["name"], x0, x1 - x0, nodes["depth"]):
            fits = int(width / char) - 1
            if fits >= 4:
                ax.text(left + char / 2, y, name if len(name) <= fits else name[:fits - 1] + "…",
                        fontsize=_LABEL_POINTS, va="center", ha="left", clip_on=True)
    if path_or_ax is not None and ax is not path_or_ax:
        fig.savefig(path_or_ax, dpi=100)
    return fig


def locks(trace: Trace, ax: Axes | None = None, top: int = 10) -> Figure:
    """For the ``top`` locks, critical sections and ordered regions waited for the
    longest (metrics.lock_contention): the threads' total wait for each and the
    total time it was held, named by the Python line that takes it (when there
    is one) and its source location."""
    table = metrics.lock_contention(trace).head(top)
    fig, ax = _axes(ax, 10, 1.5 + 0.5 * max(len(table), 1))
    if table.empty:
        ax.text(0.5, 0.5, "no locks", transform=ax.transAxes, ha="center", va="center")
        return fig
    y = np.arange(len(table))
    wait = table["wait_total_ns"].to_numpy(np.float64, na_value=0) / 1e6
    held = table["hold_total_ns"].to_numpy(np.float64, na_value=0) / 1e6
    ax.barh(y - 0.2, wait, height=0.4, color=STATE_COLOURS["lock_wait"], label="waited for")
    ax.barh(y + 0.2, held, height=0.4, color=KINDS[KIND["lock/critical held"]].colour,
            label="held")
    room = int(0.35 * fig.get_figwidth() * 72 / (_SMALL_POINTS * 0.6))  # the tick labels
    names = [shorten(f"{k}: {where(p, loc)}", room) for k, p, loc in
             zip(table["kind"], table["py_location"], table["location"])]
    ax.set_yticks(y, names, fontsize=_SMALL_POINTS)
    ax.invert_yaxis()
    ax.set_xlabel("time, all threads together (ms)")
    ax.set_title("Lock contention: time waited for each lock and time it was held")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)
    return fig


def report_figure(trace: Trace, top: int = 10) -> Figure:
    """``ompt-py report --plot``: the timeline and each thread's states, then the
    imbalance of the regions, the task durations and the lock contention, those
    the trace has, one under the other."""
    present = tables.present_events(trace)
    parts: list[tuple[Any, float]] = [(timeline, 2.5 + 0.5 * len(thread_keys(trace))),
                                      (states, 1.2 + 0.4 * len(thread_keys(trace)))]
    if "parallel_begin" in present:
        parts.append((lambda t, ax: imbalance(t, ax=ax, top=top), 4.0))
    if "task_create" in present:
        parts.append((task_durations, 3.5))
    if {"mutex_acquire", "mutex_acquired", "mutex_released"} <= present:
        parts.append((lambda t, ax: locks(t, ax=ax, top=top), 3.0))
    fig = _new_figure(13, sum(h for _, h in parts))
    axes = fig.subplots(len(parts), 1, height_ratios=[h for _, h in parts])
    for (draw, _), ax in zip(parts, axes):
        draw(trace, ax=ax)
    return fig


def png_data_uri(fig: Figure, dpi: int = 100) -> str:
    """The figure as a PNG ``data:`` URI, for self-contained HTML."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def overview(trace: Trace, start_ns: int | None = None, end_ns: int | None = None) -> Figure:
    """The timeline above the per-thread state breakdown, in one Figure."""
    lanes = max(len(thread_keys(trace)), 1)
    fig = _new_figure(13, 2.5 + 0.8 * lanes)
    top, bottom = fig.subplots(2, 1, height_ratios=[2, 1])
    timeline(trace, start_ns=start_ns, end_ns=end_ns, ax=top)
    states(trace, ax=bottom)
    return fig
