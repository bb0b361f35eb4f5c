"""The aggregation spec grammar (``count,sum:amount``), read in one place: ``parse_aggregation_specs``.

``parse_aggregations`` builds from its parts, and the connectors derive the fields they decode and the Avro types
they write from them (tests/connectors/test_aggregation_views.py checks those views agree)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from windowstore.aggregations import (
    BUILTINS,
    AggregationSpec,
    Composite,
    Field,
    parse_aggregation,
    parse_aggregation_spec,
    parse_aggregation_specs,
    parse_aggregations,
)

_FIELD_CHARS = st.sampled_from("abxyz_09:é ")


@st.composite
def aggregation_spec_strings(draw: st.DrawFn) -> str:
    """A valid spec string: built-in kinds in any letter case, optional fields, blanks and empty parts between."""
    parts = draw(
        st.lists(
            st.tuples(st.sampled_from(sorted(BUILTINS)), st.none() | st.text(_FIELD_CHARS, min_size=1, max_size=6)),
            min_size=1,
            max_size=6,
            unique_by=lambda p: (p[0], (p[1] or "").strip()),
        )
    )
    texts = []
    for kind, field in parts:
        kind = "".join(c.upper() if draw(st.booleans()) else c for c in kind)
        pad = draw(st.sampled_from(["", " ", "  "]))
        texts.append(pad + kind + pad + ("" if field is None else ":" + field))
        if draw(st.booleans()):
            texts.append(draw(st.sampled_from(["", " "])))  # an empty part is skipped
    return ",".join(texts)


def built_parts(spec: str) -> tuple:
    agg = parse_aggregations(spec)
    return agg.parts if isinstance(agg, Composite) else (agg,)


def test_parts_name_their_kind_and_field():
    assert parse_aggregation_specs(" Count , SUM : amount,,max:amount ") == (
        AggregationSpec("count"),
        AggregationSpec("sum", "amount"),
        AggregationSpec("max", "amount"),
    )
    assert [p.name for p in parse_aggregation_specs("count,sum:amount,collect:a:b")] == [
        "count",
        "sum_amount",
        "collect_a:b",
    ]
    assert parse_aggregation_spec("sum:") == AggregationSpec("sum")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "no aggregation given"),
        (" , ,", "no aggregation given"),
        ("count,median:x", "unknown aggregation 'median' in 'median:x'; known: "),
        (":x", "unknown aggregation '' in ':x'"),
        ("count,COUNT", "aggregation output names must be unique, got ['count', 'count']"),
        ("sum:x,sum: x ", "aggregation output names must be unique, got ['sum_x', 'sum_x']"),
    ],
)
def test_invalid_specs_raise_one_error_wherever_parsed(spec, message):
    for parse in (parse_aggregation_specs, parse_aggregations):
        with pytest.raises(ValueError) as raised:
            parse(spec)
        assert str(raised.value).startswith(message)


def test_one_part_parses_to_the_same_aggregation():
    assert isinstance(parse_aggregation("sum:x"), Field)
    assert parse_aggregation(" Max ").name == "max"
    with pytest.raises(ValueError, match="unknown aggregation 'median'"):
        parse_aggregation("median")


@given(aggregation_spec_strings())
def test_built_aggregations_are_the_parsed_parts(spec):
    parsed = parse_aggregation_specs(spec)
    built = built_parts(spec)
    assert [a.name for a in built] == [p.name for p in parsed]
    for agg, part in zip(built, parsed, strict=True):
        inner = agg.inner if isinstance(agg, Field) else agg
        assert type(inner) is BUILTINS[part.kind]
        assert (agg.field if isinstance(agg, Field) else None) == part.field
