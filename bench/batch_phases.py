"""Where a small micro-batch's wall time goes at a steady live rate: two configurations of the service side by side.

    .venv/bin/python bench/batch_phases.py [--rates 1000,10000] [--warm 12] [--seconds 20]
        [--config 'before='] [--config 'after=spark.sql.streaming.x=y;trigger_interval=0'] [--ooo 0.05] [--rounds 1]

One local Kafka broker (``devtools.local_broker``). For each rate and configuration, the service runs as
bench/side_by_side.py runs it (its ``_spark`` child: emit update, JSON, ``--partitions`` input and state partitions,
``local[--cores]``, trigger 0, max ``--batch`` records per micro-batch), each in its own process (a fresh JVM, so a
configuration may change any Spark setting) on its own input topic:

1. ``--prime`` records as a backlog (side_by_side's generator; consumed first, so the query's first micro-batch -
   plan compilation, Python workers - is over before the measurement);
2. live at the rate for ``--warm`` s (the windows fill: ``--td``) and ``--seconds`` s more, records as side_by_side's
   live phase (``{"amount", "sent"}``, event time = wall clock, ``--ooo`` of them moved back, 10 records per key and
   window: ``rate * td / 10`` keys);
3. the figures are taken over the micro-batches that started in the last ``--seconds`` and the window updates of
   the records sent then.

A configuration is ``NAME=SETTINGS``, SETTINGS ``;``-separated ``name=value`` pairs: a name starting with ``spark.``
is a Spark setting (added to ``spark_conf``), any other a service setting; ``poll=1`` makes the child read its
progress by polling ``recentProgress`` as side_by_side did before 2026-11-27; ``tree=REV`` runs the service of git
revision ``REV`` (a temporary worktree): a code change before and after in one run. Two configurations (the default: the
current code twice, which shows the run's noise) are compared in one run: the ratio column is the second over the
first. With ``--rounds 2`` every pair runs twice in mirrored order (A B B A) and the figures pool both rounds.

Rows (p50 over the measured micro-batches unless marked; ms):

* Spark's progress ``durationMs``: ``latestOffset`` (the Kafka source's end offsets), ``queryPlanning``,
  ``walCommit`` (offsets log), ``addBatch`` (the job: Kafka read, shuffle, the stateful stage, state store commit),
  ``commitOffsets`` (commits log), ``triggerExecution`` (the micro-batch, p50 and p99);
* the trigger's idle wait: from a micro-batch's end to the next one's start;
* inside ``addBatch``: the two stages' wall time from Spark's event log (Kafka read + shuffle write; the stateful
  stage), the state store commit (``commitTimeMs`` of the stateful operator, summed over its partitions), and the
  workers' own timers (:mod:`service.task.stats`), per task (the batch's sum over its tasks / tasks): decode +
  process + encode, state read, state write, produce (handing rows to Kafka and waiting for their
  acknowledgements);
* end-to-end latency from send (output append time - ``max(sent)`` of the window, as side_by_side), p50 and p99.

Prints a Markdown table; ``--out`` appends it with the command.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import service_bench as sb  # noqa: E402  (LiveProducer)
import side_by_side as sbs  # noqa: E402  (Proc, command, produce_backlog, read_output, with_overrides)
from batch_overhead import stage_times  # noqa: E402
from revision_tree import revision_tree  # noqa: E402

from service.spark.job import OBSERVATION, observed_values  # noqa: E402
from service.task.stats import TASK_BATCHES  # noqa: E402

#: Spark's progress durations shown, in the order a micro-batch runs them
DURATIONS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
#: records per key and window of the live phase (side_by_side's 10-per-window cells)
DENSITY = 10


def parse_config(text: str) -> tuple[str, str]:
    """``NAME=SETTINGS`` -> (name, settings); the settings are checked (:func:`side_by_side.with_overrides`) here,
    before any process starts."""
    from service.settings import Settings

    name, sep, settings = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"expected NAME=SETTINGS, got {text!r}")
    sbs.with_overrides(Settings(), _bench_options(settings)[0])
    return name.strip(), settings


def _bench_options(settings: str) -> tuple[str, bool, str]:
    """``settings`` without the bench's own pairs, whether it asked for polling (``poll=1``), and the git
    revision whose code the service runs (``tree=REV``; "" = this tree)."""
    parts = [p.strip() for p in settings.split(";") if p.strip()]
    own = {k: v for k, _, v in (p.partition("=") for p in parts) if k in ("poll", "tree")}
    rest = ";".join(p for p in parts if p.partition("=")[0] not in own)
    return rest, own.get("poll", "0") not in ("0", "false"), own.get("tree", "")


def tree_scripts(stack: contextlib.ExitStack) -> Callable[[str], Path]:
    """bench/side_by_side.py of a git revision, its worktree made on first use and removed with ``stack``: its
    ``_spark`` child imports the service of that revision (its ROOT is its own tree) - before and after a change
    in one run."""
    trees: dict[str, Path] = {}

    def script(rev: str) -> Path:
        if rev not in trees:
            trees[rev] = stack.enter_context(revision_tree(rev, "batch-phases-"))
        return trees[rev] / "bench" / "side_by_side.py"

    return script


def epoch_ms(timestamp: str) -> int:
    """A progress report's ``timestamp`` (ISO 8601, UTC) in epoch ms."""
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


def measured_batches(reports: list[dict], since: int, until: int) -> tuple[list[dict], list[float]]:
    """The micro-batches (progress reports that ran one: ``addBatch`` in ``durationMs``) that started in
    ``[since, until)`` epoch ms, and the trigger's idle wait after each of them: the next micro-batch's start -
    this one's start - its ``triggerExecution``."""
    executed = sorted((p for p in reports if "addBatch" in p.get("durationMs", {})), key=lambda p: p["batchId"])
    measured = [p for p in executed if since <= epoch_ms(p["timestamp"]) < until]
    gaps = [
        float(epoch_ms(b["timestamp"]) - epoch_ms(a["timestamp"]) - a["durationMs"]["triggerExecution"])
        for a, b in itertools.pairwise(executed)
        if b["batchId"] == a["batchId"] + 1 and since <= epoch_ms(a["timestamp"]) < until
    ]
    return measured, gaps


def run_one(
    args, bootstrap: str, work: Path, name: str, settings: str, rate: float, n: int, script: Callable[[str], Path]
) -> dict:
    """One configuration at one rate in its own process; the raw figures of its measured micro-batches."""
    from connectors.admin import TopicSpec, ensure_topics

    slug = "".join(c for c in name if c.isalnum()) or "cfg"
    run = f"ph-{slug}-{int(rate)}-{n}-{int(time.time())}"
    topic, out_topic = f"{run}-in", f"{run}-out"
    admin = {"bootstrap.servers": bootstrap}
    ensure_topics(admin, [TopicSpec(topic, args.partitions, config={"retention.ms": "-1"})])
    ensure_topics(admin, [TopicSpec(out_topic, args.partitions, config={"message.timestamp.type": "LogAppendTime"})])
    keys = max(1, int(rate * (args.td / 1000) / DENSITY))
    sbs.produce_backlog(bootstrap, [topic], args.prime, keys, DENSITY * keys / (args.td / 1000), args.grace, args.ooo)
    settings, poll, rev = _bench_options(settings)
    events = work / f"events-{run}"
    if not args.no_stages:
        events.mkdir()
        settings = f"{settings};spark.eventLog.enabled=true;spark.eventLog.dir={events};spark.eventLog.compress=false"
    progress_file = work / f"{run}.progress"
    args.service_settings = settings
    cmd = sbs.command("service", args, bootstrap, topic, out_topic, work)
    if rev:
        cmd[1] = str(script(rev))  # the _spark child of that revision (tree_scripts)
    cmd += ["--progress-out", str(progress_file)] + (["--poll"] if poll else [])
    load0 = os.getloadavg()[0]
    proc = sbs.Proc(cmd, work / "logs" / f"{run}.log")
    try:
        proc.wait_consumed(args.prime, args.timeout)
        live = sb.LiveProducer(
            bootstrap,
            topic,
            rate,
            keys,
            args.grace,
            args.ooo,
            args.warm + args.seconds,
            key_prefix="live-",
            linger_ms=1,
        )
        live.start()
        live.join()
        proc.wait_consumed(args.prime + live.sent, 120)
        time.sleep(args.settle)
    finally:
        proc.stop()
    since = live.start_ms + int(args.warm * 1000)
    until = live.start_ms + int((args.warm + args.seconds) * 1000)
    reports = [json.loads(line) for line in progress_file.read_text().splitlines()]
    measured, gaps = measured_batches(reports, since, until)
    latencies = [t - s for t, s in sbs.read_output(bootstrap, out_topic, "service") if since <= s < until]
    r = {
        "batches": measured,
        "gaps": gaps,
        "latencies": latencies,
        "stages": stage_times(events, skip_jobs=0, since_ms=since) if events.is_dir() else {},
        "stage_metrics": stage_metrics(events, since) if events.is_dir() else {},
        "load": (load0 + os.getloadavg()[0]) / 2,
    }
    print(
        f"[{rate:.0f}/s {name} #{n}] {len(measured)} micro-batches, {len(latencies)} window updates, "
        f"{sum(p['numInputRows'] for p in measured)} records measured; load {r['load']:.1f}; slowest:",
        flush=True,
    )
    for p in sorted(measured, key=lambda p: -p["durationMs"]["triggerExecution"])[:3]:
        print("   ", slow_batch_line(p), flush=True)
    return r


def _observed(p: dict) -> dict:
    """The service's counters of a micro-batch from its progress JSON ({} when it has none)."""
    o = (p.get("observedMetrics") or {}).get(OBSERVATION)
    if o and TASK_BATCHES in o:  # a tree=REV from before 2026-11-27 observed each counter as a column
        return o
    return observed_values(o) if o else {}


def slow_batch_line(p: dict) -> str:
    """One micro-batch in a line: its durations, the workers' timers summed over its tasks, snapshots written
    (the service's, :mod:`service.task.state`; RocksDB's flush and checkpoint when it made one)."""
    d = p["durationMs"]
    o = _observed(p)
    rocks: dict[str, float] = {}
    for op in p.get("stateOperators", []):
        for k, v in (op.get("customMetrics") or {}).items():
            if k in ("rocksdbCommitFlushLatency", "rocksdbCommitCheckpointLatency", "rocksdbCommitFileSyncLatencyMs"):
                rocks[k] = rocks.get(k, 0) + v
    return (
        f"batch {p['batchId']}: {p['numInputRows']} rows "
        + " ".join(f"{k}={d.get(k, 0)}" for k in (*DURATIONS, "triggerExecution"))
        + " | tasks "
        + " ".join(
            f"{k[:-3]}={o.get(k, 0) / 1e6:.0f}" for k in ("process_ns", "state_read_ns", "state_write_ns", "produce_ns")
        )
        + f" snapshots={o.get('state_snapshot', 0)} | "
        + " ".join(f"{k}={v:.0f}" for k, v in rocks.items())
    )


def stage_metrics(event_dir: Path, since_ms: int) -> dict[str, dict[str, list[float]]]:
    """Per stage kind ("source": no parent stage, "stateful": the rest; as :func:`batch_overhead.stage_times`),
    over the stages submitted at or after ``since_ms``: each stage's value of Spark's SQL metrics whose name says
    a time (the state store's commit and update times, the RocksDB commit's parts, the Python runner's; raw, as
    Spark reports them: most in ms, some in ns) and of its tasks' slowest run, deserialization and GC time (ms)."""
    out: dict[str, dict[str, list[float]]] = {"source": {}, "stateful": {}}
    tasks: dict[int, list[dict]] = {}
    done = []
    for path in sorted(event_dir.rglob("*")):
        if not path.is_file() or path.name.endswith(".crc"):
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:  # not an event (a log being written, Hadoop's side files)
                continue
            if e["Event"] == "SparkListenerTaskEnd":
                tasks.setdefault(e["Stage ID"], []).append(e.get("Task Metrics") or {})
            elif e["Event"] == "SparkListenerStageCompleted" and e["Stage Info"]["Submission Time"] >= since_ms:
                done.append(e["Stage Info"])
    for si in done:
        kind = "stateful" if si.get("Parent IDs") else "source"
        values = out[kind]
        for acc in si.get("Accumulables", []):
            name = str(acc.get("Name", ""))
            if name.startswith("internal.") or not any(w in name.lower() for w in ("time", "latency", "duration")):
                continue
            try:
                values.setdefault(name, []).append(float(acc["Value"]))
            except (TypeError, ValueError, KeyError):
                continue
        ts = tasks.get(si["Stage ID"], [])
        for key, label in (
            ("Executor Run Time", "tasks: slowest run"),
            ("Executor Deserialize Time", "tasks: slowest deserialization"),
            ("JVM GC Time", "tasks: slowest GC"),
        ):
            if ts:
                values.setdefault(label, []).append(float(max(t.get(key, 0) for t in ts)))
    return out


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * q))]


def figures(runs: list[dict]) -> dict[str, float | None]:
    """The table's rows from the pooled runs of one configuration at one rate."""
    batches = [p for r in runs for p in r["batches"]]

    def p50(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    def duration(key: str) -> list[float]:
        return [p["durationMs"].get(key, 0) for p in batches]

    def per_task(timer: str) -> list[float]:
        out = []
        for p in batches:
            o = _observed(p)
            if o.get("task_batches"):
                out.append(o[timer] / o["task_batches"] / 1e6)
        return out

    def stage(kind: str) -> float | None:
        vals = [r["stages"][kind]["stage_ms_p50"] for r in runs if kind in r["stages"]]
        return p50(vals)

    f: dict[str, float | None] = {"records per micro-batch": p50([p["numInputRows"] for p in batches])}
    for key in DURATIONS:
        f[key] = p50(duration(key))
    f["triggerExecution"] = p50(duration("triggerExecution"))
    f["triggerExecution p99"] = percentile(duration("triggerExecution"), 0.99)
    f["idle wait between micro-batches"] = p50([g for r in runs for g in r["gaps"]])
    f["idle wait p99"] = percentile([g for r in runs for g in r["gaps"]], 0.99)
    f["addBatch: Kafka read + shuffle stage"] = stage("source")
    f["addBatch: stateful stage"] = stage("stateful")
    f["state store commit (sum of partitions)"] = p50(
        [sum(op.get("commitTimeMs", 0) for op in p.get("stateOperators", [])) for p in batches]
    )
    proc, read, write = per_task("process_ns"), per_task("state_read_ns"), per_task("state_write_ns")
    f["task: decode + process + encode"] = p50([a - b - c for a, b, c in zip(proc, read, write, strict=True)])
    f["task: state read"] = p50(read)
    f["task: state write"] = p50(write)
    f["task: produce + acks"] = p50(per_task("produce_ns"))
    lat = [x for r in runs for x in r["latencies"]]
    f["latency from send p50"] = percentile(lat, 0.5)
    f["latency from send p99"] = percentile(lat, 0.99)
    f["micro-batches measured"] = float(len(batches))
    f["load average"] = p50([r["load"] for r in runs])
    return f


def metrics_table(raw: dict[float, dict[str, list[dict]]], names: list[str]) -> str:
    """The stages' time metrics (:func:`stage_metrics`), p50 over the measured stages of every run, side by side."""
    lines = []
    for rate, by_name in raw.items():
        for kind in ("source", "stateful"):
            merged: dict[str, dict[str, list[float]]] = {n: {} for n in names}
            for n in names:
                for r in by_name[n]:
                    for m, vals in (r.get("stage_metrics") or {}).get(kind, {}).items():
                        merged[n].setdefault(m, []).extend(vals)
            metrics = sorted(set().union(*(merged[n] for n in names)))
            if not metrics:
                continue
            lines += [
                f"\n{kind} stage at {rate:,.0f}/s, p50 per stage (raw values as Spark reports them):\n",
                f"| metric | {' | '.join(names)} | {names[1]} / {names[0]} |",
                "|---|" + "---:|" * (len(names) + 1),
            ]
            for m in metrics:
                vals = [statistics.median(merged[n][m]) if merged[n].get(m) else None for n in names]
                ratio = f"{vals[1] / vals[0]:.2f}" if vals[0] and vals[1] is not None else "-"
                shown = " | ".join("-" if v is None else f"{v:,.0f}" for v in vals)
                lines.append(f"| {m} | {shown} | {ratio} |")
    return "\n".join(lines)


def table(results: dict[float, dict[str, dict]], names: list[str]) -> str:
    rates = list(results)
    head = "| ms, p50 unless marked |"
    rule = "|---|"
    for rate in rates:
        head += "".join(f" {rate:,.0f}/s {n} |" for n in names) + f" {names[1]} / {names[0]} |"
        rule += "---:|" * (len(names) + 1)
    lines = [head, rule]
    rows = list(next(iter(next(iter(results.values())).values())))
    for row in rows:
        line = f"| {row} |"
        for rate in rates:
            vals = [results[rate][n][row] for n in names]
            line += "".join(" - |" if v is None else f" {v:,.0f} |" for v in vals)
            a, b = vals[0], vals[1]
            line += f" {b / a:.2f} |" if a and b is not None and row != "load average" else " - |"
        lines.append(line)
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The command line (the window options and the rest that side_by_side's ``command`` reads are among it)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1000,10000", help="live records/s, comma-separated")
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        help="NAME=SETTINGS, twice (default: the current code twice); see the module docstring",
    )
    ap.add_argument("--warm", type=float, default=12.0, help="live seconds before the measurement (windows fill)")
    ap.add_argument("--seconds", type=float, default=20.0, help="live seconds measured")
    ap.add_argument("--prime", type=int, default=2000, help="backlog records consumed before the live phase")
    ap.add_argument("--rounds", type=int, default=1, choices=(1, 2), help="2: A B B A, figures pooled")
    ap.add_argument("--ooo", type=float, default=0.0, help="share of records moved back (side_by_side's ooo: 0.05)")
    ap.add_argument("--td", type=int, default=10_000)
    sbs.add_window_options(ap)  # --window and its sizes, as side_by_side's (the _spark child takes them)
    ap.set_defaults(progress_out="")  # side_by_side's own: this bench gives each child its progress file itself
    ap.add_argument("--grace", type=int, default=2_000)
    ap.add_argument("--partitions", type=int, default=2, help="input partitions = state partitions")
    ap.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    ap.add_argument("--batch", type=int, default=20_000, help="maxOffsetsPerTrigger")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after the live input is consumed")
    ap.add_argument("--no-stages", action="store_true", help="without Spark's event log (no stage rows)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default="")
    return ap


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    configs = [parse_config(c) for c in (args.config or ["A=", "A again="])]
    if len(configs) != 2:
        ap.error("give --config twice (or not at all)")
    names = [n for n, _ in configs]
    if len(set(names)) != 2:
        ap.error("the two configurations need different names")
    rates = [float(r) for r in args.rates.split(",") if r.strip()]

    import logging

    logging.basicConfig(level=logging.WARNING)
    from devtools.local_broker import LocalKafkaBroker

    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="sw-phases-"))
    (work / "logs").mkdir()
    broker = LocalKafkaBroker(0, data_dir=work / "kafka")
    broker.start()
    t0 = time.monotonic()
    raw: dict[float, dict[str, list[dict]]] = {rate: {n: [] for n in names} for rate in rates}
    with contextlib.ExitStack() as stack:
        stack.callback(broker.stop)
        script = tree_scripts(stack)
        for rnd in range(args.rounds):
            for i, rate in enumerate(rates):
                # mirrored from one rate to the next and one round to the next (A B, then B A): a drift of the
                # machine hits both configurations alike
                order = configs if (rnd + i) % 2 == 0 else configs[::-1]
                for name, settings in order:
                    run = run_one(args, broker.bootstrap_servers, work, name, settings, rate, rnd, script)
                    raw[rate][name].append(run)
    results = {rate: {n: figures(raw[rate][n]) for n in names} for rate in rates}
    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    header = (
        f"\n### {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC - `{cmd}`\n\n"
        + "".join(f"- `{n}`: `{s or '(as the code is)'}`\n" for n, s in configs)
        + f"\nlive {args.warm:.0f} s + {args.seconds:.0f} s measured, {DENSITY} records per key and window of "
        f"{args.td} ms, {args.ooo:.0%} out of order, {args.partitions} partitions, local[{args.cores}], "
        f"{args.rounds} round(s); {os.cpu_count()} vCPUs, load average (1 min) {load_before:.1f} before / "
        f"{os.getloadavg()[0]:.1f} after, whole run {(time.monotonic() - t0) / 60:.1f} min\n\n"
    )
    text = header + table(results, names) + "\n" + metrics_table(raw, names)
    print(text, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
