"""Fixed cost of a micro-batch: the service at a trickle, with Spark's event log, per-stage times.

    .venv/bin/python bench/batch_overhead.py [--rate 20] [--seconds 40] [--state-partitions 2]

Starts a local Kafka broker, runs the service's query (JSON in, emit update, sink direct, trigger 0) on a 4-partition
topic fed live at ``--rate`` records/s (bench/service_bench.py's producer), and prints, over the micro-batches
after the first few: the micro-batch duration (``triggerExecution``) and ``addBatch`` p50, then per Spark stage
kind - the Kafka source stage (reads and shuffles the input) and the stateful stage (the Python processor) - the
stage duration p50 and its tasks' run time and JVM CPU time p50. At a trickle the records cost nothing, so these
are what every micro-batch pays before any work: the floor under the service's latency. Run it on two checkouts
(``PYTHONPATH``) to compare.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def stage_times(event_dir: Path, skip_jobs: int = 3, since_ms: int = 0) -> dict[str, dict[str, float]]:
    """p50 per stage kind ("source": no parent stage, "stateful": the rest) from Spark's (uncompressed) event log,
    over the stages submitted at or after ``since_ms`` (epoch ms) but the first ``skip_jobs`` of each kind."""
    stages: dict[int, tuple[bool, int]] = {}
    tasks: dict[int, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(str(event_dir / "*" / "events_*")) or glob.glob(str(event_dir / "*"))):
        for line in Path(path).read_text().splitlines():
            e = json.loads(line)
            kind = e["Event"]
            if kind == "SparkListenerStageCompleted":
                si = e["Stage Info"]
                if si["Submission Time"] >= since_ms:
                    stages[si["Stage ID"]] = (not si.get("Parent IDs"), si["Completion Time"] - si["Submission Time"])
            elif kind == "SparkListenerTaskEnd":
                m = e.get("Task Metrics") or {}
                tasks.setdefault(e["Stage ID"], []).append(
                    (m.get("Executor Run Time", 0), m.get("Executor CPU Time", 0) / 1e6)
                )
    out: dict[str, dict[str, float]] = {}
    for name, is_source in (("source", True), ("stateful", False)):
        ids = [i for i in sorted(stages) if stages[i][0] is is_source][skip_jobs:]
        if not ids:
            continue
        runs = [r for i in ids for r, _c in tasks.get(i, [])]
        cpus = [c for i in ids for _r, c in tasks.get(i, [])]
        out[name] = {
            "stages": len(ids),
            "stage_ms_p50": statistics.median(stages[i][1] for i in ids),
            "task_run_ms_p50": statistics.median(runs) if runs else 0.0,
            "task_jvm_cpu_ms_p50": statistics.median(cpus) if cpus else 0.0,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=20, help="records/s produced live")
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--state-partitions", type=int, default=2)
    args = ap.parse_args()

    import logging

    logging.basicConfig(level=logging.WARNING)
    from service_bench import LiveProducer

    from connectors.admin import TopicSpec, ensure_topics
    from devtools.local_broker import LocalKafkaBroker
    from service.driver import prepare
    from service.settings import Settings
    from service.spark.job import build_spark, start_query

    work = Path(tempfile.mkdtemp(prefix="sw-overhead-"))
    broker = LocalKafkaBroker(0, data_dir=work / "kafka")
    broker.start()
    bootstrap = broker.bootstrap_servers
    ensure_topics({"bootstrap.servers": bootstrap}, [TopicSpec("in", 4)])
    settings = Settings(
        bootstrap_servers=bootstrap,
        input_topics="in",
        changelog_topic="out",
        late_topic="late",
        dead_letter_topic="dlq",
        changelog_format="json",
        changelog_key_format="json",
        aggregations="count,sum:amount,max:amount",
        time_difference=60_000,
        grace=10_000,
        emit="update",
        checkpoint_dir=str(work / "ck"),
        metrics_port=0,
        state_partitions=args.state_partitions,
        trigger_interval=0,
        spark_master="local[*]",
    )
    events = work / "events"
    events.mkdir()
    spark = build_spark(
        settings,
        {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events), "spark.eventLog.compress": "false"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    load_before = os.getloadavg()[0]
    query = start_query(spark, settings, prepare(settings))
    while not query.recentProgress:
        time.sleep(0.5)
    producer = LiveProducer(bootstrap, "in", args.rate, 10_000, 10_000, 0.05, args.seconds)
    producer.start()
    producer.join()
    time.sleep(3)
    progress = [p for p in query.recentProgress if p.numInputRows][3:]
    query.stop()
    spark.stop()
    broker.stop()
    print(
        f"{args.rate} records/s for {args.seconds:.0f} s, {args.state_partitions} state partitions, "
        f"load average {load_before:.1f} before / {os.getloadavg()[0]:.1f} after"
    )
    if progress:
        print(
            f"micro-batches {len(progress)}: duration p50 "
            f"{statistics.median(p.durationMs['triggerExecution'] for p in progress) / 1000:.2f} s, addBatch p50 "
            f"{statistics.median(p.durationMs.get('addBatch', 0) for p in progress) / 1000:.2f} s"
        )
    for name, t in stage_times(events).items():
        print(
            f"{name:9} stage p50 {t['stage_ms_p50']:.0f} ms over {t['stages']} stages; its tasks: run p50 "
            f"{t['task_run_ms_p50']:.0f} ms, JVM CPU p50 {t['task_jvm_cpu_ms_p50']:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
