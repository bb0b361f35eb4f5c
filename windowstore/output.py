"""What a flush hands out, over :class:`~windowstore.state.EngineState`: the record cache (cache.py) and the
typed output segments, as :class:`~windowstore.updates.WindowUpdate` objects (:func:`flush`) or as columns
(:func:`flush_columns`, no Python object per window when the batch path wrote them).

Update mode: ``state.segments`` (:class:`~windowstore.state.CachedWrites`, :class:`~windowstore.state.ColumnWrites`,
oldest first) and then the record cache hold every write since the last flush; a window written more than once
is reported once, at its last write (R21). Close mode: ``state.closed`` holds the final windows the batch path
emitted (:class:`~windowstore.state.EmittedUpdates`, :class:`~windowstore.state.EmittedColumns`).
"""

from __future__ import annotations

import gc
from collections.abc import Hashable
from typing import Any

import numpy as np

from .aggregations import Composite
from .cache import replace, sealed, stamped_updates
from .columns import Plan, accumulators, object_array, update_columns
from .state import CachedWrites, ColumnWrites, EmittedColumns, EmittedUpdates, EngineState
from .updates import WindowUpdate

__all__ = ["flush", "flush_columns", "gc_paused", "take_unflushed", "unflushed"]

_new_update = tuple.__new__
_I64 = np.int64


class gc_paused:
    """Pause automatic cyclic garbage collection for a bulk build of short-lived, acyclic objects (a flush's
    updates: one :class:`WindowUpdate` per window, ~100k for a 50k-record micro-batch).

    Why: ``WindowUpdate`` is a tuple subclass, which CPython's collector never untracks, so while a flush
    builds them every generation-1 collection promotes thousands of live updates and the flush ends in a
    full collection (figures: bench/RESULTS.md, the record path's flush). Paused, the updates are seen once,
    by the first young-generation collection after the flush, and usually freed by reference counting before
    they reach an older generation. Nothing is leaked: the allocations still count towards the next
    collection. Re-entrant; it only re-enables what it disabled itself (a thread that disables the collector
    while another thread flushes may find it re-enabled when that flush ends).
    """

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        if self._was:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


def flush(state: EngineState) -> list[WindowUpdate]:
    """Update mode: the last value of every window written since the previous flush, ordered by last write
    (Kafka Streams' record cache flush, R21). Close mode: the final windows the batch path emitted since the
    previous flush (the record path returns its own). Every mode: nothing else. The cyclic garbage collector
    is paused while the updates are built (see :class:`gc_paused`)."""
    if not state.is_update:
        return _closed_updates(state) if state.closed else []
    with gc_paused():
        return _flush_update(state)


def _flush_update(state: EngineState) -> list[WindowUpdate]:
    td = state.td
    finish = state.finish
    if state.touched and not state.segments and not state.cache:  # only stamped writes: no dict needed
        out = stamped_updates(state, finish)
        state.stats.updates_emitted += len(out)
        return out
    if state.segments:
        pending = take_unflushed(state)
    elif not sealed(state):
        return []
    else:
        pending = state.cache
        replace(state, {})
    out = [
        _new_update(WindowUpdate, (key, start, start + td, acc if finish is None else finish(acc), ts, count))
        for (key, start), (acc, ts, count) in pending.items()
    ]
    state.stats.updates_emitted += len(out)
    return out


def unflushed(state: EngineState) -> dict[tuple[Hashable, int], Any]:
    """Every unflushed write (output segments, then the record cache) as ``{(key, start): (acc, max_ts,
    count)}``, last write last; nothing is taken (what the task meta saves)."""
    out: dict[tuple[Hashable, int], Any] = {}
    composite = isinstance(state.aggregation, Composite)
    for seg in [*state.segments, CachedWrites(sealed(state))]:
        if isinstance(seg, CachedWrites):
            items: Any = seg.entries.items()
        else:
            counts = seg.counts.tolist()
            accs = accumulators(_plan(state), composite, counts, seg.parts)
            keys = seg.keys
            items = (
                ((keys[k], s), (a, t, n))
                for k, s, a, t, n in zip(seg.key_id.tolist(), seg.start.tolist(), accs, seg.ts.tolist(), counts)
            )
        for k, v in items:
            out.pop(k, None)
            out[k] = v
    return out


def take_unflushed(state: EngineState) -> dict[tuple[Hashable, int], Any]:
    """:func:`unflushed`, then forgotten (the segments and the record cache emptied)."""
    out = unflushed(state)
    state.segments = []
    replace(state, {})
    return out


def _plan(state: EngineState) -> Plan:
    """The batch path's plan: every column segment was written by the batch path, which has one."""
    plan = state.plan
    if plan is None:
        raise ValueError("column segments without the batch path's plan")
    return plan


def _finished(state: EngineState, parts: list[Any], count: np.ndarray) -> dict[str, Any]:
    """Finished aggregate columns by output name from the batch path's part columns."""
    agg = state.aggregation
    names = [p.name for p in agg.parts] if isinstance(agg, Composite) else [agg.name]
    values = {}
    for name, (kind, _f), col in zip(names, _plan(state), parts):
        if kind == "count":
            values[name] = count
        elif kind == "mean":
            values[name] = col / count
        else:
            values[name] = col
    return values


def _closed_updates(state: EngineState) -> list[WindowUpdate]:
    """Close mode: the windows emitted since the last flush, as updates (then forgotten)."""
    segments, state.closed = state.closed, []
    out: list[WindowUpdate] = []
    composite = isinstance(state.aggregation, Composite)
    td = state.td
    for seg in segments:
        if isinstance(seg, EmittedUpdates):
            out.extend(seg.updates)
            continue
        values = {n: col.tolist() for n, col in _finished(state, seg.parts, seg.counts).items()}
        rows = [dict(zip(values, v)) for v in zip(*values.values())] if composite else next(iter(values.values()))
        out.extend(
            _new_update(WindowUpdate, (k, s, s + td, v, t, c))
            for k, s, v, t, c in zip(seg.key, seg.start.tolist(), rows, seg.ts.tolist(), seg.counts.tolist())
        )
    return out


def flush_columns(state: EngineState) -> dict[str, Any]:
    """The flush as columns: ``key`` (list), ``start``, ``end``, ``ts``, ``count`` (int64 arrays) and
    ``values`` {output name: array} of finished aggregates (ints beyond int64 as an object column, never
    float: :func:`~windowstore.columns.exact_column`); rows in flush order. When the rows come from one
    batch-path segment, also ``key_table`` (distinct keys) and ``key_id`` (int64 array):
    ``key[i] == key_table[key_id[i]]``."""
    agg = state.aggregation
    segs = state.segments
    closed = state.closed
    seg = closed[0] if len(closed) == 1 else None
    if isinstance(seg, EmittedColumns):  # close mode, one batch-path emission round
        state.closed = []
        return {
            "key": seg.key,
            "start": seg.start,
            "end": seg.start + state.td,
            "ts": seg.ts,
            "count": seg.counts,
            "values": _finished(state, seg.parts, seg.counts),
        }
    cw = segs[0] if len(segs) == 1 else None
    if state.plan is not None and isinstance(cw, ColumnWrites) and not sealed(state):
        state.segments = []
        keys = cw.keys
        start = cw.start
        count = cw.counts
        values = _finished(state, cw.parts, count)
        state.stats.updates_emitted += len(start)
        return {
            "key": object_array(keys)[cw.key_id].tolist(),
            "key_table": keys,  # the same keys as ids into a table of distinct keys (encoders use them)
            "key_id": cw.key_id,
            "start": start,
            "end": start + state.td,
            "ts": cw.ts,
            "count": count,
            "values": values,
        }
    return update_columns(flush(state), agg)
