"""Our dead letters' KIP-1034 header names (``connectors.output.KIP1034_HEADERS``) are Kafka Streams' own: the
``HEADER_ERRORS_*`` constants of ``org.apache.kafka.streams.errors.internals.ExceptionHandlerUtils``, read with
``javap -constants`` from the kafka-streams jar Maven resolves (:func:`connectors.jars.maven_resolve`, the jar
alone). KIP-1034 (the dead-letter queue) first shipped in Kafka 4.2.0: the Kafka the project pins for the broker
and the oracle (``connectors.pins.KAFKA``) may predate it, so the check reads the release named here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from connectors.jars import Coordinate, maven_resolve, require_tool
from connectors.output import KIP1034_HEADERS

pytestmark = pytest.mark.conformance

#: the Kafka Streams release whose constants ours are compared with
KAFKA_STREAMS = "4.2.2"
CLASS = "org.apache.kafka.streams.errors.internals.ExceptionHandlerUtils"
#: Kafka Streams' constant for each of our headers, in KIP1034_HEADERS' order
CONSTANTS = (
    "HEADER_ERRORS_EXCEPTION_NAME",
    "HEADER_ERRORS_EXCEPTION_MESSAGE_NAME",
    "HEADER_ERRORS_STACKTRACE_NAME",
    "HEADER_ERRORS_TOPIC_NAME",
    "HEADER_ERRORS_PARTITION_NAME",
    "HEADER_ERRORS_OFFSET_NAME",
)
_CONSTANT = re.compile(r'public static final java\.lang\.String (\w+) = "([^"]*)";')


def string_constants(jar: Path, class_name: str) -> dict[str, str]:
    """The ``public static final String`` constants of ``class_name`` in ``jar``, as ``javap -constants`` shows
    them."""
    javap = require_tool("javap", "Install a JDK 17+ (e.g. the Debian package openjdk-17-jdk-headless).")
    out = subprocess.run(
        [javap, "-constants", "-cp", str(jar), class_name], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    return dict(_CONSTANT.findall(out))


def test_our_kip1034_header_names_are_kafka_streams_constants() -> None:
    (streams,) = [
        a
        for a in maven_resolve(
            [Coordinate("org.apache.kafka", "kafka-streams", KAFKA_STREAMS, exclusions=(("*", "*"),))],
            set_name="kip1034-check",
        )
        if a.artifact == "kafka-streams"
    ]
    theirs = string_constants(Path(streams.path), CLASS)
    assert {name for name in theirs if name.startswith("HEADER_ERRORS_")} == set(CONSTANTS), theirs
    assert tuple(theirs[name] for name in CONSTANTS) == KIP1034_HEADERS
