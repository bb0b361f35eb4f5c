"""The Python worker Spark runs for the service (``spark.python.worker.module``): pyspark's own worker, with
a vectorized input path for ``transformWithState`` (pyspark's Row interface).

pyspark (4.3) hands a Row-interface stateful processor its input one ``Row`` at a time: for every row of every
Arrow batch it reads the grouping key and every column with ``as_py()`` and builds a ``Row`` - Python work per
input cell that shows at the service's rates (``bench/python_worker_bench.py``; figures in bench/RESULTS.md). The
rows of one grouping key arrive contiguous (Spark sorts them), so this worker finds the runs of equal keys with one
Arrow comparison per key column and hands the processor, once per grouping key (the key as a tuple of Python
values, as pyspark's ``as_py()`` gives it), the key's rows as zero-copy ``pyarrow.RecordBatch`` slices of the
input batches, with every input column; then the ``PROCESS_TIMER`` and ``COMPLETE`` calls. The processor's output
goes back to Spark as it comes: an Arrow record batch of the output schema as it is (after a cast if its types
differ), Rows converted as pyspark converts them. The service's processor takes either form and answers in the
form it was given (:mod:`.task_rows`); a worker that runs it this way never imports pandas.

Everything else is pyspark's worker unchanged: only ``read_udfs`` is wrapped, and only its ``transformWithState``
function (without initial state) is replaced (:func:`install`, which :mod:`service.spark.python_daemon` calls in
each forked worker, and :func:`main` without the daemon). The replacement takes its inputs from the closure of
pyspark's function; if that closure does not have the names it needs, the worker logs a warning once and keeps
pyspark's function. On a pyspark version the patch was not written for (:mod:`.compat`) nothing is wrapped: one
ERROR, and pyspark's worker runs unchanged. ``tests/service/test_python_worker.py`` runs a processor under both
workers in Spark and checks it is handed the same keys and the same rows, and that the service's setting
(``fast_input``) selects this worker.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from service.spark import compat

__all__ = ["MODULE", "main", "key_runs", "fast_transform_with_state", "install"]

logger = logging.getLogger(__name__)

#: the value of ``spark.python.worker.module`` that selects this worker
MODULE = __name__

#: what the replacement reads from the closure of pyspark's ``transform_with_state_func``
_CLOSURE_NAMES = ("udf", "key_offsets", "stateful_processor_api_client", "return_type")

_warned = False


def key_runs(batch: Any, key_offsets: list[int]) -> list[tuple[int, int]]:
    """The ``[start, end)`` row ranges of ``batch`` (a ``pyarrow.RecordBatch``) over which the columns at
    ``key_offsets`` are all equal, in row order. Nulls equal nulls (as ``None == None`` in pyspark's grouping)::

        rows     0   1   2   3   4   5
        key      a   a   b   b   b   a
        runs     [0, 2)  [2,     5)  [5, 6)
    """
    import numpy as np
    import pyarrow.compute as pc

    n = batch.num_rows
    if n == 0:
        return []
    change = np.zeros(n, dtype=bool)
    change[0] = True
    if n > 1:
        for o in key_offsets:
            col = batch.column(o)
            later, earlier = col.slice(1), col.slice(0, n - 1)
            differs = pc.not_equal(later, earlier)
            if col.null_count:
                differs = pc.or_(pc.fill_null(differs, False), pc.xor(pc.is_null(later), pc.is_null(earlier)))
            change[1:] |= differs.to_numpy(zero_copy_only=False)
    bounds = np.flatnonzero(change).tolist()
    bounds.append(n)
    return list(itertools.pairwise(bounds))


def fast_transform_with_state(closure: dict[str, Any]) -> Callable[[int, Iterator[Any]], Iterator[Any]]:
    """pyspark's ``transformWithState`` function (``SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_UDF``) with the input
    handed over a key run at a time as Arrow slices; ``closure`` holds the names of :data:`_CLOSURE_NAMES` from
    pyspark's."""
    import pyarrow as pa
    from pyspark.sql.conversion import ArrowBatchTransformer
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.streaming.stateful_processor_util import TransformWithStateInPandasFuncMode as Mode

    udf = closure["udf"]
    key_offsets = list(closure["key_offsets"])
    api_client = closure["stateful_processor_api_client"]
    # pyspark's own conversion of the output type (its Row path uses these arguments)
    schema = pa.schema(list(to_arrow_type(closure["return_type"], timezone="UTC", prefers_large_types=False)))

    def runs(batches: Iterator[Any]) -> Iterator[tuple[tuple[Any, ...], Any]]:
        for batch in batches:
            for start, end in key_runs(batch, key_offsets):
                yield tuple(batch.column(o)[start].as_py() for o in key_offsets), batch.slice(start, end - start)

    def convert(results: Iterator[Any]) -> Iterator[Any]:
        rows: list[Any] = []
        for result in results:
            if isinstance(result, pa.RecordBatch):
                if result.num_rows:
                    yield ArrowBatchTransformer.wrap_struct(_conformed(result, schema))
            else:
                rows.append(result)
        if rows:  # as pyspark's Row path converts them
            batch = pa.RecordBatch.from_pylist([r.asDict(True) for r in rows], schema=schema)
            yield ArrowBatchTransformer.wrap_struct(batch)

    def transform_with_state(split_index: int, batches: Iterator[Any]) -> Iterator[Any]:
        for key, group in itertools.groupby(runs(batches), key=lambda r: r[0]):
            yield from convert(udf(api_client, Mode.PROCESS_DATA, key, (piece for _, piece in group)))
        yield from convert(udf(api_client, Mode.PROCESS_TIMER, None, iter([])))
        yield from convert(udf(api_client, Mode.COMPLETE, None, iter([])))

    return transform_with_state


def _conformed(batch: Any, schema: Any) -> Any:
    """``batch`` with ``schema`` (columns taken by position, cast where a type differs)."""
    import pyarrow as pa

    if batch.schema == schema:
        return batch
    if batch.num_columns != len(schema):
        raise ValueError(
            f"the processor returned a record batch of {batch.num_columns} columns ({batch.schema.names}); "
            f"the output schema has {len(schema)} ({schema.names})"
        )
    return pa.RecordBatch.from_arrays(
        [c.cast(f.type) for c, f in zip(batch.columns, schema, strict=True)], schema=schema
    )


def _closure_of(func: Any) -> dict[str, Any] | None:
    """The closure variables of ``func`` by name, if it has all of :data:`_CLOSURE_NAMES`."""
    code, cells = getattr(func, "__code__", None), getattr(func, "__closure__", None)
    if code is None or not cells:
        return None
    found: dict[str, Any] = {}
    for name, cell in zip(code.co_freevars, cells):
        try:
            found[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return found if all(n in found for n in _CLOSURE_NAMES) else None


def install() -> None:
    """Wrap ``pyspark.worker.read_udfs`` so that ``transformWithState`` gets the fast input path."""
    if not compat.patches_apply():
        return
    import pyspark.worker as worker
    from pyspark.util import PythonEvalType

    original = worker.read_udfs
    if getattr(original, "_slidingwindow", False):
        return

    def read_udfs(pickleSer: Any, udf_info_list: Any, eval_type: int, runner_conf: Any, eval_conf: Any) -> Any:
        global _warned
        func, profiler, deserializer, serializer = original(pickleSer, udf_info_list, eval_type, runner_conf, eval_conf)
        if eval_type == PythonEvalType.SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_UDF:
            closure = _closure_of(func)
            if closure is not None:
                func = fast_transform_with_state(closure)
            elif not _warned:
                _warned = True
                logger.warning(
                    "pyspark's transformWithState function does not have the expected "
                    "closure (%s): its own input path is used",
                    ", ".join(_CLOSURE_NAMES),
                )
        return func, profiler, deserializer, serializer

    read_udfs._slidingwindow = True  # type: ignore[attr-defined]
    worker.read_udfs = read_udfs


def main(infile: Any, outfile: Any) -> None:
    """The worker's entry point without the daemon (``python -m service.spark.python_worker``; pyspark's daemon
    only imports worker modules named ``pyspark*``, so it gets :func:`install` from
    :mod:`service.spark.python_daemon`): pyspark's ``main`` after :func:`install`."""
    import pyspark.worker as worker

    from service.spark.pandas_guard import keep_pandas_out

    if compat.patches_apply():
        keep_pandas_out()
    install()
    worker.main(infile, outfile)


if __name__ == "__main__":  # without the daemon (spark.python.use.daemon=false) Spark runs ``python -m MODULE``
    from service.spark import pyspark_path

    pyspark_path.prefer_installed()
    from pyspark.worker_util import get_sock_file_to_executor

    with get_sock_file_to_executor() as sock_file:
        main(sock_file, sock_file)
