"""Regions of user code: ``ompt_py.region`` in Python, ``omptpy_region.h`` in C.

A marker is a ``region`` event (number 101) with endpoint begin or end and
the id of its name in ``u64a``; the tool interns the names and lists them in
the trace metadata (``meta["processes"][i]["region_names"]``, id 1 first).
This module gives the markers their Python side: the context manager and
decorator; ``ompt_py.analysis.tables.user_regions`` pairs them.
"""

from __future__ import annotations

import contextlib

from .. import _core
from ..records import SCOPE_BEGIN, SCOPE_END


class region(contextlib.ContextDecorator):  # lower case: used like a function
    """Marks a region of user code on the calling thread::

        with ompt_py.region("assemble"):
            ...

        @ompt_py.region("solve")
        def solve(): ...

    Regions nest; each appears in ``Trace.user_regions()`` with its name,
    nesting level and parent, and reaches handlers as a ``region`` event.
    Recorded while a trace window is open or handlers are registered (about
    a microsecond per marker from Python; nothing otherwise).
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a region needs a non-empty name (str), not {name!r}")
        if "\0" in name:
            raise ValueError("a region name cannot contain NUL characters")
        self.name = name

    def __enter__(self) -> region:
        _core.region_mark(SCOPE_BEGIN, self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        _core.region_mark(SCOPE_END, self.name)

    def __repr__(self) -> str:
        return f"ompt_py.region({self.name!r})"


def region_names() -> list[str]:
    """The region names interned so far in this process; a marker's ``u64a`` is
    the index into this list plus one (0: an end without a name).  The error
    callback's messages share the list (an error record's ``u64b``)."""
    return _core.region_names()
