"""The sliding-window processor: the public API of one task's engine (Kafka Streams' ``SlidingWindows``,
KIP-450).

:class:`SlidingWindowProcessor` builds the task's :class:`~windowstore.state.EngineState` and hands it, per
call, to the module that does the work: the reference record path (:mod:`windowstore.record`), its lazy-run
accelerator (:mod:`windowstore.lazy`), the batch path (:mod:`windowstore.batch`), the flush
(:mod:`windowstore.output`) and the state blobs (:mod:`windowstore.serde`). See :mod:`windowstore.state` for
the picture and the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from . import batch as batched
from . import cache, lazy, output, record, serde
from .aggregations import Aggregation
from .state import EngineState, visibility_for
from .store import WindowStore
from .updates import DroppedRecord, EmitMode, ProcessorStats, WindowUpdate
from .windows import SlidingWindows

__all__ = ["SlidingWindowProcessor", "visibility_for"]


class _RecordStep:
    """:attr:`SlidingWindowProcessor.process`: the record step of the processor's state
    (:func:`windowstore.lazy.record_step`: the lazy run where it applies, else the reference), as a method
    bound to the state.

    Chosen when the attribute is read (a loop reads it once), not stored on the processor: nothing that
    refers back to the processor is kept by it, so a dropped processor is freed by reference counting at once
    (``service.spark.python_daemon``; ``tests/windowstore/test_reference_cycles.py``)."""

    def __get__(self, proc: SlidingWindowProcessor | None, cls: type | None = None) -> Callable[..., Any]:
        if proc is None:
            return record.process_record
        return lazy.record_step(proc.state)


class SlidingWindowProcessor:
    """Applies Kafka Streams' sliding-window aggregation to records of one task.

    * ``process(key, value, ts)`` returns the updates emitted by that record: every write in ``every`` mode,
      the windows that closed in ``close`` mode, nothing in ``update`` mode (call :meth:`flush`).
    * Records with a null key or value, or a timestamp that is not an integer in ``[0, 2**63 - 1]`` (a Kafka
      long), are dropped and counted (R6) - never raised. Late records (R8) are dropped and counted. When
      ``collect_drops`` is set, every dropped record is also appended to :attr:`drops` for the caller to route
      (late topic, DLQ).
    * Integer aggregates are exact Python ints at any size (never a silent float, issue 29).
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
        mode = EmitMode.parse(emit)
        #: the engine state every engine module works on (see :mod:`windowstore.state`)
        self.state = EngineState(
            windows,
            aggregation,
            mode,
            emit_interval_ms=emit_interval_ms,
            clock=clock,
            collect_drops=collect_drops,
            batch=batch,
            emit_step=record.emit_step_for(mode),
        )

    # ------------------------------------------------------------------------------------- the definition
    @property
    def windows(self) -> SlidingWindows:
        return self.state.windows

    @property
    def aggregation(self) -> Aggregation:
        return self.state.aggregation

    @property
    def emit(self) -> EmitMode:
        return self.state.emit

    @property
    def td(self) -> int:
        return self.state.td

    @property
    def grace(self) -> int:
        return self.state.grace

    @property
    def emit_interval_ms(self) -> int:
        return self.state.emit_interval_ms

    @property
    def batch(self) -> bool:
        """Whether the batch path was asked for (``batch=True``)."""
        return self.state.batch

    @property
    def batch_path(self) -> bool:
        """Whether :meth:`process_batch` can take the batch path at all (a batch kernel for the aggregation,
        and an emit mode it supports)."""
        return self.state.plan is not None

    # ---------------------------------------------------------------------------------- what it holds
    @property
    def store(self) -> WindowStore:
        return self.state.store

    @property
    def stats(self) -> ProcessorStats:
        return self.state.stats

    @property
    def expired_windows(self) -> int:
        """Windows physically dropped so far (:meth:`expire`; the :class:`~windowstore.contract.TaskProcessor`
        contract)."""
        return self.state.store.expired

    @property
    def windows_held(self) -> int:
        """Windows held in memory now."""
        return len(self.state.store)

    @property
    def observed_stream_time(self) -> int:
        """The task's stream time (R7): the largest valid timestamp seen; -1 before the first."""
        return self.state.observed_stream_time

    @property
    def last_emit_close_time(self) -> int:
        """Emit-on-close: the close of the last emission round (R27); -1 before the first."""
        return self.state.last_emit_close_time

    @property
    def collect_drops(self) -> bool:
        return self.state.collect_drops

    @property
    def drops(self) -> list[DroppedRecord]:
        return self.state.drops

    @property
    def flagged_keys(self) -> set[Hashable]:
        """Keys that took a partially-late record: the batch path checks them against R3 before use."""
        return self.state.flagged_keys

    def pending_windows(self) -> list[tuple[int, Hashable]]:
        """Emit-on-close: every window waiting for its close ``(start, key)``, in no particular order."""
        return self.state.pending_close.items()

    # ------------------------------------------------------------------------------------------------- input
    #: ``process(key, value, ts) -> list[WindowUpdate]``: process one record; returns the updates it emits (see
    #: the class docstring)
    process = _RecordStep()

    def process_many(self, records: Iterable[tuple[Hashable, Any, int]]) -> list[WindowUpdate]:
        """Process ``(key, value, ts)`` records in order; returns all updates they emitted."""
        out: list[WindowUpdate] = []
        process = self.process
        for key, value, ts in records:
            r = process(key, value, ts)
            if r:
                out.extend(r)
        return out

    def process_batch(self, records: Sequence[tuple[Hashable, Any, Any]]) -> bool:
        """Process ``(key, value, ts)`` records in arrival order, on the batch fast path when it applies
        (update mode, or close mode without an emit interval; ``batch=True``, a commutative built-in
        aggregation, no partially-late record); results are identical to calling :meth:`process` for each
        (close mode: the windows they emit come out of the next :meth:`flush`). Returns whether the batch path
        was taken."""
        return batched.process_batch(self.state, records)

    def process_columns(
        self,
        keys: Sequence[Hashable],
        timestamps: Any,
        fields: dict[str | None, Any] | None = None,
        values: Sequence[Any] | None = None,
    ) -> bool:
        """Columnar :meth:`process_batch`: ``keys``, int ``timestamps`` and either ``fields`` ({value field, or
        None for the bare value: numeric array}) or the record ``values``. Same results as :meth:`process`."""
        return batched.process_columns(self.state, keys, timestamps, fields, values)

    # ------------------------------------------------------------------------------------------------ output
    def flush(self) -> list[WindowUpdate]:
        """Update mode: the last value of every window written since the previous flush, ordered by last
        write (Kafka Streams' record cache flush, R21). Close mode: the final windows :meth:`process_batch` /
        :meth:`process_columns` emitted since the previous flush (:meth:`process` returns its own). Every mode:
        nothing else. See :func:`windowstore.output.flush`."""
        return output.flush(self.state)

    def flush_columns(self) -> dict[str, Any]:
        """Like :meth:`flush`, as columns: ``key`` (list), ``start``, ``end``, ``ts``, ``count`` (int64 numpy
        arrays) and ``values`` {aggregation output name: array}. No Python object per window when the batch
        path produced the updates; then ``key_table`` and ``key_id`` give the keys as ids into a table of
        distinct keys as well (``key[i] == key_table[key_id[i]]``)."""
        return output.flush_columns(self.state)

    def take_drops(self) -> list[DroppedRecord]:
        """Return and clear the dropped records collected so far (``collect_drops=True``)."""
        state = self.state
        drops, state.drops = state.drops, []
        return drops

    def expire(self) -> int:
        """Physically drop windows no read can see any more; returns how many."""
        state = self.state
        n = state.store.expire()
        if state.flagged_keys:
            state.flagged_keys &= state.store.key_max_start.keys()
        return n

    # ------------------------------------------------------------------------------------------------ state
    def export_meta(self) -> bytes:
        """The task meta (stream time, emit progress, expiry index, ...): see :mod:`windowstore.serde`."""
        return serde.encode_meta(self.state, output.unflushed(self.state))

    def export_keys(self, keys: Iterable[Hashable]) -> dict[Hashable, bytes | None]:
        """Per-key window blobs; ``None`` for a key that has no window left (delete it from the backend).
        Keys that are neither in memory nor expired (never loaded, so unchanged) are left out."""
        store = self.state.store
        out: dict[Hashable, bytes | None] = {}
        for key in keys:
            if key not in store.key_max_start:
                out[key] = None
                continue
            kw = store.keys.get(key)
            if kw is not None:  # as held: a batch-path key is written from its columns, not materialized
                out[key] = serde.encode_key_windows(kw) if len(kw) else None
        return out

    def dirty_keys(self) -> set[Hashable]:
        """Keys whose windows changed since :meth:`clear_dirty_keys` (expiry included)."""
        return set(self.state.store.dirty)

    def clear_dirty_keys(self) -> None:
        self.state.store.clear_dirty()

    def to_bytes(self) -> bytes:
        """A whole-task snapshot (meta + every key)."""
        return serde.dump_processor(self.state, output.unflushed(self.state))

    @classmethod
    def from_bytes(
        cls, data: bytes, windows: SlidingWindows, aggregation: Aggregation, emit: EmitMode | str, **kwargs: Any
    ) -> SlidingWindowProcessor:
        """Inverse of :meth:`to_bytes`; the definition must match the one the snapshot was written with."""
        proc = cls(windows, aggregation, emit, **kwargs)
        cache.replace(proc.state, serde.load_processor_state(proc.state, data))
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
    ) -> SlidingWindowProcessor:
        """A processor over external state: ``meta`` from :meth:`export_meta` (``None`` for a new task) and
        ``loader(key)`` returning the key's blob from :meth:`export_keys` (``None`` if absent), called the
        first time a key is touched."""
        proc = cls(windows, aggregation, emit, **kwargs)
        state = proc.state
        if meta is not None:
            cache.replace(state, serde.apply_meta(state, meta))
        # what ``load`` needs, read now: a closure over the processor or its state, kept by the store, would
        # make a reference cycle (see :class:`_RecordStep`)
        as_entries = state.store.columnar is None  # no batch path: columns a batch-path processor wrote
        agg = state.aggregation

        def load(key: Hashable) -> Any:
            blob = loader(key)
            if blob is None:
                return None
            kw = serde.decode_key_windows(blob)
            if kw.cols is not None and as_entries:
                serde.entries_from_columns(kw, agg)
            return kw

        state.store.loader = load
        return proc
