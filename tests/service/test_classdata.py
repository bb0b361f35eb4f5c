"""The driver JVM's class-data archive (service.spark.classdata): where it lives, which JVM options use or make it,
and that a folder it cannot use only means no archive (the dump itself runs in bench/recovery_bench.py)."""

from __future__ import annotations

import logging

from service.spark.classdata import archive_for


def test_no_folder_is_no_archive():
    assert archive_for("") is None


def test_a_missing_archive_is_recorded_for_and_an_existing_one_is_mapped(tmp_path):
    archive = archive_for(str(tmp_path / "cds"), "/nowhere/a.jar")
    assert archive is not None and archive.path.parent == tmp_path / "cds"
    assert archive.path.name.startswith("spark-") and archive.path.suffix == ".jsa"
    assert archive.java_options() == ["-XX:+RecordDynamicDumpInfo"]
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
