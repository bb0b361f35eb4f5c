"""Differential test: time windows (tumbling, hopping) and session windows, our engine vs Kafka Streams.

One JVM run for every case (generated cases round-robin over window type x emit mode, the rule book's pinned
examples, and a few emit-on-close time-window cases at Kafka's default retention). Environment:
``FAMILY_CASES`` (default 360), ``FAMILY_SEED`` (default 0; ``random`` picks one, printed on failure),
``FAMILY_MORE_CASES`` (default 3): cases per window type x emit mode x each of variance, stddev, first and last.
See ``family.py`` for what "equal" means.
"""

from __future__ import annotations

import os
import random

import pytest

from . import family
from .oracle import run_batch

pytestmark = pytest.mark.conformance

N_CASES = int(os.environ.get("FAMILY_CASES", "360"))
_seed_env = os.environ.get("FAMILY_SEED", "0")
SEED = random.SystemRandom().randrange(10**12) if _seed_env == "random" else int(_seed_env)
N_MORE = int(os.environ.get("FAMILY_MORE_CASES", "3"))
DEFAULT_RETENTION_CLOSE = 2  # per time-window type: ~7 s each in Kafka Streams (family.py)


def _default_retention_close_cases() -> list[dict]:
    out = []
    for window in ("tumbling", "hopping"):
        for i in range(DEFAULT_RETENTION_CLOSE):
            c = family.generate_family_case(SEED + 10**6 + i, window=window, emit="close")
            c.pop("retention_ms", None)
            c["id"] = f"default-retention-{window}-{i}"
            out.append(c)
    return out


def _more_aggregation_cases() -> list[dict]:
    """``N_MORE`` cases per window type x emit mode x aggregation of :data:`family.MORE_AGGREGATIONS`."""
    combos = len(family.FAMILY_WINDOWS) * len(family.EMITS) * len(family.MORE_AGGREGATIONS)
    cases = family.generate_family_cases(N_MORE * combos, seed=SEED + 2 * 10**6, aggregations=family.MORE_AGGREGATIONS)
    for c in cases:
        c["id"] = f"more-{c['id']}"
    return cases


#: S12: Kafka Streams 4.1 itself throws for a cached session store when t - gap <= -segmentInterval
S12_CRASH = {
    "id": "S12-crash",
    "window": "session",
    "gap_ms": 120_000,
    "grace_ms": 0,
    "aggregation": "count",
    "emit": "update",
    "input": [{"key": "A", "value": 1, "ts": 1000}],
}


@pytest.fixture(scope="module")
def oracle_run() -> tuple[list[dict], list[dict]]:
    cases = [
        S12_CRASH,
        *family.generate_family_cases(N_CASES, seed=SEED),
        *_more_aggregation_cases(),
        *family.PINNED_CASES,
        *_default_retention_close_cases(),
    ]
    return cases, run_batch(cases)


@pytest.mark.parametrize("emit", family.EMITS)
@pytest.mark.parametrize("window", family.FAMILY_WINDOWS)
def test_engine_matches_kafka_streams(window: str, emit: str, oracle_run: tuple[list[dict], list[dict]]) -> None:
    cases, results = oracle_run
    pairs = [
        (c, r)
        for c, r in zip(cases, results, strict=True)
        if c["window"] == window and c["emit"] == emit and c is not S12_CRASH
    ]
    assert len(pairs) >= 5
    if N_MORE:  # every aggregation of the issue, in this window type and emit mode
        assert {c["aggregation"] for c, _ in pairs} >= set(family.MORE_AGGREGATIONS)
    assert sum(len(r.get("updates", ())) for _, r in pairs) > 0  # something was compared
    mism = family.differential([c for c, _ in pairs], oracle_results=[r for _, r in pairs], shrink_limit=1)
    assert not mism, (
        f"window={window} emit={emit} (rerun: FAMILY_SEED={SEED} FAMILY_CASES={N_CASES}):\n"
        + family.summarize(mism, len(pairs))
    )


def test_kafka_streams_throws_for_tiny_timestamps_with_a_cached_session_store(
    oracle_run: tuple[list[dict], list[dict]],
) -> None:
    """S12: there is no Kafka behaviour to copy; the engine aggregates the record like any other."""
    cases, results = oracle_run
    assert cases[0]["id"] == "S12-crash"
    assert "segment interval has changed" in results[0].get("error", ""), results[0]
    updates, _summary = family.run_engine(cases[0])
    assert [(u["window_start"], u["window_end"], u["value"]) for u in updates] == [(1000, 1000, 1)]


def test_harness_detects_a_broken_engine(
    monkeypatch: pytest.MonkeyPatch, oracle_run: tuple[list[dict], list[dict]]
) -> None:
    """The comparison is not vacuous: an engine that forgets session tombstones, or counts a late hopping record
    once instead of once per closed window, is caught."""
    cases, results = oracle_run
    real = family.run_engine

    def no_tombstones(case: dict) -> tuple[list[dict], dict]:
        updates, summary = real(case)
        return [u for u in updates if u["value"] is not None], summary

    monkeypatch.setattr(family, "run_engine", no_tombstones)
    every = [(c, r) for c, r in zip(cases, results, strict=True) if c["window"] == "session" and c["emit"] == "every"]
    assert family.differential([c for c, _ in every], oracle_results=[r for _, r in every], shrink_limit=0)

    def once_per_record(case: dict) -> tuple[list[dict], dict]:
        updates, summary = real(case)
        return updates, dict(summary, dropped_records_total=summary["dropped_records_total"] // 2)

    monkeypatch.setattr(family, "run_engine", once_per_record)
    hop = [(c, r) for c, r in zip(cases, results, strict=True) if c["window"] == "hopping"]
    assert family.differential([c for c, _ in hop], oracle_results=[r for _, r in hop], shrink_limit=0)
