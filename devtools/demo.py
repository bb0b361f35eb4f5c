"""``make demo``: a local broker, a payments producer, the service, and a live view until Ctrl-C.

1. starts the local Kafka broker (:mod:`devtools.local_broker`, data in ``var/demo/kafka``) unless
   ``--bootstrap-servers`` points at a running one;
2. creates the ``payments`` topic (3 partitions);
3. produces payments per account at a steady rate, with event times that are sometimes out of order (inside the
   grace period), sometimes late (beyond it), and a few malformed records;
4. runs ``python -m service run`` (JSON changelog, 10 s windows, 5 s grace, emit update; log in
   ``var/demo/service.log``);
5. prints every few seconds: events in, window updates out, late and dead-lettered records, consumer lag and a
   few recent window updates.

Whatever ends the demo - Ctrl-C, SIGTERM, SIGHUP (the terminal closed), its output pipe closed (``make demo | tee
demo.log`` and Ctrl-C, ``| head``) - it stops the service and the broker it started before it exits; and the
service stops by itself when the demo process dies without that chance (SIGKILL): it is started with a
parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG, SIGTERM)``, :func:`spawn_child`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

TOPIC = "payments"
OUT, LATE, DLQ = "payments-windows", "payments-late", "payments-dlq"
TD_MS, GRACE_MS = 10_000, 5_000


class Producer(threading.Thread):
    """Payments for ``accounts`` accounts at ``rate`` events/s (event time = wall clock, with disorder)."""

    def __init__(self, bootstrap: str, rate: float, accounts: int, seed: int = 1) -> None:
        super().__init__(name="demo-producer", daemon=True)
        from confluent_kafka import Producer as KafkaProducer

        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        self.rate = rate
        self.accounts = accounts
        self.rnd = random.Random(seed)
        self.stop_event = threading.Event()
        self.sent = {"events": 0, "out_of_order": 0, "late": 0, "malformed": 0}

    def one(self) -> tuple[bytes | None, bytes, int]:
        rnd = self.rnd
        now = int(time.time() * 1000)
        account = f"acct-{rnd.randrange(self.accounts):03d}"
        ts = now
        r = rnd.random()
        if r < 0.05:
            ts = now - rnd.randint(500, GRACE_MS)  # out of order, inside the grace period
            self.sent["out_of_order"] += 1
        elif r < 0.07:
            ts = now - rnd.randint(TD_MS + GRACE_MS + 2_000, 3 * TD_MS)  # too late for any window
            self.sent["late"] += 1
        elif r < 0.08:
            self.sent["malformed"] += 1
            bad = rnd.choice([b"\xff not json", b'{"amount": "12.50"}', b'{"currency": "EUR"}'])
            return account.encode(), bad, ts
        value = {
            "account": account,
            "amount": rnd.choice([5, 10, 20, 50, 100, 250]) + rnd.randint(0, 99),
            "currency": "EUR",
        }
        return account.encode(), json.dumps(value).encode(), ts

    def run(self) -> None:
        interval = 1.0 / self.rate
        next_t = time.monotonic()
        while not self.stop_event.is_set():
            key, value, ts = self.one()
            self.producer.produce(TOPIC, key=key, value=value, timestamp=ts)
            self.sent["events"] += 1
            self.producer.poll(0)
            next_t += interval
            delay = next_t - time.monotonic()
            if delay > 0:
                self.stop_event.wait(delay)
        self.producer.close()  # delivers what is queued (flush), then disconnects before the broker stops


class OutputWatcher(threading.Thread):
    """Counts records on the output topics and keeps the latest window updates."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="demo-watcher", daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"demo-watch-{os.getpid()}",
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([OUT, LATE, DLQ])
        self.counts = {OUT: 0, LATE: 0, DLQ: 0}
        self.recent: deque[dict[str, Any]] = deque(maxlen=4)
        self.dlq_reasons: dict[str, int] = {}
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            for m in self.consumer.consume(500, timeout=0.5):
                topic, value = m.topic(), m.value()
                if m.error() or topic is None:
                    continue
                self.counts[topic] = self.counts.get(topic, 0) + 1
                if topic == OUT and value is not None:
                    with contextlib.suppress(ValueError):
                        self.recent.append(json.loads(value))
                elif topic == DLQ:
                    raw = dict(m.headers() or []).get("error") or b"?"
                    reason = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
                    self.dlq_reasons[reason] = self.dlq_reasons.get(reason, 0) + 1
        self.consumer.close()


def _lag(bootstrap: str, checkpoint: Path) -> int | None:
    """Input end offsets minus the offsets of the last committed micro-batch."""
    from connectors.admin import end_offsets

    commits = checkpoint / "commits"
    ids = sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else []
    if not ids:
        return None
    committed: dict[int, int] = {}
    for line in (checkpoint / "offsets" / str(ids[-1])).read_text().splitlines()[2:]:
        if line.startswith("{"):
            committed.update({int(p): int(o) for p, o in json.loads(line).get(TOPIC, {}).items()})
    ends = end_offsets({"bootstrap.servers": bootstrap}, [TOPIC])
    return sum(max(0, hi - committed.get(p, 0)) for (_t, p), hi in ends.items())


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when the process that started it dies (Linux; elsewhere a
    no-op), and ends at once if that process is already gone (it died between fork and exec)."""

    def arm() -> None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:
            os._exit(1)

    return arm


def spawn_child(cmd: list[str], log: Any, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session (the terminal's Ctrl-C goes to the demo, which stops it in order), its
    output to ``log``, and with a parent-death signal: it gets SIGTERM (and stops gracefully) when the demo
    process dies, however it dies."""
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with_parent(os.getpid()),
    )


class _Console:
    """The demo's output: a closed pipe (the reader is gone) stops the demo instead of raising in the middle of
    its clean-up; later lines are dropped."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.closed = False

    def say(self, *parts: Any) -> None:
        if self.closed:
            return
        try:
            print(*parts, flush=True)
        except (BrokenPipeError, OSError, ValueError):
            self.closed = True
            self.stop.set()
            try:  # the interpreter's final flush of stdout must not raise either
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass


def _stop_all(service: subprocess.Popen[bytes] | None, broker: Any, producer: Any, watcher: Any) -> None:
    """Stop what the demo started, each step on its own (one failing does not leave the rest running): the
    producer and the watcher, the service (SIGTERM, then SIGKILL to its process group after 60 s), the broker."""
    for thread in (producer, watcher):
        if thread is not None:
            thread.stop_event.set()
    for thread, timeout in ((producer, 15), (watcher, 5)):
        if thread is not None and thread.is_alive():
            thread.join(timeout)
    if service is not None and service.poll() is None:
        try:
            service.send_signal(signal.SIGTERM)
            service.wait(timeout=60)
        except (subprocess.TimeoutExpired, OSError):
            pass
    if service is not None:
        with contextlib.suppress(OSError):  # whatever of its group is left (JVM, Python workers)
            os.killpg(service.pid, signal.SIGKILL)
        service.wait()
    if broker is not None:
        try:
            broker.stop()
        except Exception:  # clean-up goes on
            logger.exception("stopping the demo broker failed")


def main(argv: list[str] | None = None, *, prog: str = "python -m devtools.demo") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default="", help="use this broker instead of starting one")
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("DEMO_KAFKA_PORT", "19092")),
        help="port of the demo broker (default 19092)",
    )
    parser.add_argument("--rate", type=float, default=200.0, help="events per second (default 200)")
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path("var") / "demo",
        help="broker data, checkpoint and service log (default var/demo under the working directory)",
    )
    parser.add_argument("--fresh", action="store_true", help="delete the state dir first (new topics and state)")
    parser.add_argument("--refresh", type=float, default=3.0, help="seconds between status lines")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    stop = threading.Event()
    console = _Console(stop)
    say = console.say
    watching = False  # in the status loop: a signal only sets ``stop``; before it, it interrupts the start-up

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()
        if not watching:
            raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    var = args.state_dir.resolve()
    broker: Any = None
    service: subprocess.Popen[bytes] | None = None
    producer: Producer | None = None
    watcher: OutputWatcher | None = None
    log = None
    rc = 0
    log_path = var / "service.log"
    try:
        if args.fresh and var.exists():
            shutil.rmtree(var)
        var.mkdir(parents=True, exist_ok=True)
        bootstrap = args.bootstrap_servers
        if not bootstrap:
            from devtools.local_broker import LocalKafkaBroker

            say(f"starting the local Kafka broker on port {args.port} (data in {var / 'kafka'}) ...")
            broker = LocalKafkaBroker(args.port, data_dir=var / "kafka")
            broker.start()
            bootstrap = broker.bootstrap_servers
        from connectors.admin import TopicSpec, ensure_topics

        ensure_topics({"bootstrap.servers": bootstrap}, [TopicSpec(TOPIC, 3)])
        checkpoint = var / "checkpoint"
        cmd = [sys.executable, "-m", "service", "run",
               "--bootstrap-servers", bootstrap, "--input-topics", TOPIC, "--changelog-topic", OUT,
               "--late-topic", LATE, "--dead-letter-topic", DLQ, "--changelog-format", "json",
               "--changelog-key-format", "json", "--aggregations", "count,sum:amount,max:amount",
               "--time-difference", f"{TD_MS}ms", "--grace", f"{GRACE_MS}ms", "--emit", "update",
               "--trigger-interval", "2s", "--checkpoint-dir", str(checkpoint), "--state-partitions", "2",
               "--metrics-port", os.environ.get("DEMO_METRICS_PORT", "9108")]  # fmt: skip
        say("starting the service:", " ".join(cmd[1:]), f"\n  (log: {log_path})")
        log = open(log_path, "ab")  # noqa: SIM115 - the service writes to it until the finally below closes it
        service = spawn_child(cmd, log)
        say(f"service pid {service.pid}")
        producer = Producer(bootstrap, args.rate, args.accounts)
        watcher = OutputWatcher(bootstrap)
        producer.start()
        watcher.start()
        say(
            f"producing ~{args.rate:.0f} payments/s for {args.accounts} accounts to '{TOPIC}'; "
            f"windows: {TD_MS // 1000}s sliding, grace {GRACE_MS // 1000}s. Ctrl-C to stop.\n"
        )
        watching = True
        if not stop.is_set():
            rc = _watch(stop, say, args.refresh, service, producer, watcher, bootstrap, checkpoint, log_path)
    except KeyboardInterrupt:
        rc = 130
    finally:
        watching = True  # a second signal during the clean-up does not interrupt it
        say("\nstopping ...")
        _stop_all(service, broker, producer, watcher)
        if log is not None:
            log.close()
        say(f"stopped (state kept in {var}: run `make demo` again to resume, or DEMO_ARGS=--fresh).")
    return rc


def _watch(
    stop: threading.Event,
    say: Callable[..., None],
    refresh: float,
    service: subprocess.Popen[bytes],
    producer: Producer,
    watcher: OutputWatcher,
    bootstrap: str,
    checkpoint: Path,
    log_path: Path,
) -> int:
    """The status lines, every ``refresh`` seconds until ``stop`` is set (0) or the service exits (1)."""
    t0 = time.monotonic()
    last = (0, 0, t0)
    while not stop.wait(refresh):
        if service.poll() is not None:
            say(f"the service exited with {service.returncode}; see {log_path}")
            return 1
        now = time.monotonic()
        sent, out = producer.sent["events"], watcher.counts[OUT]
        rate_in = (sent - last[0]) / (now - last[2])
        rate_out = (out - last[1]) / (now - last[2])
        last = (sent, out, now)
        try:
            lag = _lag(bootstrap, checkpoint)
        except Exception:
            lag = None
        state = "starting Spark ..." if lag is None else f"lag {lag}"
        say(
            f"[{now - t0:6.0f}s] events in {sent} ({rate_in:.0f}/s; {producer.sent['out_of_order']} out of "
            f"order, {producer.sent['late']} late, {producer.sent['malformed']} malformed) | window updates "
            f"out {out} ({rate_out:.0f}/s) | late topic {watcher.counts[LATE]} | dead letters "
            f"{watcher.counts[DLQ]} {watcher.dlq_reasons or ''} | {state}"
        )
        for u in list(watcher.recent)[-2:]:
            say(
                f"           {u['key']} [{u['window_start']}..{u['window_end']}] "
                f"count={u['aggregates'].get('count')} sum={u['aggregates'].get('sum_amount')} "
                f"max={u['aggregates'].get('max_amount')}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
