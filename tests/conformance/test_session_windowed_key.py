"""Our ``windowed`` changelog key for session windows (``connectors.output.session_windowed_key``) is what Kafka
Streams' ``WindowedSerdes.sessionWindowedSerdeFrom(String.class)`` writes and reads: a round trip through the real
serde of the pinned Kafka Streams (``connectors.pins.KAFKA``, jars resolved by Maven into ``~/.m2``), run as a
single-file Java program."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from connectors.jars import Coordinate, maven_resolve, require_tool
from connectors.output import parse_session_windowed_key, session_windowed_key
from connectors.pins import KAFKA

pytestmark = pytest.mark.conformance

#: reads our bytes (hex) and prints key (hex), start, end; writes a Windowed<String>(key, SessionWindow(start, end))
#: and prints its bytes (hex). Keys travel as hex so no platform encoding touches them.
JAVA = """
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.kstream.internals.SessionWindow;

public class SessionKeys {
    public static void main(String[] a) {
        HexFormat hex = HexFormat.of();
        Serde<Windowed<String>> serde = WindowedSerdes.sessionWindowedSerdeFrom(String.class);
        Windowed<String> w = serde.deserializer().deserialize("t", hex.parseHex(a[0]));
        System.out.println(hex.formatHex(w.key().getBytes(StandardCharsets.UTF_8)) + " " + w.window().start() + " "
            + w.window().end());
        String key = new String(hex.parseHex(a[1]), StandardCharsets.UTF_8);
        Windowed<String> mine = new Windowed<>(key, new SessionWindow(Long.parseLong(a[2]), Long.parseLong(a[3])));
        System.out.println(hex.formatHex(serde.serializer().serialize("t", mine)));
    }
}
"""


def test_session_windowed_key_round_trips_through_kafka_streams(tmp_path: Path) -> None:
    java = require_tool("java", "Install a JDK 17+ (e.g. the Debian package openjdk-17-jdk-headless).")
    jars = maven_resolve([Coordinate("org.apache.kafka", "kafka-streams", KAFKA)], set_name="session-key-check")
    classpath = ":".join(a.path for a in jars if a.artifact in ("kafka-streams", "kafka-clients", "slf4j-api"))
    source = tmp_path / "SessionKeys.java"
    source.write_text(JAVA, encoding="utf-8")
    key, start, end = "acct-é", 1_764_000_000_000, 1_764_000_299_999
    ours = session_windowed_key(key, start, end)
    run = subprocess.run(
        [java, "-cp", classpath, str(source), ours.hex(), key.encode().hex(), str(start), str(end)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    read, written = run.stdout.split("\n")[:2]
    assert read.split() == [key.encode().hex(), str(start), str(end)]
    assert bytes.fromhex(written) == ours
    assert parse_session_windowed_key(bytes.fromhex(written)) == (key, start, end)
