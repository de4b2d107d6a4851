"""Python handlers of OpenMP events: ``ompt_py.on`` and ``ompt_py.off``.

OMPT callbacks run on the runtime's threads without the GIL, often while
the thread that holds the GIL waits in the same parallel region, so no
Python ever runs in them.  Instead the tool copies the records that pass
the handlers' C filters (event kinds, thread indices, a code address range)
into a bounded queue (csrc/tool/tap.c) while it drains the threads' buffers, and
one thread of ours, the dispatcher, takes them out in batches: it waits in
C with the GIL released, and calls the handlers with the GIL, never on an
OpenMP thread.  Records reach the queue at most about ``delay`` after they
were written (the dispatcher drains the buffers every delay/4 while it
waits).  A slow handler, or one kept from the GIL, lets the queue grow to
its bound (OMPTPY_HANDLER_QUEUE); beyond it records are dropped, counted and
reported with a warning, and the OpenMP threads never wait, unless a
handler asked for ``block=True``.

Handlers and traces are independent: while handlers are registered the
tool writes records (of the handlers' events only, when no trace window is
open); records reach a trace only inside its window, and handlers whenever
they are registered, windows or not.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Union

import numpy as np

from .. import _core
from ..errors import AttachError, HandlerWarning
from ..records import EVENT_CODES, EVENT_DTYPE, EVENTS
from . import attach

DEFAULT_DELAY = 0.05  # seconds from an event to its handler, at most (about)
MAX_FILTERS = _core.TAP_MAX_FILTERS  # distinct filters the tool applies in C
MAX_THREADS = _core.TAP_MAX_THREADS  # thread indices per filter
BATCH_RECORDS = 1 << 18  # at most this many records per call of a handler
IDLE_WAIT = 0.5  # the dispatcher wakes this often when nothing comes
DROP_WARNING_EVERY = 1.0  # seconds between two warnings about dropped records

EventsArg = Union[str, Iterable[str], None]
CodeptrArg = Union[str, tuple[int, int], None]


def event_codes(events: EventsArg) -> tuple[int, ...]:
    """Event numbers of event names (None: every event); ValueError names the allowed ones."""
    if events is None:
        return tuple(sorted(EVENTS))
    names = [events] if isinstance(events, str) else list(events)
    unknown = [e for e in names if e not in EVENT_CODES]
    if unknown:
        raise ValueError(f"unknown event name(s) {unknown}; use one or more of: "
                         + ", ".join(sorted(EVENT_CODES)))
    if not names:
        raise ValueError("no event names given; use None for every event")
    return tuple(sorted({EVENT_CODES[e] for e in names}))


def event_mask(codes: Iterable[int]) -> tuple[int, int]:
    """Bit masks (events 0-63, 64-127) of event numbers, as the C filters take them."""
    lo = hi = 0
    for c in codes:
        if c < 64:
            lo |= 1 << c
        else:
            hi |= 1 << (c - 64)
    return lo, hi


def module_range(name: str) -> tuple[int, int]:
    """The code addresses [lo, hi) of a loaded module: the executable mappings in
    /proc/self/maps whose path ends with ``name`` or whose file name contains it."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) < 6 or "x" not in parts[1]:
                continue
            path = parts[5]
            if path.endswith(name) or name in os.path.basename(path):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                ranges.append((lo, hi, path))
    paths = sorted({p for _, _, p in ranges})
    if not paths:
        raise ValueError(f"no loaded module matches {name!r} (see /proc/self/maps); import "
                         "or load it before registering the handler")
    if len(paths) > 1:
        raise ValueError(f"{name!r} matches several modules: {', '.join(paths)}; be more precise")
    return min(r[0] for r in ranges), max(r[1] for r in ranges)


class Handler:
    """A registered handler (``ompt_py.on``): calls ``fn`` with batches of events.

    ``calls``, ``received`` (events) and ``errors`` (calls that raised) count
    what happened so far; ``remove()`` unregisters it.  Calling the handler
    calls ``fn``.
    """

    def __init__(self, fn: Callable[[Any], Any], events: EventsArg, threads: Iterable[int] | None,
                 codeptr: CodeptrArg, frame: bool, delay: float, block: bool) -> None:
        if not callable(fn):
            raise TypeError(f"a handler must be callable, not {type(fn).__name__}")
        self.fn = fn
        self.codes = event_codes(events)
        self.events = tuple(EVENTS[c] for c in self.codes)
        if threads is not None:
            threads = tuple(sorted({int(t) for t in threads}))
            if not threads or len(threads) > MAX_THREADS or min(threads) < 0:
                raise ValueError(f"threads: 1 to {MAX_THREADS} thread indices (the `thread` "
                                 f"column of the events), not {threads!r}")
        self.threads: tuple[int, ...] | None = threads
        if isinstance(codeptr, str):
            codeptr = module_range(codeptr)
        if codeptr is not None:
            lo, hi = (int(v) for v in codeptr)
            if not 0 <= lo < hi:
                raise ValueError(f"codeptr: a range (lo, hi) with 0 <= lo < hi, not {codeptr!r}")
            codeptr = (lo, hi)
        self.codeptr: tuple[int, int] | None = codeptr
        self.frame = bool(frame)
        if not delay > 0:
            raise ValueError(f"delay must be a positive number of seconds, not {delay!r}")
        self.delay = float(delay)
        self.block = bool(block)
        self.calls = self.received = self.errors = 0
        self.since_ns = 0  # events older than this are not for this handler
        self.active = False
        table = np.zeros(max(EVENTS) + 1, dtype=bool)
        table[list(self.codes)] = True
        self._table = table
        self._all_events = len(self.codes) == len(EVENTS)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        what = "all events" if self._all_events else ", ".join(self.events)
        state = "active" if self.active else "removed"
        return (f"<ompt_py.Handler {self.__name__} ({what}), {state}, calls={self.calls}, "
                f"received={self.received}, errors={self.errors}>")

    def remove(self) -> None:
        """Unregister the handler (``ompt_py.off(handler)``); no call starts after this."""
        off(self)

    def c_filter(self) -> tuple[int, int, int, int, tuple[int, ...]]:
        """The filter csrc/tool/tap.c applies: event masks, code range, thread indices."""
        every = (1 << 64) - 1
        lo, hi = (every, every) if self._all_events else event_mask(self.codes)
        cp_lo, cp_hi = self.codeptr or (0, 0)
        return lo, hi, cp_lo, cp_hi, self.threads or ()

    def _select(self, ev: np.ndarray) -> np.ndarray:
        """This handler's events of a batch (the queue holds every handler's)."""
        keep = None if self._all_events else self._table[ev["event"]]
        if self.threads is not None:
            m = np.isin(ev["thread"], self.threads)
            keep = m if keep is None else keep & m
        if self.codeptr is not None:
            cp = ev["codeptr"]
            m = (cp >= self.codeptr[0]) & (cp < self.codeptr[1])
            keep = m if keep is None else keep & m
        # Older events can come late from another thread's buffer: checked always,
        # in one pass when the whole batch is newer.
        if len(ev) and ev["time_ns"].min() < self.since_ns:
            m = ev["time_ns"] >= self.since_ns
            keep = m if keep is None else keep & m
        return ev if keep is None or keep.all() else ev[keep]

    def _deliver(self, ev: np.ndarray) -> None:
        mine = self._select(ev)
        if not len(mine) or not self.active:
            return
        try:
            self.fn(_frame(mine) if self.frame else mine)
        except BaseException as e:
            self.errors += 1
            if self.errors == 1:
                tb = e.__traceback__.tb_next if e.__traceback__ else None  # from the handler on
                sys.stderr.write(
                    f"ompt_py: handler {self.__name__} raised an exception (reported once; "
                    "later ones are counted in handler.errors, other handlers go on):\n"
                    + "".join(traceback.format_exception(type(e), e, tb)))
                sys.stderr.flush()
        self.calls += 1
        self.received += len(mine)


def _frame(ev: np.ndarray) -> Any:
    """A batch as a pandas frame (the columns of Trace.to_pandas; time_ns is
    CLOCK_MONOTONIC nanoseconds; error messages from the live table of strings)."""
    from ..meta import FORMAT
    from ..trace import Trace  # the facade above this layer: imported when first needed

    proc = {"pid": os.getpid(), "rank": None, "config": _config()}
    if (ev["event"] == EVENT_CODES["error"]).any():  # their messages' texts
        proc["region_names"] = _core.region_names()
    return Trace.from_records(ev, {"format": FORMAT, "processes": [proc]}).to_pandas()


_config_cache: dict = {}


def _config() -> dict:
    if not _config_cache:
        _config_cache.update(attach.meta()["config"])
    return _config_cache


# ---- registry and dispatcher ---------------------------------------------------------

_lock = threading.RLock()  # the registry and the tap's configuration
_handlers: tuple[Handler, ...] = ()  # replaced, never mutated: the dispatcher reads it unlocked
_dispatcher: threading.Thread | None = None
_progress = threading.Condition()  # the queue position up to which batches were handled
_position = 0
_drops_reported = 0
_drops_warned_at = 0.0


def on(events: EventsArg | Callable[[Any], Any] = None, fn: Callable[[Any], Any] | None = None,
       *, threads: Iterable[int] | None = None, codeptr: CodeptrArg = None, frame: bool = False,
       delay: float = DEFAULT_DELAY, block: bool = False) -> Any:
    """Register a handler of OpenMP events, called in batches on ompt_py's dispatcher thread.

    As a decorator, ``@ompt_py.on("task_create")`` (an event name, a list of
    them, or nothing for every event: ``@ompt_py.on()`` or ``@ompt_py.on``),
    or directly, ``ompt_py.on("task_create", fn)``; returns the Handler.

    The handler gets a read-only numpy array of the events (dtype of
    ``Trace.events``; ``time_ns`` is CLOCK_MONOTONIC nanoseconds, as
    ``time.monotonic_ns()``), in order per thread, or with ``frame=True`` a
    pandas frame like ``Trace.to_pandas()``.  Filters applied in C before
    anything reaches Python: ``events``, ``threads`` (tool thread indices,
    the ``thread`` column) and ``codeptr`` (a range ``(lo, hi)`` of code
    addresses, or a module name such as ``"libfoo.so"`` for its code).
    ``delay``: seconds from an event to its handler, at most (about; default
    0.05).  ``block=True``: OpenMP threads wait when the queue is full
    instead of dropping events; this deadlocks if a thread that holds the GIL
    waits in OpenMP code for them, so only use it around code that releases
    the GIL.  Exceptions in a handler are reported once with their traceback
    and counted in ``handler.errors``; the program and other handlers go on.
    """
    if callable(events) and fn is None:  # @ompt_py.on without parentheses
        return on(None, events, threads=threads, codeptr=codeptr, frame=frame, delay=delay,
                  block=block)
    if callable(events):
        raise TypeError("on(events, fn): events first (names, or None for all), then the function")

    def register(function: Callable[[Any], Any]) -> Handler:
        handler = Handler(function, events, threads, codeptr, frame, delay, block)
        _add(handler)
        return handler

    if fn is not None:
        return register(fn)
    event_codes(events)  # bad names fail at the decorator line, not later
    return register


def off(handler: Handler | Callable[[Any], Any]) -> bool:
    """Unregister a handler (the Handler, or the function it wraps); False if it was not
    registered.  A batch being delivered to it is not delivered further."""
    global _handlers
    with _lock:
        found = [h for h in _handlers if h is handler or h.fn is handler]
        if not found:
            return False
        for h in found:
            h.active = False
        _handlers = tuple(h for h in _handlers if h not in found)
        _configure()
    return True


def active_handlers() -> list[Handler]:
    """The registered handlers."""
    return list(_handlers)


def check_usable() -> None:
    """Raise ConfigError or AttachError when the tool cannot deliver events here."""
    attach.check_config()
    if not _config()["enabled"]:
        raise AttachError("the ompt-py tool is switched off (OMPTPY_TOOL=off), so no handler "
                          "would get events; unset OMPTPY_TOOL before Python starts")


def _add(handler: Handler) -> None:
    global _handlers, _dispatcher
    check_usable()
    with _lock:
        handler.since_ns = time.monotonic_ns()
        handler.active = True
        _handlers = (*_handlers, handler)
        try:
            _configure()
        except BaseException:
            handler.active = False
            _handlers = tuple(h for h in _handlers if h is not handler)
            _configure()
            raise
        if _dispatcher is None:
            _dispatcher = threading.Thread(target=_dispatch, name="ompt_py-handlers", daemon=True)
            _dispatcher.start()


def _configure() -> None:
    """Gives the C tap the union of the handlers' filters (under _lock)."""
    if not _handlers:
        _core.tap_stop()
        return
    filters = list(dict.fromkeys(h.c_filter() for h in _handlers))
    if len(filters) > MAX_FILTERS:  # one filter for all: events only, Python filters the rest
        lo = hi = 0
        for f in filters:
            lo, hi = lo | f[0], hi | f[1]
        filters = [(lo, hi, 0, 0, ())]
    try:
        _core.tap_configure(filters, min(h.delay for h in _handlers),
                            any(h.block for h in _handlers))
    except OSError as e:
        raise OSError(e.errno, f"cannot start the handlers' queue ({e.strerror}); lower "
                      "OMPTPY_HANDLER_QUEUE") from None


def _dispatch() -> None:
    global _dispatcher, _position
    while True:
        got = _core.tap_wait(IDLE_WAIT, BATCH_RECORDS)
        if got is None:  # the tap is stopped
            with _lock:
                if not _handlers:
                    _dispatcher = None
                    return
            time.sleep(0.001)  # restarted meanwhile: the tap is about to be active
            continue
        records, position = got
        if records:
            ev = np.frombuffer(records, EVENT_DTYPE)
            ev.flags.writeable = False  # shared by every handler
            for h in _handlers:
                if h.active:
                    h._deliver(ev)
        with _progress:
            _position = position
            _progress.notify_all()
        _report_drops()


_drops_lock = threading.Lock()


def _report_drops(now_or_never: bool = False) -> None:
    """Warns about events dropped since the last warning: at most every
    DROP_WARNING_EVERY seconds, or now (drain, exit) so that none goes unreported.
    The dispatcher and drain() both call it: one of them warns for a count, and a
    drain() returns only once that warning is written (the dispatcher, a daemon
    thread, may not get to write it before the process exits)."""
    global _drops_reported, _drops_warned_at
    with _drops_lock:
        dropped = _core.tap_stats()["dropped"]
        now = time.monotonic()
        if dropped <= _drops_reported or not (
                now_or_never or now - _drops_warned_at >= DROP_WARNING_EVERY):
            return
        capacity = _core.tap_stats()["capacity"]
        warnings.warn(
            f"ompt_py: {dropped - _drops_reported} events for handlers were dropped "
            f"({dropped} in all): the handlers fell behind and their queue ({capacity} events, "
            "OMPTPY_HANDLER_QUEUE) was full. Make the handlers faster, filter in C "
            "(on(..., threads=, codeptr=)), raise OMPTPY_HANDLER_QUEUE, or use block=True.",
            HandlerWarning, stacklevel=1)
        _drops_reported, _drops_warned_at = dropped, now


def drain(timeout: float = 5.0) -> bool:
    """Deliver every event written so far to the handlers, and wait until they have
    returned (at most ``timeout`` seconds); True when all were delivered.

    Not from inside a handler (the dispatcher would wait for itself).
    """
    if threading.current_thread() is _dispatcher:
        raise RuntimeError("ompt_py.drain() cannot be called from a handler")
    if not _handlers:
        return True
    _core.flush()
    target = _core.tap_stats()["position"]
    deadline = time.monotonic() + timeout
    with _progress:
        while _position < target:
            left = deadline - time.monotonic()
            if left <= 0 or _dispatcher is None:
                return False
            _progress.wait(left)
    _report_drops(now_or_never=True)
    return True


def stats() -> dict[str, int | bool]:
    """The handlers' queue: events queued, dropped (queue full), filtered out in C,
    read by the dispatcher so far (``delivered``), waiting (``backlog``), capacity."""
    s = _core.tap_stats()
    with _progress:
        delivered = _position
    return {"queued": s["queued"], "dropped": s["dropped"], "filtered": s["filtered"],
            "delivered": delivered, "backlog": s["backlog"], "capacity": s["capacity"],
            "active": s["active"]}


def _at_exit() -> None:
    """Delivers what is left, then stops the queue (the dispatcher is a daemon thread)."""
    global _handlers
    if not _handlers:
        return
    drain(timeout=2.0)
    with _lock:
        for h in _handlers:
            h.active = False
        _handlers = ()
        _core.tap_stop()


def _after_fork_in_child() -> None:
    """The dispatcher thread does not survive fork: the child gets its own."""
    global _dispatcher, _position, _lock, _progress, _drops_lock
    _lock = threading.RLock()
    _progress = threading.Condition()
    _drops_lock = threading.Lock()
    _position = _core.tap_stats()["position"]
    _dispatcher = None
    if _handlers:
        _dispatcher = threading.Thread(target=_dispatch, name="ompt_py-handlers", daemon=True)
        _dispatcher.start()


atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
