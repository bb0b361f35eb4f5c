"""The Kafka security settings: one set, every client's dialect, secrets never shown (help, check-settings, repr)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from connectors.security import jaas_config
from devtools.secure_broker import make_tls
from service.settings import ENV_PREFIX, SettingsError, load

PASSWORD = "s3cr3t-Pa55word"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory):
    return make_tls(tmp_path_factory.mktemp("tls"))


def _env(tls, **extra: str) -> dict[str, str]:
    return {
        ENV_PREFIX + "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        ENV_PREFIX + "KAFKA_SASL_USERNAME": "svc",
        ENV_PREFIX + "KAFKA_SASL_PASSWORD": PASSWORD,
        ENV_PREFIX + "KAFKA_SSL_CA_LOCATION": str(tls.ca),
        **{ENV_PREFIX + k.upper(): v for k, v in extra.items()},
    }


def test_one_settings_set_configures_every_client(tls) -> None:
    from service.driver import task_config
    from service.spark_kafka_options import kafka_options

    s = load(
        [], environ=_env(tls, schema_registry_url="https://registry:8081", schema_registry_basic_auth="sr-user:sr-pass")
    )
    assert s.kafka_security_protocol == "" and s.kafka_security().effective_protocol == "SASL_SSL"
    admin = s.kafka_client_config()  # admin client, lag probe
    assert admin["security.protocol"] == "SASL_SSL" and admin["sasl.username"] == "svc"
    assert admin["sasl.password"] == PASSWORD and admin["ssl.ca.location"] == str(tls.ca)
    spark = kafka_options(s)  # Spark's Kafka source and sink
    assert spark["kafka.security.protocol"] == "SASL_SSL" and spark["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert spark["kafka.sasl.jaas.config"] == jaas_config("SCRAM-SHA-512", "svc", PASSWORD)
    assert spark["kafka.ssl.truststore.type"] == "PEM"
    assert spark["kafka.ssl.truststore.certificates"] == tls.ca.read_text()
    assert "kafka.sasl.password" not in spark
    producer = dict(task_config(s.replace(sink="direct")).producer)  # the direct sink's producer (workers)
    assert producer["sasl.password"] == PASSWORD and producer["security.protocol"] == "SASL_SSL"
    registry = dict(s.schema_registry_config())
    assert registry == {
        "ssl.ca.location": str(tls.ca),
        "basic.auth.user.info": "sr-user:sr-pass",
    }
    assert PASSWORD not in repr(s) and PASSWORD not in repr(s.describe()) and "sr-pass" not in repr(s)
    assert PASSWORD not in repr(task_config(s.replace(sink="direct")))


def test_kafka_options_still_win(tls) -> None:
    s = load(["--kafka-options", "ssl.endpoint.identification.algorithm=none"], environ=_env(tls))
    assert s.kafka_client_config()["ssl.endpoint.identification.algorithm"] == "none"


def test_password_from_a_file(tls, tmp_path: Path) -> None:
    f = tmp_path / "password"
    f.write_text(PASSWORD + "\n")
    s = load([], environ={**_env(tls), ENV_PREFIX + "KAFKA_SASL_PASSWORD": f"file:{f}"})
    assert s.kafka_client_config()["sasl.password"] == PASSWORD


@pytest.mark.parametrize(
    "env, name",
    [
        ({"KAFKA_SASL_PASSWORD": "file:/nonexistent/pw"}, "kafka_sasl_password"),
        ({"KAFKA_SASL_USERNAME": ""}, "kafka_sasl_username"),
        ({"KAFKA_SASL_MECHANISM": "GSSAPI"}, "kafka_sasl_mechanism"),
        ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "kafka_security_protocol"),
        ({"KAFKA_SSL_CA_LOCATION": "/nonexistent/ca.pem"}, "kafka_ssl_ca_location"),
        ({"KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}, "kafka_sasl_mechanism"),
    ],
)
def test_bad_security_settings_name_the_setting(tls, env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError) as e:
        load([], environ={**_env(tls), **{ENV_PREFIX + k: v for k, v in env.items()}})
    assert e.value.name == name
    assert PASSWORD not in str(e.value)


def test_secrets_never_shown_by_the_cli(tls, tmp_path: Path) -> None:
    env = {**os.environ, **_env(tls, schema_registry_basic_auth="sr-user:sr-pass")}
    help_ = subprocess.run(
        [sys.executable, "-m", "service", "run", "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert help_.returncode == 0 and "--kafka-sasl-password" in help_.stdout
    check = subprocess.run(
        [sys.executable, "-m", "service", "check-settings"], capture_output=True, text=True, env=env, timeout=60
    )
    assert check.returncode == 0, check.stderr
    assert "kafka_sasl_password = '***'" in check.stdout and "kafka_sasl_username = 'svc'" in check.stdout
    for out in (help_.stdout + help_.stderr, check.stdout + check.stderr):
        assert PASSWORD not in out and "sr-pass" not in out


def test_schema_registry_over_https_with_basic_auth(tls) -> None:
    """The registry client gets the CA and the registry's own credentials from the same settings set; the
    workers' decoder (registry_for with the spec's client settings) reads schemas the same way."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from connectors.schema_registry import SchemaRegistry
    from connectors.serde import InputDecoder, InputSpec
    from tests.service.schema_registry_double import SchemaRegistryDouble

    schema = {"type": "record", "name": "P", "fields": [{"name": "amount", "type": "long"}]}
    with SchemaRegistryDouble(tls_certfile=str(tls.broker), basic_auth="sr-user:sr-pass") as sr:
        assert sr.url.startswith("https://")
        s = load(
            [],
            environ=_env(
                tls, schema_registry_url=sr.url, schema_registry_basic_auth="sr-user:sr-pass", input_format="avro"
            ),
        )
        reg = SchemaRegistry(sr.url, dict(s.schema_registry_config()))
        sid = reg.register("t-value", schema)
        spec = InputSpec.from_settings(s)
        assert InputDecoder(spec)._registry.writer_schema(sid) is not None
        assert "sr-pass" not in repr(spec)
        wrong = load([], environ=_env(tls, schema_registry_url=sr.url, schema_registry_basic_auth="sr-user:nope"))
        with pytest.raises(SchemaRegistryError) as e:
            SchemaRegistry(sr.url, dict(wrong.schema_registry_config()))._client.get_schema(sid)
        assert e.value.http_status_code == 401
        no_ca = load(
            [],
            environ={
                ENV_PREFIX + "SCHEMA_REGISTRY_URL": sr.url,
                ENV_PREFIX + "SCHEMA_REGISTRY_BASIC_AUTH": "sr-user:sr-pass",
            },
        )
        with pytest.raises(Exception, match=r"(?i)certificate|ssl"):
            SchemaRegistry(sr.url, dict(no_ca.schema_registry_config()))._client.get_schema(sid)
