"""Every public table has the columns and dtypes ompt_py.analysis.columns gives it.

Spec (ompt_py/analysis/columns.py, docs/tables.md): each table (every analysis
of a Trace, a Profile and a Dataset, and a Summary's tables) has one dtype per
column whatever the input: a trace with events of every kind, an empty one, a
profile, a dataset's merged tables; its columns are those TABLES lists, in
that order (an optional one only where the input gives it).  The analyses are
those of tests/data/dump_dtypes.py, on a stored input of every kind.  They run
on every supported Python too (make test-pythons): pandas 2.3 there, 3 here.
"""

from __future__ import annotations

import importlib.util
import os
import warnings

import pandas as pd
import pytest
from conftest import stored_path
from mpi_records import barriers, job

import ompt_py
from ompt_py.analysis.columns import TABLES, conform, has_dtype

pytestmark = pytest.mark.pythons

_spec = importlib.util.spec_from_file_location(
    "dump_dtypes", os.path.join(os.path.dirname(__file__), "..", "data", "dump_dtypes.py"))
assert _spec is not None and _spec.loader is not None
dump_dtypes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dump_dtypes)

#: Stored inputs of every kind: empty traces, libomp 16, tasks, locks, Python
#: stacks, a window that cut regions, teams, samples, offload, MPI ranks (as one
#: trace), profiles.
INPUTS = ["inprocess-empty", "known-tasks-empty", "inprocess-mixed-libomp16", "known-tasks",
          "contended-libomp19", "pystacks-inprocess", "window-libomp19", "teams-libomp19",
          "sampled-imbalance-libomp19", "offload.omptraw", "ranks", "profile-mixed",
          "profile-known-tasks"]
#: Stored datasets, opened as such (ompt_py.open_dataset).
DATASETS = ["saved"]


def _name(kind: str, analysis: str) -> str:
    """The TABLES entry of ``analysis`` (dump_dtypes' name and Summary part) of a
    ``kind`` (Trace, Profile, Dataset)."""
    own = f"{kind}.{analysis}"
    return own if own in TABLES else analysis


def _check(kind: str, analysis: str, frame: pd.DataFrame) -> list[str]:
    """What in ``frame`` differs from its TABLES entry."""
    name = _name(kind, analysis)
    spec = TABLES[name]
    wrong = []
    listed = [c for c in frame.columns if c in spec.columns]
    expected = [c for c in spec.columns if c in frame or c not in spec.optional]
    if listed != expected:
        wrong.append(f"{name}: columns {listed}, TABLES {expected}")
    if spec.others is None and len(listed) != len(frame.columns):
        wrong.append(f"{name}: columns TABLES lacks "
                     f"{[c for c in frame.columns if c not in spec.columns]}")
    for column in frame.columns:
        wanted = spec.columns.get(column, spec.others)
        if wanted is not None and not has_dtype(frame[column].dtype, wanted):
            wrong.append(f"{name}: {column} is {frame[column].dtype}, not {wanted}")
    return wrong


def _tables(subject: object, analyses: list) -> list[tuple[str, pd.DataFrame]]:
    out = []
    for name, call in analyses:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = call(subject)
        except (ompt_py.errors.MissingEventsError, ValueError):
            continue  # the input lacks what the analysis needs, and it says so
        out += [(f"{name}{part}", frame) for part, frame in dump_dtypes.frames(result)]
    return out


def _assert_schema(subject: object) -> None:
    kind = type(subject).__name__
    analyses = {"Trace": dump_dtypes.TRACE_ANALYSES, "Profile": dump_dtypes.PROFILE_ANALYSES,
                "Dataset": dump_dtypes.DATASET_ANALYSES}[kind]
    found = _tables(subject, analyses)
    wrong = [w for analysis, frame in found for w in _check(kind, analysis, frame)]
    assert not wrong, "\n".join(wrong)
    assert len(found) >= 8  # the analyses ran: what the test is about


@pytest.mark.parametrize("name", INPUTS)
def test_every_table_has_the_columns_and_dtypes_of_its_schema(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _assert_schema(ompt_py.load(stored_path(name)))


@pytest.mark.parametrize("name", DATASETS)
def test_a_dataset_s_tables_have_the_columns_and_dtypes_of_their_schema(name):
    _assert_schema(ompt_py.open_dataset(stored_path(name)))


def test_the_tables_of_a_job_with_mpi_calls_and_phases():
    t = job(barriers([[1000, 1010, 1020, 1030], [9000, 10000, 15000, 9500]]))
    assert len(t.rank_imbalance()) == 2 and "mpi_ns" in t.ranks()
    assert t.summary().phases is not None
    _assert_schema(t)


def test_an_empty_table_has_every_column_of_a_full_one():
    empty = ompt_py.load(stored_path("inprocess-empty"))
    full = ompt_py.load(stored_path("contended-libomp19"))
    for by in ("lock", "python"):
        a, b = empty.lock_contention(by=by), full.lock_contention(by=by)
        assert len(a) == 0 and len(b) > 0
        pd.testing.assert_frame_equal(a, b.iloc[:0], check_index_type=False)


def test_a_missing_value_in_a_plain_integer_column_gives_its_nullable_dtype():
    """An input no stored trace shows (a missing value where the schema says there is
    none) keeps its table: the column becomes the nullable dtype of its width."""
    frame = pd.DataFrame({"pid": [1.0, None], "acquisitions": [2.0, 3.0]})
    out = conform(frame, "lock_contention")
    assert str(out["pid"].dtype) == "Int32" and out["pid"].isna().tolist() == [False, True]
    assert out["acquisitions"].dtype == "int64"
