"""The CSV export (``Trace.to_csv``, ``ompt-py export --format csv``): one row per
event, the columns and row order of ``Trace.to_pandas()``, made a batch at a
time (``to_pandas()`` of the batch's rows) and written by C (streaming.rows)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

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


def _csv_text(trace: Trace, rows: np.ndarray, header: bool, ranked: bool = False) -> bytes:
    """The CSV text of some rows of ``trace.events`` (in time order), as they are
    in ``trace.to_pandas()``; ``ranked``: with a ``rank`` column even when no
    process of the trace has a rank (empty: another trace of the file has one)."""
    frame = trace.frame_at(rows)
    if ranked and "rank" not in frame:
        frame.insert(2, "rank", pd.array([pd.NA] * len(frame), dtype="Int32"))
    head = (",".join(f'"{name}"' for name in frame.columns) + "\n").encode() if header else b""
    if not len(frame):
        return head
    template: list[str | Column] = []
    for i, name in enumerate(frame.columns):
        column = _csv_column(frame[name])
        template += ["," if i else "", "" if column is None else column]
    return head + render_rows([*template, "\n"], null=b"")


def write(trace: Trace, path: str | os.PathLike, flt: ExportFilter | None = None) -> None:
    """Writes one CSV row per event, the columns and row order of ``to_pandas()``,
    without building the whole frame: the rows go in time order, a batch at a time.
    Of the events ``flt`` keeps (default: all; CSV has no metadata to say so)."""
    write_all([(flt or ExportFilter()).events(trace)], path)


def write_all(traces: Iterable[Trace], path: str | os.PathLike, ranked: bool = False) -> None:
    """Writes several traces of one time axis (a dataset's partitions, each made
    when its turn comes and dropped after) into one CSV file, one after the other,
    each in time order, under the first one's header; ``ranked``: a ``rank``
    column in every row (empty for a process without one), as when one of the
    traces has a process with a rank."""
    with output(path) as out, Progress(0, "csv") as progress:
        for i, trace in enumerate(traces):
            order = time_order(trace.events["time_ns"])
            trace.pids_at(order[:0])  # the pid column, if it needs one, made before the
            progress.grow(len(order))  # threads read it
            jobs = (lambda p=part, t=trace, o=order, h=i == 0: _csv_text(t, o[p], h and
                                                                         p.start == 0, ranked)
                    for part in batches(max(len(order), 1)))
            for part, text in zip(batches(max(len(order), 1)), in_order(jobs)):
                out.write(text)
                progress.update(part.stop - part.start)
