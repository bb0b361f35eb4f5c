"""Observability end to end, ONE short run on the real broker and Spark: ``python -m service run`` with
``/metrics`` on a free port, a real Prometheus (the distribution's package) scraping it every second with the
project's alert rules loaded, input produced before and during the run.

* the numbers on ``/metrics`` equal the records actually sent through (consumed = sent; aggregated + late +
  dead-lettered = sent, each equal to the windowstore replay; produced = what is in the output topics);
* ``promtool check metrics`` passes on a real scrape;
* every Grafana dashboard panel query returns data through Prometheus' HTTP API;
* every alert expression evaluates without error (and Prometheus' own rule evaluation reports them healthy);
* the dashboard picture renders from that Prometheus (deploy/grafana/render.py).
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from service.metrics import DEAD_LETTER_REASONS
from service.task.stats import DESERIALIZATION_REASONS
from tests.deploy.prometheus_server import PrometheusServer, free_port
from tests.deploy.promtool import ensure_prometheus
from tests.service.events import payment_events, replay
from tests.service.harness import ServiceProcess, consume_all, produce, wait_until_committed

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "slidingwindow.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
AGGS = "count,sum:amount"
TD, GRACE = 1000, 300
PARTITIONS = 2
N = 2400


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def run(kafka_bootstrap, tmp_path_factory):
    """Produce, run the service under Prometheus until everything is committed and on /metrics; yields the
    facts; stops both."""
    from confluent_kafka.admin import AdminClient, NewTopic

    ensure_prometheus()  # from the distribution's packages, as make test does
    tmp = tmp_path_factory.mktemp("observability")
    suffix = f"{time.monotonic_ns()}"
    topics = {k: f"obs-{k}-{suffix}" for k in ("in", "out", "late", "dlq")}
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    fs = admin.create_topics(
        [
            NewTopic(t, num_partitions=PARTITIONS, replication_factor=1, config={"retention.ms": "-1"})
            for t in topics.values()
        ]
    )
    for f in fs.values():
        f.result(timeout=60)

    # event time ends a few seconds before now: realistic end-to-end latencies
    events = payment_events(
        N, keys=8, partitions=PARTITIONS, td=TD, grace=GRACE, seed=404, base_ts=int(time.time() * 1000) - 130_000
    )
    first, rest = events[: N // 2], events[N // 2 :]
    produce(kafka_bootstrap, topics["in"], first)

    port = free_port()
    prom = PrometheusServer(tmp / "prometheus", [f"127.0.0.1:{port}"], [ALERTS]).start()
    ck = tmp / "checkpoint"
    svc = ServiceProcess([
        "--bootstrap-servers", kafka_bootstrap, "--input-topics", topics["in"], "--changelog-topic", topics["out"],
        "--late-topic", topics["late"], "--dead-letter-topic", topics["dlq"], "--aggregations", AGGS,
        "--time-difference", f"{TD}ms", "--grace", f"{GRACE}ms", "--checkpoint-dir", str(ck),
        "--trigger-interval", "500ms", "--state-partitions", "2", "--spark-master", "local[2]",
        "--max-offsets-per-trigger", "400", "--changelog-format", "json", "--changelog-key-format", "json",
        "--metrics-port", str(port),
    ], tmp / "service.log").start()  # fmt: skip

    def trickle():  # the second half arrives while the service runs (in-order per partition)
        for i in range(0, len(rest), 120):
            produce(kafka_bootstrap, topics["in"], rest[i : i + 120])
            time.sleep(0.7)

    started = time.time()
    try:
        # the trickle starts once the service answers on /metrics (before the Spark session is up)
        deadline = time.monotonic() + 120
        while True:
            try:
                scrape(port)
                break
            except OSError:
                assert svc.alive(), svc.tail()
                assert time.monotonic() < deadline, svc.tail()
                time.sleep(0.5)
        producer = threading.Thread(target=trickle, daemon=True)
        producer.start()
        producer.join(timeout=120)
        ends = {p: sum(1 for e in events if e.partition == p) for p in range(PARTITIONS)}
        wait_until_committed(ck, topics["in"], ends, svc, timeout=300)
        deadline = time.monotonic() + 60
        while value(scrape(port), "slidingwindow_records_consumed_total") < N:
            assert time.monotonic() < deadline, "consumed never reached the records sent"
            time.sleep(0.5)
        # panel queries are evaluated at this moment: the last micro-batches are inside their [1m] rate windows
        # however long the checks below take
        done_at = time.time() + 3
        # Prometheus has scraped the final numbers and the lag poller (5 s) has run after the last batch
        deadline = time.monotonic() + 60
        while True:
            r = prom.query("slidingwindow_records_consumed_total")["data"]["result"]
            lag = prom.query("sum(slidingwindow_consumer_lag_records)")["data"]["result"]
            if (
                r
                and float(r[0]["value"][1]) >= N
                and lag
                and float(lag[0]["value"][1]) == 0
                and time.time() > done_at + 1
            ):
                break
            assert time.monotonic() < deadline, (r, lag, prom.log())
            time.sleep(1)
        yield {
            "svc": svc,
            "prom": prom,
            "port": port,
            "events": events,
            "topics": topics,
            "text": scrape(port),
            "bootstrap": kafka_bootstrap,
            "started": started,
            "tmp": tmp,
            "done_at": done_at,
        }
    finally:
        svc.stop()
        prom.stop()
        admin.delete_topics(list(topics.values()), operation_timeout=10)


def test_metrics_equal_the_records_sent_through(run):
    text, events = run["text"], run["events"]
    exp = replay(events, td=TD, grace=GRACE, aggregations=AGGS, emit="update")
    m = lambda name, **lab: value(text, name, **lab)  # noqa: E731
    sent = len(events)
    assert m("slidingwindow_records_consumed_total") == sent
    aggregated = m("slidingwindow_records_aggregated_total")
    late = m("slidingwindow_records_dropped_total", reason="late")
    dead = {r: m("slidingwindow_records_dropped_total", reason=r) for r in DEAD_LETTER_REASONS}
    assert aggregated + late + sum(dead.values()) == sent
    assert (aggregated, late) == (exp.aggregated, len(exp.late)) and late > 0
    assert {r: n for r, n in dead.items() if n} == dict(Counter(exp.dead.values()))
    assert sum(n for r, n in dead.items() if r in DESERIALIZATION_REASONS) > 0
    assert sum(n for r, n in dead.items() if r not in DESERIALIZATION_REASONS) > 0
    assert m("slidingwindow_records_dead_lettered_total") == sum(dead.values())
    # produced = what the output topics hold (no micro-batch was retried in this run)
    b, t = run["bootstrap"], run["topics"]
    assert m("slidingwindow_records_produced_total", kind="changelog") == len(consume_all(b, t["out"])) > 0
    assert m("slidingwindow_records_produced_total", kind="late") == len(consume_all(b, t["late"])) == late
    assert m("slidingwindow_records_produced_total", kind="dead_letter") == len(consume_all(b, t["dlq"]))
    # histograms: lateness is observed for every decoded record, end-to-end latency for every aggregated one
    assert m("slidingwindow_record_lateness_seconds_count") == aggregated + late
    assert m("slidingwindow_record_lateness_seconds_bucket", le="0.0") > 0  # in-order records
    assert m("slidingwindow_end_to_end_latency_seconds_count") == aggregated
    mean_latency = m("slidingwindow_end_to_end_latency_seconds_sum") / aggregated
    assert 0 < mean_latency < 300
    assert m("slidingwindow_windows_created_total") > 0 and m("slidingwindow_windows_updated_total") > 0
    assert m("slidingwindow_state_windows") > 0 and m("slidingwindow_state_store_rows") > 0
    max_ts = max(e.timestamp for e in events if e.note != "late" and not e.note.startswith("bad"))
    assert abs(m("slidingwindow_stream_time_seconds") - max_ts / 1000) < 0.001
    for p in range(PARTITIONS):
        assert m("slidingwindow_consumer_lag_records", topic=t["in"], partition=str(p)) == 0
        part_max = max(
            e.timestamp for e in events if e.partition == p and e.note != "late" and not e.note.startswith("bad")
        )
        assert m("slidingwindow_partition_stream_time_seconds", topic=t["in"], partition=str(p)) == pytest.approx(
            part_max / 1000, abs=0.001
        )
    assert m("slidingwindow_micro_batch_duration_seconds_count") >= 3
    log = (run["tmp"] / "service.log").read_text(errors="replace")
    assert "Traceback" not in log and "cannot read query progress" not in log and "end offsets" not in log
    build = [s for s in text.splitlines() if s.startswith("slidingwindow_build_info{")]
    assert len(build) == 1 and build[0].endswith(" 1.0")
    assert m("slidingwindow_config_info", mode="update", input_format="json", changelog_format="json") == 1


def test_promtool_check_metrics_on_a_real_scrape(run):
    r = subprocess.run(["promtool", "check", "metrics"], input=run["text"].encode(), capture_output=True, timeout=60)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


def panel_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def test_every_dashboard_panel_query_returns_data(run):
    prom = run["prom"]
    empty, failed = [], []
    for title, expr in panel_queries():
        r = prom.query(expr, at=run["done_at"])
        if r.get("status") != "success":
            failed.append((title, expr, r.get("error")))
            continue
        values = [float(s["value"][1]) for s in r["data"]["result"]]
        if not any(math.isfinite(v) for v in values):
            empty.append((title, expr, values))
    assert not failed, failed
    assert not empty, f"panel queries without data: {empty}"
    assert len(panel_queries()) >= 15


def test_every_alert_expression_evaluates(run):
    prom = run["prom"]
    rules = yaml.safe_load(ALERTS.read_text())
    exprs = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    for name, expr in exprs.items():
        r = prom.query(expr)
        assert r.get("status") == "success", (name, r.get("error"))
    # this run dead-lettered records: that alert's expression has a result (the others are quiet)
    assert prom.query(exprs["SlidingWindowDeadLetters"])["data"]["result"]
    assert not prom.query(exprs["SlidingWindowDown"])["data"]["result"]
    # ... and Prometheus' own rule evaluation (every second here) has it firing
    deadline = time.monotonic() + 30
    while not prom.query('ALERTS{alertname="SlidingWindowDeadLetters", alertstate="firing"}')["data"]["result"]:
        assert time.monotonic() < deadline, prom.api("alerts")
        time.sleep(1)
    # Prometheus evaluated the loaded rules itself without error
    groups = prom.api("rules")["data"]["groups"]
    health = {r["name"]: (r["health"], r.get("lastError", "")) for g in groups for r in g["rules"]}
    assert set(health) == set(exprs)
    assert all(h == "ok" for h, _ in health.values()), health


def test_dashboard_picture_renders_from_prometheus(run):
    pytest.importorskip("matplotlib")
    import importlib.util

    spec = importlib.util.spec_from_file_location("render", ROOT / "deploy" / "grafana" / "render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)  # type: ignore[union-attr]
    out = run["tmp"] / "dashboard.png"
    drawn = render.render(run["prom"].url, run["started"], time.time(), out)
    assert out.stat().st_size > 10_000
    assert all(n > 0 for n in drawn.values()), drawn
