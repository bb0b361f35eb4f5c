"""``python -m windowstore replay ...``: see :mod:`windowstore.replay`."""

import sys

from .replay import main


def _entry() -> int:
    argv = sys.argv[1:]
    if not argv or argv[0] != "replay":
        sys.stderr.write(
            "usage: python -m windowstore replay [--window sliding|tumbling|hopping|session] "
            "[--time-difference-ms D | --size-ms S [--advance-ms A] | --gap-ms G] [--grace-ms G] "
            "[--aggregation A] [--emit every|update|close] [--flush-every N]\n"
        )
        return 2
    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(_entry())
