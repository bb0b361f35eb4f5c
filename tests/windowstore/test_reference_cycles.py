"""A processor is freed by reference counting the moment it is dropped: it makes no reference cycle.

It holds a task's windows, and ``service.spark.python_daemon`` freezes what a Python worker holds between two tasks,
so the cyclic collector sees a cycle among those objects only every 100th task. Bound methods or closures over
the processor kept on the processor (or its store) were such cycles.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from windowstore import SlidingWindowProcessor, SlidingWindows, parse_aggregations
from windowstore.lazy import process_fast
from windowstore.record import process_record

RECORDS = [("a", 3, 100), ("b", 1, 105), ("a", 2, 130), ("a", 5, 90), ("b", 4, 300), ("a", 1, 20), ("c", 2, 500)]


def dropped(build) -> weakref.ref:  # type: ignore[no-untyped-def,type-arg]
    """Build and use a processor with the cyclic collector off; a weak reference to it once dropped."""
    was = gc.isenabled()
    gc.disable()
    try:
        proc = build()
        for key, value, ts in RECORDS:
            proc.process(key, value, ts)
        proc.process_batch([(k, v, ts + 600) for k, v, ts in RECORDS])
        proc.flush()
        ref = weakref.ref(proc)
        state_ref = weakref.ref(proc.state)
        state = proc.export_keys(proc.dirty_keys()), proc.export_meta()
        del proc
        assert state_ref() is None  # the engine state (and its store) too
        return ref, state
    finally:
        if was:
            gc.enable()


@pytest.mark.parametrize("emit", ["update", "every", "close"])
@pytest.mark.parametrize(
    ("aggs", "batch"),
    [("count", False), ("sum", False), ("count,sum,max", True), ("count,sum,max", False), ("sum", True)],
)
def test_a_dropped_processor_is_freed_at_once(emit, aggs, batch):
    windows = SlidingWindows(50, 20)
    ref, (blobs, meta) = dropped(lambda: SlidingWindowProcessor(windows, parse_aggregations(aggs), emit, batch=batch))
    assert ref() is None

    # and one over external state (the service's: a task's meta and a blob per key, loaded on first use)
    ref, _ = dropped(
        lambda: SlidingWindowProcessor.from_state(windows, parse_aggregations(aggs), emit, meta, blobs.get, batch=batch)
    )
    assert ref() is None


def test_the_lazy_run_is_still_taken():
    """``process`` is chosen when read (not stored on the processor): the lazy run where it applies."""
    lazy = SlidingWindowProcessor(SlidingWindows(50, 20), parse_aggregations("count"), "update")
    assert lazy.process.__func__ is process_fast and lazy.process.__self__ is lazy.state
    lazy.state.lazy = False
    assert lazy.process.__func__ is process_record
    other = SlidingWindowProcessor(SlidingWindows(50, 20), parse_aggregations("count"), "every")
    assert other.process.__func__ is process_record
    assert SlidingWindowProcessor.process is process_record
