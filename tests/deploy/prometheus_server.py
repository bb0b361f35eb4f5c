"""A throwaway Prometheus (the distribution's package) on a free loopback port, scraping given targets."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

__all__ = ["free_port", "PrometheusServer"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    """``prometheus`` with a temp config: job ``slidingwindow`` scraping ``targets`` every ``interval``, the
    project's alert rules loaded (evaluated every ``interval``)."""

    def __init__(self, workdir: Path, targets: list[str], rule_files: list[Path], interval: str = "1s") -> None:
        self.dir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        cfg = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": "slidingwindow", "static_configs": [{"targets": targets}]}],
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(cfg))

    def start(self, timeout: float = 60) -> PrometheusServer:
        exe = shutil.which("prometheus")
        assert exe, "prometheus not installed (make test installs it)"
        log = open(self.dir / "prometheus.log", "ab")  # noqa: SIM115 - the child keeps its own copy; closed below
        self.proc = subprocess.Popen(
            [
                exe,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"prometheus not ready within {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def log(self) -> str:
        p = self.dir / "prometheus.log"
        return p.read_text(errors="replace")[-4000:] if p.exists() else ""

    def api(self, path: str, **params: Any) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400/422: a bad query - return Prometheus' error body
            body = json.loads(e.read())
        return body

    def query(self, expr: str, at: float | None = None) -> dict[str, Any]:
        """Instant query; the whole response (``status``, ``data`` or ``error``)."""
        return self.api("query", query=expr, **({"time": f"{at:.3f}"} if at is not None else {}))

    def query_range(self, expr: str, start: float, end: float, step: float) -> dict[str, Any]:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")
