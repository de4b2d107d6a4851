"""Print what every stored trace, profile and dataset loads as, to compare Pythons.

    .venv/bin/python tests/data/dump_loads.py [NAMES] > 3.11.tsv
    .cache/pythons/3.9/bin/python tests/data/dump_loads.py [NAMES] > 3.9.tsv
    diff 3.11.tsv 3.9.tsv

One line per stored file and part: ``name<TAB>part<TAB>what`` where ``what`` is
the part's rows and a digest of its values that does not depend on dtypes
(pandas 2.3 on Python 3.9 and 3.10 holds text as object, pandas 3 as str; NaN,
None and pd.NA are one missing value), or the exception a load raised.  The
parts: a Trace's events and meta, a Profile's four tables and meta, and for a
dataset directory (dump_dtypes.DATASETS) each partition's events and meta and
the dataset's constructs().  Same lines on two Pythons: the same files load the
same way on both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from dump_dtypes import DATASETS, HERE, stored

import ompt_py


def _plain(value: Any) -> Any:
    """``value`` as plain Python data: arrays as lists, missing values as None."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or (np.ndim(value) == 0 and pd.isna(value)):
        return None
    return value


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def frame(df: pd.DataFrame) -> str:
    """A DataFrame's rows, columns and a digest of its values by column."""
    values = {str(c): [_plain(v) for v in df[c].to_numpy(object)] for c in df.columns}
    return f"{len(df)} rows, columns {','.join(values)}, {_digest(repr(values))}"


def events(array: np.ndarray) -> str:
    """A Trace's events: rows, fields and a digest of their bytes."""
    return f"{len(array)} rows, fields {','.join(array.dtype.names or ())}, " \
        f"{_digest(array.tobytes().hex())}"


def meta(doc: dict) -> str:
    return _digest(json.dumps(doc, sort_keys=True, default=repr))


def parts(subject: Any) -> Iterator[tuple[str, Callable[[], str]]]:
    """The parts of a loaded Trace or Profile, each with how to describe it."""
    if isinstance(subject, ompt_py.Profile):
        for table in ("constructs", "regions_threads", "locks", "tasks"):
            yield table, lambda table=table: frame(getattr(subject.parts, table))
        yield "meta", lambda: meta(subject.parts.meta)
    else:
        yield "events", lambda: events(subject.events)
        yield "meta", lambda: meta(subject.meta)


def attempt(name: str, part: str, make: Callable[[], Any], say: Callable[[Any], str]) -> Any:
    """``make()``, its line printed (``say`` of it, or the exception it raised); None
    when it raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = make()
            line = say(value)
    except Exception as e:  # what failed to load is the line
        print(f"{name}\t{part}\t{type(e).__name__}: {e}")
        return None
    print(f"{name}\t{part}\t{line}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="stored files whose name starts so")
    args = parser.parse_args()
    for name in stored(args.names):
        path = os.path.join(HERE, name)
        subjects = [("", attempt(name, "load", partial(ompt_py.load, path),
                                 lambda s: type(s).__name__))]
        dataset = attempt(name, "dataset", partial(ompt_py.open_dataset, path),
                          lambda d: f"{len(d.partitions)} partitions") \
            if name in DATASETS else None
        if dataset is not None:
            subjects += [(f"partition {i} ", dataset.partition(i))
                         for i in range(len(dataset.partitions))]
            attempt(name, "dataset constructs", dataset.constructs, frame)
        for prefix, subject in subjects:
            for part, what in parts(subject) if subject is not None else ():
                attempt(name, prefix + part, what, str)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
