# sessionq developer entry points. Everything runs from a local virtual environment (.venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG15_URL ?= postgresql://postgres@127.0.0.1:5432/postgres
PYTEST_ARGS ?= --durations=15

.PHONY: up test test-embedded test-pg15 test-pooler test-failover install install-test lint proto bench soak failover clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

## make up: install and run the embedded default (PostgreSQL, migrations, API, workers, process runtime)
up: install
	$(VENV)/bin/sessionq up

## make test: the whole suite on the embedded PostgreSQL 18 and, if it answers, on PostgreSQL 15 at
## 127.0.0.1:5432, one after the other, each in the foreground with a line a run at the end - then the API
## tests through PgBouncer when it is installed and the failover harness (scripts/test_all.sh)
test: install-test
	MAKE="$(MAKE)" PY=$(PY) PG15_URL=$(PG15_URL) PYTEST_ARGS="$(PYTEST_ARGS)" scripts/test_all.sh

test-embedded: install-test
	PY=$(PY) scripts/pytest_parallel.sh $(PYTEST_ARGS)

test-pg15: install-test
	SESSIONQ_TEST_DATABASE_URL=$(PG15_URL) PY=$(PY) scripts/pytest_parallel.sh $(PYTEST_ARGS)

## make test-pooler: the API tests (marked pooler) with their transactions through a real PgBouncer in transaction mode
test-pooler: install-test
	SESSIONQ_TEST_POOLER=pgbouncer $(PY) -m pytest -m pooler $(PYTEST_ARGS)

## make test-failover: the failover harness's short run (HA-3) on a pg_auto_failover formation of its own
test-failover: install-test
	$(PY) -m pytest -m failover $(PYTEST_ARGS)

## make lint: ruff, mypy, the architecture's import contracts (ARCHITECTURE.md) and the procrastinate bridge rule
lint: install-test
	$(VENV)/bin/ruff check src jobs cli tests scripts
	$(VENV)/bin/mypy src/sessionq && $(VENV)/bin/mypy jobs && $(VENV)/bin/mypy cli
	$(PY) scripts/lint_imports.py
	$(PY) scripts/check_bridge.py

proto: install-test
	$(PY) scripts/gen_proto.py

## make bench: benchmarks, reported as ratios against baselines measured in the same run
bench: install-test
	$(PY) -m tests.bench

## make soak DURATION=30m: the fault and soak harness (not part of make test)
soak: install-test
	$(PY) -m tests.soak --duration $(or $(DURATION),60s)

## make failover DURATION=120s: the soak on a pg_auto_failover formation (monitor, primary, synchronous
## standby), failing over twice (Debian packages pg-auto-failover-cli, postgresql-15-auto-failover)
failover: install-test
	$(PY) -m tests.soak --failover --duration $(or $(DURATION),120s)

clean:
	rm -rf $(VENV) .sessionq build *.egg-info
