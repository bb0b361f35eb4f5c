"""Python workers started and ready before the streaming query's first micro-batch.

Spark starts a Python worker when a task first needs one, so without this the first micro-batch after a start -
the one a restarted service's users wait for - also waits for the Python daemon to start, for each worker to
fork and for each to import pyarrow, numpy and the service's task code. :func:`warm_python_workers` runs
a small Spark job of :func:`_warm_worker` tasks, one per state partition, from a thread while the driver starts
the query (planning it takes the driver seconds, and uses no executor slot). The workers are reused
(``spark.python.worker.reuse``, :func:`service.spark.job.build_spark`), so the stateful stage's tasks find
them started, with those modules imported. It is only a head start: a failed warm-up logs a warning and the
workers start as they would have.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["warm_python_workers"]

logger = logging.getLogger(__name__)


def _warm_worker(_rows: Iterator[int]) -> Iterator[int]:
    """In a Python worker: import what a task batch imports; yields the worker's pid."""
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401

    import service.worker.run  # noqa: F401  (the task code: windowstore, connectors, confluent_kafka)

    yield os.getpid()


def warm_python_workers(spark: Any, workers: int) -> threading.Thread:
    """Start ``workers`` Python workers in a Spark job run from a daemon thread (returned, started)."""

    def run() -> None:
        t0 = time.monotonic()
        try:
            pids = spark.sparkContext.parallelize(range(workers), workers).mapPartitions(_warm_worker).collect()
        except Exception as e:  # a head start only: the query starts its workers itself
            logger.warning("could not start the Python workers ahead of the query: %s", e)
            return
        logger.info("%d Python workers ready in %.1fs", len(set(pids)), time.monotonic() - t0)

    thread = threading.Thread(target=run, name="warm-python-workers", daemon=True)
    thread.start()
    return thread
