"""The Python daemon Spark starts for the service (``spark.python.daemon.module``): pyspark's daemon, whose forked
workers install :mod:`service.spark.python_worker`'s input path before they run pyspark's worker.

pyspark's daemon imports a configured worker module only when its name starts with ``pyspark``, and imports it
only after the fork (pyarrow starts threads on import). So this daemon wraps the function the daemon's
child runs after the fork (``pyspark.daemon.worker``): it installs the input path there, then runs pyspark's.

It also changes what the forked worker does between two tasks (:class:`BetweenTasks`): pyspark's daemon runs
a full ``gc.collect()`` there, which walks every object the worker holds, the cached windows included. And
before it forks any worker it sets how the workers get memory (:func:`keep_memory`).

Both changes of pyspark's daemon apply only to the pyspark versions they were written for (:mod:`.compat`); on
another, this module logs one ERROR and pyspark's daemon runs unchanged.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
from typing import Any

from service.spark import pyspark_path

pyspark_path.prefer_installed()  # before the first import of pyspark: see the module

import pyspark.daemon as _daemon  # noqa: E402

from service.spark import compat  # noqa: E402

__all__ = ["MODULE", "worker", "BetweenTasks", "keep_memory"]

logger = logging.getLogger(__name__)

#: the value of ``spark.python.daemon.module`` that selects this daemon
MODULE = __name__

_pyspark_worker = _daemon.worker


def worker(sock: Any, authenticated: bool) -> int:
    """pyspark's ``daemon.worker`` (in the forked child) after :func:`service.spark.pandas_guard.keep_pandas_out`
    and :func:`service.spark.python_worker.install`."""
    from service.spark.pandas_guard import keep_pandas_out
    from service.spark.python_worker import install

    keep_pandas_out()
    install()
    return _pyspark_worker(sock, authenticated)


class BetweenTasks:
    """The ``gc`` that pyspark's daemon sees: its ``collect()`` after each task of a reused worker collects the
    young generations, then freezes what survived (``gc.freeze()``); every :attr:`FULL_EVERY`-th call it
    unfreezes and runs the full collection pyspark runs every time. Everything else is the ``gc`` module's.

    Why: a worker holds its tasks' windows between batches (:mod:`service.worker.cache`), tens of thousands of
    objects per task, and a full collection walks all of them after every task (a large share of a task batch with the
    windows full; bench/RESULTS.md and its history), plus the collector's own full collections, which the batches'
    turnover of those objects keeps triggering. Frozen objects are skipped by every collection and still freed by
    reference counting when a batch replaces them; only a reference cycle among them would wait for the next full
    collection. The tasks make none: task batches run with the collector off leave no unreachable object, and a dropped
    window processor is freed at once (``tests/service/test_processing.py``,
    ``tests/windowstore/test_reference_cycles.py``). So that full collection is a bound, not a chore::

        task  1  2 ... 99  100  101 ...
        gc    young + freeze   full  young + freeze ...
    """

    #: every FULL_EVERY-th call runs pyspark's full collection (after unfreezing)
    FULL_EVERY = 100

    def __init__(self) -> None:
        self.calls = 0

    def collect(self, generation: int = 2) -> int:
        """Collect after a task (pyspark calls it without arguments): see the class."""
        if generation < 2:
            return gc.collect(generation)
        self.calls += 1
        if self.calls % self.FULL_EVERY == 0:
            gc.unfreeze()
            return gc.collect()
        found = gc.collect(1)
        gc.freeze()
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(gc, name)


#: glibc's ``mallopt`` parameters (``malloc.h``)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: blocks up to this size come from the heap, not from a mapping of their own (glibc's largest on 64-bit)
MMAP_THRESHOLD = 32 << 20
#: free memory at the top of the heap kept for the next task batch before the rest is given back
TRIM_THRESHOLD = 256 << 20


def keep_memory() -> list[str]:
    """Let the workers forked after this call reuse their memory from one task batch to the next; returns what
    was set (``"numpy"``, ``"malloc"``). Call it in the daemon before the first fork.

    A task batch with the windows full allocates and frees tens of megabytes of arrays (the window engine's
    matrices of all keys, the changelog's columns). A page the process touches for the first time costs a page
    fault (and, on a VM, the host backing it), so memory handed back to the system and mapped again for the next
    batch can cost more than the work done in it:

    * glibc serves a block over its mmap threshold with a mapping of its own and unmaps it on ``free``; its
      threshold adapts upwards only as far as the largest block freed so far. Fixed at :data:`MMAP_THRESHOLD`,
      the arrays come from the heap and are reused; heap memory beyond :data:`TRIM_THRESHOLD` free at its top
      is still given back.
    * numpy asks the kernel for transparent huge pages on arrays of 4 MB and more (``madvise``); with this
      kernel's ``defrag=madvise`` a fault there may compact memory first. ``NUMPY_MADVISE_HUGEPAGE=0`` (unless
      set already) turns that off; numpy reads it when the worker imports it.

    ``bench/task_batch_bench.py --keep-memory`` measures a task batch with and without (bench/RESULTS.md). Where
    ``mallopt`` is missing (not glibc) only the numpy part applies."""
    done: list[str] = []
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    if os.environ["NUMPY_MADVISE_HUGEPAGE"] == "0":
        done.append("numpy")
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        logger.debug("no mallopt here: the allocator keeps its own thresholds")
        return done
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1:
        done.append("malloc")
    return done


if compat.patches_apply():
    _daemon.worker = worker
    _daemon.gc = BetweenTasks()  # type: ignore[assignment]  # a stand-in for the gc module: the daemon's only use of gc: ``gc.collect()`` in the child between tasks

if __name__ == "__main__":
    keep_memory()
    _daemon.manager()
