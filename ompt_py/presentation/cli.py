"""The `ompt-py` command line."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile

DESCRIPTION = """\
Trace what the OpenMP runtime does.

  ompt-py run -o trace.parquet -- ./my_openmp_program args
  ompt-py run -o trace.parquet my_script.py args
  ompt-py run -o trace.parquet -m my_module args
  ompt-py report trace.parquet [--plot timeline.png] [--html report.html]
  ompt-py export trace.parquet --format perfetto -o trace.json
  ompt-py doctor [my_script.py args | -m my_module args]

How the tool attaches: LLVM's OpenMP runtime (libomp) looks for a tool once,
when it initialises (first OpenMP construct or omp_* call).  `ompt-py run`
sets OMP_TOOL_LIBRARIES for the command and every process it starts, so
each process that uses libomp is traced from its start, into a file of its
own (keyed by pid).  Inside Python, `import ompt_py` must come before
anything initialises OpenMP; a runtime that started earlier cannot be
traced in that process.

GNU libgomp (gcc -fopenmp) has no tool interface.  LLVM libomp implements
its ABI, so ompt-py runs libgomp-built code on libomp (the runtime
fallback, OMPTPY_RUNTIME=auto|bundled|system|off, default auto): `ompt-py
run` preloads libomp into the command, `import ompt_py` loads it before the
modules imported after it.  `ompt-py doctor` tells what runs on which
runtime and why something is not traced.
"""

RUN_EPILOG = """\
The target is a Python script (ends in .py), -m MODULE, or a command after
`--`.  The exit status is the command's.  Environment variables of the tool
(OMPTPY_BUFFER_SIZE, OMPTPY_OVERFLOW, OMPTPY_CLOCK, OMPTPY_DRAIN_MS) pass
through; the options below override them.
"""


def _run_command(args: argparse.Namespace) -> list[str]:
    rest = list(args.target)
    if args.module:
        return [sys.executable, "-m", args.module, *rest]
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise SystemExit("ompt-py run: nothing to run; give a script, -m MODULE, or -- COMMAND")
    if rest[0].endswith(".py"):
        if not os.path.isfile(rest[0]):
            raise SystemExit(f"ompt-py run: no such script: {rest[0]}")
        return [sys.executable, *rest]
    if shutil.which(rest[0]) is None:
        raise SystemExit(f"ompt-py run: command not found: {rest[0]}")
    return rest


def cmd_run(args: argparse.Namespace) -> int:
    from .. import _core, tool_path
    from ..errors import TraceFileError
    from ..live import attach, runhook, runtime
    from ..trace import load

    command = _run_command(args)
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        raise SystemExit(f"ompt-py run: cannot write {args.output}: {out_dir} is not a writable "
                         "directory; create it or choose another -o")
    if os.path.isdir(args.output) and os.listdir(args.output):
        raise SystemExit(f"ompt-py run: {args.output} is a directory that is not empty; its "
                         "traces would be mixed with this one; give an empty or new directory")
    if args.keep_raw and os.path.isdir(args.keep_raw) and os.listdir(args.keep_raw):
        raise SystemExit(f"ompt-py run: --keep-raw {args.keep_raw} is not empty; its files would "
                         "be merged into this trace; give an empty or new directory")
    if args.buffer_size:
        os.environ["OMPTPY_BUFFER_SIZE"] = args.buffer_size
    if args.overflow:
        os.environ["OMPTPY_OVERFLOW"] = args.overflow
    # Checked here, before the command starts (each of its Python processes reads them).
    for option, variable, check, most in (
            ("--python-stacks", runhook.PYTHON_STACKS_VARIABLE, runhook.python_stacks_depth,
             _core.PYTHON_STACKS_MAX_DEPTH),
            ("--native-depth", runhook.NATIVE_DEPTH_VARIABLE, runhook.native_depth,
             _core.NATIVE_STACKS_MAX_DEPTH)):
        given = getattr(args, option[2:].replace("-", "_"))
        if given:
            os.environ[variable] = given
        try:
            check(None, most)
        except ValueError as e:
            raise SystemExit(f"ompt-py run: {e}".replace(variable, option if given else variable)
                             ) from None
    attach.check_environment()
    env = dict(os.environ)
    libomp = runtime.launcher_libomp(args.runtime or env.get("OMPTPY_RUNTIME"))
    if libomp:  # libgomp-built code runs on libomp, in the command and its children
        env["LD_PRELOAD"] = ":".join([libomp, *(p for p in env.get("LD_PRELOAD", "").split(":")
                                                if p and p != libomp)])
    # The preload hook: _exit, abort and exec flush the trace and record how each ended.
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and p != attach.HOOK_PATH]
    env["LD_PRELOAD"] = ":".join([attach.HOOK_PATH, *preload])
    raw_dir = args.keep_raw or tempfile.mkdtemp(prefix="ompt-py-")
    os.makedirs(raw_dir, exist_ok=True)
    others = [p for p in env.get("OMP_TOOL_LIBRARIES", "").split(":") if p and p != tool_path()]
    env["OMP_TOOL_LIBRARIES"] = ":".join([tool_path(), *others])
    env["OMPTPY_OUTPUT"] = os.path.abspath(raw_dir)
    env.pop("OMPTPY_TOOL", None)
    # Python processes of the command finish their files also when they end
    # through os._exit or SIGTERM (multiprocessing workers): see live/runhook.py.
    site_dir = tempfile.mkdtemp(prefix="ompt-py-site-")
    shutil.copyfile(runhook.__file__,
                    os.path.join(site_dir, "sitecustomize.py"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (site_dir, env.get("PYTHONPATH")) if p)
    # The terminal's Ctrl-C reaches the command; we wait for it and still save.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        returncode = subprocess.call(command, env=env)
    finally:
        signal.signal(signal.SIGINT, previous)
        shutil.rmtree(site_dir, ignore_errors=True)
    if returncode < 0:  # killed by a signal: report it as a shell does
        returncode = 128 - returncode
    try:
        trace = load(raw_dir)
    except TraceFileError as e:
        print(f"ompt-py run: no trace written: {e}", file=sys.stderr)
        if not args.keep_raw:
            shutil.rmtree(raw_dir, ignore_errors=True)
        return returncode
    try:
        trace.save(args.output)
    except OSError as e:
        print(f"ompt-py run: cannot write {args.output} ({e}); the raw trace is kept in "
              f"{raw_dir} (ompt-py report {raw_dir})", file=sys.stderr)
        return returncode or 1
    if not args.keep_raw:
        shutil.rmtree(raw_dir, ignore_errors=True)
    if not args.quiet:
        procs = trace.meta["processes"]
        print(
            f"ompt-py: {len(trace):,} events from {len(procs)} process(es) "
            f"(written {trace.written:,}, dropped {trace.dropped:,}) -> {args.output}\n"
            f"         see: ompt-py report {args.output}",
            file=sys.stderr,
        )
        if trace.dropped:
            print("ompt-py: records were dropped (buffers full): raise --buffer-size or use "
                  "--overflow flush", file=sys.stderr)
    return returncode


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..live import doctor

    if not args.target and not args.module:
        print(doctor.report(), end="")
        return 0
    # The program runs with ompt_py imported first; the report comes at its exit.
    if args.module:
        run = f"runpy.run_module({args.module!r}, run_name='__main__', alter_sys=True)"
        argv = [args.module, *args.target]
    else:
        target = [t for t in args.target if t != "--"]
        if not target or not target[0].endswith(".py"):
            raise SystemExit("ompt-py doctor: give a Python script (.py) or -m MODULE; for other "
                             "programs use ompt-py run and ompt-py report")
        run = f"runpy.run_path({target[0]!r}, run_name='__main__')"
        argv = target
    code = ("import ompt_py, atexit, runpy, sys\n"
            "atexit.register(lambda: print(ompt_py.doctor(), end='', file=sys.stderr))\n"
            f"sys.argv = {argv!r}\n{run}\n")
    return subprocess.call([sys.executable, "-c", code])


def cmd_export(args: argparse.Namespace) -> int:
    from ..io import export
    from ..trace import load

    trace = load(args.trace)
    try:
        export(trace, args.output, args.format)
    except OSError as e:
        print(f"ompt-py export: cannot write {args.output}: {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"ompt-py: {len(trace):,} events from {len(trace.meta['processes'])} process(es) "
              f"-> {args.output} ({args.format})", file=sys.stderr)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ..trace import load
    from .report import render, render_html

    trace = load(args.trace)
    print(render(trace, top=args.top), end="")
    try:
        if args.plot:
            from .plots import overview

            overview(trace).savefig(args.plot, dpi=100)
            print(f"ompt-py report: timeline and thread states -> {args.plot}", file=sys.stderr)
        if args.html:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(render_html(trace, top=args.top, title=os.path.basename(args.trace)))
            print(f"ompt-py report: HTML report -> {args.html}", file=sys.stderr)
    except OSError as e:
        print(f"ompt-py report: cannot write the output ({e}); choose another path",
              file=sys.stderr)
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    from ..io import EXPORT_FORMATS

    p = argparse.ArgumentParser(
        prog="ompt-py", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run", help="run a program, script or module with the tool attached",
        description="Run a command with the ompt-py tool attached to its OpenMP runtime.\n\n"
        + DESCRIPTION.split("\n\n", 1)[1],
        epilog=RUN_EPILOG, formatter_class=argparse.RawTextHelpFormatter,
    )
    run.add_argument("-o", "--output", default="ompt-trace.parquet",
                     help="trace to write: a .parquet file, or a directory for a Parquet "
                          "dataset partitioned by process (default: %(default)s)")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a Python module")
    run.add_argument("--buffer-size", metavar="SIZE",
                     help="per-thread buffer bound, e.g. 8M (default), 64M")
    run.add_argument("--overflow", choices=["flush", "drop", "grow"],
                     help="when a thread's buffer is full: the thread flushes it itself "
                          "(default), drops and counts records, or grows the buffer")
    run.add_argument("--runtime", choices=["auto", "bundled", "system", "off"],
                     help="run libgomp-built code on LLVM libomp (preloaded): auto (default: "
                          "the system's libomp, else the bundled one), bundled, system, or off")
    run.add_argument("--keep-raw", metavar="DIR",
                     help="write the per-process raw files into DIR and keep them")
    run.add_argument("--python-stacks", metavar="on|off|DEPTH",
                     help="record the Python call stack that started each region in the "
                          "command's Python processes (default: on, 32 frames; "
                          "OMPTPY_PYTHON_STACKS)")
    run.add_argument("--native-depth", metavar="N",
                     help="with each Python stack, N native frames above the region's code "
                          "(default 0; costs microseconds per region; OMPTPY_NATIVE_DEPTH)")
    run.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    run.add_argument("target", nargs=argparse.REMAINDER,
                     help="SCRIPT.py [ARGS], or -- COMMAND [ARGS]")
    run.set_defaults(func=cmd_run)
    rep = sub.add_parser("report", help="print a summary of a trace; plots and HTML report",
                         description="Print counts and times per construct, per parallel "
                         "region and per thread, and the written/dropped record counts. "
                         "--plot and --html also write the answers: time per construct and "
                         "source location, thread states, load imbalance per region, task "
                         "durations, lock contention, and the per-thread timeline.")
    rep.add_argument("trace", help="a trace file (.parquet), raw directory or .omptraw file")
    rep.add_argument("--top", type=int, default=10, help="rows per table (default: %(default)s)")
    rep.add_argument("--plot", metavar="FILE",
                     help="write the per-thread timeline and state breakdown as an image "
                          "(format from the extension: .png, .svg, .pdf)")
    rep.add_argument("--html", metavar="FILE",
                     help="write one self-contained HTML report: the summary tables and the "
                          "plots (embedded PNG)")
    rep.set_defaults(func=cmd_report)
    exp = sub.add_parser(
        "export", help="write a trace as Perfetto/Chrome JSON, CSV or Parquet",
        description="Write a trace for other tools: perfetto (JSON Trace Event Format for "
        "ui.perfetto.dev and chrome://tracing: a track per thread, nested slices, task "
        "flows, a threads-waiting counter), csv (one row per event), parquet (a .parquet "
        "file, or a directory: a dataset partitioned by process, pid=N/part-0.parquet).")
    exp.add_argument("trace", help="a trace file (.parquet), dataset or raw directory, or "
                     ".omptraw file")
    exp.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="what to write")
    exp.add_argument("-o", "--output", required=True, help="the file (or dataset directory)")
    exp.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    exp.set_defaults(func=cmd_export)
    doc = sub.add_parser(
        "doctor", help="tell which OpenMP runtimes a program uses and why it is not traced",
        description="Without a target: this installation (tool, bundled and system libomp). "
        "With a Python script or -m MODULE: runs it with ompt_py imported first and, at its "
        "exit, lists the OpenMP runtimes mapped, which modules link which runtime, and the "
        "problems found (modules loaded before the fallback, several runtime copies).")
    doc.add_argument("-m", dest="module", metavar="MODULE", help="run a Python module")
    doc.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT.py [ARGS]")
    doc.set_defaults(func=cmd_doctor)
    return p


def main(argv: list[str] | None = None) -> int:
    import warnings

    from ..errors import OmptPyError

    args = parser().parse_args(argv)
    # An invalid OMPTPY_* variable is reported once, as an error, by the command.
    warnings.filterwarnings("ignore", message="ompt_py is off")
    try:
        return args.func(args)
    except OmptPyError as e:
        print(f"ompt-py {args.command}: {e}", file=sys.stderr)
        return 2
