"""service/python_worker.py: the processor's input regrouped a key run at a time gives a processor exactly what
pyspark's own worker gives it (checked in Spark, with both workers), and the service's Spark runs it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from service import python_daemon, python_worker  # noqa: E402
from service.job import python_worker_conf  # noqa: E402
from service.settings import Settings  # noqa: E402


def test_key_runs_split_where_any_key_column_changes():
    batch = pa.record_batch([pa.array(["a", "a", "b", "b", "b", "a", "a"]), pa.array([1, 1, 1, 2, 2, 2, 2])],
                            names=["topic", "partition"])
    assert python_worker.key_runs(batch, [0]) == [(0, 2), (2, 5), (5, 7)]
    assert python_worker.key_runs(batch, [0, 1]) == [(0, 2), (2, 3), (3, 5), (5, 7)]
    assert python_worker.key_runs(batch, [1]) == [(0, 3), (3, 7)]
    assert python_worker.key_runs(batch.slice(0, 1), [0, 1]) == [(0, 1)]
    assert python_worker.key_runs(batch.slice(0, 0), [0, 1]) == []


def test_key_runs_nulls_equal_nulls():
    batch = pa.record_batch([pa.array([None, None, "x", None, "x", "x"])], names=["k"])
    assert python_worker.key_runs(batch, [0]) == [(0, 2), (2, 3), (3, 4), (4, 6)]


def test_the_setting_selects_the_module():
    assert python_worker_conf(True) == {"spark.python.daemon.module": python_daemon.MODULE,
                                        "spark.python.worker.module": python_worker.MODULE}
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
    """Yields, per grouping key, what it was handed: the key, the frames' column names and dtypes, the rows
    (frames concatenated, as the service's processor does), and whether this worker is service.python_worker."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        import pandas as pd
        import pyspark.worker

        frames = list(rows)
        seen = {"key": [type(k).__name__ + ":" + repr(k) for k in key],
                "columns": sorted({tuple(f.columns) for f in frames}),
                "dtypes": sorted({tuple(str(d) for d in f.dtypes) for f in frames}),
                "rows": [[repr(v) for v in r] for f in frames for r in f.itertuples(index=False)],
                "empty_frames": sum(1 for f in frames if not len(f))}
        fast = bool(getattr(pyspark.worker.read_udfs, "_slidingwindow", False))
        yield pd.DataFrame({"seen": [json.dumps(seen)], "fast": [fast]})

    def close(self) -> None:
        pass


def _echo(fast: bool) -> tuple[list[dict], set[bool]]:
    """Run :class:`EchoProcessor` over a small table in a new local[2] session with or without the module."""
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        SparkSession.getActiveSession().stop()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (SparkSession.builder.master("local[2]").appName("python-worker-test")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "3")
               .config("spark.sql.session.timeZone", "UTC")
               # small Arrow batches: keys span batch boundaries and frames are chunked
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "7"))
    for k, v in python_worker_conf(fast).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    try:
        rows = [(f"t{i % 3}", i % 4, i, f"k{i % 5}".encode(), (b"v" * (i % 3)) or None, 1_000 * i,
                 float(i) / 2, i % 2 == 0, None if i % 6 == 0 else f"s{i}")
                for i in range(60)]
        df = spark.createDataFrame(rows, "topic string, partition int, offset long, key binary, value binary, "
                                         "ts long, x double, b boolean, s string")
        out = df.groupBy("topic", "partition").transformWithStateInPandas(
            statefulProcessor=EchoProcessor(), outputStructType="seen string, fast boolean",
            outputMode="Append", timeMode="None").collect()
    finally:
        spark.stop()
    return sorted((json.loads(r["seen"]) for r in out), key=lambda s: s["key"]), {bool(r["fast"]) for r in out}


@pytest.mark.integration
def test_the_processor_gets_what_pyspark_gives_it():
    pytest.importorskip("pyspark")
    stock, stock_flags = _echo(fast=False)
    fast, fast_flags = _echo(fast=True)
    assert stock_flags == {False}
    assert fast_flags == {True}, "spark.python.worker.module did not run service.python_worker"
    assert len(stock) == 12  # 3 topics x 4 partitions
    for s, f in zip(stock, fast):
        assert f["key"] == s["key"]
        assert f["columns"] == s["columns"]
        assert f["dtypes"] == s["dtypes"]
        assert f["rows"] == s["rows"]
        assert f["empty_frames"] == 0
    assert fast == stock
