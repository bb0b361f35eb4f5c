"""One task batch in a Python worker: one at a time against the worker's cache (:func:`process_task_batch`),
its output produced by the worker itself with the direct sink (:func:`run_batch`), in one Kafka transaction with
processing_guarantee=exactly_once (:func:`run_batch_exactly_once`). Spark's processor
(:class:`service.spark.processor.WindowTaskProcessor`) calls :func:`run_batch` through :mod:`.owners`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from connectors.producer import producer_for
from service.task import batch as task_batch
from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskOutput, TaskRunner
from service.task.state import TaskState
from service.task.stats import REPLAY_ZEROED
from service.worker.cache import WORKER, WorkerCache

__all__ = ["process_task_batch", "run_batch", "run_batch_exactly_once"]

logger = logging.getLogger(__name__)


def process_task_batch(
    runner: TaskRunner,
    state: TaskState,
    batch: TaskBatch,
    on_output: Callable[[TaskOutput], None] | None = None,
    cache: WorkerCache | None = None,
) -> TaskOutput:
    """:func:`service.task.batch.process_task_batch` against ``cache`` (this process's :data:`WORKER` unless
    given) under its lock; then the cache hands freed memory back if the load dropped
    (:meth:`~service.worker.cache.WorkerCache.after_batch`)."""
    cache = WORKER if cache is None else cache
    with cache.turn():
        out = task_batch.process_task_batch(runner, state, batch, on_output, cache)
        cache.after_batch(len(batch))
        return out


_RUNNERS: dict[TaskConfig, TaskRunner] = {}


def _runner(config: TaskConfig) -> TaskRunner:
    r = _RUNNERS.get(config)
    if r is None:
        r = _RUNNERS[config] = TaskRunner(config)
    return r


def run_batch(config: TaskConfig, state: TaskState, batch: TaskBatch) -> TaskOutput:
    """One task batch in this Python worker (:func:`process_task_batch`); with the direct
    sink its rows are produced here and acknowledged before it returns (a failure fails the batch)."""
    if config.processing_guarantee == "exactly_once":
        return run_batch_exactly_once(config, state, batch)
    if config.sink != "direct":
        return process_task_batch(_runner(config), state, batch)
    producer = producer_for(dict(config.producer), config.batch_produce)
    # direct sink: the rows are handed to the producer before the state is written ...
    out = process_task_batch(_runner(config), state, batch, on_output=lambda o: o.send_to(producer))
    # ... and acknowledged before this task's micro-batch can complete
    t0 = time.perf_counter_ns()
    producer.wait()
    out.stats["produce_ns"] += time.perf_counter_ns() - t0
    return out


def run_batch_exactly_once(config: TaskConfig, state: TaskState, batch: TaskBatch) -> TaskOutput:
    """One task batch in ONE Kafka transaction with its input offset (:mod:`connectors.transactions`).

    The batch's end (last offset + 1) already committed to the group: the batch is a replay of one whose
    transaction committed (a crash between that commit and Spark's checkpoint, or a retried task). It is
    processed again - the state must be what it was - but produces nothing, and its counters are zeroed
    (:data:`~service.task.stats.REPLAY_ZEROED`). Otherwise the rows go to the transaction as soon as they are
    made (before the state is written), and the transaction commits after the state is written and before the
    task completes: Spark commits the state only after that, so state and output never disagree for long - a
    crash in between replays the batch, which then finds its offset committed. A fenced or aborted transaction
    (the task ran elsewhere meanwhile, the broker restarted) is redone with a new producer, up to
    ``ATTEMPTS`` times; then the batch fails and Spark replays it."""
    from confluent_kafka import KafkaException

    from connectors.transactions import ATTEMPTS, TransactionFailed, task_producer

    txn = task_producer(
        dict(config.producer), config.application_id, batch.topic, batch.partition, config.batch_produce
    )
    end = batch.end
    aborted = 0
    committed: int | None = None
    for attempt in range(ATTEMPTS):
        try:
            committed = txn.committed()
            break
        except KafkaException as e:
            txn.recover(e)
            if attempt == ATTEMPTS - 1:
                raise TransactionFailed(
                    f"cannot read the committed offset of {batch.task} in group {config.application_id}: {e}"
                ) from e
    if committed is not None and committed >= end:
        out = process_task_batch(_runner(config), state, batch)
        for name in REPLAY_ZEROED:
            out.stats[name] = 0
        out.stats["txn_skipped"] = 1
        return out
    if committed is not None and committed > int(batch.offsets[0]):
        logger.warning(
            "the group %s committed %s at %d, inside this batch's offsets %d..%d: its output is "
            "written again (was the checkpoint replaced?)",
            config.application_id,
            batch.task,
            committed,
            batch.offsets[0],
            end - 1,
        )

    def send(o: TaskOutput) -> None:
        txn.begin()
        o.send_to(txn)

    failed: list[Exception] = []

    def first_send(o: TaskOutput) -> None:
        try:
            send(o)
        except KafkaException as e:  # redone below with a new producer
            failed.append(e)
            txn.recover(e)

    out = process_task_batch(_runner(config), state, batch, on_output=first_send)
    t0 = time.perf_counter_ns()
    for attempt in range(ATTEMPTS + 1):
        try:
            if failed:
                aborted += 1
                if attempt == ATTEMPTS:
                    raise TransactionFailed(
                        f"the transaction of {batch.task} failed {ATTEMPTS} times: {failed[-1]}"
                    ) from failed[-1]
                logger.info("the transaction of %s failed (%s); redoing it", batch.task, failed[-1])
                # fenced: someone else ran this task meanwhile - did it commit this very batch?
                covered = txn.committed()
                if covered is not None and covered >= end:
                    for name in REPLAY_ZEROED:
                        out.stats[name] = 0
                    out.stats["txn_skipped"] = 1
                    out.stats["txn_aborted"] = aborted
                    return out
                failed.clear()
                send(out)
            txn.commit(end)
            break
        except KafkaException as e:
            failed.append(e)
            txn.recover(e)
    else:  # pragma: no cover - every path above breaks, returns or raises
        raise TransactionFailed(f"the transaction of {batch.task} did not commit")
    s = out.stats
    s["txn_commit_ns"] = time.perf_counter_ns() - t0
    s["produce_ns"] += s["txn_commit_ns"]
    s["txn_committed"] = 1
    s["txn_aborted"] = aborted
    return out
