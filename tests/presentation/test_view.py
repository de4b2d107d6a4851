"""The interactive view (ompt_py.presentation.view, `ompt-py view`, Trace.view) and
its levels of detail (ompt_py.presentation.lod), on stored traces and on synthetic
ones of many regions (conftest's many_regions).

The browser tests open the written file in headless Chromium (Debian's chromium
and chromium-driver, `make system-deps`) through Selenium: no console error, a
hover on a bar shows its construct and location, a wheel zoom changes the range,
zooming in brings back each bar, the flame tab renders.  Their screenshots go to
build/test-artifacts/ (the paths are printed).  They are skipped, saying so,
only where Chromium or its driver is not installed.
"""

from __future__ import annotations

import html
import io
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, cli, load_stored, many_regions, ok, stored_path

from ompt_py.analysis import metrics
from ompt_py.presentation import lod, timeline, view

pytest.importorskip("bokeh", reason="the view needs Bokeh (the test extra installs it)")

ARTIFACTS = REPO / "build" / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
LOAD_TIMEOUT = 120  # s: the machine is shared


# ---- the page, without a browser ------------------------------------------------------------


def test_the_page_is_one_self_contained_file(tmp_path):
    t = load_stored("pystacks-inprocess")
    path = tmp_path / "v.html"
    view.write(t, path, title="pystacks")
    page = path.read_text()
    assert "<script" in page and "Bokeh" in page
    assert not re.search(r"<(script|link)[^>]+(src|href)=", page), "nothing loaded from outside"
    assert "DecompressionStream" in page, "the level-of-detail switch is inline"
    assert "pystacks" in page and "Flame" in page and "Timeline" in page


def test_lanes_are_threads_by_process_then_devices():
    offload = view.lanes(load_stored("offload.omptraw"))
    assert offload.labels[-2:] == ["device 0", "device 1"]
    assert all(label.startswith("thread ") for label in offload.labels[:-2])
    mixed = load_stored("export-mixed")  # two processes
    rows = view.lanes(mixed)
    pids = [int(label.split()[1]) for label in rows.labels]
    assert len(set(pids)) == 2 and pids == sorted(pids), rows.labels
    assert all(re.fullmatch(r"pid \d+ thread \d+", label) for label in rows.labels)


def test_bars_carry_site_team_and_wait():
    """A region's bars: its Python line and location, its team size, and the time
    each thread waited in it (metrics.region_threads: the thread states)."""
    t = load_stored("pystacks-inprocess")
    b = timeline.bars(t)
    regions = t.parallel_regions()
    bars = b.table[b.table["kind"] == timeline.KIND["parallel region"]]
    rt = metrics.region_threads(t)
    assert len(bars) == len(rt)
    waited = (rt["barrier_wait_ns"] + rt["sync_wait_ns"] + rt["lock_wait_ns"]).to_numpy()
    assert sorted(bars["wait_ns"].tolist()) == sorted(waited.tolist())
    sites = b.sites.iloc[bars["site"].to_numpy()]
    shown = set(zip(sites["py_location"], sites["location"]))
    expected = {(p if isinstance(p, str) else "", loc if isinstance(loc, str) else "")
                for p, loc in zip(regions["py_location"], regions["location"])}
    assert shown == expected
    assert set(bars["team"].tolist()) == set(regions["team_size"].dropna().astype(int))


def _bar_set(n_lanes: int, rows: list[tuple[int, int, int, int]]) -> lod.BarSet:
    lane, begin, end, kind = (np.array(c, np.int64) for c in zip(*rows))
    layers = np.array([k.layer for k in timeline.KINDS])
    zeros = np.zeros(len(lane), np.int64)
    return lod.BarSet(lane, begin, end, kind, layers[kind], zeros + 1, zeros, zeros - 1, zeros,
                      zeros + 1)


def test_aggregates_keep_the_kind_covering_most(monkeypatch):
    """5000 times, on one lane: a loop of 11 ns then sections of 5 ns (one layer),
    a barrier wait over the sections (a layer above): more than a leaf holds, so
    the root keeps an aggregate per layer: the loop, covering 11/16 of each bin,
    and the wait, 5/16; each bar is in one node, whole."""
    monkeypatch.setattr(lod, "LEAF_BARS", 1000)
    loop, sections, barrier = (timeline.KIND[k] for k in ("work: loop", "work: sections",
                                                          "barrier wait"))
    rows = []
    for i in range(5000):
        rows += [(0, 16 * i, 16 * i + 11, loop), (0, 16 * i + 11, 16 * i + 16, sections),
                 (0, 16 * i + 11, 16 * i + 16, barrier)]
    bars = _bar_set(1, rows)
    tree = lod.build(bars, 80_000, 1)
    root = tree.nodes[(0, 0)]
    assert not root.leaf and root.aggregate is not None
    agg = root.aggregate
    width = 1 << tree.bin_shift(0)
    whole = (agg["bin"] + agg["bins"]) * width <= 80_000  # not the last, partly empty bin
    share = dict(zip(agg["kind"][whole].tolist(), (agg["share"][whole] / 255).tolist()))
    assert share == pytest.approx({loop: 11 / 16, barrier: 5 / 16}, abs=0.01)
    assert agg["bars"].sum() >= len(bars)
    kept = sum(len(node.bars) for node in tree.nodes.values())
    assert kept == len(bars)
    leaves = [node for node in tree.nodes.values() if node.leaf]
    assert leaves and all(len(node.bars) <= lod.LEAF_BARS for node in leaves)
    for node in tree.nodes.values():  # a node holds its bars whole
        width = tree.width(node.depth)
        assert (node.bars.begin >= node.index * width).all()
        assert (node.bars.end <= (node.index + 1) * width).all()


def test_blobs_round_trip():
    b = _bar_set(3, [(0, 5, 9, 0), (2, 7, 7, 3), (1, 2**33, 2**33 + 70_000, 5)])
    order = np.argsort(b.begin)
    blob = lod.encode(lod.bar_columns(b.take(order), 0))
    got = lod.decode(blob, lod.BAR_FIELDS)
    assert blob["types"][1] == "f8"  # a gap over 2**32 ns: doubles
    assert np.cumsum(got["begin"]).tolist() == b.begin[order].tolist()
    assert got["duration"].tolist() == (b.end - b.begin)[order].tolist()
    assert got["wait"].tolist() == [0, 0, 0]  # -1 (not known) + 1


def test_blobs_are_encoded_alike_on_a_pool():
    b = _bar_set(2, [(0, i, 2 * i, i % 7) for i in range(1000)] + [(1, 2**33, 2**34, 5)])
    columns = [lod.bar_columns(b.slice(a, a + 100), 0) for a in range(0, 1001, 100)]
    assert lod.encode_all(columns) == [lod.encode(c) for c in columns]


def test_bit_length_is_exact():
    values = [0, 1, 2, 3, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**53 - 1, 2**53 + 1,
              2**62 + 12345, 2**63 - 1]
    assert lod.bit_length(np.array(values)).tolist() == [v.bit_length() for v in values]


def test_lod_sum_cuts_bars_at_bins_and_sums_them():
    """Bins of 16 ns in nodes of 256: two bars of one group share bin 0, the longer
    runs into bin 1; the rows of the level below come first in their bin."""
    from ompt_py import _core

    def ints(*v: int) -> np.ndarray:
        return np.array(v, np.int64)

    key, covered, bars, largest, site = (np.frombuffer(c, np.int64) for c in _core.lod_sum(
        ints(0, 3, 40), ints(10, 20, 41), ints(0, 0, 1), ints(5, 7, 9), 4, 8, None, 0, 1))
    assert key.tolist() == [0 << 1 | 0, 1 << 1 | 0, 2 << 1 | 1]
    assert covered.tolist() == [10 + 13, 4, 1]
    assert bars.tolist() == [2, 1, 1]
    assert largest.tolist() == [17, 17, 1] and site.tolist() == [7, 7, 9]
    # One level up (bins of 64 ns: delta 2), with a bar of 17 ns of site 3: the first
    # largest stays the one below.
    above = tuple(np.frombuffer(c, np.int64) for c in _core.lod_sum(
        ints(100), ints(117), ints(0), ints(3), 6, 8, (key, covered, bars, largest, site), 2, 1))
    assert above[0].tolist() == [0 << 1 | 0, 0 << 1 | 1, 1 << 1 | 0]
    assert above[1].tolist() == [27, 1, 17] and above[4].tolist() == [7, 9, 3]
    with pytest.raises(ValueError, match="held whole by their nodes"):
        _core.lod_sum(ints(0), ints(300), ints(0), ints(0), 4, 8, None, 0, 1)
    with pytest.raises(ValueError, match="begin: an array of int64"):
        _core.lod_sum(np.zeros(1, np.int32), ints(3), ints(0), ints(0), 4, 8, None, 0, 1)
    with pytest.raises(ValueError, match=r"groups from 0 below 2\*\*gbits"):
        _core.lod_sum(ints(0), ints(3), ints(2), ints(0), 4, 8, None, 0, 1)


def test_aggregates_do_not_depend_on_how_lanes_are_numbered(monkeypatch):
    """Lanes 0 and 2**40: their groups (lane, layer, kind) numbered densely, as
    there is no room for the bins beside them; the same aggregates as lanes 0 and 1."""
    monkeypatch.setattr(lod, "LEAF_BARS", 50)
    kinds = [timeline.KIND[k] for k in ("work: loop", "barrier wait", "explicit task")]
    rows = [(i % 2, 37 * i, 37 * i + 5 + i % 29, kinds[i % 3]) for i in range(3000)]
    near, far = (lod.build(_bar_set(2, [(lane * top, *rest) for lane, *rest in rows]),
                           37 * 3000 + 40, 2) for top in (1, 2**40))
    inner = [key for key, node in near.nodes.items() if node.aggregate is not None]
    assert len(inner) > 3 and sorted(near.nodes) == sorted(far.nodes)
    for key in inner:
        a, b = near.nodes[key].aggregate, far.nodes[key].aggregate
        assert len(a["bin"]) and (a["lane"] * 2**40).tolist() == b["lane"].tolist()
        assert all(a[f].tolist() == b[f].tolist() for f in lod.AGGREGATE_FIELDS if f != "lane")


def test_a_large_trace_stays_small(monkeypatch):
    """30,000 regions of 2 threads: every bar is in the file once (as a leaf's or a
    node's own), the aggregates are a fraction of them, and the file holds less
    than 16 bytes per bar beyond Bokeh's own script."""
    t = many_regions(100)
    rows = view.lanes(t)
    lo, hi = view._window(t, None, None)
    bars, _ = view.bar_set(t, rows, lo, hi)
    tree = lod.build(bars, hi - lo, len(rows.keys))
    assert sum(len(n.bars) for n in tree.nodes.values()) == len(bars) > 100_000
    glyphs = sum(len(n.aggregate["bin"]) for n in tree.nodes.values() if n.aggregate)
    assert 0 < glyphs < len(bars) / 2
    small = len(view.html(load_stored("plots-tasks")))
    assert len(view.html(t)) - small < 16 * len(bars)


def test_window_sets_the_range_and_cuts_the_bars():
    t = load_stored("plots-tasks")
    lo, hi = view._window(t, None, None)
    start, end = lo + (hi - lo) // 4, lo + (hi - lo) // 2
    page = view.layout(t, start, end)
    x = page.select_one({"name": "time"})
    assert (x.start, x.end) == (start / 1e6, end / 1e6) == x.bounds
    drawn = page.select_one({"name": "bars"}).data
    assert drawn["left"].min() >= start / 1e6 and drawn["right"].max() <= end / 1e6
    with pytest.raises(ValueError, match="empty"):
        view.layout(t, end, start)


def test_view_in_jupyter_is_an_iframe_of_the_page(monkeypatch, tmp_path):
    monkeypatch.setattr(view, "in_notebook", lambda: True)
    shown = load_stored("plots-tasks").view()
    assert shown.path is None and not shown.opened
    frame = shown._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and html.escape("Bokeh") in frame
    assert html.unescape(frame.split('"')[1]) == shown.page


def test_view_writes_and_opens_only_with_a_display(monkeypatch, tmp_path):
    opened = []
    monkeypatch.setattr(view.webbrowser, "open", lambda url: opened.append(url) or True)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    t = load_stored("plots-tasks")
    shown = t.view(tmp_path / "a.html")
    assert Path(shown.path).read_text() == shown.page and not shown.opened and not opened
    monkeypatch.setenv("DISPLAY", ":0")
    shown = t.view(tmp_path / "b.html")
    assert shown.opened and opened == [Path(shown.path).as_uri()]
    shown = t.view(tmp_path / "c.html", open_browser=False)
    assert not shown.opened and len(opened) == 1


def test_cli_view_writes_the_file_and_says_where(tmp_path):
    r = ok(cli("view", stored_path("plots-tasks"), "-o", tmp_path / "v.html", "--no-open",
               "--start", "5ms", "--end", "50ms"))
    assert f"{tmp_path / 'v.html'} (" in r.stderr and "open it in a browser" in r.stderr
    r = cli("view", stored_path("plots-tasks"), "--start", "soon", cwd=tmp_path)
    assert r.returncode == 2 and "'soon' is not a time" in r.stderr
    r = cli("view", stored_path("plots-tasks"), "--start", "2s", "--end", "1s", cwd=tmp_path)
    assert r.returncode == 2 and "empty" in r.stderr
    r = cli("view", stored_path("profile-mixed"), "--no-open", cwd=tmp_path)
    assert r.returncode == 2 and "is a profile" in r.stderr
    r = ok(cli("view", stored_path("plots-tasks"), "--no-open", cwd=tmp_path))
    assert (tmp_path / "plots-tasks.html").exists()
    assert "--no-open" in ok(cli("view", "--help")).stdout


def test_magic_without_bokeh_shows_the_timeline_and_what_to_install(monkeypatch, capsys):
    from ompt_py.errors import ConfigError
    from ompt_py.presentation import magic

    def missing() -> None:
        raise ConfigError(view.MISSING_BOKEH)

    shown: list = []
    monkeypatch.setattr(magic, "display", shown.append)
    monkeypatch.setattr(view, "in_notebook", lambda: True)
    magic.show(load_stored("plots-tasks"))
    assert [type(s).__name__ for s in shown] == ["Summary", "View"]
    monkeypatch.setattr(magic, "require_bokeh", missing)
    shown.clear()
    magic.show(load_stored("plots-tasks"))
    assert [type(s).__name__ for s in shown] == ["Summary", "Image"]
    assert "pip install 'ompt-py[view]'" in capsys.readouterr().out


def test_cli_view_without_bokeh_says_what_to_install(tmp_path):
    code = ("import sys; sys.modules['bokeh'] = None\n"
            "from ompt_py.presentation.cli import main\n"
            f"sys.exit(main(['view', {str(stored_path('plots-tasks'))!r}, '--no-open']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    assert "pip install 'ompt-py[view]'" in r.stderr
    assert not list(tmp_path.iterdir())


def test_flame_png_and_axes(tmp_path):
    t = load_stored("pystacks-inprocess")
    fig = t.plot_flame(tmp_path / "flame.png")
    assert (tmp_path / "flame.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    labels = [x.get_text() for x in fig.axes[0].texts]
    assert any("pystacks_app.py" in label for label in labels)
    assert any(label.startswith("parallel region at") for label in labels)
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    assert t.plot_flame(ax) is ax.figure


# ---- in a browser -------------------------------------------------------------------------------

needs_browser = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="chromium and chromium-driver (Debian) are not installed: make system-deps "
           "installs them")


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(LOAD_TIMEOUT)
    driver.set_script_timeout(LOAD_TIMEOUT)
    yield driver
    driver.quit()


def until(driver, script: str, what: str, timeout: float = LOAD_TIMEOUT):
    """Polls ``script`` until it returns something true; its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {timeout} s")


def open_page(driver, path: Path) -> list[dict]:
    """Opens the page, waits for Bokeh to have drawn it; the console's messages."""
    driver.get_log("browser")  # earlier pages' messages
    driver.get(path.as_uri())
    until(driver, "return Bokeh.documents.length > 0 && Bokeh.documents[0].is_idle",
          "the page's first render")
    return driver.get_log("browser")


def errors(log: list[dict]) -> list[str]:
    return [e["message"] for e in log if e["level"] == "SEVERE"]


def screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


MODEL = "Bokeh.documents[0].get_model_by_name"
RANGE = f"const x = {MODEL}('timeline').x_range;"


def set_range(driver, start: float, end: float) -> None:
    """Sets the time range (ms) and waits for the view to have drawn its data."""
    driver.execute_script(f"{RANGE} x.setv({{start: {start}, end: {end}}});")
    until(driver, f"{RANGE} const s = (window.omptpy_view || {{}})[x.id];"
          f"return s && s.done === s.seq;", "the data of the range")


def source(driver, name: str) -> dict[str, list]:
    return driver.execute_script(
        f"const d = {MODEL}({name!r}).data; const out = {{}};"
        "for (const k of ['left', 'right', 'lane', 'kind']) out[k] = Array.from(d[k]);"
        "return out;")


def bar_position(driver, kind: int) -> tuple[float, float]:
    """Where on the page the middle of the first bar of ``kind`` is."""
    return driver.execute_script(f"""
        const p = {MODEL}('timeline'), v = Bokeh.index.find_one(p);
        const d = {MODEL}('bars').data;
        const i = d.kind.findIndex((k, j) => k === {kind} && d.dur[j] > 0);
        const x = (d.left[i] + d.right[i]) / 2, y = (d.bottom[i] + d.top[i]) / 2;
        const c = v.canvas_view.el.getBoundingClientRect();
        return [c.left + v.frame.x_scale.compute(x), c.top + v.frame.y_scale.compute(y)];""")


TOOLTIPS = """
function texts(root, out) {
  for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) texts(el.shadowRoot, out);
    if (el.classList.contains('bk-tooltip-content')) out.push(el.innerText);
  }
  return out;
}
return texts(document, []).join('\\n');
"""


def colours_in(png: Path) -> set[tuple[int, int, int]]:
    from PIL import Image

    with Image.open(io.BytesIO(png.read_bytes())) as im:
        return {c for _, c in im.convert("RGB").getcolors(1 << 20)}


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


@needs_browser
def test_page_hover_zoom_and_flame(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    t = load_stored("known-lock")
    path = tmp_path / "known-lock.html"
    view.write(t, path, title="known-lock")
    assert errors(open_page(browser, path)) == []
    shot = screenshot(browser, "view-known-lock.png")
    assert rgb(timeline.KINDS[timeline.KIND["lock/critical wait"]].colour) in colours_in(shot)
    # hovering a region's bar shows its construct and location
    x, y = bar_position(browser, timeline.KIND["parallel region"])
    pointer = ActionBuilder(browser)
    pointer.pointer_action.move_to_location(int(x), int(y))
    pointer.perform()
    tip = until(browser, TOOLTIPS, "the tooltip")
    region = t.parallel_regions().iloc[0]
    assert "parallel region" in tip and region["location"] in tip, tip
    assert "team size:\t2" in tip and "waited:" in tip
    screenshot(browser, "view-known-lock-hover.png")
    # the wheel zooms the time axis in
    before = browser.execute_script(f"{RANGE} return [x.start, x.end];")
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_viewport(int(x), int(y)),
                                             0, -400).perform()
    after = until(browser, f"{RANGE} const r = [x.start, x.end];"
                  f"return r[1] - r[0] < {before[1] - before[0]} * 0.9 ? r : null;",
                  "a zoom by the wheel")
    assert before[0] <= after[0] < after[1] <= before[1]
    # the flame tab
    browser.execute_script(f"{MODEL}('tabs').active = 1;")
    until(browser, f"return Bokeh.index.find_one({MODEL}('flame')) !== null && "
          "Bokeh.documents[0].is_idle", "the flame tab")
    time.sleep(0.5)
    shot = screenshot(browser, "view-known-lock-flame.png")
    from ompt_py.presentation.plots import FLAME_COLOURS

    assert rgb(FLAME_COLOURS["construct"]) in colours_in(shot)
    assert errors(browser.get_log("browser")) == []


@needs_browser
def test_zooming_in_brings_back_each_bar(browser, tmp_path, monkeypatch):
    """3000 regions of 2 threads, with leaves of at most 2000 bars: the whole trace
    is drawn as aggregates; a range of 1/500 of it shows every bar in it exactly
    (decoded from the page's blobs), and no aggregate."""
    monkeypatch.setattr(lod, "LEAF_BARS", 2000)
    t = many_regions(10)
    path = tmp_path / "many.html"
    view.write(t, path)
    assert errors(open_page(browser, path)) == []
    assert len(source(browser, "aggregates")["left"]) > 0
    screenshot(browser, "view-many-whole.png")
    lo, hi = view._window(t, None, None)
    bars, _ = view.bar_set(t, view.lanes(t), lo, hi)
    middle = lo + int(np.sort(bars.begin)[len(bars) // 3])  # a range around a bar
    start, end = middle - (hi - lo) / 1000, middle + (hi - lo) / 1000
    set_range(browser, start / 1e6, end / 1e6)
    drawn = source(browser, "bars")
    assert source(browser, "aggregates")["left"] == []
    inside = (bars.end + lo >= start) & (bars.begin + lo <= end)
    expected = set(zip(bars.lane[inside].tolist(),
                       np.round((bars.begin[inside] + lo) / 1e6, 6).tolist(),
                       np.round((bars.end[inside] + lo) / 1e6, 6).tolist()))
    got = set(zip(drawn["lane"], np.round(drawn["left"], 6).tolist(),
                  np.round(drawn["right"], 6).tolist()))
    assert len(expected) > 10 and expected <= got
    screenshot(browser, "view-many-zoomed.png")
    # back to the whole trace: aggregates again
    set_range(browser, lo / 1e6, hi / 1e6)
    assert len(source(browser, "aggregates")["left"]) > 0
    assert errors(browser.get_log("browser")) == []


