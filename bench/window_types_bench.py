"""Engine throughput per window type on one core (record path), side by side in one run.

    .venv/bin/python bench/window_types_bench.py [--seconds S] [--keys K]

Cells: sliding (td = 10 records per window, for reference), tumbling, hopping at 10 / 100 / 1,000 windows per
record (size / advance), short sessions (gap 5 ms: a key's records come 10 ms apart, so mostly one record per
session) and long sessions (gap 10 s: one session per key for the whole run), each in update mode (flush every 50,000 records, as a micro-batch) and
every mode. 100 keys, one record per key every 10 ms of event time, 10% displaced by up to 50 ms (inside grace:
nothing late), count. rec/s = records per CPU-second of this process; ``out/rec`` = updates emitted per record.
The batch paths per type (frames for hopping, one-pass session merging) do not exist yet: this prints the record
paths only.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from windowstore import Count, SlidingWindowProcessor, SlidingWindows
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


def run_cell(make: Any, emit: str, stream: list, seconds: float, batch: int) -> tuple[float, float]:
    proc = make(emit)
    done = out = 0
    gc.collect()
    gc.freeze()
    t0 = time.process_time()
    try:
        while True:
            chunk = stream[done : done + batch]
            if not chunk:
                break
            process = proc.process
            for k, v, t in chunk:
                out += len(process(k, v, t))
            out += len(proc.flush())
            done += len(chunk)
            if time.process_time() - t0 >= seconds:
                break
    finally:
        gc.unfreeze()
    cpu = time.process_time() - t0
    return done / cpu, out / done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=2.0, help="CPU seconds per cell (at least one batch)")
    p.add_argument("--keys", type=int, default=100)
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--batch", type=int, default=50_000)
    a = p.parse_args(argv)
    stream = make_stream(a.records, a.keys)
    print(f"{'cell':22} {'update rec/s':>13} {'out/rec':>8} {'every rec/s':>12} {'out/rec':>8}")
    for name, make in cells():
        up, up_out = run_cell(make, "update", stream, a.seconds, a.batch)
        ev, ev_out = run_cell(make, "every", stream, a.seconds, a.batch)
        print(f"{name:22} {up:13,.0f} {up_out:8.2f} {ev:12,.0f} {ev_out:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
