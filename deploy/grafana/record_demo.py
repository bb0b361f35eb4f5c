"""Record the dashboard picture of the README from a real run (no Docker needed).

Starts a local Kafka broker (devtools.local_broker) on a free port, the demo's payments producer
(devtools/demo.py: out-of-order, late and malformed events), the service with ``make demo``'s settings, and a
Prometheus (the distribution's package) scraping the service every 5 s with the project's alert rules; after
``--minutes`` (with a burst of extra producers in the middle, so lag and batch sizes move), renders every
dashboard panel from Prometheus' API (render.py) into ``--out``. Everything runs in a temp dir and is stopped.

    python deploy/grafana/record_demo.py --minutes 6 --out deploy/grafana/dashboard.png
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=6)
    ap.add_argument("--rate", type=float, default=300)
    ap.add_argument("--out", type=Path, default=HERE / "dashboard.png")
    a = ap.parse_args(argv)

    from render import render

    from connectors.admin import TopicSpec, ensure_topics
    from devtools import demo
    from devtools.local_broker import LocalKafkaBroker

    tmp = Path(tempfile.mkdtemp(prefix="record-demo-"))
    broker = LocalKafkaBroker(free_port(), data_dir=tmp / "kafka")
    broker.start()
    procs: list[subprocess.Popen[bytes]] = []
    producers: list[demo.Producer] = []
    try:
        bootstrap = broker.bootstrap_servers
        ensure_topics({"bootstrap.servers": bootstrap}, [TopicSpec(demo.TOPIC, 3)])
        mport, pport = free_port(), free_port()
        (tmp / "prometheus.yml").write_text(
            "global: {scrape_interval: 5s, evaluation_interval: 5s}\n"
            f"rule_files: ['{ROOT / 'deploy/prometheus/alerts.yml'}']\n"
            f"scrape_configs: [{{job_name: slidingwindow, static_configs: [{{targets: ['127.0.0.1:{mport}']}}]}}]\n"
        )
        procs.append(
            subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{pport}",
                    "--log.level=warn",
                ],
                stdout=open(tmp / "prometheus.log", "ab"),  # noqa: SIM115 - held open for the child's lifetime
                stderr=subprocess.STDOUT,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "service",
                    "run",
                    "--bootstrap-servers",
                    bootstrap,
                    "--input-topics",
                    demo.TOPIC,
                    "--changelog-topic",
                    demo.OUT,
                    "--late-topic",
                    demo.LATE,
                    "--dead-letter-topic",
                    demo.DLQ,
                    "--changelog-format",
                    "json",
                    "--changelog-key-format",
                    "json",
                    "--aggregations",
                    "count,sum:amount,max:amount",
                    "--time-difference",
                    f"{demo.TD_MS}ms",
                    "--grace",
                    f"{demo.GRACE_MS}ms",
                    "--trigger-interval",
                    "2s",
                    "--checkpoint-dir",
                    str(tmp / "ck"),
                    "--state-partitions",
                    "2",
                    "--metrics-port",
                    str(mport),
                ],
                cwd=ROOT,
                stdout=open(tmp / "service.log", "ab"),  # noqa: SIM115 - held open for the child's lifetime
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        start = time.time()
        producers.append(demo.Producer(bootstrap, a.rate, 50))
        producers[0].start()
        total = 60 * a.minutes
        time.sleep(total * 0.45)
        print(f"[{time.time() - start:5.0f}s] burst: 3 more producers for {total * 0.2:.0f}s", flush=True)
        burst = [demo.Producer(bootstrap, a.rate * 2, 200, seed=i + 2) for i in range(3)]
        for p in burst:
            p.start()
        producers += burst
        time.sleep(total * 0.2)
        for p in burst:
            p.stop_event.set()
        time.sleep(total * 0.35)
        drawn = render(f"http://127.0.0.1:{pport}", start, time.time(), a.out)
        for title, n in drawn.items():
            print(f"{n:3d} series  {title}")
        print(f"wrote {a.out}")
        return 0
    finally:
        for p in producers:  # they flush on stop: before the broker goes
            p.stop_event.set()
        for p in producers:
            p.join(timeout=15)
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                p.kill()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
