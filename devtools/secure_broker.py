"""The local broker with a SASL_SSL listener, ACLs and a certificate authority made on the spot (tests, demos).

:func:`make_tls` writes a throw-away CA and, signed by it, a broker certificate (for ``127.0.0.1`` and
``localhost``) and a client certificate, all PEM (keys in PKCS#8, what the Java client reads). :func:`sasl_ssl_broker`
configures :class:`~devtools.local_broker.LocalKafkaBroker` with:

* one client listener, ``SASL_SSL`` (SCRAM-SHA-512 by default, or SCRAM-SHA-256 / PLAIN), used by the broker
  itself as its inter-broker listener (as the super user ``admin``); ``ssl.client.auth`` as asked (``required``:
  every client presents a certificate signed by the CA, besides its SASL credentials);
* SCRAM credentials written into the KRaft metadata at format time (``kafka-storage format --add-scram``), PLAIN
  users in the listener's JAAS line;
* ``StandardAuthorizer`` (KRaft's ACL store), no access without an ACL (``allow.everyone.if.no.acl.found=false``),
  super users ``admin`` and ``ANONYMOUS``. ``ANONYMOUS`` is the principal of the broker on the PLAINTEXT
  *controller* listener (KRaft's controller listener cannot use SCRAM, its credentials live in the metadata the
  controller serves); no client listener is PLAINTEXT.

:func:`service_acls` lists what the sliding-window service needs and nothing more; :func:`grant` creates ACLs with
the admin's credentials.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.local_broker import DEFAULT_HOST, LocalKafkaBroker

__all__ = ["ADMIN_USER", "TlsFiles", "client_config", "grant", "make_tls", "sasl_ssl_broker", "service_acls"]

ADMIN_USER = "admin"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throw-away CA: ``ca`` (certificate), ``broker`` (key + certificate chain in one file, what a
    PEM keystore reads), ``client_cert`` / ``client_key`` (a client certificate for mutual TLS)."""

    ca: Path
    broker: Path
    client_cert: Path
    client_key: Path


def make_tls(
    directory: Path, hosts: Sequence[str] = (DEFAULT_HOST, "localhost"), client_name: str = "slidingwindow"
) -> TlsFiles:
    """Generate a CA, a broker certificate for ``hosts`` and a client certificate into ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = _dt.datetime.now(_dt.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def key_pem(key: Any) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("slidingwindow test CA"))
        .issuer_name(name("slidingwindow test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(hours=1))
        .not_valid_after(now + _dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, sans: Sequence[str], usage: Any) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        alt: list[x509.GeneralName] = []
        for h in sans:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                alt.append(x509.DNSName(h))
        b = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(hours=1))
            .not_valid_after(now + _dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(list(usage)), critical=False)
        )
        if alt:
            b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        return key, b.sign(ca_key, hashes.SHA256())

    pem = serialization.Encoding.PEM
    broker_key, broker_cert = leaf(
        hosts[0], hosts, (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
    )  # client too: inter-broker connections
    client_key, client_cert = leaf(client_name, (), (ExtendedKeyUsageOID.CLIENT_AUTH,))
    files = TlsFiles(
        ca=directory / "ca.pem",
        broker=directory / "broker.pem",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )
    files.ca.write_bytes(ca_cert.public_bytes(pem))
    files.broker.write_bytes(key_pem(broker_key) + broker_cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    files.client_cert.write_bytes(client_cert.public_bytes(pem))
    files.client_key.write_bytes(key_pem(client_key))
    for f in (files.broker, files.client_key):
        f.chmod(0o600)
    return files


def _jaas_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sasl_ssl_broker(
    data_dir: Path,
    tls: TlsFiles,
    users: Mapping[str, str],
    *,
    admin_password: str,
    mechanism: str = "SCRAM-SHA-512",
    client_auth: str = "none",
    port: int | None = None,
    host: str = DEFAULT_HOST,
    **kwargs: Any,
) -> LocalKafkaBroker:
    """A (not yet started) local broker whose only client listener is SASL_SSL with ``users`` (name -> password)
    plus the super user ``admin``, ACLs enforced. ``client_auth``: ``none``, ``requested`` or ``required``."""
    if mechanism not in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        raise ValueError(f"unsupported mechanism {mechanism}")
    all_users = {ADMIN_USER: admin_password, **users}
    lname = mechanism.lower()
    if mechanism == "PLAIN":
        jaas = (
            f"{_PLAIN_MODULE} required username={_jaas_quote(ADMIN_USER)} password={_jaas_quote(admin_password)} "
            + " ".join(f"user_{u}={_jaas_quote(p)}" for u, p in all_users.items())
            + ";"
        )
        format_args: list[str] = []
    else:
        jaas = f"{_SCRAM_MODULE} required username={_jaas_quote(ADMIN_USER)} password={_jaas_quote(admin_password)};"
        format_args = []
        for u, p in all_users.items():
            format_args += ["--add-scram", f"{mechanism}=[name={u},password={p}]"]
    broker = LocalKafkaBroker(port, data_dir=data_dir, host=host, format_args=format_args, **kwargs)
    listener = f"SASL_SSL://{host}:{broker.port}"
    broker.extra_config.update(
        {
            "listeners": f"{listener},CONTROLLER://{host}:{broker.controller_port}",
            "advertised.listeners": listener,
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": mechanism,
            "sasl.mechanism.inter.broker.protocol": mechanism,
            f"listener.name.sasl_ssl.{lname}.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.broker),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls.ca),
            # KIP-684: on a SASL_SSL listener only the listener-prefixed ssl.client.auth applies
            "listener.name.sasl_ssl.ssl.client.auth": client_auth,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN_USER};User:ANONYMOUS",
        }
    )
    broker.client_config = client_config(tls, ADMIN_USER, admin_password, mechanism, client_cert=True)
    return broker


def client_config(
    tls: TlsFiles, user: str, password: str, mechanism: str = "SCRAM-SHA-512", client_cert: bool = False
) -> dict[str, str]:
    """librdkafka settings of a SASL_SSL client of the secured broker."""
    conf = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(tls.ca),
    }
    if client_cert:
        conf.update({"ssl.certificate.location": str(tls.client_cert), "ssl.key.location": str(tls.client_key)})
    return conf


def service_acls(
    principal: str,
    input_topics: Iterable[str],
    output_topics: Iterable[str],
    create_topics: bool = True,
    app_name: str = "slidingwindow",
) -> list[Any]:
    """The ACLs the service needs, nothing more: read the input topics (Spark's source and the lag probe),
    write the output topics (both sinks; idempotent producers need only WRITE on a topic since Kafka 3.0) and
    create them when ``create_topics``; read with Spark's generated consumer groups (``spark-kafka-source-*``),
    the lag probe's group and the group ``app_name`` (the input offsets committed after each micro-batch, or in
    the transaction with ``processing_guarantee=exactly_once``); write with the transactional ids
    ``<app_name>-<topic>-<partition>`` (exactly_once)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    p = f"User:{principal}"
    allow = AclPermissionType.ALLOW

    def b(rtype: Any, name: str, op: Any, pattern: Any = ResourcePatternType.LITERAL) -> Any:
        return AclBinding(rtype, name, pattern, p, "*", op, allow)

    out = []
    for t in input_topics:
        out += [b(ResourceType.TOPIC, t, AclOperation.READ), b(ResourceType.TOPIC, t, AclOperation.DESCRIBE)]
    for t in output_topics:
        out += [b(ResourceType.TOPIC, t, AclOperation.WRITE), b(ResourceType.TOPIC, t, AclOperation.DESCRIBE)]
        if create_topics:
            out.append(b(ResourceType.TOPIC, t, AclOperation.CREATE))
    out.append(b(ResourceType.GROUP, "spark-kafka-source-", AclOperation.READ, ResourcePatternType.PREFIXED))
    out.append(b(ResourceType.GROUP, "slidingwindow-lag-probe", AclOperation.READ))
    out.append(b(ResourceType.GROUP, app_name, AclOperation.READ))
    out.append(b(ResourceType.TRANSACTIONAL_ID, f"{app_name}-", AclOperation.WRITE, ResourcePatternType.PREFIXED))
    return out


def grant(admin_config: Mapping[str, str], acls: Sequence[Any], timeout: float = 30.0) -> None:
    """Create ``acls`` (as the super user whose librdkafka settings are ``admin_config``)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(dict(admin_config))
    for fut in admin.create_acls(list(acls), request_timeout=timeout).values():
        fut.result(timeout=timeout)


def dev_sasl_ssl_broker(data_dir: Path, port: int | None, users: Sequence[str], **kwargs: Any) -> LocalKafkaBroker:
    """``slidingwindow broker start --sasl-ssl``: TLS files in ``<data_dir>/tls`` (made once), one random password
    per user in ``<data_dir>/tls/<user>.password`` (mode 600; the service reads it with
    ``SLIDINGWINDOW_KAFKA_SASL_PASSWORD=file:...``), SCRAM-SHA-512, client certificates optional. ACLs are the
    admin's to grant (:func:`service_acls`, :func:`grant`, or ``kafka-acls``)."""
    import secrets

    tls_dir = data_dir.resolve() / "tls"
    if (tls_dir / "ca.pem").exists():
        tls = TlsFiles(tls_dir / "ca.pem", tls_dir / "broker.pem", tls_dir / "client.pem", tls_dir / "client.key")
    else:
        tls = make_tls(tls_dir)
    passwords: dict[str, str] = {}
    for user in [ADMIN_USER, *users]:
        f = tls_dir / f"{user}.password"
        if not f.exists():
            f.write_text(secrets.token_urlsafe(18) + "\n", encoding="utf-8")
            f.chmod(0o600)
        passwords[user] = f.read_text(encoding="utf-8").strip()
    admin = passwords.pop(ADMIN_USER)
    return sasl_ssl_broker(data_dir, tls, passwords, admin_password=admin, client_auth="requested", port=port, **kwargs)


def dev_admin_config(data_dir: Path) -> dict[str, str]:
    """The admin's librdkafka settings for a ``--sasl-ssl`` broker on ``data_dir`` (empty for a plain one)."""
    tls_dir = data_dir / "tls"
    pw = tls_dir / f"{ADMIN_USER}.password"
    if not pw.exists():
        return {}
    tls = TlsFiles(tls_dir / "ca.pem", tls_dir / "broker.pem", tls_dir / "client.pem", tls_dir / "client.key")
    return client_config(tls, ADMIN_USER, pw.read_text(encoding="utf-8").strip(), client_cert=True)
