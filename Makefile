# Two commands for a newcomer: `make run` and `make test`. Everything else is optional.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: run test lint fmt bench clients clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Re-install whenever pyproject.toml changes (the stamp is older than it).
$(VENV)/.run-stamp: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.test-stamp: pyproject.toml | $(VENV)/bin/python
	@# PySpark (the pipeline tests) needs a Java 17 runtime; installed only when missing.
	@command -v java >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		apt-get update -q && apt-get install -y -q openjdk-17-jre-headless; } || \
		echo "warning: no java: install a Java 17 runtime for the pipeline tests (PySpark)"
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.run-stamp

run: $(VENV)/.run-stamp  ## start the service on 127.0.0.1:8080, data under ./data, one worker per core
	$(PY) -m app

# Two test processes, a file each at a time: most tests wait (on servers, fsyncs, leases, a
# JVM), so two overlap on a 2-core machine; a file stays in one process (its fixtures).
test: $(VENV)/.test-stamp chromium fuse3 redis  ## the whole suite: unit, engine, end to end over real HTTP
	$(PY) -m pytest -n 2 --dist loadfile

# Debian packages the suite drives, installed here when missing and we are root:
# $(call need,COMMAND,PACKAGE,WHAT IT IS FOR).
define need
@command -v $(1) >/dev/null 2>&1 || { \
  if [ "$$(id -u)" = 0 ]; then \
    echo "installing $(2) for $(3) (apt-get install $(2))"; \
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; \
  else \
    echo "$(3) need $(2): run 'sudo apt-get install $(2)', then make again"; \
    exit 1; \
  fi; }
endef

.PHONY: chromium fuse3 redis ui
chromium:  # the console tests drive headless Chromium
	$(call need,chromium,chromium,the console tests)
fuse3:  # the power-loss tests mount a FUSE file system (tools/powercut)
	$(call need,fusermount3,fuse3,the power-loss tests)
redis:  # the bench's smoke test runs the Redis delay-queue alternative beside the service
	$(call need,redis-server,redis-server,the Redis bench figure)

ui:  ## rebuild the console's JavaScript (app/ui/static/js) from its TypeScript sources
	cd app/ui && npm ci --no-audit --no-fund && npx tsc -p .

lint: $(VENV)/.test-stamp  ## ruff + strict mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: $(VENV)/.test-stamp
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(VENV)/.test-stamp  ## the quick benchmark profile (see bench/README.md)
	$(PY) -m bench

clients: $(VENV)/.test-stamp  ## regenerate clients/ (Python, TypeScript) from the served OpenAPI
	$(PY) -m clients.generate

CYCLES ?= 50
.PHONY: crash
crash: $(VENV)/.test-stamp  ## SIGKILL the real server under load CYCLES times; nothing acknowledged may be lost
	$(PY) -m tools.crash_loop --cycles $(CYCLES)

.PHONY: crash-cluster
crash-cluster: $(VENV)/.test-stamp  ## SIGKILL a partition's owner in a local 3-NATS, 3-node cluster CYCLES times (tools/cluster_crash.py)
	$(PY) -m tools.crash_loop --cluster --cycles $(CYCLES)

CUTS ?= 200
.PHONY: powerloss
powerloss: $(VENV)/.test-stamp fuse3  ## cut the power under the real server CUTS times (SEED=n replays); nothing acknowledged may be lost
	$(PY) -m tools.powerloss --cuts $(CUTS) $(if $(SEED),--seed $(SEED))

.PHONY: lock compose-smoke
lock: $(VENV)/.test-stamp  ## re-pin requirements*.lock from pyproject.toml (UPGRADE=1: newest allowed)
	$(PY) -m tools.lock $(if $(UPGRADE),--upgrade)

compose-smoke: $(VENV)/.test-stamp  ## build and run the compose stack for real, then tear it down (needs Docker; PIPELINE=1 also runs the Spark jobs, CLUSTER=1 the cluster profile)
	$(PY) -m tools.compose_smoke $(if $(PIPELINE),--pipeline) $(if $(CLUSTER),--cluster)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
