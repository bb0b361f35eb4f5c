"""``collect`` (lists of different lengths per window) and mixed-type values through the batch path and the
service's columns (``flush_columns``): the same windows as the record path, each value as it is - a list stays a
list, ``"a"`` next to ``1`` stays a str and an int, ``True`` next to ``2`` stays a bool. Before the fix
``np.array`` over the column raised ("inhomogeneous shape") or made a 2-d array."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windowstore import Collect, Composite, Count, Field, First, SlidingWindowProcessor, SlidingWindows, Sum
from windowstore.columns import exact_column

from .test_batch import close_cases, run

NAMES = ["count", "sum_v", "collect_v", "collect_n", "first_n"]
NOTES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["a", "", "ü"]), st.floats(0, 1))


def _agg() -> Composite:
    return Composite([Count(), Field(Sum(), "v"), Field(Collect(), "v"), Field(Collect(), "n"), Field(First(), "n")])


@st.composite
def collect_cases(draw):
    td, grace, recs, batch_size, _ = draw(close_cases())
    recs = [(k, {"v": v, "n": draw(NOTES)}, t) for k, v, t in recs if k is not None]
    return td, grace, recs, batch_size


def _rows(cols):
    vals = {n: cols["values"][n].tolist() for n in NAMES}
    for n in NAMES:
        assert cols["values"][n].ndim == 1
    return [
        (k, int(s), int(e), {n: vals[n][i] for n in NAMES}, int(t), int(c))
        for i, (k, s, e, t, c) in enumerate(
            zip(cols["key"], cols["start"], cols["end"], cols["ts"], cols["count"], strict=True)
        )
    ]


def _typed(rows):
    """Rows with every value paired with its type (1 == 1.0 == True in Python; the types must match too)."""

    def t(v):
        return [t(x) for x in v] if isinstance(v, list) else (type(v), v)

    return [(k, s, e, {n: t(x) for n, x in v.items()}, ts, c) for k, s, e, v, ts, c in rows]


@pytest.mark.parametrize("mode", ["update", "close"])
@settings(max_examples=100, deadline=None)
@given(case=collect_cases())
def test_collect_batch_path_and_columns_equal_record_path(mode, case):
    td, grace, recs, batch_size = case
    want, p_rec, _ = run(recs, td, grace, batch_size, _agg, False, mode)
    got, p_bat, _ = run(recs, td, grace, batch_size, _agg, True, mode)
    assert [_typed(f) for f in got] == [_typed(f) for f in want]
    assert p_bat.take_drops() == p_rec.take_drops()
    proc = SlidingWindowProcessor(SlidingWindows(td, grace), _agg(), mode, batch=True)
    cols = []
    for b in range(0, len(recs), batch_size):
        proc.process_batch(recs[b : b + batch_size])
        cols.append(_typed(_rows(proc.flush_columns())))
    assert cols == [_typed([(*u[:3], u.value, u.ts, u.count) for u in f]) for f in want]


def test_collect_lists_of_equal_and_different_lengths_are_one_element_per_row():
    for lists in ([[1, 2], [3]], [[1, 2], [3, 4]], [["a"], []]):
        col = exact_column(lists)
        assert col.shape == (len(lists),) and col.tolist() == lists


def test_mixed_columns_keep_each_value_and_type():
    for values in (["a", 1], [True, 2], [1, 2.5], [None, 3], [2**63, 1], [1.5, "x"]):
        got = exact_column(values).tolist()
        assert [(type(v), v) for v in got] == [(type(v), v) for v in values]
    assert exact_column([1, 2]).dtype == "int64" and exact_column([0.5, 2.0]).dtype == "float64"
