"""A task's rows in a Python worker (:meth:`.processor.WindowTaskProcessor.handleInputRows`): Spark's state
handles as a :class:`~service.task.state.TaskState`, the records as one offset-ordered
:class:`~service.task.runner.TaskBatch`, run where the task's owner is (:mod:`service.worker.owners`), and the
output of ``OUTPUT_SCHEMA`` (:mod:`.job`): the rows for Spark's sink (``sink=spark``) and one stats row.

The processor runs under ``transformWithState`` (pyspark's Row interface), so a worker never imports pandas. Its
input comes in one of two forms, and its output goes back in the same form:

* **Arrow record batches** from the service's worker (:mod:`.python_worker`, ``fast_input``): each item is a
  ``pyarrow.RecordBatch`` with the input's columns, holding a run of the task's rows; the output is one
  ``pyarrow.RecordBatch`` of :func:`output_arrow_schema`, which that worker hands to Spark as it is;
* **Rows** from pyspark's own worker: each item is a ``pyspark.sql.Row``; the output is Rows, which pyspark
  converts.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskOutput
from service.task.state import TaskState
from service.task.stats import STATS_FIELDS
from service.worker import owners
from service.worker.run import run_batch

__all__ = ["SparkTaskState", "handle_rows", "input_columns", "output_arrow_schema", "OUTPUT_FIELDS"]

#: the output's fields in ``OUTPUT_SCHEMA``'s order (:mod:`.job`)
OUTPUT_FIELDS = ("kind", "topic", "key", "value", "headers", "task_topic", "task_partition", "stats")


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


def _is_arrow(item: Any) -> bool:
    return hasattr(item, "num_rows") and hasattr(item, "schema")


def input_columns(items: Sequence[Any]) -> tuple[list[int], list[Any], list[Any], list[Any]]:
    """A task's input ``items`` (Arrow record batches or Rows, see the module's docstring) as the columns
    ``(offsets, keys, values, timestamps)`` in offset order (Spark hands a task's rows in the order its shuffle
    read them, which is not always the partition's)."""
    if items and _is_arrow(items[0]):
        import numpy as np
        import pyarrow as pa

        table = pa.Table.from_batches(items)
        offsets = table.column("offset").to_numpy()
        if len(offsets) > 1 and not (offsets[1:] > offsets[:-1]).all():
            table = table.take(np.argsort(offsets, kind="stable"))
        return (
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("ts").to_pylist(),
        )
    rows = list(items)
    if any(rows[i]["offset"] >= rows[i + 1]["offset"] for i in range(len(rows) - 1)):
        rows.sort(key=lambda r: r["offset"])  # stable
    return (
        [r["offset"] for r in rows],
        [None if r["key"] is None else bytes(r["key"]) for r in rows],
        [None if r["value"] is None else bytes(r["value"]) for r in rows],
        [r["ts"] for r in rows],
    )


def handle_rows(
    config: TaskConfig, task_state: Any, buckets_state: Any, key: Any, rows: Iterator[Any]
) -> Iterator[Any]:
    """One task's micro-batch: ``rows`` (the task's records, Arrow record batches or Rows) sorted by offset into
    one batch, run against the task's state; yields its output in the input's form."""
    topic, partition = key[0], int(key[1])
    items = [r for r in rows if not _is_arrow(r) or r.num_rows]
    if not items:
        return
    offsets, keys, values, timestamps = input_columns(items)
    state = SparkTaskState(task_state, buckets_state)
    batch = TaskBatch(topic, partition, offsets, keys, values, timestamps)
    out, forwarded = owners.run(run_batch, config, state, batch)
    columns = _output_columns(config, out, topic, partition, forwarded)
    if _is_arrow(items[0]):
        yield _output_batch(columns)
    else:
        from pyspark.sql import Row

        output_row = Row(*OUTPUT_FIELDS)
        yield from (output_row(*values) for values in zip(*columns, strict=True))


def _output_columns(config: TaskConfig, out: TaskOutput, topic: str, partition: int, forwarded: int) -> list[list[Any]]:
    """The output as columns of :data:`OUTPUT_FIELDS`: the rows for Spark's sink (none with ``sink=direct``),
    then the task's stats row (``kind`` "stats", its counters in ``stats`` in
    :data:`~service.task.stats.STATS_FIELDS` order)."""
    s = out.stats
    s["task_forwarded"] = int(forwarded)
    stats = [int(s[name]) for name in STATS_FIELDS]
    if config.sink != "direct" and len(out):
        kind, out_topic, out_key, value, hdrs = out.columns()
        headers: list[Any] = [None if h is None else [{"key": hk, "value": hv} for hk, hv in h] for h in hdrs]
        n = len(kind)
    else:
        kind, out_topic, out_key, value, headers, n = [], [], [], [], [], 0
    none = [None] * n
    return [
        [*kind, "stats"],
        [*out_topic, None],
        [*out_key, None],
        [*value, None],
        [*headers, None],
        [*none, topic],
        [*none, partition],
        [*none, stats],
    ]


@functools.cache
def output_arrow_schema() -> Any:
    """``OUTPUT_SCHEMA`` (:mod:`.job`) as pyspark's Row interface converts it to Arrow (``to_arrow_type``), built
    once per process; ``tests/service/test_python_worker.py`` checks the two agree."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("kind", pa.string()),
            pa.field("topic", pa.string()),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field(
                "headers",
                pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ),
            pa.field("task_topic", pa.string()),
            pa.field("task_partition", pa.int32()),
            pa.field("stats", pa.list_(pa.field("element", pa.int64()))),
        ]
    )


def _output_batch(columns: list[list[Any]]) -> Any:
    import pyarrow as pa

    schema = output_arrow_schema()
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )
