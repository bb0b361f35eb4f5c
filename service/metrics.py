"""Prometheus metrics of the service: the ONE module that builds them all, each from one declaration
(:class:`~service.task.stats.MetricSpec`: name, kind, help, labels, README text). The metrics fed by the workers'
stats are declared with the stats (:data:`service.task.stats.STAT_METRICS`: the plain counters a stat declares,
the labelled counters and histograms, and which stat feeds which series); the metrics the driver sets from the
query progress and the broker are declared here (:data:`DRIVER_METRICS`). The README metrics table is written
from both (:func:`readme_table`, ``python -m devtools.readme_metrics``).

Counts and histograms are computed in Spark's Python workers (per task and micro-batch, the ``stats`` array of
the "stats" rows, see :data:`service.task.stats.STATS_FIELDS`) and reach the driver through the query's observed
metrics (``observe("slidingwindow", ...)``, :mod:`service.spark.job`); :func:`record_progress` turns one query progress
into metric updates. Consumer lag comes from the progress' end offsets against the broker's end offsets
(:class:`LagPoller`, confluent-kafka). Labels are low-cardinality only (topic, partition, reason, kind) - never a
record key.

Histograms whose observations happen in workers arrive as bucket counts: :class:`BulkHistogram` is a histogram
that accepts per-bucket counts and a sum (exposed exactly like a ``prometheus_client`` Histogram).
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from service.task.stats import (
    DEAD_LETTER_REASONS,
    LATENCY_BUCKETS_MS,
    LATENESS_BUCKETS_MS,
    STAT_METRICS,
    STATS,
    MetricSpec,
    Series,
)

__all__ = [
    "REGISTRY",
    "METRICS",
    "METRIC_SPECS",
    "DRIVER_METRICS",
    "STAT_COUNTERS",
    "readme_table",
    "record_progress",
    "record_idle",
    "serve",
    "set_build_info",
    "set_config_info",
    "LagPoller",
    "BulkHistogram",
    "LATENESS_BUCKETS_MS",
    "LATENCY_BUCKETS_MS",
    "PREFIX",
]

logger = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
PREFIX = P = "slidingwindow_"

#: dropped-record reasons (label values of records_dropped_total): late, or the dead letter's ``error`` header
DROP_REASONS = ("late", *DEAD_LETTER_REASONS)


class BulkHistogram(Collector):
    """A histogram fed with bucket counts (observations made elsewhere, e.g. in Spark workers)."""

    def __init__(
        self, name: str, documentation: str, bounds_seconds: Sequence[float], registry: CollectorRegistry | None = None
    ) -> None:
        self._name = name
        self._doc = documentation
        self.bounds = tuple(float(b) for b in bounds_seconds)
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def add(self, counts: Sequence[int], total: float) -> None:
        """Add per-bucket counts (NOT cumulative; ``len(bounds) + 1`` values, the last is +Inf) and their sum."""
        if len(counts) != len(self._counts):
            raise ValueError(f"{self._name}: {len(counts)} bucket counts for {len(self._counts)} buckets")
        with self._lock:
            for i, c in enumerate(counts):
                self._counts[i] += int(c)
            self._sum += float(total)

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self._counts), self._sum

    def describe(self) -> Iterable[HistogramMetricFamily]:
        yield HistogramMetricFamily(self._name, self._doc)

    def collect(self) -> Iterable[HistogramMetricFamily]:
        counts, total = self.snapshot()
        buckets, acc = [], 0
        for b, c in zip([*(floatToGoString(b) for b in self.bounds), "+Inf"], counts, strict=True):
            acc += c
            buckets.append((b, acc))
        yield HistogramMetricFamily(self._name, self._doc, buckets=buckets, sum_value=total)


# -------------------------------------------------------------------------------------------------- the metrics
#: the metrics the driver sets itself, from the query progress, the broker and its own facts
DRIVER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "micro_batch_duration_seconds",
        "histogram",
        "Micro-batch wall time",
        seconds=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128),
        doc="micro-batch wall time (Spark's triggerExecution)",
    ),
    MetricSpec(
        "micro_batches_total",
        "counter",
        "Micro-batches completed (with or without data)",
        doc="query liveness: micro-batches completed (with or without data)",
    ),
    MetricSpec(
        "last_progress_timestamp_seconds",
        "gauge",
        "Wall time of the last query progress or idle event (epoch s; 0: none yet)",
        doc="query liveness: wall time of the last query progress or idle event (epoch s; 0: none yet)",
    ),
    MetricSpec(
        "stream_time_seconds",
        "gauge",
        "Largest stream time of all tasks this process has seen (event time, epoch seconds; never decreases)",
        doc="largest stream time of all tasks this process has seen (event time; never decreases)",
    ),
    MetricSpec(
        "partition_stream_time_seconds",
        "gauge",
        "Stream time of each input partition's task (event time, epoch seconds; windows close by it)",
        labels=("topic", "partition"),
        doc="stream time of each input partition's task",
    ),
    MetricSpec(
        "state_windows",
        "gauge",
        "Windows held by the tasks' processors (sum over tasks, last report of each task)",
        doc="window-store size: windows held by the tasks' processors (sum over tasks, last report of each task)",
    ),
    MetricSpec(
        "state_store_rows",
        "gauge",
        "Rows in Spark's state store (task records + key buckets)",
        doc="window-store size: rows in Spark's state store (task records + key buckets)",
    ),
    MetricSpec(
        "state_store_bytes",
        "gauge",
        "State store size by kind (memory: memoryUsedBytes; sst: RocksDB SST files)",
        labels=("kind",),
        series=(Series(("memory",)), Series(("sst",))),
        doc="window-store size by kind (`memory`: Spark's memoryUsedBytes; `sst`: RocksDB SST files)",
    ),
    MetricSpec(
        "input_rows_per_second",
        "gauge",
        "Input rows per second (Spark progress)",
        doc="Spark's input rate of the last micro-batch",
    ),
    MetricSpec(
        "processed_rows_per_second",
        "gauge",
        "Processed rows per second (Spark progress)",
        doc="Spark's processing rate of the last micro-batch",
    ),
    MetricSpec(
        "consumer_lag_records",
        "gauge",
        "Broker end offset - the query's processed offset, per input partition",
        labels=("topic", "partition"),
        doc="broker end offset - processed offset",
    ),
    MetricSpec(
        "max_offsets_behind_latest_records",
        "gauge",
        "Spark's maxOffsetsBehindLatest over the input partitions (at the last micro-batch)",
        doc="Spark's own maxOffsetsBehindLatest",
    ),
    MetricSpec(
        "consumer_lag_poll_errors_total",
        "counter",
        "Failed broker end-offset queries",
        doc="failed broker end-offset queries (lag is stale)",
    ),
    MetricSpec(
        "build_info",
        "gauge",
        "Build information (always 1)",
        labels=("version", "pyspark", "python"),
        doc="always 1",
    ),
    MetricSpec(
        "config_info",
        "gauge",
        "The running configuration (always 1): emit mode, input and changelog format",
        labels=("mode", "input_format", "changelog_format"),
        doc="always 1: emit mode and formats of the running service",
    ),
)

#: every metric of the service, in the order of the README metrics table
METRIC_SPECS: tuple[MetricSpec, ...] = (*STAT_METRICS, *DRIVER_METRICS)

_counters: dict[str, Counter] = {}
_gauges: dict[str, Gauge] = {}
_histograms: dict[str, Histogram] = {}
_bulk: dict[str, BulkHistogram] = {}


def _build(spec: MetricSpec) -> Counter | Gauge | Histogram | BulkHistogram:
    """The metric of ``spec`` in :data:`REGISTRY`, with every series it declares (at 0 from the first scrape)."""
    name, labels = P + spec.name, spec.labels
    metric: Counter | Gauge | Histogram | BulkHistogram
    if spec.kind == "counter":
        metric = _counters[spec.name] = Counter(name, spec.help, labels, registry=REGISTRY)
    elif spec.kind == "gauge":
        metric = _gauges[spec.name] = Gauge(name, spec.help, labels, registry=REGISTRY)
    elif spec.buckets is not None:
        bounds = [b / spec.buckets.per for b in spec.buckets.bounds]
        metric = _bulk[spec.name] = BulkHistogram(name, spec.help, bounds, registry=REGISTRY)
    else:
        metric = _histograms[spec.name] = Histogram(name, spec.help, labels, buckets=spec.seconds, registry=REGISTRY)
    if labels and not isinstance(metric, BulkHistogram):
        for series in spec.series:
            metric.labels(*series.labels)
    return metric


#: every metric by its family name (a counter's without ``_total``, as Prometheus' TYPE line names it)
METRICS: dict[str, Counter | Gauge | Histogram | BulkHistogram] = {
    P + (s.name.removesuffix("_total") if s.kind == "counter" else s.name): _build(s) for s in METRIC_SPECS
}

#: the plain counters, one per stat that declares one (:data:`service.task.stats.STATS`), by stat name: the driver
#: adds the stat's observed sum to it
STAT_COUNTERS: dict[str, Counter] = {s.name: _counters[s.counter.name] for s in STATS if s.counter is not None}

# the metrics the driver sets (the stat-fed ones are updated from their declarations, :func:`record_progress`)
batch_duration = _histograms["micro_batch_duration_seconds"]
batches = _counters["micro_batches_total"]
last_progress = _gauges["last_progress_timestamp_seconds"]
stream_time = _gauges["stream_time_seconds"]
partition_stream_time = _gauges["partition_stream_time_seconds"]
state_windows = _gauges["state_windows"]
state_rows = _gauges["state_store_rows"]
state_bytes = _gauges["state_store_bytes"]
input_rate = _gauges["input_rows_per_second"]
processed_rate = _gauges["processed_rows_per_second"]
consumer_lag = _gauges["consumer_lag_records"]
offsets_behind = _gauges["max_offsets_behind_latest_records"]
lag_poll_errors = _counters["consumer_lag_poll_errors_total"]
build_info = _gauges["build_info"]
config_info = _gauges["config_info"]


def readme_table() -> str:
    """The README's metrics table: one row per metric of :data:`METRIC_SPECS` (name with its labels, kind, text)."""
    rows = ["| metric | type | meaning |", "| --- | --- | --- |"]
    for s in METRIC_SPECS:
        labels = "{" + ",".join(s.labels) + "}" if s.labels else ""
        rows.append(f"| `{P}{s.name}{labels}` | {s.kind} | {s.doc or s.help} |")
    return "\n".join(rows) + "\n"


def set_build_info() -> None:
    from importlib.metadata import PackageNotFoundError, version

    def v(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "unknown"

    build_info.labels(v("slidingwindow"), v("pyspark"), platform.python_version()).set(1)


def set_config_info(mode: str, input_format: str, changelog_format: str) -> None:
    config_info.clear()
    config_info.labels(mode, input_format, changelog_format).set(1)


def serve(port: int) -> None:
    """Expose ``/metrics`` on ``port`` (0: do nothing)."""
    set_build_info()
    if port:
        try:
            start_http_server(port, registry=REGISTRY)
        except OSError as e:
            from service.settings import SettingsError

            raise SettingsError(
                "metrics_port",
                f"cannot serve /metrics on port {port}: {e.strerror or e} (in use "
                "by another process? choose another port, or 0 to turn it "
                "off)",
            ) from None
        logger.info("metrics on http://0.0.0.0:%d/metrics", port)


# -------------------------------------------------------------------------------------------------- updates
_task_windows: dict[tuple[str, int], int] = {}
_max_stream_time = -1  # largest task stream time seen by this process (ms)
_lock = threading.Lock()


def _int(v: Any) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def _buckets(o: Mapping[str, int], prefix: str, n: int) -> list[int]:
    return [o.get(f"{prefix}{i}", 0) for i in range(n + 1)]


def record_progress(
    observed: Mapping[str, Any], progress: Mapping[str, Any], lag: LagPoller | None = None, late_topic: bool = True
) -> None:
    """Update the metrics from one micro-batch: ``observed`` = the ``slidingwindow`` observed-metrics row as a
    dict (``tasks``: per-task rows, optional), ``progress`` = the query progress (``StreamingQueryProgress.json``
    parsed); ``lag`` gets the progress' end offsets; ``late_topic``: late records are written to a topic."""
    tasks = observed.get("tasks") or []
    o = {k: _int(v) for k, v in observed.items() if k != "tasks"}
    for spec in STAT_METRICS:
        if spec.buckets is not None:
            b = spec.buckets
            if any(k.startswith(b.prefix) for k in o):
                _bulk[spec.name].add(_buckets(o, b.prefix, len(b.bounds)), o.get(b.sum, 0) / b.per)
            continue
        counter = _counters[spec.name]
        for series in spec.series:
            v = 0 if series.stat is None or (series.late_topic_only and not late_topic) else o.get(series.stat, 0)
            (counter.labels(*series.labels) if series.labels else counter).inc(v if spec.per == 1 else v / spec.per)
    global _max_stream_time
    with _lock:
        if o.get("stream_time", -1) > _max_stream_time:
            _max_stream_time = o["stream_time"]
        for t in tasks:
            t = t.asDict() if hasattr(t, "asDict") else dict(t)
            tp = (str(t.get("topic")), _int(t.get("partition")))
            _task_windows[tp] = _int(t.get("windows"))
            st = _int(t.get("stream_time"))
            if st > 0:
                partition_stream_time.labels(tp[0], str(tp[1])).set(st / 1000.0)
                _max_stream_time = max(_max_stream_time, st)
        if _max_stream_time > 0:  # the largest ever seen: a batch of a task that is behind does not lower it
            stream_time.set(_max_stream_time / 1000.0)
        if tasks:
            state_windows.set(sum(_task_windows.values()))

    batches.inc()
    last_progress.set(time.time())
    dur = (progress.get("durationMs") or {}).get("triggerExecution")
    if dur is not None:
        batch_duration.observe(dur / 1000.0)
    input_rate.set(float(progress.get("inputRowsPerSecond") or 0.0))
    processed_rate.set(float(progress.get("processedRowsPerSecond") or 0.0))
    behind = 0
    for src in progress.get("sources") or []:
        m = src.get("metrics") or {}
        try:
            behind = max(behind, int(float(m.get("maxOffsetsBehindLatest", 0))))
        except (TypeError, ValueError):
            pass
        if lag is not None:
            lag.update(src.get("endOffset"))
    offsets_behind.set(behind)
    rows = mem = sst = 0
    for op in progress.get("stateOperators") or []:
        rows += _int(op.get("numRowsTotal"))
        mem += _int(op.get("memoryUsedBytes"))
        sst += _int((op.get("customMetrics") or {}).get("rocksdbSstFileSize"))
    if progress.get("stateOperators"):
        state_rows.set(rows)
        state_bytes.labels("memory").set(mem)
        state_bytes.labels("sst").set(sst)


def record_idle() -> None:
    """The query reported that it is idle (no new input): it is alive."""
    last_progress.set(time.time())


# -------------------------------------------------------------------------------------------------- consumer lag
def _parse_offsets(end_offset: Any) -> dict[tuple[str, int], int]:
    import json

    if end_offset is None:
        return {}
    if isinstance(end_offset, str):
        try:
            end_offset = json.loads(end_offset)
        except ValueError:
            return {}
    out = {}
    if isinstance(end_offset, Mapping):
        for topic, parts in end_offset.items():
            if isinstance(parts, Mapping):
                for p, off in parts.items():
                    out[(str(topic), int(p))] = int(off)
    return out


class LagPoller:
    """Consumer lag per input partition: the broker's end offset (high watermark) minus the query's processed
    offset (``endOffset`` of the last progress). Polls the broker every ``interval`` seconds in a daemon thread."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        interval: float = 5.0,
        end_offsets: Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]] | None = None,
    ) -> None:
        self.client_config = dict(client_config)
        self.interval = interval
        self._processed: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Any = None
        self._end_offsets = end_offsets or self._broker_end_offsets
        self._warned = False

    def update(self, end_offset: Any) -> None:
        offs = _parse_offsets(end_offset)
        if offs:
            with self._lock:
                self._processed.update(offs)

    def _broker_end_offsets(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import Consumer, TopicPartition

        if self._consumer is None:
            self._consumer = Consumer(
                {**self.client_config, "group.id": "slidingwindow-lag-probe", "enable.auto.commit": False}
            )
        out = {}
        for t, p in parts:
            _lo, hi = self._consumer.get_watermark_offsets(TopicPartition(t, p), timeout=5, cached=False)
            out[(t, p)] = int(hi)
        return out

    def poll_once(self) -> None:
        with self._lock:
            processed = dict(self._processed)
        if not processed:
            return
        try:
            ends = self._end_offsets(sorted(processed))
        except Exception as e:  # the broker may be briefly unreachable; keep the last values
            lag_poll_errors.inc()
            (logger.debug if self._warned else logger.warning)(
                "cannot read the input end offsets (consumer lag is stale): %s", e
            )
            self._warned = True
            return
        self._warned = False
        for (t, p), end in ends.items():
            consumer_lag.labels(t, str(p)).set(max(end - processed[(t, p)], 0))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll_once()

    def start(self) -> LagPoller:
        self._thread = threading.Thread(target=self._loop, name="lag-poller", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:
                pass
            self._consumer = None
