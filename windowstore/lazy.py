"""Accelerator of the record path: the lazy run (update mode, exact Count/Sum, no batch path), over
:class:`~windowstore.state.EngineState`.

When a key's records arrive in order, every record adds to the same suffix of the key's windows (those that
start after ``t - td``). :func:`process_fast` keeps that suffix as a lazy run on the key (``KeyWindows.run``,
see :class:`~windowstore.store.LazyRun`) instead of writing each window: O(1) per record plus one write
per window that leaves the run. Any record it does not handle goes to the reference
(:mod:`windowstore.record`), which settles the run first. ``tests/windowstore/test_lazy_run.py`` proves the
results identical to the reference, whatever is observed in the middle of a run.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable
from types import MethodType
from typing import Any

from .cache import open_stamps
from .record import MAX_TIMESTAMP, process_record, process_reverse
from .state import EngineState
from .store import LazyRun
from .updates import WindowUpdate

__all__ = ["process_fast", "record_step"]


def record_step(state: EngineState) -> Callable[[Hashable, Any, Any], list[WindowUpdate]]:
    """``process(key, value, ts)`` for this state: :func:`process_fast` where the lazy run applies
    (``state.lazy``), else the reference :func:`~windowstore.record.process_record`. A method bound to the
    state (not to a processor): the hot loops call it once per record, at the cost of a bound method."""
    return MethodType(process_fast if state.lazy else process_record, state)


def process_fast(state: EngineState, key: Hashable, value: Any, t: Any) -> list[WindowUpdate]:
    """``process`` for update mode with Count/Sum (and no batch path). A valid record with
    ``t >= td`` and ``t >= close`` (not late, no write skipped) whose key is in order - ``t`` is at least
    every max ts of the key and no window starts after ``t`` - adds ``t`` to exactly the suffix of the key's
    windows that start after ``t - td``: that suffix is kept as a lazy run on the key (see
    :class:`~windowstore.store.LazyRun`), O(1) per record plus one write per window leaving the run.
    Sum is lazy only while every sum of the key is an ``int`` (exact). Anything else takes the reference,
    :func:`~windowstore.record.process_record` or :func:`~windowstore.record.process_reverse`, which end the
    run first."""
    if key is None or value is None or type(t) is not int or t < state.td or not state.lazy:
        return process_record(state, key, value, t)
    st = state.observed_stream_time
    if t > st:
        if t > MAX_TIMESTAMP:
            return process_record(state, key, value, t)
        state.observed_stream_time = st = t
    close = st - state.grace
    if t < close:  # late, or some of its windows are closed
        return process_record(state, key, value, t)
    stats = state.stats
    stats.records += 1
    stats.accepted += 1
    store = state.store
    kw = store.keys.get(key)
    if kw is None or kw.cols is not None or kw.raw is not None:
        kw = store.windows_of(key)
    else:  # windows_of inline: purge (past the slack) the windows no read can see any more
        starts = kw.starts
        if starts and starts[0] < store.store_time - store.trim_lag:  # type: ignore[operator]  # update mode: set
            dropped = kw.trim_below(store.store_time - store.purge_lag)  # type: ignore[operator]
            store.expired += dropped
            store.size -= dropped
    store.dirty.add(key)
    run = kw.run
    if run is None:
        run = kw.run = LazyRun()
    inc = 1
    if state.inline == 2 and (type(value) is not int or run.exact is not True):  # Sum: while sums are ints
        if type(value) is not int:
            run.exact = False
            process_reverse(state, key, value, t, close, kw)
            return []
        if run.exact is None:
            run.exact = all(type(e[0]) is int for e in kw.stored.values())
        if not run.exact:
            process_reverse(state, key, value, t, close, kw)
            return []
    if state.inline == 2:
        inc = value
    kmax = run.kmax
    if kmax is None:
        kmax = run.kmax = max([e[1] for e in kw.stored.values()], default=-1)
    starts = kw.starts
    if t < kmax or (starts and starts[-1] > t):
        process_reverse(state, key, value, t, close, kw)
        return []
    td = state.td
    entries = kw.stored
    n = len(starts)
    left = t - td
    j = bisect_right(starts, left)  # starts[j:]: t - td < s <= t, every window containing t
    updated = n - j
    stamps = kw.stamps
    if stamps is None:
        stamps = open_stamps(state, key, kw)
    seq = state.seq
    act = run.act
    if act is not None:
        a = j - 1 if j and starts[j - 1] == act else bisect_left(starts, act)  # usually one window leaves
        if a > j:  # windows before the run would join it (not expected in order): start a new run
            kw.settle()
            act = None
        elif a < j:  # windows leaving the run (they no longer contain the newest record): real values back
            end = run.end
            if a + 1 == j and starts[a] <= end:  # KeyWindows.settle_range inline for the usual one window
                e = entries[starts[a]]
                e[0] += run.g
                e[1] = run.t
                e[2] += run.c
                ie = n - 2 if n > 1 and starts[n - 2] == end else bisect_left(starts, end)  # usually n - 2
                stamps[starts[a]] = run.seq + 1 + ie - a
            else:
                kw.settle_range(run, a, j)
        if not updated:
            run.act = None
    if updated:
        if act is None:  # a new run
            run.g = inc
            run.c = 1
        else:
            run.g += inc
            run.c += 1
        run.act = starts[j]
        run.t = t
        run.end = starts[-1]
        run.seq = seq
        seq += updated
    run.kmax = t
    lo = t - 2 * td
    prev = -1  # the previous record's timestamp (none: -1)
    x = j - 1
    left_created = False
    if x >= 0 and starts[x] == left:
        left_created = True
        e = entries[left]
        old_ts = e[1]
        e[0] += inc
        if t > old_ts:
            e[1] = t
        e[2] += 1
        updated += 1
        seq += 1
        stamps[left] = seq
        if old_ts >= t:  # duplicate timestamp: every window it needs exists already (R10.3, R15)
            state.seq = seq
            stats.windows_updated += updated
            return []
        prev = old_ts
        x -= 1
    la = None  # the newest window ending before t
    if x >= 0 and starts[x] >= lo:
        la = entries[starts[x]]
        prev = la[1]
    # createWindows (R12): the previous record's right window, the left window; no right window (t is
    # the key's newest timestamp); nothing is closed (t >= close)
    created = 0
    at = j  # where the left window goes: between the older windows and the run
    if prev >= 0:
        p1 = prev + 1
        if p1 + td >= t and p1 not in entries:
            created += 1
            seq += 1
            if not starts or p1 > starts[-1]:
                if run.act is not None:  # joins the run: stored minus the run totals
                    e = [inc - run.g, t, 1 - run.c]
                else:
                    e = [inc, t, 1]
                entries[p1] = e
                starts.append(p1)
                store.key_max_start[key] = p1
                store.size += 1
            else:  # not after every window (not expected in order): end the run, then an ordinary insert
                if p1 != left:
                    kw.settle()
                store.insert(key, kw, p1, [inc, t, 1])
                at = bisect_left(starts, left)
            stamps[p1] = seq
            if p1 > store.store_time:
                store.store_time = p1
    if not left_created:
        created += 1
        seq += 1
        if la is not None and left <= prev:
            e = [la[0] + inc, t, la[2] + 1]
        else:
            e = [inc, t, 1]
        if left in entries:  # R20: the previous record's right window is also the left window
            entries[left][:] = e
        else:  # store.insert inline (update mode reads everything): before the run, or the newest window
            entries[left] = e
            if starts and left < starts[-1]:
                starts.insert(at, left)
            else:
                starts.append(left)
                store.key_max_start[key] = left
            store.size += 1
        stamps[left] = seq
        if left > store.store_time:
            store.store_time = left
    state.seq = seq
    if updated:
        stats.windows_updated += updated
    if created:
        stats.windows_created += created
    return []
