"""Pinned JVM artifact versions and the versions of the installed pyspark.

JVM versions are kept in exactly one place, :mod:`connectors.pins` (a module of the installed package, so a wheel
installed outside the repository knows them). Spark's version is not repeated there: it is whatever pyspark is
installed (pinned in the ``service`` extra), and its Scala version is read from the jars the pyspark package ships.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from connectors import pins

_SCALA_LIBRARY_RE = re.compile(r"^scala-library-(\d+\.\d+)\.[\w.-]+\.jar$")
_SPARK_CORE_RE = re.compile(r"^spark-core_(\d+\.\d+)-[\w.-]+\.jar$")


class VersionError(RuntimeError):
    """A version could not be determined (pyspark not installed, no Scala jar in pyspark, ...)."""


@dataclass(frozen=True)
class JvmVersions:
    """The pinned JVM versions (see :mod:`connectors.pins` for what each one is)."""

    kafka: str
    kafka_scala: str
    spark_kafka_connector: str | None = None
    spark_kafka_token_provider: str | None = None


@dataclass(frozen=True)
class SparkVersions:
    """The installed pyspark: its version, Scala binary version and bundled jar folder."""

    spark: str
    scala: str
    jars_dir: Path


def jvm_versions() -> JvmVersions:
    """The pinned JVM versions (from :mod:`connectors.pins`)."""
    return JvmVersions(
        kafka=pins.KAFKA,
        kafka_scala=pins.KAFKA_SCALA,
        spark_kafka_connector=pins.SPARK_KAFKA_CONNECTOR or None,
        spark_kafka_token_provider=pins.SPARK_KAFKA_TOKEN_PROVIDER or None,
    )


@functools.cache
def spark_versions() -> SparkVersions:
    """Version, Scala binary version and jar folder of the installed pyspark, read from its distribution's metadata
    and its package folder (pyspark is not imported: only :mod:`service.spark` imports it)."""
    try:
        spark_version = importlib.metadata.version("pyspark")
        spec = importlib.util.find_spec("pyspark")
    except importlib.metadata.PackageNotFoundError as e:
        raise VersionError("pyspark is not installed; install the project's 'service' extra") from e
    if spec is None or not spec.submodule_search_locations:
        raise VersionError("pyspark is not installed; install the project's 'service' extra")
    jars_dir = Path(next(iter(spec.submodule_search_locations))).resolve() / "jars"
    if not jars_dir.is_dir():
        raise VersionError(f"pyspark at {jars_dir.parent} has no jars/ folder")
    scala = None
    for name in sorted(p.name for p in jars_dir.iterdir()):
        m = _SCALA_LIBRARY_RE.match(name) or _SPARK_CORE_RE.match(name)
        if m:
            scala = m.group(1)
            break
    if scala is None:
        raise VersionError(f"cannot tell pyspark's Scala version: no scala-library or spark-core jar in {jars_dir}")
    return SparkVersions(spark=spark_version, scala=scala, jars_dir=jars_dir)


def spark_kafka_connector_version() -> str:
    """Version of ``spark-sql-kafka-0-10`` to resolve: the pyspark version unless pinned in :mod:`connectors.pins`."""
    override = jvm_versions().spark_kafka_connector
    return override or spark_versions().spark


if __name__ == "__main__":  # pragma: no cover - diagnostic
    j, s = jvm_versions(), spark_versions()
    print(f"kafka={j.kafka} kafka_scala={j.kafka_scala}")
    print(f"pyspark={s.spark} scala={s.scala} jars={s.jars_dir}")
    print(f"spark_kafka_connector={spark_kafka_connector_version()} token_provider={j.spark_kafka_token_provider}")
