"""One set of Kafka security settings, written out in each client's dialect.

The service talks to Kafka through three clients that spell the same security settings differently:

=========================  ==================================  =============================================
what                       librdkafka (confluent-kafka:         Java client (Spark's Kafka source and sink,
                           direct producer, admin, lag probe)   given ``kafka.``-prefixed by service.spark.job)
=========================  ==================================  =============================================
protocol                   ``security.protocol``                ``security.protocol``
SASL mechanism             ``sasl.mechanism``                   ``sasl.mechanism``
SASL user / password       ``sasl.username`` /                  ``sasl.jaas.config`` (one JAAS line with the
                           ``sasl.password``                    mechanism's LoginModule)
CA certificate (PEM)       ``ssl.ca.location``                  ``ssl.truststore.type=PEM`` +
                                                                ``ssl.truststore.certificates`` (PEM text)
client certificate + key   ``ssl.certificate.location`` +       ``ssl.keystore.type=PEM`` +
(PEM, mutual TLS)          ``ssl.key.location`` (+ password)    ``ssl.keystore.certificate.chain`` /
                                                                ``ssl.keystore.key`` (PEM text, key in PKCS#8)
                                                                (+ ``ssl.key.password``)
=========================  ==================================  =============================================

The Schema Registry client (HTTP) takes the CA and the client certificate for an ``https://`` registry
(``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``) and its own
basic-auth credentials
(``basic.auth.user.info``); Kafka's SASL credentials are not the registry's.

The Java client gets the PEM *text* rather than file paths: Spark's executors may run on other machines than the
driver, and the options travel with the query. Secrets are :class:`Secret` objects: their ``repr``/``str`` is
``'***'`` so a logged settings object, ``check-settings`` and exception messages never show them; the value
is read only where a client configuration is built (:meth:`Secret.reveal`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "NO_SECRET",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "KafkaAccessError",
    "KafkaSecurity",
    "Secret",
    "check_access",
    "jaas_config",
    "rdkafka_auth_error",
    "read_secret",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: mechanisms with a user name and password (GSSAPI and OAUTHBEARER need more than this settings set holds;
#: pass them through ``kafka_options``)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class Secret:
    """A secret string that does not show itself: ``repr``/``str`` give ``'***'`` (or ``''`` when empty)."""

    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        self._value = str(value)

    def reveal(self) -> str:
        """The secret itself; call only where a client configuration is built."""
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other.reveal() == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __repr__(self) -> str:
        return "'***'" if self._value else "''"

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (settings travel to Spark's Python workers)
        return (Secret, (self._value,))


#: the empty secret (a setting without a value)
NO_SECRET = Secret()


def read_secret(text: str | Secret) -> Secret:
    """A secret setting's value: ``file:/path`` reads the file (trailing newline dropped; Docker/Kubernetes
    secrets), ``env:NAME`` reads another environment variable, anything else is the secret itself.
    Raises ValueError (without the secret) when the file or variable is missing."""
    if isinstance(text, Secret):
        return text
    t = str(text)
    if t.startswith("file:"):
        path = Path(t[5:]).expanduser()
        try:
            return Secret(path.read_text(encoding="utf-8").rstrip("\r\n"))
        except OSError as e:
            raise ValueError(f"cannot read the secret file {str(path)!r}: {e.strerror or e}") from None
    if t.startswith("env:"):
        name = t[4:]
        if name not in os.environ:
            raise ValueError(f"environment variable {name!r} is not set")
        return Secret(os.environ[name])
    return Secret(t)


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """The Java client's ``sasl.jaas.config`` line for a user/password mechanism (quotes and backslashes
    escaped the way Kafka's JAAS parser reads them)."""

    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return f"{_LOGIN_MODULES[mechanism]} required username={q(username)} password={q(password)};"


def _pem(path: str, what: str) -> str:
    try:
        text = Path(path).expanduser().read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read the {what} {path!r}: {getattr(e, 'strerror', None) or e}") from None
    if "-----BEGIN " not in text:
        raise ValueError(f"the {what} {path!r} is not PEM (no -----BEGIN line)")
    return text


@dataclass(frozen=True)
class KafkaSecurity:
    """Protocol, SASL credentials and TLS material of the service's Kafka connections (empty: PLAINTEXT).

    ``protocol`` empty means "derived": SASL_SSL when a SASL mechanism is set and a CA is given, SASL_PLAINTEXT
    with a mechanism and no CA, SSL with only a CA / client certificate, else nothing is set (PLAINTEXT, or what
    ``kafka_options`` says).
    """

    protocol: str = ""
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: Secret = NO_SECRET
    ssl_ca_location: str = ""
    ssl_certificate_location: str = ""
    ssl_key_location: str = ""
    ssl_key_password: Secret = NO_SECRET
    ssl_endpoint_identification: bool = True

    @property
    def effective_protocol(self) -> str:
        if self.protocol:
            return self.protocol
        tls = bool(self.ssl_ca_location or self.ssl_certificate_location)
        if self.sasl_mechanism:
            return "SASL_SSL" if tls else "SASL_PLAINTEXT"
        return "SSL" if tls else ""

    @property
    def uses_sasl(self) -> bool:
        return self.effective_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.effective_protocol in ("SSL", "SASL_SSL")

    def problems(self) -> list[tuple[str, str]]:
        """``(field, message)`` for every inconsistency (the settings layer names the setting)."""
        out: list[tuple[str, str]] = []
        proto = self.effective_protocol
        if self.protocol and self.protocol not in SECURITY_PROTOCOLS:
            out.append(("protocol", f"must be one of {', '.join(SECURITY_PROTOCOLS)}"))
        if self.uses_sasl:
            if not self.sasl_mechanism:
                out.append(("sasl_mechanism", f"required with security protocol {proto}"))
            if not self.sasl_username:
                out.append(("sasl_username", f"required with security protocol {proto}"))
            if not self.sasl_password:
                out.append(("sasl_password", f"required with security protocol {proto}"))
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password:
            field = (
                "sasl_mechanism" if self.sasl_mechanism else "sasl_username" if self.sasl_username else "sasl_password"
            )
            out.append(
                (field, f"SASL settings need security protocol SASL_SSL or SASL_PLAINTEXT, not {proto or 'PLAINTEXT'}")
            )
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            out.append(
                (
                    "ssl_key_location" if self.ssl_certificate_location else "ssl_certificate_location",
                    "a client certificate needs both the certificate and its private key",
                )
            )
        if (self.ssl_ca_location or self.ssl_certificate_location) and not self.uses_tls:
            out.append(
                (
                    "ssl_ca_location" if self.ssl_ca_location else "ssl_certificate_location",
                    f"TLS files need security protocol SSL or SASL_SSL, not {proto or 'PLAINTEXT'}",
                )
            )
        for name, what in (
            ("ssl_ca_location", "CA certificate"),
            ("ssl_certificate_location", "client certificate"),
            ("ssl_key_location", "client private key"),
        ):
            path = getattr(self, name)
            if path:
                try:
                    text = _pem(path, what)
                except ValueError as e:
                    out.append((name, str(e)))
                    continue
                if name == "ssl_key_location" and ("BEGIN RSA PRIVATE KEY" in text or "BEGIN EC PRIVATE KEY" in text):
                    out.append(
                        (
                            name,
                            f"{path!r} is a PKCS#1/SEC1 key; Spark's Java client reads PKCS#8 only "
                            "(convert: openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pk8)",
                        )
                    )
        return out

    # ---------------------------------------------------------------------------------------------- dialects
    def _tls_files(self) -> dict[str, str]:
        """CA and client certificate as files, in the names librdkafka and the Schema Registry client share."""
        conf: dict[str, str] = {}
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = str(Path(self.ssl_ca_location).expanduser())
        if self.ssl_certificate_location:
            conf["ssl.certificate.location"] = str(Path(self.ssl_certificate_location).expanduser())
            conf["ssl.key.location"] = str(Path(self.ssl_key_location).expanduser())
            if self.ssl_key_password:
                conf["ssl.key.password"] = self.ssl_key_password.reveal()
        return conf

    def rdkafka(self) -> dict[str, str]:
        """librdkafka (confluent-kafka) settings."""
        proto = self.effective_protocol
        if not proto:
            return {}
        conf = {"security.protocol": proto}
        if self.uses_sasl:
            conf.update(
                {
                    "sasl.mechanism": self.sasl_mechanism,
                    "sasl.username": self.sasl_username,
                    "sasl.password": self.sasl_password.reveal(),
                }
            )
        if self.uses_tls:
            conf.update(self._tls_files())
            if not self.ssl_endpoint_identification:
                conf["ssl.endpoint.identification.algorithm"] = "none"
        return conf

    def java(self) -> dict[str, str]:
        """Java client settings (without Spark's ``kafka.`` prefix)."""
        proto = self.effective_protocol
        if not proto:
            return {}
        conf = {"security.protocol": proto}
        if self.uses_sasl:
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.jaas.config"] = jaas_config(self.sasl_mechanism, self.sasl_username, self.sasl_password.reveal())
        if self.uses_tls:
            if self.ssl_ca_location:
                conf["ssl.truststore.type"] = "PEM"
                conf["ssl.truststore.certificates"] = _pem(self.ssl_ca_location, "CA certificate")
            if self.ssl_certificate_location:
                conf["ssl.keystore.type"] = "PEM"
                conf["ssl.keystore.certificate.chain"] = _pem(self.ssl_certificate_location, "client certificate")
                conf["ssl.keystore.key"] = _pem(self.ssl_key_location, "client private key")
                if self.ssl_key_password:
                    conf["ssl.key.password"] = self.ssl_key_password.reveal()
            if not self.ssl_endpoint_identification:
                conf["ssl.endpoint.identification.algorithm"] = ""
        return conf

    def schema_registry(self, url: str, basic_auth: Secret = NO_SECRET) -> dict[str, str]:
        """confluent-kafka ``SchemaRegistryClient`` settings besides ``url``: the CA and client certificate for
        an ``https://`` registry, and the registry's own ``user:password`` (basic auth) when given."""
        conf = self._tls_files() if url.startswith("https://") else {}
        if basic_auth:  # the Python client takes user:password only (no basic.auth.credentials.source)
            conf["basic.auth.user.info"] = basic_auth.reveal()
        return conf


#: librdkafka error names that mean "the broker refused who we are" (bad credentials, TLS trust, no SASL)
_AUTH_ERRORS = (
    "_AUTHENTICATION",
    "SASL_AUTHENTICATION_FAILED",
    "_SSL",
    "ILLEGAL_SASL_STATE",
    "UNSUPPORTED_SASL_MECHANISM",
    "CLUSTER_AUTHORIZATION_FAILED",
    "TOPIC_AUTHORIZATION_FAILED",
)


def rdkafka_auth_error(err: Any) -> bool:
    """True if a confluent-kafka ``KafkaError`` is an authentication / TLS / authorization failure."""
    try:
        return str(err.name()) in _AUTH_ERRORS
    except Exception:
        return False


class KafkaAccessError(RuntimeError):
    """The broker refused the service's credentials or TLS handshake; ``settings`` names the settings to fix."""

    def __init__(self, message: str, settings: tuple[str, ...]) -> None:
        self.settings = settings
        super().__init__(message)


def _settings_for(err: Any) -> tuple[str, ...]:
    """The settings to check for a refusal (``err`` is a librdkafka ``KafkaError``)."""
    name, text = str(err.name()), str(err.str()).lower()
    if "invalid credentials" in text or "authentication failed" in text or name == "SASL_AUTHENTICATION_FAILED":
        return ("kafka_sasl_username", "kafka_sasl_password")
    if name == "UNSUPPORTED_SASL_MECHANISM" or "unsupported sasl mechanism" in text or "not enabled" in text:
        return ("kafka_sasl_mechanism",)
    if "ssl" in name.lower() or "certificate" in text or "handshake" in text:
        if "certificate verify failed" in text or "unable to get" in text:
            return ("kafka_ssl_ca_location",)
        return ("kafka_ssl_ca_location", "kafka_ssl_certificate_location", "kafka_security_protocol")
    if "authorization" in name.lower():
        return ("kafka_sasl_username",)
    return ("kafka_sasl_username", "kafka_sasl_password")


def check_access(config: dict[str, Any], timeout: float = 15.0) -> bool:
    """Ask the broker for metadata with ``config`` (librdkafka settings) and raise :class:`KafkaAccessError` at
    the first authentication or TLS failure, so a wrong password stops the service at start with one line that
    names the setting. Returns True when the broker answered, False when it did not answer within ``timeout``
    without refusing us (unreachable: the caller's own waiting and errors apply)."""
    import time

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    refused: list[Any] = []

    def on_error(err: Any) -> None:
        if rdkafka_auth_error(err) and not refused:
            refused.append(err)

    # log_level 0: the refusal is reported once, by the caller, not as librdkafka's retry lines on stderr
    conf: dict[str, Any] = {**config, "error_cb": on_error, "socket.connection.setup.timeout.ms": 5000, "log_level": 0}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return True
        except KafkaException as e:
            if rdkafka_auth_error(e.args[0]) and not refused:
                refused.append(e.args[0])
        admin.poll(0)  # serve error_cb
        if refused:
            err = refused[0]
            names = _settings_for(err)
            raise KafkaAccessError(
                f"Kafka at {config.get('bootstrap.servers')} refused the connection ({err.name()}): "
                f"{' '.join(str(err.str()).split())} - check {', '.join(names)}",
                names,
            )
    return False
