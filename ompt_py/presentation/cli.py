"""The `ompt-py` command line."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..dataset import Dataset

T = TypeVar("T")

DESCRIPTION = """\
Trace what the OpenMP runtime does: every parallel region, task, loop,
barrier and lock, from any OpenMP program or from Python code.
"""

EPILOG = """\
In Python, import ompt_py first (before anything starts OpenMP), then:
  with ompt_py.trace() as t: ...

`ompt-py COMMAND --help` tells a command's options, with examples.
"""

#: ``ompt-py run``'s exit status when no process of the command started an OpenMP
#: runtime (and the command itself succeeded): nothing was traced, nothing written.
NOTHING_TO_TRACE = 3

RUN_DESCRIPTION = """\
Run a program, Python script or module with the tool attached to the OpenMP
runtime of every process it starts, then merge their records into one trace
(or, with --profile, one profile).  Code built with gcc -fopenmp runs on LLVM
libomp, traced (--runtime).  OMPTPY_* variables pass through; options override.
"""

RUN_EPILOG = f"""\
examples:
  ompt-py run -o trace.parquet -- ./my_openmp_program args
  ompt-py run -o trace.parquet my_script.py args
  ompt-py run --profile -o prof.parquet -m my_module args
  ompt-py run --mpi -o trace.parquet -- mpirun -n 4 ./hybrid args

exit status:
  the command's, when it failed (128 + N when signal N killed it); else
  {NOTHING_TO_TRACE}  the command started no OpenMP runtime: nothing to trace, nothing written
  1  the trace holds less than was traced (records lost or dropped, raw files
     not read in full: the message says what, and where the raw files are kept)
  2  a usage error
  0  otherwise
"""

REPORT_DESCRIPTION = """\
Print what ran and how long (per construct, Python line and source location),
who waited (per thread, region, lock, MPI rank: docs/mpi.md) and what to do
about it (docs/reports.md), for the terminal's width, in colour unless NO_COLOR
is set; a profile's answers per location.  --plot and --html draw the plots too.
"""

REPORT_EPILOG = """\
examples:
  ompt-py report trace.parquet
  ompt-py report run1/              # an MPI job's dataset: every rank
  ompt-py report trace.parquet --plot timeline.png --html report.html
"""

EXPORT_DESCRIPTION = """\
Write a trace for other tools: perfetto (JSON for ui.perfetto.dev), perfetto-proto
(Perfetto's protobuf, a third of the size), otf2 (an archive for Vampir and
otf2-print), csv (a row per event), parquet (a file, or a dataset by process).
A time window (slices crossing it are clipped), threads, processes: docs/exports.md.

A dataset directory (pid=N/ partitions, one per process of a job) exports to
perfetto, perfetto-proto, csv and otf2 a partition at a time, never loaded whole,
on a Dask cluster with --dask (docs/dataset.md); with --start/--end/--threads/--pid,
or to the other formats, it is loaded whole, as any trace.

speedscope: speedscope.app's profile of the time per Python stack, region and
thread state, per thread (no time window: docs/viewing.md).
"""

EXPORT_EPILOG = """\
examples:
  ompt-py export trace.parquet -o trace.pftrace
  ompt-py export trace.parquet -o trace.json --start 1.5s --end 2s --threads 0,1
  ompt-py export trace.parquet --format otf2 -o trace-otf2
  ompt-py export trace.parquet --format parquet -o trace-dataset
  ompt-py export trace.parquet --format speedscope -o trace.speedscope.json
  ompt-py export run1/ -o run1.pftrace --dask tcp://scheduler:8786
  ompt-py export run1/ -o run1.otf2
"""

VIEW_DESCRIPTION = """\
Write the interactive view of a trace, one self-contained HTML file (no network
needed to open it), and open it in the browser: the timeline of the threads and
devices (zoom, pan, a hover on each bar) and the flame view.  Needs Bokeh:
pip install 'ompt-py[view]'.  What it shows: docs/viewing.md.

Timeline: a row per thread, grouped by process, then the devices; bars for
parallel regions, work-sharing, waits at barriers and for locks, explicit tasks
and offload, coloured by construct; the hover tells a bar's construct, Python
line, native location, duration, team size and wait.  Bars smaller than a pixel
are drawn as their bin's main construct; zoom in for each.  Flame: the threads'
time per Python stack, native location, region and thread state.
"""

VIEW_EPILOG = """\
examples:
  ompt-py view trace.parquet
  ompt-py view trace.parquet -o run.html --no-open
  ompt-py view trace.parquet --start 1.5s --end 2s
"""

DOCTOR_DESCRIPTION = """\
Tell why something is not traced.  Alone: this installation (tool, libomp,
runtime fallback).  With SCRIPT.py or -m MODULE: runs it with ompt_py imported
first and lists at its exit the OpenMP runtimes mapped, who links which, and
the problems.  With -- PROGRAM: the OpenMP runtimes it links (it is not run).
"""

DOCTOR_EPILOG = """\
examples:
  ompt-py doctor
  ompt-py doctor my_script.py args
  ompt-py doctor -- ./my_openmp_program
"""


def _check_output(path: str, option: str, directory_ok: bool = False) -> None:
    """A usage error unless ``path`` can be created: its folder exists and is
    writable, and it is a regular file or nothing (or, if ``directory_ok``, a
    directory)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError(f"cannot write {path}: {folder} is not a directory; create it or "
                          f"choose another {option}")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"cannot write {path}: {folder} is not writable; choose another "
                          f"{option}")
    # One stat: the ranks of a job check their shared -o DIR while one of them makes it.
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        if not directory_ok:
            raise ConfigError(f"cannot write {path}: it is a directory; give a file name to "
                              f"{option}")
    elif not stat.S_ISREG(mode):
        # A device or a pipe would be replaced (files are written beside and renamed).
        raise ConfigError(f"cannot write {path}: it is not a regular file; give a file name "
                          f"to {option}")


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` above 0."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
        return value

    return parse


def _target(args: argparse.Namespace) -> tuple[str, list[str]]:
    """What ``run`` or ``doctor`` is given: ("module", [MODULE, ARGS...]), ("script",
    [SCRIPT.py, ARGS...]) or ("program", [COMMAND, ARGS...]); a usage error when it
    is nothing, or a script or program that is not there."""
    rest = list(args.target)
    if args.module:
        return "module", [args.module, *rest]
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise ConfigError("nothing to run; give a script, -m MODULE, or -- COMMAND")
    if rest[0].endswith(".py"):
        if not os.path.isfile(rest[0]):
            raise ConfigError(f"no such script: {rest[0]}")
        return "script", rest
    if shutil.which(rest[0]) is None:
        raise ConfigError(f"command not found: {rest[0]} (not an executable file on PATH or "
                          "at that path); give a Python script (.py), -m MODULE, or -- COMMAND")
    return "program", rest


def _run_command(kind: str, target: list[str]) -> list[str]:
    """The command line that runs ``_target``'s answer."""
    return {"module": [sys.executable, "-m", *target], "script": [sys.executable, *target],
            "program": target}[kind]


#: The file that names the job whose ranks share an output directory (docs/mpi.md).
JOB_FILE = ".ompt-py-job"


def _check_run_paths(args: argparse.Namespace, rank: int) -> None:
    if args.profile and not args.output.endswith(".parquet"):
        raise ConfigError(f"-o {args.output}: a profile is one file; give a name ending in "
                          ".parquet")
    if rank >= 0 and args.output.endswith(".parquet"):
        raise ConfigError(f"-o {args.output}: this ompt-py run is rank {rank} of a parallel "
                          "job, and every rank would write that one file; give a directory "
                          "(-o run1/), which the ranks share, one part each"
                          + (" (a profile is one file: wrap the launcher instead, ompt-py run "
                             "--profile -- mpirun ...)" if args.profile else ""))
    _check_output(args.output, "-o", directory_ok=not args.output.endswith(".parquet"))
    # A rank's directory is shared with its job's other ranks: _join_job checks it.
    if rank < 0 and os.path.isdir(args.output) and os.listdir(args.output):
        raise ConfigError(f"{args.output} is a directory that is not empty; its traces would "
                          "be mixed with this one; give an empty or new directory")
    if args.keep_raw:
        if os.path.exists(args.keep_raw) and not os.path.isdir(args.keep_raw):
            raise ConfigError(f"--keep-raw {args.keep_raw} is not a directory; give a new or "
                              "empty directory")
        if os.path.isdir(args.keep_raw) and os.listdir(args.keep_raw) and rank < 0:
            raise ConfigError(f"--keep-raw {args.keep_raw} is not empty; its files would be "
                              "merged into this trace; give an empty or new directory")


def _join_job(output: str, job_id: str, rank: int) -> str:
    """Makes ``output`` the directory the ranks of job ``job_id`` share, or joins it:
    the first rank writes JOB_FILE (whole: linked into place), the others check it
    names their job.  ConfigError when it holds another job's trace, or a trace of
    no job.  Returns the folder where this rank's part is made (inside ``output``,
    hidden from readers: a dot name) before it is moved into place."""
    job = job_id or "unknown"
    try:
        os.makedirs(output, exist_ok=True)
        marker = os.path.join(output, JOB_FILE)
        # The job's own files (JOB_FILE, a rank's copy of it on its way, the ranks'
        # folders) do not count: another rank may be making them now.
        others = [n for n in os.listdir(output) if not n.startswith((JOB_FILE, ".rank-"))]
        if not os.path.exists(marker) and others:
            raise ConfigError(f"{output} is a directory that is not empty and holds no ompt-py "
                              "job; its traces would be mixed with this one; give an empty or "
                              "new directory")
        mine = f"{marker}.{os.getpid()}"
        with open(mine, "w", encoding="utf-8") as f:
            f.write(job)
        try:
            os.link(mine, marker)
        except FileExistsError:
            pass
        finally:
            os.unlink(mine)
        with open(marker, encoding="utf-8") as f:
            found = f.read()
        staging = os.path.join(output, f".rank-{rank}-{os.getpid()}")
        os.mkdir(staging)
    except OSError as e:
        raise ConfigError(f"cannot use {output} for the job's trace: {e.strerror}; choose "
                          "another -o") from None
    if found != job:
        os.rmdir(staging)
        raise ConfigError(f"{output} holds the trace of job {found}, and this ompt-py run is "
                          f"rank {rank} of job {job}; give each job an empty or new directory")
    return staging


def _publish(staging: str, output: str) -> str | None:
    """Moves this rank's partitions (pid=N) from ``staging`` into ``output``; what
    went wrong (None: nothing).  A partition of the same name there already (a
    process of the same pid on another machine) is not replaced."""
    problems = []
    for name in sorted(os.listdir(staging)):
        try:
            os.rename(os.path.join(staging, name), os.path.join(output, name))
        except OSError as e:
            problems.append(f"{name}: {e.strerror} (a process of the same pid on another "
                            f"machine?); it is left in {staging}")
    if not problems:
        os.rmdir(staging)
    return "; ".join(problems) or None


class _Interrupted(Exception):
    """A signal arrived while the trace was being written."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame: object) -> None:
    raise _Interrupted(signum)


def cmd_run(args: argparse.Namespace) -> int:
    """``ompt-py run``: the command runs under ompt_py.live.launch (its own process
    group; SIGINT, SIGTERM, SIGHUP and SIGQUIT forwarded to that group once, a
    bounded wait, then SIGKILL; the terminal handed over as a shell does; no
    orphan: see that module), then the raw files are merged into the output.  A
    raw file is deleted only when all of them made it into the output."""
    from .. import _core, tool_path
    from ..io.parquet import chunk_rows
    from ..live import attach, launch, mpi, runhook, runtime

    args.what = _target(args)
    command = _run_command(*args.what)
    args.output = args.output or ("ompt-profile.parquet" if args.profile
                                  else "ompt-trace.parquet")
    rank, _, job_id = _core.job()  # a rank of a parallel job: the output is shared
    _check_run_paths(args, rank)
    if args.profile:
        given = [o for o in ("--python-stacks", "--native-depth", "--buffer-size", "--overflow",
                             "--reserve")
                 if getattr(args, o[2:].replace("-", "_"))]
        if given:
            raise ConfigError(f"{', '.join(given)}: not used with --profile (a profile keeps "
                              "no records and no Python stacks); leave it out")
        os.environ["OMPTPY_PROFILE"] = "on"
    chunk_rows(args.merge_memory, "--merge-memory")  # said before the command runs
    if args.buffer_size:
        os.environ["OMPTPY_BUFFER_SIZE"] = args.buffer_size
    if args.reserve:
        os.environ["OMPTPY_RESERVE"] = args.reserve
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
            raise ConfigError(str(e).replace(variable, option if given else variable)) from None
    attach.check_environment()
    env = dict(os.environ)
    libomp = runtime.launcher_libomp(args.runtime or env.get("OMPTPY_RUNTIME"))
    if libomp:  # libgomp-built code runs on libomp, in the command and its children
        env["LD_PRELOAD"] = ":".join([libomp, *(p for p in env.get("LD_PRELOAD", "").split(":")
                                                if p and p != libomp)])
    # The preload hook: _exit, abort and exec flush the trace and record how each ended;
    # with --mpi, the MPI library: MPI calls and the ranks' clock measurements.
    ours = [attach.HOOK_PATH, *([mpi.library()] if args.mpi else [])]
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and p not in ours]
    env["LD_PRELOAD"] = ":".join([*ours, *preload])
    final_output = args.output
    if rank >= 0:
        args.output, args.shared_output = _join_job(final_output, job_id, rank), final_output
        if args.keep_raw:
            args.keep_raw = os.path.join(args.keep_raw, f"rank-{rank}")
    raw_dir = args.keep_raw or tempfile.mkdtemp(prefix="ompt-py-")
    try:
        os.makedirs(raw_dir, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create --keep-raw {raw_dir}: {e.strerror}; choose another "
                          "directory") from None
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
    try:
        ended = launch.run(command, env, args.kill_after)
    except OSError as e:
        if not args.keep_raw:
            shutil.rmtree(raw_dir, ignore_errors=True)  # nothing ran: it is empty
        raise ConfigError(f"cannot run {command[0]}: {e.strerror}") from None
    finally:
        shutil.rmtree(site_dir, ignore_errors=True)
    if ended.forwarded is not None:
        how = (f"they did not end within {args.kill_after:g} s: killed (SIGKILL)" if ended.killed
               else "they ended")
        print(f"ompt-py run: {signal.Signals(ended.forwarded).name} sent to the command's "
              f"processes; {how}; the trace holds what they had written", file=sys.stderr)
    # A signal now interrupts the writing; the raw files are kept.
    caught = [s for s in launch.FORWARDED if signal.getsignal(s) != signal.SIG_IGN]
    previous = {s: signal.signal(s, _interrupt) for s in caught}
    try:
        write = _write_profile if args.profile else _write_trace
        status = write(args, raw_dir, ended.returncode)
        if rank >= 0:
            problem = _publish(args.output, final_output)
            if problem:
                print(f"ompt-py run: rank {rank}'s part not moved into {final_output}: "
                      f"{problem}", file=sys.stderr)
                return status or 1
        return status
    except _Interrupted as e:
        print(f"ompt-py run: {signal.Signals(e.signum).name} while writing {args.output}: "
              f"stopped; {_kept(raw_dir)}", file=sys.stderr)
        return ended.returncode or 128 + e.signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _kept(raw_dir: str) -> str:
    return (f"the raw files are kept in {raw_dir} (ompt-py report {raw_dir}, or "
            f"ompt_py.load({raw_dir!r}))")


def _no_raw_files(args: argparse.Namespace, raw_dir: str, what: str,
                  returncode: int) -> int | None:
    """When ``raw_dir`` holds no raw file (or cannot be listed): says so (no ``what``
    written, and, when no process started an OpenMP runtime, which ``ompt-py doctor``
    tells why) and gives the exit status of ``ompt-py run``; None when it holds some."""
    from ..errors import TraceFileError
    from ..io import rawfile

    try:
        files = rawfile.list_dir(raw_dir)
    except TraceFileError as e:
        print(f"ompt-py run: no {what} written: {e}", file=sys.stderr)
        return returncode or 1
    if files:
        return None
    kind, target = args.what
    name = f"python -m {target[0]}" if kind == "module" else target[0]
    doctor = ["ompt-py", "doctor", *(["-m", *target] if kind == "module" else
                                     target if kind == "script" else ["--", target[0]])]
    off = (" With --runtime off, code built with gcc runs on GNU libgomp, which has no tool "
           "interface." if (args.runtime or os.environ.get("OMPTPY_RUNTIME", "")).strip().lower()
           == "off" else "")
    print(f"ompt-py run: {name} ran without starting an OpenMP runtime: nothing to trace; no "
          f"{what} written.{off} If it uses OpenMP, ask why: {shlex.join(doctor)}",
          file=sys.stderr)
    if not args.keep_raw:
        with contextlib.suppress(OSError):
            os.rmdir(raw_dir)  # only if empty: files of others are not ours to delete
    return returncode or NOTHING_TO_TRACE


def _from_raw(args: argparse.Namespace, raw_dir: str, what: str,
              make: Callable[[], T]) -> tuple[T, list[str]] | None:
    """``make()``'s result (the output made from the raw files) and its TraceWarnings'
    messages, once each (other warnings are shown); None, said, when it fails (no
    ``what`` written, the raw files kept)."""
    import warnings

    from ..errors import ConfigError, TraceFileError, TraceWarning

    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always", TraceWarning)
        try:
            result = make()
        except (TraceFileError, ConfigError) as e:
            print(f"ompt-py run: no {what} written: {e}; {_kept(raw_dir)}", file=sys.stderr)
            return None
        except OSError as e:
            print(f"ompt-py run: cannot write {args.output} ({e.strerror or e}); "
                  f"{_kept(raw_dir)}", file=sys.stderr)
            return None
    for w in warned:
        if not issubclass(w.category, TraceWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return result, list(dict.fromkeys(str(w.message) for w in warned
                                      if issubclass(w.category, TraceWarning)))


def _write_trace(args: argparse.Namespace, raw_dir: str, returncode: int) -> int:
    """Merges the raw files into ``args.output``; the exit status of ``ompt-py run``."""
    from ..trace import convert

    nothing = _no_raw_files(args, raw_dir, "trace", returncode)
    if nothing is not None:
        return nothing
    made = _from_raw(args, raw_dir, "trace",
                     lambda: convert(raw_dir, args.output, args.merge_memory))
    if made is None:
        return returncode or 1
    (events, meta), partial = made
    # The conversion warns of what it skipped (also listed in meta["skipped"]) and of losses.
    partial += [f"{s['source']}: {s['reason']}" for s in meta.get("skipped", [])
                if not any(s["source"] in m for m in partial)]
    if not args.keep_raw and not partial:
        shutil.rmtree(raw_dir, ignore_errors=True)
    if not args.quiet:
        from ..io.mpi import describe

        target = getattr(args, "shared_output", None) or args.output
        print(
            f"ompt-py: {events:,} events from {len(meta['processes'])} process(es) "
            f"(written {meta['written']:,}, dropped {meta['dropped']:,}) -> {target}\n"
            f"         see: ompt-py report {target}",
            file=sys.stderr,
        )
        for proc in meta["processes"]:
            if proc.get("clock_alignment"):
                print(f"         rank {proc['rank']} (pid {proc['pid']}) clock: "
                      f"{describe(proc['clock_alignment'])}", file=sys.stderr)
    lost, dropped = meta.get("lost", 0), meta["dropped"]
    losses = [f"{lost:,} records lost (never written to a raw file)"] * bool(lost)
    if dropped:
        losses.append(f"{dropped:,} records dropped (no room: use --overflow flush, or with "
                      "OMPTPY_ZERO_COPY=off raise --buffer-size)")
    if partial:
        losses.append("raw files not read in full:\n  " + "\n  ".join(partial) + "\n  "
                      + _kept(raw_dir))
    if losses:
        print("ompt-py run: the trace holds less than was traced: " + "; ".join(losses),
              file=sys.stderr)
    return returncode or (1 if losses else 0)


def _write_profile(args: argparse.Namespace, raw_dir: str, returncode: int) -> int:
    """Reads the raw files' profile and saves it as ``args.output``; the exit status
    of ``ompt-py run --profile`` (the rules of _write_trace)."""
    from ..profile import Profile

    nothing = _no_raw_files(args, raw_dir, "profile", returncode)
    if nothing is not None:
        return nothing

    def make() -> Profile:
        prof = Profile.from_raw(raw_dir)
        prof.save(args.output)
        return prof

    made = _from_raw(args, raw_dir, "profile", make)
    if made is None:
        return returncode or 1
    prof, losses = made
    if not args.keep_raw and not losses:
        shutil.rmtree(raw_dir, ignore_errors=True)
    if not args.quiet:
        p = prof.parts
        threads = sum(len(s["threads"]) for proc in prof.meta["processes"]
                      for s in proc["slots"])
        print(f"ompt-py: profile of {len(prof.meta['processes'])} process(es), {threads} "
              f"thread(s): {len(p.constructs):,} construct, {len(p.regions_threads):,} region, "
              f"{len(p.locks):,} lock and {len(p.tasks):,} task aggregates -> {args.output}\n"
              f"         see: ompt-py report {args.output}", file=sys.stderr)
    if losses:
        print("ompt-py run: the profile holds less than was profiled:\n  "
              + "\n  ".join(losses) + f"\n  {_kept(raw_dir)}", file=sys.stderr)
    return returncode or (1 if losses else 0)


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..live import doctor

    if not args.target and not args.module:
        print(doctor.report(), end="")
        return 0
    kind, target = _target(args)
    if kind == "program":
        print(doctor.program_report(shutil.which(target[0]) or target[0]), end="")
        return 0
    # The program runs with ompt_py imported first; the report comes at its exit.
    check = ""
    if kind == "module":
        # A module that is not there is a usage error, told in one line.
        check = (f"if importlib.util.find_spec({args.module!r}) is None:\n"
                 f"    print('ompt-py doctor: no module named {args.module}; give one that "
                 "python -m runs, or a script', file=sys.stderr)\n"
                 "    sys.exit(2)\n")
        run = f"runpy.run_module({args.module!r}, run_name='__main__', alter_sys=True)"
    else:
        run = f"runpy.run_path({target[0]!r}, run_name='__main__')"
    code = (f"import ompt_py, atexit, importlib.util, runpy, sys\nsys.argv = {target!r}\n{check}"
            "atexit.register(lambda: print(ompt_py.doctor(), end='', file=sys.stderr))\n"
            f"{run}\n")
    r = subprocess.call([sys.executable, "-c", code])
    return r if r >= 0 else 128 - r


def cmd_export(args: argparse.Namespace) -> int:
    from ..dataset import open_dataset
    from ..io import EXPORT_FORMATS, SUFFIX_FORMATS, export, format_of
    from ..io.dataset import FORMATS as DATASET_FORMATS
    from ..io.filters import parse_numbers, parse_time
    from ..trace import Trace, load

    fmt = args.format or format_of(args.output)
    if fmt is None:
        raise ConfigError(f"give --format ({', '.join(EXPORT_FORMATS)}): {args.output} does "
                          f"not end with a suffix that names one ({', '.join(SUFFIX_FORMATS)})")
    # Usage errors before the trace is loaded: the lists' and times' syntax here,
    # the values the trace must have once it is (ExportFilter.of).
    start, end = parse_time(args.start, "--start"), parse_time(args.end, "--end")
    threads = None if args.threads is None else parse_numbers(args.threads, "--threads")
    pids = None if args.pid is None else parse_numbers(args.pid, "--pid")
    _check_output(args.output, "-o", directory_ok=fmt in ("parquet", "otf2"))
    filtered = any(v is not None for v in (args.start, args.end, args.threads, args.pid))
    if fmt in DATASET_FORMATS and not filtered and _is_dataset(args.trace):
        dataset = open_dataset(args.trace)
        what = (f"{sum(p.rows for p in dataset.partitions):,} events from {len(dataset)} "
                f"partition(s), one at a time{' on ' + args.dask if args.dask else ''}")

        def write() -> None:
            _export_dataset(dataset, args.output, fmt, args.dask)
    else:
        if args.dask is not None:
            raise ConfigError(f"--dask exports a dataset directory (pid=N/ partitions) to "
                              f"{', '.join(DATASET_FORMATS)} without --start/--end/--threads/"
                              f"--pid; this export loads {args.trace} whole: drop --dask")
        trace = load(args.trace)
        if not isinstance(trace, Trace):
            raise ConfigError(f"{args.trace} is a profile, not a trace: it has no events to "
                              "export (it is a Parquet file already; ompt-py report reads it)")
        what = f"{len(trace):,} events from {len(trace.meta['processes'])} process(es)"

        def write() -> None:
            export(trace, args.output, fmt, start=start, end=end, threads=threads, pid=pids)
    try:
        write()
    except OSError as e:
        print(f"ompt-py export: cannot write {args.output}: {e.strerror or e}; choose "
              "another -o", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"ompt-py: {what} -> {args.output} ({fmt})", file=sys.stderr)
    return 0


def _is_dataset(path: str) -> bool:
    """Whether ``path`` is a dataset directory that open_dataset reads as load reads
    it: Parquet files, each in a partition (pid=N/), no raw file, no profile."""
    from ..io import parquet as parquet_io
    from ..io import rawfile
    from ..io.profile import holds_profile

    if not os.path.isdir(path) or rawfile.list_dir(path) or holds_profile(path):
        return False
    files = parquet_io.trace_files(path)
    return bool(files) and all(os.path.basename(os.path.dirname(f)).startswith("pid=")
                               for f in files)


def _export_dataset(dataset: Dataset, output: str, fmt: str, address: str | None) -> None:
    """The dataset exported partition by partition (on the Dask cluster at
    ``address``), never loaded whole."""
    from ..dataset import connect

    client = None if address is None else connect(address)
    try:
        if fmt == "csv":
            dataset.to_csv(output, client=client)
        elif fmt == "otf2":
            dataset.to_otf2(output, client=client)
        else:
            dataset.to_perfetto(output, client=client)
    finally:
        if client is not None:
            client.close()


def cmd_view(args: argparse.Namespace) -> int:
    """``ompt-py view``: the interactive view written to one HTML file, then opened."""
    from ..io.filters import parse_time
    from ..trace import Trace, load
    from .view import can_open_browser, require_bokeh, write

    require_bokeh()  # said before a large trace is read
    start, end = parse_time(args.start, "--start"), parse_time(args.end, "--end")
    name = os.path.basename(os.path.normpath(args.trace))
    output = args.output or (os.path.splitext(name)[0] or "trace") + ".html"
    _check_output(output, "-o")
    trace = load(args.trace)
    if not isinstance(trace, Trace):
        raise ConfigError(f"{args.trace} is a profile, which has no timeline to view; trace "
                          "the run (ompt-py run without --profile) for it, or read it with "
                          "ompt-py report")
    try:
        write(trace, output, start, end, title=name)
    except ValueError as e:
        raise ConfigError(f"--start/--end: {e}") from None
    except OSError as e:
        print(f"ompt-py view: cannot write {output}: {e.strerror or e}; choose another -o",
              file=sys.stderr)
        return 1
    where = os.path.abspath(output)
    size = os.path.getsize(where) / 2**20
    if args.no_open:
        how = "open it in a browser"
    elif not can_open_browser():
        how = "no display here: open it in a browser"
    else:
        import webbrowser
        from pathlib import Path

        how = ("opened in the browser" if webbrowser.open(Path(where).as_uri())
               else "no browser could be started: open it in one")
    print(f"ompt-py view: {where} ({size:.1f} MiB): {how}", file=sys.stderr)
    return 0


def _check_plot(path: str) -> None:
    from matplotlib.backend_bases import FigureCanvasBase

    _check_output(path, "--plot")
    kinds = FigureCanvasBase.get_supported_filetypes()
    ext = os.path.splitext(path)[1][1:].lower()
    if ext not in kinds:
        what = f".{ext} files" if ext else "a file without an extension"
        raise ConfigError(f"--plot {path}: matplotlib cannot write {what}; end the name in "
                          f"one of: .{', .'.join(sorted(kinds))}")


def cmd_report(args: argparse.Namespace) -> int:
    from ..trace import Trace, load
    from .report import document, profile_document, render_html, render_profile_html

    # Checked before the work: a wrong name is not told after a minute of plotting.
    if args.plot:
        _check_plot(args.plot)
    if args.html:
        _check_output(args.html, "--html")
    trace = load(args.trace)
    if not isinstance(trace, Trace):  # a profile: its answers, no timeline
        if args.plot:
            raise ConfigError(f"--plot: {args.trace} is a profile, which has no timeline to "
                              "plot; trace the run (ompt-py run without --profile) for it")
        profile_document(trace, top=args.top, width=args.width).print(sys.stdout)
        if args.html:
            try:
                with open(args.html, "w", encoding="utf-8") as f:
                    f.write(render_profile_html(trace, top=args.top,
                                                title=os.path.basename(args.trace)))
            except OSError as e:
                print(f"ompt-py report: cannot write {args.html}: {e.strerror or e}; choose "
                      "another path", file=sys.stderr)
                return 1
            print(f"ompt-py report: HTML report -> {args.html}", file=sys.stderr)
        return 0
    document(trace, top=args.top, width=args.width).print(sys.stdout)

    def plot(path: str) -> None:
        from .plots import report_figure

        report_figure(trace, top=args.top).savefig(path, dpi=100)

    def html(path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(render_html(trace, top=args.top, title=os.path.basename(args.trace)))

    for path, write, what in ((args.plot, plot, "plots"),
                              (args.html, html, "HTML report")):
        if not path:
            continue
        try:
            write(path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.remove(path)  # what was written of it
            print(f"ompt-py report: cannot write {path}: {e.strerror or e}; choose another "
                  "path", file=sys.stderr)
            return 1
        print(f"ompt-py report: {what} -> {path}", file=sys.stderr)
    return 0


class _Version(argparse.Action):
    """``--version``: computed when asked for (it starts the OpenMP runtime to ask
    for its version), not when the parser is made."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0,
                         help="print the versions of ompt-py, its tool and the OpenMP runtime "
                              "it uses, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(version_text())
        parser.exit()


def version_text() -> str:
    """``ompt-py --version``: the package's version (its metadata), then the tool's
    (its path and record version) and the OpenMP runtime's that ompt-py runs code on."""
    from .. import __version__
    from ..live import attach
    from ..records import RECORD_VERSION

    fb = attach.FALLBACK
    rt = attach.fallback_runtime()
    if rt is not None:
        runtime = f"{rt.path} ({rt.version}; the runtime fallback's, policy {fb.policy})"
    elif fb.libomp:
        runtime = f"{fb.libomp} (policy {fb.policy}; the tool is not attached: ompt-py doctor)"
    else:
        runtime = (f"none ({fb.error or 'runtime fallback off'}; policy {fb.policy}: "
                   "ompt-py doctor)")
    return (f"ompt-py {__version__}\n"
            f"tool: {attach.TOOL_PATH} (record version {RECORD_VERSION}); "
            f"OpenMP runtime: {runtime}")


def parser() -> argparse.ArgumentParser:
    from ..io import EXPORT_FORMATS
    from ..live.launch import KILL_AFTER

    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="ompt-py", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=raw)
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    run = sub.add_parser(
        "run", help="run a program, script or module with the tool attached; write its trace",
        description=RUN_DESCRIPTION, epilog=RUN_EPILOG, formatter_class=raw,
        usage="%(prog)s [options] (SCRIPT.py [ARGS] | -m MODULE [ARGS] | -- COMMAND [ARGS])",
    )
    run.add_argument("-o", "--output",
                     help="trace to write: a .parquet file, or a directory for a Parquet "
                          "dataset partitioned by process (default: ompt-trace.parquet); "
                          "with --profile a .parquet file (default: ompt-profile.parquet)")
    run.add_argument("--mpi", action="store_true",
                     help="preload ompt-py's MPI library into the command: MPI calls recorded "
                          "(Trace.mpi_calls()), each rank's clock measured against rank 0's at "
                          "MPI_Init and MPI_Finalize, so that the trace puts the ranks on one "
                          "time axis.  Under the launcher (mpirun -n 4 ompt-py run --mpi -o "
                          "run1/ -- ./hybrid; srun too) each rank writes its part of the "
                          "directory -o, which the job's ranks share; around it, the local "
                          "ranks only (docs/mpi.md)")
    run.add_argument("--profile", action="store_true",
                     help="no trace: per-thread aggregates (counts, times, histograms per "
                          "construct and source location, region, lock, task creation site) "
                          "in memory of fixed size, for runs too long to trace (it still reads "
                          "the clock at every task switch: docs/limits.md)")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a Python module")
    run.add_argument("--reserve", metavar="SIZE",
                     help="trace file space made resident before the program's work, and the "
                          "size of each region of the file the threads write into in place, "
                          "e.g. 1G (default: OMPTPY_RESERVE, else an eighth of the available "
                          "memory, at most 256M); a trace beyond it may stall the threads while "
                          "the next region is made resident, recorded in the trace "
                          "(docs/stalls.md)")
    run.add_argument("--buffer-size", metavar="SIZE",
                     help="per-thread buffer bound when the file is written with write() "
                          "(OMPTPY_ZERO_COPY=off, or a file system that cannot map it), e.g. "
                          "8M (default), 64M")
    run.add_argument("--overflow", choices=["flush", "drop", "grow"],
                     help="when a thread finds no room: it makes room itself (default: the "
                          "next region of the file, a recorded stall, or it writes its full "
                          "buffer), drops and "
                          "counts records, or grows its buffer (write() route)")
    run.add_argument("--runtime", choices=["auto", "bundled", "system", "off"],
                     help="run libgomp-built code on LLVM libomp (preloaded): auto (default: "
                          "the system's libomp, else the bundled one), bundled, system, or off")
    run.add_argument("--keep-raw", metavar="DIR",
                     help="write the per-process raw files into DIR and keep them (without "
                          "it they go to a temporary directory, deleted once merged in full)")
    run.add_argument("--merge-memory", metavar="SIZE",
                     help="bound on the memory that merging the raw files into the output "
                          "takes, whatever the trace's size, e.g. 256M (default: "
                          "OMPTPY_MERGE_MEMORY, else 256M; at least 64M)")
    run.add_argument("--kill-after", metavar="SECONDS", type=_positive(float),
                     default=KILL_AFTER,
                     help="after forwarding a signal to the command, wait this long for its "
                          "processes to end, then SIGKILL them (default: %(default)g)")
    run.add_argument("--python-stacks", metavar="on|off|DEPTH",
                     help="record the Python call stack that started each region in the "
                          "command's Python processes (default: on, 32 frames; "
                          "OMPTPY_PYTHON_STACKS)")
    run.add_argument("--native-depth", metavar="N",
                     help="with each Python stack, N native frames above the region's code "
                          "(default 0; costs microseconds per region; OMPTPY_NATIVE_DEPTH)")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="no summary on stderr (losses and errors are still told)")
    run.add_argument("target", nargs=argparse.REMAINDER,
                     help="SCRIPT.py [ARGS], or -- COMMAND [ARGS]")
    run.set_defaults(func=cmd_run)
    rep = sub.add_parser("report", help="print a trace's or profile's summary; plots and an "
                         "HTML report", description=REPORT_DESCRIPTION, epilog=REPORT_EPILOG,
                         formatter_class=raw)
    rep.add_argument("trace", help="a trace or profile file (.parquet), raw directory or "
                     ".omptraw file")
    rep.add_argument("--top", type=_positive(int), default=10,
                     help="rows per table (default: %(default)s)")
    rep.add_argument("--width", type=_positive(int), metavar="COLUMNS",
                     help="lay the text out for this many columns (default: the terminal's "
                          "width, or COLUMNS; 100 when not a terminal); colour only on a "
                          "terminal, never with NO_COLOR set")
    rep.add_argument("--plot", metavar="FILE",
                     help="write the plots as one image: the per-thread timeline, the state "
                          "breakdown, and the load imbalance, task durations and lock "
                          "contention the trace has (format from the extension: .png, .svg, "
                          ".pdf)")
    rep.add_argument("--html", metavar="FILE",
                     help="write one self-contained HTML report: the summary tables and the "
                          "plots (embedded PNG)")
    rep.set_defaults(func=cmd_report)
    exp = sub.add_parser("export", help="write a trace for Perfetto (JSON or protobuf), OTF2 "
                         "tools (Vampir), speedscope, as CSV or Parquet",
                         description=EXPORT_DESCRIPTION, epilog=EXPORT_EPILOG,
                         formatter_class=raw)
    exp.add_argument("trace", help="a trace file (.parquet), dataset or raw directory, or "
                     ".omptraw file")
    exp.add_argument("--format", choices=EXPORT_FORMATS,
                     help="what to write (default: from the output's suffix: .json perfetto, "
                          ".pftrace or .perfetto-trace perfetto-proto, .otf2 otf2, .csv csv, "
                          ".parquet parquet)")
    exp.add_argument("-o", "--output", required=True,
                     help="the file (or directory: a Parquet dataset, an OTF2 archive)")
    exp.add_argument("--start", metavar="TIME",
                     help="keep from this time on, from the trace's origin: nanoseconds, or "
                          "a number with a unit (ns, us, ms, s), e.g. 1.5s, 200ms")
    exp.add_argument("--end", metavar="TIME", help="keep up to this time (as --start)")
    exp.add_argument("--threads", metavar="LIST",
                     help="keep these thread numbers, e.g. 0,2,4-7 (default: all)")
    exp.add_argument("--pid", metavar="LIST",
                     help="keep these processes (pids, e.g. 4121 or 4121,4130; default: all)")
    exp.add_argument("--dask", metavar="ADDRESS",
                     help="a dataset directory: make its partitions' parts on the Dask cluster "
                          "whose scheduler is at ADDRESS (e.g. tcp://scheduler:8786; its "
                          "workers must see the dataset and the output's directory)")
    exp.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    exp.set_defaults(func=cmd_export)
    vw = sub.add_parser("view", help="write an interactive timeline and flame view (one "
                        "HTML file) and open it", description=VIEW_DESCRIPTION,
                        epilog=VIEW_EPILOG, formatter_class=raw)
    vw.add_argument("trace", help="a trace file (.parquet), dataset or raw directory, or "
                    ".omptraw file")
    vw.add_argument("-o", "--output", metavar="FILE.html",
                    help="the HTML file (default: the trace's name with .html, here)")
    vw.add_argument("--no-open", action="store_true",
                    help="write the file, do not open it (it is not opened without a "
                         "display either)")
    vw.add_argument("--start", metavar="TIME",
                    help="show from this time: nanoseconds from the trace's origin, or a "
                         "number with a unit (1.5s, 200ms, 30us, 100ns; default: the first "
                         "event)")
    vw.add_argument("--end", metavar="TIME",
                    help="show up to this time (as --start; default: the last event)")
    vw.set_defaults(func=cmd_view)
    doc = sub.add_parser(
        "doctor", help="tell which OpenMP runtime a program uses, and why it is not traced",
        description=DOCTOR_DESCRIPTION, epilog=DOCTOR_EPILOG, formatter_class=raw,
        usage="%(prog)s [SCRIPT.py [ARGS] | -m MODULE [ARGS] | -- PROGRAM]")
    doc.add_argument("-m", dest="module", metavar="MODULE", help="run a Python module")
    doc.add_argument("target", nargs=argparse.REMAINDER,
                     help="SCRIPT.py [ARGS], or -- PROGRAM (an executable: not run)")
    doc.set_defaults(func=cmd_doctor)
    return p


def main(argv: list[str] | None = None) -> int:
    """The ``ompt-py`` command: its exit status (2 for usage errors, 1 for failures)."""
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
    except KeyboardInterrupt:
        print(f"ompt-py {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:  # the reader of our output left (ompt-py report | head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def entry() -> NoReturn:
    """The ``ompt-py`` console script and ``python -m ompt_py``: main(), then the end
    of the process without the interpreter's teardown.  The threads still running
    are waited for, the exit handlers run and the output is flushed, as at a normal
    exit; what the teardown does besides, freeing every object and module one at a
    time, took 0.5 s after a view of 10^7 events (its tables, Bokeh's models) for
    nothing: the system takes a process's memory back at once."""
    code = main()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # as the interpreter's own exit does when its output is lost
            code = code or 120
    os._exit(code)
