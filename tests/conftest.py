"""Shared pytest fixtures.

Kafka (only started when a test asks for ``kafka_bootstrap`` or ``make_topic``; unit tests never pay for it):

``kafka_bootstrap`` (session)
    Bootstrap servers of a Kafka broker, from the first source that works:

    1. ``$KAFKA_BOOTSTRAP_SERVERS`` (an existing broker; nothing is started or stopped);
    2. a testcontainers Kafka container, if a Docker engine answers a ping, has Docker's default ``bridge`` network
       (testcontainers publishes the broker's port through it; the engine ``make test-image`` starts has none: host
       networking only) *and* the images it needs (Kafka's and, unless ``TESTCONTAINERS_RYUK_DISABLED``, Ryuk's)
       are present locally or can be pulled within ``IMAGE_PULL_TIMEOUT_S``; otherwise the reason is logged
       (:func:`choose_kafka_source`) and the local broker is used;
    3. :class:`devtools.local_broker.LocalKafkaBroker` (JVM from Maven-resolved jars) on a free port, data in a
       session tmp dir.

    ``SLIDINGWINDOW_TEST_KAFKA=local`` or ``=docker`` skips the detection and forces one of 2/3.
``make_topic`` (function)
    ``make_topic(partitions=1, config=None, prefix=None) -> str`` creates a uniquely named topic (prefix: the test
    name) and deletes the topics it created when the test ends.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest

logger = logging.getLogger(__name__)

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
ENV_KAFKA_MODE = "SLIDINGWINDOW_TEST_KAFKA"  # auto (default) | docker | local
ENV_KAFKA_IMAGE = "SLIDINGWINDOW_TEST_KAFKA_IMAGE"  # image for testcontainers' KafkaContainer (Confluent cp-kafka)
DOCKER_PING_TIMEOUT_S = 3
IMAGE_PULL_TIMEOUT_S = 20
DEFAULT_KAFKA_IMAGE = "confluentinc/cp-kafka:7.6.0"  # testcontainers' KafkaContainer default


def _docker_engine_answers() -> bool:
    """True if a Docker engine answers a ping within a few seconds (a docker CLI without a daemon does not)."""
    try:
        import docker  # installed with testcontainers
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=DOCKER_PING_TIMEOUT_S)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # docker.errors.DockerException, connection errors, missing socket, ...
        return False


def _testcontainers_images() -> list[str]:
    """The images a testcontainers Kafka needs: the broker's and, unless disabled, Ryuk's (the reaper)."""
    from testcontainers.core.config import testcontainers_config

    images = [os.environ.get(ENV_KAFKA_IMAGE) or DEFAULT_KAFKA_IMAGE]
    if not testcontainers_config.ryuk_disabled:
        images.append(testcontainers_config.ryuk_image)
    return images


def _missing_docker_images(images: list[str]) -> dict[str, str]:
    """``{image: reason}`` for every image neither present in the engine nor pullable within
    ``IMAGE_PULL_TIMEOUT_S`` (an engine answers pings on machines that reach no registry)."""
    import concurrent.futures

    import docker

    missing: dict[str, str] = {}
    client = docker.from_env(timeout=IMAGE_PULL_TIMEOUT_S)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        for image in images:
            try:
                client.images.get(image)
                continue
            except docker.errors.ImageNotFound:
                pass
            except Exception as e:  # the engine stopped answering
                missing[image] = f"engine error: {e}"
                continue
            try:
                pool.submit(client.images.pull, image).result(timeout=IMAGE_PULL_TIMEOUT_S)
            except concurrent.futures.TimeoutError:
                missing[image] = f"not present and not pulled within {IMAGE_PULL_TIMEOUT_S}s"
            except Exception as e:  # docker.errors.APIError: registry unreachable, unknown image, ...
                missing[image] = f"not present and cannot be pulled: {str(e).splitlines()[0][:200]}"
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        client.close()
    return missing


def engine_has_bridge_network() -> bool | None:
    """Whether the answering engine has Docker's default ``bridge`` network (``None``: its networks cannot be
    listed). Without it no container port can be published to the host, which testcontainers' Kafka relies on."""
    import docker

    try:
        client = docker.from_env(timeout=DOCKER_PING_TIMEOUT_S)
        try:
            return any(n.name == "bridge" for n in client.networks.list(names=["bridge"]))
        finally:
            client.close()
    except Exception:  # docker.errors.DockerException, connection errors
        return None


def choose_kafka_source(
    engine_answers: bool, has_bridge: bool | None, missing_images: Callable[[], Mapping[str, str]]
) -> tuple[bool, str]:
    """Auto mode's choice: ``(True, why)`` for testcontainers, ``(False, why)`` for the local broker.

    Testcontainers needs an engine that answers, a ``bridge`` network to publish the broker's port on, and its
    images; ``missing_images`` (``{image: reason}``; it may pull, so it is asked last) is called only when the
    rest holds."""
    if not engine_answers:
        return False, "no Docker engine answers"
    if has_bridge is None:
        return False, "a Docker engine answers but its networks cannot be listed"
    if not has_bridge:
        return False, (
            "the Docker engine has no 'bridge' network (host networking only, like the dockerd make test-image "
            "starts), so testcontainers cannot publish the broker's port"
        )
    missing = missing_images()
    if missing:
        reasons = "; ".join(f"{image}: {why}" for image, why in missing.items())
        return False, f"a Docker engine answers but images cannot be had ({reasons})"
    return True, "a Docker engine with a bridge network answers and the images are present"


def _use_testcontainers() -> bool:
    """Auto mode: :func:`choose_kafka_source` on this machine's engine; says which broker and why in the log."""
    answers = _docker_engine_answers()
    use, why = choose_kafka_source(
        answers,
        engine_has_bridge_network() if answers else None,
        lambda: _missing_docker_images(_testcontainers_images()),
    )
    if use:
        logger.info("Kafka for tests: testcontainers (%s)", why)
    else:
        log = logger.warning if answers else logger.info
        log("Kafka for tests: the local broker, because %s (set %s=docker to insist)", why, ENV_KAFKA_MODE)
    return use


def _kafka_from_testcontainers() -> Iterator[str]:
    from testcontainers.community.kafka import KafkaContainer

    image = os.environ.get(ENV_KAFKA_IMAGE)
    container = KafkaContainer(image) if image else KafkaContainer()
    with container.with_kraft() as kafka:
        yield kafka.get_bootstrap_server()


def _kafka_from_local_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from devtools.local_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(port=0, data_dir=tmp_path_factory.mktemp("kafka"))
    broker.start()
    logger.info("local Kafka broker on %s ready in %.1fs", broker.bootstrap_servers, broker.startup_seconds or 0.0)
    try:
        yield broker.bootstrap_servers
    finally:
        from connectors.producer import close_producers

        close_producers()  # a producer a test left in this process's cache would keep reconnecting
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers (``host:port``) of a Kafka broker for this test session."""
    external = os.environ.get(ENV_BOOTSTRAP)
    if external:
        yield external
        return
    mode = os.environ.get(ENV_KAFKA_MODE, "auto").lower()
    if mode not in ("auto", "docker", "local"):
        raise pytest.UsageError(f"{ENV_KAFKA_MODE} must be auto, docker or local, not {mode!r}")
    if mode == "docker" or (mode == "auto" and _use_testcontainers()):
        yield from _kafka_from_testcontainers()
    else:
        yield from _kafka_from_local_broker(tmp_path_factory)


_TOPIC_UNSAFE = re.compile(r"[^a-zA-Z0-9._-]+")


@pytest.fixture
def make_topic(kafka_bootstrap: str, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """Factory creating uniquely named topics on ``kafka_bootstrap``; deletes them after the test."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created: list[str] = []
    default_prefix = _TOPIC_UNSAFE.sub("-", request.node.name).strip("-.")[:100] or "topic"

    def make(partitions: int = 1, config: Mapping[str, str] | None = None, prefix: str | None = None) -> str:
        name = f"{prefix or default_prefix}-{uuid.uuid4().hex[:10]}"
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
        admin.create_topics([topic], operation_timeout=30)[name].result(timeout=60)
        created.append(name)
        return name

    yield make
    if created:
        for name, future in admin.delete_topics(created, operation_timeout=10).items():
            try:
                future.result(timeout=15)
            except Exception as e:  # best effort: the broker may already be gone
                logger.warning("could not delete topic %s: %s", name, e)


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    """One local[2] SparkSession per test module, with the Kafka connector jars on spark.jars (session start is
    ~10 s)."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from connectors.jars import spark_kafka_jars

    jar_paths = [str(p) for p in spark_kafka_jars()]
    existing = SparkSession.getActiveSession()  # reused (and left running) if another fixture made one
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = existing or (
        SparkSession.builder.master("local[2]")
        .appName("slidingwindow-tests")
        .config("spark.jars", ",".join(jar_paths))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    configured = session.sparkContext.getConf().get("spark.jars", "")
    if not all(j in configured for j in jar_paths):
        pytest.fail(f"a SparkSession without the Kafka connector jars already exists (spark.jars={configured!r})")
    if existing is None:
        session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        if existing is None:
            session.stop()
