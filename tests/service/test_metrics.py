"""service.metrics without Spark: naming rules, worker bucket counts -> histograms, progress -> metrics, lag,
and ``promtool check metrics`` on the exposition."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from service import metrics
from service.metrics import LATENCY_BUCKETS_MS, LATENESS_BUCKETS_MS, REGISTRY, BulkHistogram, LagPoller
from service.task.stats import STATS, STATS_FIELDS, bucket_counts


def val(name: str, **labels: str) -> float:
    v = REGISTRY.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_names_follow_the_conventions():
    text = generate_latest(REGISTRY).decode()
    families = {ln.split()[2]: ln.split()[3] for ln in text.splitlines() if ln.startswith("# TYPE")}
    assert len(families) >= 25
    for name, kind in families.items():
        assert name.startswith("slidingwindow_"), name
        if kind == "counter":
            assert name.endswith("_total"), name
        assert not name.endswith(("_ms", "_milliseconds")), name
        if kind == "histogram":
            assert name.endswith("_seconds"), name
    labels = {
        lab.split("=")[0]
        for ln in text.splitlines()
        if "{" in ln and not ln.startswith("#")
        for lab in ln[ln.index("{") + 1 : ln.index("}")].split(",")
    }
    assert labels <= {
        "reason",
        "kind",
        "phase",
        "topic",
        "partition",
        "le",
        "version",
        "pyspark",
        "python",
        "mode",
        "input_format",
        "changelog_format",
    }


def test_bulk_histogram_equals_a_histogram_of_the_same_observations():
    rnd = np.random.default_rng(1)
    values = rnd.integers(0, 400_000, 500)
    values[:20] = 0
    values[20:30] = 10_000_000
    reg = CollectorRegistry()
    ref = Histogram("ref_seconds", "x", buckets=[b / 1000 for b in LATENESS_BUCKETS_MS], registry=reg)
    bulk = BulkHistogram("bulk_seconds", "x", [b / 1000 for b in LATENESS_BUCKETS_MS], registry=reg)
    for v in values:
        ref.observe(v / 1000)
    half = len(values) // 2  # two "micro-batches"
    for part in (values[:half], values[half:]):
        bulk.add(bucket_counts(part, LATENESS_BUCKETS_MS), float(part.sum()) / 1000)
    text = generate_latest(reg).decode()
    ref_lines = sorted(
        ln.replace("ref_", "X_") for ln in text.splitlines() if ln.startswith("ref_seconds_") and "_created" not in ln
    )
    bulk_lines = sorted(ln.replace("bulk_", "X_") for ln in text.splitlines() if ln.startswith("bulk_seconds_"))
    assert [ln for ln in ref_lines if "_sum" not in ln] == [ln for ln in bulk_lines if "_sum" not in ln]
    assert reg.get_sample_value("bulk_seconds_sum") == pytest.approx(reg.get_sample_value("ref_seconds_sum"))


def test_stats_fields_carry_every_bucket():
    for i in range(len(LATENESS_BUCKETS_MS) + 1):
        assert f"lateness_b{i}" in STATS_FIELDS
    for i in range(len(LATENCY_BUCKETS_MS) + 1):
        assert f"latency_b{i}" in STATS_FIELDS
    assert {"dead_deserialization", "dead_invalid", "state_windows", "latency_ms_sum"} <= set(STATS_FIELDS)


def test_record_progress_updates_every_metric():
    before = {
        n: val(n)
        for n in (
            "slidingwindow_records_consumed_total",
            "slidingwindow_windows_created_total",
            "slidingwindow_record_lateness_seconds_count",
            "slidingwindow_end_to_end_latency_seconds_count",
        )
    }
    drop0 = {r: val("slidingwindow_records_dropped_total", reason=r) for r in metrics.DROP_REASONS}
    lat = [0] * (len(LATENESS_BUCKETS_MS) + 1)
    lat[0], lat[3] = 80, 12
    e2e = [0] * (len(LATENCY_BUCKETS_MS) + 1)
    e2e[2] = 85
    observed = {
        "records": 100,
        "aggregated": 85,
        "late": 7,
        "dead_lettered": 8,
        "dead_deserialization": 3,
        "dead_undecodable_value": 3,
        "dead_schema_mismatch": 4,
        "dead_number_out_of_range": 1,
        "changelog": 60,
        "windows_created": 20,
        "windows_updated": 40,
        "stream_time": 1_700_000_000_500,
        "lateness_ms_sum": 3000,
        "latency_ms_sum": 17000,
        **{f"lateness_b{i}": c for i, c in enumerate(lat)},
        **{f"latency_b{i}": c for i, c in enumerate(e2e)},
        "tasks": [
            {"topic": "in", "partition": 0, "windows": 30, "stream_time": 1_700_000_000_500},
            {"topic": "in", "partition": 1, "windows": 12, "stream_time": 1_699_999_999_000},
        ],
    }
    progress = {
        "durationMs": {"triggerExecution": 1500},
        "inputRowsPerSecond": 55.5,
        "processedRowsPerSecond": 66.6,
        "sources": [{"endOffset": '{"in":{"0":60,"1":40}}', "metrics": {"maxOffsetsBehindLatest": "5"}}],
        "stateOperators": [{"numRowsTotal": 9, "memoryUsedBytes": 1234, "customMetrics": {"rocksdbSstFileSize": 4321}}],
    }
    lag = LagPoller({}, end_offsets=lambda parts: {p: {("in", 0): 70, ("in", 1): 40}[p] for p in parts})
    metrics.record_progress(observed, progress, lag)
    lag.poll_once()
    assert val("slidingwindow_records_consumed_total") - before["slidingwindow_records_consumed_total"] == 100
    assert val("slidingwindow_windows_created_total") - before["slidingwindow_windows_created_total"] == 20
    got = {r: val("slidingwindow_records_dropped_total", reason=r) - drop0[r] for r in metrics.DROP_REASONS}
    assert {r: v for r, v in got.items() if v} == {
        "late": 7,
        "undecodable-value": 3,
        "schema-mismatch": 4,
        "number-out-of-range": 1,
    }
    assert (
        val("slidingwindow_record_lateness_seconds_count") - before["slidingwindow_record_lateness_seconds_count"] == 92
    )
    assert (
        val("slidingwindow_end_to_end_latency_seconds_count") - before["slidingwindow_end_to_end_latency_seconds_count"]
        == 85
    )
    assert val("slidingwindow_stream_time_seconds") == pytest.approx(1_700_000_000.5)
    assert val("slidingwindow_state_windows") == 42
    assert val("slidingwindow_partition_stream_time_seconds", topic="in", partition="1") == pytest.approx(1_699_999_999)
    assert val("slidingwindow_state_store_bytes", kind="sst") == 4321
    assert val("slidingwindow_input_rows_per_second") == 55.5
    assert val("slidingwindow_max_offsets_behind_latest_records") == 5
    assert val("slidingwindow_consumer_lag_records", topic="in", partition="0") == 10
    assert val("slidingwindow_consumer_lag_records", topic="in", partition="1") == 0


def test_every_declared_stat_counter_counts_its_stat():
    """Each plain counter declared with its stat (service.task.stats.STATS) is built and grows by the stat's
    observed sum, in the counter's unit."""
    counted = [s for s in STATS if s.counter is not None]
    assert {s.name for s in counted} == set(metrics.STAT_COUNTERS)
    names = [metrics.PREFIX + s.counter.name for s in counted if s.counter is not None]
    before = [val(n) for n in names]
    metrics.record_progress({s.name: 1000 + 3 * i for i, s in enumerate(counted)}, {})
    for i, (s, n, b) in enumerate(zip(counted, names, before, strict=True)):
        assert s.counter is not None
        assert val(n) - b == pytest.approx((1000 + 3 * i) / s.counter.per), n


def test_stats_observed_as_the_largest_are_the_absolute_ones():
    """The observed column of a micro-batch sums the tasks' stats except these, whose largest is kept."""
    assert {s.name for s in STATS if s.observed == "max"} == {"stream_time", "max_offset", "lateness_ms_max"}


def test_the_driver_sums_the_tasks_stats_rows_of_the_observation_and_keeps_the_largest_of_the_absolute_ones():
    """service.spark.job observes a list of the tasks' stats rows; observed_values turns it into the counters
    the metrics read - from the progress JSON's dicts and from pyspark's Rows alike."""
    from pyspark.sql import Row

    from service.spark.job import observed_values

    first = {name: 10 + i for i, name in enumerate(STATS_FIELDS)}
    second = {name: 1000 + 2 * i for i, name in enumerate(STATS_FIELDS)} | {"stream_time": 5, "max_offset": 7}
    rows = [("in", 0, first), ("in", 3, second)]
    as_json = {"tasks": [{"topic": t, "partition": p, "stats": [s[n] for n in STATS_FIELDS]} for t, p, s in rows]}
    as_row = Row(tasks=[Row(topic=t, partition=p, stats=[s[n] for n in STATS_FIELDS]) for t, p, s in rows])
    for observed in (as_json, as_row):
        got = observed_values(observed)
        assert got["task_batches"] == 2
        for s in STATS:
            want = max if s.observed == "max" else sum
            assert got[s.name] == want((first[s.name], second[s.name])), s.name
        assert got["tasks"] == [
            {"topic": t, "partition": p, "windows": s["state_windows"], "stream_time": s["stream_time"]}
            for t, p, s in rows
        ]
    assert observed_values({"tasks": []})["records"] == 0


def test_stream_time_gauge_is_the_largest_ever_seen_not_the_last_batchs():
    def batch(*task_times):
        tasks = [{"topic": "in", "partition": p, "windows": 1, "stream_time": t} for p, t in enumerate(task_times)]
        metrics.record_progress({"records": 1, "stream_time": max(task_times), "tasks": tasks}, {})
        return val("slidingwindow_stream_time_seconds")

    top = 1_800_000_000_000
    assert batch(top, top - 5000) == pytest.approx(top / 1000)
    # a batch touching only the partition that is behind: the gauge stays at the largest stream time
    assert batch(-1, top - 4000) == pytest.approx(top / 1000)
    metrics.record_progress({"records": 1, "stream_time": top - 3000}, {})  # no per-task rows either
    assert val("slidingwindow_stream_time_seconds") == pytest.approx(top / 1000)
    assert batch(top + 1000) == pytest.approx(top / 1000 + 1)


def test_promtool_check_metrics_on_the_exposition():
    from tests.deploy.promtool import ensure_prometheus

    ensure_prometheus()
    metrics.set_build_info()
    metrics.set_config_info("update", "json", "avro")
    text = generate_latest(REGISTRY)
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


def test_lag_poller_keeps_the_last_value_when_the_broker_is_unreachable():
    calls = []

    def ends(parts):
        calls.append(parts)
        if len(calls) > 1:
            raise RuntimeError("broker down")
        return dict.fromkeys(parts, 100)

    lag = LagPoller({}, end_offsets=ends)
    lag.poll_once()  # nothing processed yet: no query
    assert calls == []
    lag.update({"lagtopic": {"0": 40}})
    lag.poll_once()
    errors = val("slidingwindow_consumer_lag_poll_errors_total")
    lag.poll_once()
    assert val("slidingwindow_consumer_lag_records", topic="lagtopic", partition="0") == 60
    assert val("slidingwindow_consumer_lag_poll_errors_total") == errors + 1


#: every metric family as dashboards, alert rules and tests read it: (name, type, label names)
EXPOSED = {
    *(
        (f"slidingwindow_{name}", "counter", ())
        for name in (
            "records_consumed_total",
            "records_aggregated_total",
            "records_dead_lettered_total",
            "windows_created_total",
            "windows_updated_total",
            "skipped_windows_total",
            "windows_expired_total",
            "state_cache_hits_total",
            "state_cache_dropped_total",
            "state_buckets_written_total",
            "state_log_replayed_total",
            "state_snapshots_total",
            "task_batches_forwarded_total",
            "processing_errors_total",
            "records_missing_field_total",
            "transactions_committed_total",
            "transactions_aborted_total",
            "transaction_commit_seconds_total",
            "task_batches_already_committed_total",
            "micro_batches_total",
            "task_batches_total",
            "consumer_lag_poll_errors_total",
        )
    ),
    ("slidingwindow_records_dropped_total", "counter", ("reason",)),
    ("slidingwindow_records_produced_total", "counter", ("kind",)),
    ("slidingwindow_worker_seconds_total", "counter", ("phase",)),
    ("slidingwindow_build_info", "gauge", ("version", "pyspark", "python")),
    ("slidingwindow_config_info", "gauge", ("mode", "input_format", "changelog_format")),
    ("slidingwindow_partition_stream_time_seconds", "gauge", ("topic", "partition")),
    ("slidingwindow_consumer_lag_records", "gauge", ("topic", "partition")),
    ("slidingwindow_state_store_bytes", "gauge", ("kind",)),
    *(
        (f"slidingwindow_{name}", "gauge", ())
        for name in (
            "last_progress_timestamp_seconds",
            "stream_time_seconds",
            "input_rows_per_second",
            "processed_rows_per_second",
            "max_offsets_behind_latest_records",
            "state_windows",
            "state_store_rows",
        )
    ),
    *(
        (f"slidingwindow_{name}", "histogram", ())
        for name in ("record_lateness_seconds", "end_to_end_latency_seconds", "micro_batch_duration_seconds")
    ),
}


def test_the_declared_metrics_are_the_exposed_ones_names_and_labels_unchanged():
    """One declaration per metric (service.metrics.METRIC_SPECS): the names, types and labels are exactly the
    ones dashboards, alerts and tests read, and each is in the registry."""
    declared = {(metrics.PREFIX + s.name, s.kind, s.labels) for s in metrics.METRIC_SPECS}
    assert declared == EXPOSED
    assert len(metrics.METRIC_SPECS) == len(EXPOSED)  # no metric declared twice
    text = generate_latest(REGISTRY).decode()
    types = {ln.split()[2]: ln.split()[3] for ln in text.splitlines() if ln.startswith("# TYPE")}
    assert {(name, kind) for name, kind, _l in EXPOSED} <= set(types.items())


def test_every_stat_fed_series_reads_an_observed_column_and_exists_from_the_start():
    """Each series a declaration feeds from the stats names a column the driver observes (a stat, or the count of
    task batches); the labelled ones are exposed at 0 before the first micro-batch."""
    from service.task.stats import STAT_METRICS, TASK_BATCHES

    observed = {*STATS_FIELDS, TASK_BATCHES}
    for spec in STAT_METRICS:
        if spec.buckets is not None:
            b = spec.buckets
            assert {f"{b.prefix}{i}" for i in range(len(b.bounds) + 1)} | {b.sum} <= observed, spec.name
        for series in spec.series:
            assert series.stat in observed, (spec.name, series)
    for spec in metrics.METRIC_SPECS:
        for series in spec.series:
            if series.labels:
                labels = dict(zip(spec.labels, series.labels, strict=True))
                sample = (
                    metrics.PREFIX + spec.name.removesuffix("_total") + ("_total" if spec.kind == "counter" else "")
                )
                assert REGISTRY.get_sample_value(sample, labels) is not None, (sample, labels)
    assert {s.labels[0] for s in next(m for m in STAT_METRICS if m.name == "records_dropped_total").series} == set(
        metrics.DROP_REASONS
    )


def test_late_records_count_as_produced_only_with_a_late_topic():
    def produced_late(late_topic: bool) -> float:
        before = val("slidingwindow_records_produced_total", kind="late")
        metrics.record_progress({"late": 4, "dead_lettered": 1}, {}, late_topic=late_topic)
        return val("slidingwindow_records_produced_total", kind="late") - before

    assert produced_late(True) == 4
    assert produced_late(False) == 0
