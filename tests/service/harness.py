"""Running the real service (``python -m service run``) against a real broker from tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.service.events import Event

if TYPE_CHECKING:
    from service.task.config import TaskConfig

__all__ = [
    "ServiceProcess",
    "produce",
    "produce_transactions",
    "consume_all",
    "committed_offsets",
    "wait_until_committed",
    "run_until_committed",
    "OutRecord",
]

PROJECT = Path(__file__).resolve().parents[2]


class ServiceProcess:
    """``python -m service run <args>`` in its own process group; output goes to ``log``."""

    def __init__(
        self, args: Sequence[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.args = list(args)
        self.cwd = cwd or PROJECT  # the tree whose ``service`` runs (another revision's: bench/recovery_bench.py)
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServiceProcess:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service", "run", *self.args],
                cwd=self.cwd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (driver, its JVM and Python workers) at once: a hard crash."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM to the driver (graceful stop: it stops the query and its JVM), then SIGKILL to the group
        if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        # the JVM and workers follow the driver; make sure nothing of the group survives
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.proc.returncode

    def processes(self) -> dict[int, str]:
        """pid -> the text of ``/proc/PID/maps`` for the driver and every process below it (its JVM, the Python
        daemon and workers): the files each one has mapped, its loaded libraries among them."""
        from service.worker.memory import children

        assert self.proc is not None
        out: dict[int, str] = {}
        todo = [self.proc.pid]
        while todo:
            pid = todo.pop()
            try:
                out[pid] = Path(f"/proc/{pid}/maps").read_text()
            except OSError:
                continue
            todo.extend(children(pid))
        return out

    def tail(self, lines: int = 60) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        keep = [ln for ln in text if not ln.startswith("\tat ")]
        return "\n".join(keep[-lines:])


def produce(
    bootstrap: str, topic: str, events: Iterable[Event], config: dict[str, Any] | None = None
) -> dict[int, int]:
    """Produce in order with explicit partitions and timestamps (idempotent producer: per-partition order is
    production order). Returns the number of records per partition. ``config``: extra client settings
    (credentials of a secured broker)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **(config or {})})
    counts: dict[int, int] = {}
    errors: list[Any] = []

    def cb(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for ev in events:
        p.produce(topic, key=ev.key, value=ev.value, partition=ev.partition, timestamp=ev.timestamp, on_delivery=cb)
        counts[ev.partition] = counts.get(ev.partition, 0) + 1
        p.poll(0)
    assert p.flush(60) == 0, "undelivered records"
    assert not errors, errors[:3]
    return counts


def produce_transactions(bootstrap: str, topic: str, transactions: Sequence[tuple[Sequence[Event], bool]]) -> None:
    """An upstream transactional producer: each ``(events, commit)`` in one transaction, in order, committed or
    aborted (its records stay in the log, flagged aborted for ``read_committed`` readers)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"upstream-{topic}", "linger.ms": 5})
    p.init_transactions(60)
    for events, commit in transactions:
        p.begin_transaction()
        for ev in events:
            p.produce(topic, key=ev.key, value=ev.value, partition=ev.partition, timestamp=ev.timestamp)
            p.poll(0)
        assert p.flush(60) == 0, "undelivered records"
        if commit:
            p.commit_transaction(60)
        else:
            p.abort_transaction(60)


@dataclass(frozen=True)
class OutRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    timestamp: int


def consume_all(
    bootstrap: str, topic: str, timeout: float = 60, config: dict[str, Any] | None = None
) -> list[OutRecord]:
    """Everything in ``topic`` up to its current end offsets, in (partition, offset) order."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **(config or {}),
        }
    )
    try:
        md = c.list_topics(topic, timeout=30).topics[topic]
        ends = {}
        for p in md.partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if hi > lo:
                ends[p] = hi
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        out: list[OutRecord] = []
        pos = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end: at {pos}, end {ends}")
            msgs = c.consume(1000, timeout=1.0)
            for m in msgs:
                if m.error():
                    continue
                pos[m.partition()] = m.offset() + 1
                out.append(
                    OutRecord(
                        m.partition(),
                        m.offset(),
                        m.key(),
                        m.value(),
                        dict(m.headers() or []),
                        m.timestamp()[1],
                    )
                )
            if not msgs:  # a transactional topic ends with a commit marker, never delivered: the position is past it
                for tp in c.position([TopicPartition(topic, p) for p in ends]):
                    pos[tp.partition] = max(pos[tp.partition], tp.offset)
        out.sort(key=lambda r: (r.partition, r.offset))
        return out
    finally:
        c.close()


def committed_offsets(checkpoint: Path) -> tuple[int, dict[str, dict[int, int]]]:
    """``(batch id, {topic: {partition: next offset}})`` of the last micro-batch committed in ``checkpoint``."""
    commits = checkpoint / "commits"
    ids = sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else []
    if not ids:
        return -1, {}
    lines = (checkpoint / "offsets" / str(ids[-1])).read_text().splitlines()
    offsets: dict[str, dict[int, int]] = {}
    for line in lines[2:]:
        line = line.strip()
        if line.startswith("{"):
            for topic, parts in json.loads(line).items():
                offsets.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
    return ids[-1], offsets


def wait_until_committed(
    checkpoint: Path,
    topic: str,
    ends: dict[int, int],
    service: ServiceProcess,
    timeout: float = 300,
    min_batch: int = -1,
) -> int:
    """Wait until the service committed a micro-batch that reached ``ends`` (and has id >= ``min_batch``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch, offsets = committed_offsets(checkpoint)
        got = offsets.get(topic, {})
        if batch >= min_batch and all(got.get(p, 0) >= n for p, n in ends.items()):
            return batch
        if not service.alive():
            raise AssertionError(f"the service exited ({service.proc.returncode}):\n{service.tail()}")
        time.sleep(0.5)
    raise AssertionError(
        f"not all input committed within {timeout}s (last {committed_offsets(checkpoint)}):\n{service.tail()}"
    )


def run_until_committed(
    args: Sequence[str],
    log: Path,
    checkpoint: Path,
    topic: str,
    ends: dict[int, int],
    while_running: Callable[[ServiceProcess], None] | None = None,
) -> int:
    """Run the service with ``args`` until it committed a micro-batch that reached ``ends`` of ``topic``, call
    ``while_running`` (the service still up), stop it (it must exit 0); the id of that micro-batch."""
    svc = ServiceProcess(args, log).start()
    try:
        batch = wait_until_committed(checkpoint, topic, ends, svc)
        if while_running is not None:
            while_running(svc)
    finally:
        rc = svc.stop()
    assert rc == 0, svc.tail()
    return batch


def json_task_config(aggs: str, *, emit: str = "update", **options: Any) -> TaskConfig:
    """A task config as the unit tests of a task batch use it: sliding windows of 1 s with 300 ms grace, JSON in
    and out, topics ``out`` / ``late`` / ``dlq``; ``options``: any other TaskConfig field."""
    from connectors.output import ChangelogSpec
    from connectors.serde import InputSpec, aggregation_fields
    from service.task.config import TaskConfig
    from windowstore import WindowDefinition

    return TaskConfig(
        WindowDefinition("sliding", 1000, grace_ms=300),
        aggs,
        emit,
        InputSpec(fields=aggregation_fields(aggs)),
        ChangelogSpec("json", "json", aggs),
        "out",
        "late",
        "dlq",
        **options,
    )
