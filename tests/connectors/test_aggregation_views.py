"""The connectors' views of an aggregation spec agree with windowstore's: the value fields the decoder checks
(``aggregation_fields``) and the changelog's aggregate names and Avro types (``aggregate_types``) come from the
parts ``windowstore.parse_aggregation_specs`` reads, and an invalid spec raises its error in every view."""

from __future__ import annotations

import pytest
from fastavro import parse_schema
from hypothesis import given

from connectors.output import EXACT_INT, aggregate_types, changelog_value_schema
from connectors.serde import NUMERIC_AGGREGATIONS, aggregation_fields
from tests.windowstore.test_aggregations_spec import aggregation_spec_strings, built_parts
from windowstore.aggregations import BUILTINS, Field, parse_aggregations

#: each built-in's changelog Avro type
TYPES = {
    "count": "long",
    "sum": ["null", "long", "double", EXACT_INT],
    "min": ["null", "long", "double", "string", "boolean"],
    "max": ["null", "long", "double", "string", "boolean"],
    "first": ["null", "long", "double", "string", "boolean"],
    "last": ["null", "long", "double", "string", "boolean"],
    "mean": ["null", "double"],
    "variance": ["null", "double"],
    "stddev": ["null", "double"],
    "collect": {"type": "array", "items": ["null", "long", "double", "string", "boolean"]},
}


def test_every_builtin_has_a_type_and_numeric_kinds_are_builtins():
    assert set(TYPES) == set(BUILTINS)
    assert set(NUMERIC_AGGREGATIONS) <= set(BUILTINS)
    assert aggregate_types(",".join(f"{k}:x" for k in sorted(BUILTINS))) == [
        (f"{k}_x", TYPES[k]) for k in sorted(BUILTINS)
    ]


@given(aggregation_spec_strings())
def test_views_agree_with_windowstore(spec):
    built = built_parts(spec)
    kinds = [type(a.inner if isinstance(a, Field) else a).name for a in built]
    assert aggregate_types(spec) == [(a.name, TYPES[k]) for a, k in zip(built, kinds, strict=True)]
    parse_schema(changelog_value_schema(spec))  # a valid Avro record: field names unique
    fields: dict[str, bool] = {}
    for agg, kind in zip(built, kinds, strict=True):
        if isinstance(agg, Field) and agg.field is not None:
            fields[agg.field] = fields.get(agg.field, False) or kind in NUMERIC_AGGREGATIONS
    assert aggregation_fields(spec) == tuple(fields.items())


@pytest.mark.parametrize("spec", ["", " ,", "count,median:x", "count,COUNT", "sum:x,sum: x "])
def test_invalid_specs_raise_windowstores_error(spec):
    with pytest.raises(ValueError) as expected:
        parse_aggregations(spec)
    for view in (aggregate_types, aggregation_fields, changelog_value_schema):
        with pytest.raises(ValueError) as raised:
            view(spec)
        assert str(raised.value) == str(expected.value)
