"""Brute-force references used by the property tests: the declarative window definition (docs/rules.md R3) and
the per-record lateness classification (R8, R22), written as directly from the rules as possible."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence


def classify(records: Sequence[tuple[Hashable, object, int]], td: int, grace: int) -> list[str]:
    """Per record in arrival order: "invalid", "late" (R8), "partial" (R22b) or "ok"."""
    st = -1
    out = []
    for key, value, ts in records:
        if key is None or value is None or ts < 0:
            out.append("invalid")
            continue
        st = max(st, ts)
        close = st - grace
        if ts + td < close:
            out.append("late")
        elif ts < close:
            out.append("partial")
        else:
            out.append("ok")
    return out


def r3_table(records: Sequence[tuple[Hashable, object, int]], td: int) -> dict[tuple[Hashable, int], tuple[list, int]]:
    """R3: for each key and integer start s >= 0 with W(s) = records in [s, s+td], the window [s, s+td] exists
    iff W(s) is non-empty and (s == 0 or W(s) != W(s-1)). Value: (sorted values, max ts)."""
    by_key: dict[Hashable, list[tuple[int, object]]] = defaultdict(list)
    for key, value, ts in records:
        by_key[key].append((ts, value))
    table: dict[tuple[Hashable, int], tuple[list, int]] = {}
    for key, recs in by_key.items():
        top = max(ts for ts, _ in recs)

        def members(s: int, recs: list = recs) -> list[int]:
            return sorted(i for i, (ts, _) in enumerate(recs) if s <= ts <= s + td)

        prev = None
        for s in range(top + 1):
            w = members(s)
            if w and (s == 0 or w != prev):
                table[(key, s)] = (sorted(recs[i][1] for i in w), max(recs[i][0] for i in w))
            prev = w
    return table


def save_state(proc, backend: dict) -> bytes:
    """What the service does after a micro-batch: expire, write dirty keys' blobs (delete emptied ones) into
    ``backend`` and return the task meta."""
    proc.expire()
    for key, blob in proc.export_keys(proc.dirty_keys()).items():
        if blob is None:
            backend.pop(key, None)
        else:
            backend[key] = blob
    return proc.export_meta()
