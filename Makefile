# Ratchet: the two commands are `make run` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup test test-fast lint protos proto-baseline lint-protos run bench bench-full chaos clean

# ---- setup (shared) -------------------------------------------------------
setup: $(STAMP)

$(STAMP): pyproject.toml setup.py libs/fastcheck/_fastcheck.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# ---- contracts --------------------------------------------------------------
protos: setup
	$(PY) scripts/gen_protos.py

proto-baseline: setup
	$(VENV)/bin/buf build -o protos/baseline.binpb

lint-protos: setup
	$(VENV)/bin/buf lint
	$(VENV)/bin/buf breaking --against protos/baseline.binpb

# ---- tests --------------------------------------------------------------------
# Everything but the long fault/load tiers; well under 20 minutes on 2 cores.
test: setup
	$(PY) -m pytest tests -m "not chaos" -q -p no:cacheprovider

test-fast: setup
	$(PY) -m pytest tests/unit -q -p no:cacheprovider

# ruff over the repository and mypy over libs/ and the SDK (both also run in `make test`).
lint: setup
	$(PY) -m ruff check .
	$(PY) scripts/typecheck.py

# ---- run (owned by the CLI/platform work) ----------------------------------
# BEGIN run
# `make run`: scripts/run_local.sh starts the local platform, deploys
# examples/hello, runs a few tasks over the SDK, REST (curl) and the CLI, then
# serves until Ctrl-C, which stops everything at any moment (`ratchet dev down`).
STATE_DIR ?= .ratchet

run: setup
	@bash scripts/run_local.sh $(VENV) $(STATE_DIR)
# END run

# ---- long tiers ---------------------------------------------------------------
# `make bench`: a few minutes; the issue-2 cells plus one quick pass of every peer
# whose extra is installed (the others are skipped with a message).
bench: setup
	@test -x $(VENV)/bin/py-spy || $(PY) -m pip install -q 'py-spy>=0.4'
	$(PY) -m loadtest.bench --quick

# `make bench-full`: the whole issue-5 matrix, every peer installed first (about an hour
# on 2 cores); publishes docs/benchmarks/latest.{md,jsonl} and the charts.
bench-full: setup
	$(PY) -m pip install -q -e '.[dev,bench]'
	@command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null 2>&1; } || echo "bench-full: redis-server is not installed (Debian package redis-server): Celery will be skipped"
	@if command -v npm >/dev/null; then npm ci --prefix loadtest/peers/graphile --no-audit --no-fund --loglevel=error; else echo "bench-full: npm is not installed: graphile-worker will be skipped"; fi
	$(PY) -m loadtest.bench --publish

chaos: setup
	@command -v faketime >/dev/null || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq faketime) >/dev/null 2>&1; } || echo "chaos: libfaketime is not installed and could not be (Debian package faketime): the clock-skew scenarios will be skipped"
	@dir=build/chaos/$$(date +%Y%m%d-%H%M%S); \
	GRPC_ENABLE_FORK_SUPPORT=0 RATCHET_FAULT_DIR=$$dir $(PY) -m pytest tests/fault tests/e2e -m chaos -q -p no:cacheprovider; status=$$?; \
	echo "chaos report: $$dir/report.md (one folder per run, with verdict.json and the rerun command)"; exit $$status

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
