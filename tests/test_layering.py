"""One-way layers: service -> connectors -> windowstore, never back; windowstore stays pure Python; devtools and
the slidingwindow command sit above them and are never imported by them. Inside service/, by where code runs:
driver -> service.spark -> service.worker -> service.task, and only service/spark/ imports pyspark; the driver's
helpers that the Spark glue reads (service/checkpoint_access.py, service/spark_kafka_options.py) import none of
the service's packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# slidingwindow (the console command) may import every package; devtools (local broker, demo, broker jars) may
# import the runtime packages; no runtime package imports devtools, the command package or test-only packages.
_NOT_RUNTIME = {"devtools", "slidingwindow", "testcontainers", "docker", "pytest", "hypothesis"}
FORBIDDEN = {
    "windowstore": {
        "connectors",
        "service",
        "pyspark",
        "confluent_kafka",
        "fastavro",
        "prometheus_client",
        "pandas",
        "pyarrow",
    }
    | _NOT_RUNTIME,
    "connectors": {"service", "prometheus_client", "pyspark"} | _NOT_RUNTIME,
    "service": set(_NOT_RUNTIME),
    "devtools": {"slidingwindow", "testcontainers", "docker", "pytest", "hypothesis"},
    "slidingwindow": set(),
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layers_point_one_way(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources found in {package}/"
    bad = {
        str(f.relative_to(ROOT)): sorted(imported_roots(f) & FORBIDDEN[package])
        for f in files
        if imported_roots(f) & FORBIDDEN[package]
    }
    assert not bad, f"{package}/ imports what its layer may not: {bad}"


def imported_modules(path: Path) -> set[str]:
    """The dotted names of every module ``path`` imports (absolute imports, anywhere in the file), and of each
    ``from module import name`` also ``module.name`` (the name may be a submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _under(name: str, prefixes: set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


#: service's inner layers: what each may not import (the driver is every service module outside these packages)
SERVICE_LAYERS = {
    "service/task": {
        "pyspark",
        "prometheus_client",
        "service.metrics",
        "service.spark",
        "service.worker",
        "service.driver",
        "service.cli",
    },
    "service/worker": {
        "pyspark",
        "prometheus_client",
        "service.metrics",
        "service.spark",
        "service.driver",
        "service.cli",
    },
    "service/spark": {"prometheus_client", "service.metrics", "service.driver", "service.cli"},
    # the driver's helpers that the Spark glue reads (checkpoint layout, Kafka source and sink options): plain
    # Python, below the Spark package
    **{
        helper: {
            "pyspark",
            "prometheus_client",
            "service.metrics",
            "service.spark",
            "service.worker",
            "service.task",
            "service.driver",
            "service.cli",
            "service.settings",
        }
        for helper in ("service/checkpoint_access.py", "service/spark_kafka_options.py")
    },
}


@pytest.mark.parametrize("layer", sorted(SERVICE_LAYERS))
def test_service_layers_point_one_way(layer: str) -> None:
    path = ROOT / layer
    files = [path] if path.is_file() else sorted(path.rglob("*.py"))
    assert files, f"no sources found in {layer}/"
    bad = {
        str(f.relative_to(ROOT)): sorted(m for m in imported_modules(f) if _under(m, SERVICE_LAYERS[layer]))
        for f in files
    }
    bad = {f: mods for f, mods in bad.items() if mods}
    assert not bad, f"{layer}/ imports what its layer may not: {bad}"


def test_only_service_spark_imports_pyspark() -> None:
    spark = ROOT / "service" / "spark"
    offenders = [
        str(f.relative_to(ROOT))
        for package in FORBIDDEN
        for f in sorted((ROOT / package).rglob("*.py"))
        if spark not in f.parents and "pyspark" in imported_roots(f)
    ]
    assert not offenders, f"pyspark imported outside service/spark/: {offenders}"


def _configures_logging(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("basicConfig", "dictConfig", "fileConfig")
    )


def test_logging_is_configured_only_in_entrypoints() -> None:
    """Library code only calls logging.getLogger(__name__); configuration happens in CLI main functions."""
    offenders = []
    for package in FORBIDDEN:
        for f in sorted((ROOT / package).rglob("*.py")):
            if f.name in ("cli.py", "__main__.py"):  # entrypoint modules
                continue
            tree = ast.parse(f.read_text(), filename=str(f))
            allowed: set[int] = set()
            for fn in ast.walk(tree):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name.lstrip("_").startswith("main"):
                    allowed.update(id(n) for n in ast.walk(fn))
            for node in ast.walk(tree):
                if _configures_logging(node) and id(node) not in allowed:
                    offenders.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"logging configured outside an entrypoint main(): {offenders}"
