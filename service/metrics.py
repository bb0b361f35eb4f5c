"""Prometheus metrics of the service (the one module that defines them; issue 4 extends it).

Counts are computed in Spark's Python workers and reach the driver through the query's observed metrics
(``observe("slidingwindow", ...)``, see :mod:`service.job`); :func:`record_progress` turns one query progress
into metric updates. Labels are low-cardinality only (topic, reason, kind) - never a record key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["REGISTRY", "record_progress", "serve", "METRICS"]

logger = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
P = "slidingwindow_"

records_consumed = Counter(P + "records_consumed_total", "Input records read from Kafka", registry=REGISTRY)
records_aggregated = Counter(P + "records_aggregated_total", "Input records accepted into windows", registry=REGISTRY)
records_dropped = Counter(P + "records_dropped_total", "Input records not aggregated, by reason",
                          ["reason"], registry=REGISTRY)
records_produced = Counter(P + "records_produced_total", "Records written to output topics, by kind",
                           ["kind"], registry=REGISTRY)
windows_created = Counter(P + "windows_created_total", "Windows created", registry=REGISTRY)
windows_updated = Counter(P + "windows_updated_total", "Existing windows updated", registry=REGISTRY)
windows_expired = Counter(P + "windows_expired_total", "Windows removed by retention", registry=REGISTRY)
windows_skipped = Counter(P + "skipped_windows_total", "Closed windows a partially-late record skipped (R13)",
                          registry=REGISTRY)
batch_duration = Histogram(P + "micro_batch_duration_seconds", "Micro-batch wall time",
                           buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64), registry=REGISTRY)
stream_time = Gauge(P + "stream_time_ms", "Largest task stream time (event time, epoch ms)", registry=REGISTRY)
input_rate = Gauge(P + "input_rows_per_second", "Input rows per second (Spark progress)", registry=REGISTRY)
processed_rate = Gauge(P + "processed_rows_per_second", "Processed rows per second (Spark progress)",
                       registry=REGISTRY)
offsets_behind = Gauge(P + "consumer_lag_records", "Max offsets behind latest over input partitions",
                       registry=REGISTRY)

METRICS = {m._name: m for m in (records_consumed, records_aggregated, records_dropped, records_produced,
                                windows_created, windows_updated, windows_expired, windows_skipped, batch_duration,
                                stream_time, input_rate, processed_rate, offsets_behind)}


def serve(port: int) -> None:
    """Expose ``/metrics`` on ``port`` (0: do nothing)."""
    if port:
        start_http_server(port, registry=REGISTRY)
        logger.info("metrics on http://0.0.0.0:%d/metrics", port)


def record_progress(observed: Mapping[str, Any], progress: Mapping[str, Any]) -> None:
    """Update the metrics from one micro-batch: ``observed`` = the ``slidingwindow`` observed-metrics row as a
    dict, ``progress`` = the query progress as a dict (``StreamingQueryProgress.json`` parsed)."""
    o = {k: int(v or 0) for k, v in observed.items()}
    records_consumed.inc(o.get("records", 0))
    records_aggregated.inc(o.get("aggregated", 0))
    records_dropped.labels("late").inc(o.get("late", 0))
    records_dropped.labels("dead-letter").inc(o.get("dead_lettered", 0))
    records_produced.labels("changelog").inc(o.get("changelog", 0))
    windows_created.inc(o.get("windows_created", 0))
    windows_updated.inc(o.get("windows_updated", 0))
    windows_expired.inc(o.get("windows_expired", 0))
    windows_skipped.inc(o.get("skipped_windows", 0))
    if o.get("stream_time", -1) > 0:
        stream_time.set(o["stream_time"])
    dur = (progress.get("durationMs") or {}).get("triggerExecution")
    if dur is not None:
        batch_duration.observe(dur / 1000.0)
    input_rate.set(progress.get("inputRowsPerSecond") or 0.0)
    processed_rate.set(progress.get("processedRowsPerSecond") or 0.0)
    behind = 0
    for src in progress.get("sources") or []:
        m = src.get("metrics") or {}
        try:
            behind = max(behind, int(float(m.get("maxOffsetsBehindLatest", 0))))
        except (TypeError, ValueError):
            pass
    offsets_behind.set(behind)
