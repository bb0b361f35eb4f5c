"""Integer sums stay exact, never a silent float (issue 29 point 2), on the record path and the batch path, in
flushed updates, in flushed columns and through saved state; integers and timestamps beyond int64 never raise."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windowstore import Composite, Count, Field, Max, Min, SlidingWindowProcessor, SlidingWindows, Sum

from .reference import save_state
from .test_batch import run, store_contents

BIG = 2**62


def _sum_by_window(updates):
    return {(u.key, u.start): u.value for u in updates}


@pytest.mark.parametrize("batch", [False, True])
def test_issue_29_sums_are_exact_python_ints(batch):
    """Amounts 2**62, 2**62 + 7 and 5 on one key: the window holding the first two shows 9223372036854775815,
    an int, the one holding all three 9223372036854775820, and a window holding only the 5 shows 5, an int - in
    ``flush`` and in ``flush_columns``."""
    recs = [("k", {"amount": BIG}, 1000), ("k", {"amount": BIG + 7}, 1001), ("k", {"amount": 5}, 5000)]
    for columns in (False, True):
        proc = SlidingWindowProcessor(SlidingWindows(100, 0), Field(Sum(), "amount"), "update", batch=batch)
        proc.process_batch(recs)
        if columns:
            out = proc.flush_columns()
            got = {
                (k, int(s)): v
                for k, s, v in zip(out["key"], out["start"], out["values"]["sum_amount"].tolist(), strict=True)
            }
        else:
            got = _sum_by_window(proc.flush())
        assert got[("k", 901)] == 9223372036854775815 and type(got[("k", 901)]) is int
        assert got[("k", 4900)] == 5 and type(got[("k", 4900)]) is int


@pytest.mark.parametrize("batch", [False, True])
def test_huge_sums_survive_saved_state_and_continue(batch):
    """State written with sums beyond int64 restores (snapshot and per-key blobs), and the next record for the
    key - on the batch path's columns too - adds exactly (the OverflowError of issue 29 on restore)."""
    w, agg = SlidingWindows(100, 0), Sum()
    first = [("k", BIG, 1000), ("k", BIG + 7, 1001), ("j", 3, 1001)]
    more = [("k", 5, 1002), ("j", 4, 1003)]  # window [902, 1002] of k: 2**62 + 7 + 5
    want_proc = SlidingWindowProcessor(w, agg, "update")
    want_proc.process_many(first)
    want_proc.flush()
    want_proc.process_many(more)
    want = want_proc.flush()
    assert _sum_by_window(want)[("k", 902)] == 2 * BIG + 12  # [902, 1002]: all three records of k

    snap = SlidingWindowProcessor(w, agg, "update", batch=batch)
    snap.process_batch(first)
    snap.flush()
    again = SlidingWindowProcessor.from_bytes(snap.to_bytes(), w, agg, "update", batch=batch)
    again.process_batch(more)
    assert again.flush() == want

    backend: dict = {}
    proc = SlidingWindowProcessor.from_state(w, agg, "update", None, backend.get, batch=batch)
    proc.process_batch(first)
    proc.flush()
    meta = save_state(proc, backend)
    proc = SlidingWindowProcessor.from_state(w, agg, "update", meta, backend.get, batch=batch)
    proc.process_batch(more)
    assert proc.flush() == want
    assert store_contents(proc) == store_contents(want_proc)


@pytest.mark.parametrize("dtype", [object, np.uint64])
def test_columns_beyond_int64_do_not_raise(dtype):
    """``process_columns`` with values outside int64 (an object column, or uint64 above int64) takes the record
    path's exact ints instead of raising in ``np.fromiter`` or wrapping in ``astype``."""
    vals = [10**30, 1, 2] if dtype is object else [2**64 - 1, 1, 2]
    agg = Composite([Count(), Field(Sum(), "v"), Field(Max(), "v"), Field(Min(), "v")])
    want = SlidingWindowProcessor(SlidingWindows(10, 0), agg, "update")
    want.process_many([("a", {"v": v}, t) for v, t in zip(vals, (5, 6, 7), strict=True)])
    proc = SlidingWindowProcessor(SlidingWindows(10, 0), agg, "update", batch=True)
    proc.process_columns(["a", "a", "a"], np.array([5, 6, 7]), {"v": np.array(vals, dtype=dtype)})
    got = proc.flush()
    assert got == want.flush()
    assert max(u.value["sum_v"] for u in got) == vals[0] + 3


@pytest.mark.parametrize("batch", [False, True])
def test_timestamps_beyond_a_long_are_invalid_not_raised(batch):
    """Kafka's timestamps are longs: a larger one is dropped as an invalid timestamp on both paths."""
    proc = SlidingWindowProcessor(SlidingWindows(10, 0), Sum(), "update", batch=batch, collect_drops=True)
    proc.process_batch([("a", 1, 2**63), ("a", 2, 10**30), ("a", 3, 2**63 - 1 - 10)])
    assert proc.stats.dropped_invalid_timestamp == 2
    assert [d.ts for d in proc.take_drops()] == [2**63, 10**30]
    assert {u.value for u in proc.flush()} == {3}
    unsigned = SlidingWindowProcessor(SlidingWindows(10, 0), Sum(), "update", batch=batch)
    unsigned.process_columns(["a", "a"], np.array([2**64 - 1, 7], dtype=np.uint64), {None: np.array([1, 2])})
    assert unsigned.stats.dropped_invalid_timestamp == 1
    assert proc.to_bytes()  # nothing beyond int64 was stored


@st.composite
def huge_cases(draw):
    td = draw(st.integers(1, 12))
    grace = draw(st.integers(0, 30))
    n = draw(st.integers(1, 40))
    value = st.one_of(st.integers(-9, 9), st.integers(-(2**70), 2**70), st.sampled_from([BIG, -BIG, 2**63 - 1]))
    recs = [(draw(st.sampled_from("abc")), draw(value), draw(st.integers(0, 90))) for _ in range(n)]
    return td, grace, recs, draw(st.integers(1, 20)), draw(st.integers(0, 2))


HUGE_AGGS = [Sum, lambda: Composite([Count(), Field(Sum(), "v"), Field(Max(), "v"), Field(Min(), "v")]), Min]


@pytest.mark.parametrize("mode", ["update", "close"])
@settings(max_examples=200, deadline=None)
@given(case=huge_cases())
def test_batch_path_equals_record_path_with_huge_ints(mode, case):
    """Record path == batch path (updates, state, counters) with integers around and beyond int64."""
    td, grace, recs, batch_size, agg_i = case
    make = HUGE_AGGS[agg_i]
    if agg_i == 1:
        recs = [(k, {"v": v}, t) for k, v, t in recs]
    want, p_rec, _ = run(recs, td, grace, batch_size, make, False, mode)
    got, p_bat, _ = run(recs, td, grace, batch_size, make, True, mode)
    assert got == want
    assert [[type(u.value) for u in f] for f in got] == [[type(u.value) for u in f] for f in want]
    assert store_contents(p_bat) == store_contents(p_rec)
    for name in ("records", "accepted", "dropped_late", "dropped_null", "skipped_windows", "updates_emitted"):
        assert getattr(p_bat.stats, name) == getattr(p_rec.stats, name), name
    assert p_bat.observed_stream_time == p_rec.observed_stream_time
