"""Unit tests of connectors.jars and connectors.versions (no Maven, no JVM)."""

from __future__ import annotations

import pytest

from connectors import jars, pins, versions


def test_pinned_versions_come_from_the_installed_package() -> None:
    v = versions.jvm_versions()
    assert v.kafka.split(".")[0] == "4"
    assert v.kafka_scala == "2.13"
    assert (v.kafka, v.spark_kafka_connector) == (pins.KAFKA, pins.SPARK_KAFKA_CONNECTOR)


def test_pom_lists_the_coordinates() -> None:
    pom = jars._render_pom("set-x", [jars.Coordinate("g", "a", "1", exclusions=(("g2", "a2"),))])
    assert "<artifactId>set-x</artifactId>" in pom
    assert "<groupId>g</groupId><artifactId>a</artifactId><version>1</version>" in pom
    assert "<exclusion><groupId>g2</groupId><artifactId>a2</artifactId></exclusion>" in pom


def test_pyspark_scala_version_comes_from_its_jars() -> None:
    pytest.importorskip("pyspark")
    s = versions.spark_versions()
    import pyspark

    assert s.spark == pyspark.__version__
    assert list(s.jars_dir.glob(f"scala-library-{s.scala}.*.jar"))


def test_parse_dependency_list() -> None:
    text = """
The following files have been resolved:
   org.apache.kafka:kafka_2.13:jar:4.1.1:compile:/m2/kafka_2.13-4.1.1.jar
   com.github.luben:zstd-jni:jar:1.5.6-10:runtime:/m2/zstd-jni-1.5.6-10.jar -- module com.github.luben.zstd_jni
   io.netty:netty-tcnative:jar:linux-x86_64:2.0.1:runtime:/m2/netty-tcnative-2.0.1-linux-x86_64.jar
"""
    arts = jars.parse_dependency_list(text)
    assert [(a.artifact, a.version, a.classifier, a.scope) for a in arts] == [
        ("kafka_2.13", "4.1.1", None, "compile"),
        ("zstd-jni", "1.5.6-10", None, "runtime"),
        ("netty-tcnative", "2.0.1", "linux-x86_64", "runtime"),
    ]
    assert arts[1].path == "/m2/zstd-jni-1.5.6-10.jar"


def test_shipped_by_pyspark_matches_artifact_id_not_prefix() -> None:
    shipped = ["kafka-clients-3.9.0.jar", "spark-sql_2.13-4.3.0.jar", "lz4-java-1.11.0.jar"]
    assert jars._shipped_by_pyspark("lz4-java", shipped) == "lz4-java-1.11.0.jar"
    assert jars._shipped_by_pyspark("spark-sql", shipped) is None  # spark-sql_2.13 is another artifact
    assert jars._shipped_by_pyspark("kafka", shipped) is None


def test_missing_maven_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(jars.JarResolutionError, match="'java' was not found"):
        jars.maven_executable()
