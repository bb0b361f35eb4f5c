"""Seeded random sliding-window cases for the differential tests, and a shrinker.

A case is a plain dict (the oracle's batch format, see oracle.py)::

    {"id": ..., "time_difference_ms": D, "grace_ms": G, "retention_ms": None|R, "aggregation": "collect",
     "emit": "every|update|close", "input": [{"key": str|None, "value": Any|None, "ts": int}, ...], "profile": "..."}

``generate_case(seed)`` is a pure function of its arguments (``random.Random(seed)``); any integer seed works, so
the seed space is unbounded. Each case picks a *profile* that aims at one area of docs/rules.md:

- ``in_order``        ascending timestamps, gaps drawn around the interesting distances (0, 1, td-1, td, td+1, 2td, ...)
- ``out_of_order``    ascending base sequence with records pulled back in time (inside and around the grace period)
- ``early``           most records with ts < td (R9/R11 combined window ``[0, td]``)
- ``duplicates``      few distinct timestamps, many records per timestamp (R15)
- ``late``            stream time jumps, followed by records whose lateness sits exactly around the partially-late /
                      fully-late boundaries (R8, R13, R22, R31)
- ``grace0``          grace 0 with small disorder (R22 with close == stream time)
- ``mixed``           everything at once, several keys

Other draws cover: td 1..20 mostly, sometimes 21..500 / up to 5000 (never 0: Kafka throws); grace 0, small, ~td, or
huge; 1-4 keys per case (one task, shared stream time, R7; sometimes odd keys: empty, prefixes, non-ASCII); occasional
null keys/values (R6); timestamps starting at 0 or
far from 0. Values identify their record (the input index) for ``collect``, ``first`` and ``last``; numeric
otherwise.

``shrink(case, fails)`` removes records (delta debugging, then one at a time), then tries to simplify keys, values,
td/grace and timestamps while ``fails(candidate)`` stays true, and returns a minimal failing case.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterable
from typing import Any

PROFILES = ("in_order", "out_of_order", "early", "duplicates", "late", "grace0", "mixed")
EMITS = ("every", "update", "close")
AGGREGATIONS = ("collect", "count", "sum", "min", "max", "mean")
#: the issue's other aggregations, forced per case (``generate_cases(aggregation=...)``): the seeds above keep
#: drawing the cases they always drew
MORE_AGGREGATIONS = ("variance", "stddev", "first", "last")
KEYS = ("A", "B", "C", "D")
ODD_KEYS = ("", "A", "AB", "a", "B", "\u00e9", "\u65e5\u672c", "A\u0000", "\U0001f600", "~")


def _pick_td(rng: random.Random) -> int:
    # td=0 is accepted by SlidingWindows.ofTimeDifferenceAndGrace but Kafka Streams then throws on the first record
    # ("Window endMs must be greater than window startMs", TimeWindow [t, t]); test_oracle_vectors checks that.
    r = rng.random()
    if r < 0.70:
        return rng.randint(1, 20)
    if r < 0.92:
        return rng.randint(21, 500)
    return rng.randint(501, 5000)


def _pick_grace(rng: random.Random, td: int) -> int:
    r = rng.random()
    if r < 0.25:
        return 0
    if r < 0.55:
        return rng.randint(1, max(1, td // 2 + 1))
    if r < 0.80:
        return rng.randint(max(1, td - 2), td * 2 + 3)
    if r < 0.92:
        return rng.randint(1, 5 * td + 10)
    return rng.choice([10**6, 10**9, 2 * td + 1000])


def _gap(rng: random.Random, td: int) -> int:
    """Distance to the next timestamp, biased to the window-boundary distances."""
    r = rng.random()
    if r < 0.55:
        return rng.choice([0, 1, 2, max(0, td - 1), td, td + 1, td + 2, 2 * td, 2 * td + 1, 2 * td + 2])
    if r < 0.85:
        return rng.randint(0, td + 2)
    return rng.randint(0, 4 * td + 5)


def _lateness_around(rng: random.Random, td: int, grace: int) -> int:
    """A lateness (stream time - ts) close to one of the boundaries of R22."""
    edges = [
        0,
        1,
        grace - 1,
        grace,
        grace + 1,  # close == ts: left window end == close
        td + grace - 1,
        td + grace,
        td + grace + 1,  # t + td vs close: R8 entry drop boundary
        td + grace + 2,
        grace + td // 2,
        2 * td + grace,
        2 * td + grace + 1,
    ]
    if rng.random() < 0.75:
        return max(0, rng.choice(edges) + rng.randint(-1, 1))
    return rng.randint(0, 3 * td + grace + 3)


def _value(rng: random.Random, aggregation: str, index: int) -> Any:
    if aggregation in ("collect", "first", "last"):
        r = rng.random()
        if r < 0.80:
            return index
        if r < 0.92:
            return f"v{index}"
        if r < 0.96:
            return index + 0.5
        return {"i": index, "s": ["x", None, True]}
    if aggregation == "count":
        return rng.choice([index, "x", 1.5, True])
    # numeric aggregations: mostly small ints (exact), sometimes floats
    r = rng.random()
    if r < 0.75:
        return rng.randint(-50, 50)
    if r < 0.85:
        return rng.randint(-400, 400) / 8.0  # exactly representable: sums are order-independent
    if r < 0.97:
        return round(rng.uniform(-100, 100), rng.randint(1, 6))  # rounding depends on the summation order
    return rng.choice([2**53 + 1, -(2**60), 10**20, 1e16, 3])  # beyond double precision / huge ints


def _timestamps(rng: random.Random, profile: str, td: int, grace: int, n: int, base: int) -> list[int]:
    if profile == "duplicates":
        distinct = sorted({base + rng.randint(0, 2 * td + 3) for _ in range(rng.randint(1, 4))})
        ts = [rng.choice(distinct) for _ in range(n)]
        if rng.random() < 0.5:
            ts.sort()
        return ts
    if profile == "early":
        early_n = max(1, int(n * rng.uniform(0.5, 1.0)))
        ts = [rng.randint(0, max(0, td)) for _ in range(early_n)]
        cur = max(ts)
        for _ in range(n - early_n):
            cur += _gap(rng, td)
            ts.append(cur)
        if rng.random() < 0.5:
            rng.shuffle(ts)
        return ts

    # ascending base sequence
    ts = []
    cur = base
    for _ in range(n):
        ts.append(cur)
        cur += _gap(rng, td)
    if profile == "in_order":
        return ts

    if profile in ("out_of_order", "grace0", "mixed"):
        # pull some records back by a lateness around the grace boundaries
        out = []
        st = -1
        for t in ts:
            st = max(st, t)
            if rng.random() < 0.35:
                late = _lateness_around(rng, td, grace) if rng.random() < 0.5 else rng.randint(0, td + grace + 1)
                out.append(max(0, st - late))
            else:
                out.append(t)
        if profile == "mixed" and rng.random() < 0.3:
            # local shuffles
            for i in range(len(out) - 1):
                if rng.random() < 0.2:
                    out[i], out[i + 1] = out[i + 1], out[i]
        return out

    # late: stream time jumps, then records around the partially-late / fully-late boundaries
    out = []
    st = -1
    for t in ts:
        if rng.random() < 0.15:
            t += rng.choice([td + grace + 1, 2 * td + grace + 2, rng.randint(0, 3 * (td + grace) + 3)])
        st = max(st, t)
        out.append(t)
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            out.append(max(0, st - _lateness_around(rng, td, grace)))
    return out[:n] if len(out) > n else out


def generate_case(
    seed: int,
    *,
    emit: str | None = None,
    aggregation: str | None = None,
    profile: str | None = None,
    max_records: int | None = None,
) -> dict:
    """One random case, fully determined by the arguments."""
    rng = random.Random(f"sliding-window-case:{seed}")
    profile = profile or rng.choice(PROFILES)
    emit = emit or rng.choice(EMITS)
    aggregation = aggregation or ("collect" if rng.random() < 0.7 else rng.choice(AGGREGATIONS))
    td = _pick_td(rng)
    grace = 0 if profile == "grace0" else _pick_grace(rng, td)
    if rng.random() < 0.15:
        n = rng.randint(40, 150)
    else:
        n = rng.randint(1, 30)
    if max_records is not None:
        n = min(n, max_records)
    base = (
        0 if (profile == "early" or rng.random() < 0.4) else rng.choice([td, td + 1, 100, 1000, rng.randint(0, 10**6)])
    )
    ts = _timestamps(rng, profile, td, grace, n, base)
    # store retention: mostly Kafka's default 2*td+grace (None); sometimes longer (R24/R25/R29 edges move)
    retention = None
    if rng.random() < 0.15:
        retention = 2 * td + grace + rng.choice([0, 1, 2, td, rng.randint(0, 10 * td + 10), 10**9])

    nkeys = 1 if profile != "mixed" and rng.random() < 0.45 else rng.randint(1, 4)
    keys = list(KEYS[:nkeys])
    if nkeys > 1 and rng.random() < 0.1:
        # emit-on-close orders each round by (window start, key BYTES): prefixes, case, non-ASCII, empty key
        keys = rng.sample(ODD_KEYS, nkeys)
    null_rate = 0.05 if rng.random() < 0.2 else 0.0
    records = []
    for i, t in enumerate(ts):
        key: str | None = rng.choice(keys)
        value = _value(rng, aggregation, i)
        if null_rate:
            if rng.random() < null_rate:
                key = None
            if rng.random() < null_rate:
                value = None
        records.append({"key": key, "value": value, "ts": int(t)})
    return {
        "id": f"seed{seed}",
        "seed": seed,
        "profile": profile,
        "time_difference_ms": td,
        "grace_ms": grace,
        "retention_ms": retention,
        "aggregation": aggregation,
        "emit": emit,
        "input": records,
    }


def generate_cases(n: int, *, seed: int = 0, emits: Iterable[str] = EMITS, **kw: Any) -> list[dict]:
    """``n`` cases with seeds ``seed .. seed+n-1``, emit modes assigned round-robin."""
    emits = list(emits)
    return [generate_case(seed + i, emit=emits[i % len(emits)], **kw) for i in range(n)]


# ---------------------------------------------------------------------------------------------------- shrinking


def _with_input(case: dict, records: list[dict]) -> dict:
    c = dict(case)
    c["input"] = records
    return c


def shrink(case: dict, fails: Callable[[dict], bool], *, max_steps: int = 2000) -> dict:
    """Smallest case (records removed / simplified) for which ``fails`` still holds.

    ``fails(case)`` must be True for the given case. Greedy: ddmin-style chunk removal, then single records, then
    simplifications (fewer keys, plain values, smaller grace/td, timestamps shifted towards 0), repeated until a
    fixpoint. ``max_steps`` bounds the number of ``fails`` calls.
    """
    steps = 0

    def check(c: dict) -> bool:
        nonlocal steps
        if steps >= max_steps:
            return False
        steps += 1
        try:
            return bool(fails(c))
        except Exception:  # a crashing candidate is not a smaller reproduction of *this* failure
            return False

    best = copy.deepcopy(case)
    changed = True
    while changed and steps < max_steps:
        changed = False

        # 1. delta debugging over records
        recs = best["input"]
        chunk = max(1, len(recs) // 2)
        while chunk >= 1 and steps < max_steps:
            i = 0
            removed_any = False
            while i < len(recs):
                cand = recs[:i] + recs[i + chunk :]
                if cand != recs and check(_with_input(best, cand)):
                    recs = cand
                    removed_any = True
                    changed = True
                else:
                    i += chunk
            best = _with_input(best, recs)
            if not removed_any:
                chunk //= 2

        # 2. simplifications
        def candidates(c: dict):
            recs = c["input"]
            # a single key
            keys = {r["key"] for r in recs if r["key"] is not None}
            if len(keys) > 1:
                for k in sorted(keys):
                    yield _with_input(c, [dict(r, key=k) if r["key"] is not None else r for r in recs])
            if keys and keys != {"A"} and len(keys) == 1:
                yield _with_input(c, [dict(r, key="A") if r["key"] is not None else r for r in recs])
            # plain values
            if c["aggregation"] == "collect":
                plain = [dict(r, value=i) if r["value"] is not None else r for i, r in enumerate(recs)]
                if plain != recs:
                    yield _with_input(c, plain)
            # smaller grace / td
            for g in sorted({0, c["grace_ms"] // 2, c["grace_ms"] - 1}):
                if 0 <= g < c["grace_ms"]:
                    yield dict(c, grace_ms=g)
            for d in sorted({1, c["time_difference_ms"] // 2, c["time_difference_ms"] - 1}):
                if 1 <= d < c["time_difference_ms"]:
                    yield dict(c, time_difference_ms=d)
            if c.get("retention_ms") is not None:
                yield dict(c, retention_ms=None)
            # shift timestamps towards 0 (keeps relative order; changes early-ness)
            if recs:
                lo = min(r["ts"] for r in recs)
                for shift in sorted({lo, lo // 2, 1}):
                    if 0 < shift <= lo:
                        yield _with_input(c, [dict(r, ts=r["ts"] - shift) for r in recs])

        progress = True
        while progress and steps < max_steps:
            progress = False
            for cand in candidates(best):
                if check(cand):
                    best = cand
                    progress = True
                    changed = True
                    break
    return best


def describe(case: dict) -> str:
    """Compact one-line description: ``td=10 grace=3 emit=every agg=collect: A@5=0 A@19=1 ...``."""
    recs = " ".join(
        f"{r['key'] if r['key'] is not None else 'null'}@{r['ts']}={'null' if r['value'] is None else r['value']!r}"
        for r in case["input"]
    )
    ret = f" retention={case['retention_ms']}" if case.get("retention_ms") is not None else ""
    return (
        f"td={case['time_difference_ms']} grace={case['grace_ms']}{ret} emit={case['emit']} "
        f"agg={case['aggregation']}: {recs}"
    )


if __name__ == "__main__":  # pragma: no cover - manual inspection
    import json
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    start = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    for c in generate_cases(n, seed=start):
        print(json.dumps(c))
