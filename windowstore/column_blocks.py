"""The batch path's shared column matrices, and how a key that no batch touches stops pinning an old one.

The batch path stores every key a micro-batch touched as one int64 matrix per kind (the windows'
:attr:`Cols.stacked <windowstore.columns.Cols.stacked>` rows, the raw records' rows) and hands each key a slice of
it: a numpy view, so storing a batch costs one allocation, not one per key (``batch._store``). A view keeps its
whole matrix alive. A key that the next batches do not touch still holds the matrix of the batch that last did,
and with it every other key's old columns in that matrix, which those keys have long replaced::

    batch            1            2            3            4
    stored          [a b c d e]  [a b c e]    [a b e]      [a b c e]
    d holds          matrix 1 ----------------------------------------->   (all of it: a b c d e)
    c holds                       matrix 2 -------------->  (c: batch 4)

With keys that come back at random that is a handful of whole matrices per task (five with 5,000 keys and two
records per key and batch: P(untouched for k batches) = e^-2k), and with keys that go quiet for good it is one
matrix per batch in which a key was last seen, for as long as their windows are held.

:class:`ColumnBlocks` keeps, per stored matrix, the keys it was handed to. A matrix is looked at
:data:`FIRST_LOOK` batches after it was stored: it is forgotten when no key holds a slice of it any more (the
matrix itself is freed with its last view), and when less than half of its columns are still held, those keys'
columns are copied into one new matrix and each key gets a slice of that (looked at again later in the same
way). A matrix still mostly held is looked at again after twice the wait (at most :data:`MAX_WAIT` batches).
So the stored matrices hold at most about twice the columns the keys use, plus the last ``FIRST_LOOK`` batches'
matrices whole; each column is copied at most once per halving of its matrix, and the looks cost one check per
key of the matrix, against the batch that stored it (measured in ``bench/task_batch_bench.py``; bench/RESULTS.md).

Only where a key's columns live changes: the values, the windows and the outputs are the same, and
``tests/windowstore/test_column_blocks.py`` checks it against a store that is never compacted.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from .columns import Cols, part_kinds, set_raw
from .store import KeyWindows

__all__ = ["FIRST_LOOK", "MAX_WAIT", "ColumnBlocks"]

#: batches after storing a matrix before it is first looked at (the newest matrices are mostly held)
FIRST_LOOK = 2
#: the longest wait between two looks at a matrix that is still mostly held
MAX_WAIT = 64


class _Block:
    """One stored matrix, the keys it was handed to (``keys[i]`` held ``kws[i]`` then), which of their
    matrices it is (``raw``: the raw records', else the windows'), and when to look at it next."""

    __slots__ = ("due", "keys", "kws", "matrix", "raw", "wait")

    def __init__(
        self, matrix: np.ndarray, keys: list[Hashable], kws: list[KeyWindows], raw: bool, due: int, wait: int
    ) -> None:
        self.matrix = matrix
        self.keys = keys
        self.kws = kws
        self.raw = raw
        self.due = due
        self.wait = wait


def _held_view(kw: KeyWindows, raw: bool) -> np.ndarray | None:
    """The matrix the key's columns (``raw``: its raw records) are rows of, if the batch path holds them."""
    if raw:
        r = kw.raw
        return None if r is None else r.matrix
    c = kw.cols
    return None if c is None else c.matrix


class ColumnBlocks:
    """The matrices of one task's batch path and the keys holding slices of them (see the module docstring).

    The batch path calls :meth:`stored` for each matrix it hands out, then :meth:`look` once per batch with
    the store's keys; nothing else changes a key's columns here."""

    def __init__(self) -> None:
        self.batches = 0
        #: columns copied by compactions so far (a counter for tests and benches)
        self.copied = 0
        self._blocks: list[_Block] = []

    def stored(self, matrix: np.ndarray, keys: Sequence[Hashable], kws: Sequence[KeyWindows], raw: bool) -> None:
        """``kws[i]`` (the windows of ``keys[i]``) now holds a slice of ``matrix`` (an array that owns its data):
        of its raw records' matrix if ``raw``, else of its windows' matrix."""
        self._blocks.append(_Block(matrix, list(keys), list(kws), raw, self.batches + FIRST_LOOK, FIRST_LOOK))

    def held_bytes(self) -> int:
        """The bytes of the matrices being tracked (those not yet known to be free)."""
        return sum(b.matrix.nbytes for b in self._blocks)

    def look(self, current: Mapping[Hashable, KeyWindows]) -> None:
        """One batch has passed: look at the matrices that are due, with ``current`` the store's key -> windows
        (a key deleted or loaded anew since holds nothing of an old matrix)."""
        self.batches += 1
        kept: list[_Block] = []
        for b in self._blocks:
            if b.due > self.batches:
                kept.append(b)
                continue
            keys: list[Hashable] = []
            kws: list[KeyWindows] = []
            views: list[np.ndarray] = []
            for key, kw in zip(b.keys, b.kws):
                view = _held_view(kw, b.raw) if current.get(key) is kw else None
                if view is not None and view.base is b.matrix:
                    keys.append(key)
                    kws.append(kw)
                    views.append(view)
            if not views:
                continue  # nothing holds it: freed with its last view
            held = sum(v.shape[1] for v in views)
            if 2 * held >= b.matrix.shape[1]:  # mostly held: look again later
                b.keys, b.kws = keys, kws
                b.wait = min(2 * b.wait, MAX_WAIT)
                b.due = self.batches + b.wait
                kept.append(b)
                continue
            kept.append(self._copy(keys, kws, views, b.raw))
        self._blocks = kept

    def _copy(self, keys: list[Hashable], kws: list[KeyWindows], views: list[np.ndarray], raw: bool) -> _Block:
        """The held columns of a matrix copied into a new one, each key given its slice of it."""
        m = np.concatenate(views, axis=1)
        at = 0
        for kw, v in zip(kws, views):
            part = m[:, at : at + v.shape[1]]
            at += v.shape[1]
            if raw:
                r = kw.raw
                assert r is not None  # _held_view found its matrix
                set_raw(kw, part, part_kinds(r.cols))
            else:
                c = kw.cols
                kw.cols = Cols.of(part, c.kinds)
        self.copied += at
        return _Block(m, keys, kws, raw, self.batches + FIRST_LOOK, FIRST_LOOK)
