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
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from .aggregations import Aggregation
from .family_common import FamilyStats, check_millis, key_bytes, valid_timestamp
from .updates import EmitMode, WindowUpdate
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

    The processor's state is only per-window aggregates, stream time, the last close time and (update mode)
    the not-yet-flushed windows; :meth:`export_state` / :meth:`restore_state` move it across a restart.
    """

    def __init__(self, windows: TimeWindows, aggregation: Aggregation, emit: EmitMode | str = EmitMode.UPDATE) -> None:
        self.windows = windows
        self.aggregation = aggregation
        self.emit = EmitMode.parse(emit)
        self.stats = FamilyStats()
        self.observed_stream_time = _NO_TIMESTAMP
        self.last_emit_close_time = _NO_TIMESTAMP
        self._by_key: dict[Hashable, dict[int, _Window]] = {}
        # distinct window starts that hold windows, ascending, and the keys holding each (close-mode scan, purge)
        self._starts: list[int] = []
        self._keys_at: dict[int, dict[Hashable, None]] = {}
        # update mode: (key, start) -> None, in last-write order (NamedCache.dirtyKeys: remove, then add)
        self._dirty: dict[tuple[Hashable, int], None] = {}

    # ------------------------------------------------------------------------------------------ record path

    def process(self, key: Hashable, value: Any, ts: Any) -> list[WindowUpdate]:
        """Aggregate one record (T3-T7) and return the updates Kafka Streams forwards while processing it."""
        stats = self.stats
        stats.records += 1
        if key is None:  # T7: only a null KEY is dropped; a null value is aggregated (T11)
            stats.dropped_null_key += 1
            return []
        t = valid_timestamp(ts)
        if t is None:
            stats.dropped_invalid_timestamp += 1
            return []
        if t > self.observed_stream_time:  # T3
            self.observed_stream_time = t
        window_close_time = self.observed_stream_time - self.windows.grace_ms  # T4
        size = self.windows.size_ms
        out: list[WindowUpdate] = []
        emit_every = self.emit is EmitMode.EVERY
        windows = self._by_key.get(key)
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
        else:
            stats.dropped_late += 1
        if self.emit is EmitMode.CLOSE:
            self._maybe_forward_final_result(window_close_time, out)
        else:
            self._purge_closed(window_close_time)
        stats.updates_emitted += len(out)
        return out

    def flush(self) -> list[WindowUpdate]:
        """Update mode: the last value of every window written since the previous flush, in last-write order
        (T9: the record cache's flush on commit). Other modes: nothing (they forward from :meth:`process`)."""
        if not self._dirty:
            return []
        out = []
        by_key = self._by_key
        empty: dict[int, _Window] = {}
        agg = self.aggregation
        finish = None if agg.finish_is_identity else agg.finish
        size = self.windows.size_ms
        for key, start in self._dirty:
            w = by_key.get(key, empty).get(start)
            if w is not None:  # as _update, inlined: a flush forwards every window written since the last one
                value = w.acc if finish is None else finish(w.acc)
                out.append(WindowUpdate(key, start, start + size, value, w.ts, w.count))
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
        for start in starts[i:j]:  # a time-ordered store: start, then key bytes, all keys interleaved
            keys = sorted(self._keys_at[start], key=key_bytes)
            for key in keys:
                out.append(self._update(key, start, self._by_key[key][start]))
        self.last_emit_close_time = window_close_time
        # emitted windows can never be updated (their end <= close) nor emitted again: forget them
        for start in starts[:j]:
            self._forget_start(start)
        del starts[:j]

    # ------------------------------------------------------------------------------------------ batch contract
    # What an accelerator (windowstore.time_windows_batch) may do to this processor's state. Each call does
    # exactly what the record path does to the same window, so a batch path that makes the record path's writes
    # (in any order, values already combined) leaves the processor in the record path's state.

    def get_window(self, key: Hashable, start: int) -> tuple[Any, int, int] | None:
        """``(accumulator, output timestamp, record count)`` of one held window, or ``None``."""
        w = self._by_key.get(key, {}).get(start)
        return None if w is None else (w.acc, w.ts, w.count)

    def merge_windows(
        self, rows: Sequence[tuple[Hashable, int, Any, int, int]], combine: Callable[[Any, Any], Any]
    ) -> int:
        """For each ``(key, start, acc, ts, count)``, in order: a held window becomes ``(combine(held acc, acc),
        max(ts), count + count)``, a new one takes the row; then (update mode) the window moves to the end of the
        last-write order (T9). ``combine`` runs for every held window before anything changes (if it raises, the
        state is untouched). Returns windows created."""
        by_key = self._by_key
        empty: dict[int, _Window] = {}
        merged: list[tuple[_Window, Any] | None] = []
        for key, start, acc, _ts, _count in rows:
            held = by_key.get(key, empty).get(start)
            merged.append(None if held is None else (held, combine(held.acc, acc)))
        dirty = self._dirty if self.emit is EmitMode.UPDATE else None
        created = 0
        for (key, start, acc, ts, count), m in zip(rows, merged, strict=True):
            if m is None:
                windows = by_key.get(key)
                if windows is None:
                    windows = by_key[key] = {}
                windows[start] = _Window(acc, ts, count)
                self._index_add(key, start)
                created += 1
            else:
                w, new_acc = m
                w.acc = new_acc
                if ts > w.ts:
                    w.ts = ts
                w.count += count
            if dirty is not None:
                dk = (key, start)
                dirty.pop(dk, None)
                dirty[dk] = None
        return created

    def close_windows(self, window_close_time: int) -> list[WindowUpdate]:
        """What the record path does after a record that left close time at ``window_close_time``: close mode
        emits the windows it closed (T10) and returns them; other modes forget closed, flushed windows."""
        if self.emit is EmitMode.CLOSE:
            out: list[WindowUpdate] = []
            self._maybe_forward_final_result(window_close_time, out)
            return out
        self._purge_closed(window_close_time)
        return []

    # ------------------------------------------------------------------------------------------ state

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

    def _forget_start(self, start: int) -> None:
        for key in self._keys_at.pop(start, ()):
            windows = self._by_key[key]
            del windows[start]
            if not windows:
                del self._by_key[key]

    def _purge_closed(self, window_close_time: int) -> None:
        """Every/update mode: a window whose end <= close can never be written again (T5); once flushed it is
        dropped here (Kafka Streams' store keeps it until retention, but no read can reach it)."""
        starts = self._starts
        size = self.windows.size_ms
        n = 0
        dirty = self._dirty
        while n < len(starts) and starts[n] + size <= window_close_time:
            start = starts[n]
            if dirty and any((k, start) in dirty for k in self._keys_at[start]):
                break
            self._forget_start(start)
            n += 1
        if n:
            del starts[:n]

    def __len__(self) -> int:
        """Windows held."""
        return sum(len(w) for w in self._by_key.values())

    def export_state(self) -> dict[str, Any]:
        """Everything a restart needs, as plain data (accumulators as the aggregation keeps them)."""
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
        if self._by_key:
            raise ValueError("restore_state needs an empty processor")
        self.observed_stream_time = state["observed_stream_time"]
        self.last_emit_close_time = state["last_emit_close_time"]
        for k, s, acc, ts, count in state["windows"]:
            self._by_key.setdefault(k, {})[s] = _Window(acc, ts, count)
            self._index_add(k, s)
        for k, s in state["dirty"]:
            self._dirty[(k, s)] = None
