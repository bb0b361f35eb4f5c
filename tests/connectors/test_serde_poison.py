"""Poison values (issue 29): values the engine cannot represent are dead letters with their own reason, on the
record path and on the column fast path alike, and the good records of the same batch stay good."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastavro import parse_schema

from connectors.avro import encode
from connectors.schema_registry import SchemaRegistry
from connectors.serde import (
    INT64_MAX,
    INT64_MIN,
    MAX_TIMESTAMP_MS,
    MAX_VALUE_BYTES,
    REASONS,
    InputDecoder,
    InputSpec,
    aggregation_fields,
)
from tests.service.schema_registry_double import SchemaRegistryDouble


def _json(ts_field: str = "", spec: str = "count,sum:amount,max:amount,collect:note") -> InputDecoder:
    return InputDecoder(InputSpec(format="json", timestamp_field=ts_field, fields=aggregation_fields(spec)))


GOOD = b'{"amount": 5, "note": "x", "ts": 1000}'


def _deep(levels: int) -> object:
    v: object = 1
    for _ in range(levels):
        v = [v]
    return v


POISON = [
    # (value, kafka timestamp, timestamp field, reason)
    (b'{"amount": 1000000000000000000000000000000, "note": "x"}', 5, "", "number-out-of-range"),
    (json.dumps({"amount": INT64_MAX + 1, "note": "x"}).encode(), 5, "", "number-out-of-range"),
    (json.dumps({"amount": INT64_MIN - 1, "note": "x"}).encode(), 5, "", "number-out-of-range"),
    (b'{"amount": 5, "note": "x", "ts": 10000000000000000000}', 5, "ts", "timestamp-out-of-range"),
    (json.dumps({"amount": 5, "note": "x", "ts": MAX_TIMESTAMP_MS + 1}).encode(), 5, "ts", "timestamp-out-of-range"),
    (b'{"amount": 5, "note": "x"}', MAX_TIMESTAMP_MS + 1, "", "timestamp-out-of-range"),
    (b'{"amount": 5, "note": "x", "ts": -1}', 5, "ts", "invalid-timestamp"),
    (b'{"amount": NaN, "note": "x"}', 5, "", "non-finite-number"),
    (b'{"amount": Infinity, "note": "x"}', 5, "", "non-finite-number"),
    (b'{"amount": -Infinity, "note": "x"}', 5, "", "non-finite-number"),
    (b'{"amount": 1e999, "note": "x"}', 5, "", "non-finite-number"),
    (json.dumps({"amount": 1, "note": _deep(2)}).encode(), 5, "", "schema-mismatch"),
    (json.dumps({"amount": 1, "note": {"a": 1}}).encode(), 5, "", "schema-mismatch"),
    (json.dumps({"amount": 1, "note": 2**64}).encode(), 5, "", "number-out-of-range"),
    (b'{"amount": 1, "note": NaN}', 5, "", "non-finite-number"),
    (b'{"amount": 1, "note": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 5, "", "value-too-deep"),
    (b'{"amount": 1, "note": "' + b"x" * MAX_VALUE_BYTES + b'"}', 5, "", "value-too-large"),
]


def test_every_poison_reason_is_a_documented_reason():
    assert {r for *_x, r in POISON} <= set(REASONS)


@pytest.mark.parametrize(("value", "ts", "ts_field", "reason"), POISON, ids=[p[3] for p in POISON])
def test_poison_is_dead_lettered_on_both_paths_and_the_good_records_stay(value, ts, ts_field, reason):
    dec = _json(ts_field)
    keys, values, stamps = [b"a", b"b", b"c"], [GOOD, value, GOOD], [1000, ts, 2000]
    for got, bad in (
        dec.decode_batch(keys, values, stamps),
        dec.decode_columns(keys, values, stamps, ("amount", "note")),
    ):
        assert [(i, r) for i, r, _m in bad] == [(1, reason)]
        good_index = [g[0] for g in got] if isinstance(got, list) else got.index
        assert good_index == [0, 2]
    got, _bad = dec.decode_columns(keys, values, stamps, ("amount", "note"))
    assert got.ts.dtype == np.int64


def test_bounds_themselves_are_good():
    dec = _json("ts")
    values = [
        json.dumps({"amount": a, "note": a, "ts": t}).encode()
        for a, t in ((INT64_MAX, MAX_TIMESTAMP_MS), (INT64_MIN, 0), (1.5e308, 7))
    ]
    for fast in (True, False):
        if fast:
            got, bad = dec.decode_columns([b"k"] * 3, values, [0] * 3, ("amount",))
        else:
            records, bad = dec.decode_batch([b"k"] * 3, values, [0] * 3)
            got = records
        assert bad == []
        assert len(got) == 3


def test_column_fast_path_takes_exact_in_range_numbers_whole(monkeypatch):
    dec = _json()
    monkeypatch.setattr(dec, "_decode_records", lambda *a: pytest.fail("took the record path"))
    got, bad = dec.decode_columns(
        [b"a", b"b"],
        [b'{"amount": 9223372036854775807, "note": 1}', b'{"amount": -2.5, "note": null}'],
        [1, 2],
        ("amount", "note"),
    )
    assert bad == [] and got.fields["amount"] == [INT64_MAX, -2.5]


def test_missing_field_counts_name_the_field():
    dec = _json(spec="count,sum:amout")
    _good, bad = dec.decode_columns([b"a"] * 4, [b'{"amount": 1}'] * 3 + [b'{"amout": 2}'], [1] * 4, ("amout",))
    assert len(bad) == 3 and dec.missing_fields == {"amout": 3}
    dec.decode_columns([b"a"], [b'{"amout": 2}'], [1], ("amout",))
    assert dec.missing_fields == {}


AVRO = {
    "type": "record",
    "name": "P",
    "fields": [
        {"name": "account", "type": "string"},
        {"name": "amount", "type": ["long", "double"]},
        {"name": "ts", "type": "long"},
    ],
}


def test_avro_poison_values():
    with SchemaRegistryDouble() as sr:
        sid = SchemaRegistry(sr.url).register("p-value", AVRO)
        dec = InputDecoder(
            InputSpec(
                format="avro",
                key_field="account",
                timestamp_field="ts",
                fields=aggregation_fields("count,sum:amount"),
                schema_registry_url=sr.url,
            )
        )
        schema = parse_schema(AVRO)

        def enc(amount, ts):
            return encode(sid, schema, {"account": "a", "amount": amount, "ts": ts})

        values = [
            enc(1, 1),
            enc(float("nan"), 2),
            enc(float("inf"), 3),
            enc(2, MAX_TIMESTAMP_MS + 1),
            enc(3, INT64_MAX),
            enc(4, 5),
            b"\x00" + b"\xff" * 10,
        ]
        got, bad = dec.decode_columns([None] * len(values), values, [0] * len(values), ("amount",))
        assert [(i, r) for i, r, _m in bad] == [
            (1, "non-finite-number"),
            (2, "non-finite-number"),
            (3, "timestamp-out-of-range"),
            (4, "timestamp-out-of-range"),
            (6, "unknown-schema"),
        ]
        assert got.index == [0, 5] and got.fields["amount"] == [1, 4]
