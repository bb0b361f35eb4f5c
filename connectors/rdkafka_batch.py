"""Output rows handed to librdkafka a whole block at a time: ``rd_kafka_produce_batch`` through ctypes.

confluent-kafka's ``Producer.produce`` is one Python call per record, and the rows must first be cut into one
``bytes`` object each. With the windows full, a micro-batch of 50,000 records writes ~565,000 changelog rows, so
that per-row Python is a large part of the service's CPU. :class:`BatchProducer` instead builds an array of
librdkafka's ``rd_kafka_message_t`` with numpy, pointing into a :class:`~connectors.rows.RowBlock`'s buffer, and
hands up to :data:`CHUNK` rows to librdkafka in one C call (which copies them: ``RD_KAFKA_MSG_F_COPY``). With
Kafka's default partitioner the rows are put in their partitions first (:mod:`connectors.partitioner`) and each
partition's rows are one call; otherwise librdkafka's partitioner runs per row, as for ``produce()``. Both cut
the CPU per row against ``produce()`` (``bench/changelog_encoding_bench.py --produce``; figures in
bench/RESULTS.md).

It is the librdkafka that confluent-kafka ships (the same file, so the same version, see :func:`library_path`),
in a producer instance of its own with the direct sink's settings. Delivery reports come through librdkafka's
event API and only for failures (``delivery.report.only.error``): nothing calls back into Python per record.
:meth:`BatchProducer.wait` serves those events until librdkafka holds nothing of ours any more, so every failure
is known when it returns; each one is passed to ``on_failure``. Rows cannot carry headers here (the late and
dead-letter rows go through confluent-kafka), and none is null.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from connectors.partitioner import partitions, rows_by_partition
from connectors.rows import RowBlock

__all__ = ["BatchProducer", "BatchRefused", "CHUNK", "library_path", "load"]

logger = logging.getLogger(__name__)

#: rows per ``rd_kafka_produce_batch`` call (the queue must have room for a whole chunk)
CHUNK = 100_000
#: a topic's partition count is read from the metadata again when it is older than this (partitions added to a
#: topic move keys to other partitions for every Kafka producer; here at most this much later)
PARTITIONS_MAX_AGE_S = 30.0
#: how long a metadata request may take before the rows go to librdkafka's partitioner instead (for
#: :data:`PARTITIONS_MAX_AGE_S`, so an unreachable broker costs this once per that time, not per send)
METADATA_TIMEOUT_MS = 1_000

_PRODUCER = 0  # rd_kafka_type_t RD_KAFKA_PRODUCER
_PARTITION_UA = -1  # run the configured partitioner per row
_MSG_F_COPY = 0x2
_EVENT_DR = 0x1
_EVENT_ERROR = 0x8
_ERR_QUEUE_FULL = -184  # RD_KAFKA_RESP_ERR__QUEUE_FULL
_CONF_OK = 0
_DEFAULT_QUEUE_MESSAGES = 100_000  # librdkafka's queue.buffering.max.messages


class _Message(ctypes.Structure):
    """librdkafka's public ``rd_kafka_message_t`` (rdkafka.h)."""

    _fields_ = [
        ("err", ctypes.c_int),
        ("rkt", ctypes.c_void_p),
        ("partition", ctypes.c_int32),
        ("payload", ctypes.c_void_p),
        ("len", ctypes.c_size_t),
        ("key", ctypes.c_void_p),
        ("key_len", ctypes.c_size_t),
        ("offset", ctypes.c_int64),
        ("_private", ctypes.c_void_p),
    ]


_NUMPY_TYPES = {
    ctypes.c_int: np.intc,
    ctypes.c_void_p: np.uintp,
    ctypes.c_int32: np.int32,
    ctypes.c_size_t: np.uintp,
    ctypes.c_int64: np.int64,
}
#: the same layout as a numpy record, so a whole array of messages is filled column by column
MESSAGE_DTYPE = np.dtype(
    {
        "names": [f[0] for f in _Message._fields_],
        "formats": [_NUMPY_TYPES[f[1]] for f in _Message._fields_],
        "offsets": [getattr(_Message, f[0]).offset for f in _Message._fields_],
        "itemsize": ctypes.sizeof(_Message),
    }
)


class _MetadataTopic(ctypes.Structure):
    """librdkafka's ``rd_kafka_metadata_topic_t``."""

    _fields_ = [
        ("topic", ctypes.c_char_p),
        ("partition_cnt", ctypes.c_int),
        ("partitions", ctypes.c_void_p),
        ("err", ctypes.c_int),
    ]


class _Metadata(ctypes.Structure):
    """librdkafka's ``rd_kafka_metadata_t``."""

    _fields_ = [
        ("broker_cnt", ctypes.c_int),
        ("brokers", ctypes.c_void_p),
        ("topic_cnt", ctypes.c_int),
        ("topics", ctypes.POINTER(_MetadataTopic)),
        ("orig_broker_id", ctypes.c_int32),
        ("orig_broker_name", ctypes.c_char_p),
    ]


class BatchRefused(RuntimeError):
    """librdkafka refused a row outright (e.g. larger than ``message.max.bytes``)."""


def library_path() -> str | None:
    """The librdkafka confluent-kafka loads: the copy its wheel ships (``confluent_kafka.libs`` on Linux,
    ``.dylibs`` on macOS), else a system one; ``None`` when there is none."""
    try:
        import confluent_kafka
    except ImportError:
        return None
    pkg = Path(confluent_kafka.__file__).parent
    shipped = sorted(pkg.parent.glob("confluent_kafka.libs/librdkafka*.so*")) + sorted(
        pkg.glob(".dylibs/librdkafka*.dylib")
    )
    if shipped:
        return str(shipped[0])
    return ctypes.util.find_library("rdkafka")


class _Lib:
    """The librdkafka functions used here, typed."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        vp, i, s, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t

        def fn(name: str, res: Any, *args: Any) -> Any:
            f = getattr(lib, name)
            f.restype, f.argtypes = res, list(args)
            return f

        self.version_str = fn("rd_kafka_version_str", s)
        self.conf_new = fn("rd_kafka_conf_new", vp)
        self.conf_set = fn("rd_kafka_conf_set", i, vp, s, s, s, sz)
        self.conf_set_events = fn("rd_kafka_conf_set_events", None, vp, i)
        self.conf_destroy = fn("rd_kafka_conf_destroy", None, vp)
        self.new = fn("rd_kafka_new", vp, i, vp, s, sz)
        self.destroy = fn("rd_kafka_destroy", None, vp)
        self.topic_new = fn("rd_kafka_topic_new", vp, vp, s, vp)
        self.topic_destroy = fn("rd_kafka_topic_destroy", None, vp)
        self.topic_name = fn("rd_kafka_topic_name", s, vp)
        self.produce_batch = fn("rd_kafka_produce_batch", i, vp, ctypes.c_int32, i, vp, i)
        self.outq_len = fn("rd_kafka_outq_len", i, vp)
        self.flush = fn("rd_kafka_flush", i, vp, i)
        self.queue_get_main = fn("rd_kafka_queue_get_main", vp, vp)
        self.queue_destroy = fn("rd_kafka_queue_destroy", None, vp)
        self.queue_poll = fn("rd_kafka_queue_poll", vp, vp, i)
        self.event_type = fn("rd_kafka_event_type", i, vp)
        self.event_message_count = fn("rd_kafka_event_message_count", sz, vp)
        self.event_message_next = fn("rd_kafka_event_message_next", ctypes.POINTER(_Message), vp)
        self.event_error_string = fn("rd_kafka_event_error_string", s, vp)
        self.event_destroy = fn("rd_kafka_event_destroy", None, vp)
        self.err2str = fn("rd_kafka_err2str", s, i)
        self.metadata = fn("rd_kafka_metadata", i, vp, i, vp, ctypes.POINTER(ctypes.POINTER(_Metadata)), i)
        self.metadata_destroy = fn("rd_kafka_metadata_destroy", None, ctypes.POINTER(_Metadata))


_LIB: _Lib | None = None
_LIB_ERROR = ""
_LIB_LOCK = threading.Lock()


def load() -> tuple[_Lib | None, str]:
    """The library (loaded once per process), or ``(None, why not)``."""
    global _LIB, _LIB_ERROR
    with _LIB_LOCK:
        if _LIB is None and not _LIB_ERROR:
            path = library_path()
            try:
                if path is None:
                    raise OSError("no librdkafka next to confluent-kafka or on the system")
                _LIB = _Lib(path)
            except (OSError, AttributeError) as e:
                _LIB_ERROR = str(e)
        return _LIB, _LIB_ERROR


def _conf_value(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


class BatchProducer:
    """A librdkafka producer fed :class:`~connectors.rows.RowBlock` s (see the module docstring).

    ``config`` is librdkafka's (the direct sink's producer settings); ``on_failure(count, text)`` is called for
    every delivery report of failed rows, from whichever thread serves the events (:meth:`send` while it waits
    for room in the queue, :meth:`wait`). Thread-safe."""

    def __init__(self, config: Mapping[str, Any], on_failure: Callable[[int, str], None]) -> None:
        lib, why = load()
        if lib is None:
            raise OSError(f"librdkafka cannot be loaded: {why}")
        self._lib = lib
        self._on_failure = on_failure
        self._max_queued = int(config.get("queue.buffering.max.messages", _DEFAULT_QUEUE_MESSAGES))
        err = ctypes.create_string_buffer(512)
        conf = lib.conf_new()
        for k, v in config.items():
            if lib.conf_set(conf, k.encode(), _conf_value(v).encode(), err, len(err)) != _CONF_OK:
                lib.conf_destroy(conf)
                shown = "***" if "password" in k or "jaas" in k else v  # never a secret in an error
                raise ValueError(f"librdkafka rejects {k}={shown}: {err.value.decode(errors='replace')}")
        lib.conf_set_events(conf, _EVENT_DR | _EVENT_ERROR)
        rk = lib.new(_PRODUCER, conf, err, len(err))  # takes the conf, also when it fails
        if not rk:
            raise ValueError(f"librdkafka cannot create a producer: {err.value.decode(errors='replace')}")
        self._rk = rk
        self._queue = lib.queue_get_main(rk)
        self._topics: dict[str, int] = {}
        self._lock = threading.Lock()
        #: rows are put in their partitions here (connectors.partitioner) when librdkafka would use Kafka's
        #: default partitioner for them: murmur2 of the key (every row has one)
        self._own_partitions = str(config.get("partitioner", "consistent_random")) in ("murmur2", "murmur2_random")
        self._partition_counts: dict[str, tuple[int | None, float]] = {}  # topic -> (count, when it was read)

    def _topic(self, name: str) -> int:
        with self._lock:
            rkt = self._topics.get(name)
            if rkt is None:
                rkt = self._lib.topic_new(self._rk, name.encode(), None)
                if not rkt:
                    raise BatchRefused(f"librdkafka cannot make a handle for topic {name!r}")
                self._topics[name] = rkt
            return rkt

    def send(self, topic: str, keys: RowBlock, values: RowBlock, null_values: np.ndarray | None = None) -> None:
        """Queue the rows (key i, value i) for ``topic`` in order, without waiting for acknowledgements. The rows
        ``null_values`` marks (a bool mask) get a null value (a tombstone: librdkafka's NULL payload), whatever
        their row in ``values`` holds.

        With Kafka's default partitioner configured (``murmur2_random``, the direct producer's) and the topic's
        partition count known, the rows are put in their partitions here, a block at a time
        (:mod:`connectors.partitioner`: the same partition for every key), and each partition's rows go to
        librdkafka in one call, in the rows' order. Otherwise librdkafka's partitioner runs per row, taking
        each row into its partition's queue under that queue's lock, which its sending thread takes too: more
        CPU per row (bench/RESULTS.md).

        Raises :class:`BatchRefused` when librdkafka refuses a row (nothing after it is queued: not the rest of
        its partition's rows, nor the partitions after it)."""
        n = len(values)
        if len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if n == 0:
            return
        rkt = self._topic(topic)
        # the buffers stay referenced (kdata, vdata) until librdkafka has copied every row
        kdata = np.frombuffer(keys.data, np.uint8) if len(keys.data) else np.zeros(1, np.uint8)
        vdata = np.frombuffer(values.data, np.uint8) if len(values.data) else np.zeros(1, np.uint8)
        key_at, key_len = kdata.ctypes.data + keys.starts(), keys.lengths()
        value_at, value_len = vdata.ctypes.data + values.starts(), values.lengths()
        if null_values is not None:
            value_at = np.where(null_values, 0, value_at)
            value_len = np.where(null_values, 0, value_len)
        count = self.partition_count(topic, rkt) if self._own_partitions else None
        groups = [(_PARTITION_UA, None)] if count is None else rows_by_partition(partitions(keys, count), count)
        for partition, rows in groups:
            msgs = np.zeros(n if rows is None else len(rows), MESSAGE_DTYPE)
            for field, col in (("key", key_at), ("key_len", key_len), ("payload", value_at), ("len", value_len)):
                msgs[field] = col if rows is None else col[rows]
            self._produce(rkt, topic, partition, msgs)

    def _produce(self, rkt: int, topic: str, partition: int, msgs: np.ndarray) -> None:
        """Hand ``msgs`` to librdkafka for ``partition`` (or its partitioner: ``_PARTITION_UA``), in chunks
        that fit its queue."""
        lib = self._lib
        n = len(msgs)
        at = 0
        while at < n:
            take = min(n - at, CHUNK, self._max_queued - lib.outq_len(self._rk))
            if take <= 0:  # the queue is full: let librdkafka deliver some first
                self.serve(10)
                continue
            chunk = msgs[at : at + take]
            chunk["err"] = 0
            queued = lib.produce_batch(rkt, partition, _MSG_F_COPY, chunk.ctypes.data, take)
            if queued == take:
                at += take
                continue
            refused = np.flatnonzero(chunk["err"])
            first = int(refused[0]) if len(refused) else queued
            code = int(chunk["err"][first])
            if code != _ERR_QUEUE_FULL:
                where = "" if partition == _PARTITION_UA else f" of partition {partition}"
                raise BatchRefused(
                    f"librdkafka refused output row {at + first} of {n}{where} for {topic}: "
                    f"{lib.err2str(code).decode(errors='replace')}"
                )
            # queued again from the first refused row: a later row that got in goes out twice, and the last copy
            # of every row still comes in the rows' order (a compacted topic keeps the right final value)
            at += first
            self.serve(10)

    def partition_count(self, topic: str, rkt: int | None = None) -> int | None:
        """How many partitions ``topic`` has, from librdkafka's metadata (read again after
        :data:`PARTITIONS_MAX_AGE_S`); ``None`` when it cannot be had (librdkafka then partitions the rows)."""
        now = time.monotonic()
        with self._lock:
            known = self._partition_counts.get(topic)
        if known is not None and now - known[1] < PARTITIONS_MAX_AGE_S:
            return known[0]
        lib = self._lib
        md = ctypes.POINTER(_Metadata)()
        err = lib.metadata(
            self._rk, 0, rkt if rkt is not None else self._topic(topic), ctypes.byref(md), METADATA_TIMEOUT_MS
        )
        count = None
        if err == 0 and md:
            try:
                for i in range(md.contents.topic_cnt):
                    t = md.contents.topics[i]
                    if t.topic == topic.encode() and t.err == 0 and t.partition_cnt > 0:
                        count = int(t.partition_cnt)
            finally:
                lib.metadata_destroy(md)
        if count is None:
            logger.debug("no partition count for %s (metadata error %d)", topic, err)
            count = known[0] if known is not None else None  # the last one read, or librdkafka partitions
        with self._lock:
            self._partition_counts[topic] = (count, now)  # also without one: one request per max age, not per send
        return count

    def serve(self, timeout_ms: int) -> None:
        """Handle the events librdkafka has for us (waiting up to ``timeout_ms`` for the first)."""
        lib = self._lib
        ev = lib.queue_poll(self._queue, timeout_ms)
        while ev:
            try:
                kind = lib.event_type(ev)
                if kind == _EVENT_DR:
                    count = lib.event_message_count(ev)
                    msg = lib.event_message_next(ev)
                    if count and msg:
                        m = msg.contents
                        name = lib.topic_name(m.rkt).decode(errors="replace") if m.rkt else "?"
                        self._on_failure(count, f"{name}: {lib.err2str(m.err).decode(errors='replace')}")
                elif kind == _EVENT_ERROR:
                    self.on_error_event(ev)
                    logger.warning("Kafka producer: %s", (lib.event_error_string(ev) or b"").decode(errors="replace"))
            finally:
                lib.event_destroy(ev)
            ev = lib.queue_poll(self._queue, 0)

    def on_error_event(self, event: int) -> None:
        """Called with each error event (an ``rd_kafka_event_t*``) :meth:`serve` handles; a subclass's hook."""

    @property
    def handle(self) -> int:
        """The ``rd_kafka_t*`` (for a subclass's further librdkafka calls on the same producer)."""
        return self._rk

    def pending(self) -> int:
        """Rows (and events) librdkafka still holds: not yet acknowledged, or failed and not yet served."""
        return int(self._lib.outq_len(self._rk))

    def wait(self) -> None:
        """Return when librdkafka holds nothing of ours: every row acknowledged or its failure passed to
        ``on_failure`` (bounded by ``message.timeout.ms``).

        ``rd_kafka_flush`` returns as soon as librdkafka holds no row (with the event API it only waits, it
        serves nothing), so the last acknowledgement ends the wait at once; a failed row stays held until its
        delivery report is served, so with a failure the flush times out after 100 ms and the report is served.
        (Waiting on the event queue instead would sleep out its timeout: a success posts no event.)"""
        lib = self._lib
        while True:
            lib.flush(self._rk, 100)
            self.serve(0)
            if not self.pending():
                return

    def close(self) -> None:
        """Deliver what is queued (see :meth:`wait`), then free the producer, its threads and connections."""
        if not self._rk:
            return
        self.wait()
        lib = self._lib
        for rkt in self._topics.values():
            lib.topic_destroy(rkt)
        self._topics.clear()
        lib.queue_destroy(self._queue)
        lib.destroy(self._rk)
        self._rk = None
