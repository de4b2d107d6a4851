"""Units written for people: the one formatting of nanoseconds that the summary,
the report, the plots and the task histogram's labels share (``format_ns``),
byte sizes as the tool's variables take them (``parse_size``) and times as the
exports' filters take them (``parse_ns``)."""

from __future__ import annotations

import decimal
import math
import re

import pandas as pd

_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3))


def format_ns(ns: float | None) -> str:
    """A duration in readable units: ``1.5 ms``, ``250 us``, ``12 ns`` (three
    significant digits, whole units from 100 up); ``-`` for a missing value (None,
    NaN, pandas' NA)."""
    if ns is None or ns is pd.NA or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    a = abs(ns)
    for unit, scale in _UNITS:
        if a >= scale:
            return f"{ns / scale:,.3g} {unit}" if a < 100 * scale else f"{ns / scale:,.0f} {unit}"
    return f"{ns:,.0f} ns"


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
