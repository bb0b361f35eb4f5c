"""Side-by-side benchmark on one local broker: this service, Kafka Streams, Spark's built-in hopping windows, a
plain loop.

    .venv/bin/python bench/side_by_side.py [--records 200000] [--cells inorder-10,ooo-10,inorder-1000,ooo-1000]
        [--systems kstreams,service,builtin,plain] [--live-rate 1000] [--live-seconds 20] [--out bench/RESULTS.md]
        [--plots bench/plots] [--service-settings 'trigger_interval=250;spark.name=value']

One local Kafka broker (``devtools.local_broker``) for everything. For each *cell* (order x records per window):

1. **backlog** - one generator writes the same ``--records`` JSON records ``{"amount": a, "sent": wall-clock ms}``
   (identical keys, values and record timestamps; one seeded generator) to one input topic *per system* (each
   system's live phase appends to its own topic, so the backlogs must not be shared). Event time advances at
   ``density * keys / td`` records per second of event time, so every key has ``density`` records per window of
   ``--td``: density 10 uses 10,000 keys and ``--records``, density 1,000 uses 5 keys and
   ``--records-dense`` (Kafka Streams manages ~100-200 records/s there, see bench/RESULTS.md). ``ooo``: 5% of the
   records get their timestamp moved back by 1..``--grace`` ms (out of order, never late).
2. Each system runs in turn as its own process (tree), from the earliest offset of its topic:
   ``kstreams`` (bench/kstreams_app, SlidingWindows count+sum+max(sent), default record cache, commit interval
   ``--commit-ms``, ``--partitions`` stream threads), ``service`` (``service.spark.job.start_query`` exactly as
   bench/service_bench.py runs it: emit update, JSON, ``max_offsets_per_trigger`` = ``--batch``, trigger 0),
   ``builtin`` (Spark's ``groupBy(window(ts, td, td/10), key)`` with a watermark of ``--grace``, the same query as
   service_bench's plus max(sent), same batch size) and ``plain`` (bench/plain_loop.py).
3. **live** - once the process has consumed the backlog, the driver produces ``--live-rate`` records/s for
   ``--live-seconds`` to the same topic with record timestamp = wall clock (5% moved back in ``ooo``) and
   ``density * live_keys / td = live-rate`` (so the live phase has the cell's density too: 1,000 keys at 10 per
   window and 1,000 rec/s; 1 key at 1,000 per window and ``--live-rate-dense`` 100 rec/s), then waits for the output
   to settle and stops the process.

Figures (every output topic is created with ``message.timestamp.type=LogAppendTime``, so an output record's
timestamp is the broker's wall clock when it was appended, for every system alike):

* **records/s** = the drain's sustained rate, from each system's own ``consumed N`` reports (every 250 ms): the
  backlog records after the first report / the time from that report to the one that covers the backlog. A Spark
  query reports a micro-batch once it has ended (its outputs written), so its first micro-batch - start-up, plan
  compilation - is left out together with its records; Kafka Streams reports records as its source sees them (its
  output is written at each commit). Until 2026-11-27 the figure was the backlog records over the span of their
  outputs' append times, which counted the first micro-batch's records without its time (optimistic for Spark by
  n / (n - batch): 10/9 at 200k records and 20k per batch, 6/5 at 600k and 100k); the result line keeps it as
  ``rec_per_s_outputs``. ``drain s`` (start of the process to backlog consumed, start-up included) is printed too.
* **latency p50/p99** (live phase only) = output append time - ``max(sent)`` of the window the output describes,
  i.e. from the moment the newest record in that window was handed to the producer until the update that includes
  it is readable on the output topic. For the plain loop: append time - the record's ``sent``.
* **peak RSS** = the largest sum of VmRSS over the process and all its descendants (JVM, Python workers), sampled
  every 0.5 s. Each JVM gets ``-Xmx1g`` (Spark's driver default of 1g; the same for the Kafka Streams app). The
  result line also gives the sum's parts at that peak by process (``peak_rss_by_process``: command name / depth in
  the tree, MiB) and the peak sum of PSS (``peak_pss_mb``: pages shared between the processes - Spark's Python
  workers are forked from its daemon - counted once in all, where the RSS sum counts them in each process). A
  child that shares its parent's address space (a JVM starting a command: until it execs, it shows the JVM's RSS)
  is left out of the RSS sum: those pages are the parent's, already counted.

**Window types** (``--window``, issue 31): ``sliding`` (the default, everything above), ``tumbling`` (``--size``,
default ``--td``), ``hopping`` (``--size`` and ``--advance``, default ``--td`` and ``--td``/10) and ``session``
(``--gap``, default ``--td``/5: with 10 records per key and ``--td`` about one record a second per key, so
sessions grow and merge). Every system runs the same definition: Kafka Streams ``TimeWindows`` /
``SessionWindows``, the service's ``window`` settings, Spark's ``window(ts, size, advance)`` /
``session_window(ts, gap)``. Spark refuses update mode for session windows (SPARK-36463), so its session query
runs in append mode: it writes a session once the watermark passes its end, and its latency reads that. Kafka
Streams and the service forward a tombstone for every session a merge replaces; tombstones are counted as
outputs and left out of the latency.

The Spark processes learn of their micro-batches from a query listener, as the service's driver does (until
2026-11-27 they read ``recentProgress`` every 0.25 s: up to 100 reports through py4j and JSON per read, work the
service itself never does; bench/batch_phases.py's ``poll=1`` runs that way).

Ratios are to Kafka Streams in the same cell (same run, same load). Prints a Markdown table; ``--out`` appends it
with the command line and load averages; ``--plots`` writes throughput.png and latency.png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import service_bench as sb  # noqa: E402  (read_to_end, LiveProducer, produce_waiting)

KSTREAMS_DIR = ROOT / "bench" / "kstreams_app"
SYSTEMS = ("kstreams", "service", "builtin", "plain")


# ------------------------------------------------------------------------------------------------- input


def keys_for(density: int) -> int:
    return 10_000 if density <= 100 else 5


def produce_backlog(bootstrap, topics, n, keys, event_rate, grace_ms, ooo, seed=1):
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 2000000,
            "compression.type": "none",
        }
    )
    rnd = random.Random(seed)
    base = int(time.time() * 1000) - int(n / event_rate * 1000) - 60_000
    for i in range(n):
        ts = base + int(i * 1000 / event_rate)
        if rnd.random() < ooo:
            ts -= rnd.randint(1, grace_ms)
        k = f"acct-{rnd.randrange(keys):05d}".encode()
        v = b'{"amount": %d, "sent": %d}' % (rnd.randint(1, 1000), int(time.time() * 1000))
        for t in topics:
            sb.produce_waiting(p, t, k, v, ts)
        if i % 10000 == 0:
            p.poll(0)
    p.flush(300)


# ------------------------------------------------------------------------------------------------- processes


def process_info(pid: int) -> tuple[int, tuple[str, int, int, str]] | None:
    """The process's parent pid, and its command name, VmRSS (bytes), virtual size and executable; None if it is
    gone (or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
        fields = st[st.rindex(")") + 2 :].split()
        with open(f"/proc/{pid}/status") as f:
            kb = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        ppid, vsize = int(fields[1]), int(fields[20])
    except (OSError, ValueError, IndexError):
        return None
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    return ppid, (st[st.index("(") + 1 : st.rindex(")")], kb * 1024, vsize, exe)


def _process_table() -> tuple[dict[int, list[int]], dict[int, tuple[str, int, int, str]]]:
    """Every process's children, and its :func:`process_info`."""
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[str, int, int, str]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (read := process_info(int(d))) is not None:
            children.setdefault(read[0], []).append(int(d))
            info[int(d)] = read[1]
    return children, info


def shares_parents_memory(child: tuple[str, int, int, str], parent: tuple[str, int, int, str]) -> bool:
    """Whether ``child`` (command name, RSS, virtual size, executable, as :func:`process_info` reads them) is
    its parent's memory seen a second time: a command the JVM starts (``posix_spawn``: vfork) runs in the JVM's
    memory until it execs, and reports the JVM's whole RSS. Such a child of a JVM still runs the JVM's executable
    under the name of the Java thread that started it (``stream executio``), or shows the JVM's virtual size (the
    same mappings; its RSS, read a moment apart, may differ from the JVM's). A JVM that a JVM starts is counted:
    it is named ``java``, with its own mappings. Under other parents only a child with the parent's RSS and
    virtual size is left out (a Python worker just forked from the daemon, before it touches a page)."""
    name, rss, vsize, exe = child
    if parent[0] == "java":
        return vsize == parent[2] or (bool(exe) and exe == parent[3] and name != "java")
    return (rss, vsize) == parent[1:3]


def _pss_bytes(pid: int) -> int:
    """The process's proportional set size: its private pages plus its share of pages it shares with others."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:")), 0)
    except (OSError, ValueError):
        return 0


def tree_memory(root_pid: int, pss: bool = False) -> list[tuple[str, int, int]]:
    """(kind, RSS, PSS) of the process and each of its descendants; kind = the command name and its depth in the
    tree (``python3.11/0`` the root, ``java/1`` a JVM it started, ``python3.11/2`` and ``/3`` Spark's Python
    daemon and the workers it forks). PSS only when ``pss`` (reading smaps_rollup costs more), else 0."""
    children, info = _process_table()
    out: list[tuple[str, int, int]] = []
    todo = [(root_pid, 0, -1)]
    while todo:
        pid, depth, parent = todo.pop()
        if pid in info:
            name, rss = info[pid][:2]
            if parent in info and shares_parents_memory(info[pid], info[parent]):
                continue  # the same pages, counted once
            out.append((f"{name}/{depth}", rss, _pss_bytes(pid) if pss else 0))
        todo.extend((c, depth + 1, pid) for c in children.get(pid, []))
    return out


class Proc:
    """A system under test: started in its own session, reports ``consumed N`` lines, RSS sampled."""

    def __init__(self, cmd, log_path, env=None):
        self.log = open(log_path, "w")  # noqa: SIM115 - held for the process lifetime, closed in stop()
        self.p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True, env=env, cwd=str(ROOT)
        )
        self.started = time.monotonic()
        self.consumed = 0
        #: (monotonic time, consumed) at every change of the reported count: the drain's timeline
        self.timeline: list[tuple[float, int]] = []
        self.peak_rss = 0
        self.peak_pss = 0
        #: kind -> (processes, RSS) when the tree's RSS sum peaked (see tree_memory)
        self.peak_breakdown: dict[str, tuple[int, int]] = {}
        self.alive = True
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._sample, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            if line.startswith("consumed "):
                n = int(line.split()[1])
                if n != self.consumed:
                    self.timeline.append((time.monotonic(), n))
                self.consumed = n
            else:
                self.log.write(line)
        self.alive = False

    def _sample(self):
        while self.alive and self.p.poll() is None:
            procs = tree_memory(self.p.pid, pss=True)
            rss = sum(r for _, r, _ in procs)
            self.peak_pss = max(self.peak_pss, sum(p for _, _, p in procs))
            if rss > self.peak_rss:
                self.peak_rss = rss
                kinds: dict[str, tuple[int, int]] = {}
                for kind, r, _ in procs:
                    n, total = kinds.get(kind, (0, 0))
                    kinds[kind] = (n + 1, total + r)
                self.peak_breakdown = kinds
            time.sleep(0.5)

    def wait_consumed(self, n, timeout):
        t0 = time.monotonic()
        while self.consumed < n:
            if self.p.poll() is not None:
                raise RuntimeError(f"process exited with {self.p.returncode} (log {self.log.name})")
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"consumed {self.consumed} of {n} after {timeout:.0f}s (log {self.log.name})")
            time.sleep(0.1)
        return time.monotonic()

    def stop(self):
        self.alive = False
        try:
            os.killpg(self.p.pid, signal.SIGTERM)
            self.p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(10)
        except ProcessLookupError:
            pass
        self.log.close()


def kstreams_classpath() -> str:
    from connectors import versions

    cp = KSTREAMS_DIR / "target" / "classpath.txt"
    src = max(f.stat().st_mtime for f in (KSTREAMS_DIR / "src").rglob("*.java"))
    if not cp.exists() or cp.stat().st_mtime < src or (KSTREAMS_DIR / "pom.xml").stat().st_mtime > cp.stat().st_mtime:
        kafka = versions.jvm_versions().kafka
        subprocess.run(["mvn", "-B", "-q", f"-Dkafka.version={kafka}", "package"], cwd=KSTREAMS_DIR, check=True)
    return f"{KSTREAMS_DIR / 'target' / 'classes'}{os.pathsep}{cp.read_text().strip()}"


WINDOWS = ("sliding", "tumbling", "hopping", "session")


def window_bounds(args) -> tuple[int, int, int]:
    """``(size, advance, gap)`` in ms of ``--window`` (defaults from ``--td``, see the module docstring)."""
    size = args.size or args.td
    advance = size if args.window == "tumbling" else (args.advance or max(1, size // 10))
    return size, advance, args.gap or max(1, args.td // 5)


def window_settings(args) -> dict:
    """The service's window settings for ``--window``."""
    if args.window == "sliding":
        return {"time_difference": args.td}
    size, advance, gap = window_bounds(args)
    if args.window == "session":
        return {"window": "session", "gap": gap}
    if args.window == "tumbling":
        return {"window": "tumbling", "window_size": size}
    return {"window": "hopping", "window_size": size, "advance": advance}


def spark_settings(args, bootstrap, topic, out_topic, ckpt):
    from service.settings import Settings

    return Settings(
        bootstrap_servers=bootstrap,
        input_topics=topic,
        changelog_topic=out_topic,
        late_topic=f"{out_topic}-late",
        dead_letter_topic=f"{out_topic}-dlq",
        changelog_format="json",
        changelog_key_format="json",
        aggregations="count,sum:amount,max:sent",
        # the built-in query only borrows the Spark session settings
        **(window_settings(args) if args.system == "service" else {"time_difference": args.td}),
        grace=args.grace,
        emit="update",
        checkpoint_dir=ckpt,
        metrics_port=0,
        state_partitions=args.partitions,
        trigger_interval=0,
        spark_master=f"local[{args.cores}]",
        max_offsets_per_trigger=args.batch,
        spark_conf="spark.driver.memory=1g",
    )


def with_overrides(settings, text: str):
    """``settings`` with ``text``'s ``name=value`` pairs (``;``-separated) applied: a name starting with ``spark.``
    is a Spark setting added to ``spark_conf``, any other a service setting (``trigger_interval=250``). What
    ``--service-settings`` and bench/batch_phases.py's configurations pass to the service's process."""
    changes: dict = {}
    conf = list(settings.spark_conf)
    for part in (x.strip() for x in text.split(";")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"expected name=value, got {part!r}")
        if name == "spark_conf":
            raise ValueError("give Spark settings one by one: spark.name=value")
        if name.startswith("spark."):
            conf.append((name, value))
        else:
            changes[name] = value
    return settings.replace(**changes, spark_conf=tuple(conf))


def builtin_query(spark, bootstrap, topic, out_topic, ckpt, args):
    """bench/service_bench.py's built-in query (count, sum, max over hopping windows of ``--td``, hop ``--td``/10)
    plus max(sent); with ``--window``: ``window(ts, size, advance)`` or ``session_window(ts, gap)``."""
    grace_ms, batch = args.grace, args.batch
    from pyspark.sql import functions as F

    from service.spark_kafka_options import SOURCE_DEFAULTS

    src = (
        spark.readStream.format("kafka")
        .options(**SOURCE_DEFAULTS)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(batch))
    )
    v = F.col("value").cast("string")
    df = src.load().select(
        F.col("key").cast("string").alias("k"),
        F.col("timestamp").alias("ts"),
        F.get_json_object(v, "$.amount").cast("long").alias("amount"),
        F.get_json_object(v, "$.sent").cast("long").alias("sent"),
    )
    size, advance, gap = window_bounds(args)
    if args.window == "sliding":
        size, advance = args.td, args.td // 10
    if args.window == "session":
        window = F.session_window("ts", f"{gap} milliseconds")
    else:
        window = F.window("ts", f"{size} milliseconds", f"{advance} milliseconds")
    agg = (
        df.withWatermark("ts", f"{grace_ms} milliseconds")
        .groupBy(window.alias("window"), "k")
        .agg(F.count("*").alias("count"), F.sum("amount").alias("sum_amount"), F.max("sent").alias("max_sent"))
    )
    out = agg.select(
        F.to_json(F.struct(F.col("k").alias("key"), F.col("window.start").alias("window_start")))
        .cast("binary")
        .alias("key"),
        F.to_json(
            F.struct(
                F.col("k").alias("key"),
                F.col("window.start").alias("window_start"),
                F.col("window.end").alias("window_end"),
                "count",
                "sum_amount",
                "max_sent",
            )
        )
        .cast("binary")
        .alias("value"),
    )
    return (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out_topic)
        .option("checkpointLocation", ckpt)
        .outputMode("append" if args.window == "session" else "update")  # SPARK-36463: no update mode for sessions
        .start()
    )


def spark_child(args) -> int:
    """``side_by_side.py _spark``: run the service's or the built-in query and report consumed records."""
    from service.driver import prepare
    from service.spark.job import OBSERVATION, build_spark, observed_values
    from service.spark.listener import query_listener

    s = with_overrides(
        spark_settings(args, args.bootstrap_servers, args.topic, args.out_topic, args.ckpt), args.settings
    )
    spark = build_spark(s)
    spark.sparkContext.setLogLevel("ERROR")
    # every micro-batch's progress once, from a listener (as the service's driver gets it); --poll: read
    # recentProgress every 0.25 s, as this bench did before 2026-11-27 (100 reports through py4j and JSON per poll).
    # Kept per batch: what the end of the run prints, not the progress object (~40 KB each: a long run's driver
    # grew ~7 MiB a minute with them, counted as the service's memory): batch -> rows, the progress's JSON (only
    # with --progress-out), triggerExecution ms, observed metrics
    reports: dict[int, tuple[int, str, int | None, dict]] = {}

    def keep(p) -> None:
        if p.numInputRows or p.batchId not in reports:
            observed = (
                {k: v for k, v in observed_values(p.observedMetrics[OBSERVATION]).items() if k != "tasks"}
                if OBSERVATION in (p.observedMetrics or {})
                else {}
            )
            reports[p.batchId] = (
                p.numInputRows,
                p.json if args.progress_out else "",
                p.durationMs.get("triggerExecution"),
                observed,
            )

    if not args.poll:
        spark.streams.addListener(query_listener(keep, lambda: None))
    if args.system == "service":
        from service.spark.job import start_query

        q = start_query(spark, s, prepare(s))
    else:
        q = builtin_query(spark, args.bootstrap_servers, args.topic, args.out_topic, args.ckpt, args)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        if args.poll:
            for p in q.recentProgress:
                keep(p)
        print(f"consumed {sum(r[0] for r in list(reports.values()))}", flush=True)
        if q.exception() is not None:
            print(str(q.exception()), file=sys.stderr, flush=True)
            return 1
        time.sleep(0.25)
    if args.progress_out:
        Path(args.progress_out).write_text("".join(reports[b][1] + "\n" for b in sorted(reports)))
    for b in sorted(reports):
        rows, _json, ms, observed = reports[b]
        if rows:
            print(json.dumps({"batch": b, "rows": rows, "ms": ms, "observed": observed}), file=sys.stderr, flush=True)
    q.stop()
    spark.stop()
    return 0


def command(system, args, bootstrap, topic, out_topic, work):
    py = sys.executable
    if system == "kstreams":
        return [
            "java",
            "-Xmx1g",
            "-cp",
            kstreams_classpath(),
            "slidingwindow.bench.KStreamsApp",
            bootstrap,
            topic,
            out_topic,
            str(args.td),
            str(args.grace),
            str(args.partitions),
            str(args.commit_ms),
            str(work / f"ks-{out_topic}"),
            f"app-{out_topic}",
            args.window,
            *map(str, window_bounds(args)),
        ]
    if system == "plain":
        return [
            py,
            str(ROOT / "bench" / "plain_loop.py"),
            "--bootstrap-servers",
            bootstrap,
            "--input-topic",
            topic,
            "--output-topic",
            out_topic,
        ]
    return [
        py,
        str(Path(__file__).resolve()),
        "_spark",
        "--system",
        system,
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--out-topic",
        out_topic,
        "--ckpt",
        str(work / f"ck-{out_topic}"),
        "--td",
        str(args.td),
        "--grace",
        str(args.grace),
        "--batch",
        str(args.batch),
        "--partitions",
        str(args.partitions),
        "--cores",
        str(args.cores),
        *window_args(args),
        "--settings",
        args.service_settings if system == "service" else "",
        *(["--progress-out", f"{args.progress_out}-{system}-{topic}.jsonl"] if args.progress_out else []),
    ]


def window_args(args) -> list[str]:
    """The window options, as the ``_spark`` child takes them."""
    return ["--window", args.window, "--size", str(args.size), "--advance", str(args.advance), "--gap", str(args.gap)]


def add_window_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--window", choices=WINDOWS, default="sliding", help="the window type every system runs")
    ap.add_argument("--size", type=int, default=0, help="tumbling/hopping window size in ms (0: --td)")
    ap.add_argument("--advance", type=int, default=0, help="hopping advance in ms (0: size/10)")
    ap.add_argument("--gap", type=int, default=0, help="session inactivity gap in ms (0: --td/5)")


# ------------------------------------------------------------------------------------------------- measuring


def read_output(bootstrap, topic, system):
    """(append time ms, max_sent) of every record of ``topic``."""
    rows = []
    for m in sb.read_to_end(bootstrap, topic, chunk=10000):
        if m.value() is None:  # a session replaced by a merge: an output without a window to time
            rows.append((m.timestamp()[1], None))
            continue
        v = json.loads(m.value())
        if system == "service":
            sent = v["aggregates"]["max_sent"]
        elif system == "plain":
            sent = v["sent"]
        else:
            sent = v["max_sent"]
        rows.append((m.timestamp()[1], sent))
    return rows


def drain_rate(timeline: list[tuple[float, int]], n_backlog: int) -> float | None:
    """Backlog records per second after the first report: ``(n - c1) / (tn - t1)`` where ``(t1, c1)`` is the first
    ``consumed`` report above 0 and ``tn`` the first at ``n`` or more. A micro-batch system reports a batch when it
    has ended (its outputs written), so the first batch - start-up, plan compilation - is left out with its records;
    Kafka Streams reports records as its source sees them. None when one report covers the whole backlog."""
    first = next(((t, c) for t, c in timeline if c > 0), None)
    done = next((t for t, c in timeline if c >= n_backlog), None)
    if first is None or done is None or done <= first[0] or first[1] >= n_backlog:
        return None
    return (n_backlog - first[1]) / (done - first[0])


def measure(system, rows, n_backlog, live_start_ms, timeline=()):
    back = [t for t, s in rows if s is not None and s < live_start_ms]
    lat = sorted(t - s for t, s in rows if s is not None and s >= live_start_ms)
    r = {"outputs": len(rows), "backlog_outputs": len(back)}
    rate = drain_rate(list(timeline), n_backlog)
    if rate is not None:
        r["rec_per_s"] = rate
    if len(back) > 1 and max(back) > min(back):
        # the figure before 2026-11-27 18:00: all backlog records over the span of their outputs' append times (the
        # micro-batch systems' first batch counted without its time: optimistic by n / (n - batch) for them)
        r["rec_per_s_outputs"] = n_backlog / ((max(back) - min(back)) / 1000)
    if lat:
        r.update(lat_n=len(lat), p50_ms=lat[len(lat) // 2], p99_ms=lat[min(len(lat) - 1, int(len(lat) * 0.99))])
    return r


def run_cell(args, bootstrap, cell, systems, work, log_dir):
    from connectors.admin import TopicSpec, ensure_topics

    order, density = cell.split("-")
    density = int(density)
    ooo = 0.05 if order == "ooo" else 0.0
    keys = keys_for(density)
    n = args.records if density <= 100 else args.records_dense
    live_rate = args.live_rate if density <= 100 else args.live_rate_dense
    event_rate = density * keys / (args.td / 1000)
    live_keys = max(1, int(live_rate * (args.td / 1000) / density))
    run = f"{cell}-{int(time.time())}"
    topics = {s: f"{run}-{s}-in" for s in systems}
    admin = {"bootstrap.servers": bootstrap}
    ensure_topics(admin, [TopicSpec(t, args.partitions, config={"retention.ms": "-1"}) for t in topics.values()])
    t = time.monotonic()
    produce_backlog(bootstrap, list(topics.values()), n, keys, event_rate, args.grace, ooo)
    print(
        f"[{cell}] produced {n} records x {len(systems)} topics ({keys} keys, event rate "
        f"{event_rate:.0f}/s) in {time.monotonic() - t:.1f}s; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    res = {}
    for system in systems:
        out_topic = f"{run}-{system}-out"
        ensure_topics(
            admin, [TopicSpec(out_topic, args.partitions, config={"message.timestamp.type": "LogAppendTime"})]
        )
        load0 = os.getloadavg()[0]
        proc = Proc(command(system, args, bootstrap, topics[system], out_topic, work), log_dir / f"{out_topic}.log")
        spy = None
        if args.profile and system == "service":
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--subprocesses",
                    "--format",
                    "raw",
                    "--rate",
                    "50",
                    "--pid",
                    str(proc.p.pid),
                    "-o",
                    str(Path(args.profile) / f"service-{cell}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(log_dir / f"{out_topic}.pyspy.log", "w"),  # noqa: SIM115 - py-spy's stderr, for its lifetime
            )
        try:
            t_done = proc.wait_consumed(n, args.timeout)
            drain_s = t_done - proc.started
            time.sleep(2)
            live = sb.LiveProducer(
                bootstrap,
                topics[system],
                live_rate,
                live_keys,
                args.grace,
                ooo,
                args.live_seconds,
                key_prefix="live-",
                linger_ms=1,
            )
            live.start()
            live.join()
            proc.wait_consumed(n + live.sent, 120)
            time.sleep(args.settle)
            rss = proc.peak_rss
            pss = proc.peak_pss
            breakdown = " + ".join(
                f"{kind}{'' if n == 1 else f' x{n}'} {r / 2**20:.0f}" for kind, (n, r) in proc.peak_breakdown.items()
            )
        finally:
            proc.stop()
            if spy is not None:
                try:
                    spy.wait(30)
                except subprocess.TimeoutExpired:
                    spy.terminate()
        r = measure(system, read_output(bootstrap, out_topic, system), n, live.start_ms, proc.timeline)
        r.update(
            records=n,
            keys=keys,
            live_rate=live_rate,
            live_keys=live_keys,
            drain_s=drain_s,
            peak_rss_mb=rss / 2**20,
            peak_pss_mb=pss / 2**20,
            peak_rss_by_process=breakdown,
            load=(load0 + os.getloadavg()[0]) / 2,
            live_sent=live.sent,
        )
        res[system] = r
        print(
            f"[{cell}] {system}: "
            + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
            flush=True,
        )
    return res


# ------------------------------------------------------------------------------------------------- report


def table(results, systems):
    lines = [
        "| cell | system | records/s | x KS | latency p50 ms | x KS | p99 ms | x KS | peak RSS MiB | x KS | "
        "drain s | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def ratio(r, ks, k):
        return f"{r[k] / ks[k]:.2f}" if k in r and ks and ks.get(k) else "-"

    def fmt(r, k, f="{:,.0f}"):
        return f.format(r[k]) if k in r else "-"

    for cell, res in results.items():
        ks = res.get("kstreams")
        for s in systems:
            if s not in res:
                continue
            r = res[s]
            lines.append(
                f"| {cell} | {s} | {fmt(r, 'rec_per_s')} | {ratio(r, ks, 'rec_per_s')} | "
                f"{fmt(r, 'p50_ms')} | {ratio(r, ks, 'p50_ms')} | {fmt(r, 'p99_ms')} | "
                f"{ratio(r, ks, 'p99_ms')} | {fmt(r, 'peak_rss_mb')} | {ratio(r, ks, 'peak_rss_mb')} | "
                f"{r['drain_s']:.0f} | {r['load']:.1f} |"
            )
    return "\n".join(lines)


def plots(results, systems, out_dir: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    cells = list(results)
    width = 0.8 / len(systems)
    made = []
    for name, keys, ylabel in (
        ("throughput", ("rec_per_s",), "records/s (log)"),
        ("latency", ("p50_ms", "p99_ms"), "end-to-end latency ms (log)"),
    ):
        fig, axes = plt.subplots(1, len(keys), figsize=(6.5 * len(keys), 4.2), squeeze=False)
        for ax, k in zip(axes[0], keys, strict=True):
            for i, s in enumerate(systems):
                vals = [results[c].get(s, {}).get(k, 0) or 0 for c in cells]
                ax.bar([j + i * width for j in range(len(cells))], vals, width, label=s)
            ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(cells))])
            ax.set_xticklabels(cells)
            ax.set_yscale("log")
            ax.set_ylabel(ylabel)
            ax.set_title(
                {
                    "rec_per_s": "sustained throughput (backlog)",
                    "p50_ms": "latency p50 (live)",
                    "p99_ms": "latency p99 (live)",
                }[k]
            )
            ax.grid(axis="y", alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle("cell = order-records per window; 2 shared vCPUs under load (see RESULTS.md)", fontsize=9)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    return made


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_spark":
        ap = argparse.ArgumentParser()
        for a in ("--system", "--bootstrap-servers", "--topic", "--out-topic", "--ckpt"):
            ap.add_argument(a, required=True)
        for a in ("--td", "--grace", "--batch", "--partitions", "--cores"):
            ap.add_argument(a, type=int, required=True)
        add_window_options(ap)
        ap.add_argument("--settings", default="", help="with_overrides() of the service's settings")
        ap.add_argument("--progress-out", default="", help="write every micro-batch's progress (JSON lines) here")
        ap.add_argument("--poll", action="store_true", help="read recentProgress every 0.25 s instead of a listener")
        return spark_child(ap.parse_args(sys.argv[2:]))

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000, help="backlog records of the 10-per-window cells")
    ap.add_argument(
        "--records-dense",
        type=int,
        default=10_000,
        help="backlog records of the 1,000-per-window cells (Kafka Streams does ~200 rec/s there)",
    )
    ap.add_argument("--cells", default="inorder-10,ooo-10,inorder-1000,ooo-1000")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--td", type=int, default=10_000)
    add_window_options(ap)
    ap.add_argument("--grace", type=int, default=2_000)
    ap.add_argument("--partitions", type=int, default=2, help="input/output partitions = KS threads = Spark tasks")
    ap.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    ap.add_argument("--batch", type=int, default=20_000, help="maxOffsetsPerTrigger of both Spark queries")
    ap.add_argument("--commit-ms", type=int, default=1000, help="Kafka Streams commit.interval.ms (cache flush)")
    ap.add_argument("--live-rate", type=float, default=1000.0, help="live records/s of the 10-per-window cells")
    ap.add_argument(
        "--live-rate-dense",
        type=float,
        default=100.0,
        help="live records/s of the 1,000-per-window cells (below Kafka Streams' capacity there)",
    )
    ap.add_argument("--live-seconds", type=float, default=20.0)
    ap.add_argument(
        "--service-settings",
        default="",
        help="the service's settings changed, name=value;... (spark.* names go to spark_conf; see with_overrides)",
    )
    ap.add_argument("--settle", type=float, default=4.0, help="seconds to wait after the live input is consumed")
    ap.add_argument("--rotate", action="store_true", help="rotate the system order from cell to cell")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default="")
    ap.add_argument("--plots", default="")
    ap.add_argument("--json", default="", help="write the raw results here")
    ap.add_argument("--profile", default="", help="py-spy the service's process tree (raw collapsed stacks) here")
    ap.add_argument(
        "--progress-out",
        default="",
        help="PREFIX: each Spark system writes every micro-batch's progress (JSON lines) to PREFIX-SYSTEM-TOPIC.jsonl",
    )
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]

    import logging

    logging.basicConfig(level=logging.WARNING)
    from devtools.local_broker import LocalKafkaBroker

    if "kstreams" in systems:
        kstreams_classpath()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="sw-sbs-"))
    log_dir = work / "logs"
    log_dir.mkdir()
    print(f"work dir {work}; load {load_before[0]:.1f}", flush=True)
    broker = LocalKafkaBroker(0, data_dir=work / "kafka")
    broker.start()
    results = {}
    t0 = time.monotonic()
    try:
        for i, cell in enumerate(c for c in args.cells.split(",") if c):
            order = systems[i % len(systems) :] + systems[: i % len(systems)] if args.rotate else systems
            try:
                results[cell] = run_cell(args, broker.bootstrap_servers, cell, order, work, log_dir)
            except Exception as e:  # deliver the other cells
                print(f"[{cell}] FAILED: {e}", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        broker.stop()
    load_after = os.getloadavg()
    text = table(results, systems)
    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    windows = "" if args.window == "sliding" else f"{args.window} windows (size/advance/gap {window_bounds(args)} ms), "
    header = (
        f"\n### {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC - `{cmd}`\n\n"
        f"{args.records:,} (10/window) / {args.records_dense:,} (1,000/window) backlog records per system and cell, "
        f"{windows}td {args.td} ms, grace {args.grace} ms, "
        f"{args.partitions} partitions, Spark batch {args.batch:,}, KS commit {args.commit_ms} ms, live "
        f"{args.live_rate:.0f} / {args.live_rate_dense:.0f} rec/s for {args.live_seconds:.0f} s; "
        f"{os.cpu_count()} vCPUs, load average "
        f"(1 min) {load_before[0]:.1f} before / {load_after[0]:.1f} after, whole run "
        f"{(time.monotonic() - t0) / 60:.1f} min\n\n"
    )
    print(header + text, flush=True)
    if args.plots:
        for p in plots(results, systems, Path(args.plots)):
            print("wrote", p)
    if args.out:
        with open(args.out, "a") as f:
            f.write(header + text + "\n")
    shutil.rmtree(work / "kafka", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
