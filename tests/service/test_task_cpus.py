"""How many cores a Spark task takes (service/spark/task_cpus.py) and what the session gets from it
(service/spark/job.py's ``session_conf``; no Spark needed: ``test_e2e`` runs the service with task_cpus=2)."""

from __future__ import annotations

import pytest

from service.settings import SettingsError, load
from service.spark import task_cpus
from service.spark.job import session_conf
from service.spark.task_cpus import available_cores, local_cores


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[1]", 1),
        ("local[3]", 3),
        ("local[12,4]", 12),
        ("local[*]", 6),
        ("local[*,2]", 6),
        (" local[2] ", 2),
        ("spark://10.0.0.1:7077", None),
        ("local-cluster[2,1,1024]", None),
        ("yarn", None),
        ("local[0]", None),
        ("local[x]", None),
    ],
)
def test_local_cores_reads_the_masters_core_count(master, cores):
    assert local_cores(master, available=6) == cores


def test_available_cores_are_lowered_to_a_cgroup_v2_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(task_cpus.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    assert available_cores(str(tmp_path)) == 4  # no cgroup files: the affinity
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert available_cores(str(tmp_path)) == 4
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert available_cores(str(tmp_path)) == 2  # rounded up, as the JVM does
    (tmp_path / "cpu.max").write_text("800000 100000\n")
    assert available_cores(str(tmp_path)) == 4  # never above the affinity


def test_available_cores_read_a_cgroup_v1_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(task_cpus.os, "sched_getaffinity", lambda _pid: set(range(8)), raising=False)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cores(str(tmp_path)) == 8  # -1: no quota
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    assert available_cores(str(tmp_path)) == 3


def test_the_session_gets_spark_task_cpus_and_spark_conf_wins():
    assert "spark.task.cpus" not in session_conf(load(["--spark-master", "local[2]"], environ={}), "")
    two = load(["--spark-master", "local[2]", "--task-cpus", "2"], environ={})
    assert session_conf(two, "")["spark.task.cpus"] == "2"
    cluster = load(["--spark-master", "spark://h:7077", "--task-cpus", "2"], environ={})
    assert session_conf(cluster, "")["spark.task.cpus"] == "2"
    user = load(["--spark-master", "local[2]", "--task-cpus", "2", "--spark-conf", "spark.task.cpus=1"], environ={})
    assert session_conf(user, "")["spark.task.cpus"] == "1"


def test_more_cores_a_task_than_the_local_master_has_is_a_settings_error():
    with pytest.raises(SettingsError, match=r"task_cpus.*is 3, more than the 2 cores of spark_master local\[2\]"):
        load(["--spark-master", "local[2]", "--task-cpus", "3"], environ={})
    with pytest.raises(SettingsError, match="task_cpus"):
        load(["--task-cpus", "-1"], environ={})
    assert load(["--spark-master", "spark://h:7077", "--task-cpus", "4"], environ={}).task_cpus == 4
    assert load([], environ={"SLIDINGWINDOW_TASK_CPUS": "1"}).task_cpus == 1
