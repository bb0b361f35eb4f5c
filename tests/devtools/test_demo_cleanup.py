"""``make demo`` never leaves a process behind (issue 29): whatever ends the demo, the service it started stops;
and a service whose demo died without cleaning up stops by itself (parent-death signal). No wall-clock
assertions: every wait is bounded and only decides failure."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.service.harness import PROJECT


def _alive(pid: int, start: str) -> bool:
    """Whether ``pid`` is still the process that had start time ``start`` (not a zombie, not reused)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == start


def _descendants(root: int) -> dict[int, str]:
    """Every live descendant of ``root``: pid -> start time."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(d))
        starts[int(d)] = fields[19]
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out[c] = starts[c]
            todo.append(c)
    return out


def _wait_gone(procs: dict[int, str], timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    left = procs
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = {p: s for p, s in left.items() if _alive(p, s)}
    return left


DEMO_LIKE_PARENT = """
import sys, time
from devtools.demo import spawn_child
child = spawn_child([sys.executable, "-c", "import time; time.sleep(600)"], None)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_child_of_a_killed_demo_stops_by_itself():
    parent = subprocess.Popen([sys.executable, "-c", DEMO_LIKE_PARENT], cwd=PROJECT, stdout=subprocess.PIPE)
    try:
        child = int(parent.stdout.readline())
        procs = _descendants(parent.pid)
        assert child in procs
        parent.kill()  # SIGKILL: the demo gets no chance to clean up
        parent.wait()
        left = _wait_gone(procs, 30)
        assert not left, f"still running after the demo died: {left}"
    finally:
        parent.kill()
        for pid in _descendants(parent.pid):
            os.kill(pid, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
@pytest.mark.parametrize("how", ["SIGHUP", "closed-pipe", "SIGKILL"])
def test_the_demo_stops_what_it_started_however_it_ends(how, kafka_bootstrap, tmp_path):
    env = {**os.environ, "DEMO_METRICS_PORT": str(_free_port())}
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devtools.demo",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--state-dir",
            str(tmp_path / "demo"),
            "--rate",
            "20",
            "--refresh",
            "0.5",
        ],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        # wait (bounded) until the service runs Spark: its JVM is among the demo's descendants
        deadline = time.monotonic() + 240
        procs: dict[int, str] = {}
        while time.monotonic() < deadline and demo.poll() is None:
            line = demo.stdout.readline()
            if b"window updates out" in line:
                procs = _descendants(demo.pid)
                if any(b"java" in Path(f"/proc/{p}/cmdline").read_bytes() for p in procs if _alive(p, procs[p])):
                    break
        assert demo.poll() is None and procs, "the demo did not get the service running"
        if how == "SIGHUP":
            demo.send_signal(signal.SIGHUP)
        elif how == "closed-pipe":
            demo.stdout.close()  # the reader is gone: the demo's next status line finds the pipe closed
        else:
            demo.kill()
        assert demo.wait(timeout=150) is not None
        left = _wait_gone(procs, 150)
        assert not left, f"still running after the demo ended ({how}): {left}"
        if how != "SIGKILL":
            assert demo.returncode in (0, 130)
    finally:
        for pid in _descendants(demo.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        demo.kill()
