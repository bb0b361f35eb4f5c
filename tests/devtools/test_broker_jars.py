"""Unit tests of devtools.broker_jars: the broker's jar set through connectors.jars' cache (no Maven, no JVM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors import jars
from devtools import broker_jars


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
    first = broker_jars.kafka_broker_classpath(cache_dir=cache)
    assert [p.name for p in first][:1] == ["kafka_2.13-4.1.1.jar"]
    assert all(p.is_file() and p.parent.parent == cache for p in first)
    # first pass + second pass with the log4j2 SLF4J binding added
    assert len(calls) == 2 and any("log4j-slf4j-impl:2.24.3" in c for c in calls[1])
    assert broker_jars.kafka_broker_classpath(cache_dir=cache) == first
    assert len(calls) == 2, "a cached artifact set must not run Maven again"
    first[0].unlink()  # a damaged cache is resolved again
    broker_jars.kafka_broker_classpath(cache_dir=cache)
    assert len(calls) == 4
