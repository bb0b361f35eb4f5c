"""service/spark/job.py's Spark settings that depend on the service's settings (no Spark needed)."""

from __future__ import annotations

import pytest

from service.spark.job import LOCAL_CHECKPOINT_FILE_MANAGER, checkpoint_file_conf

KEY = "spark.sql.streaming.checkpointFileManagerClass"


@pytest.mark.parametrize("path", ["var/checkpoint", "/srv/ck", "file:/srv/ck", "file:///srv/ck", "./ck"])
def test_a_local_checkpoint_gets_the_file_system_based_manager(path):
    assert checkpoint_file_conf(path) == {KEY: LOCAL_CHECKPOINT_FILE_MANAGER}


@pytest.mark.parametrize("path", ["hdfs://nn:8020/ck", "s3a://bucket/ck", "abfss://c@a.dfs.core.windows.net/ck"])
def test_a_remote_checkpoint_keeps_sparks_choice(path):
    assert checkpoint_file_conf(path) == {}
