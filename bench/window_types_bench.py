"""Engine throughput per window type on one core, record path vs batch path, side by side in one run.

    .venv/bin/python bench/window_types_bench.py [--seconds S] [--keys K] [--against REV [--rounds N]]

Cells: sliding (td = 10 records per window, for reference), tumbling, hopping at 10 / 100 / 1,000 windows per
record (size / advance), short sessions (gap 5 ms: a key's records come 10 ms apart, so mostly one record per
session) and long sessions (gap 10 s: one session per key for the whole run), each in update mode (flush every
50,000 records, as a micro-batch), every mode and close mode. 100 keys, one record per key every 10 ms of event
time, 10% displaced by up to 50 ms (inside grace: nothing late), count. rec/s = records per CPU-second of this
process; ``out/rec`` = updates emitted per record.

Batch paths side by side: ``batch upd`` / ``batch close`` feed the same stream in micro-batches of ``--batch``
records to the time-window batch path through the calls the service makes (``process_columns``, then
``flush_columns``: the output as columns) / to ``windowstore.session_windows_batch`` (``x`` = batch / record path,
same mode); the record path's close-mode rate is in ``close rec/s``. The session batch path covers update mode only
(close mode falls back to the record path, so its ``x`` is ~1); sliding windows have their own batch path
(``bench/windowstore_bench.py``), shown here as ``-``. Each cell's outputs are checked equal between the paths
(first 4,000 records, two micro-batches).

With ``--against REV`` only the time-window batch path runs (tumbling, hopping at 10 / 100 / 1,000 windows per
record; update and close mode), on this tree's engine and on the engine of git revision ``REV`` (a temporary
worktree, imported beside this tree's, as ``bench/windowstore_bench.py --against`` does), alternating, best of
``--rounds`` each; then each tree's flatness, rec/s at 10 windows per record / rec/s at 1,000.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from windowstore_bench import load_engine

from windowstore import Count, SlidingWindowProcessor, SlidingWindows, session_windows_batch
from windowstore.session_windows import SessionWindowProcessor, SessionWindows
from windowstore.time_windows import TimeWindowProcessor, TimeWindows

STEP_MS = 10
BASE = 1_764_000_000_000


def make_stream(n: int, keys: int, seed: int = 1) -> list[tuple[str, int, int]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        t = BASE + (i // keys) * STEP_MS
        if rnd.random() < 0.1:
            t -= rnd.randrange(0, 50)
        out.append((f"k{i % keys}", 1, t))
    return out


def cells() -> list[tuple[str, object]]:
    adv = 100
    return [
        ("sliding td=10 rec", lambda emit: SlidingWindowProcessor(SlidingWindows(100, 100), Count(), emit)),
        ("tumbling 1 s", lambda emit: TimeWindowProcessor(TimeWindows(1000, None, 100), Count(), emit)),
        ("hopping 10 win/rec", lambda emit: TimeWindowProcessor(TimeWindows(10 * adv, adv, 100), Count(), emit)),
        ("hopping 100 win/rec", lambda emit: TimeWindowProcessor(TimeWindows(100 * adv, adv, 100), Count(), emit)),
        ("hopping 1000 win/rec", lambda emit: TimeWindowProcessor(TimeWindows(1000 * adv, adv, 100), Count(), emit)),
        ("session gap 5 ms", lambda emit: SessionWindowProcessor(SessionWindows(5, 100), Count(), emit)),
        ("session gap 10 s", lambda emit: SessionWindowProcessor(SessionWindows(10_000, 100), Count(), emit)),
    ]


def run_cell(make: Any, emit: str, stream: list, seconds: float, batch: int, batch_path: Any = None) -> tuple:
    """(records/s, outputs per record, outputs) over whole micro-batches until ``seconds`` of CPU have passed;
    ``batch_path`` = a module's ``process_batch``, or :data:`COLUMNS` (the processor's ``process_columns`` and
    ``flush_columns``, as the service calls them), else the record path, record by record."""
    proc = make(emit)
    done = 0
    outputs: list = []
    flushed: list = []  # flush_columns' columns, turned into rows after the clock stops
    columns = [([k for k, _v, _t in c], [t for _k, _v, t in c], [v for _k, v, _t in c]) for c in _chunks(stream, batch)]
    gc.collect()
    gc.freeze()
    t0 = time.process_time()
    try:
        for keys, ts, values in columns:
            if batch_path is COLUMNS:
                proc.process_columns(keys, ts, None, values)
                flushed.append(proc.flush_columns())
            else:
                if batch_path is not None:
                    outputs += batch_path(proc, keys, ts, values)
                else:
                    process = proc.process
                    for k, v, t in zip(keys, values, ts, strict=True):
                        outputs += process(k, v, t)
                outputs += proc.flush()
            done += len(keys)
            if time.process_time() - t0 >= seconds:
                break
    finally:
        gc.unfreeze()
    cpu = time.process_time() - t0
    for cols in flushed:
        (name,) = cols["values"]
        outputs += zip(
            cols["key"],
            *(cols[c].tolist() for c in ("start", "end")),
            cols["values"][name].tolist(),
            *(cols[c].tolist() for c in ("ts", "count")),
            strict=True,
        )
    return done / cpu, len(outputs) / done, outputs, done


COLUMNS = "process_columns + flush_columns"


def _chunks(stream: list, batch: int) -> list:
    return [stream[i : i + batch] for i in range(0, len(stream), batch)]


def _batch_module(name: str) -> Any:
    if name.startswith(("tumbling", "hopping")):
        return COLUMNS
    if name.startswith("session"):
        return session_windows_batch.process_batch
    return None


def _check_equal(name: str, make: Any, emit: str, stream: list, batch_path: Any) -> None:
    """The batch path's outputs equal the record path's on the stream's first records, in two micro-batches
    (the timed runs may stop after different numbers of batches, so they are not compared)."""
    head = stream[:4000]
    rec = run_cell(make, emit, head, 0.0, 2000)
    bat = run_cell(make, emit, head, 0.0, 2000, batch_path)
    if list(map(tuple, rec[2])) != list(map(tuple, bat[2])):
        raise SystemExit(f"{name} {emit}: the batch path's output differs from the record path's")


def _time_processor(proc_cls: Any, windows: Any, count_cls: Any, emit: str) -> Any:
    return proc_cls(windows, count_cls(), emit)


def compare(a: argparse.Namespace, stream: list) -> None:
    """The time-window batch path of this tree and of ``a.against``, cell by cell, alternating rounds."""
    from revision_tree import revision_tree

    with revision_tree(a.against, "window-types-bench-") as tmp:
        load_engine(tmp, "windowstore_against")
        other = {m: importlib.import_module(f"windowstore_against.{m}") for m in ("time_windows",)}
        trees = {
            "this": (TimeWindowProcessor, TimeWindows, Count, COLUMNS),
            a.against: (
                other["time_windows"].TimeWindowProcessor,
                other["time_windows"].TimeWindows,
                importlib.import_module("windowstore_against").Count,
                COLUMNS,
            ),
        }
        print(
            f"time-window batch path (process_columns + flush_columns), records per CPU-second, best of {a.rounds}"
            " alternating rounds"
        )
        print(f"| cell | mode | this tree | {a.against} | this / {a.against} | noise |")
        print("|---|---|---:|---:|---:|---:|")
        best: dict[tuple[str, str, str], float] = {}
        for name, size, adv in (
            ("tumbling 1 s", 1000, None),
            *((f"hopping {w} win/rec", w * 100, 100) for w in (10, 100, 1000)),
        ):
            for emit in ("update", "close"):
                rates: dict[str, list[float]] = {tree: [] for tree in trees}
                for r in range(a.rounds):
                    for tree in list(trees) if r % 2 == 0 else list(trees)[::-1]:
                        proc_cls, windows_cls, count_cls, batch_path = trees[tree]
                        make = functools.partial(_time_processor, proc_cls, windows_cls(size, adv, 100), count_cls)
                        rates[tree].append(run_cell(make, emit, stream, a.seconds, a.batch, batch_path)[0])
                for tree, rs in rates.items():
                    best[(tree, name, emit)] = max(rs)
                noise = max((max(rs) - min(rs)) / max(rs) for rs in rates.values())
                this, that = best[("this", name, emit)], best[(a.against, name, emit)]
                print(f"| {name} | {emit} | {this:,.0f} | {that:,.0f} | {this / that:.2f} | {noise:.0%} |", flush=True)
        for tree in trees:
            flat = [
                best[(tree, "hopping 10 win/rec", e)] / best[(tree, "hopping 1000 win/rec", e)]
                for e in ("update", "close")
            ]
            print(
                f"flatness {tree}, rec/s at 10 / 1,000 windows per record: update {flat[0]:.2f}x, close {flat[1]:.2f}x"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=2.0, help="CPU seconds per cell (at least one batch)")
    p.add_argument("--keys", type=int, default=100)
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--batch", type=int, default=50_000)
    p.add_argument("--against", metavar="REV", help="a git revision whose time-window batch path runs beside this one")
    p.add_argument("--rounds", type=int, default=2, help="with --against: alternating runs per tree and cell")
    a = p.parse_args(argv)
    stream = make_stream(a.records, a.keys)
    if a.against:
        compare(a, stream)
        return 0
    print(
        f"{'cell':22} {'update rec/s':>13} {'out/rec':>8} {'every rec/s':>12} {'out/rec':>8}"
        f" {'batch upd':>10} {'x':>6} {'close rec/s':>12} {'batch close':>12} {'x':>6}"
    )
    for name, make in cells():
        up = run_cell(make, "update", stream, a.seconds, a.batch)
        ev = run_cell(make, "every", stream, a.seconds, a.batch)
        cl = run_cell(make, "close", stream, a.seconds, a.batch)
        batch_path = _batch_module(name)
        line = f"{name:22} {up[0]:13,.0f} {up[1]:8.2f} {ev[0]:12,.0f} {ev[1]:8.2f}"
        if batch_path is None:
            line += f" {'-':>10} {'-':>6} {cl[0]:12,.0f} {'-':>12} {'-':>6}"
        else:
            bu = run_cell(make, "update", stream, a.seconds, a.batch, batch_path)
            bc = run_cell(make, "close", stream, a.seconds, a.batch, batch_path)
            _check_equal(name, make, "update", stream, batch_path)
            _check_equal(name, make, "close", stream, batch_path)
            line += f" {bu[0]:10,.0f} {bu[0] / up[0]:6.1f} {cl[0]:12,.0f} {bc[0]:12,.0f} {bc[0] / cl[0]:6.1f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
