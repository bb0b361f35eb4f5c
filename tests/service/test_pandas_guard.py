"""service/spark/pandas_guard.py: a worker that keeps pandas out cannot import it, says why, and pyarrow works
without it (checked in a fresh interpreter: this one may have pandas loaded)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pyarrow")

_SCRIPT = """
import sys
from service.spark.pandas_guard import MESSAGE, keep_pandas_out
assert keep_pandas_out() is True
assert keep_pandas_out() is True and sum(type(f).__name__ == "_PandasKeptOut" for f in sys.meta_path) == 1
import numpy as np, pyarrow as pa, pyarrow.compute as pc
a = pa.array([3, 1, None], pa.int64())
assert a.to_pylist() == [3, 1, None] and pa.scalar(2).as_py() == 2
assert pc.fill_null(a, 0).to_numpy().tolist() == [3, 1, 0]
assert pa.RecordBatch.from_pylist([{"k": b"x"}]).column(0).to_pylist() == [b"x"]
assert "pandas" not in sys.modules
try:
    import pandas
except ImportError as e:
    assert str(e) == MESSAGE, e
else:
    raise AssertionError("pandas imported")
print("ok")
"""


def test_pandas_is_kept_out_and_pyarrow_works_without_it():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_pandas_loaded_already_stays():
    script = "import pandas, sys\nfrom service.spark.pandas_guard import keep_pandas_out\nprint(keep_pandas_out())"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
