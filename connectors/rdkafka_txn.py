"""A transactional :class:`~connectors.rdkafka_batch.BatchProducer`: the changelog rows a block at a time, the
rows with headers (late records, dead letters) and the transaction calls, all on one librdkafka producer.

A transaction spans one producer instance, so the exactly-once sink (:mod:`connectors.transactions`) cannot split
its rows over confluent-kafka's producer (headers) and the block producer (changelog) the way the at-least-once
sink does; through confluent-kafka alone every changelog row would be one Python call (measured: 2-4x the CPU
per row of the block path, bench/RESULTS.md). This class adds to the block producer, through ctypes on the same
librdkafka:

* ``rd_kafka_produceva`` for a row with headers (an array of ``rd_kafka_vu_t``, no variadic call),
* ``rd_kafka_init_transactions`` / ``begin`` / ``send_offsets_to_transaction`` / ``commit`` / ``abort``, the group
  metadata from ``rd_kafka_consumer_group_metadata_new(group)`` (no consumer needed: generation -1, no member,
  as :mod:`connectors.transactions` explains).

Errors are raised as confluent-kafka's ``KafkaException(KafkaError(code, text, fatal, retriable,
txn_requires_abort))``, so callers treat both producers alike.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from connectors.rdkafka_batch import BatchProducer, library_path

__all__ = ["TransactionalBatchProducer"]

_VTYPE_TOPIC, _VTYPE_VALUE, _VTYPE_KEY, _VTYPE_MSGFLAGS, _VTYPE_HEADER = 1, 4, 5, 7, 9
_MSG_F_COPY = 0x2
_ERR_QUEUE_FULL = -184
_ERR_TRANSPORT, _ERR_ALL_BROKERS_DOWN, _ERR_RESOLVE = -195, -187, -193


class _Mem(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class _Header(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("val", ctypes.c_void_p), ("size", ctypes.c_ssize_t)]


class _U(ctypes.Union):
    _fields_ = [
        ("cstr", ctypes.c_char_p),
        ("i", ctypes.c_int),
        ("mem", _Mem),
        ("header", _Header),
        ("_pad", ctypes.c_char * 64),
    ]


class _Vu(ctypes.Structure):
    """librdkafka's ``rd_kafka_vu_t`` (72 bytes on 64-bit)."""

    _fields_ = [("vtype", ctypes.c_int), ("u", _U)]


class _TopicPartition(ctypes.Structure):
    """librdkafka's ``rd_kafka_topic_partition_t``."""

    _fields_ = [
        ("topic", ctypes.c_char_p),
        ("partition", ctypes.c_int32),
        ("offset", ctypes.c_int64),
        ("metadata", ctypes.c_void_p),
        ("metadata_size", ctypes.c_size_t),
        ("opaque", ctypes.c_void_p),
        ("err", ctypes.c_int),
        ("_private", ctypes.c_void_p),
    ]


class _TxnLib:
    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)  # the library the block producer loaded (dlopen counts references)
        vp, i = ctypes.c_void_p, ctypes.c_int

        def fn(name: str, res: Any, *args: Any) -> Any:
            f = getattr(lib, name)
            f.restype, f.argtypes = res, list(args)
            return f

        self.init = fn("rd_kafka_init_transactions", vp, vp, i)
        self.begin = fn("rd_kafka_begin_transaction", vp, vp)
        self.send_offsets = fn("rd_kafka_send_offsets_to_transaction", vp, vp, vp, vp, i)
        self.commit = fn("rd_kafka_commit_transaction", vp, vp, i)
        self.abort = fn("rd_kafka_abort_transaction", vp, vp, i)
        self.error_code = fn("rd_kafka_error_code", i, vp)
        self.error_string = fn("rd_kafka_error_string", ctypes.c_char_p, vp)
        self.error_is_fatal = fn("rd_kafka_error_is_fatal", i, vp)
        self.error_is_retriable = fn("rd_kafka_error_is_retriable", i, vp)
        self.error_txn_requires_abort = fn("rd_kafka_error_txn_requires_abort", i, vp)
        self.error_destroy = fn("rd_kafka_error_destroy", None, vp)
        self.cgmd_new = fn("rd_kafka_consumer_group_metadata_new", vp, ctypes.c_char_p)
        self.cgmd_destroy = fn("rd_kafka_consumer_group_metadata_destroy", None, vp)
        self.tpl_new = fn("rd_kafka_topic_partition_list_new", vp, i)
        self.tpl_add = fn(
            "rd_kafka_topic_partition_list_add", ctypes.POINTER(_TopicPartition), vp, ctypes.c_char_p, ctypes.c_int32
        )
        self.tpl_destroy = fn("rd_kafka_topic_partition_list_destroy", None, vp)
        self.produceva = fn("rd_kafka_produceva", vp, vp, ctypes.POINTER(_Vu), ctypes.c_size_t)
        self.event_error = fn("rd_kafka_event_error", i, vp)
        self.purge = fn("rd_kafka_purge", i, vp, i)


_TXN: _TxnLib | None = None


def _txn_lib() -> _TxnLib:
    global _TXN
    if _TXN is None:
        path = library_path()
        if path is None:
            raise OSError("no librdkafka next to confluent-kafka or on the system")
        _TXN = _TxnLib(path)
    return _TXN


def _mem(vu: _Vu, vtype: int, data: bytes | None, keep: list[Any]) -> None:
    """Point ``vu`` at a copy of ``data`` (kept alive in ``keep``); ``None``: a null key or value."""
    vu.vtype = vtype
    if data is not None:
        buf = ctypes.create_string_buffer(data, len(data))
        keep.append(buf)
        vu.u.mem.ptr, vu.u.mem.size = ctypes.addressof(buf), len(data)


class TransactionalBatchProducer(BatchProducer):
    """A :class:`BatchProducer` with ``transactional.id`` in ``config``, plus rows with headers and the
    transaction calls (see the module docstring). ``lost_brokers`` turns true when librdkafka reports that it
    lost its brokers (served by :meth:`check`); such a producer should be replaced before its next transaction."""

    def __init__(self, config: Mapping[str, Any], on_failure: Callable[[int, str], None] | None = None) -> None:
        self._t = _txn_lib()
        self.lost_brokers = False
        self._failures: list[str] = []
        super().__init__(config, on_failure or self._note_failure)

    def _note_failure(self, count: int, text: str) -> None:
        self._failures.append(f"{count}: {text}")

    def on_error_event(self, event: int) -> None:
        if self._t.event_error(event) in (_ERR_TRANSPORT, _ERR_ALL_BROKERS_DOWN, _ERR_RESOLVE):
            self.lost_brokers = True

    def check(self) -> None:
        """Serve pending events (errors set :attr:`lost_brokers`)."""
        self.serve(0)

    def _raise(self, err: int, what: str) -> None:
        """Raise a ``KafkaException`` for an ``rd_kafka_error_t*`` (destroyed here); nothing when NULL."""
        if not err:
            return
        from confluent_kafka import KafkaError, KafkaException

        t = self._t
        try:
            code = t.error_code(err)
            text = (t.error_string(err) or b"").decode(errors="replace")
            ke = KafkaError(
                code,
                f"{what}: {text}",
                fatal=bool(t.error_is_fatal(err)),
                retriable=bool(t.error_is_retriable(err)),
                txn_requires_abort=bool(t.error_txn_requires_abort(err)),
            )
        finally:
            t.error_destroy(err)
        raise KafkaException(ke)

    def init_transactions(self, timeout_s: float) -> None:
        self._raise(self._t.init(self.handle, int(timeout_s * 1000)), "init_transactions")

    def begin_transaction(self) -> None:
        self._raise(self._t.begin(self.handle), "begin_transaction")

    def send_offsets_to_transaction(
        self, topic: str, partition: int, offset: int, group: str, timeout_s: float
    ) -> None:
        t = self._t
        tpl = t.tpl_new(1)
        cgmd = t.cgmd_new(group.encode())
        try:
            t.tpl_add(tpl, topic.encode(), partition).contents.offset = offset
            err = t.send_offsets(self.handle, tpl, cgmd, int(timeout_s * 1000))
        finally:
            t.cgmd_destroy(cgmd)
            t.tpl_destroy(tpl)
        self._raise(err, "send_offsets_to_transaction")

    def commit_transaction(self, timeout_s: float) -> None:
        self._raise(self._t.commit(self.handle, int(timeout_s * 1000)), "commit_transaction")

    def abort_transaction(self, timeout_s: float) -> None:
        self._raise(self._t.abort(self.handle, int(timeout_s * 1000)), "abort_transaction")

    def discard(self) -> None:
        """Drop whatever is queued or in flight (a fenced or replaced producer) and free the producer."""
        if self.handle:
            self._t.purge(self.handle, 0x1 | 0x2 | 0x4)  # queue, in flight, non-blocking
            self.close()

    def send_with_headers(
        self,
        topics: Sequence[str],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[Sequence[tuple[str, bytes]] | None],
    ) -> None:
        """Queue rows one ``rd_kafka_produceva`` call each (librdkafka copies them; its partitioner places them:
        murmur2 of the key, as the Java client's)."""
        for topic, key, value, hdrs in zip(topics, keys, values, headers, strict=True):
            hdrs = list(hdrs or ())
            vus = (_Vu * (4 + len(hdrs)))()
            keep: list[Any] = []  # the buffers stay referenced until librdkafka has copied them

            vus[0].vtype, vus[0].u.cstr = _VTYPE_TOPIC, topic.encode()
            vus[1].vtype, vus[1].u.i = _VTYPE_MSGFLAGS, _MSG_F_COPY
            _mem(vus[2], _VTYPE_KEY, key, keep)
            _mem(vus[3], _VTYPE_VALUE, value, keep)
            for j, (name, val) in enumerate(hdrs):
                vu = vus[4 + j]
                buf = ctypes.create_string_buffer(bytes(val), len(val))
                name_b = name.encode()
                keep += [buf, name_b]
                vu.vtype = _VTYPE_HEADER
                vu.u.header.name, vu.u.header.val, vu.u.header.size = name_b, ctypes.addressof(buf), len(val)
            while True:
                err = self._t.produceva(self.handle, vus, len(vus))
                if err and self._t.error_code(err) == _ERR_QUEUE_FULL:
                    self._t.error_destroy(err)
                    self.serve(10)
                    continue
                self._raise(err, f"producing a row to {topic}")
                break
