"""The container health check reads "processing" from /metrics (service/healthcheck.py), and the checkpoint
folder check at start (service/checkpoint_access.py)."""

from __future__ import annotations

import os

import pytest

from service.checkpoint_access import checkpoint_dir_problem
from service.healthcheck import PROGRESS_METRIC, check

NOW = 1_800_000_000.0


def metrics(value: str) -> str:
    return (
        f"# HELP {PROGRESS_METRIC} Wall time of the last query progress\n# TYPE {PROGRESS_METRIC} gauge\n"
        f"slidingwindow_micro_batches_total 3.0\n{PROGRESS_METRIC} {value}\n"
    )


def test_recent_progress_is_healthy():
    ok, why = check(metrics(str(NOW - 3)), NOW, 120)
    assert ok and why.startswith("processing")


@pytest.mark.parametrize(
    "text, fragment",
    [
        (metrics("0.0"), "not completed a micro-batch"),  # port answers, query not started yet
        (metrics(str(NOW - 121)), "no query progress for 121s"),  # stuck
        ("slidingwindow_micro_batches_total 3.0\n", "missing"),  # another process on the port
        (metrics("nan?"), "unreadable"),
    ],
)
def test_not_processing_is_unhealthy_with_the_reason(text, fragment):
    ok, why = check(text, NOW, 120)
    assert not ok and fragment in why


def test_the_age_bound_is_inclusive():
    assert check(metrics(str(NOW - 120)), NOW, 120)[0]


def test_metric_names_the_service_exports():
    from service import metrics as m

    assert m.last_progress._name == PROGRESS_METRIC.removesuffix("_total")  # the gauge the check reads


def test_a_writable_checkpoint_folder_passes_and_is_created(tmp_path):
    assert checkpoint_dir_problem(str(tmp_path / "new" / "checkpoint")) is None
    assert (tmp_path / "new" / "checkpoint").is_dir()
    assert list((tmp_path / "new" / "checkpoint").iterdir()) == []  # the probe file is gone


def test_an_unwritable_checkpoint_folder_is_one_line_naming_the_fixes(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    problem = checkpoint_dir_problem(str(blocker / "checkpoint"))  # a file where a folder must be
    assert problem and "\n" not in problem
    assert str(blocker / "checkpoint") in problem and f"uid {os.getuid()}" in problem
    assert "chown" in problem and "--user" in problem and "SLIDINGWINDOW_CHECKPOINT_DIR" in problem


def test_remote_checkpoints_are_left_to_spark():
    assert checkpoint_dir_problem("s3a://bucket/checkpoint") is None
