"""Python call stacks in raw files: the STACKS blocks a process writes as its
stacks grow (csrc/tool/omptpy_file.h), added up by the reader, and corrupt
ones left out with a TraceWarning (and in meta["skipped"])."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from conftest import stored_path

import ompt_py
from ompt_py.errors import TraceWarning


def _with_block(kind: int, payload: bytes) -> bytes:
    return stored_path("parallel-300.omptraw").read_bytes() + struct.pack(
        "<IIQ", ompt_py._core.FILE_MAGIC, kind, len(payload)) + payload


def test_stacks_blocks_of_a_raw_file_add_up(tmp_path):
    first = (b'{"interpreter": {"status": "on", "depth": 4, "cwd": "/w"}, "codes_from": 0, '
             b'"codes": [["/w/a.py", "f", 1]], "stacks_from": 0, "stacks": [[0, 1, 3]], '
             b'"codes_refused": 0, "stacks_refused": 0}')
    second = (b'{"interpreter": {"status": "on", "depth": 4, "cwd": "/w"}, "codes_from": 1, '
              b'"codes": [["/w/b.py", "g", 7]], "stacks_from": 1, "stacks": [[1, 1, 3, 2, 9]], '
              b'"codes_refused": 0, "stacks_refused": 2}')
    raw = _with_block(ompt_py._core.BLOCK_STACKS, first)
    raw += struct.pack("<IIQ", ompt_py._core.FILE_MAGIC, ompt_py._core.BLOCK_STACKS,
                       len(second)) + second
    (tmp_path / "a.omptraw").write_bytes(raw)
    t = ompt_py.load(tmp_path / "a.omptraw")
    py = t.meta["processes"][0]["python"]
    assert py["stacks"] == [[0, 1, 3], [1, 1, 3, 2, 9]] and py["stacks_refused"] == 2
    frames = t.python_stacks()
    assert frames["location"].tolist() == ["a.py:3 in f", "a.py:3 in f", "b.py:9 in g"]
    assert frames["truncated"].tolist() == [False, True, True]
    assert np.array_equal(frames["stack"], [1, 2, 2])


@pytest.mark.parametrize("payload", [
    b'{"codes_from": 0}',
    b'{"interpreter": null, "codes_from": "x", "codes": [], "stacks_from": 0, "stacks": [], '
    b'"codes_refused": 0, "stacks_refused": 0}',
    b'[1, 2]',
])
def test_a_corrupt_stacks_block_is_left_out(tmp_path, payload):
    path = tmp_path / "a.omptraw"
    path.write_bytes(_with_block(ompt_py._core.BLOCK_STACKS, payload))
    with pytest.warns(TraceWarning, match="the STACKS block at byte"):
        t = ompt_py.load(path)
    assert "python" not in t.meta["processes"][0]
    (skipped,) = t.meta["skipped"]
    assert skipped["source"] == str(path) and "STACKS" in skipped["reason"]
    assert t.python_stacks().empty
