"""Kafka's default partitioner for keyed records, a whole block of keys at once (numpy).

The Java client's default partitioner and librdkafka's ``murmur2_random`` (the direct producer's setting) put a
record with a key in partition ``(murmur2(key) & 0x7fffffff) % partition_count``, with Kafka's variant of
MurmurHash2 (seed ``0x9747b28c``; Java ``Utils.murmur2``, librdkafka ``rd_murmur2``)::

    h = seed ^ len(key)
    key bytes:  | w0 (4 bytes, little-endian) | w1 | ... | w(n-1) | tail (len % 4 bytes) |
    per word:   k = w * M; k ^= k >> 24; k *= M;  h = (h * M) ^ k          (all mod 2**32)
    tail:       h ^= tail[2] << 16, tail[1] << 8, tail[0]; then h *= M     (only the bytes there are)
    finish:     h ^= h >> 13; h *= M; h ^= h >> 15

:func:`partitions` computes it for every key of a :class:`~connectors.rows.RowBlock`, one numpy operation per
word position over all keys of one length, so :mod:`connectors.rdkafka_batch` can hand librdkafka each
partition's rows as one block instead of running its partitioner, under its locks, row by row.
"""

from __future__ import annotations

import numpy as np

from .rows import RowBlock

__all__ = ["murmur2", "partitions", "rows_by_partition"]

_SEED = 0x9747B28C
_M = np.uint32(0x5BD1E995)


def murmur2(keys: RowBlock) -> np.ndarray:
    """Kafka's murmur2 of every key (uint32, the Java int's bits)."""
    n = len(keys)
    if not n:
        return np.empty(0, np.uint32)
    data = np.frombuffer(keys.data, np.uint8)
    lengths = keys.lengths()
    if int(lengths.min()) == int(lengths.max()):  # keys of one length (e.g. Avro window keys): rows of a matrix
        return _murmur2_of_one_length(data.reshape(n, int(lengths[0])))
    out = np.empty(n, np.uint32)
    starts = keys.starts()
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        out[rows] = _murmur2_of_one_length(data[starts[rows, None] + np.arange(length)])
    return out


def _murmur2_of_one_length(mat: np.ndarray) -> np.ndarray:
    """murmur2 of each row of the uint8 matrix ``mat`` (all keys ``mat.shape[1]`` bytes long)."""
    n, length = mat.shape
    h = np.full(n, (_SEED ^ length) & 0xFFFFFFFF, np.uint32)
    words = length // 4
    if words:
        w = np.ascontiguousarray(mat[:, : words * 4]).view("<u4")
        for i in range(words):
            k = w[:, i] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            h *= _M
            h ^= k
    tail = mat[:, words * 4 :].astype(np.uint32)
    if tail.shape[1]:
        for i in range(tail.shape[1] - 1, -1, -1):
            h ^= tail[:, i] << np.uint32(8 * i)
        h *= _M
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return h


def partitions(keys: RowBlock, count: int) -> np.ndarray:
    """The partition (int32) the default partitioner gives each key in a topic of ``count`` partitions."""
    if count < 1:
        raise ValueError(f"a topic has at least one partition, not {count}")
    return ((murmur2(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(count)).astype(np.int32)


def rows_by_partition(part: np.ndarray, count: int) -> list[tuple[int, np.ndarray]]:
    """``(partition, its rows in ascending order)`` for every partition in ``part`` that has rows."""
    if count <= 64:  # a pass per partition beats a sort
        groups = ((q, np.flatnonzero(part == q)) for q in range(count))
        return [(q, rows) for q, rows in groups if len(rows)]
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(count + 1)).tolist()
    return [(q, order[bounds[q] : bounds[q + 1]]) for q in range(count) if bounds[q + 1] > bounds[q]]
