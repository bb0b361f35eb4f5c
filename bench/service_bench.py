"""End-to-end benchmark of the service on this machine, next to Spark's built-in hopping-window aggregation.

    .venv/bin/python bench/service_bench.py [--records 300000] [--keys 10000] [--event-rate 2000] ...

1. starts a local Kafka broker (or uses ``--bootstrap-servers``) and produces a backlog of JSON payments:
   ``--keys`` accounts, event time advancing at ``--event-rate`` events per second of event time (so each record
   falls into ``60 * event_rate / keys`` sliding windows of its key), ``--ooo`` of them out of order inside the
   grace period;
2. **throughput** - drains the backlog with (a) the service's query (``service.spark.job``, emit update, JSON) and
   (b) Spark's built-in ``groupBy(window(ts, 60 s, --hop), key).agg(count, sum, max)`` with a watermark, both
   writing to Kafka, both with ``maxOffsetsPerTrigger = --batch``; reports rows/s over the micro-batches after the
   first (steady state) and overall. This VM's speed drifts by up to 2x within minutes, so with ``--passes 2``
   (the default) every query drains the backlog twice, in mirrored order (service, built-in, built-in, service:
   a linear drift hits both alike), and the figures compared are the two passes together (rows over seconds).
   ``--warmup N`` first runs every query once over a separate topic of N records, not counted: the queries share
   one JVM, whose JIT compiler takes ~0.4 of a core for the first minute or so, so without it the first pass
   (the service's) runs on the coldest JVM and pays most of the warm-up;
3. **latency** - produces live at ``--latency-rate`` events/s with event time = wall clock (``--ooo`` of them
   shifted back by up to the grace period, as in the backlog) and ``"sent"`` = the producer's wall clock in the
   value, and runs each query with ``--trigger``, aggregating ``max(sent)`` as well. Two latencies per changelog
   record, both from its Kafka timestamp (set by the producer: Spark's or the worker's):

   - **from send** = minus ``max(sent)`` of its window: newest record of the window handed to the producer ->
     update including it written (the system's latency; what bench/side_by_side.py reports);
   - **from event time** = minus the largest event time in its window (the brief's "record timestamp to
     output"). An out-of-order record carries an event time up to ``--grace`` in the past, and every window
     it updates is written again with the largest event time of its *other* records, which may have arrived
     seconds before (the window's update is no older than the record that caused it: the from-send figure).
     A sliding-window query rewrites every window an out-of-order record falls into (~70 at 70 records per
     window), a 60 s / 10 s hopping one 6, so this percentile measures the input's disorder times the window
     overlap as much as the system. The table also gives it for an *instant* system, one that wrote each update
     the moment its newest record was sent (``max(sent) - max_timestamp``; :func:`latency_figures`): the floor
     that the input's disorder alone sets under the from-event-time p99 of a query writing the same updates.

   Both are taken over the updates of windows whose newest record was sent at least 15 s after the live
   producer started. The from-send p99 is also given over the updates sent at least ``--td`` after the start
   ("windows full"; ``-`` when the live phase is shorter). By then every window holds live records only, so
   each batch rewrites all of a key's windows: the steady state. The first figure mixes that with the phase
   in which the windows fill.

Prints a Markdown table (``--out FILE`` appends it).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def produce_waiting(p, topic, key, value, ts):
    """``p.produce`` that waits for room when the producer's local queue is full (backlog writers)."""
    while True:
        try:
            p.produce(topic, key=key, value=value, timestamp=ts)
            return
        except BufferError:
            p.poll(0.1)


def produce_backlog(bootstrap, topic, n, keys, event_rate, grace_ms, ooo, seed=1, base=None):
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
        }
    )
    rnd = random.Random(seed)
    base = base or int(time.time() * 1000) - int(n / event_rate * 1000) - 600_000
    for i in range(n):
        ts = base + int(i * 1000 / event_rate)
        if rnd.random() < ooo:
            ts -= rnd.randint(1, grace_ms)
        k = f"acct-{rnd.randrange(keys):05d}"
        produce_waiting(p, topic, k.encode(), b'{"amount": %d}' % rnd.randint(1, 1000), ts)
        if i % 20000 == 0:
            p.poll(0)
    p.flush(120)


class LiveProducer(threading.Thread):
    """Produces ``rate`` records/s for ``seconds`` (or until :meth:`finish`): JSON ``{"amount", "sent"}`` (``sent``
    = the wall clock in ms), event time = the wall clock, ``ooo`` of them shifted back by up to ``grace_ms`` (also
    bench/side_by_side.py's live phase). With ``event_base_ms``, the i-th record's event time is ``event_base_ms +
    i * 1000 / event_rate`` instead: the continuation of a :func:`produce_backlog` that ended there, so the windows
    the backlog filled stay full (bench/recovery_bench.py)."""

    TICK_S = 0.005

    def __init__(
        self,
        bootstrap,
        topic,
        rate,
        keys,
        grace_ms,
        ooo,
        seconds,
        key_prefix="acct-",
        linger_ms=5,
        event_base_ms=None,
        event_rate=0.0,
    ):
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms})
        self.topic, self.rate, self.keys, self.grace, self.ooo, self.seconds = topic, rate, keys, grace_ms, ooo, seconds
        self.key_prefix = key_prefix
        self.event_base_ms, self.event_rate = event_base_ms, event_rate
        self.sent = 0
        self.start_ms = int(time.time() * 1000)  # no record is sent before (reset when the thread starts)
        self._finish = threading.Event()

    def finish(self):
        """Stop producing at the next tick (the thread flushes and ends)."""
        self._finish.set()

    def event_time(self, i: int, now_ms: int) -> int:
        """The event time of the ``i``-th record, produced at ``now_ms`` (before the out-of-order shift)."""
        if self.event_base_ms is None:
            return now_ms
        return self.event_base_ms + int(i * 1000 / self.event_rate)

    def run(self):
        # every TICK_S, everything due by then: one wake-up per tick, not one sleep per record (at 10,000/s
        # that took ~20% of a core of the 2 the queries under test run on); each record still carries the ms
        # it was produced in ("sent") and its event time from that
        rnd = random.Random(2)
        t0 = time.monotonic()
        self.start_ms = int(time.time() * 1000)
        while (elapsed := time.monotonic() - t0) < self.seconds and not self._finish.is_set():
            due = int(elapsed * self.rate) + 1 - self.sent
            now = int(time.time() * 1000)
            for j in range(due):
                t = self.event_time(self.sent + j, now)
                ts = t - rnd.randint(1, self.grace) if rnd.random() < self.ooo else t
                k = f"{self.key_prefix}{rnd.randrange(self.keys):05d}".encode()
                self.p.produce(
                    self.topic, key=k, value=b'{"amount": %d, "sent": %d}' % (rnd.randint(1, 1000), now), timestamp=ts
                )
            self.sent += max(due, 0)
            self.p.poll(0)
            time.sleep(self.TICK_S)
        self.p.flush(30)
        self.p.close()  # else it outlives the broker (the object stays referenced) and logs "Connection refused"


def builtin_query(
    spark,
    bootstrap,
    topic,
    out_topic,
    ckpt,
    td_ms,
    hop_ms,
    grace_ms,
    batch,
    trigger_ms,
    with_sent=False,
    output_mode="update",
):
    """The built-in hopping-window query; ``with_sent`` also aggregates ``max(sent)`` (the latency runs);
    ``output_mode`` ``append``: each window once, when the watermark closes it (the service's ``emit=close``)."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.shuffle.partitions", spark.sparkContext.getConf().get("spark.sql.shuffle.partitions"))

    from service.spark_kafka_options import SOURCE_DEFAULTS

    # the Kafka source options the service uses (same consumer behaviour for both queries)
    src = (
        spark.readStream.format("kafka")
        .options(**SOURCE_DEFAULTS)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if batch:
        src = src.option("maxOffsetsPerTrigger", str(batch))
    value = F.col("value").cast("string")
    df = src.load().select(
        F.col("key").cast("string").alias("k"),
        F.col("timestamp").alias("ts"),
        F.get_json_object(value, "$.amount").cast("long").alias("amount"),
        *([F.get_json_object(value, "$.sent").cast("long").alias("sent")] if with_sent else []),
    )
    aggs = [
        F.count("*").alias("count"),
        F.sum("amount").alias("sum_amount"),
        F.max("amount").alias("max_amount"),
        F.max("ts").alias("max_ts"),
    ] + ([F.max("sent").alias("max_sent")] if with_sent else [])
    agg = (
        df.withWatermark("ts", f"{grace_ms} milliseconds")
        .groupBy(F.window("ts", f"{td_ms} milliseconds", f"{hop_ms} milliseconds"), "k")
        .agg(*aggs)
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
                "max_amount",
                *(["max_sent"] if with_sent else []),
                F.unix_millis("max_ts").alias("max_timestamp"),
            )
        )
        .cast("binary")
        .alias("value"),
    )
    w = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out_topic)
        .option("checkpointLocation", ckpt)
        .outputMode(output_mode)
    )
    w = w.trigger(processingTime=f"{trigger_ms} milliseconds") if trigger_ms else w
    return w.start()


def service_query(spark, settings):
    from service.driver import prepare
    from service.spark.job import start_query

    # the session's shuffle partitions are the built-in's; the service's state partitions are its own setting
    spark.conf.set("spark.sql.shuffle.partitions", str(settings.state_partitions))
    return start_query(spark, settings, prepare(settings))


def collect_progress(query, seen: dict) -> list:
    """Add ``query``'s progress reports to ``seen`` (by batch id); the reports with input rows so far, in order.
    ``recentProgress`` holds only the last ``spark.sql.streaming.numRecentProgressUpdates`` (100) reports, so a
    run of more micro-batches than that is collected as it goes (at least once per 100 batches)."""
    for p in query.recentProgress:
        seen[p.batchId] = p
    return [seen[b] for b in sorted(seen) if seen[b].numInputRows]


def drain(query, total, timeout, poll_s=1.0):
    """Wait until ``query`` has read ``total`` rows (or ``timeout`` s), stop it; its figures and every micro-batch's
    progress report (:func:`collect_progress`: summing only the reports ``recentProgress`` still held never
    reached ``total`` in a pass of more than 100 micro-batches, and the pass ran into the timeout)."""
    seen: dict = {}
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if sum(p.numInputRows for p in collect_progress(query, seen)) >= total:
            break
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        time.sleep(poll_s)
    progs = collect_progress(query, seen)
    query.stop()
    return {**summarize([progs]), "progress": progs}


def summarize(passes: list[list]) -> dict:
    """Throughput figures of one or more passes of a query (each a list of micro-batch progress reports):
    rows over seconds of all passes together (steady: each pass without its first micro-batch), median and
    max over their steady batches, the first batch of the first pass."""
    durs = [[p.durationMs.get("triggerExecution", 0) / 1000 for p in ps] for ps in passes]
    rows = sum(p.numInputRows for ps in passes for p in ps)
    steady_rows = sum(p.numInputRows for ps in passes for p in ps[1:])
    steady_durs = [d for ds in durs for d in ds[1:]]
    all_s, steady_s = sum(map(sum, durs)), sum(steady_durs)
    return {
        "batches": sum(map(len, passes)),
        "rows": rows,
        "first_batch_s": durs[0][0] if durs and durs[0] else None,
        "steady_rows_per_s": steady_rows / steady_s if steady_s else None,
        "overall_rows_per_s": rows / all_s if all_s else None,
        "batch_s_p50": statistics.median(steady_durs) if steady_durs else None,
        "batch_s_max": max(steady_durs) if steady_durs else None,
    }


def _changelog_rows(progs) -> int:
    """Window updates the service wrote in these micro-batches (its observed counter; 0 for the built-in)."""
    from service.spark.job import OBSERVATION, observed_values

    return sum(
        observed_values(o)["changelog"] for p in progs if (o := (p.observedMetrics or {}).get(OBSERVATION)) is not None
    )


def print_batches(progs):
    """One line per micro-batch: Spark's duration parts and, for the service, its per-batch counters (task
    times are summed over the batch's tasks)."""
    from service.spark.job import OBSERVATION, observed_values

    for p in progs:
        d = p.durationMs
        line = f"  batch {p.batchId}: {p.numInputRows} rows {d.get('triggerExecution', 0) / 1000:.2f}s " + " ".join(
            f"{k}={v / 1000:.2f}" for k, v in sorted(d.items()) if k != "triggerExecution" and v >= 20
        )
        o = (p.observedMetrics or {}).get(OBSERVATION)
        if o is not None:
            o = observed_values(o)
            line += (
                " | out %(changelog)d python %(process_ns)s read %(state_read_ns)s write %(state_write_ns)s "  # noqa: UP031
                "produce %(produce_ns)s hit %(state_cache_hit)d/%(task_batches)d forwarded %(task_forwarded)d "
                "buckets loaded %(state_buckets_loaded)d written %(state_buckets_written)d"
                % {
                    **o,
                    **{
                        k: f"{o[k] / 1e9:.2f}s" for k in ("process_ns", "state_read_ns", "state_write_ns", "produce_ns")
                    },
                }
            )
        print(line, flush=True)


def read_to_end(bootstrap, topic, chunk=5000):
    """Every message of ``topic`` from the beginning to the end offsets it has now, per partition in order."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        md = c.list_topics(topic, timeout=30).topics[topic]
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in md.partitions}
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        pos = dict.fromkeys(ends, 0)
        idle = 0
        # a transactional topic (processing_guarantee=exactly_once) ends with a commit marker, which is never
        # delivered: the topic is complete once nothing more comes (its writer has stopped)
        while any(pos[p] < ends[p] for p in ends) and idle < 3:
            msgs = c.consume(chunk, timeout=2)
            idle = 0 if msgs else idle + 1
            for m in msgs:
                if m.error():
                    continue
                pos[m.partition()] = m.offset() + 1
                yield m
    finally:
        c.close()


def _percentiles(lat, prefix):
    lat.sort()
    if not lat:
        return {}
    return {
        f"{prefix}p50_ms": lat[len(lat) // 2],
        f"{prefix}p99_ms": lat[int(len(lat) * 0.99)],
        f"{prefix}max_ms": lat[-1],
    }


def avro_values(registry_url):
    """A decoder of changelog values in the Schema Registry wire format (``SchemaRegistry`` caches the writer
    schemas)."""
    from connectors.avro import decode_body, split_wire
    from connectors.schema_registry import SchemaRegistry

    registry = SchemaRegistry(registry_url)

    def decode(data):
        schema_id, body = split_wire(data)
        return decode_body(body, registry.writer_schema(schema_id))

    return decode


def latencies(bootstrap, topic, since_ms, full_since_ms, decode=json.loads):
    """Latency percentiles of the changelog records of ``topic`` (see :func:`latency_figures`).
    ``decode``: the values' decoder (JSON, or :func:`avro_values` for the service's Avro changelog)."""
    return latency_figures(
        ((m.timestamp()[1], decode(m.value())) for m in read_to_end(bootstrap, topic)), since_ms, full_since_ms
    )


def latency_figures(records, since_ms, full_since_ms):
    """Percentiles over ``(Kafka timestamp, decoded value)`` changelog records whose window's newest record was
    sent at or after ``since_ms``: from send (``max(sent)``), from event time (``max_timestamp``), see the module
    docstring; from send over those sent at or after ``full_since_ms`` (prefix ``full_``); and the from-event-time
    figure of an *instant* system, one that wrote every update the moment its newest record was sent
    (``max(sent) - max_timestamp``, prefix ``instant_``): the input's own disorder. Per update, from event time
    = instant + from send, and from send >= 0, so no query writing the same updates has an ``event_`` percentile
    below the ``instant_`` one::

        largest event time in the window   newest record sent   update written
        |------------- instant_ -----------|---- from send -----|
        |----------------- event_ (from event time) ------------|
    """
    by_send, by_event, full, instant = [], [], [], []
    for at, v in records:
        sent = v.get("max_sent", (v.get("aggregates") or {}).get("max_sent"))
        if sent is None or sent < since_ms:
            continue
        by_send.append(at - sent)
        by_event.append(at - v["max_timestamp"])
        instant.append(sent - v["max_timestamp"])
        if sent >= full_since_ms:
            full.append(at - sent)
    return {
        "n": len(by_send),
        **_percentiles(by_send, ""),
        **_percentiles(by_event, "event_"),
        **_percentiles(full, "full_"),
        **_percentiles(instant, "instant_"),
    }


def _pairs(text: str) -> dict[str, str]:
    """``k=v,k=v`` as a dict (the --broker-config and --service-settings flags)."""
    return dict(kv.split("=", 1) for kv in text.split(",") if kv.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", default="")
    ap.add_argument(
        "--broker-config",
        default="",
        help="extra properties of the local broker, comma-separated k=v (e.g. log.cleaner.enable=false)",
    )
    ap.add_argument(
        "--service-settings",
        default="",
        help="extra settings of the service, comma-separated name=value (e.g. task_owners=false)",
    )
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--event-rate", type=float, default=2000.0, help="events per second of event time")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--td", type=int, default=60_000)
    ap.add_argument("--hop", type=int, default=1_000, help="hop of the built-in hopping windows (ms)")
    ap.add_argument("--grace", type=int, default=10_000)
    ap.add_argument("--ooo", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=50_000, help="maxOffsetsPerTrigger for the throughput runs")
    ap.add_argument(
        "--state-partitions",
        type=int,
        default=2,
        help="shuffle partitions of the built-in query, "
        "and the service's state partitions unless --service-state-partitions is given",
    )
    ap.add_argument("--service-state-partitions", type=int, default=0, help="the service's state_partitions")
    ap.add_argument("--state-buckets", type=int, default=0, help="the service's state_buckets (0: its default)")
    ap.add_argument(
        "--latency-rate",
        default="0",
        help="events/s of the latency runs; 'half': half the slowest service's steady rate of the "
        "throughput phase (the brief's 'half the maximum rate'); 0: skip the latency runs",
    )
    ap.add_argument("--latency-seconds", type=float, default=90.0)
    ap.add_argument("--trigger", type=int, default=0, help="trigger interval (ms) of the latency runs")
    ap.add_argument("--skip-builtin", action="store_true")
    ap.add_argument("--skip-service", action="store_true")
    ap.add_argument(
        "--sinks",
        default="spark",
        help="the service's sink(s), comma-separated: spark, direct (each one a row of the same run)",
    )
    ap.add_argument(
        "--guarantees",
        default="",
        help="the service's processing_guarantee(s), comma-separated: "
        "at_least_once, exactly_once (both: the cost of exactly_once side by side; default: the "
        "settings' default)",
    )
    ap.add_argument(
        "--changelog-format",
        default="json",
        choices=("json", "avro"),
        help="the service's changelog key and value format (the built-in writes JSON); avro registers the "
        "schemas in an in-process Schema Registry double (tests/service/schema_registry_double.py: "
        "no registry server can be installed on this machine)",
    )
    ap.add_argument(
        "--builtin-output-mode",
        default="update",
        choices=("update", "append"),
        help="the built-in's output mode; append (final windows only) is the counterpart of the "
        "service's emit=close (--service-settings emit=close)",
    )
    ap.add_argument(
        "--warmup",
        type=int,
        default=0,
        metavar="N",
        help="first run every query once over a separate topic of N records, not counted (the JVM's "
        "JIT warm-up and the Python workers' start-up)",
    )
    ap.add_argument(
        "--passes",
        type=int,
        default=2,
        choices=(1, 2),
        help="throughput passes per query; 2: mirrored order (A B B A) against the VM's speed drift",
    )
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import logging

    logging.basicConfig(level=logging.WARNING)
    from connectors.admin import TopicSpec, ensure_topics
    from service.settings import Settings
    from service.spark.job import build_spark

    load_before = f"{os.getloadavg()[0]:.1f}"
    # killed (``timeout``, ``kill``): exit through atexit, which stops the local broker (its own hook) and removes
    # the work folder (gigabytes of topic data after a long run) - a plain SIGTERM ran neither
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    work = Path(tempfile.mkdtemp(prefix="sw-bench-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    broker = None
    bootstrap = args.bootstrap_servers
    if not bootstrap:
        from devtools.local_broker import LocalKafkaBroker

        broker = LocalKafkaBroker(0, data_dir=work / "kafka", extra_config=_pairs(args.broker_config))
        broker.start()
        bootstrap = broker.bootstrap_servers
    registry_url, decode, registry = "http://localhost:8081", json.loads, None
    if args.changelog_format == "avro":
        from tests.service.schema_registry_double import SchemaRegistryDouble

        registry = SchemaRegistryDouble().start()
        registry_url = registry.url
        decode = avro_values(registry_url)
    run = f"b{int(time.time())}"
    topic = f"{run}-in"
    ensure_topics({"bootstrap.servers": bootstrap}, [TopicSpec(topic, args.partitions, config={"retention.ms": "-1"})])
    t = time.monotonic()
    produce_backlog(bootstrap, topic, args.records, args.keys, args.event_rate, args.grace, args.ooo)
    print(f"produced {args.records} records in {time.monotonic() - t:.1f}s", flush=True)

    def settings(name, **kw):
        base = {
            "bootstrap_servers": bootstrap,
            "input_topics": topic,
            "changelog_topic": f"{run}-{name}-out",
            "late_topic": f"{run}-{name}-late",
            "dead_letter_topic": f"{run}-{name}-dlq",
            "changelog_format": args.changelog_format,
            "changelog_key_format": args.changelog_format,
            "schema_registry_url": registry_url,
            "aggregations": "count,sum:amount,max:amount",
            "time_difference": args.td,
            "grace": args.grace,
            "emit": "update",
            "checkpoint_dir": str(work / f"ck-{name}"),
            # its own consumer group and transactional ids per pass: exactly_once skips the output of every batch
            # that the group's committed offsets already cover, so a pass sharing the group of an earlier pass over
            # the same topic wrote nothing (the 2026-11-25 run's second passes)
            "app_name": f"{run}-{name}",
            "metrics_port": 0,
            "state_partitions": args.state_partitions,
            "trigger_interval": 0,
            "spark_master": "local[*]",
            "max_offsets_per_trigger": args.batch,
        }
        if args.state_buckets:
            base["state_buckets"] = args.state_buckets
        if args.service_state_partitions:
            base["state_partitions"] = args.service_state_partitions
        base.update(_pairs(args.service_settings))
        base.update(kw)
        return Settings(**base)

    sinks = [x.strip() for x in args.sinks.split(",") if x.strip()]
    guarantees = [x.strip() for x in args.guarantees.split(",") if x.strip()] or [Settings().processing_guarantee]
    # name -> the service settings that set it apart
    services = (
        {}
        if args.skip_service
        else {
            "service" + (f", sink={sink}" if len(sinks) > 1 else "") + (f", {g}" if len(guarantees) > 1 else ""): {
                "sink": sink,
                "processing_guarantee": g,
            }
            for sink in sinks
            for g in guarantees
        }
    )

    def slug(name: str) -> str:
        return "".join(c for c in name.split(",", 1)[-1] if c.isalnum()) or "svc"

    spark = build_spark(settings("svc"))
    spark.sparkContext.setLogLevel("ERROR")

    def throughput(name: str, n: int | str, source: str = topic, records: int = args.records) -> dict:
        """One pass of one query over the whole backlog of ``source`` (fresh checkpoint and output topic)."""
        if name == "builtin":
            q = builtin_query(
                spark,
                bootstrap,
                source,
                f"{run}-builtin-out{n}",
                str(work / f"ck-builtin{n}"),
                args.td,
                args.hop,
                args.grace,
                args.batch,
                0,
                output_mode=args.builtin_output_mode,
            )
        else:
            q = service_query(spark, settings(f"svc-{slug(name)}{n}", input_topics=source, **services[name]))
        r = drain(q, records, args.timeout)
        if name != "builtin" and not _changelog_rows(r["progress"]):
            raise RuntimeError(f"{name} (pass {n}) wrote no window updates: its figures would be invalid")
        print(f"{name} (pass {n}):", {k: v for k, v in r.items() if k != "progress"}, flush=True)
        print_batches(r["progress"])
        return r

    order = list(services) + ([] if args.skip_builtin else ["builtin"])
    if args.warmup:
        warm = f"{run}-warmup"
        ensure_topics({"bootstrap.servers": bootstrap}, [TopicSpec(warm, args.partitions)])
        produce_backlog(bootstrap, warm, args.warmup, args.keys, args.event_rate, args.grace, args.ooo, seed=2)
        for name in order:
            throughput(name, "warmup", warm, args.warmup)
    passes: dict[str, list[dict]] = {name: [] for name in order}
    for n, name in enumerate(order + order[::-1] if args.passes == 2 else order):
        passes[name].append(throughput(name, 1 + n // len(order)))
    results = {name: summarize([r["progress"] for r in runs]) for name, runs in passes.items()}

    lat = {}
    if args.latency_rate == "half":
        steady = [results[n]["steady_rows_per_s"] for n in services if results[n].get("steady_rows_per_s")]
        latency_rate = min(steady) / 2 if steady else 0.0
        print(f"latency rate: half of the service's steady rate = {latency_rate:.0f}/s", flush=True)
    else:
        latency_rate = float(args.latency_rate)
    if latency_rate:
        for i, name in enumerate(order):
            ltopic = f"{run}-live-{i}"
            ensure_topics({"bootstrap.servers": bootstrap}, [TopicSpec(ltopic, args.partitions)])
            out_topic = f"{run}-live-{i}-out"
            if name in services:
                s = settings(
                    f"live-{i}",
                    input_topics=ltopic,
                    changelog_topic=out_topic,
                    max_offsets_per_trigger=0,
                    trigger_interval=args.trigger,
                    checkpoint_dir=str(work / f"ck-live-{i}"),
                    aggregations="count,sum:amount,max:amount,max:sent",
                    **services[name],
                )
                q = service_query(spark, s)
            else:
                ensure_topics({"bootstrap.servers": bootstrap}, [TopicSpec(out_topic, args.partitions)])
                q = builtin_query(
                    spark,
                    bootstrap,
                    ltopic,
                    out_topic,
                    str(work / "ck-live-builtin"),
                    args.td,
                    args.hop,
                    args.grace,
                    0,
                    args.trigger,
                    with_sent=True,
                    output_mode=args.builtin_output_mode,
                )
            # let the first (compile + worker start) micro-batch pass before measuring
            while not q.recentProgress:
                time.sleep(0.5)
            prod = LiveProducer(bootstrap, ltopic, latency_rate, args.keys, args.grace, args.ooo, args.latency_seconds)
            prod.start()
            seen: dict = {}
            while prod.is_alive():
                collect_progress(q, seen)
                prod.join(timeout=5)
            time.sleep(10)
            progs = collect_progress(q, seen)
            q.stop()
            print_batches(progs)
            lat[name] = latencies(
                bootstrap,
                out_topic,
                prod.start_ms + 15_000,
                prod.start_ms + args.td,
                decode if name in services else json.loads,
            )
            lat[name]["rate"] = latency_rate
            lat[name]["batch_s_p50"] = (
                statistics.median([p.durationMs.get("triggerExecution", 0) / 1000 for p in progs]) if progs else None
            )
            print(f"latency {name}:", lat[name], flush=True)
    spark.stop()
    if broker is not None:
        broker.stop()
    if registry is not None:
        registry.stop()
    shutil.rmtree(work, ignore_errors=True)

    lines = [
        f"\n### {time.strftime('%Y-%m-%d %H:%M')} - {args.records} records, {args.keys} keys, event rate "
        f"{args.event_rate:.0f}/s, td {args.td} ms, grace {args.grace} ms, {args.ooo:.0%} out of order, "
        f"{args.partitions} input partitions, batch {args.batch}, hop {args.hop} ms (built-in), "
        f"service changelog {args.changelog_format}, built-in output mode {args.builtin_output_mode}, "
        f"{os.cpu_count()} cores, load average {load_before} before / {os.getloadavg()[0]:.1f} after\n",
        f"{args.passes} throughput pass(es) per query"
        + (" in mirrored order" if args.passes == 2 else "")
        + (f", after a warm-up pass of each over {args.warmup} other records" if args.warmup else "")
        + "\n",
        "| query | steady rows/s (each pass) | overall rows/s | first batch s | batch s p50 | batch s max | batches |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        each = " / ".join(f"{x['steady_rows_per_s'] or 0:.0f}" for x in passes[name])
        lines.append(
            f"| {name} | {r['steady_rows_per_s'] or 0:.0f} ({each}) | {r['overall_rows_per_s'] or 0:.0f} | "
            f"{r['first_batch_s'] or 0:.1f} | {r['batch_s_p50'] or 0:.2f} | {r['batch_s_max'] or 0:.2f} | "
            f"{r['batches']} |"
        )
    if "builtin" in results:
        for name in services:
            a, b = results[name]["steady_rows_per_s"], results["builtin"]["steady_rows_per_s"]
            if a and b:
                lines.append(f"\n{name} / built-in steady rows/s: {a / b:.2f} (passes together)")
    eos = [n for n in services if services[n]["processing_guarantee"] == "exactly_once"]
    for name in eos:  # the cost of exactly_once: against the same sink with at_least_once
        alo = next(
            (n for n in services if services[n] == {**services[name], "processing_guarantee": "at_least_once"}), None
        )
        if alo is None:
            continue
        a, b = results[name]["steady_rows_per_s"], results[alo]["steady_rows_per_s"]
        if a and b:
            lines.append(f"\n{name} / {alo} steady rows/s: {a / b:.2f} (passes together)")
        if (
            name in lat
            and alo in lat
            and None
            not in (lat[name].get("p99_ms"), lat[alo].get("p99_ms"), lat[name].get("p50_ms"), lat[alo].get("p50_ms"))
        ):
            lines.append(
                f"{name} - {alo} latency from send: p50 {lat[name]['p50_ms'] - lat[alo]['p50_ms']:+.0f} "
                f"ms, p99 {lat[name]['p99_ms'] - lat[alo]['p99_ms']:+.0f} ms"
            )
    if lat:
        lines += [
            "",
            "| query | live rate/s | from send p50 ms | p99 ms | max ms | from event time p50 ms | p99 ms "
            "| max ms | instant system's from event time p99 ms | from send p99 ms, windows full "
            "| batch s p50 |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, r in lat.items():
            lines.append(
                f"| {name} | {r.get('rate', 0):.0f} | {r.get('p50_ms')} | {r.get('p99_ms')} | "
                f"{r.get('max_ms')} | {r.get('event_p50_ms')} | {r.get('event_p99_ms')} | "
                f"{r.get('event_max_ms')} | {r.get('instant_p99_ms')} | {r.get('full_p99_ms', '-')} | "
                f"{r.get('batch_s_p50') or 0:.2f} |"
            )
    report(lines, args.out)
    return 0


def report(lines: list[str], out: str) -> None:
    """Print a bench's table; ``out``: also append it to that file."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
