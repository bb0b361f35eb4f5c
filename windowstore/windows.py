"""Sliding-window definition (Kafka Streams ``SlidingWindows``, KIP-450).

All times are integer milliseconds. A window is ``[start, start + td]`` with BOTH ends inclusive
(docs/rules.md R1)::

    td = 10
    record t = 25           left window  [15, 25]   (t - td .. t)
                            right window [26, 36]   (t + 1 .. t + 1 + td)

      15        25 26        36
      |=========|  |=========|
      ^ left    ^t ^ right

A record with ``0 <= t < td`` is *early* (R9/R11): its left window would start below 0, so it lives in the
combined window ``[0, td]`` instead. Stream time ``st`` is the largest timestamp seen by the task (R7);
``close = st - grace``. A window is open while ``end >= close`` and closed once ``end < close``
(equivalently ``st > end + grace``, R13)::

      window [s, s+td]          grace
      |==================|- - - - - - -|
                         end           end+grace
      stream time here -> still open  | stream time beyond -> closed
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SlidingWindows", "ConfigError"]


class ConfigError(ValueError):
    """An invalid window or processor configuration; the message names the setting."""


@dataclass(frozen=True, slots=True)
class SlidingWindows:
    """Window definition: ``time_difference_ms`` (td), ``grace_ms`` and the store retention.

    ``retention_ms`` defaults to ``2 * td + grace`` (R24). A smaller retention is rejected, as Kafka Streams
    rejects it: the earliest window a record may need to read starts at ``t - 2 * td``.
    """

    time_difference_ms: int
    grace_ms: int = 0
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        for name in ("time_difference_ms", "grace_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an integer number of milliseconds, got {value!r}")
            if value < 0:
                raise ConfigError(f"{name} must not be negative, got {value}")
        if self.time_difference_ms == 0:
            # Kafka Streams accepts 0 here but fails on the first record ("Window endMs must be greater than
            # window startMs"): reject it where the user can see why.
            raise ConfigError("time_difference_ms must be at least 1 ms (a window [t, t] is not a sliding window)")
        if self.retention_ms is not None:
            r = self.retention_ms
            if isinstance(r, bool) or not isinstance(r, int):
                raise ConfigError(f"retention_ms must be an integer number of milliseconds, got {r!r}")
            minimum = 2 * self.time_difference_ms + self.grace_ms
            if r < minimum:
                raise ConfigError(
                    f"retention_ms must be no smaller than 2 * time_difference_ms + grace_ms = {minimum} "
                    f"(time_difference_ms={self.time_difference_ms}, grace_ms={self.grace_ms}), got {r}"
                )

    @property
    def td(self) -> int:
        """Shorthand for ``time_difference_ms``."""
        return self.time_difference_ms

    @property
    def retention(self) -> int:
        """Effective store retention: the configured one or ``2 * td + grace``."""
        if self.retention_ms is not None:
            return self.retention_ms
        return 2 * self.time_difference_ms + self.grace_ms

    def left_window(self, t: int) -> tuple[int, int]:
        """``[t - td, t]``; for an early record (``t < td``) the combined window ``[0, td]``."""
        start = max(0, t - self.time_difference_ms)
        return start, start + self.time_difference_ms

    def right_window(self, t: int) -> tuple[int, int]:
        """``[t + 1, t + 1 + td]``: the window that starts just after ``t``."""
        return t + 1, t + 1 + self.time_difference_ms

    def window_end(self, start: int) -> int:
        """Inclusive end of the window starting at ``start``."""
        return start + self.time_difference_ms
