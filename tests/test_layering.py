"""One-way layers: service -> connectors -> windowstore, never back; windowstore stays pure Python; devtools and
the slidingwindow command sit above them and are never imported by them."""

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
    "connectors": {"service", "prometheus_client"} | _NOT_RUNTIME,
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
