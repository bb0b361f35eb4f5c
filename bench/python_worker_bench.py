"""pyspark's worker vs the service's (service.spark.python_worker, "service.python_worker" in the table) on the
processor's input path, in Spark, side by side.

    .venv/bin/python bench/python_worker_bench.py [--rows 400000] [--rounds 2]

Runs a ``transformWithState`` query (pyspark's Row interface, as the service does) over an in-memory table shaped
like the service's input (topic, partition, offset, key, value ~80-byte JSON, ts, slot; 4 partitions -> 4
grouping keys) in a new local[2] session per run, alternately with pyspark's worker (Rows) and with
``fast_input`` (service.spark.python_worker: Arrow slices), each round in both orders. The processor does what the
service's does with its input before the window engine (``service.spark.task_rows.input_columns``: the columns in
offset order as lists) and returns one row per key, so the time is Spark's shuffle and Arrow transfer (alike for
both) plus the Python input path. Prints rows/s of each run and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyspark.sql.streaming import StatefulProcessor  # noqa: E402


class InputOnly(StatefulProcessor):
    """The service processor's input handling (service.spark.processor.WindowTaskProcessor.handleInputRows), only."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
        from pyspark.sql import Row

        from service.spark.task_rows import input_columns

        offsets, keys, values, timestamps = input_columns(list(rows))
        yield Row(n=len(offsets) + len(keys) + len(values) + len(timestamps) >> 2)

    def close(self) -> None:
        pass


def run(rows: int, fast: bool) -> float:
    """Seconds of one query over ``rows`` rows (the table is cached first, so only the query is timed)."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from service.spark.job import python_worker_conf

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("python-worker-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.adaptive.enabled", "false")
    )
    for k, v in python_worker_conf(fast).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        value = F.format_string(
            '{"account":"acct-%05d","amount":%d,"ts":%d}',
            F.col("id") % 10000,
            F.col("id") % 1000,
            F.col("id") + 1_700_000_000_000,
        )
        df = (
            spark.range(rows)
            .select(
                F.lit("payments").alias("topic"),
                (F.col("id") % 4).cast("int").alias("partition"),
                F.col("id").alias("offset"),
                F.format_string("acct-%05d", F.col("id") % 10000).cast("binary").alias("key"),
                value.cast("binary").alias("value"),
                (F.col("id") + 1_700_000_000_000).alias("ts"),
                F.lit(0).alias("slot"),
            )
            .cache()
        )
        df.count()
        query = df.groupBy("topic", "partition", "slot").transformWithState(
            statefulProcessor=InputOnly(), outputStructType="n long", outputMode="Append", timeMode="None"
        )
        query.collect()  # Python workers started and warm
        t0 = time.perf_counter()
        got = sum(r["n"] for r in query.collect())
        elapsed = time.perf_counter() - t0
        assert got == rows, (got, rows)
        return elapsed
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        for fast in (False, True) if r % 2 == 0 else (True, False):
            s = run(args.rows, fast)
            seconds[fast].append(s)
            print(
                json.dumps(
                    {
                        "round": r,
                        "worker": "service.python_worker" if fast else "pyspark",
                        "seconds": round(s, 3),
                        "rows_per_s": round(args.rows / s),
                    }
                ),
                flush=True,
            )
    pyspark_s, fast_s = sum(seconds[False]), sum(seconds[True])
    print("\n| worker | rows/s (each run) | total s |\n|---|---|---:|")
    for fast, total in ((False, pyspark_s), (True, fast_s)):
        each = ", ".join(f"{args.rows / s:,.0f}" for s in seconds[fast])
        print(f"| {'service.python_worker' if fast else 'pyspark'} | {each} | {total:.2f} |")
    print(f"\nservice.python_worker / pyspark throughput: {pyspark_s / fast_s:.2f}x")


if __name__ == "__main__":
    main()
