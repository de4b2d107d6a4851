"""What every export shares: batches of rows formatted by a thread per processor
(``in_order``), a few batches ahead of the writer, their text written in C
(``rows``: ``_core.format_rows``, a template whose holes take a column each of
numbers, times, addresses or names, one ``json.dumps`` per distinct name,
never one per row), files that appear only once whole (``output``), and a
progress bar on a terminal (``Progress``)."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, BinaryIO, NamedTuple, Protocol

import numpy as np

from .. import _core

BATCH_ROWS = 1 << 15  # rows of text formatted at a time
MAX_THREADS = 4  # formatting batches at once
SEP = ",\n"


class Progress:
    """A tqdm bar on stderr when stderr is a terminal; nothing otherwise."""

    def __init__(self, total: int, what: str) -> None:
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=what, unit=" rows", unit_scale=True,
                            file=sys.stderr, leave=False)

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def grow(self, n: int) -> None:
        """``n`` more rows to go (a total known as the work is made)."""
        if self.bar is not None:
            self.bar.total += n
            self.bar.refresh()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


def batches(n: int, size: int | None = None) -> Iterator[slice]:
    size = size or BATCH_ROWS
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def in_order(jobs: Iterable[Callable[[], Any]]) -> Iterator[Any]:
    """The results of ``jobs``, in order, computed by a thread per processor (at
    most MAX_THREADS; the formatting releases the GIL) with at most one job
    ahead per thread, so that only a few batches are in memory at once."""
    workers = min(len(os.sched_getaffinity(0)), MAX_THREADS)
    with ThreadPoolExecutor(workers) as pool:
        pending: deque = deque()
        for job in jobs:
            pending.append(pool.submit(job))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


@contextmanager
def output(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A file that appears at ``path`` only once written whole: an export that
    fails half-way leaves nothing (and an older file at ``path`` as it was)."""
    partial = f"{os.fspath(path)}.partial"
    try:
        with open(partial, "wb") as out:
            yield out
        _replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _replace(new: str, path: str | os.PathLike) -> None:
    """os.replace, with the older file at ``path`` (if any) freed in a thread of its
    own: the rename drops its last name, and the kernel frees its blocks in the
    call that drops the last reference, 0.15 to 1.3 s for a file of 390 MiB on an
    ext4 mounted with discard.  Held open across the rename, the older file is
    freed when a daemon thread closes it, while the caller goes on."""
    try:
        older: int | None = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO: no wait
    except OSError:  # none (or not readable: the rename frees it)
        older = None
    try:
        os.replace(new, path)
    finally:
        if older is not None:
            threading.Thread(target=os.close, args=(older,), name="ompt-py free older file",
                             daemon=True).start()


# ---- rows of text, formatted in C --------------------------------------------------------

# The kinds of column of _core.format_rows.
NUMBER, MICROS, HEX, TEXT = (_core.FORMAT_NUMBER, _core.FORMAT_MICROS, _core.FORMAT_HEX,
                             _core.FORMAT_TEXT)


class Column(NamedTuple):
    """A column of ``rows``: an integer array, and how to write it."""

    kind: int
    values: np.ndarray
    missing: np.ndarray | None = None  # True: the value is null
    table: tuple[bytes, ...] | None = None  # TEXT: the text of each code


def _flags(missing: Any) -> np.ndarray | None:
    return None if missing is None else np.ascontiguousarray(missing, bool)


def number(values: Any, missing: Any = None) -> Column:
    return Column(NUMBER, np.ascontiguousarray(values), _flags(missing))


def ident(values: Any) -> Column:
    """An id as to_pandas() has it (parallel_id, task_id): null where 0."""
    values = np.ascontiguousarray(values)
    return Column(NUMBER, values, values == 0)


def micros(ns: Any) -> Column:
    """Nanoseconds as exact microseconds with three decimals: 1234567 -> 1234.567."""
    return Column(MICROS, np.ascontiguousarray(ns, np.int64))


def hexadecimal(values: Any, missing: Any = None) -> Column:
    """A code address or wait id as a JSON string, "0x1f"."""
    return Column(HEX, np.ascontiguousarray(values), _flags(missing))


class Texts(tuple):
    """A table of texts, encoded (``texts``): made once for a table that every batch
    of a source names its rows by."""


def texts(table: Iterable[str]) -> Texts:
    return Texts(text.encode() for text in table)


def named(codes: Any, table: Iterable[str] | Texts) -> Column:
    """``table[code]``, written as it is; null for a code outside the table (-1)."""
    return Column(TEXT, np.ascontiguousarray(codes), None,
                  table if isinstance(table, Texts) else texts(table))


def render_rows(template: Sequence[str | Column], null: bytes = b"null") -> bytes:
    """A row of text per row of the template's columns: the template's strings as
    they are, the columns' values between them (``null`` where missing)."""
    parts, columns, text = [], [], ""
    for piece in template:
        if isinstance(piece, str):
            text += piece
            continue
        parts.append(text.encode())
        text = ""
        columns.append((piece.kind, piece.values, piece.missing, null, piece.table))
    parts.append(text.encode())
    return _core.format_rows(tuple(parts), columns)


def json_names(names: Iterable[Any], suffix: str = "") -> list[str]:
    return [json.dumps(f"{name}{suffix}") for name in names]


class Writable(Protocol):
    """Where an export writes: a binary file, or an ArrayWriter."""

    def write(self, data: bytes, /) -> Any: ...


class ArrayWriter:
    """Writes JSON values, each prefixed with ``SEP``, as the elements of one array:
    what is written to it, but the first SEP (a file of values each prefixed
    with SEP can be copied into it: shutil.copyfileobj)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.first = True

    def write(self, text: bytes) -> None:
        if not text:
            return
        if self.first:
            text = memoryview(text)[len(SEP):]
            self.first = False
        self.out.write(text)
