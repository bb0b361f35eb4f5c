"""deploy/grafana: the dashboard is well-formed and covers what the service's operators watch."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from service.metrics import METRICS

ROOT = Path(__file__).resolve().parents[2]
DASH = json.loads((ROOT / "deploy/grafana/dashboards/slidingwindow.json").read_text())
DS = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())["datasources"][0]


def exprs() -> list[str]:
    return [t["expr"] for p in DASH["panels"] for t in p["targets"]]


def test_dashboard_is_well_formed():
    assert DASH["uid"] == "slidingwindow" and DASH["title"]
    ids = [p["id"] for p in DASH["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in DASH["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not (mine & cells), f"panel {p['title']} overlaps another"
        cells |= mine
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs))
        assert p["datasource"]["uid"] == DS["uid"]


def test_dashboard_covers_the_issue_list():
    text = "\n".join(exprs())
    for needle in (
        "slidingwindow_records_consumed_total",
        "slidingwindow_records_produced_total",
        "slidingwindow_consumer_lag_records",
        "slidingwindow_micro_batch_duration_seconds_bucket",
        "histogram_quantile(0.5, sum by (le) (rate(slidingwindow_end_to_end_latency_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(slidingwindow_end_to_end_latency_seconds_bucket",
        "slidingwindow_records_dropped_total",
        "slidingwindow_windows_created_total",
        "slidingwindow_windows_updated_total",
        "slidingwindow_state_windows",
        "slidingwindow_state_store_bytes",
        "time() - (slidingwindow_stream_time_seconds > 0)",
    ):
        assert needle in text, needle


def test_queries_only_use_defined_metrics():
    import re

    known = set()
    for name in METRICS:
        known |= {name, name + "_total", name + "_bucket", name + "_sum", name + "_count"}
    used = {n for e in exprs() for n in re.findall(r"\b(slidingwindow_\w+)", e)}
    assert used and used <= known, used - known
