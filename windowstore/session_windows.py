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
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from .aggregations import Aggregation
from .family_common import FamilyStats, check_millis, java_div, key_bytes, valid_timestamp
from .session_merge import Merger, session_merger
from .updates import EmitMode, WindowUpdate
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

    __slots__ = ("by_end", "by_start", "sessions")

    def __init__(self) -> None:
        self.sessions: dict[tuple[int, int], _Session] = {}
        self.by_end: list[tuple[int, int]] = []
        self.by_start: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.sessions)

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


class SessionWindowProcessor:
    """The reference record path for one task: mirrors ``KStreamSessionWindowAggregateProcessor`` over Kafka
    Streams' default stores (S7): ``every`` = uncached RocksDB session store, ``update`` = record cache over it,
    ``close`` = time-ordered session store, caching forced off.

    ``process(key, value, ts)`` returns what Kafka Streams forwards for the record: tombstones (value ``None``,
    ``count == 0``, :func:`is_tombstone`) for each replaced session and then the new session (``every``); the
    sessions the record closed (``close``); nothing (``update``: :meth:`flush`). ``start``/``end`` are
    ``Window.start()``/``end()``, both inclusive; the output timestamp is always the session's end (S8).
    """

    def __init__(
        self,
        windows: SessionWindows,
        aggregation: Aggregation,
        emit: EmitMode | str = EmitMode.UPDATE,
        merger: Merger | None = None,
    ) -> None:
        self.windows = windows
        self.aggregation = aggregation
        self.merger = merger if merger is not None else session_merger(aggregation)
        #: the merger is the aggregation's own (``combine``), not one the caller passed
        self.default_merger = merger is None
        self.emit = EmitMode.parse(emit)
        self.stats = FamilyStats()
        self.observed_stream_time = _NO_TIMESTAMP
        self.last_emit_close_time = _NO_TIMESTAMP
        #: the store's observedStreamTime: largest session end put or removed (update mode: flushed) so far
        self.store_stream_time = _NO_TIMESTAMP
        # every/close: the RocksDB store; update: the record cache (everything ever written, latest value)
        self._sessions: dict[Hashable, _KeySessions] = {}
        # every/close: (end, start, key bytes, key) of every stored session, ascending (segments, emission order)
        self._by_end: list[tuple[int, int, bytes, Hashable]] = []
        # update mode: dirty cache entries in last-write order, (key, start, end) -> (acc, count) or None
        self._dirty: dict[tuple[Hashable, int, int], tuple[Any, int] | None] = {}
        # update mode: sessions the underlying store holds (flushed puts), and a heap to forget hidden ones
        self._flushed: set[tuple[Hashable, int, int]] = set()
        self._flushed_heap: list[tuple[int, bytes, int, Hashable]] = []
        # update mode: candidates to leave the cache, by the time they may become unreachable (end + gap)
        self._cache_heap: list[tuple[int, bytes, int, int, Hashable]] = []

    # ------------------------------------------------------------------------------------------ record path

    def process(self, key: Hashable, value: Any, ts: Any) -> list[WindowUpdate]:
        """Aggregate one record (S2-S6) and return what Kafka Streams forwards while processing it."""
        stats = self.stats
        stats.records += 1
        if key is None:  # S9: only a null KEY is dropped; a null value is aggregated (S11)
            stats.dropped_null_key += 1
            return []
        t = valid_timestamp(ts)
        if t is None:
            stats.dropped_invalid_timestamp += 1
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

    def flush(self) -> list[WindowUpdate]:
        """Update mode: the record cache's flush (S8): every session written since the previous flush, in
        last-write order; a removed session's tombstone only if the underlying store still returns it."""
        if not self._dirty:
            return []
        out: list[WindowUpdate] = []
        retention = self.windows.retention
        flushed = self._flushed
        for sk, entry in self._dirty.items():
            key, start, end = sk
            if entry is None:
                # CachingSessionStore.putAndMaybeForward: fetchSession on the store (expired: null)
                if sk in flushed and end >= self.store_stream_time - retention + 1:
                    self.store_stream_time = max(self.store_stream_time, end)
                    flushed.discard(sk)
                    out.append(WindowUpdate(key, start, end, None, end, 0))
                    self.stats.tombstones_emitted += 1
            else:
                self.store_stream_time = max(self.store_stream_time, end)
                if sk not in flushed:
                    flushed.add(sk)
                    heapq.heappush(self._flushed_heap, (end, key_bytes(key), start, key))
                out.append(self._update(key, start, end, entry[0], entry[1]))
        self._dirty.clear()
        self._forget_unreachable()
        self.stats.updates_emitted += len(out)
        return out

    # ------------------------------------------------------------------------------------------ stores

    def _find_sessions(self, key: Hashable, earliest_end: int, latest_start: int) -> list[_Session]:
        """``store.findSessions(key, t - gap, t + gap)``, ascending (end, start) (S7)."""
        sessions = self._sessions.get(key)
        if not sessions:
            return []
        lo = earliest_end
        if self.emit is not EmitMode.UPDATE:  # the RocksDB stores' getActualFrom: retention hides old sessions
            lo = max(lo, self.store_stream_time - self.windows.retention + 1)
        return sessions.find(lo, latest_start)

    def _remove(self, key: Hashable, s: _Session, out: list[WindowUpdate]) -> None:
        self._sessions[key].remove(s.start, s.end)
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
        sessions = self._sessions.get(key)
        if sessions is None:
            sessions = self._sessions[key] = _KeySessions()
        existed = not sessions.put(s)
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

    def _drop_expired_segments(self) -> None:
        """``KeyValueSegments.getOrCreateSegmentIfLive`` -> ``cleanupExpiredSegments`` on every put (S7/S10):
        segments (``segment_interval`` ms of session end) before ``segmentId(storeStreamTime - retention)`` go."""
        si = self.windows.segment_interval
        min_live = java_div(self.store_stream_time - self.windows.retention, si)
        by_end = self._by_end
        n = 0
        while n < len(by_end) and java_div(by_end[n][0], si) < min_live:
            end, start, _kb, key = by_end[n]
            sessions = self._sessions[key]
            sessions.remove(start, end)
            if not sessions:
                del self._sessions[key]
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
            s = self._sessions[key].sessions[(start, end)]
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
            self._flushed.discard((key, start, end))
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
            sessions.remove(start, end)
            if not sessions:
                del self._sessions[key]

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
        sink: list[WindowUpdate] = []
        for op in ops:
            if len(op) == 3:
                key, start, end = op
                self._remove(key, _Session(start, end, None, 0), sink)
            else:
                key, start, end, acc, count = op
                self._put(key, _Session(start, end, acc, count), sink)

    # ------------------------------------------------------------------------------------------ state

    def _update(self, key: Hashable, start: int, end: int, acc: Any, count: int) -> WindowUpdate:
        agg = self.aggregation
        value = acc if agg.finish_is_identity else agg.finish(acc)
        return WindowUpdate(key, start, end, value, end, count)

    def __len__(self) -> int:
        """Sessions held (store or cache)."""
        return sum(len(s) for s in self._sessions.values())

    def export_state(self) -> dict[str, Any]:
        """Everything a restart needs, as plain data."""
        return {
            "type": "session",
            "gap_ms": self.windows.gap_ms,
            "grace_ms": self.windows.grace_ms,
            "observed_stream_time": self.observed_stream_time,
            "last_emit_close_time": self.last_emit_close_time,
            "store_stream_time": self.store_stream_time,
            "sessions": [[k, s.start, s.end, s.acc, s.count] for k, ss in self._sessions.items() for s in ss.values()],
            "dirty": [[k, st, en, None if e is None else list(e)] for (k, st, en), e in self._dirty.items()],
            "flushed": [list(sk) for sk in self._flushed],
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
            self._sessions.setdefault(k, _KeySessions()).put(_Session(start, end, acc, count))
            if self.emit is EmitMode.UPDATE:
                heapq.heappush(self._cache_heap, (end + w.gap_ms, key_bytes(k), start, end, k))
            else:
                bisect.insort(self._by_end, (end, start, key_bytes(k), k))
        for k, start, end, e in state["dirty"]:
            self._dirty[(k, start, end)] = None if e is None else (e[0], e[1])
        for k, start, end in state["flushed"]:
            self._flushed.add((k, start, end))
            heapq.heappush(self._flushed_heap, (end, key_bytes(k), start, k))
