# tickwork: `make help` lists the targets. `make test` runs exactly what CI runs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

.PHONY: help install run test lint unit unit-fast alerts docs schema crds bench bench-smoke profile soak e2e clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[server,embedded,operator,kubernetes,dev]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install tickwork (editable) with the dev tools

run: $(STAMP) ## run tickwork dev on an embedded PostgreSQL with the examples and a demo worker
	$(BIN)/tickwork dev --manifests examples/jobs --demo-worker

lint: $(STAMP) ## ruff, mypy --strict and the import-linter layers
	$(BIN)/ruff check src tests soak e2e bench
	$(BIN)/ruff format --check src tests soak e2e bench
	$(BIN)/mypy --strict src bench
	$(BIN)/lint-imports

# Two workers, a test file each at a time: most tests wait on PostgreSQL or a socket, and
# module fixtures (the wheel, seeded shards) are built once per file.
unit: $(STAMP) ## the whole test suite (no lint)
	$(BIN)/pytest -n 2 --dist loadfile

# One process: the tier takes less time than starting workers would.
unit-fast: $(STAMP) ## the unit tier only (tests/unit: no database, no sockets), in seconds
	$(BIN)/pytest tests/unit

# bench-smoke: benchmarks stay out of the timed suite; CI still sees every case run. It
# mostly waits (timeouts, processes starting), so the lint runs beside it, each one's
# output kept together; the suite then has both cores.
test: $(STAMP) ## lint, the whole suite and the benchmarks' smoke run: what CI runs
	$(MAKE) --no-print-directory -j2 --output-sync=target lint bench-smoke
	$(MAKE) --no-print-directory unit

# The rules rendered with the default values, where the unit tests' rule_files point.
alerts: $(STAMP) ## promtool's unit tests of every alert of the chart (needs Debian's prometheus package)
	cd tests && ../$(BIN)/python -m monitoring.rules
	promtool test rules charts/tickwork/tests/alerts/*.yaml

crds: $(STAMP) ## regenerate crds/scheduledjob.yaml (and the Helm chart's copy) from the JobSpec model
	$(BIN)/python -m tickwork.operator.crd crds/scheduledjob.yaml charts/tickwork/files/crds/scheduledjob.yaml

docs: $(STAMP) ## rewrite the settings tables of the docs from the settings models
	$(BIN)/python tests/settings_tables.py

schema: $(STAMP) ## rewrite src/tickwork/store/schema.sql from a freshly migrated shard
	$(BIN)/python tests/canonical_schema.py

bench: $(STAMP) ## throughput benchmarks (prints a table)
	$(BIN)/python -m bench

bench-smoke: $(STAMP) ## every benchmark case once at the smallest size: they still run (figures mean nothing)
	$(BIN)/python -m bench --smoke

profile: $(STAMP) ## on what the dispatcher, workers and store client spend their CPU (py-spy)
	$(BIN)/python -m bench.profile

soak: $(STAMP) ## minutes of random faults under load (kill -9, SIGSTOP, crashes, partitions); checks nothing is lost
	$(BIN)/python -m soak $(SOAK_ARGS)

e2e: $(STAMP) ## end-to-end tests on a kind cluster (needs docker, kind, kubectl, helm; else exit 2)
	PYTHON=$(abspath $(BIN))/python e2e/run.sh

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
