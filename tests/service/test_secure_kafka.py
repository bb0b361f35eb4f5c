"""The service over SASL_SSL (SCRAM-SHA-512 + mutual TLS) against the local broker with ACLs enforced.

One settings set (``SLIDINGWINDOW_KAFKA_*``) configures Spark's Java source and sink, the direct producer and the
admin client; the broker grants the service's user only :func:`devtools.secure_broker.service_acls`. A wrong
password stops the service at start with one line naming the setting; clients without credentials are refused.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.security import KafkaAccessError, check_access
from devtools.local_broker import LocalKafkaBroker, find_free_port
from devtools.secure_broker import ADMIN_USER, TlsFiles, client_config, grant, make_tls, sasl_ssl_broker, service_acls
from tests.service.events import changelog_final, payment_events, replay
from tests.service.harness import ServiceProcess, consume_all, produce, wait_until_committed
from tests.service.test_e2e import AGGS, GRACE, TD
from tests.service.test_e2e import service_args as e2e_args
from tests.service.test_metrics_e2e import scrape, value

pytestmark = pytest.mark.integration

SERVICE_USER, SERVICE_PASSWORD = "slidingwindow", "svc-Pa55-word"
ADMIN_PASSWORD = "admin-Pa55-word"
PARTITIONS = 2


class SecureKafka:
    def __init__(self, broker: LocalKafkaBroker, tls: TlsFiles) -> None:
        self.broker, self.tls = broker, tls
        self.bootstrap = broker.bootstrap_servers
        self.admin = client_config(tls, ADMIN_USER, ADMIN_PASSWORD, client_cert=True)

    def topic(self, name: str, partitions: int) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.admin})
        for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            fut.result(30)
        return name


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    d = tmp_path_factory.mktemp("secure-kafka")
    tls = make_tls(d / "tls")
    broker = sasl_ssl_broker(
        d / "kafka",
        tls,
        {SERVICE_USER: SERVICE_PASSWORD},
        admin_password=ADMIN_PASSWORD,
        port=0,
        client_auth="required",
    )
    with broker:
        yield SecureKafka(broker, tls)


def service_env(k: SecureKafka, password_file: Path, **extra: str) -> dict[str, str]:
    """The one security settings set, as an operator gives it: environment variables, the password in a file."""
    return {
        "SLIDINGWINDOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "SLIDINGWINDOW_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "SLIDINGWINDOW_KAFKA_SASL_USERNAME": SERVICE_USER,
        "SLIDINGWINDOW_KAFKA_SASL_PASSWORD": f"file:{password_file}",
        "SLIDINGWINDOW_KAFKA_SSL_CA_LOCATION": str(k.tls.ca),
        "SLIDINGWINDOW_KAFKA_SSL_CERTIFICATE_LOCATION": str(k.tls.client_cert),
        "SLIDINGWINDOW_KAFKA_SSL_KEY_LOCATION": str(k.tls.client_key),
        **extra,
    }


def service_args(k: SecureKafka, topics: dict[str, str], checkpoint: Path, *extra: str) -> list[str]:
    """test_e2e's arguments (same aggregations and windows), JSON out; ``extra`` wins (argparse: last flag)."""
    return e2e_args(k.bootstrap, topics, checkpoint, "--changelog-format", "json", "--changelog-key-format", "json",
                    *extra)  # fmt: skip


def _topics(k: SecureKafka, tag: str) -> dict[str, str]:
    """The input topic is made by the admin; the output topics are created by the service (its CREATE ACL)."""
    topics = {"in": f"sec-in-{tag}", "out": f"sec-out-{tag}", "late": f"sec-late-{tag}", "dlq": f"sec-dlq-{tag}"}
    k.topic(topics["in"], PARTITIONS)
    grant(
        {"bootstrap.servers": k.bootstrap, **k.admin},
        service_acls(SERVICE_USER, [topics["in"]], [topics["out"], topics["late"], topics["dlq"]]),
    )
    return topics


@pytest.mark.parametrize("sink", ["direct", "spark", "exactly_once"])
def test_service_runs_over_sasl_ssl_with_only_its_acls(secure_kafka: SecureKafka, tmp_path: Path, sink: str) -> None:
    """Both sinks, and the direct sink with processing_guarantee=exactly_once (transactions and the group's
    offsets under the same ACLs)."""
    k = secure_kafka
    topics = _topics(k, sink.replace("_", "-"))
    guarantee = ["--processing-guarantee", "exactly_once"] if sink == "exactly_once" else []
    sink = "direct" if sink == "exactly_once" else sink
    events = payment_events(800, keys=8, partitions=PARTITIONS, td=TD, grace=GRACE, seed=33)
    ends = produce(k.bootstrap, topics["in"], events, config=k.admin)
    pw = tmp_path / "kafka-password"
    pw.write_text(SERVICE_PASSWORD + "\n")
    port = find_free_port()
    ck = tmp_path / "checkpoint"
    svc = ServiceProcess(
        service_args(
            k, topics, ck, "--sink", sink, "--metrics-port", str(port), "--max-offsets-per-trigger", "400", *guarantee
        ),
        tmp_path / "service.log",
        env=service_env(k, pw),
    ).start()
    try:
        wait_until_committed(ck, topics["in"], ends, svc, timeout=240)
        # the listener reports the last micro-batch shortly after its commit
        deadline = time.monotonic() + 30
        while value(metrics := scrape(port), "slidingwindow_records_consumed_total") < len(events):
            assert time.monotonic() < deadline, metrics
            time.sleep(0.5)
    finally:
        rc = svc.stop()
    assert rc == 0, svc.tail()
    exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="update")
    changelog = consume_all(k.bootstrap, topics["out"], config=k.admin)
    assert changelog_final((r.key, r.value) for r in changelog) == exp.final
    assert len(consume_all(k.bootstrap, topics["late"], config=k.admin)) == len(exp.late)
    assert len(consume_all(k.bootstrap, topics["dlq"], config=k.admin)) == len(exp.dead)
    log = (tmp_path / "service.log").read_text(errors="replace")
    assert "Traceback" not in log
    assert SERVICE_PASSWORD not in log and SERVICE_PASSWORD not in metrics
    assert "slidingwindow_" in metrics
    # every record counted once (no crash here, so no batch replayed)
    assert value(metrics, "slidingwindow_records_consumed_total") == len(events)
    assert value(metrics, "slidingwindow_records_produced_total", kind="changelog") == len(changelog)
    assert value(metrics, "slidingwindow_records_produced_total", kind="late") == len(exp.late)
    assert value(metrics, "slidingwindow_records_produced_total", kind="dead_letter") == len(exp.dead)
    if guarantee:  # one transaction per task batch with output, each commit timed; none skipped as a replay
        assert value(metrics, "slidingwindow_transactions_committed_total") > 0
        assert value(metrics, "slidingwindow_transaction_commit_seconds_total") > 0
        assert value(metrics, "slidingwindow_task_batches_already_committed_total") == 0
    else:
        assert value(metrics, "slidingwindow_transactions_committed_total") == 0


@pytest.mark.parametrize("wrong", ["password", "ca"])
def test_wrong_credentials_fail_at_start_in_one_line(secure_kafka: SecureKafka, tmp_path: Path, wrong: str) -> None:
    """A wrong password (or a CA that did not sign the broker's certificate): exit 1 at start, one log line
    naming the setting, no traceback, no secret."""
    k = secure_kafka
    topics = _topics(k, f"wrong{wrong}")
    pw = tmp_path / "kafka-password"
    pw.write_text("not-the-password\n" if wrong == "password" else SERVICE_PASSWORD + "\n")
    env = service_env(k, pw)
    if wrong == "ca":
        env["SLIDINGWINDOW_KAFKA_SSL_CA_LOCATION"] = str(make_tls(tmp_path / "other-ca").ca)
    t0 = time.monotonic()
    svc = ServiceProcess(
        service_args(k, topics, tmp_path / "checkpoint", "--metrics-port", "0"), tmp_path / "service.log", env=env
    ).start()
    assert svc.proc is not None
    rc = svc.proc.wait(timeout=120)
    elapsed = time.monotonic() - t0
    out = (tmp_path / "service.log").read_text(errors="replace")
    print(f"wrong {wrong}: exit {rc} after {elapsed:.1f}s:\n{out}")
    assert rc == 1
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out
    setting = "kafka_sasl_password" if wrong == "password" else "kafka_ssl_ca_location"
    assert "ERROR" in lines[0] and setting in lines[0] and "Traceback" not in out
    assert "not-the-password" not in out and SERVICE_PASSWORD not in out


def test_clients_without_credentials_are_refused(secure_kafka: SecureKafka) -> None:
    k = secure_kafka
    base = {"bootstrap.servers": k.bootstrap}
    tls_only = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(k.tls.ca),
        "ssl.certificate.location": str(k.tls.client_cert),
        "ssl.key.location": str(k.tls.client_key),
    }
    # no TLS, no SASL: the listener speaks TLS, a plaintext client gets no answer it can read
    assert check_access({**base}, timeout=5) is False
    # TLS with a client certificate but no SASL credentials: the broker closes the connection
    assert not _answers({**base, **tls_only})
    # SASL but no client certificate (the listener requires one)
    no_cert = client_config(k.tls, SERVICE_USER, SERVICE_PASSWORD)
    assert not _answers({**base, **no_cert})
    # an unknown user
    with pytest.raises(KafkaAccessError, match="kafka_sasl_password"):
        check_access({**base, **client_config(k.tls, "mallory", "guess", client_cert=True)}, timeout=15)


def test_acls_grant_only_what_the_service_needs(secure_kafka: SecureKafka) -> None:
    """The service's user can read its input, not another topic; it cannot write its input."""
    from confluent_kafka import Consumer, KafkaError, Producer

    k = secure_kafka
    topics = _topics(k, "acl")
    other = k.topic("sec-not-granted", 1)
    conf = {"bootstrap.servers": k.bootstrap, **client_config(k.tls, SERVICE_USER, SERVICE_PASSWORD, client_cert=True)}
    assert check_access(conf) is True
    c = Consumer({**conf, "group.id": "slidingwindow-lag-probe"})
    try:
        md = c.list_topics(timeout=10)
        assert topics["in"] in md.topics and other not in md.topics  # unauthorized topics are not even listed
    finally:
        c.close()
    for topic in (topics["in"], other):  # no WRITE on its input, nothing at all on another topic
        errors: list[Any] = []
        p = Producer({**conf, "message.timeout.ms": 10000})
        p.produce(topic, b"x", on_delivery=lambda err, _m, errors=errors: errors.append(err))
        p.flush(20)
        assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _answers(conf: dict[str, Any]) -> bool:
    try:
        return check_access(conf, timeout=5)
    except KafkaAccessError:
        return False
