"""The time-window batch path (windowstore/time_windows_batch.py) equals the record path: property tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.windowstore.batch_paths import run_batches
from windowstore import time_windows_batch
from windowstore.aggregations import parse_aggregations
from windowstore.time_windows import TimeWindowProcessor, TimeWindows
from windowstore.time_windows_batch import batch_kinds, process_batch

AGGS = ["count", "sum", "min", "max", "mean", "count,sum,min,max,mean", "sum:x,max:x", "collect", "variance"]

huge = st.sampled_from([10**30, -(10**30), 2**63, -(2**63) - 1])
ints = st.one_of(st.integers(-5, 5), huge)
value = st.one_of(ints, ints, ints, st.floats(-5, 5, allow_nan=False), st.booleans(), st.none())
record = st.tuples(
    st.sampled_from(["a", "b", "é", None, "a", "b"]),
    value,
    st.one_of(st.integers(0, 200), st.integers(0, 200), st.sampled_from([-1, 10**4])),
)
batches = st.lists(st.lists(record, max_size=25), min_size=1, max_size=4)


def _run(proc: TimeWindowProcessor, batches: list, agg: str, batch_path: bool, flush_every: list[bool]) -> list:
    return run_batches(proc, process_batch, batches, agg, batch_path, flush_every)


def _state(proc: TimeWindowProcessor) -> tuple:
    s = proc.export_state()
    return (s["observed_stream_time"], s["last_emit_close_time"], sorted(map(repr, s["windows"])), proc.stats.as_dict())


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 30),
    st.integers(1, 30),
    st.integers(0, 20),
    st.sampled_from(AGGS),
    st.sampled_from(["update", "close", "every"]),
    batches,
    st.lists(st.booleans(), min_size=4, max_size=4),
    st.booleans(),
)
def test_batch_path_equals_record_path(
    size: int, advance: int, grace: int, agg: str, emit: str, batches: list, flush_every: list, ints_only: bool
) -> None:
    advance = min(advance, size)
    if ints_only:  # most examples should take the batch path, not its fallback
        batches = [[(k, v if type(v) is int else 1, t) for k, v, t in b] for b in batches]
    w = TimeWindows(size, advance, grace)
    ref = TimeWindowProcessor(w, parse_aggregations(agg), emit)
    bat = TimeWindowProcessor(w, parse_aggregations(agg), emit)
    assert _run(bat, batches, agg, True, flush_every) == _run(ref, batches, agg, False, flush_every)
    assert _state(bat) == _state(ref)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 2000), st.integers(1, 50), st.sampled_from(["update", "close"]), st.data())
def test_batch_path_with_many_windows_per_record(size: int, advance: int, emit: str, data: st.DataObject) -> None:
    """Hopping at up to 2,000 windows per record, late and partially late records, grace 0."""
    advance = min(advance, size)
    recs = data.draw(
        st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-3, 3), st.integers(0, 3000)), max_size=40)
    )
    cut = data.draw(st.integers(0, len(recs)))
    w = TimeWindows(size, advance, 0)
    ref = TimeWindowProcessor(w, parse_aggregations("count,sum,min,max,mean"), emit)
    bat = TimeWindowProcessor(w, parse_aggregations("count,sum,min,max,mean"), emit)
    parts = [recs[:cut], recs[cut:]]
    assert _run(bat, parts, "x", True, [False, True]) == _run(ref, parts, "x", False, [False, True])
    assert _state(bat) == _state(ref)


def test_batch_kinds_name_what_the_path_computes() -> None:
    assert batch_kinds(parse_aggregations("count,sum:x")) == [("count", None), ("sum", "x")]
    assert batch_kinds(parse_aggregations("collect")) is None
    assert batch_kinds(parse_aggregations("count,stddev")) is None


AGGS_EXACT = ["count", "sum", "min", "max", "mean", "count,sum,min,max,mean", "sum:x,max:x"]
#: up to where the all-keys numpy path keeps int64 arithmetic, and beyond it (the row path takes such batches)
edge_ints = st.sampled_from([2**40, -(2**40), 2**61, -(2**62), 2**63 - 1, -(2**63)])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 2000),
    st.integers(1, 50),
    st.sampled_from(["update", "close"]),
    st.sampled_from([0, 1_764_000_000_000]),
    st.sampled_from(AGGS_EXACT),
    st.data(),
)
def test_batch_path_without_late_records(
    size: int, advance: int, emit: str, base: int, agg: str, data: st.DataObject
) -> None:
    """Batches without a late record take the all-keys numpy path: grace beyond the input's span, or grace 0 and
    the records in time order (close mode then emits); several keys, three batches with and without a flush
    between them (update mode: windows re-written while unflushed), epoch timestamps, values at the int64 guard."""
    advance = min(advance, size)
    value = st.one_of(st.integers(-3, 3), st.integers(-3, 3), edge_ints)
    recs = data.draw(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "c", "d", "é"]), value, st.integers(0, 3000).map(lambda t: base + t)),
            max_size=60,
        )
    )
    grace = data.draw(st.sampled_from([0, 10_000]))
    if grace == 0:
        recs.sort(key=lambda r: r[2])
    cuts = sorted(data.draw(st.lists(st.integers(0, len(recs)), min_size=2, max_size=2)))
    parts = [recs[: cuts[0]], recs[cuts[0] : cuts[1]], recs[cuts[1] :]]
    flushes = data.draw(st.lists(st.booleans(), min_size=3, max_size=3))
    w = TimeWindows(size, advance, grace)
    ref = TimeWindowProcessor(w, parse_aggregations(agg), emit)
    bat = TimeWindowProcessor(w, parse_aggregations(agg), emit)
    assert _run(bat, parts, agg, True, flushes) == _run(ref, parts, agg, False, flushes)
    assert _state(bat) == _state(ref)


def test_batches_without_late_records_do_not_take_the_row_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The all-keys numpy path computes such a batch by itself (the property test above would pass on the row
    path alone): with the row path disabled the results are still the record path's."""
    recs = [(k, v, 1_764_000_000_000 + t) for t, (k, v) in enumerate([("a", 3), ("b", -2), ("a", 5), ("c", 7)] * 50)]
    # in time order, grace 0: no record is late, and close mode emits the windows that time passes
    parts = [recs[:90], recs[90:]]

    def no_row_path(*_a: object) -> None:
        raise AssertionError("the row path was taken")

    for emit in ("update", "close"):
        w = TimeWindows(50, 10, 0)
        ref = TimeWindowProcessor(w, parse_aggregations("count,sum,min,max,mean"), emit)
        bat = TimeWindowProcessor(w, parse_aggregations("count,sum,min,max,mean"), emit)
        expected = _run(ref, parts, "x", False, [False, True])
        with monkeypatch.context() as m:
            m.setattr(time_windows_batch, "_row_windows", no_row_path)
            got = _run(bat, parts, "x", True, [False, True])
        assert got == expected
        assert len(expected) > 20
        assert _state(bat) == _state(ref)
