"""The development broker's command line: ``python -m devtools.broker_cli start|stop|status|run``.

``start`` detaches a :class:`~devtools.local_broker.LocalKafkaBroker` (plain, or SASL_SSL with ACLs through
:mod:`devtools.secure_broker`), ``stop`` and ``status`` find it by its data folder, ``run`` keeps it in the
foreground until Ctrl-C or SIGTERM. Kept apart from :mod:`devtools.local_broker` so that the broker module does
not import the secure broker that builds on it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from connectors import jars
from devtools.local_broker import (
    DEFAULT_DATA_DIR,
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_START_TIMEOUT_S,
    DEFAULT_STOP_TIMEOUT_S,
    BrokerError,
    LocalKafkaBroker,
    broker_status,
    metadata_ready,
    stop_broker,
)
from devtools.secure_broker import dev_admin_config, dev_sasl_ssl_broker


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m devtools.broker_cli") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status", "run"],
                        help="start (detached), stop, status, or run (foreground until Ctrl-C)")  # fmt: skip
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"client port (default {DEFAULT_PORT}; 0 = free)"
    )
    parser.add_argument("--controller-port", type=int, default=None, help="controller port (default: a free port)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help=f"default {DEFAULT_DATA_DIR}")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT_S, help="start/stop timeout, seconds")
    parser.add_argument("--log-level", default="WARN", help="log4j2 level of <data-dir>/logs/server.log")
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument(
        "--sasl-ssl",
        action="store_true",
        help="the client listener is SASL_SSL (SCRAM-SHA-512) with ACLs enforced; a CA, the broker "
        "and a client certificate are made in <data-dir>/tls, the users' passwords are in "
        "<data-dir>/tls/*.password (devtools.secure_broker)",
    )
    parser.add_argument(
        "--sasl-user",
        action="append",
        default=[],
        metavar="NAME",
        help="with --sasl-ssl: a SCRAM user besides 'admin' (repeatable; default: slidingwindow)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")

    if args.command == "status":
        state = broker_status(args.data_dir)
        if state is None:
            print(f"not running (data dir {Path(args.data_dir).resolve()})")
            return 1
        ok = metadata_ready(state.bootstrap_servers, timeout=5.0, client_config=dev_admin_config(Path(state.data_dir)))
        print(f"{'running' if ok else 'not answering'}: pid {state.pid}, bootstrap {state.bootstrap_servers}, "
              f"Kafka {state.kafka_version}, data {state.data_dir}")  # fmt: skip
        return 0 if ok else 1
    if args.command == "stop":
        stopped = stop_broker(args.data_dir, timeout=args.timeout if args.timeout else DEFAULT_STOP_TIMEOUT_S)
        print("stopped" if stopped else "not running")
        return 0

    running = broker_status(args.data_dir)
    if running is not None:
        print(f"already running: pid {running.pid}, bootstrap {running.bootstrap_servers}")
        return 0 if args.command == "start" else 1
    common: dict[str, Any] = {
        "controller_port": args.controller_port,
        "host": args.host,
        "log_level": args.log_level,
        "detach": args.command == "start",
    }
    if args.sasl_ssl:
        broker = dev_sasl_ssl_broker(
            Path(args.data_dir), args.port or None, args.sasl_user or ["slidingwindow"], **common
        )
    else:
        broker = LocalKafkaBroker(args.port or None, data_dir=args.data_dir, **common)
    try:
        broker.start(timeout=args.timeout)
    except (BrokerError, jars.JarResolutionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Kafka {broker.kafka_version()} running: pid {broker.pid}, bootstrap {broker.bootstrap_servers}, "
          f"ready in {broker.startup_seconds:.1f}s, logs {broker.log_file}")  # fmt: skip
    if args.sasl_ssl:
        tls = Path(args.data_dir).resolve() / "tls"
        print(
            f"SASL_SSL, SCRAM-SHA-512, ACLs enforced (super user admin): CA {tls / 'ca.pem'}, passwords "
            f"{tls}/<user>.password, client certificate {tls / 'client.pem'} + {tls / 'client.key'}"
        )
    if args.command == "start":
        return 0
    # `run`: stop the broker on Ctrl-C and on SIGTERM (a service manager, `kill`).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        while broker.is_running():
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
