"""What the analyses derive from a trace, made once per trace.

The events frame, the paired tables and the analyses built on them are made
on first use and kept in one ``Derived`` object per trace, until the trace's
events change (``Trace.revision``: a trace still recording grows at each
``stop()``).  A function marked ``@per_trace`` is computed once per trace and
arguments; its cache key is the function itself, so every derived table is
named by the function that makes it.  A caller that knows a value is not asked
for again (a dataset's partition, summarised once) can ``forget`` it, or
``keep`` only those still asked for, and ``give_back`` what they took to the
system before the next analysis.

A value is made once whatever the threads that ask for it: a thread that asks
for one another thread is making waits for it.  So a caller can have some made
``ahead`` on a thread of their own while it makes others: the analyses spend
much of their time in numpy, pandas and the extension, without the GIL.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from .. import _core

if TYPE_CHECKING:
    from ..trace import Trace

F = TypeVar("F", bound=Callable[..., Any])


class Derived:
    """The values derived from one revision of a trace's events."""

    def __init__(self, revision: int) -> None:
        self.revision = revision
        self.values: dict[tuple, Any] = {}
        self._making: dict[tuple, threading.Lock] = {}  # held while a value is made
        self._lock = threading.Lock()

    def making(self, key: tuple) -> threading.Lock:
        """The lock held while the value of ``key`` is made."""
        with self._lock:
            return self._making.setdefault(key, threading.Lock())


_DERIVED: weakref.WeakKeyDictionary[Trace, Derived] = weakref.WeakKeyDictionary()
_DERIVED_LOCK = threading.Lock()


def derived(trace: Trace) -> Derived:
    """The derived values of ``trace`` (a new, empty set once its events changed)."""
    with _DERIVED_LOCK:
        d = _DERIVED.get(trace)
        if d is None or d.revision != trace.revision:
            d = _DERIVED[trace] = Derived(trace.revision)
        return d


def per_trace(fn: F) -> F:
    """``fn(trace, *args)`` computed once per trace and ``args`` (hashable), by the
    first thread that asks (the others wait for it)."""

    @functools.wraps(fn)
    def cached(trace: Trace, *args: Any) -> Any:
        d = derived(trace)
        key = (fn, args)
        try:
            return d.values[key]
        except KeyError:
            pass
        with d.making(key):  # the values depend on others, never on themselves: no cycle
            if key not in d.values:
                d.values[key] = fn(trace, *args)
            return d.values[key]

    return cached  # type: ignore[return-value]


@contextlib.contextmanager
def ahead(trace: Trace, *makers: Callable[[Trace], Any]) -> Iterator[None]:
    """Each of ``makers`` called with ``trace``, in turn, on a thread of their own
    while the body runs (and asks for some of what they make, waiting for what is
    being made); the thread is waited for at the end.  What they make is kept by
    ``@per_trace``; an error of theirs is not raised there, but by the body when it
    asks for the same value.  For a caller that will ask for values that do not
    depend on one another (bench/README.md, view benchmark)."""
    stop = threading.Event()

    def make() -> None:
        for maker in makers:
            if stop.is_set():
                return
            with contextlib.suppress(Exception):
                maker(trace)

    thread = threading.Thread(target=make, name="ompt-py: analyses ahead", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _made_by(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function a ``@per_trace`` function's values are kept under: the innermost
    one, through any other wrapper made by functools.wraps (bench/worker_memory.py
    wraps the analyses to measure them)."""
    return inspect.unwrap(fn)


def made(trace: Trace, fn: Callable[..., Any]) -> bool:
    """Whether the ``@per_trace`` function ``fn`` was computed for ``trace`` (its
    current events), for any arguments."""
    fn = _made_by(fn)
    return any(key[0] is fn for key in derived(trace).values)


def _drop(trace: Trace, dropped: Callable[[Callable[..., Any]], bool]) -> None:
    """Drop the values made for ``trace`` by the functions ``dropped`` says."""
    values = derived(trace).values
    for key in [key for key in values if dropped(key[0])]:
        del values[key]


def forget(trace: Trace, fn: Callable[..., Any]) -> None:
    """Drop what the ``@per_trace`` function ``fn`` made for ``trace`` (for any
    arguments): made again if asked for."""
    fn = _made_by(fn)
    _drop(trace, lambda made_by: made_by is fn)


def keep(trace: Trace, *fns: Callable[..., Any]) -> None:
    """Drop what was made for ``trace`` but what the ``@per_trace`` functions
    ``fns`` made (for any arguments): the rest is made again if asked for."""
    kept = {_made_by(fn) for fn in fns}
    _drop(trace, lambda made_by: made_by not in kept)


def give_back() -> None:
    """Give the memory of the values dropped (and of anything else freed) back to the
    system: glibc keeps the holes that freed tables leave in its heaps
    (_core.trim_heap), and Arrow's allocator (mimalloc) the pages of freed text
    columns (pandas' text is Arrow strings), which it does not reuse for the next
    analysis' (bench/README.md, Dataset benchmark: 10 MiB of a known-tasks
    partition's task_sites)."""
    _core.trim_heap()
    pa.default_memory_pool().release_unused()
