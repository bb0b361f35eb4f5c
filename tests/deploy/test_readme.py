"""README 'Operating it': the dashboard picture is committed and every dashboard panel is explained."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Operating it")
    nxt = readme.find("\n## ", start + 3)
    return readme[start:] if nxt < 0 else readme[start:nxt]


def test_the_dashboard_picture_exists():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", section())
    assert images
    for img in images:
        p = ROOT / img
        assert p.exists() and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 20_000, img


def test_every_metric_family_is_documented():
    from service.metrics import METRICS

    text = section()
    for name in METRICS:  # counters' names without _total
        assert f"`{name}" in text, f"{name} not in README 'Operating it'"


def test_every_declared_stat_counter_is_in_the_metrics_table():
    """The counters declared with the worker stats (service.task.stats.STATS) have a row of the metrics table
    under their full name (the families test above checks the names without ``_total``)."""
    from service.metrics import PREFIX
    from service.task.stats import STATS

    text = section()
    declared = [PREFIX + s.counter.name for s in STATS if s.counter is not None]
    assert declared
    for name in declared:
        assert re.search(rf"^\|[^\n]*`{re.escape(name)}`", text, re.MULTILINE), (
            f"{name} not in the README metrics table"
        )


def test_the_metrics_table_is_written_from_the_declarations():
    """The README metrics table is exactly the one the metric declarations give (service.metrics.METRIC_SPECS):
    one row per metric, nothing more."""
    from devtools.readme_metrics import with_table
    from service.metrics import METRIC_SPECS, readme_table

    readme = (ROOT / "README.md").read_text()
    assert with_table(readme, readme_table()) == readme, "regenerate it: python -m devtools.readme_metrics"
    rows = [ln for ln in section().splitlines() if ln.startswith("| `slidingwindow_")]
    assert len(rows) == len(METRIC_SPECS)


def test_every_panel_is_explained():
    dash = json.loads((ROOT / "deploy/grafana/dashboards/slidingwindow.json").read_text())
    text = section().lower()
    for p in dash["panels"]:
        key = p["title"].split("(")[0].strip().lower()
        assert key in text, p["title"]
