"""Kafka Streams ``SlidingWindows`` (KIP-450) semantics in plain Python.

No Spark, Kafka or Prometheus here: a window store, window definitions, the sliding-window processor (one per
task) and aggregations. Integer-millisecond timestamps throughout. See ``SlidingWindowProcessor``.
"""

from .aggregations import (
    Aggregation,
    Collect,
    Composite,
    Count,
    Field,
    First,
    InitializerAggregator,
    Last,
    Max,
    Mean,
    Min,
    Reduce,
    StdDev,
    Sum,
    Variance,
    parse_aggregation,
    parse_aggregations,
)
from .processor import SlidingWindowProcessor
from .store import Visibility, WindowStore
from .updates import DroppedRecord, DropReason, EmitMode, ProcessorStats, WindowUpdate
from .windows import ConfigError, SlidingWindows

__all__ = [
    "Aggregation",
    "Collect",
    "Composite",
    "Count",
    "Field",
    "First",
    "InitializerAggregator",
    "Last",
    "Max",
    "Mean",
    "Min",
    "Reduce",
    "StdDev",
    "Sum",
    "Variance",
    "parse_aggregation",
    "parse_aggregations",
    "SlidingWindowProcessor",
    "Visibility",
    "WindowStore",
    "DropReason",
    "DroppedRecord",
    "EmitMode",
    "ProcessorStats",
    "WindowUpdate",
    "ConfigError",
    "SlidingWindows",
]
