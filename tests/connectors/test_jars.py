"""Unit tests of connectors.jars and connectors.versions (no Maven, no JVM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors import jars, versions


def test_pinned_versions_are_read_from_pyproject() -> None:
    v = versions.jvm_versions()
    assert v.kafka.split(".")[0] == "4"
    assert v.kafka_scala == "2.13"


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


def test_second_resolution_comes_from_cache_without_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m2 = tmp_path / "m2"
    m2.mkdir()
    calls: list[list[str]] = []

    def fake_resolve(coordinates, *, set_name="resolve"):  # type: ignore[no-untyped-def]
        calls.append([str(c) for c in coordinates])
        out = []
        for name, group, artifact, version in [
            ("kafka_2.13-4.1.1.jar", "org.apache.kafka", "kafka_2.13", "4.1.1"),
            ("log4j-api-2.24.3.jar", "org.apache.logging.log4j", "log4j-api", "2.24.3"),
            ("slf4j-api-1.7.36.jar", "org.slf4j", "slf4j-api", "1.7.36"),
        ]:
            (m2 / name).write_bytes(b"jar")
            out.append(jars.ResolvedArtifact(group, artifact, "jar", None, version, "runtime", str(m2 / name)))
        return out

    monkeypatch.setattr(jars, "maven_resolve", fake_resolve)
    cache = tmp_path / "cache"
    first = jars.kafka_broker_classpath(cache_dir=cache)
    assert [p.name for p in first][:1] == ["kafka_2.13-4.1.1.jar"]
    assert all(p.is_file() and p.parent.parent == cache for p in first)
    # first pass + second pass with the log4j2 SLF4J binding added
    assert len(calls) == 2 and any("log4j-slf4j-impl:2.24.3" in c for c in calls[1])
    assert jars.kafka_broker_classpath(cache_dir=cache) == first
    assert len(calls) == 2, "a cached artifact set must not run Maven again"
    first[0].unlink()  # a damaged cache is resolved again
    jars.kafka_broker_classpath(cache_dir=cache)
    assert len(calls) == 4


def test_missing_maven_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(jars.JarResolutionError, match="'java' was not found"):
        jars.maven_executable()
