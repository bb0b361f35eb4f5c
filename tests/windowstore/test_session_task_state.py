"""Session windows as a task processor (windowstore/contract.py): external state exported and restored at any point
between calls - only the keys a restored processor uses are read - gives exactly the output, the drops and the
counters of a processor that was never interrupted, in every emit mode, through merges, tombstones, dropped store
segments and the batch path (windowstore/session_windows.py, "External state")."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.windowstore.external_state import ExternalState
from windowstore import DropReason, TaskProcessor, is_tombstone, parse_aggregations
from windowstore.serde import StateFormatError
from windowstore.session_windows import SessionWindowProcessor, SessionWindows

#: realistic epoch milliseconds, at a 60 s store segment boundary (segments: S7)
BASE = 1_764_000_000_000 - 1_764_000_000_000 % 60_000
AGGS = ["sum", "collect", "count,sum:x,max:x"]


class Storage(ExternalState):
    """:class:`ExternalState` whose loader refuses a key that holds no state (a session processor reads only the
    keys the task meta names)."""

    def load(self, key: Hashable) -> bytes | None:
        assert key in self.blobs, f"loaded {key!r}, which holds no state"
        return super().load(key)

    def restore(self, w: SessionWindows, agg: str, emit: str) -> SessionWindowProcessor:
        self.loads = []
        return SessionWindowProcessor.from_state(
            w, parse_aggregations(agg), emit, self.meta, self.load, collect_drops=True, batch=True
        )


def _value(agg: str, v: int | None) -> Any:
    if agg.startswith("count,"):
        return {"x": 0 if v is None else v}
    if agg == "sum":
        return 0 if v is None else v
    return v  # collect: a null value is aggregated (S11)


def _drops(proc: SessionWindowProcessor) -> list[tuple]:
    return [(d.key, d.value, d.ts, d.reason, d.stream_time) for d in proc.take_drops()]


#: mostly close together (merges, extensions, tombstones), some jumps past store segments, an invalid one
timestamp = st.one_of(*[st.integers(0, 60)] * 4, st.integers(0, 400), st.integers(0, 400_000), st.just(-1 - BASE)).map(
    lambda d: BASE + d
)
record = st.tuples(st.sampled_from(["a", "b", "c", "d", "é", None]), st.one_of(st.integers(0, 9), st.none()), timestamp)
op = st.one_of(
    *[st.tuples(st.just("record"), record)] * 6,
    st.tuples(st.just("batch"), st.lists(record, max_size=8)),
    st.just(("flush",)),
    st.just(("expire",)),
    st.just(("save",)),
    st.just(("restart",)),
)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(st.integers(0, 20), st.just(70_000)),
    st.integers(0, 30),
    st.sampled_from(AGGS),
    st.sampled_from(["every", "update", "close"]),
    st.lists(op, max_size=60),
)
def test_restored_processor_emits_what_an_uninterrupted_one_does(
    gap: int, grace: int, agg: str, emit: str, ops: list
) -> None:
    """``ref`` runs every record through ``process``; ``proc`` takes the batches through ``process_columns``
    (update mode: the batch path where it applies), is saved (meta + dirty keys) at ``save`` and replaced by a
    processor restored from its saved state at ``restart``. Their outputs agree at every flush, their drops at
    every flush and restart, their counters at the end; a restored processor reads each key at most once and
    only keys it had a use for."""
    w = SessionWindows(gap, grace)
    ref = SessionWindowProcessor(w, parse_aggregations(agg), emit, collect_drops=True)
    storage = Storage()
    storage.save(ref)  # an empty meta: proc starts as the service's first batch does
    proc = storage.restore(w, agg, emit)
    out_ref: list = []
    out: list = []
    used: set[Hashable] = set()  # keys proc may have read since its restore
    unflushed: set[Hashable] = set()  # keys of records since the last flush (update mode's cache entries)
    for o in ops:
        if o[0] in ("record", "batch"):
            recs = [(k, _value(agg, v), t) for k, v, t in ([o[1]] if o[0] == "record" else o[1])]
            for k, v, t in recs:
                out_ref += ref.process(k, v, t)
            if o[0] == "record":
                if emit != "update":  # what process_columns forwarded comes out of the next flush: first
                    out += proc.flush()
                out += proc.process(*recs[0])
            else:
                keys, values, ts = [k for k, _v, _t in recs], [v for _k, v, _t in recs], [t for _k, _v, t in recs]
                proc.process_columns(keys, np.array(ts, np.int64), None, values)
            used |= {k for k, _v, _t in recs}
            unflushed |= {k for k, _v, _t in recs}
        elif o[0] == "flush":
            out_ref += ref.flush()
            out += proc.flush()
            unflushed = set()
            assert out == out_ref
            assert _drops(proc) == _drops(ref)
        elif o[0] == "expire":
            ref.expire()
            proc.expire()
        else:
            storage.save(proc)
            if o[0] == "restart":
                assert _drops(proc) == _drops(ref)
                proc = storage.restore(w, agg, emit)
                used = set(unflushed)
        assert ref.windows_held == len(ref) and proc.windows_held == len(proc)
        assert len(storage.loads) == len(set(storage.loads)), "a key was read twice"
        # close mode reads a key whose session a record closes: ref forwards it at once, proc (batch) at its flush
        assert set(storage.loads) <= used | {u.key for u in out_ref}, "read a key it had no use for"
    out_ref += ref.flush()
    out += proc.flush()
    assert out == out_ref
    assert _drops(proc) == _drops(ref)
    assert proc.stats.as_dict() == ref.stats.as_dict()


def test_it_is_a_task_processor() -> None:
    proc: TaskProcessor = SessionWindowProcessor(SessionWindows(5), parse_aggregations("count"), "update")
    assert proc.batch is False and proc.windows_held == 0 and proc.expired_windows == 0


def test_tombstone_of_a_session_flushed_before_the_restart() -> None:  # S6, S7 across a restart
    w = SessionWindows(5, 100)
    storage = Storage()
    first = SessionWindowProcessor(w, parse_aggregations("collect"), "update")
    for k, v, t in [("A", "a", BASE + 10), ("A", "b", BASE + 20), ("B", "x", BASE + 11)]:
        first.process(k, v, t)
    assert [(u.start, u.end) for u in first.flush() if u.key == "A"] == [(BASE + 10, BASE + 10), (BASE + 20, BASE + 20)]
    storage.save(first)
    second = storage.restore(w, "collect", "update")
    assert second.process("A", "c", BASE + 15) == []
    flushed = second.flush()
    assert [(u.start, u.end, u.value) for u in flushed] == [
        (BASE + 10, BASE + 10, None),
        (BASE + 20, BASE + 20, None),
        (BASE + 10, BASE + 20, ["a", "b", "c"]),
    ]
    assert [is_tombstone(u) for u in flushed] == [True, True, False]
    assert storage.loads == ["A"]  # B was never read


def test_dead_key_is_deleted_without_being_read() -> None:
    w = SessionWindows(5, 10)
    storage = Storage()
    first = SessionWindowProcessor(w, parse_aggregations("count"), "update")
    first.process("old", 1, BASE)
    first.flush()
    storage.save(first)
    second = storage.restore(w, "count", "update")
    second.process("new", 1, BASE + 1_000)  # close = BASE + 985: "old" (end BASE) can never be reached again
    second.flush()
    assert second.expire() == 0  # nothing of "old" was in memory
    storage.save(second)
    assert sorted(storage.blobs) == ["new"] and storage.loads == []


def test_close_mode_emits_a_session_of_a_key_not_loaded() -> None:  # S10: the emission crosses keys
    w = SessionWindows(5, 0)
    storage = Storage()
    first = SessionWindowProcessor(w, parse_aggregations("count"), "close")
    first.process("A", 1, BASE + 10)
    first.process("A", 1, BASE + 12)
    storage.save(first)
    second = storage.restore(w, "count", "close")
    out = second.process("B", 1, BASE + 30)  # close = BASE + 25 > 12
    assert [(u.key, u.start, u.end, u.value) for u in out] == [("A", BASE + 10, BASE + 12, 2)]
    assert storage.loads == ["A"]


def test_late_drop_carries_the_stream_time() -> None:  # S5, S9
    proc = SessionWindowProcessor(SessionWindows(5, 0), parse_aggregations("count"), "every", collect_drops=True)
    proc.process("A", 1, BASE + 100)
    proc.process(None, 2, BASE + 200)
    proc.process("A", 3, BASE + 10)
    assert [(d.value, d.reason, d.stream_time) for d in proc.take_drops()] == [
        (2, DropReason.NULL_KEY, BASE + 100),
        (3, DropReason.LATE, BASE + 100),
    ]
    assert proc.take_drops() == []


def test_meta_of_another_definition_is_refused() -> None:
    proc = SessionWindowProcessor(SessionWindows(5, 0), parse_aggregations("count"), "update")
    proc.process("A", 1, BASE)
    meta = proc.export_meta()
    for windows, emit in [(SessionWindows(6, 0), "update"), (SessionWindows(5, 0), "every")]:
        with pytest.raises(StateFormatError, match="use a new checkpoint"):
            SessionWindowProcessor.from_state(windows, parse_aggregations("count"), emit, meta, lambda k: None)
