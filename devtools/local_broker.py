"""A single-node Apache Kafka broker (KRaft, combined broker + controller) run from Maven-resolved jars.

No Docker and no Kafka distribution are needed: the broker classpath comes from :mod:`devtools.broker_jars`
(``org.apache.kafka:kafka_<scala>:<kafka>`` at the version pinned in :mod:`connectors.pins`), and the JVM runs
``kafka.Kafka`` directly. The storage directory is formatted once with ``kafka.tools.StorageTool format``
(what ``bin/kafka-storage.sh format`` runs).

Files in the data directory (default ``var/kafka`` under the working directory)::

    server.properties   rendered from devtools/kafka/server.properties.in
    data/               Kafka's log.dirs (topic data and KRaft metadata log)
    logs/server.log     log4j2 output (WARN by default, see devtools/kafka/log4j2.properties)
    logs/kafka.out      the JVM's stdout/stderr
    broker.json         pid, ports and bootstrap servers of the running broker (the pidfile)

Library use::

    with LocalKafkaBroker(port=0, data_dir=tmp) as broker:   # port 0: pick a free port
        use(broker.bootstrap_servers)

CLI (used by ``make broker-start`` / ``make demo``; ``start`` leaves the broker running in the background)::

    slidingwindow broker start [--port 9092] [--data-dir var/kafka] [--timeout 90]
    slidingwindow broker status [--data-dir var/kafka]
    slidingwindow broker stop [--data-dir var/kafka]

(``python -m devtools.broker_cli ...`` is the same.)
"""

from __future__ import annotations

import atexit
import base64
import json
import logging
import os
import signal
import socket
import string
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from connectors import jars, versions
from devtools import broker_jars

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9092
DEFAULT_DATA_DIR: Path = Path("var") / "kafka"  # relative: resolved against the working directory
DEFAULT_HEAP = "512m"
DEFAULT_START_TIMEOUT_S = 90.0
DEFAULT_STOP_TIMEOUT_S = 30.0
# package data (shipped in the wheel next to this module)
CONFIG_DIR: Path = Path(__file__).resolve().parent / "kafka"
SERVER_PROPERTIES_TEMPLATE: Path = CONFIG_DIR / "server.properties.in"
LOG4J2_CONFIG: Path = CONFIG_DIR / "log4j2.properties"
STATE_FILE = "broker.json"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"


class BrokerError(RuntimeError):
    """The broker could not be started, did not become ready, or its state file is inconsistent."""


@dataclass(frozen=True)
class BrokerState:
    """Contents of ``broker.json``: enough for another process (the CLI) to find and stop a running broker."""

    pid: int
    host: str
    port: int
    controller_port: int
    bootstrap_servers: str
    data_dir: str
    kafka_version: str
    started_at: float
    startup_seconds: float | None = None

    @classmethod
    def load(cls, data_dir: Path) -> BrokerState | None:
        try:
            raw = json.loads((data_dir / STATE_FILE).read_text(encoding="utf-8"))
            return cls(**raw)
        except (OSError, ValueError, TypeError):
            return None

    def save(self, data_dir: Path) -> None:
        tmp = data_dir / f"{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2), encoding="utf-8")
        tmp.replace(data_dir / STATE_FILE)


# ----------------------------------------------------------------------------------------------- helpers


def find_free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port that is free on ``host`` right now (the OS may hand it out again later; good enough locally)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cid.startswith("-"):
            return cid


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not a running broker.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def _is_our_broker(pid: int, data_dir: Path) -> bool:
    """True if ``pid`` is a live ``kafka.Kafka`` JVM started with this data dir's server.properties."""
    if not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # no /proc (not Linux): trust the pid
        return True
    args = [a.decode(errors="replace") for a in cmdline]
    return MAIN_CLASS in args and str(data_dir / "server.properties") in args


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def metadata_ready(
    bootstrap_servers: str, timeout: float = 5.0, client_config: Mapping[str, str] | None = None
) -> bool:
    """True if a metadata request through confluent_kafka's AdminClient succeeds and lists at least one broker.
    ``client_config``: extra librdkafka settings (a secured listener's credentials)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": bootstrap_servers, "socket.connection.setup.timeout.ms": 2000, **(client_config or {})}
    )
    try:
        md = admin.list_topics(timeout=timeout)
        return bool(md.brokers)
    except KafkaException:
        return False


# ----------------------------------------------------------------------------------------------- broker


class LocalKafkaBroker:
    """One Kafka broker+controller JVM on ``host:port``, data in ``data_dir``.

    Args:
        port: client (PLAINTEXT) port; ``0`` or ``None`` picks a free port.
        controller_port: KRaft controller port; ``None`` picks a free port (the quorum is static, so it may change
            between restarts).
        data_dir: folder for config, data, logs and the state file; created if missing. Default ``var/kafka``.
        host: interface to listen on and advertise.
        heap: JVM max heap (``-Xmx``).
        log_level: log4j2 root level of ``logs/server.log``.
        extra_config: broker properties appended to server.properties (override the template's).
        detach: if False (default) the broker is stopped when this Python process exits normally (atexit); if True
            it keeps running (CLI ``start``) and is stopped with ``slidingwindow broker stop``.
        classpath: broker jars; default :func:`devtools.broker_jars.kafka_broker_classpath` (Maven, cached).
        format_args: extra arguments of the storage format (e.g. ``--add-scram`` users, devtools.secure_broker).
        client_config: librdkafka settings the readiness check connects with (a secured listener's credentials).
    """

    def __init__(
        self,
        port: int | None = DEFAULT_PORT,
        *,
        controller_port: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        host: str = DEFAULT_HOST,
        heap: str = DEFAULT_HEAP,
        log_level: str = "WARN",
        extra_config: Mapping[str, str] | None = None,
        detach: bool = False,
        classpath: Sequence[Path] | None = None,
        format_args: Sequence[str] = (),
        client_config: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port or find_free_port(host)
        self.controller_port = controller_port or find_free_port(host)
        if self.controller_port == self.port:
            raise BrokerError(f"client and controller ports must differ (both {self.port})")
        self.data_dir = Path(data_dir if data_dir is not None else DEFAULT_DATA_DIR).resolve()
        self.heap = heap
        self.log_level = log_level
        self.extra_config = dict(extra_config or {})
        self.detach = detach
        self._classpath = list(classpath) if classpath is not None else None
        self.format_args = list(format_args)
        self.client_config = dict(client_config or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        """Seconds from launching the JVM until the first successful metadata request (set by :meth:`start`)."""

    # -- paths and properties

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for Kafka clients."""
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def log_file(self) -> Path:
        """The broker's log4j2 log (WARN and above, plus start/stop lines)."""
        return self.log_dir / "server.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle

    def start(self, timeout: float = DEFAULT_START_TIMEOUT_S) -> LocalKafkaBroker:
        """Format storage if needed, launch the JVM and wait until a metadata request succeeds.

        Raises:
            BrokerError: a broker already runs on this data dir, a port is taken, the JVM exited, or the broker
                was not ready within ``timeout`` seconds (the JVM is then killed).
            connectors.jars.JarResolutionError: Maven or Java is missing or resolution failed.
        """
        if self.is_running():
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        existing = BrokerState.load(self.data_dir)
        if existing is not None and _is_our_broker(existing.pid, self.data_dir):
            raise BrokerError(
                f"a broker already runs on {self.data_dir} (pid {existing.pid}, {existing.bootstrap_servers}); "
                "stop it first: slidingwindow broker stop --data-dir " + str(self.data_dir)
            )
        for p in (self.port, self.controller_port):
            if _port_open(self.host, p, timeout=0.2):
                raise BrokerError(f"port {self.host}:{p} is already in use")

        classpath = self._classpath if self._classpath is not None else broker_jars.kafka_broker_classpath()
        java = jars.java_executable()
        props = self._write_server_properties()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cp = os.pathsep.join(str(p) for p in classpath)
        self._format_storage(java, cp, props)

        cmd = [java, *self._jvm_options(), "-cp", cp, MAIN_CLASS, str(props)]
        out = open(self.log_dir / "kafka.out", "ab")  # noqa: SIM115 - handed to the JVM, closed right after Popen
        t0 = time.monotonic()
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,  # Ctrl-C in the terminal must not kill a detached broker
            )
        finally:
            out.close()
        logger.info("started Kafka %s pid %d on %s (data %s)", self.kafka_version(), self._proc.pid,
                    self.bootstrap_servers, self.data_dir)  # fmt: skip
        state = BrokerState(
            pid=self._proc.pid,
            host=self.host,
            port=self.port,
            controller_port=self.controller_port,
            bootstrap_servers=self.bootstrap_servers,
            data_dir=str(self.data_dir),
            kafka_version=self.kafka_version(),
            started_at=time.time(),
        )
        state.save(self.data_dir)
        if not self.detach:
            atexit.register(self.stop)
        try:
            self._wait_ready(t0 + timeout)
        except BaseException:
            self.stop(timeout=5.0)
            raise
        self.startup_seconds = time.monotonic() - t0
        state = BrokerState(**{**asdict(state), "startup_seconds": round(self.startup_seconds, 2)})
        state.save(self.data_dir)
        logger.info("Kafka ready on %s after %.1fs", self.bootstrap_servers, self.startup_seconds)
        return self

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """SIGTERM (controlled shutdown), wait up to ``timeout`` seconds, then SIGKILL. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        if proc.poll() is None:
            _terminate(proc.pid, timeout, wait=proc.wait)
        state = BrokerState.load(self.data_dir)
        if state is not None and state.pid == proc.pid:
            (self.data_dir / STATE_FILE).unlink(missing_ok=True)

    def __enter__(self) -> LocalKafkaBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalKafkaBroker({self.bootstrap_servers!r}, data_dir={str(self.data_dir)!r}, pid={self.pid})"

    # -- internals

    def kafka_version(self) -> str:
        return versions.jvm_versions().kafka

    def _jvm_options(self) -> list[str]:
        return [
            "-Xms128m",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            f"-Dkafka.logs.dir={self.log_dir}",
            f"-Dslidingwindow.kafka.log.level={self.log_level}",
        ]

    def _write_server_properties(self) -> Path:
        template = string.Template(SERVER_PROPERTIES_TEMPLATE.read_text(encoding="utf-8"))
        text = template.substitute(
            host=self.host,
            port=self.port,
            controller_port=self.controller_port,
            log_dir=self.data_dir / "data",
        )
        if self.extra_config:
            text += "\n# extra_config\n" + "".join(f"{k}={v}\n" for k, v in self.extra_config.items())
        path = self.data_dir / "server.properties"
        path.write_text(text, encoding="utf-8")
        return path

    def _format_storage(self, java: str, cp: str, props: Path) -> None:
        if (self.data_dir / "data" / "meta.properties").exists():
            return
        cmd = [
            java, "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            f"-Dkafka.logs.dir={self.log_dir}", "-cp", cp,
            STORAGE_TOOL_CLASS, "format", "--cluster-id", new_cluster_id(), "--config", str(props),
            "--ignore-formatted", *self.format_args,
        ]  # fmt: skip
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.data_dir)
        if proc.returncode != 0:
            raise BrokerError(f"formatting {self.data_dir / 'data'} failed:\n{(proc.stdout + proc.stderr).strip()}")
        logger.info("formatted Kafka storage %s in %.1fs", self.data_dir / "data", time.monotonic() - t0)

    def _wait_ready(self, deadline: float) -> None:
        assert self._proc is not None
        while True:
            if self._proc.poll() is not None:
                raise BrokerError(
                    f"Kafka exited with code {self._proc.returncode} during start-up; last lines of the logs:\n"
                    f"{_tail(self.log_dir / 'kafka.out')}\n{_tail(self.log_file)}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(
                    f"Kafka on {self.bootstrap_servers} not ready in time; last lines of {self.log_file}:\n"
                    f"{_tail(self.log_file)}"
                )
            # Wait for the listener socket first: AdminClient logs an error per refused connection.
            if _port_open(self.host, self.port, timeout=0.5) and metadata_ready(
                self.bootstrap_servers, timeout=min(5.0, max(0.5, remaining)), client_config=self.client_config
            ):
                return
            time.sleep(0.2)


def _terminate(pid: int, timeout: float, wait: Callable[..., object] | None = None) -> bool:
    """SIGTERM ``pid``, wait up to ``timeout`` s, SIGKILL if still alive. Returns True if it had to SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    if wait is not None:  # our child: reap it
        try:
            wait(timeout=timeout)
            return False
        except subprocess.TimeoutExpired:
            pass
    else:
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return False
            time.sleep(0.1)
    logger.warning("Kafka pid %d did not stop within %.0fs of SIGTERM; sending SIGKILL", pid, timeout)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    if wait is not None:
        wait(timeout=10)
    return True


# ----------------------------------------------------------------------------------------------- detached control


def broker_status(data_dir: str | os.PathLike[str] | None = None) -> BrokerState | None:
    """State of the broker running on ``data_dir`` (from ``broker.json``), or None if none runs there."""
    ddir = Path(data_dir if data_dir is not None else DEFAULT_DATA_DIR).resolve()
    state = BrokerState.load(ddir)
    if state is None or not _is_our_broker(state.pid, ddir):
        return None
    return state


def stop_broker(data_dir: str | os.PathLike[str] | None = None, timeout: float = DEFAULT_STOP_TIMEOUT_S) -> bool:
    """Stop the broker running on ``data_dir`` (started by any process). Returns False if none was running."""
    ddir = Path(data_dir if data_dir is not None else DEFAULT_DATA_DIR).resolve()
    state = broker_status(ddir)
    if state is None:
        (ddir / STATE_FILE).unlink(missing_ok=True)
        return False
    _terminate(state.pid, timeout)
    (ddir / STATE_FILE).unlink(missing_ok=True)
    return True
