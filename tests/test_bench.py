"""The window-engine benchmark still runs and prints its table (a smoke test: no timing is asserted).

It also checks what the benchmark asserts while it runs: the batch path took every batch (no fallback to the
record path) on in-order and 10%-out-of-order streams, for count and sum, at 10, 100 and 1,000 records per
window."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_windowstore_bench_prints_every_cell() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "windowstore_bench.py"), "--seconds", "0.01", "--records", "4000",
         "--batch", "1000", "--keys", "4"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    rows = [line.split() for line in run.stdout.splitlines() if line.startswith(("count ", "sum "))]
    assert len(rows) == 12, run.stdout
    cells = {(r[0], r[1], int(r[-6])) for r in rows}  # agg, order ("in-order" / "10%"), records per window
    assert cells == {(a, o, w) for a in ("count", "sum") for o in ("in-order", "10%") for w in (10, 100, 1000)}
    for r in rows:
        record_rate, batch_rate, out_per_rec = (float(x.replace(",", "").rstrip("x")) for x in (r[-5], r[-4], r[-2]))
        assert record_rate > 0 and batch_rate > 0 and out_per_rec >= 1, r
