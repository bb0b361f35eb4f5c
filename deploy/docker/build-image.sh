#!/usr/bin/env bash
# make image: builds deploy/Dockerfile as $IMAGE (slidingwindow:latest).
#
# Base: $PYTHON_IMAGE when set; else python:3.11-slim-bookworm when the engine has it or can pull it; else a base
# built here from Debian's packages (deploy/docker/build-base.sh, cached as an image: built once per engine).
# Builds run with host networking (the build's pip/Maven/apt traffic leaves through the host, as the host's would).
# The build gets SLIDINGWINDOW_BUILD_TIMEOUT seconds (1800; a cold build here took about 2 min) and fails after.
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${IMAGE:-slidingwindow:latest}
DEFAULT_BASE=python:3.11-slim-bookworm
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}   # the classic builder: no buildx plugin needed

base=${PYTHON_IMAGE:-}
if [ -z "$base" ]; then
    if timeout 30 docker image inspect "$DEFAULT_BASE" >/dev/null 2>&1 || timeout 30 docker pull -q "$DEFAULT_BASE" >/dev/null 2>&1; then
        base=$DEFAULT_BASE
    else
        echo "build-image.sh: $DEFAULT_BASE cannot be pulled (no registry answers): using a base built from Debian's packages" >&2
        base=$(deploy/docker/build-base.sh)
    fi
fi
echo "build-image.sh: building $IMAGE on $base" >&2
started=$(date +%s)
timeout --foreground "${SLIDINGWINDOW_BUILD_TIMEOUT:-1800}" docker build --network host --build-arg "PYTHON_IMAGE=$base" -f deploy/Dockerfile -t "$IMAGE" . >&2
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
echo "build-image.sh: $IMAGE built in $(( $(date +%s) - started ))s, $(( size / 1000000 )) MB" >&2
