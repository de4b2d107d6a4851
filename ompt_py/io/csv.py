"""The CSV export (``Trace.to_csv``, ``ompt-py export --format csv``): one row per
event, the columns and row order of ``Trace.to_pandas()``, made a batch at a
time (``to_pandas()`` of the batch's rows) and written by C (streaming.rows)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import pandas as pd

from ..records import time_order
from .filters import ExportFilter
from .streaming import Column, Progress, batches, in_order, named, number, output, render_rows

if TYPE_CHECKING:
    from ..trace import Trace


def _csv_column(values: pd.Series) -> Column | None:
    """A column of to_pandas() as CSV fields: names quoted, numbers, missing values
    empty (None: every value is missing)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        names = ['"' + str(name).replace('"', '""') + '"' for name in values.cat.categories]
        return named(values.cat.codes.to_numpy(), names)
    if not isinstance(values.dtype, pd.api.extensions.ExtensionDtype):
        return number(values.to_numpy())
    missing = values.isna().to_numpy()
    if missing.all():
        return None
    return number(values.to_numpy(values.dtype.numpy_dtype, na_value=0), missing)


def header(trace: Trace, ranked: bool = False) -> bytes:
    """The CSV header of ``trace``'s rows (write_rows, ``ranked`` as there): the
    names of its to_pandas() columns."""
    columns = list(trace.frame_at(np.zeros(0, np.intp)).columns)
    if ranked and "rank" not in columns:
        columns.insert(2, "rank")
    return (",".join(f'"{name}"' for name in columns) + "\n").encode()


def _csv_text(trace: Trace, rows: np.ndarray, ranked: bool = False) -> bytes:
    """The CSV text of some rows of ``trace.events`` (in time order), as they are
    in ``trace.to_pandas()``; ``ranked``: with a ``rank`` column even when no
    process of the trace has a rank (empty: another trace of the file has one)."""
    frame = trace.frame_at(rows)
    if not len(frame):
        return b""
    if ranked and "rank" not in frame:
        frame.insert(2, "rank", pd.array([pd.NA] * len(frame), dtype="Int32"))
    template: list[str | Column] = []
    for i, name in enumerate(frame.columns):
        column = _csv_column(frame[name])
        template += ["," if i else "", "" if column is None else column]
    return render_rows([*template, "\n"], null=b"")


def write(trace: Trace, path: str | os.PathLike, flt: ExportFilter | None = None) -> None:
    """Writes one CSV row per event, the columns and row order of ``to_pandas()``,
    without building the whole frame: the rows go in time order, a batch at a time.
    Of the events ``flt`` keeps (default: all; CSV has no metadata to say so)."""
    trace = (flt or ExportFilter()).events(trace)
    with output(path) as out:
        out.write(header(trace))
        write_rows(trace, out)


def write_rows(trace: Trace, out: BinaryIO, ranked: bool = False) -> None:
    """Writes the rows of ``trace``, in time order, without a header (``header``):
    ``ranked``: with a ``rank`` column in every row (empty for a process without
    one), as when another trace of the file (a dataset's partition) has a
    process with a rank."""
    order = time_order(trace.events["time_ns"])
    trace.pids_at(order[:0])  # the pid column, if it needs one, made before the threads read it
    with Progress(len(order), "csv") as progress:
        parts = list(batches(len(order)))
        jobs = (lambda p=part: _csv_text(trace, order[p], ranked) for part in parts)
        for part, text in zip(parts, in_order(jobs)):
            out.write(text)
            progress.update(part.stop - part.start)
