# The two commands of the README: `make run` and `make test`.
# Each creates the virtual environment (.venv) and installs what it needs the first time.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit postgres bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The service on SQLite (out/berth/berth.db) with the demo topology; prints its URL and a token.
run: $(STAMP)
	$(BIN)/berth serve --data-dir out/berth --load-demo --simulate-agents --print-admin-token

test: $(STAMP) lint typecheck postgres unit

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) postgres
	$(BIN)/pytest -q

# The store and service tests need PostgreSQL: use a running server, else start or install one.
postgres:
	scripts/ensure-postgres.sh

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_core.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .mypy_cache .pytest_cache .ruff_cache
