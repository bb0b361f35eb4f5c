"""The processing exception handler (issue 29; Kafka Streams' processing.exception.handler, KIP-1033): a record
whose processing raises - here through a real seam, an aggregation registered the way built-ins are - is a dead
letter (continue) or names its partition and offset (fail); the other records are aggregated exactly as without
it."""

from __future__ import annotations

import json

import pytest

from connectors.output import KIP1034_HEADERS
from service.driver import failure_line
from service.task.config import TaskConfig
from service.task.runner import ProcessingFailure, TaskBatch, TaskRunner
from service.task.state import DictTaskState
from service.task.stats import dead_letter_stat
from service.worker.cache import WORKER
from service.worker.run import process_task_batch
from tests.service.harness import json_task_config
from windowstore import aggregations

AGGS = "count,fragile:amount,max:amount"
POISON = 13


class Fragile(aggregations.Sum):
    """A sum whose code has a bug for one value (the kind of bug the handler is there for)."""

    name = "fragile"
    batch_kind = None

    def accumulate(self, acc, value, key=None):
        if value == POISON:
            raise ZeroDivisionError(f"fragile cannot add {value}")
        return acc + value


@pytest.fixture(autouse=True)
def _fragile(monkeypatch):
    monkeypatch.setitem(aggregations.BUILTINS, "fragile", Fragile)
    monkeypatch.setattr(WORKER, "entries", {})


def config(handler: str, emit: str = "update", batch: bool = True) -> TaskConfig:
    return json_task_config(AGGS, emit=emit, batch=batch, processing_exception_handler=handler, state_snapshot_every=2)


def records(amounts, t0=1000):
    return [(f"k{i % 3}".encode(), json.dumps({"amount": a}).encode(), t0 + 37 * i) for i, a in enumerate(amounts)]


def run(cfg, state, recs, first_offset=0):
    runner = TaskRunner(cfg)
    offsets = list(range(first_offset, first_offset + len(recs)))
    records = TaskBatch("in", 0, offsets, [r[0] for r in recs], [r[1] for r in recs], [r[2] for r in recs], 5)
    return process_task_batch(runner, state, records)


def changelog(out):
    return [json.loads(v) for kind, _t, _k, v, _h in out.rows() if kind == "changelog"]


@pytest.mark.parametrize(("emit", "batch"), [("update", True), ("every", False), ("close", True)])
def test_continue_dead_letters_the_record_that_raises_and_aggregates_the_rest_exactly(emit, batch):
    amounts = [5, 7, POISON, 11, 2, POISON, 4]
    later = records([1, 2, 3], t0=1400)
    cfg = config("continue", emit, batch)
    state = DictTaskState()
    out = run(cfg, state, records(amounts))
    out2 = run(cfg, state, later, first_offset=len(amounts))

    # the same batches without the poison records, on a fresh task
    WORKER.clear()
    clean_state = DictTaskState()
    good = [r for r, a in zip(records(amounts), amounts, strict=True) if a != POISON]
    expected = run(cfg, clean_state, good)
    expected2 = run(cfg, clean_state, later, first_offset=len(amounts))
    assert changelog(out) == changelog(expected) and changelog(out2) == changelog(expected2)

    dlq = [(k, v, dict(h)) for kind, _t, k, v, h in out.rows() if kind == "dlq"]
    assert [int(h["offset"]) for _k, _v, h in dlq] == [2, 5]
    for _k, v, h in dlq:
        assert json.loads(v) == {"amount": POISON} and h["error"] == b"processing-error"
        assert b"ZeroDivisionError" in h["error.message"]
        assert h[KIP1034_HEADERS[0]] == b"builtins.ZeroDivisionError"
        assert b"fragile cannot add" in h[KIP1034_HEADERS[2]]
        assert h[KIP1034_HEADERS[3]] == b"in" and h[KIP1034_HEADERS[4]] == b"0"
    s = out.stats
    assert (s["records"], s["dead_lettered"], s[dead_letter_stat("processing-error")]) == (7, 2, 2)
    assert s["aggregated"] + s["late"] + s["dead_lettered"] == 7


def test_fail_names_the_partition_and_offset_of_the_record_that_raised():
    with pytest.raises(ProcessingFailure, match=r"offset 2 of in-0 raised ZeroDivisionError"):
        run(config("fail"), DictTaskState(), records([5, 7, POISON, 11]))


def test_a_batch_failure_that_no_record_causes_alone_is_raised_again(monkeypatch):
    cfg = config("continue")
    calls = []

    def failing_once(self, *args, **kw):  # the whole batch fails once (e.g. a worker hiccup), no record does
        calls.append(len(args[1]))  # (proc, batch)
        if len(calls) == 1:
            raise OSError("disk full")
        return real(self, *args, **kw)

    real = TaskRunner.run
    monkeypatch.setattr(TaskRunner, "run", failing_once)
    with pytest.raises(OSError, match="disk full"):
        run(cfg, DictTaskState(), records([1, 2, 3]))


# the text of a failed query's exception (str of pyspark's StreamingQueryException), shortened from a real run
QUERY_FAILED = """[STREAM_FAILED] Query [id = 2838, runId = a62b] terminated with exception: [PYTHON_EXCEPTION] An \
exception was thrown from the Python worker: Traceback (most recent call last):
  File "/app/service/processing.py", line 786, in process_task_batch
    out = runner.run(proc, topic, partition, offsets, keys, values, timestamps, emit_time_ms)
ZeroDivisionError: fragile cannot add 13

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/app/service/processing.py", line 791, in process_task_batch
    proc, source, out = _run_isolating(
{raised}
 SQLSTATE: 38000)
\tat org.apache.spark.sql.execution.streaming.runtime.StreamExecution.runStream(StreamExecution.scala:313)
Caused by: org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown"""


def test_the_error_line_of_a_failed_query_names_the_record_in_fail_mode():
    raised = "service.processing.ProcessingFailure: processing the record at offset 2 of in-0 raised ZeroDivisionError"
    assert failure_line(QUERY_FAILED.format(raised=raised)) == (
        "processing the record at offset 2 of in-0 raised ZeroDivisionError"
    )


def test_the_error_line_of_a_failed_query_names_a_python_workers_exception_not_the_traceback():
    line = failure_line(QUERY_FAILED.format(raised="OSError: [Errno 28] No space left on device"))
    assert line == (
        "[STREAM_FAILED] Query [id = 2838, runId = a62b] terminated with exception: [PYTHON_EXCEPTION] An exception "
        "was thrown from the Python worker: OSError: [Errno 28] No space left on device"
    )
    assert failure_line("org.apache.kafka.common.errors.TimeoutException: x\n\tat y") == (
        "org.apache.kafka.common.errors.TimeoutException: x"
    )


def test_the_error_line_of_a_checkpoint_with_another_operator_name_says_what_to_do():
    text = (
        "[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] Streaming stateful operator name does not match "
        "with the operator in state metadata.\n\tat org.apache.spark.sql.errors.QueryExecutionErrors"
    )
    line = failure_line(text)
    assert line.startswith("[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] Streaming stateful operator")
    assert "transformWithStateInPandasExec" in line and "state/*/_metadata" in line and "Upgrading" in line
