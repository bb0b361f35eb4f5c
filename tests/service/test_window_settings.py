"""The window family's settings (issue 31): window, window_size, advance, gap - each misfit refused at start in one
line naming the setting; the checkpoint records the window definition and refuses another."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from service.checkpoint_access import LAYOUT_FILE, checkpoint_window_problem
from service.settings import ENV_PREFIX, WINDOW_SIZE_SETTINGS, WINDOW_TYPES, Settings, SettingsError, load
from tests.service.harness import PROJECT
from windowstore import WINDOW_TYPES as ENGINE_WINDOW_TYPES
from windowstore import WindowDefinition, describe_identity

Def = WindowDefinition


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args], cwd=PROJECT, capture_output=True, text=True, timeout=120
    )


def test_the_settings_know_the_engines_window_types():
    assert WINDOW_TYPES == ENGINE_WINDOW_TYPES == tuple(WINDOW_SIZE_SETTINGS)


@pytest.mark.parametrize(
    ("argv", "env", "definition"),
    [
        ([], {}, Def("sliding", 60_000)),
        (
            ["--window", "tumbling", "--window-size", "1h", "--grace", "5s"],
            {},
            Def("tumbling", 3_600_000, grace_ms=5000),
        ),
        (
            ["--window", "hopping", "--window-size", "1m", "--advance", "7s"],
            {},
            Def("hopping", 60_000, 7000),
        ),
        (
            ["--window", "hopping", "--window-size", "1m", "--advance", "1m"],
            {},
            Def("hopping", 60_000, 60_000),
        ),
        ([], {ENV_PREFIX + "WINDOW": "Session", ENV_PREFIX + "GAP": "5m"}, Def("session", gap_ms=300_000)),
        (["--window", "sliding", "--time-difference", "10s"], {}, Def("sliding", 10_000)),
    ],
)
def test_valid_window_settings_make_the_definition(argv, env, definition):
    assert load(argv, environ=env).window_definition == definition


@pytest.mark.parametrize(
    ("argv", "env", "name", "needle"),
    [
        (["--window", "weekly"], {}, "window", "must be one of sliding, tumbling, hopping, session"),
        (["--window", "tumbling"], {}, "window_size", "window=tumbling needs a window size"),
        (["--window", "hopping", "--window-size", "1m"], {}, "advance", "0 < advance <= window_size"),
        (["--window", "hopping", "--window-size", "1m", "--advance", "2m"], {}, "advance", "got 2m"),
        (["--window", "hopping", "--advance", "1s"], {}, "window_size", "window=hopping needs a window size"),
        (["--window", "session"], {}, "gap", "needs an inactivity gap > 0"),
        (["--window", "session", "--gap", "0"], {}, "gap", "needs an inactivity gap > 0"),
        (["--gap", "5s"], {}, "gap", "applies to window=session only; window=sliding takes time_difference"),
        (["--window-size", "1m"], {}, "window_size", "applies to window=tumbling only"),
        (["--window", "tumbling", "--window-size", "1m", "--advance", "1s"], {}, "advance", "window=hopping only"),
        # given at its default value it is still given: an error, not silently ignored
        (["--window", "tumbling", "--window-size", "1m", "--time-difference", "1m"], {}, "time_difference", "sliding"),
        ([], {ENV_PREFIX + "WINDOW": "session", ENV_PREFIX + "GAP": "1m", ENV_PREFIX + "ADVANCE": "1s"}, "advance", ""),
    ],
)
def test_a_window_setting_that_does_not_fit_is_named(argv, env, name, needle):
    with pytest.raises(SettingsError) as e:
        load(argv, environ=env)
    assert e.value.name == name
    assert needle in str(e.value) and "--" + name.replace("_", "-") in str(e.value)


def test_settings_built_in_code_are_checked_too():
    with pytest.raises(SettingsError, match="applies to window=session only"):
        Settings(gap=1000)
    with pytest.raises(SettingsError, match="applies to window=sliding only"):
        Settings(window="tumbling", window_size=1000, time_difference=5000)


def test_a_bad_window_setting_exits_2_in_one_line():
    r = _cli("check-settings", "--window", "hopping", "--window-size", "10s", "--advance", "20s")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "invalid setting advance" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------------ the checkpoint


def _with_batches(root):
    (root / "offsets").mkdir(parents=True)
    (root / "offsets" / "0").write_text("v1\n")


def test_the_checkpoint_records_the_definition_and_refuses_another(tmp_path):
    tumbling = WindowDefinition("tumbling", 60_000).identity()
    hopping = WindowDefinition("hopping", 60_000, 10_000).identity()
    assert checkpoint_window_problem(str(tmp_path), tumbling, describe_identity) is None
    assert json.loads((tmp_path / LAYOUT_FILE).read_text())["window"] == tumbling
    # no batch ran yet: nothing to continue, the new definition is recorded instead
    assert checkpoint_window_problem(str(tmp_path), hopping, describe_identity) is None
    assert json.loads((tmp_path / LAYOUT_FILE).read_text())["window"] == hopping
    _with_batches(tmp_path)
    assert checkpoint_window_problem(str(tmp_path), hopping, describe_identity) is None
    problem = checkpoint_window_problem(str(tmp_path), tumbling, describe_identity)
    assert problem is not None and "\n" not in problem
    assert "hopping size_ms=60000 advance_ms=10000" in problem and "tumbling size_ms=60000" in problem
    assert "new checkpoint_dir" in problem
    # the grace is not part of the definition a checkpoint is bound to (Kafka Streams lets it change)
    graced = WindowDefinition("hopping", 60_000, 10_000, grace_ms=5000).identity()
    assert checkpoint_window_problem(str(tmp_path), graced, describe_identity) is None


def test_a_checkpoint_from_before_window_types_holds_sliding_windows(tmp_path):
    _with_batches(tmp_path)
    (tmp_path / LAYOUT_FILE).write_text(json.dumps({"balance_tasks": True}))
    problem = checkpoint_window_problem(str(tmp_path), WindowDefinition("tumbling", 1000).identity(), describe_identity)
    assert problem is not None and "holds state of sliding windows" in problem
    sliding = WindowDefinition("sliding", 5000).identity()
    assert checkpoint_window_problem(str(tmp_path), sliding, describe_identity) is None
    assert json.loads((tmp_path / LAYOUT_FILE).read_text()) == {"balance_tasks": True, "window": sliding}


def test_a_restart_with_another_definition_exits_2_in_one_line_before_spark(tmp_path):
    ck = tmp_path / "ck"
    _with_batches(ck)
    (ck / LAYOUT_FILE).write_text(json.dumps({"window": WindowDefinition("tumbling", 60_000).identity()}))
    r = _cli(
        "run",
        "--checkpoint-dir",
        str(ck),
        "--window",
        "hopping",
        "--window-size",
        "1m",
        "--advance",
        "10s",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--metrics-port",
        "0",
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid setting window"), r.stderr
    assert "tumbling size_ms=60000" in lines[0] and "hopping size_ms=60000 advance_ms=10000" in lines[0]
