"""The batch fast path: a whole micro-batch per key at once, with results identical to the record path.

Record-by-record KIP-450 costs O(records per window) per record (R10/R14: a record updates every window that
contains it). When no record of the batch is partially late (R22b) and every window the batch touches is
consistent with the declarative definition R3, the final state equals R3 over the accepted records (R30). So for
commutative aggregations the batch path computes, per key, straight from the key's raw records (kept as numpy
columns):

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

A key's windows stay numpy columns between batches (``KeyWindows.cols``); the record path turns them back
into entries when it touches the key. Results are buffered as columns too: ``flush_columns`` hands them out
without a Python object per window.

It falls back to the record path for the whole batch when any record is partially late, when the emit mode is
not ``update``, when the aggregation has no batch kernel or values are not exactly representable (sums need
integers; min/max need all-int or all-float, no NaN), or when a key that once took a partially-late record does
not match R3 on the range the batch reads.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .aggregations import Aggregation, Composite, Field
from .updates import DropReason, EmitMode

if TYPE_CHECKING:  # pragma: no cover
    from .processor import SlidingWindowProcessor
    from .store import KeyWindows

__all__ = ["process_batch", "batch_plan", "attach", "Plan"]

Plan = list[tuple[str, str | None]]
_BIG = np.iinfo(np.int64).max
_LIMIT = 1 << 62
_I64 = np.int64


def batch_plan(aggregation: Aggregation) -> Plan | None:
    """``[(kind, field), ...]`` for an aggregation the batch path supports, else ``None``."""
    parts = aggregation.parts if isinstance(aggregation, Composite) else (aggregation,)
    plan: Plan = []
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


class Cols:
    """One key's windows as columns, ascending start. ``parts[i]`` holds part i's accumulator column (sum or
    min/max value; the sum for mean); ``None`` for a count part, whose value is ``counts``."""

    __slots__ = ("starts", "ts", "counts", "parts")

    def __init__(self, starts: np.ndarray, ts: np.ndarray, counts: np.ndarray, parts: list[Any]) -> None:
        self.starts = starts
        self.ts = ts
        self.counts = counts
        self.parts = parts

    def __len__(self) -> int:
        return len(self.starts)

    def take(self, sel: Any) -> "Cols":
        return Cols(
            self.starts[sel], self.ts[sel], self.counts[sel], [None if p is None else p[sel] for p in self.parts]
        )


def attach(proc: "SlidingWindowProcessor") -> Plan | None:
    """Enable the batch path on a processor: returns its plan and teaches the store to materialize."""
    plan = batch_plan(proc.aggregation) if proc.emit is EmitMode.UPDATE else None
    if plan is not None:
        composite = isinstance(proc.aggregation, Composite)
        proc.store.materialize = lambda kw: _materialize(kw, plan, composite)  # type: ignore[method-assign]
        proc.store.trim_columnar = _trim  # type: ignore[method-assign]
    return plan


# ------------------------------------------------------------------------------------------- representation
def _accs(plan: Plan, composite: bool, counts: list[int], parts: list[Any]) -> list[Any]:
    cols = []
    for (kind, _f), p in zip(plan, parts):
        if kind == "count":
            cols.append(counts)
        elif kind == "mean":
            cols.append(list(zip(counts, p.tolist())))
        else:
            cols.append(p.tolist())
    return list(zip(*cols)) if composite else cols[0]


def _materialize(kw: "KeyWindows", plan: Plan, composite: bool) -> None:
    """Columns -> entries and raw lists (for the record path, serialization and reads)."""
    c = kw.cols
    if c is not None:
        kw.cols = None
        counts = c.counts.tolist()
        starts = c.starts.tolist()
        accs = _accs(plan, composite, counts, c.parts)
        kw.starts = starts
        kw.entries = {s: [a, t, n] for s, a, t, n in zip(starts, accs, c.ts.tolist(), counts)}
    if kw.raw_ts is not None and not isinstance(kw.raw_ts, list):
        kw.raw_ts = kw.raw_ts.tolist()
        kw.raw_cols = [None if col is None else col.tolist() for col in kw.raw_cols or ()]


def _column(values: Sequence[Any], kind: str) -> np.ndarray | None:
    """A numeric column for a kernel, or ``None`` when the batch result would not be exact (fallback)."""
    n = len(values)
    if kind in ("sum", "mean"):
        if not all(type(v) is int for v in values):
            return None
        arr = np.fromiter(values, _I64, n)
        if n and int(np.abs(arr).max()) * n >= _LIMIT:
            return None
        return arr
    if all(type(v) is int for v in values):
        if n and max(abs(v) for v in values) >= _LIMIT:
            return None
        return np.fromiter(values, _I64, n)
    if all(type(v) is float for v in values):
        arr = np.fromiter(values, np.float64, n)
        return None if np.isnan(arr).any() else arr
    return None


def _columnize(kw: "KeyWindows", plan: Plan, composite: bool) -> bool:
    """Entries and raw lists -> columns; False when a value cannot be represented exactly."""
    if kw.cols is None:
        starts = kw.starts
        rows = [kw.entries[s] for s in starts]
        parts: list[Any] = []
        for i, (kind, _f) in enumerate(plan):
            if kind == "count":
                parts.append(None)
                continue
            accs = [r[0][i] if composite else r[0] for r in rows]
            col = _column([a[1] for a in accs] if kind == "mean" else accs, "sum" if kind == "mean" else kind)
            if col is None:
                return False
            parts.append(col)
        n = len(starts)
        kw.cols = Cols(
            np.fromiter(starts, _I64, n),
            np.fromiter((r[1] for r in rows), _I64, n),
            np.fromiter((r[2] for r in rows), _I64, n),
            parts,
        )
        kw.starts = []
        kw.entries = {}
    if kw.raw_ts is None:
        kw.raw_ts = np.zeros(0, _I64)
        kw.raw_cols = [None if kind == "count" else np.zeros(0, _I64) for kind, _f in plan]
    elif isinstance(kw.raw_ts, list):
        cols = []
        for (kind, _f), col in zip(plan, kw.raw_cols or ()):
            if col is None:
                cols.append(None)
                continue
            arr = _column(col, kind)
            if arr is None:
                return False
            cols.append(arr)
        kw.raw_ts = np.fromiter(kw.raw_ts, _I64, len(kw.raw_ts))
        kw.raw_cols = cols
    return True


def _trim(kw: "KeyWindows", bound: int) -> int:
    """Columnar :meth:`KeyWindows.trim_below`."""
    if len(kw.raw_ts) and kw.raw_ts[0] < bound:
        j = int(np.searchsorted(kw.raw_ts, bound, "left"))
        kw.raw_ts = kw.raw_ts[j:]
        kw.raw_cols = [None if c is None else c[j:] for c in kw.raw_cols]
    c = kw.cols
    if len(c) and c.starts[0] < bound:
        j = int(np.searchsorted(c.starts, bound, "left"))
        kw.cols = c.take(slice(j, None))
        return j
    return 0


# -------------------------------------------------------------------------------------------------- kernels
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
        k = np.zeros(len(lo), dtype=_I64)
        nz = length > 1
        k[nz] = np.floor(np.log2(length[nz])).astype(_I64)
        if len(self.levels) == 1 or not k.any():
            return self.op(self.levels[0][lo], self.levels[0][hi - 1])
        out = np.empty(len(lo), dtype=self.levels[0].dtype)
        for level in np.unique(k):
            sel = k == level
            tab = self.levels[level]
            out[sel] = self.op(tab[lo[sel]], tab[hi[sel] - (1 << int(level))])
        return out


def _r3_starts(distinct: np.ndarray, td: int) -> np.ndarray:
    """All R3 window starts for the distinct record timestamps of one key."""
    left = np.maximum(distinct - td, 0)
    right = distinct[:-1][distinct[1:] <= distinct[:-1] + 1 + td] + 1
    return np.union1d(left, right)


def _aggregate(plan: Plan, kinds_parts: list[Any], lo: np.ndarray, hi: np.ndarray) -> list[Any]:
    out = []
    for (kind, _f), col in zip(plan, kinds_parts):
        if kind == "count":
            out.append(None)
        elif kind in ("sum", "mean"):
            prefix = np.zeros(len(col) + 1, dtype=col.dtype)
            np.cumsum(col, out=prefix[1:])
            out.append(prefix[hi] - prefix[lo])
        else:
            out.append(_SparseTable(col, np.minimum if kind == "min" else np.maximum).query(lo, hi))
    return out


def _key_kernel(
    td: int, plan: Plan, kw: "KeyWindows", nidx: np.ndarray, nts: np.ndarray, nparts: list[Any]
) -> tuple[np.ndarray, ...]:
    """Apply one key's new records; returns the written rows (order keys + window columns)."""
    n_old = len(kw.raw_ts)
    T = np.concatenate([kw.raw_ts, nts])
    arrival = np.concatenate([np.full(n_old, -1, _I64), nidx])
    order = np.argsort(T, kind="stable")
    T = T[order]
    arrival = arrival[order]
    parts_all = [None if c is None else np.concatenate([c, nc])[order] for c, nc in zip(kw.raw_cols, nparts)]

    distinct, d_lo = np.unique(T, return_index=True)
    starts = _r3_starts(distinct, td)
    new_sorted = np.sort(nts)
    touch = np.searchsorted(new_sorted, starts + td, "right") - np.searchsorted(new_sorted, starts - 1, "left")
    starts = starts[touch > 0]
    lo = np.searchsorted(T, starts, "left")
    hi = np.searchsorted(T, starts + td, "right")

    first_in = _SparseTable(arrival, np.minimum).query(lo, hi)  # -1: a record from before the batch
    first_at = np.minimum.reduceat(arrival, d_lo)

    def first_exact(ts: np.ndarray) -> np.ndarray:
        pos = np.minimum(np.searchsorted(distinct, ts), len(distinct) - 1)
        return np.where(distinct[pos] == ts, first_at[pos], _BIG)

    edge = np.minimum(first_exact(starts - 1), first_exact(starts + td))
    created_at = np.where(starts == 0, first_in, np.maximum(first_in, edge))
    last_writer = np.maximum(created_at, _SparseTable(arrival, np.maximum).query(lo, hi))
    written = last_writer >= 0
    if not written.all():
        starts, lo, hi, created_at, last_writer = (
            starts[written], lo[written], hi[written], created_at[written], last_writer[written]
        )
    counts = hi - lo
    max_ts = T[hi - 1]
    parts = _aggregate(plan, parts_all, lo, hi)

    # order within the writing record (see the module docstring)
    writer_pos = np.searchsorted(nidx, last_writer)  # nidx is ascending: arrival order of this key
    writer_ts = nts[writer_pos]
    by_creation = created_at == last_writer
    early = writer_ts < td
    late_c = ~early & by_creation
    cat = np.zeros(len(starts), _I64)
    cat[late_c] = 1
    cat[late_c & (starts == writer_ts - td)] = 2
    cat[late_c & (starts == writer_ts + 1)] = 3
    early_c = early & by_creation
    cat[early_c] = 2
    cat[early_c & (starts == writer_ts + 1)] = 1
    cat[early & (starts == 0)] = 3
    pos = np.where(early, starts, -starts)

    # merge the written windows into the key's columns
    old = kw.cols
    union = np.union1d(old.starts, starts)
    ie = np.searchsorted(union, old.starts)
    iw = np.searchsorted(union, starts)

    def merged(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty(len(union), dtype=np.result_type(a, b))
        out[ie] = a
        out[iw] = b
        return out

    kw.cols = Cols(
        union,
        merged(old.ts, max_ts),
        merged(old.counts, counts),
        [None if a is None else merged(a, b) for a, b in zip(old.parts, parts)],
    )
    kw.raw_ts = T
    kw.raw_cols = parts_all
    return last_writer, cat, pos, starts, max_ts, counts, parts, len(union) - len(old.starts)


def _consistent_with_r3(td: int, plan: Plan, kw: "KeyWindows", nts: np.ndarray) -> bool:
    """Whether the stored windows a batch would read match R3 over the key's raw records (flagged keys)."""
    lo_read = max(0, int(nts.min()) - 2 * td)
    hi_read = int(nts.max()) + 1
    c = kw.cols
    sel = (c.starts >= lo_read) & (c.starts <= hi_read)
    T = kw.raw_ts
    r3 = _r3_starts(np.unique(T), td) if len(T) else np.zeros(0, _I64)
    r3 = r3[(r3 >= lo_read) & (r3 <= hi_read)]
    if not np.array_equal(c.starts[sel], r3):
        return False
    lo = np.searchsorted(T, r3, "left")
    hi = np.searchsorted(T, r3 + td, "right")
    if not (np.array_equal(c.counts[sel], hi - lo) and np.array_equal(c.ts[sel], T[hi - 1])):
        return False
    for stored, want in zip(c.parts, _aggregate(plan, kw.raw_cols, lo, hi)):
        if stored is not None and not np.array_equal(stored[sel], want):
            return False
    return True


# ------------------------------------------------------------------------------------------------- driver
def process_batch(proc: "SlidingWindowProcessor", records: Sequence[tuple[Hashable, Any, Any]]) -> bool:
    """Process ``records`` (arrival order) on the batch path if it applies; returns False after falling
    back to the record path. Results go to the update cache like :meth:`process` (flush them)."""
    plan = proc._plan
    if plan is None:
        _record_path(proc, records)
        return False

    td, grace = proc.td, proc.grace
    st = proc.observed_stream_time
    groups: dict[Hashable, tuple[list[int], list[int], list[Any]]] = {}
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
        g = groups.get(key)
        if g is None:
            g = groups[key] = ([], [], [])
        g[0].append(i)
        g[1].append(ts)
        g[2].append(value)

    # prepare every key before changing anything, so a fallback leaves no trace
    store = proc.store
    composite = isinstance(proc.aggregation, Composite)
    prepared = []
    for key, (idx, tss, vals) in groups.items():
        kw = store.keys.get(key)
        if kw is None:
            kw = store._load(key)
            if kw is None:
                kw = store.keys[key] = _new_kw()
        if not _columnize(kw, plan, composite):
            _record_path(proc, records)
            return False
        nparts = []
        for kind, field in plan:
            if kind == "count":
                nparts.append(None)
                continue
            try:
                col = _column(vals if field is None else [v[field] for v in vals], kind)
            except (KeyError, TypeError, IndexError):
                col = None
            if col is None or (len(kw.raw_ts) and col.dtype != _raw_dtype(kw, len(nparts))):
                _record_path(proc, records)
                return False
            nparts.append(col)
        nts = np.fromiter(tss, _I64, len(tss))
        if key in proc.flagged_keys and not _consistent_with_r3(td, plan, kw, nts):
            _record_path(proc, records)
            return False
        prepared.append((key, kw, np.fromiter(idx, _I64, len(idx)), nts, nparts))

    # commit
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

    chunks = []
    for key_id, (key, kw, nidx, nts, nparts) in enumerate(prepared):
        stats.accepted += len(nidx)
        lw, cat, pos, starts, max_ts, counts, parts, created = _key_kernel(td, plan, kw, nidx, nts, nparts)
        stats.windows_created += created
        stats.windows_updated += len(starts) - created
        store._size += created
        if len(starts):
            top = int(kw.cols.starts[-1])
            if top > store.key_max_start.get(key, -1):
                store.key_max_start[key] = top
            top = int(starts.max())
            if top > store.store_time:
                store.store_time = top
        chunks.append((np.full(len(starts), key_id, _I64), lw, cat, pos, starts, max_ts, counts, parts))
    store.dirty.update(groups)

    bound = store.purge_bound()
    for _key, kw, *_ in prepared:
        n = _trim(kw, bound)
        store.expired += n
        store._size -= n

    if chunks:
        key_ids = np.concatenate([c[0] for c in chunks])
        order = np.lexsort(
            (np.concatenate([c[3] for c in chunks]), np.concatenate([c[2] for c in chunks]),
             np.concatenate([c[1] for c in chunks]))
        )
        seg = {
            "keys": [p[0] for p in prepared],
            "key_id": key_ids[order],
            "start": np.concatenate([c[4] for c in chunks])[order],
            "ts": np.concatenate([c[5] for c in chunks])[order],
            "count": np.concatenate([c[6] for c in chunks])[order],
            "parts": [
                None if kind == "count" else np.concatenate([c[7][i] for c in chunks])[order]
                for i, (kind, _f) in enumerate(plan)
            ],
        }
        if proc._dirty:  # keep the last-write order across record-path writes and this batch
            proc._segments.append(("dict", proc._dirty))
            proc._dirty = {}
        proc._segments.append(("cols", seg))
    return True


def _raw_dtype(kw: "KeyWindows", part: int) -> Any:
    return kw.raw_cols[part].dtype


def _new_kw() -> "KeyWindows":
    from .store import KeyWindows

    return KeyWindows()


def _record_path(proc: "SlidingWindowProcessor", records: Sequence[tuple[Hashable, Any, Any]]) -> None:
    process = proc.process
    for key, value, ts in records:
        process(key, value, ts)


# ------------------------------------------------------------------------------------------------- output
def pending_entries(proc: "SlidingWindowProcessor") -> dict[tuple[Hashable, int], tuple[Any, int, int]]:
    """All unflushed writes (columnar segments and record-path cache), last write last."""
    plan = proc._plan
    composite = isinstance(proc.aggregation, Composite)
    out: dict[tuple[Hashable, int], tuple[Any, int, int]] = {}
    for kind, seg in proc._segments + [("dict", proc._dirty)]:
        if kind == "dict":
            items = seg.items()
        else:
            counts = seg["count"].tolist()
            accs = _accs(plan, composite, counts, seg["parts"])  # type: ignore[arg-type]
            keys = seg["keys"]
            items = (
                ((keys[k], s), (a, t, n))
                for k, s, a, t, n in zip(seg["key_id"].tolist(), seg["start"].tolist(), accs, seg["ts"].tolist(), counts)
            )
        for k, v in items:
            out.pop(k, None)
            out[k] = v
    proc._segments = []
    proc._dirty = {}
    return out


def flush_columns(proc: "SlidingWindowProcessor") -> dict[str, Any]:
    """The update-mode flush as columns: ``key`` (list), ``start``, ``end``, ``ts``, ``count`` (int64 arrays)
    and ``values`` {output name: array} of finished aggregates; rows in last-write order."""
    plan = proc._plan
    agg = proc.aggregation
    names = [p.name for p in agg.parts] if isinstance(agg, Composite) else [agg.name]
    segs = proc._segments
    if plan is not None and len(segs) == 1 and not proc._dirty:
        seg = segs[0][1]
        proc._segments = []
        keys = seg["keys"]
        start = seg["start"]
        count = seg["count"]
        values = {}
        for name, (kind, _f), col in zip(names, plan, seg["parts"]):
            if kind == "count":
                values[name] = count
            elif kind == "mean":
                values[name] = col / count
            else:
                values[name] = col
        proc.stats.updates_emitted += len(start)
        return {
            "key": [keys[k] for k in seg["key_id"].tolist()],
            "start": start,
            "end": start + proc.td,
            "ts": seg["ts"],
            "count": count,
            "values": values,
        }
    updates = proc.flush()
    start = np.fromiter((u.start for u in updates), _I64, len(updates))
    if isinstance(agg, Composite):
        values = {n: np.array([u.value[n] for u in updates]) for n in names}
    else:
        values = {names[0]: np.array([u.value for u in updates])}
    return {
        "key": [u.key for u in updates],
        "start": start,
        "end": start + proc.td,
        "ts": np.fromiter((u.ts for u in updates), _I64, len(updates)),
        "count": np.fromiter((u.count for u in updates), _I64, len(updates)),
        "values": values,
    }
