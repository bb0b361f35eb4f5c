"""service/spark/job.py pieces that run inside Spark (the ``spark`` fixture of tests/conftest.py, no Kafka)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_task_slot_is_the_first_slot_that_lands_on_the_target(spark):
    """The slot is part of every task's state key: it must stay exactly the smallest s in [0, TASK_SLOTS) with
    pmod(hash(topic, partition, s), n) = the target (the definition the first checkpoints were written with,
    evaluated with all TASK_SLOTS hashes), for any topic, partition and n - and put each task on its target."""
    from pyspark.sql import functions as F

    from service.spark.job import TASK_SLOTS, task_slot

    rows = [(t, p) for t in ("in", "payments", "a.b-c_9", "x" * 200) for p in range(48)]
    df = spark.createDataFrame(rows, "topic string, partition int")
    for n in (1, 2, 3, 4, 7):
        target = f"pmod(pmod(hash(topic), {n}) + partition, {n})"
        hits = f"transform(sequence(0, {TASK_SLOTS - 1}), s -> pmod(hash(topic, partition, s), {n}) = {target})"
        got = df.select(
            "topic",
            "partition",
            task_slot(n).alias("slot"),
            (F.expr(f"array_position({hits}, true)") - 1).cast("int").alias("reference"),
            F.pmod(F.hash("topic", "partition", task_slot(n)), F.lit(n)).alias("lands"),
            F.expr(target).alias("target"),
        ).collect()
        assert [r.slot for r in got] == [r.reference for r in got]
        assert all(r.slot >= 0 and r.lands == r.target for r in got)


def test_the_local_checkpoint_file_manager_is_a_class_of_this_spark(spark):
    """build_spark names it by its class name; Spark 3.5 had it in another package, so an upgrade can break it."""
    from service.spark.job import LOCAL_CHECKPOINT_FILE_MANAGER

    cls = spark.sparkContext._jvm.java.lang.Class.forName(LOCAL_CHECKPOINT_FILE_MANAGER)
    assert cls.getName() == LOCAL_CHECKPOINT_FILE_MANAGER
