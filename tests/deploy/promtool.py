"""promtool / prometheus binaries for the deploy tests (``make test`` installs them; see deploy/prometheus)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not installed (make test installs it)")


def promtool(*args: str, cwd: Path = PROM_DIR, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["promtool", *args], cwd=cwd, input=input, capture_output=True, timeout=120)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(errors="replace"),
                                       r.stderr.decode(errors="replace"))
