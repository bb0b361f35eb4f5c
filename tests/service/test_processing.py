"""The task logic without Spark: decode -> windows -> rows, state persisted between micro-batches."""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import pickle
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from itertools import pairwise

import pytest

import service.worker.run as worker_run
from connectors.output import ChangelogSpec
from connectors.serde import Decoded, InputSpec, aggregation_fields
from service.task import batch as task_batch
from service.task import state as task_state
from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskOutput, TaskRunner
from service.task.state import DictTaskState, TaskState, decode_bucket, encode_bucket
from service.worker.cache import WorkerCache
from tests.service.events import changelog_final, payment_events, replay
from windowstore import WindowDefinition

AGGS = "count,sum:amount,max:amount"


def config(
    emit: str,
    td: int = 1000,
    grace: int = 300,
    batch: bool = True,
    buckets: int = 256,
    cache: bool = True,
    snapshot_every: int = TaskConfig.state_snapshot_every,
    aggs: str = AGGS,
    window: WindowDefinition | None = None,
    **spec_kw,
) -> TaskConfig:
    """A task config of sliding windows (``td``), or of ``window`` (with ``grace``)."""
    return TaskConfig(
        dataclasses.replace(window or WindowDefinition("sliding", td), grace_ms=grace),
        aggs,
        emit,
        InputSpec(fields=aggregation_fields(aggs), **spec_kw),
        ChangelogSpec("json", "json", aggs),
        "out",
        "late",
        "dlq",
        batch=batch,
        state_buckets=buckets,
        state_cache=cache,
        state_snapshot_every=snapshot_every,
    )


class BatchView(TaskState):
    """A micro-batch's handle on the task state: like Spark's state handles it is dead after the batch."""

    def __init__(self, state: DictTaskState) -> None:
        self.state = state
        self.open = True

    def _s(self) -> DictTaskState:
        assert self.open, "a state handle of an earlier micro-batch was used"
        return self.state

    def get_task(self):
        return self._s().get_task()

    def set_task(self, meta, token, buckets):
        self._s().set_task(meta, token, buckets)

    def get_bucket(self, bucket):
        return self._s().get_bucket(bucket)

    def put_bucket(self, bucket, data):
        self._s().put_bucket(bucket, data)

    def delete_bucket(self, bucket):
        self._s().delete_bucket(bucket)


#: the worker cache the test's batches run on now (:func:`run_slice` switches it, as Spark hands tasks to workers)
_worker = [WorkerCache()]


def process_task_batch(runner, state, records, **kw):
    """A task batch in the Python worker the test's batches run on now (``_worker``)."""
    return worker_run.process_task_batch(runner, state, records, cache=_worker[0], **kw)


def batch(runner, state, records, process=process_task_batch, **kw):
    view = BatchView(state)
    try:
        return process(runner, view, records, **kw)
    finally:
        view.open = False


def task_records(partition, chunk, first_offset) -> TaskBatch:
    """The events ``chunk`` as the micro-batch of partition ``partition`` (offsets from ``first_offset``), emit
    time 5."""
    return TaskBatch(
        "in",
        partition,
        list(range(first_offset, first_offset + len(chunk))),
        [e.key for e in chunk],
        [e.value for e in chunk],
        [e.timestamp for e in chunk],
        emit_time_ms=5,
    )


def run_slice(runner, state, partition, events, lo, hi, cache=None, process=None):
    """One micro-batch of ``events[lo:hi]`` (offsets ``lo``...) on ``partition``, emit time 5; ``cache``: the
    worker cache it runs on (sets ``_worker``; a new one for each test)."""
    if cache is not None:
        _worker[0] = cache
    records = task_records(partition, events[lo:hi], lo)
    if process is not None:
        return process(runner, state, records)
    return batch(runner, state, records)


@pytest.fixture(autouse=True)
def _new_worker_cache():
    """Tests switch Python workers by setting ``_worker`` (:func:`run_slice`); each test starts on a new one."""
    _worker[0] = WorkerCache()


def run_in_batches(cfg: TaskConfig, events, seed: int = 1, fail_every: int = 0, states=None, workers: int = 1):
    """Feed each partition in random-sized micro-batches, state only in DictTaskState (and the worker cache)
    between them. ``fail_every``: every n-th batch is run, thrown away (state rolled back, as Spark does for
    an uncommitted batch) and run again. ``workers``: each batch goes to one of that many Python workers (worker
    caches), picked at random as Spark does."""
    if workers > 1:
        caches = [WorkerCache() for _ in range(workers)]
        pick = random.Random(seed + 1000)
        saved_cache = _worker[0]
        try:

            def take_turns(*args, **kw):
                _worker[0] = caches[pick.randrange(workers)]
                return process_task_batch(*args, **kw)

            return _run_in_batches(cfg, events, seed, fail_every, states, take_turns)  # type: ignore[arg-type]
        finally:
            _worker[0] = saved_cache
    return _run_in_batches(cfg, events, seed, fail_every, states, process_task_batch)


def _run_in_batches(cfg: TaskConfig, events, seed, fail_every, states, process):
    runner = TaskRunner(cfg)
    rnd = random.Random(seed)
    by_part = defaultdict(list)
    for ev in events:
        by_part[ev.partition].append(ev)
    rows = defaultdict(list)
    totals = Counter()
    for p, evs in sorted(by_part.items()):
        state = DictTaskState()
        if states is not None:
            states[p] = state
        i = 0
        n = 0
        while i < len(evs):
            j = min(len(evs), i + rnd.randint(1, 300))
            records = task_records(p, evs[i:j], i)
            n += 1
            if fail_every and n % fail_every == 0:
                saved = copy.deepcopy((state.task, state.buckets))
                first = batch(runner, state, records, process=process)
                state.task, state.buckets = saved  # the batch never committed
                out = batch(runner, state, records, process=process)
                assert out.rows() == first.rows()
                if process is process_task_batch:  # one worker: its entry was taken by the failed attempt
                    assert out.stats["state_cache_hit"] == 0  # the stale cache entry was not used
            else:
                out = batch(runner, state, records, process=process)
            for kind, _topic, key, value, headers in out.rows():
                rows[kind].append((p, key, value, dict(headers or [])))
            totals["batches"] += 1
            for name, v in out.stats.values.items():
                if name not in ("stream_time", "max_offset", "lateness_ms_max", "process_ns"):
                    totals[name] += v
            i = j
    return rows, totals


def round_robin(cfg: TaskConfig, cache: WorkerCache, by_part: dict) -> Iterator[tuple[int, TaskOutput]]:
    """Each partition's events in micro-batches of 1-300 records (seeded), the partitions taking turns on one
    worker (``cache``), state in DictTaskState: (partition, output) per batch."""
    runner, rnd = TaskRunner(cfg), random.Random(5)
    states = {p: DictTaskState() for p in by_part}
    pos = dict.fromkeys(by_part, 0)
    while any(pos[p] < len(evs) for p, evs in by_part.items()):
        for p, evs in sorted(by_part.items()):
            if pos[p] >= len(evs):
                continue
            hi = min(len(evs), pos[p] + rnd.randint(1, 300))
            yield p, run_slice(runner, states[p], p, evs, pos[p], hi, cache=cache)
            pos[p] = hi


def test_a_worker_bounded_to_one_cached_task_stays_exact():
    """``state_cache_tasks=1``: the partitions' batches take turns on one worker, so every batch finds another
    task's windows cached, drops them (least recently used) and restores its own from the state store (snapshot
    plus log). The output is the replay's, and row for row the output of the same batches with every task kept."""
    events = payment_events(3000, seed=13)
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit="update")
    by_part = defaultdict(list)
    for ev in events:
        by_part[ev.partition].append(ev)
    assert len(by_part) == 3
    results = {}
    for bound in (1, 64):
        cfg = dataclasses.replace(config("update", snapshot_every=4), state_cache_tasks=bound)
        cache = WorkerCache()
        rows, hits, batches = [], 0, 0
        for p, out in round_robin(cfg, cache, by_part):  # the least recently used task comes next
            hits += out.stats["state_cache_hit"]
            batches += 1
            assert len(cache) <= bound
            rows += [(p, kind, key, value) for kind, _topic, key, value, _headers in out.rows()]
        results[bound] = rows, hits, batches
    (rows1, hits1, n), (rows64, hits64, _n) = results[1], results[64]
    assert n > 20
    assert hits1 == 0  # every batch restored its task from the state store
    assert hits64 == n - len(by_part)  # every batch but each task's first found its windows cached
    assert rows1 == rows64
    assert changelog_final((key, value) for _p, kind, key, value in rows1 if kind == "changelog") == exp.final


def _measured_cache(limit: int, over: int) -> tuple[WorkerCache, list[int]]:
    """A worker cache whose measure of the service's memory is ``limit + cached tasks + over - 3`` (over the
    limit with more than ``3 - over`` tasks cached), and how many times it handed memory back."""
    released = [0]

    def memory() -> int:
        return limit + len(cache) + over - 3

    def release() -> None:
        released[0] += 1

    cache = WorkerCache(memory=memory, release=release)
    return cache, released


def test_memory_limit_drops_cached_tasks_least_recently_used_first_and_stays_exact():
    """``memory_limit``: after a batch, while the service holds more than the limit, the worker drops cached tasks
    least recently used first, handing freed memory back after each (here the measure is a counter that falls by
    one "task" per drop; the real one reads /proc: test_worker_memory.py), down to the batch's own task. The
    output is row for row that of the same batches with no limit, and the drops are counted in the stats."""
    events = payment_events(3000, seed=17)
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit="update")
    by_part = defaultdict(list)
    for ev in events:
        by_part[ev.partition].append(ev)
    results = {}
    for limit, over in ((0, 0), (100, 2), (100, 9)):  # no limit; over it with 2 cached; over it with none cached
        cfg = dataclasses.replace(config("update", snapshot_every=4), memory_limit=limit)
        cache, released = _measured_cache(limit, over)
        rows, dropped, sizes = [], 0, []
        for p, out in round_robin(cfg, cache, by_part):
            dropped += out.stats["state_cache_dropped"]
            sizes.append(len(cache))
            rows += [(p, kind, key, value) for kind, _topic, key, value, _headers in out.rows()]
        results[(limit, over)] = rows
        if limit == 0:
            assert dropped == 0 and max(sizes) == len(by_part) and released[0] == 0
        elif over == 2:  # over the limit with 2 or more tasks cached: 1 stays
            assert max(sizes) == 1 and dropped > 0 and released[0] == dropped
        else:  # over the limit with nothing cached: every batch's own task goes too
            assert max(sizes) == 0 and released[0] == dropped
    assert len(by_part) == 3
    assert results[(100, 2)] == results[(0, 0)] == results[(100, 9)]
    assert changelog_final((key, value) for _p, kind, key, value in results[(0, 0)] if kind == "changelog") == exp.final


def every_sequence(rows) -> dict:
    """The changelog per partition as (key, start, end, aggregates, count, max ts) in emission order."""
    seq = defaultdict(list)
    for p, _key, value, _h in rows["changelog"]:
        v = json.loads(value)
        seq[p].append(
            (v["key"], v["window_start"], v["window_end"], v["aggregates"], v["record_count"], v["max_timestamp"])
        )
    return dict(seq)


@pytest.mark.parametrize(
    ("emit", "buckets", "cache", "fail_every", "snapshot_every"),
    [
        ("update", 256, True, 0, 8),
        ("every", 256, True, 0, 8),
        ("close", 256, True, 0, 8),
        ("update", 3, False, 0, 3),
        ("update", 1, True, 3, 8),
        ("every", 7, True, 2, 1),
        ("close", 2, False, 4, 5),
        ("update", 16, True, 2, 3),
    ],
)
def test_task_batches_equal_windowstore_replay(emit, buckets, cache, fail_every, snapshot_every):
    events = payment_events(3000, seed=11)
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit=emit)
    cfg = config(emit, buckets=buckets, cache=cache, snapshot_every=snapshot_every)
    rows, totals = run_in_batches(cfg, events, fail_every=fail_every)

    # counts add up: every record aggregated, late or dead-lettered
    assert totals["records"] == len(events)
    assert totals["aggregated"] + totals["late"] + totals["dead_lettered"] == len(events)
    assert totals["late"] == len(exp.late) > 0
    assert totals["dead_lettered"] == len(exp.dead) > 0
    assert totals["aggregated"] == exp.aggregated

    final = changelog_final((key, value) for _p, key, value, _h in rows["changelog"])
    assert final == exp.final
    if emit == "every":  # the exact uncached Kafka Streams sequence, per partition
        assert every_sequence(rows) == dict(exp.sequence)
    if emit == "close":  # each window once
        assert len(rows["changelog"]) == len(final)

    late = {(p, int(h["offset"])) for p, _k, _v, h in rows["late"]}
    assert late == exp.late
    assert all(h["reason"] == b"late" and int(h["stream_time"]) > int(h["timestamp"]) for *_x, h in rows["late"])
    dead = {(p, int(h["offset"])): h["error"].decode() for p, _k, _v, h in rows["dlq"]}
    assert dead == exp.dead


@pytest.mark.parametrize(
    ("window", "emit", "batch_path", "cache", "fail_every", "snapshot_every"),
    [
        (WindowDefinition("tumbling", 1000), "update", True, True, 0, 8),
        (WindowDefinition("tumbling", 1000), "close", False, False, 3, 3),
        (WindowDefinition("tumbling", 700), "every", False, True, 2, 1),
        (WindowDefinition("hopping", 1000, 300), "update", True, False, 0, 3),
        (WindowDefinition("hopping", 1000, 300), "close", True, True, 4, 5),
        (WindowDefinition("hopping", 1000, 250), "every", True, True, 0, 8),
        (WindowDefinition("hopping", 1000, 300), "update", False, True, 2, 2),
    ],
)
def test_time_window_task_batches_equal_the_engine(window, emit, batch_path, cache, fail_every, snapshot_every):
    """Tumbling and hopping windows through the task path (state between micro-batches, snapshots, log replay,
    failed batches) give what one TimeWindowProcessor per partition gives: the same final windows, late records
    and dead letters; in every mode the same sequence."""
    events = payment_events(3000, seed=13)
    exp = replay(events, grace=300, aggregations=AGGS, emit=emit, window=window)
    cfg = config(emit, window=window, batch=batch_path, cache=cache, snapshot_every=snapshot_every)
    rows, totals = run_in_batches(cfg, events, fail_every=fail_every)
    assert totals["aggregated"] + totals["late"] + totals["dead_lettered"] == totals["records"] == len(events)
    assert totals["late"] == len(exp.late) > 0 and totals["aggregated"] == exp.aggregated
    final = changelog_final((key, value) for _p, key, value, _h in rows["changelog"])
    assert final == exp.final
    assert all(end - start == window.size_ms for _k, start, end in final)  # Window.end(): exclusive
    if emit == "every":
        assert every_sequence(rows) == dict(exp.sequence)
    if emit == "close":
        assert len(rows["changelog"]) == len(final)
    assert {(p, int(h["offset"])) for p, _k, _v, h in rows["late"]} == exp.late
    assert {(p, int(h["offset"])): h["error"].decode() for p, _k, _v, h in rows["dlq"]} == exp.dead


@pytest.mark.parametrize(
    ("emit", "batch_path", "cache", "fail_every", "snapshot_every"),
    [
        ("update", True, True, 0, 16),
        ("close", True, False, 3, 4),
        ("every", True, True, 2, 1),
        ("update", False, True, 0, 3),
    ],
)
def test_task_batches_make_no_reference_cycles(emit, batch_path, cache, fail_every, snapshot_every):
    """service.spark.python_daemon freezes what a worker holds after each task and collects it fully only every 100th
    task: objects the tasks leave in reference cycles would wait that long. There are none."""
    events = payment_events(3000, seed=5)
    cfg = config(emit, batch=batch_path, cache=cache, snapshot_every=snapshot_every)
    run_in_batches(cfg, events, fail_every=fail_every)  # first uses: lazy imports leave cycles of their own
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        _rows, totals = run_in_batches(cfg, events, fail_every=fail_every)
        found = gc.collect()
        kinds = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert totals["late"] > 0 and totals["dead_lettered"] > 0 and totals["batches"] > 15
    assert found == 0, kinds.most_common(10)


def test_original_bytes_and_headers_on_dead_letters():
    events = payment_events(400, seed=3, bad_fraction=0.3)
    rows, _ = run_in_batches(config("update"), events)
    by_part = defaultdict(list)
    for ev in events:
        by_part[ev.partition].append(ev)
    assert rows["dlq"]
    for p, key, value, h in rows["dlq"]:
        ev = by_part[p][int(h["offset"])]
        assert (key, value) == (ev.key, ev.value)
        assert ev.note.startswith("bad:")
        assert h["topic"] == b"in" and int(h["partition"]) == p and h["error.message"]


def test_record_path_and_batch_path_agree():
    events = payment_events(2000, seed=5, late_fraction=0.0, ooo_fraction=0.02)
    a, _ = run_in_batches(config("update", batch=True), events)
    b, _ = run_in_batches(config("update", batch=False), events)
    strip = lambda rows: [(p, k, json.loads(v) | {"emit_time": 0}) for p, k, v, _ in rows]  # noqa: E731
    assert strip(a["changelog"]) == strip(b["changelog"])


def test_idle_keys_leave_the_state_store():
    early = payment_events(300, keys=12, seed=21, bad_fraction=0, late_fraction=0)
    late = payment_events(3000, keys=6, seed=22, bad_fraction=0, late_fraction=0, base_ts=early[-1].timestamp + 10_000)
    events = early + [e for e in late if e.partition < 3]
    states = {}
    rows, _ = run_in_batches(config("update", buckets=4, snapshot_every=1), events, states=states)
    remaining = set()
    for st in states.values():
        for b, data in st.buckets.items():
            if b >= 0:  # key buckets (the log entries are < 0)
                remaining |= set(decode_bucket(data))
    assert remaining and remaining <= {f"acct-{k}" for k in range(6)}
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit="update")
    assert changelog_final((key, value) for _p, key, value, _h in rows["changelog"]) == exp.final


def test_cached_processor_loads_new_keys_through_the_current_batch():
    """A key the cached processor has not loaded yet (its last miss loaded only the keys it touched) is loaded
    with the CURRENT batch's state handle."""
    early = payment_events(400, keys=30, seed=31, bad_fraction=0, late_fraction=0)
    events = early + payment_events(
        400, keys=30, seed=32, bad_fraction=0, late_fraction=0, base_ts=early[-1].timestamp + 1
    )
    cfg = config("update", buckets=16)
    rows, totals = run_in_batches(cfg, events, seed=4, fail_every=3)
    assert totals["state_cache_hit"] > 0
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit="update")
    assert changelog_final((key, value) for _p, key, value, _h in rows["changelog"]) == exp.final


def test_state_calls_are_bounded_by_buckets():
    events = payment_events(2000, keys=60, partitions=1, seed=9, bad_fraction=0)
    states = {}
    _, totals = run_in_batches(config("update", buckets=8, cache=False, snapshot_every=1), events, states=states)
    st = states[0]
    # per batch: 1 task read + 1 task write + at most 8 bucket reads and 8 bucket writes + the batch's log entry
    # (a snapshot batch closes its generation with it) and the deletion of the entry of the generation before
    assert st.calls <= totals["batches"] * (2 + 16 + 2)


def test_checkpoint_balance_tasks_is_fixed_at_creation(tmp_path):
    from service.checkpoint_access import LAYOUT_FILE, checkpoint_balance_tasks, checkpoint_state_partitions

    new = tmp_path / "new"
    assert checkpoint_balance_tasks(str(new), True) is True
    assert (new / LAYOUT_FILE).exists()
    assert checkpoint_balance_tasks(str(new), False) is True  # recorded: the state key must not change
    old = tmp_path / "old"  # a checkpoint with batches from before the layout file: no slot
    (old / "offsets").mkdir(parents=True)
    (old / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0,"conf":{"spark.sql.shuffle.partitions":"3"}}\n{"t":{"0":5}}\n'
    )
    assert checkpoint_balance_tasks(str(old), True) is False
    assert checkpoint_state_partitions(str(old)) == 3
    assert checkpoint_state_partitions(str(new)) is None
    assert checkpoint_balance_tasks("s3a://bucket/ck", False) is False


@pytest.mark.parametrize(
    ("emit", "buckets", "fail_every", "batch_path"),
    [
        ("update", 8, 0, True),
        ("every", 256, 0, False),
        ("close", 3, 0, False),
        ("update", 256, 4, True),
        ("update", 16, 0, False),
    ],
)
def test_workers_taking_turns_give_the_same_results(emit, buckets, fail_every, batch_path):
    """Two Python workers take a task's batches in random turns (as Spark hands a task to whichever worker is
    idle): a worker whose cached processor is behind reads the state back, with identical results."""
    events = payment_events(3000, seed=17)
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit=emit)
    cfg = config(emit, buckets=buckets, batch=batch_path)
    rows, totals = run_in_batches(cfg, events, seed=5, fail_every=fail_every, workers=2)
    assert 0 < totals["state_cache_hit"] < totals["batches"]
    assert totals["aggregated"] + totals["late"] + totals["dead_lettered"] == len(events)
    assert changelog_final((key, value) for _p, key, value, _h in rows["changelog"]) == exp.final
    assert {(p, int(h["offset"])) for p, _k, _v, h in rows["late"]} == exp.late
    assert {(p, int(h["offset"])): h["error"].decode() for p, _k, _v, h in rows["dlq"]} == exp.dead
    if emit == "every":  # the exact uncached Kafka Streams sequence, per partition
        assert every_sequence(rows) == dict(exp.sequence)
    # and the same rows, in the same order, as one worker that always hits its cache
    one, _ = run_in_batches(cfg, events, seed=5, fail_every=fail_every)
    strip = lambda rs: [(p, k, json.loads(v) | {"emit_time": 0}) for p, k, v, _ in rs]  # noqa: E731
    assert strip(rows["changelog"]) == strip(one["changelog"])


def test_buckets_are_compressed_and_old_uncompressed_buckets_still_read():
    data = {f"acct-{i}": bytes(range(256)) * 4 for i in range(50)}
    blob = encode_bucket(data)
    assert len(blob) < len(pickle.dumps(data, protocol=5)) / 5
    assert decode_bucket(blob) == data
    assert decode_bucket(pickle.dumps(data, protocol=5)) == data  # written before compression
    assert decode_bucket(None) == {}


def test_a_task_written_uncompressed_goes_on_with_compressed_buckets():
    """State from before bucket compression (bare pickles) and before the log (a bare token) is read, and goes on
    compressed, with a log."""
    events = payment_events(2000, keys=40, partitions=1, seed=41, bad_fraction=0, late_fraction=0)
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit="update")
    cfg = config("update", buckets=8, cache=False, snapshot_every=1)
    runner = TaskRunner(cfg)
    state = DictTaskState()
    rows = []
    third = len(events) // 3
    for lo, hi in ((0, third), (third, 2 * third), (2 * third, len(events))):
        out = run_slice(runner, state, 0, events, lo, hi, process=process_task_batch)
        rows += [(k, v) for kind, _t, k, v, _h in out.rows() if kind == "changelog"]
        if lo == 0:  # as an older version would have left it
            state.buckets = {b: pickle.dumps(decode_bucket(d), protocol=5) for b, d in state.buckets.items()}
            state.task = (state.task[0], "0123456789abcdef0123456789abcdef", state.task[2])
            runner = TaskRunner(config("update", buckets=8, cache=False, snapshot_every=2))
        elif lo == third:  # a log entry; the old buckets stay as they are
            assert out.stats["state_snapshot"] == 0 and task_state.log_slot(0) in state.buckets
    assert changelog_final(rows) == exp.final
    assert out.stats["state_snapshot"] == 1  # the third batch: a snapshot, all compressed
    assert all(d[:4] == b"SWZ1" for d in state.buckets.values())
    # the generation the snapshot closed: the second batch's entry and its own
    assert sorted(b for b in state.buckets if b < 0) == [task_state.log_slot(1), task_state.log_slot(0)]


def test_a_log_entry_keeps_keys_times_and_the_aggregated_fields_only():
    records = [
        (i, f"acct-{i % 7}", {"amount": i * 3, "note": "x" * 40, "currency": "EUR"}, 1000 + i) for i in range(500)
    ]
    decoded = Decoded.of(records, ("amount", "note"))
    entry = task_state.encode_log("tok", decoded, ("amount",))
    assert b"xxxx" not in task_state.decompress(entry) and b"EUR" not in task_state.decompress(entry)
    token, back = task_state.decode_log(entry, ("amount",))
    assert token == "tok"
    assert back.records() == [(i, k, {"amount": v["amount"]}, t) for i, k, v, t in records]
    assert back.fields == {"amount": [v["amount"] for _i, _k, v, _t in records]}
    token, back = task_state.decode_log(task_state.encode_log("", Decoded.of([], ("amount",)), ("amount",)))
    assert (token, back.records()) == ("", [])
    token, back = task_state.decode_log(task_state.encode_log("t", Decoded.of(records[:3])))
    assert (token, back.records()) == ("t", [(i, k, {}, t) for i, k, _v, t in records[:3]])
    # an entry of a checkpoint written with other aggregations: named, not a KeyError deep in the replay
    with pytest.raises(RuntimeError, match=r"'note'.*other aggregations.*new checkpoint_dir"):
        task_state.decode_log(entry, ("amount", "note"))


def test_log_entries_written_whole_by_an_older_version_still_replay(monkeypatch):
    """Entries from before the columns (``(token, records)`` pickled whole) are replayed as they are, and the task
    goes on writing columns; every batch here restores from the store (no worker cache)."""
    events = payment_events(1500, keys=25, partitions=1, seed=43, bad_fraction=0.02, late_fraction=0.02)
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit="update")
    runner = TaskRunner(config("update", buckets=8, cache=False, snapshot_every=6))
    state = DictTaskState()
    new_encode = task_state.encode_log
    old_encode = lambda token, records, fields=(): task_state.compress(  # noqa: E731
        pickle.dumps((token, records.records()), protocol=5)
    )
    rows = []
    for n, lo in enumerate(range(0, len(events), 100)):
        monkeypatch.setattr(task_batch, "encode_log", old_encode if n < 4 else new_encode)
        out = run_slice(runner, state, 0, events, lo, lo + 100)
        rows += [(k, v) for kind, _t, k, v, _h in out.rows() if kind == "changelog"]
        if n in (3, 5):  # the entries of batches 1.. replayed: old ones only, then old and new ones together
            assert out.stats["state_log_replayed"] == n - 1 and out.stats["state_snapshot"] == 0
    assert changelog_final(rows) == exp.final


def test_batches_between_snapshots_write_one_log_entry_and_stale_workers_replay_only_what_they_missed():
    """Every 4th batch (from the first) writes the key buckets (a snapshot); the others write one log entry (their
    decoded records) and leave the buckets alone. Two generations of log are kept, so a worker that is behind -
    even across a snapshot - replays only the entries it has not seen."""
    events = payment_events(1200, keys=30, partitions=1, seed=51, bad_fraction=0.02, late_fraction=0.02)
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit="update")
    cfg = config("update", buckets=8, snapshot_every=4)
    runner = TaskRunner(cfg)
    state = DictTaskState()
    caches = [WorkerCache(), WorkerCache()]
    turns = [0, 0, 1, 0, 1, 1, 1, 0, 1, 0, 0, 0]  # worker per batch
    rows, stats = [], []
    for n, lo in enumerate(range(0, len(events), 100)):
        buckets_before = {b: d for b, d in state.buckets.items() if b >= 0}
        out = run_slice(runner, state, 0, events, lo, lo + 100, cache=caches[turns[n]])
        rows += [(k, v) for kind, _t, k, v, _h in out.rows() if kind == "changelog"]
        stats.append(out.stats)
        log = {b for b in state.buckets if b < 0}
        if n % 4 == 0:  # a snapshot (the task's first batch is one): buckets written
            assert out.stats["state_snapshot"] == 1 and out.stats["state_buckets_written"] > 0
        else:
            assert out.stats["state_snapshot"] == 0 and out.stats["state_buckets_written"] == 0
            assert {b: d for b, d in state.buckets.items() if b >= 0} == buckets_before
        # this generation's entries, and the generation before (closed by the snapshot batch's own entry)
        assert len(log) == (n if n < 4 else 4 + n % 4)
    assert changelog_final(rows) == exp.final
    replayed = [s["state_log_replayed"] for s in stats]
    hits = [s["state_cache_hit"] for s in stats]
    # batch 2: worker 1 never ran (snapshot of batch 0 + 1 entry); 3, 4, 8: one batch behind (1 entry each);
    # 7: worker 0 is at batch 3, before the snapshot of batch 4 (its entry + 2 entries after it); 9: at batch 7,
    # before the snapshot of batch 8 (its entry)
    assert hits == [0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1]
    assert replayed == [0, 0, 1, 1, 1, 0, 0, 3, 1, 1, 0, 0]


def test_the_tasks_of_a_topic_write_their_snapshots_in_different_batches():
    """All tasks are created in one micro-batch (a snapshot each); after that their snapshots are staggered by
    partition, so no later batch carries every task's snapshot write, and each task snapshots every 8th batch."""
    cfg = config("update", buckets=8, snapshot_every=8)
    runner = TaskRunner(cfg)
    events = payment_events(4000, keys=40, partitions=4, seed=61, bad_fraction=0, late_fraction=0)
    states = {p: DictTaskState() for p in range(4)}
    by_part = defaultdict(list)
    for e in events:
        by_part[e.partition].append(e)
    snapshots = defaultdict(list)  # batch -> partitions that wrote a snapshot
    for n in range(30):
        for p in range(4):
            out = run_slice(runner, states[p], p, by_part[p], n * 30, (n + 1) * 30)
            if out.stats["state_snapshot"]:
                snapshots[n].append(p)
    assert snapshots[0] == [0, 1, 2, 3]  # creation
    assert all(len(ps) == 1 for n, ps in snapshots.items() if n)
    for p in range(4):
        at = [n for n, ps in snapshots.items() if p in ps and n]
        assert at and all(b - a == 8 for a, b in pairwise(at))


def test_a_field_most_records_lack_is_one_warning_naming_it_and_counted(caplog):
    """A typo in the aggregations (``sum:amout`` for records with ``amount``): every record lacks the field, so
    each is a dead letter (schema-mismatch), counted in ``missing_field_records``, and the batch logs a WARNING
    that names the field (likely a typo, not bad producers)."""
    cfg = config("update", aggs="count,sum:amout")
    n = 6
    values = [json.dumps({"amount": i + 1, "note": "x"}).encode() for i in range(n)]
    with caplog.at_level("WARNING", logger="service.task.runner"):
        records = TaskBatch("in", 0, list(range(n)), [b"k"] * n, values, [1000 + 10 * i for i in range(n)], 5)
        out = process_task_batch(TaskRunner(cfg), DictTaskState(), records)
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "'amout'" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert f"{n} of {n} records of in-0" in warnings[0].getMessage() and "typo" in warnings[0].getMessage()
    assert out.stats["missing_field_records"] == n and out.stats["dead_lettered"] == n
    dlq = [h for kind, _t, _k, _v, h in out.rows() if kind == "dlq"]
    assert len(dlq) == n and {dict(h)["error"] for h in dlq} == {b"schema-mismatch"}


def test_state_snapshot_records_bounds_the_log_a_restore_replays():
    """``state_snapshot_records``: a task snapshots as soon as its log since the last snapshot would hold more input
    records than the bound, long before ``state_snapshot_every`` batches; the count is exact however the processor
    got to the batch - kept in one worker, restored from the store (a restart), or caught up by a worker that was
    behind - so the three take the same snapshot decisions, and the output is the unbounded run's, row for row."""
    events = [e for e in payment_events(4000, seed=5) if e.partition == 0]
    sizes = [100, 100, 100, 100, 60, 60, 60, 60, 60, 300, 100]
    assert sum(sizes) <= len(events)
    unbounded = dataclasses.replace(config("update", snapshot_every=16), state_snapshot_records=0)
    bounded = dataclasses.replace(unbounded, state_snapshot_records=250)

    def run(cfg: TaskConfig, worker_of_batch) -> tuple[list, list[int], list[int]]:
        runner, state, rows, snapshots, replayed = TaskRunner(cfg), DictTaskState(), [], [], []
        caches: dict[int, WorkerCache] = {}
        lo = 0
        for i, n in enumerate(sizes):
            w = worker_of_batch(i)  # None: a new worker with nothing cached (a restart before every batch)
            cache = WorkerCache() if w is None else caches.setdefault(w, WorkerCache())
            out = run_slice(runner, state, 0, events, lo, lo + n, cache=cache)
            rows.append(out.rows())
            snapshots.append(out.stats["state_snapshot"])
            replayed.append(out.stats["state_log_replayed"])
            lo += n
        return rows, snapshots, replayed

    rows, snapshots, _ = run(bounded, lambda i: 0)
    # the log since the snapshot with each batch: -, 100, 200, 300 > 250: a snapshot; 60 ... 240, 300: a snapshot;
    # a batch over the bound alone is a snapshot too
    assert snapshots == [1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0]
    restarts_rows, restarts_snapshots, restarts_replayed = run(bounded, lambda i: None)
    alternating_rows, alternating_snapshots, _ = run(bounded, lambda i: i % 2)
    assert restarts_snapshots == alternating_snapshots == snapshots
    assert max(restarts_replayed) == 4  # the four 60-record entries (240 records) before the ninth batch
    unbounded_rows, unbounded_snapshots, unbounded_replayed = run(unbounded, lambda i: None)
    assert unbounded_snapshots == [1] + [0] * 10 and max(unbounded_replayed) == 9
    assert rows == restarts_rows == alternating_rows == unbounded_rows


def test_a_cached_task_keeps_its_buckets_as_stored_not_decoded():
    """Between micro-batches a cached task holds each bucket as the state has it (compressed), not its
    decoded blobs: the windows live in the processor, and decoded blobs would hold them twice. Its buckets are
    read from the state once, and the output is the replay's."""
    events = payment_events(1600, keys=40, partitions=1, seed=61, bad_fraction=0, late_fraction=0.02)
    cfg = config("update", buckets=8, snapshot_every=3)
    runner, state, cache = TaskRunner(cfg), DictTaskState(), WorkerCache()
    rows, loaded = [], 0
    for lo in range(0, len(events), 100):
        out = run_slice(runner, state, 0, events, lo, lo + 100, cache=cache)
        rows += [(k, v) for kind, _t, k, v, _h in out.rows() if kind == "changelog"]
        loaded += out.stats["state_buckets_loaded"]
        entry = cache.take((cfg, "in", 0))
        assert entry is not None
        assert entry.source.buckets == {}
        assert entry.source.packed == {b: state.buckets.get(b) for b in entry.source.packed}
        cache.add((cfg, "in", 0), entry)
    assert loaded <= 8
    exp = replay(events, td=1000, grace=300, aggregations=AGGS, emit="update")
    assert changelog_final(rows) == exp.final


def test_freed_memory_is_handed_back_once_when_the_load_drops():
    """After a backlog the workers hand back the heap its batches needed: once, at the first task batch under a
    LOAD_DROP-th of the largest since the last time; not while batches stay large or stay small."""
    from service.worker.cache import BACKLOG_RECORDS, LOAD_DROP

    released = [0]

    def release() -> None:
        released[0] += 1

    cache = WorkerCache(memory=lambda: None, release=release)
    backlog = 2_000 * LOAD_DROP
    live = backlog // LOAD_DROP - 1
    done = [cache.after_batch(n) for n in (backlog, backlog, backlog, live, live, 3 * live, live)]
    assert done == [False, False, False, True, False, False, False] and released[0] == 1
    done = [cache.after_batch(n) for n in (backlog, live, 1)]  # another backlog, then live, then smaller live
    assert done == [False, True, False] and released[0] == 2
    assert [cache.after_batch(n) for n in (backlog, backlog // LOAD_DROP)] == [False, False]  # not under it
    # batches under a backlog's size never hand anything back, however they vary
    small = WorkerCache(memory=lambda: None, release=release)
    assert not any(small.after_batch(n) for n in (BACKLOG_RECORDS - 1, 1, BACKLOG_RECORDS - 1, 0))
