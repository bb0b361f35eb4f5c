"""Aggregations in the accumulate / combine / deduct / finish form (Hazelcast Jet's AggregateOperation).

An aggregation owns an *accumulator* that is treated as an immutable value: ``accumulate`` returns a new
accumulator and never mutates its argument, because the sliding-window processor copies accumulators between
windows (docs/rules.md R12.3: a new right window is a copy of another window's aggregate).

* ``create()``                  the empty accumulator (Kafka Streams' initializer)
* ``accumulate(acc, value, key)`` fold one value in (Kafka Streams' aggregator; built-ins ignore ``key``)
* ``combine(a, b)``             merge two accumulators (``None`` when not supported)
* ``deduct(a, b)``              inverse of combine (``None`` when not supported)
* ``finish(acc)``               the reported result

``commutative`` means: the finished result does not depend on the order values were accumulated in, exactly
(not just up to floating-point rounding) for integer values. Only such aggregations may take the batch path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Aggregation",
    "Count",
    "Sum",
    "Min",
    "Max",
    "Mean",
    "Variance",
    "StdDev",
    "First",
    "Last",
    "Collect",
    "Reduce",
    "InitializerAggregator",
    "Field",
    "Composite",
    "BUILTINS",
    "AggregationSpec",
    "parse_aggregation",
    "parse_aggregations",
    "parse_aggregation_spec",
    "parse_aggregation_specs",
]


class Aggregation:
    """Base class of every aggregation; subclasses override what they support."""

    name: str = "aggregation"
    commutative: bool = False
    #: kind of batch kernel the fast path can use ("count", "sum", "min", "max", "mean", "variance", "stddev")
    batch_kind: str | None = None

    def create(self) -> Any:
        raise NotImplementedError

    def accumulate(self, acc: Any, value: Any, key: Hashable = None) -> Any:
        raise NotImplementedError

    def bind(self, value: Any, key: Hashable = None) -> Callable[[Any], Any]:
        """``acc -> accumulate(acc, value, key)`` for one record: the record path folds one record into every
        window it falls in (tens of windows), so the built-ins read the record's field once here and return a
        step that does only the arithmetic. Same results and the same exceptions, at the same call, as
        ``accumulate``; a subclass that overrides ``accumulate`` gets this generic step."""
        accumulate = self.accumulate
        return lambda acc: accumulate(acc, value, key)

    def _own_accumulate(self, cls: type[Aggregation]) -> bool:
        """Whether ``accumulate`` is ``cls``'s own (not overridden by a subclass): a built-in's ``bind`` may
        then inline it."""
        return type(self).accumulate is cls.accumulate

    combine: Callable[[Any, Any], Any] | None = None
    deduct: Callable[[Any, Any], Any] | None = None

    def finish(self, acc: Any) -> Any:
        return acc

    #: True when ``finish`` is the identity, so emission can skip the call.
    finish_is_identity: bool = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Count(Aggregation):
    name = "count"
    commutative = True
    batch_kind = "count"

    def create(self) -> int:
        return 0

    def accumulate(self, acc: int, value: Any, key: Hashable = None) -> int:
        return acc + 1

    def bind(self, value: Any, key: Hashable = None) -> Callable[[Any], Any]:
        return _plus_one if self._own_accumulate(Count) else super().bind(value, key)

    def combine(self, a: int, b: int) -> int:
        return a + b

    def deduct(self, a: int, b: int) -> int:
        return a - b


class Sum(Aggregation):
    name = "sum"
    commutative = True
    batch_kind = "sum"

    def create(self) -> int:
        return 0

    def accumulate(self, acc: Any, value: Any, key: Hashable = None) -> Any:
        return acc + value

    def bind(self, value: Any, key: Hashable = None) -> Callable[[Any], Any]:
        if not self._own_accumulate(Sum):
            return super().bind(value, key)
        return lambda acc: acc + value

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def deduct(self, a: Any, b: Any) -> Any:
        return a - b


class Min(Aggregation):
    name = "min"
    commutative = True
    batch_kind = "min"

    def create(self) -> None:
        return None

    def accumulate(self, acc: Any, value: Any, key: Hashable = None) -> Any:
        return value if acc is None or value < acc else acc

    def bind(self, value: Any, key: Hashable = None) -> Callable[[Any], Any]:
        if not self._own_accumulate(Min):
            return super().bind(value, key)
        return lambda acc: value if acc is None or value < acc else acc

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return b if b < a else a


class Max(Aggregation):
    name = "max"
    commutative = True
    batch_kind = "max"

    def create(self) -> None:
        return None

    def accumulate(self, acc: Any, value: Any, key: Hashable = None) -> Any:
        return value if acc is None or value > acc else acc

    def bind(self, value: Any, key: Hashable = None) -> Callable[[Any], Any]:
        if not self._own_accumulate(Max):
            return super().bind(value, key)
        return lambda acc: value if acc is None or value > acc else acc

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return b if b > a else a


class Mean(Aggregation):
    """Arithmetic mean; accumulator ``(n, sum)``; ``finish`` gives ``None`` for an empty window."""

    name = "mean"
    commutative = True
    batch_kind = "mean"
    finish_is_identity = False

    def create(self) -> tuple[int, Any]:
        return (0, 0)

    def accumulate(self, acc: tuple[int, Any], value: Any, key: Hashable = None) -> tuple[int, Any]:
        return (acc[0] + 1, acc[1] + value)

    def bind(self, value: Any, key: Hashable = None) -> Callable[[Any], Any]:
        if not self._own_accumulate(Mean):
            return super().bind(value, key)
        return lambda acc: (acc[0] + 1, acc[1] + value)

    def combine(self, a: tuple[int, Any], b: tuple[int, Any]) -> tuple[int, Any]:
        return (a[0] + b[0], a[1] + b[1])

    def deduct(self, a: tuple[int, Any], b: tuple[int, Any]) -> tuple[int, Any]:
        return (a[0] - b[0], a[1] - b[1])

    def finish(self, acc: tuple[int, Any]) -> float | None:
        n, s = acc
        return s / n if n else None


class Variance(Aggregation):
    """Population variance. Accumulator ``(n, shift, s, ss)`` with ``s = sum(x - shift)`` and
    ``ss = sum((x - shift)**2)``, ``shift`` = the first value seen: exact for integers, and shifting keeps
    floating-point cancellation small for floats."""

    name = "variance"
    commutative = True
    batch_kind = None  # the accumulator keeps the first value as shift: order-dependent state
    finish_is_identity = False

    def create(self) -> tuple[int, Any, Any, Any]:
        return (0, 0, 0, 0)

    def accumulate(self, acc: tuple, value: Any, key: Hashable = None) -> tuple:
        n, k, s, ss = acc
        if n == 0:
            k = value
        d = value - k
        return (n + 1, k, s + d, ss + d * d)

    def combine(self, a: tuple, b: tuple) -> tuple:
        if a[0] == 0:
            return b
        if b[0] == 0:
            return a
        n1, k1, s1, ss1 = a
        n2, k2, s2, ss2 = b
        d = k2 - k1
        return (n1 + n2, k1, s1 + s2 + n2 * d, ss1 + ss2 + 2 * d * s2 + n2 * d * d)

    def finish(self, acc: tuple) -> float | None:
        n, _k, s, ss = acc
        if not n:
            return None
        var = (ss - s * s / n) / n
        return var if var > 0 else 0.0


class StdDev(Variance):
    """Population standard deviation (square root of :class:`Variance`)."""

    name = "stddev"
    batch_kind = None

    def finish(self, acc: tuple) -> float | None:
        var = super().finish(acc)
        return None if var is None else math.sqrt(var)


_EMPTY = object()


class First(Aggregation):
    """The first value in aggregation order (``None`` for an empty window)."""

    name = "first"
    finish_is_identity = False

    def create(self) -> Any:
        return _EMPTY

    def accumulate(self, acc: Any, value: Any, key: Hashable = None) -> Any:
        return value if acc is _EMPTY else acc

    def finish(self, acc: Any) -> Any:
        return None if acc is _EMPTY else acc


class Last(First):
    """The last value in aggregation order (``None`` for an empty window)."""

    name = "last"

    def accumulate(self, acc: Any, value: Any, key: Hashable = None) -> Any:
        return value


class Collect(Aggregation):
    """The list of values in aggregation order (``finish`` returns a list; the accumulator is a tuple)."""

    name = "collect"
    finish_is_identity = False

    def create(self) -> tuple:
        return ()

    def accumulate(self, acc: tuple, value: Any, key: Hashable = None) -> tuple:
        return acc + (value,)  # noqa: RUF005 - ~40% faster than (*acc, value) (timeit), once per record

    def finish(self, acc: tuple) -> list:
        return list(acc)


class Reduce(Aggregation):
    """Kafka Streams' ``reduce``: the first value as-is, then ``reducer(agg, value)``."""

    name = "reduce"

    def __init__(self, reducer: Callable[[Any, Any], Any]) -> None:
        self._reducer = reducer

    def create(self) -> None:
        return None

    def accumulate(self, acc: Any, value: Any, key: Hashable = None) -> Any:
        return value if acc is None else self._reducer(acc, value)


class InitializerAggregator(Aggregation):
    """A Kafka-Streams-style pair: ``initializer()`` and ``aggregator(key, value, agg) -> agg``."""

    name = "aggregate"

    def __init__(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any]) -> None:
        self._initializer = initializer
        self._aggregator = aggregator

    def create(self) -> Any:
        return self._initializer()

    def accumulate(self, acc: Any, value: Any, key: Hashable = None) -> Any:
        return self._aggregator(key, value, acc)


class Field(Aggregation):
    """Applies ``inner`` to one field of a mapping value (``value[field]``), under the name ``output``."""

    def __init__(self, inner: Aggregation, field: str | None, output: str | None = None) -> None:
        self.inner = inner
        self.field = field
        self.name = output or (inner.name if field is None else f"{inner.name}_{field}")
        self.commutative = inner.commutative
        self.batch_kind = inner.batch_kind
        self.finish_is_identity = inner.finish_is_identity
        if inner.combine is not None:
            self.combine = inner.combine
        if inner.deduct is not None:
            self.deduct = inner.deduct

    def create(self) -> Any:
        return self.inner.create()

    def accumulate(self, acc: Any, value: Any, key: Hashable = None) -> Any:
        if self.field is not None:
            value = value[self.field]
        return self.inner.accumulate(acc, value, key)

    def bind(self, value: Any, key: Hashable = None) -> Callable[[Any], Any]:
        if not self._own_accumulate(Field):
            return super().bind(value, key)
        if self.field is not None:
            try:
                value = value[self.field]
            except Exception:  # raised again by the step's first call, where accumulate raises it
                return super().bind(value, key)
        return self.inner.bind(value, key)

    def finish(self, acc: Any) -> Any:
        return self.inner.finish(acc)

    def __repr__(self) -> str:
        return f"Field({self.inner!r}, {self.field!r}, {self.name!r})"


class Composite(Aggregation):
    """Several aggregations over one window in one pass; accumulator is a tuple, result a dict by name."""

    finish_is_identity = False

    def __init__(self, parts: Sequence[Aggregation]) -> None:
        if not parts:
            raise ValueError("Composite needs at least one aggregation")
        names = [p.name for p in parts]
        if len(set(names)) != len(names):
            raise ValueError(f"aggregation output names must be unique, got {names}")
        self.parts = tuple(parts)
        self.name = ",".join(names)
        self.commutative = all(p.commutative for p in parts)
        self.batch_kind = "composite" if all(p.batch_kind for p in parts) else None

    def create(self) -> tuple:
        return tuple(p.create() for p in self.parts)

    def accumulate(self, acc: tuple, value: Any, key: Hashable = None) -> tuple:
        return tuple(p.accumulate(a, value, key) for p, a in zip(self.parts, acc))

    def bind(self, value: Any, key: Hashable = None) -> Callable[[Any], Any]:
        if not self._own_accumulate(Composite):
            return super().bind(value, key)
        steps = [p.bind(value, key) for p in self.parts]
        if len(steps) == 2:
            s0, s1 = steps
            return lambda acc: (s0(acc[0]), s1(acc[1]))
        if len(steps) == 3:
            s0, s1, s2 = steps
            return lambda acc: (s0(acc[0]), s1(acc[1]), s2(acc[2]))
        if len(steps) == 4:
            s0, s1, s2, s3 = steps
            return lambda acc: (s0(acc[0]), s1(acc[1]), s2(acc[2]), s3(acc[3]))
        return lambda acc: tuple([step(a) for step, a in zip(steps, acc)])

    def finish(self, acc: tuple) -> dict[str, Any]:
        return {p.name: p.finish(a) for p, a in zip(self.parts, acc)}


def _plus_one(acc: int) -> int:
    return acc + 1


BUILTINS: dict[str, type[Aggregation]] = {
    cls.name: cls for cls in (Count, Sum, Min, Max, Mean, Variance, StdDev, First, Last, Collect)
}


@dataclass(frozen=True)
class AggregationSpec:
    """One part of an aggregation spec string, parsed: a built-in ``kind`` (a :data:`BUILTINS` name) and the
    value ``field`` it reads (``None``: the whole value). The one reading of the spec grammar; the connectors
    derive the fields they decode and the Avro types they write from these, not from the string."""

    kind: str
    field: str | None = None

    @property
    def name(self) -> str:
        """The output name the aggregation's result is reported under (``count``, ``sum_amount``)."""
        return self.kind if self.field is None else f"{self.kind}_{self.field}"

    def build(self) -> Aggregation:
        """The aggregation this part names: the built-in, applied to ``field`` when there is one."""
        inner = BUILTINS[self.kind]()
        return inner if self.field is None else Field(inner, self.field)


def parse_aggregation_spec(spec: str) -> AggregationSpec:
    """Parse one part, ``kind`` or ``kind:field`` (e.g. ``count``, ``sum:amount``); the kind is case-insensitive,
    blanks around either are ignored. Raises ``ValueError`` for an unknown kind."""
    kind, _, field = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in BUILTINS:
        raise ValueError(f"unknown aggregation {kind!r} in {spec!r}; known: {', '.join(sorted(BUILTINS))}")
    return AggregationSpec(kind, field.strip() or None)


def parse_aggregation_specs(spec: str) -> tuple[AggregationSpec, ...]:
    """Parse a comma-separated list (``count,sum:amount,max:amount``); empty parts are skipped. Raises
    ``ValueError`` for an unknown kind, an empty list or two parts with the same output name."""
    parts = tuple(parse_aggregation_spec(s) for s in spec.split(",") if s.strip())
    if not parts:
        raise ValueError("no aggregation given")
    names = [p.name for p in parts]
    if len(set(names)) != len(names):
        raise ValueError(f"aggregation output names must be unique, got {names}")
    return parts


def parse_aggregation(spec: str) -> Aggregation:
    """Parse ``kind`` or ``kind:field`` (e.g. ``count``, ``sum:amount``)."""
    return parse_aggregation_spec(spec).build()


def parse_aggregations(spec: str) -> Aggregation:
    """Parse a comma-separated list (``count,sum:amount,max:amount``): one aggregation or a Composite."""
    parts = [p.build() for p in parse_aggregation_specs(spec)]
    return parts[0] if len(parts) == 1 else Composite(parts)
