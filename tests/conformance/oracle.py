"""Kafka Streams oracle: build (Maven, cached) and run the Java program in ``tests/conformance/oracle/``.

The oracle pipes records through the real ``SlidingWindows`` aggregation of Kafka Streams (TopologyTestDriver, one
task) at the Kafka version pinned in ``connectors/pins.py`` (``KAFKA``). See
``oracle/src/main/java/slidingwindow/oracle/Oracle.java`` for the exact contract.

Python API::

    from tests.conformance.oracle import run_batch, OracleSession
    results = run_batch(cases)            # one JVM for all cases, results in case order
    with OracleSession() as s:            # one long-lived JVM, one case at a time (shrinking)
        res = s.run(case)

A case is ``{"id", "time_difference_ms", "grace_ms", "aggregation", "emit", "input": [{"key","value","ts"}]}``
(optional ``"retention_ms"``: the store retention, ``Materialized.withRetention``; default 2*td+grace);
a result is ``{"id", "updates": [{"key","window_start","window_end","value","ts","input_index"}], "records",
"dropped_records_total"}`` or ``{"id", "error", "stack"}``.

Command line (same contract as ``python -m windowstore replay``)::

    python -m tests.conformance.oracle replay --time-difference-ms 10 --grace-ms 5 --aggregation collect \\
        --emit every < records.jsonl
    python -m tests.conformance.oracle batch [--threads 2] < cases.jsonl
    python -m tests.conformance.oracle build [--force]

Environment: ``ORACLE_JAVA_OPTS`` replaces the default JVM options; ``ORACLE_KAFKA_VERSION`` overrides the pinned
Kafka version (e.g. to try another release).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ORACLE_DIR = HERE / "oracle"
TARGET_DIR = ORACLE_DIR / "target"
CLASSPATH_FILE = TARGET_DIR / "classpath.txt"
STAMP_FILE = TARGET_DIR / "oracle-build.json"
MAIN_CLASS = "slidingwindow.oracle.Oracle"

# C1 only + serial GC: the oracle runs many short cases; C2 compilation cost more CPU than it saved (measured
# ~2x less CPU for 2000 cases). Speed-only JVM flags, results do not depend on them.
DEFAULT_JAVA_OPTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class OracleUnavailable(RuntimeError):
    """java or mvn is missing, or the oracle cannot be built."""


class OracleError(RuntimeError):
    """The oracle process failed (not a per-case error; those are returned in the result's ``error`` field)."""


def kafka_version() -> str:
    """The Kafka version the oracle runs: ``$ORACLE_KAFKA_VERSION`` or the pinned one (``connectors.pins.KAFKA``)."""
    env = os.environ.get("ORACLE_KAFKA_VERSION")
    if env:
        return env
    from connectors.pins import KAFKA

    return KAFKA


def _which(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise OracleUnavailable(
            f"'{tool}' was not found on PATH. The Kafka Streams conformance oracle needs a JDK (17+) and "
            "Maven (3.8+) to build and run tests/conformance/oracle/ "
            "(e.g. apt-get install openjdk-17-jdk-headless maven)."
        )
    return path


def _sources() -> list[Path]:
    return [ORACLE_DIR / "pom.xml", *sorted((ORACLE_DIR / "src").rglob("*"))]


def _is_fresh(version: str) -> bool:
    if not (CLASSPATH_FILE.exists() and STAMP_FILE.exists()):
        return False
    try:
        stamp = json.loads(STAMP_FILE.read_text())
    except (OSError, ValueError):
        return False
    if stamp.get("kafka_version") != version:
        return False
    built = min(CLASSPATH_FILE.stat().st_mtime, STAMP_FILE.stat().st_mtime)
    newest_src = max(p.stat().st_mtime for p in _sources() if p.is_file())
    if newest_src > built:
        return False
    # the classpath entries (jars in ~/.m2) must still exist
    return all(Path(p).exists() for p in CLASSPATH_FILE.read_text().strip().split(os.pathsep) if p)


@dataclass(frozen=True)
class OracleBuild:
    java: str
    classpath: str
    kafka_version: str

    def command(self, *args: str, java_opts: Sequence[str] | None = None) -> list[str]:
        if java_opts is None:
            env_opts = os.environ.get("ORACLE_JAVA_OPTS")
            java_opts = shlex.split(env_opts) if env_opts is not None else DEFAULT_JAVA_OPTS
        return [self.java, *java_opts, "-cp", self.classpath, MAIN_CLASS, *args]


_BUILD_LOCK = threading.Lock()
_BUILT: dict[str, OracleBuild] = {}


def ensure_built(*, force: bool = False, quiet: bool = True) -> OracleBuild:
    """Build the oracle with Maven unless ``target/`` is newer than ``pom.xml`` and ``src/`` (and was built for the
    same Kafka version). Safe to call concurrently (threads and processes)."""
    version = kafka_version()
    with _BUILD_LOCK:
        if not force and version in _BUILT:
            return _BUILT[version]
        java = _which("java")
        TARGET_DIR.mkdir(parents=True, exist_ok=True)
        with open(TARGET_DIR / ".build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if force or not _is_fresh(version):
                mvn = _which("mvn")
                cmd = [mvn, "-B", "-q" if quiet else "-ntp", f"-Dkafka.version={version}", "package"]
                proc = subprocess.run(cmd, cwd=ORACLE_DIR, capture_output=True, text=True)
                if proc.returncode != 0:
                    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
                    raise OracleUnavailable(
                        f"building the Kafka Streams oracle failed (Kafka {version}): {shlex.join(cmd)} in "
                        f"{ORACLE_DIR}\n{tail}"
                    )
                STAMP_FILE.write_text(json.dumps({"kafka_version": version}))
        classes = TARGET_DIR / "classes"
        build = OracleBuild(
            java=java, classpath=f"{classes}{os.pathsep}{CLASSPATH_FILE.read_text().strip()}", kafka_version=version
        )
        _BUILT[version] = build
        return build


def _case_line(case: dict) -> str:
    keys = (
        "id",
        "window",
        "time_difference_ms",
        "size_ms",
        "advance_ms",
        "gap_ms",
        "grace_ms",
        "retention_ms",
        "aggregation",
        "emit",
        "input",
    )
    return json.dumps({k: case[k] for k in keys if k in case}, separators=(",", ":"))


def run_batch(
    cases: Iterable[dict],
    *,
    threads: int = 2,
    timeout: float | None = None,
    build: OracleBuild | None = None,
    stats: dict | None = None,
    java_opts: Sequence[str] | None = None,
) -> list[dict]:
    """Run many cases in one JVM; returns one result per case, in order. ``stats`` (if given) receives the
    oracle's own timing line (``batch_cases``, ``seconds``, ``cases_per_second``). ``java_opts`` replaces the
    default JVM options."""
    cases = list(cases)
    if not cases:
        return []
    build = build or ensure_built()
    payload = "".join(_case_line(dict(c, id=i)) + "\n" for i, c in enumerate(cases))
    proc = subprocess.run(
        build.command("--batch", "--threads", str(threads), java_opts=java_opts),
        input=payload,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise OracleError(f"oracle exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    lines = proc.stdout.splitlines()
    if len(lines) != len(cases):
        raise OracleError(f"oracle returned {len(lines)} results for {len(cases)} cases:\n{proc.stderr[-4000:]}")
    results = []
    for i, (case, line) in enumerate(zip(cases, lines, strict=True)):
        res = json.loads(line)
        if res.get("id") != i:
            raise OracleError(f"oracle result out of order: expected id {i}, got {res.get('id')}")
        res["id"] = case.get("id", i)
        results.append(res)
    if stats is not None:
        for line in reversed(proc.stderr.splitlines()):
            if line.startswith("{") and "batch_cases" in line:
                stats.update(json.loads(line))
                break
    return results


def run_case(case: dict, **kw: Any) -> dict:
    return run_batch([case], threads=1, **kw)[0]


class OracleSession:
    """One long-lived oracle JVM answering one case at a time (for shrinking / interactive use)."""

    def __init__(self, build: OracleBuild | None = None):
        self._build = build or ensure_built()
        self._proc: subprocess.Popen | None = None
        self._n = 0

    def __enter__(self) -> OracleSession:
        self._start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            self._build.command("--batch", "--threads", "1"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )

    def run(self, case: dict) -> dict:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        assert self._proc and self._proc.stdin and self._proc.stdout
        self._n += 1
        self._proc.stdin.write(_case_line(dict(case, id=self._n)) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            self.close()
            raise OracleError("oracle process died")
        res = json.loads(line)
        res["id"] = case.get("id", self._n)
        return res

    def close(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(Exception):
                self._proc.stdin.close()  # type: ignore[union-attr]
                self._proc.wait(timeout=30)
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc = None


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    try:
        build = ensure_built(force="--force" in rest, quiet=False)
    except OracleUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if cmd == "build":
        print(f"oracle built for Kafka {build.kafka_version}: {ORACLE_DIR}")
        return 0
    if cmd == "batch":
        return subprocess.call(build.command("--batch", *rest))
    if cmd == "replay":
        return subprocess.call(build.command(*rest))
    print(f"unknown command {cmd!r} (build | batch | replay)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
