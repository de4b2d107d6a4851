"""Units written for people: the one formatting of nanoseconds that the summary,
the report, the plots and the task histogram's labels share (``format_ns``),
byte sizes as the tool's variables take them (``parse_size``) and times as the
command line takes them (``parse_time``)."""

from __future__ import annotations

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


_TIME = re.compile(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(ns|us|µs|ms|s)?", re.IGNORECASE)
_TIME_SCALES = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_time(text: str) -> int | None:
    """Nanoseconds of a time written with a unit (``ns``, ``us``, ``ms`` or ``s``):
    ``250ms``, ``1.5s``, ``40us``; a bare number is in seconds; None when ``text``
    is not such a time."""
    found = _TIME.fullmatch(text.strip())
    if found is None:
        return None
    return round(float(found[1]) * _TIME_SCALES[(found[2] or "s").lower()])
