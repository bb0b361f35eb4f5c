"""The idle worker's catch-up: replay the log entries the machine's other workers shared (:mod:`.spool`) into this
worker's cached processors (:class:`~service.worker.cache.WorkerCache`), from a thread that steps aside whenever a
task batch wants the worker, so the worker is usually up to date when Spark hands it a task again."""

from __future__ import annotations

import logging
import threading
import time

from connectors.serde import Decoded
from service.task.batch import CachedTask
from service.task.config import TaskConfig
from service.task.state import bucket_of, decode_log, new_processor
from service.worker import spool
from service.worker.cache import WORKER, WorkerCache

__all__ = ["SPOOL_POLL_SECONDS", "spool_catch_up", "start_catch_up_thread", "stop_catch_up_thread"]

logger = logging.getLogger(__name__)

#: how long the catch-up thread sleeps when there was nothing to replay
SPOOL_POLL_SECONDS = 0.02


def spool_catch_up(cache: WorkerCache | None = None, limit: int | None = None) -> int:
    """Replay into the cached processors (``cache``: this worker's) the next shared log entry of each task
    (:mod:`service.worker.spool`) that continues its token, ``limit`` entries at most; returns how many were replayed.

    A task of a query this worker runs (some other task of it is cached) that it has never seen, and whose
    first batch left its entry, gets a processor built from that entry: the task's state after its first batch
    is exactly what those records made. A processor stays as it is when its entry needs a key bucket it has
    not read yet (the state store is only reachable inside a task batch): the task batch then catches up from
    the store. A replay that fails drops the processor from the cache."""
    cache = WORKER if cache is None else cache
    done = _adopt_new_tasks(cache, limit)
    for ck, c in list(cache.entries.items()):
        cfg, topic, partition = ck
        if not cfg.log_spool or (limit is not None and done >= limit):
            continue
        try:
            found = _shared_entry(cfg, topic, partition, c.token)
            if found is None or not _loadable(c, found[1]):
                continue
            new_token, records = found
            c.runner.replay(c.proc, records)
        except Exception:  # a shortcut only: the task batch restores from the store
            logger.warning(
                "replaying a shared log entry of %s-%d failed; dropping the cached processor",
                topic,
                partition,
                exc_info=True,
            )
            cache.entries.pop(ck, None)
            cache.not_adopted.add(ck)
            continue
        c.token = new_token
        done += 1
    return done


def _adopt_new_tasks(cache: WorkerCache, limit: int | None) -> int:
    """Build processors for the tasks of the cached tasks' queries that ``cache`` does not hold yet, from
    their first entries (:data:`service.worker.spool.NEW_TASK`); returns how many."""
    done = 0
    runners = {cfg: c.runner for (cfg, _t, _p), c in cache.entries.items() if cfg.log_spool}
    for cfg, runner in runners.items():
        for topic, partition in spool.tasks(cfg.log_spool):
            ck = (cfg, topic, partition)
            if (
                ck in cache
                or ck in cache.not_adopted
                or len(cache) >= cache.max_tasks
                or (limit is not None and done >= limit)
            ):
                continue
            try:
                found = _shared_entry(cfg, topic, partition, "")
                if found is None:
                    continue
                new_token, records = found
                proc, source = new_processor(cfg, None, cfg.state_buckets)
                runner.replay(proc, records)
            except Exception:  # a shortcut only: the task batch restores from the store
                logger.warning("building %s-%d from its shared first entry failed", topic, partition, exc_info=True)
                cache.not_adopted.add(ck)
                continue
            cache.entries[ck] = CachedTask(new_token, proc, source, runner)
            done += 1
    return done


def _shared_entry(cfg: TaskConfig, topic: str, partition: int, token: str) -> tuple[str, Decoded] | None:
    """The shared log entry applied to ``token`` (``""``: a new task's first), decoded: ``(new token, records)``;
    ``None`` when there is none. Raises when the entry cannot be decoded."""
    found = spool.get(cfg.log_spool, topic, partition, token)
    if found is None:
        return None
    new_token, entry = found
    applied_to, records = decode_log(entry, cfg.value_fields)
    return (new_token, records) if applied_to == token else None


def _loadable(c: CachedTask, records: Decoded) -> bool:
    """Whether every key of ``records`` is in memory, new, or in a bucket the source has read."""
    store = c.proc.store
    mem, known, read, n = store.keys, store.key_max_start, c.source.buckets, c.source.n_buckets
    return all(k in mem or k not in known or bucket_of(k, n) in read for k in records.keys)


def start_catch_up_thread(cache: WorkerCache) -> None:
    """Start the worker's catch-up thread unless it runs (a daemon thread; a task batch with ``log_spool`` calls
    this)."""
    thread = cache.catch_up_thread
    if thread is None or not thread.is_alive():
        cache.catch_up_stop.clear()
        cache.catch_up_thread = threading.Thread(
            target=_catch_up_loop, args=(cache,), name="slidingwindow-log-catch-up", daemon=True
        )
        cache.catch_up_thread.start()


def stop_catch_up_thread(cache: WorkerCache | None = None) -> None:
    """Stop the worker's catch-up thread (it is a daemon: a worker process does not need to; tests do). The next
    task batch with ``log_spool`` starts it again."""
    cache = WORKER if cache is None else cache
    cache.catch_up_stop.set()
    if cache.catch_up_thread is not None:
        cache.catch_up_thread.join()


def _catch_up_loop(cache: WorkerCache) -> None:
    """The idle worker's side: one shared entry at a time, never while a task batch waits for the worker."""
    while not cache.catch_up_stop.is_set():
        n = 0
        if not cache.waiting:
            with cache.lock:
                if not cache.waiting:
                    t0 = time.perf_counter_ns()
                    n = spool_catch_up(cache, limit=1)
                    if n:
                        entries, ns = cache.shared_since_task
                        cache.shared_since_task = (entries + n, ns + time.perf_counter_ns() - t0)
        if not n:
            time.sleep(SPOOL_POLL_SECONDS)
