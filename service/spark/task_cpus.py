"""How many cores a Spark task takes (``spark.task.cpus``, the ``task_cpus`` setting), and so how many of the
service's stateful tasks, each with a Python worker of its own, run at once.

A stateful task keeps more than one thread busy. The JVM's task thread reads the shuffled records, writes them to
the Python worker as Arrow batches and reads the output back; the JVM also answers the worker's state calls
(Spark's state server, over RocksDB); and the Python worker runs the window engine. Spark still counts the task as
one core. So a local master of N cores runs N stateful tasks at once, and each has a Python worker of its own:
~230 MiB at its peak (pyarrow, numpy and the task code; the windows of its tasks; a task batch in flight).
With ``task_cpus=2`` a task takes two of the master's cores, so half as many run at once, with half as many
Python workers::

    local[4], task_cpus=1 (Spark's default)       local[4], task_cpus=2
    core   1   2   3   4                          core   1   2   3   4
    task  [a] [b] [c] [d]   4 Python workers      task  [a  a] [b  b]    2 Python workers

On 2 cores, one stateful task at a time instead of two holds one Python worker fewer at the service's peak, for
fewer records/s in a backlog and longer micro-batches, whose stateful tasks then run one after the other, each
with a fixed cost of its own: the more state partitions, the longer (``bench/side_by_side.py``,
``bench/batch_phases.py``; figures in bench/HISTORY.md). So the default (0) stays Spark's, and ``task_cpus=2`` is
the setting for a deployment short of memory. Only a local master's cores are known here: the settings refuse a
``task_cpus`` above them (no task could ever run); with a cluster master, a value above an executor's cores
leaves the tasks waiting, which is the cluster's business. ``spark_conf`` can set ``spark.task.cpus`` too, over
this.
"""

from __future__ import annotations

import math
import os
import re

__all__ = ["available_cores", "local_cores"]

_LOCAL = re.compile(r"^local(?:\[(?P<cores>\*|[1-9][0-9]*)(?:,(?:[0-9]+))?\])?$")


def available_cores(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The cores this process may run on, as the JVM counts them for ``local[*]``
    (``Runtime.availableProcessors``): the CPU affinity, lowered to the cgroup's CPU quota rounded up
    (cgroup v2's ``cpu.max`` or v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``) when there is one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_quota(cgroup_root)
    return max(1, min(cores, quota)) if quota else max(1, cores)


def _cgroup_quota(root: str) -> int | None:
    """The CPU quota of this process's cgroup in cores (rounded up), None without one."""
    try:
        with open(os.path.join(root, "cpu.max")) as f:
            quota, period = f.read().split()[:2]
        if quota == "max":
            return None
        return math.ceil(int(quota) / int(period))
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as f:
            quota_us = int(f.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as f:
            period_us = int(f.read())
    except (OSError, ValueError):
        return None
    return math.ceil(quota_us / period_us) if quota_us > 0 and period_us > 0 else None


def local_cores(master: str, available: int | None = None) -> int | None:
    """The cores of a local master: ``local`` 1, ``local[N]`` and ``local[N,F]`` N, ``local[*]`` and
    ``local[*,F]`` ``available`` (default :func:`available_cores`); None for any other master."""
    m = _LOCAL.match(master.strip())
    if m is None:
        return None
    cores = m.group("cores")
    if cores is None:
        return 1
    if cores == "*":
        return available_cores() if available is None else available
    return int(cores)
