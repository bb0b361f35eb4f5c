"""The time-window batch path's columnar state (windowstore/time_windows_table.py) changes nothing: property tests.

Through the calls the service makes (``process_columns``, ``flush_columns``), every aggregation and emit mode emits
exactly the columns the record path's updates make (``update_columns``: same rows, same dtypes), drops the same
records, counts the same, and leaves the same state - also when its state is exported and restored between
batches, when batches fall back to the record path and back (floats, ``None``, ints beyond int64, partially late
records), and when keys' windows have gaps (the columns' sparse lookup) or not (the dense one)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.windowstore.external_state import ExternalState
from windowstore import TimeWindowProcessor, TimeWindows, WindowDefinition, new_task_processor, parse_aggregations
from windowstore.columns import update_columns

AGGS = [
    "count",
    "sum:x",
    "min:x",
    "max:x",
    "mean:x",
    "count,sum:x,min:x,max:x,mean:x",
    "variance:x",
    "stddev:x",
    "first:x",
    "last:x",
    "collect:x",
    "count,mean:x,last:x",
]

edge = st.sampled_from([2**61, -(2**61), 2**62 - 1, 2**63, 10**30, 2**53 + 1])
small = st.integers(-4, 4)
value = st.one_of(small, small, small, small, edge, st.floats(-3, 3, allow_nan=False), st.none())


def _ints(v: Any) -> Any:
    return v if type(v) is int else 1


def _table(cols: dict[str, Any]) -> list[tuple]:
    """Rows of flush columns, with each value column's dtype (the columns must be typed as the record path's)."""
    names = sorted(cols["values"])
    dtypes = tuple(str(cols["values"][n].dtype) for n in names)
    rows = zip(
        cols["key"],
        cols["start"].tolist(),
        cols["end"].tolist(),
        cols["ts"].tolist(),
        cols["count"].tolist(),
        *(cols["values"][n].tolist() for n in names),
        strict=True,
    )
    return [("dtypes", dtypes, str(cols["start"].dtype)), *rows]


def _record_path(proc: TimeWindowProcessor, batches: list, flushes: list[bool], agg: str) -> list:
    out: list = []
    pending: list = []
    aggregation = parse_aggregations(agg)
    for b, flush in zip(batches, flushes, strict=False):
        got: list = []
        try:
            for k, v, t in b:
                got += proc.process(k, {"x": v}, t)
            pending += got
        except TypeError as e:  # raised at the same record on both paths (the batch's output is lost with it)
            out.append(("error", type(e).__name__))
        out += [(d.key, d.ts, d.reason) for d in proc.take_drops()]
        if flush:
            out += _table(update_columns(pending + proc.flush(), aggregation))
            pending = []
        out.append(("held", proc.windows_held, proc.observed_stream_time))
    out += _table(update_columns(pending + proc.flush(), aggregation))
    return out


def _columns_path(proc: TimeWindowProcessor, batches: list, flushes: list[bool], restore: Any = None) -> list:
    out: list = []
    for i, (b, flush) in enumerate(zip(batches, flushes, strict=False)):
        try:
            proc.process_columns(
                [k for k, _v, _t in b], np.array([t for _k, _v, t in b], np.int64), None, [{"x": v} for _k, v, _t in b]
            )
        except TypeError as e:
            out.append(("error", type(e).__name__))
        out += [(d.key, d.ts, d.reason) for d in proc.take_drops()]
        if flush:
            out += _table(proc.flush_columns())
        out.append(("held", proc.windows_held, proc.observed_stream_time))
        if restore is not None:
            proc = restore(proc, i)
    out += _table(proc.flush_columns())
    return out


def _state(proc: TimeWindowProcessor) -> tuple:
    s = proc.export_state()
    return (s["observed_stream_time"], s["last_emit_close_time"], sorted(map(repr, s["windows"])), s["dirty"])


def _assert_paths_agree(w: TimeWindows, agg: str, emit: str, batches: list, flushes: list[bool]) -> None:
    """The batches through the columns path and through the record path: the same output, counters and state."""
    ref = TimeWindowProcessor(w, parse_aggregations(agg), emit, collect_drops=True)
    bat = TimeWindowProcessor(w, parse_aggregations(agg), emit, collect_drops=True, batch=True)
    assert _columns_path(bat, batches, flushes) == _record_path(ref, batches, flushes, agg)
    assert bat.stats == ref.stats
    assert bat.expired_windows == ref.expired_windows
    assert _state(bat) == _state(ref)


def _batches(data: st.DataObject, base: int, span: int, values: Any) -> list:
    rec = st.tuples(st.sampled_from(["a", "b", "é", "c", None]), values, st.integers(0, span).map(lambda t: base + t))
    return data.draw(st.lists(st.lists(rec, max_size=30), min_size=1, max_size=5))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(1, 40),
    st.integers(0, 50),
    st.sampled_from(AGGS),
    st.sampled_from(["update", "close", "every"]),
    st.sampled_from([0, 1_764_000_000_000]),
    st.booleans(),
    st.data(),
)
def test_columns_equal_the_record_paths_updates(
    size: int, advance: int, grace: int, agg: str, emit: str, base: int, ints_only: bool, data: st.DataObject
) -> None:
    advance = min(advance, size)
    batches = _batches(data, base, data.draw(st.sampled_from([60, 400, 3000])), value)
    if ints_only:  # most examples should stay on the columns, not fall back
        batches = [[(k, _ints(v), t) for k, v, t in b] for b in batches]
    if data.draw(st.booleans()):  # in time order: nothing late, close mode emits as time passes
        batches = [sorted(b, key=lambda r: r[2]) for b in batches]
    flushes = data.draw(st.lists(st.booleans(), min_size=5, max_size=5))
    _assert_paths_agree(TimeWindows(size, advance, grace), agg, emit, batches, flushes)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 2000),
    st.integers(1, 50),
    st.sampled_from(["update", "close"]),
    st.sampled_from(["count", "count,sum:x,min:x,max:x,mean:x"]),
    st.data(),
)
def test_columns_with_many_windows_per_record_and_gaps(
    size: int, advance: int, emit: str, agg: str, data: st.DataObject
) -> None:
    """Up to 2,000 windows per record; a key's records far apart in time leave gaps between its windows (the
    columns then locate windows by search, else by arithmetic on consecutive starts)."""
    advance = min(advance, size)
    span = data.draw(st.sampled_from([size // 2 + 1, 3 * size + 10, 20 * size]))
    batches = _batches(data, 1_764_000_000_000, span, small)
    grace = data.draw(st.sampled_from([0, 10 * span]))
    if grace == 0:
        batches = [sorted(b, key=lambda r: r[2]) for b in batches]
    flushes = data.draw(st.lists(st.booleans(), min_size=5, max_size=5))
    _assert_paths_agree(TimeWindows(size, advance, grace), agg, emit, batches, flushes)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 200),
    st.integers(1, 40),
    st.integers(0, 30),
    st.sampled_from(AGGS),
    st.sampled_from(["update", "close", "every"]),
    st.data(),
)
def test_columns_exported_and_restored_between_batches_equal_the_record_path(
    size: int, advance: int, grace: int, agg: str, emit: str, data: st.DataObject
) -> None:
    """The state exported (key blobs from the columns, the task meta with the columns' unflushed windows) and a
    new processor made from it, at random points, then the batch path again: what the record path emits
    uninterrupted."""
    advance = min(advance, size)
    batches = _batches(data, 0, 300, st.one_of(small, small, value))
    flushes = data.draw(st.lists(st.booleans(), min_size=5, max_size=5))
    acts = data.draw(st.lists(st.sampled_from(["none", "snapshot", "restore"]), min_size=5, max_size=5))
    definition = WindowDefinition("hopping", size, advance, grace_ms=grace)
    backend = ExternalState()

    def new() -> Any:
        return new_task_processor(
            definition, parse_aggregations(agg), emit, backend.meta, backend.load, collect_drops=True, batch=True
        )

    def restore(proc: Any, i: int) -> Any:
        if acts[i] == "none":
            return proc
        backend.save(proc)
        return new() if acts[i] == "restore" else proc

    ref = TimeWindowProcessor(TimeWindows(size, advance, grace), parse_aggregations(agg), emit, collect_drops=True)
    assert _columns_path(new(), batches, flushes, restore) == _record_path(ref, batches, flushes, agg)


def test_a_steady_stream_stays_in_the_columns() -> None:
    """The batch path keeps its windows as columns from batch to batch (the property tests above would pass if
    it fell back to the record path's dicts every time) and its flush reads them."""
    proc = TimeWindowProcessor(TimeWindows(1000, 10, 50), parse_aggregations("count,sum:x"), "update", batch=True)
    ts = np.arange(0, 20_000, 7, dtype=np.int64)
    keys = [f"k{i % 5}" for i in range(len(ts))]
    for lo in range(0, len(ts), 500):
        chunk = ts[lo : lo + 500]
        assert proc.process_columns(keys[lo : lo + 500], chunk, {"x": np.ones(len(chunk), np.int64)})
        cols = proc.flush_columns()
        assert len(cols["key"]) > len(chunk)
        assert proc.windows_in_columns == proc.windows_held > 0
    state = proc.export_state()  # the record path's form again, the same windows
    assert len(state["windows"]) == proc.windows_held and proc.windows_in_columns == 0
