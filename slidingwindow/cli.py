"""``slidingwindow COMMAND ...``: the installed product's command line.

This package sits above every other one: it only dispatches to each package's own command line, so the layers
below stay one-way (``service`` -> ``connectors`` -> ``windowstore``; ``devtools`` beside them, never imported by
them).

==================  =========================================================================================
``run``             the streaming service (:mod:`service.cli`; every setting a flag or ``SLIDINGWINDOW_*``)
``check-settings``  validate the settings and print them (:mod:`service.cli`)
``replay``          events (JSON lines on stdin) through one task, updates to stdout (:mod:`windowstore.replay`)
``broker``          development Kafka broker: ``start|stop|status|run`` (:mod:`devtools.broker_cli`)
``demo``            local broker + payments producer + the service + a live view (:mod:`devtools.demo`)
``jars``            resolve JVM artifact sets with Maven into the jar cache (:mod:`devtools.broker_jars`)
==================  =========================================================================================
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

__all__ = ["COMMANDS", "main"]

PROG = "slidingwindow"
EXIT_USAGE = 2


def _service(argv: list[str]) -> int:
    from service.cli import main

    return main(argv, prog=PROG)


def _replay(argv: list[str]) -> int:
    from windowstore.replay import main

    return main(argv[1:])


def _broker(argv: list[str]) -> int:
    from devtools.broker_cli import main

    return main(argv[1:], prog=f"{PROG} broker")


def _demo(argv: list[str]) -> int:
    from devtools.demo import main

    return main(argv[1:], prog=f"{PROG} demo")


def _jars(argv: list[str]) -> int:
    from devtools.broker_jars import main

    return main(argv[1:], prog=f"{PROG} jars")


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "run": (_service, "run the streaming service until interrupted (Kafka in, changelog out)"),
    "check-settings": (_service, "validate the settings and print them"),
    "replay": (_replay, "replay JSON-lines events from stdin through one task; window updates to stdout"),
    "broker": (_broker, "development Kafka broker (KRaft, Maven-resolved jars): start | stop | status | run"),
    "demo": (_demo, "local broker + payments producer + the service + a live view, until Ctrl-C"),
    "jars": (_jars, "resolve a JVM artifact set (spark-kafka, kafka) with Maven into the jar cache"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        f"usage: {PROG} COMMAND [options]   ({PROG} COMMAND --help for a command's options)",
        "",
        "Sliding-window aggregation with Kafka Streams SlidingWindows semantics on Spark Structured Streaming.",
        "",
        "commands:",
        *(f"  {name.ljust(width)}  {text}" for name, (_fn, text) in COMMANDS.items()),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0 if args else EXIT_USAGE
    entry = COMMANDS.get(args[0])
    if entry is None:
        sys.stderr.write(f"{PROG}: unknown command {args[0]!r}\n\n{usage()}")
        return EXIT_USAGE
    try:
        return entry[0](args)
    except ModuleNotFoundError as e:
        if e.name != "devtools":
            raise
        sys.stderr.write(
            f"{PROG} {args[0]}: the development tools (devtools) are not installed here; "
            "install the slidingwindow wheel (the service image leaves them out)\n"
        )
        return EXIT_USAGE
