"""Kafka Streams' window semantics in plain Python: ``SlidingWindows`` (KIP-450), ``TimeWindows``, ``SessionWindows``.

No Spark, Kafka or Prometheus here: a window store, window definitions, one processor per task and window type,
and aggregations. Integer-millisecond timestamps throughout. See ``SlidingWindowProcessor`` (docs/rules.md),
``TimeWindowProcessor`` and ``SessionWindowProcessor`` (docs/rules-window-types.md).
"""

from .aggregations import (
    Aggregation,
    AggregationSpec,
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
    parse_aggregation_specs,
    parse_aggregations,
)
from .contract import TaskProcessor, WindowCounters
from .processor import SlidingWindowProcessor
from .session_windows import SessionWindowProcessor, SessionWindows, is_tombstone
from .store import Visibility, WindowStore
from .task_processors import WINDOW_TYPES, WindowDefinition, describe_identity, new_task_processor
from .time_windows import TimeWindowProcessor, TimeWindows
from .updates import DroppedRecord, DropReason, EmitMode, ProcessorStats, WindowUpdate
from .windows import ConfigError, SlidingWindows

__all__ = [
    "Aggregation",
    "AggregationSpec",
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
    "parse_aggregation_specs",
    "SlidingWindowProcessor",
    "TaskProcessor",
    "WindowCounters",
    "SessionWindowProcessor",
    "SessionWindows",
    "is_tombstone",
    "TimeWindowProcessor",
    "TimeWindows",
    "WINDOW_TYPES",
    "WindowDefinition",
    "describe_identity",
    "new_task_processor",
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
