# Ratchet: the two commands are `make run` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup test test-fast protos proto-baseline lint-protos run bench chaos clean

# ---- setup (shared) -------------------------------------------------------
setup: $(STAMP)

$(STAMP): pyproject.toml
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

# ---- run (owned by the CLI/platform work) ----------------------------------
# BEGIN run
run: setup
	@echo "make run: not wired yet" && false
# END run

# ---- long tiers ---------------------------------------------------------------
bench: setup
	@test -x $(VENV)/bin/py-spy || $(PY) -m pip install -q 'py-spy>=0.4'
	$(PY) -m loadtest.bench --quick

chaos: setup
	$(PY) -m pytest tests/fault -m chaos -q -p no:cacheprovider

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
