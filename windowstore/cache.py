"""Update mode's record cache (R21, Kafka Streams' ``ThreadCache`` in front of the window store), over
:class:`~windowstore.state.EngineState`.

A flush reports the last value of every window written since the previous flush, ordered by last write. The
record path does not copy a window per write: it stamps the window with the next write sequence number in its
key's ``KeyWindows.stamps`` (``state.seq``) and lists the key in ``state.touched``; the window's entry is its
last value. :func:`seal` moves the stamped windows into ``state.cache`` (a dict, last write last), which the
batch path and serialization need before they change representations::

    write sequence:  flushed_seq ... seq
    stamps:          (key a, start 10) -> 41, (key b, start 3) -> 44, (key a, start 12) -> 45
    seal / flush:    a@10, b@3, a@12   (by stamp)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from .state import EngineState
from .store import KeyWindows
from .updates import WindowUpdate

__all__ = ["open_stamps", "replace", "seal", "sealed", "stamped_updates"]

_new_update = tuple.__new__


def open_stamps(state: EngineState, key: Hashable, kw: KeyWindows) -> dict[int, int]:
    """The key's stamps for the record cache, new since the last flush."""
    stamps = kw.stamps = {}
    state.touched.append((key, kw))
    return stamps


def seal(state: EngineState) -> None:
    """Move the stamped writes into ``state.cache``, in write order."""
    if state.touched:
        cache = state.cache
        for u in stamped_updates(state, None):
            k = (u[0], u[1])
            cache.pop(k, None)
            cache[k] = [u[3], u[4], u[5]]


def sealed(state: EngineState) -> dict[tuple[Hashable, int], Any]:
    """The whole record cache as a dict ``(key, start) -> [acc, max_ts, count]`` ordered by last write (R21):
    what Kafka Streams' cache would flush now (stamped writes are sealed first)."""
    seal(state)
    return state.cache


def replace(state: EngineState, cache: dict[tuple[Hashable, int], Any]) -> None:
    """Replace the whole record cache (stamped writes included) by ``cache``."""
    for _key, kw in state.touched:
        kw.settle()
        kw.stamps = None
        kw.gone = None
    state.touched = []
    state.flushed_seq = state.seq
    state.cache = cache


def stamped_updates(state: EngineState, finish: Callable[[Any], Any] | None) -> list[WindowUpdate]:
    """The windows stamped since the last flush/seal as updates (values through ``finish``), in last-write
    order; clears the stamps. A window expired before the flush is still reported (its entry was kept)."""
    base = state.flushed_seq + 1
    span = state.seq + 1 - base
    touched = state.touched
    n = 0
    for _key, kw in touched:
        n += len(kw.stamps)  # type: ignore[arg-type]
    # order by stamp: a slot per write when windows are written a few times each, else a sort
    slots: list[Any] | None = [None] * span if span <= 8 * n else None
    by_seq: dict[int, WindowUpdate] = {}
    td = state.td
    for key, kw in touched:
        entries = kw.entries
        gone = kw.gone
        if slots is not None and finish is None:  # the common case, specialised
            if gone:  # expired windows, unless written again since
                gone.update(entries)
                entries = gone
            for s, seq in kw.stamps.items():  # type: ignore[union-attr]
                e = entries[s]
                slots[seq - base] = _new_update(WindowUpdate, (key, s, s + td, e[0], e[1], e[2]))
            kw.stamps = None
            kw.gone = None
            continue
        for s, seq in kw.stamps.items():  # type: ignore[union-attr]
            w = entries.get(s)
            if w is None:
                w = gone[s]  # type: ignore[index]  # written, then expired: kept in gone until this flush
            u = _new_update(WindowUpdate, (key, s, s + td, w[0] if finish is None else finish(w[0]), w[1], w[2]))
            if slots is not None:
                slots[seq - base] = u
            else:
                by_seq[seq] = u
        kw.stamps = None
        kw.gone = None
    state.touched = []
    state.flushed_seq = state.seq
    if slots is not None:
        return list(filter(None, slots))
    return [by_seq[seq] for seq in sorted(by_seq)]
