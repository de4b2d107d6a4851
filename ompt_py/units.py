"""Values written for people, one way everywhere: the summary, ``ompt-py report``,
the plots and the HTML view format durations with ``format_ns``, shares with
``format_share``, byte counts with ``format_bytes`` and shorten long names
with ``shorten``; ``TEXT`` (``text``, ``text_columns``) gives a table's text
columns their one dtype (the other columns': ompt_py.analysis.columns).
Also byte sizes as the tool's variables take them (``parse_size``) and times as
the exports' filters take them (``parse_ns``)."""

from __future__ import annotations

import decimal
import math
import re

import numpy as np
import pandas as pd

_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3))
#: What a table shows for a missing value.
MISSING = "-"
#: What ``shorten`` puts where it cut.
ELLIPSIS = "…"


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def format_ns(ns: float | None) -> str:
    """A duration in readable units: ``1.5 ms``, ``250 us``, ``12 ns`` (three
    significant digits, whole units from 100 up); ``-`` for a missing value (None,
    NaN, pandas' NA)."""
    if _missing(ns):
        return MISSING
    a = abs(ns)
    for unit, scale in _UNITS:
        if a >= scale:
            return f"{ns / scale:,.3g} {unit}" if a < 100 * scale else f"{ns / scale:,.0f} {unit}"
    return f"{ns:,.0f} ns"


def format_share(share: float | None) -> str:
    """A share (0 to 1) as a percentage: ``89 %``, ``4.5 %``, ``0.3 %`` (two
    significant digits below 10 %, whole percents above), ``<0.1 %`` below 0.1 %
    but not 0; ``-`` for a missing value."""
    if _missing(share):
        return MISSING
    p = 100 * share
    if 0 < abs(p) < 0.1:
        return "<0.1 %" if p > 0 else ">-0.1 %"
    return f"{p:.0f} %" if abs(p) >= 9.95 or p == 0 else f"{p:.2g} %"


def format_bytes(n: float | None) -> str:
    """A byte count in readable units: ``4 KiB``, ``1.5 MiB``; ``-`` for a missing value."""
    if _missing(n):
        return MISSING
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.3g} {unit}"
    return f"{n:,.0f} B"


def format_rate(bytes_per_s: float | None) -> str:
    """Bytes per second: ``1.2 GiB/s``; ``-`` for a missing value."""
    return MISSING if _missing(bytes_per_s) else f"{format_bytes(bytes_per_s)}/s"


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: whole when it fits, else its start
    and its end with ``…`` between (the middle of a name is what tells least:
    ``tests/pro…/app.py:37 in main``).  At least one character is kept each side
    when ``width`` allows it."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


#: The one dtype of the text columns of every public table (function, name, file,
#: location, py_location, ...): pandas' string dtype with NaN for a missing text, the
#: ``str`` that pandas 3 infers for text (pandas 2.3 makes it only when asked).  A
#: missing text is NaN, never None: ``pd.isna`` tells it, as for the other columns.
TEXT = pd.StringDtype(na_value=np.nan)


def text(values: object, index: pd.Index | None = None) -> pd.Series:
    """``values`` (strings, None, NaN or pandas' NA for a missing text) as a Series
    of TEXT, on ``index`` when given (a Series keeps its own when none is)."""
    if isinstance(values, pd.Series):
        out = values.astype(TEXT)
        return out if index is None else out.set_axis(index)
    return pd.Series(values, index=index, dtype=TEXT)


def text_columns(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``frame`` with those of ``columns`` it has as TEXT, the one dtype of text
    columns, whatever made them (strings, all missing, none: an empty table)."""
    changed = {c: frame[c].astype(TEXT) for c in columns
               if c in frame and frame[c].dtype != TEXT}
    return frame.assign(**changed) if changed else frame


_SIZE = re.compile(r"(\d+)([KMG]?)I?B?", re.IGNORECASE)
_SHIFTS = {"": 0, "K": 10, "M": 20, "G": 30}


def parse_size(text: str) -> int | None:
    """Bytes written as the tool's size variables are (csrc/tool/config.c): digits
    and maybe ``K``, ``M`` or ``G`` (then ``i``, ``B``): ``512M``, ``2GiB``; None
    when ``text`` is not a size."""
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        return None
    return int(found[1]) << _SHIFTS[found[2].upper()]


_TIME = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s)?", re.IGNORECASE)
_TIME_UNITS = {"": 1, "ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_ns(text: str) -> int | None:
    """Nanoseconds from a time written with a unit, ``1.5s``, ``200ms``, ``30us``,
    ``100ns``, or as a number of nanoseconds (``2500``); None when ``text`` is not
    one (a negative time is not)."""
    found = _TIME.fullmatch(text.strip())
    if found is None:
        return None
    number, unit = found[1], (found[2] or "").lower()
    if "." in number and unit in ("", "ns"):
        return None  # no fractions of a nanosecond
    return int(decimal.Decimal(number) * _TIME_UNITS[unit])
