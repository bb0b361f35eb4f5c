"""Class-data sharing for the driver JVM (AppCDS): the classes Spark loads to start and to run the first
micro-batch, archived once and mapped by every later start instead of being read from the jars, parsed and
verified again.

* No archive yet for this JVM and these jars: the JVM starts with ``-XX:DumpLoadedClassList``, so it writes the
  name of every class it loads from the JDK and the class path to a list (a line per class, as it loads it).
  Once the query has completed a micro-batch (every class of the steady path loaded), the driver runs a
  *separate* JVM, at the lowest CPU priority, that builds a static archive from that list
  (``java -Xshare:dump -XX:SharedClassListFile``, with the running JVM's class path and module options) under a
  temporary name, renamed when complete: a start never maps a half-written archive, and a SIGKILLed first run
  leaves at most a temporary file. The service's JVM neither pauses nor grows for it: the cost is that other
  JVM's, once - about a minute of one core and up to ~1 GiB while it runs (it loads every listed class again,
  interpreted: a JVM building an archive runs no compiler). Only ``java`` is needed, not the JDK's tools:
  in the runtime image (a JRE) :func:`dump_command` built one too (bench/HISTORY.md).
* An archive: the JVM starts with ``-XX:SharedArchiveFile``. The name holds a fingerprint of the JVM and of
  Spark's jars, so an upgrade of either makes a new one; an archive the JVM still cannot use is ignored by it
  (sharing is ``auto``), silently (its cds logging off). Classes of other class loaders (``spark.jars``: the
  Kafka connector) are not in it and load as before.

Why not the running JVM's own dump (``jcmd PID VM.cds dynamic_dump``, what this module did first): that JVM
stops while it writes (10 s on a quiet machine, a minute at load 9) and kept ~450 MiB more resident afterwards;
and a static archive also holds the JDK's own classes, pre-verified. Measured in ``bench/recovery_bench.py``
(bench/RESULTS.md).

Nothing here may fail a start: a folder that cannot be made or written, or a JVM that refuses the dump, is one
log line and the service runs without an archive. The archive is made on the first start, so a fresh machine's
first start is not faster.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["Archive", "archive_for", "dump_after_first_batch", "dump_command"]

logger = logging.getLogger(__name__)

#: how long the driver waits for the first micro-batch before it archives the classes loaded so far
WAIT_FOR_BATCH_S = 600.0
#: how long the archive-building JVM may take (about a minute of one core for Spark's ~16,000 classes)
DUMP_TIMEOUT_S = 600.0


class Archive:
    """The class-data archive of this JVM and jar set in ``folder``: the JVM options that use it or make it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    def class_list(self) -> Path:
        """The class list a JVM started without the archive writes (one per driver process)."""
        return self.path.with_name(f"{self.path.name}.{os.getpid()}.classlist")

    def java_options(self) -> list[str]:
        if self.exists:
            # an archive the JVM cannot map (another JDK build, changed jars) is skipped without a word
            return [f"-XX:SharedArchiveFile={self.path}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
        return [f"-XX:DumpLoadedClassList={self.class_list()}"]

    def build(self, java_home: str, class_path: str, jvm_options: list[str]) -> bool:
        """Build the archive from :meth:`class_list` in a JVM of its own (``java_home``'s), with the class path
        and options of the JVM that wrote the list (:func:`dump_command`), at the lowest CPU priority."""
        listed = self.class_list()
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        snapshot = self.path.with_name(f"{self.path.name}.{os.getpid()}.classes")
        t0 = time.monotonic()
        try:
            # the lines written so far (the JVM goes on appending to its list)
            text = listed.read_text(errors="replace")
            snapshot.write_text(text[: text.rfind("\n") + 1])
            java = str(Path(java_home, "bin", "java"))
            proc = subprocess.Popen(
                dump_command(java, class_path, jvm_options, snapshot, tmp),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, proc.pid, 19)  # the service's own work comes first
            try:
                out, _ = proc.communicate(timeout=DUMP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise RuntimeError(f"no archive after {DUMP_TIMEOUT_S:.0f} s") from None
            if proc.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
                errors = [line for line in out.splitlines() if "rror" in line] or out.strip().splitlines()
                raise RuntimeError(f"exit {proc.returncode}: {' / '.join(errors[-2:]) or 'no archive written'}")
            tmp.replace(self.path)
        except Exception as e:  # never a reason to stop: the next start runs without the archive
            logger.warning("cannot write the JVM class-data archive %s: %s", self.path, e)
            tmp.unlink(missing_ok=True)
            return False
        finally:
            snapshot.unlink(missing_ok=True)
            listed.unlink(missing_ok=True)  # the JVM keeps writing to it, unseen, until it exits
        logger.info(
            "JVM class-data archive of %d classes written in %.1fs (%.0f MB) by a JVM of its own: later starts "
            "map it (%s)",
            sum(1 for line in text.splitlines() if line and not line.startswith(("#", "@"))),
            time.monotonic() - t0,
            self.path.stat().st_size / 1e6,
            self.path,
        )
        return True


#: options of the running JVM that the archive-building JVM must not take: its own memory sizes, other archives
#: and class lists, agents, recordings and logging
_NOT_FOR_DUMP = (
    "-Xmx",
    "-Xms",
    "-Xmn",
    "-Xss",
    "-Xlog",
    "-Xshare",
    "-XX:DumpLoadedClassList",
    "-XX:SharedArchiveFile",
    "-XX:SharedClassListFile",
    "-XX:ArchiveClassesAtExit",
    "-XX:+RecordDynamicDumpInfo",
    "-XX:AOT",
    "-XX:StartFlightRecording",
    "-XX:FlightRecorderOptions",
    "-XX:+HeapDumpOnOutOfMemoryError",
    "-XX:HeapDumpPath",
    "-XX:OnOutOfMemoryError",
    "-agentlib",
    "-agentpath",
    "-javaagent",
)


def dump_command(java: str, class_path: str, jvm_options: list[str], class_list: Path, archive: Path) -> list[str]:
    """The command that builds a static archive of ``class_list`` into ``archive``: the running JVM's options
    (``jvm_options``: its module options and flags, which the archive must agree with) without those in
    :data:`_NOT_FOR_DUMP`, the same class path (an archive maps only under it), quiet."""
    kept = [o for o in jvm_options if not o.startswith(_NOT_FOR_DUMP)]
    return [
        java,
        *kept,
        "-Xshare:dump",
        f"-XX:SharedClassListFile={class_list}",
        f"-XX:SharedArchiveFile={archive}",
        "-Xlog:cds=error",
        "-Xlog:cds+dynamic=off",
        "-cp",
        class_path,
    ]


def _fingerprint(spark_home: Path, extra_jars: str) -> str:
    """What an archive is valid for: the JVM that runs (its ``java`` and ``libjvm``), Spark's jars and the
    ``spark.jars`` (names, sizes, times)."""
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else Path(shutil.which("java") or "java")
    java = java.resolve()
    parts = [str(java)]
    for f in (java, *sorted(java.parent.parent.glob("lib/server/libjvm.so"))):
        if f.exists():
            st = f.stat()
            parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    jars = sorted((spark_home / "jars").glob("*.jar")) + [Path(j) for j in extra_jars.split(",") if j]
    for jar in jars:
        try:
            st = jar.stat()
        except OSError:
            continue
        parts.append(f"{jar}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_for(folder: str, extra_jars: str = "") -> Archive | None:
    """The archive in ``folder`` (``~`` expanded; created if missing) for this JVM and Spark's jars; None when
    ``folder`` is empty (off) or cannot be made (one log line)."""
    if not folder:
        return None
    import pyspark

    spark_home = Path(os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__))
    root = Path(folder).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK):
            raise PermissionError(f"{root} is not writable")
    except OSError as e:
        logger.info("no JVM class-data archive (setting class_data_cache): %s", e)
        return None
    archive = Archive(root / f"spark-{pyspark.__version__}-{_fingerprint(spark_home, extra_jars)}.jsa")
    _remove_leftovers(root)
    return archive


def _remove_leftovers(root: Path) -> None:
    """Remove what a killed start left while building an archive (a class list, a half-written archive: named
    ``<archive>.<pid>.<kind>``) when that process is gone; a running one's are left alone."""
    for f in root.glob("*.jsa.*.*"):
        pid = f.name.rsplit(".", 2)[-2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            f.unlink(missing_ok=True)
        except OSError:
            pass  # alive, another user's


def dump_after_first_batch(archive: Archive, spark: Any, jvm: Any) -> threading.Thread:
    """Build ``archive`` (:meth:`Archive.build`) from a thread once a streaming query of ``spark`` has completed a
    micro-batch (or after :data:`WAIT_FOR_BATCH_S`), so that it holds the classes of the query's steady path
    too; ``jvm`` (the py4j gateway's view of the driver JVM) tells its Java home, class path and options."""

    def run() -> None:
        deadline = time.monotonic() + WAIT_FOR_BATCH_S
        try:
            while time.monotonic() < deadline:
                if any(q.lastProgress is not None for q in spark.streams.active):
                    break
                time.sleep(1.0)
            java_home = str(jvm.java.lang.System.getProperty("java.home"))
            class_path = str(jvm.java.lang.System.getProperty("java.class.path"))
            options = [
                str(o) for o in jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
            ]
        except Exception as e:  # the session stopped meanwhile
            logger.debug("no class-data archive: %s", e)
            return
        archive.build(java_home, class_path, options)

    t = threading.Thread(target=run, name="slidingwindow-class-data", daemon=True)
    t.start()
    return t
