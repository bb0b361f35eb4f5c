"""Exactly-once output: one Kafka transaction per task micro-batch, with the task's input offset in it.

Kafka Streams' ``processing.guarantee=exactly_once_v2`` (KIP-129, KIP-447) on the service's direct sink: a task's
(input partition's) micro-batch writes its changelog updates, late records and dead letters in ONE transaction,
and the same transaction commits the task's input offset (the end of the batch: last offset + 1) to the consumer
group named after the application (``sendOffsetsToTransaction``). Either all of it becomes visible to
``read_committed`` consumers, offsets included, or none of it::

    worker (one task batch)                                         broker
    -----------------------------------------------------------     ----------------------------------------
    TaskProducer(transactional.id = <group>-<topic>-<partition>)
      init_transactions()  (once per producer) ------------------>  fences every older producer of this id,
                                                                    aborts its open transaction
    committed = group's offset of (topic, partition) ------------>  (read_committed: stable offsets only)
    committed >= end?  yes: the batch is in Kafka already -> produce nothing (the state is still updated)
    begin; produce rows ...; send_offsets({tp: end}, group) ---->   records + offset pending
    commit_transaction() ---------------------------------------->  markers: all visible, or (abort) none
    (the task returns; Spark commits its state, then its checkpoint)

Why a transactional id per application and task, not per worker (EOS v2's per-thread producer): Spark moves a
task between Python workers and machines (task retries, :mod:`service.worker.owners`, restarts), and whoever runs it
next must fence whoever ran it before - exactly what a stable per-task id gives (``init_transactions`` bumps the
epoch; the old producer's next call fails with a fenced error and its open transaction is aborted). The group
metadata comes from a consumer that never joins the group (generation -1, no member id): the group has no
members, so the coordinator takes the offsets from any producer of the transaction, and the per-task id does the
fencing that KIP-447's generation check would otherwise do.

:func:`commit_group_offsets` is the ``at_least_once`` side: the driver commits the end offsets of every completed
micro-batch to the same group, for monitoring (``kafka-consumer-groups.sh --describe --group <app>``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from connectors.producer import produce_rows

__all__ = [
    "TRANSACTION_TIMEOUT_MS",
    "GroupCommitter",
    "TaskProducer",
    "TransactionFailed",
    "commit_group_offsets",
    "committed_group_offsets",
    "drop_task_producers",
    "task_producer",
    "transactional_config",
    "transactional_id",
]

logger = logging.getLogger(__name__)

#: the broker aborts a transaction left open this long (a task that crashed and never ran again): until then a
#: ``read_committed`` consumer of its output partitions waits. A restart fences the old producer at once.
TRANSACTION_TIMEOUT_MS = 30_000
#: how long one transactional call may take (init, send offsets, commit, abort)
CALL_TIMEOUT_S = 60.0
#: attempts of one task batch's transaction (a fenced or aborted one is redone with the rows kept in memory)
ATTEMPTS = 3

#: direct-producer settings a transactional producer cannot take (it reports every delivery itself: the commit
#: fails when a record did not make it)
_NOT_TRANSACTIONAL = ("delivery.report.only.error",)


class TransactionFailed(RuntimeError):
    """A task batch's transaction could not be committed (the batch fails; Spark replays it)."""


def transactional_id(group: str, topic: str, partition: int) -> str:
    """The stable transactional id of a task: the same on every worker, machine and restart."""
    return f"{group}-{topic}-{partition}"


def transactional_config(config: Mapping[str, Any], tid: str) -> dict[str, Any]:
    """The direct producer's settings (:func:`connectors.producer.producer_config`) made transactional."""
    out = {k: v for k, v in config.items() if k not in _NOT_TRANSACTIONAL}
    timeout = int(out.get("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS))
    out["transaction.timeout.ms"] = timeout
    # librdkafka requires message.timeout.ms <= transaction.timeout.ms
    out["message.timeout.ms"] = min(int(out.get("message.timeout.ms", timeout)), timeout)
    out["transactional.id"] = tid
    out["enable.idempotence"] = True
    return out


class TaskProducer:
    """One task's transactional producer plus the group's view of its input offset (see the module docstring).

    Not thread-safe per instance: a task's batches run one at a time."""

    def __init__(self, config: Mapping[str, Any], group: str, topic: str, partition: int, batches: bool = True) -> None:
        self.group, self.topic, self.partition = group, topic, partition
        #: rows through librdkafka's batch call and ctypes (connectors.rdkafka_txn), unless off or not loadable
        self._batches = batches
        self.tid = transactional_id(group, topic, partition)
        self._config = transactional_config(config, self.tid)
        self._producer: Any = None
        self._consumer: Any = None
        self._open = False  # a transaction was begun and neither committed nor aborted
        #: the producer lost its brokers since its last transaction: it is replaced before the next one. After a
        #: broker restart librdkafka (2.16) re-bootstraps, and a transactional producer that lived through it
        #: hung in send_offsets_to_transaction past its timeout (measured here); a new one works at once.
        self._stale = False

    # -- clients
    def _fresh_producer(self) -> Any:
        from confluent_kafka import Producer

        self._drop_producer()
        p: Any = None
        if self._batches:
            from connectors.rdkafka_batch import load

            lib, why = load()
            if lib is None:
                logger.warning("transactional rows go one produce() call at a time: %s", why)
                self._batches = False
            else:
                from connectors.rdkafka_txn import TransactionalBatchProducer

                p = TransactionalBatchProducer({**self._config, "delivery.report.only.error": "true"})
        if p is None:
            p = Producer({**self._config, "error_cb": self._on_error})
        p.init_transactions(CALL_TIMEOUT_S)  # fences every older producer of this task, aborts its transaction
        self._producer = p
        return p

    def producer(self) -> Any:
        self._serve()
        return self._producer if self._producer is not None and not self._stale else self._fresh_producer()

    def _serve(self) -> None:
        """Serve the producer's error reports: a producer that lost its brokers is marked stale."""
        p = self._producer
        if p is None:
            return
        if self._batches:
            p.check()
            self._stale = self._stale or p.lost_brokers
        else:
            p.poll(0)  # serves the error callback (_on_error)

    def _on_error(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE):
            self._stale = True
        logger.info("transactional producer %s: %s", self.tid, err)

    def _drop_producer(self) -> None:
        p, self._producer, self._open = self._producer, None, False
        self._stale = False
        if p is not None:
            try:
                if self._batches:
                    p.discard()
                else:
                    p.purge()
                    p.flush(0)
            except Exception:
                pass

    def _group_consumer(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            base = {
                k: v
                for k, v in self._config.items()
                if k in ("bootstrap.servers",) or k.startswith(("security.", "sasl.", "ssl.", "client.", "socket."))
            }
            self._consumer = Consumer(
                {**base, "group.id": self.group, "enable.auto.commit": False, "isolation.level": "read_committed"}
            )
        return self._consumer

    def committed(self) -> int | None:
        """The group's committed offset of this task's input partition (stable: no transaction pending, as
        after :meth:`producer`'s ``init_transactions``), ``None`` when there is none."""
        from confluent_kafka import KafkaException, TopicPartition

        self.producer()  # init first: an aborted predecessor's pending offset is resolved before we look
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while True:
            try:
                [tp] = self._group_consumer().committed(
                    [TopicPartition(self.topic, self.partition)], timeout=CALL_TIMEOUT_S
                )
                return None if tp.offset < 0 else int(tp.offset)
            except KafkaException as e:  # the coordinator moves or loads (a broker restart): ask again
                if time.monotonic() > deadline or not _transient(e):
                    raise
                time.sleep(0.2)

    # -- one transaction
    def begin(self) -> None:
        if self._open:
            self.abort()
        self.producer().begin_transaction()
        self._open = True

    def send(
        self,
        topics: Sequence[str],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[Sequence[tuple[str, bytes]] | None],
    ) -> None:
        """Produce rows inside the open transaction (in order)."""
        p = self._producer
        if self._batches:
            p.send_with_headers(topics, keys, values, headers)
            return
        produce_rows(p, topics, keys, values, headers)

    def send_rows(self, topic: str, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> None:
        n = len(values)
        if not n:
            return
        if self._batches:
            from connectors.rows import RowBlock

            kblock = RowBlock.of(keys)
            if kblock is not None:
                self._producer.send(topic, kblock, *RowBlock.of_values(values))
                return
        self.send([topic] * n, _rows(keys), _rows(values), [None] * n)

    def commit(self, end_offset: int) -> None:
        """Add the input offset to the transaction and commit it (raises ``KafkaException`` when it fails)."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        self._serve()
        if self._stale:  # lost its brokers during this transaction: redo it with a new producer
            raise KafkaException(
                KafkaError(KafkaError._TRANSPORT, f"{self.tid} lost its brokers during the transaction", retriable=True)
            )
        p = self._producer
        if self._batches:
            p.send_offsets_to_transaction(self.topic, self.partition, end_offset, self.group, CALL_TIMEOUT_S)
        else:
            p.send_offsets_to_transaction(
                [TopicPartition(self.topic, self.partition, end_offset)],
                self._group_consumer().consumer_group_metadata(),
                CALL_TIMEOUT_S,
            )
        p.commit_transaction(CALL_TIMEOUT_S)
        self._open = False

    def abort(self) -> None:
        """Abort the open transaction; a producer that cannot (fenced, fatal) is replaced on next use."""
        if not self._open or self._producer is None:
            return
        try:
            self._producer.abort_transaction(CALL_TIMEOUT_S)
            self._open = False
        except Exception:
            logger.info("aborting %s's transaction failed; a new producer fences it", self.tid, exc_info=True)
            self._drop_producer()

    def recover(self, error: Any) -> None:
        """After a failed transactional call: abort (abortable) or start over with a new producer (fatal,
        fenced, anything else)."""
        err = error.args[0] if getattr(error, "args", None) else None
        abortable = bool(getattr(err, "txn_requires_abort", lambda: False)())
        fatal = bool(getattr(err, "fatal", lambda: True)())
        if abortable and not fatal:
            self.abort()
        else:
            self._drop_producer()

    def close(self) -> None:
        self._drop_producer()
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.close()
            self._consumer = None


#: group coordinator errors that go away by themselves (librdkafka names)
_TRANSIENT = frozenset(
    {
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "UNSTABLE_OFFSET_COMMIT",
        "_TIMED_OUT",
        "_TRANSPORT",
        "REQUEST_TIMED_OUT",
    }
)


def _transient(e: Exception) -> bool:
    err = e.args[0] if e.args else None
    return bool(getattr(err, "retriable", lambda: False)()) or getattr(err, "name", lambda: "")() in _TRANSIENT


def _rows(rows: Sequence[bytes | None]) -> Sequence[bytes | None]:
    """Rows as a sequence of bytes (a :class:`~connectors.rows.RowBlock` is cut into its rows)."""
    to_list = getattr(rows, "tolist", None)
    return to_list() if callable(to_list) else rows


_TASKS: dict[tuple[int, str, str, int, tuple[tuple[str, Any], ...], bool], TaskProducer] = {}
_TASKS_LOCK = threading.Lock()
MAX_TASK_PRODUCERS = 64


def task_producer(
    config: Mapping[str, Any], group: str, topic: str, partition: int, batches: bool = True
) -> TaskProducer:
    """This worker process's transactional producer of a task (created on first use, never across a fork)."""
    key = (os.getpid(), group, topic, partition, tuple(sorted(config.items())), batches)
    with _TASKS_LOCK:
        tp = _TASKS.get(key)
        if tp is None:
            while len(_TASKS) >= MAX_TASK_PRODUCERS:
                _TASKS.pop(next(iter(_TASKS))).close()
            tp = _TASKS[key] = TaskProducer(config, group, topic, partition, batches)
        return tp


def drop_task_producers() -> None:
    """Close this process's task producers (tests; a worker process need not)."""
    with _TASKS_LOCK:
        items = [k for k in _TASKS if k[0] == os.getpid()]
        for k in items:
            _TASKS.pop(k).close()


def committed_group_offsets(
    client_config: Mapping[str, str], group: str, partitions: Mapping[str, int], timeout: float = 10.0
) -> dict[tuple[str, int], int]:
    """``{(topic, partition): next offset}`` that ``group`` has committed for the topics' partitions
    (``partitions``: topic -> partition count); partitions without a committed offset are left out."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**client_config, "group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        got = c.committed([TopicPartition(t, p) for t, n in partitions.items() for p in range(n)], timeout=timeout)
        return {(tp.topic, tp.partition): int(tp.offset) for tp in got if tp.offset >= 0}
    finally:
        c.close()


# ------------------------------------------------------------------------------------------- at_least_once side
def commit_group_offsets(consumer: Any, offsets: Mapping[tuple[str, int], int]) -> None:
    """Commit ``{(topic, partition): next offset}`` to ``consumer``'s group (a consumer that never joins it)."""
    from confluent_kafka import TopicPartition

    if offsets:
        consumer.commit(
            offsets=[TopicPartition(t, p, int(o)) for (t, p), o in sorted(offsets.items())], asynchronous=False
        )


class GroupCommitter:
    """The driver's committer of processed input offsets to the application's group (``at_least_once``: for
    monitoring only; the checkpoint is what a restart resumes from). A failure is logged, never raised."""

    def __init__(self, client_config: Mapping[str, str], group: str) -> None:
        self._config = {**client_config, "group.id": group, "enable.auto.commit": False}
        self._consumer: Any = None
        self._lock = threading.Lock()
        self._warned = 0.0

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        from confluent_kafka import Consumer

        with self._lock:
            try:
                if self._consumer is None:
                    self._consumer = Consumer(self._config)
                commit_group_offsets(self._consumer, offsets)
            except Exception as e:
                if time.monotonic() - self._warned > 60:
                    logger.warning(
                        "cannot commit the input offsets to group %s (lag tooling is stale): %s",
                        self._config["group.id"],
                        e,
                    )
                    self._warned = time.monotonic()

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                with contextlib.suppress(Exception):
                    self._consumer.close()
                self._consumer = None
