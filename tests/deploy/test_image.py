"""The service image (``make image``) run for real, against the test's local broker, the way an operator runs it:
it consumes and writes its changelog, ``/metrics`` answers, its ``HEALTHCHECK`` passes once the query processes,
SIGTERM stops it within the compose file's ``stop_grace_period`` with exit 0, a second container on the same
checkpoint resumes exactly, it runs as the non-root user, and the image holds no Maven, build tools or test-only
packages. Needs a Docker engine and the image: ``make test-image`` provides both (and stops the engine it started);
without them every test here is skipped with the reason."""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from tests.deploy.docker_harness import IMAGE, Container, docker, image_problem
from tests.deploy.prometheus_server import free_port
from tests.service.events import changelog_final, payment_events, replay
from tests.service.harness import committed_offsets, consume_all, produce

logger = logging.getLogger(__name__)

pytestmark = [pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICE_UID = 10001
AGGS = "count,sum:amount,max:amount"
TD, GRACE, PARTITIONS = 1000, 300, 3


def _grace_seconds(value: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return int(float(value[:-1]) * units[value[-1]]) if value[-1] in units else int(value)


STOP_GRACE_S = _grace_seconds(str(COMPOSE["services"]["slidingwindow"]["stop_grace_period"]))


@pytest.fixture(scope="module")
def image() -> str:
    problem = image_problem()
    if problem:
        pytest.skip(f"image tests need a Docker engine and the image: {problem}")
    return IMAGE


@pytest.fixture
def name(request: pytest.FixtureRequest):
    names: list[str] = []

    def make(kind: str) -> str:
        names.append(f"slidingwindow-test-{kind}-{uuid.uuid4().hex[:8]}")
        return names[-1]

    yield make
    for n in names:
        docker("rm", "-f", n, check=False)


def _service_checkpoint(tmp_path: Path) -> Path:
    """A host folder for the checkpoint bind mount, owned by the service's uid (as the README says to do)."""
    ck = tmp_path / "checkpoint"
    ck.mkdir()
    os.chown(ck, SERVICE_UID, SERVICE_UID)
    return ck


def test_image_holds_no_maven_build_tools_or_test_packages(image):
    script = (
        "for t in mvn javac gcc cc make pip; do command -v $t && echo FOUND:$t; done; "
        'python -c "import importlib.util as u; '
        "print('MODULES:' + ','.join(m for m in ('testcontainers', 'docker', 'pytest', 'hypothesis', 'pip', "
        "'setuptools') if u.find_spec(m)))\"; "
        "ls /root/.m2 /home/slidingwindow/.m2 2>/dev/null && echo FOUND:m2; id -u"
    )
    r = docker("run", "--rm", "--network", "host", "--entrypoint", "sh", image, "-c", script)
    out = r.stdout.splitlines()
    assert not [ln for ln in out if ln.startswith("FOUND:")], r.stdout
    assert "MODULES:" in out, r.stdout
    assert out[-1] == str(SERVICE_UID)  # the image's user, not root
    # the JRE runs, the connector jars are baked in, pyspark imports
    r = docker(
        "run",
        "--rm",
        "--network",
        "host",
        "--entrypoint",
        "sh",
        image,
        "-c",
        "java -version 2>&1 | head -1; ls /opt/slidingwindow/jars | grep -c kafka; "
        "python -c 'import pyspark; print(pyspark.__version__)'",
    )
    lines = r.stdout.splitlines()
    assert "openjdk" in lines[0] and int(lines[1]) > 0 and lines[2][0].isdigit(), r.stdout
    # the product is the installed wheel: its packages come from site-packages, no source tree is in the image
    r = docker(
        "run",
        "--rm",
        "--network",
        "host",
        "--entrypoint",
        "sh",
        image,
        "-c",
        "python -c 'import service, windowstore, connectors; print(service.__file__)'; "
        "slidingwindow --help >/dev/null && echo COMMAND:ok; if [ -e /app ]; then echo FOUND:app; fi",
    )
    lines = r.stdout.splitlines()
    assert lines[0].startswith("/opt/venv/lib/") and "site-packages" in lines[0], r.stdout
    assert "COMMAND:ok" in lines and "FOUND:app" not in lines, r.stdout


def test_root_owned_checkpoint_bind_mount_stops_with_one_clear_line(image, name, tmp_path):
    """uid 10001 cannot write a root-owned host folder: the service says so in one line and exits 1 (before it
    contacts Kafka or starts Spark), no PermissionError traceback."""
    ck = tmp_path / "root-owned"
    ck.mkdir(mode=0o755)
    c = Container(
        name("rootck"),
        {
            "SLIDINGWINDOW_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "SLIDINGWINDOW_INPUT_TOPICS": "in",
            "SLIDINGWINDOW_CHANGELOG_TOPIC": "out",
            "SLIDINGWINDOW_METRICS_PORT": str(free_port()),
        },
        volumes=[f"{ck}:/var/lib/slidingwindow/checkpoint"],
        image=image,
    ).run()
    assert c.wait_exit(timeout=120) == 1
    logs = c.logs()
    assert "Traceback" not in logs and "PermissionError" not in logs, logs
    lines = [ln for ln in logs.splitlines() if "checkpoint folder" in ln]
    assert len(lines) == 1 and "not writable" in lines[0] and f"uid {SERVICE_UID}" in lines[0], logs
    assert "chown" in lines[0] and "--user" in lines[0]


def _wait(predicate, timeout: float, what: str, container: Container) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return time.monotonic() - t0
        assert container.running(), (
            f"{container.name} exited ({container.exit_code()}) before {what}:\n{container.logs()}"
        )
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout}s\n{container.logs()}")


def _changelog_records(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions)
    finally:
        c.close()


@pytest.mark.integration
def test_container_processes_stops_on_sigterm_and_a_second_one_resumes_exactly(
    image, name, kafka_bootstrap, make_topic, tmp_path
):
    topics = {
        "in": make_topic(PARTITIONS, config={"retention.ms": "-1"}, prefix="in"),
        "out": make_topic(PARTITIONS, config={"cleanup.policy": "compact"}, prefix="out"),
        "late": make_topic(PARTITIONS, prefix="late"),
        "dlq": make_topic(PARTITIONS, prefix="dlq"),
    }
    events = payment_events(1600, keys=12, partitions=PARTITIONS, td=TD, grace=GRACE, seed=3301)
    first_half, second_half = events[:800], events[800:]
    ck = _service_checkpoint(tmp_path)
    port = free_port()
    env = {
        "SLIDINGWINDOW_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SLIDINGWINDOW_INPUT_TOPICS": topics["in"],
        "SLIDINGWINDOW_CHANGELOG_TOPIC": topics["out"],
        "SLIDINGWINDOW_LATE_TOPIC": topics["late"],
        "SLIDINGWINDOW_DEAD_LETTER_TOPIC": topics["dlq"],
        "SLIDINGWINDOW_AGGREGATIONS": AGGS,
        "SLIDINGWINDOW_TIME_DIFFERENCE": f"{TD}ms",
        "SLIDINGWINDOW_GRACE": f"{GRACE}ms",
        "SLIDINGWINDOW_CHANGELOG_FORMAT": "json",
        "SLIDINGWINDOW_CHANGELOG_KEY_FORMAT": "json",
        "SLIDINGWINDOW_TRIGGER_INTERVAL": "1s",
        "SLIDINGWINDOW_MAX_OFFSETS_PER_TRIGGER": "400",
        "SLIDINGWINDOW_SPARK_MASTER": "local[2]",
        "SLIDINGWINDOW_STATE_PARTITIONS": "2",
        "SLIDINGWINDOW_METRICS_PORT": str(port),
    }
    volume = [f"{ck}:/var/lib/slidingwindow/checkpoint"]
    ends1 = produce(kafka_bootstrap, topics["in"], first_half)

    first = Container(name("first"), env, volume, image=image).run()
    first_output = _wait(
        lambda: _changelog_records(kafka_bootstrap, topics["out"]) > 0, 300, "first changelog record", first
    )
    _wait(
        lambda: all(committed_offsets(ck)[1].get(topics["in"], {}).get(p, 0) >= n for p, n in ends1.items()),
        300,
        "first half committed",
        first,
    )

    # /metrics answers and counts what was consumed
    def consumed() -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        return next(
            float(ln.split()[1]) for ln in text.splitlines() if ln.startswith("slidingwindow_records_consumed_total ")
        )

    _wait(lambda: consumed() >= len(first_half), 60, "/metrics counting the first half", first)
    # the image's own HEALTHCHECK command passes now that the query processes, and Docker reports healthy
    health_cmd = first.inspect()["Config"]["Healthcheck"]["Test"]
    assert health_cmd[0] == "CMD" and "service.healthcheck" in " ".join(health_cmd)
    r = first.exec(*health_cmd[1:])
    assert r.returncode == 0 and r.stdout.startswith("healthy: processing"), r.stdout + r.stderr
    # every process of the container runs as the service's uid (tini, the driver, its JVM, Python workers)
    top = docker("top", first.name).stdout.splitlines()[1:]  # UID PID PPID ... CMD
    assert top and {ln.split()[0] for ln in top} == {str(SERVICE_UID)}, top
    # SIGTERM (docker stop) within the compose file's stop_grace_period: exit 0, not the SIGKILL after it (137)
    stop_s = first.stop(STOP_GRACE_S)
    assert first.exit_code() == 0, first.logs()
    assert "Traceback" not in first.logs(400)
    at_stop = committed_offsets(ck)

    counts = produce(kafka_bootstrap, topics["in"], second_half)  # records per partition of this call
    ends = {p: ends1.get(p, 0) + counts.get(p, 0) for p in set(ends1) | set(counts)}  # end offsets of the topic
    second = Container(name("second"), env, volume, image=image).run()
    _wait(
        lambda: all(committed_offsets(ck)[1].get(topics["in"], {}).get(p, 0) >= n for p, n in ends.items()),
        300,
        "second half committed",
        second,
    )
    assert committed_offsets(ck)[0] > at_stop[0]  # it continued the checkpoint's batch ids
    second.stop(STOP_GRACE_S)
    assert second.exit_code() == 0, second.logs()
    # measured, not asserted (bench/RESULTS.md and the README quote them): pytest -o log_cli=true shows the line
    logger.info("image %s: first output %.1fs after docker run, docker stop %.1fs", image, first_output, stop_s)
    # where the start-up went: the service's own "Spark <v> session ready in <s>s" (process start to a session)
    session_lines = [ln for ln in first.logs(tail=400).splitlines() if "session ready in" in ln]
    logger.info("image %s: first container's %s", image, session_lines[:1] or "log has no session line")

    exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="update")
    changelog = consume_all(kafka_bootstrap, topics["out"])
    assert changelog_final((r.key, r.value) for r in changelog) == exp.final  # no window lost, none changed
    # every changelog record is a value its window really had (nothing invented across the restart)
    states = {
        (u[0], u[1], u[2], json.dumps(u[3], sort_keys=True), u[4], u[5]) for seq in exp.sequence.values() for u in seq
    }
    for rec in changelog:
        v = json.loads(rec.value)
        assert (
            v["key"],
            v["window_start"],
            v["window_end"],
            json.dumps(v["aggregates"], sort_keys=True),
            v["record_count"],
            v["max_timestamp"],
        ) in states
    # a graceful stop commits what it wrote: late and dead-lettered records exactly once each
    late = consume_all(kafka_bootstrap, topics["late"])
    assert sorted((int(r.headers["partition"]), int(r.headers["offset"])) for r in late) == sorted(exp.late)
    dead = consume_all(kafka_bootstrap, topics["dlq"])
    assert sorted((int(r.headers["partition"]), int(r.headers["offset"])) for r in dead) == sorted(exp.dead)


def test_an_engine_that_cannot_have_the_kafka_images_means_the_local_broker(image, caplog):
    """tests/conftest.py: with an engine that answers, testcontainers is chosen only when its images are present
    or pullable; here no registry answers, so a missing image is reported (and the suite uses the local broker)."""
    from tests import conftest

    missing = conftest._missing_docker_images([image, "slidingwindow-test/never-built:absent"])
    assert list(missing) == ["slidingwindow-test/never-built:absent"]
    assert "not present" in missing["slidingwindow-test/never-built:absent"]


def test_an_engine_without_a_bridge_network_means_the_local_broker(image):
    """tests/conftest.py reads the engine's networks as ``docker network ls`` does; on an engine without a
    ``bridge`` (the host-networking-only dockerd ``make test-image`` starts) it chooses the local broker before
    asking for any image."""
    from tests import conftest

    names = docker("network", "ls", "--format", "{{.Name}}").stdout.split()
    has_bridge = conftest.engine_has_bridge_network()
    assert has_bridge == ("bridge" in names), names
    if has_bridge:
        pytest.skip(f"this engine has a bridge network ({names}); the bridge-less choice is proven by unit tests only")

    def no_image_check() -> dict[str, str]:
        raise AssertionError("the image check ran on a bridge-less engine")

    use, why = conftest.choose_kafka_source(True, has_bridge, no_image_check)
    assert use is False and "no 'bridge' network" in why
