"""Differential testing of ``windowstore`` against the Kafka Streams oracle.

Library for ``test_differential.py`` and a command line to hunt for mismatches over any seed range::

    python -m tests.conformance.differential --cases 5000 --seed 123456 [--emit every] [--shrink 5] [--json]

Comparison (per case):

- ``every``:  the emitted sequences are equal, order included.
- ``update``: our engine with ``flush_every=1`` (TopologyTestDriver commits, i.e. flushes the record cache, after
  every input record). Equal per flush: the oracle's ``input_index`` marks which record's flush emitted each update;
  the engine's sequence is cut into chunks of the same sizes and compared as multisets per chunk. A difference only
  in the order inside one flush is reported as kind ``update-order-within-flush`` (a failure too: Kafka's cache
  order, R21, is deterministic) - it is kept apart so it is easy to see.
- ``close``:  the emitted sequences are equal, order included.
- always: ``dropped_records_total`` (engine summary) == Kafka's ``dropped-records-total`` task metric, and
  ``records`` equal; the engine's ``dropped_records`` (R8 entry drops only) equals the count derived from the
  input with R6-R8 (Kafka has no separate metric for it).

Values are compared as JSON with booleans distinct from numbers and ints equal to floats of the same value
(1 == 1.0), since the oracle keeps raw JSON text and the engine emits Python values.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .generate import describe, generate_cases, shrink
from .oracle import OracleSession, run_batch

try:
    from windowstore.replay import replay_records  # type: ignore[import-not-found]

    ENGINE_IMPORT_ERROR: str | None = None
except Exception as exc:  # pragma: no cover - depends on the engine being present
    replay_records = None  # type: ignore[assignment]
    ENGINE_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------------------------ normalisation


def canon(x: Any) -> Any:
    """Hashable canonical form of a JSON value: bools tagged (True != 1), numbers by value (1 == 1.0)."""
    if isinstance(x, bool):
        return ("bool", x)
    if isinstance(x, (int, float)):
        return ("num", x)
    if isinstance(x, str):
        return ("str", x)
    if x is None:
        return ("null",)
    if isinstance(x, list):
        return ("list", tuple(canon(v) for v in x))
    if isinstance(x, dict):
        return ("obj", tuple(sorted((k, canon(v)) for k, v in x.items())))
    return ("other", repr(x))


def update_key(u: dict) -> tuple:
    return (u["key"], u["window_start"], u["window_end"], canon(u["value"]), u["ts"])


def fmt_update(u: dict) -> str:
    return f"{u['key']}[{u['window_start']},{u['window_end']}]={json.dumps(u['value'])}@{u['ts']}"


# ------------------------------------------------------------------------------------------------ engine


def run_engine(case: dict) -> tuple[list[dict], dict]:
    if replay_records is None:
        raise RuntimeError(f"windowstore.replay cannot be imported: {ENGINE_IMPORT_ERROR}")
    return replay_records(
        [dict(r) for r in case["input"]],
        time_difference_ms=case["time_difference_ms"],
        grace_ms=case["grace_ms"],
        aggregation=case["aggregation"],
        emit=case["emit"],
        flush_every=1 if case["emit"] == "update" else None,
        **({"retention_ms": case["retention_ms"]} if case.get("retention_ms") is not None else {}),
    )


# ------------------------------------------------------------------------------------------------ comparison


@dataclass
class Mismatch:
    case: dict
    kinds: list[str]
    details: list[str] = field(default_factory=list)
    minimal: dict | None = None
    minimal_details: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = [
            f"case {self.case.get('id')} ({self.case.get('profile')}): {', '.join(self.kinds)}",
            "  " + describe(self.case),
        ]
        lines += ["  " + d for d in self.details[:8]]
        if self.minimal is not None:
            lines.append("  minimal: " + describe(self.minimal))
            lines += ["    " + d for d in self.minimal_details[:12]]
        return "\n".join(lines)


def compare(case: dict, oracle: dict, engine: tuple[list[dict], dict] | BaseException) -> tuple[list[str], list[str]]:
    """(kinds, details) of the differences; empty kinds = equal."""
    if "error" in oracle:
        return ["oracle-error"], [oracle["error"]]
    if isinstance(engine, BaseException):
        return ["engine-error"], [f"{type(engine).__name__}: {engine}"]
    eng_updates, eng_summary = engine
    kinds: list[str] = []
    details: list[str] = []
    ora = oracle["updates"]
    ok_seq = [update_key(u) for u in ora]
    ek_seq = [update_key(u) for u in eng_updates]
    if ok_seq != ek_seq:
        if case["emit"] == "update":
            # cut the engine sequence by the oracle's flush sizes
            sizes = Counter(u["input_index"] for u in ora)
            pos = 0
            same_per_flush = len(ok_seq) == len(ek_seq)
            if same_per_flush:
                for idx in sorted(sizes):
                    n = sizes[idx]
                    if Counter(ok_seq[pos : pos + n]) != Counter(ek_seq[pos : pos + n]):
                        same_per_flush = False
                        break
                    pos += n
            kinds.append("update-order-within-flush" if same_per_flush else "updates")
        else:
            kinds.append("updates")
        # first divergence
        i = next(
            (j for j, (a, b) in enumerate(zip(ok_seq, ek_seq, strict=True)) if a != b), min(len(ok_seq), len(ek_seq))
        )
        details.append(f"first difference at update #{i} (oracle {len(ok_seq)} updates, engine {len(ek_seq)})")
        lo = max(0, i - 1)
        details.append(
            "kafka : "
            + " ".join(
                fmt_update(u) + (f"<r{u['input_index']}>" if "input_index" in u else "") for u in ora[lo : i + 6]
            )
        )
        details.append("engine: " + " ".join(fmt_update(u) for u in eng_updates[lo : i + 6]))
        only_o = Counter(ok_seq) - Counter(ek_seq)
        only_e = Counter(ek_seq) - Counter(ok_seq)
        if only_o or only_e:
            details.append(f"only kafka: {_fmt_keys(only_o)}")
            details.append(f"only engine: {_fmt_keys(only_e)}")
    if eng_summary.get("dropped_records_total") != oracle["dropped_records_total"]:
        kinds.append("dropped_records_total")
        details.append(
            f"dropped_records_total: kafka {oracle['dropped_records_total']}, "
            f"engine {eng_summary.get('dropped_records_total')} (engine summary {eng_summary})"
        )
    r8 = entry_drops(case)
    if "dropped_records" in eng_summary and eng_summary["dropped_records"] != r8:
        kinds.append("dropped_records")
        details.append(
            f"dropped_records (R8 entry drops, computed from the input): expected {r8}, "
            f"engine {eng_summary['dropped_records']}"
        )
    if eng_summary.get("records") != oracle["records"]:
        kinds.append("records")
        details.append(f"records: kafka {oracle['records']}, engine {eng_summary.get('records')}")
    return kinds, details


def entry_drops(case: dict) -> int:
    """Records dropped at entry (R8: ``t + td < st - grace``, stream time per R6/R7). Kafka's metric lumps these
    with R6 and R13 ticks, so this is derived from the rules, not observed in Kafka."""
    st, n = -1, 0
    td, grace = case["time_difference_ms"], case["grace_ms"]
    for r in case["input"]:
        if r["key"] is None or r["value"] is None:
            continue
        st = max(st, r["ts"])
        if r["ts"] + td < st - grace:
            n += 1
    return n


def _fmt_keys(c: Counter) -> str:
    items = sorted(c.elements(), key=repr)[:8]
    return " ".join(f"{k}[{s},{e}]={_uncanon(v)}@{ts}" for k, s, e, v, ts in items) + (
        " ..." if sum(c.values()) > 8 else ""
    )


def _uncanon(v: Any) -> str:
    tag = v[0]
    if tag == "list":
        return "[" + ",".join(_uncanon(x) for x in v[1]) + "]"
    if tag in ("num", "bool"):
        return json.dumps(v[1])
    if tag == "str":
        return json.dumps(v[1])
    if tag == "null":
        return "null"
    return str(v[1])


def _pinned(
    name: str, td: int, grace: int, emit: str, ts: list[int], *, key: str = "A", retention_ms: int | None = None
) -> dict:
    return {
        "id": f"{name}/{emit}",
        "time_difference_ms": td,
        "grace_ms": grace,
        "retention_ms": retention_ms,
        "aggregation": "collect",
        "emit": emit,
        "input": [{"key": key, "value": t, "ts": t} for t in ts],
    }


_ODD_KEYS = ["AB", "A\u0000", "A", "", "\u00e9", "~", "\U0001f600", "a", "\uffff"]

#: Hand-picked cases from docs/rules.md (each in all three emit modes) plus cross-key ordering of emit-on-close.
PINNED_CASES: list[dict] = [
    case
    for name, td, grace, ts, ret in [
        ("R17-iterators", 10, 3, [5, 19, 6, 16], None),
        ("R20-double-put", 10, 5, [1, 3, 5, 6, 16, 27], None),
        ("R22-grace-example", 10, 90, [200, 100, 101, 102, 103, 104, 105, 15, 300, 400], None),
        ("R25-retention-edge", 1, 3, [21, 18, 22, 19], None),
        ("R25-retention-edge+1", 1, 3, [21, 18, 22, 19], 6),
        ("R29-lost-window", 10, 0, [100, 131], None),
        ("R29-kept-window", 10, 0, [100, 111], None),
        ("R29-longer-retention", 10, 0, [100, 131], 100),
        ("R31-lost-record", 10, 90, [200, 105, 112], None),
        ("R31-closed-never-created", 2, 1, [27, 30, 28], None),
        ("R31-identical-contents", 10, 3, [14, 19, 7], None),
        ("R15-duplicates-early", 5, 0, [0, 0, 2, 2, 4, 9, 9], None),
        ("R3-javadoc", 5000, 0, [8000, 9200, 12400], None),
    ]
    for case in (_pinned(name, td, grace, emit, ts, retention_ms=ret) for emit in ("every", "update", "close"))
] + [
    {
        "id": "close-key-byte-order",
        "time_difference_ms": 10,
        "grace_ms": 0,
        "aggregation": "collect",
        "emit": "close",
        "input": [{"key": k, "value": i, "ts": 100} for i, k in enumerate(_ODD_KEYS)]
        + [{"key": "Z", "value": 99, "ts": 115}],
    },
]


def run_engine_safe(case: dict) -> tuple[list[dict], dict] | BaseException:
    try:
        return run_engine(case)
    except Exception as exc:  # an engine crash is a finding
        return exc


def differential(
    cases: list[dict],
    *,
    shrink_limit: int = 3,
    shrink_steps: int = 600,
    oracle_results: list[dict] | None = None,
    stats: dict | None = None,
) -> list[Mismatch]:
    """Run ``cases`` through both; returns the mismatches (the first ``shrink_limit`` per kind are shrunk)."""
    t0 = time.perf_counter()
    oracle_results = oracle_results if oracle_results is not None else run_batch(cases, stats=stats)
    t1 = time.perf_counter()
    mismatches: list[Mismatch] = []
    for case, ores in zip(cases, oracle_results, strict=True):
        kinds, details = compare(case, ores, run_engine_safe(case))
        if kinds:
            mismatches.append(Mismatch(case, kinds, details))
    t2 = time.perf_counter()
    if stats is not None:
        stats.update(oracle_seconds=t1 - t0, engine_seconds=t2 - t1, cases=len(cases))
    if shrink_limit and mismatches:
        shrunk_per_kind: Counter = Counter()
        with OracleSession() as session:
            for m in mismatches:
                kind = m.kinds[0]
                if shrunk_per_kind[kind] >= shrink_limit:
                    continue
                shrunk_per_kind[kind] += 1

                def fails(c: dict, kind: str = kind) -> bool:
                    k, _ = compare(c, session.run(c), run_engine_safe(c))
                    return kind in k

                m.minimal = shrink(m.case, fails, max_steps=shrink_steps)
                _, m.minimal_details = compare(m.minimal, session.run(m.minimal), run_engine_safe(m.minimal))
        if stats is not None:
            stats["shrink_seconds"] = time.perf_counter() - t2
    return mismatches


def summarize(mismatches: list[Mismatch], n_cases: int) -> str:
    kinds = Counter(k for m in mismatches for k in m.kinds)
    profiles = Counter(m.case.get("profile") for m in mismatches)
    head = (
        f"{len(mismatches)} of {n_cases} cases differ from Kafka Streams; kinds {dict(kinds)}; "
        f"profiles {dict(profiles)}"
    )
    shown = [m for m in mismatches if m.minimal is not None] or mismatches[:3]
    return head + "\n\n" + "\n\n".join(m.report() for m in shown)


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.conformance.differential",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0, help="first seed (cases use seed, seed+1, ...)")
    ap.add_argument(
        "--emit",
        choices=["every", "update", "close"],
        action="append",
        help="emit mode(s), round-robin (default all three)",
    )
    ap.add_argument("--aggregation", default=None, help="force one aggregation (default: mostly collect)")
    ap.add_argument("--shrink", type=int, default=3, help="shrink this many mismatches per kind")
    ap.add_argument("--json", action="store_true", help="print minimal cases as JSON lines too")
    args = ap.parse_args(argv)
    if replay_records is None:
        print(f"windowstore.replay cannot be imported: {ENGINE_IMPORT_ERROR}", file=sys.stderr)
        return 2
    cases = generate_cases(
        args.cases, seed=args.seed, emits=args.emit or ("every", "update", "close"), aggregation=args.aggregation
    )
    stats: dict = {}
    mism = differential(cases, shrink_limit=args.shrink, stats=stats)
    print(summarize(mism, len(cases)))
    print(json.dumps(stats), file=sys.stderr)
    if args.json:
        for m in mism:
            if m.minimal is not None:
                print(
                    json.dumps(
                        {
                            k: m.minimal[k]
                            for k in (
                                "id",
                                "time_difference_ms",
                                "grace_ms",
                                "retention_ms",
                                "aggregation",
                                "emit",
                                "input",
                            )
                            if k in m.minimal
                        }
                    )
                )
    return 1 if mism else 0


if __name__ == "__main__":
    sys.exit(_main())
