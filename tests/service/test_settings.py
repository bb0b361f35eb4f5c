"""Settings: env + flags, defaults, one clear error per invalid setting, CLI exit code 2."""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import FrozenInstanceError, fields

import pytest

from service.cli import main
from service.settings import ENV_PREFIX, SETTINGS, Settings, SettingsError, load, parse_duration_ms


def test_defaults_are_valid_and_frozen():
    s = load([], environ={})
    assert s == Settings()
    assert s.spark_master == "local[*]"
    assert s.emit == "update"
    assert s.time_difference_ms == 60_000
    with pytest.raises(FrozenInstanceError):
        s.emit = "every"  # type: ignore[misc]


def test_flag_beats_env_beats_default():
    env = {ENV_PREFIX + "GRACE": "10s", ENV_PREFIX + "EMIT": "close", ENV_PREFIX + "INPUT_TOPICS": "a, b"}
    s = load(["--emit", "every", "--time-difference", "5m"], environ=env)
    assert s.emit == "every"  # flag
    assert s.grace == 10_000  # env
    assert s.time_difference == 300_000  # flag
    assert s.input_topics == ("a", "b")
    assert s.checkpoint_dir == "var/checkpoint"  # default


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1500", 1500),
        ("1500ms", 1500),
        ("10s", 10_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("2d", 172_800_000),
        (" 7 S ", 7000),
    ],
)
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("args", "env", "name"),
    [
        (["--grace", "soon"], {}, "grace"),
        (["--time-difference", "0"], {}, "time_difference"),
        (["--emit", "sometimes"], {}, "emit"),
        ([], {ENV_PREFIX + "STATE_PARTITIONS": "0"}, "state_partitions"),
        ([], {ENV_PREFIX + "AGGREGATIONS": "count,median:amount"}, "aggregations"),
        (["--input-topics", "a b"], {}, "input_topics"),
        (["--changelog-topic", "events"], {}, "changelog_topic"),
        (["--late-topic", "x", "--dead-letter-topic", "x"], {}, "dead_letter_topic"),
        (["--input-format", "avro", "--schema-registry-url", ""], {}, "schema_registry_url"),
        (["--schema-registry-url", "localhost:8081"], {}, "schema_registry_url"),
        (["--create-topics", "maybe"], {}, "create_topics"),
        (["--kafka-options", "acks"], {}, "kafka_options"),
        (["--key-field", "a-b"], {}, "key_field"),
        (["--metrics-port", "-1"], {}, "metrics_port"),
        (["--state-cache-tasks", "0"], {}, "state_cache_tasks"),
        (["--state-cache-tasks=-3"], {}, "state_cache_tasks"),
        ([], {ENV_PREFIX + "STATE_CACHE_TASKS": "lots"}, "state_cache_tasks"),
        ([], {ENV_PREFIX + "STATE_CACHE_TASKS": "10000000"}, "state_cache_tasks"),
        (["--driver-memory", "100m"], {}, "driver_memory"),
        (["--memory-limit", "500m"], {}, "memory_limit"),
        ([], {ENV_PREFIX + "MEMORY_LIMIT": "lots"}, "memory_limit"),
        (["--driver-memory", "lots"], {}, "driver_memory"),
        ([], {ENV_PREFIX + "DRIVER_MEMORY": "5t"}, "driver_memory"),
    ],
)
def test_invalid_setting_names_the_setting(args, env, name):
    with pytest.raises(SettingsError) as e:
        load(args, environ=env)
    assert e.value.name == name
    msg = str(e.value)
    assert name in msg and "--" + name.replace("_", "-") in msg and ENV_PREFIX + name.upper() in msg


def test_every_setting_has_a_flag_in_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in SETTINGS:
        assert "--" + name.replace("_", "-") in out
        assert ENV_PREFIX + name.upper() in out
    assert "default: local[*]" in out


def test_bad_setting_exits_2_with_one_clear_line():
    env = {"PATH": "/usr/bin:/bin", ENV_PREFIX + "EMIT": "often"}
    proc = subprocess.run(
        [sys.executable, "-m", "service", "run", "--bootstrap-servers", "x:1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: invalid setting emit (--emit / SLIDINGWINDOW_EMIT)")


def test_settings_fields_are_all_documented():
    for f in fields(Settings):
        assert f.metadata["spec"].help


def test_a_removed_setting_as_a_flag_fails_naming_the_removal():
    with pytest.raises(SettingsError) as e:
        load(["--state-log-share", "true"], environ={})
    assert e.value.name == "state_log_share"
    assert "removed" in str(e.value) and "task_owners" in str(e.value)


def test_a_removed_setting_as_an_env_var_warns_and_is_ignored(caplog):
    with caplog.at_level(logging.WARNING, logger="service.settings"):
        s = load([], environ={ENV_PREFIX + "STATE_LOG_SHARE": "true"})
    assert s == load([], environ={})
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert "SLIDINGWINDOW_STATE_LOG_SHARE" in warned[0] and "removed" in warned[0] and "ignored" in warned[0]


def test_state_cache_tasks_reaches_the_task_config():
    from service.driver import task_config

    assert task_config(load(["--state-cache-tasks", "2"], environ={})).state_cache_tasks == 2
    assert task_config(load([], environ={})).state_cache_tasks == Settings().state_cache_tasks == 64


def test_memory_limit_reaches_the_task_config_in_bytes():
    from service.driver import task_config

    assert task_config(load(["--memory-limit", "1500m"], environ={})).memory_limit == 1500 << 20
    assert task_config(load([], environ={ENV_PREFIX + "MEMORY_LIMIT": "2g"})).memory_limit == 2 << 30
    assert task_config(load([], environ={})).memory_limit == 0  # the default: no limit


@pytest.mark.parametrize(("text", "value"), [("1g", "1g"), ("768M", "768m"), ("2048", "2048m"), (" 2 GB ", "2g")])
def test_driver_memory_is_a_size_spark_reads(text, value):
    assert load(["--driver-memory", text], environ={}).driver_memory == value
