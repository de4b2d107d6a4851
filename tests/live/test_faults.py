"""Loss is counted on every ending: what a raw file holds plus what the loader
reports lost equals what a counting tool saw, per thread, and the reason is
the ending's (killed, _exit, abort, exec, disk full, file size limit), by
both routes of the file sink: records written in place into the file (the
default: a killed process loses nothing, the page cache keeps what its
threads wrote) and copied out of per-thread buffers with write()
(OMPTPY_ZERO_COPY=off: what the buffers held at a kill is lost, and counted).

tests/programs/faults.c runs OpenMP work with a counting native handler
installed into the tool (the reference: every record a thread wrote, counted
by thread index in a file mapped shared, so it survives any ending), then
ends as asked.  It ends at a quiet moment (its workers idle in the runtime),
so the reference and the ledger count the same records.  The preload hook is
given as `ompt-py run` gives it (LD_PRELOAD); without it, the ledger still
counts, under the reason "killed".  Nothing the tool wrote is ever deleted.
Signals sent to `ompt-py run` itself are tests/live/test_run.py's concern.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import tool_env

import ompt_py
from ompt_py.live.attach import HOOK_PATH

MAX_THREADS = 4096  # the counters of faults.c
#: The file sink's routes, by OMPTPY_ZERO_COPY.
ROUTES = {"in place": "on", "write": "off"}
route = pytest.mark.parametrize("route", list(ROUTES))
ROUNDS = 40  # about 40,000 records: several chunks per thread, the last ones partly full


def run_faults(programs, tmp_path: Path, mode: str, *, hook: bool = True, out: Path | None = None,
               rounds: int = ROUNDS, limits=None, route: str = "in place",
               **env_more: str) -> tuple[int, np.ndarray, Path, str]:
    """Runs faults MODE ROUNDS with the tool writing into ``out`` by ``route``: (exit
    status, the counting tool's counts per thread index, out, stderr)."""
    out = out or tmp_path / "raw"
    out.mkdir(parents=True, exist_ok=True)
    counts = tmp_path / "counts"
    counts.write_bytes(bytes(8 * MAX_THREADS))
    # A slow drainer: the last chunks stay in the buffers until the ending.
    env = tool_env(out, FAULTS_COUNTS=str(counts), OMPTPY_DRAIN_MS="1000",
                   OMPTPY_ZERO_COPY=ROUTES[route], **env_more)
    if hook:
        env["LD_PRELOAD"] = ":".join(filter(None, [HOOK_PATH, env.get("LD_PRELOAD")]))

    def child() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # abort(): no core file
        for what, value in (limits or {}).items():
            resource.setrlimit(what, (value, value))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past RLIMIT_FSIZE: EFBIG, not death

    p = subprocess.Popen([programs.faults, mode, str(rounds)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=child)
    if mode == "kill":
        assert p.stdout.readline() == "ready\n"
        p.send_signal(signal.SIGKILL)
    _, err = p.communicate(timeout=120)
    return p.returncode, np.fromfile(counts, np.uint64), out, err


def load(out: Path):
    """The trace of ``out`` and the TraceWarnings its loading gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = ompt_py.load(out)
    return t, [str(w.message) for w in caught if issubclass(w.category, ompt_py.TraceWarning)]


def check_balance(t, reference: np.ndarray) -> None:
    """Per thread and in all: records in the file + records reported lost == counted."""
    counted = {i: int(n) for i, n in enumerate(reference) if n}
    in_file = Counter(t.events["thread"].tolist())
    rows = {th["thread"]: th for p in t.meta["processes"] for th in p["threads"]}
    assert set(counted) <= set(rows), (counted, rows)
    for i, n in counted.items():
        assert in_file[i] + rows[i]["lost"] == n, (i, in_file[i], rows[i], n)
        assert rows[i]["written"] == in_file[i]
    assert len(t) + t.meta["lost"] == int(reference.sum())
    assert t.meta["lost"] == sum(p["lost"] for p in t.meta["processes"])


def files_of(out: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in out.iterdir()}


def in_place(t) -> bool:
    """Whether every process of the trace wrote its records in place."""
    return all(p["config"]["zero_copy"] for p in t.meta["processes"])


@route
def test_clean_exit_loses_nothing(programs, tmp_path, route):
    rc, ref, out, err = run_faults(programs, tmp_path, "exit", route=route)
    assert rc == 0, err
    t, warned = load(out)
    assert in_place(t) == (route == "in place")
    check_balance(t, ref)
    (proc,) = t.meta["processes"]
    assert proc["ending"] in ("finalize", "exit") and proc["lost"] == 0 and not warned


def test_sigkill_in_place_loses_nothing(programs, tmp_path):
    """The threads wrote into the file's pages: the kill takes none of them."""
    rc, ref, out, _ = run_faults(programs, tmp_path, "kill")
    assert rc == -signal.SIGKILL
    t, warned = load(out)
    check_balance(t, ref)
    (proc,) = t.meta["processes"]
    assert proc["ending"] == "killed"
    assert proc["lost"] == 0 and len(t) == int(ref.sum()) and not warned


def test_sigkill(programs, tmp_path):
    rc, ref, out, _ = run_faults(programs, tmp_path, "kill", route="write")
    assert rc == -signal.SIGKILL
    before = files_of(out)
    t, warned = load(out)
    check_balance(t, ref)
    (proc,) = t.meta["processes"]
    assert proc["ending"] == "killed"
    assert proc["lost"] > 0  # the chunks still being filled at least
    assert list(proc["lost_reasons"]) == [
        "killed or crashed (no ending was recorded): records still in buffers"]
    assert any(f"pid {proc['pid']}" in w and f"{proc['lost']:,}" in w and "killed" in w
               for w in warned), warned
    assert files_of(out) == before  # loading deletes and changes nothing


@route
@pytest.mark.parametrize("mode", ["_exit", "abort"])
def test_ending_seen_by_the_hook_flushes(programs, tmp_path, mode, route):
    rc, ref, out, err = run_faults(programs, tmp_path, mode, route=route)
    assert rc == (0 if mode == "_exit" else -signal.SIGABRT), err
    t, warned = load(out)
    check_balance(t, ref)
    (proc,) = t.meta["processes"]
    assert proc["ending"] == mode
    assert proc["lost"] == 0 and not warned  # the hook flushed what the threads held
    assert proc["complete"]  # and wrote the final counters


@route
@pytest.mark.parametrize("mode", ["_exit", "abort"])
def test_ending_without_the_hook_is_counted(programs, tmp_path, mode, route):
    """OMPTPY_OUTPUT set by hand: no flush, no ending; written in place, nothing is
    lost, else the loss is counted."""
    _, ref, out, _ = run_faults(programs, tmp_path, mode, hook=False, route=route)
    t, warned = load(out)
    check_balance(t, ref)
    (proc,) = t.meta["processes"]
    assert proc["ending"] == "killed"
    if route == "in place":
        assert proc["lost"] == 0 and not warned
    else:
        assert proc["lost"] > 0 and warned


@route
def test_exec_links_the_images(programs, tmp_path, route):
    rc, ref, out, err = run_faults(programs, tmp_path, "exec", route=route)
    assert rc == 0, err
    assert len(os.listdir(out)) == 2
    t, warned = load(out)
    check_balance(t, ref)
    (proc,) = t.meta["processes"]  # one process, two images
    assert not warned and proc["lost"] == 0
    images = proc["images"]
    assert [i["ending"] for i in images] == ["exec", proc["ending"]]
    assert [i["argv"][1] for i in images] == ["exec", "after"]
    assert len({i["source"] for i in images}) == 2
    # the second image's threads go on from the first's indices: no collision
    first, second = (ompt_py.load(i["source"]) for i in images)
    assert set(first.events["thread"].tolist()).isdisjoint(second.events["thread"].tolist())
    assert len(t) == len(first) + len(second)
    # and so do the ids made from them
    ids = [set(p.events["parallel_id"][p.events["parallel_id"] != 0].tolist())
           for p in (first, second)]
    assert ids[0] and ids[1] and ids[0].isdisjoint(ids[1])


def test_exec_without_the_hook(programs, tmp_path):
    """Two files of one pid that nothing links: an error naming both (not a merge);
    each loads by itself, and between them they count what was written."""
    _, ref, out, _ = run_faults(programs, tmp_path, "exec", hook=False)
    names = sorted(os.listdir(out))
    assert len(names) == 2
    with pytest.raises(ompt_py.TraceFileError) as e:
        ompt_py.load(out)
    assert all(n in str(e.value) for n in names)
    parts = [load(out / n)[0] for n in names]
    assert sum(len(p) + p.lost for p in parts) == int(ref.sum())
    endings = sorted(p.meta["processes"][0]["ending"] for p in parts)
    assert endings[0] in ("exit", "finalize") and endings[1] == "killed"


def check_disk_full(programs, tmp_path, out: Path, limits, reason: str, errno_name: str,
                    rounds: int = 300, in_place: bool = False, **env: str) -> None:
    """The run ends well and its trace says how many records the disk could not
    take, and why.  Written with write(), they were written into the buffers (the
    counting tool saw them); in place, they found no room anywhere (it did not)."""
    rc, ref, out, err = run_faults(programs, tmp_path, "exit", out=out, rounds=rounds,
                                   limits=limits, **env)
    assert rc == 0, err
    assert "counted as lost" in err
    t, warned = load(out)
    if in_place:
        assert len(t) == int(ref.sum())
    else:
        check_balance(t, ref)
    (proc,) = t.meta["processes"]
    assert proc["ending"] in ("finalize", "exit")  # it ended well: the disk did not
    assert proc["lost"] > 0 and len(t) > 0
    (why,) = proc["lost_reasons"]
    assert why.startswith(reason) and errno_name in why
    assert any(reason in w and f"{proc['lost']:,}" in w for w in warned), warned
    assert not any("killed" in w for w in warned), warned


def small_disk(tmp_path: Path, size: str) -> Path:
    """A tmpfs of ``size`` at tmp_path/disk (skips the test where it cannot be had)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip()}); "
                    "test_file_size_limit covers the same without privileges")
    return disk


def test_disk_full(programs, tmp_path):
    """A 1 MiB tmpfs: no room for the in-place route's region, so the file is
    written with write(), and fills the disk long before the run ends."""
    disk = small_disk(tmp_path, "1m")
    try:
        check_disk_full(programs, tmp_path, disk / "raw", None, "disk full", "ENOSPC")
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_disk_full_in_place(programs, tmp_path):
    """A 96 MiB tmpfs and 64 MiB regions: the first region fits, the second does
    not: what no region could take is lost, counted, with the disk's errno."""
    disk = small_disk(tmp_path, "96m")
    try:
        check_disk_full(programs, tmp_path, disk / "raw", None, "disk full", "ENOSPC",
                        rounds=1500, in_place=True, OMPTPY_RESERVE="64M")
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_file_size_limit(programs, tmp_path):
    """RLIMIT_FSIZE (no privileges needed): writes past 1 MiB fail with EFBIG."""
    check_disk_full(programs, tmp_path, tmp_path / "raw", {resource.RLIMIT_FSIZE: 1 << 20},
                    "file size limit", "EFBIG")


def test_ompt_py_run_has_the_hook(programs, tmp_path):
    """`ompt-py run` preloads the hook: an exec in its command is one process."""
    from conftest import cli, ok

    counts = tmp_path / "counts"
    counts.write_bytes(bytes(8 * MAX_THREADS))
    raw = tmp_path / "raw"
    ok(cli("run", "-q", "-o", tmp_path / "t.parquet", "--keep-raw", raw, "--",
           programs.faults, "exec", "3", env={"FAULTS_COUNTS": str(counts)}))
    t, warned = load(tmp_path / "t.parquet")
    (proc,) = t.meta["processes"]
    assert proc["images"][0]["ending"] == "exec" and not warned
    assert len(t) + t.lost == int(np.fromfile(counts, np.uint64).sum())
