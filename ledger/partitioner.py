"""The stable key partitioner shared by every backend.

It is Kafka's default (murmur2 of the key bytes, sign bit masked, modulo the
partition count), so a key lands in the same partition whether the records go
to the embedded log, to Kafka through Berth, or to Kafka through any Java client.
"""

from __future__ import annotations

from functools import lru_cache

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit murmur2 as Kafka's clients compute it (returned unsigned)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


@lru_cache(maxsize=1 << 16)
def partition_for(key: bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions`` (Kafka's default partitioner).

    Cached: the same provider and pool ids are routed over and over, and
    murmur2 in Python costs microseconds a key.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
