# Two commands matter: `make demo` and `make test`. Everything else is what they stand on.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: venv test test-unit demo clean bench broker-start broker-stop jars prometheus lint wheel
.PHONY: docker-install image test-image

# Installs the project with every extra into .venv. pip caches the pyspark wheel it builds from the
# sdist (~/.cache/pip), so only the first install on a machine pays for it.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel >/dev/null
	$(PIP) install -e '.[service,dev]'
	touch $@

venv: $(VENV)/.installed

test: venv prometheus lint
	$(PY) -m pytest -q -m "not docker"
	$(MAKE) test-image

test-unit: venv
	$(PY) -m pytest -q tests/windowstore

# Static checks as configured in pyproject.toml (ruff lint + format check, mypy); `make test` runs them first.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The installable product: dist/slidingwindow-*.whl (`pip install 'dist/slidingwindow-<v>-py3-none-any.whl[service]'`
# gives the `slidingwindow` command; tests/test_wheel.py installs it into a fresh venv and runs it).
wheel: venv
	$(PIP) wheel --no-deps --no-build-isolation -w dist .

bench: venv
	$(PY) bench/windowstore_bench.py

# Prometheus + promtool from the distribution's packages when missing (the deploy tests run promtool and a
# throwaway Prometheus on a loopback port; no daemon is left running by the install).
prometheus:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || bash deploy/prometheus/install-promtool.sh

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# JVM artifacts (Kafka broker classpath, Spark's Kafka connector) resolved with Maven into
# ~/.cache/slidingwindow/jars (or $SLIDINGWINDOW_JAR_CACHE); later runs do not call Maven.
jars: venv
	$(PY) -m devtools.broker_jars kafka >/dev/null
	$(PY) -m connectors.jars spark-kafka >/dev/null

# A local single-node Kafka (KRaft) in the background: BROKER_PORT (9092), data and logs in var/kafka.
BROKER_PORT ?= 9092
broker-start: venv
	$(PY) -m devtools.broker_cli start --port $(BROKER_PORT)

broker-stop: venv
	$(PY) -m devtools.broker_cli stop

# The demo: local broker + payments producer + the service + a live view, until Ctrl-C (state in var/demo;
# DEMO_ARGS=--fresh starts over, DEMO_ARGS="--rate 500" produces faster).
DEMO_ARGS ?=
demo: venv jars
	$(PY) -m devtools.demo $(DEMO_ARGS)

# ---------------------------------------------------------------------------------------------------- the image
# Debian's docker.io (engine + CLI) and debootstrap (a base image from Debian's packages when no registry answers);
# root only, a no-op when both are installed.
docker-install:
	bash deploy/docker/engine.sh install

# The service image (IMAGE, slidingwindow:latest) from deploy/Dockerfile; PYTHON_IMAGE=... picks the base.
IMAGE ?= slidingwindow:latest
image:
	IMAGE=$(IMAGE) bash deploy/docker/build-image.sh

# The image and compose tests (tests marked docker): needs a Docker engine. Starts dockerd when it is installed and
# none answers (as root; host networking only) and stops what it started, also when interrupted; says so and skips
# when none can be had (REQUIRE_DOCKER=1 turns that into a failure). Every step is time-bounded (see the script).
REQUIRE_DOCKER ?=
test-image: venv
	@PY=$(PY) IMAGE=$(IMAGE) REQUIRE_DOCKER=$(REQUIRE_DOCKER) bash deploy/docker/test-image.sh
