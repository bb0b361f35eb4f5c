"""The sliding-window processor: Kafka Streams' ``KStreamSlidingWindowAggregate`` record by record.

One processor instance is one *task* (one input partition in Kafka Streams): all its keys share one observed
stream time (SEMANTICS.md R7). :meth:`SlidingWindowProcessor.process` applies R6-R22 to a record, mirroring
``process`` / ``processReverse`` / ``processEarly`` / ``createWindows`` / ``updateWindowAndForward`` of Kafka
Streams literally, including the partially-late regime (R22b, R31) where that code departs from the
declarative window definition (R3).

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
"""

from __future__ import annotations

import gc
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from .aggregations import Aggregation, Count, Sum
from .pending import PendingWindows
from .store import NO_TIMESTAMP, KeyWindows, Visibility, WindowStore
from .updates import DropReason, DroppedRecord, EmitMode, ProcessorStats, WindowUpdate
from .windows import SlidingWindows

__all__ = ["SlidingWindowProcessor", "visibility_for"]

_new_update = tuple.__new__
#: the largest valid record timestamp: Kafka's timestamps are Java longs (a larger one is invalid, R6)
MAX_TIMESTAMP = (1 << 63) - 1


class _gc_paused:
    """Pause automatic cyclic garbage collection for a bulk build of short-lived, acyclic objects (a flush's
    updates: one :class:`WindowUpdate` per window, ~100k for a 50k-record micro-batch).

    Why: ``WindowUpdate`` is a tuple subclass, which CPython's collector never untracks, so while a flush
    builds them every generation-1 collection promotes thousands of live updates and the flush ends in a
    full collection (~12% of the record path's CPU in bench/windowstore_bench.py; paused: 8% fewer
    instructions per record). Paused, the updates are seen once, by the first young-generation collection
    after the flush, and usually freed by reference counting before they reach an older generation. Nothing
    is leaked: the allocations still count towards the next collection. Re-entrant; it only re-enables what
    it disabled itself (a thread that disables the collector while another thread flushes may find it
    re-enabled when that flush ends).
    """

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        if self._was:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


def visibility_for(emit: EmitMode) -> Visibility:
    """The store Kafka Streams reads through in each emit mode (see :mod:`windowstore.store`)."""
    return {
        EmitMode.EVERY: Visibility.KEY_FIRST,
        EmitMode.UPDATE: Visibility.UNBOUNDED,
        EmitMode.CLOSE: Visibility.TIME_FIRST,
    }[emit]


class _RecordStep:
    """:attr:`SlidingWindowProcessor.process`: :meth:`~SlidingWindowProcessor._process_fast` on a processor
    that takes lazy runs (update mode, exact Count/Sum, no batch path),
    :meth:`~SlidingWindowProcessor._process_record` on any other.

    Chosen when the attribute is read (a loop reads it once), not stored on the processor: a bound method of
    the processor in its own ``__dict__`` would make it a reference cycle, which reference counting cannot
    free. A processor holds a task's windows, and the service's Python workers rely on a dropped one being
    freed at once (``service.python_daemon``; ``tests/windowstore/test_reference_cycles.py``)."""

    def __get__(self, proc: "SlidingWindowProcessor | None", cls: type | None = None) -> Callable[..., Any]:
        if proc is None:
            return SlidingWindowProcessor._process_record
        return proc._process_fast if proc._lazy else proc._process_record


class SlidingWindowProcessor:
    """Applies Kafka Streams' sliding-window aggregation to records of one task.

    * ``process(key, value, ts)`` returns the updates emitted by that record: every write in ``every`` mode,
      the windows that closed in ``close`` mode, nothing in ``update`` mode (call :meth:`flush`).
    * Records with a null key or value, or a timestamp that is not a non-negative integer, are dropped and
      counted (R6) - never raised. Late records (R8) are dropped and counted. When ``collect_drops`` is set,
      every dropped record is also appended to :attr:`drops` for the caller to route (late topic, DLQ).
    * ``emit_interval_ms`` throttles emit-on-close by wall clock like Kafka Streams' internal
      ``__emit.interval.ms.kstreams.windowed.aggregation__``; 0 (the default, as in TopologyTestDriver)
      checks after every record, which keeps results independent of the wall clock.
    """

    def __init__(
        self,
        windows: SlidingWindows,
        aggregation: Aggregation,
        emit: EmitMode | str = EmitMode.UPDATE,
        *,
        emit_interval_ms: int = 0,
        clock: Callable[[], float] | None = None,
        collect_drops: bool = False,
        batch: bool = False,
    ) -> None:
        self.windows = windows
        self.aggregation = aggregation
        self.emit = EmitMode.parse(emit)
        self.td = windows.time_difference_ms
        self.grace = windows.grace_ms
        if emit_interval_ms < 0:
            raise ValueError(f"emit_interval_ms must not be negative, got {emit_interval_ms}")
        self.emit_interval_ms = emit_interval_ms
        self._clock = clock or time.monotonic
        self._next_emit_ms = 0.0
        # UPDATE mode reads like Kafka's record cache (nothing filtered by retention); a window whose start
        # is below store_time - (3*td + grace + 1) can never be read again by an accepted record
        # (t >= st - grace - td, scans start at t - 2*td, store_time <= st + 1), so it is purged.
        self.store = WindowStore(
            windows.retention,
            visibility_for(self.emit),
            purge_margin_ms=3 * self.td + self.grace + 1,
            purge_slack_ms=self.td,  # update mode: a key's purge drops ~td of windows at once
        )
        self.observed_stream_time = NO_TIMESTAMP
        self.last_emit_close_time = NO_TIMESTAMP
        self.stats = ProcessorStats()
        self.collect_drops = collect_drops
        self.drops: list[DroppedRecord] = []
        # update mode's record cache (R21), see :attr:`_dirty`: windows written since the last flush carry
        # a write sequence number in their key's ``KeyWindows.stamps``; ``_touched`` lists those keys
        self._cache: dict[tuple[Hashable, int], Any] = {}
        self._touched: list[tuple[Hashable, KeyWindows]] = []
        self._seq = 0
        self._flushed_seq = 0  # _seq at the last flush/seal of the stamps
        # close mode: windows not yet emitted, by (start, key bytes) like Kafka's time-ordered store
        self._pending_close = PendingWindows()
        #: close mode with the batch path: what process_batch/process_columns emitted, until the next flush
        #: (segments: ("updates", [WindowUpdate]) or ("cols", columns), see windowstore.batch)
        self._closed: list[tuple[str, Any]] = []
        self._accumulate = aggregation.accumulate
        self._bind = aggregation.bind
        #: 1: Count, 2: Sum (exact built-in types): the record path adds inline instead of calling accumulate
        self._inline = {Count: 1, Sum: 2}.get(type(aggregation), 0)  # type: ignore[call-overload]
        # emit-mode flags for the per-record code (reading an enum member costs ~0.25 us on Python 3.11)
        self._update = self.emit is EmitMode.UPDATE
        self._every = self.emit is EmitMode.EVERY
        self._close = self.emit is EmitMode.CLOSE
        # the mode's emit step, unbound (called as ``self._emit(self, ...)``): a bound method of the processor
        # kept in its own ``__dict__`` would make it a reference cycle (see :class:`_RecordStep`)
        self._emit = {
            EmitMode.EVERY: type(self)._emit_every,
            EmitMode.UPDATE: type(self)._emit_update,
            EmitMode.CLOSE: type(self)._emit_none,
        }[self.emit]
        self._finish = None if aggregation.finish_is_identity else aggregation.finish
        self._out: list[WindowUpdate] | None = None
        #: keep raw records per key so :meth:`process_batch` can take the batch path (update mode)
        self.batch = batch
        self._segments: list = []  # batch path: unflushed columnar writes (see windowstore.batch)
        from .batch import attach

        self._plan = attach(self) if batch else None
        #: keys that took a partially-late record: the batch path checks them against R3 before use
        self.flagged_keys: set[Hashable] = set()
        #: update mode, built-in Count/Sum, no batch path: records enter through :meth:`_process_fast`
        #: (then :attr:`process` is :meth:`_process_fast`, see :class:`_RecordStep`)
        self._lazy = self._update and bool(self._inline) and self._plan is None

    # ------------------------------------------------------------------------------------------------- input
    #: ``process(key, value, ts) -> list[WindowUpdate]``: process one record; returns the updates it emits (see
    #: the class docstring)
    process = _RecordStep()

    def _process_record(self, key: Hashable, value: Any, ts: int) -> list[WindowUpdate]:
        """Process one record; returns the updates it emits (see the class docstring)."""
        stats = self.stats
        stats.records += 1
        if key is None or value is None:
            stats.dropped_null += 1
            self._drop(key, value, ts, DropReason.NULL_KEY if key is None else DropReason.NULL_VALUE)
            return []
        if type(ts) is not int:
            if not isinstance(ts, bool) and hasattr(type(ts), "__index__"):  # int subclasses, numpy integers
                ts = ts.__index__()
            else:
                stats.dropped_invalid_timestamp += 1
                self._drop(key, value, ts, DropReason.INVALID_TIMESTAMP)
                return []
        if ts < 0 or ts > MAX_TIMESTAMP:  # Kafka's timestamps are longs (R6)
            stats.dropped_invalid_timestamp += 1
            self._drop(key, value, ts, DropReason.INVALID_TIMESTAMP)
            return []

        st = self.observed_stream_time
        if ts > st:
            self.observed_stream_time = st = ts
        close = st - self.grace
        td = self.td
        if ts + td < close:  # R8: even [t, t+td], the latest window that could hold t, is closed
            stats.dropped_late += 1
            self._drop(key, value, ts, DropReason.LATE)
            return []
        stats.accepted += 1

        out: list[WindowUpdate] = []
        self._out = out if self._every else None
        if ts < td:  # R9/R11: early record, no emit-final check
            self._process_early(key, value, ts, close)
            return out
        self._process_reverse(key, value, ts, close)
        if self._close:
            self._maybe_emit_final(close, out)
        return out

    def process_many(self, records: Iterable[tuple[Hashable, Any, int]]) -> list[WindowUpdate]:
        """Process ``(key, value, ts)`` records in order; returns all updates they emitted."""
        out: list[WindowUpdate] = []
        process = self.process
        for key, value, ts in records:
            r = process(key, value, ts)
            if r:
                out.extend(r)
        return out

    def process_batch(self, records: "Sequence[tuple[Hashable, Any, Any]]") -> bool:
        """Process ``(key, value, ts)`` records in arrival order, on the batch fast path when it applies
        (update mode, or close mode without an emit interval; ``batch=True``, a commutative built-in
        aggregation, no partially-late record); results are identical to calling :meth:`process` for each
        (close mode: the windows they emit come out of the next :meth:`flush`). Returns whether the batch path
        was taken."""
        from .batch import process_batch

        self._seal_cache()  # the batch path may turn entries into columns: fix the cache's entries first
        return process_batch(self, records)

    def process_columns(
        self,
        keys: "Sequence[Hashable]",
        timestamps: Any,
        fields: "dict[str | None, Any] | None" = None,
        values: "Sequence[Any] | None" = None,
    ) -> bool:
        """Columnar :meth:`process_batch`: ``keys``, int ``timestamps`` and either ``fields`` ({value field, or
        None for the bare value: numeric array}) or the record ``values``. Same results as :meth:`process`."""
        from .batch import process_columns

        self._seal_cache()  # the batch path may turn entries into columns: fix the cache's entries first
        return process_columns(self, keys, timestamps, fields, values)

    def flush(self) -> list[WindowUpdate]:
        """Update mode: the last value of every window written since the previous flush, ordered by last
        write (Kafka Streams' record cache flush, R21). Close mode: the final windows :meth:`process_batch` /
        :meth:`process_columns` emitted since the previous flush (:meth:`process` returns its own). Every mode:
        nothing else.

        The cyclic garbage collector is paused while the updates are built (see :class:`_gc_paused`)."""
        if not self._update:
            if not self._closed:
                return []
            from .batch import closed_updates

            return closed_updates(self)
        with _gc_paused():
            return self._flush()

    def _flush(self) -> list[WindowUpdate]:
        td = self.td
        finish = self._finish
        if self._touched and not self._segments and not self._cache:  # only stamped writes: no dict needed
            out = self._stamped_updates(finish)
            self.stats.updates_emitted += len(out)
            return out
        if self._segments:
            from .batch import pending_entries

            pending = pending_entries(self)
        elif not self._dirty:
            return []
        else:
            pending, self._dirty = self._dirty, {}
        out = [
            _new_update(
                WindowUpdate, (key, start, start + td, acc if finish is None else finish(acc), ts, count)
            )
            for (key, start), (acc, ts, count) in pending.items()
        ]
        self.stats.updates_emitted += len(out)
        return out

    def flush_columns(self) -> dict[str, Any]:
        """Like :meth:`flush`, as columns: ``key`` (list), ``start``, ``end``, ``ts``, ``count`` (int64 numpy
        arrays) and ``values`` {aggregation output name: array}. No Python object per window when the batch
        path produced the updates; then ``key_table`` and ``key_id`` give the keys as ids into a table of
        distinct keys as well (``key[i] == key_table[key_id[i]]``)."""
        from .batch import flush_columns

        return flush_columns(self)

    def take_drops(self) -> list[DroppedRecord]:
        """Return and clear the dropped records collected so far (``collect_drops=True``)."""
        drops, self.drops = self.drops, []
        return drops

    def expire(self) -> int:
        """Physically drop windows no read can see any more; returns how many."""
        n = self.store.expire()
        if self.flagged_keys:
            self.flagged_keys &= self.store.key_max_start.keys()
        return n

    # --------------------------------------------------------------------------------------------- internals
    @property
    def _dirty(self) -> dict[tuple[Hashable, int], Any]:
        """Update mode's record cache as a dict ``(key, start) -> [acc, max_ts, count]`` ordered by last write
        (R21): what Kafka Streams' cache would flush now. Stamped writes are moved into the dict first.
        Assigning replaces the whole cache (stamped writes included)."""
        self._seal_cache()
        return self._cache

    @_dirty.setter
    def _dirty(self, cache: dict[tuple[Hashable, int], Any]) -> None:
        for _key, kw in self._touched:
            kw.settle()
            kw.stamps = None
            kw.gone = None
        self._touched = []
        self._flushed_seq = self._seq
        self._cache = cache

    def _seal_cache(self) -> None:
        """Move the stamped writes into the cache dict, in write order."""
        if self._touched:
            cache = self._cache
            for u in self._stamped_updates(None):
                k = (u[0], u[1])
                cache.pop(k, None)
                cache[k] = [u[3], u[4], u[5]]

    def _stamped_updates(self, finish: Callable[[Any], Any] | None) -> list[WindowUpdate]:
        """The windows stamped since the last flush/seal as updates (values through ``finish``), in last-write
        order; clears the stamps. A window expired before the flush is still reported (its entry was kept)."""
        base = self._flushed_seq + 1
        span = self._seq + 1 - base
        n = 0
        for _key, kw in self._touched:
            n += len(kw.stamps)  # type: ignore[arg-type]
        # order by stamp: a slot per write when windows are written a few times each, else a sort
        slots: list[Any] | None = [None] * span if span <= 8 * n else None
        by_seq: dict[int, WindowUpdate] = {}
        td = self.td
        for key, kw in self._touched:
            entries = kw.entries
            gone = kw.gone
            if slots is not None and finish is None:  # the common case, specialised
                if gone:  # expired windows, unless written again since
                    gone.update(entries)
                    entries = gone
                for s, seq in kw.stamps.items():  # type: ignore[union-attr]
                    e = entries[s]
                    slots[seq - base] = _new_update(WindowUpdate, (key, s, s + td, e[0], e[1], e[2]))
                kw.stamps = None
                kw.gone = None
                continue
            for s, seq in kw.stamps.items():  # type: ignore[union-attr]
                e = entries.get(s)
                if e is None:
                    e = gone[s]  # type: ignore[index]
                u = _new_update(WindowUpdate, (key, s, s + td, e[0] if finish is None else finish(e[0]), e[1], e[2]))
                if slots is not None:
                    slots[seq - base] = u
                else:
                    by_seq[seq] = u
            kw.stamps = None
            kw.gone = None
        self._touched = []
        self._flushed_seq = self._seq
        if slots is not None:
            return list(filter(None, slots))
        return [by_seq[seq] for seq in sorted(by_seq)]

    def _drop(self, key: Hashable, value: Any, ts: Any, reason: DropReason, stream_time: int | None = None) -> None:
        if self.collect_drops:
            st = self.observed_stream_time if stream_time is None else stream_time
            self.drops.append(DroppedRecord(key, value, ts, reason, st))

    def _open_key(self, key: Hashable, value: Any, t: int, close: int) -> Any:
        """The key's windows for an accepted record (marked dirty; raw record kept for the batch path)."""
        kw = self.store.windows_of(key)
        self.store.dirty.add(key)
        if self._plan is not None:
            self._keep_raw(key, kw, value, t, close)
        return kw

    def _keep_raw(self, key: Hashable, kw: Any, value: Any, t: int, close: int) -> None:
        plan = self._plan
        if kw.raw_ts is None:
            kw.raw_ts = []
            kw.raw_cols = [None if kind == "count" else [] for kind, _ in plan]
        i = bisect_right(kw.raw_ts, t)
        kw.raw_ts.insert(i, t)
        for (kind, field), col in zip(plan, kw.raw_cols):
            if col is not None:
                col.insert(i, value if field is None else value[field])
        if t < close:
            self.flagged_keys.add(key)

    def _emit_every(self, key: Hashable, kw: KeyWindows, start: int, entry: list) -> None:
        """Forward every put (R18, uncached)."""
        finish = self._finish
        acc = entry[0]
        self._out.append(  # type: ignore[union-attr]
            _new_update(
                WindowUpdate, (key, start, start + self.td, acc if finish is None else finish(acc), entry[1], entry[2])
            )
        )
        self.stats.updates_emitted += 1

    def _emit_update(self, key: Hashable, kw: KeyWindows, start: int, entry: list) -> None:
        """Record cache: keep the last put per window, ordered by last put (R21), by stamping the window with
        the next write sequence number (the flush sorts on it); the window's entry is the last put."""
        stamps = kw.stamps
        if stamps is None:
            stamps = self._open_stamps(key, kw)
        self._seq += 1
        stamps[start] = self._seq

    def _open_stamps(self, key: Hashable, kw: KeyWindows) -> dict[int, int]:
        """The key's stamps for the record cache, new since the last flush."""
        stamps = kw.stamps = {}
        self._touched.append((key, kw))
        return stamps

    def _emit_none(self, key: Hashable, kw: KeyWindows, start: int, entry: list) -> None:
        """Emit-on-close forwards nothing per put (R26)."""

    def _create(self, key: Hashable, kw: Any, start: int, acc: Any, ts: int, count: int) -> None:
        """Put a window that the scan did not find, and forward it."""
        self._put_new(key, kw, ((start, acc, ts, count),))

    def _put_new(self, key: Hashable, kw: KeyWindows, puts: Iterable[tuple[int, Any, int, int]]) -> None:
        """Put windows ``(start, acc, max_ts, count)`` the scan did not find, in this order, and forward them."""
        store = self.store
        entries = kw._entries  # the callers ended any lazy run
        stamps = None  # update mode: _emit_update inline
        if self._update:
            stamps = kw.stamps
            if stamps is None:
                stamps = self._open_stamps(key, kw)
        seq = self._seq
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
                if store.insert(key, kw, start, entry) and self._close:
                    self._pending_close.push(start, key)
            if stamps is not None:
                seq += 1
                stamps[start] = seq
            else:
                self._emit(self, key, kw, start, entry)
        self._seq = seq
        self.stats.windows_created += n

    def _add_new(self, key: Hashable, kw: Any, start: int, base: Any, base_count: int, value: Any, t: int, close: int) -> None:
        """``updateWindowAndForward`` for a window being created: ``base + value`` unless closed (R13)."""
        if start + self.td >= close:
            self._create(key, kw, start, self._accumulate(base, value, key), t, base_count + 1)
        else:
            self.stats.skipped_windows += 1

    def _process_fast(self, key: Hashable, value: Any, t: Any) -> list[WindowUpdate]:
        """:meth:`process` for update mode with Count/Sum (and no batch path). A valid record with
        ``t >= td`` and ``t >= close`` (not late, no write skipped) whose key is in order - ``t`` is at least
        every max ts of the key and no window starts after ``t`` - adds ``t`` to exactly the suffix of the key's
        windows that start after ``t - td``: that suffix is kept as a lazy run on the key (see
        :class:`~windowstore.store.KeyWindows`), O(1) per record plus one write per window leaving the run.
        Sum is lazy only while every sum of the key is an ``int`` (exact). Anything else takes :meth:`process`
        or :meth:`_process_reverse`, which end the run first."""
        if key is None or value is None or type(t) is not int or t < self.td or not self._lazy:
            return SlidingWindowProcessor._process_record(self, key, value, t)
        st = self.observed_stream_time
        if t > st:
            if t > MAX_TIMESTAMP:
                return SlidingWindowProcessor._process_record(self, key, value, t)
            self.observed_stream_time = st = t
        close = st - self.grace
        if t < close:  # late, or some of its windows are closed
            return SlidingWindowProcessor._process_record(self, key, value, t)
        stats = self.stats
        stats.records += 1
        stats.accepted += 1
        store = self.store
        kw = store.keys.get(key)
        if kw is None or kw.cols is not None or kw.raw_ts is not None:
            kw = store.windows_of(key)
        else:  # windows_of inline: purge (past the slack) the windows no read can see any more
            starts = kw.starts
            if starts and starts[0] < store.store_time - store._trim_lag:
                dropped = kw.trim_below(store.store_time - store._purge_lag)
                store.expired += dropped
                store._size -= dropped
        store.dirty.add(key)
        inc = 1
        if self._inline == 2 and (type(value) is not int or kw.exact is not True):  # Sum: while sums are ints
            if type(value) is not int:
                kw.exact = False
                self._process_reverse(key, value, t, close, kw)
                return []
            if kw.exact is None:
                kw.exact = all(type(e[0]) is int for e in kw._entries.values())
            if not kw.exact:
                self._process_reverse(key, value, t, close, kw)
                return []
        if self._inline == 2:
            inc = value
        kmax = kw.kmax
        if kmax is None:
            kmax = kw.kmax = max([e[1] for e in kw._entries.values()], default=-1)
        starts = kw.starts
        if t < kmax or (starts and starts[-1] > t):
            self._process_reverse(key, value, t, close, kw)
            return []
        td = self.td
        entries = kw._entries
        n = len(starts)
        left = t - td
        j = bisect_right(starts, left)  # starts[j:]: t - td < s <= t, every window containing t
        updated = n - j
        stamps = kw.stamps
        if stamps is None:
            stamps = self._open_stamps(key, kw)
        seq = self._seq
        act = kw.lz_act
        if act is not None:
            a = j - 1 if j and starts[j - 1] == act else bisect_left(starts, act)  # usually one window leaves
            if a > j:  # windows before the run would join it (not expected in order): start a new run
                kw.settle()
                act = None
            elif a < j:  # windows leaving the run (they no longer contain the newest record): real values back
                end = kw.lz_end
                if a + 1 == j and starts[a] <= end:  # KeyWindows.settle_range inline for the usual one window
                    e = entries[starts[a]]
                    e[0] += kw.lz_g
                    e[1] = kw.lz_t
                    e[2] += kw.lz_c
                    ie = n - 2 if n > 1 and starts[n - 2] == end else bisect_left(starts, end)  # usually n - 2
                    stamps[starts[a]] = kw.lz_seq + 1 + ie - a
                else:
                    kw.settle_range(a, j)
            if not updated:
                kw.lz_act = None
        if updated:
            if act is None:  # a new run
                kw.lz_g = inc
                kw.lz_c = 1
            else:
                kw.lz_g += inc
                kw.lz_c += 1
            kw.lz_act = starts[j]
            kw.lz_t = t
            kw.lz_end = starts[-1]
            kw.lz_seq = seq
            seq += updated
        kw.kmax = t
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
                self._seq = seq
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
                    if kw.lz_act is not None:  # joins the run: stored minus the run totals
                        e = [inc - kw.lz_g, t, 1 - kw.lz_c]
                    else:
                        e = [inc, t, 1]
                    entries[p1] = e
                    starts.append(p1)
                    store.key_max_start[key] = p1
                    store._size += 1
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
                store._size += 1
            stamps[left] = seq
            if left > store.store_time:
                store.store_time = left
        self._seq = seq
        if updated:
            stats.windows_updated += updated
        if created:
            stats.windows_created += created
        return []

    def _process_reverse(self, key: Hashable, value: Any, t: int, close: int, kw: KeyWindows | None = None) -> None:
        """``processReverse`` + ``createWindows`` (R10, R12) for a record with ``t >= td``.

        The scan's windows, newest first, fall in four groups (only starts ``>= lo`` are visible): the
        record's right window ``t+1`` (exists?); the windows with ``t-td < s <= t``, which contain ``t``
        before their end (``t`` is added; the newest one's value before that is the right-window copy); the
        left window ``[t-td, t]`` (``t`` is added; its max ts is ``prev``, or shows a duplicate); the newest
        window ending before ``t`` (leftWinAgg, and ``prev``). Writes go newest first, as in Kafka Streams."""
        td = self.td
        store = self.store
        if kw is None:
            kw = store.windows_of(key)  # _open_key inline
            store.dirty.add(key)
        if self._plan is not None:
            self._keep_raw(key, kw, value, t, close)
        if self._lazy:  # end the run; keep what _process_fast checks true
            if kw.lz_act is not None:
                kw.settle()
            if kw.kmax is not None and t > kw.kmax:
                kw.kmax = t
            if kw.exact and type(value) is not int:
                kw.exact = False
        starts = kw.starts
        entries = kw._entries
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
        inline = self._inline
        inc = None if not inline else 1 if inline == 1 else value  # what Count / Sum add
        step = self._bind(value, key) if inc is None else None  # acc -> acc with this record folded in
        out = self._out
        stamps = None  # update mode: the record cache's stamps of this key (see _emit_update)
        if self._update:
            stamps = kw.stamps
            if stamps is None:
                stamps = self._open_stamps(key, kw)
            seq = self._seq
        if updated:
            finish = self._finish
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
                self._seq = seq
            elif out is not None:
                self.stats.updates_emitted += updated
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
                self._emit(self, key, kw, left, e)
            else:
                skipped += 1
            if old_ts >= t:  # duplicate timestamp: every window it needs exists already (R10.3, R15)
                self._count_writes(updated, skipped)
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
                    acc = step(self.aggregation.create()) if inc is None else 0 + inc
                    puts.append((p1, acc, t, 1))
                else:
                    skipped += 1
        if not left_created:
            if t >= close:
                if left_agg is not None and left <= prev:
                    acc = step(left_agg[0]) if inc is None else left_agg[0] + inc
                    puts.append((left, acc, t, left_agg[2] + 1))
                else:
                    acc = step(self.aggregation.create()) if inc is None else 0 + inc
                    puts.append((left, acc, t, 1))
            else:
                skipped += 1
        if not right_created and ra_ts > t:
            puts.append((hi, ra_acc, ra_ts, ra_count))
        self._count_writes(updated, skipped)
        if puts:
            self._put_new(key, kw, puts)

    def _count_writes(self, updated: int, skipped: int) -> None:
        stats = self.stats
        if updated:
            stats.windows_updated += updated
        if skipped:
            stats.skipped_windows += skipped

    def _process_early(self, key: Hashable, value: Any, t: int, close: int) -> None:
        """``processEarly`` (R11) for a record with ``0 <= t < td``: the combined window ``[0, td]``."""
        store = self.store
        kw = self._open_key(key, value, t, close)
        starts = kw.starts
        entries = kw.entries  # ends a lazy run
        if self._lazy:  # keep what _process_fast checks true
            if kw.kmax is not None and t > kw.kmax:
                kw.kmax = t
            if kw.exact and type(value) is not int:
                kw.exact = False
        lo = store.read_bound()
        if lo < 0:
            lo = 0
        hi = t + 1
        td = self.td
        combined = None
        right_agg = None
        right_created = False
        prev = None
        accumulate = self._accumulate
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
                    self.stats.windows_updated += 1
                    self._emit(self, key, kw, s, e)
                else:
                    self.stats.skipped_windows += 1
            else:  # s == t + 1
                right_created = True

        if right_agg is None and combined is not None and combined[1] > t:
            right_agg = combined
        if not right_created and right_agg is not None and right_agg[1] > t:
            self._create(key, kw, hi, right_agg[0], right_agg[1], right_agg[2])
        if prev is not None and prev + 1 not in entries:
            self._add_new(key, kw, prev + 1, self.aggregation.create(), 0, value, t, close)
        if combined is None:
            self._add_new(key, kw, 0, self.aggregation.create(), 0, value, t, close)
        elif td >= close:
            e = entries[0]
            e[0] = accumulate(combined[0], value, key)
            e[1] = combined[1] if combined[1] > t else t
            e[2] = combined[2] + 1
            self.stats.windows_updated += 1
            self._emit(self, key, kw, 0, e)
        else:
            self.stats.skipped_windows += 1

    def _maybe_emit_final(self, close: int, out: list[WindowUpdate]) -> None:
        """``maybeForwardFinalResult`` (R27): emit every window that closed since the last emission."""
        if self.emit_interval_ms:
            now = self._clock() * 1000.0
            if now < self._next_emit_ms:
                return
            self._next_emit_ms = now + self.emit_interval_ms
        bounds = self._emission_bounds(close)
        if bounds is None:
            return
        lower, upper = bounds
        bound = max(lower, self.store.read_bound())  # below it: the time-ordered store's retention (R29)
        emitted = self._final_updates((s, k) for s, k in zip(*self._pending_close.pop_through(upper)) if s >= bound)
        out.extend(emitted)
        self.stats.updates_emitted += len(emitted)
        self.last_emit_close_time = close

    def _emission_bounds(self, close: int) -> tuple[int, int] | None:
        """``(lower, upper)``: the window starts of the emission round at ``close`` (R27), both inclusive;
        ``None`` when there is no round (nothing closed since the last one, or nothing can be closed yet)::

            last round's close  L              this round's close  C
            starts emitted:  [max(0, L - td) .. C - td - 1]     (a window [s, s + td] is closed once s + td < C)
        """
        last = self.last_emit_close_time
        if last != NO_TIMESTAMP and last >= close:
            return None
        upper = close - self.td - 1
        if upper < 0:
            return None
        return (0 if last == NO_TIMESTAMP else max(0, last - self.td)), upper

    def _final_updates(self, windows: Iterable[tuple[int, Hashable]]) -> list[WindowUpdate]:
        """The final updates of ``windows`` ``(start, key)``, in that order, read from the keys' entries (a key
        held as columns is materialized); a window no longer stored is left out."""
        store = self.store
        finish = self._finish
        td = self.td
        out = []
        for start, key in windows:
            kw = store._load(key)
            e = None if kw is None else kw._entries.get(start)  # close mode: never a lazy run
            if e is not None:
                acc = e[0]
                out.append(_new_update(WindowUpdate, (key, start, start + td, acc if finish is None else finish(acc),
                                                      e[1], e[2])))
        return out

    # ------------------------------------------------------------------------------------------------ state
    def export_meta(self) -> bytes:
        """The task meta (stream time, emit progress, expiry index, ...): see :mod:`windowstore.serde`."""
        from .serde import encode_meta

        return encode_meta(self)

    def export_keys(self, keys: Iterable[Hashable]) -> dict[Hashable, bytes | None]:
        """Per-key window blobs; ``None`` for a key that has no window left (delete it from the backend).
        Keys that are neither in memory nor expired (never loaded, so unchanged) are left out."""
        from .serde import encode_key_windows

        store = self.store
        out: dict[Hashable, bytes | None] = {}
        for key in keys:
            if key not in store.key_max_start:
                out[key] = None
                continue
            kw = store.keys.get(key)
            if kw is not None:  # as held: a batch-path key is written from its columns, not materialized
                out[key] = encode_key_windows(kw) if len(kw) else None
        return out

    def dirty_keys(self) -> set[Hashable]:
        """Keys whose windows changed since :meth:`clear_dirty_keys` (expiry included)."""
        return set(self.store.dirty)

    def clear_dirty_keys(self) -> None:
        self.store.clear_dirty()

    def to_bytes(self) -> bytes:
        """A whole-task snapshot (meta + every key)."""
        from .serde import dump_processor

        return dump_processor(self)

    @classmethod
    def from_bytes(
        cls, data: bytes, windows: SlidingWindows, aggregation: Aggregation, emit: EmitMode | str, **kwargs: Any
    ) -> "SlidingWindowProcessor":
        """Inverse of :meth:`to_bytes`; the definition must match the one the snapshot was written with."""
        from .serde import load_processor_state

        proc = cls(windows, aggregation, emit, **kwargs)
        load_processor_state(proc, data)
        return proc

    @classmethod
    def from_state(
        cls,
        windows: SlidingWindows,
        aggregation: Aggregation,
        emit: EmitMode | str,
        meta: bytes | None,
        loader: Callable[[Hashable], bytes | None],
        **kwargs: Any,
    ) -> "SlidingWindowProcessor":
        """A processor over external state: ``meta`` from :meth:`export_meta` (``None`` for a new task) and
        ``loader(key)`` returning the key's blob from :meth:`export_keys` (``None`` if absent), called the
        first time a key is touched."""
        from .serde import apply_meta, decode_key_windows, entries_from_columns

        proc = cls(windows, aggregation, emit, **kwargs)
        if meta is not None:
            apply_meta(proc, meta)
        # what ``load`` needs, read now: a closure over the processor or its store, kept by the store, would
        # make a reference cycle (see :class:`_RecordStep`)
        as_entries = proc.store.materialize is None  # no batch path: columns a batch-path processor wrote
        agg = proc.aggregation

        def load(key: Hashable) -> Any:
            blob = loader(key)
            if blob is None:
                return None
            kw = decode_key_windows(blob)
            if kw.cols is not None and as_entries:
                entries_from_columns(kw, agg)
            return kw

        proc.store.loader = load
        return proc
