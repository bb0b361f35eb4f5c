"""service/spark/task_rows.py: a task's rows in either form a worker hands them (Arrow record batches from the
service's worker, Rows from pyspark's) give the same batch and the same output, in the form they came in."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql import Row  # noqa: E402

from service.spark import task_rows  # noqa: E402
from tests.service.harness import json_task_config  # noqa: E402

COLUMNS = ["topic", "partition", "offset", "key", "value", "ts"]


def _arrow(records: list[tuple[Any, ...]], cut: int) -> list[Any]:
    """``records`` as record batches of at most ``cut`` rows (as a key's runs come from several batches)."""
    batches = []
    for i in range(0, len(records), cut):
        chunk = records[i : i + cut]
        batches.append(
            pa.record_batch(
                [
                    pa.array([r[0] for r in chunk], pa.string()),
                    pa.array([r[1] for r in chunk], pa.int32()),
                    pa.array([r[2] for r in chunk], pa.int64()),
                    pa.array([r[3] for r in chunk], pa.binary()),
                    pa.array([r[4] for r in chunk], pa.binary()),
                    pa.array([r[5] for r in chunk], pa.int64()),
                ],
                names=COLUMNS,
            )
        )
    return batches


def _rows(records: list[tuple[Any, ...]]) -> list[Any]:
    make = Row(*COLUMNS)
    return [make(*r) for r in records]


records_st = st.lists(
    st.tuples(
        st.just("in"),
        st.just(0),
        st.integers(0, 50),
        st.one_of(st.none(), st.binary(max_size=3)),
        st.one_of(st.none(), st.binary(max_size=3)),
        st.one_of(st.none(), st.integers(-5, 10**13)),
    ),
    min_size=1,
    max_size=30,
    unique_by=lambda r: r[2],  # offsets are unique within a partition
)


@settings(max_examples=200, deadline=None)
@given(records_st, st.integers(1, 7))
def test_both_forms_give_the_columns_in_offset_order(records, cut):
    expected = sorted(records, key=lambda r: r[2])
    columns = ([r[2] for r in expected], [r[3] for r in expected], [r[4] for r in expected], [r[5] for r in expected])
    assert task_rows.input_columns(_arrow(records, cut)) == columns
    assert task_rows.input_columns(_rows(records)) == columns


class _Value:
    def __init__(self) -> None:
        self.value: Any = None

    def get(self) -> Any:
        return self.value

    def update(self, value: Any) -> None:
        self.value = value


class _Map:
    def __init__(self) -> None:
        self.values: dict[Any, Any] = {}

    def getValue(self, key: Any) -> Any:
        return self.values.get(key)

    def updateValue(self, key: Any, value: Any) -> None:
        self.values[key] = value

    def removeKey(self, key: Any) -> None:
        self.values.pop(key, None)


def _run(items: list[Any], sink: str) -> list[Any]:
    config = json_task_config("count", sink=sink)
    return list(task_rows.handle_rows(config, _Value(), _Map(), ("in", 0), iter(items)))


def _records() -> list[tuple[Any, ...]]:
    payload = [json.dumps({"amount": i}).encode() for i in range(6)]
    out = [("in", 0, i, b"k%d" % (i % 2), payload[i], 1_000 + 100 * i) for i in range(6)]
    out.append(("in", 0, 6, b"k0", b"not json", 1_600))  # dead-lettered: a row with headers
    out.append(("in", 0, 7, b"k0", payload[0], 10))  # late: dropped by grace
    return list(reversed(out))


def _no_clock(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows without what reads the clock: the changelog's ``emit_time``, the stats row's timings (its counter
    count stays)."""
    for r in rows:
        if r["value"] is not None:
            r["value"] = re.sub(rb'"emit_time":\d+', b"", r["value"])
        if r["stats"] is not None:
            r["stats"] = len(r["stats"])
    return rows


def test_the_output_comes_back_in_the_inputs_form():
    arrow = _run(_arrow(_records(), 3), "spark")
    rows = _run(_rows(_records()), "spark")
    assert len(arrow) == 1 and isinstance(arrow[0], pa.RecordBatch)
    assert arrow[0].schema == task_rows.output_arrow_schema()
    assert all(isinstance(r, Row) for r in rows)
    assert _no_clock([r.asDict(True) for r in rows]) == _no_clock(arrow[0].to_pylist())
    kinds = [r["kind"] for r in rows]
    assert kinds[-1] == "stats" and {"changelog", "dlq"} <= set(kinds), kinds
    assert rows[-1]["task_topic"] == "in" and rows[-1]["task_partition"] == 0


def test_no_records_no_output():
    assert _run([], "spark") == []
    assert _run([_arrow(_records(), 8)[0].slice(0, 0)], "spark") == []
