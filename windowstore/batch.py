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
        for level in np.flatnonzero(np.bincount(k)):
            sel = k == level
            tab = self.levels[level]
            out[sel] = self.op(tab[lo[sel]], tab[hi[sel] - (1 << int(level))])
        return out


def _r3_starts(distinct: np.ndarray, td: int) -> np.ndarray:
    """All R3 window starts for the distinct record timestamps of one key."""
    left = np.maximum(distinct - td, 0)
    right = distinct[:-1][distinct[1:] <= distinct[:-1] + 1 + td] + 1
    return np.union1d(left, right)


def _aggregate(plan: Plan, parts: list[Any], lo: np.ndarray, hi: np.ndarray) -> list[Any]:
    out = []
    for (kind, _f), col in zip(plan, parts):
        if kind == "count":
            out.append(None)
        elif kind in ("sum", "mean"):
            prefix = np.zeros(len(col) + 1, dtype=col.dtype)
            np.cumsum(col, out=prefix[1:])
            out.append(prefix[hi] - prefix[lo])
        else:
            out.append(_SparseTable(col, np.minimum if kind == "min" else np.maximum).query(lo, hi))
    return out


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


# Every key of a batch is processed in one vectorized pass: key k's timestamps live at k * _OFF + ts, so
# windows [s, s + td] and all range queries stay inside one key.
_SHIFT = 42
_OFF = 1 << _SHIFT
_MAX_TS = 1 << 41


def _sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Union of two int arrays as a sorted array without duplicates (cheaper than np.union1d here)."""
    u = np.concatenate([a, b])
    u.sort(kind="stable")
    if len(u) > 1:
        keep = np.ones(len(u), bool)
        keep[1:] = u[1:] != u[:-1]
        u = u[keep]
    return u


def _concat(arrays: list[np.ndarray], dtype: Any = _I64) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype)


def _kernel(
    td: int, plan: Plan, kws: list["KeyWindows"], key_id: np.ndarray, arrival: np.ndarray, ts: np.ndarray,
    parts_new: list[Any], n_records: int,
) -> tuple:
    """Apply the accepted records of all keys (``key_id``, ``arrival`` index, ``ts``, part columns) at once.
    Updates every ``kws[k]`` in place; returns the written rows (order keys, key, start, ts, count, parts)."""
    K = len(kws)
    offs = np.arange(K, dtype=_I64) << _SHIFT
    # Only the suffix of each key's state can change: a written window starts at >= min(new ts) - td, and
    # reads reach one ms below it (W(s-1)). Older raw records and windows are kept aside as they are, so a
    # batch costs O(batch + records within td of it), not O(everything retained).
    cut = np.full(K, _BIG, _I64)
    np.minimum.at(cut, key_id, ts)
    cut_l = (cut - td - 1).tolist()
    raw_j = [int(np.searchsorted(kw.raw_ts, c, "left")) for kw, c in zip(kws, cut_l)]
    col_j = [int(np.searchsorted(kw.cols.starts, c, "left")) for kw, c in zip(kws, cut_l)]
    raw_tails = [kw.raw_ts[j:] for kw, j in zip(kws, raw_j)]
    old_n = np.fromiter((len(t) for t in raw_tails), _I64, K)
    T = np.concatenate([_concat(raw_tails) + np.repeat(offs, old_n), (key_id << _SHIFT) + ts])
    arr = np.concatenate([np.full(int(old_n.sum()), -1, _I64), arrival])
    order = np.argsort(T, kind="stable")
    T = T[order]
    arr = arr[order]
    parts_all = [
        None
        if kind == "count"
        else np.concatenate([_concat([kw.raw_cols[i][j:] for kw, j in zip(kws, raw_j)], p.dtype), p])[order]
        for i, ((kind, _f), p) in enumerate(zip(plan, parts_new))
    ]

    first = np.ones(len(T), bool)
    first[1:] = T[1:] != T[:-1]
    d_lo = np.flatnonzero(first)
    distinct = T[d_lo]
    base = (distinct >> _SHIFT) << _SHIFT
    left = np.maximum(distinct - td, base)
    right = distinct[:-1][distinct[1:] <= distinct[:-1] + 1 + td] + 1
    starts = _sorted_union(left, right)
    new_sorted = np.sort((key_id << _SHIFT) + ts)
    touch = np.searchsorted(new_sorted, starts + td, "right") - np.searchsorted(new_sorted, starts - 1, "left")
    starts = starts[touch > 0]
    lo = np.searchsorted(T, starts, "left")
    hi = np.searchsorted(T, starts + td, "right")

    first_in = _SparseTable(arr, np.minimum).query(lo, hi)  # -1: a record from before the batch
    first_at = np.minimum.reduceat(arr, d_lo) if len(arr) else arr

    def first_exact(t: np.ndarray) -> np.ndarray:
        pos = np.minimum(np.searchsorted(distinct, t), len(distinct) - 1)
        return np.where(distinct[pos] == t, first_at[pos], _BIG)

    at_zero = (starts & (_OFF - 1)) == 0
    edge = np.minimum(first_exact(starts - 1), first_exact(starts + td))
    created_at = np.where(at_zero, first_in, np.maximum(first_in, edge))
    last_writer = np.maximum(created_at, _SparseTable(arr, np.maximum).query(lo, hi))
    written = last_writer >= 0
    if not written.all():
        starts, lo, hi = starts[written], lo[written], hi[written]
        created_at, last_writer, at_zero = created_at[written], last_writer[written], at_zero[written]
    counts = hi - lo
    max_ts = T[hi - 1] & (_OFF - 1)
    parts = _aggregate(plan, parts_all, lo, hi)

    # order within the writing record (see the module docstring)
    ts_by_arrival = np.zeros(n_records, _I64)
    ts_by_arrival[arrival] = ts
    writer_ts = ts_by_arrival[last_writer]
    local = starts & (_OFF - 1)
    by_creation = created_at == last_writer
    early = writer_ts < td
    late_c = ~early & by_creation
    cat = np.zeros(len(starts), _I64)
    cat[late_c] = 1
    cat[late_c & (local == writer_ts - td)] = 2
    cat[late_c & (local == writer_ts + 1)] = 3
    early_c = early & by_creation
    cat[early_c] = 2
    cat[early_c & (local == writer_ts + 1)] = 1
    cat[early & at_zero] = 3
    # flush order: by last writer, then category, then start (ascending for an early writer, else descending).
    # Rows are in ascending start here and a writer's rows are of one key, so the row index stands for the
    # start; one int64 key sorts all three at once (it is unique: one writer, one row per start).
    q = len(starts)
    rank = np.arange(q, dtype=_I64)
    flush_key = (last_writer * 4 + cat) * (2 * q + 1) + np.where(early, rank, -rank) + q

    # merge the written windows into every key's columns, then split back per key
    tails = [kw.cols.take(slice(j, None)) for kw, j in zip(kws, col_j)]
    old_cnt = np.fromiter((len(c) for c in tails), _I64, K)
    S_old = _concat([c.starts for c in tails]) + np.repeat(offs, old_cnt)
    union = _sorted_union(S_old, starts)
    ie = np.searchsorted(union, S_old)
    iw = np.searchsorted(union, starts)

    def merged(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty(len(union), dtype=np.result_type(a, b))
        out[ie] = a
        out[iw] = b
        return out

    m_ts = merged(_concat([c.ts for c in tails]), max_ts)
    m_counts = merged(_concat([c.counts for c in tails]), counts)
    m_parts = [
        None if p is None else merged(_concat([c.parts[i] for c in tails], p.dtype), p)
        for i, p in enumerate(parts)
    ]
    w_bounds = np.searchsorted(union, offs).tolist() + [len(union)]
    r_bounds = np.searchsorted(T, offs).tolist() + [len(T)]
    raw_local = T & (_OFF - 1)
    u_local = union & (_OFF - 1)

    def joined(head: np.ndarray, tail: np.ndarray) -> np.ndarray:
        return np.concatenate([head, tail]) if len(head) else tail

    for k, kw in enumerate(kws):
        a, b = w_bounds[k], w_bounds[k + 1]
        j = col_j[k]
        c = kw.cols
        kw.cols = Cols(
            joined(c.starts[:j], u_local[a:b]),
            joined(c.ts[:j], m_ts[a:b]),
            joined(c.counts[:j], m_counts[a:b]),
            [None if p is None else joined(op[:j], p[a:b]) for op, p in zip(c.parts, m_parts)],
        )
        a, b = r_bounds[k], r_bounds[k + 1]
        j = raw_j[k]
        kw.raw_ts = joined(kw.raw_ts[:j], raw_local[a:b])
        kw.raw_cols = [None if p is None else joined(op[:j], p[a:b]) for op, p in zip(kw.raw_cols, parts_all)]
    created = len(union) - len(S_old)
    return flush_key, starts >> _SHIFT, local, max_ts, counts, parts, created


def process_batch(proc: "SlidingWindowProcessor", records: Sequence[tuple[Hashable, Any, Any]]) -> bool:
    """Process ``(key, value, ts)`` records (arrival order) on the batch path if it applies; returns False
    after falling back to the record path. Results go to the update cache like :meth:`process`."""
    if proc._plan is None:
        _record_path(proc, records)
        return False
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    ts = [r[2] for r in records]
    return process_columns(proc, keys, ts, None, values)


def _timestamps(ts: Any) -> tuple[np.ndarray, np.ndarray]:
    """int64 timestamps and a mask of invalid ones (not an integer, or negative)."""
    arr = np.asarray(ts)
    if arr.dtype.kind in "iu":
        arr = arr.astype(_I64, copy=False)
        return arr, arr < 0
    out = np.zeros(len(ts), _I64)
    bad = np.zeros(len(ts), bool)
    for i, t in enumerate(ts):
        if isinstance(t, int) and not isinstance(t, bool) and t >= 0:
            out[i] = t
        else:
            bad[i] = True
    return out, bad


def process_columns(
    proc: "SlidingWindowProcessor",
    keys: Sequence[Hashable],
    timestamps: Any,
    fields: dict[str | None, Any] | None = None,
    values: Sequence[Any] | None = None,
) -> bool:
    """Columnar :func:`process_batch`: ``keys`` (sequence), ``timestamps`` (int array), and either ``fields``
    ({value field, or None for the bare value: numeric array} for the aggregation's inputs) or ``values`` (the
    record values). Null keys and values, invalid timestamps and late records are dropped and counted as the
    record path does. Returns False after falling back to the record path."""
    plan = proc._plan
    n = len(keys)
    if values is None and fields is None:
        raise ValueError("process_columns needs fields or values")
    varr = None
    if values is not None:
        varr = np.empty(n, dtype=object)
        varr[:] = list(values)

    def record_values() -> Sequence[Any]:
        # record values only when needed: the record path (fallback) and drop reports
        return values if values is not None else _values_from_fields(fields, n)  # type: ignore[arg-type]

    def fallback() -> bool:
        stamps = timestamps.tolist() if hasattr(timestamps, "tolist") else timestamps
        _record_path(proc, list(zip(keys, record_values(), stamps)))
        return False

    if plan is None:
        return fallback()
    if values is None:
        missing = sorted({str(f) for kind, f in plan if kind != "count" and f not in fields})  # type: ignore[operator]
        if missing:
            raise ValueError(f"process_columns: fields lacks the aggregation input(s) {', '.join(missing)}")
    td, grace = proc.td, proc.grace
    karr = np.empty(n, dtype=object)
    karr[:] = list(keys)
    null_key = np.equal(karr, None)
    null_value = np.zeros(n, bool) if varr is None else np.equal(varr, None)
    ts, bad_ts = _timestamps(timestamps)
    if (ts >= _MAX_TS).any():
        return fallback()
    invalid = null_key | null_value | bad_ts
    valid_ts = np.where(invalid, -1, ts)
    st_run = np.maximum.accumulate(np.maximum(valid_ts, proc.observed_stream_time)) if n else valid_ts
    close = st_run - grace
    late = ~invalid & (ts + td < close)
    if (~invalid & ~late & (ts < close)).any():  # partially late (R22b): only the record path is exact
        return fallback()
    accepted = ~invalid & ~late
    acc_idx = np.flatnonzero(accepted)

    # factorize keys (first-appearance order)
    acc_keys = karr[acc_idx].tolist()
    batch_keys = list(dict.fromkeys(acc_keys))
    ids = {k: i for i, k in enumerate(batch_keys)}
    key_id = np.fromiter(map(ids.__getitem__, acc_keys), _I64, len(acc_keys))

    parts_new = []
    for kind, field in plan:
        if kind == "count":
            parts_new.append(None)
            continue
        if fields is not None and field in fields:
            col = np.asarray(fields[field])[acc_idx]
            col = _column(col.tolist(), kind) if col.dtype == object else col
            if col is not None and col.dtype.kind == "f" and (kind in ("sum", "mean") or np.isnan(col).any()):
                col = None
            if col is not None and col.dtype.kind in "iu":
                col = col.astype(_I64, copy=False)
                if len(col) and int(np.abs(col).max()) * max(len(col), 1) >= _LIMIT:
                    col = None
        else:
            try:
                vals = record_values()
                col = _column([vals[i] if field is None else vals[i][field] for i in acc_idx.tolist()], kind)
            except (KeyError, TypeError, IndexError):
                col = None
        if col is None:
            return fallback()
        parts_new.append(col)

    # prepare every key before changing anything, so a fallback leaves no trace
    store = proc.store
    composite = isinstance(proc.aggregation, Composite)
    kws = []
    acc_ts = ts[acc_idx]
    for k, key in enumerate(batch_keys):
        kw = store.keys.get(key)
        if kw is None:
            kw = store._load(key)
            if kw is None:
                kw = store.keys[key] = _new_kw()
        if not _columnize(kw, plan, composite):
            return fallback()
        for i, p in enumerate(parts_new):
            if p is not None and len(kw.raw_ts) and kw.raw_cols[i].dtype != p.dtype:
                return fallback()
        if key in proc.flagged_keys and not _consistent_with_r3(td, plan, kw, acc_ts[key_id == k]):
            return fallback()
        kws.append(kw)

    # commit
    stats = proc.stats
    stats.records += n
    if n:
        proc.observed_stream_time = int(st_run[-1])
    reason_of = np.zeros(n, np.int8)  # 0 kept; 1 null key; 2 null value; 3 invalid timestamp; 4 late
    reason_of[late] = 4
    reason_of[bad_ts] = 3
    reason_of[null_value] = 2
    reason_of[null_key] = 1
    counts_by = np.bincount(reason_of, minlength=5)
    stats.dropped_null += int(counts_by[1] + counts_by[2])
    stats.dropped_invalid_timestamp += int(counts_by[3])
    stats.dropped_late += int(counts_by[4])
    if proc.collect_drops:
        reasons = (None, DropReason.NULL_KEY, DropReason.NULL_VALUE, DropReason.INVALID_TIMESTAMP, DropReason.LATE)
        dropped_values = record_values()
        for i in np.flatnonzero(reason_of).tolist():  # arrival order, like the record path
            # invalid records do not advance stream time, so st_run[i] is the stream time at the drop
            proc._drop(keys[i], dropped_values[i], timestamps[i], reasons[reason_of[i]], int(st_run[i]))
    stats.accepted += len(acc_idx)
    if not len(acc_idx):
        return True

    flush_key, kid, start, max_ts, counts, parts, created = _kernel(
        td, plan, kws, key_id, acc_idx.astype(_I64), acc_ts, parts_new, n
    )
    stats.windows_created += created
    stats.windows_updated += len(start) - created
    store._size += created
    if len(start):
        top = int(start.max())
        if top > store.store_time:
            store.store_time = top
    kms = store.key_max_start
    for key, kw in zip(batch_keys, kws):
        if len(kw.cols):
            top = int(kw.cols.starts[-1])
            if top > kms.get(key, -1):
                kms[key] = top
    store.dirty.update(batch_keys)

    bound = store.purge_bound()
    for kw in kws:
        m = _trim(kw, bound)
        store.expired += m
        store._size -= m

    order = np.argsort(flush_key)
    seg = {
        "keys": batch_keys,
        "key_id": kid[order],
        "start": start[order],
        "ts": max_ts[order],
        "count": counts[order],
        "parts": [None if p is None else p[order] for p in parts],
    }
    if proc._dirty:  # keep the last-write order across record-path writes and this batch
        proc._segments.append(("dict", proc._dirty))
        proc._dirty = {}
    proc._segments.append(("cols", seg))
    return True


def _values_from_fields(fields: dict[str | None, Any], n: int) -> list[Any]:
    if None in fields:
        return np.asarray(fields[None]).tolist()
    names = list(fields)
    cols = [np.asarray(fields[f]).tolist() for f in names]
    return [dict(zip(names, row)) for row in zip(*cols)] if names else [1] * n


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
