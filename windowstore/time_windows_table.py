"""The time-window batch path's window state as columns: an accelerator beside the reference processor.

:class:`~windowstore.time_windows.TimeWindowProcessor` keeps each loaded key's windows as a dict of window
objects and update mode's unflushed windows as a dict of ``(key, start)`` tuples in last-write order (the record
path, rules T1-T12 of ``docs/rules-window-types.md``). Written from the batch path
(:mod:`windowstore.time_windows_batch`), that costs a lookup, an object and a tuple per window the batch touches -
and a hopping window of ``size / advance = 1,000`` is touched by ~2 windows per record, where ``10`` touches 0.1.
A :class:`WindowTable` holds the same state as numpy columns instead, so a batch's writes, update mode's order and
its flush cost numpy work per window, not Python objects::

    matrix rows   kid    start  ts   count  part rows (sum | min | max | mean: its sum)
    column j      key id window start, max record ts, record count, accumulator parts      (sorted by kid, start)
    (a count part is the record count, and so is a mean's count: no row of their own)
    dirty rows    kid    start                                                             (last-write order)

A key's windows live either in the processor's dicts or in the table, never in both; the processor moves them
(:meth:`WindowTable.absorb` / :meth:`WindowTable.take_rows`) when the batch path or the record path takes over, so
each path reads and writes its own form. Only values a column holds exactly are taken: ints (not ``bool``) below
``2**62`` in magnitude, so that adding two of them never leaves int64; anything else raises
:class:`~windowstore.time_windows_batch.BatchFallback` before the table changes, and the record path takes the
batch. Windows are located by a code ``kid * width + (start - base) // advance`` (starts are multiples of the
advance), ascending in table order, so a batch's windows are merged into the table by one ``searchsorted``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from .columns import exact_column
from .time_windows_batch import BatchFallback

__all__ = ["WindowRow", "WindowTable"]

#: one window in the record path's form: key, start, accumulator, output timestamp, record count
WindowRow = tuple[Hashable, int, Any, int, int]

_I64 = np.int64
_LIMIT = 1 << 62  # every value held below this in magnitude: the sum of two stays inside int64
_EXACT_FLOAT = 1 << 53  # ints below this convert to float64 exactly (mean = sum / n, as Python divides)
_KID, _START, _TS, _COUNT = 0, 1, 2, 3
_HEAD = 4  # rows before the part rows


class WindowTable:
    """The windows of the keys in :attr:`loaded` as one int64 matrix (rows: kid, start, ts, count, parts), sorted
    by ``(kid, start)``, and update mode's unflushed windows as ``(kid, start)`` columns in last-write order.

    ``kinds`` = :func:`~windowstore.time_windows_batch.batch_kinds` of the aggregation; ``single``: the accumulator
    is the one part's (not a :class:`~windowstore.aggregations.Composite` tuple)."""

    def __init__(self, kinds: list[tuple[str, str | None]], single: bool, advance: int) -> None:
        self.kinds = [kind for kind, _f in kinds]
        self.single = single
        self.advance = advance
        self.ids: dict[Hashable, int] = {}
        self.keys: list[Hashable] = []  # id -> key
        self._names: np.ndarray | None = None  # the keys as an object array (key_column), rebuilt as keys come
        #: keys whose windows are held here (a key in it that holds no window any more is harmless: rows only)
        self.loaded: set[Hashable] = set()
        # a count is the window's record count and a mean's count is too (every record is counted by both, T11),
        # so a count part has no row of its own and a mean's row holds its sum; the other parts have a row each
        self._row_kinds = [k for k in self.kinds if k != "count"]
        rows = iter(range(_HEAD, _HEAD + len(self._row_kinds)))
        self._value_rows = [_COUNT if k == "count" else next(rows) for k in self.kinds]
        self._matrix = np.empty((_HEAD + len(self._row_kinds), 0), _I64)
        self.dirty = np.empty((2, 0), _I64)
        # windows below this start are forgotten (trim), dropped from the matrix when it is next read
        self._floor: int | None = None
        self._held_codes: tuple[int, int, np.ndarray] | None = None  # (base, width, codes) of the matrix
        self._version = 0  # bumped whenever the matrix's columns move
        # the unflushed windows' matrix columns as the last write left them, and the version they are valid for
        self._dirty_at: tuple[int, np.ndarray] | None = None

    @property
    def matrix(self) -> np.ndarray:
        """The windows held (rows: kid, start, ts, count, parts), sorted by ``(kid, start)``."""
        floor = self._floor
        if floor is not None:
            self._floor = None
            m = self._matrix
            if m.shape[1] and int(m[_START].min()) < floor:
                self._set(m[:, m[_START] >= floor])
        return self._matrix

    def _set(self, m: np.ndarray) -> None:
        self._matrix = m
        self._held_codes = None
        self._version += 1

    def __len__(self) -> int:
        return int(self.matrix.shape[1])

    # ------------------------------------------------------------------------------------------ keys and codes
    def key_ids(self, keys: Iterable[Hashable]) -> np.ndarray:
        """Ids of ``keys`` (new keys get the next ids; an id does not mean the key is loaded)."""
        ids, names = self.ids, self.keys
        out = []
        for k in keys:
            i = ids.get(k)
            if i is None:
                i = ids[k] = len(names)
                names.append(k)
            out.append(i)
        return np.array(out, _I64)

    def _coder(self, *starts: np.ndarray) -> tuple[int, int]:
        """``(base, width)`` of the codes for windows whose starts are in ``starts`` (non-empty arrays)."""
        lo = min(int(s.min()) for s in starts)
        hi = max(int(s.max()) for s in starts)
        width = (hi - lo) // self.advance + 1
        if len(self.keys) * width >= _LIMIT:
            raise BatchFallback  # (starts spread over more than 2**62 / keys advances)
        return lo, width

    def _codes(self, kid: np.ndarray, start: np.ndarray, base: int, width: int) -> np.ndarray:
        return kid * width + (start - base) // self.advance

    def gather(self, kid: np.ndarray, start: np.ndarray) -> np.ndarray:
        """The matrix columns of the windows ``(kid[j], start[j])`` that are held, in that order."""
        at = self._locate(kid, start)
        return self._matrix[:, at[at >= 0]]

    def _locate(self, kid: np.ndarray, start: np.ndarray) -> np.ndarray:
        """The column of every window ``(kid[j], start[j])`` in ``_matrix``, ``-1`` where it is not there. Reads
        ``_matrix`` as it is (a pending trim left alone: the windows asked for are held, above the floor)."""
        out = np.full(len(kid), -1, _I64)
        m = self._matrix
        if not len(kid) or not m.shape[1]:
            return out
        if self._held_codes is None:  # kept until the matrix changes: close mode locates once per close time
            base, width = self._coder(m[_START])
            self._held_codes = (base, width, self._codes(m[_KID], m[_START], base, width))
        base, width, held = self._held_codes
        inside = (start >= base) & (start < base + width * self.advance)
        want = self._codes(kid[inside], start[inside], base, width)
        pos = np.searchsorted(held, want)
        ok = pos < len(held)
        ok[ok] = held[pos[ok]] == want[ok]
        out[np.flatnonzero(inside)[ok]] = pos[ok]
        return out

    # ------------------------------------------------------------------------------------------ conversions
    def parts_of(self, accs: Sequence[Any], counts: Sequence[int]) -> list[list[Any]]:
        """The part rows of record-path accumulators of windows of ``counts`` records, checked exact (a count and
        a mean's count equal to the window's); else fallback."""
        if not accs:
            return [[] for _r in self._row_kinds]
        per_part = [list(accs)] if self.single else [list(p) for p in zip(*accs, strict=True)]
        rows: list[list[Any]] = []
        for kind, col in zip(self.kinds, per_part, strict=True):
            if kind == "mean":
                if [a[0] for a in col] != list(counts):
                    raise BatchFallback
                rows.append([a[1] for a in col])
            elif kind == "count":
                if col != list(counts):
                    raise BatchFallback
            else:
                rows.append(col)
        for row in rows:
            if set(map(type, row)) != {int} or max(row) >= _LIMIT or min(row) <= -_LIMIT:
                raise BatchFallback  # a float, None or bool, or an int beyond the columns' range
        return rows

    def accs_of(self, m: np.ndarray) -> list[Any]:
        """Record-path accumulators of the windows of matrix columns ``m`` (one per column)."""
        cols: list[list[Any]] = []
        for kind, row in zip(self.kinds, self._value_rows, strict=True):
            if kind == "mean":
                cols.append(list(zip(m[_COUNT].tolist(), m[row].tolist(), strict=True)))
            else:
                cols.append(m[row].tolist())
        return cols[0] if self.single else list(zip(*cols, strict=True))

    def absorb(self, rows: Sequence[WindowRow], dirty: Sequence[tuple[Hashable, int]]) -> None:
        """Take windows held in the record path's form (of keys not in the table) and record-path unflushed
        windows (which go before the table's own in last-write order); raises :class:`BatchFallback`, the table
        unchanged, when a value is not exact in int64."""
        if rows:
            keys, starts, accs, tss, counts = zip(*rows, strict=True)
            parts = self.parts_of(accs, counts)
            for col in (tss, counts):
                if max(col) >= _LIMIT:
                    raise BatchFallback
            new = np.array([self.key_ids(keys).tolist(), starts, tss, counts, *parts], _I64)
            m = np.concatenate([self.matrix, new], axis=1)
            base, width = self._coder(m[_START])
            self._set(m[:, np.argsort(self._codes(m[_KID], m[_START], base, width), kind="stable")])
            self.loaded.update(keys)
        if dirty:
            d = np.array([self.key_ids(k for k, _s in dirty).tolist(), [s for _k, s in dirty]], _I64)
            self.dirty = d if not self.dirty.shape[1] else self._rewrite(self.dirty, d)
            self._dirty_at = None

    def take_rows(self) -> tuple[list[WindowRow], list[tuple[Hashable, int]]]:
        """Empty the table: its windows in the record path's form (ascending start per key) and the unflushed
        windows in last-write order."""
        m = self.matrix
        keys = list(map(self.keys.__getitem__, m[_KID].tolist()))
        rows = list(zip(keys, m[_START].tolist(), self.accs_of(m), m[_TS].tolist(), m[_COUNT].tolist()))
        d = self.dirty
        dirty = list(zip(map(self.keys.__getitem__, d[0].tolist()), d[1].tolist()))
        self._set(m[:, :0])
        self.dirty = d[:, :0]
        self._dirty_at = None
        self.loaded.clear()
        return rows, dirty

    def rows_of(self, key: Hashable) -> list[tuple[int, Any, int, int]]:
        """One loaded key's windows as ``(start, accumulator, ts, count)``, ascending start."""
        m = self.matrix
        kid = self.ids[key]
        lo, hi = np.searchsorted(m[_KID], [kid, kid + 1]).tolist()
        part = m[:, lo:hi]
        return list(zip(part[_START].tolist(), self.accs_of(part), part[_TS].tolist(), part[_COUNT].tolist()))

    # ------------------------------------------------------------------------------------------ the batch
    def write(
        self,
        kid: np.ndarray,
        start: np.ndarray,
        ts: np.ndarray,
        count: np.ndarray,
        parts: list[np.ndarray],
        order: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Windows ``(kid[j], start[j])``, distinct and sorted by ``(kid, start)``, with the batch's values: a held
        window becomes ``(combined parts, max ts, count + count[j])``, a new one takes them. ``order`` (update
        mode): the write order, a permutation; the windows then move to the end of the last-write order in it
        (``NamedCache.dirtyKeys``: remove, then add). Checks every value before anything changes. Returns the
        created windows' ``(kid, start)``."""
        m = self.matrix
        n = len(kid)
        for p in parts:
            if n and (int(p.max()) >= _LIMIT or int(p.min()) <= -_LIMIT):
                raise BatchFallback
        hit = np.zeros(n, bool)
        pos = np.zeros(n, _I64)
        if n and m.shape[1]:
            pos, hit = self._positions(m, kid, start)
        at = pos[hit]
        combined: list[np.ndarray] = []
        for q, kind in enumerate(self._row_kinds):  # every combination before any write
            old, new = m[_HEAD + q, at], parts[q][hit]
            if kind == "min":
                combined.append(np.minimum(old, new))
            elif kind == "max":
                combined.append(np.maximum(old, new))
            else:  # a sum (a mean's too) may leave the columns' range
                c = old + new
                if len(c) and (int(c.max()) >= _LIMIT or int(c.min()) <= -_LIMIT):
                    raise BatchFallback
                combined.append(c)
        self._held_codes = None
        if len(at):
            m[_TS, at] = np.maximum(m[_TS, at], ts[hit])
            m[_COUNT, at] += count[hit]
            for q, c in enumerate(combined):
                m[_HEAD + q, at] = c
        miss = ~hit
        created_kid, created_start = kid[miss], start[miss]
        ins = pos[miss]
        if len(created_kid):
            new = np.vstack([created_kid, created_start, ts[miss], count[miss], *(p[miss] for p in parts)])
            self._set(np.insert(m, ins, new, axis=1) if m.shape[1] else new)
        if n:
            self.loaded.update(self.keys_of(kid))
        if order is not None and n:
            written = np.vstack([kid[order], start[order]])
            if self.dirty.shape[1]:
                self.dirty = self._rewrite(self.dirty, written)
                self._dirty_at = None
            else:  # where the written windows are now: each moved right by the new windows before it
                at = pos + np.cumsum(miss) - miss
                self.dirty = written
                self._dirty_at = (self._version, at[order])
        return created_kid, created_start

    def _positions(self, m: np.ndarray, kid: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the windows ``(kid, start)`` (sorted) are in ``m`` or would be inserted, and which are there.
        When every key's windows in ``m`` are consecutive advances (a key that had records at least every
        ``size``), by arithmetic on the key's first start and offset; else by a ``searchsorted`` of codes."""
        n_ids = max(len(self.keys), 1)
        counts = np.bincount(m[_KID], minlength=n_ids)
        ends = np.cumsum(counts)
        offsets = ends - counts
        has = counts > 0
        first = np.zeros(n_ids, _I64)
        last = np.zeros(n_ids, _I64)
        first[has] = m[_START, offsets[has]]
        last[has] = m[_START, ends[has] - 1]
        if np.array_equal((last - first)[has] // self.advance + 1, counts[has]):
            c = counts[kid]
            idx = (start - first[kid]) // self.advance
            hit = (idx >= 0) & (idx < c)
            return offsets[kid] + np.clip(idx, 0, c), hit
        base, width = self._coder(m[_START], start)
        held = self._codes(m[_KID], m[_START], base, width)
        want = self._codes(kid, start, base, width)
        pos = np.searchsorted(held, want)
        hit = pos < len(held)
        hit[hit] = held[pos[hit]] == want[hit]
        return pos, hit

    def _rewrite(self, dirty: np.ndarray, written: np.ndarray) -> np.ndarray:
        """``dirty`` without the windows of ``written``, then ``written`` (re-written windows move to the end)."""
        base, width = self._coder(dirty[1], written[1])
        keep = ~np.isin(self._codes(dirty[0], dirty[1], base, width), self._codes(written[0], written[1], base, width))
        return np.concatenate([dirty[:, keep], written], axis=1)

    def first_dirty_start(self) -> int | None:
        """The smallest start of an unflushed window (a purge of closed windows stops there), ``None`` if none."""
        return int(self.dirty[1].min()) if self.dirty.shape[1] else None

    def dirty_pairs(self) -> list[tuple[Hashable, int]]:
        d = self.dirty
        return list(zip(map(self.keys.__getitem__, d[0].tolist()), d[1].tolist()))

    def dirty_keys(self) -> list[Hashable]:
        """The distinct keys of the unflushed windows."""
        return self.keys_of(self.dirty[0])

    def key_column(self, kid: np.ndarray) -> list[Hashable]:
        """The key of every id in ``kid``, in order (a flush's ``key`` column)."""
        names = self._names
        if names is None or len(names) != len(self.keys):
            names = self._names = np.fromiter(self.keys, dtype=object, count=len(self.keys))
        return names[kid].tolist()

    def keys_of(self, kid: np.ndarray) -> list[Hashable]:
        """The distinct keys of the ids ``kid``, by id."""
        return list(map(self.keys.__getitem__, np.flatnonzero(np.bincount(kid, minlength=0)).tolist()))

    def take_dirty(self) -> tuple[np.ndarray, np.ndarray]:
        """Update mode's flush: the unflushed windows that are held, in last-write order, as ``(kid, columns of
        the matrix)``; the unflushed set is emptied."""
        d = self.dirty
        self.dirty = d[:, :0]
        cached, self._dirty_at = self._dirty_at, None
        if cached is not None and cached[0] == self._version:  # the matrix has not moved since the write
            cols = self._matrix[:, cached[1]]
        else:
            cols = self.gather(d[0], d[1])
        return cols[_KID], cols

    def trim(self, first_start: int | None) -> None:
        """Forget the windows whose start is below ``first_start`` (``None``: every window). Lazy: close mode
        trims once per close time, the matrix drops them when it is next read (a forgotten window is closed: no
        write or lookup asks for it before)."""
        if first_start is None:
            self._floor = None
            self._set(self._matrix[:, :0])
        else:
            self._floor = first_start if self._floor is None else max(self._floor, first_start)

    def values(self, cols: np.ndarray, names: list[str], finishers: list[Any]) -> dict[str, np.ndarray]:
        """The output values of matrix columns ``cols``, {output name: column} as
        :func:`~windowstore.columns.exact_column` makes them from the record path's values; ``finishers``: per
        part, its ``finish`` (for a mean beyond what float64 holds exactly)."""
        out: dict[str, np.ndarray] = {}
        for i, (kind, name, row) in enumerate(zip(self.kinds, names, self._value_rows, strict=True)):
            if kind != "mean":
                out[name] = cols[row] if row != _COUNT else cols[row].copy()  # (the count column is output too)
                continue
            n, s = cols[_COUNT], cols[row]
            if len(n) and int(n.min()) > 0 and int(np.abs(s).max()) < _EXACT_FLOAT and int(n.max()) < _EXACT_FLOAT:
                out[name] = s.astype(np.float64) / n.astype(np.float64)  # as Python's int / int: exact operands
            else:
                out[name] = exact_column(list(map(finishers[i], zip(n.tolist(), s.tolist(), strict=True))))
        return out

    def matrix_rows(self, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """start, ts and count of matrix columns ``cols``."""
        return cols[_START], cols[_TS], cols[_COUNT]
