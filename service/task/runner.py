"""One task's micro-batch, without Spark: decode -> window processor -> encoded output rows.

A *task* is one Kafka input partition (topic, partition): its records are processed in offset order by one task
processor (:class:`windowstore.TaskProcessor` of the window type: :func:`windowstore.new_task_processor`), which
keeps one stream time per task (docs/rules.md R7, docs/rules-window-types.md T3). For every input record exactly one
of these happens, and the per-batch :class:`TaskStats` count them:

* aggregated (accepted by the processor; it may still skip closed windows, R13, T7),
* late (dropped by R8: no window of the record open) -> a late-records row (original bytes + reason headers) when
  a late topic is set,
* dead-lettered (undecodable / invalid, see :mod:`connectors.serde`) -> a dead-letter row.

Rows are plain Python lists, which the Spark adapter (:mod:`service.spark.task_rows`) turns into Arrow columns.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from connectors.output import ChangelogEncoder, dead_letter_headers
from connectors.schema_registry import SchemaRegistryUnavailable
from connectors.serde import Decoded, InputDecoder
from service.task.config import TaskConfig
from service.task.state import BucketSource, TaskState, Token, new_processor, read_log
from service.task.stats import (
    DESERIALIZATION_REASONS,
    LATENCY_BUCKETS_MS,
    LATENESS_BUCKETS_MS,
    STATS_FIELDS,
    bucket_counts,
    dead_letter_stat,
)
from windowstore import TaskProcessor

if TYPE_CHECKING:  # where a worker produces rows; imported there
    from connectors.producer import OutputProducer
    from connectors.transactions import TaskProducer

__all__ = ["TaskBatch", "TaskStats", "TaskOutput", "TaskRunner", "ProcessingFailure", "run_isolating"]

logger = logging.getLogger(__name__)

#: a batch where more than this share of the records lack an aggregated field logs a warning naming it
MISSING_FIELD_WARN_SHARE = 0.5


@dataclass(frozen=True)
class TaskBatch:
    """One task's records of a micro-batch, in OFFSET ORDER, as parallel columns: what Spark's processor hands
    the worker (:class:`service.spark.processor.WindowTaskProcessor`), what a task's owner receives over its socket
    (:mod:`service.worker.owners`) and what :meth:`TaskRunner.run` processes. ``emit_time_ms`` is the emit time
    of the batch's changelog rows; None: the wall clock when the batch is processed (tests fix it)."""

    topic: str
    partition: int
    offsets: Sequence[int]
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    timestamps: Sequence[int | None]
    emit_time_ms: int | None = None

    def __post_init__(self) -> None:
        n = len(self.offsets)
        if not len(self.keys) == len(self.values) == len(self.timestamps) == n:
            raise ValueError(
                f"a batch of {self.task} with {n} offsets, {len(self.keys)} keys, {len(self.values)} values and "
                f"{len(self.timestamps)} timestamps: the columns must be equally long"
            )

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def task(self) -> str:
        """The task's name in messages: ``topic-partition``."""
        return f"{self.topic}-{self.partition}"

    @property
    def end(self) -> int:
        """The offset after the batch's last record (what a consumer group commits for it)."""
        return int(self.offsets[-1]) + 1

    def select(self, at: Sequence[int]) -> TaskBatch:
        """The records at the positions ``at``, in that order: the same task and emit time."""
        return replace(
            self,
            offsets=[self.offsets[j] for j in at],
            keys=[self.keys[j] for j in at],
            values=[self.values[j] for j in at],
            timestamps=[self.timestamps[j] for j in at],
        )


@dataclass
class TaskStats:
    values: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATS_FIELDS, 0))

    def __getitem__(self, name: str) -> int:
        return self.values[name]

    def __setitem__(self, name: str, v: int) -> None:
        self.values[name] = v


@dataclass
class TaskOutput:
    """Output rows of one task batch: first the rows with headers (dead letters, late records) as parallel
    lists (``headers``: (name, bytes) pairs per row), then the changelog rows as two encoded columns for
    ``changelog_topic`` without headers (``changelog_keys``/``changelog_values``: a
    :class:`~connectors.rows.RowBlock` each, or lists), which the direct sink hands to its producer whole.
    :meth:`rows` gives all of them in that order."""

    kind: list[str] = field(default_factory=list)
    topic: list[str] = field(default_factory=list)
    key: list[bytes | None] = field(default_factory=list)
    value: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes]] | None] = field(default_factory=list)
    stats: TaskStats = field(default_factory=TaskStats)
    #: the valid records the processor was given (the task's log entry)
    decoded: Decoded | None = None
    changelog_topic: str = ""
    changelog_keys: Sequence[bytes] = ()
    changelog_values: Sequence[bytes | None] = ()  # None: a session tombstone

    def __len__(self) -> int:
        return len(self.kind) + len(self.changelog_keys)

    def add(
        self, kind: str, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None
    ) -> None:
        self.kind.append(kind)
        self.topic.append(topic)
        self.key.append(key)
        self.value.append(value)
        self.headers.append(headers)

    def columns(
        self,
    ) -> tuple[list[str], list[str], list[bytes | None], list[bytes | None], list[list[tuple[str, bytes]] | None]]:
        """All rows as the lists ``(kind, topic, key, value, headers)``, the changelog last."""
        n = len(self.changelog_keys)
        return (
            self.kind + ["changelog"] * n,
            self.topic + [self.changelog_topic] * n,
            self.key + list(self.changelog_keys),
            self.value + list(self.changelog_values),
            self.headers + [None] * n,
        )

    def rows(self) -> list[tuple[str, str, bytes | None, bytes | None, list[tuple[str, bytes]] | None]]:
        """Every row as ``(kind, topic, key, value, headers)``, the changelog last."""
        return list(zip(*self.columns()))

    def send_to(self, sink: OutputProducer | TaskProducer) -> None:
        """Hand every row to ``sink`` (the worker's producer, or the task's transaction): the rows with headers,
        then the changelog rows as one block."""
        sink.send(self.topic, self.key, self.value, self.headers)
        sink.send_rows(self.changelog_topic, self.changelog_keys, self.changelog_values)


def _b(v: Any) -> bytes:
    return str(v).encode("utf-8")


def _dead_letter(
    out: TaskOutput,
    topic: str,
    batch: TaskBatch,
    i: int,
    reason: str,
    message: str,
    keep_value: bool = True,
    exception: str = "",
    stacktrace: str = "",
) -> None:
    """Add record ``i`` of ``batch`` to ``out`` as a dead letter for ``topic``: its key, its value unless
    ``keep_value`` is false, and the headers of :func:`~connectors.output.dead_letter_headers` (why, where it
    came from; ``exception`` and ``stacktrace`` when processing it raised)."""
    headers = dead_letter_headers(
        reason,
        message,
        batch.topic,
        batch.partition,
        batch.offsets[i],
        batch.timestamps[i],
        exception=exception,
        stacktrace=stacktrace,
    )
    out.add("dlq", topic, batch.keys[i], batch.values[i] if keep_value else None, headers)


class TaskRunner:
    """Processes micro-batches of tasks with a given :class:`TaskConfig` (one per Python worker)."""

    def __init__(self, config: TaskConfig, registry: Any = None) -> None:
        self.config = config
        self.decoder = InputDecoder(config.input, registry=registry)
        self.encoder = ChangelogEncoder(config.changelog)

    def run(self, proc: TaskProcessor, batch: TaskBatch) -> TaskOutput:
        """Process one task's records of a micro-batch (offset order); returns the output rows.

        Only the processor is changed (its state is the caller's to persist)."""
        t0 = time.perf_counter_ns()
        cfg = self.config
        out = TaskOutput()
        stats = out.stats
        keys, values, offsets = batch.keys, batch.values, batch.offsets
        emit_time = int(time.time() * 1000) if batch.emit_time_ms is None else batch.emit_time_ms
        n = len(offsets)
        stats["records"] = n
        stats["max_offset"] = int(offsets[-1]) if n else -1
        good, bad = self.decoder.decode_columns(keys, values, batch.timestamps, cfg.value_fields)

        ps = proc.stats
        created0, updated0, skipped0 = ps.windows_created, ps.windows_updated, ps.skipped_windows
        expired0 = proc.expired_windows

        st0 = proc.observed_stream_time
        columns, updates = self._apply(proc, good)
        out.decoded = good
        late_rows: list[tuple[int, Any]] = []
        late_at: list[int] = []  # positions in ``good``
        dropped = proc.take_drops()
        if dropped:
            at = {id(v): p for p, v in enumerate(good.values)}
            late_at = [at[id(d.value)] for d in dropped]
            late_rows = [(good.index[p], d) for p, d in zip(late_at, dropped)]
        lateness_sum = lateness_max = 0
        if len(good):
            ts_arr = good.ts
            st_arr = np.maximum.accumulate(np.maximum(ts_arr, st0))
            lateness = st_arr - ts_arr
            lateness_sum = int(lateness.sum())
            lateness_max = int(lateness.max())
            for i, c in enumerate(bucket_counts(lateness, LATENESS_BUCKETS_MS)):
                stats[f"lateness_b{i}"] = c

        # dead letters, then late records, then the changelog (each in input/emission order)
        for i, reason, message in bad:
            # a value over the size limit is not copied (it may not fit a record); the headers say where it is
            _dead_letter(out, cfg.dead_letter_topic, batch, i, reason, message, keep_value=reason != "value-too-large")
            stats[dead_letter_stat(reason)] += 1
        self._check_missing_fields(stats, n, batch.task)
        if cfg.late_topic:
            topic, partition = batch.topic, batch.partition
            for i, d in late_rows:
                out.add(
                    "late",
                    cfg.late_topic,
                    keys[i],
                    values[i],
                    [
                        ("reason", str(getattr(d.reason, "value", d.reason)).encode()),
                        ("topic", topic.encode()),
                        ("partition", _b(partition)),
                        ("offset", _b(offsets[i])),
                        ("timestamp", _b(d.ts)),
                        ("stream_time", _b(d.stream_time)),
                    ],
                )
        if columns is not None:
            ckeys, cvalues = self.encoder.encode_columns(columns, emit_time)
        else:
            ckeys, cvalues = self.encoder.encode(updates, emit_time)
        out.changelog_topic, out.changelog_keys, out.changelog_values = cfg.changelog_topic, ckeys, cvalues

        stats["aggregated"] = len(good) - len(late_rows)
        if len(good):
            acc_ts = np.delete(good.ts, late_at) if late_at else good.ts
            if len(acc_ts):
                latency = np.maximum(emit_time - acc_ts, 0)
                stats["latency_ms_sum"] = int(latency.sum())
                for i, c in enumerate(bucket_counts(latency, LATENCY_BUCKETS_MS)):
                    stats[f"latency_b{i}"] = c
        stats["late"] = len(late_rows)
        stats["dead_lettered"] = len(bad)
        n_deser = sum(1 for _i, reason, _m in bad if reason in DESERIALIZATION_REASONS)
        stats["dead_deserialization"] = n_deser
        stats["dead_invalid"] = len(bad) - n_deser
        stats["changelog"] = len(ckeys)
        stats["windows_created"] = ps.windows_created - created0
        stats["windows_updated"] = ps.windows_updated - updated0
        stats["skipped_windows"] = ps.skipped_windows - skipped0
        stats["windows_expired"] = proc.expired_windows - expired0
        stats["stream_time"] = proc.observed_stream_time
        stats["lateness_ms_sum"] = lateness_sum
        stats["lateness_ms_max"] = lateness_max
        stats["process_ns"] = time.perf_counter_ns() - t0
        return out

    def _check_missing_fields(self, stats: TaskStats, n: int, task: str) -> None:
        """Count the records the decoder found without an aggregated field; warn (naming the field) when most
        records of the batch lack it: more likely a typo in the aggregations than bad producers."""
        missing = self.decoder.missing_fields
        if not missing:
            return
        stats["missing_field_records"] = sum(missing.values())
        for name, count in missing.items():
            if count > MISSING_FIELD_WARN_SHARE * n:
                logger.warning(
                    "%d of %d records of %s lack the field %r that the aggregations %r read: a typo "
                    "in the aggregations? (they are dead-lettered with error schema-mismatch)",
                    count,
                    n,
                    task,
                    name,
                    self.config.aggregations,
                )

    def _apply(self, proc: TaskProcessor, good: Decoded) -> tuple[Any, list[Any]]:
        """Feed the decoded records to the processor and flush: ``(columns, [])`` on the batch path
        (:meth:`~windowstore.TaskProcessor.flush_columns`), ``(None, updates)`` on the record path."""
        if proc.batch:
            # identical results to the record path; the batch fast path where it applies. The record values go
            # along so fallbacks and drop reports get the very objects decoded here (late rows map back by id)
            fields: dict[str | None, Any] = {}
            for name, numeric in self.config.input.fields:
                if numeric:
                    col = np.asarray(good.fields[name])
                    fields[name] = col if col.dtype.kind in "iuf" else col.astype(object)
            proc.process_columns(good.keys, good.ts, fields, good.values)
            return proc.flush_columns(), []
        updates: list[Any] = []
        process = proc.process
        for k, v, t in zip(good.keys, good.values, good.ts.tolist()):
            r = process(k, v, t)
            if r:
                updates.extend(r)
        updates.extend(proc.flush())
        return None, updates

    def replay(self, proc: TaskProcessor, good: Decoded) -> None:
        """Bring ``proc`` through a committed batch again (its :attr:`TaskOutput.decoded` records): the same
        calls as :meth:`run` followed by the expiry of :func:`~service.task.batch.process_task_batch`, output
        discarded. The processor is deterministic, so the state afterwards is the state that batch committed."""
        self._apply(proc, good)
        proc.take_drops()
        proc.expire()


class ProcessingFailure(RuntimeError):
    """A record whose processing raised, with processing_exception_handler=fail: the message names its
    partition and offset."""


def run_isolating(
    runner: TaskRunner,
    state: TaskState,
    meta: Any,
    n_buckets: int,
    cur: Token,
    batch: TaskBatch,
    exc: Exception,
) -> tuple[TaskProcessor, BucketSource, TaskOutput]:
    """The processing exception handler (Kafka Streams' ``processing.exception.handler``, KIP-1033), after
    :meth:`TaskRunner.run` of the whole batch raised ``exc``: the batch again, record by record, each on a
    processor at the committed state plus the records before it that went through, to find the records that
    raise.

    * ``fail``: :class:`ProcessingFailure` naming the first such record's partition and offset;
    * ``continue``: the batch once more without those records, on a processor at the committed state (the
      windows and the changelog are exactly those of the batch without them), and each of them as a dead
      letter with error ``processing-error`` and the exception in the headers (KIP-1034's included).

    When no record raises on its own, the batch's failure is not a record's: ``exc`` is raised again."""
    cfg = runner.config

    def restored() -> tuple[TaskProcessor, BucketSource]:
        proc, source = new_processor(cfg, meta, n_buckets)
        source.bind(state)
        for i in range(cur.entries):
            runner.replay(proc, read_log(state, cur.parity, i, cfg.value_fields)[1])
        return proc, source

    def run(proc: TaskProcessor, at: Sequence[int]) -> TaskOutput:
        return runner.run(proc, batch.select(at))

    kept: list[int] = []
    failed: list[tuple[int, BaseException]] = []
    proc, source = restored()
    offsets = batch.offsets
    for j in range(len(offsets)):
        try:
            run(proc, [j])
        except SchemaRegistryUnavailable:
            source.release()
            raise
        except Exception as e:  # this record raises
            source.release()
            if cfg.processing_exception_handler == "fail":
                raise ProcessingFailure(
                    f"processing the record at offset {offsets[j]} of {batch.task} raised "
                    f"{type(e).__name__}: {e} (processing_exception_handler=fail; with continue it goes to the "
                    f"dead-letter topic {cfg.dead_letter_topic} with error processing-error)"
                ) from e
            failed.append((j, e))
            proc, source = restored()  # the failed record may have left the processor half-updated
            if kept:
                run(proc, kept)
            continue
        kept.append(j)
    source.release()
    if not failed:
        raise exc
    logger.warning(
        "%d of %d records of %s raised while processed (first: offset %d, %s: %s); dead-lettered "
        "with error processing-error (processing_exception_handler=continue)",
        len(failed),
        len(offsets),
        batch.task,
        offsets[failed[0][0]],
        type(failed[0][1]).__name__,
        failed[0][1],
    )
    proc, source = restored()
    out = run(proc, kept)
    for j, err in failed:
        cls = type(err)
        _dead_letter(
            out,
            cfg.dead_letter_topic,
            batch,
            j,
            "processing-error",
            f"{cls.__name__}: {err}",
            exception=f"{cls.__module__}.{cls.__qualname__}",
            stacktrace="".join(traceback.format_exception(cls, err, err.__traceback__)),
        )
    s = out.stats
    s["records"] = len(batch)
    s["max_offset"] = batch.end - 1
    s["dead_lettered"] += len(failed)
    s[dead_letter_stat("processing-error")] += len(failed)
    return proc, source, out
