"""The streaming query's listener: Spark's query events handed to the driver's callbacks (:mod:`service.driver`
turns a progress into a report, metrics and committed offsets)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQueryListener

__all__ = ["query_listener"]

logger = logging.getLogger(__name__)


def query_listener(on_progress: Callable[[Any], None], on_idle: Callable[[], None]) -> StreamingQueryListener:
    """A listener that calls ``on_progress`` with each micro-batch's ``StreamingQueryProgress`` (an exception
    there is logged, never raised into Spark's listener bus) and ``on_idle`` when the query is alive without new
    input; start and termination are logged."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
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
