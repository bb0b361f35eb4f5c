"""The first micro-batch's log line names the workers' share (issue 34): after a restart it tells reading the
state back from processing what piled up meanwhile."""

from __future__ import annotations

import json

from service.driver import worker_times
from service.task.batch import process_task_batch
from service.task.runner import TaskBatch, TaskRunner
from service.task.state import DictTaskState
from service.task.stats import STATS_FIELDS, TASK_BATCHES
from tests.service.harness import json_task_config

AGGS = "count,sum:amount"


def _batch(first: int, n: int) -> TaskBatch:
    offsets = list(range(first, first + n))
    keys = [f"k{i % 5}".encode() for i in offsets]
    values = [json.dumps({"amount": i}).encode() for i in offsets]
    return TaskBatch("in", 0, offsets, keys, values, [1_000 + 10 * i for i in offsets], 5)


def test_a_restart_without_the_workers_cache_shows_its_state_read_and_log_replay():
    cfg = json_task_config(AGGS, state_snapshot_every=4)
    state = DictTaskState()
    for b in range(3):  # a snapshot, then log entries
        process_task_batch(TaskRunner(cfg), state, _batch(100 * b, 100))
    # no worker cache is passed: like a new worker after a restart, it reads the snapshot and replays the log
    out = process_task_batch(TaskRunner(cfg), state, _batch(300, 100))
    observed = {**{name: int(out.stats[name]) for name in STATS_FIELDS}, TASK_BATCHES: 1}
    line = worker_times(observed)
    assert observed["state_log_replayed"] >= 1 and observed["state_read_ns"] > 0
    # reading is part of processing (a bucket read while the log is replayed was once counted twice)
    assert observed["state_read_ns"] + observed["state_write_ns"] <= observed["process_ns"]
    assert line.startswith("workers (sum of 1 tasks): process ")
    assert f"{observed['state_log_replayed']} log entries replayed" in line
    assert "100 records" in line and "0 cached tasks" in line
