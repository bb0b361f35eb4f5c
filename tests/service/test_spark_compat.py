"""service/spark/compat.py: the daemon and worker patches of pyspark's internals apply only to the pyspark versions
they were written for; on another one the service logs one ERROR and Spark runs pyspark's own (no Spark needed)."""

from __future__ import annotations

import logging

import pytest

from service.spark import compat
from service.spark.job import python_worker_conf


def test_the_pinned_pyspark_is_one_the_patches_were_written_for() -> None:
    assert compat.installed_pyspark().rsplit(".", 1)[0] in compat.PATCHED_FOR
    assert compat.patches_apply()


def test_another_pyspark_gets_one_error_naming_both_versions(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger=compat.__name__):
        assert not compat.patches_apply("3.5.1")
        assert not compat.patches_apply("3.5.1")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "3.5.1" in errors[0] and all(v in errors[0] for v in compat.PATCHED_FOR)


def test_on_another_pyspark_fast_input_keeps_pysparks_daemon_and_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "installed_pyspark", lambda: "5.0.0")
    assert python_worker_conf(True) == {}
    monkeypatch.undo()
    assert set(python_worker_conf(True)) == {"spark.python.daemon.module", "spark.python.worker.module"}
