"""Time windows - tumbling and hopping - with Kafka Streams' ``TimeWindows`` / ``KStreamWindowAggregate`` semantics.

Rule numbers (T1..) refer to ``docs/rules-window-types.md``.

Windows (T1, T2). A window is ``[start, start + size)``: start INCLUSIVE, end EXCLUSIVE, as ``TimeWindow.end()``.
Starts are the multiples of ``advance`` (tumbling: ``advance == size``). A record at ``t`` falls in every window
whose start is in ``(t - size, t]``, and no start is negative (fewer windows near 0)::

    size = 10, advance = 4, record t = 25
                 start 16 [16, 26)   |==========)
                 start 20 [20, 30)       |==========)
                 start 24 [24, 34)           |==========)
    t=25 ------------------------------------^
    start 12 is not one of them: [12, 22) ends before 25.

    tumbling size = 10: t = 25 -> [20, 30) only;  t = 30 -> [30, 40) (an end is never inside its window)

Close (T4, T5). ``st`` = stream time of the task (largest timestamp seen, T3); ``close = st - grace``. A window
is open while ``end > close``; an update for a closed window is skipped and counted (once per window, T7)::

    window [20, 30)        grace 5
    |==========)- - - - -|
               30        35
    st = 34: close 29 < 30, open    st = 35: close 30 = end, closed

Emit modes (T8-T10): ``every`` = each window write is forwarded (uncached store); ``update`` = the last value of
each window written since the previous :meth:`TimeWindowProcessor.flush`, in last-write order (Kafka Streams'
record cache); ``close`` = once per window, after the first record that makes ``close >= end``, ordered by window
start and then key bytes over all keys (``EmitStrategy.onWindowClose``). Every output's timestamp is the largest
record timestamp in the window (T6).
"""

from __future__ import annotations

import bisect
import heapq
import pickle
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .aggregations import Aggregation, Composite
from .columns import update_columns
from .family_common import FamilyStats, check_millis, key_bytes, valid_timestamp
from .output import gc_paused
from .time_windows_batch import BatchFallback, batch_kinds
from .time_windows_table import WindowTable
from .updates import DroppedRecord, DropReason, EmitMode, WindowUpdate
from .windows import ConfigError

__all__ = ["TimeWindowProcessor", "TimeWindows"]

_NO_TIMESTAMP = -1  # ConsumerRecord.NO_TIMESTAMP: stream time and last close time before the first record


@dataclass(frozen=True, slots=True)
class TimeWindows:
    """Kafka Streams ``TimeWindows.ofSizeAndGrace(size).advanceBy(advance)``; ``advance_ms=None`` = tumbling.

    Kafka Streams' checks (T1): ``size > 0``, ``0 < advance <= size``, ``grace >= 0``; the store retention
    (``Materialized.withRetention``) defaults to ``size + grace`` and may not be smaller.
    """

    size_ms: int
    advance_ms: int | None = None
    grace_ms: int = 0
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        check_millis("size_ms", self.size_ms, minimum=1)
        check_millis("grace_ms", self.grace_ms, minimum=0)
        if self.advance_ms is not None:
            check_millis("advance_ms", self.advance_ms, minimum=1)
            if self.advance_ms > self.size_ms:
                raise ConfigError(f"advance_ms must be no larger than size_ms={self.size_ms}, got {self.advance_ms}")
        if self.retention_ms is not None:
            check_millis("retention_ms", self.retention_ms, minimum=self.size_ms + self.grace_ms)

    @property
    def advance(self) -> int:
        return self.size_ms if self.advance_ms is None else self.advance_ms

    @property
    def is_tumbling(self) -> bool:
        return self.advance == self.size_ms

    @property
    def retention(self) -> int:
        return self.size_ms + self.grace_ms if self.retention_ms is None else self.retention_ms

    @property
    def windows_per_record(self) -> int:
        """Windows a record falls in away from 0: ``ceil(size / advance)``."""
        return -(-self.size_ms // self.advance)

    def window_starts(self, ts: int) -> range:
        """Starts of the windows containing ``ts``, ascending: ``TimeWindows.windowsFor`` (T2)."""
        advance = self.advance
        first = (max(0, ts - self.size_ms + advance) // advance) * advance
        return range(first, ts + 1, advance)

    def window_end(self, start: int) -> int:
        """Exclusive end of the window starting at ``start``."""
        return start + self.size_ms


class _Window:
    """One window's state: accumulator, largest record timestamp (the output timestamp), record count."""

    __slots__ = ("acc", "count", "ts")

    def __init__(self, acc: Any, ts: int, count: int) -> None:
        self.acc = acc
        self.ts = ts
        self.count = count


class TimeWindowProcessor:
    """The reference record path for one task: mirrors ``KStreamWindowAggregate.KStreamWindowAggregateProcessor``.

    ``process(key, value, ts)`` returns what Kafka Streams forwards for that record (``every``: the window
    writes; ``close``: the windows the record closed; ``update``: nothing - see :meth:`flush`). Output
    :class:`WindowUpdate` s carry ``start``/``end`` as ``Window.start()`` / ``Window.end()`` (end exclusive).

    It meets the service's :class:`~windowstore.contract.TaskProcessor` contract. The state is the per-window
    aggregates, stream time, the last close time and (update mode) the not-yet-flushed windows, kept as:

    * an **index** of every window held, ``start -> keys`` (always complete: close mode emits and every mode
      forgets windows across all keys by start) - part of the task meta (:meth:`export_meta`);
    * the **windows** of each key, ``start -> (accumulator, output timestamp, record count)`` - one blob per key
      (:meth:`export_keys`), loaded through the loader of :meth:`from_state` the first time the key is touched.

    The index is what is true: a window forgotten (T12) while its key was not loaded is dropped from the index
    only, and filtered out of the key's (older) blob when the key is loaded; a key left with no window is a dirty
    key exported as ``None``. :meth:`export_state` / :meth:`restore_state` move the whole state as plain data.

    The batch path (:meth:`process_columns`) keeps the loaded keys' windows and update mode's unflushed windows as
    columns instead (:mod:`windowstore.time_windows_table`: the same values, no object per window); the record
    path moves them back into the dicts before it touches them, the batch path into the columns again, so each
    path reads its own form and the reference code reads as Kafka Streams' processor does.
    """

    def __init__(
        self,
        windows: TimeWindows,
        aggregation: Aggregation,
        emit: EmitMode | str = EmitMode.UPDATE,
        *,
        collect_drops: bool = False,
        batch: bool = False,
    ) -> None:
        self.windows = windows
        self.aggregation = aggregation
        self.emit = EmitMode.parse(emit)
        self.stats = FamilyStats()
        self.observed_stream_time = _NO_TIMESTAMP
        self.last_emit_close_time = _NO_TIMESTAMP
        #: keep every dropped record (null key, invalid timestamp, late) for :meth:`take_drops`
        self.collect_drops = collect_drops
        self.drops: list[DroppedRecord] = []
        self._batch = batch
        #: the loaded keys' windows (a key held but not yet loaded is in ``_held`` only)
        self._by_key: dict[Hashable, dict[int, _Window]] = {}
        # the index: distinct window starts that hold windows, ascending, and the keys holding each
        self._starts: list[int] = []
        self._keys_at: dict[int, dict[Hashable, None]] = {}
        self._held: dict[Hashable, int] = {}  # key -> its windows in the index
        self._n_windows = 0
        self._expired = 0
        self._loader: Callable[[Hashable], bytes | None] | None = None
        self._changed: set[Hashable] = set()  # keys to export (dirty_keys)
        # update mode: (key, start) -> None, in last-write order (NamedCache.dirtyKeys: remove, then add)
        self._dirty: dict[tuple[Hashable, int], None] = {}
        # close mode, batch path: the windows process_columns emitted, for flush_columns
        self._emitted: list[WindowUpdate] = []
        # the batch path's form of the state (windowstore.time_windows_table): loaded keys' windows and update
        # mode's unflushed windows as columns; a key is held in ``_by_key`` or here, never in both
        self._table: WindowTable | None = None

    # ------------------------------------------------------------------------------------------ the contract
    @property
    def batch(self) -> bool:
        """Whether the caller should use :meth:`process_columns` / :meth:`flush_columns` (``batch=True``)."""
        return self._batch

    @property
    def expired_windows(self) -> int:
        """Windows forgotten so far (T12: closed and flushed, or emitted on close)."""
        return self._expired

    @property
    def windows_held(self) -> int:
        """Windows held (in the index; a key not loaded yet holds its windows in its blob)."""
        return self._n_windows

    @property
    def windows_in_columns(self) -> int:
        """Windows held in the batch path's columnar form (:mod:`windowstore.time_windows_table`); the others are
        in the record path's form or not loaded yet."""
        return 0 if self._table is None else len(self._table)

    def take_drops(self) -> list[DroppedRecord]:
        """Return and clear the dropped records collected so far (``collect_drops=True``): null keys, invalid
        timestamps and records none of whose windows was open (``LATE``; a partially late record is accepted and
        only counted in ``skipped_windows``, T7)."""
        drops, self.drops = self.drops, []
        return drops

    def expire(self) -> int:
        """Forget the windows no record can update any more and that wait for no flush (every/update; close mode
        forgets them when it emits them); returns how many."""
        before = self._expired
        if self.emit is not EmitMode.CLOSE:
            self._purge_closed(self.observed_stream_time - self.windows.grace_ms)
        return self._expired - before

    def process_columns(
        self,
        keys: Sequence[Hashable],
        timestamps: Any,
        fields: dict[str | None, Any] | None = None,
        values: Sequence[Any] | None = None,
    ) -> bool:
        """The records ``(keys[i], values[i], timestamps[i])`` through the batch path
        (:mod:`windowstore.time_windows_batch`; identical to :meth:`process` per record), what they emit kept for
        :meth:`flush_columns`. ``values`` may be left out when ``fields`` holds the value fields as columns
        (``{None: column}``: the bare values). Returns whether the batch path was taken (else the record path)."""
        from . import time_windows_batch

        if values is None:
            values = _values_of(fields or {}, len(keys))
        ts = timestamps.tolist() if hasattr(timestamps, "tolist") else list(timestamps)
        out, taken = time_windows_batch.run_batch(self, keys, ts, values)
        self._emitted += out
        return taken

    def flush_columns(self) -> dict[str, Any]:
        """What :meth:`process_columns` emitted since the last call and :meth:`flush`, as the columns
        :func:`~windowstore.columns.update_columns` makes (update mode over the batch path's columns: built from
        them, without an object per window)."""
        updates, self._emitted = self._emitted, []
        if not updates and self._table_flushable():
            cols = self._flush_table()
            if cols is not None:
                return cols
        return update_columns(updates + self.flush(), self.aggregation)

    # ------------------------------------------------------------------------------------------ record path

    def process(self, key: Hashable, value: Any, ts: Any) -> list[WindowUpdate]:
        """Aggregate one record (T3-T7) and return the updates Kafka Streams forwards while processing it."""
        if self._table is not None:  # the batch path's columns back to this path's form
            self._to_dicts()
        stats = self.stats
        stats.records += 1
        if key is None:  # T7: only a null KEY is dropped; a null value is aggregated (T11)
            stats.dropped_null_key += 1
            self._drop(key, value, ts, DropReason.NULL_KEY)
            return []
        t = valid_timestamp(ts)
        if t is None:
            stats.dropped_invalid_timestamp += 1
            self._drop(key, value, ts, DropReason.INVALID_TIMESTAMP)
            return []
        if t > self.observed_stream_time:  # T3
            self.observed_stream_time = t
        window_close_time = self.observed_stream_time - self.windows.grace_ms  # T4
        size = self.windows.size_ms
        out: list[WindowUpdate] = []
        emit_every = self.emit is EmitMode.EVERY
        windows = self._by_key.get(key)
        if windows is None and key in self._held:
            windows = self._load(key)
        step = None
        updated = 0
        for start in self.windows.window_starts(t):  # ascending start, as windowsFor's LinkedHashMap
            end = start + size
            if end <= window_close_time:  # T5/T7: skipped and counted per closed window
                stats.skipped_windows += 1
                continue
            if step is None:
                step = self.aggregation.bind(value, key)
            if windows is None:
                windows = self._by_key[key] = {}
            w = windows.get(start)
            if w is None:
                w = windows[start] = _Window(step(self.aggregation.create()), t, 1)
                self._index_add(key, start)
                stats.windows_created += 1
            else:
                w.acc = step(w.acc)
                if t > w.ts:  # T6: newTimestamp = max(record ts, stored ts)
                    w.ts = t
                w.count += 1
                stats.windows_updated += 1
            updated += 1
            if emit_every:
                out.append(self._update(key, start, w))
            elif self.emit is EmitMode.UPDATE:
                dk = (key, start)
                self._dirty.pop(dk, None)
                self._dirty[dk] = None
        if updated:
            stats.accepted += 1
            self._changed.add(key)
        else:
            stats.dropped_late += 1
            self._drop(key, value, ts, DropReason.LATE)
        if self.emit is EmitMode.CLOSE:
            self._maybe_forward_final_result(window_close_time, out)
        else:
            self._purge_closed(window_close_time)
        stats.updates_emitted += len(out)
        return out

    def _drop(self, key: Hashable, value: Any, ts: Any, reason: DropReason) -> None:
        if self.collect_drops:
            self.drops.append(DroppedRecord(key, value, ts, reason, self.observed_stream_time))

    def flush(self) -> list[WindowUpdate]:
        """Update mode: the last value of every window written since the previous flush, in last-write order
        (T9: the record cache's flush on commit). Other modes: nothing (they forward from :meth:`process`)."""
        if self._table_flushable():
            return self._flush_table_updates()
        if not self._dirty:
            return []
        windows_of = self._windows_of  # a key not loaded yet is loaded here (lazy keys)
        agg = self.aggregation
        finish = None if agg.finish_is_identity else agg.finish
        size = self.windows.size_ms
        new = tuple.__new__  # WindowUpdate's fields in order, without its Python-level __new__ (one per window)
        out: list[WindowUpdate] = []
        with gc_paused():  # one tuple per window: see output.gc_paused
            for (key, start), w in zip(self._dirty, [(windows_of(k) or _NO_WINDOWS).get(s) for k, s in self._dirty]):
                if w is not None:  # as _update, inlined: a flush forwards every window written since the last one
                    value = w.acc if finish is None else finish(w.acc)
                    out.append(new(WindowUpdate, (key, start, start + size, value, w.ts, w.count)))
        self._dirty.clear()
        self._purge_closed(self.observed_stream_time - self.windows.grace_ms)
        self.stats.updates_emitted += len(out)
        return out

    # ------------------------------------------------------------------------------------------ emit on close

    def _maybe_forward_final_result(self, window_close_time: int, out: list[WindowUpdate]) -> None:
        """``AbstractKStreamTimeWindowAggregateProcessor.maybeForwardFinalResult`` (T10), emit interval 0."""
        last = self.last_emit_close_time
        if not (last == _NO_TIMESTAMP or last < window_close_time):
            return
        size = self.windows.size_ms
        upper = window_close_time - size  # inclusive bound on window START: end <= close
        if upper < 0:
            return
        lower = 0 if last == _NO_TIMESTAMP else max(0, last - size) + 1
        if last != _NO_TIMESTAMP and self.windows.window_starts(upper) == self.windows.window_starts(lower - 1):
            return  # shouldRangeFetch: no new window to emit; last close time NOT advanced
        starts = self._starts
        i = bisect.bisect_left(starts, lower)
        j = bisect.bisect_right(starts, upper)
        # a time-ordered store: start, then key bytes, all keys interleaved
        emitted = [(key, start) for start in starts[i:j] for key in sorted(self._keys_at[start], key=key_bytes)]
        for (key, start), w in zip(emitted, self._held_windows(emitted), strict=True):
            out.append(self._update(key, start, w))
        self.last_emit_close_time = window_close_time
        # emitted windows can never be updated (their end <= close) nor emitted again: forget them
        for start in starts[:j]:
            self._forget_start(start)
        del starts[:j]
        self._trim_table()

    # ------------------------------------------------------------------------------------------ batch contract
    # What an accelerator (windowstore.time_windows_batch) may do to this processor's state. Each call does
    # exactly what the record path does to the same window, so a batch path that makes the record path's writes
    # (in any order, values already combined) leaves the processor in the record path's state.

    def get_window(self, key: Hashable, start: int) -> tuple[Any, int, int] | None:
        """``(accumulator, output timestamp, record count)`` of one held window, or ``None``."""
        if self._table is not None:
            self._to_dicts()
        w = (self._windows_of(key) or _NO_WINDOWS).get(start)
        return None if w is None else (w.acc, w.ts, w.count)

    def write_windows(
        self,
        keys: Sequence[Hashable],
        starts: Sequence[int],
        accs: Sequence[Any],
        tss: Sequence[int],
        counts: Sequence[int],
        combine_all: Callable[[list[Any], Sequence[Any]], list[Any]],
    ) -> int:
        """Window ``j`` = ``(keys[j], starts[j])``, all distinct: a held window becomes ``(combined acc, max(ts),
        count + counts[j])``, a new one takes the columns' values; then (update mode) the windows move to the end
        of the last-write order in column order (T9). ``combine_all(held accumulators, the columns'
        accumulators for them)`` merges every held window in one call (a batch path does it a column at a time)
        before anything changes: if it raises, the state is untouched. Returns windows created."""
        if self._table is not None:
            self._to_dicts()
        by_key = self._by_key
        windows_of = self._windows_of  # a key not loaded yet is loaded here, before anything changes
        held = [(windows_of(k) or _NO_WINDOWS).get(s) for k, s in zip(keys, starts)]
        at = [j for j, w in enumerate(held) if w is not None]
        created = len(held) - len(at)
        if at:
            ws: Sequence[Any] = held  # every window held already: a batch of a steady stream
            new_accs, new_ts, new_counts = accs, tss, counts
            if created:
                ws = [held[j] for j in at]
                new_accs, new_ts, new_counts = [accs[j] for j in at], [tss[j] for j in at], [counts[j] for j in at]
            merged = combine_all([w.acc for w in ws], new_accs)
            for w, acc, t, c in zip(ws, merged, new_ts, new_counts):
                w.acc = acc
                if t > w.ts:
                    w.ts = t
                w.count += c
        self._changed.update(keys)  # every written key is exported (dirty_keys)
        if created:
            for j, w in enumerate(held):
                if w is None:
                    key, start = keys[j], starts[j]
                    windows = by_key.get(key)
                    if windows is None:
                        windows = by_key[key] = {}
                    windows[start] = _Window(accs[j], tss[j], counts[j])
                    self._index_add(key, start)
        if self.emit is EmitMode.UPDATE:
            dirty = self._dirty
            if not dirty:  # the usual case: flushed since the last batch
                self._dirty = dict.fromkeys(zip(keys, starts))
            else:
                written = list(zip(keys, starts))
                for dk in written:  # a re-written window moves to the end (NamedCache.dirtyKeys)
                    dirty.pop(dk, None)
                dirty.update(dict.fromkeys(written))
        return created

    def key_ids(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Ids of ``keys`` in the batch path's columnar state (:class:`~windowstore.time_windows_table.WindowTable`,
        made here); :meth:`write_columns` takes windows sorted by these ids."""
        if self._table is None:
            kinds = batch_kinds(self.aggregation)
            if kinds is None:
                raise BatchFallback
            self._table = WindowTable(kinds, type(self.aggregation) is not Composite, self.windows.advance)
        return self._table.key_ids(keys)

    def write_columns(
        self,
        kid: np.ndarray,
        starts: np.ndarray,
        tss: np.ndarray,
        counts: np.ndarray,
        parts: list[np.ndarray],
        order: np.ndarray | None,
    ) -> int:
        """:meth:`write_windows` as columns: window ``j`` = ``(key of id kid[j], starts[j])`` (ids of
        :meth:`key_ids`), distinct and sorted by ``(kid, start)``, ``parts`` = the accumulator's part columns
        (:class:`~windowstore.time_windows_table.WindowTable`'s part rows), ``order`` = the write order (update
        mode, else ``None``). The windows are combined in the columnar state; raises
        :class:`~windowstore.time_windows_batch.BatchFallback`, nothing written, when a value does not fit it.
        Returns windows created."""
        table = self._table
        assert table is not None  # made by key_ids, which numbered kid
        keys = table.keys_of(kid)
        for key in keys:  # a key not loaded yet is loaded here, before anything changes
            if key in self._held and key not in self._by_key and key not in table.loaded:
                self._load(key)
        self._absorb()
        created_kid, created_start = table.write(kid, starts, tss, counts, parts, order)
        self._changed.update(keys)  # every written key is exported (dirty_keys)
        if len(created_kid):
            self._index_add_columns(table.keys, created_kid, created_start)
        return len(created_kid)

    def close_windows(self, window_close_time: int) -> list[WindowUpdate]:
        """What the record path does after a record that left close time at ``window_close_time``: close mode
        emits the windows it closed (T10) and returns them; other modes forget closed, flushed windows."""
        if self.emit is EmitMode.CLOSE:
            out: list[WindowUpdate] = []
            self._maybe_forward_final_result(window_close_time, out)
            return out
        self._purge_closed(window_close_time)
        return []

    # ------------------------------------------------------------------------------------------ the index

    def _update(self, key: Hashable, start: int, w: _Window) -> WindowUpdate:
        agg = self.aggregation
        value = w.acc if agg.finish_is_identity else agg.finish(w.acc)
        return WindowUpdate(key, start, start + self.windows.size_ms, value, w.ts, w.count)

    def _index_add(self, key: Hashable, start: int) -> None:
        keys = self._keys_at.get(start)
        if keys is None:
            keys = self._keys_at[start] = {}
            bisect.insort(self._starts, start)
        keys[key] = None
        self._held[key] = self._held.get(key, 0) + 1
        self._n_windows += 1

    def _index_add_columns(self, names: list[Hashable], kid: np.ndarray, starts: np.ndarray) -> None:
        """:meth:`_index_add` for the new windows ``(names[kid[j]], starts[j])``, a start at a time."""
        by_start = np.argsort(starts, kind="stable")
        starts = starts[by_start]
        keys = list(map(names.__getitem__, kid[by_start].tolist()))
        cut = np.flatnonzero(starts[1:] != starts[:-1]) + 1
        firsts = np.concatenate([[0], cut]).tolist()
        new_starts = []
        for start, lo, hi in zip(starts[firsts].tolist(), firsts, [*firsts[1:], len(keys)], strict=True):
            at = self._keys_at.get(start)
            if at is None:
                self._keys_at[start] = dict.fromkeys(keys[lo:hi])
                new_starts.append(start)
            else:
                at.update(dict.fromkeys(keys[lo:hi]))
        if new_starts:
            self._starts[:] = heapq.merge(self._starts, new_starts)
        held = self._held
        ids, counts = np.unique(kid, return_counts=True)
        for key, n in zip(map(names.__getitem__, ids.tolist()), counts.tolist(), strict=True):
            held[key] = held.get(key, 0) + n
        self._n_windows += len(kid)

    def _forget_start(self, start: int) -> None:
        """Forget every window at ``start`` (the caller removes ``start`` from ``_starts``)."""
        for key in self._keys_at.pop(start, ()):
            windows = self._by_key.get(key)
            if windows is not None:
                del windows[start]
                if not windows:
                    del self._by_key[key]
            left = self._held[key] - 1
            if left:
                self._held[key] = left
            else:  # the key holds nothing: its blob goes (export_keys: None)
                del self._held[key]
                self._changed.add(key)
            self._n_windows -= 1
            self._expired += 1

    def _purge_closed(self, window_close_time: int) -> None:
        """Every/update mode: a window whose end <= close can never be written again (T5); once flushed it is
        dropped here (Kafka Streams' store keeps it until retention, but no read can reach it)."""
        starts = self._starts
        size = self.windows.size_ms
        n = 0
        dirty = self._dirty
        # the columns' unflushed windows (all held: a purge never passes one) start at first_dirty or later
        first_dirty = None if self._table is None else self._table.first_dirty_start()
        while n < len(starts) and starts[n] + size <= window_close_time:
            start = starts[n]
            if dirty and any((k, start) in dirty for k in self._keys_at[start]):
                break
            if first_dirty is not None and start >= first_dirty:
                break
            self._forget_start(start)
            n += 1
        if n:
            del starts[:n]
            self._trim_table()

    def __len__(self) -> int:
        """Windows held."""
        return self._n_windows

    # ------------------------------------------------------------------------------------------ batch columns
    # The batch path's form of the state (windowstore.time_windows_table): what it holds is exactly what the
    # dicts would hold; these move windows between the two forms and read the columns where the contract asks.

    def _absorb(self) -> None:
        """The record path's windows and unflushed windows into the columns (the batch path takes over);
        :class:`~windowstore.time_windows_batch.BatchFallback`, nothing moved, when a value does not fit them."""
        table = self._table
        if table is None or not (self._by_key or self._dirty):
            return
        rows = [(k, s, w.acc, w.ts, w.count) for k, ws in self._by_key.items() for s, w in ws.items()]
        table.absorb(rows, list(self._dirty))
        self._by_key.clear()
        self._dirty = {}

    def _to_dicts(self) -> None:
        """The columns back into the record path's dicts (the record path takes over); the columns go."""
        table = self._table
        if table is None:
            return
        self._table = None
        rows, dirty = table.take_rows()
        by_key = self._by_key
        for key, start, acc, ts, count in rows:
            windows = by_key.get(key)
            if windows is None:
                windows = by_key[key] = {}
            windows[start] = _Window(acc, ts, count)
        if dirty:  # the columns' unflushed windows were written before the dicts' (if any)
            merged = dict.fromkeys(dirty)
            for dk in self._dirty:
                merged.pop(dk, None)
                merged[dk] = None
            self._dirty = merged

    def _unflushed(self) -> list[tuple[Hashable, int]]:
        """Update mode's unflushed windows, in last-write order, whichever form holds them."""
        pairs = list(self._dirty)
        if self._table is None:
            return pairs
        merged = dict.fromkeys(self._table.dirty_pairs())
        for dk in pairs:
            merged.pop(dk, None)
            merged[dk] = None
        return list(merged)

    def _trim_table(self) -> None:
        """The columns forget what the index forgot: every forget drops a prefix of the starts held."""
        if self._table is not None:
            self._table.trim(self._starts[0] if self._starts else None)

    def _table_flushable(self) -> bool:
        """Whether a flush can read the columns: they exist, and every unflushed window's key is loaded into them
        (else, a value the columns cannot hold, the state goes back to the dicts and ``False``)."""
        table = self._table
        if table is None:
            return False
        if not table.dirty.shape[1] and not self._dirty:
            return True  # nothing to flush
        for key in table.dirty_keys() + [k for k, _s in self._dirty]:
            if key in self._held and key not in self._by_key and key not in table.loaded:
                self._load(key)
        try:
            self._absorb()
        except BatchFallback:
            self._to_dicts()
            return False
        return True

    def _flush_table_updates(self) -> list[WindowUpdate]:
        """:meth:`flush` over the columns (after :meth:`_table_flushable`): a :class:`WindowUpdate` per window."""
        table = self._table
        assert table is not None
        if not table.dirty.shape[1]:
            return []
        kid, cols = table.take_dirty()
        starts, tss, counts = table.matrix_rows(cols)
        agg = self.aggregation
        finish = None if agg.finish_is_identity else agg.finish
        size = self.windows.size_ms
        new = tuple.__new__
        keys = map(table.keys.__getitem__, kid.tolist())
        with gc_paused():  # one tuple per window: see output.gc_paused
            out = [
                new(WindowUpdate, (k, s, s + size, a if finish is None else finish(a), t, c))
                for k, s, a, t, c in zip(keys, starts.tolist(), table.accs_of(cols), tss.tolist(), counts.tolist())
            ]
        self._purge_closed(self.observed_stream_time - self.windows.grace_ms)
        self.stats.updates_emitted += len(out)
        return out

    def _flush_table(self) -> dict[str, Any] | None:
        """:meth:`flush_columns` over the columns (after :meth:`_table_flushable`), as numpy columns throughout
        (the keys as a list); ``None`` when nothing is unflushed."""
        table = self._table
        if table is None or not table.dirty.shape[1]:
            return None
        kid, cols = table.take_dirty()
        starts, tss, counts = table.matrix_rows(cols)
        agg = self.aggregation
        aggs = agg.parts if type(agg) is Composite else (agg,)
        out = {
            "key": table.key_column(kid),
            "start": starts,
            "end": starts + self.windows.size_ms,
            "ts": tss,
            "count": counts,
            "values": table.values(cols, [p.name for p in aggs], [p.finish for p in aggs]),
        }
        self._purge_closed(self.observed_stream_time - self.windows.grace_ms)
        if not len(kid):
            return update_columns([], agg)
        self.stats.updates_emitted += len(kid)
        return out

    # ------------------------------------------------------------------------------------------ lazy keys

    def _windows_of(self, key: Hashable) -> dict[int, _Window] | None:
        """The key's windows, loaded on first touch; ``None`` when it holds none."""
        windows = self._by_key.get(key)
        if windows is None and key in self._held:
            windows = self._load(key)
        return windows

    def _held_windows(self, pairs: list[tuple[Hashable, int]]) -> list[_Window]:
        """The held windows ``(key, start)``, from this path's dicts or the batch path's columns."""
        table = self._table
        if table is None or not pairs:
            return [self._held_window(key, start) for key, start in pairs]
        in_table = [key in table.loaded and key not in self._by_key for key, _s in pairs]
        sel = [p for p, t in zip(pairs, in_table, strict=True) if t]
        cols = table.gather(table.key_ids([k for k, _s in sel]), np.array([s for _k, s in sel], np.int64))
        _starts, tss, counts = table.matrix_rows(cols)
        from_table = iter(map(_Window, table.accs_of(cols), tss.tolist(), counts.tolist()))
        return [next(from_table) if t else self._held_window(k, s) for (k, s), t in zip(pairs, in_table, strict=True)]

    def _held_window(self, key: Hashable, start: int) -> _Window:
        windows = self._windows_of(key)
        assert windows is not None  # the index names the window
        return windows[start]

    def _load(self, key: Hashable) -> dict[int, _Window]:
        """A held key's windows from its blob, without the windows the index forgot since it was written."""
        blob = self._loader(key) if self._loader is not None else None
        windows: dict[int, _Window] = {}
        if blob is not None:
            for start, acc, ts, count in pickle.loads(blob):
                if key in self._keys_at.get(start, ()):
                    windows[start] = _Window(acc, ts, count)
        if len(windows) != self._held[key]:
            raise RuntimeError(
                f"the state of key {key!r} is inconsistent: the task meta names {self._held[key]} windows, its "
                f"blob holds {len(windows)} of them"
            )
        self._by_key[key] = windows
        return windows

    # ------------------------------------------------------------------------------------------ state

    def export_meta(self) -> bytes:
        """The task meta: definition sizes, stream time, last close time, the window index, update mode's
        unflushed windows (last-write order) and close mode's emitted windows not yet taken by
        :meth:`flush_columns`."""
        w = self.windows
        return pickle.dumps(
            {
                "format": _META_FORMAT,
                "type": "time",
                "size_ms": w.size_ms,
                "advance_ms": w.advance,
                "observed_stream_time": self.observed_stream_time,
                "last_emit_close_time": self.last_emit_close_time,
                "index": [(s, list(self._keys_at[s])) for s in self._starts],
                "dirty": self._unflushed(),
                "emitted": [tuple(u) for u in self._emitted],
            },
            protocol=5,
        )

    def export_keys(self, keys: Iterable[Hashable]) -> dict[Hashable, bytes | None]:
        """One blob per key that holds windows and is loaded; ``None`` for a key that holds none any more (delete
        it). A key held but never loaded is unchanged and left out."""
        out: dict[Hashable, bytes | None] = {}
        for key in keys:
            if key not in self._held:
                out[key] = None
                continue
            windows = self._by_key.get(key)
            if windows is not None:
                out[key] = pickle.dumps([(s, w.acc, w.ts, w.count) for s, w in windows.items()], protocol=5)
            elif self._table is not None and key in self._table.loaded:
                out[key] = pickle.dumps(self._table.rows_of(key), protocol=5)
        return out

    def dirty_keys(self) -> set[Hashable]:
        """Keys whose windows changed since :meth:`clear_dirty_keys` (a key left with no window included)."""
        return set(self._changed)

    def clear_dirty_keys(self) -> None:
        self._changed.clear()

    @classmethod
    def from_state(
        cls,
        windows: TimeWindows,
        aggregation: Aggregation,
        emit: EmitMode | str,
        meta: bytes | None,
        loader: Callable[[Hashable], bytes | None],
        **kwargs: Any,
    ) -> TimeWindowProcessor:
        """A processor over external state: ``meta`` from :meth:`export_meta` (``None``: a new task) and
        ``loader(key)`` returning the key's blob from :meth:`export_keys` (``None`` if absent), called the first
        time a key is touched. The meta must be of the same size and advance (the grace may differ)."""
        proc = cls(windows, aggregation, emit, **kwargs)
        proc.attach_state(meta, loader)
        return proc

    def attach_state(self, meta: bytes | None, loader: Callable[[Hashable], bytes | None]) -> None:
        """:meth:`from_state` on a new processor: the task meta applied, keys read through ``loader``."""
        if self._held or self.observed_stream_time != _NO_TIMESTAMP:
            raise ValueError("attach_state needs a new processor")
        self._loader = loader
        if meta is None:
            return
        m = pickle.loads(meta)
        if not isinstance(m, dict) or m.get("type") != "time" or m.get("format") != _META_FORMAT:
            raise ConfigError("the task state was not written by a time-window processor (another window type)")
        w = self.windows
        if (m["size_ms"], m["advance_ms"]) != (w.size_ms, w.advance):
            raise ConfigError(
                f"the task state was written for time windows of size {m['size_ms']} ms and advance "
                f"{m['advance_ms']} ms, not size {w.size_ms} ms and advance {w.advance} ms"
            )
        self.observed_stream_time = m["observed_stream_time"]
        self.last_emit_close_time = m["last_emit_close_time"]
        for start, keys in m["index"]:
            for key in keys:
                self._index_add(key, start)
        self._dirty = dict.fromkeys(m["dirty"])
        self._emitted = [WindowUpdate(*u) for u in m["emitted"]]

    def export_state(self) -> dict[str, Any]:
        """Everything a restart needs, as plain data (accumulators as the aggregation keeps them; every key
        loaded)."""
        if self._table is not None:
            self._to_dicts()
        for key in list(self._held):
            self._windows_of(key)
        return {
            "type": "time",
            "size_ms": self.windows.size_ms,
            "advance_ms": self.windows.advance,
            "grace_ms": self.windows.grace_ms,
            "observed_stream_time": self.observed_stream_time,
            "last_emit_close_time": self.last_emit_close_time,
            "windows": [[k, s, w.acc, w.ts, w.count] for k, ws in self._by_key.items() for s, w in ws.items()],
            "dirty": [[k, s] for k, s in self._dirty],
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Load :meth:`export_state` output into an empty processor with the same window definition."""
        w = self.windows
        if state.get("type") != "time" or (state["size_ms"], state["advance_ms"], state["grace_ms"]) != (
            w.size_ms,
            w.advance,
            w.grace_ms,
        ):
            raise ConfigError(
                f"state was written for another window definition: {state.get('type')} "
                f"size={state.get('size_ms')} advance={state.get('advance_ms')} "
                f"grace={state.get('grace_ms')}"
            )
        if self._held:
            raise ValueError("restore_state needs an empty processor")
        self.observed_stream_time = state["observed_stream_time"]
        self.last_emit_close_time = state["last_emit_close_time"]
        for k, s, acc, ts, count in state["windows"]:
            self._by_key.setdefault(k, {})[s] = _Window(acc, ts, count)
            self._index_add(k, s)
        for k, s in state["dirty"]:
            self._dirty[(k, s)] = None


_NO_WINDOWS: dict[int, _Window] = {}
_META_FORMAT = 1


def _values_of(fields: dict[str | None, Any], n: int) -> list[Any]:
    """Record values from value-field columns: the bare values for ``{None: column}``, else a dict per record."""
    if None in fields:
        col = fields[None]
        return col.tolist() if hasattr(col, "tolist") else list(col)
    names = list(fields)
    cols = [c.tolist() if hasattr(c, "tolist") else list(c) for c in fields.values()]
    return [dict(zip(names, row)) for row in zip(*cols)] if names else [{} for _i in range(n)]
