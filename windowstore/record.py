"""The reference: Kafka Streams' ``KStreamSlidingWindowAggregate`` record by record, over
:class:`~windowstore.state.EngineState`.

One state is one *task* (one input partition in Kafka Streams): all its keys share one observed stream time
(docs/rules.md R7). :func:`process_record` applies R6-R22 to a record, mirroring ``process`` /
``processReverse`` / ``processEarly`` / ``createWindows`` / ``updateWindowAndForward`` of Kafka Streams
literally (:func:`process_reverse`, :func:`process_early`, :func:`put_new`, :func:`add_new`), including the
partially-late regime (R22b, R31) where that code departs from the declarative window definition (R3).

For one record ``t >= td`` the scan reads window starts in ``[max(0, t - 2*td), t + 1]``, newest first::

    t-2td              t-td                t   t+1
      |------------------|-----------------|----|
      ^ at most one window  windows here    ^    ^ the record's right window (exists?)
        read (leftWinAgg,   contain t and   |
        prev record ts)     get t added     left window [t-td, t] ends exactly at t

then creates, in this order, the previous record's right window ``[prev+1, prev+1+td]``, the left window
``[t-td, t]`` and the right window ``[t+1, t+1+td]`` (a copy of the newest window containing ``t``, taken
before ``t`` was added). Every write of a window whose end is before ``close = st - grace`` is skipped and
counted (R13), except the right-window copy.

Every other path (lazy.py, batch.py) is an accelerator proven identical to this one by property tests.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .cache import open_stamps
from .state import EngineState
from .store import NO_TIMESTAMP, KeyWindows, RawRecords
from .updates import DroppedRecord, DropReason, WindowUpdate

__all__ = [
    "MAX_TIMESTAMP",
    "drop",
    "emission_bounds",
    "emit_step_for",
    "final_updates",
    "maybe_emit_final",
    "process_early",
    "process_record",
    "process_reverse",
]

_new_update = tuple.__new__
#: the largest valid record timestamp: Kafka's timestamps are Java longs (a larger one is invalid, R6)
MAX_TIMESTAMP = (1 << 63) - 1


def process_record(state: EngineState, key: Hashable, value: Any, ts: int) -> list[WindowUpdate]:
    """``process``: one record; returns the updates it emits (``every``: each write; ``close``: the windows
    that closed; ``update``: nothing, the record cache holds the writes). Null key or value and invalid
    timestamps are dropped and counted (R6), late records too (R8); never raised."""
    stats = state.stats
    stats.records += 1
    if key is None or value is None:
        stats.dropped_null += 1
        drop(state, key, value, ts, DropReason.NULL_KEY if key is None else DropReason.NULL_VALUE)
        return []
    if type(ts) is not int:
        if not isinstance(ts, bool) and hasattr(type(ts), "__index__"):  # int subclasses, numpy integers
            ts = ts.__index__()
        else:
            stats.dropped_invalid_timestamp += 1
            drop(state, key, value, ts, DropReason.INVALID_TIMESTAMP)
            return []
    if ts < 0 or ts > MAX_TIMESTAMP:  # Kafka's timestamps are longs (R6)
        stats.dropped_invalid_timestamp += 1
        drop(state, key, value, ts, DropReason.INVALID_TIMESTAMP)
        return []

    st = state.observed_stream_time
    if ts > st:
        state.observed_stream_time = st = ts
    close = st - state.grace
    td = state.td
    if ts + td < close:  # R8: even [t, t+td], the latest window that could hold t, is closed
        stats.dropped_late += 1
        drop(state, key, value, ts, DropReason.LATE)
        return []
    stats.accepted += 1

    out: list[WindowUpdate] = []
    state.out = out if state.is_every else None
    if ts < td:  # R9/R11: early record, no emit-final check
        process_early(state, key, value, ts, close)
        return out
    process_reverse(state, key, value, ts, close)
    if state.is_close:
        maybe_emit_final(state, close, out)
    return out


def process_reverse(
    state: EngineState, key: Hashable, value: Any, t: int, close: int, kw: KeyWindows | None = None
) -> None:
    """``processReverse`` + ``createWindows`` (R10, R12) for a record with ``t >= td``.

    The scan's windows, newest first, fall in four groups (only starts ``>= lo`` are visible): the
    record's right window ``t+1`` (exists?); the windows with ``t-td < s <= t``, which contain ``t``
    before their end (``t`` is added; the newest one's value before that is the right-window copy); the
    left window ``[t-td, t]`` (``t`` is added; its max ts is ``prev``, or shows a duplicate); the newest
    window ending before ``t`` (leftWinAgg, and ``prev``). Writes go newest first, as in Kafka Streams."""
    td = state.td
    store = state.store
    if kw is None:
        kw = store.windows_of(key)  # open_key inline
        store.dirty.add(key)
    if state.plan is not None:
        keep_raw(state, key, kw, value, t, close)
    if state.lazy and kw.run is not None:  # end the run; keep what lazy.process_fast checks true
        run = kw.run
        if run.act is not None:
            kw.settle()
        if run.kmax is not None and t > run.kmax:
            run.kmax = t
        if run.exact and type(value) is not int:
            run.exact = False
    starts = kw.starts
    entries = kw.stored
    lo = t - 2 * td
    if lo < 0:
        lo = 0
    bound = store.read_bound()
    if lo < bound:
        lo = bound
    hi = t + 1
    left = t - td
    i = bisect_right(starts, hi) - 1
    right_created = False
    if i >= 0 and starts[i] == hi and hi >= lo:
        right_created = True
        i -= 1
    j = bisect_right(starts, left, 0, i + 1)  # starts[j:i+1]: t-td < s <= t
    if lo > left:
        j = bisect_left(starts, lo, j, i + 1)
    # the newest window containing t before its end, before t is added: the right window's copy
    ra_ts = -1
    if j <= i:
        e = entries[starts[i]]
        ra_acc = e[0]
        ra_ts = e[1]
        ra_count = e[2]
    # updateWindowAndForward (R13): windows ending before close are skipped (the oldest ones)
    cut = close - td
    m = j if j > i or starts[j] >= cut else bisect_left(starts, cut, j, i + 1)
    skipped = m - j
    updated = i + 1 - m
    inline = state.inline
    inc = None if not inline else 1 if inline == 1 else value  # what Count / Sum add
    step: Callable[[Any], Any]  # acc -> acc with this record folded in (bound only without an integer increment)
    if inc is None:
        step = state.bind(value, key)
    out = state.out
    stamps = None  # update mode: the record cache's stamps of this key (see emit_update)
    if state.is_update:
        stamps = kw.stamps
        if stamps is None:
            stamps = open_stamps(state, key, kw)
        seq = state.seq
    if updated:
        finish = state.finish
        for s in reversed(starts[m : i + 1]):
            e = entries[s]
            e[0] = step(e[0]) if inc is None else e[0] + inc
            if t > e[1]:
                e[1] = t
            e[2] += 1
            if stamps is not None:
                seq += 1
                stamps[s] = seq
            elif out is not None:
                acc = e[0]
                out.append(
                    _new_update(WindowUpdate, (key, s, s + td, acc if finish is None else finish(acc), e[1], e[2]))
                )
        if stamps is not None:
            state.seq = seq
        elif out is not None:
            state.stats.updates_emitted += updated
    prev = -1  # the previous record's timestamp (none: -1, timestamps are >= 0)
    left_created = False
    j -= 1
    if j >= 0 and starts[j] == left and left >= lo:
        left_created = True
        e = entries[left]
        old_ts = e[1]
        if t >= close:
            e[0] = step(e[0]) if inc is None else e[0] + inc
            if t > old_ts:
                e[1] = t
            e[2] += 1
            updated += 1
            state.emit_step(state, key, kw, left, e)
        else:
            skipped += 1
        if old_ts >= t:  # duplicate timestamp: every window it needs exists already (R10.3, R15)
            count_writes(state, updated, skipped)
            return
        prev = old_ts
        j -= 1
    left_agg = None  # the newest window ending before t
    if j >= 0 and starts[j] >= lo:
        left_agg = entries[starts[j]]
        prev = left_agg[1]

    # createWindows (R12): the previous record's right window, the left window (base + value unless
    # closed, R13), the right window (a copy, no close check)
    puts = []
    if prev >= 0:
        p1 = prev + 1
        if p1 not in entries and p1 + td >= t:
            if p1 + td >= close:
                acc = step(state.aggregation.create()) if inc is None else 0 + inc
                puts.append((p1, acc, t, 1))
            else:
                skipped += 1
    if not left_created:
        if t >= close:
            if left_agg is not None and left <= prev:
                acc = step(left_agg[0]) if inc is None else left_agg[0] + inc
                puts.append((left, acc, t, left_agg[2] + 1))
            else:
                acc = step(state.aggregation.create()) if inc is None else 0 + inc
                puts.append((left, acc, t, 1))
        else:
            skipped += 1
    if not right_created and ra_ts > t:
        puts.append((hi, ra_acc, ra_ts, ra_count))
    count_writes(state, updated, skipped)
    if puts:
        put_new(state, key, kw, puts)


def count_writes(state: EngineState, updated: int, skipped: int) -> None:
    stats = state.stats
    if updated:
        stats.windows_updated += updated
    if skipped:
        stats.skipped_windows += skipped


def process_early(state: EngineState, key: Hashable, value: Any, t: int, close: int) -> None:
    """``processEarly`` (R11) for a record with ``0 <= t < td``: the combined window ``[0, td]``."""
    store = state.store
    kw = open_key(state, key, value, t, close)
    starts = kw.starts
    entries = kw.entries  # ends a lazy run
    if state.lazy and kw.run is not None:  # keep what lazy.process_fast checks true
        run = kw.run
        if run.kmax is not None and t > run.kmax:
            run.kmax = t
        if run.exact and type(value) is not int:
            run.exact = False
    lo = store.read_bound()
    if lo < 0:
        lo = 0
    hi = t + 1
    td = state.td
    combined = None
    right_agg = None
    right_created = False
    prev = None
    accumulate = state.accumulate
    for i in range(bisect_left(starts, lo), bisect_right(starts, hi)):
        s = starts[i]
        e = entries[s]
        if s == 0:
            combined = (e[0], e[1], e[2])
            if e[1] < t:
                prev = e[1]
        elif s <= t:
            right_agg = (e[0], e[1], e[2])
            if s + td >= close:
                e[0] = accumulate(e[0], value, key)
                if t > e[1]:
                    e[1] = t
                e[2] += 1
                state.stats.windows_updated += 1
                state.emit_step(state, key, kw, s, e)
            else:
                state.stats.skipped_windows += 1
        else:  # s == t + 1
            right_created = True

    if right_agg is None and combined is not None and combined[1] > t:
        right_agg = combined
    if not right_created and right_agg is not None and right_agg[1] > t:
        create(state, key, kw, hi, right_agg[0], right_agg[1], right_agg[2])
    if prev is not None and prev + 1 not in entries:
        add_new(state, key, kw, prev + 1, state.aggregation.create(), 0, value, t, close)
    if combined is None:
        add_new(state, key, kw, 0, state.aggregation.create(), 0, value, t, close)
    elif td >= close:
        e = entries[0]
        e[0] = accumulate(combined[0], value, key)
        e[1] = combined[1] if combined[1] > t else t
        e[2] = combined[2] + 1
        state.stats.windows_updated += 1
        state.emit_step(state, key, kw, 0, e)
    else:
        state.stats.skipped_windows += 1


def maybe_emit_final(state: EngineState, close: int, out: list[WindowUpdate]) -> None:
    """``maybeForwardFinalResult`` (R27): emit every window that closed since the last emission."""
    if state.emit_interval_ms:
        now = state.clock() * 1000.0
        if now < state.next_emit_ms:
            return
        state.next_emit_ms = now + state.emit_interval_ms
    bounds = emission_bounds(state, close)
    if bounds is None:
        return
    lower, upper = bounds
    bound = max(lower, state.store.read_bound())  # below it: the time-ordered store's retention (R29)
    emitted = final_updates(state, ((s, k) for s, k in zip(*state.pending_close.pop_through(upper)) if s >= bound))
    out.extend(emitted)
    state.stats.updates_emitted += len(emitted)
    state.last_emit_close_time = close


def emission_bounds(state: EngineState, close: int) -> tuple[int, int] | None:
    """``(lower, upper)``: the window starts of the emission round at ``close`` (R27), both inclusive;
    ``None`` when there is no round (nothing closed since the last one, or nothing can be closed yet)::

        last round's close  L              this round's close  C
        starts emitted:  [max(0, L - td) .. C - td - 1]     (a window [s, s + td] is closed once s + td < C)
    """
    last = state.last_emit_close_time
    if last != NO_TIMESTAMP and last >= close:
        return None
    upper = close - state.td - 1
    if upper < 0:
        return None
    return (0 if last == NO_TIMESTAMP else max(0, last - state.td)), upper


def final_updates(state: EngineState, windows: Iterable[tuple[int, Hashable]]) -> list[WindowUpdate]:
    """The final updates of ``windows`` ``(start, key)``, in that order, read from the keys' entries (a key
    held as columns is materialized); a window no longer stored is left out."""
    store = state.store
    finish = state.finish
    td = state.td
    out = []
    for start, key in windows:
        kw = store.load(key)
        e = None if kw is None else kw.stored.get(start)  # close mode: never a lazy run
        if e is not None:
            acc = e[0]
            out.append(
                _new_update(WindowUpdate, (key, start, start + td, acc if finish is None else finish(acc), e[1], e[2]))
            )
    return out


def drop(
    state: EngineState, key: Hashable, value: Any, ts: Any, reason: DropReason, stream_time: int | None = None
) -> None:
    """Keep a dropped record for the caller when ``collect_drops`` is set (the caller has counted it)."""
    if state.collect_drops:
        st = state.observed_stream_time if stream_time is None else stream_time
        state.drops.append(DroppedRecord(key, value, ts, reason, st))


def open_key(state: EngineState, key: Hashable, value: Any, t: int, close: int) -> Any:
    """The key's windows for an accepted record (marked dirty; raw record kept for the batch path)."""
    kw = state.store.windows_of(key)
    state.store.dirty.add(key)
    if state.plan is not None:
        keep_raw(state, key, kw, value, t, close)
    return kw


def keep_raw(state: EngineState, key: Hashable, kw: Any, value: Any, t: int, close: int) -> None:
    plan = state.plan
    assert plan is not None  # the caller's condition
    raw = kw.raw
    if raw is None:
        raw = kw.raw = RawRecords([], [None if kind == "count" else [] for kind, _ in plan])
    i = bisect_right(raw.ts, t)
    raw.ts.insert(i, t)
    for (_kind, field), col in zip(plan, raw.cols):
        if col is not None:
            col.insert(i, value if field is None else value[field])
    if t < close:
        state.flagged_keys.add(key)


def emit_every(state: EngineState, key: Hashable, kw: KeyWindows, start: int, entry: list) -> None:
    """Forward every put (R18, uncached)."""
    finish = state.finish
    acc = entry[0]
    state.out.append(  # type: ignore[union-attr]
        _new_update(
            WindowUpdate, (key, start, start + state.td, acc if finish is None else finish(acc), entry[1], entry[2])
        )
    )
    state.stats.updates_emitted += 1


def emit_update(state: EngineState, key: Hashable, kw: KeyWindows, start: int, entry: list) -> None:
    """Record cache: keep the last put per window, ordered by last put (R21), by stamping the window with
    the next write sequence number (the flush sorts on it); the window's entry is the last put."""
    stamps = kw.stamps
    if stamps is None:
        stamps = open_stamps(state, key, kw)
    state.seq += 1
    stamps[start] = state.seq


def emit_none(state: EngineState, key: Hashable, kw: KeyWindows, start: int, entry: list) -> None:
    """Emit-on-close forwards nothing per put (R26)."""


def create(state: EngineState, key: Hashable, kw: Any, start: int, acc: Any, ts: int, count: int) -> None:
    """Put a window that the scan did not find, and forward it."""
    put_new(state, key, kw, ((start, acc, ts, count),))


def put_new(state: EngineState, key: Hashable, kw: KeyWindows, puts: Iterable[tuple[int, Any, int, int]]) -> None:
    """Put windows ``(start, acc, max_ts, count)`` the scan did not find, in this order, and forward them."""
    store = state.store
    entries = kw.stored  # the callers ended any lazy run
    stamps = None  # update mode: emit_update inline
    if state.is_update:
        stamps = kw.stamps
        if stamps is None:
            stamps = open_stamps(state, key, kw)
    seq = state.seq
    n = 0
    for start, acc, ts, count in puts:
        n += 1
        if start > store.store_time:
            store.store_time = start
        entry = entries.get(start)
        if entry is not None:  # e.g. R20: the previous record's right window is also the left window
            entry[0] = acc
            entry[1] = ts
            entry[2] = count
        else:
            entry = [acc, ts, count]
            if store.insert(key, kw, start, entry) and state.is_close:
                state.pending_close.push(start, key)
        if stamps is not None:
            seq += 1
            stamps[start] = seq
        else:
            state.emit_step(state, key, kw, start, entry)
    state.seq = seq
    state.stats.windows_created += n


def add_new(
    state: EngineState, key: Hashable, kw: Any, start: int, base: Any, base_count: int, value: Any, t: int, close: int
) -> None:
    """``updateWindowAndForward`` for a window being created: ``base + value`` unless closed (R13)."""
    if start + state.td >= close:
        create(state, key, kw, start, state.accumulate(base, value, key), t, base_count + 1)
    else:
        state.stats.skipped_windows += 1


def emit_step_for(emit: Any) -> Any:
    """The emit function of an emit mode (``EngineState.emit_step``)."""
    return {"every": emit_every, "update": emit_update, "close": emit_none}[emit.value]
