"""Output record encoding: changelog (window updates), late records and dead letters.

Changelog record (one per window update)
    key    identifies the window, so a compacted topic keeps the last value of each window:
           ``avro``      ``{"key": string, "window_start": long, "window_end": long}`` (Schema Registry wire format,
                         subject ``<topic>-key``)
           ``json``      ``{"key":"acct-1","window_start":1000,"window_end":61000}`` (fixed field order, no spaces)
           ``windowed``  Kafka Streams' ``TimeWindowedSerializer`` layout (``WindowKeySchema.toBinary``): UTF-8 key
                         bytes + 8-byte big-endian window start. ``WindowedSerdes.timeWindowedSerdeFrom(String.class,
                         size)`` reads it, with size = the time difference (sliding) or window_size (tumbling,
                         hopping): its deserializer makes the window ``[start, start + size)``. Session windows:
                         ``SessionWindowedSerializer``'s, UTF-8 key bytes + 8-byte big-endian session end + 8-byte
                         big-endian session start (``SessionKeySchema.toBinary``; read with
                         ``WindowedSerdes.sessionWindowedSerdeFrom(String.class)``)
           ``string``    ``acct-1|1000|61000``
           A session's ``window_start`` / ``window_end`` are its first and last record timestamps, both inclusive.
    value  ``avro`` (subject ``<topic>-value``) or ``json``::

             {"key": "acct-1", "window_start": 1000, "window_end": 61000,
              "record_count": 3, "max_timestamp": 60500, "emit_time": 1732200000123,
              "aggregates": {"count": 3, "sum_amount": 4200, "max_amount": 2000}}

           ``window_start`` / ``window_end`` are Kafka Streams' ``Window.start()`` / ``Window.end()`` of the window
           type: sliding windows (KIP-450) hold both ends, ``[start, start + time difference]``; tumbling and hopping
           windows (``TimeWindow``) hold the start but not the end, ``[start, start + window_size)`` - a record at
           exactly ``window_end`` is in the next window. ``record_count`` = records folded into the window,
           ``max_timestamp`` = largest record timestamp in it (Kafka Streams' window timestamp, R5 / T6),
           ``emit_time`` = wall clock (epoch ms) of the micro-batch that emitted it.

           Session windows: a session that a merge or an extension replaced (``windowstore.is_tombstone``: count 0)
           is a record with the session's key and a null value, a Kafka tombstone, whatever the value format - so
           a compacted changelog converges to the live sessions only.

Late record / dead letter: the original key and value bytes, with headers (UTF-8 values):
    late          ``reason=late``, ``topic``, ``partition``, ``offset``, ``timestamp`` (event time),
                  ``stream_time`` (the task's stream time when it was dropped)
    dead letter   ``error`` (reason code, see :mod:`connectors.serde`), ``error.message``, ``topic``,
                  ``partition``, ``offset``, ``timestamp`` (Kafka record timestamp); and the same facts under
                  Kafka Streams' KIP-1034 names (``ExceptionHandlerUtils``), so its dead-letter tools read ours:
                  ``__streams.errors.exception`` (an exception class name), ``__streams.errors.message``,
                  ``__streams.errors.stacktrace`` (processing errors only), ``__streams.errors.topic``,
                  ``__streams.errors.partition``, ``__streams.errors.offset``
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastavro import parse_schema, schemaless_writer

from windowstore.aggregations import parse_aggregation_specs

from . import avro_columns
from .avro import frame
from .rows import RowBlock

__all__ = [
    "KEY_FORMATS",
    "VALUE_FORMATS",
    "ChangelogSpec",
    "ChangelogEncoder",
    "changelog_key_schema",
    "changelog_value_schema",
    "windowed_key",
    "parse_windowed_key",
    "session_windowed_key",
    "parse_session_windowed_key",
    "aggregate_types",
    "dead_letter_headers",
    "KIP1034_HEADERS",
]

#: Kafka Streams' dead-letter header names (KIP-1034): exception, message, stacktrace, topic, partition, offset.
#: Checked against kafka-streams 4.2.2 (and 4.2.0, KIP-1034's first release; 4.1.1 has no such class): the
#: constants HEADER_ERRORS_EXCEPTION_NAME, _EXCEPTION_MESSAGE_NAME, _STACKTRACE_NAME, _TOPIC_NAME, _PARTITION_NAME,
#: _OFFSET_NAME of ``org.apache.kafka.streams.errors.internals.ExceptionHandlerUtils``, read from the jar with
#: ``javap -constants``; tests/conformance/test_kip1034_headers.py repeats the check.
KIP1034_HEADERS = (
    "__streams.errors.exception",
    "__streams.errors.message",
    "__streams.errors.stacktrace",
    "__streams.errors.topic",
    "__streams.errors.partition",
    "__streams.errors.offset",
)
#: the exception class named in ``__streams.errors.exception`` for a record the decoder rejects: what Kafka
#: Streams' deserialization handlers see for an undecodable record
_DECODE_EXCEPTION = b"org.apache.kafka.common.errors.SerializationException"


def _text(v: Any) -> bytes:
    return str(v).encode("utf-8", "replace")


def dead_letter_headers(
    reason: str,
    message: str,
    topic: str,
    partition: int,
    offset: int,
    timestamp: Any,
    exception: str = "",
    stacktrace: str = "",
) -> list[tuple[str, bytes]]:
    """A dead letter's headers: ours (``error``, ``error.message``, ``topic``, ``partition``, ``offset``,
    ``timestamp``; ``timestamp`` empty when the record has none), then KIP-1034's. ``exception``: the class
    name of the exception that made it a dead letter (default: a decoding failure's); ``stacktrace``: its
    trace, when there is one."""
    msg = message.encode("utf-8", "replace")[:2000]
    exc = exception.encode("utf-8", "replace") if exception else _DECODE_EXCEPTION
    topic_b, partition_b, offset_b = _text(topic), _text(partition), _text(offset)
    headers = [
        ("error", reason.encode()),
        ("error.message", msg),
        ("topic", topic_b),
        ("partition", partition_b),
        ("offset", offset_b),
        ("timestamp", _text(timestamp if timestamp is not None else "")),
        (KIP1034_HEADERS[0], exc),
        (KIP1034_HEADERS[1], f"{reason}: ".encode() + msg),
    ]
    if stacktrace:
        headers.append((KIP1034_HEADERS[2], stacktrace.encode("utf-8", "replace")[-8000:]))
    headers += [(KIP1034_HEADERS[3], topic_b), (KIP1034_HEADERS[4], partition_b), (KIP1034_HEADERS[5], offset_b)]
    return headers


KEY_FORMATS = ("avro", "json", "windowed", "string")
VALUE_FORMATS = ("avro", "json")
_START = struct.Struct(">q")
_END_START = struct.Struct(">qq")

_NUMBER = ["null", "long", "double"]

#: the union branch a ``sum`` of integers beyond int64 is written in, exactly (issue 29.2): an Avro decimal of
#: scale 0. Precision 38 holds every such sum: each summed integer is within int64 (the decoder dead-letters
#: others as ``number-out-of-range``) and a window holds fewer than 2**63 records, so ``|sum| < 2**126 < 10**38``.
EXACT_INT = {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0}


def windowed_key(key: str, start: int) -> bytes:
    """Kafka Streams ``TimeWindowedSerializer`` bytes: ``key`` UTF-8 + 8-byte big-endian start."""
    return key.encode("utf-8") + _START.pack(start)


def parse_windowed_key(data: bytes) -> tuple[str, int]:
    return data[:-8].decode("utf-8"), _START.unpack(data[-8:])[0]


def session_windowed_key(key: str, start: int, end: int) -> bytes:
    """Kafka Streams ``SessionWindowedSerializer`` bytes (``SessionKeySchema.toBinary``): ``key`` UTF-8 + 8-byte
    big-endian session end + 8-byte big-endian session start."""
    return key.encode("utf-8") + _END_START.pack(end, start)


def parse_session_windowed_key(data: bytes) -> tuple[str, int, int]:
    """Inverse of :func:`session_windowed_key`: ``(key, start, end)``."""
    end, start = _END_START.unpack(data[-16:])
    return data[:-16].decode("utf-8"), start, end


def aggregate_types(spec: str) -> list[tuple[str, Any]]:
    """Output name and Avro type of each aggregation in ``spec`` (names as ``windowstore`` reports them; the spec
    is parsed by :func:`windowstore.parse_aggregation_specs`, with its errors for an invalid one)."""
    out = []
    for part in parse_aggregation_specs(spec):
        kind = part.kind
        if kind == "count":
            t: Any = "long"
        elif kind in ("mean", "variance", "stddev"):
            t = ["null", "double"]
        elif kind == "collect":
            t = {"type": "array", "items": ["null", "long", "double", "string", "boolean"]}
        elif kind == "sum":  # an integer sum stays an integer; beyond int64 it is the exact decimal
            t = [*_NUMBER, EXACT_INT]
        else:  # min, max, first, last (every other kind parse_aggregation_specs admits): an integer stays one
            t = [*_NUMBER, "string", "boolean"]
        out.append((part.name, t))
    return out


def changelog_key_schema() -> dict[str, Any]:
    return {
        "type": "record",
        "name": "WindowKey",
        "namespace": "slidingwindow",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "window_start", "type": "long"},
            {"name": "window_end", "type": "long"},
        ],
    }


#: the value schema's ``doc`` per window type: what ``window_start`` and ``window_end`` mean
_WINDOW_DOCS = {
    "sliding": "One sliding-window update (Kafka Streams SlidingWindows, both window ends inclusive).",
    "tumbling": "One tumbling-window update (Kafka Streams TimeWindows): window_start inclusive, window_end exclusive.",
    "hopping": "One hopping-window update (Kafka Streams TimeWindows): window_start inclusive, window_end exclusive.",
    "session": "One session-window update (Kafka Streams SessionWindows, both window ends inclusive).",
}


def changelog_value_schema(aggregations: str, window: str = "sliding") -> dict[str, Any]:
    """The changelog value's Avro schema for ``aggregations`` over windows of type ``window`` (its ``doc`` says
    what the window bounds mean; the fields are the same for every type)."""
    return {
        "type": "record",
        "name": "WindowUpdate",
        "namespace": "slidingwindow",
        "doc": _WINDOW_DOCS[window],
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "window_start", "type": "long"},
            {"name": "window_end", "type": "long"},
            {"name": "record_count", "type": "long"},
            {"name": "max_timestamp", "type": "long"},
            {"name": "emit_time", "type": "long"},
            {
                "name": "aggregates",
                "type": {
                    "type": "record",
                    "name": "Aggregates",
                    "fields": [{"name": n, "type": t} for n, t in aggregate_types(aggregations)],
                },
            },
        ],
    }


#: the most JSON key texts a changelog encoder keeps between batches (:meth:`ChangelogEncoder._json_keys`)
JSON_KEYS_KEPT = 200_000


@dataclass(frozen=True)
class ChangelogSpec:
    """How to encode changelog records (picklable; schema ids are registered on the driver)."""

    key_format: str = "json"
    value_format: str = "json"
    aggregations: str = "count"
    key_schema_id: int | None = None
    value_schema_id: int | None = None
    #: the window type of the updates (``sliding``, ``tumbling``, ``hopping``, ``session``): the ``windowed`` key
    #: layout, the value schema's doc, and for ``session`` the replaced sessions' tombstones (null values)
    window: str = "sliding"


class ChangelogEncoder:
    """Encodes :class:`windowstore.WindowUpdate` lists to ``(keys, values)`` byte lists."""

    def __init__(self, spec: ChangelogSpec) -> None:
        if spec.key_format not in KEY_FORMATS:
            raise ValueError(f"unknown changelog key format {spec.key_format!r}")
        if spec.value_format not in VALUE_FORMATS:
            raise ValueError(f"unknown changelog value format {spec.value_format!r}")
        if spec.key_format == "avro" and spec.key_schema_id is None:
            raise ValueError("avro changelog keys need a registered key schema id")
        if spec.value_format == "avro" and spec.value_schema_id is None:
            raise ValueError("avro changelog values need a registered value schema id")
        self.spec = spec
        self._session = spec.window == "session"
        self._json_key_texts: dict[str, bytes] = {}  # _json_keys
        self._types = aggregate_types(spec.aggregations)
        self._names = [n for n, _ in self._types]
        #: the aggregates whose Avro type holds integers beyond int64 exactly (``sum``: :data:`EXACT_INT`)
        self._exact = frozenset(n for n, t in self._types if isinstance(t, list) and EXACT_INT in t)
        self._single = len(self._names) == 1
        self._key_schema = parse_schema(changelog_key_schema())
        self._value_schema = parse_schema(changelog_value_schema(spec.aggregations, spec.window))
        self._key_frame = frame(spec.key_schema_id) if spec.key_schema_id is not None else b""
        self._value_frame = frame(spec.value_schema_id) if spec.value_schema_id is not None else b""

    def aggregates(self, value: Any) -> dict[str, Any]:
        """The ``aggregates`` dict of a finished window value (a dict for several aggregations)."""
        if self._single:
            return {self._names[0]: value}
        return value

    def key(self, key: str, start: int, end: int) -> bytes:
        fmt = self.spec.key_format
        if fmt == "windowed":
            return session_windowed_key(key, start, end) if self._session else windowed_key(key, start)
        if fmt == "json":
            return json.dumps(
                {"key": key, "window_start": start, "window_end": end}, separators=(",", ":"), ensure_ascii=False
            ).encode("utf-8")
        if fmt == "string":
            return f"{key}|{start}|{end}".encode()
        buf = io.BytesIO()
        buf.write(self._key_frame)
        schemaless_writer(buf, self._key_schema, {"key": key, "window_start": start, "window_end": end})
        return buf.getvalue()

    def value(self, key: str, start: int, end: int, value: Any, max_ts: int, count: int, emit_time: int) -> bytes:
        record = {
            "key": key,
            "window_start": start,
            "window_end": end,
            "record_count": count,
            "max_timestamp": max_ts,
            "emit_time": emit_time,
            "aggregates": self.aggregates(value),
        }
        if self.spec.value_format == "json":
            return json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=_json_default).encode("utf-8")
        buf = io.BytesIO()
        buf.write(self._value_frame)
        schemaless_writer(buf, self._value_schema, _avro_safe(record, self._exact))
        return buf.getvalue()

    def encode(self, updates: Sequence[Any], emit_time: int) -> tuple[Sequence[bytes], Sequence[bytes | None]]:
        """``(keys, values)`` for a list of ``WindowUpdate(key, start, end, value, ts, count)``; a session
        tombstone's value is ``None``."""
        if not updates:
            return [], []
        names = self._names
        if self._single:
            values = {names[0]: [u[3] for u in updates]}
        else:
            values = {n: [None if u[3] is None else u[3][n] for u in updates] for n in names}  # None: a tombstone
        cols = {
            "key": [u[0] for u in updates],
            "start": [u[1] for u in updates],
            "end": [u[2] for u in updates],
            "ts": [u[4] for u in updates],
            "count": [u[5] for u in updates],
            "values": values,
        }
        return self.encode_columns(cols, emit_time)

    def encode_columns(self, cols: dict[str, Any], emit_time: int) -> tuple[Sequence[bytes], Sequence[bytes | None]]:
        """``(keys, values)``, each a :class:`~connectors.rows.RowBlock` or a list, for columns ``key`` (list),
        ``start``, ``end``, ``ts``, ``count`` (lists or int64 arrays) and ``values`` {aggregation output name: list
        or array} (see ``flush_columns``). Session windows: a row with ``count`` 0 is a tombstone (value ``None``)."""
        keys = cols["key"]
        if not len(keys):
            return [], []
        if self._session:
            tombstones = np.asarray(cols["count"]) == 0
            if tombstones.any():
                return self._with_tombstones(cols, emit_time, tombstones)
        avro_keys = avro_values = None
        if "avro" in (self.spec.key_format, self.spec.value_format):
            key_piece = self._avro_key_piece(keys, cols.get("key_table"), cols.get("key_id"))
            start, end = _int64(cols["start"]), _int64(cols["end"])
            if key_piece is not None and start is not None and end is not None:
                # the pieces both the Avro key and the Avro value begin with: key, window start, window end
                window = [key_piece, avro_columns.longs(start), avro_columns.longs(end)]
                if self.spec.key_format == "avro":
                    avro_keys = avro_columns.encode_rows(len(start), [avro_columns.constant(self._key_frame), *window])
                if self.spec.value_format == "avro":
                    avro_values = self._avro_values(cols, window, emit_time)
        if avro_keys is not None and avro_values is not None:
            return avro_keys, avro_values
        starts = _tolist(cols["start"])
        ends = _tolist(cols["end"])
        tss = _tolist(cols["ts"])
        counts = _tolist(cols["count"])
        raw_aggs = [cols["values"][n] for n in self._names]
        kfmt = self.spec.key_format
        vjson = self.spec.value_format == "json"
        jk = self._json_keys(keys) if kfmt == "json" or vjson else None
        out_keys = avro_keys if avro_keys is not None else self._keys(keys, starts, ends, jk)

        out_values: Sequence[bytes]
        if vjson:
            assert jk is not None  # made above for a JSON value
            # one %-template per row; integer aggregates go in as %d (== str(int)), anything else as its JSON text
            specs, agg_cols = [], []
            for col in raw_aggs:
                if _all_ints(col):
                    specs.append("%d")
                    agg_cols.append(_tolist(col))
                else:
                    specs.append("%s")
                    agg_cols.append(_json_value_bytes(_tolist(col)))
            aggregates = ",".join(json.dumps(n).replace("%", "%%") + ":" + spec for n, spec in zip(self._names, specs))
            template = (
                '{"key":%s,"window_start":%d,"window_end":%d,"record_count":%d,"max_timestamp":%d,'
                f'"emit_time":{int(emit_time)},"aggregates":{{{aggregates}}}}}'
            )
            out_values = _encode_rows(template, zip(jk, starts, ends, counts, tss, *agg_cols))
        elif avro_values is not None:
            out_values = avro_values
        else:
            aggs = [_tolist(a) for a in raw_aggs]
            names = self._names
            row_values: list[bytes] = []
            vf = self.value
            for i, (k, s, e, c, t) in enumerate(zip(keys, starts, ends, counts, tss)):
                if self._single:
                    v = aggs[0][i]
                else:
                    v = {n: a[i] for n, a in zip(names, aggs)}
                row_values.append(vf(k, s, e, v, t, c, emit_time))
            out_values = row_values
        return out_keys, out_values

    def _json_keys(self, keys: Sequence[str]) -> list[bytes]:
        """JSON text of each key as UTF-8 bytes. The texts are kept from batch to batch (a task's keys recur),
        at most :data:`JSON_KEYS_KEPT` of them (then the store starts over)."""
        cache = self._json_key_texts
        new = set(keys).difference(cache)
        if new:
            if len(cache) + len(new) > JSON_KEYS_KEPT:
                cache = self._json_key_texts = {}
                new = set(keys)
            dumps = json.dumps
            for k in new:
                cache[k] = dumps(k, ensure_ascii=False).encode("utf-8")
        return list(map(cache.__getitem__, keys))

    def _keys(
        self, keys: Sequence[str], starts: list[int], ends: list[int], jk: list[bytes] | None = None
    ) -> list[bytes]:
        """The keys of rows, a column at a time where the format allows (``jk``: the keys' JSON texts, if made)."""
        kfmt = self.spec.key_format
        if kfmt == "windowed":
            kcache = {k: k.encode("utf-8") for k in set(keys)}
            if self._session:
                pack2 = _END_START.pack
                return [kcache[k] + pack2(e, s) for k, s, e in zip(keys, starts, ends)]
            pack = _START.pack
            return [kcache[k] + pack(s) for k, s in zip(keys, starts)]
        if kfmt == "json":
            jk = self._json_keys(keys) if jk is None else jk
            return _encode_rows('{"key":%s,"window_start":%d,"window_end":%d}', zip(jk, starts, ends))
        if kfmt == "string":
            return [f"{k}|{s}|{e}".encode() for k, s, e in zip(keys, starts, ends)]
        return [self.key(k, s, e) for k, s, e in zip(keys, starts, ends)]

    def _with_tombstones(
        self, cols: dict[str, Any], emit_time: int, tombstones: np.ndarray
    ) -> tuple[list[bytes], list[bytes | None]]:
        """Session windows: the live rows encoded as usual, the tombstone rows as their key and a null value, in
        row order."""
        live = np.flatnonzero(~tombstones)
        sub = {
            "key": _take(cols["key"], live),
            **{c: _take(cols[c], live) for c in ("start", "end", "ts", "count")},
            "values": {n: _take(col, live) for n, col in cols["values"].items()},
        }
        live_keys, live_values = self.encode_columns(sub, emit_time) if len(live) else ([], [])
        dead = np.flatnonzero(tombstones)
        dead_keys = self._keys(
            _take(cols["key"], dead), _tolist(_take(cols["start"], dead)), _tolist(_take(cols["end"], dead))
        )
        out_keys: list[bytes] = [b""] * len(tombstones)
        out_values: list[bytes | None] = [None] * len(tombstones)
        for i, k, v in zip(live.tolist(), live_keys, live_values):
            out_keys[i] = k
            out_values[i] = v
        for i, k in zip(dead.tolist(), dead_keys):
            out_keys[i] = k
        return out_keys, out_values

    @staticmethod
    def _avro_key_piece(
        keys: Sequence[Any], table: Sequence[Any] | None = None, ids: Any = None
    ) -> avro_columns.Piece | None:
        try:
            if table is not None and ids is not None:  # the distinct keys and each row's index into them
                return avro_columns.strings(table, np.asarray(ids, np.int64))
            return avro_columns.strings(keys)
        except (TypeError, UnicodeError):
            return None

    def _avro_values(self, cols: dict[str, Any], window: list[avro_columns.Piece], emit_time: int) -> RowBlock | None:
        """Avro values of all rows at once (:mod:`connectors.avro_columns`) after the ``window`` pieces (key,
        start, end): integer columns as longs, float columns as doubles, each aggregate in the union branch
        fastavro would pick for it. ``None`` when a column does not fit (the caller then encodes row by row
        with fastavro, which gives the same bytes or the error)."""
        count, ts = _int64(cols["count"]), _int64(cols["ts"])
        if count is None or ts is None:
            return None
        pieces = [
            avro_columns.constant(self._value_frame),
            *window,
            avro_columns.longs(count),
            avro_columns.longs(ts),
            avro_columns.constant(avro_columns.zigzag_varint(int(emit_time))),
        ]
        for name, avro_type in self._types:
            field = _avro_field(avro_type, cols["values"][name])
            if field is None:
                return None
            pieces.extend(field)
        return avro_columns.encode_rows(len(count), pieces)


def _avro_field(avro_type: Any, col: Any) -> list[avro_columns.Piece] | None:
    """The pieces of one aggregate column of Avro type ``avro_type`` (``long`` or a union of ``null``, ``long``,
    ``double``, ...), or ``None`` when the column is not all int64 or all float64 (nulls, mixed, Decimal, bool)."""
    ints = _int64(col)
    if avro_type == "long":
        return None if ints is None else [avro_columns.longs(ints)]
    if not isinstance(avro_type, list):
        return None
    if ints is not None:
        if "long" not in avro_type:
            return None
        branch = avro_columns.zigzag_varint(avro_type.index("long"))
        return [avro_columns.constant(branch), avro_columns.longs(ints)]
    floats = _float64(col)
    if floats is None or "double" not in avro_type:
        return None
    branch = avro_columns.zigzag_varint(avro_type.index("double"))
    return [avro_columns.constant(branch), avro_columns.doubles(floats)]


def _int64(col: Any) -> np.ndarray | None:
    """``col`` as int64 when every value is an integer within int64 (not a bool); else ``None``."""
    dtype = getattr(col, "dtype", None)
    if dtype is not None and dtype.kind != "O":
        if dtype.kind == "i" or (dtype.kind == "u" and (not len(col) or int(col.max()) < 2**63)):
            return col.astype(np.int64, copy=False)
        return None
    if not _all_ints(col):
        return None
    try:
        return np.array(col, dtype=np.int64)
    except OverflowError:
        return None


def _float64(col: Any) -> np.ndarray | None:
    """``col`` as float64 when every value is a float; else ``None``."""
    dtype = getattr(col, "dtype", None)
    if dtype is not None and dtype.kind != "O":
        return col.astype(np.float64, copy=False) if dtype.kind == "f" else None
    if not all(type(v) is float for v in col):
        return None
    return np.array(col, dtype=np.float64)


def _encode_rows(template: str, rows: Any) -> list[bytes]:
    """``template % row`` as UTF-8 bytes for every row; the rows' ``%s`` fields are UTF-8 bytes already.

    Formats bytes directly (``bytes % row``): cheaper per row than formatting a str and encoding it."""
    btemplate = template.encode("utf-8")
    return [btemplate % row for row in rows]


def _all_ints(col: Any) -> bool:
    """Whether every value is an integer (not a bool): an integer numpy column, or a list of Python ints."""
    dtype = getattr(col, "dtype", None)
    if dtype is not None and dtype.kind != "O":
        return dtype.kind in "iu" and col.ndim == 1  # a 2-d array is a column of lists (collect), not of ints
    return all(type(v) is int for v in col)


def _tolist(col: Any) -> list:
    return col.tolist() if hasattr(col, "tolist") else list(col)


def _take(col: Any, rows: np.ndarray) -> Any:
    """The ``rows`` of a column (an array, or a list: a list)."""
    if isinstance(col, np.ndarray):
        return col[rows]
    return [col[i] for i in rows.tolist()]


def _json_value_bytes(values: Sequence[Any]) -> list[bytes]:
    """JSON text of each value as UTF-8 bytes: ints via str, everything else via json.dumps (NaN/Infinity as
    json does)."""
    out = []
    dumps = json.dumps
    for v in values:
        if type(v) is int:
            text = str(v)
        elif type(v) is float and v == v and v not in (_INF, -_INF):
            text = repr(v)
        else:
            text = dumps(v, separators=(",", ":"), ensure_ascii=False, default=_json_default)
        out.append(text.encode("utf-8"))
    return out


_INF = float("inf")


def _json_default(o: Any) -> Any:
    import decimal

    if isinstance(o, decimal.Decimal):
        return float(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def _avro_safe(record: dict[str, Any], exact: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Decimals become doubles (the aggregate types hold long/double); in the ``exact`` aggregates (``sum``)
    integers beyond int64 (issue 29.2) become exact ``Decimal`` so that fastavro writes them in the decimal
    branch (:data:`EXACT_INT`) - given the int, it would pick ``double`` and round it silently. (Other
    aggregates never hold such an integer from the service's input: the decoder dead-letters it.)"""
    import decimal

    aggs = record["aggregates"]
    if any(
        isinstance(v, decimal.Decimal) or (k in exact and type(v) is int and not _INT64_MIN <= v <= _INT64_MAX)
        for k, v in aggs.items()
    ):
        record["aggregates"] = {k: _avro_number(v, k in exact) for k, v in aggs.items()}
    return record


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _avro_number(v: Any, exact: bool) -> Any:
    import decimal

    if isinstance(v, decimal.Decimal):
        return float(v)
    if exact and type(v) is int and not _INT64_MIN <= v <= _INT64_MAX:
        return decimal.Decimal(v)
    return v
