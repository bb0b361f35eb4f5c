"""The time-window batch path (windowstore/time_windows_batch.py) equals the record path: property tests."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.windowstore.batch_paths import run_batches
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
