"""The windows waiting for their close under emit-on-close (R26-R29), in Kafka's time-ordered order.

Kafka's emit-final store fetches closed windows by ``(start, key bytes)`` (R27): a round at close ``c`` emits
every waiting window with ``start <= upper = c - td - 1``, smallest start first, ties by serialized key::

    starts of waiting windows ->   10   10   12   15   15   20   31
    round with upper = 15:        [a]  [b]  [a]  [a]  [c]   |   stay for a later round
                                  \\__ popped, in (start, key bytes) order __/

The record path adds windows one at a time (a heap: O(log n) per window); the batch path adds a whole batch's
new windows at once as one *run* (its starts sorted, keys in the same order), so inserting costs one sort per
batch instead of a heap push per window, and a round takes each run's prefix ``start <= upper`` with one binary
search. A round that pops windows of several runs (or of a run and the heap) sorts what it popped by
``(start, key bytes)``. The same window may wait twice (it was created again after it expired); it is popped
twice, as Kafka's store would find it twice.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Any

import numpy as np

from .store import key_bytes

__all__ = ["PendingWindows"]

_I64 = np.int64
#: runs kept apart before they are merged into one (a merge is a sort of all their windows)
MAX_RUNS = 32


class _Run:
    """Windows added together: ``starts`` ascending (int64), ``keys`` in the same order; ``pos``: the first
    one not popped yet."""

    __slots__ = ("keys", "pos", "starts")

    def __init__(self, starts: np.ndarray, keys: list[Hashable]) -> None:
        self.starts = starts
        self.keys = keys
        self.pos = 0

    def __len__(self) -> int:
        return len(self.keys) - self.pos


class PendingWindows:
    """A multiset of waiting windows ``(start, key)``, popped in ``(start, key bytes)`` order."""

    __slots__ = ("_heap", "_runs")

    def __init__(self) -> None:
        self._heap: list[tuple[int, bytes, Hashable]] = []
        self._runs: list[_Run] = []

    def __len__(self) -> int:
        return len(self._heap) + sum(len(r) for r in self._runs)

    def push(self, start: int, key: Hashable) -> None:
        """Add one window (the record path)."""
        heapq.heappush(self._heap, (start, key_bytes(key), key))

    def add_run(self, starts: np.ndarray, keys: list[Hashable]) -> None:
        """Add many windows at once (the batch path): ``starts`` (int64) and their ``keys``, in any order."""
        if not len(keys):
            return
        order = np.argsort(starts, kind="stable")
        self._runs.append(_Run(starts[order], [keys[i] for i in order.tolist()]))
        if len(self._runs) > MAX_RUNS:
            runs, self._runs = self._runs, []
            self.add_run(np.concatenate([r.starts[r.pos :] for r in runs]), [k for r in runs for k in r.keys[r.pos :]])

    def any_in(self, lower: int, upper: int) -> bool:
        """Whether a window with ``lower <= start <= upper`` waits (both bounds inclusive)."""
        if upper < lower:
            return False
        for r in self._runs:
            s = r.starts
            i = max(r.pos, int(s.searchsorted(lower)))
            if i < len(s) and s[i] <= upper:
                return True
        return any(lower <= s <= upper for s, _kb, _k in self._heap)

    def pop_through(self, upper: int) -> tuple[list[int], list[Hashable]]:
        """Remove and return the windows with ``start <= upper`` (inclusive): their starts and keys, in
        ``(start, key bytes)`` order."""
        heap = self._heap
        if not self._runs:  # the record path's rounds: a few windows, or none
            first: list[int] = []
            keys_: list[Hashable] = []
            while heap and heap[0][0] <= upper:
                s, _kb, k = heapq.heappop(heap)
                first.append(s)
                keys_.append(k)
            return first, keys_
        from_heap: list[tuple[int, bytes, Hashable]] = []
        while heap and heap[0][0] <= upper:
            from_heap.append(heapq.heappop(heap))
        starts: list[np.ndarray] = []
        keys: list[Hashable] = []
        runs = []
        for r in self._runs:
            j = int(r.starts.searchsorted(upper, "right"))
            if j > r.pos:
                starts.append(r.starts[r.pos : j])
                keys.extend(r.keys[r.pos : j])
                r.pos = j
            if r.pos < len(r.keys):
                if r.pos > len(r.keys) // 2:  # drop the popped half, so a run's memory follows what waits
                    r.starts, r.keys, r.pos = r.starts[r.pos :], r.keys[r.pos :], 0
                runs.append(r)
        self._runs = runs
        if not starts:  # the heap's pops are in order already
            return [s for s, _kb, _k in from_heap], [k for _s, _kb, k in from_heap]
        if from_heap:
            starts.append(np.fromiter((s for s, _kb, _k in from_heap), _I64, len(from_heap)))
            keys.extend(k for _s, _kb, k in from_heap)
        return _in_kafka_order(np.concatenate(starts), keys)

    def items(self) -> list[tuple[int, Hashable]]:
        """Every waiting window ``(start, key)``, in no particular order (state and tests)."""
        out = [(s, k) for s, _kb, k in self._heap]
        for r in self._runs:
            out.extend(zip(r.starts[r.pos :].tolist(), r.keys[r.pos :]))
        return out

    def to_state(self) -> dict[str, Any]:
        """A picklable form (:meth:`from_state` restores it): all starts as one int64 array, keys alongside."""
        heap_starts = np.fromiter((s for s, _kb, _k in self._heap), _I64, len(self._heap))
        return {
            "starts": np.concatenate([heap_starts, *(r.starts[r.pos :] for r in self._runs)]),
            "keys": [k for _s, _kb, k in self._heap] + [k for r in self._runs for k in r.keys[r.pos :]],
        }

    @classmethod
    def from_state(cls, state: Any) -> PendingWindows:
        """Inverse of :meth:`to_state`; also takes the earlier form, a list of ``(start, key bytes, key)``."""
        p = cls()
        if isinstance(state, dict):
            p.add_run(np.asarray(state["starts"], _I64), list(state["keys"]))
        else:
            for s, _kb, k in state:
                p.push(s, k)
        return p


def _in_kafka_order(starts: np.ndarray, keys: list[Hashable]) -> tuple[list[int], list[Hashable]]:
    """``starts`` and ``keys`` sorted by ``(start, key bytes)``: keys ranked once each by their bytes."""
    uniq = dict.fromkeys(keys)
    rank = {k: i for i, k in enumerate(sorted(uniq, key=key_bytes))}
    r = np.fromiter((rank[k] for k in keys), _I64, len(keys))
    order = np.lexsort((r, starts))
    return starts[order].tolist(), [keys[i] for i in order.tolist()]
