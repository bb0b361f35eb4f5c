"""The service's task path (service/task/batch.py: runner, log entries, snapshots into key buckets, the restore from
snapshot + log) with a session-window processor, no Spark: the changelog, late records and counters of every batch
equal a session processor fed the same records directly, across a restore from the task state.

``process_task_batch`` makes the task's processor from the TaskConfig's window definition
(``windowstore.new_task_processor``); before the fifth batch the worker cache forgets it, so that batch restores it
from the task state (the snapshot's meta, key buckets on demand, the log replayed)."""

from __future__ import annotations

import json

from connectors.output import ChangelogEncoder, ChangelogSpec
from connectors.serde import InputSpec, aggregation_fields
from service.task.batch import CachedTask, TaskKey, process_task_batch
from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskRunner
from service.task.state import DictTaskState, Token
from windowstore import SessionWindowProcessor, SessionWindows, WindowDefinition, is_tombstone, parse_aggregations

AGGS = "count,sum:amount,max:amount"
GAP, GRACE = 50, 20
BASE = 1_764_000_000_000
EMIT_TIME = BASE + 10_000_000


class TaskCache:
    """One worker's processors (``service.task.batch.TaskCache``), in a dict."""

    def __init__(self) -> None:
        self.entries: dict[TaskKey, CachedTask] = {}

    def take(self, key: TaskKey) -> CachedTask | None:
        return self.entries.pop(key, None)

    def add(self, key: TaskKey, entry: CachedTask) -> None:
        self.entries[key] = entry


BATCHES = [
    [("a", 1, 0), ("b", 2, 10), ("a", 3, 40), ("c", 4, 45)],
    [("a", 5, 120), ("b", 6, 30), ("a", 7, 80)],  # b@30 late (close 50); a@80 bridges [0,40] (tombstone), [120,120]
    [("a", 2, 150), ("c", 8, 200), ("b", 9, 20)],  # [0,120] extended (tombstone); b@20 late (close 130)
    [("b", 1, 310), ("d", 2, 311), ("b", 3, 290)],
    [("b", 5, 350), ("a", 4, 400), ("d", 6, 5)],  # restored before this one; b read from its bucket; d@5 late
    [("a", 7, 440), ("e", 8, 461)],
]


def test_session_processor_through_the_task_path() -> None:
    spec = ChangelogSpec("windowed", "json", AGGS, window="session")
    fields = aggregation_fields(AGGS)
    cfg = TaskConfig(
        WindowDefinition("session", gap_ms=GAP, grace_ms=GRACE), AGGS, "update", InputSpec(fields=fields), spec,
        "out", "late", "dlq", state_buckets=4, state_snapshot_every=4,
    )  # fmt: skip
    runner = TaskRunner(cfg)
    state = DictTaskState()
    cache = TaskCache()
    task: TaskKey = (cfg, "in", 0)

    ref = SessionWindowProcessor(SessionWindows(GAP, GRACE), parse_aggregations(AGGS), "update", collect_drops=True)
    encoder = ChangelogEncoder(spec)
    offset = 0
    tombstones = late = 0
    for n, batch in enumerate(BATCHES):
        if n == 4:  # a cache miss: the snapshot's meta, its key buckets on demand, the log replayed
            cur = Token.parse(state.get_task()[1])  # type: ignore[index]
            assert cur.entries > 0 and any(b >= 0 for b in state.buckets), "a snapshot and log entries after it"
            cache.take(task)
        keys = [k.encode() for k, _v, _t in batch]
        values = [json.dumps({"amount": v}).encode() for _k, v, _t in batch]
        timestamps = [BASE + t for _k, _v, t in batch]
        offsets = list(range(offset, offset + len(batch)))
        offset += len(batch)
        out = process_task_batch(
            runner, state, TaskBatch("in", 0, offsets, keys, values, timestamps, EMIT_TIME), cache=cache
        )
        proc = cache.entries[task].proc
        assert isinstance(proc, SessionWindowProcessor)  # the factory made a session processor

        for k, v, t in batch:
            ref.process(k, {"amount": v}, BASE + t)
        expected = ref.flush()
        drops = ref.take_drops()
        ref.expire()
        exp_keys, exp_values = encoder.encode(expected, EMIT_TIME)
        assert (list(out.changelog_keys), list(out.changelog_values)) == (list(exp_keys), list(exp_values))
        late_rows = [r for r in out.rows() if r[0] == "late"]
        assert [(r[2], dict(r[4] or [])["stream_time"]) for r in late_rows] == [
            (str(d.key).encode(), str(d.stream_time).encode()) for d in drops
        ]
        assert out.stats["late"] == len(drops) and out.stats["aggregated"] == len(batch) - len(drops)
        tombstones += sum(map(is_tombstone, expected))
        late += len(drops)
    assert tombstones == 4 and late == 3
    assert proc.stats.as_dict() == ref.stats.as_dict()
