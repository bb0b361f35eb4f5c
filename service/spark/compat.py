"""Which pyspark versions the service's patches of pyspark's internals were written for.

:mod:`.python_daemon` replaces functions of ``pyspark.daemon`` and :mod:`.python_worker` wraps
``pyspark.worker.read_udfs`` and rebuilds the ``transformWithState`` input path from the closure of
pyspark's own function. Those are pyspark internals, not API: on a pyspark other than :data:`PATCHED_FOR` the
service logs one ERROR naming both versions and leaves them alone - Spark runs pyspark's own daemon and worker
(slower, same results).
"""

from __future__ import annotations

import importlib.metadata
import logging

__all__ = ["PATCHED_FOR", "installed_pyspark", "patches_apply"]

logger = logging.getLogger(__name__)

#: the pyspark versions (major.minor) the daemon and worker patches were written and tested for
PATCHED_FOR: tuple[str, ...] = ("4.3",)

_reported: set[str] = set()  # versions already logged


def installed_pyspark() -> str:
    """The installed pyspark's version (its distribution's metadata; ``""`` when it is not installed)."""
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return ""


def patches_apply(version: str | None = None) -> bool:
    """Whether the daemon and worker patches apply to pyspark ``version`` (the installed one by default). When
    they do not, logs one ERROR per process and version, naming both versions."""
    version = installed_pyspark() if version is None else version
    if ".".join(version.split(".")[:2]) in PATCHED_FOR:
        return True
    if version not in _reported:
        _reported.add(version)
        logger.error(
            "pyspark %s is installed, but the service's Python daemon and worker patches were written for pyspark "
            "%s: they are not applied, and Spark runs pyspark's own daemon and worker (fast_input has no effect)",
            version or "(none)",
            " / ".join(PATCHED_FOR),
        )
    return False
