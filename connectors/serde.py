"""Input decoding and validation: Kafka record bytes -> ``(key, value, event time)`` or a dead-letter reason.

A record is *good* when its value decodes (JSON object, or Avro in the Schema Registry wire format), it has a key
(the Kafka key as UTF-8, or a value field), a non-negative integer event time (the Kafka record timestamp or a
value field, epoch milliseconds) and every field an aggregation reads, with a numeric value where the aggregation
needs a number. Anything else is *bad* and gets one reason code (the ``error`` header of the dead-letter record):

=====================  =====================================================================================
``null-value``         the Kafka value is null (a tombstone)
``undecodable-value``  not UTF-8 JSON / not the Schema Registry wire format / corrupt Avro body
``unknown-schema``     the wire format names a schema id the registry does not know
``schema-mismatch``    not a JSON object / Avro record, or an aggregated field is missing or has the wrong type
                       (a number for sum/min/max/mean/variance/stddev; a string, number, boolean or null for
                       first/last/collect - what the changelog's Avro schema holds)
``null-key``           no Kafka key / the key field is missing or null
``undecodable-key``    the Kafka key is not UTF-8, or the key field is not a string or integer
``missing-timestamp``  the timestamp field is missing or null
``invalid-timestamp``  the event time is negative or not an integer
``timestamp-out-of-range``  the event time is beyond 9999-12-31T23:59:59.999Z (:data:`MAX_TIMESTAMP_MS`)
``number-out-of-range``  an integer in an aggregated field is outside int64 (``-2**63 .. 2**63-1``)
``non-finite-number``  an aggregated field is NaN or an infinity (JSON ``NaN``, ``Infinity``, ``1e999``)
``value-too-deep``     JSON nested deeper than the parser's stack (about 1,000 levels)
``value-too-large``    the value is larger than :data:`MAX_VALUE_BYTES`
=====================  =====================================================================================

These last five are the values the engine cannot represent (poison records): each is dead-lettered at decode
time with its own reason, so no later conversion (int64 event times, int64/float64 columns, the changelog's
Avro ``long``) can raise for it. Integers inside int64 are summed exactly by the engine.

Registry outages are not record problems: :class:`~connectors.schema_registry.SchemaRegistryUnavailable`
propagates (the micro-batch fails and Spark retries it), so no good record is ever dead-lettered for it.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from windowstore.aggregations import parse_aggregation_specs

from .avro import WireFormatError, decode_body, split_wire
from .schema_registry import UnknownSchemaError, registry_for

__all__ = [
    "BadRecord",
    "Decoded",
    "InputSettings",
    "InputSpec",
    "InputDecoder",
    "REASONS",
    "MAX_TIMESTAMP_MS",
    "MAX_VALUE_BYTES",
    "INT64_MIN",
    "INT64_MAX",
    "loads_json_objects",
    "NUMERIC_AGGREGATIONS",
    "aggregation_fields",
]

REASONS = (
    "null-value",
    "undecodable-value",
    "unknown-schema",
    "schema-mismatch",
    "null-key",
    "undecodable-key",
    "missing-timestamp",
    "invalid-timestamp",
    "timestamp-out-of-range",
    "number-out-of-range",
    "non-finite-number",
    "value-too-deep",
    "value-too-large",
)

#: the largest event time accepted: 9999-12-31T23:59:59.999Z in epoch milliseconds (what Java's Instant and
#: Python's datetime both still print; window bounds t + d + 1 stay far inside int64)
MAX_TIMESTAMP_MS = 253_402_300_799_999
#: the integer range of a numeric aggregated field (int64, what the changelog's Avro ``long`` holds)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: the largest value, in bytes (a broker's default message.max.bytes is about this)
MAX_VALUE_BYTES = 1 << 20

#: aggregations that need a number in their field
NUMERIC_AGGREGATIONS = frozenset({"sum", "min", "max", "mean", "variance", "stddev"})
_NUMBER_TYPES = (int, float, decimal.Decimal)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_json_decoder = json.JSONDecoder()
_decode_json_text = _json_decoder.decode  # what json.loads does with a str and no options
# typeshed leaves out these two (CPython's json.decoder has them since 2.x)
_scan_json = _json_decoder.scan_once  # type: ignore[attr-defined]  # what decode calls at the first non-whitespace
_json_whitespace = json.decoder.WHITESPACE.match  # type: ignore[attr-defined]


def loads_json(data: bytes) -> Any:
    """``json.loads(data)``, without the per-call encoding detection for the common case: bytes that start with
    ``{`` and a non-NUL byte are UTF-8 to ``json.detect_encoding`` (no BOM, not UTF-16/32), so they are decoded
    as such directly. Same result and same exceptions as ``json.loads`` for every input."""
    if type(data) is bytes and len(data) > 1 and data[0] == 0x7B and data[1]:
        return _decode_json_text(data.decode("utf-8", "surrogatepass"))
    return json.loads(data)


def loads_json_objects(values: Sequence[Any]) -> list[Any]:
    """:func:`loads_json` of every value that starts with ``{`` and a non-NUL byte, decoded as one text; ``None``
    where a value is anything else or does not parse, for the caller to decode on its own (and get the error).

    The values are joined with NUL bytes, decoded from UTF-8 once and split again: NUL cannot be part of a
    valid JSON text (outside strings it is no token, inside one it is a control character), so when the split
    gives one part per value, each part is exactly that value's text. Each part is then parsed as
    ``JSONDecoder.decode`` does it: ``scan_once`` at index 0 (the ``{``), trailing whitespace, nothing after it.
    Saves ``loads_json``'s three Python frames and its per-value UTF-8 decode (~0.9 us per value); a batch
    with a value that is not UTF-8 or contains a NUL byte comes back all ``None`` (the caller parses each)::

        values   b'{"a":1}'   b'[1]'   b'{"b":2}'   b'{"c":'
        joined   {"a":1} NUL {"b":2} NUL {"c":          (only values starting with "{")
        result   {'a': 1}     None     {'b': 2}     None
    """
    n = len(values)
    out: list[Any] = [None] * n
    idx = [i for i, v in enumerate(values) if type(v) is bytes and len(v) > 1 and v[0] == 0x7B and v[1]]
    if not idx:
        return out
    try:
        parts = b"\x00".join([values[i] for i in idx]).decode("utf-8", "surrogatepass").split("\x00")
    except UnicodeDecodeError:
        parts = []
    if len(parts) != len(idx):
        return out
    scan, ws = _scan_json, _json_whitespace
    for i, text in zip(idx, parts):
        try:
            obj, end = scan(text, 0)
        except (ValueError, StopIteration, RecursionError):
            continue
        if end != len(text) and ws(text, end).end() != len(text):
            continue
        out[i] = obj
    return out


class Decoded(NamedTuple):
    """A micro-batch's valid records as columns, in input order: made once (:meth:`InputDecoder.decode_columns`,
    :meth:`of`), read by the processor, the batch's stats and its log entry."""

    #: each record's position in the task's input
    index: list[int]  # type: ignore[assignment]  # shadows tuple.index on purpose: the public field name
    keys: list[Any]
    #: the decoded values: the processor's fallbacks and drop reports get these very objects
    values: list[Any]
    #: event times (int64)
    ts: np.ndarray
    #: per value field the aggregations read, the records' values of it
    fields: dict[str, list[Any]]

    @classmethod
    def of(cls, records: Sequence[tuple[int, Any, Any, int]], fields: Sequence[str] = ()) -> Decoded:
        """From the decoder's ``(index, key, value, ts)`` records; ``fields``: the value fields to take out."""
        if not records:
            return cls([], [], [], np.zeros(0, np.int64), {f: [] for f in fields})
        index, keys, values, ts = zip(*records)
        return cls(
            list(index),
            list(keys),
            list(values),
            np.array(ts, np.int64),
            {f: list(map(operator.itemgetter(f), values)) for f in fields},
        )

    def __len__(self) -> int:
        return len(self.keys)

    def records(self) -> list[tuple[int, Any, Any, int]]:
        """The records again, as :meth:`of` takes them."""
        return list(zip(self.index, self.keys, self.values, self.ts.tolist()))


class _Absent:
    """Stands for a missing field in a column (its type marks the column)."""


_ABSENT = _Absent()


class BadRecord(ValueError):
    """A record that cannot be aggregated: ``reason`` is one of :data:`REASONS`; ``missing_field``: the
    aggregated field the value lacks, when that is why."""

    def __init__(self, reason: str, message: str, missing_field: str = "") -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.missing_field = missing_field


def check_number(name: str, v: Any) -> None:
    """Raise :class:`BadRecord` unless ``v`` (field ``name`` of a numeric aggregation) is a number the engine
    aggregates exactly: an int within int64, a finite float or Decimal (not a bool)."""
    if type(v) is int:
        if not INT64_MIN <= v <= INT64_MAX:
            raise BadRecord(
                "number-out-of-range",
                f"field {name!r} = {v} is outside the int64 range [{INT64_MIN}, {INT64_MAX}]"[:300],
            )
    elif isinstance(v, bool) or not isinstance(v, _NUMBER_TYPES):
        raise BadRecord("schema-mismatch", f"field {name!r} must be a number, got {v!r}"[:300])
    elif isinstance(v, int):  # an int subclass: the same range
        check_number(name, int(v))
    elif not (math.isfinite(v) if isinstance(v, float) else v.is_finite()):
        raise BadRecord("non-finite-number", f"field {name!r} is {v!r}, which cannot be aggregated")


def aggregation_fields(spec: str) -> tuple[tuple[str, bool], ...]:
    """``"count,sum:amount,collect:note"`` -> ``(("amount", True), ("note", False))``: the value fields the
    aggregations read and whether each must be numeric. The spec is parsed by
    :func:`windowstore.parse_aggregation_specs` (its errors for an invalid one)."""
    needs: dict[str, bool] = {}
    for part in parse_aggregation_specs(spec):
        if part.field is not None:
            needs[part.field] = needs.get(part.field, False) or part.kind in NUMERIC_AGGREGATIONS
    return tuple(needs.items())


class InputSettings(Protocol):
    """What :meth:`InputSpec.from_settings` reads of the service's settings (``service.settings.Settings`` has all
    of it; connectors do not import the service, so they name the attributes they need here)."""

    @property
    def input_format(self) -> str: ...
    @property
    def key_field(self) -> str: ...
    @property
    def timestamp_field(self) -> str: ...
    @property
    def aggregations(self) -> str: ...
    @property
    def schema_registry_url(self) -> str: ...
    def schema_registry_config(self) -> tuple[tuple[str, str], ...]: ...


@dataclass(frozen=True)
class InputSpec:
    """How to read input records (picklable: shipped to Spark's Python workers)."""

    format: str = "json"  # json | avro
    key_field: str = ""  # "" -> Kafka key
    timestamp_field: str = ""  # "" -> Kafka record timestamp
    fields: tuple[tuple[str, bool], ...] = ()  # (field, numeric) the aggregations read
    schema_registry_url: str = ""
    schema_registry_conf: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # TLS / basic auth

    @classmethod
    def from_settings(cls, settings: InputSettings) -> InputSpec:
        return cls(
            format=settings.input_format,
            key_field=settings.key_field,
            timestamp_field=settings.timestamp_field,
            fields=aggregation_fields(settings.aggregations),
            schema_registry_url=settings.schema_registry_url,
            schema_registry_conf=tuple(settings.schema_registry_config()),
        )


class InputDecoder:
    """Decodes and validates records; one per Python worker and task."""

    def __init__(self, spec: InputSpec, registry: Any = None) -> None:
        self.spec = spec
        if spec.format not in ("json", "avro"):
            raise ValueError(f"unknown input format {spec.format!r}")
        if spec.format == "avro" and registry is None:
            if not spec.schema_registry_url:
                raise ValueError("avro input needs a schema registry URL")
            registry = registry_for(spec.schema_registry_url, spec.schema_registry_conf)
        self._registry = registry
        self._value = self._json_value if spec.format == "json" else self._avro_value
        #: per aggregated field, how many records of the last decoded batch lacked it (a likely typo when most do)
        self.missing_fields: dict[str, int] = {}

    # ---------------------------------------------------------------------------------------------------- value
    @staticmethod
    def _json_value(data: bytes) -> Any:
        try:
            return loads_json(data)
        except (ValueError, TypeError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise BadRecord("undecodable-value", f"not UTF-8 JSON: {e}") from None
        except RecursionError:
            raise BadRecord("value-too-deep", "JSON nested deeper than the parser's limit") from None

    def _avro_value(self, data: bytes) -> Any:
        try:
            schema_id, body = split_wire(data)
        except WireFormatError as e:
            raise BadRecord("undecodable-value", str(e)) from None
        try:
            writer = self._registry.writer_schema(schema_id)
        except UnknownSchemaError as e:
            raise BadRecord("unknown-schema", str(e)) from None
        try:
            return decode_body(body, writer)
        except Exception as e:  # fastavro raises EOFError, ValueError, IndexError, UnicodeDecodeError, ...
            raise BadRecord(
                "undecodable-value", f"corrupt Avro body for schema id {schema_id}: {type(e).__name__}: {e}"
            ) from None

    # ---------------------------------------------------------------------------------------------------- record
    def decode(self, key: bytes | None, value: bytes | None, timestamp_ms: int | None) -> tuple[str, Any, int]:
        """``(key, value, event_time_ms)`` of one Kafka record; raises :class:`BadRecord`."""
        if value is None:
            raise BadRecord("null-value", "the record value is null")
        _check_size(value)
        return self._checked(key, self._value(value), timestamp_ms)

    def _checked(self, key: bytes | None, obj: Any, timestamp_ms: int | None) -> tuple[str, Any, int]:
        """:meth:`decode` of a record whose value decoded to ``obj``."""
        if not isinstance(obj, dict):
            raise BadRecord("schema-mismatch", f"expected an object/record value, got {type(obj).__name__}")
        spec = self.spec

        # key
        if spec.key_field:
            k = obj.get(spec.key_field)
            if k is None:
                raise BadRecord("null-key", f"key field {spec.key_field!r} is missing or null")
            if isinstance(k, str):
                pass
            elif isinstance(k, int) and not isinstance(k, bool):
                k = str(k)
            else:
                raise BadRecord(
                    "undecodable-key",
                    f"key field {spec.key_field!r} must be a string or integer, got {type(k).__name__}",
                )
        else:
            if key is None:
                raise BadRecord("null-key", "the record has no key")
            try:
                k = bytes(key).decode("utf-8")
            except UnicodeDecodeError as e:
                raise BadRecord("undecodable-key", f"the record key is not UTF-8: {e}") from None

        # event time
        if spec.timestamp_field:
            t = obj.get(spec.timestamp_field)
            if t is None:
                raise BadRecord("missing-timestamp", f"timestamp field {spec.timestamp_field!r} is missing or null")
            if isinstance(t, _dt.datetime):  # Avro timestamp-millis / -micros
                if t.tzinfo is None:
                    t = t.replace(tzinfo=_dt.timezone.utc)
                t = (t - _EPOCH) // _dt.timedelta(milliseconds=1)
            elif isinstance(t, bool) or not isinstance(t, int):
                raise BadRecord(
                    "invalid-timestamp",
                    f"timestamp field {spec.timestamp_field!r} must be an integer "
                    f"number of epoch milliseconds, got {t!r}",
                )
        else:
            t = timestamp_ms
            if t is None:
                raise BadRecord("missing-timestamp", "the record has no timestamp")
            t = int(t)
        if t < 0:
            raise BadRecord("invalid-timestamp", f"event time {t} is negative")
        if t > MAX_TIMESTAMP_MS:
            raise BadRecord(
                "timestamp-out-of-range",
                f"event time {t} ms is beyond 9999-12-31T23:59:59.999Z ({MAX_TIMESTAMP_MS})"[:300],
            )

        # fields the aggregations read
        for name, numeric in spec.fields:
            if name not in obj:
                raise BadRecord("schema-mismatch", f"field {name!r} is missing", missing_field=name)
            v = obj[name]
            if numeric or type(v) in (int, float):
                check_number(name, v)
            elif not (v is None or isinstance(v, (str, bool, int, float, decimal.Decimal))):
                raise BadRecord(
                    "schema-mismatch",
                    f"field {name!r} must be a string, number, boolean or null, got {type(v).__name__}",
                )
        return k, obj, t

    def decode_batch(
        self,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int | None],
    ) -> tuple[list[tuple[int, str, Any, int]], list[tuple[int, str, str]]]:
        """Decode a batch in order: ``(good, bad)`` with ``good = [(index, key, value, ts)]`` and
        ``bad = [(index, reason, message)]``."""
        return self._decode_records(keys, values, timestamps, self._parsed(values))

    def _parsed(self, values: Sequence[bytes | None]) -> list[Any]:
        """JSON values parsed together where they can be (:func:`loads_json_objects`); ``None`` for the rest, and
        for every Avro value: those take :meth:`decode`."""
        return loads_json_objects(values) if self.spec.format == "json" else [None] * len(values)

    def _decode_records(
        self,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int | None],
        parsed: Sequence[Any],
    ) -> tuple[list[tuple[int, str, Any, int]], list[tuple[int, str, str]]]:
        """:meth:`decode_batch` given the :meth:`_parsed` values."""
        good: list[tuple[int, str, Any, int]] = []
        bad: list[tuple[int, str, str]] = []
        missing: dict[str, int] = {}
        decode, checked = self.decode, self._checked
        for i, (k, v, t, obj) in enumerate(zip(keys, values, timestamps, parsed)):
            try:
                if obj is None:
                    kk, vv, tt = decode(k, v, t)
                else:
                    _check_size(v)
                    kk, vv, tt = checked(k, obj, t)
            except BadRecord as e:
                bad.append((i, e.reason, e.message))
                if e.missing_field:
                    missing[e.missing_field] = missing.get(e.missing_field, 0) + 1
            else:
                good.append((i, kk, vv, tt))
        self.missing_fields = missing
        return good, bad

    def decode_columns(
        self,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int | None],
        fields: Sequence[str] = (),
    ) -> tuple[Decoded, list[tuple[int, str, str]]]:
        """:meth:`decode_batch` as columns: ``(Decoded.of(good, fields), bad)``, the same values.

        A JSON batch whose records are all good (the usual case) is checked a column at a time: every value
        parsed to an object, the keys decoded as one UTF-8 text, the event times as one int64 array, each
        aggregated field's types as one set. Any batch with a bad record, and every Avro batch, takes
        :meth:`decode_batch` (record by record, with each bad record's reason)."""
        parsed = self._parsed(values)  # once: a batch the column check leaves goes on with the same objects
        good = (
            self._all_good_json(keys, timestamps, parsed, fields)
            if self.spec.format == "json" and _sizes_ok(values)
            else None
        )
        if good is not None:
            self.missing_fields = {}
            return good, []
        records, bad = self._decode_records(keys, values, timestamps, parsed)
        return Decoded.of(records, fields), bad

    def _all_good_json(
        self,
        keys: Sequence[bytes | None],
        timestamps: Sequence[int | None],
        objs: list[Any],
        fields: Sequence[str],
    ) -> Decoded | None:
        """The batch as :meth:`decode_columns` gives it when every record is good; ``None`` when one may not be
        (it is not decided here which, nor why). ``objs``: the :meth:`_parsed` values (``None`` for a value that
        is not a JSON object text)."""
        n = len(objs)
        if not n or len(keys) != n or len(timestamps) != n:
            return None
        if set(map(type, objs)) != {dict}:
            return None
        spec = self.spec
        ks: list[Any] | None
        if spec.key_field:
            ks = [o.get(spec.key_field) for o in objs]
            if set(map(type, ks)) != {str}:  # int keys become str on the record path: left to it
                return None
        else:
            ks = _utf8_texts(keys)
            if ks is None:
                return None
        if spec.timestamp_field:
            stamps = [o.get(spec.timestamp_field) for o in objs]
            if set(map(type, stamps)) != {int}:
                return None
            ts = _int64_or_none(stamps)
        else:
            ts = _int64_or_none(timestamps)
        if ts is None or int(ts.min()) < 0 or int(ts.max()) > MAX_TIMESTAMP_MS:
            return None
        cols: dict[str, list[Any]] = {}
        for name, numeric in spec.fields:
            col = [o.get(name, _ABSENT) for o in objs]
            kinds = set(map(type, col))
            if _Absent in kinds or (numeric and not kinds <= {int, float}):  # bool is neither (JSON: no Decimal)
                return None
            if numeric and not _exact_numbers(col, kinds):
                return None
            if not numeric:
                if not kinds <= _SCALARS:
                    return None  # objects, arrays: the record path dead-letters them
                nums = kinds & {int, float}
                if nums and not _exact_numbers([v for v in col if type(v) in nums], nums):
                    return None
            cols[name] = col
        return Decoded(
            list(range(n)),
            ks,
            objs,
            ts,
            {f: cols[f] if f in cols else list(map(operator.itemgetter(f), objs)) for f in fields},
        )


#: the JSON value types first/last/collect keep (what the changelog's Avro schema holds)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _exact_numbers(col: list[Any], kinds: set[type]) -> bool:
    """Whether every number of ``col`` (ints and floats only) is finite and, if an int, within int64: the
    column fast path's :func:`check_number`. A column with floats is converted to float64 once: when all its
    values are within +-2**62 there (NaN compares false), every int is within int64; otherwise Python's min/max
    decide exactly (they compare ints and floats without rounding). ``False`` sends the batch to the record path,
    which decides per record."""
    if not col:
        return True
    if float in kinds:
        try:
            arr = np.array(col, dtype=np.float64)
        except OverflowError:  # an int too large for a float
            return False
        if arr.min() > -_HALF_INT64 and arr.max() < _HALF_INT64:
            return True
        if not np.isfinite(arr).all():
            return False
    return min(col) >= INT64_MIN and max(col) <= INT64_MAX


#: 2**62 as a float: a float64 column within +-this holds no int outside int64, whatever the rounding
_HALF_INT64 = float(1 << 62)


def _sizes_ok(values: Sequence[Any]) -> bool:
    """Whether no value is over :data:`MAX_VALUE_BYTES` (``False`` also when one is not bytes, e.g. None)."""
    try:
        return not values or max(map(len, values)) <= MAX_VALUE_BYTES
    except TypeError:
        return False


def _check_size(value: Any) -> None:
    """Raise :class:`BadRecord` ``value-too-large`` for a value over :data:`MAX_VALUE_BYTES`."""
    if value is not None and len(value) > MAX_VALUE_BYTES:
        raise BadRecord("value-too-large", f"the value is {len(value)} bytes, more than {MAX_VALUE_BYTES}")


def _utf8_texts(keys: Sequence[Any]) -> list[str] | None:
    """Every key decoded from UTF-8 (strict), as one text joined and split at NUL bytes; ``None`` when a key
    is not ``bytes``, contains a NUL byte or is not UTF-8. A UTF-8 sequence cannot span a NUL byte, so the joined
    text decodes exactly when every key does."""
    if set(map(type, keys)) != {bytes}:
        return None
    try:
        parts = b"\x00".join(keys).decode("utf-8").split("\x00")
    except UnicodeDecodeError:
        return None
    return parts if len(parts) == len(keys) else None


def _int64_or_none(values: Sequence[Any]) -> np.ndarray | None:
    """``values`` as int64 when all are integers within int64; else ``None`` (a None, a float, only bools). A
    bool among integers counts as 0 or 1, as ``int()`` makes it on the record path."""
    try:
        arr = np.asarray(values)
    except OverflowError:
        return None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":  # object (None, huge ints), bool, float: not here
        return None
    if arr.dtype.kind == "u" and len(arr) and int(arr.max()) >= 1 << 63:
        return None
    return arr.astype(np.int64, copy=False)
