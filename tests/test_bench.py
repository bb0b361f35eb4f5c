"""The benchmarks still run and print their tables (smoke tests: no timing is asserted).

The window-engine one also checks what it asserts while it runs: the batch path took every batch (no fallback to
the record path) on in-order and 10%-out-of-order streams, for count and sum, at 10, 100 and 1,000 records per
window."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_windowstore_bench_prints_every_cell() -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "windowstore_bench.py"),
            "--seconds",
            "0.01",
            "--records",
            "4000",
            "--batch",
            "1000",
            "--keys",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    rows = [line.split() for line in run.stdout.splitlines() if line.startswith(("count ", "sum "))]
    assert len(rows) == 12, run.stdout
    cells = {(r[0], r[1], int(r[-6])) for r in rows}  # agg, order ("in-order" / "10%"), records per window
    assert cells == {(a, o, w) for a in ("count", "sum") for o in ("in-order", "10%") for w in (10, 100, 1000)}
    for r in rows:
        record_rate, batch_rate, out_per_rec = (float(x.replace(",", "").rstrip("x")) for x in (r[-5], r[-4], r[-2]))
        assert record_rate > 0 and batch_rate > 0 and out_per_rec >= 1, r


def test_changelog_encoding_bench_prints_every_format() -> None:
    """The encoding bench runs on a tiny batch; each of its lines first checks its bytes against the per-record
    encoders (an AssertionError would fail the run)."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "changelog_encoding_bench.py"), "--rows", "300", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith(("json ", "avro ", "windowed "))]
    assert len(rows) == 5, run.stdout
    for line in rows:
        us_per_row, vs_json = line.split()[-4:-2]
        assert float(us_per_row) > 0 and vs_json.endswith("x"), line


def test_record_path_bench_prints_every_mode_and_emits_the_same_updates() -> None:
    """Each line asserts that the bound and the generic step emitted identical updates."""
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "record_path_bench.py"),
            "--records",
            "2000",
            "--keys",
            "20",
            "--modes",
            "close,every,update",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    rows = [line.split() for line in run.stdout.splitlines() if line.startswith(("close ", "every ", "update "))]
    assert len(rows) == 12 and {r[0] for r in rows} == {"close", "every", "update"}, run.stdout
    for r in rows:
        assert float(r[-4].replace(",", "")) > 0 and float(r[-3].replace(",", "")) > 0, r


_ONE_BATCH = ("--rounds", "1", "--batches", "1", "--fill", "1")


@pytest.mark.parametrize("window", ["tumbling", "session"])
def test_task_batch_bench_runs_a_task_of_the_window_side_by_side(window: str) -> None:
    """``--window``: one task of side_by_side.py --window (5,000 keys, 10,000 records per batch), its table row."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "task_batch_bench.py"), "--window", window, *_ONE_BATCH],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    rows = [line.split("|")[1:-1] for line in run.stdout.splitlines() if line.startswith("| this tree")]
    assert len(rows) == 1 and f"{window}: 5000 keys, 10000 records per batch" in run.stdout, run.stdout
    _name, ms, engine_ms, changelog_rows, peak = rows[0]
    assert float(ms) > float(engine_ms) > 0 and int(changelog_rows) > 0 and int(peak) > 0, rows


def test_task_batch_bench_compares_two_trees() -> None:
    """Both trees run one task batch after one filling batch and the table gives their ratio (HEAD: a worktree)."""
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "task_batch_bench.py"),
            "--rounds",
            "1",
            "--batches",
            "1",
            "--fill",
            "1",
            "--against",
            "HEAD",
            "--keep-memory",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    rows = [line.split("|")[1:-1] for line in run.stdout.splitlines() if line.startswith(("| this tree", "| HEAD"))]
    assert len(rows) == 4, run.stdout  # this tree, this tree + keep_memory, HEAD, HEAD + keep_memory
    for _name, ms, engine_ms, changelog_rows, peak in rows:
        assert float(ms) > float(engine_ms) > 0 and int(changelog_rows) > 0 and int(peak) > 0, rows
    assert "this tree / HEAD:" in run.stdout and "this tree + keep_memory / this tree:" in run.stdout
    assert "this tree + keep_memory / HEAD + keep_memory:" in run.stdout and "peak RSS" in run.stdout
    listed = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
    assert "task-batch-bench-" not in listed  # the worktree is gone


@pytest.mark.integration
def test_python_worker_bench_runs_both_workers() -> None:
    """Both workers in Spark over a small table; the bench itself asserts every row reached the processor."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "python_worker_bench.py"), "--rows", "3000", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    runs = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [r["worker"] for r in runs] == ["pyspark", "service.python_worker"]
    assert "service.python_worker / pyspark throughput" in run.stdout


def test_task_state_bench_times_batches_and_a_restart() -> None:
    """Tiny run of the task-state bench: one row per (workers, snapshot interval); the restart at the end replays
    the log entries written since the last snapshot (fewer than the interval)."""
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "task_state_bench.py"),
            "--keys",
            "20",
            "--rate",
            "40",
            "--batch-seconds",
            "2",
            "--warmup",
            "2",
            "--batches",
            "5",
            "--workers",
            "1",
            "--snapshot-every",
            "1,4",
            "--repeat",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    rows = [line.split() for line in run.stdout.splitlines() if line.split() and line.split()[0] == "1"]
    assert [int(r[1]) for r in rows] == [1, 4], run.stdout
    for r in rows:
        cpu, restore_s, replayed = float(r[2]), float(r[-2]), int(r[-1])
        assert cpu > 0 and restore_s >= 0 and 0 <= replayed < int(r[1]), r
    assert int(rows[0][-1]) == 0, run.stdout  # a snapshot every batch: nothing to replay
    assert int(rows[1][-1]) > 0, run.stdout  # every 4th: the restart replays the entries since the last one


def _bench_module(name: str) -> Any:
    """bench/<name>.py as a module (bench/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    bench = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(bench)  # type: ignore[union-attr]
    return bench


def _service_bench() -> Any:
    return _bench_module("service_bench")


def test_service_bench_drain_counts_more_micro_batches_than_spark_keeps_reports_of() -> None:
    """``recentProgress`` keeps the last 100 reports only; a 240-batch pass still ends when its rows are read."""
    from types import SimpleNamespace

    bench = _service_bench()

    class Query:
        """240 micro-batches of 50 rows, two per poll; Spark's rolling window of 100 reports."""

        def __init__(self) -> None:
            self.batches = 0
            self.stopped = False

        @property
        def recentProgress(self) -> list:  # pyspark's name
            self.batches = min(self.batches + 2, 240)
            return [
                SimpleNamespace(batchId=b, numInputRows=50, durationMs={"triggerExecution": 1000})
                for b in range(max(0, self.batches - 100), self.batches)
            ]

        def exception(self) -> None:
            return None

        def stop(self) -> None:
            self.stopped = True

    q = Query()
    r = bench.drain(q, 240 * 50, timeout=60, poll_s=0)
    assert q.stopped and r["rows"] == 240 * 50 and r["batches"] == 240
    assert [p.batchId for p in r["progress"]] == list(range(240))


def test_service_bench_latency_figures_split_event_time_latency_into_disorder_and_the_query() -> None:
    """Per update: from event time = instant (the input's disorder) + from send (the query's own latency)."""
    bench = _service_bench()
    records = [
        (10_500, {"max_sent": 10_000, "max_timestamp": 10_000}),  # the built-in's layout; in order, 500 ms
        (10_700, {"aggregates": {"max_sent": 10_000}, "max_timestamp": 4_000}),  # the service's; 6 s of disorder
        (9_000, {"max_sent": 800, "max_timestamp": 800}),  # newest record sent before since_ms: not counted
        (30_000, {"max_sent": 20_000, "max_timestamp": 19_000}),  # after full_since_ms
    ]
    got = bench.latency_figures(iter(records), since_ms=1_000, full_since_ms=15_000)
    assert got["n"] == 3
    assert got["max_ms"] == 10_000 and got["event_max_ms"] == 11_000
    assert got["instant_max_ms"] == 6_000 and got["instant_p50_ms"] == 1_000  # sorted 0, 1,000, 6,000
    assert got["full_p50_ms"] == got["full_max_ms"] == 10_000
    assert got["p50_ms"] == 700 and got["event_p50_ms"] == 6_700


def _progress(batch: int, start_ms: int, scale: int) -> dict:
    """A progress report with the fields bench/batch_phases.py reads, its times ``scale`` times a base."""
    from datetime import datetime, timezone

    ts = datetime.fromtimestamp(start_ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
    return {
        "batchId": batch,
        "timestamp": ts.replace("+00:00", "Z"),
        "numInputRows": 500,
        "durationMs": {
            "latestOffset": 10 * scale,
            "queryPlanning": 20 * scale,
            "walCommit": 30 * scale,
            "addBatch": 400 * scale,
            "commitOffsets": 40 * scale,
            "triggerExecution": 500 * scale,
        },
        "stateOperators": [{"commitTimeMs": 25 * scale}],
        "observedMetrics": {"slidingwindow": {"tasks": [_task_stats(p, scale) for p in (0, 1)]}},  # two tasks
    }


def _task_stats(partition: int, scale: int) -> dict:
    """One task's stats row as the progress JSON holds it (service.spark.job.observed_columns)."""
    from service.task.stats import STATS_FIELDS

    times = {"process_ns": 100_000_000, "state_read_ns": 10_000_000, "state_write_ns": 30_000_000}
    times["produce_ns"] = 50_000_000
    return {"topic": "in", "partition": partition, "stats": [times.get(f, 0) * scale for f in STATS_FIELDS]}


def test_batch_phases_breaks_micro_batches_down_and_compares_two_configurations() -> None:
    """From progress reports as Spark writes them: the measured micro-batches and the idle wait after each, the
    workers' timers per task (decode + process + encode = process - state read - state write), latency
    percentiles; the ratio column is the second configuration over the first."""
    bench = _bench_module("batch_phases")
    t0 = 1_790_000_000_000
    for scale in (1, 2):
        # batch 1 starts before the measured window; batches 2 and 3 follow their predecessor after 100 ms idle
        starts = [t0 - 1_000, t0 + 100, t0 + 100 + 500 * scale + 100]
        reports = [_progress(b + 1, start, scale) for b, start in enumerate(starts)]
        reports.append({"batchId": 3, "timestamp": reports[-1]["timestamp"], "numInputRows": 0, "durationMs": {}})
        measured, gaps = bench.measured_batches(reports, t0, t0 + 60_000)
        assert [p["batchId"] for p in measured] == [2, 3] and gaps == [100.0]
    runs = {
        name: [
            {
                "batches": bench.measured_batches(
                    [_progress(b, t0 + b * 1_000 * scale, scale) for b in range(3)], t0, t0 + 60_000
                )[0],
                "gaps": [100.0 * scale],
                "latencies": [float(x * scale) for x in range(100, 1100, 10)],
                "stages": {},
                "load": 1.0,
            }
        ]
        for name, scale in (("before", 1), ("after", 2))
    }
    figures = {name: bench.figures(r) for name, r in runs.items()}
    before = figures["before"]
    assert before["queryPlanning"] == 20 and before["triggerExecution"] == 500
    assert before["idle wait between micro-batches"] == 100
    assert before["task: decode + process + encode"] == 60 and before["task: produce + acks"] == 50
    assert before["task: state read"] == 10 and before["task: state write"] == 30
    assert before["state store commit (sum of partitions)"] == 25
    assert before["latency from send p50"] == 600 and before["latency from send p99"] == 1090
    text = bench.table({1000.0: figures}, ["before", "after"])
    row = next(line for line in text.splitlines() if line.startswith("| walCommit |"))
    assert row == "| walCommit | 30 | 60 | 2.00 |"


def test_side_by_side_applies_service_and_spark_settings() -> None:
    """``--service-settings`` / batch_phases' configurations: ``spark.*`` names go to ``spark_conf``, others are
    service settings, checked as the service checks them."""
    from service.settings import Settings, SettingsError

    sbs = _bench_module("side_by_side")
    s = sbs.with_overrides(Settings(spark_conf="spark.driver.memory=1g"), "trigger_interval=250ms; spark.a.b=x=1")
    assert s.trigger_interval == 250
    assert s.spark_conf == (("spark.driver.memory", "1g"), ("spark.a.b", "x=1"))
    with pytest.raises(SettingsError, match="trigger_interval"):
        sbs.with_overrides(Settings(), "trigger_interval=soon")
    with pytest.raises(ValueError, match="name=value"):
        sbs.with_overrides(Settings(), "trigger_interval")


def test_side_by_side_drain_rate_leaves_out_the_first_report_with_its_records() -> None:
    """records/s from the ``consumed`` timeline: a micro-batch system's first batch (start-up included) counts
    neither its time nor its records; a single report covering the whole backlog gives no rate."""
    sbs = _bench_module("side_by_side")
    # batches of 100 records: the first ends at 10 s (start-up), then one per second
    spark = [(10.0, 100), (11.0, 200), (12.0, 300), (13.0, 400)]
    assert sbs.drain_rate(spark, 400) == pytest.approx(100.0)
    # a record-at-a-time system reporting every 0.25 s at 400 records/s
    streams = [(5.0 + i * 0.25, 100 * (i + 1)) for i in range(8)]
    assert sbs.drain_rate(streams, 800) == pytest.approx(400.0)
    assert sbs.drain_rate([(10.0, 400)], 400) is None
    assert sbs.drain_rate([(10.0, 100), (11.0, 200)], 400) is None  # not drained
    r = sbs.measure("service", [(1_000, 5), (3_000, 7)], 400, 10_000, spark)
    assert r["rec_per_s"] == pytest.approx(100.0) and r["rec_per_s_outputs"] == pytest.approx(200.0)


def test_side_by_side_counts_a_jvms_spawned_child_once_until_it_execs() -> None:
    """A command the JVM starts (vfork) shows the JVM's memory until it execs: left out of the tree's sum even when
    its RSS was read a moment apart from the JVM's; a JVM started by the JVM, a command after exec and a Python
    worker forked from the daemon are counted."""
    sbs = _bench_module("side_by_side")
    java = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
    jvm = ("java", 571 << 20, 4_000 << 20, java)
    assert sbs.shares_parents_memory(("stream executio", 571 << 20, 4_000 << 20, java), jvm)
    assert sbs.shares_parents_memory(("stream executio", 569 << 20, 4_001 << 20, java), jvm)  # read apart
    assert sbs.shares_parents_memory(("jspawnhelper", 560 << 20, 4_000 << 20, "/x/jspawnhelper"), jvm)
    assert not sbs.shares_parents_memory(("java", 300 << 20, 3_000 << 20, java), jvm)  # the class-data build
    assert not sbs.shares_parents_memory(("chmod", 1 << 20, 5 << 20, "/usr/bin/chmod"), jvm)
    daemon = ("python", 51 << 20, 900 << 20, "/usr/bin/python3.11")
    assert not sbs.shares_parents_memory(("python", 250 << 20, 1_400 << 20, "/usr/bin/python3.11"), daemon)
    assert sbs.shares_parents_memory(daemon, daemon)


@pytest.mark.integration
def test_recovery_bench_times_a_fresh_start_and_a_restart_and_checks_the_output() -> None:
    """A tiny run of the recovery bench (its own broker): a fresh start, one SIGKILL and restart; every step of
    both starts is timed, the memory of the service's processes sampled, and the changelog after the restart
    equals the replay of the input (the bench's own check)."""
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "recovery_bench.py"),
            *("--records", "4000", "--keys", "40", "--event-rate", "50", "--partitions", "2"),
            *("--batch", "1000", "--live-rate", "40", "--live-before-kill", "4", "--restarts", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in run.stdout.splitlines() if "|" in line}
    steps = ("JVM up", "SparkSession ready", "query started", "first micro-batch started", "first changelog record")
    times = {step: [float(x) for x in rows[step]] for step in steps}
    for column in (0, 1):  # fresh start, restart: the steps in their order
        assert 0 < times["JVM up"][column] < times["SparkSession ready"][column], times
        assert times["query started"][column] < times["first changelog record"][column], times
    assert "| restart 1 | driver JVM | 1 |" in run.stdout and "Python worker" in run.stdout, run.stdout
    assert "0 lost, 0 wrong, 0 unexpected (exact" in run.stdout, run.stdout


def test_batch_phases_command_line_gives_side_by_side_what_its_service_child_reads() -> None:
    """batch_phases runs the service through side_by_side's ``command``: every option that reads (the window
    options included, added to side_by_side for issue 31) must be on batch_phases' command line too."""
    bench = _bench_module("batch_phases")
    sbs = _bench_module("side_by_side")
    args = bench.parser().parse_args(["--window", "tumbling", "--size", "5000"])
    args.service_settings = ""
    cmd = sbs.command("service", args, "127.0.0.1:9092", "in", "out", Path("/tmp/unused"))
    assert cmd[cmd.index("--window") + 1] == "tumbling" and cmd[cmd.index("--size") + 1] == "5000"
    assert cmd[cmd.index("--batch") + 1] == "20000"


def test_jvm_counters_read_a_real_jvms_class_loading(tmp_path: Path) -> None:
    """bench/jvm_counters.py reads the hsperfdata image a JVM writes (here saved at its exit) as ``jcmd
    PerfCounter.print`` would: the classes it loaded, some of them from the JDK's class-data archive."""
    from connectors.jars import java_executable

    java = java_executable()
    image = tmp_path / "hsperfdata"
    subprocess.run(
        [java, "-XX:+PerfDataSaveToFile", f"-XX:PerfDataSaveFile={image}", "-version"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    counters = _bench_module("jvm_counters")
    raw = counters.read_counters(image.read_bytes())
    figures = counters.class_loading(raw)
    assert figures["classes loaded"] == raw["java.cls.loadedClasses"] + raw["java.cls.sharedLoadedClasses"] > 300
    assert 0 < figures["of them from a class-data archive"] <= figures["classes loaded"]
    assert set(figures) == set(counters.CLASS_LOADING)
    assert all(v >= 0 for v in figures.values())
    # ticks turned into seconds by the JVM's own tick rate (a check of the conversion, not of a duration)
    hz = raw["sun.os.hrt.frequency"]
    assert figures["static initializers (s)"] == raw["sun.cls.classInitTime.self"] / hz > 0
    with pytest.raises(ValueError, match="hsperfdata"):
        counters.read_counters(b"\0" * 64)
    assert counters.counters_of(2**22 + 1) is None  # no such JVM
