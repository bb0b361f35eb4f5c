"""Encoded output rows back to back in one buffer: what the changelog encoder makes and the producer sends.

::

    data:  | row 0 bytes | row 1 bytes |   ...   | row n-1 bytes |
    ends:                e0            e1   ...                   e(n-1) = len(data)

    row i = data[start(i) : ends[i]]   with start(0) = 0, start(i) = ends[i-1]   (end exclusive)

A :class:`RowBlock` is a read-only ``Sequence[bytes]``: indexing or iterating cuts the rows out (one ``bytes``
object each), while :mod:`connectors.rdkafka_batch` hands the buffer and the offsets to librdkafka without
making any per-row Python object. Rows cannot be null (a column of Kafka values with nulls is a block and a mask:
:meth:`RowBlock.of_values`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

__all__ = ["RowBlock"]


class RowBlock(Sequence[bytes]):
    """``len(ends)`` rows in ``data`` (see the module's diagram); equal to any sequence of the same rows."""

    __slots__ = ("data", "ends")

    def __init__(self, data: bytes, ends: np.ndarray) -> None:
        self.data = data
        self.ends = np.asarray(ends, dtype=np.int64)
        if len(self.ends) and int(self.ends[-1]) != len(data):
            raise ValueError(f"the last row ends at {int(self.ends[-1])}, the data has {len(data)} bytes")

    @classmethod
    def uniform(cls, data: bytes, width: int) -> RowBlock:
        """Rows of ``width`` bytes each (``len(data)`` a multiple of it)."""
        if width <= 0 or len(data) % width:
            raise ValueError(f"{len(data)} bytes are not rows of {width}")
        return cls(data, np.arange(width, len(data) + 1, width, dtype=np.int64))

    @classmethod
    def of(cls, rows: Sequence[bytes | None]) -> RowBlock | None:
        """``rows`` as a block (itself if it is one); ``None`` when a row is null (a block cannot hold it)."""
        if isinstance(rows, RowBlock):
            return rows
        present = [r for r in rows if r is not None]
        if len(present) != len(rows):
            return None
        lengths = np.fromiter(map(len, present), dtype=np.int64, count=len(present))
        return cls(b"".join(present), np.cumsum(lengths))

    @classmethod
    def of_values(cls, rows: Sequence[bytes | None]) -> tuple[RowBlock, np.ndarray | None]:
        """``rows`` as a block with each null row empty, and which rows are null (a bool mask; ``None`` when none
        is): Kafka values, where a null is a tombstone (:meth:`connectors.rdkafka_batch.BatchProducer.send`)."""
        block = cls.of(rows)
        if block is not None:
            return block, None
        nulls = np.fromiter((r is None for r in rows), dtype=bool, count=len(rows))
        block = cls.of([b"" if r is None else r for r in rows])
        assert block is not None  # no null row left
        return block, nulls

    def starts(self) -> np.ndarray:
        """Where each row begins (int64)."""
        s = np.empty(len(self.ends), np.int64)
        if len(s):
            s[0] = 0
            s[1:] = self.ends[:-1]
        return s

    def lengths(self) -> np.ndarray:
        """Each row's length in bytes (int64)."""
        return self.ends - self.starts()

    def __len__(self) -> int:
        return len(self.ends)

    @overload
    def __getitem__(self, i: int) -> bytes: ...

    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self.tolist()[i]
        n = len(self.ends)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("row index out of range")
        return self.data[int(self.ends[i - 1]) if i else 0 : int(self.ends[i])]

    def tolist(self) -> list[bytes]:
        d = self.data
        ends = self.ends.tolist()
        return [d[a:b] for a, b in zip([0, *ends[:-1]], ends)]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RowBlock):
            return self.data == other.data and np.array_equal(self.ends, other.ends)
        if isinstance(other, Sequence) and not isinstance(other, (bytes, str)):
            return self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowBlock({len(self)} rows, {len(self.data)} bytes)"
