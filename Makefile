# Freshet: `make demo` and `make test` work on a fresh clone (Python 3.11+, Java 17+, root or sudo).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-deps demo bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,spark,cdc,dashboard]'
	touch $(STAMP)

install: $(STAMP)

test-deps:
	bash scripts/install-test-deps.sh

test: install test-deps
	$(BIN)/pytest -q tests

demo: install
	$(BIN)/freshet demo access-logs --seconds 60

bench: install
	$(BIN)/python benchmarks/broker_throughput.py

clean:
	rm -rf $(VENV) demo-data .pytest_cache
