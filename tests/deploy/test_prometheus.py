"""deploy/prometheus: the scrape config and alert rules are valid and the alerts fire as their unit tests say."""

from __future__ import annotations

import yaml

from tests.deploy.promtool import PROM_DIR, promtool


def test_promtool_check_config():
    r = promtool("check", "config", "prometheus.yml")
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_check_rules():
    r = promtool("check", "rules", "alerts.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 5 rules found" in r.stdout


def test_promtool_test_rules():
    r = promtool("test", "rules", "alerts_test.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_has_a_unit_test_and_a_runbook_entry():
    rules = yaml.safe_load((PROM_DIR / "alerts.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert {
        "SlidingWindowConsumerLagGrowing",
        "SlidingWindowNoProgress",
        "SlidingWindowLateDropRate",
        "SlidingWindowDeadLetters",
    } <= alerts
    tests = yaml.safe_load((PROM_DIR / "alerts_test.yml").read_text())
    tested = {
        t["alertname"]
        for case in tests["tests"]
        for t in case.get("alert_rule_test", [])
        if any(t.get("exp_alerts") or [])
    }
    assert alerts == tested  # each alert is shown to fire at least once
    readme = (PROM_DIR.parents[1] / "README.md").read_text()
    section = readme[readme.index("## Operating it") :]
    for a in alerts:
        assert f"`{a}`" in section, f"README 'Operating it' does not explain {a}"


def test_scrape_target_is_the_metrics_port():
    from service.settings import Settings

    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == "slidingwindow")
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"slidingwindow:{Settings().metrics_port}"]


def test_rules_only_use_defined_metrics():
    import re

    from service.metrics import METRICS

    known = set()
    for name in METRICS:
        known |= {name, name + "_total", name + "_bucket", name + "_sum", name + "_count"}
    rules = yaml.safe_load((PROM_DIR / "alerts.yml").read_text())
    used = {n for g in rules["groups"] for r in g["rules"] for n in re.findall(r"\b(slidingwindow_\w+)", r["expr"])}
    assert used and used <= known, used - known


def test_make_test_installs_prometheus_and_ci_runs_only_make_test():
    import re

    root = PROM_DIR.parents[1]
    makefile = (root / "Makefile").read_text()
    m = re.search(r"^test:(.*)$", makefile, re.M)
    assert m and "prometheus" in m.group(1).split()
    rule = makefile[makefile.index("\nprometheus:") :].split("\n\n")[0]
    assert "command -v promtool" in rule and "install-promtool.sh" in rule
    script = (PROM_DIR / "install-promtool.sh").read_text()
    assert "apt-get install" in script and "policy-rc.d" in script  # no daemon started by the package
    ci = [ln for ln in (root / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert ci[-1].strip() == "make test"


def test_alert_job_selectors_name_the_scrape_job():
    import re

    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    jobs = {j["job_name"] for j in cfg["scrape_configs"]}
    rules = yaml.safe_load((PROM_DIR / "alerts.yml").read_text())
    selected = {m for g in rules["groups"] for r in g["rules"] for m in re.findall(r'job="([^"]+)"', r["expr"])}
    assert selected and selected <= jobs
