"""The changelog of session windows (connectors/output.py): Kafka Streams' ``SessionWindowedSerializer`` key layout
for the ``windowed`` key format, and a null value (a Kafka tombstone) for every session a merge or an extension
replaced, in every key and value format, on the record path (``encode``) and the columns path (``encode_columns``).
"""

from __future__ import annotations

import json
import struct

import pytest

from connectors.output import (
    KEY_FORMATS,
    VALUE_FORMATS,
    ChangelogEncoder,
    ChangelogSpec,
    parse_session_windowed_key,
    session_windowed_key,
    windowed_key,
)
from windowstore import SessionWindowProcessor, SessionWindows, WindowUpdate, is_tombstone, parse_aggregations

EMIT_TIME = 1_764_000_000_123


def _spec(key_format: str, value_format: str, aggregations: str = "count", window: str = "session") -> ChangelogSpec:
    return ChangelogSpec(
        key_format=key_format,
        value_format=value_format,
        aggregations=aggregations,
        key_schema_id=7 if key_format == "avro" else None,
        value_schema_id=8 if value_format == "avro" else None,
        window=window,
    )


def test_session_windowed_key_is_key_end_start_big_endian() -> None:  # SessionKeySchema.toBinary
    assert session_windowed_key("ab", 1, 2) == b"ab" + b"\x00" * 7 + b"\x02" + b"\x00" * 7 + b"\x01"
    key = session_windowed_key("acct-é", 1_700_000_000_000, 1_700_000_060_000)
    assert key[-16:] == struct.pack(">qq", 1_700_000_060_000, 1_700_000_000_000)
    assert parse_session_windowed_key(key) == ("acct-é", 1_700_000_000_000, 1_700_000_060_000)


def test_sliding_keeps_the_time_windowed_layout() -> None:
    enc = ChangelogEncoder(_spec("windowed", "json", window="sliding"))
    keys, _values = enc.encode([WindowUpdate("a", 10, 20, 1, 15, 1)], EMIT_TIME)
    assert list(keys) == [windowed_key("a", 10)] == [b"a" + struct.pack(">q", 10)]


def test_windowed_session_keys_and_tombstones_bytes() -> None:
    enc = ChangelogEncoder(_spec("windowed", "json"))
    updates = [WindowUpdate("A", 10, 12, None, 12, 0), WindowUpdate("A", 10, 16, 3, 16, 3)]
    keys, values = enc.encode(updates, EMIT_TIME)
    assert list(keys) == [b"A" + struct.pack(">qq", 12, 10), b"A" + struct.pack(">qq", 16, 10)]
    assert values[0] is None
    assert json.loads(values[1]) == {  # type: ignore[arg-type]
        "key": "A",
        "window_start": 10,
        "window_end": 16,
        "record_count": 3,
        "max_timestamp": 16,
        "emit_time": EMIT_TIME,
        "aggregates": {"count": 3},
    }


@pytest.mark.parametrize("key_format", KEY_FORMATS)
@pytest.mark.parametrize("value_format", VALUE_FORMATS)
@pytest.mark.parametrize("aggregations", ["count", "count,sum:x,max:x"])
def test_tombstone_is_a_null_value_in_every_format(key_format: str, value_format: str, aggregations: str) -> None:
    """A real run with merges: gap 5, ``A@10 A@12 A@20 A@24 A@16`` forwards (every) [10,10], its tombstone,
    [10,12], [20,20], its tombstone, [20,24], the tombstones of [10,12] and [20,24], then [10,24]. Each tombstone
    row is the session's key and a null value; each live row is exactly what the encoder makes of it alone; the
    columns of ``flush_columns`` encode to the same rows."""
    proc = SessionWindowProcessor(SessionWindows(5, 100), parse_aggregations(aggregations), "every", batch=True)
    records = [("A", {"x": i}, t) for i, t in enumerate([10, 12, 20, 24, 16])] + [("B", {"x": 9}, 11)]
    proc.process_columns([k for k, _v, _t in records], [t for _k, _v, t in records], None, [v for _k, v, _t in records])
    cols = proc.flush_columns()
    updates = [
        WindowUpdate(k, s, e, None if c == 0 else v, t, c)
        for k, s, e, t, c, v in zip(
            cols["key"],
            cols["start"].tolist(),
            cols["end"].tolist(),
            cols["ts"].tolist(),
            cols["count"].tolist(),
            _values(cols, aggregations),
            strict=True,
        )
    ]
    assert [is_tombstone(u) for u in updates] == [False, True, False, False, True, False, True, True, False, False]
    enc = ChangelogEncoder(_spec(key_format, value_format, aggregations))
    keys, values = enc.encode(updates, EMIT_TIME)
    assert (list(keys), list(values)) == tuple(map(list, enc.encode_columns(cols, EMIT_TIME)))
    for u, k, v in zip(updates, keys, values, strict=True):
        assert k == enc.key(u.key, u.start, u.end)
        if is_tombstone(u):
            assert v is None
        else:
            alone_keys, alone_values = enc.encode([u], EMIT_TIME)
            assert (k, v) == (alone_keys[0], alone_values[0])
    if key_format == "windowed":
        assert [parse_session_windowed_key(k) for k in keys] == [(u.key, u.start, u.end) for u in updates]


def _values(cols: dict, aggregations: str) -> list:
    if "," not in aggregations:
        return cols["values"]["count"].tolist()
    names = list(cols["values"])
    columns = [cols["values"][n].tolist() for n in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def test_only_tombstones() -> None:
    enc = ChangelogEncoder(_spec("avro", "avro"))
    keys, values = enc.encode([WindowUpdate("é", 1, 2, None, 2, 0)], EMIT_TIME)
    assert list(values) == [None] and list(keys) == [enc.key("é", 1, 2)]
