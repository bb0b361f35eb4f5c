"""Integration tests of the Kafka test infrastructure: broker fixture, confluent-kafka round trip, Spark's Kafka
source and sink with the Maven-resolved connector jars, and the detached broker CLI used by ``make demo``."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

N_RECORDS = 50
T0_MS = 1_700_000_000_000  # fixed record timestamps: 2023-11-14T22:13:20Z + i seconds


def _produce(bootstrap: str, topic: str, partitions: int) -> list[tuple[str, str, int, int]]:
    """Produce N_RECORDS keyed records with explicit partitions and timestamps; return (key, value, partition, ts)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    sent: list[tuple[str, str, int, int]] = []
    errors: list[object] = []
    for i in range(N_RECORDS):
        key, value, partition, ts = f"k{i % 7}", f"v{i}", i % partitions, T0_MS + 1000 * i
        producer.produce(
            topic, key=key, value=value, partition=partition, timestamp=ts, headers=[("n", str(i).encode())],
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )  # fmt: skip
        sent.append((key, value, partition, ts))
    assert producer.flush(30) == 0, "producer did not deliver everything within 30s"
    assert not errors, errors
    return sent


def _consume(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[tuple[str, str, int, int, dict]]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[tuple[str, str, int, int, dict]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            headers = {k: v.decode() for k, v in (msg.headers() or [])}
            got.append((msg.key().decode(), msg.value().decode(), msg.partition(), msg.timestamp()[1], headers))
    finally:
        consumer.close()
    return got


def test_produce_consume_round_trip(kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    sent = _produce(kafka_bootstrap, topic, partitions=3)
    got = _consume(kafka_bootstrap, topic, expected=len(sent))
    assert sorted(g[:4] for g in got) == sorted(sent)
    assert sorted(int(g[4]["n"]) for g in got) == list(range(N_RECORDS))
    # Per partition, Kafka keeps production order.
    for p in range(3):
        assert [g[1] for g in got if g[2] == p] == [s[1] for s in sent if s[2] == p]


def test_records_with_any_timestamp_are_kept(kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    """Event-time data has old and future timestamps; the local broker must neither reject nor expire them."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    broker_id = str(next(iter(admin.list_topics(timeout=10).brokers)))
    res = ConfigResource(ConfigResource.Type.BROKER, broker_id)
    configs = admin.describe_configs([res])[res].result(timeout=30)
    if configs["log.retention.ms"].value != "-1":
        pytest.skip("broker not configured by devtools.local_broker (external or container broker)")
    topic = make_topic()
    future_ms = int(time.time() * 1000) + 3 * 86_400_000
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    errors: list[object] = []
    for ts in (1, 1000, future_ms):  # timestamp=0 means "now" to librdkafka
        producer.produce(topic, key=b"k", value=str(ts).encode(), timestamp=ts,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)  # fmt: skip
    assert producer.flush(30) == 0 and not errors, errors
    got = _consume(kafka_bootstrap, topic, expected=3)
    assert [g[3] for g in got] == [1, 1000, future_ms]


# ----------------------------------------------------------------------------------------------- CLI


def test_cli_start_status_stop(tmp_path: Path) -> None:
    """The detached broker `make demo` uses: start returns while the broker keeps running; status; stop."""
    from devtools.local_broker import broker_status, metadata_ready

    data_dir = tmp_path / "kafka"
    cli = [sys.executable, "-m", "devtools.broker_cli"]
    root = Path(__file__).resolve().parents[2]

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args, "--data-dir", str(data_dir)], cwd=root, capture_output=True, text=True,
                              timeout=180, check=check)  # fmt: skip

    started = run("start", "--port", "0", "-q")
    try:
        assert "running" in started.stdout, started.stdout + started.stderr
        state = broker_status(data_dir)
        assert state is not None and state.startup_seconds is not None
        assert metadata_ready(state.bootstrap_servers)
        assert run("status").returncode == 0
        assert "already running" in run("start", "--port", "0").stdout
    finally:
        stopped = run("stop")
    assert "stopped" in stopped.stdout
    assert broker_status(data_dir) is None
    assert run("status", check=False).returncode == 1


# ----------------------------------------------------------------------------------------------- Spark


@pytest.mark.timeout(600)
def test_spark_batch_reads_produced_records(
    spark: object, kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    sent = _produce(kafka_bootstrap, topic, partitions=2)
    df = (
        spark.read.format("kafka")  # type: ignore[attr-defined]
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    rows = df.selectExpr(
        "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition", "unix_millis(timestamp) AS ts", "offset"
    ).collect()
    assert sorted((r.k, r.v, r.partition, r.ts) for r in rows) == sorted(sent)
    assert {r.partition for r in rows} == {0, 1}


@pytest.mark.timeout(600)
def test_spark_batch_writes_to_kafka(spark: object, kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    out = spark.createDataFrame(  # type: ignore[attr-defined]
        [(f"k{i}", f"w{i}") for i in range(10)], "key STRING, value STRING"
    )
    out.write.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap).option("topic", topic).save()
    got = _consume(kafka_bootstrap, topic, expected=10)
    assert sorted((k, v) for k, v, *_ in got) == sorted((f"k{i}", f"w{i}") for i in range(10))
