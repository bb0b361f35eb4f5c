"""Time windows (tumbling, hopping): docs/rules-window-types.md T1-T12, unit and property tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windowstore.aggregations import Collect, Count, Sum, parse_aggregations
from windowstore.time_windows import TimeWindowProcessor, TimeWindows
from windowstore.windows import ConfigError


def test_definition_checks_mirror_kafka_streams() -> None:  # T1
    with pytest.raises(ConfigError, match="size_ms"):
        TimeWindows(0)
    with pytest.raises(ConfigError, match="advance_ms"):
        TimeWindows(10, 11)
    with pytest.raises(ConfigError, match="advance_ms"):
        TimeWindows(10, 0)
    with pytest.raises(ConfigError, match="grace_ms"):
        TimeWindows(10, grace_ms=-1)
    with pytest.raises(ConfigError, match="retention_ms"):
        TimeWindows(10, grace_ms=5, retention_ms=14)
    assert TimeWindows(10).is_tumbling and TimeWindows(10, 3).windows_per_record == 4


def test_window_starts_are_windows_for() -> None:  # T2
    w = TimeWindows(10, 4)
    assert list(w.window_starts(25)) == [16, 20, 24]
    assert list(w.window_starts(3)) == [0]  # fewer windows near 0
    assert list(TimeWindows(10).window_starts(30)) == [30]  # an end is exclusive
    assert list(TimeWindows(10).window_starts(29)) == [20]


def test_every_mode_forwards_each_write_in_start_order_with_max_timestamp() -> None:  # T6, T8
    p = TimeWindowProcessor(TimeWindows(10, 5), Collect(), "every")
    out = p.process("k", "a", 12) + p.process("k", "b", 11)
    assert [(u.start, u.end, u.value, u.ts) for u in out] == [
        (5, 15, ["a"], 12),
        (10, 20, ["a"], 12),
        (5, 15, ["a", "b"], 12),
        (10, 20, ["a", "b"], 12),
    ]


def test_late_record_counts_once_per_closed_window() -> None:  # T5, T7
    p = TimeWindowProcessor(TimeWindows(30, 10), Count(), "every")
    p.process("k", 1, 100)
    p.process("k", 1, 200)
    assert p.process("k", 1, 150) == []  # windows 130, 140, 150: all closed (close = 200)
    assert p.stats.dropped_records_total == 3 and p.stats.dropped_late == 1
    out = p.process("k", 1, 185)  # windows 160, 170 closed (end <= 200), 180 open
    assert [(u.start, u.value) for u in out] == [(180, 2)]  # with the record at 200
    assert p.stats.dropped_records_total == 5


def test_null_value_is_aggregated_null_key_dropped() -> None:  # T11
    p = TimeWindowProcessor(TimeWindows(10), Count(), "every")
    assert [u.value for u in p.process("k", None, 3)] == [1]
    assert p.process(None, 1, 50) == [] and p.observed_stream_time == 3
    assert p.stats.dropped_records_total == 1


def test_update_mode_flush_is_last_write_order() -> None:  # T9
    p = TimeWindowProcessor(TimeWindows(10), Sum(), "update")
    assert p.process("a", 1, 1) == [] and p.process("b", 2, 2) == [] and p.process("a", 3, 3) == []
    assert [(u.key, u.value) for u in p.flush()] == [("b", 2), ("a", 4)]
    assert p.flush() == []


def test_close_mode_order_is_start_then_key_bytes() -> None:  # T10
    p = TimeWindowProcessor(TimeWindows(10), Sum(), "close")
    out = []
    for k, v, t in [("é", 1, 1), ("b", 2, 3), ("a", 3, 5), ("A", 4, 9), ("b", 5, 12), ("z", 6, 25)]:
        out += p.process(k, v, t)
    assert [(u.key, u.start, u.value) for u in out] == [
        ("A", 0, 4),
        ("a", 0, 3),
        ("b", 0, 2),
        ("é", 0, 1),
        ("b", 10, 5),
    ]


records = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-5, 5), st.integers(0, 300)), max_size=40)
definitions = st.builds(
    lambda size, k, grace: TimeWindows(size, max(1, size // k), grace),
    st.integers(1, 40),
    st.integers(1, 6),
    st.integers(0, 30),
)


def _brute_force(w: TimeWindows, recs: list) -> dict:
    """The final value of every window by definition: records kept in arrival order while their window was open."""
    st_time = -1
    windows: dict = {}
    for k, v, t in recs:
        st_time = max(st_time, t)
        start = 0
        while start <= t:
            if start <= t < start + w.size_ms and start + w.size_ms > st_time - w.grace_ms:
                windows.setdefault((k, start), []).append(v)
            start += w.advance
    return windows


@settings(max_examples=200, deadline=None)
@given(definitions, records)
def test_property_every_update_close_agree_with_definition(w: TimeWindows, recs: list) -> None:
    """every: last write per window = definition; update (any flush cadence): same final values; close: each
    window once, with its final value, once stream time passes its end + grace."""
    expected = _brute_force(w, recs)
    finals: dict = {}
    p = TimeWindowProcessor(w, Collect(), "every")
    for k, v, t in recs:
        for u in p.process(k, v, t):
            finals[(u.key, u.start)] = u.value
    assert finals == expected
    for every_n in (1, 3):
        q = TimeWindowProcessor(w, Collect(), "update")
        got: dict = {}
        for i, (k, v, t) in enumerate(recs):
            q.process(k, v, t)
            if i % every_n == 0:
                got.update({(u.key, u.start): u.value for u in q.flush()})
        got.update({(u.key, u.start): u.value for u in q.flush()})
        assert got == expected
    c = TimeWindowProcessor(w, Collect(), "close")
    emitted = []
    for k, v, t in recs:
        emitted += c.process(k, v, t)
    seen = [(u.key, u.start) for u in emitted]
    assert len(seen) == len(set(seen))
    stream_time = max((t for _, _, t in recs), default=-1)
    closed = {key: vals for key, vals in expected.items() if key[1] + w.size_ms <= stream_time - w.grace_ms}
    assert {(u.key, u.start): u.value for u in emitted} == closed


@settings(max_examples=100, deadline=None)
@given(definitions, records, st.integers(0, 40), st.sampled_from(["every", "update", "close"]))
def test_property_export_restore_continues_identically(w: TimeWindows, recs: list, cut: int, emit: str) -> None:
    agg = parse_aggregations("count,sum")
    whole = TimeWindowProcessor(w, agg, emit)
    a = [u for k, v, t in recs for u in whole.process(k, v, t)] + whole.flush()
    first = TimeWindowProcessor(w, agg, emit)
    b = [u for k, v, t in recs[:cut] for u in first.process(k, v, t)]
    second = TimeWindowProcessor(w, agg, emit)
    second.restore_state(first.export_state())
    b += [u for k, v, t in recs[cut:] for u in second.process(k, v, t)] + second.flush()
    if emit == "update":  # a flush at the cut is not part of the comparison: compare final values
        assert {(u.key, u.start): u.value for u in a} == {(u.key, u.start): u.value for u in b}
    else:
        assert a == b


def test_restore_refuses_another_definition() -> None:
    p = TimeWindowProcessor(TimeWindows(10), Count(), "every")
    with pytest.raises(ConfigError, match="another window definition"):
        TimeWindowProcessor(TimeWindows(10, 5), Count(), "every").restore_state(p.export_state())
