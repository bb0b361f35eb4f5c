"""A task batch (:func:`service.worker.run.process_task_batch`) with ``collect`` and with integer sums beyond
int64, JSON and Avro changelog: every good record aggregated (none dead-lettered as ``processing-error``), and
the changelog read back by a consumer - ``json.loads``, or confluent-kafka's ``AvroDeserializer`` against the
Schema Registry double - holds the exact values (``collect``'s lists; ``2**62 + 2**62 + 7`` as
9223372036854775815, in the ``sum`` field's decimal branch on Avro: service/README.md, integer semantics)."""

from __future__ import annotations

import decimal
import io
import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from connectors.output import ChangelogSpec, changelog_key_schema, changelog_value_schema
from connectors.serde import InputSpec, aggregation_fields
from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskRunner
from service.task.state import DictTaskState
from service.worker.cache import WORKER
from service.worker.run import process_task_batch
from tests.service.schema_registry_double import SchemaRegistryDouble
from windowstore import WindowDefinition

AGGS = "count,sum:amount,max:amount,collect:note,first:note"
BIG = 2**62
EXACT = 9223372036854775815  # 2**62 + (2**62 + 7): beyond int64


@pytest.fixture(scope="module")
def registry():
    with SchemaRegistryDouble() as reg:
        yield reg


def _spec(fmt: str, client: SchemaRegistryClient | None) -> ChangelogSpec:
    if fmt == "json":
        return ChangelogSpec("json", "json", AGGS)
    assert client is not None
    kid = client.register_schema("out-key", Schema(json.dumps(changelog_key_schema()), "AVRO"))
    vid = client.register_schema("out-value", Schema(json.dumps(changelog_value_schema(AGGS)), "AVRO"))
    return ChangelogSpec("avro", "avro", AGGS, kid, vid)


def _records():
    """Key ``k``: notes of different kinds and list lengths per window, the two big amounts in one window."""
    recs = [
        (b"k", {"amount": BIG, "note": "a", "ts": 1000}),
        (b"k", {"amount": BIG + 7, "note": 1, "ts": 1001}),
        (b"j", {"amount": 1, "note": None, "ts": 1002}),
        (b"j", {"amount": 2, "note": "x", "ts": 1003}),
        (b"j", {"amount": 3, "note": True, "ts": 1050}),
        (b"k", {"amount": 5, "note": "z", "ts": 5000}),
    ]
    return [k for k, _ in recs], [json.dumps(v).encode() for _, v in recs]


def _run(fmt: str, emit: str, batch: bool, client: SchemaRegistryClient | None):
    WORKER.clear()
    cfg = TaskConfig(
        WindowDefinition("sliding", 100, grace_ms=0),
        AGGS,
        emit,
        InputSpec(format="json", timestamp_field="ts", fields=aggregation_fields(AGGS)),
        _spec(fmt, client),
        "out",
        "late",
        "dlq",
        batch=batch,
        processing_exception_handler="fail",
    )
    keys, values = _records()
    records = TaskBatch("in", 0, list(range(len(values))), keys, values, [0] * len(values), emit_time_ms=5)
    out = process_task_batch(TaskRunner(cfg), DictTaskState(), records)
    rows = out.rows()
    assert [r for r in rows if r[0] == "dlq"] == []
    assert out.stats["aggregated"] == len(values)
    return [v for kind, _t, _k, v, _h in rows if kind == "changelog"]


def _decode(fmt: str, values, client: SchemaRegistryClient | None):
    if fmt == "json":
        return [json.loads(v) for v in values]
    de = AvroDeserializer(client)
    ctx = SerializationContext("out", MessageField.VALUE)
    return [de(bytes(v), ctx) for v in values]


@pytest.mark.parametrize("fmt", ["json", "avro"])
@pytest.mark.parametrize("emit", ["update", "close"])
def test_collect_and_exact_sums_reach_the_changelog(registry, fmt, emit):
    client = SchemaRegistryClient({"url": registry.url}) if fmt == "avro" else None
    got = {b: _decode(fmt, _run(fmt, emit, b, client), client) for b in (False, True)}
    assert got[True] == got[False]  # batch path == record path, byte for byte decoded
    by_window = {(r["key"], r["window_start"]): r["aggregates"] for r in got[True]}
    both = by_window[("k", 901)]  # [901, 1001]: the two big amounts
    assert both["sum_amount"] == EXACT and int(both["sum_amount"]) == EXACT
    assert both["collect_note"] == ["a", 1] and both["first_note"] == "a" and both["count"] == 2
    if fmt == "avro":
        assert isinstance(both["sum_amount"], decimal.Decimal)  # the exact branch
    else:
        assert type(both["sum_amount"]) is int
    j = by_window[("j", 903)]  # [903, 1003]
    assert j["collect_note"] == [None, "x"] and j["sum_amount"] == 3 and type(j["sum_amount"]) is int
    if emit == "update":  # close mode: [4900, 5000] is still open
        assert by_window[("k", 4900)]["sum_amount"] == 5 and by_window[("k", 4900)]["collect_note"] == ["z"]


def test_the_new_sum_schema_reads_changelogs_written_with_the_old_one():
    """Backward compatible (the Schema Registry's default check): the ``sum`` union only gained a branch at its
    end, so a consumer on the new schema reads every record written before, and the branch indexes of
    ``null``/``long``/``double`` are unchanged (old records' bytes equal new ones' for in-range sums)."""
    new = changelog_value_schema(AGGS)
    old = json.loads(json.dumps(new))
    for f in old["fields"][-1]["type"]["fields"]:
        if f["name"] == "sum_amount":
            f["type"] = ["null", "long", "double"]
    rec = {
        "key": "k",
        "window_start": 0,
        "window_end": 100,
        "record_count": 1,
        "max_timestamp": 7,
        "emit_time": 9,
        "aggregates": {"count": 1, "sum_amount": 5, "max_amount": 5, "collect_note": ["a"], "first_note": "a"},
    }
    old_bytes, new_bytes = io.BytesIO(), io.BytesIO()
    schemaless_writer(old_bytes, parse_schema(old), rec)
    schemaless_writer(new_bytes, parse_schema(new), rec)
    assert old_bytes.getvalue() == new_bytes.getvalue()
    old_bytes.seek(0)
    assert schemaless_reader(old_bytes, parse_schema(old), parse_schema(new)) == rec
