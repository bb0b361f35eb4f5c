"""The driver JVM's class-data archive (service.spark.classdata): where it lives, which JVM options use or make it,
how a JVM of its own builds it from the class list a JVM wrote (a real JDK, a small list: Spark's whole list
takes a minute, measured in bench/recovery_bench.py), and that a folder it cannot use only means no archive."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from connectors.jars import java_executable
from service.spark.classdata import archive_for, dump_command


def test_no_folder_is_no_archive():
    assert archive_for("") is None


def test_a_missing_archive_is_recorded_for_and_an_existing_one_is_mapped(tmp_path):
    archive = archive_for(str(tmp_path / "cds"), "/nowhere/a.jar")
    assert archive is not None and archive.path.parent == tmp_path / "cds"
    assert archive.path.name.startswith("spark-") and archive.path.suffix == ".jsa"
    assert archive.java_options() == [f"-XX:DumpLoadedClassList={archive.class_list()}"]
    assert archive.class_list().parent == archive.path.parent and str(os.getpid()) in archive.class_list().name
    archive.path.write_bytes(b"x")
    assert archive.java_options()[0] == f"-XX:SharedArchiveFile={archive.path}"
    assert "-Xshare:auto" in archive.java_options()  # an archive the JVM cannot map is skipped, never fatal
    # other jars, another archive: an upgrade never maps a stale one
    assert archive_for(str(tmp_path / "cds"), str(archive.path)).path != archive.path  # type: ignore[union-attr]


def test_a_folder_that_cannot_be_made_means_no_archive_and_one_line(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.INFO, logger="service.spark.classdata"):
        assert archive_for(str(blocker / "cds")) is None
    assert len(caplog.records) == 1 and "class_data_cache" in caplog.records[0].getMessage()


def test_the_dump_takes_the_running_jvms_class_path_and_module_options_not_its_memory_or_archives(tmp_path):
    running = [
        "-Xmx1g",
        "-XX:DumpLoadedClassList=/c/list",
        "-XX:+IgnoreUnrecognizedVMOptions",
        "--add-modules=jdk.incubator.vector",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "-XX:+UseSerialGC",
        "-Xlog:cds=off",
        "-XX:StartFlightRecording=filename=x.jfr",
        "-Dio.netty.tryReflectionSetAccessible=true",
    ]
    cmd = dump_command("/jdk/bin/java", "/a.jar:/b.jar", running, tmp_path / "l", tmp_path / "a.jsa")
    assert cmd[0] == "/jdk/bin/java" and cmd[-2:] == ["-cp", "/a.jar:/b.jar"]
    assert cmd[1:6] == [*running[2:6], running[8]]
    assert "-Xshare:dump" in cmd and f"-XX:SharedClassListFile={tmp_path / 'l'}" in cmd
    assert f"-XX:SharedArchiveFile={tmp_path / 'a.jsa'}" in cmd
    assert not [o for o in cmd if o.startswith(("-Xmx", "-XX:DumpLoadedClassList", "-XX:StartFlightRecording"))]


def test_a_jvm_of_its_own_builds_an_archive_that_the_next_jvm_maps(tmp_path, caplog):
    java = java_executable()
    jar = min((Path(__import__("pyspark").__file__).parent / "jars").glob("*.jar"), key=lambda j: j.stat().st_size)
    archive = archive_for(str(tmp_path / "cds"), "")
    assert archive is not None
    options = ["-XX:+UseSerialGC"]
    # the JVM the service starts while there is no archive: it lists the classes it loads
    subprocess.run(
        [java, *options, *archive.java_options(), "-cp", str(jar), "-version"], check=True, capture_output=True
    )
    assert archive.class_list().stat().st_size > 0
    java_home = str(Path(java).resolve().parent.parent)
    with caplog.at_level(logging.INFO, logger="service.spark.classdata"):
        assert archive.build(java_home, str(jar), [*options, *archive.java_options()])
    assert archive.exists and "written" in caplog.text
    assert not list(archive.path.parent.glob("*.classlist")) and not list(archive.path.parent.glob("*.tmp"))
    # the next start maps it: -Xshare:on fails the JVM if it cannot
    mapped = subprocess.run(
        [java, *options, *archive.java_options(), "-Xshare:on", "-cp", str(jar), "-version"],
        capture_output=True,
        text=True,
    )
    assert mapped.returncode == 0, mapped.stderr
    assert "sharing" in mapped.stderr


def test_a_build_that_fails_is_one_warning_and_no_archive(tmp_path, caplog):
    archive = archive_for(str(tmp_path / "cds"), "")
    assert archive is not None
    archive.class_list().write_text("java/lang/Object\n")
    with caplog.at_level(logging.WARNING, logger="service.spark.classdata"):
        assert not archive.build(str(tmp_path / "no-jdk"), "", [])
    assert not archive.exists and len(caplog.records) == 1
    assert "cannot write the JVM class-data archive" in caplog.records[0].getMessage()
    assert not list(archive.path.parent.glob(f"{archive.path.name}.*"))


def test_what_a_killed_build_left_is_removed_and_a_running_ones_is_not(tmp_path):
    folder = tmp_path / "cds"
    archive = archive_for(str(folder), "")
    assert archive is not None
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = [folder / f"{archive.path.name}.{dead.pid}.{kind}" for kind in ("tmp", "classlist", "classes")]
    running = folder / f"{archive.path.name}.{os.getppid()}.tmp"
    for f in (*left, running):
        f.write_text("x")
    assert archive_for(str(folder), "") is not None
    assert not any(f.exists() for f in left) and running.exists()
