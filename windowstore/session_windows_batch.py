"""The batch path for session windows, emit mode ``update``: a micro-batch merged per key in one pass, with the
record cache's writes reduced to the ones a flush can see.

The reference record path (:class:`windowstore.session_windows.SessionWindowProcessor`, rules S1-S12 of
``docs/rules-window-types.md``) writes every intermediate session to the record cache: a key's records
``A@10 A@12 A@14`` put ``[10,10]``, remove it, put ``[10,12]``, remove it, put ``[10,14]``. In update mode only
the last write of each session reaches the flush, and a removed session that was never flushed forwards nothing
(S7: ``putAndMaybeForward`` finds no old session in the store). So this path groups the batch by key and walks
each key's records once, in arrival order, over the key's sessions as two sorted lists of bounds (starts, ends) -
in update mode a key's sessions never overlap and are more than ``gap`` apart (nothing is hidden from a merge),
so a record reaches at most the session before it and the one after it (two bisections)::

    gap = 5, cached [10,12] (flushed) and [20,24]; batch A@16 A@30
    A@16: reaches [10,12] (12 >= 16-5) and [20,24] (20 <= 16+5) -> [10,24]; [10,12], [20,24] removed
    A@30: reaches [10,24] (24 >= 30-5)                       -> [10,30]; [10,24] was never flushed: no write
    cache writes: remove [10,12], remove [20,24] (at A@16, ascending end), put [10,30] (at A@30)

Values are folded with the session merger (``combine``) and kept per session, so a merge costs one ``combine``
per part whatever the session's length. Writes kept: the removal of each session that existed before the batch
(at the record that replaced it; a record inside a session re-puts the same bounds, S6), and the put of every
session the batch touched (at its last record). The record cache orders them by last write - (record index,
removals before the put, removals by ascending end) - exactly as the record path leaves them, and the processor's
:meth:`~SessionWindowProcessor.flush` then forwards what it forwards (tombstones included).

Most keys of a topic written in order need no walk at all: when a key's records in the batch are in time order
and none is before the end of a cached session it reaches, its sessions are the runs of its records with no
silence longer than ``gap``, the first run joined to the cached session before it (whose removal is written at the
first record past its end). Those runs are found for all such keys at once over the batch sorted by key (numpy;
int64 sums while no sum can overflow, Python ints otherwise); the other keys are walked as above.

It falls back to the record path, record by record, where it could not be identical: emit modes ``every`` and
``close`` (their stores hide sessions from merges by retention and drop segments mid-batch, S7/S10; their output
is per record); a record not ahead of close time (``t <= streamTime - grace - gap``: whether it is late, S5,
depends on the sessions it merges, and such a record may reach a session the cache has forgotten); aggregations
that are not exact whatever the order (anything but count, sum, min, max, mean on ints, their ``Field`` s and
composites), a merger passed by the caller, a float accumulator in a cached session.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence
from itertools import pairwise
from typing import Any, Protocol

import numpy as np

from .aggregations import Aggregation, Composite
from .family_common import FamilyStats, valid_timestamp
from .time_windows_batch import BatchFallback, batch_kinds, merge_part, one_part, part_column
from .updates import DroppedRecord, DropReason, EmitMode, WindowUpdate

__all__ = ["SessionCache", "process_batch", "run_batch"]


class _Gaps(Protocol):
    @property
    def gap_ms(self) -> int: ...

    @property
    def grace_ms(self) -> int: ...


class SessionCache(Protocol):
    """What this path uses of :class:`~windowstore.session_windows.SessionWindowProcessor` (which imports this
    module for its ``process_columns``): its definition, stream time, counters and drops, the record path, and the
    update mode's cache contract (``cached_sessions`` / ``write_sessions``)."""

    aggregation: Aggregation
    emit: EmitMode
    default_merger: bool
    observed_stream_time: int
    stats: FamilyStats
    collect_drops: bool
    drops: list[DroppedRecord]

    @property
    def windows(self) -> _Gaps: ...

    def process(self, key: Hashable, value: Any, ts: Any) -> list[WindowUpdate]: ...

    def cached_sessions(
        self, key: Hashable, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, Any, int]]: ...

    def write_sessions(self, ops: list[tuple[Hashable, int, int, Any, int] | tuple[Hashable, int, int]]) -> None: ...


def process_batch(
    proc: SessionCache, keys: Sequence[Hashable], timestamps: Sequence[Any], values: Sequence[Any]
) -> list[WindowUpdate]:
    """Process the records ``(keys[i], values[i], timestamps[i])`` in order, as ``proc.process`` would one by
    one, and return the concatenation of what those calls return (``update`` mode: nothing - call
    ``proc.flush()``)."""
    return run_batch(proc, keys, timestamps, values)[1]


def run_batch(
    proc: SessionCache, keys: Sequence[Hashable], timestamps: Sequence[Any], values: Sequence[Any]
) -> tuple[bool, list[WindowUpdate]]:
    """:func:`process_batch`, and whether the batch path took the records (else the record path did)."""
    if not (len(keys) == len(timestamps) == len(values)):
        raise ValueError(f"columns differ in length: {len(keys)} keys, {len(timestamps)} timestamps, {len(values)}")
    kinds = batch_kinds(proc.aggregation)
    if proc.emit is EmitMode.UPDATE and kinds is not None and proc.default_merger:
        try:
            _process(proc, kinds, keys, timestamps, values)
            return True, []
        except BatchFallback:
            pass
    process = proc.process
    out: list[WindowUpdate] = []
    for k, v, t in zip(keys, values, timestamps, strict=True):
        out += process(k, v, t)
    return False, out


def _check_held(kinds: list[tuple[str, str | None]], parts: Sequence[Any]) -> None:
    """A cached session's accumulator parts are ints (else regrouping could round differently)."""
    for (kind, _f), p in zip(kinds, parts, strict=True):
        x = p[1] if kind == "mean" else p
        if type(x) is not int:
            raise BatchFallback


def _process(
    proc: SessionCache,
    kinds: list[tuple[str, str | None]],
    keys: Sequence[Hashable],
    timestamps: Sequence[Any],
    values: Sequence[Any],
) -> None:
    ts = _int_timestamps(timestamps)
    if ts is None or None in keys:  # null keys or timestamps to drop or convert: record by record per key
        _process_rows(proc, kinds, keys, timestamps, values)
        return
    gap = proc.windows.gap_ms
    lag = proc.windows.grace_ms + gap
    st0 = proc.observed_stream_time
    n = len(ts)
    if n == 0:
        return
    running = np.maximum.accumulate(np.maximum(ts, st0))  # S3: stream time after each record
    if bool((ts <= running - lag).any()):  # S4/S5: possibly late - only the record path can tell
        raise BatchFallback
    code_of: dict[Hashable, int] = {}
    codes = np.fromiter((code_of.setdefault(k, len(code_of)) for k in keys), np.int64, n)
    uniq = list(code_of)
    order = np.argsort(codes, kind="stable")  # by key, arrival order within a key
    cs = codes[order]
    tss = ts[order]
    same_key = cs[1:] == cs[:-1]
    key_first = np.flatnonzero(np.concatenate(([True], ~same_key)))
    key_lo = np.minimum.reduceat(tss, key_first).tolist()
    key_hi = np.maximum.reduceat(tss, key_first).tolist()
    unordered = set(cs[1:][same_key & (tss[1:] < tss[:-1])].tolist())  # keys whose records go back in time
    cols = [part_column(kind, field, list(values)) for kind, field in kinds]
    single = type(proc.aggregation) is not Composite
    cached = proc.cached_sessions
    ops: list[tuple[tuple[int, int, int, int], tuple[Any, ...]]] = []
    created = updated = merged = 0
    # a key whose records are in order and start at or after its cached sessions' ends (the usual case): its
    # sessions are the runs of its records without a silence > gap, the first joined to the session before it
    held_of: dict[int, tuple[int, int, list[Any], int]] = {}
    slow: list[int] = []
    for c, k in enumerate(uniq):
        lo = key_lo[c]
        held = cached(k, lo - gap, key_hi[c] + gap)
        if c in unordered or (held and (len(held) > 1 or held[0][1] > lo)):
            slow.append(c)
            continue
        if held:
            s, e, acc, count = held[0]
            parts = [acc] if single else list(acc)
            _check_held(kinds, parts)
            held_of[c] = (s, e, parts, count)
    order_l = order.tolist()
    if slow:
        key_last = [*key_first[1:].tolist(), n]
        first_l = key_first.tolist()
        for c in slow:
            k = uniq[c]
            rows = [(ts_i, i) for i in order_l[first_l[c] : key_last[c]] for ts_i in (int(ts[i]),)]
            c_, u_, m_ = _walk_key(proc, kinds, cols, single, gap, k, rows, ops)
            created += c_
            updated += u_
            merged += m_
    # the runs of the ordered keys, over the records sorted by (key, arrival)
    starts = np.flatnonzero(np.concatenate(([True], ~same_key | (tss[1:] - tss[:-1] > gap))))
    ends = np.concatenate((starts[1:], [n])) - 1
    run_code = cs[starts].tolist()
    run_key_first = np.concatenate(([True], cs[starts][1:] != cs[starts][:-1])).tolist()
    run_lo = tss[starts].tolist()
    run_hi = tss[ends].tolist()
    run_count = (ends - starts + 1).tolist()
    run_last = order[ends].tolist()
    run_parts = [_run_part(kind, col, order, starts, run_count, n) for (kind, _f), col in zip(kinds, cols, strict=True)]
    tss_l = tss.tolist()
    starts_l = starts.tolist()
    ends_l = ends.tolist()
    slow_set = set(slow)
    for j, c in enumerate(run_code):
        if c in slow_set:
            continue
        k = uniq[c]
        ns, ne, count = run_lo[j], run_hi[j], run_count[j]
        parts = [p[j] for p in run_parts]
        h = held_of.get(c) if run_key_first[j] else None
        if h is None:
            created += 1
            updated += count - 1
        else:
            hs, he, hparts, hcount = h
            updated += count
            parts = [merge_part(kind, x, y) for (kind, _f), x, y in zip(kinds, hparts, parts, strict=True)]
            count += hcount
            ns = hs
            if ne > he:  # the first record past the held session's end replaced it (S6)
                at = bisect.bisect_right(tss_l, he, starts_l[j], ends_l[j] + 1)
                ops.append(((order_l[at], 0, he, hs), (k, hs, he)))
            else:
                ne = he
        ops.append(((run_last[j], 1, 0, 0), (k, ns, ne, parts[0] if single else tuple(parts), count)))
    _write(proc, ops, n, n, (created, updated, merged))
    proc.observed_stream_time = int(running[-1])


def _write(
    proc: SessionCache,
    ops: list[tuple[tuple[int, int, int, int], tuple[Any, ...]]],
    records: int,
    accepted: int,
    counts: tuple[int, int, int],
) -> None:
    """The cache writes in the record cache's last-write order, and the batch's counters (``counts``: sessions
    created, updated, merged)."""
    ops.sort(key=lambda op: op[0])
    proc.write_sessions([op for _order, op in ops])
    stats = proc.stats
    stats.records += records
    stats.accepted += accepted
    stats.windows_created += counts[0]
    stats.windows_updated += counts[1]
    stats.sessions_merged += counts[2]


def _int_timestamps(timestamps: Sequence[Any]) -> np.ndarray | None:
    """The timestamps as int64 when every one is a valid (non-negative) int, else ``None``."""
    if isinstance(timestamps, np.ndarray):
        ts = timestamps
    else:
        if not all(type(t) is int for t in timestamps):
            return None
        try:
            ts = np.array(timestamps, dtype=np.int64)
        except OverflowError:
            return None
    if ts.dtype.kind not in "iu" or (len(ts) and int(ts.min()) < 0):
        return None
    return ts.astype(np.int64, copy=False)


#: the batch's parts are summed in int64 while no sum can reach this (else as Python ints)
_SUM_BOUND = 2**62


def _run_part(kind: str, col: list[Any], order: np.ndarray, starts: np.ndarray, counts: list[int], n: int) -> list[Any]:
    """One part over each run of records (sorted positions ``starts``, lengths ``counts``), as
    :func:`one_part` values folded with :func:`merge_part` would give it: Python ints."""
    if kind == "count":
        return counts
    try:
        a = np.array(col, dtype=np.int64)[order]
    except OverflowError:
        a = None
    if a is not None and n and (kind in ("min", "max") or int(np.abs(a).max()) < _SUM_BOUND // n):
        if kind == "min":
            return np.minimum.reduceat(a, starts).tolist()
        if kind == "max":
            return np.maximum.reduceat(a, starts).tolist()
        sums = np.add.reduceat(a, starts).tolist()
        return sums if kind == "sum" else list(zip(counts, sums))
    vals = [col[i] for i in order.tolist()]  # Python ints: exact whatever their size
    bounds = [*starts.tolist(), n]
    out: list[Any] = []
    for lo, hi in pairwise(bounds):
        run = vals[lo:hi]
        if kind == "min":
            out.append(min(run))
        elif kind == "max":
            out.append(max(run))
        elif kind == "sum":
            out.append(sum(run))
        else:
            out.append((hi - lo, sum(run)))
    return out


def _walk_key(
    proc: SessionCache,
    kinds: list[tuple[str, str | None]],
    cols: Sequence[Any],
    single: bool,
    gap: int,
    k: Hashable,
    rows: list[tuple[int, int]],
    ops: list[tuple[tuple[int, int, int, int], tuple[Any, ...]]],
) -> tuple[int, int, int]:
    """One key's records ``rows`` ((timestamp, record index), arrival order) walked over its cached sessions:
    the cache writes appended to ``ops`` with their last-write order; returns (created, updated, merged).
    ``cols[p][i]``: part ``p``'s input of record ``i``."""
    lo_t = min(t for t, _i in rows)
    hi_t = max(t for t, _i in rows)
    starts: list[int] = []
    ends: list[int] = []
    accs: list[list[Any]] = []
    counts: list[int] = []
    held: list[tuple[int, int] | None] = []  # bounds of a session cached before the batch, while unchanged
    last: list[int] = []  # index of the record that last wrote the session (-1: none yet)
    created = updated = merged = 0
    for s, e, acc, count in proc.cached_sessions(k, lo_t - gap, hi_t + gap):  # disjoint: by end = by start
        parts = [acc] if single else list(acc)
        _check_held(kinds, parts)
        starts.append(s)
        ends.append(e)
        accs.append(parts)
        counts.append(count)
        held.append((s, e))
        last.append(-1)
    for t, i in rows:  # arrival order
        j = bisect.bisect_right(starts, t)
        a = j - 1 if j and ends[j - 1] >= t - gap else j  # S2: end >= t - gap ...
        b = j + 1 if j < len(starts) and starts[j] <= t + gap else j  # ... and start <= t + gap
        value = [one_part(kind, col[i]) for (kind, _f), col in zip(kinds, cols, strict=True)]
        if a == b:
            created += 1
            starts.insert(j, t)
            ends.insert(j, t)
            accs.insert(j, value)
            counts.insert(j, 1)
            held.insert(j, None)
            last.insert(j, i)
            continue
        updated += 1
        merged += b - a - 1
        ns = min(starts[a], t)
        ne = max(ends[b - 1], t)
        count = 1
        tag = None
        for m in range(a, b):  # S6: found sessions in ascending end, the record last
            value = [merge_part(kind, x, y) for (kind, _f), x, y in zip(kinds, accs[m], value, strict=True)]
            count += counts[m]
            h = held[m]
            if h is not None:
                if h == (ns, ne):
                    tag = h  # a record inside a cached session: removed and put again under the same bounds
                else:
                    ops.append(((i, 0, h[1], h[0]), (k, h[0], h[1])))
        starts[a:b] = [ns]
        ends[a:b] = [ne]
        accs[a:b] = [value]
        counts[a:b] = [count]
        held[a:b] = [tag]
        last[a:b] = [i]
    for m, i in enumerate(last):
        if i >= 0:
            parts = accs[m]
            ops.append(((i, 1, 0, 0), (k, starts[m], ends[m], parts[0] if single else tuple(parts), counts[m])))
    return created, updated, merged


def _process_rows(
    proc: SessionCache,
    kinds: list[tuple[str, str | None]],
    keys: Sequence[Hashable],
    timestamps: Sequence[Any],
    values: Sequence[Any],
) -> None:
    """The batch with null keys or timestamps to check one by one: every key walked by :func:`_walk_key`."""
    gap = proc.windows.gap_ms
    lag = proc.windows.grace_ms + gap
    st = proc.observed_stream_time
    n_null = n_invalid = 0
    dropped: list[DroppedRecord] = []  # collect_drops: null keys and invalid timestamps, as the record path
    by_key: dict[Hashable, list[tuple[int, int]]] = {}
    for i, k in enumerate(keys):
        if k is None:  # S9: dropped before stream time moves
            n_null += 1
            if proc.collect_drops:
                dropped.append(DroppedRecord(k, values[i], timestamps[i], DropReason.NULL_KEY, st))
            continue
        t = timestamps[i]
        if type(t) is not int or t < 0:
            t = valid_timestamp(t)
            if t is None:
                n_invalid += 1
                if proc.collect_drops:
                    dropped.append(DroppedRecord(k, values[i], timestamps[i], DropReason.INVALID_TIMESTAMP, st))
                continue
        if t > st:  # S3
            st = t
        if t <= st - lag:  # S4/S5: possibly late - only the record path can tell
            raise BatchFallback
        rows = by_key.get(k)
        if rows is None:
            by_key[k] = [(t, i)]
        else:
            rows.append((t, i))
    contributing = sorted(i for rows in by_key.values() for _t, i in rows)
    cols = [
        dict(zip(contributing, part_column(kind, field, [values[i] for i in contributing]), strict=True))
        for kind, field in kinds
    ]
    single = type(proc.aggregation) is not Composite
    ops: list[tuple[tuple[int, int, int, int], tuple[Any, ...]]] = []
    created = updated = merged = 0
    for k, rows in by_key.items():
        c_, u_, m_ = _walk_key(proc, kinds, cols, single, gap, k, rows, ops)
        created += c_
        updated += u_
        merged += m_
    _write(proc, ops, len(keys), len(contributing), (created, updated, merged))
    proc.stats.dropped_null_key += n_null
    proc.stats.dropped_invalid_timestamp += n_invalid
    proc.observed_stream_time = st
    proc.drops += dropped
