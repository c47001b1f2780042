# The two commands of the README: `make run` and `make test`.
# `make run` installs what running needs; the targets that check the code add the dev extra.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: run test lint typecheck unit quick postgres openstack bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

$(DEV_STAMP): $(RUN_STAMP)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(DEV_STAMP)

# The service on SQLite (out/berth/berth.db, the data dir every `berth` command defaults to) with
# the demo topology; prints its URL and the admin token kept in out/berth/admin-token.
run: $(RUN_STAMP)
	$(BIN)/berth serve --load-demo --simulate-agents --print-admin-token

test: $(DEV_STAMP) lint typecheck postgres openstack unit

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

# The tests run in parallel, one pytest-xdist worker per CPU (TEST_WORKERS=0: in this process).
# The slow end-to-end ones are collected first (tests/conftest.py) and handed out one at a time
# (--maxschedchunk 1): the longest start at once on every worker, and no worker is left alone
# with one at the end (xdist's default chunks gave them all to the first worker).
TEST_WORKERS ?= auto
PYTEST := $(BIN)/pytest -q -n $(TEST_WORKERS) --maxschedchunk 1

unit: $(DEV_STAMP) postgres
	$(PYTEST)

# The quick loop while developing: every test but the slow end-to-end ones (`make test` runs all).
quick: $(DEV_STAMP) postgres
	$(PYTEST) -m "not slow"

# The store and service tests need PostgreSQL: use a running server, else start or install one.
postgres:
	scripts/ensure-postgres.sh

# Two real OpenStack clusters for tests/openstack/ (docs/openstack.md): installs the services
# into their own venv once (~1 min), starts what is not running (cold ~3.5 min, warm seconds).
openstack: postgres
	scripts/ensure-openstack.sh up

bench: $(RUN_STAMP)
	$(BIN)/python benchmarks/bench_core.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .mypy_cache .pytest_cache .ruff_cache
