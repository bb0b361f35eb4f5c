"""End to end on the real broker and Spark (issue 29): poison records of every kind mixed into good ones across
partitions. The service keeps running, the poison records are on the dead-letter topic with their reasons, every
good window is exact, and a restart from the same checkpoint changes nothing (more input after it lands exactly
as if there had been no restart; no dead letter is written twice). The first instance ends in a crash (SIGKILL),
and a key whose sum passes int64 stays exact across it (its window gets one more record after the restart)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from connectors.serde import MAX_TIMESTAMP_MS, MAX_VALUE_BYTES, InputSpec, aggregation_fields
from tests.service.events import Event, changelog_final, payment_events, replay
from tests.service.harness import ServiceProcess, consume_all, produce, wait_until_committed
from tests.service.test_e2e import AGGS, GRACE, PARTITIONS, TD, service_args

pytestmark = pytest.mark.integration

BIG_KEY = b"acct-big"
BIG_AMOUNTS = (2**62, 2**62 + 7)
BIG_TOPIC_CONFIG = {"retention.ms": "-1", "max.message.bytes": str(4 * MAX_VALUE_BYTES)}


def _poison(ts: int) -> list[tuple[bytes, str]]:
    """(value, expected reason): one of each kind the decoder must catch before the engine sees it."""
    return [
        (json.dumps({"amount": 10**30, "ts": ts}).encode(), "number-out-of-range"),
        (json.dumps({"amount": -(2**63) - 1, "ts": ts}).encode(), "number-out-of-range"),
        (json.dumps({"amount": 5, "ts": 10**19}).encode(), "timestamp-out-of-range"),
        (json.dumps({"amount": 5, "ts": MAX_TIMESTAMP_MS + 1}).encode(), "timestamp-out-of-range"),
        (b'{"amount": NaN, "ts": %d}' % ts, "non-finite-number"),
        (b'{"amount": -Infinity, "ts": %d}' % ts, "non-finite-number"),
        (b'{"amount": 1e999, "ts": %d}' % ts, "non-finite-number"),
        (b'{"amount": 1, "ts": %d, "x": ' % ts + b"[" * 50_000 + b"]" * 50_000 + b"}", "value-too-deep"),
        (json.dumps({"amount": [1, 2], "ts": ts}).encode(), "schema-mismatch"),
        (json.dumps({"amount": 5, "ts": -7}).encode(), "invalid-timestamp"),
        (b"\xff\xfe not json", "undecodable-value"),
    ]


def _produce_large(bootstrap: str, topic: str, events: list[Event]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 4 * MAX_VALUE_BYTES})
    for ev in events:
        p.produce(topic, key=ev.key, value=ev.value, partition=ev.partition, timestamp=ev.timestamp)
    assert p.flush(60) == 0


def test_poison_records_are_dead_letters_and_the_good_windows_stay_exact_across_a_restart(
    kafka_bootstrap, make_topic, tmp_path
):
    topics = {
        "in": make_topic(PARTITIONS, config=BIG_TOPIC_CONFIG, prefix="in"),
        "out": make_topic(PARTITIONS, config={"cleanup.policy": "compact"}, prefix="out"),
        "late": make_topic(PARTITIONS, prefix="late"),
        "dlq": make_topic(PARTITIONS, prefix="dlq"),
    }
    events = payment_events(
        1200, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=29, time_in_value=True, bad_fraction=0.0
    )
    mixed: list[Event] = []
    poison_at = {len(events) * (i + 1) // 40 for i in range(36)}
    kinds = _poison(0)
    for i, ev in enumerate(events):  # poison between good records, in every partition
        mixed.append(ev)
        if i in poison_at:
            value, reason = kinds[len(mixed) % len(kinds)]
            value = value.replace(b'"ts": 0', b'"ts": %d' % ev.timestamp)
            mixed.append(Event(ev.partition, ev.key, value, ev.timestamp, f"bad:{reason}"))
    big_ts = events[-1].timestamp
    for i, amount in enumerate(BIG_AMOUNTS):  # a sum beyond int64: exact across the crash and restart
        mixed.append(Event(1, BIG_KEY, json.dumps({"amount": amount, "ts": big_ts + i}).encode(), big_ts + i))
    for p in range(PARTITIONS):  # every kind in every partition
        for value, reason in _poison(events[-1].timestamp):
            mixed.append(Event(p, b"acct-poison", value, events[-1].timestamp, f"bad:{reason}"))
    large = [
        Event(
            p,
            b"acct-0",
            b'{"amount": 1, "ts": 5, "pad": "' + b"x" * MAX_VALUE_BYTES + b'"}',
            events[-1].timestamp,
            "bad:value-too-large",
        )
        for p in range(PARTITIONS)
    ]

    ends = produce(kafka_bootstrap, topics["in"], mixed)
    _produce_large(kafka_bootstrap, topics["in"], large)
    for p in range(PARTITIONS):
        ends[p] += 1
    all_events = mixed + large

    ck = tmp_path / "checkpoint"
    args = service_args(
        kafka_bootstrap,
        topics,
        ck,
        "--timestamp-field",
        "ts",
        "--changelog-format",
        "json",
        "--changelog-key-format",
        "json",
        "--max-offsets-per-trigger",
        "400",
    )
    svc = ServiceProcess(args, tmp_path / "first.log").start()
    try:
        wait_until_committed(ck, topics["in"], ends, svc)
        assert svc.alive()
    finally:
        svc.kill()  # a crash (SIGKILL to driver, JVM and workers), not a graceful stop: the restart resumes

    spec = InputSpec("json", "", "ts", aggregation_fields(AGGS))
    exp = replay(all_events, td=TD, grace=GRACE, aggregations=AGGS, emit="update", spec=spec)
    wanted = {
        "number-out-of-range",
        "timestamp-out-of-range",
        "non-finite-number",
        "value-too-deep",
        "value-too-large",
        "schema-mismatch",
        "invalid-timestamp",
        "undecodable-value",
    }
    assert {(p, r) for (p, _o), r in exp.dead.items()} >= {(p, r) for p in range(PARTITIONS) for r in wanted}
    dead = consume_all(kafka_bootstrap, topics["dlq"])
    assert {
        (int(r.headers["partition"]), int(r.headers["offset"])): r.headers["error"].decode() for r in dead
    } == exp.dead
    assert len(dead) == len(exp.dead)  # each once
    for r in dead:
        assert r.headers["__streams.errors.topic"].decode() == topics["in"]
        assert r.headers["__streams.errors.offset"] == r.headers["offset"]
        if r.headers["error"] == b"value-too-large":
            assert r.value is None
    assert changelog_final((r.key, r.value) for r in consume_all(kafka_bootstrap, topics["out"])) == exp.final
    assert "Traceback" not in (tmp_path / "first.log").read_text()

    # restart on the same checkpoint with more input: exactly as if there had been no restart
    more = payment_events(
        300,
        keys=12,
        partitions=PARTITIONS,
        td=TD,
        grace=GRACE,
        seed=30,
        time_in_value=True,
        bad_fraction=0.0,
        base_ts=events[-1].timestamp + 1,
    )
    more += [
        Event(p, b"acct-poison", v, more[-1].timestamp, f"bad:{r}")
        for p in range(PARTITIONS)
        for v, r in _poison(more[-1].timestamp)[:3]
    ]
    more.insert(0, Event(1, BIG_KEY, json.dumps({"amount": 1, "ts": big_ts + 2}).encode(), big_ts + 2))
    more_ends = produce(kafka_bootstrap, topics["in"], more)
    second = ServiceProcess(args, tmp_path / "second.log").start()
    try:
        wait_until_committed(ck, topics["in"], {p: ends[p] + more_ends.get(p, 0) for p in ends}, second)
    finally:
        rc = second.stop()
    assert rc == 0, second.tail()
    exp2 = replay(all_events + more, td=TD, grace=GRACE, aggregations=AGGS, emit="update", spec=spec)
    dead2 = consume_all(kafka_bootstrap, topics["dlq"])
    written = Counter((int(r.headers["partition"]), int(r.headers["offset"])) for r in dead2)
    assert set(written) == set(exp2.dead) and set(written.values()) == {1}  # no dead letter written twice
    assert {
        (int(r.headers["partition"]), int(r.headers["offset"])): r.headers["error"].decode() for r in dead2
    } == exp2.dead
    final2 = changelog_final((r.key, r.value) for r in consume_all(kafka_bootstrap, topics["out"]))
    assert final2 == exp2.final
    big = {n: aggs["sum_amount"] for (key, _s, _e), (aggs, n, _t) in final2.items() if key == BIG_KEY.decode()}
    assert big[3] == sum(BIG_AMOUNTS) + 1 and type(big[3]) is int, big  # 2**63 + 8: state restored after the crash
