"""Compact serialized forms of the window store and the processor, for external state (Spark's state store).

Two granularities, so a state backend can hold one entry per key plus one per task:

* a **key blob** - one key's windows, in one of two layouts (the first byte is the format):

  - format 1 (*entries*, a key the record path holds): ``starts``, ``max_ts`` and ``count`` as little-endian
    int64 arrays (starts delta-encoded), then the accumulators (pickled list: accumulators are plain immutable
    Python values) and, when the batch path is on, the key's raw records within retention;
  - format 2 (*columns*, a key the batch path holds as numpy columns): a header (window count, raw record
    count, one type code per aggregation part for the window column and for the raw column: absent / int64 /
    float64), then little-endian arrays ``starts``, ``max_ts``, ``count``, each present part column, raw
    ``ts`` and each present raw column. Written straight from the columns and read back as columns, so a
    batch-path key is never turned into Python entries and back just to be persisted;
* the **task meta** - everything else of the processor: observed stream time (R7), last emit close time (R27),
  store time and expiry index, pending emit-on-close windows, unflushed update-mode entries and counters.

A whole-task snapshot (:func:`dump_processor`) is the meta plus every key blob. Blobs carry a format version;
an unknown version is an error, never a silent misread. Pickle is used only for accumulator values produced by
this process's own aggregations; never load state from an untrusted source.
"""

from __future__ import annotations

import pickle
import struct
from array import array
from collections.abc import Hashable, Iterable
from dataclasses import fields
from typing import Any

import numpy as np

from .aggregations import Aggregation, Composite
from .columns import Cols, batch_plan, materialize, set_raw
from .pending import PendingWindows
from .state import EngineState
from .store import KeyWindows, RawRecords
from .updates import ProcessorStats

__all__ = [
    "StateFormatError",
    "apply_meta",
    "decode_key_windows",
    "dump_processor",
    "encode_key_windows",
    "encode_meta",
    "entries_from_columns",
    "load_processor_state",
]

KEY_FORMAT = 1
KEY_FORMAT_COLUMNS = 2
META_FORMAT = 1
SNAPSHOT_FORMAT = 1
_HEADER = struct.Struct("<BI")  # format version, number of windows
_COLUMNS_HEADER = struct.Struct("<BIIB")  # format 2, number of windows, number of raw records, number of parts
_NO_COLUMN, _INT64, _FLOAT64 = 0, 1, 2
_DTYPES = {_INT64: "<i8", _FLOAT64: "<f8"}
_LITTLE = array("q", [1]).tobytes()[0] == 1


class StateFormatError(ValueError):
    """Serialized state that this version cannot read."""


def _int64_bytes(values: Iterable[int]) -> bytes:
    a = array("q", values)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        a.byteswap()
    return a.tobytes()


def _int64_array(data: bytes | memoryview) -> array:
    a = array("q")
    a.frombytes(data)
    if not _LITTLE:  # pragma: no cover
        a.byteswap()
    return a


def _type_code(col: Any) -> int:
    if col is None:
        return _NO_COLUMN
    kind = col.dtype.kind
    if kind in "iu":
        return _INT64
    if kind == "f":
        return _FLOAT64
    raise StateFormatError(f"cannot store a column of dtype {col.dtype}")


def _column_dtypes(codes: bytes, parts: int) -> list[str]:
    """Little-endian dtypes of a format-2 blob's arrays, in order (see :func:`_encode_columns`)."""
    i64 = _DTYPES[_INT64]
    return [i64] * 3 + [_DTYPES[x] for x in codes[:parts] if x] + [i64] + [_DTYPES[x] for x in codes[parts:] if x]


def _encode_columns(kw: KeyWindows) -> bytes:
    """Format 2: a batch-path key's numpy columns as they are (see the module docstring)."""
    c = kw.cols
    parts = list(c.parts)
    raw = kw.raw
    if raw is None:
        raise StateFormatError(f"{len(parts)} window columns but no raw records")
    raw_cols = list(raw.cols)
    if len(raw_cols) != len(parts):
        raise StateFormatError(f"{len(parts)} window columns but {len(raw_cols)} raw columns")
    codes = bytes([_type_code(x) for x in parts] + [_type_code(x) for x in raw_cols])
    arrays = [
        c.starts,
        c.ts,
        c.counts,
        *(x for x in parts if x is not None),
        raw.ts,
        *(x for x in raw_cols if x is not None),
    ]
    chunks = [_COLUMNS_HEADER.pack(KEY_FORMAT_COLUMNS, len(c.starts), len(raw.ts), len(parts)), codes]
    chunks.extend(a.astype(t, copy=False).tobytes() for a, t in zip(arrays, _column_dtypes(codes, len(parts))))
    return b"".join(chunks)


def _decode_columns(data: bytes) -> KeyWindows:
    """Inverse of :func:`_encode_columns`: a key held as columns (writable arrays)."""
    if len(data) < _COLUMNS_HEADER.size:
        raise StateFormatError("key state blob is truncated")
    _version, n, m, p = _COLUMNS_HEADER.unpack_from(data)
    off = _COLUMNS_HEADER.size
    codes = bytes(data[off : off + 2 * p])
    off += 2 * p
    if len(codes) != 2 * p or any(x not in (_NO_COLUMN, _INT64, _FLOAT64) for x in codes):
        raise StateFormatError("key state blob has unknown column types")
    widths = [n, n, n] + [n for x in codes[:p] if x] + [m] + [m for x in codes[p:] if x]
    if len(data) != off + 8 * sum(widths):
        raise StateFormatError("key state blob has the wrong length")
    # one copy of all the arrays (aligned and writable): the windows' rows, then the raw records' rows, each
    # a matrix as the batch path holds them (Cols.stacked, raw_matrix); float64 columns are reinterpreted
    words = np.frombuffer(data, dtype="<i8", count=sum(widths), offset=off).copy()
    kinds = tuple(None if x == _NO_COLUMN else ("f" if x == _FLOAT64 else "i") for x in codes)
    rows = 3 + sum(x != _NO_COLUMN for x in codes[:p])
    kw = KeyWindows()
    kw.cols = Cols.of(words[: rows * n].reshape(rows, n), kinds[:p])
    set_raw(kw, words[rows * n :].reshape(1 + sum(x != _NO_COLUMN for x in codes[p:]), m), kinds[p:])
    return kw


def encode_key_windows(kw: KeyWindows) -> bytes:
    """One key's windows as bytes (see the module docstring): format 2 for a key held as columns, else 1."""
    if kw.cols is not None:
        return _encode_columns(kw)
    starts = kw.starts
    n = len(starts)
    entries = kw.entries
    raw = kw.raw
    deltas = [starts[0]] + [starts[i] - starts[i - 1] for i in range(1, n)] if n else []
    rows = [entries[s] for s in starts]
    return b"".join(
        (
            _HEADER.pack(KEY_FORMAT, n),
            _int64_bytes(deltas),
            _int64_bytes(r[1] for r in rows),
            _int64_bytes(r[2] for r in rows),
            pickle.dumps(
                ([r[0] for r in rows], None if raw is None else raw.ts, None if raw is None else raw.cols), protocol=5
            ),
        )
    )


def decode_key_windows(data: bytes) -> KeyWindows:
    """Inverse of :func:`encode_key_windows`."""
    view = memoryview(data)
    if len(view) < _HEADER.size:
        raise StateFormatError("key state blob is truncated")
    version, n = _HEADER.unpack_from(view)
    if version == KEY_FORMAT_COLUMNS:
        return _decode_columns(data)
    if version != KEY_FORMAT:
        raise StateFormatError(
            f"key state format {version} is not supported (expected {KEY_FORMAT} or {KEY_FORMAT_COLUMNS})"
        )
    off = _HEADER.size
    width = 8 * n
    if len(view) < off + 3 * width:
        raise StateFormatError("key state blob is truncated")
    deltas = _int64_array(view[off : off + width])
    max_ts = _int64_array(view[off + width : off + 2 * width])
    counts = _int64_array(view[off + 2 * width : off + 3 * width])
    accs, raw_ts, raw_cols = pickle.loads(view[off + 3 * width :])
    if len(accs) != n:
        raise StateFormatError(f"key state blob holds {len(accs)} aggregates for {n} windows")
    kw = KeyWindows()
    if raw_ts is not None:
        kw.raw = RawRecords(raw_ts, raw_cols)
    s = 0
    starts = kw.starts
    entries = kw.entries
    for i in range(n):
        s += deltas[i]
        starts.append(s)
        entries[s] = [accs[i], max_ts[i], counts[i]]
    return kw


def entries_from_columns(kw: KeyWindows, aggregation: Aggregation) -> None:
    """Turn a key read as columns (format 2) into entries, for a processor without the batch path."""
    plan = batch_plan(aggregation)
    if plan is None:
        raise StateFormatError("columnar key state was written for an aggregation this processor does not have")
    materialize(kw, plan, isinstance(aggregation, Composite))


def encode_meta(state: EngineState, unflushed: dict[tuple[Hashable, int], Any]) -> bytes:
    """The task meta of an engine state (everything but the key blobs); ``unflushed``: its unflushed writes,
    last write last (``output.unflushed``). Reads only: the state is left as it is."""
    store = state.store
    meta = {
        "format": META_FORMAT,
        "td": state.td,
        "grace": state.grace,
        "emit": state.emit.value,
        "observed_stream_time": state.observed_stream_time,
        "last_emit_close_time": state.last_emit_close_time,
        "store_time": store.store_time,
        "key_max_start": store.key_max_start,
        "expired": store.expired,
        "pending_close": state.pending_close.to_state(),
        "unflushed": unflushed,
        "flagged_keys": state.flagged_keys,
        "stats": [getattr(state.stats, f.name) for f in fields(ProcessorStats)],
    }
    return pickle.dumps(meta, protocol=5)


def apply_meta(state: EngineState, data: bytes) -> dict[tuple[Hashable, int], Any]:
    """Restore :func:`encode_meta` output into a fresh engine state of the same definition; returns the
    unflushed writes it held (the caller puts them back into its record cache)."""
    meta: dict[str, Any] = pickle.loads(data)
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        raise StateFormatError(
            f"task meta format {meta.get('format') if isinstance(meta, dict) else '?'} is not supported"
        )
    for name, expected in (("td", state.td), ("grace", state.grace), ("emit", state.emit.value)):
        if meta[name] != expected:
            raise StateFormatError(
                f"state was written with {name}={meta[name]!r} but the processor has {name}={expected!r}; "
                "use a new checkpoint for a new window definition"
            )
    state.observed_stream_time = meta["observed_stream_time"]
    state.last_emit_close_time = meta["last_emit_close_time"]
    store = state.store
    store.store_time = meta["store_time"]
    store.key_max_start = dict(meta["key_max_start"])
    store.expired = meta["expired"]
    state.pending_close = PendingWindows.from_state(meta["pending_close"])
    state.flagged_keys = set(meta["flagged_keys"])
    for f, value in zip(fields(ProcessorStats), meta["stats"]):
        setattr(state.stats, f.name, value)
    return dict(meta["unflushed"])


def dump_processor(state: EngineState, unflushed: dict[tuple[Hashable, int], Any]) -> bytes:
    """A whole-task snapshot: meta plus every key's windows."""
    store = state.store
    keys: dict[Hashable, bytes] = {}
    for key in store.key_max_start:
        kw = store.load(key)
        if kw is not None and kw.starts:
            keys[key] = encode_key_windows(kw)
    return pickle.dumps({"format": SNAPSHOT_FORMAT, "meta": encode_meta(state, unflushed), "keys": keys}, protocol=5)


def load_processor_state(state: EngineState, data: bytes) -> dict[tuple[Hashable, int], Any]:
    """Restore a :func:`dump_processor` snapshot into a fresh engine state; returns the unflushed writes (see
    :func:`apply_meta`)."""
    snap = pickle.loads(data)
    if not isinstance(snap, dict) or snap.get("format") != SNAPSHOT_FORMAT:
        raise StateFormatError("task snapshot format is not supported")
    unflushed = apply_meta(state, snap["meta"])
    store = state.store
    for key, blob in snap["keys"].items():
        kw = decode_key_windows(blob)
        store.keys[key] = kw
        store.size += len(kw)
    return unflushed
