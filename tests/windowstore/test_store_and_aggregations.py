"""WindowStore bounds (inclusive scans, retention visibility) and the aggregation laws."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from windowstore import (
    Collect,
    Composite,
    Count,
    Field,
    First,
    Last,
    Max,
    Mean,
    Min,
    StdDev,
    Sum,
    Variance,
    Visibility,
    WindowStore,
    parse_aggregations,
)
from windowstore.aggregations import BUILTINS
from windowstore.store import key_bytes


def make_store(visibility=Visibility.KEY_FIRST, retention=100):
    s = WindowStore(retention, visibility)
    for start in (0, 10, 20, 30):
        s.put("a", start, start, start, 1)
    s.put("b", 10, "b10", 10, 1)
    return s


def test_range_scans_are_inclusive_at_both_ends():
    s = make_store()
    assert [w[1] for w in s.fetch("a", 10, 30)] == [10, 20, 30]
    assert [w[1] for w in s.backward_fetch("a", 10, 30)] == [30, 20, 10]
    assert [w[1] for w in s.fetch("a", 11, 29)] == [20]
    assert list(s.fetch("missing", 0, 100)) == []


def test_fetch_all_orders_by_start_then_key_bytes():
    s = make_store()
    assert [(w[1], w[0]) for w in s.fetch_all(0, 20)] == [(0, "a"), (10, "a"), (10, "b"), (20, "a")]


def test_purge_slack_drops_runs_of_windows_on_access_and_exact_on_expire():
    """UNBOUNDED (update mode): on access a key is purged only once its oldest window is more than the slack
    below the purge bound (store_time - margin), then down to the bound; expire() purges exactly."""
    s = WindowStore(100, Visibility.UNBOUNDED, purge_margin_ms=50, purge_slack_ms=20)
    for start in range(0, 60, 10):
        s.put("a", start, start, start, 1)  # store_time 50: bound 0, nothing to purge
    s.put("b", 69, 0, 69, 1)  # bound 19: a's 0 and 10 are below it but within the slack (>= -1)
    assert s.windows_of("a").starts == [0, 10, 20, 30, 40, 50] and s.expired == 0
    s.put("b", 71, 0, 71, 1)  # bound 21: 0 < 21 - 20, so this access purges down to the bound
    assert s.windows_of("a").starts == [30, 40, 50] and s.expired == 3
    s.put("b", 95, 0, 95, 1)  # bound 45: 30 is within the slack, kept on access
    assert s.windows_of("a").starts == [30, 40, 50]
    assert s.expire() == 2  # exactly to the bound: a's 30 and 40
    assert s.windows_of("a").starts == [50] and s.expired == 5


def test_purge_slack_is_ignored_where_purging_hides_windows():
    s = WindowStore(40, Visibility.KEY_FIRST, purge_slack_ms=1000)
    for start in (0, 10, 20, 30, 60):
        s.put("a", start, start, start, 1)
    assert s.windows_of("a").starts == [30, 60]  # store_time 60 - (retention - 1): starts >= 21 only


@pytest.mark.parametrize(
    ("visibility", "first_visible"),
    [(Visibility.KEY_FIRST, 31), (Visibility.TIME_FIRST, 30), (Visibility.UNBOUNDED, 0)],
)
def test_retention_visibility_follows_the_store_time(visibility, first_visible):
    """Store time = max start put (here 130); retention 100 (docs/rules.md R25)."""
    s = make_store(visibility)
    s.put("a", 130, 0, 130, 1)
    assert s.store_time == 130
    visible = [w[1] for w in s.fetch("a", 0, 200)]
    assert visible == [x for x in (0, 10, 20, 30, 130) if x >= first_visible]


def test_expire_drops_invisible_windows_and_idle_keys():
    s = make_store(Visibility.TIME_FIRST)
    s.put("a", 130, 0, 130, 1)
    s.expire()
    # a@0,10,20 went lazily when "a" was written, b@10 (an idle key) now: everything below 30
    assert s.expired == 4
    assert "b" not in s.key_max_start and "b" in s.dirty
    assert len(s) == 2 and [w[1] for w in s.all_windows()] == [30, 130]


def test_key_bytes_order_matches_kafka_serdes():
    assert key_bytes("a") == b"a"
    assert key_bytes(1) == (1).to_bytes(8, "big")
    assert key_bytes(-1) == b"\xff" * 8  # LongSerde: negatives sort after positives bytewise
    assert key_bytes("\uffff") < key_bytes("\U0001f600")  # UTF-8 bytes, not UTF-16 order


def fold(agg, values):
    acc = agg.create()
    for v in values:
        acc = agg.accumulate(acc, v)
    return acc


ints = st.lists(st.integers(-(10**6), 10**6), max_size=30)


@pytest.mark.parametrize("agg", [Count(), Sum(), Min(), Max(), Mean(), Variance(), StdDev()])
@given(a=ints, b=ints)
def test_combine_equals_folding_the_concatenation(agg, a, b):
    assert agg.finish(agg.combine(fold(agg, a), fold(agg, b))) == agg.finish(fold(agg, a + b))


@pytest.mark.parametrize("agg", [Count(), Sum(), Mean()])
@given(a=ints, b=ints)
def test_deduct_is_the_inverse_of_combine(agg, a, b):
    assert agg.deduct(fold(agg, a + b), fold(agg, b)) == fold(agg, a)


@given(values=st.lists(st.integers(-1000, 1000), min_size=1, max_size=40))
def test_builtin_results(values):
    n = len(values)
    mean = sum(values) / n
    assert fold(Count(), values) == n
    assert fold(Sum(), values) == sum(values)
    assert fold(Min(), values) == min(values) and fold(Max(), values) == max(values)
    assert Mean().finish(fold(Mean(), values)) == pytest.approx(mean)
    var = sum((v - mean) ** 2 for v in values) / n
    assert Variance().finish(fold(Variance(), values)) == pytest.approx(var, abs=1e-9)
    assert StdDev().finish(fold(StdDev(), values)) == pytest.approx(math.sqrt(var), abs=1e-9)
    assert First().finish(fold(First(), values)) == values[0]
    assert Last().finish(fold(Last(), values)) == values[-1]
    assert Collect().finish(fold(Collect(), values)) == values


def test_empty_windows_finish_to_none():
    for agg in (Mean(), Variance(), StdDev(), First(), Last()):
        assert agg.finish(agg.create()) is None


def test_variance_of_large_floats_keeps_precision():
    values = [1e9 + x for x in (4.0, 7.0, 13.0, 16.0)]
    assert Variance().finish(fold(Variance(), values)) == pytest.approx(22.5)


def test_parse_aggregations_builds_named_composites():
    agg = parse_aggregations("count,sum:amount,max:amount")
    assert isinstance(agg, Composite)
    rows = [{"amount": 3}, {"amount": 9}]
    assert agg.finish(fold(agg, rows)) == {"count": 2, "sum_amount": 12, "max_amount": 9}
    assert isinstance(parse_aggregations("sum:x"), Field)
    assert set(BUILTINS) >= {"count", "sum", "min", "max", "mean", "variance", "stddev", "first", "last", "collect"}
    with pytest.raises(ValueError, match="unknown aggregation 'median'"):
        parse_aggregations("count,median:x")
    with pytest.raises(ValueError, match="unique"):
        parse_aggregations("count,count")


def fold_bound(agg, values):
    acc = agg.create()
    for v in values:
        acc = agg.bind(v)(acc)
    return acc


SPECS = [
    "count",
    "sum:x",
    "min:x",
    "max:x",
    "mean:x",
    "first:x",
    "collect:x",
    "count,sum:x",
    "count,sum:x,max:x",
    "count,sum:x,max:x,min:x",
    "count,sum:x,max:x,min:x,mean:x",
]


@pytest.mark.parametrize("spec", SPECS)
@given(values=st.lists(st.one_of(st.integers(-(10**6), 10**6), st.floats(-1e6, 1e6)), max_size=30))
def test_bind_folds_like_accumulate(spec, values):
    """The record path's per-record step (``bind``) gives the accumulator ``accumulate`` gives, value for value."""
    agg = parse_aggregations(spec)
    rows = [{"x": v} for v in values]
    assert fold_bound(agg, rows) == fold(agg, rows)
    for acc in (agg.create(), fold(agg, rows)):  # the step never changes the accumulator it is given
        before = acc
        agg.bind({"x": 1})(acc)
        assert acc == before


def test_bind_keeps_a_subclass_accumulate_and_raises_where_accumulate_does():
    class Doubled(Sum):
        def accumulate(self, acc, value, key=None):
            return acc + 2 * value

    assert Doubled().bind(5)(1) == 11
    assert Composite([Count(), Field(Doubled(), "x")]).bind({"x": 5})((0, 1)) == (1, 11)
    step = parse_aggregations("count,sum:x").bind({"y": 1})  # no field x: nothing raised yet
    with pytest.raises(KeyError):
        step((0, 0))
