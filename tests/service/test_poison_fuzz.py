"""Fuzz (issue 29): random JSON values and random Avro payloads - huge integers, floats, NaN, infinities, nested
objects, wrong types, empty and huge strings, random bytes - go through the decoder and the processor as ONE
micro-batch (:func:`service.worker.run.process_task_batch` on a real in-memory task state). Nothing raises, and
every record ends exactly once: aggregated, late, or on the dead-letter topic with a known reason."""

from __future__ import annotations

import json
import math
import struct

import pytest
from fastavro import parse_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.avro import encode
from connectors.output import ChangelogSpec
from connectors.schema_registry import SchemaRegistry
from connectors.serde import MAX_TIMESTAMP_MS, InputSpec, aggregation_fields
from service.metrics import DEAD_LETTER_REASONS
from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskRunner
from service.task.state import DictTaskState
from service.worker.cache import WORKER
from service.worker.run import process_task_batch
from tests.service.schema_registry_double import SchemaRegistryDouble
from windowstore import WindowDefinition

AGGS = "count,sum:amount,max:amount,mean:amount,first:note,collect:note"

_BIG = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30, 2**62, 2**62 + 7]),
)
_FLOATS = st.one_of(st.floats(), st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324]))
_SCALAR = st.one_of(st.none(), st.booleans(), _BIG, _FLOATS, st.text(max_size=5), st.sampled_from(["", "x" * 5000]))
_JSON = st.recursive(
    _SCALAR,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=3), kids, max_size=3)),
    max_leaves=12,
)
_TS = st.one_of(
    st.integers(0, 2 * 10**12),
    st.integers(0, 2 * 10**12),
    st.integers(),
    _SCALAR,
    st.sampled_from([MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1, 10**19, -1]),
)


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


_JSON_VALUE = st.one_of(
    # mostly records of the expected shape, with random field values
    st.builds(
        lambda a, n, t, extra: json.dumps({"amount": a, "note": n, "ts": t, **extra}).encode(),
        st.one_of(_BIG, _FLOATS, _SCALAR, _JSON),
        st.one_of(_SCALAR, _JSON),
        _TS,
        st.dictionaries(st.text(max_size=3), _JSON, max_size=2),
    ),
    st.builds(
        lambda a, t: json.dumps({"amount": a, "note": "n", "ts": t}).encode(),
        st.integers(-1000, 1000),
        st.integers(0, 10**6),
    ),
    _JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"",
            b"{",
            b"null",
            b'{"amount": 1, "note": ' + _deep(3000).encode() + b"}",
            b'{"amount": 1e999, "note": 1, "ts": 1}',
            b'{"amount": 1, "note": ' + _deep(70).encode() + b', "ts": 3}',
        ]
    ),
    st.none(),
)
_KEY = st.one_of(st.just(b"acct-1"), st.just(b"acct-2"), st.binary(max_size=6), st.none())
_KAFKA_TS = st.one_of(st.integers(0, 2 * 10**12), st.sampled_from([0, MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1]))


def _config(timestamp_field: str, fmt: str = "json", url: str = "", batch: bool = True) -> TaskConfig:
    return TaskConfig(
        WindowDefinition("sliding", 1000, grace_ms=300),
        AGGS,
        "update",
        InputSpec(
            format=fmt,
            timestamp_field=timestamp_field,
            key_field="account" if fmt == "avro" else "",
            fields=aggregation_fields(AGGS),
            schema_registry_url=url,
        ),
        ChangelogSpec("json", "json", AGGS),
        "out",
        "late",
        "dlq",
        batch=batch,
    )


def _check_one_batch(cfg: TaskConfig, keys, values, stamps, registry=None) -> None:
    WORKER.clear()
    runner = TaskRunner(cfg, registry=registry)
    n = len(values)
    offsets = list(range(100, 100 + n))
    out = process_task_batch(runner, DictTaskState(), TaskBatch("in", 0, offsets, keys, values, stamps, emit_time_ms=5))
    rows = out.rows()
    dlq = [dict(h) for kind, _t, _k, _v, h in rows if kind == "dlq"]
    late = [int(dict(h)["offset"]) for kind, _t, _k, _v, h in rows if kind == "late"]
    dead = [int(h["offset"]) for h in dlq]
    reasons = {h["error"].decode() for h in dlq}
    assert reasons <= set(DEAD_LETTER_REASONS)
    # bad input is caught at decode: none of it reaches the processing exception handler
    assert "processing-error" not in reasons, [h["error.message"] for h in dlq]
    decoded = [offsets[i] for i in out.decoded.index]
    assert sorted(dead + decoded) == offsets  # each record: dead-lettered or given to the processor, once
    assert set(late) <= set(decoded) and len(set(late)) == len(late)
    s = out.stats
    assert (s["aggregated"], s["late"], s["dead_lettered"]) == (len(decoded) - len(late), len(late), len(dead))
    for _kind, _t, _k, value, _h in (r for r in rows if r[0] == "changelog"):
        json.loads(value)  # every window update is readable


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_KEY, _JSON_VALUE, _KAFKA_TS), max_size=12), st.sampled_from(["", "ts"]), st.booleans())
def test_random_json_batches_never_raise_and_every_record_ends_once(records, timestamp_field, batch):
    keys, values, stamps = (list(c) for c in zip(*records, strict=True)) if records else ([], [], [])
    _check_one_batch(_config(timestamp_field, batch=batch), keys, values, stamps)


AVRO = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "account", "type": ["null", "string", "long"]},
        {"name": "amount", "type": ["null", "long", "double", "string", "boolean", {"type": "array", "items": "long"}]},
        {"name": "note", "type": ["null", "string", "double"]},
        {"name": "ts", "type": ["null", "long", "double"]},
    ],
}

_AVRO_RECORD = st.fixed_dictionaries(
    {
        "account": st.one_of(st.none(), st.text(max_size=4), st.integers(-(2**63), 2**63 - 1)),
        "amount": st.one_of(
            st.none(),
            st.integers(-(2**63), 2**63 - 1),
            _FLOATS,
            st.text(max_size=3),
            st.booleans(),
            st.lists(st.integers(-5, 5), max_size=2),
        ),
        "note": st.one_of(st.none(), st.text(max_size=3), st.sampled_from(["", "y" * 3000]), _FLOATS),
        "ts": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.integers(0, 10**12), _FLOATS),
    }
)


@pytest.fixture(scope="module")
def avro_registry():
    with SchemaRegistryDouble() as sr:
        schema_id = SchemaRegistry(sr.url).register("in-value", AVRO)
        yield sr.url, schema_id


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(_AVRO_RECORD, st.binary(max_size=30), st.binary(max_size=12).map(lambda b: b"\x00" + b)), max_size=10
    ),
    st.data(),
)
def test_random_avro_batches_never_raise_and_every_record_ends_once(avro_registry, payloads, data):
    url, schema_id = avro_registry
    parsed = parse_schema(AVRO)

    def wire(p):
        if isinstance(p, dict):
            return encode(schema_id, parsed, p)
        if p[:1] == b"\x00" and len(p) > 5 and data.draw(st.booleans()):
            return b"\x00" + struct.pack(">I", schema_id) + p[5:]  # our schema id, random body
        return p

    values = [wire(p) for p in payloads]
    cfg = _config("ts", fmt="avro", url=url)
    _check_one_batch(cfg, [None] * len(values), values, [0] * len(values))
