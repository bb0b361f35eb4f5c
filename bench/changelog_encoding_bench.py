"""Changelog encoding on one core: per-record fastavro vs whole-column Avro vs JSON, side by side in one run.

    .venv/bin/python bench/changelog_encoding_bench.py [--rows 200000] [--repeat 3]

Encodes one micro-batch's changelog rows the way the service's workers get them from the window engine
(``flush_columns``: a key list, int64 columns, and int64 or float64 aggregate columns) with
``connectors.output.ChangelogEncoder.encode_columns`` for every key/value format pair, and, for Avro, also
row by row with fastavro's ``schemaless_writer`` (``ChangelogEncoder.key`` / ``.value``: the path every Avro
row took before ``connectors.avro_columns``, and still the fallback for columns that are not all int64 or all
float64). Prints microseconds of CPU per row (key + value; best of ``--repeat``), the bytes per row, and
each line's cost relative to JSON. Every line checks its bytes against the per-record encoders first.

With ``--produce`` it also starts a local broker (``devtools.local_broker``) and writes each format's rows
with the service's direct producer (``connectors.producer``, its default settings) both ways the service can:
one ``produce()`` call per row (``batch_produce=false``) and a block at a time through librdkafka's batch call
(``connectors.rdkafka_batch``, the default: each partition's rows as one call), plus the batch call with
librdkafka's partitioner run per row (``batch, per-row partitioner``: how the batch call worked before
``connectors.partitioner``), waiting for every acknowledgement, ``--repeat`` + 1 times each,
alternating (the best is shown): CPU per row of this process while producing (the Python calls and
librdkafka's threads) and of the broker's JVM (from ``/proc``), the costs that follow a row after it is encoded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.output import ChangelogEncoder, ChangelogSpec

AGGS = "count,sum:amount,max:amount,mean:amount"


def make_columns(n: int, keys: int, seed: int = 1) -> dict:
    """A batch shaped like the service bench's: 10,000 accounts, 60 s windows, epoch-ms timestamps."""
    rng = np.random.default_rng(seed)
    start = rng.integers(1_795_000_000_000, 1_795_000_600_000, n)
    count = rng.integers(1, 60, n)
    total = rng.integers(1, 60_000, n)
    return {
        "key": [f"acct-{k:05d}" for k in rng.integers(0, keys, n)],
        "start": start,
        "end": start + 60_000,
        "ts": start + rng.integers(0, 60_000, n),
        "count": count,
        "values": {
            "count": count,
            "sum_amount": total,
            "max_amount": rng.integers(1, 1000, n),
            "mean_amount": total / count,
        },
    }


def per_record(enc: ChangelogEncoder, cols: dict, emit_time: int) -> tuple[list[bytes], list[bytes]]:
    """The row-by-row encoders (fastavro ``schemaless_writer`` for Avro)."""
    names = list(cols["values"])
    values = [cols["values"][n].tolist() for n in names]
    keys, out = [], []
    for i, (k, s, e, t, c) in enumerate(
        zip(
            cols["key"],
            cols["start"].tolist(),
            cols["end"].tolist(),
            cols["ts"].tolist(),
            cols["count"].tolist(),
            strict=True,
        )
    ):
        keys.append(enc.key(k, s, e))
        out.append(enc.value(k, s, e, {n: v[i] for n, v in zip(names, values, strict=True)}, t, c, emit_time))
    return keys, out


def best_cpu(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.process_time()
        result = fn()
        best = min(best, time.process_time() - t)
    return best, result


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux ``/proc``)."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sink:
    """A local broker, one topic and the service's direct producer each way of :attr:`WAYS` (``--produce``)."""

    WAYS = ("produce()", "batch", "batch, per-row partitioner")

    def __init__(self) -> None:
        import tempfile

        from connectors.admin import TopicSpec, ensure_topics
        from connectors.producer import OutputProducer, producer_config
        from devtools.local_broker import LocalKafkaBroker

        self._dir = tempfile.TemporaryDirectory(prefix="encoding-bench-")
        self.broker = LocalKafkaBroker(0, data_dir=Path(self._dir.name) / "kafka").start()
        ensure_topics({"bootstrap.servers": self.broker.bootstrap_servers}, [TopicSpec("changelog", 4)])
        config = producer_config(self.broker.bootstrap_servers)
        self.producers = {
            "produce()": OutputProducer(config, batches=False),
            "batch": OutputProducer(config),
            "batch, per-row partitioner": OutputProducer(config),
        }
        for p in self.producers.values():
            p.send_rows("changelog", [b"warm-up"], [b"warm-up"])
            p.wait()
        self.producers["batch, per-row partitioner"]._batches._own_partitions = False

    def costs(self, way: str, keys: list[bytes], values: list[bytes]) -> tuple[float, float]:
        """CPU seconds of this process and of the broker to produce the rows and have them acknowledged."""
        p = self.producers[way]
        broker_pid = self.broker.pid
        b0, c0 = cpu_seconds(broker_pid), time.process_time()
        p.send_rows("changelog", keys, values)
        p.wait()
        c1 = time.process_time()
        time.sleep(1.0)  # the broker's request threads finish after the last acknowledgement
        return c1 - c0, cpu_seconds(broker_pid) - b0

    def best(self, keys: list[bytes], values: list[bytes], repeat: int) -> dict[str, tuple[float, float]]:
        """Per way, the least (process, broker) CPU seconds of ``repeat`` runs, the ways alternating."""
        runs: dict[str, list[tuple[float, float]]] = {w: [] for w in self.WAYS}
        for _ in range(repeat):
            for w in self.WAYS:
                runs[w].append(self.costs(w, keys, values))
        return {w: (min(c for c, _b in r), min(b for _c, b in r)) for w, r in runs.items()}

    def close(self) -> None:
        for p in self.producers.values():
            p.close()
        self.broker.stop()
        self._dir.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000, help="changelog rows per batch")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per line (the best is shown)")
    ap.add_argument("--produce", action="store_true", help="also produce each format's rows to a local broker")
    args = ap.parse_args()
    sink = Sink() if args.produce else None
    cols = make_columns(args.rows, args.keys)
    emit_time = 1_795_000_700_000
    lines = [
        ("json / json", ChangelogSpec("json", "json", AGGS), False),
        ("avro / avro, whole columns", ChangelogSpec("avro", "avro", AGGS, 1, 2), False),
        ("avro / avro, fastavro per record", ChangelogSpec("avro", "avro", AGGS, 1, 2), True),
        ("windowed / avro, whole columns", ChangelogSpec("windowed", "avro", AGGS, 1, 2), False),
        ("windowed / avro, fastavro per record", ChangelogSpec("windowed", "avro", AGGS, 1, 2), True),
    ]
    print(
        f"{args.rows:,} changelog rows, {args.keys:,} keys, aggregations {AGGS}; CPU us per row, best of "
        f"{args.repeat}\n"
    )
    header = f"{'key / value format':<38} {'us/row':>7} {'vs json':>8} {'key B':>6} {'value B':>8}"
    if sink:
        header += "".join(f" {w + ' us/row':>16} {'broker us/row':>13}" for w in sink.WAYS)
    print(header)
    print("-" * len(header))
    json_cost = None
    sample = {k: (v[:200] if k != "values" else {n: c[:200] for n, c in v.items()}) for k, v in cols.items()}
    for label, spec, row_by_row in lines:
        enc = ChangelogEncoder(spec)
        assert enc.encode_columns(sample, emit_time) == per_record(enc, sample, emit_time), label
        if row_by_row:
            cpu, (keys, values) = best_cpu(lambda enc=enc: per_record(enc, cols, emit_time), args.repeat)
        else:
            cpu, (keys, values) = best_cpu(lambda enc=enc: enc.encode_columns(cols, emit_time), args.repeat)
        us = cpu / args.rows * 1e6
        json_cost = json_cost or us
        line = (
            f"{label:<38} {us:>7.2f} {us / json_cost:>7.2f}x {sum(map(len, keys)) / args.rows:>6.1f} "
            f"{sum(map(len, values)) / args.rows:>8.1f}"
        )
        if sink and not row_by_row:  # the per-record lines write the same bytes as the line above them
            # best of --repeat + 1: the first writes also pay the broker's warm-up (JIT, new log segments)
            for produce, broker in sink.best(keys, values, args.repeat + 1).values():
                line += f" {produce / args.rows * 1e6:>16.2f} {broker / args.rows * 1e6:>13.2f}"
        print(line, flush=True)
    if sink:
        sink.close()


if __name__ == "__main__":
    main()
