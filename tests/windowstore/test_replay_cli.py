"""`python -m windowstore replay`: the contract users and our conformance checks rely on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from windowstore.replay import replay_records

JAVADOC = [{"key": "A", "value": v, "ts": t} for v, t in ((1, 8000), (2, 9200), (3, 12400))]


def replay(lines: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "windowstore", "replay", *args],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_javadoc_example_through_the_cli():
    p = replay(
        [json.dumps(r) for r in JAVADOC], "--time-difference-ms", "5000", "--aggregation", "collect", "--emit", "every"
    )
    assert p.returncode == 0, p.stderr
    out = [json.loads(line) for line in p.stdout.splitlines()]
    final = {(u["window_start"], u["window_end"]): (u["value"], u["ts"]) for u in out}
    assert final == {
        (3000, 8000): ([1], 8000),
        (4200, 9200): ([1, 2], 9200),
        (7400, 12400): ([1, 2, 3], 12400),
        (8001, 13001): ([2, 3], 12400),
        (9201, 14201): ([3], 12400),
    }
    summary = json.loads(p.stderr.strip().splitlines()[-1])
    assert summary["records"] == 3 and summary["dropped_records"] == 0 and summary["dropped_records_total"] == 0


def test_summary_counts_late_and_null_records():
    lines = [
        '{"key":"A","value":1,"ts":100}',
        '{"key":"A","value":2,"ts":10}',  # late: 10 + 10 < 100 - 0
        '{"key":null,"value":3,"ts":100}',  # null key: dropped and counted as Kafka Streams does
        '{"key":"B","value":null,"ts":100}',
    ]
    p = replay(lines, "--time-difference-ms", "10", "--aggregation", "count", "--emit", "update")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stderr.strip().splitlines()[-1])
    assert summary["records"] == 4
    assert summary["dropped_records"] == 1
    assert summary["dropped_records_total"] == 3
    assert [json.loads(x)["value"] for x in p.stdout.splitlines()] == [1]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("not json", "line 2: not valid JSON"),
        ('["A", 1, 5]', "line 2: expected a JSON object"),
        ('{"key":"A","value":1}', "line 2: missing field(s) ts"),
        ('{"key":"A","value":1,"ts":1.5}', "line 2: ts must be an integer"),
        ('{"key":"A","value":"x","ts":5}', "line 2: aggregation 'sum' needs a numeric value"),
    ],
)
def test_malformed_line_is_a_clear_error_with_exit_code_2(bad, message):
    p = replay(['{"key":"A","value":1,"ts":1}', bad], "--time-difference-ms", "10", "--aggregation", "sum")
    assert p.returncode == 2
    assert message in p.stderr
    assert p.stdout == ""


def test_flush_every_groups_update_mode_output():
    recs = [{"key": "A", "value": 1, "ts": t} for t in (10, 11, 12, 13)]
    per_record, _ = replay_records(
        recs, time_difference_ms=5, grace_ms=0, aggregation="count", emit="update", flush_every=1
    )
    at_end, _ = replay_records(recs, time_difference_ms=5, grace_ms=0, aggregation="count", emit="update")
    assert len(per_record) > len(at_end)
    final = lambda rows: {(r["window_start"]): r["value"] for r in rows}  # noqa: E731
    assert final(per_record) == final(at_end)


def test_bad_configuration_is_reported():
    p = replay(['{"key":"A","value":1,"ts":1}'], "--time-difference-ms", "-1")
    assert p.returncode == 2 and "time_difference_ms must not be negative" in p.stderr
    p = replay(['{"key":"A","value":1,"ts":1}'], "--time-difference-ms", "10", "--retention-ms", "5")
    assert p.returncode == 2 and "retention_ms must be no smaller than" in p.stderr
