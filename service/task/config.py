"""The task config: everything a worker needs to process a task, built on the driver and pickled to the workers."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from connectors.output import ChangelogSpec
from connectors.serde import InputSpec
from windowstore import TaskProcessor, WindowDefinition, new_task_processor, parse_aggregations

__all__ = ["TaskConfig"]


@dataclass(frozen=True)
class TaskConfig:
    """Everything a worker needs to process a task (picklable, built on the driver)."""

    window: WindowDefinition  # the window type, its sizes and the grace
    aggregations: str
    emit: str
    input: InputSpec
    changelog: ChangelogSpec
    changelog_topic: str
    late_topic: str  # "" -> late records are only counted
    dead_letter_topic: str
    batch: bool = True  # let the processor take windowstore's batch fast path where it applies (update, close)
    state_buckets: int = 256  # key buckets per task for NEW state (existing state keeps its own number)
    state_cache: bool = True  # keep the processor in the Python worker between micro-batches (token-checked)
    state_cache_tasks: int = 64  # at most this many tasks' processors per worker (least recently used go first)
    memory_limit: int = 0  # bytes: above it the workers drop cached processors (worker.cache, worker.memory); 0: none
    state_snapshot_every: int = 16  # write the key buckets every n-th batch, a log entry of the input otherwise
    state_snapshot_records: int = 100_000  # ... or sooner, once the log holds more input records (0: no bound)
    owners: str = ""  # run a task's batches in the worker that owns it, with this query key (worker.owners); "": off
    sink: str = "spark"  # "direct": the worker produces the output rows itself (connectors.producer)
    producer: tuple[tuple[str, Any], ...] = field(default=(), repr=False)  # the direct producer's librdkafka
    # settings (repr=False: they may hold the SASL password, connectors.security)
    batch_produce: bool = True  # direct sink: changelog rows to librdkafka in blocks (connectors.rdkafka_batch)
    processing_exception_handler: str = "continue"  # continue | fail: see runner.run_isolating
    processing_guarantee: str = "at_least_once"  # "exactly_once": one transaction per task batch (service.worker.run)
    application_id: str = ""  # the consumer group and transactional id prefix (exactly_once)

    @property
    def value_fields(self) -> tuple[str, ...]:
        """The value fields the aggregations read (all a log entry keeps of a value:
        :func:`~service.task.state.encode_log`)."""
        return tuple(f for f, _numeric in self.input.fields)

    def processor_options(self) -> dict[str, Any]:
        return {"collect_drops": True, "batch": self.batch and self.emit in ("update", "close")}

    def new_processor(
        self, meta: bytes | None = None, loader: Callable[[Hashable], bytes | None] | None = None
    ) -> TaskProcessor:
        """The task's processor (:func:`windowstore.new_task_processor`): at the task meta ``meta``, keys read
        through ``loader`` (default: a new task, no stored keys)."""
        return new_task_processor(
            self.window,
            parse_aggregations(self.aggregations),
            self.emit,
            meta,
            _no_keys if loader is None else loader,
            **self.processor_options(),
        )


def _no_keys(key: Hashable) -> None:
    """The key loader of a new task: no key has stored windows."""
    return None
