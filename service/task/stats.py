"""The stats vocabulary of a task batch and the metrics made of it, each declared once.

* :data:`STATS`: the counters a worker carries to the driver in its "stats" row, each with whether a replayed
  batch zeroes it, how the micro-batch's observed column combines the tasks' values, and the plain Prometheus
  counter it feeds, if any (:data:`STATS_FIELDS`, :data:`REPLAY_ZEROED` and the driver's observed columns,
  :func:`service.spark.job.observed_columns`, derive from it);
* :data:`STAT_METRICS`: every Prometheus metric family fed by these stats (:class:`MetricSpec`: name, kind,
  help, labels, the README text, and which stat feeds which series) - the plain counters of :data:`STATS` and
  the labelled counters and histograms declared here. :mod:`service.metrics` builds the metrics, updates them
  from the observed stats and writes the README metrics table from these declarations (and its own, for the
  metrics that come from the query progress);
* the histogram bucket bounds the workers count into (:func:`bucket_counts`) and the dead-letter reasons with
  their counters (:func:`dead_letter_stat`).

No Prometheus import here: the workers read this module (:mod:`service.task.runner`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from connectors.serde import REASONS as SERDE_REASONS

__all__ = [
    "OUTPUT_KINDS",
    "CounterSpec",
    "StatSpec",
    "Series",
    "BucketStats",
    "MetricSpec",
    "TASK_BATCHES",
    "LATENESS",
    "LATENCY",
    "LATENESS_STATS",
    "LATENCY_STATS",
    "STATS",
    "STAT_METRICS",
    "STATS_FIELDS",
    "REPLAY_ZEROED",
    "LATENESS_BUCKETS_MS",
    "LATENCY_BUCKETS_MS",
    "DEAD_LETTER_REASONS",
    "DESERIALIZATION_REASONS",
    "dead_letter_stat",
    "bucket_counts",
]

#: record lateness (stream time - record timestamp) bucket bounds, ms (workers count per bucket)
LATENESS_BUCKETS_MS: tuple[int, ...] = (0, 10, 100, 500, 1_000, 5_000, 30_000, 60_000, 300_000, 3_600_000)
#: end-to-end latency (emit time - record timestamp) bucket bounds, ms
LATENCY_BUCKETS_MS: tuple[int, ...] = (
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    3_600_000,
)

#: dead-letter reasons: the decoder's (:data:`connectors.serde.REASONS`) and a record whose processing raised
#: (processing_exception_handler=continue)
DEAD_LETTER_REASONS: tuple[str, ...] = (*SERDE_REASONS, "processing-error")


def dead_letter_stat(reason: str) -> str:
    """The :data:`STATS_FIELDS` counter of a dead-letter reason (``null-value`` ->
    ``dead_null_value``)."""
    return "dead_" + reason.replace("-", "_")


OUTPUT_KINDS = ("changelog", "late", "dlq", "stats")


@dataclass(frozen=True)
class CounterSpec:
    """The Prometheus counter a stat is added to on the driver (:mod:`service.metrics` builds it from this): its
    name after the ``slidingwindow_`` prefix, its help text, ``per``: the stat's units in one of the
    counter's (``1e9`` for a stat in ns counted in seconds), and ``doc``: its text in the README metrics table
    (default: the help)."""

    name: str
    help: str
    per: float = 1
    doc: str = ""


@dataclass(frozen=True)
class Series:
    """One series of a metric: its label values and the observed stat its value is added from (None: the driver
    sets it from the query progress). ``late_topic_only``: added only when late records are written to a topic
    (else they are only counted)."""

    labels: tuple[str, ...] = ()
    stat: str | None = None
    late_topic_only: bool = False


@dataclass(frozen=True)
class BucketStats:
    """A histogram the workers count into: the stats ``{prefix}0`` ... ``{prefix}{len(bounds)}`` hold the counts
    per bucket (NOT cumulative; the last is above the largest bound), ``sum`` their sum, both in ``per`` units of
    one of the histogram's (ms: 1000)."""

    prefix: str
    sum: str
    bounds: tuple[int, ...]
    per: float = 1000

    def stats(self) -> tuple[StatSpec, ...]:
        """The bucket stats, zeroed on replay like every count of what a batch read."""
        return tuple(StatSpec(f"{self.prefix}{i}", zeroed_on_replay=True) for i in range(len(self.bounds) + 1))


@dataclass(frozen=True)
class MetricSpec:
    """One Prometheus metric family, declared once: :mod:`service.metrics` builds it (``slidingwindow_`` +
    ``name``, ``kind``, ``help``, ``labels``; every labelled series in ``series`` exists from the first scrape),
    adds each series' stat to it per micro-batch (divided by ``per``) or fills a histogram from ``buckets``, and
    writes its row of the README metrics table (``doc``, default: the help). ``seconds``: a histogram's bucket
    bounds when the driver observes it itself."""

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    help: str
    labels: tuple[str, ...] = ()
    series: tuple[Series, ...] = ()
    per: float = 1
    buckets: BucketStats | None = None
    seconds: tuple[float, ...] = ()
    doc: str = ""

    @classmethod
    def of_counter(cls, stat: str, counter: CounterSpec) -> MetricSpec:
        """The plain counter a stat declares (:attr:`StatSpec.counter`)."""
        return cls(counter.name, "counter", counter.help, series=(Series(stat=stat),), per=counter.per, doc=counter.doc)


@dataclass(frozen=True)
class StatSpec:
    """One per-task, per-batch counter of the "stats" row: its name, whether a replayed batch that is already in
    Kafka zeroes it (:data:`REPLAY_ZEROED`), the plain counter it feeds, if any (the labelled counters and the
    histograms it feeds declare it among their series: :data:`STAT_METRICS`), and whether the micro-batch's
    observed value is the tasks' sum or their largest."""

    name: str
    zeroed_on_replay: bool = False
    counter: CounterSpec | None = None
    #: how the driver's observed column (:func:`service.spark.job.observed_columns`) combines the tasks' values
    observed: Literal["sum", "max"] = "sum"


#: the histograms the workers count into: their bucket stats, and the metrics
LATENESS_STATS = BucketStats("lateness_b", "lateness_ms_sum", LATENESS_BUCKETS_MS)
LATENCY_STATS = BucketStats("latency_b", "latency_ms_sum", LATENCY_BUCKETS_MS)
LATENESS = MetricSpec(
    "record_lateness_seconds",
    "histogram",
    "Record lateness: task stream time - record timestamp, per input record",
    buckets=LATENESS_STATS,
    doc="per decoded record: task stream time - record timestamp",
)
LATENCY = MetricSpec(
    "end_to_end_latency_seconds",
    "histogram",
    "Record timestamp to the emit time of the micro-batch that aggregated it",
    buckets=LATENCY_STATS,
    doc="per aggregated record: emit time of the micro-batch that aggregated it - record timestamp (with `--emit "
    "close` the window's final record follows when the window closes, td + grace of stream time later)",
)


_Z = True  # zeroed_on_replay

#: the stats vocabulary, in the order of the "stats" row's ``stats`` array: one declaration per counter, from which
#: :data:`STATS_FIELDS`, :data:`REPLAY_ZEROED` and the driver's plain Prometheus counters are derived
STATS: tuple[StatSpec, ...] = (
    # input records seen
    StatSpec(
        "records",
        _Z,
        CounterSpec(
            "records_consumed_total",
            "Input records read from Kafka",
            doc="input records read (all of them, good or not)",
        ),
    ),
    # accepted by the processor
    StatSpec(
        "aggregated",
        _Z,
        CounterSpec(
            "records_aggregated_total", "Input records accepted into windows", doc="input records accepted into windows"
        ),
    ),
    StatSpec("late", _Z),  # dropped as late (R8)
    # undecodable / invalid
    StatSpec(
        "dead_lettered",
        _Z,
        CounterSpec(
            "records_dead_lettered_total",
            "Input records written to the dead-letter topic",
            doc="written to the dead-letter topic (= every reason but `late`)",
        ),
    ),
    StatSpec("changelog", _Z),  # changelog records produced
    StatSpec("windows_created", _Z, CounterSpec("windows_created_total", "Windows created")),
    StatSpec("windows_updated", _Z, CounterSpec("windows_updated_total", "Existing windows updated")),
    # closed windows a record skipped: sliding, those of a partially-late record (R13); time windows, every closed
    # window of a record, a fully late one's too (T7, Kafka Streams' dropped-records-total)
    StatSpec(
        "skipped_windows",
        _Z,
        CounterSpec(
            "skipped_windows_total",
            "Closed windows a record skipped (sliding: of partially-late records, R13; tumbling/hopping: every "
            "closed window of a record, T7)",
        ),
    ),
    StatSpec("windows_expired", _Z, CounterSpec("windows_expired_total", "Windows removed by retention")),
    # 1 when the worker's cached processor was valid (no state reads)
    StatSpec(
        "state_cache_hit",
        counter=CounterSpec("state_cache_hits_total", "Task batches served from the worker's cached processor"),
    ),
    # cached task processors the worker dropped after this batch (state_cache_tasks, memory_limit)
    StatSpec(
        "state_cache_dropped",
        counter=CounterSpec(
            "state_cache_dropped_total",
            "Tasks' cached windows dropped by a worker to stay within state_cache_tasks or memory_limit (their next "
            "batch restores them from the state store: exact, slower)",
        ),
    ),
    StatSpec("state_buckets_loaded"),
    StatSpec(
        "state_buckets_written",
        counter=CounterSpec("state_buckets_written_total", "Key buckets written to the state store"),
    ),
    StatSpec("state_buckets_deleted"),
    StatSpec("state_keys_written"),
    # log entries replayed to bring a processor up to the committed state (see TaskState)
    StatSpec(
        "state_log_replayed",
        counter=CounterSpec(
            "state_log_replayed_total",
            "Task log entries replayed to bring a processor to the committed state (a worker behind its task, or a "
            "restore)",
        ),
    ),
    # 1 when the batch wrote a snapshot (key buckets) instead of a log entry
    StatSpec(
        "state_snapshot",
        counter=CounterSpec(
            "state_snapshots_total", "Task batches that wrote a snapshot (key buckets) instead of a log entry"
        ),
    ),
    # 1 when the batch ran in the Python worker that owns the task, not Spark's (worker.owners)
    StatSpec(
        "task_forwarded",
        counter=CounterSpec(
            "task_batches_forwarded_total",
            "Task batches Spark gave one Python worker that ran in the worker owning the task (task_owners)",
        ),
    ),
    StatSpec("stream_time", observed="max"),  # the task's stream time after the batch (-1: none yet)
    StatSpec("max_offset", observed="max"),  # largest input offset in the batch
    StatSpec("lateness_ms_sum", _Z),  # sum over accepted + late records of stream_time - ts (>= 0)
    StatSpec("lateness_ms_max", observed="max"),
    StatSpec("process_ns"),  # time spent in the Python task (decode + process + encode + state calls)
    StatSpec("state_read_ns"),  # of which restoring state (task meta, key blobs, log entries and their replay)
    StatSpec("state_write_ns"),  # of which exporting and writing state
    StatSpec("produce_ns"),  # writing the output rows to Kafka from the worker (sink=direct; 0 with Spark's sink)
    StatSpec("dead_deserialization", _Z),  # of dead_lettered: value/key/schema could not be decoded
    # of dead_lettered: decoded but not aggregatable (missing key/field/timestamp, wrong type)
    StatSpec("dead_invalid", _Z),
    StatSpec("state_windows"),  # windows held by the task's processor after the batch (absolute, not a delta)
    StatSpec("latency_ms_sum", _Z),  # sum over accepted records of emit time - record timestamp (>= 0)
    # histogram bucket counts (NOT cumulative; last = above the largest bound), bounds above
    *LATENESS_STATS.stats(),
    *LATENCY_STATS.stats(),
    # of dead_lettered, per reason (the ``error`` header; dead_letter_stat names them)
    *(StatSpec(dead_letter_stat(r), _Z) for r in SERDE_REASONS),
    StatSpec(
        dead_letter_stat("processing-error"),
        _Z,
        CounterSpec(
            "processing_errors_total",
            "Records whose processing raised (a bug, not bad input): dead-lettered with "
            "processing_exception_handler=continue",
            doc="records whose processing raised, dead-lettered by `processing_exception_handler=continue`",
        ),
    ),
    # of dead_lettered: lacking a field the aggregations read (likely a typo)
    StatSpec(
        "missing_field_records",
        _Z,
        CounterSpec(
            "records_missing_field_total",
            "Records dead-lettered because they lack a "
            "field an aggregation reads (most of a batch: likely a typo in --aggregations; the "
            "worker log names the field)",
            doc="records dead-lettered for lacking an aggregated field (most of a batch: a typo; the log names the "
            "field)",
        ),
    ),
    # processing_guarantee=exactly_once (connectors.transactions; 0 with at_least_once)
    # 1 when the batch's transaction committed
    StatSpec(
        "txn_committed",
        counter=CounterSpec(
            "transactions_committed_total",
            "Kafka transactions committed (exactly_once: one per task micro-batch with output: its rows and its "
            "input offset)",
        ),
    ),
    # transactions of this batch aborted or fenced before one committed (each redone)
    StatSpec(
        "txn_aborted",
        counter=CounterSpec(
            "transactions_aborted_total",
            "Kafka transactions aborted or fenced and redone (exactly_once; a batch that then failed is replayed by "
            "Spark)",
        ),
    ),
    # time in send_offsets_to_transaction + commit_transaction
    StatSpec(
        "txn_commit_ns",
        counter=CounterSpec(
            "transaction_commit_seconds_total",
            "Time in sending the input offset and committing the transactions (exactly_once)",
            per=1e9,
        ),
    ),
    # 1 when the group's offset already covered the batch: state updated, nothing produced
    StatSpec(
        "txn_skipped",
        counter=CounterSpec(
            "task_batches_already_committed_total",
            "Replayed task micro-batches "
            "whose transaction had committed (exactly_once): state rebuilt, nothing "
            "produced, not counted in the record counters again",
        ),
    ),
)

#: per-task, per-batch counters carried to the driver in the "stats" row (the order of its ``stats`` array)
STATS_FIELDS: tuple[str, ...] = tuple(s.name for s in STATS)

#: the counters of what a batch read and wrote, zeroed in a replayed batch that is already in Kafka
#: (processing_guarantee=exactly_once), so the service's counters stay exact across a replay
REPLAY_ZEROED: tuple[str, ...] = tuple(s.name for s in STATS if s.zeroed_on_replay)

#: the observed column that counts a micro-batch's task batches (its "stats" rows), next to the sums of :data:`STATS`
TASK_BATCHES = "task_batches"

#: the metrics fed by stats: the plain counters :data:`STATS` declares, then the labelled counters and histograms
STAT_METRICS: tuple[MetricSpec, ...] = (
    *(MetricSpec.of_counter(s.name, s.counter) for s in STATS if s.counter is not None),
    MetricSpec(
        "records_dropped_total",
        "counter",
        "Input records not aggregated, by reason: late, or dead-lettered with the reason of its error header "
        "(undecodable-value, schema-mismatch, number-out-of-range, ..., processing-error)",
        labels=("reason",),
        series=(Series(("late",), "late"), *(Series((r,), dead_letter_stat(r)) for r in DEAD_LETTER_REASONS)),
        doc="not aggregated: `late`, or dead-lettered with the reason of its `error` header (`undecodable-value`, "
        "`schema-mismatch`, `number-out-of-range`, `timestamp-out-of-range`, `non-finite-number`, "
        "`processing-error`, ...: the table in service/README.md)",
    ),
    MetricSpec(
        "records_produced_total",
        "counter",
        "Records written to output topics, by kind (changelog, late, dead_letter)",
        labels=("kind",),
        series=(
            Series(("changelog",), "changelog"),
            Series(("late",), "late", late_topic_only=True),
            Series(("dead_letter",), "dead_lettered"),
        ),
        doc="written to `changelog`, `late`, `dead_letter`",
    ),
    LATENESS,
    LATENCY,
    MetricSpec(
        "task_batches_total",
        "counter",
        "Task micro-batches processed (one per input partition with data per micro-batch)",
        series=(Series(stat=TASK_BATCHES),),
    ),
    MetricSpec(
        "worker_seconds_total",
        "counter",
        "Time in the Python tasks, by phase "
        "(process includes state_read and state_write; produce: sink=direct writing output)",
        labels=("phase",),
        series=tuple(Series((p,), f"{p}_ns") for p in ("process", "state_read", "state_write", "produce")),
        per=1e9,
        doc="where the Python workers spend time, by phase (`process` includes `state_read` and `state_write`; "
        "`produce`: sink=direct writing the output)",
    ),
)


#: dead-letter reasons (connectors.serde.REASONS) counted as ``reason="deserialization"``; the rest are "invalid"
DESERIALIZATION_REASONS = frozenset({"null-value", "undecodable-value", "unknown-schema", "undecodable-key"})


def bucket_counts(values: Any, bounds: Sequence[int]) -> list[int]:
    """Counts of ``values`` per bucket ``(bounds[i-1], bounds[i]]`` (Prometheus ``le`` buckets), plus the overflow."""
    idx = np.searchsorted(np.asarray(bounds, dtype=np.int64), values, side="left")
    return np.bincount(idx, minlength=len(bounds) + 1).tolist()
