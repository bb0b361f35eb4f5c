"""apache/kafka's configuration convention: every KAFKA_<NAME> variable is the server property <name> (``_`` -> ``.``,
``__`` -> ``_``, ``___`` -> ``-``); CLUSTER_ID formats the storage once. Then the broker in the foreground."""

import os
import re
import socket
import subprocess
import sys

NOT_PROPERTIES = {"KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_VERSION"}


def prop(var: str) -> str:
    name = var[len("KAFKA_"):].lower()
    return re.sub(r"_+", lambda m: {1: ".", 2: "_", 3: "-"}.get(len(m.group()), m.group()), name)


props = {prop(k): v for k, v in os.environ.items() if k.startswith("KAFKA_") and k not in NOT_PROPERTIES}
path = "/opt/kafka/config/server.properties"
with open(path, "w") as f:
    f.writelines(f"{k}={v}\n" for k, v in sorted(props.items()))
# On the host network the container's hostname is the host's, which the container's /etc/hosts (Docker's own, not
# the host's) does not resolve; a listener without a host (PLAINTEXT://:9092) makes Kafka resolve it and stop with
# UnknownHostException. The JVM reads /etc/hosts plus that name from a file of its own (loopback only).
hosts = "/opt/kafka/config/hosts"
try:
    socket.getaddrinfo(socket.gethostname(), None)
    host_opts: list[str] = []
except socket.gaierror:
    with open("/etc/hosts") as src, open(hosts, "w") as dst:
        dst.write(src.read() + f"\n127.0.0.1 {socket.gethostname()}\n")
    host_opts = [f"-Djdk.net.hosts.file={hosts}"]
java = ["java", *os.environ.get("KAFKA_HEAP_OPTS", "-Xmx512m").split(), *host_opts,
        "-Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties", "-cp", "/opt/kafka/libs/*"]
log_dirs = props.get("log.dirs", "/tmp/kraft-combined-logs").split(",")[0]
if not os.path.exists(os.path.join(log_dirs, "meta.properties")):
    cluster_id = os.environ.get("CLUSTER_ID")
    if not cluster_id:
        sys.exit("CLUSTER_ID is required to format the storage")
    subprocess.run([*java, "kafka.tools.StorageTool", "format", "--cluster-id", cluster_id, "--config", path,
                    "--ignore-formatted"], check=True)
os.execvp("java", [*java, "kafka.Kafka", path])
