#!/usr/bin/env bash
# Images for the compose run (tests/deploy/test_compose_run.py) that no registry serves here, built on the Debian
# base of deploy/docker/build-base.sh from the same Maven jars and Debian packages the tests use:
#   slidingwindow-test/kafka, slidingwindow-test/schema-registry, slidingwindow-test/prometheus  (tag: local)
# An image is kept while its build context is unchanged (a label holds the context's hash): rebuilt only when a
# file of it (or a Kafka jar, or the base) changes. PYTHON=... is the project's interpreter (Kafka's jars).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
PYTHON=${PYTHON:-$root/.venv/bin/python}
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}
base=${PYTHON_IMAGE:-$("$root/deploy/docker/build-base.sh")}
ctx=$(mktemp -d /tmp/slidingwindow-compose-images.XXXXXX)
trap 'rm -rf "$ctx"' EXIT

build() {  # name, context
    local tag=slidingwindow-test/$1:local sum
    sum=$( (cd "$2" && find . -type f -print0 | sort -z | xargs -0 sha256sum; docker image inspect -f '{{.Id}}' "$base") \
        | sha256sum | cut -c1-16)
    if [ "$(docker image inspect -f '{{index .Config.Labels "slidingwindow.context"}}' "$tag" 2>/dev/null)" = "$sum" ]; then
        return
    fi
    local t0; t0=$(date +%s)
    timeout --foreground "${SLIDINGWINDOW_BUILD_TIMEOUT:-1800}" docker build -q --network host --build-arg "BASE_IMAGE=$base" \
        --label "slidingwindow.context=$sum" -t "$tag" "$2" >/dev/null
    echo "build-images.sh: $tag built in $(( $(date +%s) - t0 ))s" >&2
}

cp -r "$here/kafka" "$ctx/kafka"
mkdir -p "$ctx/kafka/libs"
(cd "$root" && "$PYTHON" - "$ctx/kafka/libs" <<'PY'
import shutil, sys
try:  # the broker classpath moved to devtools in the installable-product work; either place
    from devtools.broker_jars import kafka_broker_classpath
except ImportError:
    from connectors.jars import kafka_broker_classpath
for jar in kafka_broker_classpath():
    shutil.copy(jar, sys.argv[1])
PY
)
build kafka "$ctx/kafka"
cp -r "$here/schema-registry" "$ctx/schema-registry"
cp "$root/tests/service/schema_registry_double.py" "$ctx/schema-registry/"
build schema-registry "$ctx/schema-registry"
build prometheus "$here/prometheus"
