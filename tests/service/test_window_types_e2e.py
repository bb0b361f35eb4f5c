"""End to end with the real broker and Spark for the window family (issue 31): tumbling, hopping and session
windows through ``python -m service run``. The last value of every window on the compacted changelog (what
compaction converges to: the last record per changelog key, a tombstone removing its key) equals the engine's
processor of the type fed each input partition; the late and dead-letter topics are exact. Heavy: run one at a
time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connectors.output import parse_session_windowed_key, parse_windowed_key
from tests.service.events import payment_events, replay
from tests.service.harness import ServiceProcess, consume_all, produce, run_until_committed
from tests.service.test_e2e import AGGS, GRACE, PARTITIONS, TD, check_late_and_dead, service_args, topics
from windowstore import WindowDefinition

pytestmark = pytest.mark.integration

__all__ = ["topics"]  # the fixture, shared with test_e2e


def _run(bootstrap: str, topics: dict[str, str], tmp_path: Path, events: list, window: tuple[str, ...], *extra: str):
    ends = produce(bootstrap, topics["in"], events)
    ck = tmp_path / "checkpoint"
    args = service_args(bootstrap, topics, ck, "--max-offsets-per-trigger", "700", *extra, window=window)
    batch = run_until_committed(args, tmp_path / "service.log", ck, topics["in"], ends)
    assert batch >= 2  # the windows crossed micro-batches
    assert "Traceback" not in (tmp_path / "service.log").read_text()
    return ck


def _last_per_key(records) -> dict[bytes, bytes]:
    """What a compacted topic converges to: the last value of each key, a key whose last record is a tombstone
    (null value) gone."""
    last = {r.key: r.value for r in records}
    return {k: v for k, v in last.items() if v is not None}


def test_tumbling_end_to_end(kafka_bootstrap, topics, tmp_path):
    """Tumbling windows, JSON keys and values, emit update; then a restart with hopping windows on the same
    checkpoint is refused before Spark, in one line naming both definitions."""
    events = payment_events(2500, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=31)
    ck = _run(
        kafka_bootstrap,
        topics,
        tmp_path,
        events,
        ("--window", "tumbling", "--window-size", f"{TD}ms"),
        "--changelog-format",
        "json",
        "--changelog-key-format",
        "json",
    )
    exp = replay(events, grace=GRACE, aggregations=AGGS, emit="update", window=WindowDefinition("tumbling", TD))
    final = {}
    for key, value in _last_per_key(consume_all(kafka_bootstrap, topics["out"])).items():
        k, v = json.loads(key), json.loads(value)
        window = (k["key"], k["window_start"], k["window_end"])
        assert window == (v["key"], v["window_start"], v["window_end"])
        assert k["window_end"] - k["window_start"] == TD  # Window.end(): exclusive
        final[window] = (v["aggregates"], v["record_count"], v["max_timestamp"])
    assert final == exp.final and len(final) > 100
    late, dead = check_late_and_dead(kafka_bootstrap, topics, exp, events)
    assert exp.aggregated + len(late) + len(dead) == len(events) and late

    hopping = ("--window", "hopping", "--window-size", f"{TD}ms", "--advance", "250ms")
    refused = ServiceProcess(service_args(kafka_bootstrap, topics, ck, window=hopping), tmp_path / "refused.log")
    refused.start()
    assert refused.proc is not None and refused.proc.wait(timeout=120) == 2
    lines = refused.tail().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid setting window"), lines
    assert f"tumbling size_ms={TD}" in lines[0] and f"hopping size_ms={TD} advance_ms=250" in lines[0]


def test_hopping_end_to_end(kafka_bootstrap, topics, tmp_path):
    """Hopping windows (an advance that does not divide the size), Kafka Streams' windowed keys, JSON values,
    emit close: every window once, with its final value."""
    size, advance = TD, 300
    events = payment_events(2500, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=32)
    _run(
        kafka_bootstrap,
        topics,
        tmp_path,
        events,
        ("--window", "hopping", "--window-size", f"{size}ms", "--advance", f"{advance}ms"),
        "--changelog-format",
        "json",
        "--changelog-key-format",
        "windowed",
        "--emit",
        "close",
    )
    window = WindowDefinition("hopping", size, advance)
    exp = replay(events, grace=GRACE, aggregations=AGGS, emit="close", window=window)
    records = consume_all(kafka_bootstrap, topics["out"])
    final = {}
    for key, value in _last_per_key(records).items():
        k, start = parse_windowed_key(key)  # TimeWindowedDeserializer(window size): [start, start + size)
        v = json.loads(value)
        assert (v["key"], v["window_start"], v["window_end"]) == (k, start, start + size)
        final[(k, start, start + size)] = (v["aggregates"], v["record_count"], v["max_timestamp"])
    assert final == exp.final and len(final) > 100
    assert len(records) == len(final)  # emit close: each window once
    late, dead = check_late_and_dead(kafka_bootstrap, topics, exp, events)
    assert exp.aggregated + len(late) + len(dead) == len(events) and late


def test_session_end_to_end(kafka_bootstrap, topics, tmp_path):
    """Session windows, Kafka Streams' session-windowed keys, JSON values, emit every: merges and extensions
    forward tombstones, so the compacted changelog holds exactly the live sessions with their final values.

    ``every``, not ``update``: under the record cache, which tombstones go out depends on what the store under it
    holds at each flush (S7: a session never flushed gets no tombstone; the store's stream time moves on flush), so
    update mode's output depends on the micro-batch boundaries Spark picks, which the reference cannot know; the
    property test tests/windowstore/test_session_task_state.py covers update mode across batches."""
    gap = 150
    events = payment_events(2500, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=33)
    _run(
        kafka_bootstrap,
        topics,
        tmp_path,
        events,
        ("--window", "session", "--gap", f"{gap}ms"),
        "--changelog-format",
        "json",
        "--changelog-key-format",
        "windowed",
        "--emit",
        "every",
    )
    exp = replay(events, grace=GRACE, aggregations=AGGS, emit="every", window=WindowDefinition("session", gap_ms=gap))
    records = consume_all(kafka_bootstrap, topics["out"])
    tombstones = [r for r in records if r.value is None]
    assert tombstones, "merges and extensions replace sessions"
    final = {}
    for key, value in _last_per_key(records).items():
        k, start, end = parse_session_windowed_key(key)  # SessionWindowedDeserializer: [start, end]
        v = json.loads(value)
        assert (v["key"], v["window_start"], v["window_end"]) == (k, start, end)
        final[(k, start, end)] = (v["aggregates"], v["record_count"], v["max_timestamp"])
    assert final == exp.final and len(final) > 50
    late, dead = check_late_and_dead(kafka_bootstrap, topics, exp, events)
    assert exp.aggregated + len(late) + len(dead) == len(events) and late
