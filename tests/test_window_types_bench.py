"""bench/window_types_bench.py still runs and prints a row per window-type cell (smoke test: no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_window_types_bench_prints_every_cell() -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "window_types_bench.py"),
            "--seconds",
            "0.01",
            "--records",
            "3000",
            "--batch",
            "1000",
            "--keys",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    rows = {line[:22].strip(): line[22:].split() for line in run.stdout.splitlines()[1:]}
    assert set(rows) == {
        "sliding td=10 rec",
        "tumbling 1 s",
        "hopping 10 win/rec",
        "hopping 100 win/rec",
        "hopping 1000 win/rec",
        "session gap 5 ms",
        "session gap 10 s",
    }, run.stdout
    for name, cells in rows.items():
        update_rate, _, every_rate, every_out = (float(x.replace(",", "")) for x in cells[:4])
        assert update_rate > 0 and every_rate > 0, name
        if name.startswith("hopping"):  # every mode writes every window of a record
            assert every_out == float(name.split()[1]), (name, every_out)


def test_window_types_bench_compares_the_time_window_batch_path_of_two_trees() -> None:
    """``--against HEAD``: every time-window cell on both trees, a ratio per row, each tree's flatness, and the
    temporary worktree removed."""
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "window_types_bench.py"),
            *("--seconds", "0.01", "--records", "3000", "--batch", "1000", "--keys", "10"),
            *("--against", "HEAD", "--rounds", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    rows = [line.split("|")[1:-1] for line in run.stdout.splitlines() if line.startswith("| ") and "win/rec" in line]
    assert len(rows) == 6, run.stdout  # hopping 10 / 100 / 1,000 x update, close
    for _cell, _mode, this, that, ratio, _noise in rows:
        assert float(this.replace(",", "")) > 0 and float(that.replace(",", "")) > 0 and float(ratio) > 0, rows
    assert "flatness this" in run.stdout and "flatness HEAD" in run.stdout
    listed = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
    assert "window-types-bench-" not in listed  # the worktree is gone
