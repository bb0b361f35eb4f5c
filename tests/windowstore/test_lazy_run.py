"""The record path's lazy run (update mode, Count/Sum, keys in order: ``windowstore.lazy.process_fast``)
against the same processor with the lazy run switched off: identical per-record results, flushes, counters,
reads and state blobs, whatever is observed in the middle of a run (flush, reads, exports, expiry)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from windowstore import Count, SlidingWindowProcessor, SlidingWindows, Sum
from windowstore.serde import decode_key_windows, encode_key_windows

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: what happens after a record: nothing, a flush, a read of every window, a blob export, a bulk expiry
ACTIONS = ["none"] * 6 + ["flush", "read", "export", "expire"]


@st.composite
def mostly_in_order(draw):
    """Per key a clock that mostly moves forward (sometimes stays, sometimes jumps back), int values with
    now and then a float or a bool (Sum must then stop being lazy for the key)."""
    td = draw(st.integers(min_value=1, max_value=12))
    grace = draw(st.integers(min_value=0, max_value=30))
    n = draw(st.integers(min_value=1, max_value=80))
    clock = {k: draw(st.integers(min_value=0, max_value=20)) for k in "abc"}
    recs = []
    for _ in range(n):
        k = draw(st.sampled_from("abc"))
        step = draw(st.sampled_from([1, 1, 2, 3, 5, 0, td, -1, -3, -td]))
        clock[k] = max(0, clock[k] + step)
        value = draw(st.one_of(st.integers(min_value=-5, max_value=50), st.sampled_from([0.5, 1e16, True])))
        recs.append((k, value, clock[k], draw(st.sampled_from(ACTIONS))))
    return td, grace, recs


def observe(proc: SlidingWindowProcessor, action: str) -> object:
    if action == "flush":
        return proc.flush()
    if action == "read":
        return list(proc.store.all_windows()), len(proc.store)
    if action == "export":
        blobs = proc.export_keys(proc.dirty_keys())
        return {k: None if b is None else decode_key_windows(b).entries for k, b in blobs.items()}
    if action == "expire":
        return proc.expire(), proc.store.expired
    return None


def trace(case, agg, lazy: bool) -> list:
    td, grace, recs = case
    proc = SlidingWindowProcessor(SlidingWindows(td, grace), agg(), "update")
    if not lazy:
        proc.state.lazy = False
    out = []
    for k, v, t, action in recs:
        if agg is Sum or type(v) is not float:
            out.append(proc.process(k, v, t))
        out.append(observe(proc, action))
    out.append(proc.flush())
    out.append(proc.stats)
    out.append((proc.store.store_time, proc.store.expired, len(proc.store), dict(proc.store.key_max_start)))
    out.append({k: (kw.starts, kw.entries, encode_key_windows(kw)) for k, kw in proc.store.keys.items()})
    return out


@SETTINGS
@given(mostly_in_order(), st.sampled_from([Count, Sum]))
def test_lazy_run_is_invisible(case, agg):
    assert trace(case, agg, lazy=True) == trace(case, agg, lazy=False)


def test_lazy_run_is_taken_in_order():
    """Keys in order do take the lazy run (else the property above would test nothing)."""
    proc = SlidingWindowProcessor(SlidingWindows(10, 10), Sum(), "update")
    proc.process("k", 1, 19)
    proc.process("k", 1, 20)  # the first window containing the next records: [20, 30]
    for t in range(21, 60):
        proc.process("k", 1, t)
        assert proc.store.keys["k"].run.act is not None
    proc.process("k", 0.5, 61)  # a float: Sum stops being lazy for the key
    assert proc.store.keys["k"].run.act is None
    proc.process("k", 1, 62)
    assert proc.store.keys["k"].run.act is None
