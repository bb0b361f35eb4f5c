"""docker-compose.yml and deploy/Dockerfile checked against the code (no Docker engine here): every
SLIDINGWINDOW_* variable is a real setting with a valid value, every mounted file exists, ports and hostnames agree
with the settings, prometheus.yml and the Grafana provisioning."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from connectors.jars import ENV_CACHE
from devtools.demo import TOPIC as DEMO_TOPIC
from service.settings import ENV_PREFIX, SETTINGS, Settings, load

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()
SETTING_VARS = {ENV_PREFIX + s.upper() for s in SETTINGS}
LONG_RUNNING = ("kafka", "schema-registry", "slidingwindow", "prometheus", "grafana")


def substitute(value: str) -> str:
    """Compose's ${VAR:-default} with the default (no such variable set)."""
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", str(value))


def env_of(name: str) -> dict[str, str]:
    env = SERVICES[name].get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: substitute(v) for k, v in env.items()}


def service_settings() -> Settings:
    return load([], environ=env_of("slidingwindow"))


def published(name: str) -> dict[int, int]:
    """container port -> host port"""
    out = {}
    for p in SERVICES[name].get("ports") or []:
        host, container = str(p).rsplit(":", 1)[-2:] if str(p).count(":") else (p, p)
        out[int(container)] = int(host.rsplit(":", 1)[-1])
    return out


def test_compose_has_every_component():
    assert set(LONG_RUNNING) <= set(SERVICES)
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:")
    env = env_of("kafka")
    assert "controller" in env["KAFKA_PROCESS_ROLES"] and "broker" in env["KAFKA_PROCESS_ROLES"]
    assert "schema-registry" in SERVICES["schema-registry"]["image"]
    assert SERVICES["slidingwindow"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert SERVICES["demo-producer"]["profiles"] == ["demo"]


def test_kafka_image_is_the_pinned_kafka_version():
    from connectors.versions import jvm_versions

    assert SERVICES["kafka"]["image"] == f"apache/kafka:{jvm_versions().kafka}"


def test_kafka_log_cleaner_is_throttled_as_in_the_local_broker():
    """The compose broker shares its machine with the service like the local one: the same cleaner throttle."""
    from devtools.local_broker import SERVER_PROPERTIES_TEMPLATE

    template = SERVER_PROPERTIES_TEMPLATE.read_text()
    props = dict(line.split("=", 1) for line in template.splitlines() if "=" in line and not line.startswith("#"))
    key = "log.cleaner.io.max.bytes.per.second"
    assert int(props[key]) > 0
    assert env_of("kafka")["KAFKA_" + key.upper().replace(".", "_")] == props[key]


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_slidingwindow_variable_is_a_real_setting(name):
    unknown = {k for k in env_of(name) if k.startswith(ENV_PREFIX)} - SETTING_VARS
    assert not unknown, f"{name}: not settings: {sorted(unknown)}"


def test_the_service_environment_is_valid_settings():
    s = service_settings()
    assert s.bootstrap_servers == "kafka:9092"
    assert s.input_topics == (DEMO_TOPIC,)  # the demo producer writes what the service reads
    assert s.checkpoint_dir == "/var/lib/slidingwindow/checkpoint"


def test_healthchecks_and_restart_policies():
    for name in LONG_RUNNING:
        svc = SERVICES[name]
        assert svc.get("restart") in ("unless-stopped", "always", "on-failure"), name
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert "HEALTHCHECK" in DOCKERFILE


def test_named_volumes_for_kafka_data_and_the_checkpoint():
    declared = set(COMPOSE.get("volumes") or {})
    kafka_env = env_of("kafka")
    mounts = {v.split(":")[1]: v.split(":")[0] for v in SERVICES["kafka"]["volumes"]}
    assert mounts[kafka_env["KAFKA_LOG_DIRS"]] in declared
    svc_mounts = {v.split(":")[1]: v.split(":")[0] for v in SERVICES["slidingwindow"]["volumes"]}
    assert svc_mounts[service_settings().checkpoint_dir] in declared
    for name, svc in SERVICES.items():
        for v in svc.get("volumes") or []:
            src = v.split(":")[0]
            if not src.startswith((".", "/")):
                assert src in declared, f"{name}: volume {src} not declared"


def test_every_mounted_file_exists():
    for name, svc in SERVICES.items():
        for v in svc.get("volumes") or []:
            src = v.split(":")[0]
            if src.startswith("."):
                assert (ROOT / src).exists(), f"{name}: {src} does not exist"


def test_ports_agree_with_settings_and_prometheus():
    s = service_settings()
    assert published("slidingwindow") == {s.metrics_port: s.metrics_port}
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "slidingwindow")
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"slidingwindow:{s.metrics_port}"]
    assert "slidingwindow" in SERVICES
    # Dockerfile: the exposed port and the healthcheck are the metrics port
    assert re.search(rf"^EXPOSE {s.metrics_port}$", DOCKERFILE, re.M)
    # healthy = processing (service/healthcheck.py reads SLIDINGWINDOW_METRICS_PORT's /metrics), in both places
    assert SERVICES["slidingwindow"]["healthcheck"]["test"] == ["CMD", "python", "-m", "service.healthcheck"]
    assert 'CMD ["python", "-m", "service.healthcheck"]' in DOCKERFILE
    # the schema registry URL names the registry service and its listener port
    m = re.fullmatch(r"http://([\w-]+):(\d+)", s.schema_registry_url)
    assert m and m.group(1) in SERVICES
    assert f":{m.group(2)}" in env_of(m.group(1))["SCHEMA_REGISTRY_LISTENERS"]
    # bootstrap servers = the broker's PLAINTEXT advertised listener
    assert f"PLAINTEXT://{s.bootstrap_servers}" in env_of("kafka")["KAFKA_ADVERTISED_LISTENERS"]


def test_prometheus_mounts_its_config_and_rules():
    prom = SERVICES["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom["volumes"]}
    config = next(a.split("=", 1)[1] for a in prom["command"] if a.startswith("--config.file="))
    assert mounts[config] == "./deploy/prometheus/prometheus.yml"
    cfg = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    for rf in cfg["rule_files"]:
        assert str(Path(config).parent / rf) in mounts


def test_grafana_provisioning_is_mounted_and_consistent():
    graf = SERVICES["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in graf["volumes"]}
    ds_file = next(c for c in mounts if c.startswith("/etc/grafana/provisioning/datasources/"))
    ds = yaml.safe_load((ROOT / mounts[ds_file]).read_text())["datasources"][0]
    assert ds["type"] == "prometheus"
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", ds["url"]).groups()
    assert host in SERVICES and int(port) in published(host)
    prov_file = next(c for c in mounts if c.startswith("/etc/grafana/provisioning/dashboards/"))
    prov = yaml.safe_load((ROOT / mounts[prov_file]).read_text())["providers"][0]
    dash_dir = prov["options"]["path"]
    assert mounts[dash_dir] == "./deploy/grafana/dashboards"
    import json

    dashboards = list((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
    assert dashboards
    for d in dashboards:
        dash = json.loads(d.read_text())
        uids = {t["datasource"]["uid"] for p in dash["panels"] for t in p["targets"]}
        uids |= {p["datasource"]["uid"] for p in dash["panels"]}
        assert uids == {ds["uid"]}, d.name
    home = env_of("grafana").get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    assert home and home.startswith(dash_dir + "/") and (ROOT / "deploy/grafana/dashboards" / Path(home).name).exists()


def test_spark_cluster_profile_shares_the_checkpoint():
    worker = SERVICES["spark-worker"]
    assert worker["profiles"] == ["cluster"] and SERVICES["spark-master"]["profiles"] == ["cluster"]
    checkpoint = "checkpoint:/var/lib/slidingwindow/checkpoint"
    assert checkpoint in worker["volumes"] and set(worker["volumes"]) <= set(SERVICES["slidingwindow"]["volumes"])
    assert "spark://spark-master:7077" in worker["entrypoint"]
    assert SERVICES["slidingwindow"]["hostname"] == "slidingwindow"  # the driver host executors connect back to


def test_the_driver_jvms_class_data_archive_lives_on_a_volume_of_its_own():
    """class_data_cache (service.spark.classdata) in compose: the archive outlives the container, so only the
    first start of a deployment builds it; the image makes the folder the service's user owns (a fresh named
    volume takes the folder's owner)."""
    service = SERVICES["slidingwindow"]
    folder = service["environment"]["SLIDINGWINDOW_CLASS_DATA_CACHE"]
    assert f"class-data:{folder}" in service["volumes"] and "class-data" in COMPOSE["volumes"]
    assert re.search(rf"mkdir -p [^\n]*{re.escape(folder)}", DOCKERFILE)
    assert "chown -R slidingwindow /var/lib/slidingwindow" in DOCKERFILE
    assert folder.startswith("/var/lib/slidingwindow/")


def test_dockerfile_bakes_the_connector_jars_and_runs_the_service():
    lines = [ln.strip() for ln in DOCKERFILE.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) == 2  # build stage (JDK + Maven) and runtime (JRE)
    text = "\n".join(lines)
    assert "openjdk-17-jdk-headless maven" in text and "openjdk-17-jre-headless" in text
    assert "python -m connectors.jars spark-kafka" in text  # at build time (a RUN line)
    assert re.search(r"^RUN .*connectors\.jars spark-kafka", DOCKERFILE.replace("\\\n", " "), re.M)
    # the product goes in as its own wheel with the service extra (no editable checkout of the source tree)
    assert "pip wheel" in text and re.search(r"pip install .*slidingwindow-\*\.whl\)\[service\]", text)
    assert "pip install -e" not in text
    assert 'ENTRYPOINT ["tini", "--", "python", "-m", "service", "run"]' in text
    # every COPY source exists; the jar cache the build filled is the runtime's
    for ln in lines:
        if ln.startswith("COPY ") and "--from=" not in ln:
            for src in ln.split()[1:-1]:
                assert (ROOT / src).exists(), src
    env_vars = set(re.findall(r"\b(SLIDINGWINDOW_\w+)=", DOCKERFILE))
    assert env_vars - SETTING_VARS == {ENV_CACHE}
    caches = set(re.findall(rf"{ENV_CACHE}=(\S+)", DOCKERFILE))
    assert len(caches) == 1
    # Python version of the image is one the project supports
    m = re.search(r"python:(\d+)\.(\d+)", DOCKERFILE)
    assert m and (int(m.group(1)), int(m.group(2))) >= (3, 10)


def test_dockerignore_keeps_the_context_small():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and "var" in ignored and ".git" in ignored
