"""Topic administration with confluent-kafka's AdminClient: partitions of inputs, creation of output topics."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = ["TopicSpec", "ensure_topics", "partition_counts", "end_offsets", "AdminError"]

logger = logging.getLogger(__name__)


class AdminError(RuntimeError):
    """A topic operation failed (broker unreachable, topic missing, ...)."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int = 1
    config: Mapping[str, str] = field(default_factory=dict)


class _DebugLog:
    """librdkafka's log lines (e.g. one "Connection refused" per reconnect while the broker is down) at DEBUG:
    the caller reports a failed operation in one line of its own."""

    @staticmethod
    def log(_level: int, fmt: str, *args: object) -> None:
        logger.debug(fmt, *args)


def _admin(config: Mapping[str, str]) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    settings: dict[str, Any] = {"logger": _DebugLog(), **dict(config)}  # librdkafka also takes a logger
    return AdminClient(settings)


def partition_counts(config: Mapping[str, str], topics: Sequence[str], timeout: float = 30.0) -> dict[str, int]:
    """Number of partitions of each existing topic in ``topics`` (missing topics are left out)."""
    try:
        md = _admin(config).list_topics(timeout=timeout)
    except Exception as e:
        raise AdminError(f"cannot reach Kafka at {config.get('bootstrap.servers')}: {e}") from e
    out = {}
    for t in topics:
        tm = md.topics.get(t)
        if tm is not None and tm.error is None:
            out[t] = len(tm.partitions)
    return out


def ensure_topics(config: Mapping[str, str], specs: Sequence[TopicSpec], timeout: float = 60.0) -> list[str]:
    """Create the topics of ``specs`` that do not exist yet; returns the names created. Existing topics are left
    as they are (their partition count and config are not changed)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(config)
    existing = set(partition_counts(config, [s.name for s in specs], timeout=timeout))
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return []
    futures = admin.create_topics(
        [
            NewTopic(
                s.name, num_partitions=s.partitions, replication_factor=s.replication_factor, config=dict(s.config)
            )
            for s in missing
        ],
        operation_timeout=timeout,
    )
    created = []
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout)
            created.append(name)
            logger.info("created topic %s", name)
        except KafkaException as e:
            err = e.args[0]
            if getattr(err, "name", lambda: "")() == "TOPIC_ALREADY_EXISTS":
                continue  # created concurrently
            raise AdminError(f"cannot create topic {name}: {err}") from e
    return created


def end_offsets(config: Mapping[str, str], topics: Sequence[str], timeout: float = 10.0) -> dict[tuple[str, int], int]:
    """High watermark of every partition of ``topics`` (for consumer lag)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**config, "group.id": "slidingwindow-lag-probe", "enable.auto.commit": False})
    try:
        md = c.list_topics(timeout=timeout)
        out = {}
        for t in topics:
            tm = md.topics.get(t)
            if tm is None or tm.error is not None:
                continue
            for p in tm.partitions:
                _lo, hi = c.get_watermark_offsets(TopicPartition(t, p), timeout=timeout, cached=False)
                out[(t, p)] = hi
        return out
    finally:
        c.close()
