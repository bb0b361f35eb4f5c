"""One task batch against its committed state: bring the processor there (a worker's cached processor, caught
up through the log, or the snapshot plus the log), run the batch (:class:`~service.task.runner.TaskRunner`), and
write a snapshot or a log entry (:class:`~service.task.state.TaskState`).

The worker's cache of processors is passed in (:class:`TaskCache`: :class:`service.worker.cache.WorkerCache`
in a Python worker); this module holds no process state of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, cast

from connectors.schema_registry import SchemaRegistryUnavailable
from connectors.serde import Decoded
from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskOutput, TaskRunner, run_isolating
from service.task.state import (
    BucketSource,
    TaskState,
    Token,
    bucket_of,
    encode_bucket,
    encode_log,
    log_slot,
    new_processor,
    read_log,
)
from windowstore import TaskProcessor

__all__ = ["TaskKey", "CachedTask", "TaskCache", "process_task_batch"]

#: a cached task: (task config, topic, partition)
TaskKey = tuple[TaskConfig, str, int]


class CachedTask:
    """A task's processor kept in a Python worker between micro-batches, valid while ``token`` matches;
    ``logged``: the input records in the log entries of the token's generation (what a restore would replay)."""

    __slots__ = ("token", "proc", "source", "runner", "logged")

    def __init__(
        self, token: str, proc: TaskProcessor, source: BucketSource, runner: TaskRunner, logged: int = 0
    ) -> None:
        self.token = token
        self.proc = proc
        self.source = source
        self.runner = runner
        self.logged = logged


class TaskCache(Protocol):
    """A worker's processors kept between micro-batches (:class:`service.worker.cache.WorkerCache`)."""

    def take(self, key: TaskKey) -> CachedTask | None:
        """Remove and return the task's entry (a failed batch then leaves none behind)."""
        ...

    def add(self, key: TaskKey, entry: CachedTask) -> int:
        """Keep the task's processor after its batch (valid while ``entry.token`` is the committed token); how
        many kept processors it dropped to stay within its bounds (this one included, if it had to go too)."""
        ...


def process_task_batch(
    runner: TaskRunner,
    state: TaskState,
    batch: TaskBatch,
    on_output: Callable[[TaskOutput], None] | None = None,
    cache: TaskCache | None = None,
) -> TaskOutput:
    """One micro-batch of one task against external state: bring the processor to the committed state (the
    worker's cached processor when the token matches; the cached processor plus the log entries it has not
    seen when it is behind; else the snapshot - task meta now, key buckets lazily - plus the whole log),
    process the records (offset order), expire, and write either a snapshot (every ``state_snapshot_every``-th
    batch, or sooner once the log would hold more than ``state_snapshot_records`` input records: the changed
    buckets, the meta, the log deleted) or one log entry, with a new token (:class:`TaskState`).

    ``on_output`` is called with the output rows as soon as they are made, before the state is written (the
    direct sink hands them to its producer there, so they travel while the state is written); its time is
    counted in ``produce_ns``, not ``process_ns``.

    ``cache`` is the worker's cache of processors (none: every batch restores from the state); the worker runs
    one batch at a time against it (:func:`service.worker.run.process_task_batch`)."""
    cfg = runner.config
    keep = cache if cfg.state_cache else None  # where the processor is kept after the batch
    t_start = time.perf_counter_ns()
    task = state.get_task()
    cache_key = (cfg, batch.topic, batch.partition)
    # taken: a failure below leaves no half-updated entry behind
    cached = cache.take(cache_key) if cache is not None else None
    if task is not None:
        meta, token, n_buckets = task
    else:
        meta, token, n_buckets = None, "", cfg.state_buckets
    cur = Token.parse(token)
    hit = False
    proc: TaskProcessor | None = None
    source: BucketSource | None = None
    plan: list[tuple[int, int]] = []  # log entries (parity, i) to replay
    first: tuple[str, Decoded] | None = None
    logged = 0  # input records in the log entries of the current generation
    if cached is not None and keep is not None and task is not None:
        if cached.token == token:
            hit = True
            proc, source, logged = cached.proc, cached.source, cached.logged
        else:
            # behind? the first entry it needs must have been applied to its token
            behind = cur.catch_up(Token.parse(cached.token))
            if behind:
                first = read_log(state, *behind[0], cfg.value_fields)
                if first[0] == cached.token:
                    proc, source, plan = cached.proc, cached.source, behind
                    # the same generation: its entries so far are the cached count's (a new one: none yet)
                    logged = cached.logged if behind[0][0] == cur.parity else 0
                else:
                    first = None
    if proc is None or source is None:
        proc, source = new_processor(cfg, meta, n_buckets)
        plan = [(cur.parity, i) for i in range(cur.entries)]
    source.bind(state)
    for n, (parity, i) in enumerate(plan):
        entry = first if n == 0 and first is not None else read_log(state, parity, i, cfg.value_fields)
        runner.replay(proc, entry[1])
        if parity == cur.parity:
            logged += len(entry[1].keys)
    read_start = time.perf_counter_ns() - t_start  # restoring: the processor, its buckets read so far, the log
    read_in_restore = source.read_ns  # (inside read_start already)
    try:
        try:
            out = runner.run(proc, batch)
        except SchemaRegistryUnavailable:
            raise  # not a record's fault: the batch fails and Spark retries it
        except Exception as exc:  # the processing exception handler
            source.release()
            proc, source, out = run_isolating(runner, state, meta, n_buckets, cur, batch, exc)
        output_ns = 0
        if on_output is not None:
            t0 = time.perf_counter_ns()
            on_output(out)
            output_ns = time.perf_counter_ns() - t0

        t0 = time.perf_counter_ns()
        read_before_write = source.read_ns
        expired_before = proc.expired_windows
        proc.expire()
        changed: dict[int, dict[str, bytes | None]] = {}
        written = deleted = 0
        generation = _generation_length(cfg.state_snapshot_every, cur, batch.partition)
        assert out.decoded is not None  # TaskRunner.run sets it
        logged += len(out.decoded.keys)  # the generation's records with this batch's entry
        # a snapshot every state_snapshot_every-th batch, or sooner once a restore would replay more than
        # state_snapshot_records input records: the replay after a restart stays bounded whatever the batch sizes
        snapshot_now = (
            task is None
            or cur.entries + 1 >= generation
            or (cfg.state_snapshot_records > 0 and logged > cfg.state_snapshot_records)
        )
        # every batch after the first logs its records; a snapshot batch's entry closes its generation, so a
        # worker that is behind it still catches up through the log
        if task is not None:
            state.put_bucket(log_slot(cur.entries, cur.parity), encode_log(token, out.decoded, cfg.value_fields))
        if snapshot_now or meta is None:  # (no meta: a new task, whose first batch is a snapshot)
            for k, blob in proc.export_keys(proc.dirty_keys()).items():
                key = cast(str, k)  # the service's aggregation keys are str (decoded record keys)
                changed.setdefault(bucket_of(key, n_buckets), {})[key] = blob
            for b, bucket_entries in changed.items():
                data = source.bucket(b)  # a bucket no key was loaded from (new keys only) is read before rewriting
                for k, blob in bucket_entries.items():
                    if blob is None:
                        data.pop(k, None)
                    else:
                        data[k] = blob
                if data:
                    packed = encode_bucket(data)
                    state.put_bucket(b, packed)
                    source.written(b, packed)
                    written += 1
                else:
                    state.delete_bucket(b)
                    source.written(b, None)
                    deleted += 1
            for i in range(cur.previous_entries):  # the generation before this one's
                state.delete_bucket(log_slot(i, 1 - cur.parity))
            proc.clear_dirty_keys()
            new_token = str(cur.snapshotted())
            state.set_task(proc.export_meta(), new_token, n_buckets)
            logged = 0
        else:  # the snapshot's meta stays; the keys stay dirty until the next snapshot writes them
            new_token = str(cur.logged())
            state.set_task(meta, new_token, n_buckets)
    finally:
        source.release()
    dropped = keep.add(cache_key, CachedTask(new_token, proc, source, runner, logged)) if keep is not None else 0
    loaded, read_ns = source.loaded, read_start + source.read_ns - read_in_restore
    s = out.stats
    s["windows_expired"] += proc.expired_windows - expired_before
    s["state_cache_hit"] = int(hit)
    s["state_cache_dropped"] = dropped
    s["state_log_replayed"] = len(plan)
    s["state_snapshot"] = int(snapshot_now)
    s["state_windows"] = proc.windows_held
    s["state_buckets_loaded"] = loaded
    s["state_buckets_written"] = written
    s["state_buckets_deleted"] = deleted
    s["state_keys_written"] = sum(1 for e in changed.values() for v in e.values() if v is not None)
    s["state_read_ns"] = read_ns
    s["state_write_ns"] = time.perf_counter_ns() - t0 - (source.read_ns - read_before_write)
    s["produce_ns"] = output_ns
    s["process_ns"] = time.perf_counter_ns() - t_start - output_ns
    return out


def _generation_length(every: int, cur: Token, partition: int) -> int:
    """Log entries before the next snapshot. The first generation after a task's creation is shortened by a
    phase that depends on its partition (0, 3, 6, 1, ... for ``every`` = 8), so the tasks of a topic, created
    in the same micro-batch, do not all write their snapshots in the same later batches: each snapshot batch
    carries one or two tasks' snapshot writes instead of all of them. Later generations are ``every`` long."""
    if cur.previous:
        return every
    return every - (3 * partition) % every
