"""The Python driver without pandas and pyarrow: ~70 MiB of the driver's resident memory that only version
checks needed.

The driver never touches a pandas frame (nor do the workers: the processor's rows are Arrow or Rows). But pyspark
imports both libraries in the driver just to read their ``__version__``, in two places:

* py4j's ``NumpyArrayConverter.can_convert`` (``pyspark.sql.types``), asked about every argument of every JVM
  call from the first one on (the SparkContext's own set-up), imports ``pyspark.testing.utils`` for its
  ``have_numpy`` flag - a module that runs ``require_minimum_pandas_version`` and
  ``require_minimum_pyarrow_version`` at import;
* ``pandas_udf``, which ``transformWithState`` calls to wrap the processor, runs both checks again.

From then on the driver holds both libraries for its whole life (a fresh interpreter: 51 -> 119 MiB RSS).
:func:`versions_from_metadata` replaces the two checks, while its block runs, with a look at the installed
distributions' metadata, which imports nothing; :func:`preload_pyspark_testing` imports ``pyspark.testing.utils``
that way before the first JVM call, and :func:`service.spark.job.windowed_frame` wraps the ``pandas_udf`` call in
it. The versions themselves are the project's pins (``pyproject.toml``), which meet pyspark's minimums; a missing
distribution still gets pyspark's own check and its error.

The checks are pyspark internals (module attributes of ``pyspark.sql.pandas.utils`` and of
``pyspark.sql.pandas.functions``, which imported them by name), so the swap applies only where the service's other
pyspark patches do (:func:`.compat.patches_apply`), and only while the process has not imported pandas anyway.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
from collections.abc import Callable, Iterator

from service.spark.compat import patches_apply

__all__ = ["metadata_check", "preload_pyspark_testing", "versions_from_metadata"]

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
    import pyspark.sql.pandas.utils as pandas_utils

    saved = [(module, name, getattr(module, name)) for module in (pandas_utils, udf_functions) for name in _CHECKS]
    for module, name, check in saved:
        setattr(module, name, metadata_check(_CHECKS[name], check))
    try:
        yield
    finally:
        for module, name, check in saved:
            setattr(module, name, check)


def preload_pyspark_testing() -> None:
    """Import ``pyspark.testing.utils`` with :func:`versions_from_metadata` (before the driver's first JVM call:
    py4j's numpy converter imports it then, see the module docstring)."""
    with versions_from_metadata():
        import pyspark.testing.utils  # noqa: F401
