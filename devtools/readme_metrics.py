"""The README's metrics table, written from the metric declarations (:func:`service.metrics.readme_table`): a new
metric is declared once (:class:`service.task.stats.MetricSpec`) and its row follows from it.

CLI::

    python -m devtools.readme_metrics            # rewrite the table in README.md
    python -m devtools.readme_metrics --check    # exit 1 when README.md's table is not the declared one
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from service.metrics import readme_table

__all__ = ["HEADER", "with_table", "main"]

#: the first line of the table in the README
HEADER = "| metric | type | meaning |"


def with_table(readme: str, table: str) -> str:
    """``readme`` with its metrics table (from :data:`HEADER` to the next blank line) replaced by ``table``."""
    start = readme.find(HEADER)
    if start < 0:
        raise ValueError(f"no metrics table (a line {HEADER!r}) in the README")
    end = readme.find("\n\n", start)
    end = len(readme) if end < 0 else end + 1
    return readme[:start] + table + readme[end:]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.readme_metrics", description=__doc__.split("\n\n")[0])
    ap.add_argument("readme", nargs="?", type=Path, default=Path("README.md"))
    ap.add_argument("--check", action="store_true", help="only check; exit 1 when the table differs")
    args = ap.parse_args(argv)
    text = args.readme.read_text()
    new = with_table(text, readme_table())
    if new == text:
        return 0
    if args.check:
        print(f"{args.readme}: the metrics table is not the declared one (python -m devtools.readme_metrics)")
        return 1
    args.readme.write_text(new)
    print(f"{args.readme}: metrics table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
