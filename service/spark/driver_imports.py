"""The Python driver without pandas and pyarrow: ~70 MiB of the driver's resident memory that only a version
check needed.

The driver never touches a pandas frame: the processor's rows are pandas in the Python workers only. But pyspark's
``pandas_udf``, which ``transformWithStateInPandas`` calls to wrap the processor, first runs
``require_minimum_pandas_version`` and ``require_minimum_pyarrow_version``, and those *import* both libraries to
read their ``__version__``: from then on the driver holds them for its whole life (a measured 51 -> 119 MiB RSS in
a fresh interpreter). :func:`versions_from_metadata` replaces the two checks, for the one call, with a look at the
installed distributions' metadata, which imports nothing. The versions themselves are the project's pins
(``pyproject.toml``), which meet pyspark's minimums; a missing distribution still gets pyspark's own check and
its error.

The two checks are pyspark internals (module attributes of ``pyspark.sql.pandas.functions``), so the swap applies
only where the service's other pyspark patches do (:func:`.compat.patches_apply`), and only while the driver has
not imported pandas anyway.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
from collections.abc import Callable, Iterator

from service.spark.compat import patches_apply

__all__ = ["metadata_check", "versions_from_metadata"]

#: pyspark's checks replaced, and the distribution each one reads
_CHECKS = {"require_minimum_pandas_version": "pandas", "require_minimum_pyarrow_version": "pyarrow"}


def metadata_check(distribution: str, pyspark_check: Callable[[], None]) -> Callable[[], None]:
    """A check that passes when ``distribution`` is installed, and runs pyspark's own (its error) when not."""

    def check() -> None:
        try:
            importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pyspark_check()

    return check


@contextlib.contextmanager
def versions_from_metadata() -> Iterator[None]:
    """Within the block, pyspark's pandas and pyarrow version checks read the distributions' metadata instead of
    importing them (see the module's docstring); outside it, pyspark's own checks are back."""
    if "pandas" in sys.modules or not patches_apply():
        yield
        return
    import pyspark.sql.pandas.functions as udf_functions

    saved = {name: getattr(udf_functions, name) for name in _CHECKS}
    for name, distribution in _CHECKS.items():
        setattr(udf_functions, name, metadata_check(distribution, saved[name]))
    try:
        yield
    finally:
        for name, check in saved.items():
            setattr(udf_functions, name, check)
