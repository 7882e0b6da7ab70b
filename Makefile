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

run: $(VENV)/.run-stamp  ## start the service on 127.0.0.1:8080, data under ./data
	$(PY) -m app

test: $(VENV)/.test-stamp chromium fuse3  ## the whole suite: unit, engine, end to end over real HTTP
	$(PY) -m pytest

# The console tests drive Debian's Chromium; installed here when missing and we are root.
.PHONY: chromium ui
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Chromium for the console tests (apt-get install chromium)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "the console tests need Chromium: run 'sudo apt-get install chromium', then make test"; \
	    exit 1; \
	  fi; }

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

# The power-loss tests mount a FUSE file system (tools/powercut): Debian's fuse3 gives
# fusermount3 and libfuse3; installed here when missing and we are root.
.PHONY: fuse3
fuse3:
	@command -v fusermount3 >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing FUSE 3 for the power-loss tests (apt-get install fuse3)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null; \
	  else \
	    echo "the power-loss tests need FUSE 3: run 'sudo apt-get install fuse3', then make again"; \
	    exit 1; \
	  fi; }

CUTS ?= 200
.PHONY: powerloss
powerloss: $(VENV)/.test-stamp fuse3  ## cut the power under the real server CUTS times (SEED=n replays); nothing acknowledged may be lost
	$(PY) -m tests.reliability.powerloss --cuts $(CUTS) $(if $(SEED),--seed $(SEED))

.PHONY: lock compose-smoke
lock: $(VENV)/.test-stamp  ## re-pin requirements*.lock from pyproject.toml (UPGRADE=1: newest allowed)
	$(PY) -m tools.lock $(if $(UPGRADE),--upgrade)

compose-smoke: $(VENV)/.test-stamp  ## build and run the compose stack for real, then tear it down (needs Docker; PIPELINE=1 also runs the Spark jobs)
	$(PY) -m tools.compose_smoke $(if $(PIPELINE),--pipeline)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
