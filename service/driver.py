"""The driver: prepare topics and schemas, the task config from the settings, start the streaming query
(:mod:`service.spark`), report progress and metrics, stop cleanly.

``run(settings)`` blocks until the query stops (SIGINT/SIGTERM stop it gracefully after the current micro-batch;
a crash of the process at any point is safe, the next start resumes from the checkpoint).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from connectors.admin import AdminError, TopicSpec, ensure_topics, partition_counts
from service import metrics
from service.checkpoint_access import checkpoint_dir_problem, checkpoint_window_problem
from service.settings import Settings, SettingsError, size_bytes
from service.spark.job import OBSERVATION, await_termination, build_spark, observed_values, start_query
from service.task.config import TaskConfig
from service.task.stats import TASK_BATCHES

__all__ = ["prepare", "run", "task_config", "check_window", "BatchReport", "ServiceError", "failure_line"]

logger = logging.getLogger(__name__)


class ServiceError(RuntimeError):
    """The service cannot start or stopped with an error."""


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did (from the query progress and the observed counters)."""

    batch_id: int
    records: int
    aggregated: int
    late: int
    dead_lettered: int
    changelog: int
    duration_ms: int
    input_rows_per_second: float
    processed_rows_per_second: float
    offsets_behind: int
    stream_time: int
    observed: dict[str, int]

    def line(self) -> str:
        return (
            f"batch {self.batch_id}: {self.records} in ({self.aggregated} aggregated, {self.late} late, "
            f"{self.dead_lettered} dead-lettered) -> {self.changelog} window updates; "
            f"{self.duration_ms} ms, {self.processed_rows_per_second:.0f} rows/s, lag {self.offsets_behind}, "
            f"stream time {self.stream_time}"
        )


def prepare(settings: Settings) -> TaskConfig:
    """Wait for Kafka and the input topics (:func:`wait_for_inputs`), create missing output topics, register
    Avro schemas; the task config."""
    client = settings.kafka_client_config()
    _check_kafka_access(settings, client)  # first: no other client may log the refusal before it
    if settings.sink == "direct":
        from connectors.producer import check_producer_config, producer_config

        try:  # (log_level 0: the check's producer does not log each refused connection while Kafka is down)
            check_producer_config(
                {**producer_config(settings.bootstrap_servers, settings.rdkafka_options()), "log_level": "0"}
            )
        except ValueError as e:
            raise ServiceError(f"{e} (settings bootstrap_servers, kafka_options; or use --sink spark)") from None
    parts = wait_for_inputs(settings)
    if settings.processing_guarantee == "exactly_once":
        _warn_group_ahead_of_new_checkpoint(settings, client, parts)
    try:
        return _prepare_outputs(settings, client, parts)
    except AdminError as e:
        raise ServiceError(str(e)) from None


#: seconds between the log lines while the service waits for Kafka or for its input topics
WAIT_LOG_EVERY = 10.0


def wait_for_inputs(settings: Settings, sleep: Callable[[float], None] = time.sleep) -> dict[str, int]:
    """The input topics' partition counts, once Kafka answers and every input topic exists.

    * Kafka unreachable: retried with backoff (0.5 s doubling to 5 s; 3 s per attempt), a log line every attempt, for
      ``startup_timeout``; then :class:`ServiceError` in one line naming the setting.
    * An input topic that does not exist: the service waits for it (someone creates it, or the first producer
      does with broker-side auto-creation), with a log line every :data:`WAIT_LOG_EVERY` seconds, until it
      exists or the service is stopped. Starting Spark's query on a missing topic would fail it instead."""
    client = settings.kafka_client_config()
    deadline = time.monotonic() + settings.startup_timeout / 1000
    backoff, last_log = 0.5, 0.0
    while True:
        remaining = deadline - time.monotonic()
        try:
            parts = partition_counts(client, settings.input_topics, timeout=max(1.0, min(3.0, remaining)))
        except AdminError as e:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServiceError(
                    f"cannot reach Kafka at {settings.bootstrap_servers} within "
                    f"{settings.startup_timeout / 1000:g} s (setting startup_timeout, "
                    f"--startup-timeout / SLIDINGWINDOW_STARTUP_TIMEOUT): "
                    f"{str(e.__cause__ or e).splitlines()[0]}"
                ) from None
            logger.warning(
                "Kafka at %s does not answer yet; retrying for %.0f s more (startup_timeout)",
                settings.bootstrap_servers,
                remaining,
            )
            sleep(min(backoff, remaining))
            backoff = min(backoff * 2, 5.0)
            continue
        missing = [t for t in settings.input_topics if t not in parts]
        if not missing:
            return parts
        now = time.monotonic()
        if now - last_log >= WAIT_LOG_EVERY:
            logger.warning(
                "input topic(s) %s do not exist; waiting for them to be created (Ctrl-C to stop)", ", ".join(missing)
            )
            last_log = now
        deadline = now + settings.startup_timeout / 1000  # Kafka answered: its clock starts again
        sleep(1.0)


def _prepare_outputs(settings: Settings, client: dict[str, str], parts: dict[str, int]) -> TaskConfig:
    """:func:`prepare` once the inputs exist: output topics, schemas, the task config."""
    if settings.create_topics:
        n = settings.topic_partitions or max(parts.values(), default=1)
        specs = [
            TopicSpec(settings.changelog_topic, n, settings.replication_factor, {"cleanup.policy": "compact"}),
            TopicSpec(settings.dead_letter_topic, n, settings.replication_factor),
        ]
        if settings.late_topic:
            specs.append(TopicSpec(settings.late_topic, n, settings.replication_factor))
        ensure_topics(client, specs)
    key_id = value_id = None
    if "avro" in (settings.changelog_format, settings.changelog_key_format):
        from connectors.output import changelog_key_schema, changelog_value_schema
        from connectors.schema_registry import SchemaRegistry

        reg = SchemaRegistry(settings.schema_registry_url, dict(settings.schema_registry_config()))
        try:
            if settings.changelog_key_format == "avro":
                key_id = reg.register(f"{settings.changelog_topic}-key", changelog_key_schema())
            if settings.changelog_format == "avro":
                value_id = reg.register(
                    f"{settings.changelog_topic}-value", changelog_value_schema(settings.aggregations, settings.window)
                )
        except Exception as e:
            raise ServiceError(f"cannot register the changelog schemas at {settings.schema_registry_url}: {e}") from e
        finally:
            reg.close()
    return task_config(settings, key_id, value_id)


def task_config(settings: Settings, key_schema_id: int | None = None, value_schema_id: int | None = None) -> TaskConfig:
    """The task config the workers get (picklable): the settings a task batch reads, the changelog's schema ids,
    and this run's random owners key."""
    from connectors.output import ChangelogSpec
    from connectors.producer import producer_config
    from connectors.serde import InputSpec

    return TaskConfig(
        window=settings.window_definition,
        aggregations=settings.aggregations,
        emit=settings.emit,
        input=InputSpec.from_settings(settings),
        changelog=ChangelogSpec(
            key_format=settings.changelog_key_format,
            value_format=settings.changelog_format,
            aggregations=settings.aggregations,
            key_schema_id=key_schema_id,
            value_schema_id=value_schema_id,
            window=settings.window,
        ),
        changelog_topic=settings.changelog_topic,
        late_topic=settings.late_topic,
        dead_letter_topic=settings.dead_letter_topic,
        state_buckets=settings.state_buckets,
        state_cache=settings.state_cache,
        state_cache_tasks=settings.state_cache_tasks,
        memory_limit=size_bytes(settings.memory_limit),
        state_snapshot_every=settings.state_snapshot_every,
        state_snapshot_records=settings.state_snapshot_records,
        owners=secrets.token_hex(16) if settings.task_owners and settings.state_cache else "",
        sink=settings.sink,
        batch_produce=settings.batch_produce,
        processing_exception_handler=settings.processing_exception_handler,
        producer=tuple(sorted(producer_config(settings.bootstrap_servers, settings.rdkafka_options()).items()))
        if settings.sink == "direct"
        else (),
        processing_guarantee=settings.processing_guarantee,
        application_id=settings.app_name,
    )


def check_window(settings: Settings) -> None:
    """Before Spark: the task processor of the window settings can be made (a processor the engine does not
    offer for the type ends the start in one line), and the checkpoint's state was written with the same window
    definition (:func:`~service.checkpoint_access.checkpoint_window_problem`); else :class:`SettingsError` naming
    the setting ``window``."""
    from windowstore import describe_identity

    definition = settings.window_definition
    try:
        task_config(settings).new_processor()
    except (NotImplementedError, ValueError) as e:
        raise SettingsError("window", str(e)) from None
    if problem := checkpoint_window_problem(settings.checkpoint_dir, definition.identity(), describe_identity):
        raise SettingsError("window", problem)


def _warn_group_ahead_of_new_checkpoint(settings: Settings, client: dict[str, str], parts: dict[str, int]) -> None:
    """exactly_once on a checkpoint without micro-batches while the group ``app_name`` already holds offsets of
    the input: every batch those offsets cover is taken for a replay of a committed one and writes nothing (the
    group belongs to an earlier deployment - another app_name, or delete the group, gives a full re-run). One
    WARNING line; a failed look-up is no reason not to start."""
    from pathlib import Path

    from connectors.transactions import committed_group_offsets

    ck = settings.checkpoint_dir
    if "://" in ck or any((Path(ck) / "offsets").glob("[0-9]*")):
        return
    try:
        group = committed_group_offsets(client, settings.app_name, parts)
    except Exception as e:
        logger.debug("cannot read the committed offsets of group %s: %s", settings.app_name, e)
        return
    if group:
        logger.warning(
            "processing_guarantee=exactly_once on a new checkpoint, but the group %s already committed offsets of "
            "the input (%s): the records before them are taken as written and produce no output - give this "
            "deployment its own app_name, or delete the group, to process them again",
            settings.app_name,
            ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(group.items())),
        )


def _check_kafka_access(settings: Settings, client: dict[str, str]) -> None:
    """With TLS or SASL configured, fail at start in one line naming the setting when the broker refuses us."""
    from connectors.security import KafkaAccessError, check_access

    if dict(settings.rdkafka_options()).get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT":
        return
    try:
        check_access(client)
    except KafkaAccessError as e:
        raise ServiceError(str(e)) from None


def _report(progress: Any, lag: metrics.LagPoller | None = None, late_topic: bool = True) -> BatchReport:
    p = json.loads(progress.json)
    obs_row = (progress.observedMetrics or {}).get(OBSERVATION)
    raw = observed_values(obs_row) if obs_row is not None else {}
    observed = {k: int(v or 0) for k, v in raw.items() if k != "tasks"}
    behind = 0
    for src in p.get("sources") or []:
        try:
            behind = max(behind, int(float((src.get("metrics") or {}).get("maxOffsetsBehindLatest", 0))))
        except (TypeError, ValueError):
            pass
    metrics.record_progress(raw, p, lag, late_topic)
    return BatchReport(
        batch_id=int(p.get("batchId", -1)),
        records=observed.get("records", 0),
        aggregated=observed.get("aggregated", 0),
        late=observed.get("late", 0),
        dead_lettered=observed.get("dead_lettered", 0),
        changelog=observed.get("changelog", 0),
        duration_ms=int((p.get("durationMs") or {}).get("triggerExecution", 0)),
        input_rows_per_second=float(p.get("inputRowsPerSecond") or 0.0),
        processed_rows_per_second=float(p.get("processedRowsPerSecond") or 0.0),
        offsets_behind=behind,
        stream_time=observed.get("stream_time", -1),
        observed=observed,
    )


def worker_times(observed: dict[str, int]) -> str:
    """The workers' side of a micro-batch in one phrase (sums over its tasks, so more than its wall time when
    tasks run side by side; :mod:`service.task.stats`): where a slow first micro-batch after a restart went -
    reading the state back and replaying its log, or processing what piled up meanwhile."""

    def s(stat: str) -> str:
        return f"{observed.get(stat, 0) / 1e9:.1f}s"

    return (
        f"workers (sum of {observed.get(TASK_BATCHES, 0)} tasks): process {s('process_ns')} "
        f"(state read {s('state_read_ns')}, state write {s('state_write_ns')}), produce {s('produce_ns')}; "
        f"{observed.get('records', 0)} records, {observed.get('state_buckets_loaded', 0)} state buckets loaded, "
        f"{observed.get('state_log_replayed', 0)} log entries replayed, "
        f"{observed.get('state_cache_hit', 0)} cached tasks"
    )


def processed_offsets(progress_json: str) -> dict[tuple[str, int], int]:
    """``{(topic, partition): next offset}`` the micro-batch of a query progress (its JSON) read up to."""
    out: dict[tuple[str, int], int] = {}
    for src in json.loads(progress_json).get("sources") or []:
        end = src.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if isinstance(end, dict):
            for topic, parts in end.items():
                if isinstance(parts, dict):
                    out.update({(str(topic), int(p)): int(o) for p, o in parts.items()})
    return out


def _on_progress(
    on_batch: Callable[[BatchReport], None],
    lag: metrics.LagPoller | None = None,
    late_topic: bool = True,
    committer: Any = None,
) -> Callable[[Any], None]:
    """What the driver does with each query progress (:func:`service.spark.listener.query_listener`): the
    batch's report and metrics, the group's offsets committed (at_least_once, for lag tooling), ``on_batch``."""

    first = [True]

    def on_progress(progress: Any) -> None:
        try:
            report = _report(progress, lag, late_topic)
        except Exception:  # never let reporting kill the listener bus
            logger.exception("cannot read query progress")
            return
        if first:  # the start-up's last step (bench/recovery_bench.py reads this line)
            first.clear()
            parts = dict(progress.durationMs or {})
            logger.info(
                "first micro-batch %s started at %s (took %s ms) %s | %s",
                progress.batchId,
                progress.timestamp,
                parts.pop("triggerExecution", None),
                " ".join(f"{k}={v / 1000:.1f}s" for k, v in sorted(parts.items()) if v >= 100),
                worker_times(report.observed),
            )
        if committer is not None:  # at_least_once: the group's offsets for lag tooling, after the batch
            try:
                committer.commit(processed_offsets(progress.json))
            except Exception:  # monitoring only
                logger.warning("cannot commit the processed offsets", exc_info=True)
        if report.records or report.changelog:
            on_batch(report)
        if skipped := report.observed.get("txn_skipped", 0):  # exactly_once, after a crash: worth a line
            logger.info(
                "batch %d: %d task batch(es) already committed by an earlier run (its transaction): "
                "state rebuilt, nothing written again",
                report.batch_id,
                skipped,
            )

    return on_progress


def failure_line(text: str) -> str:
    """The line of a query failure that says what happened: a task's :class:`~service.task.runner.
    ProcessingFailure` (partition and offset of the record) when there is one; for another exception of a
    Python worker, Spark's first line with the worker's exception (the last ``Name: message`` line of its
    traceback) in place of the traceback; else the first line, with what the service knows of it (:data:`_HINTS`)."""
    lines = text.splitlines()
    for line in lines:
        if "ProcessingFailure: " in line:
            return line[line.index("ProcessingFailure: ") + len("ProcessingFailure: ") :].strip()
    first = lines[0] if lines else ""
    head, found, _ = first.partition("Traceback (most recent call last):")
    python = itertools.takewhile(lambda ln: not ln.startswith(("\tat ", "Caused by: ")), lines[1:])  # not the JVM's
    raised = [ln.strip() for ln in python if _EXCEPTION_LINE.match(ln)]
    if found and raised:
        return f"{head.rstrip()} {raised[-1]}"
    hint = next((h for error, h in _HINTS.items() if error in text), "")
    return f"{first} ({hint})" if hint else first


#: what the service knows of a Spark error that Spark's own message leaves open, by its error class
_HINTS = {
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA": (
        "a checkpoint written before 2026-11-28 names the operator transformWithStateInPandasExec: the service "
        "renames it to transformWithStateInPySparkExec in a local checkpoint at start, not on a remote file system "
        "- rename it in the checkpoint's state/*/_metadata files there (service/README.md, Upgrading); or the "
        "checkpoint was run by a newer version of the service, which an older one cannot continue"
    ),
}


#: the line of a Python traceback that names the exception: ``module.Name: message`` at the start of a line
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Exit|Interrupt|Warning)\b(: .*)?$")


def run(
    settings: Settings,
    *,
    on_batch: Callable[[BatchReport], None] | None = None,
    stop: threading.Event | None = None,
    install_signal_handlers: bool = True,
) -> int:
    """Run the service until ``stop`` is set, SIGINT/SIGTERM, or the query fails. Returns an exit code."""
    from service.spark.listener import query_listener
    from service.spark.warmup import warm_python_workers

    stop = stop or threading.Event()
    t0 = time.monotonic()
    if problem := checkpoint_dir_problem(settings.checkpoint_dir):
        raise ServiceError(problem)
    check_window(settings)
    metrics.set_config_info(settings.emit, settings.input_format, settings.changelog_format)
    metrics.serve(settings.metrics_port)  # first: a port in use is one line, before any wait
    config = prepare(settings)
    spark = build_spark(settings)
    logger.info(
        "Spark %s session ready in %.1fs (master %s, %s cores a task)",
        spark.version,
        time.monotonic() - t0,
        spark.sparkContext.master,
        spark.sparkContext.getConf().get("spark.task.cpus", "1"),
    )
    if settings.warm_workers:  # while the query starts (service.spark.warmup)
        warm_python_workers(spark, settings.state_partitions)
    lag = metrics.LagPoller(settings.kafka_client_config()).start() if settings.metrics_port else None
    committer = None
    if settings.processing_guarantee != "exactly_once":  # exactly_once commits them in each task's transaction
        from connectors.transactions import GroupCommitter

        committer = GroupCommitter(settings.kafka_client_config(), settings.app_name)
    on_progress = _on_progress(
        on_batch or (lambda r: logger.info("%s", r.line())), lag, bool(settings.late_topic), committer
    )
    spark.streams.addListener(query_listener(on_progress, metrics.record_idle))
    if install_signal_handlers and threading.current_thread() is threading.main_thread():

        def _stop(signum: int, _frame: Any) -> None:
            logger.info("signal %d: stopping after the current micro-batch", signum)
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    query = start_query(spark, settings, config)
    logger.info(
        "streaming %s -> %s (%s windows, emit %s, grace %d ms), checkpoint %s",
        ",".join(settings.input_topics),
        settings.changelog_topic,
        settings.window_definition.describe(),
        settings.emit,
        settings.grace_ms,
        settings.checkpoint_dir,
    )
    try:
        while not stop.is_set() and not await_termination(query, 0.5):
            pass  # a failed query ends the wait too; reported below from query.exception()
    finally:
        if query.isActive:
            query.stop()
    exc = query.exception()
    if lag is not None:
        lag.stop()
    if committer is not None:
        committer.close()
    spark.stop()
    if exc is not None:
        logger.error("the streaming query failed: %s", failure_line(str(exc)) or exc)
        logger.debug("the query's exception in full: %s", exc)
        return 1
    return 0
