"""Column-at-once Avro encoding: byte-identical to fastavro's per-record writer."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import avro_columns as ac
from connectors.output import ChangelogEncoder, ChangelogSpec
from connectors.rows import RowBlock

INT64 = st.integers(-(2**63), 2**63 - 1)
KEYS = st.text(max_size=12)  # hypothesis leaves out lone surrogates by default: every one encodes as UTF-8
FLOATS = st.floats(allow_nan=True, allow_infinity=True)


def fastavro_bytes(schema, value) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(schema), value)
    return buf.getvalue()


def rows_of(piece: ac.Piece) -> list[bytes]:
    return ac.encode_rows(len(piece.data), [piece])


@settings(max_examples=300, deadline=None)
@given(st.lists(INT64, max_size=40))
def test_longs_are_fastavro_longs(values):
    expected = [fastavro_bytes("long", v) for v in values]
    assert rows_of(ac.longs(np.array(values, dtype=np.int64))) == expected
    assert [ac.zigzag_varint(v) for v in values] == expected


@pytest.mark.parametrize("v", [0, -1, 1, 63, -64, 64, -65, 2**31, -(2**31), 2**62, 2**63 - 1, -(2**63)])
def test_long_edges(v):
    assert rows_of(ac.longs(np.array([v], dtype=np.int64))) == [fastavro_bytes("long", v)]


@settings(max_examples=200, deadline=None)
@given(st.lists(FLOATS, max_size=30))
def test_doubles_are_fastavro_doubles(values):
    got = rows_of(ac.doubles(np.array(values, dtype=np.float64)))
    assert got == [fastavro_bytes("double", v) for v in values]


@settings(max_examples=300, deadline=None)
@given(st.lists(KEYS, max_size=30))
def test_strings_are_fastavro_strings(values):
    assert rows_of(ac.strings(values)) == [fastavro_bytes("string", v) for v in values]


@settings(max_examples=200, deadline=None)
@given(st.lists(KEYS, min_size=1, max_size=8, unique=True), st.lists(st.integers(0, 7), max_size=30))
def test_strings_by_row_ids_are_the_rows_strings(table, ids):
    ids = [i % len(table) for i in ids]
    assert rows_of(ac.strings(table, np.asarray(ids, np.int64))) == [fastavro_bytes("string", table[i]) for i in ids]


def test_strings_reject_non_str():
    with pytest.raises(TypeError):
        ac.strings(["a", 3])


def test_rows_mix_constant_fixed_and_variable_pieces():
    pieces = [
        ac.constant(b"\x00\x00\x00\x00\x07"),
        ac.strings(["a", "", "ccc"]),
        ac.constant(b"\x02"),
        ac.doubles(np.array([1.0, -0.0, math.inf])),
        ac.longs(np.array([0, -1, 300])),
    ]
    rows = ac.encode_rows(3, pieces)
    assert rows[0] == b"\x00\x00\x00\x00\x07" + b"\x02a" + b"\x02" + fastavro_bytes("double", 1.0) + b"\x00"
    assert rows[1] == b"\x00\x00\x00\x00\x07" + b"\x00" + b"\x02" + fastavro_bytes("double", -0.0) + b"\x01"
    assert rows[2].endswith(fastavro_bytes("long", 300)) and rows[2][5:9] == b"\x06ccc"
    assert ac.encode_rows(0, pieces[:1]) == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(INT64, st.sampled_from(["k1", "k22", "acct-1", ""]), st.integers(2**35, 2**40), st.integers(0, 200)),
        max_size=25,
    )
)
def test_rows_are_their_pieces_rows_back_to_back(rows):
    """Pieces whose rows all have one length (timestamps of one era, keys of one length) go without a mask;
    either way each row is its pieces' bytes in order."""
    if not rows:
        assert ac.encode_rows(0, [ac.constant(b"\x02")]) == []
        return
    a, keys, era, small = (list(c) for c in zip(*rows, strict=True))
    pieces = [
        ac.longs(np.array(a, np.int64)),
        ac.strings(keys),
        ac.constant(b"\x02"),
        ac.longs(np.array(era, np.int64)),
        ac.longs(np.array(small, np.int64)),
    ]
    each = [rows_of(p) if len(p.data) == len(rows) else [bytes(p.data[0])] * len(rows) for p in pieces]
    assert ac.encode_rows(len(rows), pieces) == [b"".join(parts) for parts in zip(*each, strict=True)]


def test_a_column_of_one_encoded_length_needs_no_mask():
    assert ac.longs(np.array([2**36, 2**37, 2**38], np.int64)).lengths is None  # 6 bytes each
    assert ac.longs(np.array([1, 2**40], np.int64)).lengths.tolist() == [1, 6]
    assert ac.strings(["ab", "cd", "ab"]).lengths is None
    assert ac.strings(["ab", "c"]).lengths.tolist() == [3, 2]


AGGS = "count,sum:amount,max:amount,mean:amount"


def _encoder(key_format: str = "avro", value_format: str = "avro") -> ChangelogEncoder:
    return ChangelogEncoder(ChangelogSpec(key_format, value_format, AGGS, key_schema_id=3, value_schema_id=70000))


def _per_row(enc: ChangelogEncoder, cols, emit_time):
    keys, values = [], []
    for i, k in enumerate(cols["key"]):
        s, e = int(cols["start"][i]), int(cols["end"][i])
        v = {n: (c[i].item() if hasattr(c[i], "item") else c[i]) for n, c in cols["values"].items()}
        keys.append(enc.key(k, s, e))
        values.append(enc.value(k, s, e, v, int(cols["ts"][i]), int(cols["count"][i]), emit_time))
    return keys, values


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_changelog_columns_equal_fastavro_rows(data):
    """The batch path's int64 / float64 columns: every key and value byte-identical to fastavro's writer."""
    n = data.draw(st.integers(1, 25))
    ints = st.lists(INT64, min_size=n, max_size=n)
    cols = {
        "key": data.draw(
            st.lists(st.sampled_from(data.draw(st.lists(KEYS, min_size=1, max_size=4))), min_size=n, max_size=n)
        ),
        "start": np.array(data.draw(ints), dtype=np.int64),
        "end": np.array(data.draw(ints), dtype=np.int64),
        "ts": np.array(data.draw(ints), dtype=np.int64),
        "count": np.array(data.draw(ints), dtype=np.int64),
        "values": {
            "count": np.array(data.draw(ints), dtype=np.int64),
            "sum_amount": np.array(data.draw(ints), dtype=np.int64),
            "max_amount": np.array(data.draw(st.lists(FLOATS, min_size=n, max_size=n)), dtype=np.float64),
            "mean_amount": np.array(data.draw(st.lists(FLOATS, min_size=n, max_size=n)), dtype=np.float64),
        },
    }
    emit_time = data.draw(INT64)
    formats = data.draw(
        st.sampled_from(
            [("avro", "avro"), ("windowed", "avro"), ("json", "avro"), ("string", "avro"), ("avro", "json")]
        )
    )
    enc = _encoder(*formats)
    keys, values = enc.encode_columns(cols, emit_time)
    assert (keys, values) == _per_row(enc, cols, emit_time)
    if n and formats == ("avro", "avro"):  # one buffer each, which the producer hands to librdkafka as it is
        assert isinstance(keys, RowBlock) and isinstance(values, RowBlock)


@pytest.mark.parametrize(
    "column",
    [
        [1, None, 3],  # a null
        [1, 2.5, 3],  # mixed int and float
        np.array([True, False, True]),  # bools are not longs
        [2**63, 1, 2],  # beyond int64
    ],
)
def test_changelog_columns_that_do_not_fit_fall_back_to_identical_rows(column):
    cols = {
        "key": ["a", "b", "a"],
        "start": [0, 5, 10],
        "end": [10, 15, 20],
        "ts": [1, 6, 11],
        "count": [1, 2, 3],
        "values": {"count": [1, 2, 3], "sum_amount": [4, 5, 6], "max_amount": column, "mean_amount": [0.5, 1.0, None]},
    }
    enc = _encoder()
    assert enc.encode_columns(cols, 9) == _per_row(enc, cols, 9)
