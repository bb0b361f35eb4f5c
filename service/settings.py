"""The service's settings: one frozen object built from ``SLIDINGWINDOW_*`` environment variables and CLI flags.

Precedence: command-line flag > environment variable > default. Every setting has a flag ``--name-with-dashes``
and an environment variable ``SLIDINGWINDOW_NAME_IN_CAPS``; ``python -m service run --help`` lists them all with
their defaults. Invalid values raise :class:`SettingsError` naming the setting, its flag and its variable.
A removed setting (:data:`REMOVED_SETTINGS`) given as a flag raises :class:`SettingsError` saying so; as an
environment variable (often left over in a deployment) it logs a warning and is ignored.

Durations accept ``1500ms``, ``10s``, ``5m``, ``1h``, ``1d`` or a bare number of milliseconds.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from connectors.output import KEY_FORMATS, VALUE_FORMATS
from connectors.security import NO_SECRET, SASL_MECHANISMS, SECURITY_PROTOCOLS, KafkaSecurity, Secret, read_secret
from service.spark.task_cpus import local_cores
from windowstore.task_processors import WINDOW_TYPES

if TYPE_CHECKING:
    from windowstore import Aggregation, WindowDefinition

__all__ = [
    "Settings",
    "SettingsError",
    "SETTINGS",
    "REMOVED_SETTINGS",
    "ENV_PREFIX",
    "parse_duration_ms",
    "add_arguments",
    "from_args",
    "load",
    "join_negative_values",
]

ENV_PREFIX = "SLIDINGWINDOW_"

logger = logging.getLogger(__name__)

#: settings that no longer exist, with what replaces them: the flag fails, the environment variable warns
REMOVED_SETTINGS = {
    "state_log_share": "task_owners (on by default) is the one way Python workers share a task",
}

INPUT_FORMATS = ("json", "avro")
#: the changelog's value formats are those connectors.output writes (one definition, there)
OUTPUT_FORMATS = VALUE_FORMATS
EMIT_MODES = ("update", "every", "close")
#: the size settings each window type (:data:`windowstore.WINDOW_TYPES`) takes
WINDOW_SIZE_SETTINGS: dict[str, tuple[str, ...]] = {
    "sliding": ("time_difference",),
    "tumbling": ("window_size",),
    "hopping": ("window_size", "advance"),
    "session": ("gap",),
}
STARTING_OFFSETS = ("earliest", "latest")
SINKS = ("spark", "direct")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
PROCESSING_EXCEPTION_HANDLERS = ("continue", "fail")
PROCESSING_GUARANTEES = ("at_least_once", "exactly_once")


class SettingsError(ValueError):
    """An invalid setting; the message names it (``name``, its flag and environment variable)."""

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        flag = "--" + name.replace("_", "-")
        env = ENV_PREFIX + name.upper()
        super().__init__(f"invalid setting {name} ({flag} / {env}): {message}")


_DURATION_RE = re.compile(r"^\s*([-+]?)\s*(\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}


def parse_duration_ms(text: str | int) -> int:
    """``"10s"`` -> 10000; ``"1500"`` / ``"1500ms"`` -> 1500. Raises ValueError."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"must not be negative, got {text}")
        return text
    m = _DURATION_RE.match(str(text))
    if not m:
        raise ValueError(f"expected a duration such as 1500ms, 10s, 5m, 1h or a number of milliseconds, got {text!r}")
    unit = m.group(3).lower() if m.group(3) else None
    if m.group(1) == "-" and int(m.group(2)):
        raise ValueError(f"a duration must not be negative, got {str(text).strip()!r}")
    return int(m.group(2)) * _UNIT_MS[unit]


def _format_unset(ms: int) -> str:
    return _format_duration(ms) if ms else "unset"


def _format_duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _bool(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _int(minimum: int) -> Callable[[str | int], int]:
    def parse(text: str | int) -> int:
        try:
            v = int(str(text).strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
        if v < minimum:
            raise ValueError(f"must be at least {minimum}, got {v}")
        return v

    return parse


#: the largest ``state_cache_tasks`` accepted: beyond any deployment's number of input partitions per worker
MAX_CACHE_TASKS = 100_000


def _cache_tasks(text: str | int) -> int:
    v = _int(0)(text)
    if v == 0:
        raise ValueError("must be at least 1 (to keep no windows between micro-batches: state_cache=false)")
    if v > MAX_CACHE_TASKS:
        raise ValueError(f"must be at most {MAX_CACHE_TASKS} (tasks per Python worker), got {v}")
    return v


_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_SIZE_MIB = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}
#: the smallest driver heap accepted: Spark refuses to start below 450 MiB of system memory for the JVM
MIN_DRIVER_MEMORY_MIB = 512
MAX_DRIVER_MEMORY_MIB = 1024 * 1024


def _size_parts(text: str) -> tuple[int, str]:
    """A size as the settings write it (``512m``, ``2g``, a number of MiB): its number and unit (lower case)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"expected a size such as 512m, 2g or a number of MiB, got {text!r}")
    return int(m.group(1)), m.group(2).lower()


def size_bytes(text: str) -> int:
    """Bytes of a size as the settings write it (``512m``, ``2g``, a number of MiB; ``0``: 0)."""
    number, unit = _size_parts(text)
    return int(number * _SIZE_MIB[unit] * 2**20)


def _driver_memory(text: str) -> str:
    number, unit = _size_parts(text)
    if not MIN_DRIVER_MEMORY_MIB <= number * _SIZE_MIB[unit] <= MAX_DRIVER_MEMORY_MIB:
        raise ValueError(
            f"must be between {MIN_DRIVER_MEMORY_MIB}m and 1t (Spark needs 450 MiB at least), got {text!r}"
        )
    return f"{number}{unit or 'm'}"


#: the smallest memory_limit accepted: below it the driver JVM alone would be over it
MIN_MEMORY_LIMIT_MIB = 512


def _memory_limit(text: str) -> str:
    n = size_bytes(text)
    if n and not MIN_MEMORY_LIMIT_MIB * 2**20 <= n <= MAX_DRIVER_MEMORY_MIB * 2**20:
        raise ValueError(
            f"must be 0 (no limit) or between {MIN_MEMORY_LIMIT_MIB}m and 1t (the driver JVM alone holds "
            f"~450 MiB), got {text!r}"
        )
    return str(text).strip().lower()


def _java_options(text: str) -> str:
    try:
        words = shlex.split(str(text))
    except ValueError as e:
        raise ValueError(f"expected JVM options as shell words, {e}: {text!r}") from None
    bad = [w for w in words if not w.startswith("-")]
    if bad:
        raise ValueError(f"JVM options start with '-' (e.g. -XX:+UseG1GC), got {bad[0]!r}")
    return str(text).strip()


def _port(text: str | int) -> int:
    v = _int(0)(text)
    if v > 65535:
        raise ValueError(f"a TCP port is 1..65535 (0: off), got {v}")
    return v


def _choice(options: Sequence[str], upper: bool = False) -> Callable[[str], str]:
    def parse(text: str) -> str:
        t = str(text).strip()
        t = t.upper() if upper else t.lower()
        if t not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {text!r}")
        return t

    return parse


def _topics(text: str | Sequence[str]) -> tuple[str, ...]:
    items = text if isinstance(text, (tuple, list)) else str(text).split(",")
    out = tuple(t.strip() for t in items if t.strip())
    if not out:
        raise ValueError("needs at least one topic")
    for t in out:
        _topic(t)
    return out


_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _topic(text: str) -> str:
    t = str(text).strip()
    if not _TOPIC_RE.match(t) or t in (".", ".."):
        raise ValueError(f"not a valid Kafka topic name: {text!r}")
    return t


def _optional_topic(text: str) -> str:
    t = str(text).strip()
    return _topic(t) if t else ""


def _field_name(text: str) -> str:
    t = str(text).strip()
    if t and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", t):
        raise ValueError(f"not a field name: {text!r}")
    return t


def _aggregations(text: str) -> str:
    from windowstore import parse_aggregations

    t = ",".join(p.strip() for p in str(text).split(",") if p.strip())
    parse_aggregations(t)  # raises ValueError naming the bad part
    for part in t.split(","):
        kind, _, name = part.partition(":")
        if kind.strip().lower() != "count" and not name.strip():
            raise ValueError(
                f"{part!r} needs the value field it reads: {kind.strip()}:FIELD "
                f"(e.g. {kind.strip()}:amount); only count takes none"
            )
    return t


def _kafka_options(text: str | Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    if isinstance(text, Mapping):
        return tuple(sorted((str(k), str(v)) for k, v in text.items()))
    if isinstance(text, (tuple, list)):
        return tuple((str(k), str(v)) for k, v in text)
    out = []
    for part in str(text).split(","):
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"expected comma-separated key=value pairs, got {part!r}")
        out.append((k.strip(), v.strip()))
    return tuple(out)


def _str(text: str) -> str:
    return str(text).strip()


def _nonempty(text: str) -> str:
    t = str(text).strip()
    if not t:
        raise ValueError("must not be empty")
    return t


def _security_protocol(text: str) -> str:
    t = str(text).strip().upper()
    if t and t not in SECURITY_PROTOCOLS:
        raise ValueError(f"must be one of {', '.join(SECURITY_PROTOCOLS)}, got {text!r}")
    return t


def _sasl_mechanism(text: str) -> str:
    t = str(text).strip().upper()
    if t and t not in SASL_MECHANISMS:
        raise ValueError(f"must be one of {', '.join(SASL_MECHANISMS)} (others: kafka_options), got {text!r}")
    return t


def _show_secret(value: Any) -> str:
    return "none"


@dataclass(frozen=True)
class _Spec:
    default: Any
    parse: Callable[[Any], Any]
    help: str
    metavar: str | None = None
    show: Callable[[Any], str] | None = None


def _s(
    default: Any,
    parse: Callable[[Any], Any],
    help: str,
    metavar: str | None = None,
    show: Callable[[Any], str] | None = None,
) -> Any:
    return field(default=default, metadata={"spec": _Spec(default, parse, help, metavar, show)})


@dataclass(frozen=True)
class Settings:
    """Everything the service needs, validated. Build with :func:`load` (env + argv) or ``Settings(...)`` +
    :meth:`validated` in tests."""

    # Kafka
    bootstrap_servers: str = _s("localhost:9092", _nonempty, "Kafka bootstrap servers (host:port,...)", "HOSTS")
    input_topics: tuple[str, ...] = _s(("events",), _topics, "input topic(s), comma-separated", "TOPICS", show=",".join)
    changelog_topic: str = _s(
        "events-windows", _topic, "output changelog topic (one record per window update)", "TOPIC"
    )
    late_topic: str = _s(
        "events-late", _optional_topic, "topic for records dropped as late (R8); empty: count only", "TOPIC"
    )
    dead_letter_topic: str = _s("events-dlq", _topic, "topic for undecodable/invalid records", "TOPIC")
    starting_offsets: str = _s(
        "earliest",
        _choice(STARTING_OFFSETS),
        "where a NEW checkpoint starts reading (a restart resumes from the checkpoint)",
    )
    max_offsets_per_trigger: int = _s(0, _int(0), "max records per micro-batch (0: no limit)", "N")
    kafka_options: tuple[tuple[str, str], ...] = _s(
        (),
        _kafka_options,
        "extra Kafka client settings for source, sink and admin "
        "(k=v,k=v, librdkafka names; TLS/SASL: kafka_security_* etc.)",
        "K=V,...",
        show=lambda v: ",".join(f"{k}={x}" for k, x in v),
    )
    source_options: tuple[tuple[str, str], ...] = _s(
        (),
        _kafka_options,
        "extra options of Spark's Kafka source only (k=v,k=v; "
        "kafka.* go to its consumer), over the service's defaults "
        "kafka.fetch.max.wait.ms=10,kafka.max.poll.records=100000",
        "K=V,...",
        show=lambda v: ",".join(f"{k}={x}" for k, x in v),
    )
    sink: str = _s(
        "direct",
        _choice(SINKS),
        "how output records reach Kafka: spark = Spark's Kafka sink (rows go through the JVM); direct = "
        "each Python worker produces them with confluent-kafka and waits for every acknowledgement "
        "before its micro-batch completes (at-least-once like the sink; kafka_options apply)",
    )
    batch_produce: bool = _s(
        True,
        _bool,
        "sink=direct: hand the changelog rows to librdkafka a block at a time "
        "(rd_kafka_produce_batch; falls back to one produce() call per row when the library "
        "cannot be loaded); false: one produce() call per row",
    )
    create_topics: bool = _s(True, _bool, "create missing output topics at start (changelog compacted)")
    topic_partitions: int = _s(0, _int(0), "partitions of created output topics (0: as many as the input)", "N")
    replication_factor: int = _s(1, _int(1), "replication factor of created output topics", "N")

    # Kafka security (connectors.security writes them in each client's dialect: librdkafka, Java, Schema Registry)
    kafka_security_protocol: str = _s(
        "",
        _security_protocol,
        "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (empty: SASL_SSL when a SASL "
        "mechanism and a CA are set, SSL with only TLS files, else PLAINTEXT)",
        "PROTOCOL",
    )
    kafka_sasl_mechanism: str = _s(
        "", _sasl_mechanism, "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", "MECHANISM"
    )
    kafka_sasl_username: str = _s("", _str, "SASL user name", "USER")
    kafka_sasl_password: Secret = _s(
        NO_SECRET,
        read_secret,
        "SASL password (secret, never shown: set the "
        "environment variable, or file:PATH / env:NAME to read it from a file or "
        "another variable)",
        "SECRET",
        show=_show_secret,
    )
    kafka_ssl_ca_location: str = _s(
        "",
        _str,
        "CA certificate(s) (PEM file) the broker certificates are checked against (empty: the system's trust store)",
        "FILE",
    )
    kafka_ssl_certificate_location: str = _s("", _str, "client certificate (PEM file) for mutual TLS", "FILE")
    kafka_ssl_key_location: str = _s("", _str, "client private key (PEM file, PKCS#8) for mutual TLS", "FILE")
    kafka_ssl_key_password: Secret = _s(
        NO_SECRET,
        read_secret,
        "password of an encrypted client key (secret, like kafka_sasl_password)",
        "SECRET",
        show=_show_secret,
    )
    kafka_ssl_endpoint_identification: bool = _s(
        True, _bool, "check that the broker certificate names the host connected to (false only for test clusters)"
    )
    schema_registry_basic_auth: Secret = _s(
        NO_SECRET,
        read_secret,
        "Schema Registry credentials user:password "
        "(secret, like kafka_sasl_password; the registry's TLS uses "
        "kafka_ssl_ca_location and the client certificate)",
        "SECRET",
        show=_show_secret,
    )

    # Formats
    input_format: str = _s("json", _choice(INPUT_FORMATS), "input value format")
    changelog_format: str = _s("avro", _choice(OUTPUT_FORMATS), "changelog value format")
    changelog_key_format: str = _s(
        "avro",
        _choice(KEY_FORMATS),
        "changelog key format: avro/json record (key, window_start, window_end), "
        "windowed = Kafka Streams TimeWindowedSerializer bytes (UTF-8 key + 8-byte "
        "big-endian start), string = key|start|end",
    )
    schema_registry_url: str = _s(
        "http://localhost:8081", _str, "Schema Registry URL (needed when any format is avro)", "URL"
    )
    key_field: str = _s(
        "", _field_name, "value field holding the aggregation key (empty: the Kafka record key)", "FIELD"
    )
    timestamp_field: str = _s(
        "", _field_name, "value field holding the event time in epoch ms (empty: the Kafka record timestamp)", "FIELD"
    )

    # Windows
    aggregations: str = _s(
        "count", _aggregations, "aggregations over value fields, e.g. count,sum:amount,max:amount", "SPEC"
    )
    window: str = _s(
        "sliding",
        _choice(WINDOW_TYPES),
        "window type (Kafka Streams' SlidingWindows, TimeWindows, SessionWindows): sliding takes time_difference; "
        "tumbling window_size; hopping window_size and advance; session gap",
    )
    time_difference: int = _s(
        60_000,
        parse_duration_ms,
        "window=sliding: the time difference (window size; both ends inclusive)",
        "DURATION",
        show=_format_duration,
    )
    window_size: int = _s(
        0,
        parse_duration_ms,
        "window=tumbling or hopping: window size (a window is [start, start + size), end exclusive)",
        "DURATION",
        show=_format_unset,
    )
    advance: int = _s(
        0,
        parse_duration_ms,
        "window=hopping: how far each window starts after the one before (0 < advance <= window_size; it need "
        "not divide it)",
        "DURATION",
        show=_format_unset,
    )
    gap: int = _s(
        0,
        parse_duration_ms,
        "window=session: the inactivity gap that ends a session (> 0)",
        "DURATION",
        show=_format_unset,
    )
    grace: int = _s(0, parse_duration_ms, "grace period after a window's end", "DURATION", show=_format_duration)
    emit: str = _s(
        "update",
        _choice(EMIT_MODES),
        "update: last value per changed window per micro-batch; every: every window write; "
        "close: one final record per window",
    )

    # Spark
    spark_master: str = _s("local[*]", _nonempty, "Spark master URL", "URL")
    task_cpus: int = _s(
        0,
        _int(0),
        "cores each Spark task takes (spark.task.cpus): every stateful task running at once has a Python "
        "worker of its own (~230 MiB); 2 runs half as many at once (less memory, longer micro-batches); "
        "0 (default): Spark's 1; at most a local master's cores",
        "N",
    )
    trigger_interval: int = _s(
        1000,
        parse_duration_ms,
        "micro-batch trigger interval (0: as fast as possible)",
        "DURATION",
        show=_format_duration,
    )
    checkpoint_dir: str = _s(
        "var/checkpoint", _nonempty, "checkpoint directory (offsets + RocksDB state; reuse it to resume)", "DIR"
    )
    state_partitions: int = _s(
        4, _int(1), "stateful tasks (spark.sql.shuffle.partitions; frozen into the checkpoint)", "N"
    )
    balance_tasks: bool = _s(
        True,
        _bool,
        "spread the input partitions evenly over the state partitions (adds a "
        "slot to the state key; fixed when a checkpoint is created, older checkpoints keep "
        "running without it)",
    )
    state_buckets: int = _s(
        256,
        _int(1),
        "key buckets per task in the state store (one state entry each; fixed when a checkpoint is created)",
        "N",
    )
    state_snapshot_every: int = _s(
        16,
        _int(1),
        "write a task's key buckets every N-th micro-batch; the batches "
        "in between write only their input records as a log entry, replayed on "
        "restore and by a worker that is behind (1: every batch rewrites the buckets; "
        "with state_cache off every batch replays the log, so keep N small there)",
        "N",
    )
    state_snapshot_records: int = _s(
        100_000,
        _int(0),
        "write a task's key buckets sooner than state_snapshot_every once its log since the last snapshot would "
        "hold more than N input records: bounds what a restart replays per task (large micro-batches, e.g. "
        "while a backlog is read, otherwise make it state_snapshot_every - 1 whole batches); 0: no bound",
        "N",
    )
    state_cache: bool = _s(
        True,
        _bool,
        "keep each task's windows in the Python worker between micro-batches "
        "(validated against the state store; false: always read the store)",
    )
    state_cache_tasks: int = _s(
        64,
        _cache_tasks,
        "tasks whose windows each Python worker keeps between micro-batches (state_cache); beyond it the "
        "least recently used task's are dropped and read back from the state store when it runs again "
        "(exact, slower): bounds the workers' memory, which is the windows of the tasks they keep",
        "N",
    )
    task_owners: bool = _s(
        True,
        _bool,
        "run each task's batches in the Python worker that holds its windows: a "
        "worker Spark hands another worker's task forwards the batch to it over a local socket "
        "(Linux; needs state_cache; service.worker.owners)",
    )
    fast_input: bool = _s(
        True,
        _bool,
        "Python workers hand the processor its input as Arrow slices, a key run at a time, and keep pandas "
        "out (Spark starts them from service.spark.python_daemon / python_worker; pyspark's own "
        "path builds a Row per input row); false: pyspark's daemon and worker unchanged",
    )
    warm_workers: bool = _s(
        True,
        _bool,
        "start the Python workers and import what a task needs while the query starts, so that the first "
        "micro-batch (after a restart too) does not wait for them",
    )
    class_data_cache: str = _s(
        "",
        _str,
        "folder of the driver JVM's class-data archive (AppCDS), e.g. ~/.cache/slidingwindow/cds: built once, "
        "after the first start's first micro-batch, by a JVM of its own at low priority (about a minute of one "
        "core and ~0.9 GiB while it runs; the service does not pause), mapped by every later start of the same "
        "JVM and jars for a faster start; a folder that cannot be written only means no archive; empty "
        "(default): off",
        "DIR",
    )
    driver_memory: str = _s(
        "1g",
        _driver_memory,
        "heap of the driver JVM (spark.driver.memory; with a local master Spark's tasks and the state "
        "store's on-heap parts live in it), e.g. 768m, 2g: with state_cache_tasks the bound on the "
        "service's memory",
        "SIZE",
    )
    memory_limit: str = _s(
        "0",
        _memory_limit,
        "the service's resident memory to stay within, e.g. 1500m, 2g: above it each Python worker drops its "
        "least recently used tasks' cached windows after a batch (their next batch restores them from the "
        "state store: exact, slower; state_cache_dropped_total counts them) and hands the memory back; "
        "measured as the JVM, the Python daemon and workers, and with a local master the Python driver. "
        "0 (default): no limit, state_cache_tasks alone bounds the cache",
        "SIZE",
    )
    driver_java_options: str = _s(
        "",
        _java_options,
        "extra options of the driver JVM, after the service's own (its log4j2 configuration, the serial "
        "collector with a 24 MiB young generation, a heap that starts small and gives back, compile thresholds "
        "x3, the client compiler alone: service.spark.driver_jvm), "
        "so they override them (-XX:TieredStopAtLevel=4: both compilers); a collector chosen here replaces "
        "the serial one (on the command line with '=': "
        "--driver-java-options=-XX:+UseG1GC)",
        "OPTIONS",
    )
    app_name: str = _s("slidingwindow", _nonempty, "Spark application name", "NAME")
    spark_conf: tuple[tuple[str, str], ...] = _s(
        (),
        _kafka_options,
        "extra Spark settings (k=v,k=v)",
        "K=V,...",
        show=lambda v: ",".join(f"{k}={x}" for k, x in v),
    )

    # Operations
    metrics_port: int = _s(9108, _port, "Prometheus /metrics port on the driver (0: off)", "PORT")
    log_level: str = _s("INFO", _choice(LOG_LEVELS, upper=True), "log level")
    startup_timeout: int = _s(
        60_000,
        parse_duration_ms,
        "how long to wait at start for Kafka to answer (a "
        "log line every few seconds; compose may start the service before the broker), "
        "then exit with one line",
        "DURATION",
        show=_format_duration,
    )
    processing_exception_handler: str = _s(
        "continue",
        _choice(PROCESSING_EXCEPTION_HANDLERS),
        "when processing a task's micro-batch raises (a bug, not a bad record: those are dead-lettered at "
        "decode): continue = re-run the batch record by record, dead-letter the records that raise (error "
        "processing-error, the exception in headers) and aggregate the rest; fail = stop the query, naming the "
        "partition and offset of the record that raised (Kafka Streams' processing.exception.handler)",
    )
    processing_guarantee: str = _s(
        "at_least_once",
        _choice(PROCESSING_GUARANTEES),
        "{at_least_once,exactly_once} (Kafka Streams' processing.guarantee). "
        "at_least_once: a micro-batch replayed after a crash may write its output "
        "again; exactly_once: each task's micro-batch writes its output and commits its "
        "input offset to the group app_name in one Kafka transaction, input is read "
        "read_committed, consumers read read_committed (needs sink=direct and a broker "
        "with transactions; app_name must be unique per deployment: it names the "
        "group and the transactional ids). Both commit the input offsets to the group "
        "app_name (lag in kafka-consumer-groups.sh)",
    )

    # ------------------------------------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        for f in fields(self):
            spec: _Spec = f.metadata["spec"]
            value = getattr(self, f.name)
            try:
                parsed = spec.parse(value)
            except ValueError as e:
                raise SettingsError(f.name, str(e)) from None
            object.__setattr__(self, f.name, parsed)
        self._check_consistency()

    def _check_consistency(self) -> None:
        for name, message in self.kafka_security().problems():  # connectors.security: one settings set, 3 dialects
            raise SettingsError("kafka_security_protocol" if name == "protocol" else f"kafka_{name}", message)
        avro = [n for n in ("input_format", "changelog_format", "changelog_key_format") if getattr(self, n) == "avro"]
        if avro and not self.schema_registry_url:
            raise SettingsError("schema_registry_url", f"required because {', '.join(avro)} is avro")
        if self.schema_registry_url and not re.match(r"^https?://", self.schema_registry_url):
            raise SettingsError(
                "schema_registry_url", f"must start with http:// or https://, got {self.schema_registry_url!r}"
            )
        outputs = [self.changelog_topic, self.dead_letter_topic] + ([self.late_topic] if self.late_topic else [])
        for name in ("changelog_topic", "late_topic", "dead_letter_topic"):
            t = getattr(self, name)
            if t and t in self.input_topics:
                raise SettingsError(name, f"{t!r} is also an input topic")
        if len(set(outputs)) != len(outputs):
            raise SettingsError("dead_letter_topic", f"output topics must differ, got {outputs}")
        self.check_window({n for n in _SIZE_DEFAULTS if getattr(self, n) != _SIZE_DEFAULTS[n]})
        if self.key_field and self.key_field == self.timestamp_field:
            raise SettingsError("timestamp_field", "must differ from key_field")
        cores = local_cores(self.spark_master)
        if cores is not None and self.task_cpus > cores:
            raise SettingsError(
                "task_cpus",
                f"is {self.task_cpus}, more than the {cores} cores of spark_master {self.spark_master}: "
                "no task could run",
            )
        if self.processing_guarantee == "exactly_once" and self.sink != "direct":
            raise SettingsError(
                "processing_guarantee", "exactly_once needs sink=direct (Spark's Kafka sink cannot write transactions)"
            )

    def check_window(self, given: set[str]) -> None:
        """The window settings fit together (one :class:`SettingsError` naming the first that does not): the type
        has its sizes, and no size setting in ``given`` (set to other than its default, or given as a flag or
        variable) belongs to another type."""
        window = self.window
        takes = WINDOW_SIZE_SETTINGS[window]
        for name in sorted(given - set(takes)):
            owner = next(w for w, names in WINDOW_SIZE_SETTINGS.items() if name in names)
            needs = " and ".join(takes)
            raise SettingsError(name, f"applies to window={owner} only; window={window} takes {needs}")
        if window == "sliding" and self.time_difference <= 0:
            raise SettingsError("time_difference", "must be positive (a window spans at least 1 ms)")
        if window in ("tumbling", "hopping") and self.window_size <= 0:
            raise SettingsError("window_size", f"window={window} needs a window size > 0 (e.g. --window-size 1m)")
        if window == "hopping" and not 0 < self.advance <= self.window_size:
            raise SettingsError(
                "advance",
                f"window=hopping needs 0 < advance <= window_size ({_format_duration(self.window_size)}), got "
                f"{_format_unset(self.advance)} (e.g. --advance 10s)",
            )
        if window == "session" and self.gap <= 0:
            raise SettingsError("gap", "window=session needs an inactivity gap > 0 (e.g. --gap 5m)")

    @property
    def window_definition(self) -> WindowDefinition:
        """The windows of every task: type, sizes and grace (:class:`windowstore.WindowDefinition`)."""
        from windowstore import WindowDefinition

        sizes = {
            "sliding": {"size_ms": self.time_difference},
            "tumbling": {"size_ms": self.window_size},
            "hopping": {"size_ms": self.window_size, "advance_ms": self.advance},
            "session": {"gap_ms": self.gap},
        }[self.window]
        return WindowDefinition(self.window, grace_ms=self.grace, **sizes)

    @property
    def time_difference_ms(self) -> int:
        return self.time_difference

    @property
    def grace_ms(self) -> int:
        return self.grace

    @property
    def trigger_interval_ms(self) -> int:
        return self.trigger_interval

    def aggregation(self) -> Aggregation:  # a new instance
        from windowstore import parse_aggregations

        return parse_aggregations(self.aggregations)

    def kafka_client_config(self) -> dict[str, str]:
        """confluent-kafka (librdkafka) client settings: bootstrap servers + security settings + ``kafka_options``."""
        return {"bootstrap.servers": self.bootstrap_servers, **dict(self.rdkafka_options())}

    def kafka_security(self) -> KafkaSecurity:
        """The ``kafka_security_*``/``kafka_sasl_*``/``kafka_ssl_*`` settings as one :class:`KafkaSecurity`."""
        return KafkaSecurity(
            protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            sasl_username=self.kafka_sasl_username,
            sasl_password=self.kafka_sasl_password,
            ssl_ca_location=self.kafka_ssl_ca_location,
            ssl_certificate_location=self.kafka_ssl_certificate_location,
            ssl_key_location=self.kafka_ssl_key_location,
            ssl_key_password=self.kafka_ssl_key_password,
            ssl_endpoint_identification=self.kafka_ssl_endpoint_identification,
        )

    def rdkafka_options(self) -> tuple[tuple[str, str], ...]:
        """librdkafka settings of the security settings, then ``kafka_options`` (which win)."""
        return (*self.kafka_security().rdkafka().items(), *self.kafka_options)

    def java_kafka_options(self) -> tuple[tuple[str, str], ...]:
        """Java client settings (no ``kafka.`` prefix) of the security settings, then ``kafka_options``."""
        return (*self.kafka_security().java().items(), *self.kafka_options)

    def schema_registry_config(self) -> tuple[tuple[str, str], ...]:
        """``SchemaRegistryClient`` settings besides the URL (TLS files for https, basic auth)."""
        return tuple(
            self.kafka_security().schema_registry(self.schema_registry_url, self.schema_registry_basic_auth).items()
        )

    def replace(self, **changes: Any) -> Settings:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Settings(**values)

    def describe(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


SETTINGS = tuple(f.name for f in fields(Settings))
#: the window size settings and their defaults (a size setting that differs from its default was given)
_SIZE_DEFAULTS = {
    f.name: f.default for f in fields(Settings) if any(f.name in names for names in WINDOW_SIZE_SETTINGS.values())
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; the help shows the default and the environment variable."""
    groups: dict[str | None, argparse._ArgumentGroup] = {}
    section = None
    for f in fields(Settings):
        spec: _Spec = f.metadata["spec"]
        section = _SECTIONS.get(f.name, section)
        group = groups.get(section) or groups.setdefault(section, parser.add_argument_group(section))
        default = spec.show(spec.default) if spec.show else spec.default
        if isinstance(default, bool):
            default = str(default).lower()
        env = ENV_PREFIX + f.name.upper()
        flag = "--" + f.name.replace("_", "-")
        kwargs: dict[str, Any] = {
            "dest": f.name,
            "default": None,
            "metavar": spec.metavar,
            "help": f"{spec.help} (default: {default!s} | env {env})",
        }
        choices = {
            "starting_offsets": STARTING_OFFSETS,
            "input_format": INPUT_FORMATS,
            "changelog_format": OUTPUT_FORMATS,
            "changelog_key_format": KEY_FORMATS,
            "emit": EMIT_MODES,
            "window": WINDOW_TYPES,
            "sink": SINKS,
            "processing_exception_handler": PROCESSING_EXCEPTION_HANDLERS,
        }
        if f.name in choices:
            kwargs["metavar"] = "{" + ",".join(choices[f.name]) + "}"
        if f.type in (bool, "bool"):
            kwargs["metavar"] = "{true,false}"
        group.add_argument(flag, **kwargs)
    for name in REMOVED_SETTINGS:  # hidden: accepted only to fail with a message that names the removal
        parser.add_argument("--" + name.replace("_", "-"), dest=_removed_dest(name), help=argparse.SUPPRESS)


def _removed_dest(name: str) -> str:
    return "removed_" + name


_SECTIONS = {
    "bootstrap_servers": "Kafka",
    "input_format": "formats",
    "aggregations": "windows",
    "spark_master": "Spark",
    "metrics_port": "operations",
}


_SECTIONS["kafka_security_protocol"] = "Kafka security"


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from parsed flags, falling back to ``SLIDINGWINDOW_*`` variables, then defaults."""
    env = os.environ if environ is None else environ
    for name, instead in REMOVED_SETTINGS.items():
        if getattr(args, _removed_dest(name), None) is not None:
            raise SettingsError(name, f"this setting was removed: {instead}")
        if ENV_PREFIX + name.upper() in env:
            logger.warning(
                "%s is set but the setting %s was removed and is ignored: %s", ENV_PREFIX + name.upper(), name, instead
            )
    values: dict[str, Any] = {}
    for name in SETTINGS:
        flag_value = getattr(args, name, None)
        if flag_value is not None:
            values[name] = flag_value
        elif ENV_PREFIX + name.upper() in env:
            values[name] = env[ENV_PREFIX + name.upper()]
    settings = Settings(**values)
    settings.check_window(set(values) & set(_SIZE_DEFAULTS))  # a size given at its default value, too
    return settings


_NEGATIVE_VALUE = re.compile(r"^-\d")


def join_negative_values(argv: Sequence[str]) -> list[str]:
    """``["--grace", "-5s"]`` -> ``["--grace=-5s"]``: argparse reads a value that starts with ``-`` and is not a
    plain number as a flag ("expected one argument"); joined, it reaches the setting's own check, which names
    the rule. Only a ``--flag`` without ``=`` followed by ``-<digit>...`` is joined."""
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        if (
            a.startswith("--")
            and "=" not in a
            and a != "--"
            and i + 1 < len(args)
            and _NEGATIVE_VALUE.match(args[i + 1])
        ):
            out.append(f"{a}={args[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def load(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Parse ``argv`` (flags only) and the environment into :class:`Settings`."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_arguments(parser)
    args = parser.parse_args(join_negative_values(argv or []))
    return from_args(args, environ)
