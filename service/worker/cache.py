"""A Python worker's cache of task processors, kept between micro-batches, and what guards it.

Python workers are reused across micro-batches (``spark.python.worker.reuse``); a cached processor is used only
if its token equals the token in the committed state (:func:`service.task.batch.process_task_batch`), so a
retried batch, a restart or another worker's write always falls back to the state store. A worker process has
one :data:`WORKER`; tests make more to play several workers in one process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from service.task.batch import CachedTask, TaskKey
from service.task.config import TaskConfig
from service.worker.memory import release_freed_memory, service_rss_bytes

__all__ = ["BACKLOG_RECORDS", "LOAD_DROP", "WorkerCache", "WORKER", "drop_cached", "worker_busy"]

logger = logging.getLogger(__name__)


class WorkerCache:
    """One worker's processors by task (``entries``), the lock a task batch holds for its whole run, and how
    many task batches wait for it (:mod:`service.worker.owners` asks whether the worker is busy).

    ``memory`` measures what the task config's ``memory_limit`` bounds (the service's resident bytes,
    :func:`service.worker.memory.service_rss_bytes`; None: unknown, no bound) and ``release`` hands freed memory
    back to the system; tests give their own."""

    def __init__(
        self,
        memory: Callable[[], int | None] = service_rss_bytes,
        release: Callable[[], None] = release_freed_memory,
    ) -> None:
        self.entries: dict[TaskKey, CachedTask] = {}
        self.memory = memory
        self.release = release
        self._warned = False
        self._largest = 0  # the largest task batch (records) since memory was last handed back
        self.lock = threading.Lock()
        self.waiting = 0  # task batches waiting for the lock
        self._waiting_lock = threading.Lock()  # several threads start task batches (owners): += is not atomic

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def take(self, key: TaskKey) -> CachedTask | None:
        """Remove and return a task's entry (a batch that fails leaves none behind)."""
        return self.entries.pop(key, None)

    def add(self, key: TaskKey, entry: CachedTask) -> int:
        """Hold ``entry`` for ``key`` as the most recently used; returns how many entries were dropped for it.

        Two bounds drop the least recently used entries first (their tasks' next batches restore from the state
        store: exact, like any cache miss): the task config's ``state_cache_tasks`` (entries per worker), and its
        ``memory_limit`` (bytes, 0: none) - while the service holds more than that (``memory``), entries go one
        by one, the freed memory handed back after each, down to this batch's own if need be.
        ``entries`` is in order of use: a batch takes its entry out (:meth:`take`) and adds it back at the end."""
        cfg = key[0]
        self.entries.pop(key, None)
        dropped = 0
        while self.entries and len(self.entries) >= cfg.state_cache_tasks:
            self.entries.pop(next(iter(self.entries)))
            dropped += 1
        self.entries[key] = entry
        if cfg.memory_limit:
            dropped += self._bound_memory(cfg.memory_limit)
        return dropped

    def _bound_memory(self, limit: int) -> int:
        used = self.memory()
        dropped = 0
        while used is not None and used > limit and self.entries:
            self.entries.pop(next(iter(self.entries)))
            dropped += 1
            self.release()
            used = self.memory()
        if used is not None and used > limit and not self._warned:
            self._warned = True  # once per worker: every batch would say it again
            logger.warning(
                "the service holds %d MiB with no windows cached in this worker, over memory_limit (%d MiB): "
                "every batch of its tasks restores them from the state store; raise memory_limit",
                used >> 20,
                limit >> 20,
            )
        return dropped

    def after_batch(self, records: int) -> bool:
        """Hand the worker's freed memory back once the load drops: after a task batch of ``records`` that is less
        than a :data:`LOAD_DROP`-th of the largest since the last time, if that one had :data:`BACKLOG_RECORDS` or
        more (a backlog drained, live input again); returns whether it did. The workers keep freed heap for the
        next batch on purpose (:func:`service.spark.python_daemon.keep_memory`), which after a backlog is what its
        batches needed::

            task batch records   12,500  12,500  12,500  250     250  ...  12,500  250
            memory handed back                           once                      once

        What it hands back: bench/RESULTS.md (``recovery_bench.py``)."""
        if self._largest >= BACKLOG_RECORDS and records * LOAD_DROP < self._largest:
            self._largest = records
            self.release()
            return True
        self._largest = max(self._largest, records)
        return False

    def drop(self, config: TaskConfig, topic: str, partition: int) -> None:
        """Forget a task's processor (another worker takes the task over)."""
        self.entries.pop((config, topic, partition), None)

    def clear(self) -> None:
        self.entries.clear()

    def busy(self) -> bool:
        """Whether a task batch runs in this worker now (or one waits to)."""
        return self.lock.locked() or self.waiting > 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the worker lock for one task batch, counted in ``waiting`` until it has the lock."""
        with self._waiting_lock:
            self.waiting += 1
        with self.lock:
            with self._waiting_lock:
                self.waiting -= 1
            yield


#: a task batch this many times smaller than the largest since the last release hands freed memory back
#: (:meth:`WorkerCache.after_batch`)
LOAD_DROP = 8
#: ... if that largest batch had this many records at least (live batches that vary hand nothing back)
BACKLOG_RECORDS = 2_000

#: this process's worker cache
WORKER = WorkerCache()


def drop_cached(config: TaskConfig, topic: str, partition: int) -> None:
    """Forget this worker's cached processor of a task (another worker takes the task over)."""
    WORKER.drop(config, topic, partition)


def worker_busy() -> bool:
    """Whether a task batch runs in this worker now (or one waits to)."""
    return WORKER.busy()
