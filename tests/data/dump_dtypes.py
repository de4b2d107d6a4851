"""Print the dtype of every column of every public analysis, on every stored trace.

    .venv/bin/python tests/data/dump_dtypes.py [--reverse] [NAMES] > dtypes.tsv

One line per trace, analysis and column: ``trace<TAB>analysis<TAB>column<TAB>dtype``
(an analysis that raises: its column ``-`` and the exception's type).  The
analyses run on one Trace (or Profile, or Dataset) per stored file, in a fixed
order (``--reverse``: the other way round), so two dumps compare a change's
effect on the tables' dtypes (``diff``), and the two orders show whether a
dtype depends on which analysis asked first.  NAMES: the stored traces whose
name starts with one of them (default: all of tests/data).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

import ompt_py

HERE = os.path.dirname(os.path.abspath(__file__))
# the analyses of a Trace: (name, call)
TRACE_ANALYSES: list[tuple[str, Callable[[Any], Any]]] = [
    ("parallel_regions", lambda t: t.parallel_regions()),
    ("implicit_tasks", lambda t: t.implicit_tasks()),
    ("tasks", lambda t: t.tasks()),
    ("work", lambda t: t.work()),
    ("sync", lambda t: t.sync()),
    ("mutex", lambda t: t.mutex()),
    ("task_graph", lambda t: t.task_graph()),
    ("user_regions", lambda t: t.user_regions()),
    ("mpi_calls", lambda t: t.mpi_calls()),
    ("python_stacks", lambda t: t.python_stacks()),
    ("symbolize", lambda t: t.symbolize()),
    ("samples", lambda t: t.samples()),
    ("state_breakdown", lambda t: t.state_breakdown()),
    ("state_breakdown(region)", lambda t: t.state_breakdown(by="region")),
    ("target_regions", lambda t: t.target_regions()),
    ("data_ops", lambda t: t.data_ops()),
    ("kernels", lambda t: t.kernels()),
    ("device_ops", lambda t: t.device_ops()),
    ("ranks", lambda t: t.ranks()),
    ("rank_imbalance", lambda t: t.rank_imbalance()),
    ("rank_imbalance(rank)", lambda t: t.rank_imbalance(by="rank")),
    ("rank_imbalance(arrival)", lambda t: t.rank_imbalance(by="arrival")),
    ("constructs", lambda t: t.constructs()),
    ("constructs(source)", lambda t: t.constructs(by="source")),
    ("constructs(python)", lambda t: t.constructs(by="python")),
    ("imbalance", lambda t: t.imbalance()),
    ("imbalance(per_thread)", lambda t: t.imbalance(per_thread=True)),
    ("imbalance(source)", lambda t: t.imbalance(by="source")),
    ("imbalance(python)", lambda t: t.imbalance(by="python")),
    ("task_granularity", lambda t: t.task_granularity()),
    ("lock_contention", lambda t: t.lock_contention()),
    ("lock_contention(source)", lambda t: t.lock_contention(by="source")),
    ("lock_contention(python)", lambda t: t.lock_contention(by="python")),
    ("advice", lambda t: t.advice()),
    ("utilisation", lambda t: t.utilisation()),
    ("thread_states", lambda t: t.thread_states()),
    ("tool_stalls", lambda t: t.tool_stalls()),
    ("summary", lambda t: t.summary()),
]
PROFILE_ANALYSES: list[tuple[str, Callable[[Any], Any]]] = [
    ("constructs", lambda p: p.constructs()),
    ("constructs(source)", lambda p: p.constructs(by="source")),
    ("imbalance", lambda p: p.imbalance()),
    ("imbalance(per_thread)", lambda p: p.imbalance(per_thread=True)),
    ("task_granularity", lambda p: p.task_granularity()),
    ("lock_contention", lambda p: p.lock_contention()),
    ("lock_contention(source)", lambda p: p.lock_contention(by="source")),
    ("advice", lambda p: p.advice()),
    ("summary", lambda p: p.summary()),
]
DATASET_ANALYSES: list[tuple[str, Callable[[Any], Any]]] = [
    ("constructs", lambda d: d.constructs()),
    ("constructs(source)", lambda d: d.constructs(by="source")),
    ("constructs(python)", lambda d: d.constructs(by="python")),
    ("imbalance", lambda d: d.imbalance()),
    ("imbalance(per_thread)", lambda d: d.imbalance(per_thread=True)),
    ("imbalance(python)", lambda d: d.imbalance(by="python")),
    ("task_granularity", lambda d: d.task_granularity()),
    ("lock_contention", lambda d: d.lock_contention()),
    ("lock_contention(source)", lambda d: d.lock_contention(by="source")),
    ("ranks", lambda d: d.ranks()),
    ("rank_imbalance", lambda d: d.rank_imbalance()),
    ("summary", lambda d: d.summary()),
]


#: The stored directories that are datasets (``pid=N/`` partitions) too.
DATASETS = ("ranks", "saved", os.path.join("format-v1", "dataset"))


def stored(names: list[str]) -> list[str]:
    """The stored traces of tests/data (files and directories), by name."""
    found = [e for e in sorted(os.listdir(HERE))
             if e.endswith((".parquet", ".omptraw")) or e in DATASETS]
    v1 = os.path.join(HERE, "format-v1")
    found += [os.path.join("format-v1", e) for e in sorted(os.listdir(v1))
              if e.endswith(".parquet") or os.path.isdir(os.path.join(v1, e))]
    return [e for e in found if not names or e.startswith(tuple(names))]


def frames(result: Any) -> Iterator[tuple[str, pd.DataFrame]]:
    """The tables of an analysis' result: itself, or a Summary's tables by name."""
    if isinstance(result, pd.DataFrame):
        yield "", result
    elif isinstance(result, pd.Series):
        yield "", result.to_frame()
    elif result is not None and hasattr(result, "constructs"):  # a Summary
        for name, value in vars(result).items():
            if isinstance(value, pd.DataFrame):
                yield f".{name}", value


def dump(label: str, subject: Any, analyses: list[tuple[str, Callable[[Any], Any]]]) -> None:
    for name, call in analyses:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = call(subject)
        except Exception as e:  # an analysis that cannot run: its error is the row
            print(f"{label}\t{name}\t-\t{type(e).__name__}")
            continue
        for part, frame in frames(result):
            for column, dtype in frame.dtypes.items():
                print(f"{label}\t{name}{part}\t{column}\t{dtype}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reverse", action="store_true",
                        help="run the analyses in the reverse order")
    parser.add_argument("names", nargs="*", help="stored traces whose name starts so")
    args = parser.parse_args()
    step = -1 if args.reverse else 1
    for name in stored(args.names):
        path = os.path.join(HERE, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            subject = ompt_py.load(path)
        kind = TRACE_ANALYSES if isinstance(subject, ompt_py.Trace) else PROFILE_ANALYSES
        dump(name, subject, kind[::step])
        if name in DATASETS:
            dump(f"{name} (dataset)", ompt_py.open_dataset(path), DATASET_ANALYSES[::step])
        sys.stdout.flush()


if __name__ == "__main__":
    main()
