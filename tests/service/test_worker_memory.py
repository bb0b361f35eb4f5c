"""service.worker.memory on a real process tree: driver -> "java" -> daemon -> workers, read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from service.worker import memory

pytestmark = pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc (Linux)")


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_worker_sums_the_jvm_its_daemon_every_worker_and_the_python_driver(tmp_path):
    """This test process plays the Python driver; a shell script named ``java`` plays the JVM (a process's
    command name is its executable's); it starts a Python "daemon" that forks two "workers"; the first worker
    measures the service and reports what it saw and the pids it measured."""
    out = tmp_path / "seen"
    daemon = tmp_path / "daemon.py"
    daemon.write_text(
        textwrap.dedent(
            f"""
            import os, sys, time
            sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
            from service.worker.memory import service_rss_bytes
            ballast = bytearray(64 << 20)  # the daemon's own memory, touched
            for i in range(0, len(ballast), 4096):
                ballast[i] = 1
            r, w = os.pipe()
            kids = []
            for n in range(2):
                pid = os.fork()
                if pid == 0:
                    if n == 0:
                        os.read(r, 1)  # the second worker is up
                        seen = service_rss_bytes()
                        with open({str(out)!r}, "w") as f:
                            f.write(f"{{seen}} {{os.getppid()}} {{os.getpid()}}")
                        time.sleep(0.5)
                    else:
                        os.write(w, b"x")
                        time.sleep(1)
                    os._exit(0)
                kids.append(pid)
            for pid in kids:
                os.waitpid(pid, 0)
            """
        )
    )
    java = tmp_path / "java"
    java.write_text(f"#!/bin/sh\n{sys.executable} {daemon}\n")
    java.chmod(0o755)
    jvm = subprocess.Popen([str(java)])
    try:
        for _ in range(300):
            if out.exists() and out.read_text():
                break
            time.sleep(0.02)
        seen, daemon_pid, worker_pid = (int(x) for x in out.read_text().split())
    finally:
        jvm.wait(30)
    parts = _rss(os.getpid()) + (64 << 20)  # the driver (this process) and at least the daemon's ballast
    assert seen >= parts
    assert seen < parts + 3 * (64 << 20) + (256 << 20)  # the shell and 3 Python processes, not the whole machine
    assert daemon_pid != worker_pid


def test_no_jvm_above_the_daemon_means_no_measure():
    """A task batch run in-process (tests, benchmarks): this process's grandparent is no JVM, so no bound."""
    assert memory.service_rss_bytes() is None
