#!/usr/bin/env bash
# make test-image: the image and compose tests (pytest -m docker) on a Docker engine, bounded in time, and the
# engine this script started is stopped however it ends.
#
#   PY=.venv/bin/python IMAGE=slidingwindow:latest [REQUIRE_DOCKER=1] deploy/docker/test-image.sh
#
# 1. deploy/docker/engine.sh install (docker.io + debootstrap when missing, as root) and start (dockerd when none
#    answers; host networking only). No engine: "test-image: SKIPPED" and why (REQUIRE_DOCKER=1: a failure).
# 2. deploy/docker/build-image.sh builds IMAGE (its docker build is bounded by SLIDINGWINDOW_BUILD_TIMEOUT).
# 3. pytest -m docker, each test bounded by pytest-timeout (SLIDINGWINDOW_DOCKER_TEST_TIMEOUT, 1800 s; when the
#    plugin is installed: the dev extra has it) and the whole run by SLIDINGWINDOW_DOCKER_TESTS_TIMEOUT (3600 s):
#    then pytest gets SIGINT, so its fixtures tear down (compose down, containers removed), and SIGKILL 300 s later.
#
# Stopping: dockerd started in step 1 is stopped on exit, on failure and on SIGINT (Ctrl-C), SIGTERM or SIGHUP
# (make passes SIGTERM on to this script); a running pytest is sent SIGINT first and waited for. An engine that
# already answered is left alone.
set -uo pipefail
cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python}
IMAGE=${IMAGE:-slidingwindow:latest}
TESTS_TIMEOUT=${SLIDINGWINDOW_DOCKER_TESTS_TIMEOUT:-3600}
TEST_TIMEOUT=${SLIDINGWINDOW_DOCKER_TEST_TIMEOUT:-1800}

started=none  # engine.sh start's exit status: 0 = dockerd started here (stopped on exit), 4 = an engine answered
child=        # the running pytest (under timeout)
interrupted=  # the exit status a signal asks for

stop_engine() { if [ "$started" = 0 ]; then bash deploy/docker/engine.sh stop; fi; }
on_signal() {
    interrupted=$1
    if [ -n "$child" ]; then kill -INT "$child" 2>/dev/null; fi  # timeout passes it on to pytest
}
trap stop_engine EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'on_signal 129' HUP

bash deploy/docker/engine.sh install || true
if [ -n "$interrupted" ]; then exit "$interrupted"; fi
bash deploy/docker/engine.sh start
started=$?
if [ -n "$interrupted" ]; then exit "$interrupted"; fi
if [ "$started" != 0 ] && [ "$started" != 4 ]; then
    echo "test-image: SKIPPED - no Docker engine can be started here (see above); the image and compose tests did not run"
    [ -z "${REQUIRE_DOCKER:-}" ]
    exit
fi

IMAGE=$IMAGE bash deploy/docker/build-image.sh
rc=$?
if [ -n "$interrupted" ]; then exit "$interrupted"; fi
if [ "$rc" != 0 ]; then exit "$rc"; fi

pytest_args=(-q -m docker)
if "$PY" -c "import pytest_timeout" 2>/dev/null; then
    pytest_args+=(--timeout "$TEST_TIMEOUT")
else
    echo "test-image: pytest-timeout is not installed: no per-test bound (the run is still bounded by ${TESTS_TIMEOUT}s)" >&2
fi
# in the background, so that a signal to this script is handled at once (bash runs traps between commands only)
SLIDINGWINDOW_IMAGE=$IMAGE timeout --signal=INT --kill-after=300 "$TESTS_TIMEOUT" "$PY" -m pytest "${pytest_args[@]}" &
child=$!
while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break  # wait returned early for a signal: wait for pytest's teardown
done
if [ "$rc" = 124 ]; then echo "test-image: the docker tests did not finish within ${TESTS_TIMEOUT}s; stopped" >&2; fi
exit "${interrupted:-$rc}"
