"""A task's rows in a Python worker (:meth:`.processor.WindowTaskProcessor.handleInputRows`): Spark's state
handles as a :class:`~service.task.state.TaskState`, the records as one offset-ordered
:class:`~service.task.runner.TaskBatch`, run where the task's owner is (:mod:`service.worker.owners`), and the
output frames of ``OUTPUT_SCHEMA`` (:mod:`.job`): the rows for Spark's sink (``sink=spark``) and one stats row."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskOutput
from service.task.state import TaskState
from service.task.stats import STATS_FIELDS
from service.worker import owners
from service.worker.run import run_batch

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SparkTaskState", "handle_rows"]


class SparkTaskState(TaskState):
    """:class:`TaskState` over the processor's ValueState ("task") and MapState ("buckets")."""

    def __init__(self, task_state: Any, buckets_state: Any) -> None:
        self._task = task_state
        self._buckets = buckets_state

    def get_task(self) -> tuple[bytes, str, int] | None:
        row = self._task.get()
        return None if row is None else (bytes(row[0]), str(row[1]), int(row[2]))

    def set_task(self, meta: bytes, token: str, buckets: int) -> None:
        self._task.update((meta, token, buckets))

    def get_bucket(self, bucket: int) -> bytes | None:
        row = self._buckets.getValue((bucket,))
        return None if row is None else bytes(row[0])

    def put_bucket(self, bucket: int, data: bytes) -> None:
        self._buckets.updateValue((bucket,), (data,))

    def delete_bucket(self, bucket: int) -> None:
        self._buckets.removeKey((bucket,))


def handle_rows(
    config: TaskConfig, task_state: Any, buckets_state: Any, key: Any, rows: Iterator[Any]
) -> Iterator[pd.DataFrame]:
    """One task's micro-batch: ``rows`` (pandas frames of the task's records) sorted by offset into one batch, run
    against the task's state; yields its output frames."""
    import pandas as pd

    topic, partition = key[0], int(key[1])
    frames = [f for f in rows if len(f)]
    if not frames:
        return
    pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    offsets = pdf["offset"].to_numpy()
    if len(offsets) > 1 and not (offsets[1:] > offsets[:-1]).all():
        pdf = pdf.sort_values("offset", kind="stable")
        offsets = pdf["offset"].to_numpy()

    state = SparkTaskState(task_state, buckets_state)
    batch = TaskBatch(
        topic, partition, offsets.tolist(), pdf["key"].tolist(), pdf["value"].tolist(), pdf["ts"].tolist()
    )
    out, forwarded = owners.run(run_batch, config, state, batch)
    s = out.stats
    s["task_forwarded"] = int(forwarded)
    if config.sink != "direct" and len(out):
        yield _rows_frame(out)
    yield pd.DataFrame(
        {
            "kind": ["stats"],
            "topic": [None],
            "key": [None],
            "value": [None],
            "headers": [None],
            "task_topic": [topic],
            "task_partition": [partition],
            "stats": [[int(s[name]) for name in STATS_FIELDS]],
        }
    )


def _rows_frame(out: TaskOutput) -> pd.DataFrame:
    """The output rows of a task batch as a frame of ``OUTPUT_SCHEMA`` (for Spark's Kafka sink)."""
    import numpy as np
    import pandas as pd

    n = len(out)
    kind, topic, key, value, hdrs = out.columns()
    headers = [None if h is None else [{"key": hk, "value": hv} for hk, hv in h] for h in hdrs]
    nulls = pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    rows: dict[str, Any] = {
        "kind": kind,
        "topic": topic,
        "key": key,
        "value": value,
        "headers": headers,
        "task_topic": pd.Series([None] * n, dtype=object),
        "task_partition": nulls,
        "stats": pd.Series([None] * n, dtype=object),
    }
    return pd.DataFrame(rows)
