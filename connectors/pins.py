"""The one place for JVM artifact versions (Python packages are pinned in ``pyproject.toml``'s extras).

This module ships inside the wheel, so an installed product knows its versions without the source tree
(:mod:`connectors.versions` reads it; nothing reads ``pyproject.toml`` at run time).

``KAFKA`` / ``KAFKA_SCALA``
    Apache Kafka broker (``org.apache.kafka:kafka_<KAFKA_SCALA>:<KAFKA>``) for the local broker, and the Kafka
    Streams version of the conformance oracle and the Kafka Streams bench app.
``SPARK_KAFKA_CONNECTOR`` / ``SPARK_KAFKA_TOKEN_PROVIDER``
    Spark's Kafka connector is ``org.apache.spark:spark-sql-kafka-0-10_<pyspark's Scala>:<pyspark's version>``
    unless pinned here. Maven Central (as reachable from here, checked 2026-11) has no Spark 4.3.0 or 4.2.1
    artifacts and no ``spark-token-provider-kafka-0-10`` after 4.1.0-preview1, so both are pinned; tested with
    pyspark 4.3.0 (batch read, streaming read, write; token provider 4.0.0 works too). Set both to ``None`` once
    the pyspark version resolves.
"""

from __future__ import annotations

KAFKA: str = "4.1.1"
KAFKA_SCALA: str = "2.13"
SPARK_KAFKA_CONNECTOR: str | None = "4.2.0"
SPARK_KAFKA_TOKEN_PROVIDER: str | None = "4.1.0-preview1"
