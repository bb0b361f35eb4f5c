"""The batch fast path: a whole micro-batch per key at once, with results identical to the record path.

Record-by-record KIP-450 costs O(records per window) per record (R10/R14: a record updates every window that
contains it). When no record of the batch is partially late (R22b) and every window the batch touches is
consistent with the declarative definition R3, the final state equals R3 over the accepted records (R30). So for
commutative aggregations the batch path computes, per key, straight from the key's raw records:

* the R3 window starts ``{max(b - td, 0)} U {p + 1 : a record in (p, p + 1 + td]}`` over distinct timestamps,
  restricted to those the batch writes: windows containing a new record, and windows created by the batch;
* each written window's aggregate from prefix sums (count, sum, mean) or sparse tables (min, max) over the
  records in ``[s, s + td]`` - O(1) per window, so the cost does not grow with overlap;
* the flush order of Kafka Streams' record cache (last write first-to-last): the *last writer* of window ``s``
  is the latest-arriving record among the new records in it and the record that created it, where creation
  happens at the first arrival that makes ``W(s)`` non-empty and different from ``W(s - 1)``. Within one record
  the write order is that of ``processReverse``/``createWindows`` (or ``processEarly`` for ``t < td``)::

      t >= td:  updates of existing windows (descending start), prev-right, left, right copy
      t <  td:  updates (ascending start), right copy, prev-right, combined window [0, td]

It falls back to the record path for the whole batch when any record is partially late, when the emit mode is
not ``update``, when the aggregation has no batch kernel (or values are not integers where exactness needs them),
or when a key that once took a partially-late record does not match R3 on the range the batch reads.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .aggregations import Aggregation, Composite, Field
from .updates import DropReason, EmitMode

if TYPE_CHECKING:  # pragma: no cover
    from .processor import SlidingWindowProcessor

__all__ = ["process_batch", "batch_plan"]

_BIG = np.iinfo(np.int64).max
_LIMIT = 1 << 62


def batch_plan(aggregation: Aggregation) -> list[tuple[str, str | None]] | None:
    """``[(kind, field), ...]`` for an aggregation the batch path supports, else ``None``."""
    parts = aggregation.parts if isinstance(aggregation, Composite) else (aggregation,)
    plan: list[tuple[str, str | None]] = []
    for p in parts:
        field = None
        inner = p
        if isinstance(p, Field):
            field, inner = p.field, p.inner
        kind = inner.batch_kind
        if kind not in ("count", "sum", "min", "max", "mean") or isinstance(inner, Field):
            return None
        plan.append((kind, field))
    return plan


class _SparseTable:
    """Range min or max over ``[lo, hi)`` in O(1) after an O(n log n) build."""

    __slots__ = ("levels", "op")

    def __init__(self, values: np.ndarray, op: Any) -> None:
        self.op = op
        levels = [values]
        k = 1
        while 2 * k <= len(values):
            prev = levels[-1]
            levels.append(op(prev[:-k], prev[k:]))
            k *= 2
        self.levels = levels

    def query(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        length = hi - lo
        k = np.zeros(len(lo), dtype=np.int64)
        nz = length > 0
        k[nz] = np.floor(np.log2(length[nz])).astype(np.int64)
        out = np.empty(len(lo), dtype=self.levels[0].dtype)
        for level in np.unique(k):
            sel = k == level
            tab = self.levels[level]
            out[sel] = self.op(tab[lo[sel]], tab[hi[sel] - (1 << int(level))])
        return out


def _values_array(values: Sequence[Any], kind: str) -> np.ndarray | None:
    """Numeric column for a kernel, or ``None`` when exactness is not guaranteed (fallback)."""
    if kind == "count":
        return None
    if kind in ("sum", "mean"):
        if not all(type(v) is int for v in values):
            return None
        arr = np.fromiter(values, dtype=np.int64, count=len(values)) if values else np.zeros(0, np.int64)
        if len(arr) and int(np.abs(arr).max()) * len(arr) >= _LIMIT:
            return None
        return arr
    # min / max: exact for ints and floats alike, but not for mixed types or NaN
    if all(type(v) is int for v in values):
        if values and max(abs(v) for v in values) >= _LIMIT:
            return None
        return np.fromiter(values, dtype=np.int64, count=len(values))
    if all(type(v) is float for v in values):
        arr = np.fromiter(values, dtype=np.float64, count=len(values))
        return None if np.isnan(arr).any() else arr
    return None


def _r3_starts(distinct: np.ndarray, td: int) -> np.ndarray:
    """All R3 window starts for the distinct record timestamps of one key."""
    left = np.maximum(distinct - td, 0)
    nxt = distinct[1:]
    right = distinct[:-1][nxt <= distinct[:-1] + 1 + td] + 1
    return np.union1d(left, right)


def _key_windows_plan(
    proc: "SlidingWindowProcessor",
    key: Hashable,
    kw: Any,
    new_idx: list[int],
    new_ts: list[int],
    new_vals: list[Any],
    plan: list[tuple[str, str | None]],
) -> list[tuple] | None:
    """The writes the batch makes to one key's windows, or ``None`` to fall back."""
    td = proc.td
    old_ts = kw.raw_ts or []
    old_vals = kw.raw_values or []
    all_ts = np.fromiter(old_ts, np.int64, len(old_ts))
    n_old = len(old_ts)
    nts = np.fromiter(new_ts, np.int64, len(new_ts))
    nidx = np.fromiter(new_idx, np.int64, len(new_idx))
    T = np.concatenate([all_ts, nts])
    arrival = np.concatenate([np.full(n_old, -1, np.int64), nidx])
    order = np.argsort(T, kind="stable")
    T = T[order]
    arrival = arrival[order]
    values_all = list(old_vals) + list(new_vals)

    distinct = np.unique(T)
    starts = _r3_starts(distinct, td)
    new_sorted = np.sort(nts)
    # windows [s, s+td] with a new record in [s-1, s+td] are the only ones the batch can write
    touch = np.searchsorted(new_sorted, starts + td, "right") - np.searchsorted(new_sorted, starts - 1, "left")
    starts = starts[touch > 0]
    if not len(starts):
        return []

    lo = np.searchsorted(T, starts, "left")
    hi = np.searchsorted(T, starts + td, "right")
    count = hi - lo

    # first arrival of any record in [s, s+td]; -1 means "already there before the batch"
    first_in = _SparseTable(arrival, np.minimum).query(lo, hi)
    # first arrival of a record at exactly s-1 or s+td
    d_lo = np.searchsorted(T, distinct, "left")
    first_at = np.minimum.reduceat(arrival, d_lo) if len(T) else np.zeros(0, np.int64)

    def first_exact(ts: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(distinct, ts)
        pos_c = np.minimum(pos, len(distinct) - 1)
        hit = distinct[pos_c] == ts
        return np.where(hit, first_at[pos_c], _BIG)

    edge = np.minimum(first_exact(starts - 1), first_exact(starts + td))
    created_at = np.where(starts == 0, first_in, np.maximum(first_in, edge))
    last_new = _SparseTable(arrival, np.maximum).query(lo, hi)  # -1 when no new record in the window
    last_writer = np.maximum(created_at, last_new)
    written = last_writer >= 0
    if not written.all():
        starts, lo, hi, count = starts[written], lo[written], hi[written], count[written]
        created_at, last_writer = created_at[written], last_writer[written]

    # the aggregate of each written window, per part
    per_part: list[list[Any]] = []
    for kind, field in plan:
        if kind == "count":
            per_part.append(count.tolist())
            continue
        try:
            col = [v if field is None else v[field] for v in values_all]
        except (KeyError, TypeError, IndexError):
            return None
        arr = _values_array(col, kind)
        if arr is None:
            return None
        arr = arr[order]
        if kind in ("sum", "mean"):
            prefix = np.concatenate([[0], np.cumsum(arr)])
            sums = (prefix[hi] - prefix[lo]).tolist()
            per_part.append(sums if kind == "sum" else list(zip(count.tolist(), sums)))
        else:
            table = _SparseTable(arr, np.minimum if kind == "min" else np.maximum)
            per_part.append(table.query(lo, hi).tolist())
    accs = per_part[0] if len(per_part) == 1 and not isinstance(proc.aggregation, Composite) else list(
        zip(*per_part)
    )

    # flush order: (last writer, category, position within the record)
    writer_ts = np.empty(len(starts), np.int64)
    pos_of = {int(i): t for i, t in zip(new_idx, new_ts)}
    writer_ts[:] = [pos_of[int(w)] for w in last_writer]
    by_creation = created_at == last_writer
    early = writer_ts < td
    cat = np.zeros(len(starts), np.int64)
    # t >= td: updates 0 (descending start), prev-right 1, left 2, right copy 3
    cat[~early & by_creation] = 1
    cat[~early & by_creation & (starts == writer_ts - td)] = 2
    cat[~early & by_creation & (starts == writer_ts + 1)] = 3
    # t < td: updates 0 (ascending start), right copy 1, prev-right 2, combined [0, td] 3 (created or not)
    cat[early & by_creation] = 2
    cat[early & by_creation & (starts == writer_ts + 1)] = 1
    cat[early & (starts == 0)] = 3
    pos = np.where(early, starts, -starts)
    max_ts = T[hi - 1]
    return list(
        zip(
            last_writer.tolist(),
            cat.tolist(),
            pos.tolist(),
            [key] * len(starts),
            starts.tolist(),
            accs,
            max_ts.tolist(),
            count.tolist(),
        )
    )


def _consistent_with_r3(proc: "SlidingWindowProcessor", kw: Any, new_ts: list[int]) -> bool:
    """Whether the stored windows a batch would read match R3 over the key's raw records."""
    td = proc.td
    raw = kw.raw_ts or []
    lo_read = max(0, min(new_ts) - 2 * td)
    hi_read = max(new_ts) + 1
    stored = [s for s in kw.starts if lo_read <= s <= hi_read]
    if not raw:
        return not stored
    T = np.fromiter(raw, np.int64, len(raw))
    r3 = _r3_starts(np.unique(T), td)
    r3 = r3[(r3 >= lo_read) & (r3 <= hi_read)]
    if r3.tolist() != stored:
        return False
    plan = batch_plan(proc.aggregation)
    assert plan is not None
    lo = np.searchsorted(T, r3, "left")
    hi = np.searchsorted(T, r3 + td, "right")
    for s, a, b in zip(stored, lo.tolist(), hi.tolist()):
        e = kw.entries[s]
        if e[2] != b - a or e[1] != raw[b - 1]:
            return False
        if e[0] != _fold(proc.aggregation, kw.raw_values[a:b]):
            return False
    return True


def _fold(aggregation: Aggregation, values: Sequence[Any]) -> Any:
    acc = aggregation.create()
    for v in values:
        acc = aggregation.accumulate(acc, v)
    return acc


def process_batch(proc: "SlidingWindowProcessor", records: Sequence[tuple[Hashable, Any, Any]]) -> bool:
    """Process ``records`` (arrival order) on the batch path if it applies; returns False after falling
    back to the record path. Update mode only; results go to the cache like :meth:`process` (call ``flush``)."""
    plan = batch_plan(proc.aggregation) if proc.emit is EmitMode.UPDATE and proc.batch else None
    if plan is None:
        _record_path(proc, records)
        return False

    td, grace = proc.td, proc.grace
    st = proc.observed_stream_time
    accepted: dict[Hashable, tuple[list[int], list[int], list[Any]]] = {}
    drops: list[tuple[int, DropReason, int]] = []
    for i, (key, value, ts) in enumerate(records):
        if key is None or value is None:
            drops.append((i, DropReason.NULL_KEY if key is None else DropReason.NULL_VALUE, st))
            continue
        if type(ts) is not int:
            if isinstance(ts, int) and not isinstance(ts, bool):
                ts = int(ts)
            else:
                drops.append((i, DropReason.INVALID_TIMESTAMP, st))
                continue
        if ts < 0:
            drops.append((i, DropReason.INVALID_TIMESTAMP, st))
            continue
        if ts > st:
            st = ts
        close = st - grace
        if ts + td < close:
            drops.append((i, DropReason.LATE, st))
            continue
        if ts < close:  # partially late (R22b): only the record path is exact
            _record_path(proc, records)
            return False
        group = accepted.get(key)
        if group is None:
            group = accepted[key] = ([], [], [])
        group[0].append(i)
        group[1].append(ts)
        group[2].append(value)

    store = proc.store
    writes: list[tuple] = []
    for key, (idx, tss, vals) in accepted.items():
        kw = store.windows_of(key)
        if key in proc.flagged_keys and not _consistent_with_r3(proc, kw, tss):
            _record_path(proc, records)
            return False
        w = _key_windows_plan(proc, key, kw, idx, tss, vals, plan)
        if w is None:
            _record_path(proc, records)
            return False
        writes.extend(w)

    # commit: everything below is the state change
    stats = proc.stats
    stats.records += len(records)
    proc.observed_stream_time = st
    for i, reason, drop_st in drops:
        key, value, ts = records[i]
        if reason is DropReason.LATE:
            stats.dropped_late += 1
        elif reason is DropReason.INVALID_TIMESTAMP:
            stats.dropped_invalid_timestamp += 1
        else:
            stats.dropped_null += 1
        proc._drop(key, value, ts, reason, drop_st)
    for key, (idx, tss, vals) in accepted.items():
        stats.accepted += len(idx)
        kw = store.windows_of(key)
        if kw.raw_ts is None:
            kw.raw_ts, kw.raw_values = [], []
        merged = sorted(zip(kw.raw_ts + tss, range(len(kw.raw_ts) + len(tss))), key=lambda p: p[0])
        old_vals = kw.raw_values + vals
        kw.raw_ts = [p[0] for p in merged]
        kw.raw_values = [old_vals[p[1]] for p in merged]

    writes.sort(key=lambda w: (w[0], w[1], w[2]))
    dirty = proc._dirty
    new_starts: dict[Hashable, list[int]] = {}
    for _w, _c, _p, key, s, acc, ts, cnt in writes:
        kw = store.keys[key]
        e = kw.entries.get(s)
        if e is None:
            kw.entries[s] = [acc, ts, cnt]
            new_starts.setdefault(key, []).append(s)
            stats.windows_created += 1
        else:
            e[0], e[1], e[2] = acc, ts, cnt
            stats.windows_updated += 1
        k = (key, s)
        dirty.pop(k, None)
        dirty[k] = (acc, ts, cnt)
        if s > store.store_time:
            store.store_time = s
    for key, added in new_starts.items():
        kw = store.keys[key]
        kw.starts = sorted(kw.starts + added)
        store._size += len(added)
        top = kw.starts[-1]
        if top > store.key_max_start.get(key, -1):
            store.key_max_start[key] = top
    store.dirty.update(accepted)
    for key in accepted:
        store.windows_of(key)  # purge what the new store time put out of reach, as the record path does
    return True


def _record_path(proc: "SlidingWindowProcessor", records: Sequence[tuple[Hashable, Any, Any]]) -> None:
    process = proc.process
    for key, value, ts in records:
        process(key, value, ts)
