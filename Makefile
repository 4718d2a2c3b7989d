# cloudloop: the two commands (see README) and their building blocks.
#   make dev    - set up, then run the whole system on the embedded local stack (Ctrl-C stops it)
#   make test   - set up, then lint, type-check and run the whole test suite against the stack
#   make bench  - set up, then run every benchmark and print name=value figures

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: dev test bench setup tools lint typecheck unit clean lock

dev: setup
	$(BIN)/cloudloop dev

test: setup lint typecheck
	$(BIN)/pytest -p no:cacheprovider

bench: setup
	$(BIN)/python -m bench

setup: $(STAMP) tools

$(STAMP): pyproject.toml requirements.lock
	@command -v go >/dev/null || { echo "Go (1.24+) is required to build the local stack"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
	$(BIN)/uv pip install --python $(BIN)/python -q -r requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python -q --no-deps -e .
	touch $(STAMP)

# Re-resolve the dependencies of pyproject.toml (with the dev extra) into requirements.lock.
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -q -o requirements.lock

# Builds kube-apiserver, etcd, kwok, ... from Go modules once per version (cached in ~/.cache/cloudloop).
tools: $(STAMP)
	$(BIN)/cloudloop stack build

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider tests/unit

clean:
	rm -rf $(VENV) .cloudloop .mypy_cache .ruff_cache
