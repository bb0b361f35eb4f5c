"""The Python daemon Spark starts for the service (``spark.python.daemon.module``): pyspark's daemon, whose forked
workers install :mod:`service.python_worker`'s input path before they run pyspark's worker.

pyspark's daemon imports a configured worker module only when its name starts with ``pyspark``, and imports it
only after the fork (pandas and pyarrow start threads on import). So this daemon wraps the function the daemon's
child runs after the fork (``pyspark.daemon.worker``): it installs the input path there, then runs pyspark's.
"""

from __future__ import annotations

from typing import Any

import pyspark.daemon as _daemon

__all__ = ["MODULE", "worker"]

#: the value of ``spark.python.daemon.module`` that selects this daemon
MODULE = __name__

_pyspark_worker = _daemon.worker


def worker(sock: Any, authenticated: bool) -> int:
    """pyspark's ``daemon.worker`` (in the forked child) after :func:`service.python_worker.install`."""
    from service.python_worker import install

    install()
    return _pyspark_worker(sock, authenticated)


_daemon.worker = worker

if __name__ == "__main__":
    _daemon.manager()
