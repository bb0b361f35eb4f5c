"""The Spark settings and the options of Spark's Kafka source and sink that depend on the service's settings
(service/spark/job.py, service/spark_kafka_options.py; no Spark needed)."""

from __future__ import annotations

import pytest

from service.settings import load
from service.spark.job import LOCAL_CHECKPOINT_FILE_MANAGER, checkpoint_file_conf
from service.spark_kafka_options import SINK_PRODUCER_DEFAULTS, SOURCE_DEFAULTS, sink_options, source_options

KEY = "spark.sql.streaming.checkpointFileManagerClass"


@pytest.mark.parametrize("path", ["var/checkpoint", "/srv/ck", "file:/srv/ck", "file:///srv/ck", "./ck"])
def test_a_local_checkpoint_gets_the_file_system_based_manager(path):
    assert checkpoint_file_conf(path) == {KEY: LOCAL_CHECKPOINT_FILE_MANAGER}


@pytest.mark.parametrize("path", ["hdfs://nn:8020/ck", "s3a://bucket/ck", "abfss://c@a.dfs.core.windows.net/ck"])
def test_a_remote_checkpoint_keeps_sparks_choice(path):
    assert checkpoint_file_conf(path) == {}


def test_the_source_options_the_service_sets_win_over_source_options():
    s = load(
        [
            "--input-topics", "a,b",
            "--starting-offsets", "latest",
            "--max-offsets-per-trigger", "500",
            "--source-options", "kafka.fetch.max.wait.ms=50,failOnDataLoss=false,minPartitions=4",
        ],
        environ={},
    )  # fmt: skip
    opts = source_options(s)
    assert opts["kafka.bootstrap.servers"] == s.bootstrap_servers
    assert opts["kafka.fetch.max.wait.ms"] == "50" and opts["minPartitions"] == "4"  # source_options over defaults
    assert opts["subscribe"] == "a,b" and opts["startingOffsets"] == "latest"
    assert opts["failOnDataLoss"] == "true" and opts["maxOffsetsPerTrigger"] == "500"  # the service's own
    assert "kafka.isolation.level" not in opts
    assert source_options(load([], environ={}))["kafka.fetch.max.wait.ms"] == SOURCE_DEFAULTS["kafka.fetch.max.wait.ms"]
    assert "maxOffsetsPerTrigger" not in source_options(load([], environ={}))


def test_exactly_once_reads_committed_unless_source_options_say_otherwise():
    eo = ["--processing-guarantee", "exactly_once"]
    assert source_options(load(eo, environ={}))["kafka.isolation.level"] == "read_committed"
    mine = load([*eo, "--source-options", "kafka.isolation.level=read_uncommitted"], environ={})
    assert source_options(mine)["kafka.isolation.level"] == "read_uncommitted"


def test_kafka_options_win_over_the_sinks_producer_defaults():
    key = next(iter(SINK_PRODUCER_DEFAULTS)).removeprefix("kafka.")
    assert sink_options(load([], environ={})) == {
        **SINK_PRODUCER_DEFAULTS,
        "kafka.bootstrap.servers": load([], environ={}).bootstrap_servers,
    }
    assert sink_options(load(["--kafka-options", f"{key}=7"], environ={}))[f"kafka.{key}"] == "7"


def test_the_session_bounds_sparks_status_store_unless_spark_conf_says_otherwise():
    """Every micro-batch adds executions, jobs and stages to Spark's status store (UI off or not): the session
    keeps STATUS_STORE_LIMITS of them; spark_conf (the UI on, say) and then extra_conf override them."""
    from service.spark.job import STATUS_STORE_LIMITS, session_conf

    conf = session_conf(load([], environ={}), "a.jar")
    assert {k: conf[k] for k in STATUS_STORE_LIMITS} == STATUS_STORE_LIMITS
    assert conf["spark.jars"] == "a.jar" and conf["spark.ui.enabled"] == "false"
    mine = load(["--spark-conf", "spark.ui.enabled=true,spark.sql.ui.retainedExecutions=200"], environ={})
    conf = session_conf(mine, "a.jar", {"spark.ui.retainedJobs": "7"})
    assert conf["spark.ui.enabled"] == "true" and conf["spark.sql.ui.retainedExecutions"] == "200"
    assert conf["spark.ui.retainedJobs"] == "7"
    assert conf["spark.ui.retainedStages"] == STATUS_STORE_LIMITS["spark.ui.retainedStages"]
