"""Where Spark's Python daemon and workers import pyspark from: the installed package, not Spark's zip of it.

Spark starts its Python processes with ``PYTHONPATH`` beginning with ``$SPARK_HOME/python/lib/pyspark.zip`` and
``py4j-*-src.zip``, so they come before ``site-packages`` on ``sys.path``. With pyspark installed from PyPI,
``SPARK_HOME`` is that installed package and the zip holds the same sources, without compiled bytecode; Spark also
sets ``PYTHONDONTWRITEBYTECODE=1``. So every daemon and worker compiled each pyspark module it imported from
source, every start, where the installed package has its ``__pycache__``: CPU time in every worker's start, and
the compiler's memory left behind in the heap of every process (bench/HISTORY.md has the figures)::

    sys.path as Spark sets it            after prefer_installed()
    '' (python -m: the directory)        ''
    .../python/lib/pyspark.zip           the standard library
    .../python/lib/py4j-...-src.zip      site-packages (pyspark and py4j, with their .pyc)
    the standard library                 .../python/lib/pyspark.zip         (still there, last)
    site-packages                        .../python/lib/py4j-...-src.zip

:func:`prefer_installed` moves the two zips to the end of ``sys.path``, and only when the pyspark found without
them is the same release as the zip's (their ``pyspark/version.py`` are equal): a Spark distribution whose zip is
its only pyspark, or an installed pyspark of another release, keeps Spark's order. It must run before anything
imports pyspark: :mod:`.python_daemon` and :mod:`.python_worker` call it first.
"""

from __future__ import annotations

import importlib.machinery
import logging
import os
import re
import sys
import zipfile
from collections.abc import Mapping

__all__ = ["SPARK_ZIPS", "prefer_installed"]

logger = logging.getLogger(__name__)

#: the file names of the zips Spark puts first on a Python worker's path
SPARK_ZIPS = re.compile(r"(^|/)(pyspark\.zip|py4j-[0-9.]+-src\.zip)$")


def prefer_installed(path: list[str] | None = None, modules: Mapping[str, object] | None = None) -> bool:
    """Move Spark's zips of pyspark and py4j (:data:`SPARK_ZIPS`) to the end of ``path`` (``sys.path``) when an
    installed pyspark of the zip's release is on the rest of it and pyspark is not imported yet (``modules``:
    ``sys.modules``); whether it moved them."""
    path = sys.path if path is None else path
    loaded = sys.modules if modules is None else modules
    zips = [p for p in path if SPARK_ZIPS.search(p)]
    if not zips or "pyspark" in loaded:
        return False
    rest = [p for p in path if p not in zips]
    pyspark_zip = next((z for z in zips if z.endswith("pyspark.zip")), None)
    if pyspark_zip is None or not _same_release(pyspark_zip, rest):
        return False
    path[:] = rest + zips
    return True


def _same_release(pyspark_zip: str, path: list[str]) -> bool:
    """Whether ``pyspark_zip`` and the pyspark found on ``path`` have the same ``pyspark/version.py``."""
    spec = importlib.machinery.PathFinder.find_spec("pyspark", path)
    if spec is None or spec.origin is None:
        return False
    try:
        with zipfile.ZipFile(pyspark_zip) as z:
            zipped = z.read("pyspark/version.py")
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), "rb") as f:
            installed = f.read()
    except (OSError, KeyError, zipfile.BadZipFile) as e:
        logger.debug("pyspark's release not compared (%s): Spark's zip stays first", e)
        return False
    return zipped == installed
