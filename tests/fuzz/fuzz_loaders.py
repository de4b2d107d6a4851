"""Coverage-guided fuzzing of the trace readers with atheris (``make fuzz``; not part
of ``make test``): each input is a file that must load as a Trace, on which the
``load`` target also runs ``to_pandas()``, ``summary()`` and the report, or raise
TraceFileError; any other exception is a finding (libFuzzer stops and writes the
input to build/fuzz/).

    python tests/fuzz/fuzz_loaders.py TARGET [libFuzzer options] [CORPUS...]

Targets: ``raw`` (io.rawfile: one raw file), ``parquet`` (io.parquet: one Parquet
file) and ``load`` (ompt_py.load, to_pandas, summary and the report of ``ompt-py
report``), whose input's first byte says what the rest is: a raw file (0), a
Parquet file (1) or the trace metadata (JSON) of a stored table's Parquet file
(2), which reaches the metadata's keys where byte mutations of a compressed file
seldom do.  ompt_py's own modules are instrumented for coverage (not numpy,
pandas or pyarrow).

The committed corpus (tests/fuzz/corpus/TARGET) holds seeds made from tests/data
(``--seeds``) and the inputs the fuzzer found that reach new code, minimised
(``fuzz_loaders.py TARGET -merge=1 NEW_DIR tests/fuzz/corpus/TARGET build/fuzz/TARGET``,
then NEW_DIR in its place); ``make fuzz`` writes new ones to build/fuzz/TARGET.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import struct
import sys
import tempfile
import warnings
from pathlib import Path

import atheris
import pyarrow.parquet as pq

with atheris.instrument_imports(include=["ompt_py"]):
    import ompt_py
    from ompt_py.analysis import summary  # noqa: F401 (instrumented for the load target)
    from ompt_py.errors import TraceFileError
    from ompt_py.io import parquet, rawfile
    from ompt_py.presentation import report

TARGETS = ("raw", "parquet", "load")
HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"
# A file per input in memory-backed storage when there is one (the readers take
# paths), removed after each input: libFuzzer ends the process without Python's
# atexit handlers.
SCRATCH = Path("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
RAW = SCRATCH / f"ompt-py-fuzz-{os.getpid()}.omptraw"
PARQUET = SCRATCH / f"ompt-py-fuzz-{os.getpid()}.parquet"
TABLE = pq.read_table(DATA / "format-v1" / "trace.parquet")


def _load(data: bytes) -> None:
    kind, body = (data[0] % 3, data[1:]) if data else (0, b"")
    path = RAW if kind == 0 else PARQUET
    if kind == 2:  # the metadata of a stored table's Parquet file
        pq.write_table(TABLE.replace_schema_metadata({parquet.PARQUET_KEY: body}), path)
    else:
        path.write_bytes(body)
    try:
        t = ompt_py.load(path)
    except TraceFileError:
        return
    t.to_pandas()
    str(t.summary())
    report.render(t)


def _raw(data: bytes) -> None:
    RAW.write_bytes(data)
    with contextlib.suppress(TraceFileError):
        rawfile.load([str(RAW)], str(RAW))


def _parquet(data: bytes) -> None:
    PARQUET.write_bytes(data)
    with contextlib.suppress(TraceFileError):
        parquet.read(str(PARQUET))


def one_input(target: str):
    run = {"raw": _raw, "parquet": _parquet, "load": _load}[target]

    def test_one_input(data: bytes) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                run(data)
            finally:
                for path in (RAW, PARQUET):
                    path.unlink(missing_ok=True)

    return test_one_input


def seeds(corpus: Path) -> None:
    """Write the seeds made from tests/data into corpus/TARGET: the small raw files of
    format-v1 (one with a STACKS block), one of today's tool (LEDGER blocks) and an
    in-place one (tests/inplace_raw.py: REGION and WINDOWS blocks), Parquet files
    of one and two processes."""
    sys.path.insert(0, str(HERE.parent))  # tests/, for inplace_raw
    import inplace_raw

    raw = [p.read_bytes() for p in sorted((DATA / "format-v1" / "raw").glob("*.omptraw"))]
    meta = json.loads(pq.read_schema(DATA / "pystacks-inprocess.parquet").metadata[b"ompt_py"])
    py = meta["processes"][0]["python"]
    doc = json.dumps({"interpreter": {"status": "on", "depth": py["depth"], "cwd": py["cwd"]},
                      "codes_from": 0, "codes": py["codes"][:4], "stacks_from": 0,
                      "stacks": py["stacks"][:4], "codes_refused": 0, "stacks_refused": 0,
                      "native_missed": 0}).encode()
    raw.append(raw[0] + struct.pack("<IIQ", ompt_py._core.FILE_MAGIC,
                                    ompt_py._core.BLOCK_STACKS, len(doc)) + doc)
    raw.append((DATA / "raw-ledger.omptraw").read_bytes())
    parquets = [(DATA / "format-v1" / "trace.parquet").read_bytes(),
                next((DATA / "format-v1" / "dataset").glob("*/part-0.parquet")).read_bytes()]
    trace = json.loads(TABLE.schema.metadata[parquet.PARQUET_KEY])
    trace["processes"][0]["python"] = {**py, "codes": py["codes"][:4], "stacks": py["stacks"][:4]}
    files = {"raw": raw, "parquet": parquets,
             "load": [b"\0" + r for r in raw] + [b"\1" + p for p in parquets]
             + [b"\2" + json.dumps(trace).encode()]}
    in_place = inplace_raw.sample()  # last: the seeds made before keep their names
    files["raw"].append(in_place)
    files["load"].append(b"\0" + in_place)
    for target, inputs in files.items():
        (corpus / target).mkdir(parents=True, exist_ok=True)
        for i, data in enumerate(inputs):
            (corpus / target / f"seed-{i}").write_bytes(data)


def main() -> None:
    if sys.argv[1:2] == ["--seeds"]:
        seeds(HERE / "corpus")
        return
    # The target is in the environment too: libFuzzer runs this script again without
    # it for -merge=1 (the corpus minimised) and -fork.
    if sys.argv[1:2] and sys.argv[1] in TARGETS:
        os.environ["OMPTPY_FUZZ_TARGET"] = sys.argv.pop(1)
    target = os.environ.get("OMPTPY_FUZZ_TARGET")
    if target not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(TARGETS)} [libFuzzer options] [CORPUS...]"
                 " | --seeds")
    # libFuzzer runs those again through the shell, its argv[0] first: this interpreter
    # and this script.
    sys.argv[0] = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))}"
    atheris.Setup(sys.argv, one_input(target))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
