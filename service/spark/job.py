"""The Spark Structured Streaming job: Kafka source -> per-partition sliding windows -> Kafka sink.

Plan (one streaming query)::

    kafka source (topic, partition, offset, key, value, timestamp)
      -> groupBy(topic, partition[, slot]).transformWithState(WindowTaskProcessor)
           one task = one input partition
           state: ValueState "task" (task meta: stream time, emit progress, expiry index; cache token; buckets)
                  MapState  "buckets" (bucket -> {aggregation key: that key's windows as one blob}, written
                            every state_snapshot_every-th batch; negative: the batches since and the
                            generation before, as log entries - service.task.state.TaskState)
           output rows: kind (changelog | late | dlq | stats), topic, key, value, headers, stats (counters)
      -> observe("slidingwindow", sums of the counters)           counts reach the driver's query progress
      -> where kind != 'stats' -> kafka sink (topic column routes each row)          sink=spark
      or: the worker has produced its rows (connectors.producer), only stats rows   sink=direct (default; noop sink)

Sinks: ``direct`` (the default) produces the changelog / late / dead-letter rows from the Python worker with
confluent-kafka and waits for every acknowledgement before the task's micro-batch completes; ``spark`` hands them to
Spark's Kafka sink through Arrow and the JVM. Both are at-least-once; ``direct`` alone can also write each task's
micro-batch in a Kafka transaction (``processing_guarantee=exactly_once``). ``direct`` is the default because it
measured faster: no Arrow round trip and no JVM per output row (``bench/service_bench.py --sinks spark,direct``;
figures in bench/RESULTS.md and its history).

Per micro-batch and task the processor reads the task meta once, loads a key's windows from the MapState the
first time that key is touched (lazy loader), and writes either a snapshot - the buckets of the keys whose
windows changed, plus the meta - or, between snapshots, one log entry with the batch's decoded records (their keys,
times and aggregated fields; see :class:`~service.task.state.TaskState`; state calls are JVM round trips:
service/README.md, "How it runs on Spark"). Records are sorted by offset inside the task, so a replayed
micro-batch (after a crash) reproduces exactly the same state and output; at least once, a replay may repeat
identical updates (exactly once, a task's replayed batch writes nothing its committed transaction wrote).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from service.checkpoint_access import checkpoint_balance_tasks, checkpoint_state_partitions, migrate_operator_name
from service.spark import classdata, compat, driver_imports, driver_jvm, slots, thread_pools
from service.spark.processor import WindowTaskProcessor
from service.spark_kafka_options import sink_options, source_options
from service.task.config import TaskConfig
from service.task.stats import STATS, STATS_FIELDS, TASK_BATCHES

if TYPE_CHECKING:  # pyspark is imported where it runs, so that this module loads without it
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = [
    "OUTPUT_SCHEMA",
    "await_termination",
    "WindowTaskProcessor",
    "build_spark",
    "session_conf",
    "checkpoint_file_conf",
    "STATUS_STORE_LIMITS",
    "python_worker_conf",
    "source_frame",
    "windowed_frame",
    "sink_frame",
    "start_query",
    "observed_columns",
    "observed_values",
]

logger = logging.getLogger(__name__)

#: the processor's output rows: output records (changelog | late | dlq) and one "stats" row per task and batch
#: whose ``stats`` array holds the :data:`~service.task.stats.STATS_FIELDS` counters in that order. One array
#: column rather than a column per counter: each output column is an Arrow array built per task and batch (a
#: fixed cost per column). The workers build these columns as :func:`.task_rows.output_arrow_schema`, which must
#: stay this schema as pyspark converts it (``tests/service/test_python_worker.py`` checks).
OUTPUT_SCHEMA = (
    "kind string, topic string, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>, "
    "task_topic string, task_partition int, stats array<long>"
)

#: index of each counter in the ``stats`` column
STATS_INDEX = {name: i for i, name in enumerate(STATS_FIELDS)}

OBSERVATION = "slidingwindow"


# ------------------------------------------------------------------------------------------------ Spark wiring
def build_spark(settings: Any, extra_conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession with Spark's Kafka connector on the classpath and the RocksDB state store."""
    from pyspark.sql import SparkSession

    from connectors.jars import spark_jars_conf

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = session_conf(settings, spark_jars_conf(), extra_conf)
    builder = SparkSession.builder.master(settings.spark_master).appName(settings.app_name)
    for k, v in conf.items():
        builder = builder.config(k, v)
    archive = classdata.archive_for(settings.class_data_cache, conf.get("spark.jars", ""))
    applied = _driver_java_options(archive.java_options() if archive is not None else [], settings.driver_java_options)
    driver_jvm.set_malloc_arenas()
    driver_imports.preload_pyspark_testing()  # before the first JVM call: pandas stays out of the driver
    gateway = _start_jvm(settings, conf)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if gateway is not None:  # our JVM: before the query's first micro-batch grows the pools
        thread_pools.bound_block_manager_pools(gateway.jvm)
    if archive is not None and not archive.exists and applied and gateway is not None:  # our JVM, our options
        classdata.dump_after_first_batch(archive, spark, gateway.jvm)
    return spark


def session_conf(settings: Any, jars: str, extra_conf: dict[str, str] | None = None) -> dict[str, str]:
    """The SparkSession's settings: the service's (``jars`` on ``spark.jars``; ``spark.task.cpus`` when the
    ``task_cpus`` setting is not 0, see :mod:`.task_cpus`), then ``settings.spark_conf``, then ``extra_conf``, each
    over the ones before."""
    conf = {
        "spark.jars": jars,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.state_partitions),
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.adaptive.enabled": "false",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.metricsEnabled": "true",
        **STATUS_STORE_LIMITS,
        # redact the Kafka security options (connectors.security) wherever Spark shows data source options
        "spark.sql.redaction.options.regex": "(?i)url|password|jaas|ssl[.]keystore[.]key|ssl[.]truststore[.]cert",
        "spark.python.worker.reuse": "true",
        # no session extensions from the classpath: the only one is MLlib's function registration, which the
        # service never calls and whose loading was a large share of the session's start (bench/HISTORY.md)
        "spark.sql.extensions.test.loadFromCp": "false",
        "spark.driver.memory": settings.driver_memory,
        **checkpoint_file_conf(settings.checkpoint_dir),
        **python_worker_conf(settings.fast_input),
        **({"spark.task.cpus": str(settings.task_cpus)} if settings.task_cpus else {}),
    }
    conf.update(dict(settings.spark_conf))
    conf.update(extra_conf or {})
    return conf


def _start_jvm(settings: Any, conf: dict[str, str]) -> Any:
    """Start the driver JVM and its SparkContext as ``SparkSession.builder.getOrCreate`` would, in two steps, so
    that the log says when the JVM was up (its gateway answers) apart from when Spark was ready: the two parts of
    a start-up (bench/recovery_bench.py reads these lines). Nothing when this process has pyspark's JVM already
    (``getOrCreate`` reuses it): then None, else the gateway."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return None
    spark_conf = SparkConf().setMaster(settings.spark_master).setAppName(settings.app_name).setAll(list(conf.items()))
    t0 = time.monotonic()
    gateway = launch_gateway(spark_conf)
    logger.info("driver JVM up in %.1fs", time.monotonic() - t0)
    SparkContext(conf=spark_conf, gateway=gateway)
    return gateway


#: how many finished SQL executions, jobs, stages and tasks (a stage) Spark's status store keeps. The store is
#: filled with the UI off too (it backs the status tracker and the REST API), and a streaming query adds SQL
#: executions, a job, stages and their tasks every micro-batch, each execution with its plan graph and metrics:
#: at Spark's limits (1,000 executions, jobs and stages) that is tens of megabytes of the driver JVM's heap in a
#: long run (bench/HISTORY.md). Nothing in the service reads them (its metrics come from the query's progress);
#: ``spark_conf`` overrides them, e.g. with the UI on.
STATUS_STORE_LIMITS = {
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "20",
    "spark.ui.retainedStages": "40",
    "spark.ui.retainedTasks": "500",
}


#: the checkpoint file manager for a checkpoint on the local file system. Spark's default goes through Hadoop's
#: FileContext, whose rename asks the local file system for the link status of both paths, and without Hadoop's
#: native library that forks a ``readlink`` process each: ~13 processes per micro-batch (the offsets and commits
#: logs, every state store's changelog, and their .crc files). This one renames with ``java.io.File.renameTo``
#: (atomic on a local file system) after checking that the target does not exist, which takes a visible share of
#: a small micro-batch's time off (figures: bench/RESULTS.md and its history).
LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def checkpoint_file_conf(checkpoint_dir: str) -> dict[str, str]:
    """Spark settings for where the checkpoint lives: :data:`LOCAL_CHECKPOINT_FILE_MANAGER` for a local path
    (no scheme, or ``file:``); nothing for a remote file system (``hdfs://``, ``s3a://``, ...), which keeps
    Spark's choice. ``spark_conf`` overrides it."""
    if "://" in checkpoint_dir and not checkpoint_dir.startswith("file:"):
        return {}
    return {"spark.sql.streaming.checkpointFileManagerClass": LOCAL_CHECKPOINT_FILE_MANAGER}


#: the Python daemon and worker modules of ``fast_input`` (pyspark's daemon imports a worker module of its own
#: only when the name starts with "pyspark", so the daemon is ours too)
PYTHON_WORKER_MODULES = {
    "spark.python.daemon.module": "service.spark.python_daemon",
    "spark.python.worker.module": "service.spark.python_worker",
}


def python_worker_conf(fast_input: bool) -> dict[str, str]:
    """The Python daemon and worker modules: :mod:`.python_daemon` and :mod:`.python_worker` (pyspark's, with
    the processor's input regrouped a key run at a time) when ``fast_input`` is on and the installed pyspark is
    one they were written for (:func:`.compat.patches_apply`; else one ERROR), else pyspark's own. ``spark_conf``
    overrides them."""
    return dict(PYTHON_WORKER_MODULES) if fast_input and compat.patches_apply() else {}


def _driver_java_options(archive_options: list[str], user_options: str) -> bool:
    """Set the driver JVM's options (:func:`.driver_jvm.java_options`: the project's log4j2 config - WARN,
    without the per-miss state-server WARN -, the footprint options, the class-data archive's, the user's
    ``driver_java_options``), unless ``PYSPARK_SUBMIT_ARGS`` is set already (by the user, or by an earlier
    session of this process). Whether they were set."""
    cfg = os.path.join(os.path.dirname(os.path.dirname(__file__)), "log4j2.properties")  # service/
    if "PYSPARK_SUBMIT_ARGS" in os.environ:
        return False
    options = driver_jvm.java_options(cfg if os.path.exists(cfg) else None, archive_options, user_options)
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options {shlex.quote(shlex.join(options))} pyspark-shell"
    return True


#: slots tried per input partition when balancing tasks (see :func:`task_slot`)
TASK_SLOTS = 64


def task_slot(state_partitions: int, topics: Sequence[str] = ()) -> Column:
    """The ``slot`` column that spreads tasks evenly over ``state_partitions``.

    Spark sends grouping key ``(topic, partition)`` to state partition ``pmod(hash(topic, partition), n)``:
    with a few input partitions that is often uneven (4 input partitions on 2 state partitions: 3 + 1 a third
    of the time), and the busiest state partition sets the micro-batch's duration. With ``slot`` in the key, the
    key lands on ``pmod(hash(topic, partition, slot), n)``; slot = the smallest ``s`` in ``[0, TASK_SLOTS)`` that
    puts the task on its target ``pmod(pmod(hash(topic), n) + partition, n)`` (consecutive partitions of a topic on
    consecutive state partitions), -1 if none does (probability (1 - 1/n)^64). A pure function of
    (topic, partition, n), so every micro-batch and every restart gives a task the same slot - as long as ``n`` is
    the checkpoint's number of state partitions (:func:`service.checkpoint_access.checkpoint_state_partitions`).

    For the partitions of ``topics`` (the first :data:`.slots.TABLE_PARTITIONS` of each) the slots come from a
    table the driver computed (:mod:`.slots`: one string literal per topic, so the plan Spark optimizes and
    compiles every micro-batch stays a few nodes); any other row evaluates the definition in Spark."""
    from pyspark.sql import functions as F

    n = int(state_partitions)
    target = f"pmod(pmod(hash(topic), {n}) + partition, {n})"
    definition = (
        f"array_position(transform(sequence(0, {TASK_SLOTS - 1}), s -> "
        f"pmod(hash(topic, partition, s), {n}) = {target}), true) - 1"
    )
    if not topics:
        return F.expr(definition).cast("int")
    tables = ", ".join(
        f"{_sql_string(t)}, {_sql_string(slots.slot_table(t, n, TASK_SLOTS))}" for t in dict.fromkeys(topics)
    )
    # a partition past its table reads '' (ascii 0 -> null), a topic not in the map null: both take the definition
    table = f"try_element_at(map({tables}), topic)"
    looked_up = f"nullif(ascii(substring({table}, partition + 1, 1)), 0) - {slots.SLOT_CHAR0}"
    return F.expr(f"coalesce({looked_up}, {definition})").cast("int")


def _sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def source_frame(spark: Any, settings: Any) -> DataFrame:
    """The Kafka source as (topic, partition, offset, key, value, ts) with ts = record timestamp in epoch ms, plus
    ``slot`` (:func:`task_slot`) when ``balance_tasks`` is on."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format("kafka").options(**source_options(settings))
    df = reader.load()
    cols = ["topic", "partition", "offset", "key", "value", F.unix_millis(F.col("timestamp")).alias("ts")]
    if checkpoint_balance_tasks(settings.checkpoint_dir, settings.balance_tasks):
        n = checkpoint_state_partitions(settings.checkpoint_dir) or settings.state_partitions
        cols.append(task_slot(n, settings.input_topics).alias("slot"))
    return df.select(*cols)


def windowed_frame(source: Any, config: TaskConfig) -> DataFrame:
    """Apply the per-partition window processor; output rows per :data:`OUTPUT_SCHEMA`."""
    keys = ["topic", "partition"] + (["slot"] if "slot" in source.columns else [])
    with driver_imports.versions_from_metadata():  # pandas and pyarrow stay out of the driver
        return source.groupBy(*keys).transformWithState(
            statefulProcessor=WindowTaskProcessor(config),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="None",
        )


def observed_columns() -> list[Column]:
    """The micro-batch's observation: one aggregate, the list of its tasks' stats rows (topic, partition, the
    :data:`~service.task.stats.STATS_FIELDS` counters); :func:`observed_values` sums them on the driver.

    One ``collect_list`` rather than an aggregate per counter: Spark generates the code of an observation's
    aggregates in every task of every micro-batch (``AggregatingAccumulator``), and with a ``sum`` or ``max`` per
    counter that was a large share of a small micro-batch (profile and figures: bench/HISTORY.md); the list holds
    one short row per task."""
    from pyspark.sql import functions as F

    stats_row = F.struct(F.col("task_topic").alias("topic"), F.col("task_partition").alias("partition"), "stats")
    return [F.collect_list(F.when(F.col("kind") == "stats", stats_row)).alias("tasks")]


def observed_values(observed: Any) -> dict[str, Any]:
    """The counters of one micro-batch from its observation (the ``slidingwindow`` Row of
    ``progress.observedMetrics``, or its dict in the progress JSON): each counter of
    :data:`~service.task.stats.STATS` summed over the tasks (or their largest, ``observed="max"``),
    :data:`~service.task.stats.TASK_BATCHES` = the tasks that ran, and ``tasks``: per task its topic, partition,
    windows held and stream time (for the per-task gauges of :mod:`service.metrics`)."""
    tasks = [t.asDict() if hasattr(t, "asDict") else dict(t) for t in (observed["tasks"] or [])]
    rows = [[int(v or 0) for v in t["stats"]] for t in tasks]
    out: dict[str, Any] = {TASK_BATCHES: len(rows)}
    for i, stat in enumerate(STATS):
        column = [r[i] for r in rows]
        out[stat.name] = (max(column) if stat.observed == "max" else sum(column)) if column else 0
    windows, stream_time = STATS_INDEX["state_windows"], STATS_INDEX["stream_time"]
    out["tasks"] = [
        {"topic": t["topic"], "partition": t["partition"], "windows": r[windows], "stream_time": r[stream_time]}
        for t, r in zip(tasks, rows, strict=True)
    ]
    return out


def sink_frame(windowed: Any) -> DataFrame:
    """Observe the counters, drop the stats rows; the rest is what the Kafka sink writes."""
    from pyspark.sql import functions as F

    observed = windowed.observe(OBSERVATION, *observed_columns())
    return observed.where(F.col("kind") != "stats").select("topic", "key", "value", "headers")


def await_termination(query: StreamingQuery, seconds: float) -> bool:
    """Wait up to ``seconds`` for the query to end; True once it is no longer active. A failed query ends the
    wait too: pyspark raises its ``StreamingQueryException`` from ``awaitTermination``, which is caught here so
    that the driver reports the failure once, from ``query.exception()``, instead of a traceback."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(seconds)  # type: ignore[arg-type]  # pyspark annotates int; it takes seconds as float
    except StreamingQueryException:
        return True
    return not query.isActive


def start_query(spark: Any, settings: Any, config: TaskConfig, query_name: str = "slidingwindow") -> StreamingQuery:
    """Start the streaming query (Kafka -> windows -> Kafka); returns the StreamingQuery.

    ``sink=spark``: the output rows go to Spark's Kafka sink. ``sink=direct``: the workers have produced them
    already, only the stats rows come out of the processor; they are observed and dropped (``noop`` sink). A
    checkpoint written before the processor's Row interface is brought to its operator name first
    (:func:`service.checkpoint_access.migrate_operator_name`)."""
    migrate_operator_name(settings.checkpoint_dir)
    windowed = windowed_frame(source_frame(spark, settings), config)
    if config.sink == "direct":
        writer = windowed.observe(OBSERVATION, *observed_columns()).writeStream.format("noop")
    else:
        writer = sink_frame(windowed).writeStream.format("kafka").options(**sink_options(settings))
    writer = writer.option("checkpointLocation", settings.checkpoint_dir).queryName(query_name).outputMode("append")
    if settings.trigger_interval_ms:
        writer = writer.trigger(processingTime=f"{settings.trigger_interval_ms} milliseconds")
    return writer.start()
