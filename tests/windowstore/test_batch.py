"""The batch fast path gives exactly what the record path gives: the same updates in the same flush order,
the same stored windows and the same drop counters - and it is actually taken."""

from __future__ import annotations

import random

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from windowstore import (
    Collect,
    Composite,
    Count,
    Field,
    Max,
    Mean,
    Min,
    SlidingWindowProcessor,
    SlidingWindows,
    Sum,
    Variance,
)
from windowstore.columns import batch_plan

from .reference import save_state

AGGS = [Count, Sum, Min, Max, Mean, lambda: Composite([Count(), Field(Sum(), "v"), Field(Max(), "v")])]


def run(recs, td, grace, batch_size, make_agg, use_batch, mode="update"):
    """Batch by batch, what each batch emitted: update mode's flush; in close mode the final windows (the record
    path returns them from ``process``, the batch path holds them for the next ``flush``)."""
    proc = SlidingWindowProcessor(SlidingWindows(td, grace), make_agg(), mode, batch=True, collect_drops=True)
    flushes, taken = [], 0
    for b in range(0, len(recs), batch_size):
        chunk = recs[b : b + batch_size]
        returned = []
        if use_batch:
            taken += proc.process_batch(chunk)
        else:
            for r in chunk:
                returned.extend(proc.process(*r))
        flushes.append(returned + proc.flush())
    return flushes, proc, taken


def store_contents(proc):
    """Windows any future read can still reach (below the purge bound they are dropped lazily)."""
    bound = proc.store.purge_bound()
    return sorted((k, s, acc, ts, n) for k, s, acc, ts, n in proc.store.all_windows() if s >= bound)


@st.composite
def cases(draw):
    td = draw(st.integers(1, 12))
    grace = draw(st.integers(0, 30))
    n = draw(st.integers(1, 50))
    recs = [(draw(st.sampled_from("abc")), draw(st.integers(-5, 9)), draw(st.integers(0, 90))) for _ in range(n)]
    if draw(st.booleans()):
        recs.insert(draw(st.integers(0, n)), (None, 1, 5))
    return td, grace, recs, draw(st.integers(1, 20)), draw(st.integers(0, len(AGGS) - 1))


@st.composite
def close_cases(draw):
    """Mostly advancing streams (a batch path in close mode needs batches shorter than ``td`` in event time),
    some records out of order or late, sometimes a jump."""
    td = draw(st.integers(5, 40))
    grace = draw(st.integers(0, 20))
    n = draw(st.integers(1, 60))
    t, recs = 0, []
    for _ in range(n):
        t += draw(st.sampled_from([0, 1, 1, 2, 3, 5, 60]))
        recs.append(
            (
                draw(st.sampled_from("abc")),
                draw(st.integers(-5, 9)),
                max(0, t - draw(st.sampled_from([0, 0, 0, 1, 4, 25]))),
            )
        )
    if draw(st.booleans()):
        recs.insert(draw(st.integers(0, n)), (None, 1, 5))
    return td, grace, recs, draw(st.integers(1, 20)), draw(st.integers(0, len(AGGS) - 1))


@pytest.mark.parametrize("mode", ["update", "close"])
@settings(max_examples=400, deadline=None)
@given(case=st.one_of(cases(), close_cases()))
def test_batch_path_equals_record_path(mode, case):
    """The same updates (update mode) or final windows (close mode) in the same order, batch by batch, and the
    same state: stored windows, counters, drops, stream time; in close mode the waiting windows and the
    emission progress too."""
    td, grace, recs, batch_size, agg_i = case
    make = AGGS[agg_i]
    if agg_i == len(AGGS) - 1:
        recs = [(k, None if v is None else {"v": v}, t) if k is not None else (k, v, t) for k, v, t in recs]
    want, p_rec, _ = run(recs, td, grace, batch_size, make, False, mode)
    got, p_bat, taken = run(recs, td, grace, batch_size, make, True, mode)
    event(f"{mode}: batches on the batch path: {'some' if taken else 'none'}")
    assert got == want
    assert store_contents(p_bat) == store_contents(p_rec)
    for name in ("records", "accepted", "dropped_late", "dropped_null", "skipped_windows", "updates_emitted"):
        assert getattr(p_bat.stats, name) == getattr(p_rec.stats, name), name
    assert p_bat.take_drops() == p_rec.take_drops()
    assert p_bat.observed_stream_time == p_rec.observed_stream_time
    assert sorted(p_bat.pending_windows()) == sorted(p_rec.pending_windows())
    assert p_bat.last_emit_close_time == p_rec.last_emit_close_time


def test_batch_path_is_taken_on_clean_input_and_not_on_partially_late():
    rnd = random.Random(3)
    recs = [(f"k{rnd.randint(0, 9)}", rnd.randint(0, 100), i * 3 + rnd.randint(0, 20)) for i in range(2000)]
    _, _, taken = run(recs, 50, 100, 500, Sum, True)
    assert taken == 4
    late = [*recs[:500], ("k1", 1, 5)]  # 5 + 50 >= close? no: dropped at entry, still batchable
    assert run(late, 50, 100, 501, Sum, True)[2] == 1
    partial = [*recs[:500], ("k1", 1, recs[499][2] - 120)]  # inside td of close: partially late
    assert run(partial, 50, 100, 501, Sum, True)[2] == 0


@pytest.mark.parametrize("agg", [Collect(), Variance(), Field(Collect(), "x")])
def test_order_dependent_aggregations_have_no_batch_plan(agg):
    assert batch_plan(agg) is None


def test_float_sums_fall_back_but_stay_exact():
    recs = [("a", 0.1 * i, i) for i in range(50)]
    want, _, _ = run(recs, 10, 5, 50, Sum, False)
    got, _, taken = run(recs, 10, 5, 50, Sum, True)
    assert taken == 0 and got == want


def _rows_from_columns(cols, names):
    rows = []
    for i, key in enumerate(cols["key"]):
        vals = {n: cols["values"][n][i].item() for n in names}
        value = vals if len(names) > 1 else vals[names[0]]
        rows.append((key, int(cols["start"][i]), int(cols["end"][i]), value, int(cols["ts"][i]), int(cols["count"][i])))
    return rows


@pytest.mark.parametrize("mode", ["update", "close"])
@settings(max_examples=200, deadline=None)
@given(case=st.one_of(cases(), close_cases()))
def test_flush_columns_equals_flush(mode, case):
    """What the service takes (``flush_columns``) holds what the record path gives, in both batch-path modes."""
    td, grace, recs, batch_size, _agg_i = case
    make = lambda: Composite([Count(), Field(Sum(), "v"), Field(Min(), "v"), Field(Mean(), "v")])  # noqa: E731
    recs = [(k, None if v is None else {"v": v}, t) if k is not None else (k, v, t) for k, v, t in recs]
    names = ["count", "sum_v", "min_v", "mean_v"]
    want, _, _ = run(recs, td, grace, batch_size, make, False, mode)
    proc = SlidingWindowProcessor(SlidingWindows(td, grace), make(), mode, batch=True)
    got = []
    for b in range(0, len(recs), batch_size):
        proc.process_batch(recs[b : b + batch_size])
        cols = proc.flush_columns()
        if "key_id" in cols:  # the keys as ids into a table, where the batch path made the rows
            assert [cols["key_table"][i] for i in cols["key_id"].tolist()] == cols["key"]
        got.append(_rows_from_columns(cols, names))
    assert got == [[(*u[:3], u.value, u.ts, u.count) for u in f] for f in want]


@settings(max_examples=200, deadline=None)
@given(cases())
def test_batch_path_over_external_state(case):
    """Spark's layout (task meta + a blob per key) between batches, batch path on."""
    td, grace, recs, batch_size, _agg_i = case
    want, _, _ = run(recs, td, grace, batch_size, Sum, False)
    w = SlidingWindows(td, grace)
    backend, meta, got = {}, None, []
    for b in range(0, len(recs), batch_size):
        proc = SlidingWindowProcessor.from_state(w, Sum(), "update", meta, backend.get, batch=True)
        proc.process_batch(recs[b : b + batch_size])
        got.append(proc.flush())
        meta = save_state(proc, backend)
    assert got == want


@settings(max_examples=150, deadline=None)
@given(cases())
def test_process_columns_with_numeric_fields(case):
    """The service's input: key list, int64 timestamps, numeric field columns (falls back when needed)."""
    import numpy as np

    td, grace, recs, batch_size, _ = case
    recs = [r for r in recs if r[0] is not None]
    make = lambda: Composite([Count(), Field(Sum(), "v"), Field(Max(), "v")])  # noqa: E731
    want, _, _ = run([(k, {"v": v}, t) for k, v, t in recs], td, grace, batch_size, make, False)
    proc = SlidingWindowProcessor(SlidingWindows(td, grace), make(), "update", batch=True)
    got = []
    for b in range(0, len(recs), batch_size):
        chunk = recs[b : b + batch_size]
        proc.process_columns(
            [k for k, _, _ in chunk],
            np.array([t for _, _, t in chunk], dtype=np.int64),
            {"v": np.array([v for _, v, _ in chunk], dtype=np.int64)},
        )
        got.append(proc.flush())
    assert got == want


def test_process_columns_names_missing_fields():
    import numpy as np

    proc = SlidingWindowProcessor(SlidingWindows(10, 0), Field(Sum(), "amount"), "update", batch=True)
    with pytest.raises(ValueError, match="fields lacks the aggregation input"):
        proc.process_columns(["a"], np.array([5]), {"other": np.array([1])})


def test_flush_columns_keeps_composite_keys_whole():
    """Tuple (and other sequence-like) keys come out of flush_columns as the same objects, one per row."""
    import numpy as np

    keys = [("a", 1), ("b", 2), ("a", 1), None, ("b", 2)]
    stamps = np.array([5, 6, 7, 8, 20], dtype=np.int64)
    want = SlidingWindowProcessor(SlidingWindows(10, 5), Count(), "update", batch=True)
    for k, t in zip(keys, stamps.tolist(), strict=True):
        want.process(k, 1, t)
    proc = SlidingWindowProcessor(SlidingWindows(10, 5), Count(), "update", batch=True)
    assert proc.process_columns(keys, stamps, {None: np.ones(5, dtype=np.int64)})
    cols = proc.flush_columns()
    assert cols["key"] == [u.key for u in want.flush()]
    assert all(type(k) is tuple for k in cols["key"])


def test_batch_falls_back_when_stored_windows_are_not_r3():
    """The batch path recomputes a key's recent windows from its raw records; it checks the stored window
    starts first and leaves the batch to the record path when they disagree (never silently rewrites)."""
    import numpy as np

    proc = SlidingWindowProcessor(SlidingWindows(10, 50), Sum(), "update", batch=True)
    assert proc.process_columns(["k"] * 3, np.array([5, 9, 14]), {None: np.array([1, 2, 3])})
    proc.flush_columns()
    kw = proc.store.keys["k"]
    assert kw.cols.starts.tolist() == [0, 4, 6, 10]
    kw.cols = kw.cols.take(kw.cols.starts != 6)  # lose a window the next batch recomputes
    before = proc.stats.accepted
    assert not proc.process_columns(["k"], np.array([16]), {None: np.array([4])})
    assert proc.stats.accepted == before + 1  # the record path took the record


def test_batch_path_leaves_huge_time_differences_to_the_record_path():
    import numpy as np

    proc = SlidingWindowProcessor(SlidingWindows(1 << 41, 0), Count(), "update", batch=True)
    assert not proc.process_columns(["k", "k"], np.array([5, 9]), {None: np.array([1, 1])})
    assert sorted((u.start, u.count) for u in proc.flush()) == [(0, 2), (6, 1)]


def test_close_mode_batch_path_is_taken_on_a_clean_stream():
    rnd = random.Random(4)
    recs = [(f"k{rnd.randint(0, 9)}", rnd.randint(0, 100), i * 3 + rnd.randint(0, 20)) for i in range(2000)]
    want, _, _ = run(recs, 2000, 100, 250, Sum, False, "close")  # a batch spans ~750 ms, windows close after 2.1 s
    got, _proc, taken = run(recs, 2000, 100, 250, Sum, True, "close")
    assert taken == 8 and got == want and sum(map(len, got)) > 1000
    _, _, taken = run(recs, 50, 100, 250, Sum, True, "close")  # a batch spans 15 windows: the record path
    assert taken == 0
    assert (
        SlidingWindowProcessor(SlidingWindows(50, 100), Sum(), "close", emit_interval_ms=1000, batch=True).batch_path
        is False
    )  # a wall-clock emit interval: record path


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, (1 << 34) - 1), st.integers(0, 3)), max_size=60), st.integers(0, 3))
def test_flush_order_is_writer_category_then_row(rows, early_bit):
    """The radix-sorted flush order against a plain sort: by writer and category, then by row, ascending for an
    early writer and descending for the others (early is a property of the writer). Writers past 2**14 (groups past
    2**16 and 2**32) take the two-pass and the int64 paths."""
    import numpy as np

    from windowstore.batch import _flush_order

    writers = [w for w, _c in rows]
    group = np.array([w * 4 + c for w, c in rows], dtype=np.int64)
    early = np.array([(w >> 3 & 3) == early_bit for w in writers], dtype=bool)
    want = sorted(range(len(rows)), key=lambda i: (int(group[i]), i if early[i] else -i))
    assert _flush_order(group, early).tolist() == want


def test_a_batch_of_more_than_16384_records_flushes_in_record_order():
    """Flush groups beyond 16 bits (writers are arrival indexes: 20,000 records in one batch)."""
    rng = random.Random(7)
    recs = [(rng.choice("abcdefgh"), rng.randint(1, 9), i // 3 + rng.choice([0, 0, 0, -5])) for i in range(20_000)]
    recs = [(k, v, max(t, 0)) for k, v, t in recs]
    for make_agg in (Sum, Max):
        by_batch = run(recs, 40, 10, len(recs), make_agg, True)
        by_record = run(recs, 40, 10, len(recs), make_agg, False)
        assert by_batch[2] == 1
        assert by_batch[0] == by_record[0]


def test_stored_columns_never_view_the_batch_scratch_buffers():
    """The all-keys matrices of a batch live in reused scratch buffers; a key's stored windows and raw records
    must be copies, or the next batch would overwrite them."""
    import threading

    import numpy as np

    from windowstore import batch as batch_module

    rng = random.Random(7)
    proc = SlidingWindowProcessor(SlidingWindows(50, 10), Sum(), "update", batch=True)
    reference = SlidingWindowProcessor(SlidingWindows(50, 10), Sum(), "update", batch=False)
    for b in range(6):
        chunk = [(f"k{rng.randrange(5)}", rng.randint(1, 9), b * 40 + i // 3) for i in range(90)]
        assert proc.process_batch(chunk)
        for r in chunk:
            reference.process(*r)
        assert proc.flush() == reference.flush()
        buffers = batch_module._scratch_space.bufs.values()
        for kw in proc.store.keys.values():
            for m in (kw.cols.stacked, kw.raw.matrix):
                assert not any(np.shares_memory(m, buf) for buf in buffers)

    # one buffer per thread: a replay in another thread does not share them
    other = {}
    t = threading.Thread(target=lambda: other.update(m=batch_module._scratch(0, 2, 3)))
    t.start()
    t.join()
    assert not np.shares_memory(other["m"], batch_module._scratch(0, 2, 3))
    assert batch_module._scratch(1, 4, 5).shape == (4, 5) and batch_module._scratch(1, 4, 5).flags["C_CONTIGUOUS"]
