"""Kafka's default partitioner a block of keys at a time: the partition the Java client and librdkafka give."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.partitioner import murmur2, partitions
from connectors.rdkafka_batch import library_path
from connectors.rows import RowBlock
from tests.connectors.test_producer import java_partition

KEYS = st.lists(st.binary(max_size=40), min_size=1, max_size=60)
COUNTS = st.one_of(st.integers(1, 12), st.just(2**31 - 1))


@settings(max_examples=300, deadline=None)
@given(KEYS, COUNTS)
def test_partitions_are_the_java_clients(keys, count):
    got = partitions(RowBlock.of(keys), count)
    assert got.dtype == np.int32
    assert got.tolist() == [java_partition(k, count) for k in keys]


@settings(max_examples=100, deadline=None)
@given(KEYS, COUNTS)
def test_partitions_are_librdkafkas_murmur2_random(keys, count):
    lib = ctypes.CDLL(library_path())
    f = lib.rd_kafka_msg_partitioner_murmur2_random  # public API: for a key it is murmur2 (no topic needed)
    f.restype = ctypes.c_int32
    f.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p]
    assert partitions(RowBlock.of(keys), count).tolist() == [f(None, k, len(k), count, None, None) for k in keys]


def test_known_values_and_edges():
    # Kafka's own test vectors (clients/src/test/.../UtilsTest.java, testMurmur2): the Java int values
    java_ints = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    got = murmur2(RowBlock.of(list(java_ints))).view(np.int32).tolist()
    assert got == list(java_ints.values())
    assert murmur2(RowBlock.of([])).tolist() == []
    assert partitions(RowBlock.of([b""]), 5).tolist() == [java_partition(b"", 5)]
    with pytest.raises(ValueError, match="at least one partition"):
        partitions(RowBlock.of([b"k"]), 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 99), max_size=50), st.sampled_from([1, 7, 64, 65, 100]))
def test_rows_by_partition_keep_the_rows_order(part, count):
    from connectors.partitioner import rows_by_partition

    part = [p % count for p in part]
    got = rows_by_partition(np.array(part, np.int32), count)
    assert [q for q, _rows in got] == sorted(set(part))
    for q, rows in got:
        assert rows.tolist() == [i for i, p in enumerate(part) if p == q]
