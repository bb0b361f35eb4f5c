"""The container health check: healthy means *processing*, not only "the metrics port answers".

``python -m service.healthcheck`` (the image's ``HEALTHCHECK``, docker-compose's ``healthcheck``) reads the driver's
own ``/metrics`` and exits 0 only when the query has reported progress recently::

    query start          first progress            now
        |--------------------|-------- ... ---------|
                             last_progress_timestamp_seconds
                                                   |<-- age -->|   healthy iff 0 < last <= now and age <= max age

``slidingwindow_last_progress_timestamp_seconds`` is set on every micro-batch (with or without data) and on every idle
event Spark's listener reports (an idle query reports one every ``spark.sql.streaming.noDataProgressEventInterval``, 10
s), so a running query refreshes it at least every few seconds whether input arrives or not. It stays 0 until the first
micro-batch ends: a container whose query has not started yet (Kafka unreachable, checkpoint unreadable) is unhealthy
after the start period, and so is one stuck inside a micro-batch for longer than the maximum age.

Settings (environment): ``SLIDINGWINDOW_METRICS_PORT`` (9108), ``SLIDINGWINDOW_HEALTH_MAX_AGE`` (seconds, 120: longer
than a long micro-batch; the alert ``SlidingWindowNoProgress`` waits 10 minutes). Exit 0 healthy, 1 unhealthy, with
one line saying why (Docker keeps it in ``docker inspect``'s health log).
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request

__all__ = ["check", "main", "PROGRESS_METRIC"]

PROGRESS_METRIC = "slidingwindow_last_progress_timestamp_seconds"
DEFAULT_MAX_AGE_S = 120.0
TIMEOUT_S = 4.0


def check(metrics_text: str, now: float, max_age_s: float) -> tuple[bool, str]:
    """``(healthy, reason)`` from the text of ``/metrics`` (pure; tested without a service)."""
    last = None
    for line in metrics_text.splitlines():
        if line.startswith(PROGRESS_METRIC + " "):
            try:
                last = float(line.split()[1])
            except (IndexError, ValueError):
                return False, f"unreadable {PROGRESS_METRIC} line: {line!r}"
    if last is None:
        return False, f"{PROGRESS_METRIC} missing from /metrics"
    if last <= 0:
        return False, "the query has not completed a micro-batch yet"
    age = now - last
    if age > max_age_s:
        return False, f"no query progress for {age:.0f}s (more than {max_age_s:.0f}s)"
    return True, f"processing: last progress {max(age, 0.0):.1f}s ago"


def main() -> int:
    port = int(os.environ.get("SLIDINGWINDOW_METRICS_PORT") or 9108)
    max_age = float(os.environ.get("SLIDINGWINDOW_HEALTH_MAX_AGE") or DEFAULT_MAX_AGE_S)
    if port == 0:
        print("unhealthy: metrics are off (SLIDINGWINDOW_METRICS_PORT=0), progress cannot be read")
        return 1
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=TIMEOUT_S) as response:
            text = response.read().decode("utf-8", "replace")
    except OSError as e:
        print(f"unhealthy: /metrics on port {port} does not answer: {e}")
        return 1
    healthy, reason = check(text, time.time(), max_age)
    print(("healthy: " if healthy else "unhealthy: ") + reason)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
