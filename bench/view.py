"""Speed and size of the interactive view (issue 16), printed as figures of one run.

The trace of bench/export.py (about 10^7 events: 715,000 empty parallel regions of
2 threads, `benchwork regions`; with --quick 100,000) is converted to Parquet,
then, each in a fresh process:

* the view written by the library: the trace loaded (not timed), then
  ``ompt_py.presentation.view.write`` (the tables, the bars, the levels of
  detail, the flame, Bokeh's page): its seconds and CPU seconds;
* ``ompt-py view trace.parquet -o FILE --no-open``, end to end (the interpreter,
  the imports, the trace read from Parquet, the page written).

Then the page is opened in headless Chromium (Debian's chromium and
chromium-driver, through Selenium): its first render is the time from the
navigation's start to Bokeh's document being idle (polled every 20 ms; the
median of 3 loads); and a zoom to a thousandth of the trace, the time until the
view's script has drawn that range's bars (inflated from the page).

Targets, each marked PASS or FAIL (issue 16): the HTML written in under 10 s
(the library's write; the end-to-end command is judged too) and under 50 MB;
the first render in under 3 s.  The figures of a loaded machine are not those
of a quiet one: the CPU seconds say how much of the time was this process's.

    python bench/view.py [--quick] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export import QUICK_REGIONS, REGIONS, regions_trace
from overhead import BenchError, build, build_steps, run_program

WRITE_MAX_S = 10.0
SIZE_MAX_MB = 50.0
RENDER_MAX_S = 3.0
LOADS = 3


def write_once(trace_path: str, out: str) -> None:
    """In the child: load the trace, write the view, print the figures as JSON."""
    import ompt_py
    from ompt_py.presentation import view

    trace = ompt_py.load(trace_path)
    view.require_bokeh()
    import bokeh.plotting  # noqa: F401  (imported by the command before the load)

    t0, c0 = time.perf_counter(), time.process_time()
    view.write(trace, out, title=os.path.basename(trace_path))
    print(json.dumps({"events": len(trace), "seconds": time.perf_counter() - t0,
                      "cpu_seconds": time.process_time() - c0}))


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        raise BenchError("chromium and chromium-driver are needed (make system-deps)")
    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,900"):
        options.add_argument(arg)
    d = webdriver.Chrome(options=options, service=Service(driver))
    d.set_page_load_timeout(300)
    d.set_script_timeout(300)
    return d


def _poll(driver, script: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.02)
    raise BenchError(f"the page did not answer within {timeout:.0f} s: {script[:60]}")


def in_browser(page: Path) -> dict:
    """The first render's seconds (median of LOADS loads) and a zoom's."""
    driver = _browser()
    try:
        renders = []
        for _ in range(LOADS):
            driver.get("about:blank")
            driver.get(page.as_uri())
            ms = _poll(driver, "return Bokeh.documents.length > 0 && Bokeh.documents[0].is_idle"
                               " && performance.now()")
            renders.append(ms / 1e3)
        x = "const x = Bokeh.documents[0].get_model_by_name('timeline').x_range;"
        start, end = driver.execute_script(f"{x} return [x.start, x.end];")
        middle, width = (start + end) / 2, (end - start) / 1000
        t0 = driver.execute_script(f"{x} const t = performance.now();"
                                   f"x.setv({{start: {middle}, end: {middle + width}}}); return t;")
        done = _poll(driver, f"{x} const s = (window.omptpy_view || {{}})[x.id];"
                             "return s && s.done === s.seq && performance.now();")
        drawn = driver.execute_script(
            "const d = Bokeh.documents[0];"
            "return [d.get_model_by_name('bars').data.left.length,"
            " d.get_model_by_name('aggregates').data.left.length];")
        return {"renders_s": renders, "render_s": statistics.median(renders),
                "zoom_s": (done - t0) / 1e3, "zoom_bars": drawn[0], "zoom_aggregates": drawn[1]}
    finally:
        driver.quit()


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def run(regions: int, keep: Path | None) -> dict:
    import ompt_py

    with tempfile.TemporaryDirectory() as tmp:
        raw, parquet = Path(tmp, "raw"), Path(tmp, "trace.parquet")
        regions_trace(raw, regions)
        ompt_py.convert(raw, parquet)
        shutil.rmtree(raw)
        page = Path(tmp, "view.html")
        child = run_program([sys.executable, __file__, "--one", str(parquet), str(page)],
                            dict(os.environ), "view.write")
        library = json.loads(child.stdout.splitlines()[-1])
        size_mb = page.stat().st_size / 1e6
        cli_page = Path(tmp, "cli.html")
        t0 = time.perf_counter()
        run_program([sys.executable, "-m", "ompt_py", "view", str(parquet), "-o", str(cli_page),
                     "--no-open"], dict(os.environ), "ompt-py view")
        command_s = time.perf_counter() - t0
        browser = in_browser(page)
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(page, keep / "view.html")
    figures = {"events": library["events"], "regions": regions, "write_s": library["seconds"],
               "write_cpu_s": library["cpu_seconds"], "command_s": command_s,
               "size_mb": size_mb, **browser}
    n = figures["events"]
    print(f"== the interactive view of a trace of {n:,} events ({regions:,} regions of 2 "
          "threads)")
    print(f"   [{verdict(library['seconds'] < WRITE_MAX_S)}] written by view.write in "
          f"{library['seconds']:.2f} s ({library['cpu_seconds']:.2f} s of CPU; trace loaded "
          f"before; target < {WRITE_MAX_S:.0f} s)")
    print(f"   [{verdict(command_s < WRITE_MAX_S)}] ompt-py view trace.parquet, end to end: "
          f"{command_s:.2f} s (target < {WRITE_MAX_S:.0f} s)")
    print(f"   [{verdict(size_mb < SIZE_MAX_MB)}] size {size_mb:.1f} MB "
          f"({size_mb * 1e6 / n:.2f} bytes per event; target < {SIZE_MAX_MB:.0f} MB)")
    print(f"   [{verdict(browser['render_s'] < RENDER_MAX_S)}] first render in headless "
          f"Chromium {browser['render_s']:.2f} s (median of "
          f"{', '.join(f'{s:.2f}' for s in browser['renders_s'])}; target < "
          f"{RENDER_MAX_S:.0f} s)")
    print(f"   zoom to 1/1000 of the trace: drawn after {browser['zoom_s']:.2f} s "
          f"({browser['zoom_bars']:,} bars, {browser['zoom_aggregates']:,} aggregate glyphs)")
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help=f"a trace of {QUICK_REGIONS:,} regions (about 1.4 M events)")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    p.add_argument("--keep", type=Path, metavar="DIR", help="keep the page in DIR")
    p.add_argument("--one", nargs=2, metavar=("TRACE", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        write_once(*args.one)
        return 0
    try:
        build(build_steps())
        figures = run(QUICK_REGIONS if args.quick else REGIONS, args.keep)
    except (BenchError, subprocess.SubprocessError) as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
