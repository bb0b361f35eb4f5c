"""One task's micro-batch without Spark or Kafka, with the windows full: CPU per batch, this tree against a revision.

    .venv/bin/python bench/task_batch_bench.py [--against REV] [--keep-memory] [--rounds N] [--batches N]
        [--window sliding|tumbling|hopping|session] [--profile FILE]

The shape of ``bench/service_bench.py``'s windows-full pass, for one of its four tasks: 2,500 keys, 12,500
JSON records per micro-batch (2,000 records per second of event time, 5% out of order by up to the grace), 60 s
windows, 10 s grace, ``count,sum:amount,max:amount``, Avro changelog. It fills the windows (14 batches, 87.5 s of
event time), then runs ``--batches`` more through ``service.worker.run.process_task_batch`` against in-memory
state (decode, window engine, changelog encoding, log entry or snapshot; no producer) and prints the CPU
milliseconds per batch: all of it, and the window engine's part (``SlidingWindowProcessor.process_columns``).

With ``--against REV`` the same runs are made in a temporary git worktree of that revision, alternating with
this tree's, each in a fresh process, and the table gives both and their ratio (best round of each). With
``--keep-memory`` this tree (and the revision) also runs after ``service.spark.python_daemon.keep_memory()``, the
memory policy Spark's Python workers get from the daemon before they fork (this process is not forked from it:
without the flag it runs with the allocators' defaults). Each row also gives the process's peak resident memory
(``VmHWM``: its imports, the windows, the state's buckets and the batches' working set), the smallest of its
rounds.

``--window tumbling|hopping|session`` runs one task of ``bench/side_by_side.py --window`` instead (issue 31): its
topic has 10,000 keys over 2 partitions and 20,000 records per micro-batch, so one task gets 5,000 keys and 10,000
JSON records ``{"amount": a, "sent": ms}`` per batch at 5,000 records per second of event time (10 records per key
per 10 s), in order; windows of 10 s (hopping: advance 1 s), sessions of gap 2 s, grace 2 s,
``count,sum:amount,max:sent``, JSON changelog keys and values. The engine's part is the processor's
``process_columns`` and ``flush_columns``. ``--profile FILE`` writes a cProfile of this tree's measured batches
(first round) to ``FILE``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
AGGS = "count,sum:amount,max:amount"
KEYS, PER_BATCH, RECORDS_PER_MS = 2_500, 12_500, 2
#: one task of bench/side_by_side.py --window: 5,000 keys, 10,000 records per batch, 5 records per ms
SBS_AGGS, SBS_KEYS, SBS_PER_BATCH, SBS_RECORDS_PER_MS = "count,sum:amount,max:sent", 5_000, 10_000, 5


def measure(fill: int, batches: int, window: str = "sliding", profile: str = "") -> dict[str, float]:
    """Runs in the tree on ``sys.path[0]``: CPU ms per batch (all, engine) and changelog rows per batch."""
    from connectors.output import ChangelogSpec
    from connectors.serde import InputSpec, aggregation_fields

    try:
        from service.task.config import TaskConfig
        from service.task.runner import TaskRunner
        from service.task.state import DictTaskState
        from service.worker.run import process_task_batch
        from windowstore import WindowDefinition
    except ImportError:  # a tree from before the split of service/ (issue 30), for --against
        from service.processing import DictTaskState, TaskConfig, TaskRunner, process_task_batch  # type: ignore
    try:
        from service.task.runner import TaskBatch
    except ImportError:  # a tree from before TaskBatch (issue 30), for --against: the batch's columns one by one
        TaskBatch = None  # type: ignore[assignment,misc]
    from windowstore import SessionWindowProcessor, SlidingWindowProcessor, TimeWindowProcessor

    if window == "sliding":
        cfg = TaskConfig(
            WindowDefinition("sliding", 60_000, grace_ms=10_000),
            AGGS,
            "update",
            InputSpec(fields=aggregation_fields(AGGS)),
            ChangelogSpec("avro", "avro", AGGS, 1, 2),
            "out",
            "late",
            "dlq",
        )
        engine_class: Any = SlidingWindowProcessor
    else:
        definition = {
            "tumbling": WindowDefinition("tumbling", 10_000, grace_ms=2_000),
            "hopping": WindowDefinition("hopping", 10_000, 1_000, grace_ms=2_000),
            "session": WindowDefinition("session", gap_ms=2_000, grace_ms=2_000),
        }[window]
        cfg = TaskConfig(
            definition,
            SBS_AGGS,
            "update",
            InputSpec(fields=aggregation_fields(SBS_AGGS)),
            ChangelogSpec("json", "json", SBS_AGGS, 1, 2, window=window),
            "out",
            "late",
            "dlq",
        )
        engine_class = SessionWindowProcessor if window == "session" else TimeWindowProcessor
    runner, state, rnd = TaskRunner(cfg), DictTaskState(), random.Random(1)
    pos = [0]

    def batch() -> tuple[list[bytes], list[bytes], list[int]]:
        keys, values, stamps = [], [], []
        if window != "sliding":
            for i in range(pos[0], pos[0] + SBS_PER_BATCH):
                t = 1_790_000_000_000 + i // SBS_RECORDS_PER_MS
                keys.append(b"acct-%05d" % (rnd.randrange(SBS_KEYS) * 2))
                values.append(b'{"amount": %d, "sent": %d}' % (rnd.randint(1, 1000), t + 5))
                stamps.append(t)
            pos[0] += SBS_PER_BATCH
            return keys, values, stamps
        for i in range(pos[0], pos[0] + PER_BATCH):
            t = 1_790_000_000_000 + i // RECORDS_PER_MS
            if rnd.random() < 0.05:
                t -= rnd.randint(1, 10_000)
            keys.append(b"acct-%05d" % (rnd.randrange(KEYS) * 4))
            values.append(b'{"amount": %d}' % rnd.randint(1, 1000))
            stamps.append(t)
        pos[0] += PER_BATCH
        return keys, values, stamps

    offset = [0]

    def run(b: tuple[list[bytes], list[bytes], list[int]]) -> int:
        keys, values, stamps = b
        offsets = list(range(offset[0], offset[0] + len(keys)))
        if TaskBatch is None:
            out = process_task_batch(runner, state, "in", 0, offsets, keys, values, stamps, emit_time_ms=5)
        else:
            out = process_task_batch(runner, state, TaskBatch("in", 0, offsets, keys, values, stamps, emit_time_ms=5))
        offset[0] += len(keys)
        return len(out.changelog_keys)

    for _ in range(fill):
        run(batch())
    todo = [batch() for _ in range(batches)]
    engine = [0.0]

    def timed(inner):  # type: ignore[no-untyped-def]
        def call(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            t0 = time.process_time()
            try:
                return inner(self, *args, **kwargs)
            finally:
                engine[0] += time.process_time() - t0

        return call

    engine_class.process_columns = timed(engine_class.process_columns)
    if window != "sliding":  # the time and session processors' flush is where their windows become rows
        engine_class.flush_columns = timed(engine_class.flush_columns)
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.process_time()
    rows = sum(run(b) for b in todo)
    total = time.process_time() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux: the process's VmHWM
    return {
        "ms": total / batches * 1e3,
        "engine_ms": engine[0] / batches * 1e3,
        "rows": rows / batches,
        "peak_mib": hwm / 1024,
    }


def run_in(
    tree: Path, fill: int, batches: int, keep_memory: bool = False, window: str = "sliding", profile: str = ""
) -> dict[str, float]:
    code = (
        f"import sys, json; sys.path.insert(0, {str(tree)!r}); sys.path.insert(1, {str(ROOT / 'bench')!r}); "
        + ("from service.spark.python_daemon import keep_memory; keep_memory(); " if keep_memory else "")
        + f"import task_batch_bench as b; print(json.dumps(b.measure({fill}, {batches}, {window!r}, {profile!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", metavar="REV", help="a git revision to compare with, side by side")
    ap.add_argument("--rounds", type=int, default=3, help="fresh processes per tree (alternating)")
    ap.add_argument("--batches", type=int, default=16, help="measured batches per round")
    ap.add_argument(
        "--fill", type=int, default=None, help="batches before measuring (default 14 for sliding, 3 otherwise)"
    )
    ap.add_argument(
        "--keep-memory",
        action="store_true",
        help="also run this tree with the Python workers' memory policy (service.spark.python_daemon)",
    )
    ap.add_argument(
        "--window",
        choices=("sliding", "tumbling", "hopping", "session"),
        default="sliding",
        help="the window type; other than sliding: one task of bench/side_by_side.py --window",
    )
    ap.add_argument("--profile", default="", help="write a cProfile of this tree's first round here")
    args = ap.parse_args()
    if args.fill is None:
        args.fill = 14 if args.window == "sliding" else 3
    trees: dict[str, tuple[Path, bool]] = {"this tree": (ROOT, False)}
    if args.keep_memory:
        trees["this tree + keep_memory"] = (ROOT, True)
    with contextlib.ExitStack() as stack:
        if args.against:
            from revision_tree import revision_tree

            rev = stack.enter_context(revision_tree(args.against, "task-batch-bench-"))
            trees[args.against] = (rev, False)
            if args.keep_memory:
                trees[f"{args.against} + keep_memory"] = (rev, True)
        best: dict[str, dict[str, float]] = {}
        for r in range(args.rounds):
            for name, (tree, keep) in trees.items():
                prof = args.profile if r == 0 and tree == ROOT and not keep else ""
                got = run_in(tree, args.fill, args.batches, keep, args.window, prof)
                print(
                    f"round {r + 1} {name}: {got['ms']:.1f} ms per batch, engine {got['engine_ms']:.1f} ms, "
                    f"{got['rows']:.0f} changelog rows",
                    flush=True,
                )
                peak = min(got["peak_mib"], best[name]["peak_mib"]) if name in best else got["peak_mib"]
                if name not in best or got["ms"] < best[name]["ms"]:
                    best[name] = got
                best[name]["peak_mib"] = peak
    shape = (
        f"{KEYS} keys, {PER_BATCH} records per batch, windows full"
        if args.window == "sliding"
        else f"{args.window}: {SBS_KEYS} keys, {SBS_PER_BATCH} records per batch (one task of side_by_side.py)"
    )
    print(f"\n{shape}; CPU per batch, best of {args.rounds}\n")
    print("| tree | ms per batch | window engine ms | changelog rows per batch | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    for name, got in best.items():
        print(f"| {name} | {got['ms']:.1f} | {got['engine_ms']:.1f} | {got['rows']:.0f} | {got['peak_mib']:.0f} |")
    pairs = [(n, "this tree") for n in best if n.startswith("this tree +")]
    pairs += [("this tree", args.against)] if args.against else []
    pairs += [("this tree + keep_memory", f"{args.against} + keep_memory")] if args.against and args.keep_memory else []
    for a_name, b_name in pairs:
        a, b = best[a_name], best[b_name]
        print(
            f"\n{a_name} / {b_name}: {a['ms'] / b['ms']:.2f} of the CPU per batch, "
            f"window engine {a['engine_ms'] / b['engine_ms']:.2f}, peak RSS {a['peak_mib'] / b['peak_mib']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
