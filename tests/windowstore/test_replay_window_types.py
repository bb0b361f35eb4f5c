"""`python -m windowstore replay --window tumbling|hopping|session`: output contract and flag errors."""

from __future__ import annotations

import io
import json

import pytest

from windowstore.replay import run

RECS = [{"key": "A", "value": v, "ts": t} for v, t in ((1, 1000), (2, 1004), (3, 1030), (4, 1002))]


def replay(recs: list[dict], *args: str) -> tuple[int, list[dict], str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(args), io.StringIO("".join(json.dumps(r) + "\n" for r in recs)), out, err)
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def test_tumbling_end_is_exclusive() -> None:
    code, out, err = replay(RECS, "--window", "tumbling", "--size-ms", "10", "--emit", "every", "--aggregation", "sum")
    assert code == 0, err
    assert [(u["window_start"], u["window_end"], u["value"], u["ts"]) for u in out] == [
        (1000, 1010, 1, 1000),
        (1000, 1010, 3, 1004),
        (1030, 1040, 3, 1030),
    ]
    summary = json.loads(err.strip().splitlines()[-1])
    assert summary["records"] == 4 and summary["dropped_records_total"] == 1


def test_hopping_with_advance_not_dividing_size() -> None:
    code, out, _ = replay(
        RECS[:1],
        "--window",
        "hopping",
        "--size-ms",
        "10",
        "--advance-ms",
        "4",
        "--emit",
        "every",
        "--aggregation",
        "count",
    )
    assert code == 0
    assert [(u["window_start"], u["window_end"]) for u in out] == [(992, 1002), (996, 1006), (1000, 1010)]


def test_session_tombstone_is_a_null_value_line() -> None:
    code, out, _ = replay(RECS[:2], "--window", "session", "--gap-ms", "5", "--emit", "every")
    assert code == 0
    assert out == [
        {"key": "A", "window_start": 1000, "window_end": 1000, "value": [1], "ts": 1000},
        {"key": "A", "window_start": 1000, "window_end": 1000, "value": None, "ts": 1000},
        {"key": "A", "window_start": 1000, "window_end": 1004, "value": [1, 2], "ts": 1004},
    ]


def test_update_mode_flush_every() -> None:
    code, out, _ = replay(
        RECS[:2],
        "--window",
        "tumbling",
        "--size-ms",
        "10",
        "--emit",
        "update",
        "--flush-every",
        "2",
        "--aggregation",
        "count",
    )
    assert code == 0 and [u["value"] for u in out] == [2]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--window", "tumbling"], "--window tumbling needs --size-ms"),
        (
            ["--window", "tumbling", "--size-ms", "10", "--advance-ms", "5"],
            "--advance-ms does not apply to --window tumbling",
        ),
        (["--window", "hopping", "--size-ms", "10"], "--window hopping needs --advance-ms"),
        (["--window", "hopping", "--size-ms", "10", "--advance-ms", "11"], "advance_ms must be no larger than size_ms"),
        (["--window", "session"], "--window session needs --gap-ms"),
        (["--window", "session", "--gap-ms", "5", "--size-ms", "3"], "--size-ms does not apply to --window session"),
        (["--window", "sliding", "--gap-ms", "5", "--time-difference-ms", "3"], "--gap-ms does not apply"),
        (["--time-difference-ms", "5", "--size-ms", "3"], "--size-ms does not apply to --window sliding"),
        (["--window", "session", "--gap-ms", "-1"], "gap_ms must not be negative"),
        (["--window", "weekly"], "invalid choice: 'weekly'"),
        (["--window", "session", "--gap-ms", "5", "--flush-every", "0"], "--flush-every must be at least 1"),
    ],
)
def test_bad_flags_give_one_line_errors(args: list[str], message: str) -> None:
    code, out, err = replay(RECS, *args)
    assert code == 2 and out == []
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err


def test_null_value_with_numeric_aggregation_names_the_line() -> None:
    recs: list[dict] = [*RECS[:1], {"key": "A", "value": None, "ts": 1001}]
    code, _, err = replay(recs, "--window", "session", "--gap-ms", "5", "--aggregation", "sum")
    assert code == 2 and "line 2" in err and "null value" in err
    code, out, _ = replay(recs, "--window", "session", "--gap-ms", "5", "--aggregation", "count", "--emit", "every")
    assert code == 0 and out[-1]["value"] == 2  # null values are aggregated (S11)


README_RECS = [{"key": "A", "value": v, "ts": t} for v, t in ((1, 8000), (2, 9200), (3, 12400))]


@pytest.mark.parametrize(
    ("recs", "args", "windows"),
    [
        (
            README_RECS,
            ("--window", "tumbling", "--size-ms", "5000", "--emit", "update"),
            [(5000, 10000, [1, 2]), (10000, 15000, [3])],
        ),
        (
            README_RECS,
            ("--window", "hopping", "--size-ms", "5000", "--advance-ms", "2000", "--emit", "update"),
            [
                (4000, 9000, [1]),
                (6000, 11000, [1, 2]),
                (8000, 13000, [1, 2, 3]),
                (10000, 15000, [3]),
                (12000, 17000, [3]),
            ],
        ),
        (
            [README_RECS[0], README_RECS[2] | {"value": 2}, README_RECS[1] | {"value": 3, "ts": 10300}],
            ("--window", "session", "--gap-ms", "2500", "--grace-ms", "5000", "--emit", "every"),
            [
                (8000, 8000, [1]),
                (12400, 12400, [2]),
                (8000, 8000, None),
                (12400, 12400, None),
                (8000, 12400, [1, 2, 3]),
            ],
        ),
        (  # the README's remark: with grace 0 the first session is past retention, 10300 does not bridge
            [README_RECS[0], README_RECS[2] | {"value": 2}, README_RECS[1] | {"value": 3, "ts": 10300}],
            ("--window", "session", "--gap-ms", "2500", "--grace-ms", "0", "--emit", "every"),
            [(8000, 8000, [1]), (12400, 12400, [2]), (12400, 12400, None), (10300, 12400, [2, 3])],
        ),
    ],
    ids=["tumbling", "hopping", "session", "session-grace-0"],
)
def test_the_readme_examples(recs: list[dict], args: tuple[str, ...], windows: list[tuple]) -> None:
    """README "The other window types": the timelines there are this output."""
    code, out, err = replay(recs, *args, "--aggregation", "collect")
    assert code == 0, err
    assert [(u["window_start"], u["window_end"], u["value"]) for u in out] == windows
