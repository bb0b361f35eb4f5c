"""``slidingwindow broker start --sasl-ssl``: a secured local broker for trying the security settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.security import check_access
from devtools.broker_cli import main
from devtools.local_broker import BrokerState
from devtools.secure_broker import dev_admin_config

pytestmark = pytest.mark.integration


def test_cli_starts_a_sasl_ssl_broker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "kafka"
    assert main(["start", "--sasl-ssl", "--port", "0", "--data-dir", str(data), "-q"]) == 0
    try:
        out = capsys.readouterr().out
        assert "SASL_SSL, SCRAM-SHA-512" in out and "password" in out
        state = BrokerState.load(data)
        assert state is not None
        assert main(["status", "--data-dir", str(data)]) == 0  # asks as the admin
        pw = (data / "tls" / "slidingwindow.password").read_text().strip()
        assert pw and pw not in out  # passwords stay in their files
        tls = dev_admin_config(data)
        base = {"bootstrap.servers": state.bootstrap_servers}
        assert check_access({**base, **client_config_from(tls, "slidingwindow", pw)}) is True
        assert check_access(dict(base), timeout=3) is False  # plaintext gets nowhere
    finally:
        main(["stop", "--data-dir", str(data)])


def client_config_from(admin: dict[str, str], user: str, password: str) -> dict[str, str]:
    conf = {**admin, "sasl.username": user, "sasl.password": password}
    return conf
