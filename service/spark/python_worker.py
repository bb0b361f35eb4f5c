"""The Python worker Spark runs for the service (``spark.python.worker.module``): pyspark's own worker, with
a vectorized input path for ``transformWithStateInPandas``.

pyspark (4.3) hands a stateful processor its input by converting each Arrow batch to pandas and then walking it row by
row: ``itertuples()``, a key tuple per row, ``itertools.groupby`` over the rows, and ``pd.DataFrame(list of
namedtuples)`` per chunk: Python work per input row that shows at the service's rates (``bench/python_worker_bench.py``;
figures in bench/RESULTS.md). The rows of one grouping key arrive contiguous (Spark sorts them), so this worker finds
the runs of equal keys with one Arrow comparison per key column, converts each Arrow batch to pandas once (as pyspark
does) and hands out row ranges of it. It gives the processor the same thing:

* one call per grouping key, with the key as a tuple of Python values (the first row's ``as_py()``, as
  pyspark's ``tuple(row[o] ...)`` of the pandas row);
* the value columns (``df.iloc[:, value_offsets]``) as pandas frames converted by pyspark's own
  ``ArrowBatchTransformer.to_pandas``, with the column names and dtypes of pyspark's frames, cut where
  pyspark cuts them (every ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows of a key, or its byte limit,
  across Arrow batches);
* then the ``PROCESS_TIMER`` and ``COMPLETE`` calls, and the output converted by pyspark's own
  ``PandasToArrowConversion`` with the worker's settings.

Everything else is pyspark's worker unchanged: only ``read_udfs`` is wrapped, and only its
``transformWithStateInPandas`` function (without initial state) is replaced (:func:`install`, which
:mod:`service.spark.python_daemon` calls in each forked worker, and :func:`main` without the daemon). The
replacement takes its inputs from the closure of pyspark's function; if that closure does not have the names
it needs, the worker logs a warning once and keeps pyspark's function. On a pyspark version the patch was not
written for (:mod:`.compat`) nothing is wrapped: one ERROR, and pyspark's worker runs unchanged.
``tests/service/test_python_worker.py`` runs a processor under both workers in Spark and checks it is handed
the same keys and the same frames, and that the service's setting (``fast_input``) selects this worker.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

from service.spark import compat

__all__ = ["MODULE", "main", "key_runs", "fast_transform_with_state", "install"]

logger = logging.getLogger(__name__)

#: the value of ``spark.python.worker.module`` that selects this worker
MODULE = __name__

#: what the replacement reads from the closure of pyspark's ``transform_with_state_func``
_CLOSURE_NAMES = (
    "udf",
    "key_offsets",
    "value_offsets",
    "stateful_processor_api_client",
    "runner_conf",
    "output_schema",
    "return_type",
    "arrow_max_records_per_batch",
    "arrow_max_bytes_per_batch",
)

_UNLIMITED = 2**31 - 1
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


def _rows_per_frame(max_records: int, max_bytes: int, mean_row_bytes: float) -> int:
    """The row count at which pyspark cuts a key's frame: the first ``c`` with ``c >= max_records`` or
    ``c * mean_row_bytes >= max_bytes`` (its check after each appended row, evaluated the same way)."""
    limit = max_records
    if mean_row_bytes > 0:
        c = max(1, math.ceil(max_bytes / mean_row_bytes))
        while c > 1 and (c - 1) * mean_row_bytes >= max_bytes:
            c -= 1
        while c * mean_row_bytes < max_bytes:
            c += 1
        limit = min(limit, c)
    return max(1, limit)


def _widened(frame: Any) -> Any:
    """Narrow numeric columns as pyspark's frames have them: built from Python scalars, pandas infers int64 for
    every integer column and float64 for every float column (int32 partition -> int64)."""
    import numpy as np

    for name, dtype in frame.dtypes.items():
        if not isinstance(dtype, np.dtype):  # pandas extension dtypes (prefer_int_ext_dtype) stay as they are
            continue
        if dtype.kind in "iu" and dtype.itemsize < 8:
            frame[name] = frame[name].astype("int64")
        elif dtype.kind == "f" and dtype.itemsize < 8:
            frame[name] = frame[name].astype("float64")
    return frame


def fast_transform_with_state(closure: dict[str, Any]) -> Callable[[int, Iterator[Any]], Iterator[Any]]:
    """pyspark's ``transform_with_state_func`` (``SQL_TRANSFORM_WITH_STATE_PANDAS_UDF``) with the input
    regrouped a key run at a time; ``closure`` holds the names of :data:`_CLOSURE_NAMES` from pyspark's."""
    import pandas as pd
    from pyspark.errors import PySparkValueError
    from pyspark.sql.conversion import ArrowBatchTransformer, PandasToArrowConversion
    from pyspark.sql.streaming.stateful_processor_util import TransformWithStateInPandasFuncMode as Mode
    from pyspark.sql.types import StructType

    udf = closure["udf"]
    key_offsets = list(closure["key_offsets"])
    value_offsets = list(closure["value_offsets"])
    api_client = closure["stateful_processor_api_client"]
    conf = closure["runner_conf"]
    output_schema = closure["output_schema"]
    return_type = closure["return_type"]
    max_records = int(closure["arrow_max_records_per_batch"])
    max_bytes = int(closure["arrow_max_bytes_per_batch"])

    def frame_of(pieces: list[Any]) -> Any:
        frame = pieces[0] if len(pieces) == 1 else pd.concat(pieces)
        return _widened(frame.reset_index(drop=True))

    def chunks(batches: Iterator[Any]) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """``(key, frame)`` with pyspark's frames: each Arrow batch converted to pandas whole (so a column's
        dtype is the batch's), a key's consecutive rows across batches cut every :func:`_rows_per_frame` rows
        (pyspark's mean row size is over every batch so far)."""
        total_bytes = total_rows = 0
        key: tuple[Any, ...] = ()  # the key of the rows in ``pieces`` (set before the first row goes in)
        pieces: list[Any] = []  # row ranges of converted batches that make the frame being filled
        filled = 0
        for batch in batches:
            if not batch.num_rows:
                continue
            if max_bytes != _UNLIMITED:
                total_bytes += sum(buf.size for col in batch.columns for buf in col.buffers() if buf is not None)
                total_rows += batch.num_rows
            limit = _rows_per_frame(max_records, max_bytes, total_bytes / total_rows if total_rows else 0.0)
            pdf = pd.concat(
                ArrowBatchTransformer.to_pandas(
                    batch, timezone=conf.timezone, prefer_int_ext_dtype=conf.prefer_int_ext_dtype
                ),
                axis=1,
            )
            # the column names pyspark's frames get: itertuples' namedtuple fields
            # typeshed types a namedtuple() made from a runtime list of names as a bare tuple class
            pdf.columns = list(collections.namedtuple("Pandas", list(pdf.columns), rename=True)._fields)  # type: ignore[attr-defined]
            for start, end in key_runs(batch, key_offsets):
                run_key = tuple(batch.column(o)[start].as_py() for o in key_offsets)
                if pieces and run_key != key:
                    yield key, frame_of(pieces)
                    pieces, filled = [], 0
                key = run_key
                s = start
                while s < end:
                    take = min(max(limit - filled, 1), end - s)
                    pieces.append(pdf.iloc[s : s + take])
                    filled += take
                    s += take
                    if filled >= limit:
                        yield key, frame_of(pieces)
                        pieces, filled = [], 0
        if pieces:
            yield key, frame_of(pieces)

    def convert(results: Iterator[Any]) -> Iterator[Any]:
        for result in results:
            if isinstance(return_type, StructType) and not isinstance(result, pd.DataFrame):
                raise PySparkValueError(
                    "Invalid return type. Please make sure that the UDF returns a "
                    "pandas.DataFrame when the specified return type is StructType."
                )
            yield PandasToArrowConversion.convert(
                [result],
                output_schema,
                timezone=conf.timezone,
                safecheck=conf.safecheck,
                arrow_cast=True,
                assign_cols_by_name=conf.assign_cols_by_name,
                int_to_decimal_coercion_enabled=conf.int_to_decimal_coercion_enabled,
            )

    def transform_with_state(split_index: int, batches: Iterator[Any]) -> Iterator[Any]:
        for key, group in itertools.groupby(chunks(batches), key=lambda c: c[0]):
            frames = (frame.iloc[:, value_offsets] for _, frame in group)
            yield from convert(udf(api_client, Mode.PROCESS_DATA, key, frames))
        yield from convert(udf(api_client, Mode.PROCESS_TIMER, None, iter([])))
        yield from convert(udf(api_client, Mode.COMPLETE, None, iter([])))

    return transform_with_state


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
    """Wrap ``pyspark.worker.read_udfs`` so that ``transformWithStateInPandas`` gets the fast input path."""
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
        if eval_type == PythonEvalType.SQL_TRANSFORM_WITH_STATE_PANDAS_UDF:
            closure = _closure_of(func)
            if closure is not None:
                func = fast_transform_with_state(closure)
            elif not _warned:
                _warned = True
                logger.warning(
                    "pyspark's transformWithStateInPandas function does not have the expected "
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

    install()
    worker.main(infile, outfile)


if __name__ == "__main__":  # without the daemon (spark.python.use.daemon=false) Spark runs ``python -m MODULE``
    from service.spark import pyspark_path

    pyspark_path.prefer_installed()
    from pyspark.worker_util import get_sock_file_to_executor

    with get_sock_file_to_executor() as sock_file:
        main(sock_file, sock_file)
