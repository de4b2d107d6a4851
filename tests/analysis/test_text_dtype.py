"""The text columns of the tables: one dtype (units.TEXT), whatever made them.

Spec (ompt_py/units.py TEXT, docs/tables.md): every text column of a public
table (function, name, file, location, py_location, schedule, ...) is of
pandas' string dtype with NaN for a missing text, on a trace whatever the
order in which the analyses ran (the symbols of code addresses are found as
analyses ask for them), on an empty trace as on a full one, and on a profile.
A dataset's merged tables: tests/analysis/test_dataset.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest
from conftest import load_stored

from ompt_py.errors import MissingEventsError
from ompt_py.units import TEXT

#: The analyses whose tables have text columns, in the order of the first run.
ANALYSES: dict[str, Callable] = {
    "symbolize": lambda t: t.symbolize(),
    "parallel_regions": lambda t: t.parallel_regions(),
    "work": lambda t: t.work(),
    "tasks": lambda t: t.tasks(),
    "user_regions": lambda t: t.user_regions(),
    "python_stacks": lambda t: t.python_stacks(),
    "thread_states": lambda t: t.thread_states(),
    "constructs_source": lambda t: t.constructs(by="source"),
    "constructs_python": lambda t: t.constructs(by="python"),
    "imbalance": lambda t: t.imbalance(),
    "imbalance_source": lambda t: t.imbalance(by="source"),
    "imbalance_python": lambda t: t.imbalance(by="python"),
    "task_granularity": lambda t: t.task_granularity(),
    "lock_contention": lambda t: t.lock_contention(),
    "lock_contention_python": lambda t: t.lock_contention(by="python"),
    "advice": lambda t: t.advice(),
    "ranks": lambda t: t.ranks(),
    "summary_regions": lambda t: t.summary().regions,
    "summary_sources": lambda t: t.summary().sources,
}


def _tables(trace, order: list[str]) -> dict[str, pd.DataFrame | str]:
    """Each analysis' table, run in ``order`` on ``trace`` (the error's name where
    the trace lacks the events it needs, "none" for a summary's table it has not)."""
    out: dict[str, pd.DataFrame | str] = {}
    for name in order:
        try:
            table = ANALYSES[name](trace)
        except MissingEventsError as e:
            table = type(e).__name__
        out[name] = "none" if table is None else table
    return out


def _text_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of ``frame`` that hold text: of TEXT, or object columns whose
    values are strings (and missing values)."""
    def texts(column: pd.Series) -> bool:
        values = column.dropna()
        return len(values) > 0 and all(isinstance(v, str) for v in values)
    return [c for c in frame.columns
            if frame[c].dtype == TEXT or (frame[c].dtype == object and texts(frame[c]))]


def _assert_text(name: str, frame: pd.DataFrame) -> None:
    wrong = {c: str(frame[c].dtype) for c in _text_columns(frame) if frame[c].dtype != TEXT}
    assert not wrong, f"{name}: text columns not of units.TEXT: {wrong}"


# These tests run on every supported Python too (make test-pythons): pandas 2.3
# (Python 3.9, 3.10) infers object where pandas 3 infers str.
@pytest.mark.pythons
@pytest.mark.parametrize("name", ["inprocess-mixed-libomp19", "pystacks-inprocess", "known-lock",
                                  "report-cxx", "regions-inprocess", "nested-libomp16"])
def test_the_order_of_the_analyses_changes_no_table(name):
    forward = _tables(load_stored(name), list(ANALYSES))
    backward = _tables(load_stored(name), list(reversed(ANALYSES)))
    texts = 0
    for analysis, table in forward.items():
        if isinstance(table, str):
            assert backward[analysis] == table
            continue
        pd.testing.assert_frame_equal(table, backward[analysis], obj=f"{name} {analysis}")
        _assert_text(f"{name} {analysis}", table)
        texts += sum(table[c].dtype == TEXT for c in table.columns)
    assert texts >= 20  # the tables have text columns: what the comparison is about


@pytest.mark.pythons
@pytest.mark.parametrize(("empty", "full"), [("inprocess-empty", "inprocess-mixed-libomp19"),
                                             ("known-tasks-empty", "known-tasks")])
def test_empty_tables_have_the_text_dtype_of_full_ones(empty, full):
    empties = _tables(load_stored(empty), list(ANALYSES))
    fulls = _tables(load_stored(full), list(ANALYSES))
    compared = 0
    for analysis, table in fulls.items():
        other = empties[analysis]
        if isinstance(table, str) or isinstance(other, str):
            continue
        _assert_text(f"{empty} {analysis}", other)
        for c in _text_columns(table):
            assert other[c].dtype == TEXT, f"{empty} {analysis}: {c} is {other[c].dtype}"
            compared += 1
    assert compared >= 10


@pytest.mark.pythons
@pytest.mark.parametrize("name", ["profile-mixed", "profile-cxx", "profile-known-tasks"])
def test_a_profile_s_text_columns_are_text(name):
    p = load_stored(name)
    tables = {"constructs": p.constructs(), "constructs_source": p.constructs(by="source"),
              "imbalance": p.imbalance(), "imbalance_per_thread": p.imbalance(per_thread=True),
              "task_granularity": p.task_granularity(), "lock_contention": p.lock_contention(),
              "lock_contention_source": p.lock_contention(by="source"), "advice": p.advice(),
              "constructs_part": p.parts.constructs, "locks_part": p.parts.locks}
    for analysis, table in tables.items():
        _assert_text(f"{name} {analysis}", table)
    for column in ("location", "function", "name"):
        assert tables["constructs_source"][column].dtype == TEXT
    for column in ("construct", "kind"):  # the runtime's vocabularies, as in a trace's
        assert isinstance(tables["constructs_source"][column].dtype, pd.CategoricalDtype)
