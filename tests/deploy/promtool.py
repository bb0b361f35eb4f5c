"""promtool / prometheus binaries for the deploy tests: installed from the distribution's packages when missing,
by the same script ``make test`` runs (deploy/prometheus/install-promtool.sh; root or sudo, apt)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"
INSTALL = PROM_DIR / "install-promtool.sh"


def ensure_prometheus() -> None:
    """Install Prometheus (with promtool) if missing; skip only where it cannot be installed (no apt)."""
    if shutil.which("promtool") and shutil.which("prometheus"):
        return
    if not shutil.which("apt-get"):
        pytest.skip("prometheus/promtool missing and no apt-get to install them (make test installs them)")
    r = subprocess.run(["bash", str(INSTALL)], capture_output=True, timeout=1200)
    if r.returncode != 0 or not shutil.which("promtool"):
        pytest.fail(f"installing prometheus failed:\n{(r.stdout + r.stderr).decode(errors='replace')[-3000:]}")


@pytest.fixture(scope="session")
def prometheus_installed() -> None:
    ensure_prometheus()


def promtool(*args: str, cwd: Path = PROM_DIR, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
    ensure_prometheus()
    r = subprocess.run(["promtool", *args], cwd=cwd, input=input, capture_output=True, timeout=120)
    return subprocess.CompletedProcess(
        r.args, r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    )
