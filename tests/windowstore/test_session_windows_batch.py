"""The session-window batch path (windowstore/session_windows_batch.py) equals the record path: property tests."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.windowstore.batch_paths import run_batches, wrap
from windowstore.aggregations import Composite, Sum, parse_aggregations
from windowstore.session_windows import SessionWindowProcessor, SessionWindows
from windowstore.session_windows_batch import process_batch

AGGS = ["count", "sum", "min", "max", "mean", "count,sum,min,max,mean", "sum:x,max:x", "collect", "last"]

huge = st.sampled_from([10**30, -(10**30), 2**63, -(2**63) - 1])
ints = st.one_of(st.integers(-5, 5), huge)
value = st.one_of(ints, ints, ints, st.floats(-5, 5, allow_nan=False), st.none())


def _records(max_ts: int) -> Any:
    return st.tuples(
        st.sampled_from(["a", "b", "é", None, "a", "b"]),
        value,
        st.one_of(st.integers(0, max_ts), st.integers(0, max_ts), st.sampled_from([-1, 10**4])),
    )


def _run(proc: SessionWindowProcessor, batches: list, agg: str, batch_path: bool, flush_every: list[bool]) -> list:
    return run_batches(proc, process_batch, batches, agg, batch_path, flush_every)


def _state(proc: SessionWindowProcessor) -> tuple:
    s = proc.export_state()
    return (
        s["observed_stream_time"],
        s["store_stream_time"],
        sorted(map(repr, s["sessions"])),
        sorted(map(repr, s["flushed"])),
        proc.stats.as_dict(),
    )


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 20),
    st.integers(0, 30),
    st.sampled_from(AGGS),
    st.sampled_from(["update", "update", "every", "close"]),
    st.lists(st.lists(_records(200), max_size=25), min_size=1, max_size=4),
    st.lists(st.booleans(), min_size=4, max_size=4),
    st.booleans(),
)
def test_batch_path_equals_record_path(
    gap: int, grace: int, agg: str, emit: str, batches: list, flush_every: list, ints_only: bool
) -> None:
    if ints_only:  # most examples should take the batch path, not its fallback
        batches = [[(k, v if type(v) is int else 1, t) for k, v, t in b] for b in batches]
    w = SessionWindows(gap, grace)
    ref = SessionWindowProcessor(w, parse_aggregations(agg), emit)
    bat = SessionWindowProcessor(w, parse_aggregations(agg), emit)
    assert _run(bat, batches, agg, True, flush_every) == _run(ref, batches, agg, False, flush_every)
    assert _state(bat) == _state(ref)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10), st.integers(0, 50), st.data())
def test_in_order_batches_bridge_and_tombstone(gap: int, grace: int, data: st.DataObject) -> None:
    """Mostly ahead of close time (the batch path, not its fallback): bridging records across batches, records
    inside flushed sessions, duplicates, tombstones for flushed sessions a merge replaced."""
    batches = []
    t0 = 0
    for _ in range(data.draw(st.integers(1, 5))):
        n = data.draw(st.integers(0, 30))
        ts = data.draw(st.lists(st.integers(t0, t0 + 40), min_size=n, max_size=n))
        keys = data.draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n, max_size=n))
        batches.append([(k, 1, t) for k, t in zip(keys, ts, strict=True)])
        t0 += data.draw(st.integers(0, 30))
    flush_every = data.draw(st.lists(st.booleans(), min_size=5, max_size=5))
    w = SessionWindows(gap, grace)
    ref = SessionWindowProcessor(w, parse_aggregations("count,sum,max"), "update")
    bat = SessionWindowProcessor(w, parse_aggregations("count,sum,max"), "update")
    assert _run(bat, batches, "x", True, flush_every) == _run(ref, batches, "x", False, flush_every)
    assert _state(bat) == _state(ref)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10), st.integers(0, 20), st.sampled_from(AGGS[:6]), st.data())
def test_keys_in_order_runs_of_records(gap: int, grace: int, agg: str, data: st.DataObject) -> None:
    """Each key's records mostly in time order, as a topic written in order delivers them (the batch path's runs
    of records): sessions extended across batches (the removal of the flushed one at the first record past its
    end), records at its very end, new sessions after a silence, now and then a key's record back in time (that
    key walked record by record), sums past int64."""
    batches = []
    clock = dict.fromkeys("abcd", 0)
    for _ in range(data.draw(st.integers(1, 5))):
        batch = []
        for _i in range(data.draw(st.integers(0, 30))):
            k = data.draw(st.sampled_from("abcd"))
            step = data.draw(st.sampled_from([0, 1, gap, gap + 1, 2 * gap + 3, -1]))
            clock[k] = max(0, clock[k] + step)
            batch.append((k, data.draw(st.one_of(st.integers(-5, 5), huge)), clock[k]))
        batches.append(batch)
    flush_every = data.draw(st.lists(st.booleans(), min_size=5, max_size=5))
    w = SessionWindows(gap, grace)
    ref = SessionWindowProcessor(w, parse_aggregations(agg), "update")
    bat = SessionWindowProcessor(w, parse_aggregations(agg), "update")
    assert _run(bat, batches, agg, True, flush_every) == _run(ref, batches, agg, False, flush_every)
    assert _state(bat) == _state(ref)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 10),
    st.sampled_from(AGGS),
    st.sampled_from(["update", "update", "every", "close"]),
    st.lists(st.lists(_records(120), max_size=20), min_size=1, max_size=3),
)
def test_flush_columns_equals_flush(gap: int, agg: str, emit: str, batches: list) -> None:
    """What the service takes (``flush_columns``, built from the cache's rows a part at a time) is what
    :meth:`flush` gives, tombstones included (``count`` 0, ``None`` values)."""
    batches = [[(k, v if type(v) is int else 1, t) for k, v, t in b] for b in batches]
    w = SessionWindows(gap, 3)
    by_rows = SessionWindowProcessor(w, parse_aggregations(agg), emit)
    by_updates = SessionWindowProcessor(w, parse_aggregations(agg), emit)
    for recs in batches:
        keys, values, ts = [k for k, _v, _t in recs], [wrap(agg, v) for _k, v, _t in recs], [t for *_kv, t in recs]
        for proc in (by_rows, by_updates):
            proc.process_columns(keys, ts, None, values)
        cols = by_rows.flush_columns()
        updates = by_updates.flush()
        assert cols["key"] == [u.key for u in updates]
        for name in ("start", "end", "ts", "count"):
            assert cols[name].tolist() == [getattr(u, name) for u in updates]
        aggregation = by_rows.aggregation
        composite = isinstance(aggregation, Composite)
        names = [p.name for p in aggregation.parts] if isinstance(aggregation, Composite) else [aggregation.name]
        expected = {
            n: [None if u.count == 0 else (u.value[n] if composite else u.value) for u in updates] for n in names
        }
        assert {n: list(c) for n, c in cols["values"].items()} == expected


def test_custom_merger_takes_the_record_path() -> None:
    w = SessionWindows(5)
    bat = SessionWindowProcessor(w, Sum(), "update", merger=lambda a, b: a * b)
    ref = SessionWindowProcessor(w, Sum(), "update", merger=lambda a, b: a * b)
    recs = [("a", 2, 10), ("a", 3, 20), ("a", 4, 15)]
    assert _run(bat, [recs], "sum", True, [True]) == _run(ref, [recs], "sum", False, [True])
