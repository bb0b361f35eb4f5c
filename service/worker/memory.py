"""What the service holds in memory, as a Python worker sees it: the resident memory of the processes it runs
in, for ``memory_limit`` (:class:`service.worker.cache.WorkerCache` drops cached windows above it).

A Python worker is forked by Spark's Python daemon, which the JVM that runs the tasks started::

    Python driver (local master only)  ->  JVM  ->  Python daemon  ->  Python workers (this one among them)

:func:`service_rss_bytes` sums the resident set of each: the JVM (the driver with a local master, an executor
with a cluster), the daemon, every worker it forked, and the JVM's parent when it is a Python process (the
service's driver, with a local master). Read from ``/proc`` (Linux); elsewhere None, and no bound applies.
Resident pages shared between processes (the daemon's, copied on write into each worker) count in each, as
in ``ps``: the bound is conservative.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections.abc import Callable

__all__ = ["children", "service_rss_bytes", "release_freed_memory"]

logger = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss(pid: int) -> int:
    """Resident bytes of ``pid`` (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        st = f.read()
    return int(st[st.rindex(")") + 2 :].split()[1])


def children(pid: int) -> list[int]:
    """The processes ``pid`` started that are still running (``/proc/PID/task/*/children``; [] if it is gone)."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def service_rss_bytes(worker_pid: int | None = None) -> int | None:
    """The resident bytes of the JVM that runs this worker's tasks, its Python daemon and workers, and - with a
    local master - the Python driver that started the JVM (see the module's docstring); None without ``/proc``
    or when the worker was not forked by a daemon under a JVM (a test calling a task batch in-process)."""
    pid = os.getpid() if worker_pid is None else worker_pid
    try:
        daemon = _parent(pid)
        jvm = _parent(daemon)
        if _command(jvm) != "java":
            return None
        driver = _parent(jvm)
    except (OSError, ValueError, IndexError):
        return None
    total = _rss(jvm) + _rss(daemon) + sum(_rss(w) for w in children(daemon))
    if _command(driver).startswith("python"):
        total += _rss(driver)
    return total


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up once (a ``CDLL`` per call leaves reference cycles); None without it."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        logger.debug("no malloc_trim here: freed memory stays with the allocator")
        return None


def release_freed_memory() -> None:
    """Hand the memory the process has freed back to the system (glibc's ``malloc_trim(0)``: the workers keep
    up to 256 MiB of freed heap for the next batch, :func:`service.spark.python_daemon.keep_memory`); nothing
    where there is no ``malloc_trim``."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
