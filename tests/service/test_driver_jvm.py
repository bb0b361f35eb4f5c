"""The driver JVM's options (service.spark.driver_jvm): order, the collector, the user's options last."""

from __future__ import annotations

import pytest

from service.settings import SettingsError, load
from service.spark import driver_jvm


def test_defaults_choose_the_serial_collector_a_small_heap_and_higher_compile_thresholds_after_the_log_config():
    opts = driver_jvm.java_options("/x/log4j2.properties", [], "")
    assert opts[0] == "-Dlog4j2.configurationFile=file:/x/log4j2.properties"
    assert opts[1] == "-XX:+UseSerialGC"
    assert opts[2:] == [*driver_jvm.SERIAL_YOUNG_OPTIONS, *driver_jvm.FOOTPRINT_OPTIONS, *driver_jvm.JIT_OPTIONS]
    assert driver_jvm.SERIAL_YOUNG_OPTIONS == ("-Xmn24m",)


def test_the_user_overrides_the_compile_thresholds():
    assert driver_jvm.JIT_OPTIONS == ("-XX:CompileThresholdScaling=3", "-XX:TieredStopAtLevel=1")
    opts = driver_jvm.java_options(None, [], "-XX:CompileThresholdScaling=1")
    assert opts.index("-XX:CompileThresholdScaling=1") > opts.index("-XX:CompileThresholdScaling=3")


def test_archive_then_user_options_come_last_so_they_override():
    opts = driver_jvm.java_options(None, ["-XX:SharedArchiveFile=/a.jsa"], "-XX:MaxHeapFreeRatio=70 -Dk='a b'")
    assert opts[-3:] == ["-XX:SharedArchiveFile=/a.jsa", "-XX:MaxHeapFreeRatio=70", "-Dk=a b"]
    assert not any(o.startswith("-Dlog4j2") for o in opts)


@pytest.mark.parametrize("gc", ["-XX:+UseG1GC", "-XX:+UseParallelGC", "-XX:+UseZGC"])
def test_a_collector_chosen_by_the_user_replaces_the_serial_one(gc):
    opts = driver_jvm.java_options(None, [], gc)
    assert gc in opts and "-XX:+UseSerialGC" not in opts
    assert not any(o.startswith("-Xmn") for o in opts)  # G1 sizes its young generation itself


def test_malloc_arenas_set_unless_the_environment_has_them():
    env: dict[str, str] = {}
    assert driver_jvm.set_malloc_arenas(env) and env == {"MALLOC_ARENA_MAX": driver_jvm.MALLOC_ARENAS}
    env = {"MALLOC_ARENA_MAX": "8"}
    assert not driver_jvm.set_malloc_arenas(env) and env == {"MALLOC_ARENA_MAX": "8"}


def test_the_setting_takes_options_and_refuses_what_is_not_one():
    assert load(["--driver-java-options=-XX:+UseG1GC -Xss1m"], environ={}).driver_java_options == (
        "-XX:+UseG1GC -Xss1m"
    )
    with pytest.raises(SettingsError, match=r"start with '-'.*'UseG1GC'"):
        load(["--driver-java-options", "UseG1GC"], environ={})
    assert load([], environ={"SLIDINGWINDOW_DRIVER_JAVA_OPTIONS": "-Xss1m"}).driver_java_options == "-Xss1m"
    with pytest.raises(SettingsError, match="shell words"):
        load(["--driver-java-options=-Dx='unclosed"], environ={})
