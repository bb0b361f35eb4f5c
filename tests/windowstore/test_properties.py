"""Property tests (hypothesis): the processor against the declarative definition R3, arrival-order
independence (R30), emit-mode consistency, and state round trips."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from windowstore import Collect, Count, SlidingWindowProcessor, SlidingWindows, Sum
from windowstore.serde import decode_key_windows, encode_key_windows

from .reference import classify, r3_table, save_state

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])

keys = st.sampled_from(["a", "b", "c"])


@st.composite
def streams(draw, max_ts: int = 120, max_len: int = 40):
    td = draw(st.integers(min_value=1, max_value=15))
    grace = draw(st.integers(min_value=0, max_value=40))
    n = draw(st.integers(min_value=1, max_value=max_len))
    recs = [(draw(keys), i, draw(st.integers(min_value=0, max_value=max_ts))) for i in range(n)]
    return td, grace, recs


def final_table(proc_updates, td):
    table = {}
    for u in proc_updates:
        table[(u.key, u.start)] = (sorted(u.value), u.ts)
        assert u.end == u.start + td
    return table


def run(recs, td, grace, emit, agg=None, retention=None, flush_every=None):
    proc = SlidingWindowProcessor(SlidingWindows(td, grace, retention), agg or Collect(), emit)
    out = []
    for i, (k, v, t) in enumerate(recs, start=1):
        out.extend(proc.process(k, v, t))
        if flush_every and i % flush_every == 0:
            out.extend(proc.flush())
    out.extend(proc.flush())
    return out, proc


@SETTINGS
@given(streams())
def test_clean_input_matches_declarative_definition(case):
    """R30: with no partially-late record, the final table is R3 over the accepted records."""
    td, grace, recs = case
    kinds = classify(recs, td, grace)
    assume("partial" not in kinds)
    accepted = [r for r, k in zip(recs, kinds, strict=True) if k == "ok"]
    expected = r3_table(accepted, td)
    for emit, retention in (("update", None), ("every", 2 * td + grace + 1)):
        out, proc = run(recs, td, grace, emit, retention=retention)
        assert final_table(out, td) == expected, emit
        assert proc.stats.dropped_late == kinds.count("late")
        assert proc.stats.skipped_windows == 0


@SETTINGS
@given(streams(), st.randoms(use_true_random=False))
def test_final_table_independent_of_arrival_order(case, rnd):
    """R3: without lateness the table does not depend on arrival order (grace covers all disorder)."""
    td, _grace, recs = case
    grace = 10_000
    base, _ = run(recs, td, grace, "update")
    shuffled = list(recs)
    rnd.shuffle(shuffled)
    other, _ = run(shuffled, td, grace, "update", flush_every=3)
    assert final_table(base, td) == final_table(other, td)


@SETTINGS
@given(streams())
def test_update_mode_is_every_mode_compacted(case):
    """Update mode emits, per flush, the last write of each window written since the previous flush."""
    td, grace, recs = case
    retention = 3 * td + grace + 2  # large enough that key-first reads see what the cache would
    proc_e = SlidingWindowProcessor(SlidingWindows(td, grace, retention), Collect(), "every")
    proc_u = SlidingWindowProcessor(SlidingWindows(td, grace, retention), Collect(), "update")
    for k, v, t in recs:
        every = proc_e.process(k, v, t)
        assert proc_u.process(k, v, t) == []
        last = {}
        for u in every:
            last.pop((u.key, u.start), None)
            last[(u.key, u.start)] = u
        assert proc_u.flush() == list(last.values())


@SETTINGS
@given(streams())
def test_close_mode_emits_final_values_once(case):
    """R28: a window emitted on close never changes afterwards, and is emitted once."""
    td, grace, recs = case
    closed, proc_c = run(recs, td, grace, "close")
    every, _ = run(recs, td, grace, "every")
    final = {}
    for u in every:
        final[(u.key, u.start)] = u
    seen = set()
    for u in closed:
        assert (u.key, u.start) not in seen
        seen.add((u.key, u.start))
        assert final[(u.key, u.start)] == u
        assert u.end < proc_c.observed_stream_time - grace  # only closed windows are emitted


@SETTINGS
@given(streams(), st.integers(min_value=0, max_value=40), st.sampled_from(["every", "update", "close"]))
def test_snapshot_round_trip_continues_identically(case, cut, emit):
    td, grace, recs = case
    cut = min(cut, len(recs))
    full, proc_full = run(recs, td, grace, emit, agg=Sum(), flush_every=5)
    w = SlidingWindows(td, grace)
    proc = SlidingWindowProcessor(w, Sum(), emit)
    out = []
    for i, (k, v, t) in enumerate(recs[:cut], start=1):
        out.extend(proc.process(k, v, t))
        if i % 5 == 0:
            out.extend(proc.flush())
    proc = SlidingWindowProcessor.from_bytes(proc.to_bytes(), w, Sum(), emit)
    for i, (k, v, t) in enumerate(recs[cut:], start=cut + 1):
        out.extend(proc.process(k, v, t))
        if i % 5 == 0:
            out.extend(proc.flush())
    out.extend(proc.flush())
    assert out == full
    assert proc.stats == proc_full.stats


@SETTINGS
@given(streams(), st.integers(min_value=1, max_value=7), st.sampled_from(["every", "update", "close"]))
def test_external_state_per_key_round_trip(case, batch, emit):
    """The Spark layout: task meta + one blob per key, loaded lazily, written back for dirty keys only."""
    td, grace, recs = case
    full, _ = run(recs, td, grace, emit, agg=Count(), flush_every=batch)
    w = SlidingWindows(td, grace)
    backend: dict = {}
    meta = None
    out = []
    for b in range(0, len(recs), batch):
        proc = SlidingWindowProcessor.from_state(w, Count(), emit, meta, backend.get)
        for k, v, t in recs[b : b + batch]:
            out.extend(proc.process(k, v, t))
        out.extend(proc.flush())
        meta = save_state(proc, backend)
    assert out == full


@SETTINGS
@given(streams())
def test_key_blob_round_trip(case):
    td, grace, recs = case
    _, proc = run(recs, td, grace, "update", agg=Collect())
    for kw in proc.store.keys.values():
        back = decode_key_windows(encode_key_windows(kw))
        assert back.starts == kw.starts
        assert back.entries == kw.entries


def test_invalid_records_are_counted_not_raised():
    proc = SlidingWindowProcessor(SlidingWindows(10, 0), Count(), "every", collect_drops=True)
    assert proc.process(None, 1, 5) == []
    assert proc.process("a", None, 5) == []
    assert proc.process("a", 1, -1) == []
    assert proc.process("a", 1, "12") == []
    assert proc.process("a", 1, 100) != []
    assert proc.process("a", 1, 50) == []  # late: 50 + 10 < 100
    s = proc.stats
    assert (s.dropped_null, s.dropped_invalid_timestamp, s.dropped_late, s.accepted) == (2, 2, 1, 1)
    assert s.dropped_records_total == 5
    assert [d.reason.value for d in proc.take_drops()] == [
        "null-key",
        "null-value",
        "invalid-timestamp",
        "invalid-timestamp",
        "late",
    ]
    assert proc.observed_stream_time == 100  # invalid records never advance stream time


def test_random_long_stream_update_equals_declarative():
    """A longer seeded stream (thousands of records, 5 keys) with disorder inside grace."""
    rnd = random.Random(7)
    td, grace = 50, 200
    recs = []
    t = 0
    for i in range(3000):
        t += rnd.randint(0, 20)
        recs.append((f"k{rnd.randint(0, 4)}", i, max(0, t - rnd.randint(0, 150))))
    kinds = classify(recs, td, grace)
    assert "partial" not in kinds and "late" not in kinds
    out, _ = run(recs, td, grace, "update", flush_every=100)
    assert final_table(out, td) == r3_table(recs, td)
