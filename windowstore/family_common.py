"""What the time- and session-window processors share: counters, key order, Java integer division, checks.

Nothing here knows a window type. The processors in :mod:`windowstore.time_windows` and
:mod:`windowstore.session_windows` count drops in :class:`FamilyStats`, order keys the way Kafka Streams' byte
stores do (:func:`key_bytes`), and find store segments with :func:`java_div` (Java's ``/`` truncates toward zero).
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from typing import Any

from .windows import ConfigError

__all__ = ["FamilyStats", "check_millis", "java_div", "key_bytes", "valid_timestamp"]


@dataclass(slots=True)
class FamilyStats:
    """Counters of one time- or session-window processor (one task).

    ``dropped_records_total`` equals Kafka Streams' task sensor ``dropped-records-total`` (rule T7 / S9 of
    docs/rules-window-types.md): one tick per null key, per invalid timestamp, and per closed window a record
    could not update (time windows: once per closed window of the record, so a fully late hopping record counts
    size/advance times; sessions: once per late record).
    """

    records: int = 0
    accepted: int = 0
    dropped_null_key: int = 0
    dropped_invalid_timestamp: int = 0
    #: records none of whose windows were open (time windows) / whose merged session was closed (sessions)
    dropped_late: int = 0
    #: closed windows skipped (time windows: one per closed window of a record; sessions: one per late record)
    skipped_windows: int = 0
    windows_created: int = 0
    windows_updated: int = 0
    sessions_merged: int = 0
    tombstones_emitted: int = 0
    updates_emitted: int = 0

    @property
    def dropped_records_total(self) -> int:
        return self.dropped_null_key + self.dropped_invalid_timestamp + self.skipped_windows

    def as_dict(self) -> dict[str, int]:
        d = asdict(self)
        d["dropped_records_total"] = self.dropped_records_total
        return d


def key_bytes(key: Hashable) -> bytes:
    """The bytes Kafka Streams would order a key by (``Serdes.String()`` for text): UTF-8 for ``str``, the bytes
    themselves for ``bytes``, canonical JSON otherwise. Stores compare keys as unsigned bytes, lexicographically."""
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    return json.dumps(key, sort_keys=True, separators=(",", ":")).encode("utf-8")


def java_div(a: int, b: int) -> int:
    """Java's ``long / long``: truncates toward zero (Python's ``//`` floors). Segment ids use it."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def check_millis(name: str, value: Any, *, minimum: int) -> int:
    """An integer number of milliseconds no smaller than ``minimum``, else :class:`ConfigError` naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer number of milliseconds, got {value!r}")
    if value < minimum:
        what = "must not be negative" if minimum == 0 else f"must be at least {minimum} ms"
        raise ConfigError(f"{name} {what}, got {value}")
    return value


def valid_timestamp(ts: Any) -> int | None:
    """The record timestamp as an int, or ``None`` when it is not a non-negative integer (Kafka Streams' source
    node drops such records with a ``dropped-records-total`` tick before any processor sees them)."""
    if isinstance(ts, bool):
        return None
    if not isinstance(ts, int):
        index = getattr(ts, "__index__", None)
        if index is None:
            return None
        ts = index()
    return ts if ts >= 0 else None
