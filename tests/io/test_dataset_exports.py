"""A dataset's exports made partition by partition and joined
(``Dataset.to_perfetto``, ``to_csv``, ``to_otf2``; ompt_py.io.dataset.export),
in this process and on a local Dask cluster.

Spec (docs/dataset.md, Exports): each partition's part is made where the
partition is read (this process, or a Dask worker), written to a temporary
directory beside the output, and the parts are joined in partition order; the
file is the same bytes with a client and without, and holds what the export
of ``ompt_py.load(DIR)`` holds (every rank a process on one time axis), but
for the ids the parts give themselves apart: the flows' (each partition's from
the records before it), and in the protobuf the track uuids and packet
sequences (a partition's own; its interned strings on its sequence).  The
OTF2 archive: what otf2-print shows of it is the same with a client and
without, and each location's events (region names through the parts' mapping
tables, times, metric values) are those of ``ompt_py.load(DIR).to_otf2``.  A
partition that cannot be read is left out and said; a part file missing or
short, or a path where nothing can be written, is an error that says so; the
temporary directory never stays.

The datasets are made at test time (tests/synthetic_dataset.py).
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import pytest
from conftest import cli, load_stored, no_traceback, ok
from synthetic_dataset import FIRST_PID, write_dataset
from test_perfetto_proto import ProtoTrace

import ompt_py
from ompt_py.errors import TraceFileError, TraceWarning
from ompt_py.io import dataset as dataset_io
from ompt_py.io import perfetto
from ompt_py.io.filters import ExportFilter
from ompt_py.io.streaming import Progress

RANKS = 4


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A dataset of 4 ranks small enough to load whole, and the whole trace."""
    path = tmp_path_factory.mktemp("small") / "run1"
    write_dataset(path, RANKS, 1200)
    return path, ompt_py.load(path)


def _left_behind(directory) -> list[str]:
    return [n for n in os.listdir(directory) if ".parts-" in n or n.endswith(".partial")]


def _both_ways(small, tmp_path, name: str, client, read=lambda path: path.read_bytes()):
    """The dataset exported to ``name`` without a client and with one: the same
    (``read`` of each: its bytes, returned); nothing left beside them."""
    d = ompt_py.open_dataset(small[0])
    (tmp_path / "here").mkdir()
    (tmp_path / "dask").mkdir()
    write = {".csv": d.to_csv, ".otf2": d.to_otf2}.get(os.path.splitext(name)[1],
                                                        d.to_perfetto)
    write(tmp_path / "here" / name)
    on_dask = tmp_path / "dask" / name
    write(on_dask, client=client)
    made = read(tmp_path / "here" / name)
    assert made == read(on_dask)
    assert _left_behind(tmp_path / "here") == _left_behind(tmp_path / "dask") == []
    return made


def _flow_ends(events: list[dict]) -> tuple[Counter, list[tuple[str, str]]]:
    """The events but the flows' ("s", "f") as keys, and each flow as its start's
    and finish's keys without its id; asserts each id is one flow's."""
    def key(e: dict) -> str:
        return json.dumps({k: v for k, v in e.items() if k != "id"}, sort_keys=True)
    ends: dict = {}
    for e in events:
        if e["ph"] in "sf":
            assert e["ph"] not in ends.setdefault(e["id"], {}), "an id of two flows"
            ends[e["id"]][e["ph"]] = key(e)
    flows = sorted((f["s"], f["f"]) for f in ends.values())
    return Counter(key(e) for e in events if e["ph"] not in "sf"), flows


def test_json_is_the_same_with_dask_and_holds_what_load_s_export_holds(small, tmp_path,
                                                                       dask_client):
    made = json.loads(_both_ways(small, tmp_path, "d.json", dask_client))
    small[1].to_perfetto(tmp_path / "t.json")
    whole = json.loads((tmp_path / "t.json").read_text())
    assert _flow_ends(made["traceEvents"]) == _flow_ends(whole["traceEvents"])
    assert made["otherData"] == whole["otherData"]
    names = {e["pid"]: e["args"]["name"] for e in made["traceEvents"]
             if e.get("name") == "process_name"}
    assert sorted(names) == [FIRST_PID + r for r in range(RANKS)]
    assert all(names[FIRST_PID + r].startswith(f"rank {r}") for r in range(RANKS))


def test_protobuf_is_the_same_with_dask_and_holds_what_load_s_export_holds(small, tmp_path,
                                                                           dask_client):
    _both_ways(small, tmp_path, "d.pftrace", dask_client)
    made = ProtoTrace(tmp_path / "here" / "d.pftrace")
    small[1].to_perfetto(tmp_path / "t.pftrace")
    whole = ProtoTrace(tmp_path / "t.pftrace")
    # a sequence per partition, and the file's end's
    assert made.sequences == set(range(1, RANKS + 2)) and whole.sequences == {1}
    assert made.slices == whole.slices and sum(map(len, made.slices.values())) > 0
    assert made.counters == whole.counters
    assert made.process_names == whole.process_names
    assert made.thread_names == whole.thread_names

    def plain(s: dict) -> tuple:
        return s["ts"], s["dur"], s["name"], json.dumps(s["args"], sort_keys=True)
    assert len(made.flows) == len(whole.flows) > 0
    assert sorted((plain(a), plain(b)) for a, b in made.flows.values()) == sorted(
        (plain(a), plain(b)) for a, b in whole.flows.values())
    assert made.instants == whole.instants


def test_csv_is_the_same_with_dask_and_holds_load_s_rows(small, tmp_path, dask_client):
    made = _both_ways(small, tmp_path, "d.csv", dask_client).decode().splitlines()
    small[1].to_csv(tmp_path / "t.csv")
    whole = (tmp_path / "t.csv").read_text().splitlines()
    assert made[0] == whole[0] and made.count(made[0]) == 1
    assert sorted(made) == sorted(whole)


@pytest.fixture
def otf2_archive():
    """test_otf2's Archive, what otf2-print shows of an archive (skipped without the
    _otf2 extension or otf2-print)."""
    pytest.importorskip("ompt_py._otf2", reason="ompt-py built without libotf2")
    if shutil.which("otf2-print") is None:
        pytest.skip("otf2-print (Debian: otf2-tools; make setup installs it)")
    from test_otf2 import Archive

    return Archive


def _by_location(archive) -> dict[tuple[str, str, str], list[tuple]]:
    """Each location's events (kind, time, region name or metric values) by its
    group's name, its name and its type: what the location ids leave."""
    by_name = {where: archive.events.get(loc, []) for loc, where in archive.locations.items()}
    assert len(by_name) == len(archive.locations), "two locations of one name in a group"
    return by_name


def test_otf2_is_the_same_with_dask_and_holds_what_load_s_export_holds(small, tmp_path,
                                                                       dask_client,
                                                                       otf2_archive):
    from test_otf2 import otf2_print

    def printed(path) -> str:
        return otf2_print("-G", path / "traces.otf2") + otf2_print(path / "traces.otf2")
    _both_ways(small, tmp_path, "d.otf2", dask_client, printed)
    made = otf2_archive(tmp_path / "here" / "d.otf2")
    small[1].to_otf2(tmp_path / "t.otf2")
    whole = otf2_archive(tmp_path / "t.otf2")
    assert _by_location(made) == _by_location(whole)
    groups = {group for group, _, _ in made.locations.values()}
    assert sorted(g.split(":")[0] for g in groups) == [f"rank {r}" for r in range(RANKS)]
    # the partitions after the first have regions the first has not: their own ids
    # differ from the archive's, which the mapping tables give their events
    later = {e[2] for (g, _, kind), events in _by_location(made).items()
             if not g.startswith("rank 0") and kind != "METRIC" for e in events}
    first = {e[2] for (g, _, kind), events in _by_location(made).items()
             if g.startswith("rank 0") and kind != "METRIC" for e in events}
    assert later - first
    assert made.properties == whole.properties


def test_a_partition_s_flows_keep_to_its_range():
    """The ids of a part's flows (tasks' and offload's) are from its first on, fewer
    than its records: the parts made apart never share one."""
    trace = load_stored("offload.omptraw")
    first = 1_000_000
    out = _Collect()
    with Progress(0, "test") as progress:
        perfetto.write_events(trace, out, ExportFilter(), first, ".", progress)
    events = json.loads(b"[" + out.data[len(perfetto.SEP):] + b"]")
    ids = [e["id"] for e in events if e["ph"] == "s"]
    cats = {e["cat"] for e in events if e["ph"] == "s"}
    assert cats == {"offload"} or cats == {"task", "offload"}
    assert len(set(ids)) == len(ids) > 0
    assert first <= min(ids) and max(ids) < first + len(trace)


class _Collect:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += bytes(data)


def test_a_partition_unreadable_on_its_worker_is_left_out_and_said(tmp_path, dask_client):
    files = write_dataset(tmp_path / "run", 3, 300)
    d = ompt_py.open_dataset(tmp_path / "run")
    files[1].write_bytes(b"PAR1 not any more")
    with pytest.warns(TraceWarning, match="left out, the rest is loaded"):
        d.to_perfetto(tmp_path / "d.json", client=dask_client)
    events = json.loads((tmp_path / "d.json").read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {FIRST_PID, FIRST_PID + 2}
    assert d.meta["skipped"][-1]["source"] == str(files[1])
    assert _left_behind(tmp_path) == []


def test_a_path_where_nothing_can_be_written_is_said(small, tmp_path):
    d = ompt_py.open_dataset(small[0])
    with pytest.raises(FileNotFoundError, match="cannot write the export's parts beside"):
        d.to_perfetto(tmp_path / "no such directory" / "d.json")
    (tmp_path / "a file").write_text("")
    with pytest.raises(NotADirectoryError, match="choose another path"):
        d.to_csv(tmp_path / "a file" / "d.csv")


@pytest.mark.parametrize("damage", ["missing", "short"])
@pytest.mark.parametrize("format", ["perfetto-proto", "otf2"])
def test_a_part_missing_or_short_is_said(small, tmp_path, damage, format, request):
    """As when the workers write where this process does not read: the file is not
    written, and the parts are removed.  An OTF2 part is a directory: its event
    files are checked."""
    if format == "otf2":
        request.getfixturevalue("otf2_archive")
    d = ompt_py.open_dataset(small[0])

    def map_parts(fns):
        made = d._map(fns, None, stacklevel=2)
        part = made[2].path
        if format == "otf2":
            part = os.path.join(part, "traces", "0.evt")
        if damage == "missing":
            os.remove(part)
        else:
            with open(part, "r+b") as f:
                f.truncate(os.path.getsize(part) // 2)
        return made
    with pytest.raises(TraceFileError, match=(
            r"the part of rank 2 \(pid 4002\) of .*d.out (is missing \(.*\)|\(.*\) has "
            r"[0-9,]+ bytes of the [0-9,]+ written): .* the workers must see the directory")):
        dataset_io.export(map_parts, d.partitions, tmp_path / "d.out", format, ranked=True)
    assert os.listdir(tmp_path) == []


def test_other_formats_are_refused(small, tmp_path):
    with pytest.raises(ValueError, match="export a partition's Trace"):
        dataset_io.export(lambda fns: [], ompt_py.open_dataset(small[0]).partitions,
                          tmp_path / "d", "speedscope", ranked=True)
    assert os.listdir(tmp_path) == []


# ---- the CLI ----------------------------------------------------------------------------------


def test_cli_exports_a_dataset_partition_by_partition(small, tmp_path, dask_client):
    """``ompt-py export DIR``: the dataset's export (not a whole load), here or on the
    cluster at --dask; filtered, the whole load's."""
    ompt_py.open_dataset(small[0]).to_perfetto(tmp_path / "api.pftrace")
    r = ok(cli("export", small[0], "-o", tmp_path / "cli.pftrace"))
    assert "one at a time ->" in r.stderr
    address = dask_client.scheduler.address
    r = ok(cli("export", small[0], "-o", tmp_path / "dask.pftrace", "--dask", address))
    assert f"one at a time on {address} ->" in r.stderr
    made = (tmp_path / "api.pftrace").read_bytes()
    assert (tmp_path / "cli.pftrace").read_bytes() == made
    assert (tmp_path / "dask.pftrace").read_bytes() == made
    r = ok(cli("export", small[0], "-o", tmp_path / "rank1.json", "--pid", FIRST_PID + 1))
    assert "process(es) ->" in r.stderr
    events = json.loads((tmp_path / "rank1.json").read_text())["traceEvents"]
    assert {e["pid"] for e in events if e["ph"] == "X"} == {FIRST_PID + 1}


def test_cli_exports_a_dataset_to_otf2_partition_by_partition(small, tmp_path, otf2_archive):
    ompt_py.open_dataset(small[0]).to_otf2(tmp_path / "api.otf2")
    r = ok(cli("export", small[0], "-o", tmp_path / "cli.otf2"))
    assert "one at a time ->" in r.stderr and "(otf2)" in r.stderr
    api, made = otf2_archive(tmp_path / "api.otf2"), otf2_archive(tmp_path / "cli.otf2")
    assert made.locations == api.locations and made.events == api.events


@pytest.mark.parametrize("how", [["-o", "out.json", "--pid", str(FIRST_PID)],
                                 ["-o", "out", "--format", "parquet"]])
def test_cli_dask_without_a_dataset_export_is_refused(small, tmp_path, how):
    r = cli("export", small[0], "--dask", "tcp://nowhere:8786", *how, cwd=tmp_path)
    no_traceback(r)
    assert r.returncode == 2
    assert "--dask exports a dataset directory" in r.stderr and "drop --dask" in r.stderr
    assert os.listdir(tmp_path) == []


def test_no_scheduler_at_the_address_is_said():
    """ompt_py.dataset.connect (ompt-py export --dask): an address where no scheduler
    answers is a ConfigError that says how to start one."""
    pytest.importorskip("dask.distributed")
    from ompt_py.dataset import connect
    from ompt_py.errors import ConfigError

    with pytest.raises(ConfigError, match=r"no Dask scheduler answered at 'tcp://127.0.0.1:1'.*"
                                          r"dask scheduler"):
        connect("tcp://127.0.0.1:1", timeout=1)
