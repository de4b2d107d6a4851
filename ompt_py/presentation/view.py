"""The interactive view of a trace: one self-contained HTML file (Bokeh, its
JavaScript inline: no network needed to open it), ``ompt-py view``,
``Trace.view()`` and the ``%%ompt`` magic's timeline.

Its first tab is the timeline: a row per thread, grouped by process, then the
process's devices (offload); the bars of ompt_py.presentation.timeline coloured
by construct; zoom (mouse wheel, box) and pan (drag) over the whole trace; a
hover on a bar tells its construct, thread, Python line (``py_location``),
native location, begin, duration, team size and the time its thread waited in
it.  Bars smaller than a pixel at the zoom shown are drawn as aggregates (per
lane, layer and bin: the construct covering most of the bin, with that share
as opacity; the hover says how many bars the bin holds), and the detail comes
back on zooming in: the levels of ompt_py.presentation.lod, embedded in the
file, switched by a small script (view.js) when the range changes.  Its second
tab is the flame view (ompt_py.analysis.flame): the threads' time per Python
stack, native location, region and thread state, as an icicle.

Bokeh is an optional dependency (``pip install 'ompt-py[view]'``); without it,
ConfigError says what to install.
"""

from __future__ import annotations

import contextlib
import html as html_text
import os
import sys
import tempfile
import webbrowser
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..analysis import flame
from ..analysis.cache import ahead
from ..analysis.states import key_pid_thread
from ..analysis.states import threads as thread_keys
from ..errors import ConfigError
from ..units import format_ns
from . import lod
from .plots import flame_colours
from .timeline import AHEAD, KINDS, bars, device_bars

if TYPE_CHECKING:
    from bokeh.models import UIElement

    from ..trace import Trace

MISSING_BOKEH = ("the interactive view needs Bokeh, an optional dependency of ompt-py: "
                 "pip install 'ompt-py[view]' (or pip install 'bokeh>=3.4')")
_SCRIPT = Path(__file__).with_name("view.js")
_LANE_HEIGHT = 36  # pixels per lane


def require_bokeh() -> None:
    """ConfigError (what to install) when Bokeh cannot be imported."""
    try:
        import bokeh  # noqa: F401
    except ImportError:
        raise ConfigError(MISSING_BOKEH) from None


@dataclass
class Lanes:
    """The rows of the timeline, top to bottom: per process, its threads then its
    devices; ``keys`` (pid << 32 | thread, or | device for a device), ``device``
    (whether a row is a device's), ``labels`` and ``pid``."""

    keys: np.ndarray
    device: np.ndarray
    labels: list[str]
    pid: np.ndarray

    def of(self, keys: np.ndarray, device: bool) -> np.ndarray:
        """The row of each key (of threads, or of devices); -1: not a row."""
        mine = np.flatnonzero(self.device == device)
        at = pd.Index(self.keys[mine]).get_indexer(keys)
        return np.where(at >= 0, mine[np.maximum(at, 0)] if len(mine) else -1, -1)


def lanes(trace: Trace) -> Lanes:
    """The lanes of the trace's threads and devices."""
    threads = thread_keys(trace) if len(trace) else np.empty(0, np.int64)
    devices = np.unique(device_bars(trace)["key"].to_numpy(np.int64))
    keys = np.concatenate([threads, devices])
    device = np.repeat([False, True], [len(threads), len(devices)])
    pid, number = key_pid_thread(keys)
    order = np.lexsort((number, device, pid))
    keys, device, pid, number = keys[order], device[order], pid[order], number[order]
    several = len(np.unique(pid)) > 1
    labels = [(f"pid {p} " if several else "")
              + (f"device {np.int32(n)}" if d else f"thread {n}")
              for p, n, d in zip(pid.tolist(), number.tolist(), device.tolist())]
    return Lanes(keys, device, labels, pid)


def _window(trace: Trace, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
    t = trace.events["time_ns"]
    lo = int(start_ns) if start_ns is not None else (int(t.min()) if len(t) else 0)
    hi = int(end_ns) if end_ns is not None else (int(t.max()) if len(t) else lo + 1)
    if hi <= lo:
        raise ValueError(f"the window from {format_ns(lo)} to {format_ns(hi)} is empty: its "
                         "end must be after its start")
    return lo, hi


def bar_set(trace: Trace, rows: Lanes, lo: int, hi: int) -> tuple[lod.BarSet, pd.DataFrame]:
    """The bars of the threads and devices in [lo, hi], cut to it, as lod takes
    them (times from ``lo``), and the table of their sites."""
    b = bars(trace)
    t, dev = b.table, device_bars(trace)
    lane = np.concatenate([rows.of(t["key"].to_numpy(), False),
                           rows.of(dev["key"].to_numpy(np.int64), True)])

    def column(name: str, dtype: type) -> np.ndarray:
        """The column of the threads' bars then the devices' (no frame made)."""
        return np.concatenate([t[name].to_numpy(dtype), dev[name].to_numpy(dtype)])

    begin, end = column("begin_ns", np.int64), column("end_ns", np.int64)
    keep = (lane >= 0) & (end >= lo) & (begin <= hi)
    kind = column("kind", np.int64)[keep]
    layers = np.array([k.layer for k in KINDS])
    return lod.BarSet(
        lane=lane[keep].astype(np.int32), begin=np.clip(begin[keep], lo, hi) - lo,
        end=np.clip(end[keep], lo, hi) - lo, kind=kind.astype(np.int16),
        layer=layers[kind].astype(np.int8), site=column("site", np.int32)[keep],
        team=column("team", np.int32)[keep], wait=column("wait_ns", np.int64)[keep],
        sub=column("sub", np.int8)[keep], tracks=column("tracks", np.int8)[keep]), b.sites


# ---- the timeline's data: the tree's nodes and blobs, the first view's sources -----------


@dataclass
class _Embedded:
    """What the page carries of the tree: ``nodes`` ({"depth/index": [leaf, bars blob
    or None, aggregate blob or None]}), ``blobs`` and ``tree`` (view.js's args)."""

    nodes: dict[str, list]
    blobs: list[dict]
    tree: dict[str, Any]


def _embed(tree: lod.Tree, origin_ns: int) -> _Embedded:
    nodes: dict[str, list] = {}
    columns_of_blobs: list[list[np.ndarray]] = []

    def blob(columns: list[np.ndarray]) -> int:
        columns_of_blobs.append(columns)
        return len(columns_of_blobs) - 1

    for (depth, index), node in sorted(tree.nodes.items()):
        start = index * tree.width(depth)
        own = blob(lod.bar_columns(node.bars, start)) if len(node.bars) else None
        aggregate = None
        if node.aggregate is not None:
            first = start >> tree.bin_shift(depth)
            aggregate = blob(lod.aggregate_columns(node.aggregate, first))
        nodes[f"{depth}/{index}"] = [node.leaf, own, aggregate]
    deepest = max((d for d, _ in tree.nodes), default=0)
    return _Embedded(nodes, lod.encode_all(columns_of_blobs), {
        "bits": tree.bits, "fan_bits": lod.FANOUT.bit_length() - 1, "deepest": deepest,
        "origin_ms": origin_ns / 1e6,
        "shifts": [tree.bin_shift(d) for d in range(deepest + 1)]})


def _first_view(tree: lod.Tree, span: int) -> tuple[list[lod.Node], list[lod.Node]]:
    """The nodes whose bars and aggregates the whole window shows (as view.js picks
    them for it)."""
    fan = lod.FANOUT
    depth = int(np.floor(np.log((1 << tree.bits) / max(span, 1)) / np.log(fan)))
    exact: list[lod.Node] = []
    aggregates: list[lod.Node] = []

    def visit(d: int, i: int) -> None:
        width, node = tree.width(d), tree.nodes.get((d, i))
        if i * width >= span or node is None:
            return
        if len(node.bars):
            exact.append(node)
        if node.leaf:
            return
        if d >= depth:
            aggregates.append(node)
            return
        for c in range(fan):
            visit(d + 1, i * fan + c)

    visit(0, 0)
    return exact, aggregates


def _by_layer(kind: np.ndarray) -> np.ndarray:
    layers = np.array([k.layer for k in KINDS])
    return np.argsort(layers[kind], kind="stable")


def _bar_source(nodes: list[lod.Node], origin_ns: int) -> dict[str, np.ndarray]:
    """The columns of the exact bars' source (as view.js makes them)."""
    b = lod.BarSet(*(np.concatenate([getattr(n.bars, f) for n in nodes]) if nodes
                     else np.empty(0, np.int64) for f in lod.BarSet.__dataclass_fields__))
    order = _by_layer(b.kind)
    b = b.take(order)
    bottom = np.array([k.bottom for k in KINDS])[b.kind]
    height = (np.array([k.top for k in KINDS])[b.kind] - bottom) / b.tracks
    return {"left": (origin_ns + b.begin) / 1e6, "right": (origin_ns + b.end) / 1e6,
            "bottom": (b.lane + bottom + height * b.sub).astype(np.float32),
            "top": (b.lane + bottom + height * (b.sub + 1)).astype(np.float32),
            "kind": b.kind.astype(np.uint8), "site": b.site.astype(np.uint32),
            "lane": b.lane.astype(np.uint32), "team": b.team.astype(np.float64),
            "wait": b.wait.astype(np.float64), "dur": (b.end - b.begin).astype(np.float64),
            "alpha": np.ones(len(b), np.float32), "py": b.site.astype(np.uint32),
            "loc": b.site.astype(np.uint32)}


def _aggregate_source(tree: lod.Tree, nodes: list[lod.Node],
                      origin_ns: int) -> dict[str, np.ndarray]:
    """The columns of the aggregates' source (as view.js makes them)."""
    parts = [(n.aggregate, tree.bin_shift(n.depth)) for n in nodes if n.aggregate is not None]
    a = {f: np.concatenate([p[f] for p, _ in parts]) if parts else np.empty(0, np.int64)
         for f in lod.AGGREGATE_FIELDS}
    width = np.concatenate([np.full(len(p["bin"]), 1 << s, np.int64) for p, s in parts]
                           ) if parts else np.empty(0, np.int64)
    order = _by_layer(a["kind"])
    a, width = {k: v[order] for k, v in a.items()}, width[order]
    begin, end = a["bin"] * width, (a["bin"] + a["bins"]) * width
    share = a["share"] / 255
    return {"left": (origin_ns + begin) / 1e6, "right": (origin_ns + end) / 1e6,
            "bottom": (a["lane"] + np.array([k.bottom for k in KINDS])[a["kind"]]
                       ).astype(np.float32),
            "top": (a["lane"] + np.array([k.top for k in KINDS])[a["kind"]]).astype(np.float32),
            "kind": a["kind"].astype(np.uint8), "site": a["site"].astype(np.uint32),
            "lane": a["lane"].astype(np.uint32), "bars": a["bars"].astype(np.float64),
            "share": share, "dur": (end - begin).astype(np.float64),
            "alpha": (0.3 + 0.7 * share).astype(np.float32),
            "py": a["site"].astype(np.uint32), "loc": a["site"].astype(np.uint32)}


# ---- the page ----------------------------------------------------------------------------------

_FORMAT_NS = """
const ns = value;
if (!(ns >= 0)) return "-";
const units = [["s", 1e9], ["ms", 1e6], ["us", 1e3]];
for (const [unit, scale] of units) {
  if (ns >= scale) {
    const v = ns / scale;
    return (v < 100 ? v.toPrecision(3) : v.toFixed(0)) + " " + unit;
  }
}
return ns.toFixed(0) + " ns";
"""


def _hover(renderers: list, aggregate: bool, kinds: list[str], labels: list[str],
           sites: pd.DataFrame) -> Any:
    from bokeh.models import CustomJSHover, HoverTool

    def lookup(names: list[str]) -> CustomJSHover:
        return CustomJSHover(args={"names": names},
                             code="const s = names[value]; return s ? s : '-';")

    duration = CustomJSHover(code=_FORMAT_NS)
    formatters = {"@kind": lookup(kinds), "@lane": lookup(labels),
                  "@py": lookup(sites["py_location"].tolist()),
                  "@loc": lookup(sites["location"].tolist()), "@dur": duration}
    if aggregate:
        tooltips = [("mostly", "@kind{custom} (@share{0 %} of the time shown)"),
                    ("bars", "@bars{0,0} (zoom in to see each)"), ("on", "@lane{custom}"),
                    ("largest: Python", "@py{custom}"), ("largest: native", "@loc{custom}"),
                    ("begin", "@left{0,0.000} ms"), ("span", "@dur{custom}")]
    else:
        formatters["@team"] = CustomJSHover(code="return value > 0 ? String(value) : '-';")
        formatters["@wait"] = duration
        tooltips = [("construct", "@kind{custom}"), ("on", "@lane{custom}"),
                    ("Python", "@py{custom}"), ("native", "@loc{custom}"),
                    ("begin", "@left{0,0.000} ms"), ("duration", "@dur{custom}"),
                    ("team size", "@team{custom}"), ("waited", "@wait{custom}")]
    return HoverTool(renderers=renderers, tooltips=tooltips, formatters=formatters,
                     name="aggregate hover" if aggregate else "bar hover")


def _timeline(trace: Trace, rows: Lanes, start_ns: int | None, end_ns: int | None) -> Any:
    from bokeh.layouts import column
    from bokeh.models import (
        BoxAnnotation,
        ColumnDataSource,
        CustomJS,
        Div,
        FixedTicker,
        LinearColorMapper,
        Range1d,
    )
    from bokeh.plotting import figure

    lo, hi = _window(trace, start_ns, end_ns)
    bar_data, sites = bar_set(trace, rows, lo, hi)
    tree = lod.build(bar_data, hi - lo, len(rows.keys))
    embedded = _embed(tree, lo)
    exact, aggregates = _first_view(tree, hi - lo)
    bars_source = ColumnDataSource(_bar_source(exact, lo), name="bars")
    aggregate_source = ColumnDataSource(_aggregate_source(tree, aggregates, lo),
                                        name="aggregates")
    n = max(len(rows.keys), 1)
    x = Range1d(lo / 1e6, hi / 1e6, bounds=(lo / 1e6, hi / 1e6), min_interval=1e-5,
                name="time")
    p = figure(x_range=x, y_range=Range1d(n - 0.5, -0.5), height=max(220, 90 + _LANE_HEIGHT * n),
               sizing_mode="stretch_width", tools="xpan,xwheel_zoom,xbox_zoom,reset,save",
               active_scroll="xwheel_zoom", active_drag="xpan", name="timeline",
               x_axis_label="time since the trace start (ms)", toolbar_location="above")
    p.yaxis.ticker = FixedTicker(ticks=list(range(len(rows.keys))))
    p.yaxis.major_label_overrides = dict(enumerate(rows.labels))
    p.ygrid.grid_line_color = None
    p.xaxis.formatter.use_scientific = False
    for k, pid in enumerate(np.unique(rows.pid).tolist()):
        at = np.flatnonzero(rows.pid == pid)
        if k % 2:
            p.add_layout(BoxAnnotation(bottom=at.min() - 0.5, top=at.max() + 0.5,
                                       fill_color="#000000", fill_alpha=0.04, line_alpha=0))
    colours = LinearColorMapper(palette=[k.colour for k in KINDS], low=-0.5,
                                high=len(KINDS) - 0.5)
    fill = {"field": "kind", "transform": colours}
    drawn_aggregates = p.quad(left="left", right="right", bottom="bottom", top="top",
                              source=aggregate_source, fill_color=fill, fill_alpha="alpha",
                              line_color=None, name="aggregate glyphs")
    drawn_bars = p.quad(left="left", right="right", bottom="bottom", top="top",
                        source=bars_source, fill_color=fill, line_color=None, name="bar glyphs")
    kinds = [k.label for k in KINDS]
    p.add_tools(_hover([drawn_bars], False, kinds, rows.labels, sites),
                _hover([drawn_aggregates], True, kinds, rows.labels, sites))
    switch = CustomJS(args={"x": x, "bars": bars_source, "agg": aggregate_source,
                            "nodes": embedded.nodes, "blobs": embedded.blobs,
                            "tree": embedded.tree,
                            "kinds": {"bottom": [k.bottom for k in KINDS],
                                      "top": [k.top for k in KINDS],
                                      "layer": [k.layer for k in KINDS]}},
                      code=_SCRIPT.read_text(encoding="utf-8"))
    x.js_on_change("start", switch)
    x.js_on_change("end", switch)
    present = sorted(set(bar_data.kind.tolist()))
    legend = " ".join(f'<span style="white-space:nowrap;margin-right:1em">'
                      f'<span style="display:inline-block;width:0.9em;height:0.9em;'
                      f'background:{KINDS[k].colour};vertical-align:middle"></span> '
                      f"{html_text.escape(KINDS[k].label)}</span>" for k in present)
    return column(Div(text=legend, sizing_mode="stretch_width"), p,
                  sizing_mode="stretch_width")


def _flame(trace: Trace) -> Any:
    from bokeh.models import ColumnDataSource, CustomJSHover, Div, HoverTool, Range1d
    from bokeh.plotting import figure

    ic = flame.icicle(trace, min_share=1e-4)
    nodes = ic.nodes
    if nodes.empty:
        return Div(text="<p>No parallel region in this trace: nothing to show in the flame "
                        "view.</p>", name="flame")
    depth = int(nodes["depth"].max()) + 1
    colour = flame_colours(nodes["name"], nodes["kind"])
    width = (nodes["x1"] - nodes["x0"]).to_numpy()
    chars = (width * 160).astype(int)  # about what fits at the figure's width
    label = [name if len(name) <= c else (name[:max(c - 1, 0)] + "…" if c > 3 else "")
             for name, c in zip(nodes["name"], chars)]
    source = ColumnDataSource({
        "x0": nodes["x0"], "x1": nodes["x1"], "y0": nodes["depth"] - 0.45,
        "y1": nodes["depth"] + 0.45, "y": nodes["depth"], "name": nodes["name"],
        "path": nodes["path"], "label": label, "colour": colour,
        "time": nodes["weight_ns"], "share": nodes["weight_ns"] / ic.total_ns})
    p = figure(x_range=Range1d(0, 1, bounds=(0, 1)), y_range=Range1d(depth - 0.5, -0.5),
               height=80 + 24 * depth, sizing_mode="stretch_width", name="flame",
               tools="xpan,xwheel_zoom,reset,save", active_scroll="xwheel_zoom",
               toolbar_location="above",
               x_axis_label=f"share of the threads' time in parallel regions "
                            f"({format_ns(ic.total_ns)})")
    p.yaxis.visible = False
    p.ygrid.grid_line_color = None
    boxes = p.quad(left="x0", right="x1", bottom="y0", top="y1", source=source,
                   fill_color="colour", line_color="white", name="flame glyphs")
    p.text(x="x0", y="y", text="label", source=source, text_baseline="middle",
           text_font_size="9pt", x_offset=3)
    p.add_tools(HoverTool(renderers=[boxes], tooltips=[
        ("frame", "@name"), ("time", "@time{custom}"), ("share", "@share{0.0 %}"),
        ("stack", "@path")], formatters={"@time": CustomJSHover(code=_FORMAT_NS)},
        name="flame hover"))
    return p


def layout(trace: Trace, start_ns: int | None = None, end_ns: int | None = None,
           title: str | None = None) -> UIElement:
    """The view's Bokeh layout: a title, then the timeline and flame tabs."""
    require_bokeh()
    from bokeh.layouts import column
    from bokeh.models import Div, TabPanel, Tabs

    procs = trace.meta.get("processes", [])
    t = trace.events["time_ns"]
    span = int(t.max() - t.min()) if len(t) else 0
    rows = lanes(trace)
    head = (f"<b>{html_text.escape(title or 'ompt-py trace')}</b>: {len(trace):,} events, "
            f"{len(procs)} process(es), {int((~rows.device).sum())} thread(s), "
            f"{format_ns(span)}.  Wheel or box to zoom, drag to pan; hover a bar "
            "for what it is.  Pale bars stand for many small ones (their bin's main "
            "construct): zoom in for each.")
    with ahead(trace, *AHEAD, flame.flame):  # beside the regions' tables, then the bars'
        tabs = Tabs(tabs=[TabPanel(child=_timeline(trace, rows, start_ns, end_ns),
                                   title="Timeline"),
                          TabPanel(child=_flame(trace), title="Flame")],
                    sizing_mode="stretch_width", name="tabs")
    return column(Div(text=head, sizing_mode="stretch_width"), tabs,
                  sizing_mode="stretch_width")


def html(trace: Trace, start_ns: int | None = None, end_ns: int | None = None,
         title: str | None = None) -> str:
    """The view as one self-contained HTML page (Bokeh's JavaScript inline)."""
    require_bokeh()
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    return file_html(layout(trace, start_ns, end_ns, title), INLINE,
                     title=f"ompt-py: {title}" if title else "ompt-py view")


def write(trace: Trace, path: str | os.PathLike, start_ns: int | None = None,
          end_ns: int | None = None, title: str | None = None) -> None:
    """Writes the view to ``path``."""
    _save(html(trace, start_ns, end_ns, title), path)


def _save(page: str, path: str | os.PathLike) -> None:
    """Writes ``page`` to ``path`` (beside it, then renamed: a reader never sees half
    a file)."""
    path = os.path.abspath(os.fspath(path))
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def can_open_browser() -> bool:
    """Whether a browser window can be shown: on macOS and Windows, or with a
    display (DISPLAY or WAYLAND_DISPLAY) elsewhere."""
    return sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (which shows HTML)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel")


@dataclass
class View:
    """A written view: ``path`` (None: shown inline only), whether it was ``opened``
    in a browser, and its HTML; in Jupyter it shows itself inline (an iframe)."""

    path: str | None
    opened: bool
    page: str

    def _repr_html_(self) -> str:
        return (f'<iframe srcdoc="{html_text.escape(self.page, quote=True)}" '
                'style="width:100%;height:640px;border:1px solid #ddd" '
                'sandbox="allow-scripts allow-downloads"></iframe>')

    def __repr__(self) -> str:
        where = self.path or "inline"
        return f"<ompt_py View: {where}{' (opened in the browser)' if self.opened else ''}>"


def view(trace: Trace, path: str | os.PathLike | None = None, start_ns: int | None = None,
         end_ns: int | None = None, open_browser: bool | None = None,
         title: str | None = None) -> View:
    """Makes the view; writes it to ``path`` (outside Jupyter without a path: a new
    file in the temporary directory) and opens it in the browser (``open_browser``
    None: outside Jupyter, when there is a display)."""
    page = html(trace, start_ns, end_ns, title)
    notebook = in_notebook()
    if path is None and not notebook:
        fd, path = tempfile.mkstemp(prefix="ompt-view-", suffix=".html")
        os.close(fd)
        os.chmod(path, 0o644)
    if path is not None:
        path = os.path.abspath(os.fspath(path))
        _save(page, path)
    if open_browser is None:
        open_browser = not notebook and can_open_browser()
    opened = bool(open_browser and path and webbrowser.open(Path(path).as_uri()))
    return View(path, opened, page)
