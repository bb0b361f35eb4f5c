"""The ``slot`` of a task's state key, as a table computed here instead of an expression Spark plans every batch.

Why a table: the slot is the smallest ``s`` in ``[0, TASK_SLOTS)`` with ``pmod(hash(topic, partition, s), n)``
equal to the task's target state partition (:func:`service.spark.job.task_slot`). Written as a 64-arm ``CASE`` of
``hash`` calls it is correct, but Spark's optimizer and code generator walk those 64 arms in every micro-batch,
a visible share of a small micro-batch's ``queryPlanning`` (bench/RESULTS.md, ``batch_phases.py``). The driver knows
the input topics, so it computes each topic's slots for partitions ``0 .. TABLE_PARTITIONS - 1`` here, with a port
of Spark's ``hash`` (:func:`spark_hash`), and the query reads them from one string literal per topic; any other
``(topic, partition)`` falls back to the definition itself, evaluated by Spark. Same slots either way:
``tests/service/test_job.py`` checks the table against Spark's own evaluation.

Table encoding: one character per partition, ``chr(SLOT_CHAR0 + slot)`` (slot -1, when no slot fits, is
``chr(SLOT_CHAR0 - 1)``): ``'0'`` for slot 0 ... ``'o'`` for slot 63, ``'/'`` for -1.
"""

from __future__ import annotations

__all__ = ["SEED", "SLOT_CHAR0", "TABLE_PARTITIONS", "slot_of", "slot_table", "spark_hash"]

#: the seed of Spark's ``hash`` expression (``Murmur3Hash``)
SEED = 42
#: partitions per topic covered by the table; a partition beyond it takes Spark's evaluation of the definition
#: (the same slot). The table is computed at every start, so it covers what topics commonly have rather than
#: every partition a topic could have.
TABLE_PARTITIONS = 1024
#: the character of slot 0 in a table (slots -1 .. 63 are the printable characters '/' .. 'o')
SLOT_CHAR0 = ord("0")

_C1, _C2, _MASK = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * _C1) & _MASK, 15) * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def _hash_int(value: int, seed: int) -> int:
    """``Murmur3_x86_32.hashInt``."""
    return _fmix(_mix_h1(seed, _mix_k1(value & _MASK)), 4)


def _hash_bytes(data: bytes, seed: int) -> int:
    """``Murmur3_x86_32.hashUnsafeBytes`` (Spark's string hash): the 4-byte little-endian words, then each
    remaining byte as a whole round of its own (sign-extended: Java's ``byte``) - not the standard Murmur3 tail."""
    h1 = seed
    aligned = len(data) - len(data) % 4
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i : i + 4], "little")))
    for b in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((b - 256 if b > 127 else b) & _MASK))
    return _fmix(h1, len(data))


def spark_hash(*values: str | int) -> int:
    """Spark's ``hash(v1, v2, ...)`` of strings (UTF-8) and ints, as a signed 32-bit int: each value hashed with
    the previous one's hash as its seed, starting from :data:`SEED`."""
    h = SEED
    for v in values:
        h = _hash_bytes(v.encode("utf-8"), h) if isinstance(v, str) else _hash_int(v, h)
    return h - (1 << 32) if h & 0x80000000 else h


def _pmod(x: int, n: int) -> int:
    return x % n  # Python's % of a positive n is Spark's pmod


def slot_of(topic: str, partition: int, state_partitions: int, slots: int) -> int:
    """The smallest ``s`` in ``[0, slots)`` with ``pmod(hash(topic, partition, s), n)`` equal to the target
    ``pmod(pmod(hash(topic), n) + partition, n)``; -1 if none."""
    n = state_partitions
    target = _pmod(_pmod(spark_hash(topic), n) + partition, n)
    topic_hash = _hash_bytes(topic.encode("utf-8"), SEED)
    key_hash = _hash_int(partition, topic_hash)
    for s in range(slots):
        h = _hash_int(s, key_hash)
        if _pmod(h - (1 << 32) if h & 0x80000000 else h, n) == target:
            return s
    return -1


def slot_table(topic: str, state_partitions: int, slots: int, partitions: int = TABLE_PARTITIONS) -> str:
    """The slots of ``topic``'s partitions ``0 .. partitions - 1`` as a string, one character each (module doc)."""
    return "".join(chr(SLOT_CHAR0 + slot_of(topic, p, state_partitions, slots)) for p in range(partitions))
