"""The ``transformWithState`` processor (pyspark's Row interface), :class:`WindowTaskProcessor`: one grouping key =
one input partition (topic, partition).

Besides the Python workers, Spark unpickles the processor at every query start in a fresh Python process that the
driver JVM starts while it plans the first micro-batch (pyspark's ``transform_with_state_driver_worker``, to learn
the state variables from :meth:`WindowTaskProcessor.init`): on the critical path of every (re)start. So this module
imports pyspark's base class only, and the processor carries its task config pickled: it is unpickled, and the
task code (:mod:`.task_rows`: the engine, the connectors) imported, on the first micro-batch in a worker -
where :mod:`.warmup` has imported that code already - never in the driver's planning process.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from service.task.config import TaskConfig

__all__ = ["WindowTaskProcessor", "state_schemas"]

try:
    from pyspark.sql.streaming import StatefulProcessor as _StatefulProcessorBase
except ImportError:  # pragma: no cover - pyspark is part of the service extra
    _StatefulProcessorBase = object  # type: ignore[assignment,misc]


def state_schemas() -> tuple[StructType, StructType, StructType]:
    """The processor's state schemas: the task record (ValueState "task"), the bucket key and the bucket blob
    (MapState "buckets")."""
    from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

    return (
        StructType(
            [
                StructField("meta", BinaryType()),
                StructField("token", StringType()),
                StructField("buckets", IntegerType()),
            ]
        ),
        StructType([StructField("b", IntegerType())]),
        StructType([StructField("data", BinaryType())]),
    )


class WindowTaskProcessor(_StatefulProcessorBase):
    """``transformWithState`` processor: one grouping key = one input partition (topic, partition).
    Its rows are handled by :func:`.task_rows.handle_rows`."""

    def __init__(self, config: TaskConfig) -> None:
        self._config: TaskConfig | None = config
        self._pickled = b""

    @property
    def config(self) -> TaskConfig:
        """The task config (unpickled on first use)."""
        if self._config is None:
            self._config = pickle.loads(self._pickled)
        return self._config

    def __getstate__(self) -> dict[str, Any]:
        # the config as bytes: unpickling the processor imports nothing of the task code
        return {"pickled": pickle.dumps(self.config, protocol=5)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._config = None
        self._pickled = state["pickled"]

    def init(self, handle: Any) -> None:
        # StructType schemas: a DDL string would be parsed by a JVM round trip per state, task and micro-batch
        task_schema, bucket_key_schema, bucket_schema = state_schemas()
        self.task_state = handle.getValueState("task", task_schema)
        self.buckets_state = handle.getMapState("buckets", bucket_key_schema, bucket_schema)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        from service.spark.task_rows import handle_rows

        return handle_rows(self.config, self.task_state, self.buckets_state, key, rows)

    def close(self) -> None:
        pass
