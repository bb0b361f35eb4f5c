"""The batch path for time windows (tumbling, hopping): a micro-batch at a cost that does not grow with
``size / advance``.

The reference record path (:class:`windowstore.time_windows.TimeWindowProcessor`, rules T1-T12 of
``docs/rules-window-types.md``) folds every record into each of its ``ceil(size / advance)`` windows, as Kafka
Streams' ``KStreamWindowAggregate`` does: 1,000 windows per record cost 1,000 updates. This path instead sorts the
batch's records by key and timestamp once - all keys in one numpy run - and reads every window it touches as a
range of that run, the way Hazelcast Jet's sliding windows combine frames (accumulate / combine / deduct): counts,
sums and means by prefix sums (``P[hi] - P[lo]``, the deduct), min, max and each window's last record by sparse
tables, so a window costs two ``searchsorted`` whatever its size::

    size = 10, advance = 4; one key's records of the batch, sorted by time: 17 18 21 25 29
    window [20, 30)  -> records with 20 <= t < 30 = sorted positions [2, 5): count P[5] - P[2] = 3
    window [24, 34)  -> positions [3, 5)
    (a window is [start, start + size): start inclusive, end exclusive, T2)

A window is touched by the union of the records' windows (the output of update mode, not records x windows): per
key ``(span of the key's records + size) / advance`` windows. That count grows with ``size / advance`` on any path
(update mode forwards each of them: it is the output), so what keeps the path flat is the cost of a window
written: it is computed in numpy, a column per part for all keys at once, and combined into the processor's state
held as columns too (:meth:`TimeWindowProcessor.write_columns`, :mod:`windowstore.time_windows_table`: one
``searchsorted`` or index arithmetic, a gather and a scatter per column), whose update-mode flush
(``flush_columns``) reads the written windows back as columns - no Python object per window on the way.

Late records (T5, T7). Close time only grows within a batch (``close_i = max(stream time, t_0..t_i) - grace``),
so a record's closed windows are a prefix of its windows, counted arithmetically (one ``dropped-records-total`` tick
per closed window). A record none of whose windows is closed at its own close time is *clean*: it reaches exactly
the windows containing it, and the range reads above apply. A partially late record is folded into its open
windows one by one (rare: only records behind close time): a batch with one, or with a value beyond what int64
prefix sums hold exactly, takes the row path - the same range reads, a key at a time in Python, then the
partially late records folded in. A window is touched only by records that were open for it, so its final value
is the value the record path has after the batch.

What the path returns is what the record path returns for the same records, concatenated, and it leaves the
processor in the record path's state (the processor's batch contract: ``write_columns`` - or ``write_windows``
for values beyond the columns - and ``close_windows``):

* ``update``: nothing; the processor's :meth:`~TimeWindowProcessor.flush` then forwards each written window once,
  in the record cache's last-write order - the order of ``(index of the window's last record, start)``;
* ``close``: the windows each record's close time closed, replayed over the batch's close times after the
  windows hold their final values (a window emitted at record ``i`` cannot be written after ``i``: it is closed).

It falls back to the record path, record by record, where it could not be identical: emit mode ``every`` (its
output is one update per record and window, inherently ``size / advance`` per record); aggregations that are not
exact under regrouping (anything but count, sum, min, max, mean, their ``Field`` s and composites of them; floats,
whose sums depend on the order of additions, and ``bool``s, which compare equal to ints but print differently);
a value the aggregation cannot take (the record path raises it at the same record).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Hashable, Sequence
from itertools import accumulate
from typing import Any, Protocol

import numpy as np

from .aggregations import Aggregation, Composite, Count, Field, Max, Mean, Min, Sum
from .family_common import FamilyStats, valid_timestamp
from .output import gc_paused
from .updates import DroppedRecord, DropReason, EmitMode, WindowUpdate

__all__ = [
    "BatchFallback",
    "TimeWindowBatchTarget",
    "batch_kinds",
    "combine_part",
    "merge_part",
    "one_part",
    "part_column",
    "process_batch",
    "run_batch",
]


class _Definition(Protocol):
    @property
    def size_ms(self) -> int: ...
    @property
    def advance(self) -> int: ...
    @property
    def grace_ms(self) -> int: ...


class TimeWindowBatchTarget(Protocol):
    """What this path reads and writes of a :class:`~windowstore.time_windows.TimeWindowProcessor`: its definition,
    counters, stream time, dropped records and the batch contract (``write_windows`` / ``close_windows``). A
    protocol, so that the processor can call this module without an import cycle."""

    observed_stream_time: int
    collect_drops: bool
    drops: list[DroppedRecord]

    @property
    def windows(self) -> _Definition: ...
    @property
    def aggregation(self) -> Aggregation: ...
    @property
    def emit(self) -> EmitMode: ...
    @property
    def stats(self) -> FamilyStats: ...
    def process(self, key: Hashable, value: Any, ts: Any) -> list[WindowUpdate]: ...
    def write_windows(
        self,
        keys: Sequence[Hashable],
        starts: Sequence[int],
        accs: Sequence[Any],
        tss: Sequence[int],
        counts: Sequence[int],
        combine_all: Callable[[list[Any], Sequence[Any]], list[Any]],
    ) -> int: ...
    def key_ids(self, keys: Sequence[Hashable]) -> np.ndarray: ...
    def write_columns(
        self,
        kid: np.ndarray,
        starts: np.ndarray,
        tss: np.ndarray,
        counts: np.ndarray,
        parts: list[np.ndarray],
        order: np.ndarray | None,
    ) -> int: ...
    def close_windows(self, window_close_time: int) -> list[WindowUpdate]: ...


_KINDS: dict[type, str] = {Count: "count", Sum: "sum", Min: "min", Max: "max", Mean: "mean"}


class BatchFallback(Exception):
    """The batch cannot be processed identically by this path: use the record path."""


def batch_kinds(aggregation: Aggregation) -> list[tuple[str, str | None]] | None:
    """``[(kind, field)]`` per part of ``aggregation`` when this path can compute it exactly, else ``None``.
    Only the built-in classes themselves qualify (a subclass may override ``accumulate``)."""
    parts = aggregation.parts if type(aggregation) is Composite else (aggregation,)
    out: list[tuple[str, str | None]] = []
    for p in parts:
        field = None
        if type(p) is Field:
            field = p.field
            p = p.inner
        kind = _KINDS.get(type(p))
        if kind is None:
            return None
        out.append((kind, field))
    return out


def process_batch(
    proc: TimeWindowBatchTarget, keys: Sequence[Hashable], timestamps: Sequence[Any], values: Sequence[Any]
) -> list[WindowUpdate]:
    """Process the records ``(keys[i], values[i], timestamps[i])`` in order, as ``proc.process`` would one by
    one, and return the concatenation of what those calls return (``update`` mode: nothing - call
    ``proc.flush()``)."""
    return run_batch(proc, keys, timestamps, values)[0]


def run_batch(
    proc: TimeWindowBatchTarget, keys: Sequence[Hashable], timestamps: Sequence[Any], values: Sequence[Any]
) -> tuple[list[WindowUpdate], bool]:
    """:func:`process_batch`, and whether the batch path took the batch (``False``: the record path did)."""
    if not (len(keys) == len(timestamps) == len(values)):
        raise ValueError(f"columns differ in length: {len(keys)} keys, {len(timestamps)} timestamps, {len(values)}")
    kinds = batch_kinds(proc.aggregation)
    if proc.emit is not EmitMode.EVERY and kinds is not None:
        try:
            with gc_paused():  # a tuple per window written, none of them cyclic (output.gc_paused)
                return _process(proc, kinds, keys, timestamps, values), True
        except BatchFallback:
            pass
    process = proc.process
    out: list[WindowUpdate] = []
    for k, v, t in zip(keys, values, timestamps, strict=True):
        out += process(k, v, t)
    return out, False


# ---------------------------------------------------------------------------------------------- the batch path


def part_column(kind: str, field: str | None, vals: list[Any]) -> list[Any]:
    """One part's inputs for the contributing records: ints only (exact whatever the grouping), else fallback."""
    if field is not None:
        try:
            vals = [v[field] for v in vals]
        except Exception as e:
            raise BatchFallback from e
    if kind == "count":
        return vals
    for v in vals:
        if type(v) is not int:
            raise BatchFallback
    return vals


class _SparseTable:
    """Range min or max in O(1) after O(n log n): ``levels[j][i] = op(a[i : i + 2**j])``."""

    __slots__ = ("levels", "op")

    def __init__(self, a: list[Any], op: Any) -> None:
        self.op = op
        levels = [a]
        half = 1
        while 2 * half <= len(a):
            prev = levels[-1]
            levels.append(list(map(op, prev[: len(prev) - half], prev[half:])))
            half *= 2
        self.levels = levels

    def query(self, lo: int, hi: int) -> Any:
        """``op`` over ``a[lo:hi]`` (``hi > lo``)."""
        j = (hi - lo).bit_length() - 1
        row = self.levels[j]
        return self.op(row[lo], row[hi - (1 << j)])


def _min(a: Any, b: Any) -> Any:
    return b if b < a else a


def _max(a: Any, b: Any) -> Any:
    return b if b > a else a


def combine_part(kind: str, old: Any, new: Any) -> Any:
    """Existing accumulator part (``old``, record-path form) with the batch's part ``new``; exact for ints."""
    if kind == "count":
        return old + new
    if kind == "sum":
        if type(old) is not int:
            raise BatchFallback  # a float sum from earlier records: regrouping would round differently
        return old + new
    if kind == "mean":
        if type(old[1]) is not int:
            raise BatchFallback
        return (old[0] + new[0], old[1] + new[1])
    if old is None:
        return new
    if type(old) is not int:
        raise BatchFallback
    return _min(old, new) if kind == "min" else _max(old, new)


def _process(
    proc: TimeWindowBatchTarget,
    kinds: list[tuple[str, str | None]],
    keys: Sequence[Hashable],
    timestamps: Sequence[Any],
    values: Sequence[Any],
) -> list[WindowUpdate]:
    windows = proc.windows
    size = windows.size_ms
    adv = windows.advance
    grace = windows.grace_ms
    st = proc.observed_stream_time
    n_null = n_invalid = n_late = n_accepted = skipped = pairs = 0
    closes: list[int] = []  # close time after each non-null, valid record (close mode's replay)
    clean_keys: list[Hashable] = []  # the clean records, in arrival order: key, timestamp, index
    clean_ts: list[int] = []
    clean_at: list[int] = []
    partial: list[tuple[Hashable, int, int, int]] = []  # (key, t, index, first open start)
    drops: list[DroppedRecord] | None = [] if proc.collect_drops else None  # kept once nothing can fall back
    clean = _all_clean(keys, timestamps, st, size, adv, grace)
    if clean is not None:  # the usual batch, classified in numpy: every record is clean
        t_all, close_all, pairs = clean
        n_accepted = len(keys)
        st = max(st, int(t_all.max()))
        clean_keys = list(keys)
        closes = close_all[np.flatnonzero(np.diff(close_all, prepend=close_all[0] - 1))].tolist()
    for i, k in enumerate(keys if clean is None else ()):
        if k is None:  # T7: a null key is dropped before stream time moves
            n_null += 1
            if drops is not None:
                drops.append(DroppedRecord(k, values[i], timestamps[i], DropReason.NULL_KEY, st))
            continue
        t = timestamps[i]
        if type(t) is not int or t < 0:
            t = valid_timestamp(t)
            if t is None:
                n_invalid += 1
                if drops is not None:
                    drops.append(DroppedRecord(k, values[i], timestamps[i], DropReason.INVALID_TIMESTAMP, st))
                continue
        if t > st:  # T3
            st = t
        close = st - grace  # T4
        closes.append(close)
        first = (max(0, t - size + adv) // adv) * adv  # T2: the record's smallest window start
        if first + size > close:  # every window of the record is open (T5)
            n_accepted += 1
            pairs += (t - first) // adv + 1
            clean_keys.append(k)
            clean_ts.append(t)
            clean_at.append(i)
            continue
        lo = max(first, ((close - size) // adv + 1) * adv)  # smallest start whose end > close
        if lo > t:  # T7: fully late, once per window
            n_late += 1
            skipped += (t - first) // adv + 1
            if drops is not None:
                drops.append(DroppedRecord(k, values[i], timestamps[i], DropReason.LATE, st))
            continue
        n_accepted += 1
        skipped += (lo - first) // adv
        pairs += (t - lo) // adv + 1
        partial.append((k, t, i, lo))

    # every contributing record's inputs per part, checked before any state changes
    ts_col: list[int] | np.ndarray = clean_ts
    at_col: list[int] | np.ndarray = clean_at
    if clean is not None:
        ts_col, at_col = clean[0], np.arange(len(keys))
    clean_values = list(values) if clean is not None else [values[i] for i in clean_at]
    clean_cols = [part_column(kind, field, clean_values) for kind, field in kinds]
    ordered = proc.emit is EmitMode.UPDATE  # close mode: the write order is not observable
    single = type(proc.aggregation) is not Composite
    # combine with the held windows, in the record cache's last-write order: (index of the window's last record,
    # start), as columns (the processor's columnar state); the combination may still fall back (a float
    # accumulator from earlier records) before any write
    frame = None
    if not partial:
        frame = _frame_windows(kinds, clean_keys, ts_col, at_col, clean_cols, size, adv, ordered, proc.key_ids)
    if frame is None:
        ts_list, at_list = _as_list(ts_col), _as_list(at_col)
        written = _row_windows(
            kinds, clean_keys, ts_list, at_list, clean_cols, partial, values, size, adv, ordered, single
        )
        frame = _written_frame(kinds, written, single, proc.key_ids, ordered)
        if frame is None:  # a value beyond the columns: the record path's form takes it
            created = proc.write_windows(*written, _combiner(kinds, single))
    if frame is not None:
        created = proc.write_columns(*frame)
    stats = proc.stats
    stats.records += len(keys)
    stats.dropped_null_key += n_null
    stats.dropped_invalid_timestamp += n_invalid
    stats.dropped_late += n_late
    stats.accepted += n_accepted
    stats.skipped_windows += skipped
    stats.windows_created += created
    stats.windows_updated += pairs - created
    proc.observed_stream_time = st
    if drops:
        proc.drops += drops
    out: list[WindowUpdate] = []
    if proc.emit is EmitMode.CLOSE:
        prev = None
        for close in closes:
            if close != prev:
                out += proc.close_windows(close)
                prev = close
        stats.updates_emitted += len(out)
    elif closes:
        proc.close_windows(closes[-1])
    return out


def _all_clean(
    keys: Sequence[Hashable], timestamps: Sequence[Any], st: int, size: int, adv: int, grace: int
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """When every record of the batch is clean - a key, a valid timestamp within the int64 guard, every window
    open at the record's own close time (no drop, nothing partially late) - its timestamps, the close time after
    each record and the number of window writes, computed in numpy; ``None`` otherwise (the record loop of
    :func:`_process` then classifies each record)."""
    if not len(keys) or None in keys or set(map(type, timestamps)) != {int}:  # (a bool is no timestamp: loop)
        return None
    try:
        t = np.array(timestamps, np.int64)
    except OverflowError:
        return None
    if int(t.min()) < 0 or int(t.max()) + size >= _SAFE:
        return None
    stream = np.maximum.accumulate(t)  # T3
    np.maximum(stream, st, out=stream)
    close = stream - grace  # T4
    first = np.maximum(t - size + adv, 0) // adv * adv  # T2: each record's smallest window start
    if not (first + size > close).all():  # T5: some record has a closed window
        return None
    return t, close, int(((t - first) // adv + 1).sum())


def _as_list(col: Any) -> list[Any]:
    return col.tolist() if isinstance(col, np.ndarray) else col


Written = tuple[list[Hashable], list[int], list[Any], list[int], list[int]]
"""The windows a batch writes as lists, in write order: keys, starts, accumulators, output timestamps, counts."""

Frame = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray], np.ndarray | None]
"""The windows a batch writes as columns (:meth:`TimeWindowProcessor.write_columns`), sorted by (key id, start):
key ids, starts, output timestamps, counts, the part columns but count's (mean: its sum), and update mode's write
order (a permutation; ``None`` in close mode, where it is not observable)."""

_SAFE = 1 << 62  # every int64 intermediate below this: timestamps + size, key offsets, prefix sums


def _frame_windows(
    kinds: list[tuple[str, str | None]],
    keys: list[Hashable],
    ts: list[int] | np.ndarray,
    at: list[int] | np.ndarray,
    cols: list[list[Any]],
    size: int,
    adv: int,
    ordered: bool,
    key_ids: Callable[[Sequence[Hashable]], np.ndarray],
) -> Frame | None:
    """Every window the clean records write, all keys at once in numpy; ``None`` when a value does not fit the
    int64 arithmetic (the row path then takes the batch). Keys are numbered by ``key_ids`` (the processor's
    columnar state), so that the windows come out in its order.

    The records are sorted by ``(key, time)`` into one run; key ``k``'s record at ``t`` sits at
    ``k * stride + t - base`` so that every key's windows are ranges of the one run. A record's windows are the
    advances ``[ceil((t - size + 1) / advance), t // advance]`` (T2); both ends grow with ``t``, so a key's
    windows are the union of these intervals, listed by one ``repeat``. Each window's count, sum, min, max and
    last record are then read over its range: two ``searchsorted`` per window, prefix sums, sparse tables."""
    n = len(ts)
    if not n:
        return None
    ids: dict[Hashable, int] = {}
    batch_kid = np.array([ids.setdefault(k, len(ids)) for k in keys], np.int64)
    t_lo, t_hi = (int(ts.min()), int(ts.max())) if isinstance(ts, np.ndarray) else (min(ts), max(ts))
    base = t_lo - size
    stride = t_hi - base + size + 1
    if t_hi + size >= _SAFE or len(ids) * stride >= _SAFE:
        return None
    table_kid = key_ids(list(ids))
    if (int(table_kid.max()) + 1) * stride >= _SAFE:
        return None
    kid = table_kid[batch_kid]
    t = np.asarray(ts, np.int64)
    order = np.lexsort((t, kid))
    kid = kid[order]
    t = t[order]
    # the windows: per record the advances it opens that no earlier record of its key opened
    first = np.maximum((t - size + adv) // adv, 0)
    last = t // adv
    prev = np.empty(n, np.int64)
    prev[0] = -1
    prev[1:] = last[:-1]
    prev[1:][kid[1:] != kid[:-1]] = -1
    first = np.maximum(first, prev + 1)
    per = np.maximum(last - first + 1, 0)
    src = np.repeat(np.arange(n), per)
    starts = (first[src] + np.arange(len(src)) - np.repeat(np.cumsum(per) - per, per)) * adv
    w_kid = kid[src]
    run = kid * stride + (t - base)
    at_start = w_kid * stride + (starts - base)
    lo = _sorted_searchsorted(run, at_start)
    hi = _sorted_searchsorted(run, at_start + size)
    counts = hi - lo
    columns: list[np.ndarray] = []  # per part but count: the sum, min or max of every window (mean: its sum)
    for (kind, _f), col in zip(kinds, cols, strict=True):
        if kind == "count":
            continue
        bound = max(max(col), -min(col))
        if bound * (n if kind in ("sum", "mean") else 1) >= _SAFE:
            return None
        v = np.array(col, np.int64)[order]
        if kind == "min" or kind == "max":
            columns.append(_range_op(v, np.minimum if kind == "min" else np.maximum, lo, hi))
            continue
        prefix = np.zeros(n + 1, np.int64)
        np.cumsum(v, out=prefix[1:])
        columns.append(prefix[hi] - prefix[lo])
    by = None
    if ordered:  # the record cache's last-write order: (index of the window's last record, start)
        last_record = _range_op(np.asarray(at, np.int64)[order], np.maximum, lo, hi)
        width = (int(starts.max()) - int(starts.min())) // adv + 1 if len(starts) else 1
        if int(last_record.max(initial=0)) * width < _SAFE:  # one int64 key: a stable sort of nearly sorted runs
            by = np.argsort(last_record * width + (starts - int(starts.min(initial=0))) // adv, kind="stable")
        else:
            by = np.lexsort((starts, last_record))
    return w_kid, starts, t[hi - 1], counts, columns, by


def _sorted_searchsorted(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """``np.searchsorted(haystack, needles)`` (side left) for ascending ``needles``: the two sorted runs merged by
    one stable sort (a needle before the equal haystack values), its rank minus the needles before it."""
    both = np.concatenate([needles, haystack])
    rank = np.empty(len(both), np.int64)
    rank[np.argsort(both, kind="stable")] = np.arange(len(both))
    return rank[: len(needles)] - np.arange(len(needles))


def _range_op(values: np.ndarray, op: Any, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``op`` (``np.minimum`` / ``np.maximum``) over ``values[lo:hi]`` for every query (``hi > lo``), from a
    sparse table up to the longest query: row ``l`` holds ``op`` over ``[i, i + 2**l)`` (one 2-d array, so that
    every query reads its level with one gather)."""
    if not len(lo):
        return values[:0]
    span = hi - lo
    k = np.frexp(span.astype(np.float64))[1] - 1  # floor(log2(span)), exact for spans below 2**53
    n = len(values)
    table = np.empty((int(k.max()) + 1, n), values.dtype)
    table[0] = values
    for lv in range(1, len(table)):
        h = 1 << (lv - 1)
        op(table[lv - 1, :-h], table[lv - 1, h:], out=table[lv, :-h])
        table[lv, n - h :] = table[lv - 1, n - h :]  # (never read: no query reaches past the end)
    flat = table.reshape(-1)
    row = k * n
    return op(flat[row + lo], flat[row + hi - (1 << k)])


def _row_windows(
    kinds: list[tuple[str, str | None]],
    keys: list[Hashable],
    ts: list[int],
    at: list[int],
    cols: list[list[Any]],
    partial: list[tuple[Hashable, int, int, int]],
    values: Sequence[Any],
    size: int,
    adv: int,
    ordered: bool,
    single: bool,
) -> Written:
    """Every window the batch writes, a key at a time in Python: the path for batches with partially late
    records (folded into their open windows one by one) and for values beyond int64."""
    clean: dict[Hashable, list[tuple[int, int]]] = {}
    for k, t, i in zip(keys, ts, at, strict=True):
        rows = clean.get(k)
        if rows is None:
            clean[k] = [(t, i)]
        else:
            rows.append((t, i))
    col_at = [dict(zip(at, col, strict=True)) for col in cols]
    if partial:
        late_at = [p[2] for p in partial]
        for (kind, field), d in zip(kinds, col_at, strict=True):
            d.update(zip(late_at, part_column(kind, field, [values[i] for i in late_at]), strict=True))
    writes: list[tuple[int, int, Hashable, Any, int, int]] = []
    late_by_key: dict[Hashable, dict[int, list[Any]]] = {}
    for k, t, i, lo in partial:
        per_start = late_by_key.setdefault(k, {})
        mine = [one_part(kind, cols_[i]) for (kind, _f), cols_ in zip(kinds, col_at, strict=True)]
        for s in range(lo, t + 1, adv):
            c = per_start.get(s)
            if c is None:
                per_start[s] = [i, t, 1, mine]
            else:
                c[0] = max(c[0], i)
                c[1] = max(c[1], t)
                c[2] += 1
                c[3] = [merge_part(kind, x, y) for (kind, _f), x, y in zip(kinds, c[3], mine, strict=True)]
    for k in clean.keys() | late_by_key.keys():
        writes += _key_windows(k, clean.get(k, []), late_by_key.get(k, {}), kinds, col_at, size, adv, single, ordered)
    if ordered:
        writes.sort(key=lambda c: (c[0], c[1]))
    if not writes:
        return [], [], [], [], []
    _last, starts, wkeys, accs, wts, counts = zip(*writes, strict=True)
    return list(wkeys), list(starts), list(accs), list(wts), list(counts)


def _written_frame(
    kinds: list[tuple[str, str | None]],
    written: Written,
    single: bool,
    key_ids: Callable[[Sequence[Hashable]], np.ndarray],
    ordered: bool,
) -> Frame | None:
    """The row path's windows (in write order when ``ordered``) as a :data:`Frame`; ``None`` when a value is not
    an int the columns hold (the record path's form then takes them)."""
    keys, starts, accs, tss, counts = written
    cols: list[list[Any]] = []
    per_part = [list(accs)] if single else [list(p) for p in zip(*accs, strict=True)] if accs else []
    for (kind, _f), col in zip(kinds, per_part, strict=False):
        if kind == "mean":
            if [a[0] for a in col] != list(counts):  # (by construction: every record counted by both)
                return None
            cols.append([a[1] for a in col])
        elif kind == "count":
            if col != list(counts):
                return None
        else:
            cols.append(col)
    for col in cols:
        if set(map(type, col)) - {int} or (col and (max(col) >= _SAFE or min(col) <= -_SAFE)):
            return None
    n = len(keys)
    ids: dict[Hashable, int] = {}
    batch_kid = [ids.setdefault(k, len(ids)) for k in keys]
    kid = key_ids(list(ids))[np.array(batch_kid, np.int64)] if n else key_ids([])
    start = np.array(starts, np.int64)
    srt = np.lexsort((start, kid))
    order = np.empty(n, np.int64)
    order[srt] = np.arange(n)
    parts = [np.array(c, np.int64)[srt] if n else np.zeros(0, np.int64) for c in cols]
    if not n:  # (an empty batch: no part column to read)
        parts = [np.zeros(0, np.int64) for kind, _f in kinds if kind != "count"]
    tss_, counts_ = np.array(tss, np.int64)[srt], np.array(counts, np.int64)[srt]
    return kid[srt], start[srt], tss_, counts_, parts, order if ordered else None


def _combiner(kinds: list[tuple[str, str | None]], single: bool) -> Any:
    """``combine_all(held accumulators, the batch's)`` for :meth:`TimeWindowProcessor.write_windows`: a part
    at a time over the whole column; :class:`BatchFallback` when a held part is not an exact int."""
    fns = [_COMBINE_ALL[kind] for kind, _f in kinds]
    if single:
        return fns[0]

    def combine_all(held: list[Any], new: Sequence[Any]) -> list[Any]:
        parts = [fn(list(h), list(b)) for fn, h, b in zip(fns, zip(*held, strict=True), zip(*new, strict=True))]
        return list(zip(*parts, strict=True))

    return combine_all


def _ints_only(held: list[Any]) -> None:
    if set(map(type, held)) - {int}:
        raise BatchFallback  # a float from earlier records: regrouping would round differently


def _combine_counts(held: list[int], new: Sequence[int]) -> list[int]:
    return list(map(operator.add, held, new))


def _combine_sums(held: list[Any], new: Sequence[int]) -> list[int]:
    _ints_only(held)
    return list(map(operator.add, held, new))


def _combine_means(held: list[Any], new: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    _ints_only([h[1] for h in held])
    return [(a[0] + b[0], a[1] + b[1]) for a, b in zip(held, new, strict=True)]


def _combine_mins(held: list[Any], new: Sequence[int]) -> list[Any]:
    return [combine_part("min", a, b) for a, b in zip(held, new, strict=True)]


def _combine_maxs(held: list[Any], new: Sequence[int]) -> list[Any]:
    return [combine_part("max", a, b) for a, b in zip(held, new, strict=True)]


_COMBINE_ALL: dict[str, Callable[[list[Any], Sequence[Any]], list[Any]]] = {
    "count": _combine_counts,
    "sum": _combine_sums,
    "mean": _combine_means,
    "min": _combine_mins,
    "max": _combine_maxs,
}


def one_part(kind: str, v: Any) -> Any:
    """One record's part, as the batch combines it (count: 1, mean: (1, v))."""
    if kind == "count":
        return 1
    if kind == "mean":
        return (1, v)
    return v


def merge_part(kind: str, a: Any, b: Any) -> Any:
    if kind == "count" or kind == "sum":
        return a + b
    if kind == "mean":
        return (a[0] + b[0], a[1] + b[1])
    return _min(a, b) if kind == "min" else _max(a, b)


def _key_windows(
    k: Hashable,
    rows: list[tuple[int, int]],
    late: dict[int, list[Any]],
    kinds: list[tuple[str, str | None]],
    col_at: list[dict[int, Any]],
    size: int,
    adv: int,
    single: bool,
    ordered: bool,
) -> list[tuple[int, int, Hashable, Any, int, int]]:
    """Every window of one key the batch writes, as ``(last record index, start, key, acc, ts, count)``: clean
    records by range reads over the key's records sorted by time, partially late ones folded in. ``ordered``:
    the last record index is needed (update mode's last-write order); otherwise it is not computed."""
    rows.sort()
    ts_sorted = [t for t, _i in rows]
    idx = [i for _t, i in rows]
    readers: list[Any] = []  # per part: (lo, hi) -> the part's accumulator over sorted positions [lo, hi)
    for (kind, _f), cols in zip(kinds, col_at, strict=True):
        if kind == "count":
            readers.append(_count_reader)
            continue
        col = [cols[i] for i in idx]
        if kind == "sum":
            readers.append(_sum_reader(list(accumulate(col, initial=0))))
        elif kind == "mean":
            readers.append(_mean_reader(list(accumulate(col, initial=0))))
        else:
            readers.append(_SparseTable(col, _min if kind == "min" else _max).query if col else None)
    out: list[tuple[int, int, Hashable, Any, int, int]] = []
    starts: list[int] = []
    nxt = 0  # smallest start not yet listed
    for t in ts_sorted:  # the union of the clean records' windows, ascending
        first = (t - size + adv) // adv * adv
        if first < nxt:
            first = nxt
        top = t // adv * adv
        if first <= top:
            starts.extend(range(first, top + 1, adv))
            nxt = top + adv
    if starts:
        last_query = _SparseTable(idx, max).query if ordered else _count_reader  # (unordered: any int)
        read0 = readers[0]
        lo = hi = 0
        bisect_left = bisect.bisect_left
        for s in starts:  # ascending: both bounds only move right
            lo = bisect_left(ts_sorted, s, lo)
            hi = bisect_left(ts_sorted, s + size, hi if hi > lo else lo)
            acc = read0(lo, hi) if single else tuple([r(lo, hi) for r in readers])
            out.append((last_query(lo, hi), s, k, acc, ts_sorted[hi - 1], hi - lo))
    if late:
        merged = []
        for last_i, s, k_, acc, ts, count in out:
            extra = late.pop(s, None)
            if extra is not None:
                parts = [acc] if single else list(acc)
                parts = [merge_part(kind, x, y) for (kind, _f), x, y in zip(kinds, parts, extra[3], strict=True)]
                acc = parts[0] if single else tuple(parts)
                last_i, ts, count = max(last_i, extra[0]), max(ts, extra[1]), count + extra[2]
            merged.append((last_i, s, k_, acc, ts, count))
        out = merged
        for s, (last_i, ts, count, parts) in late.items():  # windows only partially late records reached
            out.append((last_i, s, k, parts[0] if single else tuple(parts), ts, count))
    return out


def _count_reader(lo: int, hi: int) -> int:
    return hi - lo


def _sum_reader(prefix: list[int]) -> Any:
    return lambda lo, hi: prefix[hi] - prefix[lo]


def _mean_reader(prefix: list[int]) -> Any:
    return lambda lo, hi: (hi - lo, prefix[hi] - prefix[lo])
