"""Output records written straight from a Python worker with confluent-kafka (the service's ``sink=direct``).

Spark's Kafka sink moves every output row from the Python worker through Arrow into the JVM and its Java
producer. :class:`OutputProducer` instead produces the rows where they are made, with the same guarantees:

* **at-least-once**: :meth:`OutputProducer.write` returns only when the broker acknowledged every record, and
  raises :class:`DeliveryError` when any record failed, so the micro-batch fails and Spark replays it (which
  reproduces identical records; Spark's own sink is at-least-once the same way);
* **the same partitions**: librdkafka's ``murmur2_random`` partitioner is the Java client's default partitioner
  for keyed records (murmur2 of the key bytes); records without a key are spread (Java: sticky);
* **the same order per partition**: idempotence on (the Java client's default), so retries do not reorder;
* **the same settings**: bootstrap servers and ``kafka_options`` (which already serve confluent-kafka's admin
  client, so they are librdkafka names) plus :data:`PRODUCER_DEFAULTS`, which the Spark sink gets as well.

Rows for one topic without headers (the changelog, most of the output) go through :meth:`OutputProducer.send_rows`:
a block at a time into librdkafka (:mod:`connectors.rdkafka_batch`), no Python call per row.

One producer per worker process and configuration is kept (:func:`producer_for`): creating one costs a broker
connection, and Python workers are reused across micro-batches; :func:`close_producers` closes them (a process
that outlives its broker, e.g. a test session, calls it before the broker stops).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "PRODUCER_DEFAULTS",
    "DIRECT_PRODUCER_SETTINGS",
    "DeliveryError",
    "OutputProducer",
    "producer_config",
    "producer_for",
    "close_producers",
    "check_producer_config",
    "produce_rows",
]

logger = logging.getLogger(__name__)

#: producer settings of both sinks (a micro-batch writes many small changelog records at once); any of them can
#: be overridden with the ``kafka_options`` setting. Spark's sink gets them with the ``kafka.`` prefix.
PRODUCER_DEFAULTS = {
    "linger.ms": "20",
    "batch.size": "262144",
    "compression.type": "lz4",
}

#: what only the direct producer needs: Java-compatible partitions, Java-like ordering and delivery timeout,
#: room for a whole micro-batch in the queue, and delivery reports for failures only (no Python call per record)
DIRECT_PRODUCER_SETTINGS: dict[str, Any] = {
    "partitioner": "murmur2_random",
    "enable.idempotence": "true",
    "message.timeout.ms": "120000",
    "queue.buffering.max.messages": "1000000",
    "queue.buffering.max.kbytes": "1048576",
    "delivery.report.only.error": True,  # confluent-kafka wants a bool here
}


class DeliveryError(RuntimeError):
    """Records of a micro-batch were not acknowledged by Kafka (the batch must fail and be replayed)."""


def producer_config(bootstrap_servers: str, kafka_options: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The direct producer's librdkafka settings: defaults < direct settings < bootstrap servers + options."""
    return {
        **PRODUCER_DEFAULTS,
        **DIRECT_PRODUCER_SETTINGS,
        "bootstrap.servers": bootstrap_servers,
        **dict(kafka_options),
    }


def check_producer_config(config: Mapping[str, str]) -> None:
    """Raise ``ValueError`` naming the setting when librdkafka rejects ``config`` (call it on the driver, so a
    wrong option fails at start and not in every task)."""
    from confluent_kafka import KafkaException, Producer

    try:
        Producer(dict(config)).flush(0)
    except (KafkaException, ValueError, TypeError) as e:
        raise ValueError(f"the direct sink's producer rejects its settings: {e}") from None


class OutputProducer:
    """A confluent-kafka producer that writes a micro-batch's output rows and waits for every acknowledgement.

    Rows for one topic without headers (the changelog) can go through :meth:`send_rows`, which hands them to
    librdkafka a block at a time (:class:`connectors.rdkafka_batch.BatchProducer`, a second librdkafka producer
    with the same settings) unless ``batches`` is off or the library cannot be loaded; both producers are
    created on first use, and :meth:`wait` waits for both."""

    def __init__(self, config: Mapping[str, Any], batches: bool = True) -> None:
        self._config = dict(config)
        self._failed = 0  # delivery failures so far (a batch looks at those since its first send)
        self._last_error = ""
        self._mine = threading.local()  # per thread: [rows handed to send() since its last wait(), errors then]
        self._lock = threading.Lock()
        self._producer: Any = None  # confluent_kafka.Producer, made by _single()
        self._batches: Any = None  # connectors.rdkafka_batch.BatchProducer, made by _batcher()
        self._use_batches = batches

    def _single(self) -> Any:
        """The confluent-kafka producer (one ``produce()`` call per row)."""
        if self._producer is None:
            from confluent_kafka import Producer

            with self._lock:
                if self._producer is None:
                    self._producer = Producer(
                        {**self._config, "on_delivery": self._on_delivery, "error_cb": self._on_error}
                    )
        return self._producer

    def _batcher(self) -> Any:
        """The block producer, or ``None`` (off, or librdkafka cannot be loaded: logged once)."""
        if self._batches is None and self._use_batches:
            from connectors.rdkafka_batch import BatchProducer, load

            with self._lock:
                if self._batches is None and self._use_batches:
                    lib, why = load()
                    if lib is None:
                        logger.warning("changelog rows go one produce() call at a time: %s", why)
                        self._use_batches = False
                    else:
                        self._batches = BatchProducer(self._config, self._on_failures)
        return self._batches

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:  # only failures are reported (delivery.report.only.error)
            self._on_failures(1, f"{msg.topic()}: {err}")

    def _on_failures(self, count: int, text: str) -> None:
        self._failed += count
        self._last_error = text

    def _on_error(self, err: Any) -> None:
        logger.warning("Kafka producer: %s", err)

    def write(
        self,
        topics: Sequence[str],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[Sequence[tuple[str, bytes]] | None],
    ) -> int:
        """Produce the rows (in order) and wait until Kafka acknowledged all of them; returns how many.

        Raises :class:`DeliveryError` when any record was not delivered."""
        self.send(topics, keys, values, headers)
        return self.wait()

    def send(
        self,
        topics: Sequence[str],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[Sequence[tuple[str, bytes]] | None],
    ) -> None:
        """Hand the rows (in order) to the producer without waiting for acknowledgements (see :meth:`wait`):
        librdkafka's threads send them while the caller goes on (e.g. writes its state)."""
        mine = self._batch()
        mine[0] += len(topics)
        if not len(topics):
            return
        produce_rows(self._single(), topics, keys, values, headers)

    def send_rows(self, topic: str, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> None:
        """Like :meth:`send` for rows that all go to ``topic`` without headers: a block at a time through
        librdkafka's batch call (``keys``/``values`` ideally :class:`~connectors.rows.RowBlock` s, else they are
        joined into one; null values - tombstones - included), or one ``produce()`` per row when that is off or a
        key is null."""
        n = len(values)
        if n == 0:
            return
        batcher = self._batcher()
        kblock = None
        if batcher is not None:
            from connectors.rows import RowBlock

            kblock = RowBlock.of(keys)
        if batcher is None or kblock is None:
            self.send([topic] * n, keys, values, [None] * n)
            return
        vblock, nulls = RowBlock.of_values(values)
        self._batch()[0] += n
        batcher.send(topic, kblock, vblock, nulls)

    def _batch(self) -> list[int]:
        mine = getattr(self._mine, "batch", None)
        if mine is None:
            mine = self._mine.batch = [0, self._failed]
        return mine

    def wait(self) -> int:
        """Wait until Kafka acknowledged every row this thread handed to :meth:`send` since its last wait;
        returns how many.

        Raises :class:`DeliveryError` when any record was not delivered. Several threads may send and wait
        at once (a worker's own task batch and the batches it runs for others, :mod:`service.worker.owners`): a
        wait returns only when the producer's whole queue is delivered, so every failure of this thread's
        records is known by then, and any failure reported since its first send fails it (a batch may fail
        for another one's record and be retried; none succeeds with a record missing)."""
        mine = self._batch()
        # bounded: every record is delivered or fails within message.timeout.ms
        if self._batches is not None:
            self._batches.wait()
        p = self._producer
        while p is not None and len(p):
            p.flush(1.0)
        self._mine.batch = None
        sent, first_error = mine
        failed = self._failed - first_error
        if failed:
            raise DeliveryError(
                f"{failed} output records were not delivered while this batch's {sent} were in "
                f"flight, e.g. {self._last_error}"
            )
        return sent

    def close(self) -> None:
        """Deliver whatever is still queued (librdkafka's close flushes, up to ``message.timeout.ms``), then stop
        the producer's threads and connections. The producer refers to this object through its callbacks, so
        without a close it lives until the garbage collector breaks that cycle."""
        if self._batches is not None:
            self._batches.close()
            self._batches = None
        if self._producer is not None:
            self._producer.close()
            self._producer = None


_PRODUCERS: dict[tuple[int, tuple[tuple[str, str], ...], bool], OutputProducer] = {}


def produce_rows(
    producer: Any,
    topics: Sequence[str],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[tuple[str, bytes]] | None],
) -> None:
    """Hand the rows (in order) to a confluent-kafka ``producer``, one ``produce`` call each; when its local queue
    is full, let librdkafka send some first (``poll``) and try the row again."""
    produce = producer.produce
    for topic, key, value, hdrs in zip(topics, keys, values, headers, strict=True):
        while True:
            try:
                if hdrs is None:
                    produce(topic, value, key)
                else:
                    produce(topic, value, key, headers=hdrs)
                break
            except BufferError:
                producer.poll(0.05)


def producer_for(config: Mapping[str, str], batches: bool = True) -> OutputProducer:
    """This worker process's producer for ``config`` (created on first use; never shared across a fork)."""
    key = (os.getpid(), tuple(sorted(config.items())), batches)
    p = _PRODUCERS.get(key)
    if p is None:
        p = _PRODUCERS[key] = OutputProducer(config, batches)
    return p


def close_producers() -> None:
    """Close and forget this process's cached producers (:func:`producer_for`), so none keeps reconnecting (and
    logging "Connection refused") after the broker it wrote to has gone away. Records still queued are
    delivered first (see :meth:`OutputProducer.close`)."""
    for key in [k for k in _PRODUCERS if k[0] == os.getpid()]:
        _PRODUCERS.pop(key).close()
