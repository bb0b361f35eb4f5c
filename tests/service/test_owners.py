"""Task owners (service.worker.owners): a batch Spark gives one Python worker runs in the worker that owns the task.

Two real processes play the two Python workers: this test process and a spawned child. Both run the same
batches as a single local processor would, and the output rows must be identical."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import socket

import pytest

from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskRunner
from service.task.state import DictTaskState
from service.worker import owners
from service.worker.cache import WORKER
from service.worker.run import process_task_batch
from tests.service.events import payment_events
from tests.service.harness import json_task_config

pytestmark = pytest.mark.skipif(not owners.SUPPORTED, reason="abstract Unix sockets are Linux-only")

AGGS = "count,sum:amount,max:amount"
TOPIC = "in"


def config(key: str = "k" * 32, sink: str = "spark") -> TaskConfig:
    return json_task_config(AGGS, owners=key, sink=sink, state_snapshot_every=3)


def run_local(cfg, state, batch):
    """What worker.run.run_batch does, minus the producer (sink=spark: the rows travel back)."""
    return process_task_batch(TaskRunner(cfg), state, batch)


def failing(cfg, state, batch):
    state.get_task()
    raise ValueError("the owner's batch broke")


def slices(n_batches: int = 6, per: int = 150):
    events = payment_events(n_batches * per * 2, partitions=1, bad_fraction=0.02)[: n_batches * per]
    out = []
    for b in range(n_batches):
        chunk = events[b * per : (b + 1) * per]
        out.append(
            (
                list(range(b * per, b * per + len(chunk))),
                [e.key for e in chunk],
                [e.value for e in chunk],
                [e.timestamp for e in chunk],
            )
        )
    return out


def task(partition, records) -> TaskBatch:
    """One of :func:`slices` as the batch of ``partition``, emit time fixed."""
    return TaskBatch(TOPIC, partition, *records, emit_time_ms=5)


def rows(out):
    return [(kind, topic, key, value, repr(h)) for kind, topic, key, value, h in out.rows()]


def reference(batches):
    """The rows of every batch run by one worker, no owners (its own config: its own cache entry)."""
    cfg = config(key="")
    state = DictTaskState()
    return [rows(process_task_batch(TaskRunner(cfg), state, task(0, b))) for b in batches]


def _child(conn, cfg, jobs):
    """The other Python worker: runs the given batches through owners.run against the given states."""
    results = []
    for state_blob, partition, b in jobs:
        state = pickle.loads(state_blob)
        try:
            out, forwarded = owners.run(run_local, cfg, state, task(partition, b))
            results.append(("ok", rows(out), forwarded, out.stats["state_cache_hit"], pickle.dumps(state)))
        except Exception as e:  # reported to the test
            results.append(("error", str(e)))
    conn.send(results)
    conn.close()


def in_child(cfg, jobs):
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child, args=(child, cfg, jobs))
    p.start()
    try:
        assert parent.poll(120), "the child worker did not answer"
        return parent.recv()
    finally:
        p.join(30)


@pytest.fixture(autouse=True)
def clean_worker():
    saved = dict(WORKER.entries)
    yield
    owners.release_all()
    WORKER.clear()
    WORKER.entries.update(saved)


def test_a_forwarded_batch_runs_on_the_owners_cached_processor_with_identical_output():
    batches = slices()
    expected = reference(batches)
    cfg = config()
    state = DictTaskState()
    for i in (0, 1):  # this worker runs the first batches: it owns the task
        out, forwarded = owners.run(run_local, cfg, state, task(0, batches[i]))
        assert not forwarded and rows(out) == expected[i]
    assert owners.owned(cfg) == 1
    # Spark hands the next batches to the other worker: they run here (a cache hit), writing the child's state
    results = in_child(cfg, [(pickle.dumps(state), 0, batches[2])])
    kind, got, forwarded, hit, state_blob = results[0]
    assert kind == "ok" and forwarded and hit == 1
    assert got == expected[2]
    state = pickle.loads(state_blob)  # the child's state handle got the owner's writes (a snapshot batch: 3rd)
    for i in (3, 4):
        out, forwarded = owners.run(run_local, cfg, state, task(0, batches[i]))
        assert not forwarded and out.stats["state_cache_hit"] == 1 and rows(out) == expected[i]
    results = in_child(cfg, [(pickle.dumps(state), 0, batches[5])])
    assert results[0][0] == "ok" and results[0][1] == expected[5] and results[0][2]


def test_without_a_live_owner_the_worker_runs_the_batch_and_becomes_the_owner():
    batches = slices(3)
    expected = reference(batches)
    cfg = config()
    state = DictTaskState()
    owners.run(run_local, cfg, state, task(0, batches[0]))
    owners.release_all()  # this worker's process "is gone": its socket is closed, its cache dropped
    results = in_child(cfg, [(pickle.dumps(state), 0, batches[1])])
    kind, got, forwarded, hit, _ = results[0]
    assert kind == "ok" and not forwarded and hit == 0  # restored from the store, in the child
    assert got == expected[1]


def test_an_error_in_the_owner_fails_the_forwarding_workers_batch_with_its_message():
    batches = slices(2)
    cfg = config()
    state = DictTaskState()
    owners.run(run_local, cfg, state, task(0, batches[0]))
    # the owner's run function is the one it claimed with; make it fail for the next batch
    addr = owners.address(cfg, TOPIC, 0)
    listener, c, t, p, _fn = owners._owned[addr]
    owners._owned[addr] = (listener, c, t, p, failing)
    results = in_child(cfg, [(pickle.dumps(state), 0, batches[1])])
    assert results[0][0] == "error"
    assert "failed in the Python worker that owns it" in results[0][1] and "the owner's batch broke" in results[0][1]


def test_a_busy_owner_of_many_tasks_gives_one_up(monkeypatch):
    batches = slices(2)
    cfg = config()
    states = {}
    for part in (0, 1, 2):  # this worker owns three tasks, the child none
        states[part] = DictTaskState()
        owners.run(run_local, cfg, states[part], task(part, batches[0]))
    assert owners.owned(cfg) == 3
    monkeypatch.setattr(owners, "worker_busy", lambda: True)  # running another batch right now
    results = in_child(cfg, [(pickle.dumps(states[1]), 1, batches[1])])
    kind, _got, forwarded, hit, _ = results[0]
    assert kind == "ok" and not forwarded and hit == 0  # the child ran it from the store
    assert owners.owned(cfg) == 2
    assert (cfg, TOPIC, 1) not in WORKER


def test_a_stranger_cannot_talk_to_an_owner():
    cfg = config()
    owners.run(run_local, cfg, DictTaskState(), task(0, slices(1)[0]))
    other = config(key="x" * 32)
    # same socket name, wrong key: the connection is refused before anything is unpickled
    addr = owners.address(cfg, TOPIC, 0)
    assert owners._forward(addr, other, DictTaskState(), task(0, slices(1)[0])) is None
    s = socket.socket(socket.AF_UNIX)
    s.connect(addr)
    s.sendall(b"\x00\x00\x00\x05hello")  # garbage instead of the handshake: the owner keeps serving
    s.close()
    results = in_child(cfg, [(pickle.dumps(DictTaskState()), 0, slices(2)[1])])
    assert results[0][0] == "ok" and results[0][2]
