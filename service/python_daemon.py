"""The Python daemon Spark starts for the service (``spark.python.daemon.module``): pyspark's daemon, whose forked
workers install :mod:`service.python_worker`'s input path before they run pyspark's worker.

pyspark's daemon imports a configured worker module only when its name starts with ``pyspark``, and imports it
only after the fork (pandas and pyarrow start threads on import). So this daemon wraps the function the daemon's
child runs after the fork (``pyspark.daemon.worker``): it installs the input path there, then runs pyspark's.

It also changes what the forked worker does between two tasks (:class:`BetweenTasks`): pyspark's daemon runs
a full ``gc.collect()`` there, which walks every object the worker holds, the cached windows included.
"""

from __future__ import annotations

import gc
from typing import Any

import pyspark.daemon as _daemon

__all__ = ["MODULE", "worker", "BetweenTasks"]

#: the value of ``spark.python.daemon.module`` that selects this daemon
MODULE = __name__

_pyspark_worker = _daemon.worker


def worker(sock: Any, authenticated: bool) -> int:
    """pyspark's ``daemon.worker`` (in the forked child) after :func:`service.python_worker.install`."""
    from service.python_worker import install

    install()
    return _pyspark_worker(sock, authenticated)


class BetweenTasks:
    """The ``gc`` that pyspark's daemon sees: its ``collect()`` after each task of a reused worker collects the
    young generations, then freezes what survived (``gc.freeze()``); every :attr:`FULL_EVERY`-th call it
    unfreezes and runs the full collection pyspark runs every time. Everything else is the ``gc`` module's.

    Why: a worker holds its tasks' windows between batches (:mod:`service.processing`'s cache), tens of
    thousands of objects per task, and a full collection walks all of them: 65-123 ms after every task with
    the windows full, plus the collector's own full collections, which the batches' turnover of those objects
    keeps triggering. Frozen objects are skipped by every collection and still freed by reference counting
    when a batch replaces them; only a reference cycle among them would wait for the next full collection.
    The tasks make none: task batches run with the collector off leave no unreachable object, and a dropped
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


_daemon.worker = worker
_daemon.gc = BetweenTasks()  # the daemon's only use of gc: ``gc.collect()`` in the child between tasks

if __name__ == "__main__":
    _daemon.manager()
