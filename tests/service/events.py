"""Test data: payment events with out-of-order, late, duplicate and malformed records, and the expected output
computed by replaying each partition through ``windowstore`` (the reference for the service)."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from connectors.serde import BadRecord, InputDecoder, InputSpec, aggregation_fields
from windowstore import TaskProcessor, WindowDefinition, is_tombstone, new_task_processor, parse_aggregations

__all__ = ["Event", "payment_events", "Expected", "replay", "BAD_KINDS"]

BAD_KINDS = ("undecodable", "missing-amount", "string-amount", "null-key", "negative-ts", "missing-ts", "not-object")


@dataclass(frozen=True)
class Event:
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp: int  # Kafka record timestamp (ms)
    note: str = "good"  # good | ooo | late | dup | bad:<kind>


def payment_events(
    n: int,
    *,
    keys: int = 12,
    partitions: int = 3,
    td: int = 1000,
    grace: int = 300,
    seed: int = 7,
    base_ts: int = 1_700_000_000_000,
    time_in_value: bool = False,
    key_in_value: bool = False,
    encode: Callable[[dict[str, Any]], bytes] | None = None,
    bad_fraction: float = 0.03,
    late_fraction: float = 0.03,
    ooo_fraction: float = 0.06,
    dup_fraction: float = 0.02,
    bad_kinds: tuple[str, ...] = BAD_KINDS,
) -> list[Event]:
    """``n`` events in production order. Keys ``acct-<i>``, partition = i % partitions (a key lives in one
    partition). Event time advances ~``td/8`` per event per key on average."""
    rnd = random.Random(seed)
    enc = encode or (lambda rec: json.dumps(rec).encode())
    now = base_ts
    last: dict[int, Event] = {}
    out: list[Event] = []
    step = max(1, td // (8 * max(1, keys // partitions)))
    for _ in range(n):
        k = rnd.randrange(keys)
        p = k % partitions
        now += rnd.randint(0, 2 * step)
        r = rnd.random()
        if r < dup_fraction and k in last:
            out.append(Event(p, last[k].key, last[k].value, last[k].timestamp, "dup"))
            continue
        r -= dup_fraction
        note = "good"
        ts = now
        if r < ooo_fraction:
            ts = now - rnd.randint(1, grace + td // 2)
            note = "ooo"
        elif r - ooo_fraction < late_fraction:
            ts = now - (td + grace + rnd.randint(1, 2 * td))
            note = "late"
        amount = rnd.randint(1, 500)
        key = f"acct-{k}"
        rec: dict[str, Any] = {"amount": amount}
        if key_in_value:
            rec["account"] = key
        if time_in_value:
            rec["ts"] = ts
        kafka_key: bytes | None = None if key_in_value else key.encode()
        value: bytes | None
        if rnd.random() < bad_fraction:
            kind = rnd.choice(bad_kinds)
            note = f"bad:{kind}"
            if kind == "undecodable":
                value = bytes([0xFF, 0x00, rnd.randrange(256)]) + b"\x00garbage"
            elif kind == "not-object":
                value = b"[1, 2, 3]"
            else:
                bad = dict(rec)
                if kind == "missing-amount":
                    del bad["amount"]
                elif kind == "string-amount":
                    bad["amount"] = str(amount)
                elif kind == "null-key":
                    if key_in_value:
                        bad["account"] = None
                    else:
                        kafka_key = None
                elif kind == "negative-ts":
                    if time_in_value:
                        bad["ts"] = -1 - rnd.randrange(1000)
                    else:
                        bad["amount"] = None
                elif kind == "missing-ts":
                    if time_in_value:
                        del bad["ts"]
                    else:
                        bad["amount"] = None
                value = enc(bad) if kind not in ("undecodable",) else value  # type: ignore[has-type]
            out.append(Event(p, kafka_key, value, ts if ts >= 0 else base_ts, note))
            continue
        value = enc(rec)
        ev = Event(p, kafka_key, value, ts, note)
        last[k] = ev
        out.append(ev)
    return out


@dataclass
class Expected:
    """What the service must produce for some events, per windowstore replay per partition."""

    #: (key, start, end) -> (aggregates dict, record_count, max_timestamp): last value of every window (sessions:
    #: of every live session - a tombstone removes the session it names)
    final: dict[tuple[str, int, int], tuple[Any, int, int]] = field(default_factory=dict)
    #: (partition, offset) of records dropped as late
    late: set[tuple[int, int]] = field(default_factory=set)
    #: (partition, offset) -> reason of dead-lettered records
    dead: dict[tuple[int, int], str] = field(default_factory=dict)
    #: per partition, every emitted update in order: (key, start, end, aggregates, count, max_ts)
    sequence: dict[int, list[tuple]] = field(default_factory=lambda: defaultdict(list))
    aggregated: int = 0


def _aggregates(spec: str, value: Any) -> dict[str, Any]:
    names = [p.strip().replace(":", "_") for p in spec.split(",") if p.strip()]
    return value if len(names) > 1 else {names[0]: value}


def replay(
    events: list[Event],
    *,
    td: int = 0,
    grace: int,
    aggregations: str,
    emit: str,
    spec: InputSpec | None = None,
    registry: Any = None,
    window: WindowDefinition | None = None,
    sequence: bool = True,
) -> Expected:
    """Feed each partition's events (offset = position within the partition) through one processor: sliding
    windows of time difference ``td``, or the windows ``window`` (its grace is ``grace``).

    ``sequence=False``: only the final values, the late and the dead records; in update mode the processors are
    flushed every :data:`FLUSH_EVERY` records instead of after each (the final value of a window does not depend
    on when the cache is flushed), which a run of millions of window updates needs (bench/recovery_bench.py)."""
    spec = spec or InputSpec(fields=aggregation_fields(aggregations))
    decoder = InputDecoder(spec, registry=registry)
    exp = Expected()
    procs: dict[int, TaskProcessor] = {}
    definition = dataclasses.replace(window or WindowDefinition("sliding", td), grace_ms=grace)
    offsets: dict[int, int] = defaultdict(int)
    for ev in events:
        off = offsets[ev.partition]
        offsets[ev.partition] += 1
        try:
            k, v, t = decoder.decode(ev.key, ev.value, ev.timestamp)
        except BadRecord as e:
            exp.dead[(ev.partition, off)] = e.reason
            continue
        proc = procs.get(ev.partition)
        if proc is None:
            proc = procs[ev.partition] = new_task_processor(
                definition, parse_aggregations(aggregations), emit, None, {}.get, collect_drops=True
            )
        ups = proc.process(k, v, t) or []
        if emit == "update" and (sequence or off % FLUSH_EVERY == 0):
            ups = proc.flush()  # the final value of a window does not depend on when the cache is flushed
        if proc.take_drops():
            exp.late.add((ev.partition, off))
        else:
            exp.aggregated += 1
        _record(exp, aggregations, ev.partition, ups, sequence)
    if emit == "update" and not sequence:
        for partition, proc in procs.items():
            _record(exp, aggregations, partition, proc.flush(), sequence)
    return exp


#: records between two flushes of a partition's processor in ``replay(..., sequence=False)``
FLUSH_EVERY = 10_000


def _record(exp: Expected, aggregations: str, partition: int, ups: Any, sequence: bool) -> None:
    for u in ups:
        if is_tombstone(u):  # a session a merge or an extension replaced: gone from a compacted changelog
            exp.final.pop((u.key, u.start, u.end), None)
            if sequence:
                exp.sequence[partition].append((u.key, u.start, u.end, None, 0, u.ts))
            continue
        agg = _aggregates(aggregations, u.value)
        exp.final[(u.key, u.start, u.end)] = (agg, u.count, u.ts)
        if sequence:
            exp.sequence[partition].append((u.key, u.start, u.end, agg, u.count, u.ts))


def changelog_final(pairs) -> dict[tuple[str, int, int], tuple[Any, int, int]]:
    """Last value per window of JSON changelog records given as (key bytes, value bytes), in topic order; the
    key must name the same window as the value. Comparable with ``replay(...).final``."""
    final: dict[tuple[str, int, int], tuple[Any, int, int]] = {}
    for key, value in pairs:
        k, v = json.loads(key), json.loads(value)
        window = (v["key"], v["window_start"], v["window_end"])
        assert (k["key"], k["window_start"], k["window_end"]) == window
        final[window] = (v["aggregates"], v["record_count"], v["max_timestamp"])
    return final
