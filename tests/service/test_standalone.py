"""The same job, unchanged, on a Spark standalone cluster: a master and a worker started from the installed
Spark (pyspark's ``bin/spark-class``), the service pointed at ``spark://...``."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.service.events import payment_events, replay
from tests.service.harness import ServiceProcess, consume_all, produce, wait_until_committed
from tests.service.test_e2e import AGGS, GRACE, PARTITIONS, TD, json_final, service_args

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """``spark-class ...Master`` + ``spark-class ...Worker`` on localhost, each in its own process group."""

    def __init__(self, work: Path, cores: int = 2, memory: str = "2g") -> None:
        self.work = work
        self.port, self.ui = _free_port(), _free_port()
        self.cores, self.memory = cores, memory
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _master_ports(self) -> bool:
        """Read the ports the master bound from its log: a port taken between :func:`_free_port` and the
        master's bind makes Spark try the next one ("could not bind on port N. Attempting port N+1")."""
        text = (self.work / "master.log").read_text(errors="replace")
        url = re.search(r"Starting Spark master at spark://[^:\s]+:(\d+)", text)
        ui = re.search(r"Successfully started service 'MasterUI' on port (\d+)", text)
        if url is None or ui is None:
            return False
        self.port, self.ui = int(url.group(1)), int(ui.group(1))
        return True

    def _spawn(self, name: str, *args: str) -> None:
        home = _spark_home()
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_WORKER_DIR": str(self.work / "worker"),
        }
        with open(self.work / f"{name}.log", "wb") as log:
            self.procs.append(
                subprocess.Popen(
                    [str(home / "bin" / "spark-class"), *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )

    def workers_alive(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                state = json.load(r)
        except OSError:
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def start(self, timeout: float = 120) -> StandaloneCluster:
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui),
        )
        deadline = time.monotonic() + timeout
        worker = False
        while not worker or self.workers_alive() < 1:
            if not worker and self._master_ports():
                self._spawn(
                    "worker",
                    "org.apache.spark.deploy.worker.Worker",
                    self.url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    str(_free_port()),
                )
                worker = True
                continue
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                logs = "\n".join(
                    (self.work / f"{n}.log").read_text(errors="replace")[-2000:]
                    for n in ("master", "worker")
                    if (self.work / f"{n}.log").exists()
                )
                self.stop()
                raise AssertionError(f"standalone cluster did not come up:\n{logs}")
            time.sleep(1)
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def cluster(tmp_path):
    c = StandaloneCluster(tmp_path).start()
    yield c
    c.stop()


def test_runs_unchanged_on_a_standalone_cluster(kafka_bootstrap, make_topic, cluster, tmp_path):
    topics = {
        "in": make_topic(PARTITIONS, config={"retention.ms": "-1"}, prefix="in"),
        "out": make_topic(PARTITIONS, config={"cleanup.policy": "compact"}, prefix="out"),
        "late": make_topic(PARTITIONS, prefix="late"),
        "dlq": make_topic(PARTITIONS, prefix="dlq"),
    }
    events = payment_events(1500, keys=9, partitions=PARTITIONS, td=TD, grace=GRACE, seed=404)
    ends = produce(kafka_bootstrap, topics["in"], events)
    ck = tmp_path / "checkpoint"
    args = service_args(
        kafka_bootstrap,
        topics,
        ck,
        "--changelog-format",
        "json",
        "--changelog-key-format",
        "json",
        "--max-offsets-per-trigger",
        "800",
        "--spark-conf",
        "spark.executor.memory=1g,spark.cores.max=2",
    )
    args[args.index("--spark-master") + 1] = cluster.url
    svc = ServiceProcess(args, tmp_path / "service.log", env={"SPARK_LOCAL_IP": "127.0.0.1"}).start()
    try:
        wait_until_committed(ck, topics["in"], ends, svc, timeout=420)
    finally:
        rc = svc.stop()
    assert rc == 0, svc.tail()
    exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="update")
    assert json_final(consume_all(kafka_bootstrap, topics["out"])) == exp.final
    late = consume_all(kafka_bootstrap, topics["late"])
    assert {(int(r.headers["partition"]), int(r.headers["offset"])) for r in late} == exp.late
    # the work ran in the cluster's executor, not in the driver
    assert any((tmp_path / "worker").rglob("stderr"))
    # the driver's block-manager pools were found and bounded with a cluster master too (service.spark.thread_pools)
    assert "block-manager thread pools" not in (tmp_path / "service.log").read_text()
