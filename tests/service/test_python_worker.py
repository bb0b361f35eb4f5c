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
    """Yields, per grouping key, what it was handed: the key and every row (column names and values, whether it
    came as a Row or in an Arrow record batch), whether this worker is service.spark.python_worker and whether it
    imported pandas. Under the service's worker it answers with an Arrow record batch, as the service's processor
    does."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        import pyspark.worker
        from pyspark.sql import Row

        items = list(rows)
        arrow = [hasattr(r, "num_rows") for r in items]
        as_dicts = [d for r in items for d in (r.to_pylist() if hasattr(r, "num_rows") else [r.asDict()])]
        seen = {
            "key": [type(k).__name__ + ":" + repr(k) for k in key],
            "columns": sorted({tuple(d) for d in as_dicts}),
            "rows": [[repr(v) for v in d.values()] for d in as_dicts],
        }
        fast = bool(getattr(pyspark.worker.read_udfs, "_slidingwindow", False))
        out = {
            "seen": json.dumps(seen),
            "fast": fast,
            "pyspark": pyspark.__file__,
            "pandas": "pandas" in sys.modules,
            "arrow": len(set(arrow)) == 1 and arrow[0],
        }
        if fast:
            yield pa.RecordBatch.from_pylist([out])  # inferred types, which the worker casts where they differ
        else:
            yield Row(**out)

    def close(self) -> None:
        pass


def _echo(fast: bool) -> tuple[list[dict], list[Any], Any]:
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
        # small Arrow batches: keys span batch boundaries
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    )
    for k, v in python_worker_conf(fast).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    try:
        from service.spark.job import OUTPUT_SCHEMA

        output_struct = spark.createDataFrame([], OUTPUT_SCHEMA).schema  # for the output schema's check
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
            .transformWithState(
                statefulProcessor=EchoProcessor(),
                outputStructType="seen string, fast boolean, pyspark string, pandas boolean, arrow boolean",
                outputMode="Append",
                timeMode="None",
            )
            .collect()
        )
    finally:
        spark.stop()
    seen = sorted((json.loads(r["seen"]) for r in out), key=lambda s: s["key"])
    return seen, out, output_struct


@pytest.mark.integration
def test_the_processor_gets_what_pyspark_gives_it():
    pyspark = pytest.importorskip("pyspark")
    stock, stock_out, _ = _echo(fast=False)
    fast, fast_out, output_struct = _echo(fast=True)
    assert {r["fast"] for r in stock_out} == {False}
    assert {r["fast"] for r in fast_out} == {True}, "spark.python.worker.module did not run service.spark.python_worker"
    # pyspark's daemon imports Spark's zip of pyspark; the service's the installed package (service.spark.pyspark_path)
    assert all(".zip" in r["pyspark"] for r in stock_out), stock_out
    assert {r["pyspark"] for r in fast_out} == {pyspark.__file__}
    # the service's worker hands Arrow record batches and never imports pandas; pyspark's hands Rows
    assert {r["arrow"] for r in fast_out} == {True}
    assert {r["arrow"] for r in stock_out} == {False}
    assert {r["pandas"] for r in fast_out} == {False}
    assert len(stock) == 12  # 3 topics x 4 partitions
    assert sum(len(s["rows"]) for s in stock) == 240
    assert fast == stock  # the same keys, column names and values, in the same order
    # task_rows builds the output's Arrow columns itself: they must be what pyspark makes of the job's OUTPUT_SCHEMA
    from pyspark.sql.pandas.types import to_arrow_type

    from service.spark.task_rows import OUTPUT_FIELDS, output_arrow_schema

    converted = pa.schema(list(to_arrow_type(output_struct, timezone="UTC", prefers_large_types=False)))
    assert converted == output_arrow_schema()
    assert tuple(converted.names) == OUTPUT_FIELDS


def test_an_output_batch_is_cast_to_the_output_schema():
    schema = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.string())])
    batch = pa.record_batch([pa.array([1, 2], pa.int32()), pa.array(["a", None])], names=["x", "y"])
    out = python_worker._conformed(batch, schema)
    assert out.schema == schema
    assert out.to_pylist() == [{"n": 1, "s": "a"}, {"n": 2, "s": None}]
    assert python_worker._conformed(out, schema) is out
    with pytest.raises(ValueError, match="1 columns"):
        python_worker._conformed(batch.select([0]), schema)
