"""Session windows with Kafka Streams' ``SessionWindows`` / ``KStreamSessionWindowAggregate`` semantics.

Rule numbers (S1..) refer to ``docs/rules-window-types.md``.

A session is ``[start, end]``, BOTH ends inclusive (``SessionWindow``): the first and the last record timestamp of
a run of records of one key with no silence longer than ``gap`` (S1). A record at ``t`` looks for the key's
sessions that end at ``>= t - gap`` and start at ``<= t + gap`` and merges all it finds with itself (S2)::

    gap = 5
    A@10  A@12                A@20  A@24          sessions [10,12] and [20,24]
    |=====|                   |======|
    A@16 bridges them: 16-5 = 11 <= 12 and 16+5 = 21 >= 20
    |=================================|          -> tombstones for [10,12], [20,24]; then [10,24]

Close (S4). ``st`` = stream time of the task, ``close = st - grace - gap``. A record whose merged session ends
before ``close`` is dropped and counted (S5); emit-on-close emits a session once its end is below ``close`` (S10)::

    session [10,24]   gap 5   grace 3
    |==============|- - - - -|- - -|
                   24        29    32
    st = 32: close 24 = end -> still open    st = 33: close 25 > 24 -> closed, emitted

Kafka Streams' stores shape what a record can see (S7, ``docs/rules-window-types.md``): the RocksDB session store
hides sessions ending at or before ``storeStreamTime - (gap + grace)`` from a merge, one step before the processor
calls them closed; the record cache (emit mode ``update``) hides nothing and forwards a replaced session's tombstone
only when the store still returns the old session; emit-on-close loses sessions whose store segment was dropped.
This module models the three stores exactly: :class:`SessionWindowProcessor` is the reference record path.

External state (the :class:`~windowstore.contract.TaskProcessor` contract): the task meta
(:meth:`~SessionWindowProcessor.export_meta`) holds the stream times, each key's largest session end (so a key
whose sessions are all past reach is deleted without being read), close mode's sessions not yet emitted (their
emission crosses keys), update mode's unflushed cache entries (tombstones pending included) and the counters; a key
blob (:meth:`~SessionWindowProcessor.export_keys`) holds the key's sessions and, in update mode, which of them the
store under the cache holds (a later tombstone depends on it). A restored processor reads a key's blob the first
time the key is used and drops what the writing processor would have dropped since: the sessions of store
segments dropped meanwhile (S7), the store copies hidden meanwhile. Forgetting what no read can reach (the cache's
unreachable sessions, dead keys) changes no output, only memory.
"""

from __future__ import annotations

import bisect
import heapq
import pickle
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

import numpy as np

from . import session_windows_batch
from .aggregations import Aggregation, Composite
from .columns import exact_column
from .family_common import FamilyStats, check_millis, java_div, key_bytes, valid_timestamp
from .serde import StateFormatError
from .session_merge import Merger, session_merger
from .updates import DroppedRecord, DropReason, EmitMode, WindowUpdate
from .windows import ConfigError

__all__ = ["SessionWindowProcessor", "SessionWindows", "is_tombstone"]

_NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class SessionWindows:
    """Kafka Streams ``SessionWindows.ofInactivityGapAndGrace(gap, grace)`` (S1): ``gap >= 0`` (Kafka Streams
    accepts 0: only records at the same instant share a session), ``grace >= 0``; the store retention defaults to
    ``gap + grace`` and may not be smaller. Store segments span ``max(retention / 2, 60000)`` ms of session end."""

    gap_ms: int
    grace_ms: int = 0
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        check_millis("gap_ms", self.gap_ms, minimum=0)
        check_millis("grace_ms", self.grace_ms, minimum=0)
        if self.retention_ms is not None:
            check_millis("retention_ms", self.retention_ms, minimum=self.gap_ms + self.grace_ms)

    @property
    def retention(self) -> int:
        return self.gap_ms + self.grace_ms if self.retention_ms is None else self.retention_ms

    @property
    def segment_interval(self) -> int:
        """``RocksDbSessionBytesStoreSupplier.segmentIntervalMs``."""
        return max(self.retention // 2, 60_000)


def is_tombstone(update: WindowUpdate) -> bool:
    """A session update that deletes the session (a merge or extension replaced it): ``count == 0``."""
    return update.count == 0


class _Session:
    __slots__ = ("acc", "count", "end", "start")

    def __init__(self, start: int, end: int, acc: Any, count: int) -> None:
        self.start = start
        self.end = end
        self.acc = acc
        self.count = count


class _KeySessions:
    """One key's sessions, indexed twice so a lookup costs O(log n + sessions in range), not O(n):
    ``by_end`` = sorted ``(end, start)``, ``by_start`` = sorted ``(start, end)``. In every/close mode a key's
    sessions may overlap (a session the store hid from a merge stays beside the new one, S7), so neither list alone
    bounds a range query: :meth:`find` scans the shorter of "end >= lo" (a suffix of ``by_end``) and
    "start <= hi" (a prefix of ``by_start``) and filters on the other bound."""

    __slots__ = ("by_end", "by_start", "flushed", "sessions")

    def __init__(self) -> None:
        self.sessions: dict[tuple[int, int], _Session] = {}
        self.by_end: list[tuple[int, int]] = []
        self.by_start: list[tuple[int, int]] = []
        #: update mode: bounds of the key's sessions the store under the cache holds (flushed puts, S7)
        self.flushed: set[tuple[int, int]] = set()

    def __len__(self) -> int:
        return len(self.sessions)

    def empty(self) -> bool:
        """Nothing of the key is left: no session, no flushed copy."""
        return not self.sessions and not self.flushed

    def __contains__(self, sk: tuple[int, int]) -> bool:
        return sk in self.sessions

    def get(self, start: int, end: int) -> _Session | None:
        return self.sessions.get((start, end))

    def values(self) -> Any:
        return self.sessions.values()

    def put(self, s: _Session) -> bool:
        """Store ``s`` (replacing a session with the same bounds); True when the bounds were new."""
        sk = (s.start, s.end)
        existed = sk in self.sessions
        self.sessions[sk] = s
        if not existed:
            bisect.insort(self.by_start, sk)
            bisect.insort(self.by_end, (s.end, s.start))
        return not existed

    def remove(self, start: int, end: int) -> None:
        del self.sessions[(start, end)]
        by_start = self.by_start
        del by_start[bisect.bisect_left(by_start, (start, end))]
        by_end = self.by_end
        del by_end[bisect.bisect_left(by_end, (end, start))]

    def find(self, lo: int, hi: int) -> list[_Session]:
        """Sessions with ``end >= lo`` and ``start <= hi``, ascending (end, start)."""
        by_end = self.by_end
        i = bisect.bisect_left(by_end, (lo,))
        j = bisect.bisect_right(self.by_start, (hi, _MAX))
        sessions = self.sessions
        if len(by_end) - i <= j:
            return [sessions[(st, en)] for en, st in by_end[i:] if st <= hi]
        found = [sessions[sk] for sk in self.by_start[:j] if sk[1] >= lo]
        if len(found) > 1:
            found.sort(key=lambda s: (s.end, s.start))
        return found

    def next_start_after(self, t: int) -> _Session | None:
        """The session with the smallest start ``> t`` (ties: smallest end)."""
        by_start = self.by_start
        i = bisect.bisect_right(by_start, (t, _MAX))
        return self.sessions[by_start[i]] if i < len(by_start) else None


_MAX: Any = float("inf")  # sorts after every integer timestamp

#: version of :meth:`SessionWindowProcessor.export_meta` and of its key blobs
META_FORMAT = 1

Loader = Callable[[Hashable], bytes | None]


class SessionWindowProcessor:
    """The reference record path for one task: mirrors ``KStreamSessionWindowAggregateProcessor`` over Kafka
    Streams' default stores (S7): ``every`` = uncached RocksDB session store, ``update`` = record cache over it,
    ``close`` = time-ordered session store, caching forced off.

    ``process(key, value, ts)`` returns what Kafka Streams forwards for the record: tombstones (value ``None``,
    ``count == 0``, :func:`is_tombstone`) for each replaced session and then the new session (``every``); the
    sessions the record closed (``close``); nothing (``update``: :meth:`flush`). ``start``/``end`` are
    ``Window.start()``/``end()``, both inclusive; the output timestamp is always the session's end (S8).

    It is a :class:`~windowstore.contract.TaskProcessor`: see "External state" in the module docstring for
    :meth:`export_meta` / :meth:`export_keys` / :meth:`from_state`. ``collect_drops`` keeps every dropped record
    (null key, invalid timestamp, late) for :meth:`take_drops`; ``batch`` asks for the batch path
    (:meth:`process_columns`, :mod:`windowstore.session_windows_batch`).
    """

    def __init__(
        self,
        windows: SessionWindows,
        aggregation: Aggregation,
        emit: EmitMode | str = EmitMode.UPDATE,
        merger: Merger | None = None,
        *,
        collect_drops: bool = False,
        batch: bool = False,
    ) -> None:
        self.windows = windows
        self.aggregation = aggregation
        self.merger = merger if merger is not None else session_merger(aggregation)
        #: the merger is the aggregation's own (``combine``), not one the caller passed
        self.default_merger = merger is None
        self.emit = EmitMode.parse(emit)
        self.stats = FamilyStats()
        self.collect_drops = collect_drops
        #: the records dropped since the last :meth:`take_drops` (``collect_drops``)
        self.drops: list[DroppedRecord] = []
        self._batch = batch
        self.observed_stream_time = _NO_TIMESTAMP
        self.last_emit_close_time = _NO_TIMESTAMP
        #: the store's observedStreamTime: largest session end put or removed (update mode: flushed) so far
        self.store_stream_time = _NO_TIMESTAMP
        # every/close: the RocksDB store; update: the record cache (everything ever written, latest value) - the
        # keys in memory; a key of ``_key_end`` that is not here is in the loader's storage, loaded on first use
        self._sessions: dict[Hashable, _KeySessions] = {}
        # every key that holds anything (in memory or in storage) -> the largest session end it ever held
        self._key_end: dict[Hashable, int] = {}
        self._loader: Loader | None = None
        # close mode after a restore: _by_end holds the sessions of keys not loaded yet whose end >= this
        self._index_floor: Any = _MAX
        # every/close: (end, start, key bytes, key) of every stored session, ascending (segments, emission order)
        self._by_end: list[tuple[int, int, bytes, Hashable]] = []
        # update mode: dirty cache entries in last-write order, (key, start, end) -> (acc, count) or None
        self._dirty: dict[tuple[Hashable, int, int], tuple[Any, int] | None] = {}
        # update mode: a heap to forget the store's copies (_KeySessions.flushed) once hidden
        self._flushed_heap: list[tuple[int, bytes, int, Hashable]] = []
        # update mode: candidates to leave the cache, by the time they may become unreachable (end + gap)
        self._cache_heap: list[tuple[int, bytes, int, int, Hashable]] = []
        # the batch path's forwarded updates (every/close fall back to the record path), for the next flush
        self._emitted: list[WindowUpdate] = []
        self._changed: set[Hashable] = set()  # keys whose blob changed since clear_dirty_keys
        self._held = 0
        self._expired = 0

    # ------------------------------------------------------------------------------------------ record path

    def process(self, key: Hashable, value: Any, ts: Any) -> list[WindowUpdate]:
        """Aggregate one record (S2-S6) and return what Kafka Streams forwards while processing it."""
        stats = self.stats
        stats.records += 1
        if key is None:  # S9: only a null KEY is dropped; a null value is aggregated (S11)
            stats.dropped_null_key += 1
            if self.collect_drops:
                self._drop(key, value, ts, DropReason.NULL_KEY)
            return []
        t = valid_timestamp(ts)
        if t is None:
            stats.dropped_invalid_timestamp += 1
            if self.collect_drops:
                self._drop(key, value, ts, DropReason.INVALID_TIMESTAMP)
            return []
        w = self.windows
        if t > self.observed_stream_time:  # S3
            self.observed_stream_time = t
        window_close_time = self.observed_stream_time - w.grace_ms - w.gap_ms  # S4
        found = self._find_sessions(key, t - w.gap_ms, t + w.gap_ms)
        merger = self.merger
        agg = self.aggregation.create()
        count = 0
        m_start = m_end = t
        for s in found:  # S6: ascending end, folded into the initializer's value
            agg = merger(agg, s.acc)
            count += s.count
            if s.start < m_start:
                m_start = s.start
            if s.end > m_end:
                m_end = s.end
        out: list[WindowUpdate] = []
        if m_end < window_close_time:  # S5
            stats.skipped_windows += 1
            stats.dropped_late += 1
            if self.collect_drops:
                self._drop(key, value, ts, DropReason.LATE)
        else:
            stats.accepted += 1
            if m_start != t or m_end != t:  # S6: every found session is replaced
                for s in found:
                    self._remove(key, s, out)
                if len(found) > 1:
                    stats.sessions_merged += len(found) - 1
            agg = self.aggregation.accumulate(agg, value, key)
            if found:
                stats.windows_updated += 1
            else:
                stats.windows_created += 1
            self._put(key, _Session(m_start, m_end, agg, count + 1), out)
        if self.emit is EmitMode.CLOSE:
            self._maybe_forward_final_result(window_close_time, out)
        stats.updates_emitted += len(out)
        return out

    def _drop(self, key: Hashable, value: Any, ts: Any, reason: DropReason) -> None:
        self.drops.append(DroppedRecord(key, value, ts, reason, self.observed_stream_time))

    def flush(self) -> list[WindowUpdate]:
        """Update mode: the record cache's flush (S8): every session written since the previous flush, in
        last-write order; a removed session's tombstone only if the underlying store still returns it. After
        :meth:`process_columns`: first what the records forwarded (every / close)."""
        out, self._emitted = self._emitted, []
        for key, start, end, acc, count in self._flush_cache():
            if count == 0:
                out.append(WindowUpdate(key, start, end, None, end, 0))
            else:
                out.append(self._update(key, start, end, acc, count))
        return out

    def _flush_cache(self) -> list[tuple[Hashable, int, int, Any, int]]:
        """Update mode: the cache's flush as ``(key, start, end, accumulator, count)`` rows, a tombstone with
        ``count`` 0 (see :meth:`flush`); the counters, the store's copies and the forgetting done."""
        if not self._dirty:
            return []
        rows: list[tuple[Hashable, int, int, Any, int]] = []
        retention = self.windows.retention
        changed = self._changed
        sessions = self._sessions
        flushed_heap = self._flushed_heap
        tombstones = 0
        for sk, entry in self._dirty.items():
            key, start, end = sk
            bounds = (start, end)
            if entry is None:
                # CachingSessionStore.putAndMaybeForward: fetchSession on the store (expired: null)
                ks = self._state(key)
                if ks is not None and bounds in ks.flushed and end >= self.store_stream_time - retention + 1:
                    if end > self.store_stream_time:
                        self.store_stream_time = end
                    ks.flushed.discard(bounds)
                    changed.add(key)
                    if ks.empty():
                        self._forget_key(key)
                    rows.append((key, start, end, None, 0))
                    tombstones += 1
            else:
                if end > self.store_stream_time:
                    self.store_stream_time = end
                ks = sessions.get(key)
                if ks is None:
                    ks = self._state_or_new(key)
                if bounds not in ks.flushed:
                    ks.flushed.add(bounds)
                    changed.add(key)
                    self._note_end(key, end)
                    heapq.heappush(flushed_heap, (end, key_bytes(key), start, key))
                rows.append((key, start, end, entry[0], entry[1]))
        self._dirty.clear()
        self._forget_unreachable()
        self.stats.tombstones_emitted += tombstones
        self.stats.updates_emitted += len(rows)
        return rows

    # ------------------------------------------------------------------------------------------ stores

    def _state(self, key: Hashable) -> _KeySessions | None:
        """The key's sessions in memory, loaded from storage on first use; ``None`` when it holds nothing."""
        ks = self._sessions.get(key)
        if ks is None and self._loader is not None and key in self._key_end:
            return self._load(key)
        return ks

    def _state_or_new(self, key: Hashable) -> _KeySessions:
        ks = self._state(key)
        if ks is None:
            ks = self._sessions[key] = _KeySessions()
        return ks

    def _note_end(self, key: Hashable, end: int) -> None:
        if end > self._key_end.get(key, _NO_TIMESTAMP - 1):
            self._key_end[key] = end

    def _forget_key(self, key: Hashable) -> None:
        """The key holds nothing any more: gone from memory and (at the next export) from storage."""
        ks = self._sessions.pop(key, None)
        if ks is not None:
            self._held -= len(ks)
            self._expired += len(ks)
        self._key_end.pop(key, None)
        self._changed.add(key)

    def _find_sessions(self, key: Hashable, earliest_end: int, latest_start: int) -> list[_Session]:
        """``store.findSessions(key, t - gap, t + gap)``, ascending (end, start) (S7)."""
        sessions = self._state(key)
        if not sessions:
            return []
        lo = earliest_end
        if self.emit is not EmitMode.UPDATE:  # the RocksDB stores' getActualFrom: retention hides old sessions
            lo = max(lo, self.store_stream_time - self.windows.retention + 1)
        return sessions.find(lo, latest_start)

    def _remove(self, key: Hashable, s: _Session, out: list[WindowUpdate]) -> None:
        self._sessions[key].remove(s.start, s.end)
        self._held -= 1
        self._changed.add(key)
        if self.emit is EmitMode.UPDATE:
            sk = (key, s.start, s.end)
            self._dirty.pop(sk, None)
            self._dirty[sk] = None
            return
        # segmented store remove: stream time moves, the session is deleted from its (live) segment
        if s.end > self.store_stream_time:
            self.store_stream_time = s.end
        entry = (s.end, s.start, key_bytes(key), key)
        i = bisect.bisect_left(self._by_end, entry)
        if i < len(self._by_end) and self._by_end[i][:3] == entry[:3]:
            del self._by_end[i]
        if self.emit is EmitMode.EVERY:
            out.append(WindowUpdate(key, s.start, s.end, None, s.end, 0))
            self.stats.tombstones_emitted += 1

    def _put(self, key: Hashable, s: _Session, out: list[WindowUpdate]) -> None:
        sessions = self._state_or_new(key)
        existed = not sessions.put(s)
        if not existed:
            self._held += 1
        self._changed.add(key)
        self._note_end(key, s.end)
        if self.emit is EmitMode.UPDATE:
            sk = (key, s.start, s.end)
            self._dirty.pop(sk, None)
            self._dirty[sk] = (s.acc, s.count)
            heapq.heappush(self._cache_heap, (s.end + self.windows.gap_ms, key_bytes(key), s.start, s.end, key))
            return
        if s.end > self.store_stream_time:
            self.store_stream_time = s.end
        if not existed:
            bisect.insort(self._by_end, (s.end, s.start, key_bytes(key), key))
        self._drop_expired_segments()
        if self.emit is EmitMode.EVERY:
            out.append(self._update(key, s.start, s.end, s.acc, s.count))

    def _min_live_segment(self) -> int:
        return java_div(self.store_stream_time - self.windows.retention, self.windows.segment_interval)

    def _drop_expired_segments(self) -> None:
        """``KeyValueSegments.getOrCreateSegmentIfLive`` -> ``cleanupExpiredSegments`` on every put (S7/S10):
        segments (``segment_interval`` ms of session end) before ``segmentId(storeStreamTime - retention)`` go.
        A key not in memory keeps them in storage until it is loaded (:meth:`_load` drops them then)."""
        si = self.windows.segment_interval
        min_live = self._min_live_segment()
        by_end = self._by_end
        n = 0
        while n < len(by_end) and java_div(by_end[n][0], si) < min_live:
            end, start, _kb, key = by_end[n]
            sessions = self._sessions.get(key)
            if sessions is not None:
                self._expire_session(key, sessions, start, end)
            n += 1
        if n:
            del by_end[:n]

    def _maybe_forward_final_result(self, window_close_time: int, out: list[WindowUpdate]) -> None:
        """``maybeForwardFinalResult`` (S10), emit interval 0: sessions whose end is in
        ``[max(0, lastEmitCloseTime), close - 1]``, ordered by end, start, key bytes; no retention filter."""
        last = self.last_emit_close_time
        if not (last == _NO_TIMESTAMP or last < window_close_time):
            return
        upper = window_close_time - 1
        if upper < 0:
            return
        lower = max(0, last)
        if upper < lower:
            return
        by_end = self._by_end
        i = bisect.bisect_left(by_end, (lower,))
        j = bisect.bisect_left(by_end, (upper + 1,))
        for end, start, _kb, key in by_end[i:j]:
            ks = self._state(key)
            assert ks is not None  # an indexed session's key holds it
            s = ks.sessions[(start, end)]
            out.append(self._update(key, start, end, s.acc, s.count))
        self.last_emit_close_time = window_close_time

    def _forget_unreachable(self) -> None:
        """Update mode, after a flush: forget what no later read can reach (invisible; Kafka Streams' cache would
        keep it until evicted). The store's copy: once ``end < storeStreamTime - retention + 1`` (``get`` returns
        null). A cached session ``[s, e]``: once ``e + gap < close`` and the key's next session does not start
        within ``2 * gap`` of ``e`` or has itself ended before ``close`` (no later record can reach it with a
        merged end at or after ``close``)."""
        heap = self._flushed_heap
        horizon = self.store_stream_time - self.windows.retention + 1
        while heap and heap[0][0] < horizon:
            end, _kb, start, key = heapq.heappop(heap)
            ks = self._sessions.get(key)
            if ks is not None and (start, end) in ks.flushed:
                ks.flushed.discard((start, end))
                self._changed.add(key)
                if ks.empty():
                    self._forget_key(key)
        gap = self.windows.gap_ms
        close = self.observed_stream_time - self.windows.grace_ms - gap
        cheap = self._cache_heap
        while cheap and cheap[0][0] < close:
            _due, kb, start, end, key = heapq.heappop(cheap)
            sessions = self._sessions.get(key)
            if not sessions or (start, end) not in sessions:
                continue  # replaced since
            nxt = sessions.next_start_after(end)
            if nxt is not None and nxt.start <= end + 2 * gap and nxt.end >= close:
                heapq.heappush(cheap, (nxt.end + 1, kb, start, end, key))  # look again once the next one closes
                continue
            self._expire_session(key, sessions, start, end)

    def _expire_session(self, key: Hashable, sessions: _KeySessions, start: int, end: int) -> None:
        """A session leaves memory for good (its segment dropped, or the cache forgot it)."""
        sessions.remove(start, end)
        self._held -= 1
        self._expired += 1
        self._changed.add(key)
        if sessions.empty():
            self._forget_key(key)

    def _dead_line(self) -> int:
        """Keys whose largest session end is below this hold nothing any read can reach (nor emit): every /
        close: every session is in a dropped segment; update: the cache forgets them (``end + gap < close``)
        and the store hides them (``end < storeStreamTime - retention + 1``)."""
        if self.emit is EmitMode.UPDATE:
            w = self.windows
            close = self.observed_stream_time - w.grace_ms - w.gap_ms
            return min(close - w.gap_ms, self.store_stream_time - w.retention + 1)
        min_live = self._min_live_segment()  # a session end e is in a dropped segment iff e < min_live * interval
        return min_live * self.windows.segment_interval if min_live > 0 else 0

    # ------------------------------------------------------------------------------------------ batch contract
    # What an accelerator (windowstore.session_windows_batch) may do, update mode only: read a key's cached
    # sessions and make the record path's cache writes, in last-write order, with values already merged.

    def cached_sessions(self, key: Hashable, earliest_end: int, latest_start: int) -> list[tuple[int, int, Any, int]]:
        """Update mode: ``(start, end, accumulator, count)`` of the key's cached sessions with
        ``end >= earliest_end`` and ``start <= latest_start``, ascending end (the cache hides nothing, S7)."""
        if self.emit is not EmitMode.UPDATE:
            raise ValueError("cached_sessions is the update mode's (record cache) contract")
        return [(s.start, s.end, s.acc, s.count) for s in self._find_sessions(key, earliest_end, latest_start)]

    def write_sessions(self, ops: list[tuple[Hashable, int, int, Any, int] | tuple[Hashable, int, int]]) -> None:
        """Update mode, in order: ``(key, start, end)`` removes a cached session (S6; a tombstone at the next
        flush if the store still holds it), ``(key, start, end, acc, count)`` puts one (replacing equal bounds)."""
        if self.emit is not EmitMode.UPDATE:
            raise ValueError("write_sessions is the update mode's (record cache) contract")
        # what _remove and _put do in update mode, with the lookups hoisted out of the loop
        sessions_of = self._sessions
        changed = self._changed
        dirty = self._dirty
        key_end = self._key_end
        cache_heap = self._cache_heap
        gap = self.windows.gap_ms
        push = heapq.heappush
        held = 0
        for op in ops:
            key = op[0]
            start, end = op[1], op[2]
            sk = (key, start, end)
            dirty.pop(sk, None)
            changed.add(key)
            if len(op) == 3:
                sessions_of[key].remove(start, end)
                held -= 1
                dirty[sk] = None
                continue
            ks = sessions_of.get(key)
            if ks is None:
                ks = self._state_or_new(key)
            if ks.put(_Session(start, end, op[3], op[4])):
                held += 1
            if end > key_end.get(key, _NO_TIMESTAMP - 1):
                key_end[key] = end
            dirty[sk] = (op[3], op[4])
            push(cache_heap, (end + gap, key_bytes(key), start, end, key))
        self._held += held

    # ------------------------------------------------------------------------------------------ task contract

    @property
    def batch(self) -> bool:
        """Whether the service should use :meth:`process_columns` / :meth:`flush_columns` (``batch=True``)."""
        return self._batch

    @property
    def expired_windows(self) -> int:
        """Sessions physically dropped so far: dropped segments, forgotten cache entries, dead keys in memory."""
        return self._expired

    @property
    def windows_held(self) -> int:
        """Sessions held in memory now (store or cache; keys not loaded are not counted)."""
        return self._held

    def process_columns(
        self,
        keys: Sequence[Hashable],
        timestamps: Any,
        fields: dict[str | None, Any] | None = None,
        values: Sequence[Any] | None = None,
    ) -> bool:
        """The records ``(keys[i], values[i], timestamps[i])`` in order, on the batch path where it applies
        (:mod:`windowstore.session_windows_batch`: update mode, exact built-in aggregations, no record near close
        time), else record by record; identical results to :meth:`process`, whose forwarded updates come out of
        the next :meth:`flush`. ``fields`` is not used (the batch path reads the values' fields itself); the
        record ``values`` are required. Returns whether the batch path was taken."""
        if values is None:
            raise ValueError("session windows' process_columns needs the record values")
        ts = timestamps.tolist() if hasattr(timestamps, "tolist") else list(timestamps)
        taken, out = session_windows_batch.run_batch(self, keys, ts, values)
        self._emitted += out
        return taken

    def flush_columns(self) -> dict[str, Any]:
        """:meth:`flush` as columns: ``key`` (list), ``start``, ``end``, ``ts``, ``count`` (int64 arrays) and
        ``values`` {aggregation output name: column}; a tombstone row has ``count`` 0 and ``None`` values.
        Update mode builds them from the cache's rows directly, a part at a time (no update object per row)."""
        agg = self.aggregation
        if self._emitted:
            updates = self.flush()
            rows = [(u.key, u.start, u.end, u.value, u.count) for u in updates]
            finished = True
        else:
            rows = self._flush_cache()
            finished = False
        n = len(rows)
        keys, starts, ends, accs, counts = (list(c) for c in zip(*rows)) if rows else ([], [], [], [], [])
        composite = isinstance(agg, Composite)
        values = {}
        for j, part in enumerate(agg.parts if isinstance(agg, Composite) else (agg,)):
            if finished:  # the updates' values, finished already
                col = [None if c == 0 else (a[part.name] if composite else a) for a, c in zip(accs, counts)]
            else:
                col = [None if c == 0 else a[j] for a, c in zip(accs, counts)] if composite else list(accs)
                if not part.finish_is_identity:
                    finish = part.finish
                    col = [None if c == 0 else finish(a) for a, c in zip(col, counts)]
            values[part.name] = exact_column(col)
        return {
            "key": keys,
            "start": np.array(starts, np.int64) if n else np.zeros(0, np.int64),
            "end": np.array(ends, np.int64) if n else np.zeros(0, np.int64),
            "ts": np.array(ends, np.int64) if n else np.zeros(0, np.int64),
            "count": np.array(counts, np.int64) if n else np.zeros(0, np.int64),
            "values": values,
        }

    def take_drops(self) -> list[DroppedRecord]:
        """Return and clear the dropped records collected so far (``collect_drops=True``)."""
        drops, self.drops = self.drops, []
        return drops

    def expire(self) -> int:
        """Drop what no read can reach any more (update mode: the cache's unreachable sessions; every mode: keys
        whose every session is past reach, in memory or only in storage); returns how many sessions left memory.
        Unobservable: the output is the same with or without it."""
        before = self._expired
        if self.emit is EmitMode.UPDATE:
            self._forget_unreachable()
        line = self._dead_line()
        for key in [k for k, end in self._key_end.items() if end < line]:
            self._forget_key(key)
        return self._expired - before

    def export_meta(self) -> bytes:
        """The task meta: stream times, the key index (largest end per key), close mode's sessions not yet
        emitted (``end >= lastEmitCloseTime``), update mode's unflushed cache entries (pending tombstones
        included), the batch path's unflushed output, counters. Reads only."""
        emit = self.emit
        by_end = self._by_end
        lec = self.last_emit_close_time
        index = []
        if emit is EmitMode.CLOSE:
            index = [(end, start, key) for end, start, _kb, key in by_end[bisect.bisect_left(by_end, (lec,)) :]]
        meta = {
            "format": META_FORMAT,
            "window": "session",
            "definition": self._definition(),
            "observed_stream_time": self.observed_stream_time,
            "last_emit_close_time": lec,
            "store_stream_time": self.store_stream_time,
            "key_end": self._key_end,
            "index": index,
            "index_floor": lec if emit is EmitMode.CLOSE else None,
            "cache": [(k, start, end, entry) for (k, start, end), entry in self._dirty.items()],
            "emitted": [tuple(u) for u in self._emitted],
            "expired": self._expired,
            "stats": [getattr(self.stats, f.name) for f in dataclass_fields(FamilyStats)],
        }
        return pickle.dumps(meta, protocol=5)

    def export_keys(self, keys: Iterable[Hashable]) -> dict[Hashable, bytes | None]:
        """Per-key blobs (the key's sessions and, update mode, which of them the store under the cache holds);
        ``None`` for a key that holds nothing any more. Keys in storage and never loaded (unchanged) are left out."""
        out: dict[Hashable, bytes | None] = {}
        for key in keys:
            ks = self._sessions.get(key)
            if ks is None:
                if key not in self._key_end:
                    out[key] = None
                continue
            if ks.empty():
                out[key] = None
                continue
            sessions = [(s.start, s.end, s.acc, s.count) for _b, s in sorted(ks.sessions.items())]
            out[key] = pickle.dumps((META_FORMAT, sessions, sorted(ks.flushed)), protocol=5)
        return out

    def dirty_keys(self) -> set[Hashable]:
        """Keys whose blob changed since :meth:`clear_dirty_keys`."""
        return set(self._changed)

    def clear_dirty_keys(self) -> None:
        self._changed.clear()

    @classmethod
    def from_state(
        cls,
        windows: SessionWindows,
        aggregation: Aggregation,
        emit: EmitMode | str,
        meta: bytes | None,
        loader: Loader,
        **kwargs: Any,
    ) -> SessionWindowProcessor:
        """A processor over external state: ``meta`` from :meth:`export_meta` (``None``: a new task) and
        ``loader(key)`` returning the key's blob from :meth:`export_keys` (``None`` if absent), called the first
        time a key is used. Fed the same records, it emits exactly what the exporting processor would have."""
        proc = cls(windows, aggregation, emit, **kwargs)
        proc.attach_state(meta, loader)
        return proc

    def attach_state(self, meta: bytes | None, loader: Loader) -> None:
        """Put a new processor over external state (see :meth:`from_state`)."""
        if self._key_end or self._sessions or self.stats.records:
            raise ValueError("attach_state needs a new processor")
        self._loader = loader
        if meta is None:
            return
        m = pickle.loads(meta)
        if not isinstance(m, dict) or m.get("format") != META_FORMAT or m.get("window") != "session":
            raise StateFormatError("the task meta is not session-window state of a supported format")
        if m["definition"] != self._definition():
            raise StateFormatError(
                f"state was written with session windows {m['definition']} but the processor has "
                f"{self._definition()}; use a new checkpoint for a new window definition"
            )
        self.observed_stream_time = m["observed_stream_time"]
        self.last_emit_close_time = m["last_emit_close_time"]
        self.store_stream_time = m["store_stream_time"]
        self._key_end = dict(m["key_end"])
        self._by_end = [(end, start, key_bytes(key), key) for end, start, key in m["index"]]
        self._index_floor = _MAX if m["index_floor"] is None else m["index_floor"]
        self._dirty = {(k, start, end): entry for k, start, end, entry in m["cache"]}
        self._emitted = [WindowUpdate(*u) for u in m["emitted"]]
        self._expired = m["expired"]
        for f, v in zip(dataclass_fields(FamilyStats), m["stats"], strict=True):
            setattr(self.stats, f.name, v)

    def _definition(self) -> dict[str, Any]:
        w = self.windows
        return {"gap_ms": w.gap_ms, "grace_ms": w.grace_ms, "retention_ms": w.retention, "emit": self.emit.value}

    def _load(self, key: Hashable) -> _KeySessions | None:
        """The key's blob from the loader, as the processor that wrote it would hold the key now: every / close
        without the sessions of segments dropped since (S7), update without the store copies hidden since."""
        assert self._loader is not None
        blob = self._loader(key)
        ks = _KeySessions()
        dropped = 0
        if blob is not None:
            fmt, sessions, flushed = pickle.loads(blob)
            if fmt != META_FORMAT:
                raise StateFormatError(f"key blob format {fmt} is not supported")
            kb = key_bytes(key)
            if self.emit is EmitMode.UPDATE:
                gap = self.windows.gap_ms
                for start, end, acc, count in sessions:
                    ks.put(_Session(start, end, acc, count))
                    heapq.heappush(self._cache_heap, (end + gap, kb, start, end, key))
                horizon = self.store_stream_time - self.windows.retention + 1
                for start, end in flushed:
                    if end >= horizon:
                        ks.flushed.add((start, end))
                        heapq.heappush(self._flushed_heap, (end, kb, start, key))
            else:
                si = self.windows.segment_interval
                min_live = self._min_live_segment()
                floor = self._index_floor
                for start, end, acc, count in sessions:
                    if java_div(end, si) < min_live:
                        dropped += 1
                        continue
                    ks.put(_Session(start, end, acc, count))
                    if end < floor:  # from floor on, the meta's index has it already
                        bisect.insort(self._by_end, (end, start, kb, key))
        self._sessions[key] = ks
        self._held += len(ks)
        if dropped:
            self._expired += dropped
            self._changed.add(key)
        if ks.empty():
            self._forget_key(key)
            return None
        return ks

    # ------------------------------------------------------------------------------------------ state

    def _update(self, key: Hashable, start: int, end: int, acc: Any, count: int) -> WindowUpdate:
        agg = self.aggregation
        value = acc if agg.finish_is_identity else agg.finish(acc)
        return WindowUpdate(key, start, end, value, end, count)

    def __len__(self) -> int:
        """Sessions held in memory (store or cache)."""
        return sum(len(s) for s in self._sessions.values())

    def export_state(self) -> dict[str, Any]:
        """Everything a restart needs, as plain data (the keys in memory: a processor without a loader)."""
        return {
            "type": "session",
            "gap_ms": self.windows.gap_ms,
            "grace_ms": self.windows.grace_ms,
            "observed_stream_time": self.observed_stream_time,
            "last_emit_close_time": self.last_emit_close_time,
            "store_stream_time": self.store_stream_time,
            "sessions": [[k, s.start, s.end, s.acc, s.count] for k, ss in self._sessions.items() for s in ss.values()],
            "dirty": [[k, st, en, None if e is None else list(e)] for (k, st, en), e in self._dirty.items()],
            "flushed": [[k, start, end] for k, ss in self._sessions.items() for start, end in ss.flushed],
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Load :meth:`export_state` output into an empty processor with the same window definition."""
        w = self.windows
        if state.get("type") != "session" or (state["gap_ms"], state["grace_ms"]) != (w.gap_ms, w.grace_ms):
            raise ConfigError(
                f"state was written for another window definition: {state.get('type')} "
                f"gap={state.get('gap_ms')} grace={state.get('grace_ms')}"
            )
        if self._sessions:
            raise ValueError("restore_state needs an empty processor")
        self.observed_stream_time = state["observed_stream_time"]
        self.last_emit_close_time = state["last_emit_close_time"]
        self.store_stream_time = state["store_stream_time"]
        for k, start, end, acc, count in state["sessions"]:
            self._state_or_new(k).put(_Session(start, end, acc, count))
            self._held += 1
            self._note_end(k, end)
            if self.emit is EmitMode.UPDATE:
                heapq.heappush(self._cache_heap, (end + w.gap_ms, key_bytes(k), start, end, k))
            else:
                bisect.insort(self._by_end, (end, start, key_bytes(k), k))
        for k, start, end, e in state["dirty"]:
            self._dirty[(k, start, end)] = None if e is None else (e[0], e[1])
        for k, start, end in state["flushed"]:
            self._state_or_new(k).flushed.add((start, end))
            self._note_end(k, end)
            heapq.heappush(self._flushed_heap, (end, key_bytes(k), start, k))
