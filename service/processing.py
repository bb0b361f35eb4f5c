"""One task's micro-batch, without Spark: decode -> sliding-window processor -> encoded output rows.

A *task* is one Kafka input partition (topic, partition): its records are processed in offset order by one
``windowstore.SlidingWindowProcessor``, which keeps one stream time per task (SEMANTICS.md R7). For every input
record exactly one of these happens, and the per-batch :class:`TaskStats` count them:

* aggregated (accepted by the processor; it may still skip closed windows, R13),
* late (dropped by R8) -> a late-records row (original bytes + reason headers) when a late topic is set,
* dead-lettered (undecodable / invalid, see :mod:`connectors.serde`) -> a dead-letter row.

Rows are plain Python lists so the Spark adapter (:mod:`service.job`) can turn them into one pandas frame.
"""

from __future__ import annotations

import functools
import logging
import pickle
import threading
import time
import traceback
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, NamedTuple, ParamSpec, cast

import numpy as np

from connectors.output import ChangelogEncoder, ChangelogSpec, dead_letter_headers
from connectors.schema_registry import SchemaRegistryUnavailable
from connectors.serde import Decoded, InputDecoder, InputSpec
from service import spool
from service.metrics import DEAD_LETTER_REASONS, LATENCY_BUCKETS_MS, LATENESS_BUCKETS_MS, dead_letter_stat
from windowstore import SlidingWindowProcessor, SlidingWindows, parse_aggregations

__all__ = [
    "TaskConfig",
    "TaskStats",
    "TaskOutput",
    "Decoded",
    "TaskRunner",
    "TaskState",
    "DictTaskState",
    "process_task_batch",
    "bucket_of",
    "encode_bucket",
    "decode_bucket",
    "spool_catch_up",
    "stop_catch_up_thread",
    "drop_cached",
    "worker_busy",
    "OUTPUT_KINDS",
    "STATS_FIELDS",
]

logger = logging.getLogger(__name__)

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
    "state_log_shared",  # log entries this worker replayed while idle (service.spool) since its last task batch
    "state_log_shared_ns",  # and the time it took (not part of process_ns)
    "task_forwarded",  # 1 when the batch ran in the Python worker that owns the task, not Spark's (service.owners)
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
    # histogram bucket counts (NOT cumulative; last = above the largest bound), bounds in service.metrics
    *(f"lateness_b{i}" for i in range(len(LATENESS_BUCKETS_MS) + 1)),
    *(f"latency_b{i}" for i in range(len(LATENCY_BUCKETS_MS) + 1)),
    # of dead_lettered, per reason (the ``error`` header; service.metrics.dead_letter_stat names them)
    *(dead_letter_stat(r) for r in DEAD_LETTER_REASONS),
    "missing_field_records",  # of dead_lettered: lacking a field the aggregations read (likely a typo)
    # processing_guarantee=exactly_once (connectors.transactions; 0 with at_least_once)
    "txn_committed",  # 1 when the batch's transaction committed
    "txn_aborted",  # transactions of this batch aborted or fenced before one committed (each redone)
    "txn_commit_ns",  # time in send_offsets_to_transaction + commit_transaction
    "txn_skipped",  # 1 when the group's offset already covered the batch: state updated, nothing produced
)

#: a batch where more than this share of the records lack an aggregated field logs a warning naming it
MISSING_FIELD_WARN_SHARE = 0.5

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


def _bucket_counts(values: Any, bounds: Sequence[int]) -> list[int]:
    """Counts of ``values`` per bucket ``(bounds[i-1], bounds[i]]`` (Prometheus ``le`` buckets), plus the overflow."""
    idx = np.searchsorted(np.asarray(bounds, dtype=np.int64), values, side="left")
    return np.bincount(idx, minlength=len(bounds) + 1).tolist()


@dataclass(frozen=True)
class TaskConfig:
    """Everything a worker needs to process a task (picklable, built on the driver)."""

    time_difference_ms: int
    grace_ms: int
    aggregations: str
    emit: str
    input: InputSpec
    changelog: ChangelogSpec
    changelog_topic: str
    late_topic: str  # "" -> late records are only counted
    dead_letter_topic: str
    batch: bool = True  # let the processor take windowstore's batch fast path where it applies (update, close)
    state_buckets: int = 256  # key buckets per task for NEW state (existing state keeps its own number)
    state_cache: bool = True  # keep the processor in the Python worker between micro-batches (token-checked)
    state_snapshot_every: int = 16  # write the key buckets every n-th batch, a log entry of the input otherwise
    log_spool: str = ""  # share log entries between this machine's workers under this id (service.spool); "": off
    owners: str = ""  # run a task's batches in the worker that owns it, with this query key (service.owners); "": off
    sink: str = "spark"  # "direct": the worker produces the output rows itself (connectors.producer)
    producer: tuple[tuple[str, Any], ...] = field(default=(), repr=False)  # the direct producer's librdkafka
    # settings (repr=False: they may hold the SASL password, connectors.security)
    batch_produce: bool = True  # direct sink: changelog rows to librdkafka in blocks (connectors.rdkafka_batch)
    processing_exception_handler: str = "continue"  # continue | fail: see process_task_batch
    processing_guarantee: str = "at_least_once"  # "exactly_once": one transaction per task batch (service.job)
    application_id: str = ""  # the consumer group and transactional id prefix (exactly_once)

    @property
    def windows(self) -> SlidingWindows:
        return SlidingWindows(self.time_difference_ms, self.grace_ms)

    @property
    def value_fields(self) -> tuple[str, ...]:
        """The value fields the aggregations read (all a log entry keeps of a value: :func:`encode_log`)."""
        return tuple(f for f, _numeric in self.input.fields)

    def processor_options(self) -> dict[str, Any]:
        return {"collect_drops": True, "batch": self.batch and self.emit in ("update", "close")}

    def new_processor(self) -> SlidingWindowProcessor:
        return SlidingWindowProcessor(
            self.windows, parse_aggregations(self.aggregations), self.emit, **self.processor_options()
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
    changelog_values: Sequence[bytes] = ()

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


def _b(v: Any) -> bytes:
    return str(v).encode("utf-8")


class TaskRunner:
    """Processes micro-batches of tasks with a given :class:`TaskConfig` (one per Python worker)."""

    def __init__(self, config: TaskConfig, registry: Any = None) -> None:
        self.config = config
        self.decoder = InputDecoder(config.input, registry=registry)
        self.encoder = ChangelogEncoder(config.changelog)

    def run(
        self,
        proc: SlidingWindowProcessor,
        topic: str,
        partition: int,
        offsets: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int | None],
        emit_time_ms: int | None = None,
    ) -> TaskOutput:
        """Process one task's records of a micro-batch, given in OFFSET ORDER; returns the output rows.

        Only the processor is changed (its state is the caller's to persist)."""
        t0 = time.perf_counter_ns()
        cfg = self.config
        out = TaskOutput()
        stats = out.stats
        emit_time = int(time.time() * 1000) if emit_time_ms is None else emit_time_ms
        n = len(offsets)
        stats["records"] = n
        stats["max_offset"] = int(offsets[-1]) if n else -1
        good, bad = self.decoder.decode_columns(keys, values, timestamps, cfg.value_fields)

        ps = proc.stats
        created0, updated0, skipped0 = ps.windows_created, ps.windows_updated, ps.skipped_windows
        expired0 = proc.store.expired

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
            for i, c in enumerate(_bucket_counts(lateness, LATENESS_BUCKETS_MS)):
                stats[f"lateness_b{i}"] = c

        # dead letters, then late records, then the changelog (each in input/emission order)
        for i, reason, message in bad:
            # a value over the size limit is not copied (it may not fit a record); the headers say where it is
            value = None if reason == "value-too-large" else values[i]
            out.add(
                "dlq",
                cfg.dead_letter_topic,
                keys[i],
                value,
                dead_letter_headers(reason, message, topic, partition, offsets[i], timestamps[i]),
            )
            stats[dead_letter_stat(reason)] += 1
        self._check_missing_fields(stats, n, topic, partition)
        if cfg.late_topic:
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
                for i, c in enumerate(_bucket_counts(latency, LATENCY_BUCKETS_MS)):
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
        stats["windows_expired"] = proc.store.expired - expired0
        stats["stream_time"] = proc.observed_stream_time
        stats["lateness_ms_sum"] = lateness_sum
        stats["lateness_ms_max"] = lateness_max
        stats["process_ns"] = time.perf_counter_ns() - t0
        return out

    def _check_missing_fields(self, stats: TaskStats, n: int, topic: str, partition: int) -> None:
        """Count the records the decoder found without an aggregated field; warn (naming the field) when most
        records of the batch lack it: more likely a typo in the aggregations than bad producers."""
        missing = self.decoder.missing_fields
        if not missing:
            return
        stats["missing_field_records"] = sum(missing.values())
        for name, count in missing.items():
            if count > MISSING_FIELD_WARN_SHARE * n:
                logger.warning(
                    "%d of %d records of %s-%d lack the field %r that the aggregations %r read: a typo "
                    "in the aggregations? (they are dead-lettered with error schema-mismatch)",
                    count,
                    n,
                    topic,
                    partition,
                    name,
                    self.config.aggregations,
                )

    def _apply(self, proc: SlidingWindowProcessor, good: Decoded) -> tuple[Any, list[Any]]:
        """Feed the decoded records to the processor and flush: ``(columns, [])`` on the batch path
        (:meth:`~windowstore.SlidingWindowProcessor.flush_columns`), ``(None, updates)`` on the record path."""
        if getattr(proc, "batch", False):
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

    def replay(self, proc: SlidingWindowProcessor, good: Decoded) -> None:
        """Bring ``proc`` through a committed batch again (its :attr:`TaskOutput.decoded` records): the same
        calls as :meth:`run` followed by the expiry of :func:`process_task_batch`, output discarded. The
        processor is deterministic, so the state afterwards is the state that batch committed."""
        self._apply(proc, good)
        proc.take_drops()
        proc.expire()


class TaskState:
    """Where a task's state lives between micro-batches (:mod:`service.job`: Spark's ValueState + MapState;
    :class:`DictTaskState`: memory).

    * the **task record**: ``(meta, token, buckets)`` - the processor's task meta (``export_meta``), a token that
      changes with every write (validates worker-side caches), and the number of key buckets (fixed per task);
    * **buckets**: the aggregation keys' window blobs (``export_keys``), grouped into ``buckets`` buckets by a
      stable hash of the key, one state entry per bucket. A state call is a JVM round trip (DESIGN.md), so a
      micro-batch that touches many keys costs ``buckets`` calls at most instead of one per key.
    * **log entries** (negative bucket numbers: :func:`log_slot`): the buckets and the meta are a *snapshot*,
      written every ``state_snapshot_every``-th batch; each batch in between writes only its decoded input
      records as the next log entry (kilobytes, where a snapshot rewrites every window of every key touched -
      megabytes per task at 10,000 keys). The committed state is the snapshot followed by its log, replayed
      through the processor (:meth:`TaskRunner.replay`). A snapshot batch also logs its records, as the last
      entry of the generation it closes, and deletes the generation before that one: a worker whose processor
      is from before the latest snapshot can still catch up from the log.

    The token (:class:`_Token`) names the snapshot, how many log entries follow it, the last write, and the
    previous generation (its snapshot and entries); each log entry holds the token it was applied to, so a
    worker's cached processor that is some batches behind (another worker ran them) catches up by replaying only
    the entries it has not seen.
    """

    def get_task(self) -> tuple[bytes, str, int] | None:
        raise NotImplementedError

    def set_task(self, meta: bytes, token: str, buckets: int) -> None:
        raise NotImplementedError

    def get_bucket(self, bucket: int) -> bytes | None:
        raise NotImplementedError

    def put_bucket(self, bucket: int, data: bytes) -> None:
        raise NotImplementedError

    def delete_bucket(self, bucket: int) -> None:
        raise NotImplementedError


class DictTaskState(TaskState):
    """In-memory :class:`TaskState` (tests, replay tools)."""

    def __init__(self) -> None:
        self.task: tuple[bytes, str, int] | None = None
        self.buckets: dict[int, bytes] = {}
        self.calls = 0

    def get_task(self) -> tuple[bytes, str, int] | None:
        self.calls += 1
        return self.task

    def set_task(self, meta: bytes, token: str, buckets: int) -> None:
        self.calls += 1
        self.task = (meta, token, buckets)

    def get_bucket(self, bucket: int) -> bytes | None:
        self.calls += 1
        return self.buckets.get(bucket)

    def put_bucket(self, bucket: int, data: bytes) -> None:
        self.calls += 1
        self.buckets[bucket] = data

    def delete_bucket(self, bucket: int) -> None:
        self.calls += 1
        self.buckets.pop(bucket, None)


def bucket_of(key: str, buckets: int) -> int:
    """Stable bucket of an aggregation key (the same in every process and run)."""
    return zlib.crc32(key.encode("utf-8")) % buckets


#: a compressed bucket: magic, uncompressed size (8 bytes little-endian), zstd frame of the pickled dict. Buckets
#: written before compression existed are the bare pickle (protocol 5: starts with 0x80) and still read.
_ZSTD_BUCKET = b"SWZ1"


def encode_bucket(data: dict[str, bytes]) -> bytes:
    """A bucket's state entry: its ``{key: blob}`` dict pickled and compressed with zstd (Arrow's codec).

    Measured on a task of 2,500 keys (4 aggregations, 60 s windows): 26.7 MB of buckets -> 4.7 MB in 0.07 s and
    back in 0.04 s; every byte written goes through the JVM, RocksDB and the checkpoint's changelog files."""
    return _compress(pickle.dumps(data, protocol=5))


def _compress(raw: bytes) -> bytes:
    import pyarrow as pa

    return b"".join((_ZSTD_BUCKET, len(raw).to_bytes(8, "little"), pa.compress(raw, codec="zstd", asbytes=True)))


def _decompress(data: bytes) -> bytes:
    import pyarrow as pa

    size = int.from_bytes(data[4:12], "little")
    return pa.decompress(memoryview(data)[12:], decompressed_size=size, codec="zstd", asbytes=True)


def decode_bucket(data: bytes | None) -> dict[str, bytes]:
    """Inverse of :func:`encode_bucket` (also reads an uncompressed bucket); ``None`` -> empty."""
    if data is None:
        return {}
    return pickle.loads(_decompress(data) if data[:4] == _ZSTD_BUCKET else data)


#: log slots of the two generations kept: ``-1 - i`` and ``-1 - _GENERATION - i``
_GENERATION = 1 << 20


def log_slot(i: int, parity: int = 0) -> int:
    """The bucket number of the ``i``-th log entry of a generation (``parity``: 0 or 1, alternating with each
    snapshot); key buckets are ``>= 0``."""
    return -1 - i - parity * _GENERATION


def encode_log(prev_token: str, records: Decoded, fields: Sequence[str] = ()) -> bytes:
    """A log entry: the token of the state it applies to and the batch's decoded records as columns - the keys,
    the event times and the value ``fields`` the aggregations read (zstd, as buckets; ``records.fields`` must
    hold them). Replaying it needs nothing else (the processor reads a value only through those fields); the
    rest of each value is left out. Pickling the records whole cost ~7% of the workers' time with the windows
    full."""
    columns = {f: records.fields[f] for f in fields}
    return _compress(pickle.dumps((prev_token, records.keys, records.ts, columns), protocol=5))


def decode_log(data: bytes, fields: Sequence[str] = ()) -> tuple[str, Decoded]:
    """Inverse of :func:`encode_log`: ``(token applied to, records)``, each value a dict of the logged fields.
    Also reads the entries written before the columns (the records pickled whole). Raises when the entry lacks
    one of ``fields`` (the aggregations' fields now): the checkpoint was written with other aggregations."""
    entry = pickle.loads(_decompress(data))
    if len(entry) == 2:  # (token, [(index, key, value, ts), ...])
        prev, records = entry
        return prev, Decoded.of(records, fields)
    prev, keys, ts, columns = entry
    missing = [f for f in fields if f not in columns]
    if missing:
        raise RuntimeError(
            f"a log entry of this checkpoint holds the value fields {sorted(columns)}, but the "
            f"aggregations read {', '.join(map(repr, missing))} too: the checkpoint was written "
            "with other aggregations; use a new checkpoint_dir"
        )
    names = list(columns)
    values = [dict(zip(names, row)) for row in zip(*columns.values())] if names else [{} for _k in keys]
    return prev, Decoded(list(range(len(keys))), keys, values, ts, columns)


class _Token(NamedTuple):
    """A task's state token: ``snapshot/entries/write/parity/previous/previous_entries``.

    ``snapshot``: id of the latest snapshot; ``entries``: log entries after it (slots of ``parity``); ``write``:
    id of the last write; ``previous``, ``previous_entries``: the generation before (its snapshot and its log,
    whose last entry is the batch that wrote ``snapshot``; slots of ``1 - parity``)."""

    snapshot: str
    entries: int = 0
    write: str = ""
    parity: int = 0
    previous: str = ""
    previous_entries: int = 0

    @classmethod
    def parse(cls, token: str) -> _Token:
        """A bare id (written before the log existed) is a snapshot with no log."""
        f = token.split("/")
        if len(f) == 1:
            return cls(token, 0, token)
        return cls(f[0], int(f[1]), f[2], *((int(f[3]), f[4], int(f[5])) if len(f) == 6 else ()))

    def __str__(self) -> str:
        return "/".join(map(str, self))

    def logged(self) -> _Token:
        """The token after one more log entry."""
        return self._replace(entries=self.entries + 1, write=uuid.uuid4().hex)

    def snapshotted(self) -> _Token:
        """The token of a new snapshot after this state (plus the snapshot batch's own entry)."""
        new = uuid.uuid4().hex
        return _Token(new, 0, new, 1 - self.parity, self.snapshot, self.entries + 1)

    def catch_up(self, cached: _Token) -> list[tuple[int, int]] | None:
        """The log entries ``(parity, i)`` that take a processor at ``cached`` to this state, ``None`` when the
        log does not reach back to it (the caller then checks that the first entry applies to ``cached``).

        Across a snapshot the processor's bucket source still holds the buckets of the snapshot before; that is
        safe because its dirty keys are only cleared by a snapshot it writes itself: every key changed since
        those buckets was replayed, so it is dirty, and its next snapshot rewrites it from memory."""
        if cached.snapshot == self.snapshot and cached.entries < self.entries:
            return [(self.parity, i) for i in range(cached.entries, self.entries)]
        if self.previous and cached.snapshot == self.previous and cached.entries < self.previous_entries:
            return [(1 - self.parity, i) for i in range(cached.entries, self.previous_entries)] + [
                (self.parity, i) for i in range(self.entries)
            ]
        return None


class _BucketSource:
    """The processor's key loader: key -> blob from its bucket, each bucket read from the state once.

    A processor kept in the worker cache outlives the micro-batch (and Spark's state handles) it was created
    in, so the source is re-pointed at each micro-batch's :class:`TaskState` (:meth:`bind`); a stale handle is
    never used."""

    __slots__ = ("state", "n_buckets", "buckets", "loaded", "read_ns")

    def __init__(self, n_buckets: int) -> None:
        self.state: TaskState | None = None
        self.n_buckets = n_buckets
        self.buckets: dict[int, dict[str, bytes]] = {}
        self.loaded = 0
        self.read_ns = 0

    def bind(self, state: TaskState) -> None:
        self.state = state
        self.loaded = 0
        self.read_ns = 0

    def release(self) -> None:
        self.state = None

    def bucket(self, b: int) -> dict[str, bytes]:
        data = self.buckets.get(b)
        if data is None:
            if self.state is None:
                raise RuntimeError("state read outside of a micro-batch")
            t = time.perf_counter_ns()
            self.loaded += 1
            data = self.buckets[b] = decode_bucket(self.state.get_bucket(b))
            self.read_ns += time.perf_counter_ns() - t
        return data

    def __call__(self, key: Any) -> bytes | None:
        return self.bucket(bucket_of(key, self.n_buckets)).get(key)


class _Cached:
    """A task's processor kept in a Python worker between micro-batches, valid while ``token`` matches."""

    __slots__ = ("token", "proc", "source", "runner")

    def __init__(self, token: str, proc: SlidingWindowProcessor, source: _BucketSource, runner: TaskRunner) -> None:
        self.token = token
        self.proc = proc
        self.source = source
        self.runner = runner


#: worker-side cache: (task config, topic, partition) -> _Cached. Python workers are reused across micro-batches
#: (spark.python.worker.reuse); an entry is used only if its token equals the token in the committed state, so a
#: retried batch, a restart or another worker's write always falls back to the state store.
_CACHE: dict[tuple[Any, str, int], _Cached] = {}
CACHE_MAX_TASKS = 64

#: held by a task batch for its whole run, and by the idle worker's catch-up for one entry at a time
_WORKER_LOCK = threading.Lock()
_tasks_waiting = 0  # task batches waiting for the lock: the catch-up thread steps aside
_waiting_lock = threading.Lock()  # several threads start task batches (service.owners): += is not atomic
_catch_up_thread: threading.Thread | None = None
_catch_up_stop = threading.Event()
_shared_since_task = [0, 0]  # entries the catch-up thread replayed since the last task batch, and their ns
SPOOL_POLL_SECONDS = 0.02
#: tasks whose shared entries failed to replay in this worker: not built from their first entry again (a task
#: batch brings them back from the store), so a bad entry is one warning, not one per poll
_NOT_ADOPTED: set[tuple[Any, str, int]] = set()


def drop_cached(config: TaskConfig, topic: str, partition: int) -> None:
    """Forget this worker's cached processor of a task (another worker takes the task over)."""
    _CACHE.pop((config, topic, partition), None)


def worker_busy() -> bool:
    """Whether a task batch runs in this worker now (or one waits to)."""
    return _WORKER_LOCK.locked() or _tasks_waiting > 0


_P = ParamSpec("_P")
_TaskBatch = Callable[Concatenate[TaskRunner, _P], TaskOutput]


def _one_task_at_a_time(fn: _TaskBatch[_P]) -> _TaskBatch[_P]:
    """Run ``fn`` (a task batch) under the worker lock, ahead of the catch-up thread (started here when the log
    is shared), and add to its stats what that thread replayed since the previous task batch."""

    @functools.wraps(fn)
    def run(runner: TaskRunner, *args: _P.args, **kwargs: _P.kwargs) -> TaskOutput:
        global _tasks_waiting, _shared_since_task
        if runner.config.log_spool and runner.config.state_cache:
            _start_catch_up_thread()
        with _waiting_lock:
            _tasks_waiting += 1
        with _WORKER_LOCK:
            with _waiting_lock:
                _tasks_waiting -= 1
            shared, _shared_since_task = _shared_since_task, [0, 0]
            out = fn(runner, *args, **kwargs)
        out.stats["state_log_shared"], out.stats["state_log_shared_ns"] = shared
        return out

    return run


@_one_task_at_a_time
def process_task_batch(
    runner: TaskRunner,
    state: TaskState,
    topic: str,
    partition: int,
    offsets: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamps: Sequence[int | None],
    emit_time_ms: int | None = None,
    on_output: Callable[[TaskOutput], None] | None = None,
) -> TaskOutput:
    """One micro-batch of one task against external state: bring the processor to the committed state (the
    worker's cached processor when the token matches; the cached processor plus the log entries it has not
    seen when it is behind; else the snapshot - task meta now, key buckets lazily - plus the whole log),
    process the records (offset order), expire, and write either a snapshot (every ``state_snapshot_every``-th
    batch: the changed buckets, the meta, the log deleted) or one log entry, with a new token (:class:`TaskState`).

    ``on_output`` is called with the output rows as soon as they are made, before the state is written (the
    direct sink hands them to its producer there, so they travel while the state is written); its time is
    counted in ``produce_ns``, not ``process_ns``.

    With ``log_spool`` set, the batch's log entry is also left for the other Python workers of this machine
    (:mod:`service.spool`), and a thread of this worker replays the other workers' entries into its cached
    processors while no task batch runs (:func:`spool_catch_up`)."""
    cfg = runner.config
    use_cache = cfg.state_cache
    t_start = time.perf_counter_ns()
    task = state.get_task()
    cache_key = (cfg, topic, partition)
    cached = _CACHE.pop(cache_key, None)  # taken: a failure below leaves no half-updated entry behind
    if task is not None:
        meta, token, n_buckets = task
    else:
        meta, token, n_buckets = None, "", cfg.state_buckets
    cur = _Token.parse(token)
    hit = cached is not None and use_cache and task is not None and cached.token == token
    proc: SlidingWindowProcessor | None = None
    plan: list[tuple[int, int]] | None = [] if hit else None  # log entries (parity, i) to replay
    first: tuple[str, Decoded] | None = None
    if hit:
        proc, source = cached.proc, cached.source  # type: ignore[union-attr]
        source.bind(state)
    elif cached is not None and use_cache and task is not None:
        # behind? the first entry it needs must have been applied to its token
        plan = cur.catch_up(_Token.parse(cached.token))
        if plan:
            first = _read_log(state, *plan[0], cfg.value_fields)
            if first[0] == cached.token:
                proc, source = cached.proc, cached.source
                source.bind(state)
            else:
                plan, first = None, None
    if proc is None:
        proc, source = _new_processor(cfg, meta, n_buckets)
        source.bind(state)
        plan = [(cur.parity, i) for i in range(cur.entries)]
    for n, (parity, i) in enumerate(plan):  # type: ignore[arg-type]
        entry = first if n == 0 and first is not None else _read_log(state, parity, i, cfg.value_fields)
        runner.replay(proc, entry[1])
    read_start = time.perf_counter_ns() - t_start
    try:
        try:
            out = runner.run(proc, topic, partition, offsets, keys, values, timestamps, emit_time_ms)
        except SchemaRegistryUnavailable:
            raise  # not a record's fault: the batch fails and Spark retries it
        except Exception as exc:  # the processing exception handler
            source.release()
            proc, source, out = _run_isolating(
                runner,
                state,
                meta,
                n_buckets,
                cur,
                topic,
                partition,
                offsets,
                keys,
                values,
                timestamps,
                emit_time_ms,
                exc,
            )
        output_ns = 0
        if on_output is not None:
            t0 = time.perf_counter_ns()
            on_output(out)
            output_ns = time.perf_counter_ns() - t0

        t0 = time.perf_counter_ns()
        read_before_write = source.read_ns
        expired_before = proc.store.expired
        proc.expire()
        changed: dict[int, dict[str, bytes | None]] = {}
        written = deleted = 0
        snapshot_now = task is None or cur.entries + 1 >= _generation_length(cfg.state_snapshot_every, cur, partition)
        # every batch after the first logs its records; a snapshot batch's entry closes its generation, so a
        # worker that is behind it still catches up through the log (a new task's too: shared as its first entry,
        # applied to "")
        assert out.decoded is not None  # TaskRunner.run sets it
        log = encode_log(token, out.decoded, cfg.value_fields)
        if task is not None:
            state.put_bucket(log_slot(cur.entries, cur.parity), log)
        if snapshot_now:
            for k, blob in proc.export_keys(proc.dirty_keys()).items():
                key = cast(str, k)  # the service's aggregation keys are str (decoded record keys)
                changed.setdefault(bucket_of(key, n_buckets), {})[key] = blob
            for b, bucket_entries in changed.items():
                data = source.bucket(b)  # a bucket no key was loaded from (new keys only) is read before rewriting
                for k, blob in bucket_entries.items():
                    if blob is None:
                        data.pop(k, None)
                    else:
                        data[k] = blob
                if data:
                    state.put_bucket(b, encode_bucket(data))
                    written += 1
                else:
                    state.delete_bucket(b)
                    source.buckets.pop(b, None)
                    deleted += 1
            for i in range(cur.previous_entries):  # the generation before this one's
                state.delete_bucket(log_slot(i, 1 - cur.parity))
            proc.clear_dirty_keys()
            new_token = str(cur.snapshotted())
            state.set_task(proc.export_meta(), new_token, n_buckets)
        else:  # the snapshot's meta stays; the keys stay dirty until the next snapshot writes them
            new_token = str(cur.logged())
            state.set_task(meta, new_token, n_buckets)  # type: ignore[arg-type]
    finally:
        source.release()
    if use_cache:
        if len(_CACHE) >= CACHE_MAX_TASKS:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[cache_key] = _Cached(new_token, proc, source, runner)
        if cfg.log_spool:
            spool.put(cfg.log_spool, topic, partition, token, new_token, log)
    loaded, read_ns = source.loaded, source.read_ns + read_start
    s = out.stats
    s["windows_expired"] += proc.store.expired - expired_before
    s["state_cache_hit"] = int(hit)
    s["state_log_replayed"] = len(plan)  # type: ignore[arg-type]
    s["state_snapshot"] = int(snapshot_now)
    s["state_windows"] = len(proc.store)
    s["state_buckets_loaded"] = loaded
    s["state_buckets_written"] = written
    s["state_buckets_deleted"] = deleted
    s["state_keys_written"] = sum(1 for e in changed.values() for v in e.values() if v is not None)
    s["state_read_ns"] = read_ns
    s["state_write_ns"] = time.perf_counter_ns() - t0 - (source.read_ns - read_before_write)
    s["produce_ns"] = output_ns
    s["process_ns"] = time.perf_counter_ns() - t_start - output_ns
    return out


class ProcessingFailure(RuntimeError):
    """A record whose processing raised, with processing_exception_handler=fail: the message names its
    partition and offset."""


def _run_isolating(
    runner: TaskRunner,
    state: TaskState,
    meta: Any,
    n_buckets: int,
    cur: _Token,
    topic: str,
    partition: int,
    offsets: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamps: Sequence[int | None],
    emit_time_ms: int | None,
    exc: Exception,
) -> tuple[SlidingWindowProcessor, _BucketSource, TaskOutput]:
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

    def restored() -> tuple[SlidingWindowProcessor, _BucketSource]:
        proc, source = _new_processor(cfg, meta, n_buckets)
        source.bind(state)
        for i in range(cur.entries):
            runner.replay(proc, _read_log(state, cur.parity, i, cfg.value_fields)[1])
        return proc, source

    def run(proc: SlidingWindowProcessor, at: Sequence[int]) -> TaskOutput:
        return runner.run(
            proc,
            topic,
            partition,
            [offsets[j] for j in at],
            [keys[j] for j in at],
            [values[j] for j in at],
            [timestamps[j] for j in at],
            emit_time_ms,
        )

    kept: list[int] = []
    failed: list[tuple[int, BaseException]] = []
    proc, source = restored()
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
                    f"processing the record at offset {offsets[j]} of {topic}-{partition} raised "
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
        "%d of %d records of %s-%d raised while processed (first: offset %d, %s: %s); dead-lettered "
        "with error processing-error (processing_exception_handler=continue)",
        len(failed),
        len(offsets),
        topic,
        partition,
        offsets[failed[0][0]],
        type(failed[0][1]).__name__,
        failed[0][1],
    )
    proc, source = restored()
    out = run(proc, kept)
    for j, err in failed:
        cls = type(err)
        out.add(
            "dlq",
            cfg.dead_letter_topic,
            keys[j],
            values[j],
            dead_letter_headers(
                "processing-error",
                f"{cls.__name__}: {err}",
                topic,
                partition,
                offsets[j],
                timestamps[j],
                exception=f"{cls.__module__}.{cls.__qualname__}",
                stacktrace="".join(traceback.format_exception(cls, err, err.__traceback__)),
            ),
        )
    s = out.stats
    s["records"] = len(offsets)
    s["max_offset"] = int(offsets[-1])
    s["dead_lettered"] += len(failed)
    s[dead_letter_stat("processing-error")] += len(failed)
    return proc, source, out


def _generation_length(every: int, cur: _Token, partition: int) -> int:
    """Log entries before the next snapshot. The first generation after a task's creation is shortened by a
    phase that depends on its partition (0, 3, 6, 1, ... for ``every`` = 8), so the tasks of a topic, created
    in the same micro-batch, do not all write their snapshots in the same later batches: each snapshot batch
    carries one or two tasks' snapshot writes instead of all of them. Later generations are ``every`` long."""
    if cur.previous:
        return every
    return every - (3 * partition) % every


def _new_processor(cfg: TaskConfig, meta: Any, n_buckets: int) -> tuple[SlidingWindowProcessor, _BucketSource]:
    """A task's processor at its snapshot (``meta`` None: a new task), keys loaded from its buckets on demand."""
    source = _BucketSource(n_buckets)
    proc = SlidingWindowProcessor.from_state(
        cfg.windows,
        parse_aggregations(cfg.aggregations),
        cfg.emit,
        meta,
        source,
        **cfg.processor_options(),
    )
    return proc, source


def spool_catch_up(cache: dict[tuple[Any, str, int], _Cached] | None = None, limit: int | None = None) -> int:
    """Replay into the cached processors (``cache``: this worker's) the next shared log entry of each task
    (:mod:`service.spool`) that continues its token, ``limit`` entries at most; returns how many were replayed.

    A task of a query this worker runs (some other task of it is cached) that it has never seen, and whose
    first batch left its entry, gets a processor built from that entry: the task's state after its first batch
    is exactly what those records made. A processor stays as it is when its entry needs a key bucket it has
    not read yet (the state store is only reachable inside a task batch): the task batch then catches up from
    the store. A replay that fails drops the processor from the cache."""
    cache = _CACHE if cache is None else cache
    done = _adopt_new_tasks(cache, limit)
    for ck, c in list(cache.items()):
        cfg, topic, partition = ck
        if not cfg.log_spool or (limit is not None and done >= limit):
            continue
        try:
            found = _shared_entry(cfg, topic, partition, c.token)
            if found is None or not _loadable(c, found[1]):
                continue
            new_token, records = found
            c.runner.replay(c.proc, records)
        except Exception:  # a shortcut only: the task batch restores from the store
            logger.warning(
                "replaying a shared log entry of %s-%d failed; dropping the cached processor",
                topic,
                partition,
                exc_info=True,
            )
            cache.pop(ck, None)
            _NOT_ADOPTED.add(ck)
            continue
        c.token = new_token
        done += 1
    return done


def _adopt_new_tasks(cache: dict[tuple[Any, str, int], _Cached], limit: int | None) -> int:
    """Build processors for the tasks of the cached tasks' queries that ``cache`` does not hold yet, from
    their first entries (:data:`service.spool.NEW_TASK`); returns how many."""
    done = 0
    runners = {cfg: c.runner for (cfg, _t, _p), c in cache.items() if cfg.log_spool}
    for cfg, runner in runners.items():
        for topic, partition in spool.tasks(cfg.log_spool):
            ck = (cfg, topic, partition)
            if (
                ck in cache
                or ck in _NOT_ADOPTED
                or len(cache) >= CACHE_MAX_TASKS
                or (limit is not None and done >= limit)
            ):
                continue
            try:
                found = _shared_entry(cfg, topic, partition, "")
                if found is None:
                    continue
                new_token, records = found
                proc, source = _new_processor(cfg, None, cfg.state_buckets)
                runner.replay(proc, records)
            except Exception:  # a shortcut only: the task batch restores from the store
                logger.warning("building %s-%d from its shared first entry failed", topic, partition, exc_info=True)
                _NOT_ADOPTED.add(ck)
                continue
            cache[ck] = _Cached(new_token, proc, source, runner)
            done += 1
    return done


def _shared_entry(cfg: TaskConfig, topic: str, partition: int, token: str) -> tuple[str, Decoded] | None:
    """The shared log entry applied to ``token`` (``""``: a new task's first), decoded: ``(new token, records)``;
    ``None`` when there is none. Raises when the entry cannot be decoded."""
    found = spool.get(cfg.log_spool, topic, partition, token)
    if found is None:
        return None
    new_token, entry = found
    applied_to, records = decode_log(entry, cfg.value_fields)
    return (new_token, records) if applied_to == token else None


def _loadable(c: _Cached, records: Decoded) -> bool:
    """Whether every key of ``records`` is in memory, new, or in a bucket the source has read."""
    store = c.proc.store
    mem, known, read, n = store.keys, store.key_max_start, c.source.buckets, c.source.n_buckets
    return all(k in mem or k not in known or bucket_of(k, n) in read for k in records.keys)


def _start_catch_up_thread() -> None:
    global _catch_up_thread
    if _catch_up_thread is None or not _catch_up_thread.is_alive():
        _catch_up_stop.clear()
        _catch_up_thread = threading.Thread(target=_catch_up_loop, name="slidingwindow-log-catch-up", daemon=True)
        _catch_up_thread.start()


def stop_catch_up_thread() -> None:
    """Stop this worker's catch-up thread (it is a daemon: a worker process does not need to; tests do). The next
    task batch with ``log_spool`` starts it again."""
    _catch_up_stop.set()
    if _catch_up_thread is not None:
        _catch_up_thread.join()


def _catch_up_loop() -> None:
    """The idle worker's side: one shared entry at a time, never while a task batch waits for the worker."""
    while not _catch_up_stop.is_set():
        n = 0
        if not _tasks_waiting:
            with _WORKER_LOCK:
                if not _tasks_waiting:
                    t0 = time.perf_counter_ns()
                    n = spool_catch_up(limit=1)
                    if n:
                        _shared_since_task[0] += n
                        _shared_since_task[1] += time.perf_counter_ns() - t0
        if not n:
            time.sleep(SPOOL_POLL_SECONDS)


def _read_log(state: TaskState, parity: int, i: int, fields: Sequence[str]) -> tuple[str, Decoded]:
    data = state.get_bucket(log_slot(i, parity))
    if data is None:
        raise RuntimeError(
            f"the task state is inconsistent: its token names log entry {i} of generation {parity}, which is missing"
        )
    return decode_log(data, fields)
