"""service/spark/python_worker.py: the processor's input regrouped a key run at a time gives a processor exactly what
pyspark's own worker gives it (checked in Spark, with both workers), and the service's Spark runs it."""

from __future__ import annotations

import datetime
import decimal
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from service.settings import Settings  # noqa: E402
from service.spark import python_daemon, python_worker  # noqa: E402
from service.spark.job import python_worker_conf  # noqa: E402


def test_key_runs_split_where_any_key_column_changes():
    batch = pa.record_batch(
        [pa.array(["a", "a", "b", "b", "b", "a", "a"]), pa.array([1, 1, 1, 2, 2, 2, 2])], names=["topic", "partition"]
    )
    assert python_worker.key_runs(batch, [0]) == [(0, 2), (2, 5), (5, 7)]
    assert python_worker.key_runs(batch, [0, 1]) == [(0, 2), (2, 3), (3, 5), (5, 7)]
    assert python_worker.key_runs(batch, [1]) == [(0, 3), (3, 7)]
    assert python_worker.key_runs(batch.slice(0, 1), [0, 1]) == [(0, 1)]
    assert python_worker.key_runs(batch.slice(0, 0), [0, 1]) == []


def test_key_runs_nulls_equal_nulls():
    batch = pa.record_batch([pa.array([None, None, "x", None, "x", "x"])], names=["k"])
    assert python_worker.key_runs(batch, [0]) == [(0, 2), (2, 3), (3, 4), (4, 6)]


def test_the_setting_selects_the_module():
    assert python_worker_conf(True) == {
        "spark.python.daemon.module": python_daemon.MODULE,
        "spark.python.worker.module": python_worker.MODULE,
    }
    assert python_worker_conf(False) == {}
    assert Settings().fast_input is True
    assert Settings(fast_input="false").fast_input is False


def test_a_closure_without_the_names_is_not_replaced():
    def plain(split_index, batches):
        return iter(())

    assert python_worker._closure_of(plain) is None


# ------------------------------------------------------------------------------------ in Spark, both workers
try:
    from pyspark.sql.streaming import StatefulProcessor
except ImportError:  # pragma: no cover
    StatefulProcessor = object  # type: ignore[assignment,misc]


class EchoProcessor(StatefulProcessor):  # type: ignore[misc,valid-type]
    """Yields, per grouping key, what it was handed: the key and every frame (column names, dtypes, index, rows),
    and whether this worker is service.spark.python_worker."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        import pandas as pd
        import pyspark.worker

        seen = {
            "key": [type(k).__name__ + ":" + repr(k) for k in key],
            "frames": [
                {
                    "columns": list(f.columns),
                    "dtypes": [str(d) for d in f.dtypes],
                    "index": [int(i) for i in f.index],
                    "rows": [[repr(v) for v in r] for r in f.itertuples(index=False)],
                }
                for f in rows
            ],
        }
        fast = bool(getattr(pyspark.worker.read_udfs, "_slidingwindow", False))
        yield pd.DataFrame({"seen": [json.dumps(seen)], "fast": [fast], "pyspark": [pyspark.__file__]})

    def close(self) -> None:
        pass


def _echo(fast: bool) -> tuple[list[dict], set[bool], set[str]]:
    """Run :class:`EchoProcessor` over a small table in a new local[2] session with or without the module."""
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        SparkSession.getActiveSession().stop()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("python-worker-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "3")
        .config("spark.sql.session.timeZone", "UTC")
        # small Arrow batches: keys span batch boundaries and frames are chunked
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    )
    for k, v in python_worker_conf(fast).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    try:
        rows = [
            (
                f"t{i % 3}",
                i % 4,
                i,
                f"k{i % 5}".encode(),
                (b"v" * (i % 3)) or None,
                1_000 * i,
                float(i) / 2,
                i % 2 == 0,
                None if i % 6 == 0 else f"s{i}",
                None if i % 7 == 0 else i % 3,
                None if i % 5 == 0 else float(i),
                i % 100,
                float(i) / 4,
                datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=i),
                datetime.date(2026, 1, 1 + i % 28),
                decimal.Decimal(i) / 8,
                [i, i + 1],
                {"a": i},
            )
            for i in range(240)
        ]
        df = spark.createDataFrame(
            rows,
            "topic string, partition int, offset long, key binary, value binary, "
            "ts long, x double, b boolean, s string, ni int, nf double, "
            "small tinyint, f float, tstamp timestamp, d date, dec decimal(10,3), "
            "arr array<int>, st struct<a:int>",
        )
        out = (
            df.groupBy("topic", "partition")
            .transformWithStateInPandas(
                statefulProcessor=EchoProcessor(),
                outputStructType="seen string, fast boolean, pyspark string",
                outputMode="Append",
                timeMode="None",
            )
            .collect()
        )
    finally:
        spark.stop()
    seen = sorted((json.loads(r["seen"]) for r in out), key=lambda s: s["key"])
    return seen, {bool(r["fast"]) for r in out}, {r["pyspark"] for r in out}


@pytest.mark.integration
def test_the_processor_gets_what_pyspark_gives_it():
    pyspark = pytest.importorskip("pyspark")
    stock, stock_flags, stock_pyspark = _echo(fast=False)
    fast, fast_flags, fast_pyspark = _echo(fast=True)
    assert stock_flags == {False}
    assert fast_flags == {True}, "spark.python.worker.module did not run service.spark.python_worker"
    # pyspark's daemon imports Spark's zip of pyspark; the service's the installed package (service.spark.pyspark_path)
    assert all(".zip" in p for p in stock_pyspark), stock_pyspark
    assert fast_pyspark == {pyspark.__file__}, fast_pyspark
    assert len(stock) == 12  # 3 topics x 4 partitions
    assert any(len(s["frames"]) > 1 for s in stock)  # keys span Arrow batches and are cut into several frames
    for s, f in zip(stock, fast, strict=True):
        assert f["key"] == s["key"]
        assert len(f["frames"]) == len(s["frames"]), s["key"]
        for sf, ff in zip(s["frames"], f["frames"], strict=True):
            assert ff["columns"] == sf["columns"]
            assert ff["dtypes"] == sf["dtypes"]
            assert ff["rows"] == sf["rows"]
    assert fast == stock
