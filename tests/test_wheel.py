"""The installable product: the wheel, installed into a fresh virtual environment, runs without the source tree.

The wheel is built from a copy holding only what a build needs (pyproject.toml, README.md and the packages), then
installed with ``--no-deps`` into a new venv in a temporary folder. The dependencies come from this test's own
environment through a path file, so nothing is downloaded; that path file adds the folder only (its ``.pth`` files,
among them the editable install of this checkout, are not run), so every project module is imported from the wheel.
Every command runs from a folder outside the repository, the development broker's ``start``/``status``/``stop``
included. Installing the wheel's ``[service]`` dependencies from the index into an empty venv is the image build's
part (deploy/Dockerfile, run by ``make test-image``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("windowstore", "connectors", "service", "devtools", "slidingwindow")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w",
         str(dist), str(src)],
        check=True, capture_output=True, text=True, timeout=300, cwd=tmp,
    )  # fmt: skip
    (wheel,) = dist.glob("slidingwindow-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True, capture_output=True, text=True, timeout=300, cwd=tmp,
    )  # fmt: skip
    # the dependencies (pyspark, confluent-kafka, ...) from this environment, without running its .pth files
    (Path(purelib) / "_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "elsewhere"
    work.mkdir()
    return {"wheel": wheel, "bin": venv / "bin", "python": py, "cwd": work, "venv": venv}


def _run(installed: dict[str, Path], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{installed['bin']}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        list(args), input=stdin, capture_output=True, text=True, timeout=120, cwd=installed["cwd"], env=env
    )


def test_wheel_holds_the_packages_and_their_data_not_the_tests(installed: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    roots = {n.split("/")[0] for n in names if not n.startswith("slidingwindow-")}
    assert roots == set(PACKAGES), roots
    for data in ("devtools/kafka/server.properties.in", "devtools/kafka/log4j2.properties",
                 "service/log4j2.properties", "connectors/pins.py"):  # fmt: skip
        assert data in names, data
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "slidingwindow = slidingwindow.cli:main" in zipfile.ZipFile(installed["wheel"]).read(entry_points).decode()


def test_modules_come_from_the_installed_wheel(installed: dict[str, Path]) -> None:
    probe = (
        "import json, connectors.versions as v, devtools.local_broker as b, service.spark.job as j, windowstore,"
        " slidingwindow;"
        "print(json.dumps({'files': [m.__file__ for m in (v, b, j, windowstore, slidingwindow)],"
        " 'kafka': v.jvm_versions().kafka, 'broker_config': b.SERVER_PROPERTIES_TEMPLATE.is_file()"
        " and b.LOG4J2_CONFIG.is_file()}))"
    )
    out = _run(installed, str(installed["python"]), "-c", probe)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    venv = str(installed["venv"].resolve())
    assert all(f.startswith(venv) for f in found["files"]), found["files"]
    from connectors.pins import KAFKA

    assert found["kafka"] == KAFKA
    assert found["broker_config"] is True


def test_slidingwindow_help_lists_every_command(installed: dict[str, Path]) -> None:
    out = _run(installed, "slidingwindow", "--help")
    assert out.returncode == 0, out.stderr
    for command in ("run", "check-settings", "replay", "broker", "demo", "jars"):
        assert f"\n  {command} " in out.stdout, out.stdout
    run_help = _run(installed, "slidingwindow", "run", "--help")
    assert run_help.returncode == 0 and "--bootstrap-servers" in run_help.stdout, run_help.stderr
    assert _run(installed, "slidingwindow", "no-such-command").returncode == 2


def test_check_settings_validates_and_prints(installed: dict[str, Path]) -> None:
    out = _run(installed, "slidingwindow", "check-settings", "--bootstrap-servers", "127.0.0.1:9",
               "--input-topics", "payments", "--changelog-topic", "payments-windows", "--grace", "5s")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "bootstrap_servers = '127.0.0.1:9'" in out.stdout
    assert "input_topics = ('payments',)" in out.stdout
    bad = _run(installed, "slidingwindow", "check-settings", "--bootstrap-servers", "127.0.0.1:9",
               "--input-topics", "payments", "--changelog-topic", "out", "--grace", "-5s")  # fmt: skip
    assert bad.returncode == 2 and "grace" in bad.stderr.lower(), (bad.stdout, bad.stderr)


def test_replay_emits_the_window_updates(installed: dict[str, Path]) -> None:
    events = "".join(json.dumps({"key": "a", "value": 1, "ts": ts}) + "\n" for ts in (10, 15))
    out = _run(installed, "slidingwindow", "replay", "--time-difference-ms", "10", "--aggregation", "count",
               "--emit", "every", stdin=events)  # fmt: skip
    assert out.returncode == 0, out.stderr
    updates = [json.loads(line) for line in out.stdout.splitlines()]
    # t=10: left window [0,10]; t=15: left window [5,15] (holds both), and [0,10] is not touched by 15
    assert {(u["window_start"], u["window_end"], u["value"]) for u in updates} >= {(0, 10, 1), (5, 15, 2)}
    assert json.loads(out.stderr.splitlines()[-1])["records"] == 2


def test_broker_command_answers_without_a_broker(installed: dict[str, Path]) -> None:
    data_dir = installed["cwd"] / "kafka"
    out = _run(installed, "slidingwindow", "broker", "status", "--data-dir", str(data_dir))
    assert out.returncode == 1 and "not running" in out.stdout, (out.stdout, out.stderr)
    assert _run(installed, "slidingwindow", "broker", "stop", "--data-dir", str(data_dir)).stdout.strip() == (
        "not running"
    )


@pytest.mark.integration
def test_broker_starts_answers_and_stops_from_the_wheel(installed: dict[str, Path]) -> None:
    """``slidingwindow broker start|status|stop`` of the installed wheel: its broker configuration templates come
    from the wheel's package data, its jars from the cache (``make jars``; Maven resolves them on a miss)."""
    data_dir = installed["cwd"] / "kafka-running"
    try:
        start = _run(installed, "slidingwindow", "broker", "start", "--port", "0", "--data-dir", str(data_dir))
        assert start.returncode == 0 and "running: pid" in start.stdout, (start.stdout, start.stderr)
        status = _run(installed, "slidingwindow", "broker", "status", "--data-dir", str(data_dir))
        assert status.returncode == 0 and status.stdout.startswith("running: pid"), (status.stdout, status.stderr)
        assert str(data_dir.resolve()) in status.stdout
    finally:
        stop = _run(installed, "slidingwindow", "broker", "stop", "--data-dir", str(data_dir))
    assert stop.returncode == 0 and stop.stdout.strip() == "stopped", (stop.stdout, stop.stderr)
    after = _run(installed, "slidingwindow", "broker", "status", "--data-dir", str(data_dir))
    assert after.returncode == 1 and "not running" in after.stdout
