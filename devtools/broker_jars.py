"""The classpath of the development Kafka broker, resolved with Maven through :mod:`connectors.jars` and cached.

``kafka``
    ``org.apache.kafka:kafka_<kafka_scala>:<kafka>`` (versions from :mod:`connectors.pins`) and its runtime
    dependencies, plus an SLF4J binding for the log4j2 that Kafka depends on, so the broker writes its logs through
    log4j2. This is the classpath of :mod:`devtools.local_broker`.

CLI (both sets: this one and the runtime's ``spark-kafka``)::

    python -m devtools.broker_jars kafka             # one jar path per line
    python -m devtools.broker_jars spark-kafka --format spark-jars
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from connectors import jars, versions
from connectors.jars import Coordinate, ResolvedArtifact

__all__ = ["ARTIFACT_SETS", "kafka_broker_classpath", "kafka_set_name", "main"]


def kafka_set_name() -> str:
    v = versions.jvm_versions()
    return f"kafka_{v.kafka_scala}-{v.kafka}"


def _kafka_logging_companions(resolved: Sequence[ResolvedArtifact]) -> list[Coordinate]:
    """An SLF4J 1.x -> log4j2 binding at the log4j version Kafka itself depends on (the distribution ships one)."""
    ids = {(a.group, a.artifact): a for a in resolved}
    log4j = "org.apache.logging.log4j"
    if (log4j, "log4j-slf4j-impl") in ids or (log4j, "log4j-slf4j2-impl") in ids:
        return []
    api = ids.get((log4j, "log4j-api"))
    slf4j = ids.get(("org.slf4j", "slf4j-api"))
    if api is None or slf4j is None:
        return []
    binding = "log4j-slf4j2-impl" if slf4j.version.startswith("2.") else "log4j-slf4j-impl"
    return [Coordinate(log4j, binding, api.version)]


def kafka_broker_classpath(*, cache_dir: Path | None = None, force: bool = False) -> list[Path]:
    """Jars of the Kafka broker (``kafka_<scala>:<kafka>`` + runtime deps + log4j2 SLF4J binding), cached."""
    v = versions.jvm_versions()
    root = Coordinate("org.apache.kafka", f"kafka_{v.kafka_scala}", v.kafka)
    name = kafka_set_name()

    def resolve() -> tuple[list[ResolvedArtifact], list[ResolvedArtifact], dict[str, object]]:
        first = jars.maven_resolve([root], set_name=name)
        extra = _kafka_logging_companions(first)
        if not extra:
            return first, [], {"root": str(root)}
        return (
            jars.maven_resolve([root, *extra], set_name=name),
            [],
            {"root": str(root), "added": list(map(str, extra))},
        )

    return jars.materialize(name, resolve, cache_dir=cache_dir, force=force)


ARTIFACT_SETS: dict[str, Callable[..., list[Path]]] = {**jars.ARTIFACT_SETS, "kafka": kafka_broker_classpath}


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m devtools.broker_jars") -> int:
    return jars.main(argv, prog=prog, artifact_sets=ARTIFACT_SETS)


if __name__ == "__main__":
    sys.exit(main())
