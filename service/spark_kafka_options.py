"""The options of Spark's Kafka source and sink, from the settings: Spark's ``kafka.``-prefixed client settings
(the security settings in the Java client's dialect, then ``kafka_options``), the source's defaults and reading
options, the sink's producer defaults. Plain dictionaries, no pyspark: :mod:`service.spark.job` hands them to
Spark's reader and writer, and the tests read them without Spark."""

from __future__ import annotations

from typing import Any

from connectors.producer import PRODUCER_DEFAULTS

__all__ = ["SOURCE_DEFAULTS", "SINK_PRODUCER_DEFAULTS", "kafka_options", "source_options", "sink_options"]

#: Spark Kafka source options the service sets (``source_options`` overrides them). ``fetch.max.wait.ms``: a task
#: ends with a fetch in flight that the broker parks until new data or this timeout (500 ms by default), and the
#: reused consumer cannot fetch again before that answer, so the next micro-batch's read of each partition waited
#: up to 500 ms (bench/batch_overhead.py measures the source stage; figures in bench/RESULTS.md).
#: ``max.poll.records``: Spark's consumer seeks before every poll and takes what one poll returns, 500 records by
#: Kafka's default, so a large micro-batch read its partitions 500 records per round trip; what one poll can
#: return stays bounded by the fetch's bytes (``max.partition.fetch.bytes``, 1 MiB), already in memory
SOURCE_DEFAULTS = {"kafka.fetch.max.wait.ms": "10", "kafka.max.poll.records": "100000"}

#: producer settings of Spark's Kafka sink: the direct producer's defaults (:data:`PRODUCER_DEFAULTS`) with the
#: ``kafka.`` prefix; any of them can be overridden with the ``kafka_options`` setting
SINK_PRODUCER_DEFAULTS = {f"kafka.{k}": v for k, v in PRODUCER_DEFAULTS.items()}


def kafka_options(settings: Any) -> dict[str, str]:
    """The Kafka client settings of Spark's source and sink (``kafka.`` + the Java client's name): the bootstrap
    servers, the security settings in the Java dialect, then ``kafka_options``."""
    opts = {"kafka.bootstrap.servers": settings.bootstrap_servers}
    for k, v in settings.java_kafka_options():  # security settings in the Java dialect, then kafka_options
        opts[f"kafka.{k}"] = v
    return opts


def source_options(settings: Any) -> dict[str, str]:
    """Every option of Spark's Kafka source, later ones over earlier ones: :data:`SOURCE_DEFAULTS`, the client
    settings (:func:`kafka_options`), ``source_options``, then the subscription, the starting offsets, failing on
    data loss, ``read_committed`` with processing_guarantee=exactly_once (unless ``source_options`` sets the
    isolation level: upstream transactions count only once committed) and ``max_offsets_per_trigger`` when set."""
    user = dict(settings.source_options)
    opts = {**SOURCE_DEFAULTS, **kafka_options(settings), **user}
    opts["subscribe"] = ",".join(settings.input_topics)
    opts["startingOffsets"] = settings.starting_offsets
    opts["failOnDataLoss"] = "true"
    if getattr(settings, "processing_guarantee", "") == "exactly_once" and "kafka.isolation.level" not in user:
        opts["kafka.isolation.level"] = "read_committed"
    if settings.max_offsets_per_trigger:
        opts["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    return opts


def sink_options(settings: Any) -> dict[str, str]:
    """The options of Spark's Kafka sink (``sink=spark``): :data:`SINK_PRODUCER_DEFAULTS`, then the client settings
    (:func:`kafka_options`)."""
    return {**SINK_PRODUCER_DEFAULTS, **kafka_options(settings)}
