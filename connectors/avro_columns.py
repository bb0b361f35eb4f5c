"""Avro binary encoding of whole columns at once (numpy), for records of longs, doubles, strings and unions.

An Avro record's body is its fields' encodings back to back (Avro spec, "Binary Encoding"):

    long     zig-zag varint: (n << 1) ^ (n >> 63), 7 bits per byte, low bits first, high bit = "more follows"
    double   8 bytes, IEEE 754 little-endian
    string   long length in bytes, then the UTF-8 bytes
    union    long index of the branch (0-based, in the schema's order), then the branch's encoding

So a row is a sequence of *pieces*: a field's bytes for that row, or bytes that are the same in every row (the
Schema Registry header, a union's branch index, a per-batch constant). :func:`encode_rows` lays out all rows'
pieces in one byte buffer and cuts it into one ``bytes`` per row, a fraction of what fastavro's per-record
``schemaless_writer`` costs (``bench/changelog_encoding_bench.py``; figures in bench/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .rows import RowBlock

__all__ = ["Piece", "constant", "longs", "doubles", "strings", "encode_rows", "zigzag_varint"]

_U8 = np.uint8
_U64 = np.uint64
_I64 = np.int64


class Piece(NamedTuple):
    """One field's bytes for every row: row ``i`` is ``data[i, :lengths[i]]``.

    A constant piece has one row (``data.shape[0] == 1``) used for every row; a fixed-width piece has
    ``lengths = None`` (all ``data.shape[1]`` bytes of each row)."""

    data: np.ndarray  #: uint8, (rows, width) or (1, width)
    lengths: np.ndarray | None  #: int64 per row, or None: every row has the full width


def zigzag_varint(n: int) -> bytes:
    """Avro's encoding of one long (``-1 -> b"\\x01"``, ``1 -> b"\\x02"``, ``64 -> b"\\x80\\x01"``)."""
    z = ((n << 1) ^ (n >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def constant(data: bytes) -> Piece:
    """The same bytes in every row."""
    return Piece(np.frombuffer(data, _U8).reshape(1, len(data)), None)


def longs(values: np.ndarray) -> Piece:
    """Avro longs (zig-zag varints, 1-10 bytes) of an int64 column; the full int64 range."""
    v = np.asarray(values, _I64)
    if not len(v):
        return Piece(np.empty((0, 0), _U8), None)
    z = (v.view(_U64) << _U64(1)) ^ (v >> 63).view(_U64)
    width = _groups(int(z.max()))
    lengths = None
    if _groups(int(z.min())) != width:  # e.g. counts of 1 and 2 bytes (timestamps of one era: all 6)
        lengths = np.ones(len(v), _I64)
        for k in range(1, width):
            lengths += z >= _U64(1 << (7 * k))
    data = np.empty((len(v), width), _U8)
    for i in range(width):
        seven = (z >> _U64(7 * i)).astype(_U8) & _U8(0x7F)  # the cast keeps the low 8 bits
        if i + 1 < width:  # "more follows" where the row has a byte after this one
            seven |= _U8(0x80) if lengths is None else (lengths > i + 1).view(_U8) << _U8(7)
        data[:, i] = seven
    return Piece(data, lengths)


def _groups(z: int) -> int:
    """How many 7-bit groups the varint of ``z`` (>= 0) has."""
    return max(1, (z.bit_length() + 6) // 7)


def _unless_uniform(lengths: np.ndarray, width: int) -> np.ndarray | None:
    """``lengths``, or None when every row (or every table entry) uses the full ``width`` (e.g. timestamps of
    one era all take 6 bytes): :func:`encode_rows` then needs no mask for the piece."""
    return None if not len(lengths) or int(lengths.min()) == width else lengths


def doubles(values: np.ndarray) -> Piece:
    """Avro doubles (8 bytes little-endian) of a float64 column; NaN payloads are kept bit for bit."""
    v = np.ascontiguousarray(values, "<f8")
    return Piece(v.view(_U8).reshape(len(v), 8), None)


def strings(values: Sequence[str], row_ids: np.ndarray | None = None) -> Piece:
    """Avro strings (length + UTF-8) of a column of ``str``; each distinct value is encoded once. With
    ``row_ids`` (int64), ``values`` is a table and row ``i`` is ``values[row_ids[i]]``.

    Raises ``TypeError`` for a value that is not a ``str`` (and ``UnicodeEncodeError`` for a lone surrogate)."""
    if row_ids is None:
        ids: dict[str, int] = {}
        setdefault = ids.setdefault
        row_ids = np.fromiter((setdefault(s, len(ids)) for s in values), _I64, len(values))
        table: Sequence[str] = list(ids)
    else:
        table = values
    encoded = []
    for s in table:
        if type(s) is not str:
            raise TypeError(f"an Avro string must be a str, not {type(s).__name__}")
        b = s.encode("utf-8")
        encoded.append(zigzag_varint(len(b)) + b)
    width = max(map(len, encoded), default=0)
    padded = np.frombuffer(b"".join(e.ljust(width, b"\0") for e in encoded), _U8).reshape(len(encoded), width)
    table_lengths = np.fromiter(map(len, encoded), _I64, len(encoded))
    lengths = _unless_uniform(table_lengths, width)  # e.g. account ids of one length: no lengths
    return Piece(padded[row_ids], None if lengths is None else lengths[row_ids])


def encode_rows(n: int, pieces: Sequence[Piece]) -> RowBlock:
    """``n`` rows, each the concatenation of its bytes of every piece, in order.

    ::

        padded:  row i | piece 0 (row i) ..pad.. | piece 1 (row i) | piece 2 (row i) ..pad.. | ...
                        <------- w0 ----------->  <----- w1 ----->  <------- w2 ----------->
        used bytes, row by row:  | row 0 | row 1 | ... | row n-1 |   one buffer: the RowBlock's data

    The padded matrix starts as a template row with every constant piece in place; each other piece is then
    copied in as one field of a structured dtype (one ``V<w>`` item per row, not ``w`` byte columns). Only
    pieces whose rows differ in length (``lengths`` set) need the mask of used bytes; when there are none every
    row is ``w0 + w1 + ...`` bytes and the padded matrix already is the buffer.
    """
    if n == 0:
        return RowBlock(b"", np.empty(0, _I64))
    width = sum(p.data.shape[1] for p in pieces)
    template = np.zeros(width, _U8)
    names: list[str] = []
    offsets: list[int] = []
    formats: list[str] = []
    fills: list[np.ndarray] = []
    varying: list[tuple[str, int, np.ndarray]] = []
    at = 0
    for p in pieces:
        w = p.data.shape[1]
        if w and p.data.shape[0] == 1 and p.lengths is None:
            template[at : at + w] = p.data[0]
        elif w:
            name = f"f{len(names)}"
            names.append(name)
            offsets.append(at)
            formats.append(f"V{w}")
            fills.append(np.ascontiguousarray(p.data).view(f"V{w}").reshape(-1))  # one item per row (or 1)
            if p.lengths is not None:
                varying.append((name, w, p.lengths))
        at += w
    fields = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": width})
    padded = np.empty((n, width), _U8)
    padded[:] = template
    rows = padded.view(fields).reshape(n)
    for name, fill in zip(names, fills):
        rows[name] = fill  # a varying piece's one row is broadcast
    if not varying:
        return RowBlock.uniform(padded.tobytes(), width)
    used = np.ones((n, width), bool)
    used_rows = used.view(fields).reshape(n)
    lengths = np.full(n, width, _I64)
    for name, w, piece_lengths in varying:
        masks = (np.arange(w) < np.arange(w + 1)[:, None]).view(f"V{w}").reshape(-1)  # masks[L]: first L used
        used_rows[name] = masks[piece_lengths]
        lengths -= w - piece_lengths
    # the used bytes in row-major order are the rows back to back
    return RowBlock(padded[used].tobytes(), np.cumsum(lengths))
