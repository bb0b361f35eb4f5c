"""Differential test: our engine (``windowstore.replay.replay_records``) vs Kafka Streams (the oracle).

Environment:
- ``CONFORMANCE_CASES``  number of generated cases (default 2000), split round-robin over every/update/close.
- ``CONFORMANCE_SEED``   first seed (default 0); ``random`` picks one (printed in the failure message).
- ``CONFORMANCE_SHRINK`` mismatches shrunk to a minimal case per kind (default 3).
- ``CONFORMANCE_MORE_CASES`` cases per aggregation of variance, stddev, first and last (default 30; seeds of their
  own), on top of the generated ones (which draw collect mostly, else count, sum, min, max, mean).

See ``differential.py`` for what "equal" means per emit mode, and for a command line that hunts over seed ranges.
"""

from __future__ import annotations

import os
import random

import pytest

from . import differential as diff
from .generate import MORE_AGGREGATIONS, generate_cases
from .oracle import run_batch

pytestmark = pytest.mark.conformance

N_CASES = int(os.environ.get("CONFORMANCE_CASES", "2000"))
_seed_env = os.environ.get("CONFORMANCE_SEED", "0")
SEED = random.SystemRandom().randrange(10**12) if _seed_env == "random" else int(_seed_env)
SHRINK = int(os.environ.get("CONFORMANCE_SHRINK", "3"))
N_MORE = int(os.environ.get("CONFORMANCE_MORE_CASES", "30"))
EMITS = ("every", "update", "close")


def _require_engine() -> None:
    if diff.replay_records is None:
        pytest.skip(
            f"windowstore.replay cannot be imported ({diff.ENGINE_IMPORT_ERROR}); "
            "the differential tests need our engine"
        )


@pytest.fixture(scope="module")
def oracle_run() -> tuple[list[dict], list[dict]]:
    _require_engine()
    cases = generate_cases(N_CASES, seed=SEED, emits=EMITS)
    for j, aggregation in enumerate(MORE_AGGREGATIONS):
        cases += generate_cases(N_MORE, seed=SEED + (j + 1) * 10**7, emits=EMITS, aggregation=aggregation)
    return cases, run_batch(cases)


@pytest.mark.parametrize("emit", EMITS)
def test_engine_matches_kafka_streams(emit: str, oracle_run: tuple[list[dict], list[dict]]) -> None:
    cases, results = oracle_run
    pairs = [(c, r) for c, r in zip(cases, results, strict=True) if c["emit"] == emit]
    assert pairs
    if len(EMITS) <= N_MORE:  # every aggregation of the issue in this emit mode
        assert {c["aggregation"] for c, _ in pairs} >= set(MORE_AGGREGATIONS)
    errors = [r for _, r in pairs if "error" in r]
    assert not errors, f"oracle failed on {len(errors)} cases, e.g. {errors[0]}"
    mism = diff.differential([c for c, _ in pairs], oracle_results=[r for _, r in pairs], shrink_limit=SHRINK)
    assert not mism, (
        f"emit={emit}, seeds {SEED}..{SEED + N_CASES - 1} "
        f"(rerun: CONFORMANCE_SEED={SEED} CONFORMANCE_CASES={N_CASES}):\n" + diff.summarize(mism, len(pairs))
    )


def test_engine_matches_kafka_streams_on_pinned_cases() -> None:
    """docs/rules.md's worked examples (R15-R31) and emit-on-close key order, in every emit mode."""
    _require_engine()
    mism = diff.differential(diff.PINNED_CASES, shrink_limit=0)
    assert not mism, diff.summarize(mism, len(diff.PINNED_CASES))


def test_harness_detects_and_shrinks_a_broken_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison is not vacuous: an engine that swaps the last two updates of an `every` run (or drops the
    dropped-records count of a `close` run) is caught, and the failing case is shrunk to a small one."""
    _require_engine()
    real = diff.replay_records

    def broken(records, **kw):
        updates, summary = real(records, **kw)
        if kw["emit"] == "every" and len(updates) >= 2 and updates[-1] != updates[-2]:
            updates = [*updates[:-2], updates[-1], updates[-2]]
        if kw["emit"] == "close":
            summary = dict(summary, dropped_records_total=0)
        return updates, summary

    monkeypatch.setattr(diff, "replay_records", broken)
    cases = generate_cases(30, seed=99, emits=("every", "close"))
    mism = diff.differential(cases, shrink_limit=1, shrink_steps=300)
    kinds = {k for m in mism for k in m.kinds}
    assert "updates" in kinds and "dropped_records_total" in kinds
    shrunk = [m.minimal for m in mism if m.minimal is not None]
    assert shrunk and all(len(c["input"]) <= 3 for c in shrunk), [len(c["input"]) for c in shrunk]
