"""processing_guarantee=exactly_once under chaos, on a real broker and Spark: the service is SIGKILLed in the
middle of micro-batches and between a task's transaction commit and Spark's checkpoint commit, and the broker is
stopped and started once; a ``read_committed`` consumer then sees every window update, late record and dead
letter exactly once, and every window's final value is the window engine's. The same stream with at_least_once
shows duplicates (so the check can tell the two apart).

The broker is this module's own (it is stopped and started; the session's broker may be someone else's)."""

from __future__ import annotations

import itertools
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from devtools.local_broker import LocalKafkaBroker, find_free_port
from tests.service.events import changelog_final, payment_events, replay
from tests.service.harness import (
    ServiceProcess,
    committed_offsets,
    produce,
    produce_transactions,
    wait_until_committed,
)

pytestmark = pytest.mark.integration

AGGS = "count,sum:amount,max:amount"
TD, GRACE = 1000, 300
PARTITIONS = 3
EVENTS = 4000
PER_TRIGGER = 240

#: Kafka clients the test polls with, kept for the module (closed with the broker)
_GROUP_READERS: dict[tuple[str, str], object] = {}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    b = LocalKafkaBroker(port=find_free_port(), data_dir=tmp_path_factory.mktemp("eos-kafka"))
    b.start()
    try:
        yield b
    finally:
        from connectors.producer import close_producers

        close_producers()
        for c in _GROUP_READERS.values():
            c.close()  # type: ignore[attr-defined]
        _GROUP_READERS.clear()
        b.stop()


def _topics(bootstrap: str, tag: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = {k: f"eos-{tag}-{k}-{time.monotonic_ns()}" for k in ("in", "out", "late", "dlq")}
    cfg = {"in": {"retention.ms": "-1"}, "out": {"cleanup.policy": "compact"}}
    new = [NewTopic(n, PARTITIONS, 1, config=cfg.get(k, {})) for k, n in names.items()]
    for f in admin.create_topics(new, operation_timeout=30).values():
        f.result(timeout=60)
    return names


def _args(bootstrap: str, topics: dict[str, str], checkpoint: Path, guarantee: str, app: str) -> list[str]:
    return [
        "--bootstrap-servers", bootstrap, "--input-topics", topics["in"], "--changelog-topic", topics["out"],
        "--late-topic", topics["late"], "--dead-letter-topic", topics["dlq"], "--aggregations", AGGS,
        "--time-difference", f"{TD}ms", "--grace", f"{GRACE}ms", "--checkpoint-dir", str(checkpoint),
        "--trigger-interval", "0", "--state-partitions", "2", "--spark-master", "local[2]", "--metrics-port", "0",
        "--changelog-format", "json", "--changelog-key-format", "json",
        "--max-offsets-per-trigger", str(PER_TRIGGER), "--processing-guarantee", guarantee, "--app-name", app,
        # records on the broker as soon as a task sends them, not at its commit: a transaction is then open there
        # for the whole state write, a moment the mid-batch kill can find (it missed six starts in a row at 20 ms)
        "--kafka-options", "linger.ms=0",
    ]  # fmt: skip


def read_committed(
    bootstrap: str, topic: str, idle_s: float = 4.0, isolation: str = "read_committed"
) -> list[tuple[int, int, bytes, bytes, dict]]:
    """Every committed record of ``topic`` (``isolation``: read_uncommitted also gives the aborted ones), in
    (partition, offset) order: read until nothing more arrives for ``idle_s`` (the high watermark may be a
    transaction marker, never delivered)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-check-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out = []
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            msgs = c.consume(1000, timeout=0.5)
            for m in msgs:
                if m.error() is None:
                    out.append((m.partition(), m.offset(), m.key(), m.value(), dict(m.headers() or [])))
            if msgs:
                last = time.monotonic()
        return sorted(out, key=lambda r: (r[0], r[1]))
    finally:
        c.close()


def _high_watermarks(bootstrap: str, topic: str, isolation: str = "read_committed") -> int:
    """The end offsets of ``topic`` summed over its partitions: with read_committed the last stable offsets
    (before the first open transaction), with read_uncommitted the high watermarks (open transactions too)."""
    from confluent_kafka import Consumer, TopicPartition

    c = _GROUP_READERS.get((bootstrap, isolation))
    if c is None:
        c = _GROUP_READERS[(bootstrap, isolation)] = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "eos-probe", "isolation.level": isolation}
        )
    return sum(
        c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]  # type: ignore[attr-defined]
        for p in range(PARTITIONS)
    )


def _group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of ``topic`` (one reader per group, kept: this is polled every 20 ms)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = _GROUP_READERS.get((bootstrap, group))
    if c is None:
        c = _GROUP_READERS[(bootstrap, group)] = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)  # type: ignore[attr-defined]
    except KafkaException:  # the broker is restarting
        return {}
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def _kill_when(
    svc: ServiceProcess, ck: Path, condition: Callable[[int, dict[int, int]], bool], timeout: float = 240
) -> bool:
    """SIGKILL the service as soon as ``condition(last committed batch, its offsets per partition)`` holds;
    False (and a kill anyway) when it did not within ``timeout``."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            batch, offsets = committed_offsets(ck)
            if batch >= 1 and condition(batch, {p: o for parts in offsets.values() for p, o in parts.items()}):
                return True
            assert svc.alive(), svc.tail()
            time.sleep(0.02)
        return False
    finally:
        svc.kill()


def _output_written_mid_batch(
    bootstrap: str, topic: str, ck: Path, open_transaction: bool
) -> Callable[[int, dict[int, int]], bool]:
    """Holds when a batch is in flight (planned, not committed) and the output topic grew since its start;
    ``open_transaction``: with records of a transaction not yet committed (the kill then leaves it to be aborted)."""
    seen: dict[int, int] = {}

    def cond(batch: int, _offsets: dict[int, int]) -> bool:
        inflight = (ck / "offsets" / str(batch + 1)).exists()
        hw = _high_watermarks(bootstrap, topic, "read_uncommitted")
        if batch + 1 not in seen or not inflight:
            seen[batch + 1] = hw
            return False
        return hw > seen[batch + 1] and (not open_transaction or hw > _high_watermarks(bootstrap, topic))

    return cond


def _open_transaction(bootstrap: str, topic: str) -> bool:
    """``topic`` holds records of a transaction still open: of a killed producer, it stays open until the next
    producer of its transactional id fences it (an abort) or its timeout - a commit cannot come any more. Looked
    at after a second, when a transaction that did commit has its markers written."""
    time.sleep(1)
    return _high_watermarks(bootstrap, topic, "read_uncommitted") > _high_watermarks(bootstrap, topic)


#: starts per provoked moment: a kill may miss it (the batch completes between the look and the SIGKILL; with the
#: client compiler alone a task's transaction is open for less time, and three starts running missed it once in CI)
ATTEMPTS = 6
#: the restarted service's log line when a task batch's transaction had committed before the crash
REPLAYED_LINE = "already committed by an earlier run"


def _run_with_chaos(
    broker: LocalKafkaBroker, tmp_path: Path, guarantee: str, kills: int, restart_broker: bool
) -> tuple[dict[str, str], list, dict]:
    bs = broker.bootstrap_servers
    topics = _topics(bs, guarantee.replace("_", ""))
    app = f"eos-test-{guarantee}-{time.monotonic_ns()}"
    events = payment_events(EVENTS, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=3232)
    notes = Counter(e.note.split(":")[0] for e in events)
    assert all(notes[n] for n in ("ooo", "late", "bad")), notes
    ends = produce(bs, topics["in"], events)
    ck = tmp_path / f"checkpoint-{guarantee}"
    args = _args(bs, topics, ck, guarantee, app)
    rnd = random.Random(32)
    log = {"provoked": []}
    run = 0

    def start() -> ServiceProcess:
        nonlocal run
        run += 1
        return ServiceProcess(args, tmp_path / f"{guarantee}-{run}.log").start()

    eos = guarantee == "exactly_once"

    def logs() -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob(f"{guarantee}-*.log")))

    def provoke(
        kind: str,
        condition: Callable[[], Callable[[int, dict[int, int]], bool]],
        verify: Callable[[], bool],
        timeout: float = 240,
    ) -> None:
        """Start, kill at ``condition``; again (up to ATTEMPTS starts) while ``verify`` says the moment was missed."""
        ok = False
        for _attempt in range(ATTEMPTS):
            ok = _kill_when(start(), ck, condition(), timeout) and verify()
            if ok:
                break
        log["provoked"].append((kind, ok))

    def txn_ahead() -> Callable[[int, dict[int, int]], bool]:
        def cond(_batch: int, offsets: dict[int, int]) -> bool:
            group = _group_offsets(bs, app, topics["in"])
            return any(o > offsets.get(p, 0) for p, o in group.items())

        return cond

    def still_ahead() -> bool:  # after the kill: the checkpoint cannot catch up any more
        offsets = {p: o for parts in committed_offsets(ck)[1].values() for p, o in parts.items()}
        return txn_ahead()(0, offsets)

    for k in range(kills):
        if k == 0:  # mid-batch, after some of its output reached Kafka (exactly_once: in an open transaction)
            provoke(
                "mid-batch",
                lambda: _output_written_mid_batch(bs, topics["out"], ck, open_transaction=eos),
                (lambda: _open_transaction(bs, topics["out"])) if eos else (lambda: True),
            )
        elif k == 1 and eos:  # a transaction committed, Spark's commit not yet written
            provoke("txn-committed-checkpoint-not", txn_ahead, still_ahead, timeout=120)
        else:  # a random moment: 0.2-2.5 s after this run's first micro-batch commit
            svc = start()
            first = committed_offsets(ck)[0]
            delay = rnd.uniform(0.2, 2.5)
            at: list[float] = []
            # after the commit-vs-checkpoint kill, not before the replay it leaves was reported (the log line)
            replay_pending = eos and k == 2 and log["provoked"][-1] == ("txn-committed-checkpoint-not", True)

            def random_moment(
                b: int,
                _o: dict[int, int],
                first: int = first,
                delay: float = delay,
                at: list[float] = at,
                replay_pending: bool = replay_pending,
            ) -> bool:
                if b > first and not at and not (replay_pending and REPLAYED_LINE not in logs()):
                    at.append(time.monotonic())
                return bool(at) and time.monotonic() - at[0] > delay

            log["provoked"].append(("random", _kill_when(svc, ck, random_moment)))
    svc = start()
    if restart_broker:
        first = committed_offsets(ck)[0]
        deadline = time.monotonic() + 240
        while committed_offsets(ck)[0] <= first and time.monotonic() < deadline:
            assert svc.alive(), svc.tail()
            time.sleep(0.1)
        broker.stop()
        time.sleep(3)
        broker.start()
        log["provoked"].append(("broker-restart", True))
    try:
        try:
            wait_until_committed(ck, topics["in"], ends, svc, timeout=300)
        except AssertionError:
            if svc.alive():
                raise
            svc = start()  # the query may give up while the broker is away: a supervisor restarts it
            wait_until_committed(ck, topics["in"], ends, svc, timeout=300)
        deadline = time.monotonic() + 20  # at_least_once commits the group's offsets after the batch's progress
        while _group_offsets(bs, app, topics["in"]) != ends and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        rc = svc.stop()
    assert rc == 0, svc.tail()
    exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="update")
    out = {name: read_committed(bs, topics[name]) for name in ("out", "late", "dlq")}
    log["group"] = _group_offsets(bs, app, topics["in"])
    log["ends"] = ends
    log["changelog_read_uncommitted"] = len(read_committed(bs, topics["out"], isolation="read_uncommitted"))
    log["replayed_lines"] = logs().count(REPLAYED_LINE)
    return topics, [exp, out], log


def _repeats(out: dict) -> dict[str, int]:
    """Repeated window updates (the same window with the same value twice) and late / dead-letter records
    repeated by source partition + offset."""
    updates = Counter()
    for _p, _o, _k, v, _h in out["out"]:
        u = json.loads(v)
        updates[
            (
                u["key"],
                u["window_start"],
                u["window_end"],
                u["record_count"],
                json.dumps(u["aggregates"], sort_keys=True),
            )
        ] += 1
    src = lambda rows: Counter((h["partition"], h["offset"]) for *_x, h in rows)  # noqa: E731
    return {
        "changelog": sum(c - 1 for c in updates.values()),
        "late": sum(c - 1 for c in src(out["late"]).values()),
        "dlq": sum(c - 1 for c in src(out["dlq"]).values()),
    }


def _check_exact_values(exp, out) -> None:
    assert changelog_final((k, v) for _p, _o, k, v, _h in out["out"]) == exp.final
    assert {(int(h["partition"]), int(h["offset"])) for *_x, h in out["late"]} == exp.late
    assert {(int(h["partition"]), int(h["offset"])): h["error"].decode() for *_x, h in out["dlq"]} == exp.dead


def test_exactly_once_under_kills_and_a_broker_restart(broker, tmp_path):
    _topics_used, (exp, out), log = _run_with_chaos(broker, tmp_path, "exactly_once", kills=3, restart_broker=True)
    print(
        "chaos:",
        log["provoked"],
        f"changelog records read_uncommitted {log['changelog_read_uncommitted']} / read_committed {len(out['out'])},",
        f"already-committed log lines {log['replayed_lines']}",
    )
    _check_exact_values(exp, out)
    assert _repeats(out) == {"changelog": 0, "late": 0, "dlq": 0}
    # per window, the updates come in the order of the window's growth (record_count strictly increasing)
    counts: dict[tuple, list[int]] = {}
    for _p, _o, _k, v, _h in out["out"]:
        u = json.loads(v)
        counts.setdefault((u["key"], u["window_start"], u["window_end"]), []).append(u["record_count"])
    assert all(all(a < b for a, b in itertools.pairwise(c)) for c in counts.values())
    # the input offsets are in the application's group (lag tooling), up to the end of the input
    assert log["group"] == dict(log["ends"])
    assert [k for k, ok in log["provoked"] if k == "mid-batch"] and all(
        ok for k, ok in log["provoked"] if k == "mid-batch"
    )
    # the mid-batch kill left a transaction open: its records are in the log, aborted - a read_uncommitted
    # consumer sees them, the read_committed one does not
    assert log["changelog_read_uncommitted"] > len(out["out"]), log
    # the kill between a transaction's commit and Spark's checkpoint happened, and the next run took the
    # already-committed path (state rebuilt, nothing written again: the repeats above are 0)
    assert ("txn-committed-checkpoint-not", True) in log["provoked"], log["provoked"]
    assert log["replayed_lines"] >= 1, log


def test_at_least_once_repeats_output_after_a_mid_batch_kill(broker, tmp_path):
    _topics_used, (exp, out), log = _run_with_chaos(broker, tmp_path, "at_least_once", kills=1, restart_broker=False)
    assert log["provoked"] == [("mid-batch", True)]
    _check_exact_values(exp, out)
    repeats = _repeats(out)
    assert repeats["changelog"] > 0, repeats  # the replayed batch wrote its updates again
    # at_least_once also commits the processed offsets to the group (after each batch, for monitoring)
    assert log["group"] == dict(log["ends"])


def test_exactly_once_reads_only_committed_upstream_transactions(broker, tmp_path):
    """Input from an upstream transactional producer: a committed transaction, an aborted one (the same keys,
    partitions and event times, amounts no window could reach otherwise), a committed one. The service aggregates
    the committed records only: every window's final value is the engine's over them, no aborted amount in any."""
    bs = broker.bootstrap_servers
    topics = _topics(bs, "upstream")
    events = payment_events(600, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=3233)
    aborted_amount = 10**9
    aborted = [replace(e, value=json.dumps({"amount": aborted_amount}).encode()) for e in events[200:400]]
    produce_transactions(bs, topics["in"], [(events[:200], True), (aborted, False), (events[200:], True)])
    assert len(read_committed(bs, topics["in"], idle_s=2, isolation="read_uncommitted")) == len(events) + len(aborted)
    ck = tmp_path / "checkpoint"
    app = f"eos-upstream-{time.monotonic_ns()}"
    svc = ServiceProcess(_args(bs, topics, ck, "exactly_once", app), tmp_path / "service.log").start()
    try:  # read_committed: the source's end is past the last commit marker
        wait_until_committed(ck, topics["in"], _high_watermarks_by_partition(bs, topics["in"]), svc, timeout=240)
    finally:
        rc = svc.stop()
    assert rc == 0, svc.tail()
    exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="update")
    out = read_committed(bs, topics["out"])
    assert changelog_final((k, v) for _p, _o, k, v, _h in out) == exp.final
    assert all(max(json.loads(v)["aggregates"].values()) < aborted_amount for *_x, v, _h in out), (
        "an aborted record was aggregated"
    )


def _high_watermarks_by_partition(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-probe"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(PARTITIONS)
        }
    finally:
        c.close()


def test_a_new_checkpoint_with_a_group_that_has_offsets_warns_at_start(broker, tmp_path, caplog):
    """exactly_once on an empty checkpoint while the group app_name already committed input offsets: the
    batches before them would write nothing - one WARNING at start names the group (no Spark needed)."""
    from confluent_kafka import Consumer

    from connectors.transactions import commit_group_offsets
    from service.driver import prepare
    from service.settings import Settings

    bs = broker.bootstrap_servers
    topics = _topics(bs, "warn")
    app = f"eos-warn-{time.monotonic_ns()}"

    def settings(checkpoint: Path) -> Settings:
        return Settings(
            bootstrap_servers=bs,
            input_topics=topics["in"],
            changelog_topic=topics["out"],
            late_topic=topics["late"],
            dead_letter_topic=topics["dlq"],
            changelog_format="json",
            changelog_key_format="json",
            aggregations=AGGS,
            checkpoint_dir=str(checkpoint),
            processing_guarantee="exactly_once",
            sink="direct",
            app_name=app,
        )

    with caplog.at_level("WARNING", logger="service.driver"):
        prepare(settings(tmp_path / "ck1"))
    assert not [r for r in caplog.records if "already committed offsets" in r.getMessage()]
    c = Consumer({"bootstrap.servers": bs, "group.id": app, "enable.auto.commit": False})
    try:
        commit_group_offsets(c, {(topics["in"], 1): 5})
    finally:
        c.close()
    caplog.clear()
    with caplog.at_level("WARNING", logger="service.driver"):
        prepare(settings(tmp_path / "ck2"))
    warned = [r.getMessage() for r in caplog.records if "already committed offsets" in r.getMessage()]
    assert len(warned) == 1 and app in warned[0] and f"{topics['in']}-1@5" in warned[0], caplog.text
