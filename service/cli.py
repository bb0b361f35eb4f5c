"""Command line: ``python -m service run [--flag value ...]`` (every setting also from ``SLIDINGWINDOW_*``)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from service.settings import SettingsError, add_arguments, from_args, join_negative_values

__all__ = ["main", "build_parser"]

EXIT_USAGE = 2


def build_parser(prog: str = "python -m service") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        description="Sliding-window aggregation (Kafka Streams SlidingWindows semantics) on Spark Structured "
        "Streaming: Kafka in, changelog out.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        allow_abbrev=False,
        help="run the streaming service until interrupted",
        description="Run the streaming service. Every setting is a flag or an environment variable "
        "SLIDINGWINDOW_<NAME>; a flag wins over the variable. Durations: 1500ms, 10s, 5m, 1h or ms.",
    )
    add_arguments(run)
    check = sub.add_parser("check-settings", allow_abbrev=False, help="validate the settings and print them")
    add_arguments(check)
    return parser


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("py4j", "py4j.clientserver", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m service") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(join_negative_values(sys.argv[1:] if argv is None else argv))
    try:
        settings = from_args(args)
    except SettingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    _configure_logging(settings.log_level)
    if args.command == "check-settings":
        for name, value in settings.describe().items():
            print(f"{name} = {value!r}")
        return 0
    from service.driver import ServiceError, run

    try:
        return run(settings)
    except SettingsError as e:  # found at start (e.g. the metrics port is in use)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ServiceError as e:
        logging.getLogger("service").error("%s", e)
        return 1
    except KeyboardInterrupt:
        return 130
