"""The streaming query's listener: Spark's query events handed to the driver's callbacks (:mod:`service.driver`
turns a progress into a report, metrics and committed offsets).

A progress reaches Python as the progress's JSON, read in one call to the JVM, not as pyspark builds it
(``StreamingQueryProgress.fromJObject``): that walks the progress's maps and lists (durations, event time,
every state operator's custom metrics, sources, observed metrics) through py4j, one JVM round trip per entry,
and each Java iterator ends in an exception that pyspark's error conversion checks against a dozen exception
classes - names py4j resolves by asking the driver JVM's class loader, which searches every jar on the class
path for each miss. In local mode that is the executor's JVM, so the listener took CPU from the micro-batches
themselves (profile and figures: bench/HISTORY.md, 2026-11-27 "the listener"). ``StreamingQueryProgress.fromJson``
gives the same fields; its observed metrics are Rows whose nested values are dicts, which
:func:`service.spark.job.observed_values` reads as well as Rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQueryListener

__all__ = ["query_listener", "progress_from_json"]

logger = logging.getLogger(__name__)


def progress_from_json(text: str) -> Any:
    """A ``StreamingQueryProgress`` from its JSON (``progress.json`` of Spark's progress)."""
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    return StreamingQueryProgress.fromJson(json.loads(text))


def query_listener(on_progress: Callable[[Any], None], on_idle: Callable[[], None]) -> StreamingQueryListener:
    """A listener that calls ``on_progress`` with each micro-batch's ``StreamingQueryProgress`` (built from the
    progress's JSON, see the module docstring; an exception there is logged, never raised into Spark's listener
    bus) and ``on_idle`` when the query is alive without new input; start and termination are logged."""
    from pyspark import SparkContext
    from pyspark.sql.streaming import StreamingQueryListener
    from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent

    class JsonEvents(JStreamingQueryListener):
        """pyspark's bridge from the JVM's listener calls, with the progress read as JSON."""

        def onQueryProgress(self, jevent: Any) -> None:
            try:
                progress = progress_from_json(jevent.progress().json())
            except Exception:  # never let reporting kill the listener bus
                logger.exception("cannot read query progress")
                return
            self.pylistener.onQueryProgress(QueryProgressEvent(progress))

    class Listener(StreamingQueryListener):
        def __init__(self) -> None:
            self._bridge: Any = None

        @property
        def _jlistener(self) -> Any:
            # what StreamingQueryManager.addListener registers in the JVM: pyspark's wrapper, with JsonEvents
            if self._bridge is None:
                gateway = SparkContext._gateway
                assert gateway is not None, "the driver JVM is started before a listener is added"
                self._bridge = gateway.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(
                    JsonEvents(self)
                )
            return self._bridge

        def onQueryStarted(self, event: Any) -> None:
            logger.info("query started: id %s run %s", event.id, event.runId)

        def onQueryProgress(self, event: Any) -> None:
            try:
                on_progress(event.progress)
            except Exception:  # never let reporting kill the listener bus
                logger.exception("cannot read query progress")

        def onQueryIdle(self, event: Any) -> None:
            on_idle()

        def onQueryTerminated(self, event: Any) -> None:
            if event.exception:  # the driver logs the one ERROR line once the query has stopped
                logger.debug("query terminated with an error: %s", event.exception.splitlines()[0])
            else:
                logger.info("query stopped")

    return Listener()
