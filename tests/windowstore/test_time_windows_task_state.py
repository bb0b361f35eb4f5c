"""TimeWindowProcessor meets the service's task-processor contract (windowstore/contract.py; issue 31): per-key
blobs loaded on first touch, dirty keys, the task meta, dropped records. The property: a processor whose state is
exported (a snapshot, the processor going on) or exported and restored into a new processor, at random points
between batches, emits exactly what an uninterrupted one does - every emit mode, record path and batch path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.windowstore.external_state import ExternalState
from windowstore import (
    ConfigError,
    DropReason,
    TaskProcessor,
    TimeWindowProcessor,
    TimeWindows,
    WindowDefinition,
    new_task_processor,
    parse_aggregations,
)

AGGS = ["count", "count,sum:x,min:x,max:x,mean:x", "sum:x", "collect:x", "max:x,first:x,last:x"]

record = st.tuples(
    st.sampled_from(["a", "b", "é", "c", None, "a"]),
    st.integers(-5, 5),
    st.one_of(st.integers(0, 120), st.integers(0, 120), st.sampled_from([-1, 400])),
)
batches = st.lists(st.lists(record, max_size=12), min_size=1, max_size=6)
#: what happens after each batch: nothing, a snapshot (export, the processor goes on) or a restore (export, then a
#: new processor from the exported state)
actions = st.lists(st.sampled_from(["none", "snapshot", "restore"]), min_size=6, max_size=6)


def _rows(cols: dict[str, Any]) -> list[tuple]:
    names = sorted(cols["values"])
    return list(
        zip(
            cols["key"],
            cols["start"].tolist(),
            cols["end"].tolist(),
            cols["ts"].tolist(),
            cols["count"].tolist(),
            *(cols["values"][n].tolist() for n in names),
            strict=True,
        )
    )


def _run(definition: WindowDefinition, agg: str, emit: str, batch: bool, recs: list, flushes: list, acts: list) -> list:
    """The batches through one task processor as the service drives it; what it emitted and dropped, in order."""
    backend = ExternalState()

    def new() -> TaskProcessor:
        return new_task_processor(
            definition, parse_aggregations(agg), emit, backend.meta, backend.load, collect_drops=True, batch=batch
        )

    proc = new()
    out: list = []
    for i, b in enumerate(recs):
        keys = [k for k, _v, _t in b]
        values = [{"x": v} for _k, v, _t in b]
        ts = np.array([t for _k, _v, t in b], dtype=np.int64)
        flush = flushes[i % len(flushes)]
        if batch:
            assert proc.batch
            proc.process_columns(keys, ts, None, values)
            if flush:
                out += _rows(proc.flush_columns())
        else:
            for k, v, t in zip(keys, values, ts.tolist(), strict=True):
                out += proc.process(k, v, t) or []
            if flush:
                out += proc.flush()
        out += [(d.key, d.value, d.ts, d.reason, d.stream_time) for d in proc.take_drops()]
        if flush:
            out.append(("expired", proc.expire()))
        out.append(("stream time", proc.observed_stream_time, "held", proc.windows_held))
        if acts[i] != "none":
            backend.save(proc)
            if acts[i] == "restore":
                proc = new()
    out += _rows(proc.flush_columns()) if batch else proc.flush()
    return out


@settings(max_examples=250, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 40),
    st.integers(0, 30),
    st.sampled_from(AGGS),
    st.sampled_from(["every", "update", "close"]),
    st.booleans(),
    batches,
    st.lists(st.booleans(), min_size=1, max_size=6),
    actions,
)
def test_property_export_and_restore_between_batches_changes_nothing(
    size: int, advance: int, grace: int, agg: str, emit: str, batch: bool, recs: list, flushes: list, acts: list
) -> None:
    advance = min(advance, size)
    definition = WindowDefinition("hopping", size, advance, grace_ms=grace)
    whole = _run(definition, agg, emit, batch, recs, flushes, ["none"] * len(acts))
    cut = _run(definition, agg, emit, batch, recs, flushes, acts)
    assert cut == whole


def test_tumbling_comes_from_the_factory_as_a_time_window_processor() -> None:
    proc = new_task_processor(WindowDefinition("tumbling", 10), parse_aggregations("count"), "update", None, {}.get)
    assert isinstance(proc, TimeWindowProcessor)
    assert proc.process("a", 1, 25) == [] and [u[:3] for u in proc.flush()] == [("a", 20, 30)]


def test_a_key_is_loaded_on_first_touch_only_and_a_key_left_empty_is_deleted() -> None:
    definition = WindowDefinition("tumbling", 10)
    backend = ExternalState()
    first = new_task_processor(definition, parse_aggregations("count"), "update", None, backend.load)
    for k, t in (("a", 1), ("b", 2), ("c", 3)):
        first.process(k, None, t)
    first.flush()
    backend.save(first)
    assert sorted(backend.blobs) == ["a", "b", "c"]
    second = new_task_processor(definition, parse_aggregations("count"), "update", backend.meta, backend.load)
    assert second.windows_held == 3 and backend.loads == []
    second.process("a", None, 5)
    assert backend.loads == ["a"]
    assert [(u.key, u.value) for u in second.flush()] == [("a", 2)]
    second.process("b", None, 10)  # closes [0, 10) of every key (grace 0): a and c hold nothing any more
    second.flush()
    assert second.expired_windows == 3 and backend.loads == ["a", "b"]  # c was forgotten without being read
    assert second.export_keys(second.dirty_keys()).keys() == {"a", "b", "c"}
    backend.save(second)
    assert sorted(backend.blobs) == ["b"]


def test_dropped_records_are_reported_like_the_sliding_ones() -> None:
    agg = parse_aggregations("count")
    for batch in (False, True):
        proc = TimeWindowProcessor(TimeWindows(10, 5, grace_ms=2), agg, "update", collect_drops=True, batch=batch)
        keys, values, ts = ["a", None, "b", "a", "a"], [object() for _i in range(5)], [40, 41, 20, 33, 36]
        if batch:
            proc.process_columns(keys, np.array(ts), None, values)
        else:
            for k, v, t in zip(keys, values, ts, strict=True):
                proc.process(k, v, t)
        drops = proc.take_drops()
        # null key; b@20 (windows [15,25), [20,30) both closed at 40 - 2); a@33 is partially late ([25,35) closed,
        # [30,40) open): accepted, one skipped window; a@36 accepted
        assert [(d.key, d.value, d.ts, d.reason, d.stream_time) for d in drops] == [
            (None, values[1], 41, DropReason.NULL_KEY, 40),
            ("b", values[2], 20, DropReason.LATE, 40),  # a null key does not move stream time (T3)
        ]
        assert proc.take_drops() == []
        assert proc.stats.skipped_windows == 3 and proc.stats.dropped_late == 1


def test_state_of_another_size_is_refused() -> None:
    first = TimeWindowProcessor(TimeWindows(10), parse_aggregations("count"), "update")
    with pytest.raises(ConfigError, match="size 10 ms and advance 10 ms, not size 10 ms and advance 5 ms"):
        TimeWindowProcessor.from_state(
            TimeWindows(10, 5), parse_aggregations("count"), "update", first.export_meta(), {}.get
        )
