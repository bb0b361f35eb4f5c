"""A user's first mistakes (issue 29): each ends at start in one line naming the setting, no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from service.settings import Settings, SettingsError, join_negative_values, load
from tests.service.harness import PROJECT


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args], cwd=PROJECT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("argv", [["--time-difference", "-5s"], ["--time-difference=-5s"], ["--grace", "-1"]])
def test_negative_durations_reach_the_rule(argv):
    with pytest.raises(SettingsError, match="must not be negative"):
        load(argv, environ={})


def test_join_negative_values_only_joins_flag_values():
    assert join_negative_values(["run", "--grace", "-5s", "--emit", "update", "--x=-1"]) == [
        "run",
        "--grace=-5s",
        "--emit",
        "update",
        "--x=-1",
    ]


@pytest.mark.parametrize("spec", ["sum", "count,max", "mean", "collect", "first,count"])
def test_every_aggregation_but_count_needs_its_field(spec):
    with pytest.raises(SettingsError, match="needs the value field it reads"):
        Settings(aggregations=spec)
    Settings(aggregations="count,sum:amount,collect:note")


@pytest.mark.parametrize("port", ["70000", "-1", "x"])
def test_metrics_port_range(port):
    with pytest.raises(SettingsError, match="metrics_port"):
        load(["--metrics-port", port], environ={})


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--aggregations", "sum"], "invalid setting aggregations"),
        (["--time-difference", "-5s"], "invalid setting time_difference"),
        (["--metrics-port", "70000"], "invalid setting metrics_port"),
    ],
)
def test_check_settings_fails_in_one_line(args, needle):
    r = _cli("check-settings", *args)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and needle in r.stderr and "Traceback" not in r.stderr


def test_metrics_port_in_use_is_one_line_naming_the_setting():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _cli("run", "--metrics-port", str(port), "--bootstrap-servers", "127.0.0.1:1", "--startup-timeout", "1s")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines == [line for line in lines if "invalid setting metrics_port" in line] and len(lines) == 1
    assert f"port {port}" in lines[0]


def test_unreachable_broker_retries_for_startup_timeout_then_one_line():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _cli(
        "run",
        "--bootstrap-servers",
        f"127.0.0.1:{port}",
        "--metrics-port",
        "0",
        "--startup-timeout",
        "4s",
        "--schema-registry-url",
        "",
        "--changelog-format",
        "json",
        "--changelog-key-format",
        "json",
    )
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "cannot reach Kafka" in errors[0] and "startup_timeout" in errors[0], r.stderr
    assert sum("does not answer yet" in line for line in r.stderr.splitlines()) >= 1


@pytest.mark.integration
def test_a_missing_input_topic_is_waited_for_with_a_warning_until_it_exists(kafka_bootstrap, caplog):
    """The service waits for an input topic that does not exist yet (a warning naming it), and goes on with the
    partition counts once someone creates it. The wait's sleep is where the test creates the topic, so the
    order (warning first, then the topic, then the counts) holds without timing."""
    import time
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    from service.driver import wait_for_inputs

    topic = f"late-created-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    settings = Settings(bootstrap_servers=kafka_bootstrap, input_topics=(topic,))
    warned_before_created: list[bool] = []

    def sleep(seconds: float) -> None:
        if not warned_before_created:
            warned_before_created.append(any(topic in r.getMessage() for r in caplog.records))
            admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(timeout=60)
        time.sleep(min(seconds, 0.2))

    try:
        with caplog.at_level("WARNING", logger="service.driver"):
            parts = wait_for_inputs(settings, sleep=sleep)
    finally:
        admin.delete_topics([topic], operation_timeout=10)
    assert parts == {topic: 2}
    assert warned_before_created == [True]
    waits = [r for r in caplog.records if r.levelname == "WARNING" and "do not exist" in r.getMessage()]
    assert len(waits) == 1 and topic in waits[0].getMessage()
