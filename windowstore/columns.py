"""The columnar representation of a key's windows and raw records (the batch path's), and the conversions
between it and the record path's entries.

A key held by the batch path keeps its windows as :class:`Cols` (rows of one int64 matrix: starts, max ts,
counts, then one row per aggregation part, float64 ones as their bits) and its accepted records as the raw
matrix (ts, then one row per part). :class:`ColumnCodec` is what the :class:`~windowstore.store.WindowStore`
is given to turn such a key back into entries (:meth:`ColumnCodec.materialize`) before any record-path access,
and to trim it (:meth:`ColumnCodec.trim`); :func:`columnize` goes the other way. Values the columns cannot
hold exactly (an int beyond the kernels' range, a float sum, a NaN) make :func:`columnize` refuse, and the
batch path leaves the batch to the record path, whose Python ints are exact (issue 29).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from .aggregations import Aggregation, Composite, Field
from .store import KeyWindows, RawRecords
from .updates import WindowUpdate

__all__ = [
    "Cols",
    "ColumnCodec",
    "KeyIds",
    "Plan",
    "accumulators",
    "batch_plan",
    "bit_rows",
    "column",
    "columnize",
    "exact_column",
    "object_array",
    "part_kinds",
    "raw_matrix",
    "rows_of",
    "set_raw",
    "update_columns",
]

#: ``[(kind, field), ...]``: per aggregation part its batch kernel (count, sum, min, max, mean) and input field
Plan = list[tuple[str, str | None]]
_LIMIT = 1 << 62
_I64 = np.int64
_F64 = np.float64


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
    min/max value; the sum for mean); ``None`` for a count part, whose value is ``counts``.

    The batch path keeps the columns as rows of one int64 matrix (:attr:`stacked`: starts, ts, counts, then
    each part's column, float64 ones as their bits), so storing a key's windows is one concatenation, not one
    per column; the column attributes are views of its rows."""

    __slots__ = ("counts", "kinds", "matrix", "parts", "starts", "ts")

    def __init__(self, starts: np.ndarray, ts: np.ndarray, counts: np.ndarray, parts: list[Any]) -> None:
        self.starts = starts
        self.ts = ts
        self.counts = counts
        self.parts = parts
        self.kinds = part_kinds(parts)
        #: the columns as rows of one int64 matrix (see :attr:`stacked`); None until built
        self.matrix: np.ndarray | None = None

    @classmethod
    def of(cls, m: np.ndarray, kinds: tuple[str | None, ...]) -> Cols:
        """The columns held in the rows of ``m`` (see :attr:`stacked`); ``kinds``: per part, ``None`` (count),
        ``"i"`` (int64) or ``"f"`` (float64). The column attributes are made when first read: a batch stores
        every key of it this way, and most are next read as :attr:`stacked` only."""
        c = cls.__new__(cls)  # the column slots stay unset until read (``__getattr__``)
        c.kinds = kinds
        c.matrix = m
        return c

    def __getattr__(self, name: str) -> Any:
        # only for an unset slot: the column views of a Cols made by :meth:`of`
        if name not in ("starts", "ts", "counts", "parts"):
            raise AttributeError(name)
        m = self.matrix
        assert m is not None  # the column slots are unset only on a Cols made by :meth:`of`, which sets it
        self.starts, self.ts, self.counts = m[0], m[1], m[2]
        self.parts = rows_of(m, 3, self.kinds)
        return getattr(self, name)

    @property
    def stacked(self) -> np.ndarray:
        """The int64 matrix whose rows are starts, ts, counts and the parts' columns (float64 ones as bits)."""
        m = self.matrix
        if m is None:
            m = self.matrix = np.stack([self.starts, self.ts, self.counts, *bit_rows(self.parts)])
        return m

    def __len__(self) -> int:
        m = self.matrix
        return len(self.starts) if m is None else m.shape[1]

    def take(self, sel: Any) -> Cols:
        return Cols.of(self.stacked[:, sel], self.kinds)


def part_kinds(parts: Sequence[Any]) -> tuple[str | None, ...]:
    return tuple(None if p is None else p.dtype.kind for p in parts)


def bit_rows(parts: Sequence[Any]) -> list[np.ndarray]:
    """The columns of ``parts`` (count parts have none) as int64 rows: float64 ones as their bits."""
    return [p.view(_I64) if p.dtype.kind == "f" else p for p in parts if p is not None]


def rows_of(m: np.ndarray, first: int, kinds: tuple[str | None, ...]) -> list[Any]:
    """Inverse of :func:`bit_rows`: the part columns held in ``m``'s rows from ``first`` on."""
    parts: list[Any] = []
    r = first
    for k in kinds:
        if k is None:
            parts.append(None)
        else:
            parts.append(m[r] if k != "f" else m[r].view(_F64))
            r += 1
    return parts


def raw_of(kw: KeyWindows) -> RawRecords:
    """A columnar key's raw records (the batch path keeps them with its columns)."""
    raw = kw.raw
    if raw is None:
        raise ValueError("a key held as columns has no raw records")
    return raw


def raw_matrix(kw: KeyWindows) -> np.ndarray:
    """A columnar key's raw records as rows of one int64 matrix: ts, then each part's values (see
    :attr:`Cols.stacked`); built once, kept in ``kw.raw.matrix``."""
    raw = raw_of(kw)
    m = raw.matrix
    if m is None:
        m = raw.matrix = np.stack([raw.ts, *bit_rows(raw.cols)])
    return m


def set_raw(kw: KeyWindows, m: np.ndarray, kinds: tuple[str | None, ...]) -> None:
    """Hold the raw records of matrix ``m`` (see :func:`raw_matrix`) in ``kw``."""
    raw = kw.raw
    if raw is None:
        kw.raw = RawRecords(m[0], rows_of(m, 1, kinds), m)
    else:  # (no allocation per key and batch)
        raw.ts = m[0]
        raw.cols = rows_of(m, 1, kinds)
        raw.matrix = m


# ------------------------------------------------------------------------------------------- representation
def accumulators(plan: Plan, composite: bool, counts: list[int], parts: list[Any]) -> list[Any]:
    cols: list[list[Any]] = []
    for (kind, _f), p in zip(plan, parts):
        if kind == "count":
            cols.append(counts)
        elif kind == "mean":
            cols.append(list(zip(counts, p.tolist())))
        else:
            cols.append(p.tolist())
    return list(zip(*cols)) if composite else cols[0]


def materialize(kw: KeyWindows, plan: Plan, composite: bool) -> None:
    """Columns -> entries and raw lists (for the record path, serialization and reads)."""
    c = kw.cols
    if c is not None:
        kw.cols = None
        counts = c.counts.tolist()
        starts = c.starts.tolist()
        accs = accumulators(plan, composite, counts, c.parts)
        kw.starts = starts
        kw.entries = {s: [a, t, n] for s, a, t, n in zip(starts, accs, c.ts.tolist(), counts)}
    raw = kw.raw
    if raw is not None and not isinstance(raw.ts, list):
        kw.raw = RawRecords(raw.ts.tolist(), [None if col is None else col.tolist() for col in raw.cols])


def column(values: Sequence[Any], kind: str) -> np.ndarray | None:
    """A numeric column for a kernel, or ``None`` when the batch result would not be exact (fallback)."""
    n = len(values)
    if kind in ("sum", "mean"):
        if not all(type(v) is int for v in values):
            return None
        arr = int64_or_none(values, n)
        if arr is None or (n and magnitude(arr) * n >= _LIMIT):  # prefix sums could leave int64
            return None
        return arr
    if all(type(v) is int for v in values):
        arr = int64_or_none(values, n)
        if arr is None or (n and magnitude(arr) >= _LIMIT):
            return None
        return arr
    if all(type(v) is float for v in values):
        arr = np.fromiter(values, np.float64, n)
        return None if np.isnan(arr).any() else arr
    return None


def int64_or_none(values: Sequence[int], n: int) -> np.ndarray | None:
    """``values`` (Python ints) as an int64 array; ``None`` when one is outside int64 (the caller falls back
    to the record path, whose Python ints are exact: issue 29, sums never become floats)."""
    try:
        return np.fromiter(values, _I64, n)
    except OverflowError:
        return None


def magnitude(arr: np.ndarray) -> int:
    """The largest ``|v|`` of an int64 array, as a Python int (``np.abs`` wraps at -2**63)."""
    return max(-int(arr.min()), int(arr.max()))


def columnize(kw: KeyWindows, plan: Plan, composite: bool) -> bool:
    """Entries and raw lists -> columns; False when a value cannot be represented exactly."""
    if kw.cols is None:
        starts = kw.starts
        entries = kw.entries
        rows = [entries[s] for s in starts]
        parts: list[Any] = []
        for i, (kind, _f) in enumerate(plan):
            if kind == "count":
                parts.append(None)
                continue
            accs = [r[0][i] if composite else r[0] for r in rows]
            col = column([a[1] for a in accs] if kind == "mean" else accs, "sum" if kind == "mean" else kind)
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
    raw = kw.raw
    if raw is None:
        set_raw(kw, np.zeros((1 + sum(kind != "count" for kind, _f in plan), 0), _I64), kw.cols.kinds)
    elif isinstance(raw.ts, list):
        cols: list[np.ndarray | None] = []
        for (kind, _f), col in zip(plan, raw.cols):
            if col is None:
                cols.append(None)
                continue
            arr = column(col, kind)
            if arr is None:
                return False
            cols.append(arr)
        ts = int64_or_none(raw.ts, len(raw.ts))
        if ts is None:
            return False
        kw.raw = RawRecords(ts, cols)
    return True


def trim(kw: KeyWindows, bound: int) -> int:
    """Columnar :meth:`KeyWindows.trim_below`."""
    raw = raw_of(kw)
    if len(raw.ts) and raw.ts[0] < bound:
        j = int(raw.ts.searchsorted(bound))
        set_raw(kw, raw_matrix(kw)[:, j:], part_kinds(raw.cols))
    m = kw.cols.stacked  # row 0: the starts (read from the matrix: no column views made for the check)
    if m.shape[1] and m[0, 0] < bound:
        c = kw.cols
        j = int(m[0].searchsorted(bound))
        kw.cols = c.take(slice(j, None))
        return j
    return 0


class ColumnCodec:
    """What a :class:`~windowstore.store.WindowStore` is given when the batch path is on: how to turn a key held
    as columns back into entries (:meth:`materialize`, before any record-path access) and how to trim it
    (:meth:`trim`). Holds the plan only (never the processor or the store: no reference cycle)."""

    __slots__ = ("composite", "plan")

    def __init__(self, plan: Plan, composite: bool) -> None:
        self.plan = plan
        self.composite = composite

    def materialize(self, kw: KeyWindows) -> None:
        materialize(kw, self.plan, self.composite)

    #: ``trim(kw, bound)``: the module function itself (no extra call per key on every expiry)
    trim = staticmethod(trim)


class KeyIds(dict[Hashable, int]):
    """``ids[key]``: the key's id, a new one (0, 1, ...) for a key not seen yet."""

    def __missing__(self, key: Hashable) -> int:
        i = self[key] = len(self)
        return i


def object_array(items: Sequence[Any]) -> np.ndarray:
    """A 1-d object array of ``items`` (tuples stay elements)."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def exact_column(values: list[Any]) -> np.ndarray:
    """``values`` as a 1-d numpy column of the values exactly as the record path gives them, one element per row.

    Only a column of one plain type becomes a typed array: all ints within int64 -> int64, all floats ->
    float64. Anything else is an object array of the values as they are, because ``np.array`` would change them:
    ints beyond int64 become float64 or uint64 and drag every other int of the column along (issue 29: a sum
    never silently becomes a float, and a window of ``5`` shows ``5``); ``[1, 2.5]`` turns the 1 into ``1.0``,
    ``["a", 1]`` the 1 into ``"1"``, ``[True, 2]`` the True into ``1``; ``collect``'s lists either raise
    (different lengths: "inhomogeneous shape") or silently make a 2-d array (equal lengths)."""
    kinds = set(map(type, values))
    if kinds == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            return object_array(values)
    if kinds == {float}:
        return np.array(values, dtype=np.float64)
    return object_array(values)


def update_columns(updates: Sequence[WindowUpdate], aggregation: Aggregation) -> dict[str, Any]:
    """:class:`~windowstore.updates.WindowUpdate` s as the columns a processor's ``flush_columns`` returns: ``key``
    (list), ``start``, ``end``, ``ts``, ``count`` (int64 arrays) and ``values`` {aggregation output name:
    :func:`exact_column`}, rows in the order given."""
    n = len(updates)
    if isinstance(aggregation, Composite):
        values = {p.name: exact_column([u.value[p.name] for u in updates]) for p in aggregation.parts}
    else:
        values = {aggregation.name: exact_column([u.value for u in updates])}
    return {
        "key": [u.key for u in updates],
        "start": np.fromiter((u.start for u in updates), _I64, n),
        "end": np.fromiter((u.end for u in updates), _I64, n),
        "ts": np.fromiter((u.ts for u in updates), _I64, n),
        "count": np.fromiter((u.count for u in updates), _I64, n),
        "values": values,
    }
