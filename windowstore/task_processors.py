"""One window definition per task and the one factory of task processors: the only place that knows which processor
class serves which window type.

The service carries a :class:`WindowDefinition` in its task config and asks :func:`new_task_processor` for a
:class:`~windowstore.contract.TaskProcessor`; it never branches on the window type itself::

    WindowDefinition("sliding", size_ms=td)                     -> SlidingWindowProcessor  (docs/rules.md)
    WindowDefinition("tumbling", size_ms=size)                  -> TimeWindowProcessor     (T1-T12)
    WindowDefinition("hopping", size_ms=size, advance_ms=adv)   -> TimeWindowProcessor
    WindowDefinition("session", gap_ms=gap)                     -> SessionWindowProcessor  (S1-S12)

``size_ms`` is the sliding window's time difference or the time window's size; ``grace_ms`` applies to every type.
:meth:`WindowDefinition.identity` is what a checkpoint records: the type and its sizes (not the grace, which Kafka
Streams lets an application change over the same store).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from .aggregations import Aggregation
from .contract import TaskProcessor
from .processor import SlidingWindowProcessor
from .session_windows import SessionWindowProcessor, SessionWindows
from .time_windows import TimeWindowProcessor, TimeWindows
from .updates import EmitMode
from .windows import ConfigError, SlidingWindows

__all__ = ["WINDOW_TYPES", "WindowDefinition", "describe_identity", "new_task_processor"]

#: the window types a task can run, the first the default
WINDOW_TYPES = ("sliding", "tumbling", "hopping", "session")

#: the sizes each window type takes (besides grace), by field name
_SIZES: dict[str, tuple[str, ...]] = {
    "sliding": ("size_ms",),
    "tumbling": ("size_ms",),
    "hopping": ("size_ms", "advance_ms"),
    "session": ("gap_ms",),
}


@dataclass(frozen=True)
class WindowDefinition:
    """A task's windows: ``type`` (one of :data:`WINDOW_TYPES`) and its sizes in milliseconds, checked as Kafka
    Streams checks them (:class:`~windowstore.ConfigError` naming the size); a size the type does not take must be
    0."""

    type: str = "sliding"
    size_ms: int = 0
    advance_ms: int = 0
    gap_ms: int = 0
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.type not in _SIZES:
            raise ConfigError(f"window type must be one of {', '.join(WINDOW_TYPES)}, got {self.type!r}")
        for name in ("size_ms", "advance_ms", "gap_ms"):
            if name not in _SIZES[self.type] and getattr(self, name):
                raise ConfigError(f"{name} does not apply to {self.type} windows, got {getattr(self, name)}")
        _engine_windows(self)  # Kafka Streams' checks of the sizes, by the engine's definition class

    @property
    def windows(self) -> SlidingWindows | TimeWindows | SessionWindows:
        """The engine's definition object of this type."""
        return _engine_windows(self)

    def identity(self) -> dict[str, Any]:
        """What state written with this definition depends on: the type and its sizes (JSON-able)."""
        return {"type": self.type, **{name: getattr(self, name) for name in _SIZES[self.type]}}

    def describe(self) -> str:
        """``hopping size_ms=60000 advance_ms=10000``: the identity in one phrase (log lines, errors)."""
        return describe_identity(self.identity())


def _engine_windows(d: WindowDefinition) -> SlidingWindows | TimeWindows | SessionWindows:
    if d.type == "sliding":
        return SlidingWindows(d.size_ms, d.grace_ms)
    if d.type == "tumbling":
        return TimeWindows(d.size_ms, None, d.grace_ms)
    if d.type == "hopping":
        return TimeWindows(d.size_ms, d.advance_ms, d.grace_ms)
    return SessionWindows(d.gap_ms, d.grace_ms)


def describe_identity(identity: dict[str, Any]) -> str:
    """:meth:`WindowDefinition.describe` of a recorded :meth:`WindowDefinition.identity`."""
    names: list[str] = [n for n in ("size_ms", "advance_ms", "gap_ms") if n in identity]
    names += sorted(set(identity) - {"type", *names})
    rest = " ".join(f"{n}={identity[n]}" for n in names)
    return f"{identity.get('type')} {rest}".strip()


def new_task_processor(
    definition: WindowDefinition,
    aggregation: Aggregation,
    emit: EmitMode | str,
    meta: bytes | None,
    loader: Callable[[Hashable], bytes | None],
    **options: Any,
) -> TaskProcessor:
    """The task processor of ``definition`` at the state ``meta`` (``None``: a new task), its keys' blobs read
    through ``loader`` on first touch; ``options`` as the processor classes take them (``collect_drops``,
    ``batch``)."""
    windows = definition.windows
    if isinstance(windows, SlidingWindows):
        return SlidingWindowProcessor.from_state(windows, aggregation, emit, meta, loader, **options)
    if isinstance(windows, TimeWindows):
        return TimeWindowProcessor.from_state(windows, aggregation, emit, meta, loader, **options)
    return SessionWindowProcessor.from_state(windows, aggregation, emit, meta, loader, **options)
