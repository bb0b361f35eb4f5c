"""apache/kafka's configuration convention: every KAFKA_<NAME> variable is the server property <name> (``_`` -> ``.``,
``__`` -> ``_``, ``___`` -> ``-``); CLUSTER_ID formats the storage once. Then the broker in the foreground."""

import os
import re
import subprocess
import sys

NOT_PROPERTIES = {"KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_VERSION"}


def prop(var: str) -> str:
    name = var[len("KAFKA_") :].lower()
    return re.sub(r"_+", lambda m: {1: ".", 2: "_", 3: "-"}.get(len(m.group()), m.group()), name)


props = {prop(k): v for k, v in os.environ.items() if k.startswith("KAFKA_") and k not in NOT_PROPERTIES}
path = "/opt/kafka/config/server.properties"
with open(path, "w") as f:
    f.writelines(f"{k}={v}\n" for k, v in sorted(props.items()))
java = [
    "java",
    *os.environ.get("KAFKA_HEAP_OPTS", "-Xmx512m").split(),
    "-Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties",
    "-cp",
    "/opt/kafka/libs/*",
]
log_dirs = props.get("log.dirs", "/tmp/kraft-combined-logs").split(",")[0]
if not os.path.exists(os.path.join(log_dirs, "meta.properties")):
    cluster_id = os.environ.get("CLUSTER_ID")
    if not cluster_id:
        sys.exit("CLUSTER_ID is required to format the storage")
    subprocess.run(
        [
            *java,
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            cluster_id,
            "--config",
            path,
            "--ignore-formatted",
        ],
        check=True,
    )
os.execvp("java", [*java, "kafka.Kafka", path])
