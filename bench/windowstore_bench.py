"""Window-engine throughput on one core: record path vs batch path, side by side in one run.

    .venv/bin/python bench/windowstore_bench.py [--seconds S] [--keys K] [--against REV [--rounds N]]

For 10, 100 and 1,000 records per window, in-order and 10%-out-of-order input (inside grace, so nothing is
late), count and sum, it feeds micro-batches of ``--batch`` records to one processor in update mode and flushes
after each batch (what the service does), and prints records per CPU-second of this single-threaded process
("on one core": robust when other processes share the machine) and the batch/record ratio. Each cell runs
until ``--seconds`` of CPU have been spent (at least one batch), so slow cells process fewer records. The
generated input is frozen out of the garbage collector's view (``gc.freeze``) while a cell runs: it is the
harness's list, and traversing it on every full collection would charge the engine for it.
The record path is fed tuples and flushes WindowUpdate objects; the batch path is fed numpy columns and
flushes columns (what the service hands it and takes from it).
With ``--against REV`` the engine of that git revision (checked out in a temporary worktree, imported beside
this tree's under another package name) runs every cell too, alternating with this tree's, ``--rounds`` times;
the table gives the best round of each tree, their ratio (this / REV) and the run-to-run noise (the largest
spread between the rounds of one tree and cell, (best - worst) / best).
In update mode a batch flushes every window it wrote, and a record lies in more windows as the overlap grows:
``out/rec`` is that output per input record, and ``batch out/s`` the batch path's window updates per
CPU-second, which shows whether the cost per emitted window stays flat from 10 to 1,000 records per window.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import random
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import windowstore
from windowstore import Count, Sum

ROOT = Path(__file__).resolve().parents[1]

STEP_MS = 10  # per key, one record every 10 ms on average


def make_stream(n: int, keys: int, per_window: int, disorder: float, seed: int = 1):
    rnd = random.Random(seed)
    td = per_window * STEP_MS
    out = []
    for i in range(n):
        # keys round-robin, so each key sees one record every STEP_MS of event time
        t = (i // keys) * STEP_MS + rnd.randint(0, STEP_MS - 1)
        if disorder and rnd.random() < disorder:
            t = max(0, t - rnd.randint(1, td // 2 + 1))
        out.append((f"k{i % keys}", rnd.randint(1, 1000), t))
    return td, out


def run(
    path: str, agg, td: int, grace: int, records, batch: int, seconds: float, engine: ModuleType = windowstore
) -> tuple[float, int, int]:
    proc = engine.SlidingWindowProcessor(
        engine.SlidingWindows(td, grace), getattr(engine, agg.__name__)(), "update", batch=(path == "batch")
    )
    done = emitted = 0
    taken = 0
    if path == "batch":  # the service hands the batch path columns (from Arrow), not tuples
        keys = [r[0] for r in records]
        values = np.fromiter((r[1] for r in records), np.int64, len(records))
        stamps = np.fromiter((r[2] for r in records), np.int64, len(records))
    start = time.process_time()
    for b in range(0, len(records), batch):
        chunk = records[b : b + batch]
        if path == "batch":
            taken += proc.process_columns(keys[b : b + batch], stamps[b : b + batch], {None: values[b : b + batch]})
        else:
            process = proc.process
            for k, v, t in chunk:
                process(k, v, t)
        emitted += len(proc.flush_columns()["start"]) if path == "batch" else len(proc.flush())
        done += len(chunk)
        if time.process_time() - start > seconds:
            break
    elapsed = time.process_time() - start
    assert path != "batch" or taken == (done + batch - 1) // batch, "batch path fell back"
    return done / elapsed, done, emitted


def load_engine(tree: Path, name: str) -> ModuleType:
    """The ``windowstore`` package of another tree, imported as package ``name`` (its relative imports follow)."""
    spec = importlib.util.spec_from_file_location(
        name, tree / "windowstore" / "__init__.py", submodule_search_locations=[str(tree / "windowstore")]
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="CPU-time budget per cell")
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--batch", type=int, default=50_000, help="records per micro-batch")
    ap.add_argument("--records", type=int, default=1_000_000, help="records generated per stream")
    ap.add_argument("--against", metavar="REV", help="a git revision whose engine runs every cell too, side by side")
    ap.add_argument("--rounds", type=int, default=2, help="with --against: alternating runs per tree and cell")
    ap.add_argument("--paths", default="record,batch", help="with --against: the paths to run (record, batch)")
    args = ap.parse_args()
    if args.against:
        compare(args)
        return
    print(f"python {sys.version.split()[0]}, {args.keys} keys, micro-batch {args.batch} records, update mode\n")
    header = (
        f"{'agg':5} {'order':12} {'rec/window':>10} {'record path rec/s':>18} {'batch path rec/s':>17} {'ratio':>7}"
        f" {'out/rec':>8} {'batch out/s':>12}"
    )
    print("rec/s = records per CPU-second of this process (one core)")
    print("out/rec = window updates flushed per input record (update mode: every window a batch wrote, once)")
    print("batch out/s = those updates per CPU-second on the batch path (records/s x out/rec)")
    print(header)
    print("-" * len(header))
    for agg in (Count, Sum):
        for disorder in (0.0, 0.1):
            for per_window in (10, 100, 1000):
                td, recs = make_stream(args.records, args.keys, per_window, disorder)
                # the input list is the harness's, not the engine's: keep the collector from traversing its
                # ~1M tuples on every full collection (a consumer of the engine never holds such a list)
                gc.collect()
                gc.freeze()
                grace = td  # disorder is at most td/2: nothing is late or partially late
                rec_rate, _, _ = run("record", agg, td, grace, recs, args.batch, args.seconds)
                bat_rate, bat_done, bat_out = run("batch", agg, td, grace, recs, args.batch, args.seconds)
                del recs
                gc.unfreeze()
                order = "in-order" if not disorder else "10% ooo"
                print(
                    f"{agg.name:5} {order:12} {per_window:>10} {rec_rate:>18,.0f} {bat_rate:>17,.0f} "
                    f"{bat_rate / rec_rate:>6.1f}x {bat_out / bat_done:>8.2f} {bat_rate * bat_out / bat_done:>12,.0f}",
                    flush=True,
                )


def compare(args: argparse.Namespace) -> None:
    """Every cell on this tree's engine and on ``--against``'s, alternating, best of ``--rounds`` each."""
    from revision_tree import revision_tree

    with revision_tree(args.against, "windowstore-bench-") as tmp:
        engines = {"this": windowstore, "against": load_engine(tmp, "windowstore_against")}
        print(
            f"python {sys.version.split()[0]}, {args.keys} keys, micro-batch {args.batch} records, update mode; "
            f"records per CPU-second, best of {args.rounds} alternating rounds; this tree vs {args.against}\n"
        )
        print(
            "| agg | order | rec/window | path | this tree rec/s | "
            f"{args.against} rec/s | this / {args.against} | noise |"
        )
        print("|---|---|---:|---|---:|---:|---:|---:|")
        for agg in (Count, Sum):
            for disorder in (0.0, 0.1):
                for per_window in (10, 100, 1000):
                    td, recs = make_stream(args.records, args.keys, per_window, disorder)
                    gc.collect()
                    gc.freeze()
                    for path in args.paths.split(","):
                        rates: dict[str, list[float]] = {name: [] for name in engines}
                        for r in range(args.rounds):
                            order_ = list(engines) if r % 2 == 0 else list(engines)[::-1]
                            for name in order_:
                                rates[name].append(
                                    run(path, agg, td, td, recs, args.batch, args.seconds, engines[name])[0]
                                )
                        best = {name: max(v) for name, v in rates.items()}
                        noise = max((max(v) - min(v)) / max(v) for v in rates.values())
                        order = "in-order" if not disorder else "10% ooo"
                        print(
                            f"| {agg.name} | {order} | {per_window} | {path} | {best['this']:,.0f} | "
                            f"{best['against']:,.0f} | {best['this'] / best['against']:.2f} | {noise:.0%} |",
                            flush=True,
                        )
                    del recs
                    gc.unfreeze()


if __name__ == "__main__":
    main()
