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
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
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


_DERIVED: weakref.WeakKeyDictionary[Trace, Derived] = weakref.WeakKeyDictionary()


def derived(trace: Trace) -> Derived:
    """The derived values of ``trace`` (a new, empty set once its events changed)."""
    d = _DERIVED.get(trace)
    if d is None or d.revision != trace.revision:
        d = _DERIVED[trace] = Derived(trace.revision)
    return d


def per_trace(fn: F) -> F:
    """``fn(trace, *args)`` computed once per trace and ``args`` (hashable)."""

    @functools.wraps(fn)
    def cached(trace: Trace, *args: Any) -> Any:
        values = derived(trace).values
        key = (fn, args)
        if key not in values:
            values[key] = fn(trace, *args)
        return values[key]

    return cached  # type: ignore[return-value]


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
