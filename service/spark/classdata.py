"""Class-data sharing for the driver JVM (AppCDS): the classes Spark loads to start and to run the first
micro-batch, archived once and mapped by every later start instead of being read from the jars, parsed and
verified again.

* No archive yet for this JVM and these jars: the JVM starts with ``-XX:+RecordDynamicDumpInfo`` and, once the
  query has completed a micro-batch (every class of the steady path loaded), the driver has it write a dynamic
  archive with the JDK's ``jcmd`` (``VM.cds dynamic_dump``) under a temporary name, renamed when complete: a
  start never maps a half-written archive, and a SIGKILLed first run leaves at most a temporary file. The JVM
  pauses while it writes (once). A JRE without ``jcmd`` (the runtime image) makes no archive.
* An archive: the JVM starts with ``-XX:SharedArchiveFile``. The name holds a fingerprint of the JVM and of
  Spark's jars, so an upgrade of either makes a new one; an archive the JVM still cannot use is ignored by it
  (sharing is ``auto``), silently (its cds logging off).

Nothing here may fail a start: a folder that cannot be made or written, or a JVM that refuses the dump, is one
log line and the service runs without an archive. JDK 17 and later (``RecordDynamicDumpInfo``, ``VM.cds``); the
archive is made on the first start, so a fresh machine's first start is not faster. Measured in
``bench/recovery_bench.py`` (bench/RESULTS.md).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["Archive", "archive_for", "dump_after_first_batch"]

logger = logging.getLogger(__name__)

#: how long the driver waits for the first micro-batch before it archives the classes loaded so far
WAIT_FOR_BATCH_S = 600.0
#: how long the dump may take (the JVM pauses while it writes: seconds on a quiet machine, a minute at load 12)
DUMP_TIMEOUT_S = 600.0


class Archive:
    """The class-data archive of this JVM and jar set in ``folder``: the JVM options that use it or make it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    def java_options(self) -> list[str]:
        if self.exists:
            # an archive the JVM cannot map (another JDK build, changed jars) is skipped without a word
            return [f"-XX:SharedArchiveFile={self.path}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
        return ["-XX:+RecordDynamicDumpInfo"]

    def dump(self, pid: int) -> bool:
        """Have the running JVM ``pid`` (started with :meth:`java_options` before the archive existed) write it,
        with the JDK's ``jcmd`` (``VM.cds dynamic_dump``)."""
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        jcmd = _jcmd()
        if jcmd is None:
            logger.info("no JVM class-data archive: this JVM has no jcmd (a JRE); later starts run without one")
            return False
        t0 = time.monotonic()
        try:
            done = subprocess.run(
                [jcmd, str(pid), "VM.cds", "dynamic_dump", str(tmp)],
                capture_output=True,
                text=True,
                timeout=DUMP_TIMEOUT_S,
            )
            if done.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
                raise RuntimeError((done.stdout + done.stderr).strip().splitlines()[-1:] or "no archive written")
            tmp.replace(self.path)
        except Exception as e:  # never a reason to stop: the next start runs without the archive
            logger.warning("cannot write the JVM class-data archive %s: %s", self.path, e)
            tmp.unlink(missing_ok=True)
            return False
        logger.info(
            "JVM class-data archive written in %.1fs (%.0f MB): later starts map it (%s)",
            time.monotonic() - t0,
            self.path.stat().st_size / 1e6,
            self.path,
        )
        return True


def _jcmd() -> str | None:
    """The ``jcmd`` of the JVM Spark runs (``JAVA_HOME``, else the ``java`` on the PATH)."""
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else Path(shutil.which("java") or "java")
    jcmd = java.resolve().parent / "jcmd"
    return str(jcmd) if jcmd.is_file() else None


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
    return Archive(root / f"spark-{pyspark.__version__}-{_fingerprint(spark_home, extra_jars)}.jsa")


def dump_after_first_batch(archive: Archive, spark: Any, pid: int) -> threading.Thread:
    """Write ``archive`` from a thread once a streaming query of ``spark`` has completed a micro-batch (or after
    :data:`WAIT_FOR_BATCH_S`), so that it holds the classes of the query's steady path too."""

    def run() -> None:
        deadline = time.monotonic() + WAIT_FOR_BATCH_S
        try:
            while time.monotonic() < deadline:
                if any(q.lastProgress is not None for q in spark.streams.active):
                    break
                time.sleep(1.0)
        except Exception as e:  # the session stopped meanwhile
            logger.debug("no class-data archive: %s", e)
            return
        archive.dump(pid)

    t = threading.Thread(target=run, name="slidingwindow-class-data", daemon=True)
    t.start()
    return t
