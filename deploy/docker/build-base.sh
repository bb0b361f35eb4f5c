#!/usr/bin/env bash
# A Python 3.11 base image built from Debian's packages, for machines where no image registry answers
# (deploy/Dockerfile's default base, python:3.11-slim-bookworm, cannot be pulled there).
#
#   deploy/docker/build-base.sh [TAG]      prints the tag; does nothing when the image exists (delete it to rebuild)
#
# debootstrap's minbase of bookworm + python3 (3.11, as in the default base), python3-venv, ca-certificates; made
# the way Debian's -slim images are (man pages, docs and locales excluded from every later dpkg install too), so the
# Dockerfile is proven against a slim base. The host's extra CA certificates (its trust store's local additions,
# /usr/local/share/ca-certificates) are installed in the base, and pip reads the system bundle, so builds through a
# TLS-intercepting HTTPS proxy work. DEBIAN_MIRROR overrides debootstrap's default mirror. debootstrap gets
# SLIDINGWINDOW_DEBOOTSTRAP_TIMEOUT seconds (900), the import into the engine 300 s.
set -euo pipefail

TAG=${1:-slidingwindow-base:bookworm-python3.11}
if docker image inspect "$TAG" >/dev/null 2>&1; then echo "$TAG"; exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "build-base.sh: debootstrap needs root" >&2; exit 3; fi
command -v debootstrap >/dev/null || { echo "build-base.sh: debootstrap missing (apt-get install debootstrap)" >&2; exit 3; }

root=$(mktemp -d /tmp/slidingwindow-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
started=$(date +%s)
# shellcheck disable=SC2086
timeout "${SLIDINGWINDOW_DEBOOTSTRAP_TIMEOUT:-900}" debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$root" ${DEBIAN_MIRROR:-} >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"

# slim: what Debian's official -slim images exclude, for this install and every later one in the image
mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CFG
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/var/cache/apt/*.bin \
    "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
echo 'APT::Install-Recommends "false";' >"$root/etc/apt/apt.conf.d/99no-recommends"

# the host's extra CA certificates, and pip told to use the system bundle (not its own certifi copy)
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    timeout 120 chroot "$root" update-ca-certificates >/dev/null 2>&1
fi
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"

tar -C "$root" -c . | timeout --foreground 300 docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    - "$TAG" >/dev/null
echo "build-base.sh: built $TAG in $(( $(date +%s) - started ))s" >&2
echo "$TAG"
