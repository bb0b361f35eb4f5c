"""The task-processor contract: what the service asks of one task's processor, whatever its window type.

The service (``service.task``) runs one processor per Kafka input partition and keeps its state outside the
process between micro-batches: a small *meta* blob (stream time, emit progress, ...) and one blob per key, written
for the keys that changed, read back lazily the first time a key is touched. Every window type's processor
(:class:`~windowstore.SlidingWindowProcessor`, and the time and session window processors) offers exactly this
surface, so the service never branches on the window type outside :func:`windowstore.new_task_processor`.

Record path::

    proc.process(key, value, ts)   -> updates forwarded for that record (every / close), [] (update)
    proc.flush()                   -> update mode: the record cache's flush (one per micro-batch)
    proc.take_drops()              -> the records dropped since the last call (null key, late, ...)
    proc.expire()                  -> drop the windows no read can see any more; returns how many

Optional batch path (``proc.batch`` true): :meth:`TaskProcessor.process_columns` then
:meth:`TaskProcessor.flush_columns`, identical results to the record path (property-tested per type).

State, between micro-batches::

    meta = proc.export_meta()                       # stream time, emit progress, unflushed windows, ...
    blobs = proc.export_keys(proc.dirty_keys())     # {key: blob, or None = the key holds nothing any more}
    proc.clear_dirty_keys()
    ...
    proc = Processor.from_state(..., meta, loader)  # loader(key) -> blob | None, called on a key's first touch

A processor restored from ``(meta, blobs)`` and fed the same records emits exactly what the original would have
(determinism is what the service's log replay relies on: ``service.task.state``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol

from .updates import DroppedRecord, WindowUpdate

__all__ = ["TaskProcessor", "WindowCounters"]


class WindowCounters(Protocol):
    """The per-processor counters the service exports as metrics (monotonic since the processor was made)."""

    windows_created: int
    windows_updated: int
    skipped_windows: int


class TaskProcessor(Protocol):
    """One task's processor as the service drives it; see the module docstring for the call sequence."""

    @property
    def observed_stream_time(self) -> int:
        """The task's stream time: the largest timestamp of an accepted record (``-1``-like floor before any)."""
        ...

    @property
    def stats(self) -> WindowCounters: ...

    @property
    def batch(self) -> bool:
        """Whether :meth:`process_columns` / :meth:`flush_columns` should be used for this processor."""
        ...

    @property
    def expired_windows(self) -> int:
        """Windows physically dropped so far (:meth:`expire` and any expiry during processing)."""
        ...

    @property
    def windows_held(self) -> int:
        """Windows held in memory now (a gauge)."""
        ...

    def process(self, key: Hashable, value: Any, ts: Any) -> list[WindowUpdate] | None: ...

    def process_columns(
        self,
        keys: Sequence[Hashable],
        timestamps: Any,
        fields: dict[str | None, Any] | None = None,
        values: Sequence[Any] | None = None,
    ) -> bool: ...

    def flush(self) -> list[WindowUpdate]: ...

    def flush_columns(self) -> dict[str, Any]: ...

    def take_drops(self) -> list[DroppedRecord]: ...

    def expire(self) -> int: ...

    def export_meta(self) -> bytes: ...

    def export_keys(self, keys: Iterable[Hashable]) -> dict[Hashable, bytes | None]: ...

    def dirty_keys(self) -> set[Hashable]: ...

    def clear_dirty_keys(self) -> None: ...
