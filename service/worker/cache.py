"""A Python worker's cache of task processors, kept between micro-batches, and what guards it.

Python workers are reused across micro-batches (``spark.python.worker.reuse``); a cached processor is used only
if its token equals the token in the committed state (:func:`service.task.batch.process_task_batch`), so a
retried batch, a restart or another worker's write always falls back to the state store. A worker process has
one :data:`WORKER`; tests make more to play several workers in one process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from service.task.batch import CachedTask, TaskKey
from service.task.config import TaskConfig

__all__ = ["WorkerCache", "WORKER", "drop_cached", "worker_busy"]


class WorkerCache:
    """One worker's processors by task (``entries``), the lock a task batch holds for its whole run, and how
    many task batches wait for it (:mod:`service.worker.owners` asks whether the worker is busy)."""

    def __init__(self) -> None:
        self.entries: dict[TaskKey, CachedTask] = {}
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

    def add(self, key: TaskKey, entry: CachedTask) -> None:
        """Hold ``entry`` for ``key`` as the most recently used. Beyond the task config's ``state_cache_tasks``
        (the operator's bound on the workers' memory) the least recently used entries are dropped: their tasks'
        next batches restore from the state store (exact, like any cache miss).
        ``entries`` is in order of use: a batch takes its entry out (:meth:`take`) and adds it back at the end."""
        self.entries.pop(key, None)
        while self.entries and len(self.entries) >= key[0].state_cache_tasks:
            self.entries.pop(next(iter(self.entries)))
        self.entries[key] = entry

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


#: this process's worker cache
WORKER = WorkerCache()


def drop_cached(config: TaskConfig, topic: str, partition: int) -> None:
    """Forget this worker's cached processor of a task (another worker takes the task over)."""
    WORKER.drop(config, topic, partition)


def worker_busy() -> bool:
    """Whether a task batch runs in this worker now (or one waits to)."""
    return WORKER.busy()
