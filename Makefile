# The two commands of the README: `make run` and `make test`.
# Each creates the virtual environment (.venv) and installs what it needs the first time.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit quick postgres bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The service on SQLite (out/berth/berth.db) with the demo topology; prints its URL and a token.
run: $(STAMP)
	$(BIN)/berth serve --load-demo --simulate-agents --print-admin-token

test: $(STAMP) lint typecheck postgres unit

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

# The tests run in parallel, one pytest-xdist worker per CPU (TEST_WORKERS=0: in this process).
# The slow end-to-end ones are collected first (tests/conftest.py) and handed out one at a time
# (--maxschedchunk 1): the longest start at once on every worker, and no worker is left alone
# with one at the end (xdist's default chunks gave them all to the first worker).
TEST_WORKERS ?= auto
PYTEST := $(BIN)/pytest -q -n $(TEST_WORKERS) --maxschedchunk 1

unit: $(STAMP) postgres
	$(PYTEST)

# The quick loop while developing: every test but the slow end-to-end ones (`make test` runs all).
quick: $(STAMP) postgres
	$(PYTEST) -m "not slow"

# The store and service tests need PostgreSQL: use a running server, else start or install one.
postgres:
	scripts/ensure-postgres.sh

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_core.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .mypy_cache .pytest_cache .ruff_cache
