"""Update mode's record cache (R21) over long micro-batches: a flush after N records reports, per window, the
last write since the previous flush, ordered by last write - the compaction of flushing after every record.
Exercises what per-record flushes never do: windows expired before the flush, windows written hundreds of
times between flushes, the cache mixed with the batch path and with snapshots."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from windowstore import Collect, Count, Mean, SlidingWindowProcessor, SlidingWindows, Sum, output
from windowstore.updates import WindowUpdate

AGGS = {"count": Count, "sum": Sum, "collect": Collect, "mean": Mean}


def compacted(windows: SlidingWindows, agg: str, recs: list, flush_every: int) -> list[list[WindowUpdate]]:
    """The expected flushes: per-record flushes of a twin processor, compacted by (key, start), last write
    last, over each run of ``flush_every`` records."""
    twin = SlidingWindowProcessor(windows, AGGS[agg](), "update")
    flushes: list[list[WindowUpdate]] = []
    last: dict = {}
    for i, (k, v, t) in enumerate(recs, start=1):
        twin.process(k, v, t)
        for u in twin.flush():
            last.pop((u.key, u.start), None)
            last[(u.key, u.start)] = u
        if i % flush_every == 0 or i == len(recs):
            flushes.append(list(last.values()))
            last = {}
    return flushes


def flushed(windows: SlidingWindows, agg: str, recs: list, flush_every: int) -> list[list[WindowUpdate]]:
    proc = SlidingWindowProcessor(windows, AGGS[agg](), "update")
    flushes = []
    for i, (k, v, t) in enumerate(recs, start=1):
        assert proc.process(k, v, t) == []
        if i % flush_every == 0 or i == len(recs):
            flushes.append(proc.flush())
    return flushes


@settings(max_examples=200, deadline=None)
@given(
    td=st.integers(min_value=1, max_value=20),
    grace=st.integers(min_value=0, max_value=30),
    seed=st.integers(min_value=0, max_value=10**6),
    n=st.integers(min_value=1, max_value=300),
    flush_every=st.integers(min_value=2, max_value=300),
    agg=st.sampled_from(sorted(AGGS)),
)
def test_flush_after_many_records_is_the_compaction_of_per_record_flushes(td, grace, seed, n, flush_every, agg):
    rnd = random.Random(seed)
    recs = []
    for i in range(n):  # advancing time with disorder, late and partially-late records, duplicates
        t = max(0, i * rnd.randint(0, 3) // 2 - rnd.choice([0, 0, 0, 1, td, 2 * td + grace]))
        recs.append((rnd.choice("abc"), rnd.randint(-5, 50), t))
    windows = SlidingWindows(td, grace)
    assert flushed(windows, agg, recs, flush_every) == compacted(windows, agg, recs, flush_every)


def test_windows_expired_before_the_flush_are_flushed():
    td = 5
    recs = [("k", 1, t) for t in range(0, 200, 3)]
    proc = SlidingWindowProcessor(SlidingWindows(td, 0), Count(), "update")
    for k, v, t in recs:
        proc.process(k, v, t)
    assert proc.store.expired > 0  # windows of the early records left the store before the flush
    (expected,) = compacted(SlidingWindows(td, 0), "count", recs, len(recs))
    assert proc.flush() == expected
    assert proc.flush() == []


def test_windows_written_many_times_between_flushes():
    td = 300  # each window takes ~300 writes: the flush orders by sorting, not by a slot per write
    recs = [(f"k{i % 3}", i, i // 3 + (i % 7 == 0) * 5) for i in range(3000)]
    for agg in ("count", "mean"):
        windows = SlidingWindows(td, td)
        assert flushed(windows, agg, recs, 1000) == compacted(windows, agg, recs, 1000)


def test_cache_mixed_with_batch_path_and_snapshots():
    td, grace = 10, 10
    rnd = random.Random(7)
    recs = [(f"k{rnd.randint(0, 4)}", rnd.randint(0, 9), max(0, i - rnd.randint(0, 8))) for i in range(2000)]
    windows = SlidingWindows(td, grace)
    expected = compacted(windows, "sum", recs, 250)
    proc = SlidingWindowProcessor(windows, Sum(), "update", batch=True)
    got = []
    for b in range(0, len(recs), 250):
        chunk = recs[b : b + 250]
        # record path, then the batch path, then the record path again before one flush
        for k, v, t in chunk[:80]:
            proc.process(k, v, t)
        proc.process_batch(chunk[80:160])
        state = proc.to_bytes()  # a snapshot with unflushed writes, restored and continued
        proc = SlidingWindowProcessor.from_bytes(state, windows, Sum(), "update", batch=True)
        for k, v, t in chunk[160:]:
            proc.process(k, v, t)
        got.append(proc.flush())
    assert got == expected


def test_flush_pauses_the_collector_and_restores_its_state(monkeypatch):
    """flush() pauses automatic garbage collection while it builds the updates, and leaves the collector as
    it found it: enabled stays enabled, disabled (by the caller) stays disabled, also when flush raises."""
    import gc

    proc = SlidingWindowProcessor(SlidingWindows(100, 50), Count(), "update")
    seen: list[bool] = []
    build = output.stamped_updates

    def spy(state, finish):
        seen.append(gc.isenabled())
        return build(state, finish)

    monkeypatch.setattr(output, "stamped_updates", spy)
    was = gc.isenabled()
    try:
        gc.enable()
        proc.process("k", 1, 500)
        assert len(proc.flush()) == 1 and seen == [False] and gc.isenabled()
        gc.disable()
        proc.process("k", 1, 510)
        assert proc.flush() and seen == [False, False] and not gc.isenabled()
        gc.enable()
        proc.process("k", 1, 520)
        monkeypatch.setattr(output, "stamped_updates", lambda state, finish: 1 / 0)
        try:
            proc.flush()
        except ZeroDivisionError:
            pass
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
