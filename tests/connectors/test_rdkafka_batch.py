"""Changelog rows through librdkafka's batch call (ctypes): the same records, partitions, order and failures as
confluent-kafka's produce(), and the per-row path when the library is off or missing."""

from __future__ import annotations

import ctypes
import logging

import numpy as np
import pytest

from connectors import rdkafka_batch
from connectors.producer import DeliveryError, OutputProducer, producer_config
from connectors.rdkafka_batch import MESSAGE_DTYPE, BatchRefused, _Message, library_path, load
from connectors.rows import RowBlock
from tests.connectors.test_producer import java_partition


def test_the_message_array_has_librdkafkas_layout():
    assert MESSAGE_DTYPE.itemsize == ctypes.sizeof(_Message)
    for name, _t in _Message._fields_:
        assert MESSAGE_DTYPE.fields[name][1] == getattr(_Message, name).offset
    if ctypes.sizeof(ctypes.c_void_p) == 8:  # rd_kafka_message_t on a 64-bit platform
        assert [MESSAGE_DTYPE.fields[n][1] for n, _t in _Message._fields_] == [0, 8, 16, 24, 32, 40, 48, 56, 64]


def test_the_library_is_the_one_confluent_kafka_ships():
    import confluent_kafka

    lib, why = load()
    assert lib is not None, why
    assert library_path() is not None
    assert lib.version_str().decode() == confluent_kafka.libversion()[0]


@pytest.mark.integration
@pytest.mark.parametrize("as_block", [True, False])
def test_rows_arrive_in_order_on_the_java_partition(kafka_bootstrap, make_topic, monkeypatch, as_block):
    from tests.service.harness import consume_all

    # small chunks and a small queue: several produce_batch calls per send, some waiting for room
    monkeypatch.setattr(rdkafka_batch, "CHUNK", 700)
    topic = make_topic(3)
    n = 5000
    keys = [f"acct-{i % 37}".encode() + bytes(i % 5) for i in range(n)]
    values = [b"v%d" % i for i in range(n)]
    p = OutputProducer({**producer_config(kafka_bootstrap), "queue.buffering.max.messages": "1500"})
    try:
        if as_block:
            p.send_rows(topic, RowBlock.of(keys[:2000]), RowBlock.of(values[:2000]))
            p.send_rows(topic, RowBlock.of(keys[2000:]), RowBlock.of(values[2000:]))
        else:  # lists are joined into blocks
            p.send_rows(topic, keys, values)
        p.send_rows(topic, [], [])
        assert p._batches is not None and p._producer is None  # only the block producer was needed
        assert p._batches.partition_count(topic) == 3  # so the rows were put in their partitions here
        assert p.wait() == n
    finally:
        p.close()
    got = consume_all(kafka_bootstrap, topic)
    assert sorted(r.value for r in got) == sorted(values)
    for r in got:
        i = int(r.value[1:])
        assert r.key == keys[i] and r.headers == {}
        assert r.partition == java_partition(keys[i], 3)
    for part in range(3):
        seq = [int(r.value[1:]) for r in got if r.partition == part]
        assert seq == sorted(seq)


@pytest.mark.integration
def test_null_values_go_through_the_batch_call_as_tombstones(kafka_bootstrap, make_topic):
    """A session's replaced windows are null values among the changelog rows: they go with the block, as
    records with a null value (not an empty one), in order."""
    from tests.service.harness import consume_all

    topic = make_topic(1)
    keys = [b"k%d" % i for i in range(6)]
    values = [b"v0", None, b"v2", None, None, b""]
    p = OutputProducer(producer_config(kafka_bootstrap))
    try:
        p.send_rows(topic, keys, values)
        assert p._batches is not None and p._producer is None  # the block path, not one produce() per row
        assert p.wait() == 6
    finally:
        p.close()
    got = consume_all(kafka_bootstrap, topic)
    assert [(r.key, r.value) for r in got] == list(zip(keys, values, strict=True))


def test_undelivered_rows_raise():
    p = OutputProducer({**producer_config("127.0.0.1:1"), "message.timeout.ms": "1500"})
    try:
        p.send_rows("t", RowBlock.of([b"k1", b"k2", b"k3"]), RowBlock.of([b"v1", b"v2", b"v3"]))
        p.send(["t"], [b"k"], [b"v"], [[("h", b"x")]])  # and one through confluent-kafka
        with pytest.raises(DeliveryError, match="4 output records were not delivered while this batch's 4"):
            p.wait()
        assert p.wait() == 0  # a later batch does not see them
    finally:
        p.close()


def test_a_row_librdkafka_refuses_raises():
    p = OutputProducer({**producer_config("127.0.0.1:1"), "message.max.bytes": "1000", "message.timeout.ms": "500"})
    try:
        with pytest.raises(BatchRefused, match=r"refused output row 1 of 2 for t: .*too large"):
            p.send_rows("t", RowBlock.of([b"a", b"b"]), RowBlock.of([b"small", bytes(5000)]))
    finally:
        p.close()  # the first row was queued: it fails within message.timeout.ms


def test_null_keys_and_a_missing_library_take_the_per_row_path(monkeypatch, caplog):
    sent = []
    p = OutputProducer(producer_config("127.0.0.1:1"))
    monkeypatch.setattr(p, "send", lambda *a: sent.append(a))
    p.send_rows("t", [None, b"k"], [b"v", b"w"])
    assert sent == [(["t", "t"], [None, b"k"], [b"v", b"w"], [None, None])]
    p.close()

    monkeypatch.setattr(rdkafka_batch, "load", lambda: (None, "no librdkafka here"))
    q = OutputProducer(producer_config("127.0.0.1:1"))
    monkeypatch.setattr(q, "send", lambda *a: sent.append(a))
    with caplog.at_level(logging.WARNING, logger="connectors.producer"):
        q.send_rows("t", [b"k"], [b"v"])
        q.send_rows("t", [b"k"], [b"v"])
    assert q._batches is None and len(sent) == 3
    assert [r.getMessage() for r in caplog.records].count(
        "changelog rows go one produce() call at a time: no librdkafka here"
    ) == 1
    q.close()

    off = OutputProducer(producer_config("127.0.0.1:1"), batches=False)
    monkeypatch.setattr(off, "send", lambda *a: sent.append(a))
    off.send_rows("t", RowBlock.of([b"k"]), RowBlock.of([b"v"]))
    assert off._batches is None and len(sent) == 4
    off.close()


def test_rejected_settings_name_the_setting():
    with pytest.raises(ValueError, match=r"librdkafka rejects no.such.setting=1"):
        rdkafka_batch.BatchProducer({"no.such.setting": "1"}, lambda n, t: None)


def test_keys_and_values_must_pair_up():
    b = rdkafka_batch.BatchProducer(producer_config("127.0.0.1:1"), lambda n, t: None)
    try:
        with pytest.raises(ValueError, match="1 keys for 2 values"):
            b.send("t", RowBlock.of([b"k"]), RowBlock(b"ab", np.array([1, 2])))
    finally:
        b.close()


def test_rows_go_to_librdkafkas_partitioner_without_kafkas_default_one_or_a_partition_count(monkeypatch):
    def not_here(*a):
        raise AssertionError("partitioned here")

    monkeypatch.setattr(rdkafka_batch, "partitions", not_here)
    monkeypatch.setattr(rdkafka_batch, "METADATA_TIMEOUT_MS", 200)
    unreachable = {**producer_config("127.0.0.1:1"), "message.timeout.ms": "300"}
    other = rdkafka_batch.BatchProducer({**unreachable, "partitioner": "consistent_random"}, lambda n, t: None)
    no_count = rdkafka_batch.BatchProducer(unreachable, lambda n, t: None)
    requests = []
    metadata = no_count._lib.metadata
    monkeypatch.setattr(no_count._lib, "metadata", lambda *a: requests.append(a) or metadata(*a))
    try:
        asked = []
        monkeypatch.setattr(other, "partition_count", lambda *a: asked.append(a))
        other.send("t", RowBlock.of([b"k"]), RowBlock.of([b"v"]))
        assert asked == []  # librdkafka's partitioner is not Kafka's default here: no count needed
        no_count.send("t", RowBlock.of([b"k"]), RowBlock.of([b"v"]))  # no count: librdkafka partitions the row
        no_count.send("t", RowBlock.of([b"k2"]), RowBlock.of([b"v2"]))  # and the failed request is not repeated
        assert no_count.partition_count("t") is None and len(requests) == 1
        assert no_count.pending() >= 2  # both rows queued (outq_len counts librdkafka's requests too)
    finally:
        other.close()  # the rows fail after message.timeout.ms
        no_count.close()
