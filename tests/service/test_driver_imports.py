"""service.spark.driver_imports: pyspark's pandas / pyarrow version checks without importing either."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service.spark import driver_imports

PROJECT = Path(__file__).resolve().parents[2]

_PROBE = """
import sys
import pyspark.sql.pandas.functions as f
from service.spark.driver_imports import versions_from_metadata
own = f.require_minimum_pandas_version, f.require_minimum_pyarrow_version
with versions_from_metadata():
    f.require_minimum_pandas_version()
    f.require_minimum_pyarrow_version()
    print("inside", "pandas" in sys.modules, "pyarrow" in sys.modules)
print("restored", (f.require_minimum_pandas_version, f.require_minimum_pyarrow_version) == own)
f.require_minimum_pandas_version()
print("after", "pandas" in sys.modules)
"""


def test_the_checks_pass_without_importing_pandas_or_pyarrow_and_are_restored() -> None:
    """In a fresh interpreter (this one has pandas already): inside the block both checks pass and neither library
    is imported; after it pyspark's own checks are back (and import pandas, as they always did)."""
    run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=PROJECT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:3] == ["inside False False", "restored True", "after True"], run.stdout


_PRELOAD = """
import sys
import pyspark.sql.pandas.utils as u
own = u.require_minimum_pandas_version
from service.spark.driver_imports import preload_pyspark_testing
preload_pyspark_testing()
import pyspark.testing.utils as t
print(t.have_pandas, t.have_pyarrow, t.have_numpy, "pandas" in sys.modules, u.require_minimum_pandas_version is own)
"""


def test_pyspark_testing_preloaded_without_pandas() -> None:
    """What py4j's numpy converter imports on the driver's first JVM call, loaded without pandas and pyarrow; it
    still finds both installed."""
    run = subprocess.run([sys.executable, "-c", _PRELOAD], capture_output=True, text=True, cwd=PROJECT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True", "True", "False", "True"], run.stdout


def test_a_missing_distribution_gets_pysparks_own_check() -> None:
    calls: list[str] = []
    check = driver_imports.metadata_check("no-such-distribution-here", lambda: calls.append("pyspark"))
    check()
    assert calls == ["pyspark"]
    present = driver_imports.metadata_check("pyspark", lambda: pytest.fail("pyspark is installed"))
    present()
