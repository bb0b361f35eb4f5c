"""Resolve JVM artifacts with Maven into a local cache; the runtime's set is Spark's Kafka connector.

``spark-kafka``
    ``org.apache.spark:spark-sql-kafka-0-10_<scala>:<version>`` and its runtime dependencies, minus every artifact
    the installed pyspark already ships in ``pyspark/jars`` (compared by artifact id). The result is meant for
    ``spark.jars``; the service needs it at run time (the image resolves it at build time, so the container reads
    only the cache and never calls Maven).

Other sets (the development Kafka broker, :mod:`devtools.broker_jars`) use the same machinery:
:func:`maven_resolve` and :func:`materialize`.

Versions come from :mod:`connectors.versions`. Jars are copied from Maven's local repository into
``$SLIDINGWINDOW_JAR_CACHE/<set name>/`` (default ``~/.cache/slidingwindow/jars/<set name>/``); a marker file
(``resolved.json``) records the result, so later calls do not run Maven at all. Maven uses its own configuration
(``~/.m2/settings.xml`` for mirrors or proxies); no repository is named here.

CLI::

    python -m connectors.jars spark-kafka                       # one jar path per line
    python -m connectors.jars spark-kafka --format spark-jars   # comma-separated, for spark.jars
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from connectors import versions

logger = logging.getLogger(__name__)

ENV_CACHE = "SLIDINGWINDOW_JAR_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "slidingwindow" / "jars"
# The pom Maven resolves a set from (nothing is built from it); @ARTIFACT_SET@ and @DEPENDENCIES@ are filled in.
POM_TEMPLATE = """<?xml version="1.0" encoding="UTF-8"?>
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>slidingwindow.jars</groupId>
  <artifactId>@ARTIFACT_SET@</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
@DEPENDENCIES@
  </dependencies>
</project>
"""
MARKER = "resolved.json"
_MARKER_FORMAT = 1
# The dependency plugin bundled with Maven 3.8 (2.8) predates dependency:list's outputAbsoluteArtifactFilename.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MAVEN_TIMEOUT_S = 900.0

# "  group:artifact:type[:classifier]:version:scope:/abs/path.jar -- module x (auto)"
_LIST_LINE_RE = re.compile(
    r"^\s*(?P<group>[^:\s]+):(?P<artifact>[^:\s]+):(?P<type>[^:\s]+)(?::(?P<classifier>[^:\s]+))?"
    r":(?P<version>[^:\s]+):(?P<scope>[^:\s]+):(?P<path>.+?)(?:\s+--\s.*)?$"
)


class JarResolutionError(RuntimeError):
    """Maven or Java is missing, or Maven could not resolve an artifact set."""


@dataclass(frozen=True)
class Coordinate:
    """A Maven artifact to resolve (always ``jar`` packaging)."""

    group: str
    artifact: str
    version: str
    classifier: str | None = None
    exclusions: tuple[tuple[str, str], ...] = ()
    """(groupId, artifactId) pairs of transitive dependencies to leave out."""

    def __str__(self) -> str:
        tail = f":{self.classifier}" if self.classifier else ""
        return f"{self.group}:{self.artifact}:{self.version}{tail}"

    def pom_xml(self) -> str:
        classifier = f"<classifier>{self.classifier}</classifier>" if self.classifier else ""
        exclusions = "".join(
            f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>" for g, a in self.exclusions
        )
        if exclusions:
            exclusions = f"<exclusions>{exclusions}</exclusions>"
        return (
            f"    <dependency><groupId>{self.group}</groupId><artifactId>{self.artifact}</artifactId>"
            f"<version>{self.version}</version>{classifier}{exclusions}</dependency>"
        )


@dataclass(frozen=True)
class ResolvedArtifact:
    """One line of ``mvn dependency:list``: coordinates, scope and the file in Maven's local repository."""

    group: str
    artifact: str
    type: str
    classifier: str | None
    version: str
    scope: str
    path: str

    @property
    def file_name(self) -> str:
        return Path(self.path).name


# ----------------------------------------------------------------------------------------------- environment


def cache_root() -> Path:
    """The jar cache folder: ``$SLIDINGWINDOW_JAR_CACHE`` or ``~/.cache/slidingwindow/jars``."""
    env = os.environ.get(ENV_CACHE)
    return Path(env).expanduser() if env else DEFAULT_CACHE


def require_tool(name: str, hint: str) -> str:
    """Absolute path of executable ``name`` on PATH, or a :class:`JarResolutionError` saying how to get it."""
    path = shutil.which(name)
    if path is None:
        raise JarResolutionError(f"'{name}' was not found on PATH. {hint}")
    return path


def java_executable() -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java`` when set, else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return require_tool("java", "Install a Java 17+ runtime (e.g. the Debian package openjdk-17-jre-headless).")


def maven_executable() -> str:
    """The ``mvn`` on PATH (Maven also needs ``java``, checked too)."""
    java_executable()
    return require_tool("mvn", "Install Apache Maven 3.8+ (e.g. the Debian package maven).")


# ----------------------------------------------------------------------------------------------- maven


def _render_pom(set_name: str, coordinates: Sequence[Coordinate]) -> str:
    template = POM_TEMPLATE
    deps = "\n".join(c.pom_xml() for c in coordinates)
    return template.replace("@ARTIFACT_SET@", set_name).replace("@DEPENDENCIES@", deps)


def parse_dependency_list(text: str) -> list[ResolvedArtifact]:
    """Parse the output file of ``mvn dependency:list -DoutputAbsoluteArtifactFilename=true``."""
    found: list[ResolvedArtifact] = []
    for line in text.splitlines():
        m = _LIST_LINE_RE.match(line)
        if not m or not os.path.isabs(m.group("path")):
            continue
        found.append(ResolvedArtifact(**m.groupdict()))
    return found


def maven_resolve(coordinates: Sequence[Coordinate], *, set_name: str = "resolve") -> list[ResolvedArtifact]:
    """Resolve ``coordinates`` and their compile+runtime dependencies with Maven; return them in Maven's order.

    Downloads into Maven's local repository (``~/.m2/repository``); nothing is copied.
    """
    mvn = maven_executable()
    with tempfile.TemporaryDirectory(prefix="slidingwindow-mvn-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_render_pom(set_name, coordinates), encoding="utf-8")
        out = Path(tmp) / "dependencies.txt"
        cmd = [
            mvn, "-B", "-q", "-f", str(pom),
            f"{DEPENDENCY_PLUGIN}:list",
            "-DincludeScope=runtime",
            "-DoutputAbsoluteArtifactFilename=true",
            f"-DoutputFile={out}",
        ]  # fmt: skip
        logger.info("resolving %s with Maven", ", ".join(map(str, coordinates)))
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise JarResolutionError(f"Maven did not finish within {MAVEN_TIMEOUT_S:.0f}s: {' '.join(cmd)}") from e
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
            raise JarResolutionError(
                f"Maven could not resolve {', '.join(map(str, coordinates))} (exit {proc.returncode}):\n{tail}"
            )
        artifacts = parse_dependency_list(out.read_text(encoding="utf-8"))
        logger.info("Maven resolved %d artifacts in %.1fs", len(artifacts), time.monotonic() - t0)
    if not artifacts:
        raise JarResolutionError(f"Maven resolved nothing for {', '.join(map(str, coordinates))}")
    return artifacts


# ----------------------------------------------------------------------------------------------- cache


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_marker(set_dir: Path) -> list[Path] | None:
    try:
        data = json.loads((set_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("format") != _MARKER_FORMAT:
        return None
    jars = [set_dir / name for name in data.get("jars", [])]
    if not jars or not all(p.is_file() for p in jars):
        return None
    return jars


def materialize(
    set_name: str,
    resolver: Callable[[], tuple[list[ResolvedArtifact], list[ResolvedArtifact], dict[str, object]]],
    *,
    cache_dir: Path | None,
    force: bool,
) -> list[Path]:
    """Return the cached jars of ``set_name``; on a miss run ``resolver`` (Maven) and copy its jars into the cache.

    ``resolver`` returns (artifacts to keep, artifacts left out, extra marker fields). Concurrent callers
    (processes) wait on a lock file; the marker is written last, so a crash leaves "not cached".
    """
    root = cache_dir if cache_dir is not None else cache_root()
    set_dir = root / set_name
    if not force:
        cached = _read_marker(set_dir)
        if cached is not None:
            logger.debug("jar set %s: %d jars from cache %s", set_name, len(cached), set_dir)
            return cached
    with _locked(root / f".{set_name}.lock"):
        if not force:  # another process may have resolved it while we waited for the lock
            cached = _read_marker(set_dir)
            if cached is not None:
                return cached
        t0 = time.monotonic()
        kept, excluded, info = resolver()
        if set_dir.exists():
            shutil.rmtree(set_dir)
        set_dir.mkdir(parents=True)
        names: list[str] = []
        for art in kept:
            if art.file_name in names:
                continue
            shutil.copy2(art.path, set_dir / art.file_name)
            names.append(art.file_name)
        marker = {
            "format": _MARKER_FORMAT,
            "set": set_name,
            "jars": names,
            "artifacts": [asdict(a) for a in kept],
            "excluded": [f"{a.group}:{a.artifact}:{a.version}" for a in excluded],
            "resolved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "resolve_seconds": round(time.monotonic() - t0, 2),
            **info,
        }
        tmp = set_dir / f"{MARKER}.tmp"
        tmp.write_text(json.dumps(marker, indent=2), encoding="utf-8")
        tmp.replace(set_dir / MARKER)  # the marker goes last: a crash before it means "not cached"
        logger.info("jar set %s: %d jars in %s (%.1fs)", set_name, len(names), set_dir, marker["resolve_seconds"])
        return [set_dir / n for n in names]


# ----------------------------------------------------------------------------------------------- artifact sets


def spark_kafka_set_name() -> str:
    s = versions.spark_versions()
    connector = versions.spark_kafka_connector_version()
    token = versions.jvm_versions().spark_kafka_token_provider
    suffix = f"-token-{token}" if token else ""
    return f"spark-sql-kafka-0-10_{s.scala}-{connector}{suffix}-pyspark-{s.spark}"


def _shipped_by_pyspark(artifact: str, shipped_names: Sequence[str]) -> str | None:
    """The pyspark jar named ``<artifact>-<version>.jar``, if any."""
    prefix = f"{artifact}-"
    for name in shipped_names:
        if name.startswith(prefix) and name[len(prefix) : len(prefix) + 1].isdigit():
            return name
    return None


def spark_kafka_jars(*, cache_dir: Path | None = None, force: bool = False) -> list[Path]:
    """Jars for ``spark.jars``: Spark's Kafka connector + runtime deps not already in ``pyspark/jars``, cached."""
    s = versions.spark_versions()
    connector = versions.spark_kafka_connector_version()
    token_provider = versions.jvm_versions().spark_kafka_token_provider
    token_artifact = f"spark-token-provider-kafka-0-10_{s.scala}"
    roots = [Coordinate("org.apache.spark", f"spark-sql-kafka-0-10_{s.scala}", connector)]
    if token_provider:
        roots[0] = Coordinate(
            roots[0].group, roots[0].artifact, connector, exclusions=(("org.apache.spark", token_artifact),)
        )
        roots.append(Coordinate("org.apache.spark", token_artifact, token_provider))
    name = spark_kafka_set_name()

    def resolve() -> tuple[list[ResolvedArtifact], list[ResolvedArtifact], dict[str, object]]:
        if connector != s.spark:
            logger.warning(
                "resolving spark-sql-kafka-0-10 %s for pyspark %s (pinned in connectors/pins.py)",
                connector,
                s.spark,
            )
        try:
            resolved = maven_resolve(roots, set_name=name)
        except JarResolutionError as e:
            raise JarResolutionError(
                f"{e}\nIf Maven has no Kafka connector for pyspark {s.spark}, pin one that exists with "
                "SPARK_KAFKA_CONNECTOR (and, if needed, SPARK_KAFKA_TOKEN_PROVIDER) in connectors/pins.py."
            ) from e
        shipped = sorted(p.name for p in s.jars_dir.glob("*.jar"))
        kept: list[ResolvedArtifact] = []
        excluded: list[ResolvedArtifact] = []
        for art in resolved:
            twin = _shipped_by_pyspark(art.artifact, shipped)
            if twin is None:
                kept.append(art)
            else:
                excluded.append(art)
                if twin != art.file_name:
                    logger.debug("%s: pyspark ships %s instead", art.file_name, twin)
        return kept, excluded, {"roots": list(map(str, roots)), "pyspark": s.spark}

    return materialize(name, resolve, cache_dir=cache_dir, force=force)


def spark_jars_conf(*, cache_dir: Path | None = None) -> str:
    """Comma-separated value for the ``spark.jars`` setting."""
    return ",".join(str(p) for p in spark_kafka_jars(cache_dir=cache_dir))


ARTIFACT_SETS: dict[str, Callable[..., list[Path]]] = {
    "spark-kafka": spark_kafka_jars,
}


def main(
    argv: Sequence[str] | None = None,
    *,
    prog: str = "python -m connectors.jars",
    artifact_sets: dict[str, Callable[..., list[Path]]] | None = None,
) -> int:
    """The CLI; ``artifact_sets`` lets a caller offer more sets than the runtime's (``devtools`` adds ``kafka``)."""
    sets = ARTIFACT_SETS if artifact_sets is None else artifact_sets
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("set", choices=sorted(sets), help="artifact set to resolve")
    parser.add_argument(
        "--format",
        choices=["lines", "classpath", "spark-jars"],
        default="lines",
        help="one path per line (default), ':'-joined classpath, or ','-joined spark.jars value",
    )
    parser.add_argument("--force", action="store_true", help="resolve again even if cached")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help=f"cache folder (default ${ENV_CACHE} or {DEFAULT_CACHE})"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        jars = sets[args.set](cache_dir=args.cache_dir, force=args.force)
    except (JarResolutionError, versions.VersionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sep = {"lines": "\n", "classpath": os.pathsep, "spark-jars": ","}[args.format]
    print(sep.join(str(p) for p in jars))
    return 0


if __name__ == "__main__":
    sys.exit(main())
