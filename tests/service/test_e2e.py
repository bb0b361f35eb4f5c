"""End to end with the real broker and Spark: ``python -m service run`` reads Kafka, writes the changelog, late
and dead-letter topics; the results must equal a windowstore replay of every input partition."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from fastavro import parse_schema

from connectors.avro import decode_body, encode, split_wire
from connectors.output import parse_windowed_key
from connectors.schema_registry import SchemaRegistry
from connectors.serde import InputSpec, aggregation_fields
from service.settings import Settings
from tests.service.events import Event, changelog_final, payment_events, replay
from tests.service.harness import (
    ServiceProcess,
    committed_offsets,
    consume_all,
    produce,
    run_until_committed,
    wait_until_committed,
)
from tests.service.schema_registry_double import SchemaRegistryDouble

pytestmark = pytest.mark.integration

AGGS = "count,sum:amount,max:amount"
TD, GRACE = 1000, 300
PARTITIONS = 3
OTHER_SINK = "spark" if Settings().sink == "direct" else "direct"


def service_args(
    bootstrap: str,
    topics: dict[str, str],
    checkpoint: Path,
    *extra: str,
    window: tuple[str, ...] = ("--time-difference", f"{TD}ms"),
) -> list[str]:
    """The service's flags for ``topics`` (sliding windows of ``TD`` unless ``window`` says otherwise)."""
    return [
        "--bootstrap-servers", bootstrap,
        "--input-topics", topics["in"],
        "--changelog-topic", topics["out"],
        "--late-topic", topics["late"],
        "--dead-letter-topic", topics["dlq"],
        "--aggregations", AGGS,
        *window,
        "--grace", f"{GRACE}ms",
        "--checkpoint-dir", str(checkpoint),
        "--trigger-interval", "0",
        "--state-partitions", "2",
        "--spark-master", "local[2]",
        "--metrics-port", "0",
        *extra,
    ]  # fmt: skip


@pytest.fixture
def topics(make_topic):
    return {
        "in": make_topic(PARTITIONS, config={"retention.ms": "-1"}, prefix="in"),
        "out": make_topic(PARTITIONS, config={"cleanup.policy": "compact"}, prefix="out"),
        "late": make_topic(PARTITIONS, prefix="late"),
        "dlq": make_topic(PARTITIONS, prefix="dlq"),
    }


def json_final(records):
    return changelog_final((r.key, r.value) for r in records)


def check_late_and_dead(bootstrap, topics, exp, events):
    by_part: dict[int, list] = {}
    for ev in events:
        by_part.setdefault(ev.partition, []).append(ev)
    late = consume_all(bootstrap, topics["late"])
    assert {(int(r.headers["partition"]), int(r.headers["offset"])) for r in late} == exp.late
    for r in late:
        ev = by_part[int(r.headers["partition"])][int(r.headers["offset"])]
        assert (r.key, r.value) == (ev.key, ev.value) and r.headers["reason"] == b"late"
        assert r.headers["topic"].decode() == topics["in"]
    dead = consume_all(bootstrap, topics["dlq"])
    assert {
        (int(r.headers["partition"]), int(r.headers["offset"])): r.headers["error"].decode() for r in dead
    } == exp.dead
    for r in dead:
        ev = by_part[int(r.headers["partition"])][int(r.headers["offset"])]
        assert (r.key, r.value) == (ev.key, ev.value) and r.headers["topic"].decode() == topics["in"]
    return late, dead


def run_json_update(bootstrap, topics, tmp_path, n_events, seed, *extra, while_running=None):
    """Kafka key + Kafka timestamp, JSON in and out, emit update, several micro-batches per partition: every
    output topic equals the replay. ``while_running``: called with the service once it has committed the input."""
    events = payment_events(n_events, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=seed)
    notes = Counter(e.note.split(":")[0] for e in events)
    assert all(notes[n] for n in ("ooo", "late", "dup", "bad")), notes
    ends = produce(bootstrap, topics["in"], events)
    ck = tmp_path / "checkpoint"
    args = service_args(
        bootstrap,
        topics,
        ck,
        "--changelog-format",
        "json",
        "--changelog-key-format",
        "json",
        "--max-offsets-per-trigger",
        "1000",
        *extra,
    )
    batch = run_until_committed(args, tmp_path / "service.log", ck, topics["in"], ends, while_running)
    assert batch >= 2  # the state crossed micro-batches

    exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="update")
    changelog = consume_all(bootstrap, topics["out"])
    assert json_final(changelog) == exp.final
    late, dead = check_late_and_dead(bootstrap, topics, exp, events)
    assert exp.aggregated + len(late) + len(dead) == len(events)
    log = (tmp_path / "service.log").read_text()
    assert "Traceback" not in log


def test_end_to_end_json_update(kafka_bootstrap, topics, tmp_path):
    """The default sink."""
    run_json_update(kafka_bootstrap, topics, tmp_path, 3000, 101)


def test_end_to_end_other_sink(kafka_bootstrap, topics, tmp_path):
    """The sink that is not the default (spark: Spark's Kafka sink; direct: the workers' producers), with one
    stateful task at a time (``task_cpus=2`` on this test's local master of 2 or more cores; 1 on a 1-core one)."""
    from service.spark.task_cpus import local_cores

    cpus = "2" if (local_cores("local[*]") or 1) >= 2 else "1"
    run_json_update(
        kafka_bootstrap,
        topics,
        tmp_path,
        1500,
        404,
        "--sink",
        OTHER_SINK,
        "--max-offsets-per-trigger",
        "500",
        "--task-cpus",
        cpus,
    )


def test_end_to_end_pysparks_own_workers(kafka_bootstrap, topics, tmp_path):
    """``fast_input=false``: pyspark's own daemon and workers hand the processor Rows, and convert the Rows it
    answers with for Spark's Kafka sink (dead letters and late records carry headers)."""
    run_json_update(
        kafka_bootstrap,
        topics,
        tmp_path,
        1500,
        606,
        "--fast-input",
        "false",
        "--sink",
        "spark",
        "--max-offsets-per-trigger",
        "500",
    )


def test_end_to_end_memory_limit_under_what_the_service_holds(kafka_bootstrap, topics, tmp_path):
    """``memory_limit`` below the JVM's and the Python processes' own memory: after every batch the workers drop
    every cached task (and say once that the limit is too low), so every batch restores its windows from the
    state store - and every output topic is still the replay's. And no process of the service loads pandas: not
    the Python driver (service.spark.driver_imports), nor the workers (service.spark.pandas_guard), which load
    pyarrow."""
    loaded: dict[str, list[tuple[bool, bool]]] = {}

    def look(svc: ServiceProcess) -> None:
        assert svc.proc is not None
        for pid, maps in svc.processes().items():
            kind = "driver" if pid == svc.proc.pid else "other"
            loaded.setdefault(kind, []).append(("/pandas/_libs/" in maps, "/pyarrow/" in maps))

    run_json_update(
        kafka_bootstrap,
        topics,
        tmp_path,
        1500,
        505,
        "--memory-limit",
        "512m",
        "--max-offsets-per-trigger",
        "500",
        while_running=look,
    )
    log = (tmp_path / "service.log").read_text()
    assert "over memory_limit (512 MiB)" in log
    assert not any(pandas for pandas, _ in loaded["driver"]), loaded
    assert not any(pandas for pandas, _ in loaded["other"]), loaded
    assert any(pyarrow for _, pyarrow in loaded["other"]), loaded  # the workers were looked at


def test_end_to_end_avro_every_fields(kafka_bootstrap, topics, tmp_path):
    """Avro (Schema Registry wire format) in and out, key and event time from value fields, Kafka Streams
    windowed keys, emit every: the changelog is exactly the uncached Kafka Streams sequence per partition."""
    schema = {
        "type": "record",
        "name": "Payment",
        "namespace": "demo",
        "fields": [
            {"name": "account", "type": ["null", "string"], "default": None},
            {"name": "amount", "type": ["null", "long", "string"], "default": None},
            {"name": "ts", "type": ["null", "long"], "default": None},
        ],
    }
    with SchemaRegistryDouble() as sr:
        reg = SchemaRegistry(sr.url)
        sid = reg.register(f"{topics['in']}-value", schema)
        parsed = parse_schema(schema)

        def enc(rec):
            return encode(
                sid, parsed, {"account": rec.get("account"), "amount": rec.get("amount"), "ts": rec.get("ts")}
            )

        kinds = ("undecodable", "missing-amount", "string-amount", "null-key", "negative-ts", "missing-ts")
        events = payment_events(
            2000,
            keys=12,
            partitions=PARTITIONS,
            td=TD,
            grace=GRACE,
            seed=202,
            key_in_value=True,
            time_in_value=True,
            encode=enc,
            bad_kinds=kinds,
        )
        # hand-made bad inputs: wrong magic byte, unknown schema id, truncated body, another schema's record
        other = {
            "type": "record",
            "name": "Refund",
            "fields": [{"name": "account", "type": "string"}, {"name": "ts", "type": "long"}],
        }
        other_id = reg.register(f"{topics['in']}-refund", other)
        ts0 = events[-1].timestamp
        good = enc({"account": "acct-1", "amount": 5, "ts": ts0})
        for p in range(PARTITIONS):
            events += [
                Event(p, None, b"\x01" + good[1:], ts0, "bad:magic"),
                Event(p, None, b"\x00\x00\x01\x86\x9f" + good[5:], ts0, "bad:unknown-schema"),
                Event(p, None, good[:-4], ts0, "bad:truncated"),
                Event(
                    p,
                    None,
                    encode(other_id, parse_schema(other), {"account": "acct-1", "ts": ts0}),
                    ts0,
                    "bad:other-schema",
                ),
            ]
        ends = produce(kafka_bootstrap, topics["in"], events)
        ck = tmp_path / "checkpoint"
        svc = ServiceProcess(
            service_args(
                kafka_bootstrap,
                topics,
                ck,
                "--input-format",
                "avro",
                "--schema-registry-url",
                sr.url,
                "--key-field",
                "account",
                "--timestamp-field",
                "ts",
                "--changelog-format",
                "avro",
                "--changelog-key-format",
                "windowed",
                "--emit",
                "every",
                "--max-offsets-per-trigger",
                "700",
            ),
            tmp_path / "service.log",
        ).start()
        try:
            wait_until_committed(ck, topics["in"], ends, svc)
        finally:
            rc = svc.stop()
        assert rc == 0, svc.tail()

        spec = InputSpec("avro", "account", "ts", aggregation_fields(AGGS), sr.url)
        exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="every", spec=spec, registry=reg)
        assert {
            "schema-mismatch",
            "null-key",
            "invalid-timestamp",
            "missing-timestamp",
            "undecodable-value",
            "unknown-schema",
        } <= set(exp.dead.values())
        changelog = consume_all(kafka_bootstrap, topics["out"])
        by_key: dict[str, list] = {}
        for r in changelog:
            key, start = parse_windowed_key(r.key)
            vid, body = split_wire(r.value)
            v = decode_body(body, reg.writer_schema(vid))
            assert (v["key"], v["window_start"], v["window_end"]) == (key, start, start + TD)
            by_key.setdefault(key, []).append(
                (key, start, start + TD, v["aggregates"], v["record_count"], v["max_timestamp"])
            )
        # a key lives in one partition and the output partition is a function of the window key, so compare
        # the sequence per aggregation key
        expected_by_key: dict[str, list] = {}
        for seq in exp.sequence.values():
            for u in seq:
                expected_by_key.setdefault(u[0], []).append(u)
        assert {k: sorted(v, key=repr) for k, v in by_key.items()} == {
            k: sorted(v, key=repr) for k, v in expected_by_key.items()
        }
        # and per window, the order of its updates is Kafka Streams' order
        per_window = lambda seqs: {w: [u for u in s if u[:3] == w] for s in seqs for w in {u[:3] for u in s}}  # noqa: E731
        assert per_window(by_key.values()) == per_window(expected_by_key.values())
        check_late_and_dead(kafka_bootstrap, topics, exp, events)


def test_crash_sigkill_and_restart(kafka_bootstrap, topics, tmp_path):
    """SIGKILL the whole service mid-stream, restart on the same checkpoint: every window's final value is
    exact and nothing is missing from any output topic (repeats of identical updates are allowed)."""
    events = payment_events(3000, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=303)
    ends = produce(kafka_bootstrap, topics["in"], events)
    ck = tmp_path / "checkpoint"
    args = service_args(
        kafka_bootstrap,
        topics,
        ck,
        "--changelog-format",
        "json",
        "--changelog-key-format",
        "json",
        "--max-offsets-per-trigger",
        "300",
    )
    first = ServiceProcess(args, tmp_path / "first.log").start()
    try:
        # kill once a couple of micro-batches are committed and the next one is in flight
        wait_for_batches(ck, first, 2)
    finally:
        first.kill()
    _killed_at, offsets = committed_offsets(ck)
    assert sum(offsets[topics["in"]].values()) < len(events)  # really mid-stream

    run_until_committed(args, tmp_path / "second.log", ck, topics["in"], ends)

    exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="update")
    changelog = consume_all(kafka_bootstrap, topics["out"])
    assert json_final(changelog) == exp.final
    late = consume_all(kafka_bootstrap, topics["late"])
    assert {(int(r.headers["partition"]), int(r.headers["offset"])) for r in late} == exp.late
    dead = consume_all(kafka_bootstrap, topics["dlq"])
    assert {
        (int(r.headers["partition"]), int(r.headers["offset"])): r.headers["error"].decode() for r in dead
    } == exp.dead
    # a replayed micro-batch may repeat records, never invent one: every changelog record is a value its
    # window really had (the update-mode replay flushed after every record lists them all)
    states = {
        u
        for seq in exp.sequence.values()
        for u in [(x[0], x[1], x[2], json.dumps(x[3], sort_keys=True), x[4], x[5]) for x in seq]
    }
    for r in changelog:
        v = json.loads(r.value)
        assert (
            v["key"],
            v["window_start"],
            v["window_end"],
            json.dumps(v["aggregates"], sort_keys=True),
            v["record_count"],
            v["max_timestamp"],
        ) in states


def wait_for_batches(checkpoint: Path, svc: ServiceProcess, batches: int, timeout: float = 300) -> None:
    """Until ``svc`` has committed ``batches`` micro-batches to ``checkpoint`` (fails if it exits or times out)."""
    import time

    deadline = time.monotonic() + timeout
    while committed_offsets(checkpoint)[0] < batches:
        assert svc.alive(), svc.tail()
        assert time.monotonic() < deadline, svc.tail()
        time.sleep(0.2)


def test_checkpoint_of_the_pandas_interface_continues(kafka_bootstrap, topics, tmp_path):
    """A checkpoint written before the processor moved to pyspark's Row interface (2026-11-28), whose stateful
    operator Spark recorded as ``transformWithStateInPandasExec`` (Spark refuses another name for it): the service
    renames it (service.checkpoint_access.migrate_operator_name) and continues it exactly. The first run here is
    today's service with the old name written back into its state metadata."""
    continue_pandas_interface_checkpoint(kafka_bootstrap, topics, tmp_path)


def continue_pandas_interface_checkpoint(
    kafka_bootstrap: str, topics: dict[str, str], tmp_path: Path, old_tree: Path | None = None
) -> None:
    """:func:`test_checkpoint_of_the_pandas_interface_continues`; ``old_tree``: a tree of the service before the
    change makes the first run instead (checked by hand with 3d2b93e: bench/HISTORY.md)."""
    from service.checkpoint_access import OPERATOR_RENAMED

    events = payment_events(2000, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=404)
    ends = produce(kafka_bootstrap, topics["in"], events)
    ck = tmp_path / "checkpoint"
    args = service_args(kafka_bootstrap, topics, ck, "--changelog-format", "json", "--changelog-key-format", "json")
    first = ServiceProcess([*args, "--max-offsets-per-trigger", "400"], tmp_path / "first.log", cwd=old_tree)
    first.start()
    try:
        wait_for_batches(ck, first, 2)
    finally:
        assert first.stop() == 0, first.tail()
    metadata = [p for p in (ck / "state").glob("*/_metadata/**/*") if p.is_file() and not p.name.startswith(".")]
    assert metadata
    if old_tree is None:
        for p in metadata:
            p.write_text(p.read_text().replace(OPERATOR_RENAMED[1], OPERATOR_RENAMED[0]))
    assert all(OPERATOR_RENAMED[0] in p.read_text() for p in metadata)

    run_until_committed(args, tmp_path / "second.log", ck, topics["in"], ends)
    assert "recorded it as transformWithStateInPySparkExec" in (tmp_path / "second.log").read_text()
    assert all(OPERATOR_RENAMED[0] not in p.read_text() for p in metadata)
    exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="update")
    assert json_final(consume_all(kafka_bootstrap, topics["out"])) == exp.final
