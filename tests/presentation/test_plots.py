"""The plots (ompt_py.plots through Trace.plot_*) and `ompt-py report --plot/--html`.

Figures are drawn on matplotlib's Agg canvas in the pytest process (no OpenMP
here), from stored traces of tests/programs/known.c (tests/data/plots-*), a
synthetic one of many regions, the host-offload trace tests/data/offload.omptraw
and a synthetic one with device records (tests/offload_records.py).
"""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest
from conftest import cli, load_stored, many_regions, stored_path
from offload_records import OffloadRecords, program_with_device_records

import ompt_py
from ompt_py.analysis import metrics, states, tables
from ompt_py.presentation import plots, timeline

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STATES = ["busy", "barrier wait", "sync wait", "lock wait", "tool stall", "idle"]


@pytest.fixture(scope="module")
def skewed() -> ompt_py.Trace:
    """Warm-up region, then a static loop where thread 1 has 4 x thread 0's work
    (known skewed 500 20, OMP_SCHEDULE=static)."""
    return load_stored("plots-skewed")


@pytest.fixture(scope="module")
def tasks() -> ompt_py.Trace:
    """known tasks 12 200 6 2000: 12 tasks of 200 us and 6 of 2 ms."""
    return load_stored("plots-tasks")


def legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_timeline_lanes_layers_and_window(skewed):
    fig = skewed.plot_timeline()
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["thread 0", "thread 1"]
    assert legend(ax) == ["parallel region", "work: loop_static", "barrier wait"]
    (bars,) = ax.collections
    assert len(bars.get_paths()) >= 6  # each thread: region, loop, barrier wait
    lo, hi = skewed.events["time_ns"].min(), skewed.events["time_ns"].max()
    assert ax.get_xlim() == pytest.approx((lo / 1e6, hi / 1e6))
    # zoomed on thread 0 waiting at the barrier of the loop: only that is drawn
    region = skewed.imbalance().sort_values("begin_ns").iloc[-1]
    start = int(region["begin_ns"] + 0.6 * region["duration_ns"])
    end = int(region["begin_ns"] + 0.8 * region["duration_ns"])
    fig = skewed.plot_timeline(start_ns=start, end_ns=end, threads=[0])
    (ax,) = fig.axes
    assert ax.get_xlim() == pytest.approx((start / 1e6, end / 1e6))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["thread 0"]
    assert legend(ax) == ["parallel region", "barrier wait"]
    (bars,) = ax.collections
    x = np.concatenate([p.vertices[:, 0] for p in bars.get_paths()])
    assert x.min() >= start / 1e6 and x.max() <= end / 1e6
    with pytest.raises(ValueError, match="none of them is in the trace"):
        skewed.plot_timeline(threads=[7])
    with pytest.raises(ValueError, match="window"):
        skewed.plot_timeline(start_ns=end, end_ns=start)


def test_timeline_of_many_intervals_draws_few_bars(tmp_path):
    t = many_regions(100)  # 30000 regions of 2 threads, as `parallel 30000`
    intervals = (len(states.closed(t, tables.implicit_intervals))
                 + len(states.closed(t, tables.wait_intervals)))
    assert intervals > 100_000
    fig = t.plot_timeline()  # its time: bench/analysis.py
    fig.savefig(tmp_path / "many.png", dpi=80)
    (bars,) = fig.axes[0].collections
    # closer than a pixel: drawn as one bar
    assert len(bars.get_paths()) < intervals / 10


def test_state_bars(skewed):
    fig = skewed.plot_states()
    (ax,) = fig.axes
    assert legend(ax) == STATES
    assert len(ax.patches) == 2 * len(STATES)  # one bar per thread and state
    totals = skewed.thread_states()
    widths = np.array([p.get_width() for p in ax.patches]).reshape(len(STATES), 2)
    span = (skewed.events["time_ns"].max() - skewed.events["time_ns"].min()) / 1e6
    assert widths.sum(axis=0) == pytest.approx([span, span])  # every thread: the whole trace
    assert widths[1] == pytest.approx(totals["barrier_wait_ns"].to_numpy() / 1e6)


def test_task_duration_histogram(tasks):
    fig = tasks.plot_task_durations()
    (ax,) = fig.axes
    hist = tasks.task_granularity()
    # log-spaced bins, enough of them to show the distribution
    assert len(ax.patches) == len(hist) >= metrics.TASK_BINS
    assert [p.get_height() for p in ax.patches] == hist["tasks"].tolist()
    assert [p.get_x() for p in ax.patches] == pytest.approx((hist["lo_ns"] / 1e3).tolist())
    assert ax.get_xscale() == "log" and "18 explicit tasks" in ax.get_title()


def test_imbalance_view(skewed):
    fig = skewed.plot_imbalance()
    (ax,) = fig.axes
    regions = skewed.imbalance()
    assert len(ax.patches) == 2 * 2 * 5  # 2 regions x 2 threads x 5 states
    notes = [t.get_text() for t in ax.texts]
    assert len(notes) == 2
    worst = regions.sort_values("lost_ns").iloc[-1]
    assert f"{worst['imbalance']:.2f}x" in notes[0]
    assert legend(ax) == ["busy", "barrier wait", "sync wait", "lock wait", "tool stall"]


@pytest.mark.pythons
def test_plots_draw_into_given_axes(skewed, tasks):
    from matplotlib.figure import Figure

    fig = Figure()
    axes = fig.subplots(2, 2).ravel()
    assert skewed.plot_timeline(ax=axes[0]) is fig
    assert skewed.plot_states(ax=axes[1]) is fig
    assert tasks.plot_task_durations(ax=axes[2]) is fig
    assert skewed.plot_imbalance(ax=axes[3]) is fig
    assert len(fig.axes) == 4


def test_report_writes_plot_and_html(tmp_path):
    trace = stored_path("plots-tasks")
    png, page = tmp_path / "out.png", tmp_path / "out.html"
    r = cli("report", trace, "--plot", png, "--html", page)
    assert r.returncode == 0, r.stderr
    assert "\nTime per construct\n" in r.stdout  # the text report as before
    assert png.read_bytes().startswith(PNG_MAGIC)
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    for title in ("Time per construct", "Threads: time per state",
                  "Parallel regions per location", "Explicit tasks: duration histogram"):
        assert title in html
    assert html.count("<table") >= 5
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    assert len(images) == 3  # timeline and states, imbalance, task durations
    assert all(base64.b64decode(i).startswith(PNG_MAGIC) for i in images)
    assert "src='http" not in html and 'src="http' not in html  # self-contained
    # a destination in a missing folder is a usage error that says so
    r = cli("report", trace, "--plot", tmp_path / "missing" / "x.png")
    assert r.returncode == 2 and "cannot write" in r.stderr
    assert "Traceback" not in r.stderr


def inside_the_figure(fig, texts) -> bool:
    """Whether every text's drawn box lies inside the figure (drawn on Agg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig.bbox
    return all(box.x0 - 1 <= b.x0 and b.x1 <= box.x1 + 1 and box.y0 - 1 <= b.y0
               and b.y1 <= box.y1 + 1 for b in (t.get_window_extent(renderer) for t in texts))


def test_imbalance_labels_fit_the_figure():
    """report-cxx: regions of long C++ names; each region's name is shortened in the
    middle so that its label stays inside the figure."""
    from conftest import load_with_binaries

    t = load_with_binaries("report-cxx")
    fig = t.plot_imbalance()
    notes = fig.axes[0].texts
    assert len(notes) == 10 and any("…" in n.get_text() for n in notes)
    assert all(n.get_text().endswith(" lost") for n in notes)
    assert inside_the_figure(fig, notes)


def test_timeline_labels_runs_of_short_regions():
    """300 regions one after another from one place: one label with their count."""
    t = ompt_py.load(stored_path("parallel-300.omptraw"))
    fig = t.plot_timeline()
    (label,) = [x.get_text().strip() for x in fig.axes[0].texts]
    (where,) = set(t.parallel_regions()["location"])
    assert label == f"{where} (300 regions)"
    assert inside_the_figure(fig, fig.axes[0].texts)


def test_timeline_shortens_long_names_to_the_region():
    from conftest import load_with_binaries

    t = load_with_binaries("report-cxx")
    fig = t.plot_timeline()
    labels = [x.get_text().strip() for x in fig.axes[0].texts]
    # from the class on, shortened in the middle to the region's width
    assert any(x.startswith("RowRed") and x.endswith("cxx_names)") for x in labels), labels
    assert inside_the_figure(fig, fig.axes[0].texts)


def test_lock_contention_plot():
    t = load_stored("known-lock")
    fig = t.plot_locks()
    (ax,) = fig.axes
    (lock,) = t.lock_contention().itertuples()
    waited, held = ax.patches
    assert waited.get_width() == pytest.approx(lock.wait_total_ns / 1e6)
    assert held.get_width() == pytest.approx(lock.hold_total_ns / 1e6)
    assert [x.get_text() for x in ax.get_yticklabels()] == [f"lock: {lock.location}"]
    assert legend(ax) == ["waited for", "held"]


def test_report_plot_has_every_plot_the_trace_allows(tmp_path):
    fig = plots.report_figure(load_stored("known-lock"))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["Timeline", "Time per thread and state",
                      "Load imbalance: regions that lost the most time",
                      "Lock contention: time waited for each lock and time it was held"]
    fig = plots.report_figure(load_stored("plots-tasks"))
    assert [ax.get_title() for ax in fig.axes][2:] == [
        "Load imbalance: regions that lost the most time", fig.axes[3].get_title()]
    assert "explicit tasks" in fig.axes[3].get_title()


def test_report_help_names_the_outputs():
    r = cli("report", "--help")
    assert r.returncode == 0
    assert "--plot FILE" in r.stdout and "--html FILE" in r.stdout


def test_figures_display_as_images_in_ipython(skewed):
    # Without pyplot, IPython shows a bare Figure as text until the inline
    # backend registered its image formatter; making a plot registers it.
    shell_module = pytest.importorskip("IPython.core.interactiveshell")
    shell = shell_module.InteractiveShell.instance()
    try:
        fig = skewed.plot_states()
        data, _ = shell.display_formatter.format(fig)
        assert base64.b64decode(data["image/png"]).startswith(PNG_MAGIC)
        summary, _ = shell.display_formatter.format(skewed.summary())
        assert "<table" in summary["text/html"]
        assert "ompt_py.Trace" in shell.display_formatter.format(skewed)[0]["text/html"]
    finally:
        shell_module.InteractiveShell.clear_instance()


# ---- offload: the devices' lanes ---------------------------------------------------------------


def lane_bars(ax, lane: int) -> np.ndarray:
    """(x0, x1, y0, y1) of the bars drawn in ``lane``."""
    boxes = np.array([[p.vertices[:, 0].min(), p.vertices[:, 0].max(), p.vertices[:, 1].min(),
                       p.vertices[:, 1].max()] for p in ax.collections[0].get_paths()])
    return boxes[(boxes[:, 2] >= lane - 0.5) & (boxes[:, 3] <= lane + 0.5)]


def test_timeline_device_lanes_of_a_host_offload_trace():
    """tests/data/offload.omptraw (no device records): each device's lane holds its
    kernels and transfers as the host saw them, with a connector from each."""
    trace = load_stored("offload.omptraw")
    fig = trace.plot_timeline()
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-2:] == ["device 0", "device 1"] and len(labels) == 12
    assert {"device: kernel", "device: transfer to device",
            "device: transfer from device"} <= set(legend(ax))
    drawn = timeline.device_bars(trace)
    assert len(drawn) == 26
    for device, lane in ((0, 10), (1, 11)):
        mine = drawn[drawn["device"] == device]
        bars = lane_bars(ax, lane)
        assert 1 <= len(bars) <= len(mine)  # ops closer than a pixel are one bar
        assert bars[:, 0].min() == pytest.approx(mine["begin_ns"].min() / 1e6)
        assert bars[:, 1].max() >= mine["end_ns"].max() / 1e6
    (connectors,) = [c for c in ax.collections if c is not ax.collections[0]]
    segments = np.array(connectors.get_segments())
    assert len(segments) == 26
    assert set(segments[:, 0, 1].tolist()) == {0, 4, 8}  # the host threads that offloaded
    assert set(np.round(segments[:, 1, 1]).tolist()) == {10, 11}
    # Zoomed on device 1's first target region, each operation is a bar of its own.
    regions = trace.target_regions()
    start, end = int(regions["begin_ns"].iloc[10]), int(regions["end_ns"].iloc[10])
    fig = trace.plot_timeline(start_ns=start, end_ns=end, threads=[0])
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["thread 0", "device 0", "device 1"]
    assert len(lane_bars(ax, 1)) == 0
    kernel = trace.kernels().iloc[4]
    (bar,) = lane_bars(ax, 2)
    assert bar[:2] == pytest.approx([kernel["begin_ns"] / 1e6, kernel["end_ns"] / 1e6])


def test_timeline_device_records_in_bands_where_they_overlap():
    b = OffloadRecords()
    program_with_device_records(b)
    fig = b.trace().plot_timeline()
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["thread 0", "thread 3", "thread 5", "device 1"]
    bars = lane_bars(ax, 3)
    bars = bars[np.argsort(bars[:, 0])]
    assert (bars[:, :2] * 1e6).ravel() == pytest.approx([170, 350, 1150, 4800, 1200, 5200])
    assert bars[1, 2] >= bars[2, 3] or bars[2, 2] >= bars[1, 3]  # the kernels' bands apart
    (connectors,) = ax.collections[1:]
    starts = sorted((round(s[0][0] * 1e6), s[0][1]) for s in connectors.get_segments())
    assert starts == [(160, 0), (1100, 0)]


def test_timeline_without_offload_has_no_device_lanes(skewed):
    (ax,) = skewed.plot_timeline().axes
    assert not [t for t in ax.get_yticklabels() if t.get_text().startswith("device")]
    assert len(ax.collections) == 1
