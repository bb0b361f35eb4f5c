"""``make demo`` never leaves a process behind (issue 29): whatever ends the demo, the service it started stops;
and a service whose demo died without cleaning up stops by itself (parent-death signal). No wall-clock
assertions: every wait is bounded and only decides failure."""

from __future__ import annotations

import contextlib
import json
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


def _start_demo(tmp_path: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DEMO_METRICS_PORT": str(_free_port()), "DEMO_KAFKA_PORT": str(_free_port())}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devtools.demo",
            "--state-dir",
            str(tmp_path / "demo"),
            "--rate",
            "20",
            "--refresh",
            "0.5",
            *extra,
        ],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _wait_for_spark(demo: subprocess.Popen[bytes]) -> dict[int, str]:
    """Wait (bounded) until the service runs Spark - its JVM is among the demo's descendants - and the demo shows
    window updates; the demo's descendants then."""
    assert demo.stdout is not None
    deadline = time.monotonic() + 240
    procs: dict[int, str] = {}
    while time.monotonic() < deadline and demo.poll() is None:
        line = demo.stdout.readline()
        if b"window updates out" in line:
            procs = _descendants(demo.pid)
            if any(b"java" in Path(f"/proc/{p}/cmdline").read_bytes() for p in procs if _alive(p, procs[p])):
                break
    assert demo.poll() is None and procs, "the demo did not get the service running"
    return procs


def _kill_what_is_left(demo: subprocess.Popen[bytes]) -> None:
    for pid in _descendants(demo.pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    demo.kill()


@pytest.mark.integration
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGHUP", "closed-pipe", "SIGKILL"])
def test_the_demo_stops_what_it_started_however_it_ends(how, kafka_bootstrap, tmp_path):
    demo = _start_demo(tmp_path, "--bootstrap-servers", kafka_bootstrap)
    try:
        procs = _wait_for_spark(demo)
        if how == "closed-pipe":
            assert demo.stdout is not None
            demo.stdout.close()  # the reader is gone: the demo's next status line finds the pipe closed
        elif how == "SIGKILL":
            demo.kill()
        else:
            demo.send_signal(getattr(signal, how))
        assert demo.wait(timeout=150) is not None
        left = _wait_gone(procs, 150)
        assert not left, f"still running after the demo ended ({how}): {left}"
        if how != "SIGKILL":
            assert demo.returncode in (0, 130)
    finally:
        _kill_what_is_left(demo)


@pytest.mark.integration
def test_the_demo_stops_the_broker_it_started(tmp_path):
    """Without ``--bootstrap-servers`` the demo starts its own broker (a JVM, its pid in the broker's state
    file); Ctrl-C stops it along with the service."""
    demo = _start_demo(tmp_path)
    try:
        procs = _wait_for_spark(demo)
        broker_pid = json.loads((tmp_path / "demo" / "kafka" / "broker.json").read_text())["pid"]
        assert broker_pid in procs and b"java" in Path(f"/proc/{broker_pid}/cmdline").read_bytes()
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=150) in (0, 130)
        left = _wait_gone(procs, 150)
        assert not left, f"still running after the demo ended: {left}"
        assert not _alive(broker_pid, procs[broker_pid])
    finally:
        _kill_what_is_left(demo)
