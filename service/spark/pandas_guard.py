"""pandas kept out of the service's Python workers: ~40 MiB of each worker's resident memory that nothing there uses.

The processor runs under pyspark's Row interface (``transformWithState``) and hands Spark Arrow record batches
(:mod:`.task_rows`), so no code of a service worker needs pandas. pyarrow imports it all the same: its pandas
shim tries ``import pandas`` the first time any array is built from Python objects or converted back (``pa.array``,
``Scalar.as_py``, ``Array.to_numpy``), just to know whether pandas is there, and a worker then holds pandas for its
whole life (what that costs: bench/HISTORY.md, issue 34). pyarrow treats an ``ImportError`` there as
"pandas is not installed" and converts without it.

:func:`keep_pandas_out` puts a finder first on ``sys.meta_path`` that answers every import of pandas with an
``ImportError`` saying why. :mod:`.python_daemon` calls it in each forked worker, :mod:`.python_worker` without the
daemon; both run only with ``fast_input`` on and the pyspark version their patches were written for. With
``fast_input=false`` pyspark's own daemon and workers run, and pyarrow imports pandas as usual.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["MESSAGE", "keep_pandas_out"]

MESSAGE = (
    "pandas is kept out of the service's Python workers (service.spark.pandas_guard): the processor hands Spark "
    "Arrow batches, and pandas would cost each worker ~40 MiB; fast_input=false runs pyspark's own workers"
)


class _PandasKeptOut(importlib.abc.MetaPathFinder):
    """Refuses ``pandas`` and its submodules with :data:`MESSAGE`."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ImportError(MESSAGE, name=fullname)
        return None


def keep_pandas_out() -> bool:
    """From now on this process cannot import pandas (see the module's docstring); returns whether pandas is out
    (False when it was imported already: then it stays)."""
    if "pandas" in sys.modules:
        return False
    if not any(isinstance(f, _PandasKeptOut) for f in sys.meta_path):
        sys.meta_path.insert(0, _PandasKeptOut())
    return True
