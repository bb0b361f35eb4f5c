"""Session merger for every built-in aggregation (Kafka Streams' ``Merger<K, V>``; rule S6).

When a record bridges sessions, Kafka Streams folds the found sessions' aggregates into a fresh initializer value
with the user's merger, in the store's order (ascending session end), and aggregates the record's value last. For
the built-ins the merger is ``combine`` of the accumulate / combine / deduct form, extended here to the ones that
lack it (first, last, collect, composites). The aggregation module stays untouched: this module only reads its
public classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .aggregations import Aggregation, Collect, Composite, Field, First, Last

__all__ = ["Merger", "session_merger"]

Merger = Callable[[Any, Any], Any]
"""``merger(agg_one, agg_two) -> merged``: ``agg_one`` the value folded so far, ``agg_two`` the next session's."""


def _merge_collect(a: tuple, b: tuple) -> tuple:
    return a + b


def session_merger(aggregation: Aggregation) -> Merger:
    """The merger session windows use for ``aggregation``; ``ValueError`` when it has none (a user-defined
    aggregation without ``combine``: pass ``merger=`` to the processor)."""
    if isinstance(aggregation, Field):
        return session_merger(aggregation.inner)
    if isinstance(aggregation, Composite):
        parts = [session_merger(p) for p in aggregation.parts]
        return lambda a, b: tuple(m(x, y) for m, x, y in zip(parts, a, b, strict=True))
    if isinstance(aggregation, Collect):
        return _merge_collect
    if isinstance(aggregation, Last):  # before First: Last is a subclass of First
        empty = aggregation.create()
        return lambda a, b: a if b is empty else b
    if isinstance(aggregation, First):
        empty = aggregation.create()
        return lambda a, b: b if a is empty else a
    combine = aggregation.combine
    if combine is None:
        raise ValueError(
            f"aggregation {aggregation.name!r} has no session merger (no combine); "
            "session windows need one to merge sessions"
        )
    return combine
