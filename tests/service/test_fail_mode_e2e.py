"""``--processing-exception-handler fail`` on the real broker and Spark (issue 29): a record whose processing
raises stops the service with exit code 1 and one ERROR line of the service naming the record's partition and
offset - no Python traceback, Spark stopped.

A record only raises in processing through a bug (bad input is dead-lettered at decode), so the test brings one:
an aggregation ``fragile`` registered the way the built-ins are, in every Python process of the run (the driver
and Spark's Python workers) through a ``sitecustomize`` module on ``PYTHONPATH``. Nothing in the product is
changed for it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap

import pytest

from tests.service.events import Event
from tests.service.harness import ServiceProcess, produce
from tests.service.test_e2e import service_args

pytestmark = pytest.mark.integration

POISON = 424242
AGGS = "count,fragile:amount"

SITECUSTOMIZE = f'''
"""Test-only: registers the aggregation ``fragile`` (a sum that raises for one value) in this Python process."""
from windowstore import aggregations


class Fragile(aggregations.Sum):
    name = "fragile"
    batch_kind = None

    def accumulate(self, acc, value, key=None):
        if value == {POISON}:
            raise ZeroDivisionError(f"fragile cannot add {{value}}")
        return acc + value


aggregations.BUILTINS["fragile"] = Fragile
'''


def _events(partitions: int, per_partition: int, poison_at: tuple[int, int], t0: int = 1_700_000_000_000):
    out = []
    for p in range(partitions):
        for i in range(per_partition):
            amount = POISON if (p, i) == poison_at else i + 1
            value = json.dumps({"amount": amount}).encode()
            out.append(Event(p, f"acct-{p}-{i % 3}".encode(), value, t0 + 100 * i))
    return out


def test_fail_mode_stops_with_exit_1_and_one_line_naming_partition_and_offset(kafka_bootstrap, make_topic, tmp_path):
    topics = {
        "in": make_topic(3, config={"retention.ms": "-1"}, prefix="in"),
        "out": make_topic(3, config={"cleanup.policy": "compact"}, prefix="out"),
        "late": make_topic(3, prefix="late"),
        "dlq": make_topic(3, prefix="dlq"),
    }
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    produce(kafka_bootstrap, topics["in"], _events(3, 20, poison_at=(1, 7)))

    args = service_args(
        kafka_bootstrap,
        topics,
        tmp_path / "checkpoint",
        *("--changelog-format", "json", "--changelog-key-format", "json"),
        *("--processing-exception-handler", "fail"),
    )
    args[args.index("--aggregations") + 1] = AGGS
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    svc = ServiceProcess(args, tmp_path / "service.log", env={"PYTHONPATH": path}).start()
    try:
        assert svc.proc is not None
        rc = svc.proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the service did not stop on the failing record:\n{svc.tail()}")
    finally:
        svc.stop()
    log = (tmp_path / "service.log").read_text(errors="replace")
    assert rc == 1, svc.tail()
    ours = [ln for ln in log.splitlines() if re.match(r"\S+ \S+ ERROR (service|connectors)", ln)]
    assert len(ours) == 1, "\n".join(ours) or svc.tail()
    assert f"processing the record at offset 7 of {topics['in']}-1 raised ZeroDivisionError" in ours[0]
    assert "processing_exception_handler=fail" in ours[0]
    assert "Traceback" not in log, svc.tail()  # neither the driver's nor Spark's logs of the failed task
