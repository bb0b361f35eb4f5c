#!/usr/bin/env bash
# Installs Prometheus (and promtool) from the distribution's packages when promtool is missing (fresh Debian/Ubuntu
# machine; root or passwordless sudo). The tests run their own Prometheus on a free loopback port, so the package's
# daemon is kept from starting (policy-rc.d while installing) and stopped/disabled if it started anyway.
set -euo pipefail
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "promtool is missing and this is not root: install the 'prometheus' package" >&2; exit 1; fi
fi
POLICY=/usr/sbin/policy-rc.d
CREATED=""
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod 755 "$POLICY"
    CREATED=1
fi
trap '[ -n "$CREATED" ] && $SUDO rm -f "$POLICY"' EXIT
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# no Prometheus daemon left running by the package
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
if [ -x /etc/init.d/prometheus ]; then
    $SUDO /etc/init.d/prometheus stop >/dev/null 2>&1 || true
fi
command -v promtool >/dev/null
echo "installed $(promtool --version 2>&1 | head -1)"
