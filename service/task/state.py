"""Where a task's state lives between micro-batches and how it is written: the :class:`TaskState` protocol
(Spark's state in :mod:`service.spark.job`, :class:`DictTaskState` in memory), the bucket and log entry codecs, the
state :class:`Token`, and the processor's lazy key loader (:class:`BucketSource`)."""

from __future__ import annotations

import pickle
import time
import uuid
import zlib
from collections.abc import Sequence
from typing import Any, NamedTuple

from connectors.serde import Decoded
from service.task.config import TaskConfig
from windowstore import TaskProcessor

__all__ = [
    "TaskState",
    "DictTaskState",
    "Token",
    "BucketSource",
    "bucket_of",
    "encode_bucket",
    "decode_bucket",
    "compress",
    "decompress",
    "log_slot",
    "encode_log",
    "decode_log",
    "read_log",
    "new_processor",
]


class TaskState:
    """Where a task's state lives between micro-batches (:mod:`service.spark.job`: Spark's ValueState + MapState;
    :class:`DictTaskState`: memory).

    * the **task record**: ``(meta, token, buckets)`` - the processor's task meta (``export_meta``), a token that
      changes with every write (validates worker-side caches), and the number of key buckets (fixed per task);
    * **buckets**: the aggregation keys' window blobs (``export_keys``), grouped into ``buckets`` buckets by a
      stable hash of the key, one state entry per bucket. A state call is a JVM round trip (service/README.md,
      "How it runs on Spark"), so a micro-batch that touches many keys costs ``buckets`` calls at most instead of
      one per key.
    * **log entries** (negative bucket numbers: :func:`log_slot`): the buckets and the meta are a *snapshot*,
      written every ``state_snapshot_every``-th batch; each batch in between writes only its decoded input
      records as the next log entry (kilobytes, where a snapshot rewrites every window of every key touched -
      megabytes per task at 10,000 keys). The committed state is the snapshot followed by its log, replayed
      through the processor (:meth:`~service.task.runner.TaskRunner.replay`). A snapshot batch also logs its
      records, as the last entry of the generation it closes, and deletes the generation before that one: a
      worker whose processor is from before the latest snapshot can still catch up from the log.

    The token (:class:`Token`) names the snapshot, how many log entries follow it, the last write, and the
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
    return compress(pickle.dumps(data, protocol=5))


def compress(raw: bytes) -> bytes:
    import pyarrow as pa

    return b"".join((_ZSTD_BUCKET, len(raw).to_bytes(8, "little"), pa.compress(raw, codec="zstd", asbytes=True)))


def decompress(data: bytes) -> bytes:
    import pyarrow as pa

    size = int.from_bytes(data[4:12], "little")
    return pa.decompress(memoryview(data)[12:], decompressed_size=size, codec="zstd", asbytes=True)


def decode_bucket(data: bytes | None) -> dict[str, bytes]:
    """Inverse of :func:`encode_bucket` (also reads an uncompressed bucket); ``None`` -> empty."""
    if data is None:
        return {}
    return pickle.loads(decompress(data) if data[:4] == _ZSTD_BUCKET else data)


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
    return compress(pickle.dumps((prev_token, records.keys, records.ts, columns), protocol=5))


def decode_log(data: bytes, fields: Sequence[str] = ()) -> tuple[str, Decoded]:
    """Inverse of :func:`encode_log`: ``(token applied to, records)``, each value a dict of the logged fields.
    Also reads the entries written before the columns (the records pickled whole). Raises when the entry lacks
    one of ``fields`` (the aggregations' fields now): the checkpoint was written with other aggregations."""
    entry = pickle.loads(decompress(data))
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


class Token(NamedTuple):
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
    def parse(cls, token: str) -> Token:
        """A bare id (written before the log existed) is a snapshot with no log."""
        f = token.split("/")
        if len(f) == 1:
            return cls(token, 0, token)
        return cls(f[0], int(f[1]), f[2], *((int(f[3]), f[4], int(f[5])) if len(f) == 6 else ()))

    def __str__(self) -> str:
        return "/".join(map(str, self))

    def logged(self) -> Token:
        """The token after one more log entry."""
        return self._replace(entries=self.entries + 1, write=uuid.uuid4().hex)

    def snapshotted(self) -> Token:
        """The token of a new snapshot after this state (plus the snapshot batch's own entry)."""
        new = uuid.uuid4().hex
        return Token(new, 0, new, 1 - self.parity, self.snapshot, self.entries + 1)

    def catch_up(self, cached: Token) -> list[tuple[int, int]] | None:
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


class BucketSource:
    """The processor's key loader: key -> blob from its bucket, each bucket read from the state once.

    A processor kept in the worker cache outlives the micro-batch (and Spark's state handles) it was created
    in, so the source is re-pointed at each micro-batch's :class:`TaskState` (:meth:`bind`); a stale handle is
    never used.

    Between micro-batches it keeps each bucket as stored (:attr:`packed`: the compressed bytes it read or
    wrote), not decoded: once a key is loaded its windows live in the processor, and the decoded blobs of every
    key (as large as the windows themselves, several times their compressed size) would hold the task's state
    twice. A bucket is decoded when it is next needed - a key loaded from it, or a snapshot rewriting it - and
    the decoded form is dropped at the end of the micro-batch (:meth:`release`)."""

    __slots__ = ("state", "n_buckets", "buckets", "packed", "loaded", "read_ns")

    def __init__(self, n_buckets: int) -> None:
        self.state: TaskState | None = None
        self.n_buckets = n_buckets
        #: the buckets decoded in this micro-batch
        self.buckets: dict[int, dict[str, bytes]] = {}
        #: every bucket read or written so far, as stored (None: it has no key)
        self.packed: dict[int, bytes | None] = {}
        self.loaded = 0
        self.read_ns = 0

    def bind(self, state: TaskState) -> None:
        self.state = state
        self.loaded = 0
        self.read_ns = 0

    def release(self) -> None:
        self.state = None
        self.buckets.clear()

    def bucket(self, b: int) -> dict[str, bytes]:
        """Bucket ``b``'s key -> blob, for this micro-batch (changes to it are the caller's to write)."""
        data = self.buckets.get(b)
        if data is None:
            t = time.perf_counter_ns()
            if b not in self.packed:
                if self.state is None:
                    raise RuntimeError("state read outside of a micro-batch")
                self.loaded += 1
                self.packed[b] = self.state.get_bucket(b)
            data = self.buckets[b] = decode_bucket(self.packed[b])
            self.read_ns += time.perf_counter_ns() - t
        return data

    def written(self, b: int, packed: bytes | None) -> None:
        """Bucket ``b`` is now ``packed`` in the state (None: deleted)."""
        self.packed[b] = packed
        self.buckets.pop(b, None)

    def __call__(self, key: Any) -> bytes | None:
        return self.bucket(bucket_of(key, self.n_buckets)).get(key)


def read_log(state: TaskState, parity: int, i: int, fields: Sequence[str]) -> tuple[str, Decoded]:
    data = state.get_bucket(log_slot(i, parity))
    if data is None:
        raise RuntimeError(
            f"the task state is inconsistent: its token names log entry {i} of generation {parity}, which is missing"
        )
    return decode_log(data, fields)


def new_processor(cfg: TaskConfig, meta: Any, n_buckets: int) -> tuple[TaskProcessor, BucketSource]:
    """A task's processor at its snapshot (``meta`` None: a new task), keys loaded from its buckets on demand."""
    source = BucketSource(n_buckets)
    return cfg.new_processor(meta, source), source
