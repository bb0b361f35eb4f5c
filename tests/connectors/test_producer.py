"""The direct sink's producer: every record delivered in order with its headers, to the partition the Java
client's default partitioner picks; failures raise; settings librdkafka rejects are reported at start."""

from __future__ import annotations

import pytest

from connectors.producer import (
    DeliveryError,
    OutputProducer,
    check_producer_config,
    close_producers,
    producer_config,
    producer_for,
)


def java_partition(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % partitions`` - the Java producer's partition for a keyed record."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    i = 0
    while length - i >= 4:
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
        i += 4
    rest = length - i
    if rest == 3:
        h ^= key[i + 2] << 16
    if rest >= 2:
        h ^= key[i + 1] << 8
    if rest >= 1:
        h ^= key[i]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def test_java_partition_reference():
    # values of org.apache.kafka.common.utils.Utils.murmur2 from Kafka's own UtilsTest
    assert java_partition(b"21", 1 << 31) == -973932308 & 0x7FFFFFFF
    assert java_partition(b"abc", 1 << 31) == 479470107 & 0x7FFFFFFF


@pytest.mark.integration
def test_write_delivers_everything_in_order(kafka_bootstrap, make_topic):
    from tests.service.harness import consume_all

    topic = make_topic(3)
    other = make_topic(1)
    n = 3000
    topics = [topic if i % 10 else other for i in range(n)]
    keys = [None if i % 97 == 0 else f"acct-{i % 37}".encode() for i in range(n)]
    values = [b"v%d" % i for i in range(n)]
    headers = [[("offset", str(i).encode()), ("reason", b"late")] if i % 3 == 0 else None for i in range(n)]
    p = producer_for(producer_config(kafka_bootstrap))
    assert p is producer_for(producer_config(kafka_bootstrap))  # one per worker process and configuration
    try:
        assert p.write(topics, keys, values, headers) == n
    finally:
        close_producers()  # closed and forgotten: the next call makes a new one
    assert producer_for(producer_config(kafka_bootstrap)) is not p
    close_producers()

    got = {t: consume_all(kafka_bootstrap, t) for t in (topic, other)}
    assert sorted(r.value for rs in got.values() for r in rs) == sorted(values)
    by_value = {r.value: (t, r) for t, rs in got.items() for r in rs}
    for i in range(n):
        t, r = by_value[values[i]]
        assert (t, r.key) == (topics[i], keys[i])
        assert r.headers == (dict(headers[i]) if headers[i] else {})
        if keys[i] is not None and t == topic:
            assert r.partition == java_partition(keys[i], 3)
    # per partition, the records are in the order they were given
    for part in {r.partition for r in got[topic]}:
        seq = [int(r.value[1:]) for r in got[topic] if r.partition == part]
        assert seq == sorted(seq)


def test_undelivered_records_raise():
    p = OutputProducer({**producer_config("127.0.0.1:1"), "message.timeout.ms": "1500"})
    try:
        with pytest.raises(DeliveryError, match="2 output records were not delivered while this batch's 2"):
            p.write(["t", "t"], [b"k", None], [b"v", b"w"], [None, [("h", b"x")]])
    finally:
        p.close()  # nothing is left queued; without it the producer retries port 1 until the process exits


def test_a_failure_fails_every_batch_in_flight_and_no_later_one():
    """Threads sharing the producer (a worker's own batch and one it runs for another worker): a failure
    reported while a thread's batch is in flight fails that batch; a batch that starts later does not see it."""
    import threading

    class Msg:
        def topic(self) -> str:
            return "t"

    p = OutputProducer(producer_config("127.0.0.1:1"))
    try:
        p.send([], [], [], [])  # thread 1's batch starts (nothing queued, so its wait does not block)
        results: dict[str, object] = {}

        def other() -> None:
            p.send([], [], [], [])
            started.set()
            failed.wait()
            try:
                results["wait"] = p.wait()
            except DeliveryError as e:
                results["wait"] = e

        started, failed = threading.Event(), threading.Event()
        t = threading.Thread(target=other)
        t.start()
        started.wait()
        p._on_delivery("broker down", Msg())  # a delivery report, as librdkafka's poll would call it
        failed.set()
        t.join()
        assert isinstance(results["wait"], DeliveryError)
        with pytest.raises(DeliveryError, match=r"1 output records were not delivered.*t: broker down"):
            p.wait()
        p.send([], [], [], [])  # a batch after the failure
        assert p.wait() == 0
    finally:
        p.close()


def test_rejected_settings_fail_at_start():
    with pytest.raises(ValueError, match=r"no.such.setting"):
        check_producer_config(producer_config("localhost:9092", [("no.such.setting", "1")]))
    check_producer_config(producer_config("localhost:9092", [("security.protocol", "PLAINTEXT")]))
