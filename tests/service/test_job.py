"""service/spark/job.py pieces that run inside Spark (the ``spark`` fixture of tests/conftest.py, no Kafka)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_task_slot_is_the_first_slot_that_lands_on_the_target(spark):
    """The slot is part of every task's state key: it must stay exactly the smallest s in [0, TASK_SLOTS) with
    pmod(hash(topic, partition, s), n) = the target (the definition the first checkpoints were written with,
    evaluated with all TASK_SLOTS hashes), for any topic, partition and n - and put each task on its target. With
    the input topics given, their slots come from the driver's table (service.spark.slots) - the same slots for
    the table's partitions, past its end and for a topic it does not list."""
    from pyspark.sql import functions as F

    from service.spark.job import TASK_SLOTS, task_slot
    from service.spark.slots import TABLE_PARTITIONS

    topics = ("in", "payments", "a.b-c_9", "x" * 200)
    edge = range(TABLE_PARTITIONS - 3, TABLE_PARTITIONS + 3)
    rows = [(t, p) for t in (*topics, "not-listed") for p in (*range(48), *edge)]
    df = spark.createDataFrame(rows, "topic string, partition int")
    for n in (1, 2, 3, 4, 7):
        target = f"pmod(pmod(hash(topic), {n}) + partition, {n})"
        hits = f"transform(sequence(0, {TASK_SLOTS - 1}), s -> pmod(hash(topic, partition, s), {n}) = {target})"
        for slot in (task_slot(n), task_slot(n, topics)):
            got = df.select(
                "topic",
                "partition",
                slot.alias("slot"),
                (F.expr(f"array_position({hits}, true)") - 1).cast("int").alias("reference"),
                F.pmod(F.hash("topic", "partition", slot), F.lit(n)).alias("lands"),
                F.expr(target).alias("target"),
            ).collect()
            assert [r.slot for r in got] == [r.reference for r in got]
            assert all(r.slot >= 0 and r.lands == r.target for r in got)


def test_spark_hash_is_sparks_hash_of_strings_and_ints(spark):
    """The driver's port of Spark's ``hash`` (the slot table's) against Spark's own: strings of every length
    modulo 4 (Spark hashes the tail bytes one round each), non-ASCII text, negative ints, chains of values."""
    from service.spark.slots import spark_hash

    texts = ["", "a", "ab", "abc", "abcd", "abcde", "topic.name-with_9", "é", "日本語のトピック", "x" * 203]
    rows = [(t, i) for t in texts for i in (0, 1, -1, 7, 2**31 - 1, -(2**31))]
    df = spark.createDataFrame(rows, "t string, i int")
    got = df.selectExpr("t", "i", "hash(t) AS h1", "hash(i) AS h2", "hash(t, i, 5) AS h3").collect()
    assert [(r.h1, r.h2, r.h3) for r in got] == [
        (spark_hash(r.t), spark_hash(r.i), spark_hash(r.t, r.i, 5)) for r in got
    ]


def test_the_local_checkpoint_file_manager_is_a_class_of_this_spark(spark):
    """build_spark names it by its class name; Spark 3.5 had it in another package, so an upgrade can break it."""
    from service.spark.job import LOCAL_CHECKPOINT_FILE_MANAGER

    cls = spark.sparkContext._jvm.java.lang.Class.forName(LOCAL_CHECKPOINT_FILE_MANAGER)
    assert cls.getName() == LOCAL_CHECKPOINT_FILE_MANAGER


def test_the_status_store_limits_are_settings_of_this_spark_below_its_defaults(spark):
    """build_spark bounds Spark's status store by name: a name Spark does not know would be ignored silently, and
    the JVM's heap would grow with every micro-batch again (an upgrade can rename them)."""
    from service.spark.job import STATUS_STORE_LIMITS

    entries = spark.sparkContext._jvm.org.apache.spark.internal.config.ConfigEntry
    for key, value in STATUS_STORE_LIMITS.items():
        entry = entries.findEntry(key)
        assert entry is not None, key
        assert 0 < int(value) < int(entry.defaultValueString()), (key, entry.defaultValueString())


def test_warm_python_workers_starts_workers_that_imported_the_task_code(spark, caplog):
    """The warm-up job runs in the service's Python workers and imports the task code there (a head start for
    the first micro-batch); it reports how many workers answered."""
    import logging

    from service.spark.warmup import warm_python_workers

    with caplog.at_level(logging.INFO, logger="service.spark.warmup"):
        thread = warm_python_workers(spark, 2)
        thread.join(timeout=300)
    assert not thread.is_alive()
    lines = [r.getMessage() for r in caplog.records if r.name == "service.spark.warmup"]
    assert len(lines) == 1 and "Python workers ready in" in lines[0], lines


def test_the_listener_hands_over_the_progress_pyspark_would_build(spark):
    """query_listener builds each progress from its JSON (one JVM call, service/spark/listener.py) rather than
    pyspark's walk of the Java object: the driver must get the same progress - every field, and observed
    metrics whose counters observed_values reads the same - and every micro-batch's."""
    import json
    import threading

    from pyspark.sql import functions as F
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    from service.spark.job import OBSERVATION, observed_values
    from service.spark.listener import query_listener
    from service.task.stats import STATS_FIELDS

    got: list = []
    seen = threading.Condition()

    def keep(progress):
        with seen:
            got.append(progress)
            seen.notify_all()

    listener = query_listener(keep, lambda: None)
    spark.streams.addListener(listener)
    try:
        stats = F.struct(
            F.lit("in").alias("topic"),
            F.col("partition"),
            F.array(*[F.col("value") + i for i in range(len(STATS_FIELDS))]).alias("stats"),
        )
        src = spark.readStream.format("rate").option("rowsPerSecond", 50).option("numPartitions", 2).load()
        frame = src.select((F.col("value") % 2).cast("int").alias("partition"), "value").observe(
            OBSERVATION, F.collect_list(stats).alias("tasks")
        )
        q = frame.writeStream.format("noop").queryName("listener_test").start()
        try:
            with seen:
                assert seen.wait_for(lambda: any(p.numInputRows for p in got), timeout=120)
        finally:
            q.stop()
        java = q._jsq.recentProgress()
        by_batch = {int(j.batchId()): StreamingQueryProgress.fromJObject(j) for j in java}
    finally:
        spark.streams.removeListener(listener)
    with_rows = [p for p in got if p.numInputRows]
    assert with_rows and all(p.batchId in by_batch for p in got)
    for p in got:
        ref = by_batch[p.batchId]
        # the driver reads the progress's JSON (offsets, rates, durations) and these fields
        assert json.loads(p.json) == json.loads(ref.json)
        assert (p.id, p.runId, p.batchId, p.timestamp, p.durationMs, p.eventTime, p.numInputRows) == (
            ref.id,
            ref.runId,
            ref.batchId,
            ref.timestamp,
            ref.durationMs,
            ref.eventTime,
            ref.numInputRows,
        )
        if OBSERVATION in ref.observedMetrics:
            assert observed_values(p.observedMetrics[OBSERVATION]) == observed_values(ref.observedMetrics[OBSERVATION])
    assert any(observed_values(p.observedMetrics[OBSERVATION])["tasks"] for p in with_rows)
    # built from the JSON (not pyspark's walk of the Java object, whose nested rows are Rows, not dicts)
    assert all(isinstance(t, dict) for p in with_rows for t in p.observedMetrics[OBSERVATION]["tasks"])
