"""Every rule number the code and the docs cite resolves to a rule of the rule book (docs/rules*.md).

Rule numbers: ``R<n>`` (sliding windows), ``T<n>`` (time windows), ``S<n>`` (session windows), optionally with a
part: ``R10.3``, ``R22b``. A rule is defined by a heading (``### R13 ...``); a part by a bold label (``**R22b**``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCANNED = ("windowstore", "connectors", "service", "devtools", "slidingwindow", "tests", "bench", "docs", "deploy")
SUFFIXES = {".py", ".md", ".java", ".yml", ".yaml", ".toml"}

CITE_RE = re.compile(r"\b([RTS][1-9]\d{0,2})(\.\d+|[a-z])?\b")
HEADING_RE = re.compile(r"^#{2,4}\s+([RTS][1-9]\d{0,2})\b", re.MULTILINE)
LABEL_RE = re.compile(r"\*\*([RTS][1-9]\d{0,2}(?:\.\d+|[a-z])?)\*\*")


def rule_book() -> tuple[set[str], set[str]]:
    """(rules defined by a heading, parts defined by a bold label) over docs/rules*.md."""
    rules: set[str] = set()
    parts: set[str] = set()
    for f in sorted(DOCS.glob("rules*.md")):
        text = f.read_text(encoding="utf-8")
        rules.update(HEADING_RE.findall(text))
        parts.update(LABEL_RE.findall(text))
    return rules, parts


def cited() -> dict[str, list[str]]:
    """Rule number -> where it is cited (file:line)."""
    files = [ROOT / "README.md", *(f for d in SCANNED for f in sorted((ROOT / d).rglob("*")) if f.suffix in SUFFIXES)]
    where: dict[str, list[str]] = {}
    for f in files:
        if not f.is_file() or any(p in (".venv", "target", "__pycache__") for p in f.parts):
            continue
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for base, part in CITE_RE.findall(line):
                where.setdefault(base + part, []).append(f"{f.relative_to(ROOT)}:{n}")
    return where


def test_the_rule_book_defines_sliding_window_rules() -> None:
    rules, _parts = rule_book()
    assert {f"R{i}" for i in range(1, 33)} <= rules


def test_every_cited_rule_number_resolves() -> None:
    rules, parts = rule_book()
    unresolved = {rule: places[:3] for rule, places in sorted(cited().items()) if rule not in rules | parts}
    assert not unresolved, f"rule numbers with no heading or label in docs/rules*.md: {unresolved}"


def test_each_rule_is_defined_once() -> None:
    headings: list[str] = []
    for f in sorted(DOCS.glob("rules*.md")):
        headings += HEADING_RE.findall(f.read_text(encoding="utf-8"))
    assert len(headings) == len(set(headings)), sorted(h for h in headings if headings.count(h) > 1)


def test_nothing_points_outside_the_repository_for_its_rules() -> None:
    outside = "../" + "shared/"  # the team notes' folder, not part of the repository
    offenders = []
    for d in SCANNED:
        for f in sorted((ROOT / d).rglob("*")):
            readable = f.suffix in SUFFIXES and f.is_file() and ".venv" not in f.parts and "target" not in f.parts
            if readable and outside in f.read_text(encoding="utf-8", errors="replace"):
                offenders.append(str(f.relative_to(ROOT)))
    assert not offenders, f"rule references outside the repository: {offenders}"
