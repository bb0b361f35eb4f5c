"""processing_guarantee: settings and the driver's view of processed offsets (no Spark, no broker)."""

from __future__ import annotations

import json

import pytest

from service.driver import processed_offsets
from service.settings import Settings, SettingsError
from service.task.stats import REPLAY_ZEROED, STATS_FIELDS


def test_default_is_at_least_once_and_exactly_once_needs_the_direct_sink():
    assert Settings().processing_guarantee == "at_least_once"
    assert Settings(processing_guarantee="EXACTLY_ONCE", sink="direct").processing_guarantee == "exactly_once"
    with pytest.raises(SettingsError, match=r"processing_guarantee.*sink=direct"):
        Settings(processing_guarantee="exactly_once", sink="spark")
    with pytest.raises(SettingsError, match="processing_guarantee"):
        Settings(processing_guarantee="exactly_once_v2")


def test_processed_offsets_are_the_sources_end_offsets():
    progress = {
        "sources": [
            {"endOffset": json.dumps({"in": {"0": 60, "1": 40}})},
            {"endOffset": {"other": {"2": 7}}},
            {"endOffset": None},
        ]
    }
    assert processed_offsets(json.dumps(progress)) == {("in", 0): 60, ("in", 1): 40, ("other", 2): 7}


def test_a_replay_already_committed_zeroes_every_record_counter_but_keeps_the_absolute_values():
    assert set(REPLAY_ZEROED) <= set(STATS_FIELDS)
    assert not {"stream_time", "state_windows", "max_offset"} & set(REPLAY_ZEROED)
    assert {"records", "aggregated", "late", "dead_lettered", "changelog"} <= set(REPLAY_ZEROED)
