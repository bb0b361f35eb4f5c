#!/usr/bin/env bash
# A Docker engine for the image and compose tests, on machines without one running.
#
#   deploy/docker/engine.sh install   apt-get install docker.io debootstrap when missing (root only)
#   deploy/docker/engine.sh start     exit 0 when it started dockerd (the binary is installed, no engine answered and
#                                     we are root), 4 when an engine already answered (left alone: do not stop it),
#                                     3 with the reason when none can be had
#   deploy/docker/engine.sh stop      stop the dockerd THIS script started (by its PID file), nothing else
#
# The engine started here has no bridge and touches no iptables: containers run with host networking only
# (--network host), so their traffic stays on this machine's loopback.
#
# Nothing here waits without a bound: apt-get gets SLIDINGWINDOW_APT_TIMEOUT seconds (600) per step, every
# `docker info` 10 s, dockerd 60 s to answer and 30 s to stop on SIGTERM (then SIGKILL).
set -euo pipefail

STATE_DIR=${SLIDINGWINDOW_DOCKERD_STATE:-/tmp/slidingwindow-dockerd}
PID_FILE=$STATE_DIR/dockerd.pid
LOG_FILE=$STATE_DIR/dockerd.log

APT_TIMEOUT=${SLIDINGWINDOW_APT_TIMEOUT:-600}

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

case "${1:-}" in
install)
    if command -v dockerd >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1; then exit 0; fi
    if [ "$(id -u)" != 0 ]; then
        echo "engine.sh: docker.io/debootstrap missing and not root: install them with apt-get install docker.io debootstrap" >&2
        exit 3
    fi
    export DEBIAN_FRONTEND=noninteractive
    timeout --foreground "$APT_TIMEOUT" apt-get update -qq
    timeout --foreground "$APT_TIMEOUT" apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null
    ;;
start)
    if ! command -v docker >/dev/null 2>&1; then
        echo "engine.sh: no docker CLI installed (make docker-install as root installs docker.io)" >&2; exit 3
    fi
    if engine_answers; then echo "engine.sh: a Docker engine already answers (used, and left running)"; exit 4; fi
    if ! command -v dockerd >/dev/null 2>&1; then
        echo "engine.sh: no Docker engine answers and dockerd is not installed (apt-get install docker.io)" >&2; exit 3
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "engine.sh: no Docker engine answers and starting dockerd needs root" >&2; exit 3
    fi
    mkdir -p "$STATE_DIR"
    # setsid: the engine outlives this script (make stops it with `stop`); host networking only
    setsid dockerd --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
        --pidfile "$STATE_DIR/dockerd.self.pid" >"$LOG_FILE" 2>&1 < /dev/null &
    echo $! >"$PID_FILE"
    trap '"$0" stop; exit 130' INT TERM HUP  # interrupted while it comes up: do not leave it running
    deadline=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if engine_answers; then
            trap - INT TERM HUP
            echo "engine.sh: dockerd started (pid $(cat "$PID_FILE"), log $LOG_FILE)"
            exit 0
        fi
        if ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then break; fi
        sleep 0.5
    done
    echo "engine.sh: dockerd did not come up; last lines of $LOG_FILE:" >&2; tail -5 "$LOG_FILE" >&2
    "$0" stop || true
    exit 3
    ;;
stop)
    [ -f "$PID_FILE" ] || exit 0
    pid=$(cat "$PID_FILE")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$pid" 2>/dev/null && { echo "engine.sh: dockerd $pid ignored SIGTERM; killing" >&2; kill -KILL "$pid"; }
        echo "engine.sh: dockerd $pid stopped"
    fi
    rm -f "$PID_FILE"
    ;;
*)
    echo "usage: $0 install|start|stop" >&2; exit 2
    ;;
esac
