"""service/log4j2.properties: the driver JVM's console drops the known noise (a failed task's repeats, the state
server's closed socket at a stop) and keeps everything else; checked with Spark's own log4j jars and a real JVM."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from connectors.jars import java_executable

pyspark = pytest.importorskip("pyspark")

CONFIG = Path(__file__).resolve().parents[2] / "service" / "log4j2.properties"

_SOURCE = """
import org.apache.logging.log4j.LogManager;
public class Noise {
  public static void main(String[] a) {
    var server = LogManager.getLogger(
        "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer");
    server.error("Error reading message: Connection reset", new java.net.SocketException("Connection reset"));
    server.error("Failed to flush with errorMsg=Broken pipe", new java.io.IOException("Broken pipe"));
    server.error("kept: another state server error");
    LogManager.getLogger("org.apache.spark.executor.Executor").error("Exception in task 0.0 in stage 1.0 (TID 1)");
    LogManager.getLogger("org.apache.spark.SomethingElse").warn("kept: a warning");
  }
}
"""


def test_the_console_drops_known_noise_and_keeps_the_rest(tmp_path):
    jars = [
        p
        for p in (Path(pyspark.__file__).parent / "jars").glob("log4j-*.jar")
        if p.name.startswith(("log4j-api-", "log4j-core-"))
    ]
    assert len(jars) == 2, jars
    source = tmp_path / "Noise.java"
    source.write_text(_SOURCE)
    out = subprocess.run(
        [
            java_executable(),
            "-cp",
            ":".join(map(str, jars)),
            f"-Dlog4j2.configurationFile=file:{CONFIG}",
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert [ln.split(": ", 1)[1] for ln in lines if " ERROR " in ln or " WARN " in ln] == [
        "kept: another state server error",
        "kept: a warning",
    ], out.stderr
    assert "Connection reset" not in out.stderr and "Broken pipe" not in out.stderr
