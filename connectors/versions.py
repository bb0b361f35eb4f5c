"""Pinned JVM artifact versions and the versions of the installed pyspark.

The project keeps JVM versions in exactly one place: the ``[tool.slidingwindow.versions]`` table of
``pyproject.toml``. Spark's version is not repeated there: it is whatever pyspark is installed (pinned in the
``service`` extra), and its Scala version is read from the jars the pyspark package ships.

Keys of ``[tool.slidingwindow.versions]``:

``kafka``
    Apache Kafka broker version (``org.apache.kafka:kafka_<kafka_scala>``), also Kafka Streams for conformance tests.
``kafka_scala``
    Scala binary version of the Kafka broker artifact.
``spark_kafka_connector`` (optional)
    Version of ``org.apache.spark:spark-sql-kafka-0-10_<scala>`` to use when Maven Central has no connector release
    for the installed pyspark version. Without it the connector version is the pyspark version.
``spark_kafka_token_provider`` (optional)
    Version of ``org.apache.spark:spark-token-provider-kafka-0-10_<scala>`` to use instead of the one the connector
    depends on (for when that one is missing from Maven Central).
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PROJECT_ROOT: Path = Path(__file__).resolve().parent.parent
PYPROJECT: Path = PROJECT_ROOT / "pyproject.toml"

_SCALA_LIBRARY_RE = re.compile(r"^scala-library-(\d+\.\d+)\.[\w.-]+\.jar$")
_SPARK_CORE_RE = re.compile(r"^spark-core_(\d+\.\d+)-[\w.-]+\.jar$")


class VersionError(RuntimeError):
    """A version could not be determined (missing pyproject key, pyspark not installed, ...)."""


@dataclass(frozen=True)
class JvmVersions:
    """The ``[tool.slidingwindow.versions]`` table of pyproject.toml."""

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


@functools.cache
def jvm_versions(pyproject: Path = PYPROJECT) -> JvmVersions:
    """Read the pinned JVM versions from ``pyproject.toml``."""
    try:
        with open(pyproject, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError as e:
        raise VersionError(f"{pyproject} not found (connectors.versions expects a source checkout)") from e
    table = data.get("tool", {}).get("slidingwindow", {}).get("versions")
    if not isinstance(table, dict):
        raise VersionError(f"{pyproject} has no [tool.slidingwindow.versions] table")
    missing = [k for k in ("kafka", "kafka_scala") if not isinstance(table.get(k), str)]
    if missing:
        raise VersionError(f"[tool.slidingwindow.versions] in {pyproject} lacks {', '.join(missing)}")
    connector = table.get("spark_kafka_connector")
    token_provider = table.get("spark_kafka_token_provider")
    return JvmVersions(
        kafka=table["kafka"],
        kafka_scala=table["kafka_scala"],
        spark_kafka_connector=str(connector) if connector else None,
        spark_kafka_token_provider=str(token_provider) if token_provider else None,
    )


@functools.cache
def spark_versions() -> SparkVersions:
    """Version, Scala binary version and jar folder of the installed pyspark (imports pyspark, starts no JVM)."""
    try:
        from pyspark.version import __version__ as spark_version
    except ImportError as e:
        raise VersionError("pyspark is not installed; install the project's 'service' extra") from e
    import pyspark

    jars_dir = Path(pyspark.__file__).resolve().parent / "jars"
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
    """Version of ``spark-sql-kafka-0-10`` to resolve: the pyspark version unless pyproject overrides it."""
    override = jvm_versions().spark_kafka_connector
    return override or spark_versions().spark


if __name__ == "__main__":  # pragma: no cover - diagnostic
    j, s = jvm_versions(), spark_versions()
    print(f"kafka={j.kafka} kafka_scala={j.kafka_scala}")
    print(f"pyspark={s.spark} scala={s.scala} jars={s.jars_dir}")
    print(f"spark_kafka_connector={spark_kafka_connector_version()} token_provider={j.spark_kafka_token_provider}")
