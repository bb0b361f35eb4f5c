"""The worked examples of docs/rules.md, each pinned as a test of the engine."""

from __future__ import annotations

from windowstore import Collect, SlidingWindowProcessor, SlidingWindows


def table(recs, td, grace, emit="every", retention=None, agg=None):
    proc = SlidingWindowProcessor(SlidingWindows(td, grace, retention), agg or Collect(), emit)
    out = []
    for t in recs:
        out.extend(proc.process("k", t, t))
    out.extend(proc.flush())
    final = {}
    for u in out:
        final[(u.start, u.end)] = sorted(u.value)
    return final, out, proc


def test_r3_early_records_share_the_zero_window():
    final, _, _ = table([0, 5], 10, 100)
    assert final == {(0, 10): [0, 5], (1, 11): [5]}  # no window holding only {0}


def test_r17_reverse_iterator_in_the_partially_late_regime():
    final, _, _ = table([5, 19, 6, 16], 10, 3)
    assert (7, 17) not in final  # the forward iterator would create [7,17]{16}; Kafka's default reverse does not


def test_r20_double_put_when_previous_right_window_is_the_left_window():
    _, out, _ = table([7, 18], 10, 100)  # t == prev + 1 + td: [8,18] is both
    writes = [(u.start, u.end, u.value) for u in out if (u.start, u.end) == (8, 18)]
    assert writes == [(8, 18, [18]), (8, 18, [18])]


def test_r22_skipped_windows_tick_the_sensor():
    recs = [200, 100, 101, 102, 103, 104, 105, 15]
    _, _out, proc = table(recs, 10, 90)
    assert proc.stats.dropped_records_total == 7
    assert proc.stats.dropped_late == 1 and proc.stats.skipped_windows == 6


def test_r25_default_retention_is_one_ms_short_for_key_first_stores():
    final, _, _ = table([21, 18, 22, 19], 1, 3)
    assert final[(18, 19)] == [19] and (19, 20) not in final
    final, _, _ = table([21, 18, 22, 19], 1, 3, retention=10_000)
    assert final[(18, 19)] == [18, 19] and final[(19, 20)] == [19]


def test_r25_update_mode_reads_like_the_record_cache():
    final, _, _ = table([21, 18, 22, 19], 1, 3, emit="update")
    assert final[(18, 19)] == [18, 19] and final[(19, 20)] == [19]


def test_r29_emit_on_close_can_lose_windows_when_stream_time_jumps():
    _, out, _ = table([100, 131], 10, 0, emit="close")
    assert (90, 100) not in {(u.start, u.end) for u in out}
    _, out, _ = table([100, 111], 10, 0, emit="close")
    assert (90, 100) in {(u.start, u.end) for u in out}


def test_r31_partially_late_records_break_the_definition_like_kafka():
    final, _, _ = table([200, 105, 112], 10, 90)
    assert final[(102, 112)] == [112] and (95, 105) not in final and (106, 116) not in final
    final, _, _ = table([27, 30, 28], 2, 1)
    assert final == {(25, 27): [27], (28, 30): [28, 30], (29, 31): [30]}
    final, _, proc = table([14, 19, 7], 10, 3)
    assert final == {(4, 14): [14], (8, 18): [14], (9, 19): [14, 19], (15, 25): [19]}
    assert proc.stats.skipped_windows == 2


def test_r24_retention_smaller_than_two_td_plus_grace_is_rejected():
    import pytest

    from windowstore import ConfigError

    with pytest.raises(ConfigError, match="retention_ms must be no smaller than 2 \\* time_difference_ms"):
        SlidingWindows(10, 5, retention_ms=24)
    assert SlidingWindows(10, 5).retention == 25


def test_r5_emitted_timestamp_is_the_window_max_record_timestamp():
    _, out, _ = table([10, 14, 12], 10, 100)
    for u in out:
        assert u.ts == max(u.value)


def test_zero_time_difference_is_rejected():
    import pytest

    from windowstore import ConfigError

    with pytest.raises(ConfigError, match="time_difference_ms must be at least 1"):
        SlidingWindows(0, 5)
