"""Differential testing of the time- and session-window engines against Kafka Streams (the oracle).

Library for ``test_family_differential.py`` and a command line to hunt for mismatches over seed ranges::

    python -m tests.conformance.family --cases 3000 --seed 7 [--window session] [--emit update] \\
        [--aggregation variance] [--json]

A case is the oracle's (``oracle.py``): ``{"window": "tumbling"|"hopping"|"session", "size_ms", "advance_ms",
"gap_ms", "grace_ms", "aggregation", "emit", "input"}``. The generator (:func:`generate_family_case`, any int
seed) draws realistic epoch-millisecond timestamps at the window's own scale with out-of-order, late, duplicate
and (sessions) bridging records, jumps past the stores' 60 s segments, grace 0 in a third of the cases, null keys,
null values (count, collect, first, last) and non-ASCII keys (the emit-on-close key order is by UTF-8 bytes).

Equality (every emit mode): the sequences of ``(input_index, key, window_start, window_end, value, ts)`` are equal,
order included - ``input_index`` is the record whose processing (or, in ``update`` mode, the record cache's flush
after it: TopologyTestDriver commits after every record, the engine flushes after every record) forwarded the
update - and ``dropped_records_total`` equals Kafka's task metric.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from windowstore.aggregations import parse_aggregations
from windowstore.session_windows import SessionWindowProcessor, SessionWindows
from windowstore.time_windows import TimeWindowProcessor, TimeWindows

from .differential import canon
from .oracle import OracleSession, run_batch

__all__ = [
    "EMITS",
    "FAMILY_WINDOWS",
    "PINNED_CASES",
    "compare",
    "differential",
    "generate_family_case",
    "generate_family_cases",
    "run_engine",
]

FAMILY_WINDOWS = ("tumbling", "hopping", "session")
EMITS = ("every", "update", "close")
AGGREGATIONS = ("collect", "collect", "collect", "count", "sum", "min", "max", "mean")
#: the issue's other aggregations: cases of their own (``generate_family_cases(aggregations=...)``), so that the
#: seeds above keep drawing the cases they always drew
MORE_AGGREGATIONS = ("variance", "stddev", "first", "last")
ANY_VALUE = ("collect", "count", "first", "last")  # aggregations that take any value (null, strings) as input
KEYS = ("a", "b", "A", "ab", "é", "z")
BASE_TS = 1_764_000_000_000  # 2025-11-24, epoch ms
LONG_RETENTION_MS = 30 * 24 * 3600 * 1000  # 30 days: segments of 15 days


# ------------------------------------------------------------------------------------------------ generation


def _window_params(rng: random.Random, window: str) -> tuple[dict[str, int], int]:
    """Window lengths and the case's time scale (ms)."""
    if window == "tumbling":
        size = rng.choice([1, 5, 10, 100, 1000, 60_000, 300_000])
        return {"size_ms": size}, size
    if window == "hopping":
        advance = rng.choice([1, 2, 3, 7, 10, 100, 1000, 15_000])
        k = rng.choice([1, 2, 3, 4, 5, 8])
        size = advance * k + rng.choice([0, 0, 1, advance // 2, advance - 1])  # advance need not divide size
        size = max(size, advance)
        return {"size_ms": size, "advance_ms": advance}, size
    gap = rng.choice([0, 1, 5, 10, 100, 1000, 30_000, 60_000, 120_000])
    return {"gap_ms": gap}, max(gap, 1)


def generate_family_case(
    seed: int, *, window: str | None = None, emit: str | None = None, aggregation: str | None = None
) -> dict[str, Any]:
    rng = random.Random(seed)
    window = window or rng.choice(FAMILY_WINDOWS)
    emit = emit or rng.choice(EMITS)
    params, scale = _window_params(rng, window)
    grace = rng.choice([0, 0, 0, 1, scale // 3, scale, 2 * scale + 7, 90_000])
    drawn = rng.choice(AGGREGATIONS)  # drawn even when given: the rest of the case is the seed's either way
    aggregation = aggregation or drawn
    keys = rng.sample(KEYS, rng.choice([1, 1, 2, 3, 4]))
    n = rng.choice([1, 2, 3, 5, 8, 12, 20, 30, 45])
    t = BASE_TS + rng.randrange(0, 10 * scale + 1)
    st = t
    recs: list[dict[str, Any]] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.45:  # forward, at the window's scale
            t = st + rng.randrange(0, 2 * scale + 2)
        elif r < 0.60:  # out of order within about a window
            t = st - rng.randrange(0, scale + grace + 2)
        elif r < 0.68:  # late: well behind
            t = st - rng.randrange(scale + grace, 3 * (scale + grace) + 3)
        elif r < 0.76 and recs:  # duplicate timestamp
            t = rng.choice(recs)["ts"]
        elif r < 0.84 and recs and window == "session":  # bridging: halfway between two earlier records
            a, b = rng.choice(recs)["ts"], rng.choice(recs)["ts"]
            t = (a + b) // 2
        elif r < 0.92:  # a jump (segments of 60 s and more get dropped behind it)
            t = st + rng.choice([scale, 60_000, 61_000, 150_000, 400_000]) + rng.randrange(0, scale + 1)
        else:
            t = st + rng.randrange(0, 3)
        t = max(t, BASE_TS)
        st = max(st, t)
        key: str | None = rng.choice(keys) if rng.random() > 0.03 else None
        if aggregation in ANY_VALUE:
            value: Any = rng.choice([rng.randrange(-5, 50), rng.randrange(-5, 50), "x", None, 2.5])
        elif rng.random() < 0.2:
            value = rng.choice([0.5, -1.25, 3.0, 1e3])
        else:
            value = rng.randrange(-100, 1000)
        recs.append({"key": key, "value": value, "ts": t})
    case = {
        "window": window,
        **params,
        "grace_ms": grace,
        "aggregation": aggregation,
        "emit": emit,
        "input": recs,
        "seed": seed,
    }
    if window != "session" and emit == "close":
        # Kafka Streams' first emit-on-close round scans the record cache segment by segment from epoch 0: with
        # the default retention (60 s segments) that is ~29 million segments at today's timestamps, ~7 s a case.
        # The retention does not change a time window's results (T12); DEFAULT_RETENTION_CLOSE_CASES keeps some.
        case["retention_ms"] = LONG_RETENTION_MS
    return case


def generate_family_cases(
    n: int,
    *,
    seed: int = 0,
    windows: tuple[str, ...] = FAMILY_WINDOWS,
    emits: tuple[str, ...] = EMITS,
    aggregations: tuple[str | None, ...] = (None,),
) -> list[dict[str, Any]]:
    """``n`` cases, round-robin over windows x emits x aggregations (``None``: the seed draws one of
    :data:`AGGREGATIONS`), seeds ``seed .. seed + n - 1``."""
    combos = [(w, e, a) for w in windows for e in emits for a in aggregations]
    out = []
    for i in range(n):
        w, e, a = combos[i % len(combos)]
        c = generate_family_case(seed + i, window=w, emit=e, aggregation=a)
        c["id"] = seed + i
        out.append(c)
    return out


# ------------------------------------------------------------------------------------------------ engine


def run_engine(case: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The case through our engine, flushing (update mode) after every record as TopologyTestDriver commits."""
    agg = parse_aggregations(case["aggregation"])
    proc: TimeWindowProcessor | SessionWindowProcessor
    if case["window"] == "session":
        proc = SessionWindowProcessor(
            SessionWindows(case["gap_ms"], case["grace_ms"], case.get("retention_ms")), agg, case["emit"]
        )
    else:
        advance = case.get("advance_ms") if case["window"] == "hopping" else None
        proc = TimeWindowProcessor(
            TimeWindows(case["size_ms"], advance, case["grace_ms"], case.get("retention_ms")), agg, case["emit"]
        )
    out: list[dict[str, Any]] = []

    def put(i: int, updates: list) -> None:
        out.extend(
            {"key": u.key, "window_start": u.start, "window_end": u.end, "value": u.value, "ts": u.ts, "input_index": i}
            for u in updates
        )

    for i, r in enumerate(case["input"]):
        put(i, proc.process(r["key"], r["value"], r["ts"]))
        put(i, proc.flush())
    return out, {"records": len(case["input"]), "dropped_records_total": proc.stats.dropped_records_total}


# ------------------------------------------------------------------------------------------------ comparison


def _row(u: dict[str, Any]) -> tuple:
    return (u["input_index"], u["key"], u["window_start"], u["window_end"], canon(u["value"]), u["ts"])


def _fmt(u: dict[str, Any]) -> str:
    return f"#{u['input_index']} {u['key']}[{u['window_start']},{u['window_end']}]={json.dumps(u['value'])}@{u['ts']}"


def compare(oracle: dict[str, Any], engine: tuple[list[dict], dict] | BaseException) -> list[str]:
    """Differences, one line each; empty = equal."""
    if "error" in oracle:
        return [f"oracle error: {oracle['error']}"]
    if isinstance(engine, BaseException):
        return [f"engine error: {type(engine).__name__}: {engine}"]
    updates, summary = engine
    diffs = []
    o = [_row(u) for u in oracle["updates"]]
    e = [_row(u) for u in updates]
    if o != e:
        i = next((k for k, (a, b) in enumerate(zip(o, e, strict=False)) if a != b), min(len(o), len(e)))
        diffs.append(
            f"updates differ at {i} (oracle {len(o)}, engine {len(e)}): "
            f"oracle {_fmt(oracle['updates'][i]) if i < len(o) else '-'} / "
            f"engine {_fmt(updates[i]) if i < len(e) else '-'}"
        )
    if float(oracle["dropped_records_total"]) != summary["dropped_records_total"]:
        diffs.append(
            f"dropped_records_total: oracle {oracle['dropped_records_total']}, "
            f"engine {summary['dropped_records_total']}"
        )
    return diffs


@dataclass
class FamilyMismatch:
    case: dict[str, Any]
    diffs: list[str]
    minimal: dict[str, Any] | None = None
    minimal_diffs: list[str] = field(default_factory=list)

    def report(self) -> str:
        c = self.case
        head = {
            k: c.get(k)
            for k in ("id", "window", "size_ms", "advance_ms", "gap_ms", "grace_ms", "aggregation", "emit")
            if c.get(k) is not None
        }
        lines = [f"{head} ({len(c['input'])} records): " + "; ".join(self.diffs)]
        if self.minimal is not None:
            lines.append(f"  minimal input: {json.dumps(self.minimal['input'])}")
            lines += ["    " + d for d in self.minimal_diffs]
        return "\n".join(lines)


def _shrink(case: dict[str, Any], session: OracleSession, steps: int = 200) -> tuple[dict[str, Any], list[str]]:
    """Drop records while the case still fails (greedy, one record at a time)."""
    cur = case
    diffs = compare(session.run(cur), _safe_engine(cur))
    changed = True
    while changed and steps > 0:
        changed = False
        for i in range(len(cur["input"])):
            cand = dict(cur, input=cur["input"][:i] + cur["input"][i + 1 :])
            steps -= 1
            d = compare(session.run(cand), _safe_engine(cand))
            if d:
                cur, diffs, changed = cand, d, True
                break
            if steps <= 0:
                break
    return cur, diffs


def _safe_engine(case: dict[str, Any]) -> tuple[list[dict], dict] | BaseException:
    try:
        return run_engine(case)
    except Exception as exc:
        return exc


def differential(
    cases: list[dict[str, Any]], *, oracle_results: list[dict[str, Any]] | None = None, shrink_limit: int = 2
) -> list[FamilyMismatch]:
    results = oracle_results if oracle_results is not None else run_batch(cases)
    mism = []
    for case, res in zip(cases, results, strict=True):
        d = compare(res, _safe_engine(case))
        if d:
            mism.append(FamilyMismatch(case, d))
    if mism and shrink_limit > 0:
        with OracleSession() as s:
            for m in mism[:shrink_limit]:
                m.minimal, m.minimal_diffs = _shrink(m.case, s)
    return mism


def summarize(mism: list[FamilyMismatch], total: int) -> str:
    return f"{len(mism)} of {total} cases differ:\n" + "\n".join(m.report() for m in mism[:6])


# ------------------------------------------------------------------------------------------------ pinned cases


def _recs(*spec: tuple[str | None, Any, int]) -> list[dict[str, Any]]:
    return [{"key": k, "value": v, "ts": t} for k, v, t in spec]


#: docs/rules-window-types.md's worked examples, each in every emit mode
PINNED_CASES: list[dict[str, Any]] = [
    dict(window=w, **p, aggregation=a, emit=e, input=inp, id=f"{name}-{e}")
    for name, w, p, a, inp in [
        # S7: the store hides [10,10] from A@15 in every/close mode; the cache does not (update)
        (
            "S7-hidden",
            "session",
            {"gap_ms": 5, "grace_ms": 0},
            "collect",
            _recs(("A", "a", 10), ("A", "b", 20), ("A", "c", 15)),
        ),
        # S6: merge order - found sessions by ascending end, the record's value last
        (
            "S6-order",
            "session",
            {"gap_ms": 5, "grace_ms": 100},
            "collect",
            _recs(("A", "b", 20), ("A", "a", 10), ("A", "c", 15)),
        ),
        # S6: a record inside a session re-forwards it (tombstone, then the new value); at a point session: none
        (
            "S6-inside",
            "session",
            {"gap_ms": 10, "grace_ms": 50},
            "count",
            _recs(("A", 1, 100), ("A", 1, 108), ("A", 1, 104), ("A", 1, 200), ("A", 1, 200)),
        ),
        # S11/T11: null values are aggregated
        (
            "S11-null",
            "session",
            {"gap_ms": 10, "grace_ms": 0},
            "collect",
            _recs(("A", None, 100), ("A", None, 105), (None, 1, 106)),
        ),
        (
            "T11-null",
            "hopping",
            {"size_ms": 10, "advance_ms": 5, "grace_ms": 0},
            "count",
            _recs(("A", None, 12), ("A", None, 13), (None, None, 14)),
        ),
        # T7: a fully late hopping record counts once per closed window (3 here), a partially late one per closed
        (
            "T7-late",
            "hopping",
            {"size_ms": 30, "advance_ms": 10, "grace_ms": 0},
            "count",
            _recs(("A", 1, 100), ("A", 1, 200), ("A", 1, 150), ("A", 1, 185)),
        ),
        # T10: emit-on-close order: window start, then key bytes ("A" < "a" < "b" < "é")
        (
            "T10-order",
            "tumbling",
            {"size_ms": 10, "grace_ms": 0},
            "sum",
            _recs(("é", 1, 1), ("b", 2, 3), ("a", 3, 5), ("A", 4, 9), ("b", 5, 12), ("z", 6, 25)),
        ),
        # S10: a session lost to a dropped segment: [B+30] is in the segment the jump to B+400000 drops
        (
            "S10-lost",
            "session",
            {"gap_ms": 5, "grace_ms": 0},
            "count",
            _recs(("A", 1, 1_763_999_940_010), ("A", 1, 1_763_999_940_030), ("A", 1, 1_764_000_340_000)),
        ),
        # S10: emit-on-close order: end, start, key bytes
        (
            "S10-order",
            "session",
            {"gap_ms": 3, "grace_ms": 0},
            "sum",
            _recs(("b", 1, 10), ("a", 2, 10), ("a", 3, 8), ("b", 4, 30)),
        ),
    ]
    for e in EMITS
]


# ------------------------------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.conformance.family",
        description="Hunt for engine-vs-Kafka-Streams mismatches (time and session windows).",
    )
    p.add_argument("--cases", type=int, default=600)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", choices=FAMILY_WINDOWS, action="append")
    p.add_argument("--emit", choices=EMITS, action="append")
    p.add_argument("--aggregation", choices=sorted({*AGGREGATIONS, *MORE_AGGREGATIONS}), action="append")
    p.add_argument("--shrink", type=int, default=2)
    p.add_argument("--json", action="store_true", help="one JSON line per mismatch on stdout")
    a = p.parse_args(argv)
    cases = generate_family_cases(
        a.cases,
        seed=a.seed,
        windows=tuple(a.window or FAMILY_WINDOWS),
        emits=tuple(a.emit or EMITS),
        aggregations=tuple(a.aggregation or (None,)),
    )
    t0 = time.monotonic()
    stats: dict[str, Any] = {}
    results = run_batch(cases, stats=stats)
    t1 = time.monotonic()
    mism = differential(cases, oracle_results=results, shrink_limit=a.shrink)
    for m in mism:
        if a.json:
            print(json.dumps({"case": m.case, "diffs": m.diffs, "minimal": m.minimal}))
    print(
        f"{len(cases)} cases, oracle {t1 - t0:.1f} s ({stats.get('cases_per_second', 0):.0f}/s), "
        f"{len(mism)} mismatches",
        file=sys.stderr,
    )
    if mism and not a.json:
        print(summarize(mism, len(cases)), file=sys.stderr)
    return 1 if mism else 0


if __name__ == "__main__":
    sys.exit(main())
