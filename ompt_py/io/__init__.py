"""Input and output: the files traces live in.

* ``rawfile``: the per-process files the C tool writes (``OMPTPY_OUTPUT``,
  ``ompt-py run``): blocks of JSON metadata and 64-byte records.
* ``parquet``: ``Trace.save`` and its reader, one file or a dataset
  partitioned by process.
* ``csv`` and ``perfetto``: exports, streamed in batches whose text is written
  in C (``streaming``).

Readers return ``Parts`` (the data of a trace), from which ``ompt_py.trace``
makes a Trace: this layer never imports ``ompt_py.trace`` at import time.  It
may import the base modules and the analysis layer's pairing (the Perfetto
slices are paired as the tables are); nothing here imports the presentation
layer.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EXPORT_FORMATS", "Parts", "export"]

#: The formats of ``ompt-py export`` and ``export()``.
EXPORT_FORMATS = ("perfetto", "csv", "parquet")


@dataclass
class Parts:
    """A trace's data as a reader makes it: events (EVENT_DTYPE) in one or more
    segments, its metadata, and each row's process: ``pid_runs`` ((pid, rows) in
    the order of the rows) or ``pids`` (one per row)."""

    segments: list[np.ndarray]
    meta: dict
    pid_runs: list[tuple[int, int]]
    pids: np.ndarray | None = None


def export(trace: Any, path: str | os.PathLike, format: str) -> None:
    """Writes ``trace`` to ``path`` in ``format``, one of EXPORT_FORMATS."""
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r}; use one of: "
                         f"{', '.join(EXPORT_FORMATS)}")
    writer = importlib.import_module(f".{format}", __name__)
    writer.write(trace, path)
