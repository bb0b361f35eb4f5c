"""Input decoding (JSON, Avro in the Schema Registry wire format) and changelog encoding."""

from __future__ import annotations

import datetime as dt
import json
import struct

import numpy as np
import pytest
from fastavro import parse_schema
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.avro import decode_body, encode, split_wire
from connectors.output import (
    ChangelogEncoder,
    ChangelogSpec,
    changelog_key_schema,
    changelog_value_schema,
    parse_windowed_key,
    windowed_key,
)
from connectors.schema_registry import SchemaRegistry, UnknownSchemaError
from connectors.serde import BadRecord, InputDecoder, InputSpec, aggregation_fields
from tests.service.schema_registry_double import SchemaRegistryDouble

PAYMENT = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "account", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": "long"},
        {"name": "ts", "type": ["null", "long"], "default": None},
    ],
}
OTHER = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "string"}]}


@pytest.fixture(scope="module")
def registry():
    with SchemaRegistryDouble() as sr:
        yield sr


def spec(**kw):
    base = {"format": "json", "key_field": "", "timestamp_field": "", "fields": aggregation_fields("count,sum:amount")}
    base.update(kw)
    return InputSpec(**base)


def test_aggregation_fields():
    assert aggregation_fields("count,sum:amount,max:amount,collect:note") == (("amount", True), ("note", False))
    assert aggregation_fields("count") == ()


def test_json_good_record():
    d = InputDecoder(spec())
    assert d.decode(b"acct-1", b'{"amount": 5}', 1000) == ("acct-1", {"amount": 5}, 1000)


def test_json_key_and_time_from_fields():
    d = InputDecoder(spec(key_field="account", timestamp_field="ts"))
    assert d.decode(None, b'{"account": "a", "amount": 1.5, "ts": 7}', 99) == (
        "a",
        {"account": "a", "amount": 1.5, "ts": 7},
        7,
    )
    assert d.decode(None, b'{"account": 42, "amount": 1, "ts": 7}', 99)[0] == "42"


@pytest.mark.parametrize(
    ("key", "value", "ts", "kw", "reason"),
    [
        (b"k", None, 1, {}, "null-value"),
        (b"k", b"\xff\xfe", 1, {}, "undecodable-value"),
        (b"k", b'{"amount": 1', 1, {}, "undecodable-value"),
        (b"k", b"[1, 2]", 1, {}, "schema-mismatch"),
        (b"k", b'{"amt": 1}', 1, {}, "schema-mismatch"),
        (b"k", b'{"amount": "1"}', 1, {}, "schema-mismatch"),
        (b"k", b'{"amount": true}', 1, {}, "schema-mismatch"),
        (None, b'{"amount": 1}', 1, {}, "null-key"),
        (b"\xff", b'{"amount": 1}', 1, {}, "undecodable-key"),
        (b"k", b'{"amount": 1}', -1, {}, "invalid-timestamp"),
        (None, b'{"amount": 1, "ts": 5}', 1, {"key_field": "account", "timestamp_field": "ts"}, "null-key"),
        (None, b'{"account": [1], "amount": 1, "ts": 5}', 1, {"key_field": "account"}, "undecodable-key"),
        (b"k", b'{"amount": 1}', 1, {"timestamp_field": "ts"}, "missing-timestamp"),
        (b"k", b'{"amount": 1, "ts": null}', 1, {"timestamp_field": "ts"}, "missing-timestamp"),
        (b"k", b'{"amount": 1, "ts": -5}', 1, {"timestamp_field": "ts"}, "invalid-timestamp"),
        (b"k", b'{"amount": 1, "ts": 1.5}', 1, {"timestamp_field": "ts"}, "invalid-timestamp"),
        (b"k", b'{"amount": 1, "ts": "2024-01-01"}', 1, {"timestamp_field": "ts"}, "invalid-timestamp"),
    ],
)
def test_json_bad_records(key, value, ts, kw, reason):
    with pytest.raises(BadRecord) as e:
        InputDecoder(spec(**kw)).decode(key, value, ts)
    assert e.value.reason == reason


def test_decode_batch_keeps_order_and_indexes():
    d = InputDecoder(spec())
    good, bad = d.decode_batch([b"a", None, b"b"], [b'{"amount":1}', b'{"amount":2}', b"x"], [1, 2, 3])
    assert good == [(0, "a", {"amount": 1}, 1)]
    assert [(i, r) for i, r, _ in bad] == [(1, "null-key"), (2, "undecodable-value")]


def test_avro_wire_format_roundtrip(registry):
    reg = SchemaRegistry(registry.url)
    sid = reg.register("payments-value", PAYMENT)
    assert reg.register("payments-value", PAYMENT) == sid  # idempotent
    data = encode(sid, parse_schema(PAYMENT), {"account": "a", "amount": 3, "ts": 10})
    assert data[0] == 0 and struct.unpack(">I", data[1:5])[0] == sid
    got_id, body = split_wire(data)
    assert got_id == sid
    assert decode_body(body, reg.writer_schema(sid)) == {"account": "a", "amount": 3, "ts": 10}
    with pytest.raises(UnknownSchemaError):
        reg.writer_schema(9999)


def test_avro_decoder_good_and_bad(registry):
    reg = SchemaRegistry(registry.url)
    sid = reg.register("payments-value", PAYMENT)
    other = reg.register("other-value", OTHER)
    d = InputDecoder(spec(format="avro", key_field="account", timestamp_field="ts", schema_registry_url=registry.url))
    good = encode(sid, parse_schema(PAYMENT), {"account": "a", "amount": 3, "ts": 10})
    assert d.decode(None, good, 0) == ("a", {"account": "a", "amount": 3, "ts": 10}, 10)

    def reason(value):
        with pytest.raises(BadRecord) as e:
            d.decode(None, value, 0)
        return e.value.reason

    assert reason(b"\x01\x00\x00\x00\x01abc") == "undecodable-value"  # wrong magic byte
    assert reason(b"\x00\x00") == "undecodable-value"  # too short
    assert reason(b"\x00" + struct.pack(">I", 4242) + b"\x02") == "unknown-schema"
    assert reason(good[:-3]) == "undecodable-value"  # truncated body
    assert reason(good + b"\x00\x00") == "undecodable-value"  # trailing bytes
    assert reason(encode(other, parse_schema(OTHER), {"x": "y"})) == "null-key"  # other schema, no key field
    assert reason(encode(sid, parse_schema(PAYMENT), {"account": None, "amount": 3, "ts": 10})) == "null-key"
    assert reason(encode(sid, parse_schema(PAYMENT), {"account": "a", "amount": 3, "ts": None})) == "missing-timestamp"
    assert reason(encode(sid, parse_schema(PAYMENT), {"account": "a", "amount": 3, "ts": -3})) == "invalid-timestamp"


def test_avro_timestamp_millis_logical_type(registry):
    schema = {
        "type": "record",
        "name": "E",
        "fields": [
            {"name": "k", "type": "string"},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }
    reg = SchemaRegistry(registry.url)
    sid = reg.register("e-value", schema)
    d = InputDecoder(InputSpec(format="avro", key_field="k", timestamp_field="at", schema_registry_url=registry.url))
    when = dt.datetime(2024, 1, 1, 0, 0, 1, 500000, tzinfo=dt.timezone.utc)
    data = encode(sid, parse_schema(schema), {"k": "x", "at": when})
    assert d.decode(None, data, 0)[2] == 1704067201500


# ------------------------------------------------------------------------------------------------ changelog
def test_windowed_key_layout_matches_kafka_streams():
    # TimeWindowedSerializer: serialized key + 8-byte big-endian start
    assert windowed_key("ab", 1) == b"ab\x00\x00\x00\x00\x00\x00\x00\x01"
    assert parse_windowed_key(windowed_key("acct-é", 1_700_000_000_000)) == ("acct-é", 1_700_000_000_000)


def test_json_changelog_is_deterministic_and_complete():
    enc = ChangelogEncoder(ChangelogSpec("json", "json", "count,sum:amount,max:amount"))
    keys, values = enc.encode([("a", 0, 10, {"count": 2, "sum_amount": 5, "max_amount": 4}, 7, 2)], emit_time=99)
    assert keys == [b'{"key":"a","window_start":0,"window_end":10}']
    assert json.loads(values[0]) == {
        "key": "a",
        "window_start": 0,
        "window_end": 10,
        "record_count": 2,
        "max_timestamp": 7,
        "emit_time": 99,
        "aggregates": {"count": 2, "sum_amount": 5, "max_amount": 4},
    }
    single = ChangelogEncoder(ChangelogSpec("string", "json", "count"))
    k, v = single.encode([("a", 0, 10, 3, 7, 3)], emit_time=1)
    assert k == [b"a|0|10"] and json.loads(v[0])["aggregates"] == {"count": 3}


def test_avro_changelog_roundtrip(registry):
    reg = SchemaRegistry(registry.url)
    aggs = "count,sum:amount,mean:amount,collect:amount"
    kid = reg.register("out-key", changelog_key_schema())
    vid = reg.register("out-value", changelog_value_schema(aggs))
    enc = ChangelogEncoder(ChangelogSpec("avro", "avro", aggs, kid, vid))
    value = {"count": 2, "sum_amount": 5, "mean_amount": 2.5, "collect_amount": [2, 3.0]}
    keys, values = enc.encode([("a", 0, 10, value, 7, 2)], emit_time=99)
    kid2, kbody = split_wire(keys[0])
    assert kid2 == kid and decode_body(kbody, reg.writer_schema(kid)) == {
        "key": "a",
        "window_start": 0,
        "window_end": 10,
    }
    vid2, vbody = split_wire(values[0])
    rec = decode_body(vbody, reg.writer_schema(vid2))
    assert rec["aggregates"] == value
    assert isinstance(rec["aggregates"]["sum_amount"], int)  # integers stay integers
    assert (rec["record_count"], rec["max_timestamp"], rec["emit_time"]) == (2, 7, 99)


@pytest.mark.parametrize("key_format", ["json", "windowed", "string"])
def test_fast_json_encoding_equals_json_dumps(key_format):
    aggs = "count,sum:amount,mean:amount,max:amount,collect:note"
    enc = ChangelogEncoder(ChangelogSpec(key_format, "json", aggs))
    weird = ["plain", 'quo"te', "back\\slash", "ünïcödé", "tab\there", "emoji 🎉", "nul\x00"]
    updates = []
    for i, k in enumerate(weird):
        value = {
            "count": i,
            "sum_amount": i * 1.5 if i % 2 else i,
            "mean_amount": None if i == 0 else i / 3,
            "max_amount": [float("nan"), float("inf"), -float("inf"), 1e300, -0.0, 7, 2**70][i],
            "collect_note": ["a", 1, None, 2.5][: i % 4],
        }
        updates.append((k, i * 10, i * 10 + 5, value, 100 + i, i))
    keys, values = enc.encode(updates, emit_time=42)
    for (k, s, e, v, ts, n), kb, vb in zip(updates, keys, values, strict=True):
        assert vb == enc.value(k, s, e, v, ts, n, 42)  # byte-identical to json.dumps
        assert kb == enc.key(k, s, e)
        rec = json.loads(vb)
        assert rec["key"] == k and rec["record_count"] == n and rec["emit_time"] == 42


@pytest.mark.parametrize("key_format", ["json", "windowed", "string"])
def test_column_encoding_equals_json_dumps(key_format):
    """The batch path's numpy columns (int64 and float64 aggregates, keys repeating) encode byte-identically."""
    import numpy as np

    enc = ChangelogEncoder(ChangelogSpec(key_format, "json", "count,sum:amount,max:amount,mean:amount"))
    keys = ["a%d", 'quo"te', "ünï", "a%d", "tab\there"] * 3
    n = len(keys)
    values = {
        "count": np.arange(n, dtype=np.int64),
        "sum_amount": np.arange(n, dtype=np.int64) * -(2**40),
        "max_amount": np.array([0.1, float("nan"), float("inf"), -0.0, 1e300] * 3),
        "mean_amount": np.array([None, 1, 2.5] * 5, dtype=object),
    }
    cols = {
        "key": keys,
        "start": np.arange(n, dtype=np.int64) * 10,
        "end": np.arange(n, dtype=np.int64) * 10 + 5,
        "ts": np.arange(n, dtype=np.int64) + 7,
        "count": np.arange(n, dtype=np.int64) + 1,
        "values": values,
    }
    out_keys, out_values = enc.encode_columns(cols, 42)
    for i, k in enumerate(keys):
        s, e = 10 * i, 10 * i + 5
        v = {name: col[i].item() if hasattr(col[i], "item") else col[i] for name, col in values.items()}
        assert out_values[i] == enc.value(k, s, e, v, i + 7, i + 1, 42)
        assert out_keys[i] == enc.key(k, s, e)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=12),
        st.builds(lambda tail: b"{" + tail, st.binary(max_size=12)),
        st.builds(
            lambda o: json.dumps(o, ensure_ascii=False).encode("utf-8"),
            st.dictionaries(
                st.text(max_size=4), st.one_of(st.integers(), st.floats(), st.text(max_size=4)), max_size=3
            ),
        ),
        st.builds(
            lambda o, enc: json.dumps(o).encode(enc),
            st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
            st.sampled_from(["utf-16", "utf-16-le", "utf-32-be", "utf-8-sig"]),
        ),
    )
)
def test_loads_json_is_json_loads(data):
    from connectors.serde import loads_json

    def outcome(f):
        try:
            return "ok", json.dumps(f(data), sort_keys=True)
        except Exception as e:  # the very exception type must agree
            return "error", type(e)

    assert outcome(loads_json) == outcome(json.loads)


_JSON_VALUES = st.one_of(
    st.binary(max_size=12),
    st.builds(lambda tail: b"{" + tail, st.binary(max_size=12)),
    st.builds(
        lambda o: json.dumps(o, ensure_ascii=False).encode("utf-8"),
        st.dictionaries(st.text(max_size=4), st.one_of(st.integers(), st.floats(), st.text(max_size=4)), max_size=3),
    ),
    # fragments that only parse when joined with their neighbours (an array parse of the batch would accept them)
    st.sampled_from(
        [
            b'{"a": "}',
            b'{"}',
            b'{"c":1},{"d":2}',
            b'{"x": [1',
            b"2]}",
            b'{"a":1} ',
            b'{"a":1}\x00',
            b'{"a":1} x',
            b'{"a":"\xed\xa0\x80"}',
            b'{"a":"\xff"}',
            b'\xef\xbb\xbf{"a":1}',
        ]
    ),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_JSON_VALUES, max_size=8))
def test_loads_json_objects_parses_each_value_as_json_loads_or_leaves_it(values):
    from connectors.serde import loads_json_objects

    got = loads_json_objects(values)
    assert len(got) == len(values)
    for v, obj in zip(values, got, strict=True):
        try:
            expected = json.loads(v)
        except Exception:  # any failure: the batch parse must leave it to the per-record path
            assert obj is None, v
            continue
        if obj is not None:
            assert json.dumps(obj, sort_keys=True) == json.dumps(expected, sort_keys=True), v
        elif v[:1] == b"{" and b"\x00" not in b"".join(values):
            try:
                b"".join(values).decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                continue
            raise AssertionError(f"{v!r} parses alone but was left to the per-record path")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=4), st.just(b"acct-1")),
            st.one_of(
                st.none(),
                _JSON_VALUES,
                st.builds(
                    lambda a, t: json.dumps({"amount": a, "t": t}).encode(),
                    st.one_of(st.integers(-5, 5), st.text(max_size=2), st.none()),
                    st.one_of(st.integers(-3, 10**13), st.none()),
                ),
            ),
            st.one_of(st.none(), st.integers(-2, 10**13)),
        ),
        max_size=10,
    ),
    st.sampled_from(["", "t"]),
)
def test_decode_batch_is_decode_record_by_record(records, timestamp_field):
    from connectors.serde import BadRecord, InputDecoder, InputSpec

    dec = InputDecoder(InputSpec(format="json", timestamp_field=timestamp_field, fields=(("amount", True),)))
    keys, values, timestamps = (list(c) for c in zip(*records, strict=True)) if records else ([], [], [])
    good, bad = dec.decode_batch(keys, values, timestamps)
    expected_good, expected_bad = [], []
    for i, (k, v, t) in enumerate(records):
        try:
            kk, vv, tt = dec.decode(k, v, t)
        except BadRecord as e:
            expected_bad.append((i, e.reason, e.message))
        else:
            expected_good.append((i, kk, json.dumps(vv, sort_keys=True), tt))
    assert bad == expected_bad
    assert [(i, k, json.dumps(v, sort_keys=True), t) for i, k, v, t in good] == expected_good


# a record that is usually good: mostly valid keys, values and times, with now and then one of each kind of flaw
_GOOD_KEY = st.one_of(st.just(b"acct-1"), st.text(max_size=3).map(lambda t: t.encode("utf-8", "surrogatepass")))
_COLUMN_RECORD = st.tuples(
    st.one_of(_GOOD_KEY, _GOOD_KEY, _GOOD_KEY, st.none(), st.sampled_from([b"\xff", b"a\x00b", b"\xe2\x82"])),
    st.one_of(
        st.builds(
            lambda a, note, k, t: json.dumps({"amount": a, "note": note, "k": k, "t": t}).encode(),
            st.one_of(st.integers(-5, 5), st.floats(allow_nan=False), st.integers(-5, 5)),
            st.one_of(st.text(max_size=2), st.none(), st.lists(st.integers(), max_size=2)),
            st.one_of(st.just("acct-2"), st.just("acct-2"), st.integers(0, 3), st.none()),
            st.one_of(st.integers(0, 10**13), st.integers(0, 10**13), st.just(-1), st.just(True)),
        ),
        st.sampled_from(
            [
                b'{"amount": true, "note": 1, "k": "x", "t": 1}',
                b'{"note": 1, "k": "x", "t": 1}',
                b'{"amount": 1, "k": "x", "t": 1}',
                b"[1]",
                b'{"amount": 1',
                None,
                b"\xff",
            ]
        ),
    ),
    st.one_of(st.integers(0, 10**13), st.integers(0, 10**13), st.none(), st.just(-3), st.just(True)),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_COLUMN_RECORD, max_size=8), st.sampled_from(["", "k"]), st.sampled_from(["", "t"]), st.booleans())
def test_decode_columns_is_decode_batch_as_columns(records, key_field, timestamp_field, all_good_only):
    from connectors.serde import Decoded

    dec = InputDecoder(
        InputSpec(
            format="json",
            key_field=key_field,
            timestamp_field=timestamp_field,
            fields=(("amount", True), ("note", False)),
        )
    )
    if all_good_only:  # the column check's own case: keep only the records decode() accepts
        records = [r for r in records if _good(dec, *r)]
    keys, values, timestamps = (list(c) for c in zip(*records, strict=True)) if records else ([], [], [])
    got, bad = dec.decode_columns(keys, values, timestamps, ("amount", "note"))
    good_records, expected_bad = dec.decode_batch(keys, values, timestamps)
    expected = Decoded.of(good_records, ("amount", "note"))
    assert bad == expected_bad
    assert (got.index, got.keys, got.ts.dtype, got.ts.tolist()) == (
        expected.index,
        expected.keys,
        np.int64,
        expected.ts.tolist(),
    )
    assert json.dumps([got.values, got.fields]) == json.dumps([expected.values, expected.fields])
    assert [type(v) for v in got.fields["amount"]] == [type(v) for v in expected.fields["amount"]]


def _good(dec, k, v, t) -> bool:
    try:
        dec.decode(k, v, t)
    except BadRecord:
        return False
    return True


def test_decode_columns_takes_the_column_check_for_an_all_good_json_batch(monkeypatch):
    dec = InputDecoder(spec())
    monkeypatch.setattr(dec, "_decode_records", lambda *a: pytest.fail("took the record path"))
    got, bad = dec.decode_columns([b"a", b"b\xc3\xa9"], [b'{"amount": 1}', b'{"amount": 2.5}'], [5, 6], ("amount",))
    assert bad == [] and got.keys == ["a", "b\u00e9"] and got.ts.tolist() == [5, 6]
    assert got.fields == {"amount": [1, 2.5]} and got.index == [0, 1]


@pytest.mark.parametrize("stamps", [[1, None], [1, -1], [1.0, 2.0], [True, 2]])
def test_decode_columns_leaves_timestamps_it_cannot_take_whole_to_the_record_path(stamps):
    dec = InputDecoder(spec())
    got, bad = dec.decode_columns([b"a", b"b"], [b'{"amount": 1}'] * 2, stamps, ("amount",))
    expected_good, expected_bad = dec.decode_batch([b"a", b"b"], [b'{"amount": 1}'] * 2, stamps)
    assert bad == expected_bad and got.ts.tolist() == [t for _, _, _, t in expected_good]


def test_decode_columns_parses_a_batch_with_a_bad_record_once(monkeypatch):
    from connectors import serde

    calls = []
    real = serde.loads_json_objects
    monkeypatch.setattr(serde, "loads_json_objects", lambda values: calls.append(1) or real(values))
    got, bad = InputDecoder(spec()).decode_columns(
        [b"a", None], [b'{"amount": 1}', b'{"amount": 2}'], [5, 6], ("amount",)
    )
    assert calls == [1]
    assert got.keys == ["a"] and [(i, r) for i, r, _m in bad] == [(1, "null-key")]
