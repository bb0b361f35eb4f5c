"""connectors.transactions on the real broker: a task's transaction carries its rows and its input offset,
a new producer of the same task fences the old one and aborts its open transaction, and read_committed readers
never see aborted rows."""

from __future__ import annotations

import time

import pytest

from connectors.producer import producer_config
from connectors.transactions import GroupCommitter, TaskProducer, transactional_config, transactional_id

pytestmark = pytest.mark.integration


def _read_committed(bootstrap: str, topic: str, partitions: int) -> list[tuple[bytes, bytes, dict]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, last = [], time.monotonic()
        while time.monotonic() - last < 3:
            msgs = c.consume(100, timeout=0.5)
            out += [(m.key(), m.value(), dict(m.headers() or [])) for m in msgs if m.error() is None]
            if msgs:
                last = time.monotonic()
        return out
    finally:
        c.close()


def test_transactional_config_keeps_message_timeout_within_the_transaction_timeout():
    cfg = transactional_config(producer_config("h:1"), transactional_id("app", "in", 3))
    assert cfg["transactional.id"] == "app-in-3"
    assert int(cfg["message.timeout.ms"]) <= int(cfg["transaction.timeout.ms"])
    assert "delivery.report.only.error" not in cfg


@pytest.mark.parametrize("batches", [True, False], ids=["rdkafka-batch", "confluent-kafka"])
def test_a_task_transaction_commits_rows_and_offset_and_fences_the_previous_producer(
    kafka_bootstrap, make_topic, batches
):
    from confluent_kafka import KafkaException

    src, out = make_topic(2), make_topic(2)
    group = f"app-{time.monotonic_ns()}"
    cfg = producer_config(kafka_bootstrap)
    first = TaskProducer(cfg, group, src, 1, batches)
    assert first.committed() is None
    first.begin()
    first.send_rows(out, [b"k1", b"k2"], [b"v1", b"v2"])
    first.send(
        [out, out],
        [b"k3", None],
        [b"dead", None],
        [[("error", b"null-key")], [("error", b"null-value"), ("offset", b"7")]],
    )
    first.commit(42)
    assert first.committed() == 42

    # the task moves: the new producer fences the old one; an open transaction of the new one is aborted by
    # the next producer of the task
    second = TaskProducer(cfg, group, src, 1, batches)
    assert second.committed() == 42
    first.begin()
    first.send_rows(out, [b"zombie"], [b"x"])
    with pytest.raises(KafkaException):
        first.commit(50)
    second.begin()
    second.send_rows(out, [b"aborted"], [b"x"])  # never committed
    third = TaskProducer(cfg, group, src, 1, batches)
    assert third.committed() == 42
    third.begin()
    third.send_rows(out, [b"k4"], [b"v4"])
    third.commit(60)
    assert third.committed() == 60
    got = _read_committed(kafka_bootstrap, out, 2)
    assert sorted(k for k, _v, _h in got if k is not None) == [b"k1", b"k2", b"k3", b"k4"]
    assert [h for k, _v, h in got if k == b"k3"] == [{"error": b"null-key"}]
    assert [(v, h) for k, v, h in got if k is None] == [(None, {"error": b"null-value", "offset": b"7"})]
    for p in (first, second, third):
        p.close()


def test_the_group_committer_commits_processed_offsets(kafka_bootstrap, make_topic):
    from confluent_kafka import Consumer, TopicPartition

    src = make_topic(2)
    group = f"alo-{time.monotonic_ns()}"
    gc = GroupCommitter({"bootstrap.servers": kafka_bootstrap}, group)
    gc.commit({(src, 0): 5, (src, 1): 7})
    gc.close()
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(src, 0), TopicPartition(src, 1)], timeout=10)
    finally:
        c.close()
    assert [tp.offset for tp in got] == [5, 7]
