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

All keys of a batch go through one vectorized pass (key k's timestamps at ``k * 2**42 + ts``). Per key only
the suffix of the state from ``lowest new ts - td - 1`` on can change; it is recomputed from R3 over the raw
records (checked against the stored window starts: a mismatch sends the batch to the record path), the rest
is kept as it is. A key's windows stay numpy columns between batches (``KeyWindows.cols``); the record path
turns them back into entries when it touches the key. Results are buffered as columns too: ``flush_columns``
hands them out without a Python object per window.

Emit mode ``close`` (R26-R29) takes the same kernel: nothing is forwarded per write, the windows the batch
creates join the not-yet-emitted ones (Kafka's time-ordered index, ``(start, key bytes)``), and after the batch
the windows closed by the stream time of its last non-early record are emitted once, in that order, with their
final values. The record path does that after every record (emit interval 0); on a batch without partially-late
records a closed window can no longer change, and its emission round only matters for R29 (a window that fell
below the retention bound before its round is never emitted), so the batch path falls back to the record path
when any window it would emit is below that bound at the end of the batch, or when an emit interval is set.

It falls back to the record path for the whole batch when any record is partially late, when the emit mode is
``every``, when the aggregation has no batch kernel or values are not exactly representable (sums need
integers whose sums stay inside int64; min/max need all-int or all-float, no NaN), or when a key that once took a
partially-late record does not match R3 on the range the batch reads. An integer beyond that range (a sum
that could leave int64, a value beyond it) is never converted: the record path's Python ints are exact
(issue 29), and the batch path takes the task's batches again once such windows have expired.

An accelerator over :class:`~windowstore.state.EngineState` (the contract, see state.py): it reads and writes
only the state's attributes and the public API of the store, and hands its writes out as typed output segments
(:class:`~windowstore.state.ColumnWrites`, :class:`~windowstore.state.EmittedColumns`); its representation of a
key (numpy columns) lives in columns.py.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .aggregations import Composite
from .cache import replace, seal, sealed
from .column_blocks import ColumnBlocks
from .columns import (
    Cols,
    KeyIds,
    Plan,
    bit_rows,
    column,
    columnize,
    magnitude,
    part_kinds,
    raw_matrix,
    rows_of,
    set_raw,
)
from .lazy import record_step
from .record import drop, emission_bounds, final_updates
from .state import CachedWrites, ColumnWrites, EmittedColumns, EmittedUpdates, EngineState
from .store import NO_TIMESTAMP, KeyWindows
from .updates import DropReason

__all__ = ["process_batch", "process_columns"]

_I32 = np.int32
_NO_ARRIVAL = np.iinfo(_I32).max  # arrival indexes are int32 (-1: a record from before the batch)
_LIMIT = 1 << 62  # |value| * records below it: prefix sums stay inside int64
_MAX_LONG = (1 << 63) - 1  # timestamps are Kafka longs: a larger one is invalid (R6)
_I64 = np.int64
_F64 = np.float64


# -------------------------------------------------------------------------------------------------- kernels
def _log2(n: np.ndarray) -> np.ndarray:
    """``floor(log2(n))`` of positive integers (window lengths: a lookup in a table up to the largest)."""
    top = int(n.max()) if len(n) else 1
    return (np.frexp(np.arange(top + 1, dtype=np.float64))[1] - 1).astype(_I64)[n]


def _range(values: np.ndarray, op: Any, lo: np.ndarray, hi: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
    """``op`` (np.minimum or np.maximum) over ``values[lo:hi]`` for every query (all ``hi > lo``), from a
    sparse table built up to the longest query: O(n log(longest)) + O(1) per query. ``k``: ``_log2(hi - lo)``
    when the caller has it."""
    if not len(lo):
        return np.zeros(0, values.dtype)
    if k is None:
        k = _log2(hi - lo)
    n = len(values)
    levels = int(k.max()) + 1
    tab = np.empty((levels, n), values.dtype)  # row l: op over [i, i + 2**l); the last 2**l - 1 never read
    tab[0] = values
    for lv in range(1, levels):
        h = 1 << (lv - 1)
        op(tab[lv - 1, : n - h], tab[lv - 1, h:], out=tab[lv, : n - h])
    flat = tab.ravel()
    row = k * n
    return op(flat[row + lo], flat[row + hi - (1 << k)])


def _r3_starts(distinct: np.ndarray, td: int) -> np.ndarray:
    """All R3 window starts for the distinct record timestamps of one key."""
    left = np.maximum(distinct - td, 0)
    right = distinct[:-1][distinct[1:] <= distinct[:-1] + 1 + td] + 1
    return np.union1d(left, right)


def _aggregate(plan: Plan, parts: list[Any], lo: np.ndarray, hi: np.ndarray) -> list[Any]:
    out: list[np.ndarray | None] = []
    for (kind, _f), col in zip(plan, parts):
        if kind == "count":
            out.append(None)
        elif kind in ("sum", "mean"):
            prefix = np.zeros(len(col) + 1, dtype=col.dtype)
            np.cumsum(col, out=prefix[1:])
            out.append(prefix[hi] - prefix[lo])
        else:
            out.append(_range(col, np.minimum if kind == "min" else np.maximum, lo, hi))
    return out


def _consistent_with_r3(td: int, plan: Plan, kw: KeyWindows, nts: np.ndarray) -> bool:
    """Whether the stored windows a batch would read match R3 over the key's raw records (flagged keys)."""
    lo_read = max(0, int(nts.min()) - 2 * td)
    hi_read = int(nts.max()) + 1
    c = kw.cols
    sel = (c.starts >= lo_read) & (c.starts <= hi_read)
    raw = kw.raw
    assert raw is not None  # columnize (run on every key of the batch first) set it
    T = raw.ts
    r3 = _r3_starts(np.unique(T), td) if len(T) else np.zeros(0, _I64)
    r3 = r3[(r3 >= lo_read) & (r3 <= hi_read)]
    if not np.array_equal(c.starts[sel], r3):
        return False
    lo = np.searchsorted(T, r3, "left")
    hi = np.searchsorted(T, r3 + td, "right")
    if not (np.array_equal(c.counts[sel], hi - lo) and np.array_equal(c.ts[sel], T[hi - 1])):
        return False
    for stored, want in zip(c.parts, _aggregate(plan, raw.cols, lo, hi)):
        if stored is not None and not np.array_equal(stored[sel], want):
            return False
    return True


# Every key of a batch is processed in one vectorized pass: key k's timestamps live at k * _OFF + ts, so
# windows [s, s + td] and all range queries stay inside one key.
_SHIFT = 42
_OFF = 1 << _SHIFT
_LOCAL = _OFF - 1
_MAX_TS = 1 << 41
_MAX_KEYS = 1 << (63 - _SHIFT)  # keys per batch on that axis
_MAX_RECORDS = 1 << 31  # arrival indexes are int32


_scratch_space = threading.local()

#: the scratch buffers of a batch (:func:`_scratch`)
_OLD_RAW, _OLD_WIN, _SPLICE = 0, 1, 2


def _scratch(slot: int, rows: int, cols: int) -> np.ndarray:
    """A C-contiguous int64 ``(rows, cols)`` matrix in this thread's scratch buffer ``slot``, for the matrices
    a batch builds and drops (all keys' stored columns side by side: tens of megabytes with the windows full).
    The buffer is kept from batch to batch: memory a process touches for the first time costs a page fault
    per 4 KB (~2-8 us on the project's VM, bench/RESULTS.md), which made a fresh ``concatenate`` and ``take``
    of these matrices 5-7 times slower than the copying itself. Valid until the next call for the same slot
    in the same thread: nothing made from it may outlive the batch (the stored columns never view it)."""
    bufs = getattr(_scratch_space, "bufs", None)
    if bufs is None:
        bufs = _scratch_space.bufs = {}
    need = rows * cols
    buf = bufs.get(slot)
    if buf is None or len(buf) < need:
        buf = bufs[slot] = np.empty(max(need, 0 if buf is None else len(buf) * 5 // 4), _I64)
    return buf[:need].reshape(rows, cols)


class _Stored(NamedTuple):
    """The stored columns of all keys of a batch as one matrix (key ``k``'s are ``m[:, off[k]:off[k + 1]]``;
    :attr:`Cols.stacked` or :func:`raw_matrix` rows), with their first row on the ``k * _OFF + ts`` axis.
    ``m`` is scratch (:func:`_scratch`): read during the batch, never stored."""

    m: np.ndarray
    off: np.ndarray  #: K + 1 column offsets
    at: np.ndarray  #: ``m[0]`` + ``k * _OFF`` (ascending)

    @classmethod
    def of(cls, mats: list[np.ndarray], offs: np.ndarray, slot: int) -> _Stored:
        n = np.fromiter((x.shape[1] for x in mats), _I64, len(mats))
        m = np.concatenate(mats, axis=1, out=_scratch(slot, mats[0].shape[0], int(n.sum())))
        return cls(m, np.concatenate([[0], np.cumsum(n)]), m[0] + np.repeat(offs, n))

    def first_at_or_above(self, offs: np.ndarray, local: np.ndarray | int) -> np.ndarray:
        """Per key ``k``: the first of its columns whose first row is ``>= local[k]`` (``off[k + 1]``: none)."""
        return _first_at_or_above(self.at, offs, local)

    def suffixes(self, j: np.ndarray) -> np.ndarray:
        """The indexes of every key ``k``'s columns from ``j[k]`` on (ascending)."""
        return _ranges(j, self.off[1:] - j)


def _first_at_or_above(at: np.ndarray, offs: np.ndarray, local: np.ndarray | int) -> np.ndarray:
    """Per key ``k`` (axis offset ``offs[k]``): the first index of ascending ``at`` (the ``k * _OFF + ts`` axis)
    at or above the key's ``local`` (an array per key, or one value for all); a negative ``local`` is 0, the
    key's first index."""
    return np.searchsorted(at, offs + np.maximum(local, 0))


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` in O(total): one cumulative sum of
    ones with each range's jump at its first position."""
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    if not len(lengths):
        return np.zeros(0, _I64)
    step = np.ones(int(lengths.sum()), _I64)
    step[0] = starts[0]
    step[np.cumsum(lengths[:-1])] = starts[1:] - starts[:-1] - lengths[:-1] + 1
    return np.cumsum(step)


class _Written(NamedTuple):
    """What :func:`_kernel` computed for a batch, before anything is stored.

    The *suffix* of every key - windows starting at ``>= cut`` (one per key) and the raw records from one ms
    below that - is recomputed from R3; everything below it is kept as it is. Arrays over all keys use the
    ``k * _OFF + ts`` axis, ascending."""

    old_win: _Stored  #: every key's stored windows (before the batch)
    old_raw: _Stored  #: and raw records
    col_j: np.ndarray  #: per key: the column of ``old_win`` where the key's recomputed suffix starts (>= cut)
    raw_j: np.ndarray  #: per key: the column of ``old_raw`` from which on its raw records are in the suffix
    raw_ts: np.ndarray  #: the suffixes' raw timestamps (old and new records)
    raw_parts: list[Any]  #: and their part values
    starts: np.ndarray  #: the suffixes' windows (R3 over the raw records)
    ts: np.ndarray
    counts: np.ndarray
    parts: list[Any]
    created: int  #: how many of them the batch created
    flushed: np.ndarray  #: indexes of the windows the batch wrote, in flush order
    new: np.ndarray  #: indexes of the windows the batch created (ascending)


def _kernel(
    td: int,
    plan: Plan,
    kws: list[KeyWindows],
    key_id: np.ndarray,
    arrival: np.ndarray,
    ts: np.ndarray,
    parts_new: list[Any],
    n_records: int,
) -> _Written | None:
    """Apply the accepted records of all keys (``key_id``, ``arrival`` index, ``ts``, part columns) at once,
    without storing anything. ``None`` when a key's stored windows are not the R3 windows of its raw records
    (the batch must then take the record path)."""
    K = len(kws)
    offs = np.arange(K, dtype=_I64) << _SHIFT
    new_t = (key_id << _SHIFT) + ts
    o = np.argsort(new_t, kind="stable")  # by key and timestamp, arrival order within a timestamp
    new_t = new_t[o]
    # Only the suffix of each key's state can change: a written window holds a new record or has one at its
    # start - 1, so it starts at >= lowest - td for the key's lowest new timestamp. The suffix is recomputed
    # from ``cut`` = lowest - td - 1 on, which needs the raw records from cut - 1 on (R3 windows [p + 1, ...]).
    # So a batch costs O(batch + records within td of it), not O(everything retained).
    cut_abs = new_t[np.searchsorted(new_t, offs)] - td - 1  # every key has a record in the batch
    cut = cut_abs - offs
    # every key's stored raw records and windows in one matrix each: the suffixes are index ranges, not K slices
    old_raw = _Stored.of([raw_matrix(kw) for kw in kws], offs, _OLD_RAW)
    old_win = _Stored.of([kw.cols.stacked for kw in kws], offs, _OLD_WIN)
    raw_j = old_raw.first_at_or_above(offs, cut - 1)
    col_j = old_win.first_at_or_above(offs, cut)
    in_suffix = old_raw.suffixes(raw_j)
    old_R = old_raw.m.take(in_suffix, axis=1)
    old_T = old_raw.at[in_suffix]
    T = np.concatenate([old_T, new_t])
    order = np.argsort(T, kind="stable")  # two sorted runs (a merge); old records first within a timestamp
    T = T[order]
    arr = np.concatenate([np.full(len(old_T), -1, _I32), arrival[o].astype(_I32)])[order]
    # a part's old values: its row of old_R (each key's raw part has the batch's dtype, or no values)
    old_parts = rows_of(old_R, 1, part_kinds(parts_new))
    raw_parts = [None if p is None else np.concatenate([old, p[o]])[order] for old, p in zip(old_parts, parts_new)]

    # R3 window starts over the distinct timestamps d: left windows max(d - td, 0) and right windows d + 1
    # (when a record follows within td + 1); per start the record range [lo, hi) of its window and the first
    # arrival of a record at start - 1 or at start + td (``edge``; _NO_ARRIVAL: none)
    N = len(T)
    first = np.ones(N, bool)
    first[1:] = T[1:] != T[:-1]
    d_lo = np.flatnonzero(first)
    d_lo_end = np.append(d_lo, N)  # [q]: records <= d[q - 1]
    d = T[d_lo]
    first_at = np.minimum.reduceat(arr, d_lo)
    base = (d >> _SHIFT) << _SHIFT

    sL = d - td
    clipped = sL < base
    sL = np.maximum(sL, base)
    key_of = d >> _SHIFT
    iL = np.flatnonzero(sL >= cut_abs[key_of])  # the left windows of the suffix
    sL, clipped = sL[iL], clipped[iL]
    # the only binary search: a[j] = the first distinct timestamp >= s - 1 of left window j's key. Counting
    # gives the right ends: #{j : a[j] <= i} = #{j : d[j] <= d[i] + td + 1} for d[i] >= cut - 1, when a[j] is
    # the key's first index for the j below the suffix (d[j] < cut + td)
    aL = np.searchsorted(d, sL - 1, "left")
    a = np.searchsorted(d, offs)[key_of]
    a[iL] = aL
    at_or_below = np.cumsum(np.bincount(a, minlength=len(d)))
    before = d[aL] == sL - 1  # a record at s - 1 (never for a clipped window: s - 1 is below the key)
    loL = d_lo[aL + before]
    hiL = d_lo_end[iL + 1]
    if clipped.any():  # [0, td] holds more than the records up to d
        cl = np.flatnonzero(clipped)
        hiL[cl] = d_lo_end[np.searchsorted(d, sL[cl] + td, "right")]
    # first_at[iL]: the record at s + td (a clipped window starts at 0, where edges do not count)
    edge_L = np.minimum(np.where(before, first_at[aL], _NO_ARRIVAL), first_at[iL])

    iR = np.flatnonzero(d[1:] <= d[:-1] + 1 + td)
    sR = d[iR] + 1
    loR = d_lo[iR + 1]
    qR = at_or_below[iR]
    hiR = d_lo_end[qR]
    edge_R = np.minimum(first_at[iR], np.where(d[qR - 1] == sR + td, first_at[qR - 1], _NO_ARRIVAL))

    S = np.concatenate([sL, sR])
    m = np.argsort(S, kind="stable")  # two sorted runs
    S = S[m]
    keep = np.ones(len(S), bool)
    keep[1:] = S[1:] != S[:-1]
    m = m[keep]
    starts = S[keep]
    lo = np.concatenate([loL, loR])[m]
    hi = np.concatenate([hiL, hiR])[m]
    edge = np.concatenate([edge_L, edge_R])[m]

    # creation: the first arrival that makes W(s) non-empty and different from W(s - 1); -1: before the batch
    at_zero = (starts & _LOCAL) == 0
    k = _log2(hi - lo)
    first_in = _range(arr, np.minimum, lo, hi, k)
    created_at = np.where(at_zero, first_in, np.maximum(first_in, edge))
    existed = created_at < 0
    old_starts = old_win.at[old_win.suffixes(col_j)]
    if not np.array_equal(starts[existed], old_starts):
        return None
    last_writer = np.maximum(created_at, _range(arr, np.maximum, lo, hi, k))
    w = np.flatnonzero(last_writer >= 0)

    # flush order: by last writer, then the order of writes within the writing record (module docstring):
    # category, then start (ascending for an early writer, else descending). A writer's rows are of one key
    # and ascending here, so the row index stands for the start (_flush_order).
    lw = last_writer[w].astype(_I64)
    local = starts[w] & _LOCAL
    ts_by_arrival = np.zeros(n_records, _I64)
    ts_by_arrival[arrival] = ts
    writer_ts = ts_by_arrival[lw]
    by_creation = created_at[w] == lw
    early = writer_ts < td
    late_c = ~early & by_creation
    cat = np.zeros(len(w), _I64)
    cat[late_c] = 1
    cat[late_c & (local == writer_ts - td)] = 2
    cat[late_c & (local == writer_ts + 1)] = 3
    early_c = early & by_creation
    cat[early_c] = 2
    cat[early_c & (local == writer_ts + 1)] = 1
    cat[early & at_zero[w]] = 3

    return _Written(
        old_win,
        old_raw,
        col_j,
        raw_j,
        T,
        raw_parts,
        starts,
        T[hi - 1] & _LOCAL,
        hi - lo,
        _aggregate(plan, raw_parts, lo, hi),
        len(starts) - len(old_starts),
        w[_flush_order(lw * 4 + cat, early)],
        np.flatnonzero(~existed),
    )


def _flush_order(group: np.ndarray, early: np.ndarray) -> np.ndarray:
    """The row order by ``group`` (writer * 4 + category), then by row: ascending for an early writer's rows,
    descending for the others' (all rows of a writer are early or none).

    A stable sort of 16-bit digits is a radix sort in numpy, O(n): the rows go in, ascending where early and
    descending elsewhere, and are stably sorted by the group's low 16 bits, then by the high ones (groups up to
    2**32; beyond that one int64 argsort of a combined key)."""
    q = len(group)
    top = int(group.max()) if q else 0
    if top >= 1 << 32:
        rank = np.arange(q, dtype=_I64)
        return np.argsort(group * (2 * q + 1) + np.where(early, rank, -rank) + q)
    order = np.concatenate([np.flatnonzero(early), np.flatnonzero(~early)[::-1]])
    order = order[np.argsort((group[order] & 0xFFFF).astype(np.uint16), kind="stable")]
    if top >> 16:
        order = order[np.argsort((group[order] >> 16).astype(np.uint16), kind="stable")]
    return order


def _store(keys: list[Hashable], kws: list[KeyWindows], res: _Written, bound: int, blocks: ColumnBlocks) -> int:
    """Store the recomputed suffixes into every key (``kws[i]``: the windows of ``keys[i]``) and drop what is
    below the purge ``bound``; returns how many windows were dropped. The keys get slices of two new matrices,
    which ``blocks`` tracks (:mod:`.column_blocks`)."""
    offs = np.arange(len(kws), dtype=_I64) << _SHIFT
    # the suffixes of all keys as matrices (see Cols.stacked, raw_matrix)
    W = np.stack([res.starts & _LOCAL, res.ts, res.counts, *bit_rows(res.parts)])
    R = np.stack([res.raw_ts & _LOCAL, *bit_rows(res.raw_parts)])
    win, win_off, dropped = _spliced(res.old_win, res.col_j, W, res.starts, offs, bound)
    raw, raw_off, _ = _spliced(res.old_raw, res.raw_j, R, res.raw_ts, offs, bound)
    kinds = part_kinds(res.parts)
    raw_kinds = part_kinds(res.raw_parts)
    for kw, a, b, ra, rb in zip(kws, win_off, win_off[1:], raw_off, raw_off[1:]):
        kw.cols = Cols.of(win[:, a:b], kinds)
        set_raw(kw, raw[:, ra:rb], raw_kinds)
    blocks.stored(win, keys, kws, raw=False)
    blocks.stored(raw, keys, kws, raw=True)
    return dropped


def _spliced(
    old: _Stored,
    j: np.ndarray,
    new: np.ndarray,
    new_at: np.ndarray,
    offs: np.ndarray,
    bound: int,
) -> tuple[np.ndarray, list[int], int]:
    """Every key's stored columns below its suffix (``old`` up to column ``j[k]``) followed by its recomputed
    suffix (``new``, first row ``new_at`` on the key axis), without the columns below ``bound``: the matrix of
    all keys, the K + 1 column offsets of the keys in it, and how many stored columns were dropped::

        key k, old:   |--dropped--|----kept----|....suffix, replaced....|
                      off[k]      h[k]          j[k]                     off[k + 1]
        key k, new:                            |--dropped--|----kept----|
                                               a[k]        t[k]          a[k + 1]
        key k, out:   |----kept (old)----|----kept (new)----|
    """
    h = np.minimum(old.first_at_or_above(offs, bound), j)
    a = np.searchsorted(new_at, offs)
    t = _first_at_or_above(new_at, offs, bound)
    new_end = np.append(a[1:], len(new_at))
    head, tail = j - h, new_end - t
    dropped = int((h - old.off[:-1]).sum() + (t - a).sum())
    out_off = np.concatenate([[0], np.cumsum(head + tail)])
    if not head.any():  # nothing kept below the suffixes (the windows full): the new columns at or above bound
        out = new if not (t - a).any() else new.take(_ranges(t, tail), axis=1)
        return out, out_off.tolist(), dropped
    # key by key, old columns h[k]... (head[k] of them), then new columns t[k]... (tail[k]), from the two side by side
    src = _ranges(np.stack([h, old.m.shape[1] + t], axis=1).ravel(), np.stack([head, tail], axis=1).ravel())
    both = np.concatenate([old.m, new], axis=1, out=_scratch(_SPLICE, len(new), old.m.shape[1] + new.shape[1]))
    out = both.take(src, axis=1)
    return out, out_off.tolist(), dropped


def process_batch(state: EngineState, records: Sequence[tuple[Hashable, Any, Any]]) -> bool:
    """Process ``(key, value, ts)`` records (arrival order) on the batch path if it applies; returns False
    after falling back to the record path. Results go to the output segments like the record path's."""
    seal(state)  # the batch path may turn entries into columns: fix the record cache's entries first
    if state.plan is None:
        _record_path(state, records)
        return False
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    ts = [r[2] for r in records]
    return process_columns(state, keys, ts, None, values)


def _timestamps(ts: Any) -> tuple[np.ndarray, np.ndarray]:
    """int64 timestamps and a mask of invalid ones (not an integer, or negative)."""
    arr = np.asarray(ts)
    if arr.dtype.kind == "i":
        arr = arr.astype(_I64, copy=False)
        return arr, arr < 0
    if arr.dtype.kind == "u":
        bad = arr > _MAX_LONG  # beyond Kafka's long: invalid, as on the record path
        return np.where(bad, 0, arr).astype(_I64), bad
    out = np.zeros(len(ts), _I64)
    bad = np.zeros(len(ts), bool)
    for i, t in enumerate(ts):
        if isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= _MAX_LONG:
            out[i] = t
        else:
            bad[i] = True
    return out, bad


def process_columns(
    state: EngineState,
    keys: Sequence[Hashable],
    timestamps: Any,
    fields: dict[str | None, Any] | None = None,
    values: Sequence[Any] | None = None,
) -> bool:
    """Columnar :func:`process_batch`: ``keys`` (sequence), ``timestamps`` (int array), and either ``fields``
    ({value field, or None for the bare value: numeric array} for the aggregation's inputs) or ``values`` (the
    record values). Null keys and values, invalid timestamps and late records are dropped and counted as the
    record path does. Returns False after falling back to the record path."""
    seal(state)  # the batch path may turn entries into columns: fix the record cache's entries first
    plan = state.plan
    n = len(keys)
    if values is None and fields is None:
        raise ValueError("process_columns needs fields or values")
    given = {} if fields is None else fields  # (with no values, the fields were given)
    varr = None
    if values is not None:
        varr = np.empty(n, dtype=object)
        varr[:] = list(values)

    def record_values() -> Sequence[Any]:
        # record values only when needed: the record path (fallback) and drop reports
        return values if values is not None else _values_from_fields(given, n)

    def fallback() -> bool:
        stamps = timestamps.tolist() if hasattr(timestamps, "tolist") else timestamps
        _record_path(state, list(zip(keys, record_values(), stamps)))
        return False

    if plan is None:
        return fallback()
    if values is None:
        missing = sorted({str(f) for kind, f in plan if kind != "count" and f not in given})
        if missing:
            raise ValueError(f"process_columns: fields lacks the aggregation input(s) {', '.join(missing)}")
    td, grace = state.td, state.grace
    ids = KeyIds()  # keys -> ids in order of first appearance, in one pass
    all_id = np.fromiter(map(ids.__getitem__, keys), _I64, n)
    null_key = all_id == ids[None] if None in ids else np.zeros(n, bool)
    null_value = np.zeros(n, bool) if varr is None else np.equal(varr, None)  # type: ignore[call-overload]  # stubs: None is a valid object-dtype operand
    ts, bad_ts = _timestamps(timestamps)
    if td >= _MAX_TS or (ts >= _MAX_TS).any():  # the k * 2**42 + ts axis needs ts + td < 2**42
        return fallback()
    invalid = null_key | null_value | bad_ts
    valid_ts = np.where(invalid, -1, ts)
    st_run = np.maximum.accumulate(np.maximum(valid_ts, state.observed_stream_time)) if n else valid_ts
    close = st_run - grace
    late = ~invalid & (ts + td < close)
    if (~invalid & ~late & (ts < close)).any():  # partially late (R22b): only the record path is exact
        return fallback()
    accepted = ~invalid & ~late
    acc_idx = np.flatnonzero(accepted)

    # the batch's keys: those of accepted records, in order of first appearance among them
    if len(acc_idx) == n:
        key_id = all_id
        batch_keys = list(ids)
    else:
        key_id = all_id[acc_idx]
        seen, first_idx = np.unique(key_id, return_index=True)
        in_order = seen[np.argsort(first_idx)]
        renumber = np.zeros(len(ids), _I64)
        renumber[in_order] = np.arange(len(in_order))
        key_id = renumber[key_id]
        uniq = list(ids)
        batch_keys = [uniq[i] for i in in_order.tolist()]
    if len(batch_keys) >= _MAX_KEYS or n >= _MAX_RECORDS:
        return fallback()

    parts_new: list[np.ndarray | None] = []
    for kind, field in plan:
        if kind == "count":
            parts_new.append(None)
            continue
        col: np.ndarray | None
        if fields is not None and field in fields:
            col = np.asarray(fields[field])[acc_idx]
            col = column(col.tolist(), kind) if col.dtype == object else col
            if col is not None and col.dtype.kind == "f" and (kind in ("sum", "mean") or np.isnan(col).any()):
                col = None
            if col is not None and col.dtype.kind in "iu":
                if len(col) and (int(col.max()) >= _LIMIT or magnitude(col.astype(_I64)) * len(col) >= _LIMIT):
                    col = None  # sums could leave int64 (uint64 beyond it included): the record path is exact
                else:
                    col = col.astype(_I64, copy=False)
            elif col is not None and col.dtype.kind == "f":
                col = col.astype(_F64, copy=False)  # float32 too: the state holds float64 columns
            elif col is not None:
                col = None  # bool and others: the record path decides
        else:
            try:
                vals = record_values()
                col = column([vals[i] if field is None else vals[i][field] for i in acc_idx.tolist()], kind)
            except (KeyError, TypeError, IndexError):
                col = None
        if col is None:
            return fallback()
        parts_new.append(col)

    # prepare every key before changing anything, so a fallback leaves no trace
    store = state.store
    composite = isinstance(state.aggregation, Composite)
    kws = []
    acc_ts = ts[acc_idx]
    new_kinds = part_kinds(parts_new)
    for k, key in enumerate(batch_keys):
        kw = store.keys.get(key)
        if kw is None:
            kw = store.load(key, columns=True)  # a key stored as columns stays columns (no entries round trip)
            if kw is None:
                kw = store.keys[key] = KeyWindows()
        if not columnize(kw, plan, composite):
            return fallback()
        # the key's columns and the batch's must have one dtype per part (they are stored as int64 rows)
        if len(kw.cols) and kw.cols.kinds != new_kinds:
            return fallback()
        raw = kw.raw  # columnize set it
        if raw is None:
            return fallback()
        for i, p in enumerate(parts_new):
            if p is not None and len(raw.ts) and raw.cols[i].dtype != p.dtype:
                return fallback()
        if key in state.flagged_keys and not _consistent_with_r3(td, plan, kw, acc_ts[key_id == k]):
            return fallback()
        kws.append(kw)

    res = _kernel(td, plan, kws, key_id, acc_idx.astype(_I64), acc_ts, parts_new, n) if len(acc_idx) else None
    if len(acc_idx) and res is None:
        return fallback()
    close_at = None  # close mode: the close of the batch's last non-early accepted record (its emission round)
    if state.is_close and res is not None:
        non_early = np.flatnonzero(acc_ts >= td)
        if len(non_early):
            close_at = int(st_run[acc_idx[non_early[-1]]]) - grace
            if not _emission_visible(state, res, close_at):
                return fallback()

    # commit
    stats = state.stats
    stats.records += n
    if n:
        state.observed_stream_time = int(st_run[-1])
    reason_of = np.zeros(n, np.int8)  # 0 kept; 1 null key; 2 null value; 3 invalid timestamp; 4 late
    reason_of[late] = 4
    reason_of[bad_ts] = 3
    reason_of[null_value] = 2
    reason_of[null_key] = 1
    counts_by = np.bincount(reason_of, minlength=5)
    stats.dropped_null += int(counts_by[1] + counts_by[2])
    stats.dropped_invalid_timestamp += int(counts_by[3])
    stats.dropped_late += int(counts_by[4])
    if state.collect_drops:
        reasons = (DropReason.NULL_KEY, DropReason.NULL_VALUE, DropReason.INVALID_TIMESTAMP, DropReason.LATE)
        dropped_values = record_values()
        dropped = np.flatnonzero(reason_of)
        for i, r in zip(dropped.tolist(), (reason_of[dropped] - 1).tolist()):  # arrival order, like the record path
            # invalid records do not advance stream time, so st_run[i] is the stream time at the drop
            drop(state, keys[i], dropped_values[i], timestamps[i], reasons[r], int(st_run[i]))
    stats.accepted += len(acc_idx)
    if res is None:
        return True

    out = res.flushed
    stats.windows_created += res.created
    stats.windows_updated += len(out) - res.created
    store.size += res.created
    start = res.starts[out]
    local = start & _LOCAL
    if len(out):
        top = int(local.max())
        if top > store.store_time:
            store.store_time = top
    kms = store.key_max_start
    # each key's largest window start: its last recomputed one, else its last one below the suffix (or none)
    K = len(kws)
    ends = np.searchsorted(res.starts, np.arange(1, K + 1, dtype=_I64) << _SHIFT) - 1
    last = res.starts[np.maximum(ends, 0)]
    below = res.col_j > res.old_win.off[:-1]
    tops = np.full(K, -1, _I64)
    tops[below] = res.old_win.m[0][res.col_j[below] - 1]
    in_key = (ends >= 0) & ((last >> _SHIFT) == np.arange(K))
    tops[in_key] = last[in_key] & _LOCAL
    for key, top in zip(batch_keys, tops.tolist()):
        if top >= 0 and top > kms.get(key, -1):
            kms[key] = top
    store.dirty.update(batch_keys)
    m = _store(batch_keys, kws, res, store.purge_bound(), state.blocks)
    state.blocks.look(store.keys)
    store.expired += m
    store.size -= m
    if state.is_close:
        _close_windows(state, plan, batch_keys, res, close_at)
        return True

    cache = sealed(state)
    if cache:  # keep the last-write order across record-path writes and this batch
        state.segments.append(CachedWrites(cache))
        replace(state, {})
    state.segments.append(
        ColumnWrites(
            batch_keys,
            start >> _SHIFT,
            local,
            res.ts[out],
            res.counts[out],
            [None if p is None else p[out] for p in res.parts],
        )
    )
    return True


def _values_from_fields(fields: dict[str | None, Any], n: int) -> list[Any]:
    if None in fields:
        return np.asarray(fields[None]).tolist()
    names = list(fields)
    cols = [np.asarray(fields[f]).tolist() for f in names]
    return [dict(zip(names, row)) for row in zip(*cols)] if names else [1] * n


def _record_path(state: EngineState, records: Sequence[tuple[Hashable, Any, Any]]) -> None:
    process = record_step(state)
    if state.is_close:  # what emit-on-close forwards waits for the flush, as the batch path's emissions do
        out: list = []
        for key, value, ts in records:
            out.extend(process(key, value, ts))
        if out:
            state.closed.append(EmittedUpdates(out))
        return
    for key, value, ts in records:
        process(key, value, ts)


# --------------------------------------------------------------------------------------------- emit on close
def _emission_visible(state: EngineState, res: _Written, close: int) -> bool:
    """Whether every window the round at ``close`` may emit (waiting ones and the batch's new ones, starts in
    ``[lower, upper]``) is still above the retention bound once the batch is stored: then emitting them after the
    batch gives what emitting after each record gives (R29 loses nothing more). Checked before anything changes."""
    bounds = emission_bounds(state, close)
    if bounds is None:
        return True
    lower, upper = bounds
    store = state.store
    local = res.starts & _LOCAL
    top = int(local.max()) if len(local) else NO_TIMESTAMP
    lag = store.read_lag
    if lag is None:
        return True
    bound = max(store.store_time, top) - lag
    new = local[res.new]
    if int(new[(new >= lower) & (new <= upper)].min(initial=bound)) < bound:
        return False
    return not state.pending_close.any_in(lower, min(upper, bound - 1))


def _close_windows(state: EngineState, plan: Plan, keys: list[Hashable], res: _Written, close: int | None) -> None:
    """After a stored batch in close mode: its new windows wait for their close, then the round at ``close``
    (``record.maybe_emit_final``, reading columns) emits the closed ones into ``state.closed``."""
    new = res.starts[res.new]
    state.pending_close.add_run(new & _LOCAL, [keys[k] for k in (new >> _SHIFT).tolist()])
    if close is None:
        return
    bounds = emission_bounds(state, close)
    if bounds is None:
        return
    lower, upper = bounds
    store = state.store
    bound = max(lower, store.read_bound())
    # the round's windows in emission order ((start, key bytes), R27), then read key by key; those below the
    # time-ordered store's retention are never emitted (R29)
    starts, popped = state.pending_close.pop_through(upper)
    S = np.asarray(starts, _I64)
    if len(S) and S[0] < bound:  # ascending: those below the bound come first
        j = int(S.searchsorted(bound))
        S, popped = S[j:], popped[j:]
    n = len(S)
    ids = KeyIds()
    kid = np.fromiter((ids[k] for k in popped), _I64, n)
    kws = [store.load(key, columns=True) for key in ids]
    held = [kw.cols for kw in kws if kw is not None]
    emitted = 0
    if any(c is None for c in held) or len({c.kinds for c in held}) > 1:
        # a key the record path left as entries, or keys whose parts differ in type (int / float): per window
        closed = final_updates(state, zip(S.tolist(), popped))
        state.closed.append(EmittedUpdates(closed))
        emitted = len(closed)
    elif n:
        found = np.zeros(n, bool)
        ts = np.zeros(n, _I64)
        counts = np.zeros(n, _I64)
        parts: list[Any] = [None] * len(plan)
        by_key = np.argsort(kid, kind="stable")
        edges = np.searchsorted(kid[by_key], np.arange(len(kws) + 1)).tolist()
        for u, kw in enumerate(kws):
            if kw is None:
                continue
            c = kw.cols
            r = by_key[edges[u] : edges[u + 1]]
            want = S[r]
            at = c.starts.searchsorted(want)
            ok = at < len(c.starts)
            ok[ok] = c.starts[at[ok]] == want[ok]
            at = at[ok]
            r = r[ok]
            found[r] = True
            ts[r] = c.ts[at]
            counts[r] = c.counts[at]
            for j, p in enumerate(c.parts):
                if p is not None:
                    if parts[j] is None:
                        parts[j] = np.zeros(n, p.dtype)
                    parts[j][r] = p[at]
        keep = np.flatnonzero(found)
        parts = [None if p is None else p[keep] for p in parts]
        state.closed.append(EmittedColumns([popped[i] for i in keep.tolist()], S[keep], ts[keep], counts[keep], parts))
        emitted = len(keep)
    state.stats.updates_emitted += emitted
    state.last_emit_close_time = close
