"""Value types the processor hands to its caller: emit modes, window updates, drops and counters."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

__all__ = ["EmitMode", "WindowUpdate", "DroppedRecord", "DropReason", "ProcessorStats"]


class EmitMode(str, enum.Enum):
    """When window results are emitted (docs/rules.md R18-R21 and R26-R29; README.md, "Emit modes").

    * ``every``:  every window write, in Kafka Streams' order (uncached Kafka Streams, R18-R20)
    * ``update``: the last value of each window written since the previous flush, ordered by last write
      (Kafka Streams' record cache, R21); the caller flushes (the service: once per micro-batch)
    * ``close``:  one final record per window once it closes (KIP-825 emit-on-window-close, R26-R29)
    """

    EVERY = "every"
    UPDATE = "update"
    CLOSE = "close"

    @classmethod
    def parse(cls, value: EmitMode | str) -> EmitMode:
        if isinstance(value, EmitMode):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise ValueError(f"emit mode must be one of every, update, close; got {value!r}") from None


class WindowUpdate(NamedTuple):
    """One emitted window result. ``[start, end]`` is inclusive at both ends; ``ts`` is the largest record
    timestamp in the window (R5); ``count`` the number of records folded into ``value``."""

    key: Hashable
    start: int
    end: int
    value: Any
    ts: int
    count: int  # type: ignore[assignment]  # shadows tuple.count on purpose: the public field name


class DropReason(str, enum.Enum):
    NULL_KEY = "null-key"
    NULL_VALUE = "null-value"
    INVALID_TIMESTAMP = "invalid-timestamp"
    LATE = "late"


class DroppedRecord(NamedTuple):
    """An input record that was not aggregated at all, with why (``LATE``: R8, every window closed)."""

    key: Hashable
    value: Any
    ts: Any
    reason: DropReason
    stream_time: int


@dataclass(slots=True)
class ProcessorStats:
    """Counters of one processor (one task). ``dropped_records_total`` equals Kafka Streams' task sensor
    ``dropped-records-total``: null key/value and invalid timestamps, late records (R8), and one tick per
    closed window a partially-late record skipped (R13)."""

    records: int = 0
    accepted: int = 0
    dropped_late: int = 0
    dropped_null: int = 0
    dropped_invalid_timestamp: int = 0
    skipped_windows: int = 0
    windows_created: int = 0
    windows_updated: int = 0
    updates_emitted: int = 0

    @property
    def dropped_records_total(self) -> int:
        return self.dropped_late + self.dropped_null + self.dropped_invalid_timestamp + self.skipped_windows

    def as_dict(self) -> dict[str, int]:
        d = asdict(self)
        d["dropped_records_total"] = self.dropped_records_total
        return d

    def add(self, other: ProcessorStats) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)
