"""The engine contract: :class:`EngineState`, the one object every engine module works on.

One task's sliding-window engine is this state plus modules of plain functions over it, each in its own
module and none reaching into another's objects (Kafka Streams keeps its processor apart from the store
layers it writes through; Quix Streams' windows work over a ``WindowedState`` protocol)::

    processor.py   SlidingWindowProcessor: the public API; builds the state, picks the path per call
        |
        +-- record.py   the reference: KIP-450 record by record (``KStreamSlidingWindowAggregate``)
        +-- lazy.py     accelerator: in-order keys in update mode with Count/Sum (a lazy run per key)
        +-- batch.py    accelerator: a whole micro-batch per key in numpy (columns.py: its representation)
        +-- cache.py    update mode's record cache (R21): write stamps, sealed entries
        +-- output.py   flush: the record cache and the output segments as updates or columns
        +-- serde.py    state blobs: key windows and the task meta
                 all of them read and write only EngineState and the public API of store.py / pending.py

What the state holds (every attribute public and documented here; the accelerators prove themselves
identical to the reference by property tests, ``tests/windowstore``):

* the definition, fixed at construction: ``windows``, ``aggregation``, ``emit``, ``td``, ``grace``, the mode
  flags ``is_update``/``is_every``/``is_close`` (an enum compare per record costs ~0.25 us), the aggregation's
  ``accumulate``/``bind``/``finish`` and ``inline`` (1 Count, 2 Sum: added inline), ``plan`` (the batch
  path's, None without it) and ``lazy`` (records take lazy.py);
* stream time: ``observed_stream_time`` (R7), ``last_emit_close_time`` (R27), ``next_emit_ms`` (emit interval);
* ``store``: the :class:`~windowstore.store.WindowStore` (windows per key, store time, expiry);
* the record cache (update mode, R21, see cache.py): ``cache`` (sealed entries, last write last), ``touched``
  (keys with write stamps), ``seq``/``flushed_seq`` (write sequence numbers);
* ``pending_close``: emit-on-close's windows waiting for their close (R26-R29);
* typed output segments: ``segments`` (update mode: :class:`CachedWrites` and :class:`ColumnWrites`, in write
  order, before the cache) and ``closed`` (close mode: :class:`EmittedUpdates`, :class:`EmittedColumns`);
  ``out``: the list ``every`` mode's record appends its updates to, ``emit_step`` the mode's emit function;
* counters and drops: ``stats``, ``collect_drops``/``drops``, ``flagged_keys`` (keys that took a partially-late
  record: the batch path checks them against R3).

The hot loops read these attributes into locals, as before: the contract costs nothing per record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import numpy as np

from .aggregations import Aggregation, Composite, Count, Sum
from .column_blocks import ColumnBlocks
from .columns import ColumnCodec, Plan, batch_plan
from .pending import PendingWindows
from .store import NO_TIMESTAMP, KeyWindows, Visibility, WindowStore
from .updates import DroppedRecord, EmitMode, ProcessorStats, WindowUpdate
from .windows import SlidingWindows

__all__ = ["CachedWrites", "ColumnWrites", "EmittedColumns", "EmittedUpdates", "EngineState", "visibility_for"]


class CachedWrites(NamedTuple):
    """Update mode: record-path writes ``{(key, start): [acc, max_ts, count]}``, last write last (R21)."""

    entries: dict[tuple[Hashable, int], Any]


class ColumnWrites(NamedTuple):
    """Update mode: the windows one batch-path batch wrote, as columns in flush order (``key_id`` indexes
    ``keys``; ``parts``: per aggregation part its accumulator column, None for a count part)."""

    keys: list[Hashable]
    key_id: np.ndarray
    start: np.ndarray
    ts: np.ndarray
    counts: np.ndarray
    parts: list[Any]


class EmittedUpdates(NamedTuple):
    """Close mode: final windows emitted as updates, waiting for the flush."""

    updates: list[WindowUpdate]


class EmittedColumns(NamedTuple):
    """Close mode: one batch-path emission round's final windows, as columns in emission order."""

    key: list[Hashable]
    start: np.ndarray
    ts: np.ndarray
    counts: np.ndarray
    parts: list[Any]


UpdateSegment = CachedWrites | ColumnWrites
CloseSegment = EmittedUpdates | EmittedColumns


def visibility_for(emit: EmitMode) -> Visibility:
    """The store Kafka Streams reads through in each emit mode (see :mod:`windowstore.store`)."""
    return {
        EmitMode.EVERY: Visibility.KEY_FIRST,
        EmitMode.UPDATE: Visibility.UNBOUNDED,
        EmitMode.CLOSE: Visibility.TIME_FIRST,
    }[emit]


class EngineState:
    """The state of one task's engine (see the module docstring for what each attribute holds)."""

    def __init__(
        self,
        windows: SlidingWindows,
        aggregation: Aggregation,
        emit: EmitMode,
        *,
        emit_interval_ms: int = 0,
        clock: Callable[[], float] | None = None,
        collect_drops: bool = False,
        batch: bool = False,
        emit_step: Callable[..., None],
    ) -> None:
        if emit_interval_ms < 0:
            raise ValueError(f"emit_interval_ms must not be negative, got {emit_interval_ms}")
        # -- the definition
        self.windows = windows
        self.aggregation = aggregation
        self.emit = emit
        self.td = windows.time_difference_ms
        self.grace = windows.grace_ms
        self.emit_interval_ms = emit_interval_ms
        self.clock = clock or time.monotonic
        self.accumulate = aggregation.accumulate
        self.bind = aggregation.bind
        #: 1: Count, 2: Sum (exact built-in types): the record path adds inline instead of calling accumulate
        self.inline: int = {Count: 1, Sum: 2}.get(type(aggregation), 0)
        self.is_update = emit is EmitMode.UPDATE
        self.is_every = emit is EmitMode.EVERY
        self.is_close = emit is EmitMode.CLOSE
        self.finish = None if aggregation.finish_is_identity else aggregation.finish
        #: the mode's emit function ``emit_step(state, key, kw, start, entry)`` (record.py)
        self.emit_step = emit_step
        #: whether raw records are kept per key for the batch path (the caller asked for it)
        self.batch = batch
        closing = self.is_close and not emit_interval_ms
        plan = batch_plan(aggregation) if batch and (self.is_update or closing) else None
        self.plan: Plan | None = plan
        # -- the store: update mode reads like Kafka's record cache (nothing filtered by retention); a window
        # whose start is below store_time - (3*td + grace + 1) can never be read again by an accepted record
        # (t >= st - grace - td, scans start at t - 2*td, store_time <= st + 1), so it is purged.
        self.store = WindowStore(
            windows.retention,
            visibility_for(emit),
            purge_margin_ms=3 * self.td + self.grace + 1,
            purge_slack_ms=self.td,  # update mode: a key's purge drops ~td of windows at once
            columnar=None if plan is None else ColumnCodec(plan, isinstance(aggregation, Composite)),
        )
        #: the batch path's stored matrices and the keys holding slices of them (windowstore/column_blocks.py)
        self.blocks = ColumnBlocks()
        # -- stream time
        self.observed_stream_time = NO_TIMESTAMP
        self.last_emit_close_time = NO_TIMESTAMP
        self.next_emit_ms = 0.0
        # -- counters and drops
        self.stats = ProcessorStats()
        self.collect_drops = collect_drops
        self.drops: list[DroppedRecord] = []
        self.flagged_keys: set[Hashable] = set()
        # -- the record cache (cache.py)
        self.cache: dict[tuple[Hashable, int], Any] = {}
        self.touched: list[tuple[Hashable, KeyWindows]] = []
        self.seq = 0
        self.flushed_seq = 0
        # -- close mode's waiting windows and the output segments
        self.pending_close = PendingWindows()
        self.segments: list[UpdateSegment] = []
        self.closed: list[CloseSegment] = []
        self.out: list[WindowUpdate] | None = None
        #: update mode, built-in Count/Sum, no batch path: records take lazy.py
        self.lazy = self.is_update and bool(self.inline) and plan is None
