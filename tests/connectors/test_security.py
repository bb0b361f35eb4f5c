"""connectors.security: one security settings set -> librdkafka, Java and Schema Registry settings; secrets hidden."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from connectors.security import KafkaSecurity, Secret, jaas_config, read_secret
from devtools.secure_broker import make_tls


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory):
    return make_tls(tmp_path_factory.mktemp("tls"))


def test_secret_never_shows_itself() -> None:
    s = Secret("hunter2")
    assert "hunter2" not in repr(s) and "hunter2" not in str(s) and "hunter2" not in f"{s}"
    assert s.reveal() == "hunter2"
    assert pickle.loads(pickle.dumps(s)) == s
    assert repr(Secret()) == "''" and not Secret()


def test_read_secret_from_file_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "pw"
    f.write_text("from-file\n")
    assert read_secret(f"file:{f}").reveal() == "from-file"
    monkeypatch.setenv("MY_PW", "from-env")
    assert read_secret("env:MY_PW").reveal() == "from-env"
    assert read_secret("literal").reveal() == "literal"
    with pytest.raises(ValueError, match="cannot read the secret file"):
        read_secret(f"file:{tmp_path / 'missing'}")
    with pytest.raises(ValueError, match="'NOT_SET_ANYWHERE' is not set"):
        read_secret("env:NOT_SET_ANYWHERE")


def test_jaas_line_escapes_quotes_and_backslashes() -> None:
    line = jaas_config("SCRAM-SHA-512", "svc", 'p"a\\ss')
    assert line == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="p\\"a\\\\ss";'
    )
    assert jaas_config("PLAIN", "u", "p").startswith("org.apache.kafka.common.security.plain.PlainLoginModule ")


def test_sasl_ssl_in_every_dialect(tls) -> None:
    sec = KafkaSecurity(
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="svc",
        sasl_password=Secret("pw"),
        ssl_ca_location=str(tls.ca),
        ssl_certificate_location=str(tls.client_cert),
        ssl_key_location=str(tls.client_key),
    )
    assert sec.problems() == []
    assert sec.effective_protocol == "SASL_SSL"
    assert sec.rdkafka() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": "pw",
        "ssl.ca.location": str(tls.ca),
        "ssl.certificate.location": str(tls.client_cert),
        "ssl.key.location": str(tls.client_key),
    }
    java = sec.java()
    assert java["security.protocol"] == "SASL_SSL" and java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == jaas_config("SCRAM-SHA-512", "svc", "pw")
    assert java["ssl.truststore.type"] == "PEM" and java["ssl.truststore.certificates"] == tls.ca.read_text()
    assert java["ssl.keystore.type"] == "PEM"
    assert java["ssl.keystore.certificate.chain"] == tls.client_cert.read_text()
    assert java["ssl.keystore.key"] == tls.client_key.read_text()
    assert not any(k.startswith("sasl.username") or k.endswith(".location") for k in java)
    assert sec.schema_registry("http://r:8081") == {}
    assert sec.schema_registry("https://r:8081", Secret("u:p")) == {
        "ssl.ca.location": str(tls.ca),
        "ssl.certificate.location": str(tls.client_cert),
        "ssl.key.location": str(tls.client_key),
        "basic.auth.user.info": "u:p",
    }
    assert "pw" not in repr(sec)


def test_plaintext_sets_nothing() -> None:
    assert KafkaSecurity().rdkafka() == {} and KafkaSecurity().java() == {}


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"protocol": "SASL_SSL"}, "sasl_mechanism"),
        ({"sasl_mechanism": "PLAIN", "sasl_password": Secret("x")}, "sasl_username"),
        ({"sasl_mechanism": "PLAIN", "sasl_username": "u"}, "sasl_password"),
        ({"protocol": "PLAINTEXT", "sasl_username": "u"}, "sasl_username"),
        ({"protocol": "SSL", "ssl_certificate_location": "/x.pem"}, "ssl_key_location"),
        ({"protocol": "SSL", "ssl_ca_location": "/does/not/exist.pem"}, "ssl_ca_location"),
    ],
)
def test_problems_name_the_field(kwargs: dict, field: str) -> None:
    assert field in [name for name, _ in KafkaSecurity(**kwargs).problems()]
