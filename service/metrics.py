"""Prometheus metrics of the service: the ONE module that builds them all (names, help, labels, buckets). The plain
counters fed by one worker stat each are declared with that stat (:data:`service.task.stats.STATS`, the name and
help of each) and built here (:data:`STAT_COUNTERS`); counters with labels, histograms and gauges are written here.

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

from service.task.stats import DEAD_LETTER_REASONS, LATENCY_BUCKETS_MS, LATENESS_BUCKETS_MS, STATS, dead_letter_stat

__all__ = [
    "REGISTRY",
    "METRICS",
    "STAT_COUNTERS",
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
build_info = Gauge(
    P + "build_info", "Build information (always 1)", ["version", "pyspark", "python"], registry=REGISTRY
)
config_info = Gauge(
    P + "config_info",
    "The running configuration (always 1): emit mode, input and changelog format",
    ["mode", "input_format", "changelog_format"],
    registry=REGISTRY,
)
records_dropped = Counter(
    P + "records_dropped_total",
    "Input records not aggregated, by reason: late, or dead-lettered with the reason of its "
    "error header (undecodable-value, schema-mismatch, number-out-of-range, ..., "
    "processing-error)",
    ["reason"],
    registry=REGISTRY,
)
records_produced = Counter(
    P + "records_produced_total",
    "Records written to output topics, by kind (changelog, late, dead_letter)",
    ["kind"],
    registry=REGISTRY,
)
record_lateness = BulkHistogram(
    P + "record_lateness_seconds",
    "Record lateness: task stream time - record timestamp, per input record",
    [b / 1000 for b in LATENESS_BUCKETS_MS],
    registry=REGISTRY,
)
e2e_latency = BulkHistogram(
    P + "end_to_end_latency_seconds",
    "Record timestamp to the emit time of the micro-batch that aggregated it",
    [b / 1000 for b in LATENCY_BUCKETS_MS],
    registry=REGISTRY,
)
batch_duration = Histogram(
    P + "micro_batch_duration_seconds",
    "Micro-batch wall time",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128),
    registry=REGISTRY,
)
batches = Counter(P + "micro_batches_total", "Micro-batches completed (with or without data)", registry=REGISTRY)
last_progress = Gauge(
    P + "last_progress_timestamp_seconds",
    "Wall time of the last query progress or idle event (epoch s; 0: none yet)",
    registry=REGISTRY,
)
stream_time = Gauge(
    P + "stream_time_seconds",
    "Largest stream time of all tasks this process has seen (event time, epoch seconds; never decreases)",
    registry=REGISTRY,
)
partition_stream_time = Gauge(
    P + "partition_stream_time_seconds",
    "Stream time of each input partition's task (event time, epoch seconds; windows close by it)",
    ["topic", "partition"],
    registry=REGISTRY,
)
input_rate = Gauge(P + "input_rows_per_second", "Input rows per second (Spark progress)", registry=REGISTRY)
processed_rate = Gauge(P + "processed_rows_per_second", "Processed rows per second (Spark progress)", registry=REGISTRY)
consumer_lag = Gauge(
    P + "consumer_lag_records",
    "Broker end offset - the query's processed offset, per input partition",
    ["topic", "partition"],
    registry=REGISTRY,
)
offsets_behind = Gauge(
    P + "max_offsets_behind_latest_records",
    "Spark's maxOffsetsBehindLatest over the input partitions (at the last micro-batch)",
    registry=REGISTRY,
)
state_windows = Gauge(
    P + "state_windows",
    "Windows held by the tasks' processors (sum over tasks, last report of each task)",
    registry=REGISTRY,
)
state_rows = Gauge(
    P + "state_store_rows", "Rows in Spark's state store (task records + key buckets)", registry=REGISTRY
)
state_bytes = Gauge(
    P + "state_store_bytes",
    "State store size by kind (memory: memoryUsedBytes; sst: RocksDB SST files)",
    ["kind"],
    registry=REGISTRY,
)
task_batches = Counter(
    P + "task_batches_total",
    "Task micro-batches processed (one per input partition with data per micro-batch)",
    registry=REGISTRY,
)
worker_seconds = Counter(
    P + "worker_seconds_total",
    "Time in the Python tasks, by phase "
    "(process includes state_read and state_write; produce: sink=direct writing output)",
    ["phase"],
    registry=REGISTRY,
)
lag_poll_errors = Counter(P + "consumer_lag_poll_errors_total", "Failed broker end-offset queries", registry=REGISTRY)

#: the plain counters, one per stat that declares one (:data:`service.task.stats.STATS`), by stat name: the driver
#: adds the stat's observed sum to it
STAT_COUNTERS: dict[str, Counter] = {
    s.name: Counter(P + s.counter.name, s.counter.help, registry=REGISTRY) for s in STATS if s.counter is not None
}

METRICS: dict[str, Any] = {
    m._name: m
    for m in (
        build_info,
        config_info,
        records_dropped,
        records_produced,
        record_lateness,
        e2e_latency,
        batch_duration,
        batches,
        last_progress,
        stream_time,
        partition_stream_time,
        input_rate,
        processed_rate,
        consumer_lag,
        offsets_behind,
        state_windows,
        state_rows,
        state_bytes,
        task_batches,
        worker_seconds,
        lag_poll_errors,
    )
}

METRICS.update({m._name: m for m in STAT_COUNTERS.values()})

# label values known up front (so every series exists from the first scrape, at 0)
for _r in DROP_REASONS:
    records_dropped.labels(_r)
for _k in ("changelog", "late", "dead_letter"):
    records_produced.labels(_k)
for _k in ("memory", "sst"):
    state_bytes.labels(_k)
for _k in ("process", "state_read", "state_write", "produce"):
    worker_seconds.labels(_k)


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
    for stat in STATS:
        if stat.counter is not None:
            v = o.get(stat.name, 0)
            STAT_COUNTERS[stat.name].inc(v if stat.counter.per == 1 else v / stat.counter.per)
    records_dropped.labels("late").inc(o.get("late", 0))
    dead = o.get("dead_lettered", 0)
    for reason in DEAD_LETTER_REASONS:
        records_dropped.labels(reason).inc(o.get(dead_letter_stat(reason), 0))
    records_produced.labels("changelog").inc(o.get("changelog", 0))
    records_produced.labels("dead_letter").inc(dead)
    records_produced.labels("late").inc(o.get("late", 0) if late_topic else 0)
    task_batches.inc(o.get("task_batches", 0))
    worker_seconds.labels("process").inc(o.get("process_ns", 0) / 1e9)
    worker_seconds.labels("state_read").inc(o.get("state_read_ns", 0) / 1e9)
    worker_seconds.labels("state_write").inc(o.get("state_write_ns", 0) / 1e9)
    worker_seconds.labels("produce").inc(o.get("produce_ns", 0) / 1e9)
    if any(k.startswith("lateness_b") for k in o):
        record_lateness.add(_buckets(o, "lateness_b", len(LATENESS_BUCKETS_MS)), o.get("lateness_ms_sum", 0) / 1000)
    if any(k.startswith("latency_b") for k in o):
        e2e_latency.add(_buckets(o, "latency_b", len(LATENCY_BUCKETS_MS)), o.get("latency_ms_sum", 0) / 1000)
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
