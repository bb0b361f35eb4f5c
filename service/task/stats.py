"""The stats vocabulary of a task batch: the counters a worker carries to the driver in its "stats" row
(:data:`STATS_FIELDS`), the ones a replayed batch zeroes (:data:`REPLAY_ZEROED`), the histogram bucket bounds the
workers count into (:func:`bucket_counts`) and the dead-letter reasons with their counters (:func:`dead_letter_stat`).

One definition, read by the workers (:mod:`service.task.runner`) and the driver's metrics (:mod:`service.metrics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from connectors.serde import REASONS as SERDE_REASONS

__all__ = [
    "OUTPUT_KINDS",
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

#: per-task, per-batch counters carried to the driver in the "stats" row (the order of its ``stats`` array)
STATS_FIELDS = (
    "records",  # input records seen
    "aggregated",  # accepted by the processor
    "late",  # dropped as late (R8)
    "dead_lettered",  # undecodable / invalid
    "changelog",  # changelog records produced
    "windows_created",
    "windows_updated",
    "skipped_windows",  # closed windows a partially-late record skipped (R13)
    "windows_expired",
    "state_cache_hit",  # 1 when the worker's cached processor was valid (no state reads)
    "state_buckets_loaded",
    "state_buckets_written",
    "state_buckets_deleted",
    "state_keys_written",
    "state_log_replayed",  # log entries replayed to bring a processor up to the committed state (see TaskState)
    "state_snapshot",  # 1 when the batch wrote a snapshot (key buckets) instead of a log entry
    "state_log_shared",  # log entries this worker replayed while idle (worker.spool) since its last task batch
    "state_log_shared_ns",  # and the time it took (not part of process_ns)
    "task_forwarded",  # 1 when the batch ran in the Python worker that owns the task, not Spark's (worker.owners)
    "stream_time",  # the task's stream time after the batch (-1: none yet)
    "max_offset",  # largest input offset in the batch
    "lateness_ms_sum",  # sum over accepted + late records of stream_time - ts (>= 0)
    "lateness_ms_max",
    "process_ns",  # time spent in the Python task (decode + process + encode + state calls)
    "state_read_ns",  # of which restoring state (task meta, key blobs, log entries and their replay)
    "state_write_ns",  # of which exporting and writing state
    "produce_ns",  # writing the output rows to Kafka from the worker (sink=direct; 0 with Spark's sink)
    "dead_deserialization",  # of dead_lettered: value/key/schema could not be decoded
    "dead_invalid",  # of dead_lettered: decoded but not aggregatable (missing key/field/timestamp, wrong type)
    "state_windows",  # windows held by the task's processor after the batch (absolute, not a delta)
    "latency_ms_sum",  # sum over accepted records of emit time - record timestamp (>= 0)
    # histogram bucket counts (NOT cumulative; last = above the largest bound), bounds above
    *(f"lateness_b{i}" for i in range(len(LATENESS_BUCKETS_MS) + 1)),
    *(f"latency_b{i}" for i in range(len(LATENCY_BUCKETS_MS) + 1)),
    # of dead_lettered, per reason (the ``error`` header; dead_letter_stat names them)
    *(dead_letter_stat(r) for r in DEAD_LETTER_REASONS),
    "missing_field_records",  # of dead_lettered: lacking a field the aggregations read (likely a typo)
    # processing_guarantee=exactly_once (connectors.transactions; 0 with at_least_once)
    "txn_committed",  # 1 when the batch's transaction committed
    "txn_aborted",  # transactions of this batch aborted or fenced before one committed (each redone)
    "txn_commit_ns",  # time in send_offsets_to_transaction + commit_transaction
    "txn_skipped",  # 1 when the group's offset already covered the batch: state updated, nothing produced
)

#: the counters of what a batch read and wrote, zeroed in a replayed batch that is already in Kafka
#: (processing_guarantee=exactly_once), so the service's counters stay exact across a replay
REPLAY_ZEROED = (
    "records",
    "aggregated",
    "late",
    "dead_lettered",
    "changelog",
    "windows_created",
    "windows_updated",
    "skipped_windows",
    "windows_expired",
    "dead_deserialization",
    "dead_invalid",
    *(dead_letter_stat(r) for r in DEAD_LETTER_REASONS),
    "missing_field_records",
    "lateness_ms_sum",
    "latency_ms_sum",
    *(f"lateness_b{i}" for i in range(len(LATENESS_BUCKETS_MS) + 1)),
    *(f"latency_b{i}" for i in range(len(LATENCY_BUCKETS_MS) + 1)),
)


#: dead-letter reasons (connectors.serde.REASONS) counted as ``reason="deserialization"``; the rest are "invalid"
DESERIALIZATION_REASONS = frozenset({"null-value", "undecodable-value", "unknown-schema", "undecodable-key"})


def bucket_counts(values: Any, bounds: Sequence[int]) -> list[int]:
    """Counts of ``values`` per bucket ``(bounds[i-1], bounds[i]]`` (Prometheus ``le`` buckets), plus the overflow."""
    idx = np.searchsorted(np.asarray(bounds, dtype=np.int64), values, side="left")
    return np.bincount(idx, minlength=len(bounds) + 1).tolist()
