# The two commands of the README: `make run` and `make test`.
# `make run` installs what running needs; the targets that check the code add the dev extra.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: run test lint typecheck unit quick postgres nova openstack batch chromium bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

$(DEV_STAMP): $(RUN_STAMP)
	$(BIN)/pip install --quiet -e '.[dev,ray]'
	touch $(DEV_STAMP)

# The dashboard's browser assets (Chart.js from npm, pinned by package-lock.json), which
# `berth serve` serves from node_modules (docs/dashboard.md).
NPM_STAMP := node_modules/.installed
$(NPM_STAMP): package.json package-lock.json
	scripts/ensure-dashboard-assets.sh
	touch $(NPM_STAMP)

# The service on SQLite (out/berth/berth.db, the data dir every `berth` command defaults to) with
# the demo topology; prints its URL and the admin token kept in out/berth/admin-token.
run: $(RUN_STAMP) $(NPM_STAMP)
	$(BIN)/berth serve --load-demo --simulate-agents --print-admin-token

# The real clouds the slow tests need start in the background while lint, typecheck and the
# tests run; their session fixtures wait for them (the script holds a lock while it starts them).
test: $(DEV_STAMP) postgres batch nova
	@mkdir -p out
	@scripts/ensure-openstack.sh up > out/openstack-up.log 2>&1 & \
	$(MAKE) --no-print-directory lint typecheck unit; status=$$?; wait; exit $$status

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

# The tests run in parallel on pytest-xdist workers, one per CPU (TEST_WORKERS=0: in this
# process). Two more workers than CPUs was tried (docs/testing.md): about 11% faster, but the
# elastic pool tests against real Slurm and HTCondor then missed their 12 s boot deadlines.
# `--dist loadgroup` gives each group of tests that share a worker's service or the OpenStack
# lock to one worker (tests/conftest.py), largest first, then hands out the other tests one at a
# time in collection order, the slow ones first, so that no worker is left alone with a long one
# at the end.
TEST_WORKERS ?= $(shell nproc)
PYTEST := $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup

unit: $(DEV_STAMP) $(NPM_STAMP) postgres batch nova chromium
	$(PYTEST)

# The quick loop while developing: every test but the slow end-to-end ones (`make test` runs all).
quick: $(DEV_STAMP) $(NPM_STAMP) postgres
	$(PYTEST) -m "not slow"

# The store and service tests need PostgreSQL: use a running server, else start or install one.
postgres:
	scripts/ensure-postgres.sh

# The differential test (tests/nova/) runs Nova 34's own scheduler code from its own venv,
# outside the repository (BERTH_NOVA_HOME, default ~/.cache/berth-nova); made once, ~1 minute.
nova:
	scripts/ensure-nova-venv.sh >/dev/null

# Two real OpenStack clusters for tests/openstack/ (docs/openstack.md): installs the services
# into their own venv once (~1 min), starts what is not running (cold ~3.5 min, warm seconds).
openstack: postgres
	scripts/ensure-openstack.sh up

# The elastic tests' batch systems: Slurm (Debian packages) and HTCondor (a Debian 13 chroot,
# built once under ~/.cache/berth-batch), installed when missing; the tests start private
# instances of their own (tests/elastic/conftest.py). `scripts/ensure-*.sh up` starts the shared
# ones for demos.
batch:
	scripts/ensure-slurm.sh install
	scripts/ensure-htcondor.sh install

# The dashboard's browser tests (tests/dashboard/test_browser.py) drive Debian's Chromium.
chromium:
	scripts/ensure-chromium.sh

bench: $(RUN_STAMP)
	$(BIN)/python benchmarks/bench_core.py

clean:
	rm -rf $(VENV) node_modules build *.egg-info src/*.egg-info .mypy_cache .pytest_cache .ruff_cache
