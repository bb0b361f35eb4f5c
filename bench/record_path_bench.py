"""The record path per emit mode on one core: each record folded into its windows with ``Aggregation.bind`` (one
step per record, fields read once) vs the generic ``accumulate(acc, value, key)`` per window, side by side.

    .venv/bin/python bench/record_path_bench.py [--records 100000] [--keys 1250] [--modes close,update]

The record path is what ``close`` and ``every`` modes always take (the batch path is update mode's), and what
update mode falls back to (partially-late records, aggregations without a batch kernel). The stream is one
service task's: ``--keys`` accounts, one record per ms of event time, 5% of them up to 10 s out of order,
JSON-like dict values, 60 s windows and 10 s grace, so at 1,250 keys every record falls in ~48 windows of its key
once they are full (the service bench's density).
The first 60% of the records fill the windows; the rest are measured (records per CPU-second of this
process; each cell runs generic, bound, bound, generic and shows the best of each). "generic" replaces
``bind`` by the base class's (``acc -> accumulate(acc, value, key)``), i.e. the code before ``bind`` existed;
all four runs must emit identical updates.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from windowstore import SlidingWindowProcessor, SlidingWindows, parse_aggregations
from windowstore.aggregations import Aggregation

AGGREGATIONS = (
    "count",
    "count,sum:amount,max:amount",
    "mean:amount",
    "count,sum:amount,max:amount,min:amount,mean:amount",
)


def make_stream(n: int, keys: int, seed: int = 1) -> list[tuple[str, dict, int]]:
    rnd = random.Random(seed)
    t = 1_795_300_000_000
    out = []
    for i in range(n):
        now = t + i
        ts = now - rnd.randint(1, 10_000) if rnd.random() < 0.05 else now
        out.append((f"acct-{rnd.randrange(keys):05d}", {"amount": rnd.randint(1, 1000)}, ts))
    return out


def run(stream: list, aggs: str, mode: str, generic: bool) -> tuple[float, list]:
    """Records per CPU-second over the measured part, and every update emitted there."""
    p = SlidingWindowProcessor(SlidingWindows(60_000, 10_000), parse_aggregations(aggs), mode, collect_drops=True)
    warm = int(len(stream) * 0.6)
    # generic: no built-in inlines its accumulate, so every bind is the base class's accumulate-per-window step
    with mock.patch.object(Aggregation, "_own_accumulate", lambda self, cls: False) if generic else nullcontext():
        process = p.process
        for r in stream[:warm]:
            process(*r)
        p.flush()
        out: list = []
        c = time.process_time()
        for r in stream[warm:]:
            out.extend(process(*r))
        out.extend(p.flush())
        cpu = time.process_time() - c
    return (len(stream) - warm) / cpu, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1250)
    ap.add_argument(
        "--modes", default="close,update", help="emit modes, comma-separated (every: ~80 updates per record, slow)"
    )
    args = ap.parse_args()
    stream = make_stream(args.records, args.keys)
    header = f"{'mode':<7} {'aggregations':<58} {'generic rec/s':>13} {'bind rec/s':>11} {'ratio':>6} {'out/rec':>8}"
    print(f"{args.records:,} records ({int(args.records * 0.4):,} measured), {args.keys:,} keys, record path\n")
    print(header)
    print("-" * len(header))
    for mode in args.modes.split(","):
        for aggs in AGGREGATIONS:
            rates: dict[bool, list[float]] = {True: [], False: []}
            outs = []
            for generic in (True, False, False, True):  # mirrored: the first run in a cell tends to be faster
                rate, out = run(stream, aggs, mode, generic)
                rates[generic].append(rate)
                outs.append(out)
            assert all(out == outs[0] for out in outs), (mode, aggs)
            generic_rate, bound_rate, bound_out = max(rates[True]), max(rates[False]), outs[1]
            print(
                f"{mode:<7} {aggs:<58} {generic_rate:>13,.0f} {bound_rate:>11,.0f} "
                f"{bound_rate / generic_rate:>5.2f}x {len(bound_out) / (args.records * 0.4):>8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
