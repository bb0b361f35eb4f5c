"""Replay a file of events through one task and print what the service would emit.

``python -m windowstore replay --time-difference-ms D --grace-ms G --aggregation collect --emit every``
(sliding windows, the default ``--window``), ``--window tumbling --size-ms S``, ``--window hopping --size-ms S
--advance-ms A`` or ``--window session --gap-ms G`` reads JSON lines ``{"key": str, "value": any, "ts": int}``
from stdin (one task, arrival order) and writes one
JSON line per emitted update: ``{"key", "window_start", "window_end", "value", "ts"}`` (time windows: end
exclusive, ``Window.end()``; a session replaced by a merge or an extension: ``"value": null``). A summary line goes to
stderr: ``records``, ``dropped_records`` (late at entry, R8), ``dropped_records_total`` (Kafka Streams'
``dropped-records-total`` sensor: null key/value, invalid timestamp, late, and skipped closed windows) and
the other processor counters. A malformed line is an error naming the line number (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn, TextIO

from .aggregations import BUILTINS, Aggregation, parse_aggregations
from .processor import SlidingWindowProcessor
from .session_windows import SessionWindowProcessor, SessionWindows
from .task_processors import WINDOW_TYPES
from .time_windows import TimeWindowProcessor, TimeWindows
from .updates import EmitMode, WindowUpdate
from .windows import ConfigError, SlidingWindows

__all__ = [
    "WINDOW_TYPES",
    "ReplayInputError",
    "main",
    "parse_lines",
    "replay_family_records",
    "replay_records",
    "update_to_json",
]

REPLAY_AGGREGATIONS = ("collect", "count", "sum", "min", "max", "mean")
_NUMERIC = {"sum", "min", "max", "mean", "variance", "stddev"}


class ReplayInputError(ValueError):
    """A malformed input line; ``line`` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def parse_lines(lines: Iterable[str], aggregation: str | None = None) -> Iterator[dict[str, Any]]:
    """Parse and validate JSON-lines records; blank lines are skipped."""
    numeric = aggregation in _NUMERIC
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayInputError(n, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(rec, dict):
            raise ReplayInputError(n, f"expected a JSON object, got {type(rec).__name__}")
        missing = [f for f in ("key", "value", "ts") if f not in rec]
        if missing:
            raise ReplayInputError(n, f"missing field(s) {', '.join(missing)}")
        ts = rec["ts"]
        if isinstance(ts, bool) or not isinstance(ts, int):
            raise ReplayInputError(n, f"ts must be an integer number of milliseconds, got {ts!r}")
        v = rec["value"]
        if numeric and v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ReplayInputError(n, f"aggregation {aggregation!r} needs a numeric value, got {v!r}")
        yield rec


def update_to_json(u: WindowUpdate) -> dict[str, Any]:
    return {"key": u.key, "window_start": u.start, "window_end": u.end, "value": u.value, "ts": u.ts}


def _hashable_key(key: Any) -> Any:
    if isinstance(key, (list, dict)):
        return json.dumps(key, sort_keys=True)
    return key


def replay_records(
    records: Iterable[dict[str, Any]],
    *,
    time_difference_ms: int,
    grace_ms: int,
    aggregation: str | Aggregation,
    emit: str | EmitMode,
    flush_every: int | None = None,
    retention_ms: int | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run ``records`` (dicts with key, value, ts) through one processor; returns (updates, summary)."""
    windows = SlidingWindows(time_difference_ms, grace_ms, retention_ms)
    agg = parse_aggregations(aggregation) if isinstance(aggregation, str) else aggregation
    mode = EmitMode.parse(emit)
    if flush_every is not None and flush_every < 1:
        raise ConfigError(f"flush_every must be at least 1, got {flush_every}")
    proc = SlidingWindowProcessor(windows, agg, mode)
    return _drive(proc, records, mode, flush_every, held=lambda: len(proc.store))


def replay_family_records(
    records: Iterable[dict[str, Any]],
    *,
    window: str,
    grace_ms: int,
    aggregation: str | Aggregation,
    emit: str | EmitMode,
    size_ms: int | None = None,
    advance_ms: int | None = None,
    gap_ms: int | None = None,
    flush_every: int | None = None,
    retention_ms: int | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Tumbling, hopping or session windows: run ``records`` through one processor of
    :mod:`windowstore.time_windows` / :mod:`windowstore.session_windows`; returns (updates, summary)."""
    agg = parse_aggregations(aggregation) if isinstance(aggregation, str) else aggregation
    mode = EmitMode.parse(emit)
    if flush_every is not None and flush_every < 1:
        raise ConfigError(f"flush_every must be at least 1, got {flush_every}")
    proc: TimeWindowProcessor | SessionWindowProcessor
    if window == "session":
        if gap_ms is None:
            raise ConfigError("session windows need gap_ms")
        proc = SessionWindowProcessor(SessionWindows(gap_ms, grace_ms, retention_ms), agg, mode)
    elif window in ("tumbling", "hopping"):
        if size_ms is None:
            raise ConfigError(f"{window} windows need size_ms")
        if window == "hopping" and advance_ms is None:
            raise ConfigError("hopping windows need advance_ms")
        proc = TimeWindowProcessor(
            TimeWindows(size_ms, advance_ms if window == "hopping" else None, grace_ms, retention_ms), agg, mode
        )
    else:
        raise ConfigError(f"window must be one of {', '.join(WINDOW_TYPES[1:])} here, got {window!r}")
    return _drive(proc, records, mode, flush_every, held=proc.__len__)


def _drive(
    proc: Any,
    records: Iterable[dict[str, Any]],
    mode: EmitMode,
    flush_every: int | None,
    held: Callable[[], int],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Feed ``records`` to any window processor in arrival order (update mode: a flush every ``flush_every``
    records, and one at the end); returns the updates as JSON-ready dicts and the summary (``held``: how many
    windows the processor holds at the end)."""
    out: list[dict[str, Any]] = []
    n = 0
    for rec in records:
        n += 1
        for u in proc.process(_hashable_key(rec["key"]), rec["value"], rec["ts"]):
            out.append(update_to_json(u))
        if mode is EmitMode.UPDATE and flush_every and n % flush_every == 0:
            out.extend(update_to_json(u) for u in proc.flush())
    out.extend(update_to_json(u) for u in proc.flush())
    summary: dict[str, Any] = {"records": n, "dropped_records": proc.stats.dropped_late}
    summary.update(proc.stats.as_dict())
    summary["windows"] = held()
    summary["observed_stream_time"] = proc.observed_stream_time
    return out, summary


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m windowstore replay",
        description="Replay JSON-lines events through Kafka Streams window semantics (one task): sliding "
        "(SlidingWindows), tumbling / hopping (TimeWindows) or session (SessionWindows) windows.",
    )
    p.add_argument("--window", default="sliding", choices=WINDOW_TYPES, help="window type (default sliding)")
    p.add_argument(
        "--time-difference-ms",
        type=int,
        default=None,
        help="sliding: max time difference td (inclusive); required for sliding",
    )
    p.add_argument("--size-ms", type=int, default=None, help="tumbling and hopping: window size (end exclusive)")
    p.add_argument("--advance-ms", type=int, default=None, help="hopping: advance between window starts")
    p.add_argument("--gap-ms", type=int, default=None, help="session: inactivity gap")
    p.add_argument("--grace-ms", type=int, default=0, help="grace period after a window's end (default 0)")
    p.add_argument(
        "--aggregation",
        default="collect",
        help=f"one of {', '.join(REPLAY_AGGREGATIONS)} (also: {', '.join(sorted(set(BUILTINS) - set(REPLAY_AGGREGATIONS)))})",  # noqa: E501
    )
    p.add_argument("--emit", default="update", choices=[m.value for m in EmitMode], help="emit mode")
    p.add_argument("--flush-every", type=int, default=None, help="update mode: flush after every N records")
    p.add_argument(
        "--retention-ms",
        type=int,
        default=None,
        help="store retention (default sliding 2*td + grace, time windows size + grace, sessions gap + grace)",
    )
    return p


#: flags each window type takes (besides --window, --grace-ms, --aggregation, --emit, --flush-every, --retention-ms)
_TYPE_FLAGS = {
    "sliding": {"time_difference_ms": True},
    "tumbling": {"size_ms": True},
    "hopping": {"size_ms": True, "advance_ms": True},
    "session": {"gap_ms": True},
}
_FLAG_NAMES = ("time_difference_ms", "size_ms", "advance_ms", "gap_ms")


def _check_combination(args: argparse.Namespace) -> str | None:
    """One line saying what is wrong with the window flags, or None."""
    wanted = _TYPE_FLAGS[args.window]
    for name in _FLAG_NAMES:
        flag = "--" + name.replace("_", "-")
        given = getattr(args, name) is not None
        if given and name not in wanted:
            takes = " and ".join("--" + n.replace("_", "-") for n in wanted)
            return f"{flag} does not apply to --window {args.window} (it takes {takes})"
        if not given and name in wanted:
            return f"--window {args.window} needs {flag}"
    if args.flush_every is not None and args.flush_every < 1:
        return f"--flush-every must be at least 1, got {args.flush_every}"
    return None


def _family_lines(records: Iterable[dict[str, Any]], aggregation: str) -> Iterator[dict[str, Any]]:
    """Time and session windows aggregate null values (T11/S11): a numeric aggregation cannot, so a null value
    is an input error there (sliding windows drop it instead)."""
    numeric = aggregation in _NUMERIC
    for rec in records:
        if numeric and rec["value"] is None:
            raise ReplayInputError(
                rec.get("_line", 0),
                f"aggregation {aggregation!r} cannot aggregate a null value "
                "(time and session windows aggregate null values)",
            )
        yield rec


def _numbered(lines: Iterable[str], aggregation: str) -> Iterator[dict[str, Any]]:
    """``parse_lines`` with each record's line number kept for :func:`_family_lines`' errors."""
    counter = {"n": 0}

    def counting() -> Iterator[str]:
        for line in lines:
            counter["n"] += 1
            yield line

    for rec in parse_lines(counting(), aggregation):
        yield dict(rec, _line=counter["n"])


def run(argv: list[str], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _ArgumentError as exc:
        stderr.write(f"error: {exc}\n")
        return 2
    problem = _check_combination(args)
    if problem is not None:
        stderr.write(f"error: {problem}\n")
        return 2
    if args.aggregation not in BUILTINS:
        stderr.write(f"error: unknown aggregation {args.aggregation!r}; known: {', '.join(sorted(BUILTINS))}\n")
        return 2
    try:
        if args.window == "sliding":
            updates, summary = replay_records(
                parse_lines(stdin, args.aggregation),
                time_difference_ms=args.time_difference_ms,
                grace_ms=args.grace_ms,
                aggregation=args.aggregation,
                emit=args.emit,
                flush_every=args.flush_every,
                retention_ms=args.retention_ms,
            )
        else:
            updates, summary = replay_family_records(
                _family_lines(_numbered(stdin, args.aggregation), args.aggregation),
                window=args.window,
                size_ms=args.size_ms,
                advance_ms=args.advance_ms,
                gap_ms=args.gap_ms,
                grace_ms=args.grace_ms,
                aggregation=args.aggregation,
                emit=args.emit,
                flush_every=args.flush_every,
                retention_ms=args.retention_ms,
            )
    except ReplayInputError as exc:
        stderr.write(f"error: {exc}\n")
        return 2
    except ConfigError as exc:
        stderr.write(f"error: {exc}\n")
        return 2
    write = stdout.write
    for u in updates:
        write(json.dumps(u, separators=(",", ":")) + "\n")
    stderr.write(json.dumps(summary) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv, sys.stdin, sys.stdout, sys.stderr)
