"""One task's micro-batches through ``service.worker.run.process_task_batch`` without Spark or Kafka: CPU per
batch for several ``state_snapshot_every`` values side by side, with one Python worker or several taking turns.

    .venv/bin/python bench/task_state_bench.py [--keys 2500] [--rate 1250] [--batch-seconds 2.5] \
        [--warmup 60] [--batches 20] [--workers 1,2] [--snapshot-every 1,8] [--repeat 3]

The stream is the service bench's for one of its 4 input partitions: ``--keys`` accounts, ``--rate`` records
per second of event time, 5% of them up to 10 s out of order, JSON values, 60 s windows with 10 s grace,
``count,sum:amount,max:amount,max:sent``, update mode, JSON changelog. State lives in memory
(:class:`~service.task.state.DictTaskState`), so what is measured is the Python side of a task batch: decoding,
the window engine, the changelog rows, and exporting or logging the state (the JVM's share of writing it is
not). With ``--workers`` above 1 each batch goes to a worker picked at random (worker caches), as Spark hands a
task to whichever Python worker is idle; the same seed gives every configuration the same turns. At the end a
restart is timed: a worker without the task's processor takes one record,
restores the latest snapshot and replays the log entries written since ("restore s", "(entries)": how many; the
count depends on where in a snapshot generation the run ends; a snapshot's keys are read as records touch them,
so with nothing to replay a restart costs almost nothing here).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.output import ChangelogSpec
from connectors.serde import InputSpec, aggregation_fields
from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskRunner
from service.task.state import DictTaskState
from service.worker.cache import WorkerCache
from service.worker.run import process_task_batch
from windowstore import WindowDefinition

AGGS = "count,sum:amount,max:amount,max:sent"


def run(
    keys: int,
    rate: float,
    batch_s: float,
    warmup: int,
    batches: int,
    workers: int,
    snapshot_every: int,
) -> dict:
    cfg = TaskConfig(
        WindowDefinition("sliding", 60_000, grace_ms=10_000),
        AGGS,
        "update",
        InputSpec(fields=aggregation_fields(AGGS)),
        ChangelogSpec("json", "json", AGGS),
        "out",
        "late",
        "dlq",
        state_snapshot_every=snapshot_every,
    )
    runner = TaskRunner(cfg)
    state = DictTaskState()
    rnd = random.Random(1)
    turns = random.Random(2)
    caches = [WorkerCache() for _ in range(workers)]
    t = 1_795_300_000_000
    off = 0
    totals = {"cpu": 0.0, "hits": 0, "replayed": 0, "changelog": 0, "log_bytes": 0, "bucket_bytes": 0}
    for i in range(warmup + batches):
        n = int(rate * batch_s)
        offs, ks, vs, ts = [], [], [], []
        for j in range(n):
            now = t + int(j * 1000 / rate)
            offs.append(off)
            off += 1
            ks.append(b"acct-%05d" % rnd.randrange(keys))
            vs.append(b'{"amount": %d, "sent": %d}' % (rnd.randint(1, 1000), now))
            ts.append(now - rnd.randint(1, 10_000) if rnd.random() < 0.05 else now)
        t += int(batch_s * 1000)
        worker = caches[turns.randrange(workers)]
        c0 = time.process_time()
        out = process_task_batch(runner, state, TaskBatch("in", 0, offs, ks, vs, ts), cache=worker)
        if i >= warmup:
            totals["cpu"] += time.process_time() - c0
            totals["hits"] += out.stats["state_cache_hit"]
            totals["replayed"] += out.stats["state_log_replayed"]
            totals["changelog"] += out.stats["changelog"]
    # a restart: a worker without the task's processor takes one record; it restores the latest snapshot and
    # replays the log entries written since
    c0 = time.process_time()
    restart = TaskBatch("in", 0, [off], [b"acct-00000"], [b'{"amount": 1, "sent": 0}'], [t])
    out = process_task_batch(runner, state, restart, cache=WorkerCache())
    totals["restore"] = time.process_time() - c0
    totals["restore_replayed"] = out.stats["state_log_replayed"]
    for b, data in state.buckets.items():
        totals["log_bytes" if b < 0 else "bucket_bytes"] += len(data)
    return totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=2500)
    ap.add_argument("--rate", type=float, default=1250.0, help="records per second of event time")
    ap.add_argument("--batch-seconds", type=float, default=2.5, help="event time per micro-batch")
    ap.add_argument("--warmup", type=int, default=60, help="batches before measuring (fills the windows)")
    ap.add_argument("--batches", type=int, default=20, help="measured batches")
    ap.add_argument("--workers", default="1,2", help="Python workers taking turns (comma-separated list)")
    ap.add_argument("--snapshot-every", default="1,8", help="state_snapshot_every values (comma-separated)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs per configuration, interleaved (this VM's speed "
        "drifts by up to 2x within minutes); the table shows the median, with the range",
    )
    args = ap.parse_args()
    workers = [int(x) for x in args.workers.split(",")]
    everies = [int(x) for x in args.snapshot_every.split(",")]
    print(
        f"python {sys.version.split()[0]}, {args.keys} keys, {args.rate:g} records/s, {args.batch_seconds:g} s "
        f"batches, {args.batches} measured after {args.warmup}\n"
    )
    header = (
        f"{'workers':>7} {'snapshot every':>14} {'CPU s/batch':>11} {'(min-max)':>13} "
        f"{'vs first':>8} {'hits':>5} {'replayed':>8} {'changelog/batch':>15} "
        f"{'state MB at end':>15} {'restore s':>9} {'(entries)':>9}"
    )
    print(header)
    print("-" * len(header))
    for w in workers:
        runs: dict[int, list[dict]] = {every: [] for every in everies}
        for _ in range(args.repeat):  # interleaved: every configuration once per round
            for every in everies:
                runs[every].append(run(args.keys, args.rate, args.batch_seconds, args.warmup, args.batches, w, every))
        first = None
        for every in everies:
            rs = runs[every]
            cpus = sorted(r["cpu"] / args.batches for r in rs)
            cpu = statistics.median(cpus)
            first = first or cpu
            r = rs[0]
            print(
                f"{w:>7} {every:>14} {cpu:>11.3f} "
                f"{f'({cpus[0]:.3f}-{cpus[-1]:.3f})':>13} {cpu / first:>7.2f}x {r['hits']:>5} "
                f"{r['replayed']:>8} {r['changelog'] / args.batches:>15,.0f} "
                f"{(r['log_bytes'] + r['bucket_bytes']) / 1e6:>15.1f} {r['restore']:>9.2f} "
                f"{r['restore_replayed']:>9}",
                flush=True,
            )


if __name__ == "__main__":
    main()
