"""Running the service image with the ``docker`` CLI from tests (host networking only: the container reaches the
test's local broker on 127.0.0.1, and nothing leaves the machine)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["IMAGE", "docker", "engine_problem", "image_problem", "Container"]

#: the image under test (make image builds it)
IMAGE = os.environ.get("SLIDINGWINDOW_IMAGE", "slidingwindow:latest")


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


def engine_problem() -> str | None:
    """Why no Docker engine can be used (``None``: one answers)."""
    if shutil.which("docker") is None:
        return "no docker CLI installed (make docker-install, as root, installs docker.io)"
    try:
        r = docker("info", "--format", "{{.ServerVersion}}", timeout=15, check=False)
    except subprocess.TimeoutExpired:
        return "the Docker engine does not answer within 15 s"
    if r.returncode != 0 or not r.stdout.strip():
        return "no Docker engine answers (make test-image starts one when run as root)"
    return None


def image_problem(image: str = IMAGE) -> str | None:
    problem = engine_problem()
    if problem:
        return problem
    if docker("image", "inspect", image, check=False).returncode != 0:
        return f"image {image} not built (make image)"
    return None


class Container:
    """``docker run -d --network host`` of ``image``; removed by :meth:`remove`."""

    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        volumes: Sequence[str] = (),
        image: str = IMAGE,
        args: Sequence[str] = (),
    ) -> None:
        self.name, self.env, self.volumes, self.image, self.args = name, dict(env), list(volumes), image, list(args)
        self.started_at = 0.0

    def run(self) -> Container:
        cmd = ["run", "-d", "--name", self.name, "--network", "host"]
        for k, v in self.env.items():
            cmd += ["-e", f"{k}={v}"]
        for v in self.volumes:
            cmd += ["-v", v]
        self.started_at = time.monotonic()
        docker(*cmd, self.image, *self.args)
        return self

    def inspect(self) -> dict[str, Any]:
        return json.loads(docker("inspect", self.name).stdout)[0]

    def running(self) -> bool:
        return bool(self.inspect()["State"]["Running"])

    def exit_code(self) -> int:
        return int(self.inspect()["State"]["ExitCode"])

    def logs(self, tail: int = 60) -> str:
        r = docker("logs", "--tail", str(tail), self.name, check=False)
        return r.stdout + r.stderr

    def exec(self, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return docker("exec", self.name, *cmd, timeout=timeout, check=False)

    def health(self) -> str:
        return str((self.inspect()["State"].get("Health") or {}).get("Status", "none"))

    def stop(self, grace_s: int) -> float:
        """``docker stop -t grace_s`` (SIGTERM, SIGKILL after ``grace_s``); the seconds it took."""
        t0 = time.monotonic()
        docker("stop", "-t", str(grace_s), self.name, timeout=grace_s + 60)
        return time.monotonic() - t0

    def wait_exit(self, timeout: float) -> int:
        r = docker("wait", self.name, timeout=timeout)
        return int(r.stdout.strip())

    def remove(self) -> None:
        docker("rm", "-f", self.name, check=False)
